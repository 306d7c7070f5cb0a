"""Launch one exported cubin on a few shapes, standalone, for compute-sanitizer (memcheck, racecheck, ...).

Only the candidate kernel runs on the device: inputs are drawn on the host (numpy) and copied over, outputs are
poisoned with ``cudaMemset`` (0xFF bytes), and the result is copied back and compared on the host against the
float64 reference. CuPy's memory pool is switched off (``cupy.cuda.set_allocator(None)``) so every buffer is
its own ``cudaMalloc`` of the exact size: compute-sanitizer memcheck then sees a store one element past ``y``
as out of bounds instead of as a write into a pooled chunk.

Spec (JSON file, ``--spec``): ``workload`` (``Workload.spec()``: ``_target_`` and constructor options), ``cubin``
(path), ``entry``, ``param_types`` (the entry's ``.param`` types), ``launch`` (``LaunchConfig.to_json()``),
``shapes`` (list of [M, N]), ``seed`` (input seed, int). ``build_spec`` writes one from a Kernel.

Prints one JSON line per shape (shape, max_abs_err, n_bad, n_poison, ok) and exits 0 when every output is
within the workload's tolerance, 1 when one is not, 2 on a bad spec. Usage::

    compute-sanitizer --tool memcheck python3 experiments/sanitize_replay.py --spec spec.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPEC_KEYS = ("workload", "cubin", "entry", "param_types", "launch", "shapes", "seed")


def build_spec(kernel: Any, workload: Any, cubin_path: str | Path, shapes: list[tuple[int, int]],
               seed: int = 7) -> dict[str, Any]:
    """The replay spec for ``kernel`` (a ``population.kernel.Kernel``) whose cubin lies at ``cubin_path``.
    KeyError when the kernel lacks its entry."""
    from evaluators.gpu.args import param_types

    return {"workload": workload.spec(), "cubin": str(cubin_path),
            "entry": kernel.entry, "param_types": param_types(kernel), "launch": kernel.launch.to_json(),
            "shapes": [list(s) for s in shapes], "seed": int(seed)}


def load_spec(path: str | Path) -> dict[str, Any]:
    """Read and check a spec file; ValueError naming the file and the missing or malformed key."""
    spec = json.loads(Path(path).read_text())
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise ValueError(f"{path}: spec lacks {missing} (needs {list(SPEC_KEYS)})")
    if not spec["shapes"] or any(len(s) != 2 for s in spec["shapes"]):
        raise ValueError(f"{path}: 'shapes' must be a non-empty list of [M, N], got {spec['shapes']!r}")
    if not Path(spec["cubin"]).is_file():
        raise ValueError(f"{path}: cubin {spec['cubin']!r} does not exist")
    return spec


def replay(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Launch the spec's kernel once per shape; returns one result dict per shape (see module docstring)."""
    import cupy as cp
    import numpy as np

    from evaluators.gpu.args import build_args
    from evaluators.gpu.gate import compare
    from population.kernel import LaunchConfig
    from workloads.dtypes import as_bits, storage_dtype
    from workloads.registry import build_workload

    cp.cuda.set_allocator(None)  # exact-size allocations: memcheck bounds are the buffers' own
    wl = build_workload(spec["workload"])
    mod = cp.cuda.Module()
    mod.load(Path(spec["cubin"]).read_bytes())
    fn = mod.get_function(spec["entry"])
    launch = LaunchConfig.from_json(spec["launch"])
    atol, rtol = wl.tolerance
    out: list[dict[str, Any]] = []
    for i, shape in enumerate(tuple(int(v) for v in s) for s in spec["shapes"]):
        host = wl.make_inputs(shape, int(spec["seed"]) + i, "normal", np)
        dev = {k: cp.asarray(np.ascontiguousarray(as_bits(v, wl.dtype, np) if v.dtype != np.float32 else v))
               for k, v in host.items()}
        outs = {}
        for o in wl.outputs(shape):
            buf = cp.empty(o.shape, dtype=storage_dtype(o.dtype, cp))
            cp.cuda.runtime.memset(buf.data.ptr, 0xFF, buf.nbytes)
            outs[o.name] = buf
        grid, block, smem = wl.launch_dims(shape, launch)
        if smem > 48 * 1024:
            cp.cuda.driver.funcSetAttribute(fn.ptr, 8, smem)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        args = build_args(wl.abi, spec["param_types"], {**dev, **outs}, wl.scalars(shape), spec["entry"])
        fn(grid, block, args, shared_mem=smem)
        cp.cuda.Device().synchronize()
        ref = wl.reference(host, np)
        for o in wl.outputs(shape):
            got = cp.asnumpy(outs[o.name])
            c = compare(got, ref[o.name], o.dtype, atol, rtol, np, pattern=1)
            out.append({"shape": list(shape), "output": o.name, "max_abs_err": c.max_abs_err, "n_bad": c.n_bad,
                        "n_poison": c.n_poison, "ok": c.ok})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="replay spec JSON (see module docstring)")
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.spec)
    except (ValueError, json.JSONDecodeError, OSError) as e:
        print(f"sanitize_replay: {e}", file=sys.stderr)
        return 2
    results = replay(spec)
    for r in results:
        print(json.dumps(r), flush=True)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
