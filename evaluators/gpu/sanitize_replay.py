"""Launch cubins on a few shapes, standalone, under compute-sanitizer (memcheck, racecheck, synccheck, initcheck).

Only the kernels under test run on the device: inputs are drawn on the host (numpy) and copied over, outputs are
poisoned with ``cudaMemset`` (0xFF bytes), and each result is copied back and compared on the host against the
float64 reference. CuPy's memory pool is switched off (``cupy.cuda.set_allocator(None)``) so every buffer is
its own ``cudaMalloc`` of the exact size: memcheck then sees a store one element past ``y`` as out of bounds
instead of as a write into a pooled chunk.

Spec (JSON file, ``--spec``): ``workload`` (``Workload.spec()``: ``_target_`` and constructor options), ``shapes``
(list of [M, N]), ``seed`` (input seed, int), and either ``kernels`` (a list of {``id``, ``cubin`` (path),
``entry``, ``param_types``, ``launch`` (``LaunchConfig.to_json()``)}) or those keys at the top level (one
kernel, id 0). ``build_spec`` writes one.

When the environment names a lock file (``PTXFORGE_TIMING_LOCK``), each launch holds it
(``sanitizer.TimingLock``), so it never runs while a worker times a kernel on the same GPU.

Prints one JSON line per kernel and shape (kernel, shape, output, max_abs_err, n_bad, n_poison, ok), a
``{"begin": id}`` line before each kernel's launches, and exits 0 when every output is within the workload's
tolerance, 1 when one is not, 2 on a bad spec. Usage::

    compute-sanitizer --tool memcheck python3 -m evaluators.gpu.sanitize_replay --spec spec.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KERNEL_KEYS = ("cubin", "entry", "param_types", "launch")
SPEC_KEYS = ("workload", "shapes", "seed")


def kernel_entry(kernel: Any, cubin_path: str | Path, kid: int | str = 0) -> dict[str, Any]:
    """One ``kernels`` entry for ``kernel`` (a ``population.kernel.Kernel``) whose cubin lies at ``cubin_path``."""
    from evaluators.gpu.args import param_types

    return {"id": kid, "cubin": str(cubin_path), "entry": kernel.entry, "param_types": param_types(kernel),
            "launch": kernel.launch.to_json()}


def build_spec(kernel: Any, workload: Any, cubin_path: str | Path, shapes: Sequence[tuple[int, ...]],
               seed: int = 7) -> dict[str, Any]:
    """The replay spec (single-kernel form) for ``kernel`` whose cubin lies at ``cubin_path``.
    KeyError when the kernel lacks its entry."""
    e = kernel_entry(kernel, cubin_path)
    e.pop("id")
    return {"workload": workload.spec(), **e,
            "shapes": [list(s) for s in shapes], "seed": int(seed)}


def kernels_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The spec's kernel entries (the single-kernel form as one entry with id 0)."""
    if "kernels" in spec:
        return list(spec["kernels"])
    return [{"id": 0, **{k: spec[k] for k in KERNEL_KEYS}}]


def load_spec(path: str | Path) -> dict[str, Any]:
    """Read and check a spec file; ValueError naming the file and the missing or malformed key."""
    spec = json.loads(Path(path).read_text())
    missing = [k for k in SPEC_KEYS if k not in spec]
    if "kernels" not in spec:
        missing += [k for k in KERNEL_KEYS if k not in spec]
    if missing:
        raise ValueError(f"{path}: spec lacks {missing} (needs {list(SPEC_KEYS)} and kernels or {list(KERNEL_KEYS)})")
    if not spec["shapes"] or any(len(s) != 2 for s in spec["shapes"]):
        raise ValueError(f"{path}: 'shapes' must be a non-empty list of [M, N], got {spec['shapes']!r}")
    for k in kernels_of(spec):
        lack = [key for key in KERNEL_KEYS if key not in k]
        if lack:
            raise ValueError(f"{path}: kernel {k.get('id')!r} lacks {lack}")
        if not Path(k["cubin"]).is_file():
            raise ValueError(f"{path}: cubin {k['cubin']!r} does not exist")
    return spec


def replay(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Launch each kernel of the spec once per shape; returns one result dict per kernel, shape and output."""
    import contextlib
    import os

    import cupy as cp
    import numpy as np

    from evaluators.gpu.args import build_args
    from evaluators.gpu.gate import compare
    from evaluators.gpu.sanitizer import TimingLock
    from population.kernel import LaunchConfig
    from workloads.dtypes import as_bits, storage_dtype
    from workloads.registry import build_workload

    lock_path = os.environ.get("PTXFORGE_TIMING_LOCK")
    cp.cuda.set_allocator(None)  # exact-size allocations: memcheck bounds are the buffers' own
    wl = build_workload(spec["workload"])
    atol, rtol = wl.tolerance
    shapes = [tuple(int(v) for v in s) for s in spec["shapes"]]
    hosts = [wl.make_inputs(shape, int(spec["seed"]) + i, "normal", np) for i, shape in enumerate(shapes)]
    refs = [wl.reference(h, np) for h in hosts]
    out: list[dict[str, Any]] = []
    for k in kernels_of(spec):
        print(json.dumps({"begin": k["id"]}), flush=True)
        mod = cp.cuda.Module()
        mod.load(Path(k["cubin"]).read_bytes())
        fn = mod.get_function(k["entry"])
        launch = LaunchConfig.from_json(k["launch"])
        for shape, host, ref in zip(shapes, hosts, refs):
            dev = {n: cp.asarray(np.ascontiguousarray(as_bits(v, wl.dtype, np) if v.dtype != np.float32 else v))
                   for n, v in host.items()}
            outs = {}
            for o in wl.outputs(shape):
                buf = cp.empty(o.shape, dtype=storage_dtype(o.dtype, cp))
                cp.cuda.runtime.memset(buf.data.ptr, 0xFF, buf.nbytes)
                outs[o.name] = buf
            grid, block, smem = wl.launch_dims(shape, launch)
            if smem > 48 * 1024:
                cp.cuda.driver.funcSetAttribute(fn.ptr, 8, smem)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            plan = wl.plan(dev, outs, shape, None, cp)  # a pipeline's reference stages around the kernel
            args = build_args(wl.abi, k["param_types"], plan.buffers, wl.scalars(shape), k["entry"])
            # never while a worker times a launch on this GPU (PTXFORGE_TIMING_LOCK, see sanitizer.TimingLock)
            with TimingLock(lock_path) if lock_path else contextlib.nullcontext():
                plan.run_before()
                fn(grid, block, args, shared_mem=smem)
                plan.run_after()
                cp.cuda.Device().synchronize()
            for o in wl.outputs(shape):
                got = cp.asnumpy(outs[o.name])
                c = compare(got, ref[o.name], o.dtype, atol, rtol, np, pattern=1)
                out.append({"kernel": k["id"], "shape": list(shape), "output": o.name, "max_abs_err": c.max_abs_err,
                            "n_bad": c.n_bad, "n_poison": c.n_poison, "ok": c.ok})
                print(json.dumps(out[-1]), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--spec", required=True, help="replay spec JSON (see module docstring)")
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.spec)
    except (ValueError, json.JSONDecodeError, OSError) as e:
        print(f"sanitize_replay: {e}", file=sys.stderr)
        return 2
    results = replay(spec)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
