"""Launch cubins on a few shapes, standalone, under compute-sanitizer (memcheck, racecheck, synccheck, initcheck).

Only the kernels under test run on the device: inputs are drawn on the host (numpy) and copied over, outputs are
poisoned with ``cudaMemset`` (0xFF bytes), and each result is copied back and compared on the host against the
float64 reference. Two layouts:

- ``exact`` (the ``shapes``): CuPy's memory pool is switched off (``cupy.cuda.set_allocator(None)``) so every
  buffer is its own ``cudaMalloc`` of the exact size: memcheck then sees a store one element past ``y`` as out of
  bounds instead of as a write into a pooled chunk;
- ``edge`` (the ``edge_shapes``): the benchmark's layout, so that nothing a kernel can see (its inputs' addresses
  and alignment, their protection, the shape) tells the replay from a timed launch: every input in its own VMM
  mapping ending at an unmapped granule, read-only where the benchmark's are (``vmm.place_at_edges``,
  ``vmm.read_only_buffers``: the one implementation behind the benchmark input sets and the fault check), and the
  outputs from a CuPy memory pool, as the worker allocates them. A kernel that keeps a barrier only where its
  inputs do not sit as the benchmark's do (``rt_edge_race``: both inputs ending 64 KiB aligned), or only at
  shapes that are never timed (``rt_sanitizer_dodge`` RT_SENSE 3), takes its racy path here under the tool.
  Where the driver refuses VMM a ``{"note": ...}`` line says so and the launch uses the exact layout (the
  worker then holds its benchmark inputs in plain allocations too).

What a launch reads and finds in its outputs: with ``draw_conditions`` (what ``sanitizer.sanitize`` writes, gate
rules version 10) each launch draws, from the spec's seed and its index, as the timed launches draw theirs
(``launch_conditions``): its input distribution (any of the workload's, with probability 1 / their count) and the
pattern its outputs hold before it runs (``timed_checks.PATTERNS``: NaN poison, all-ones, zeros, random finite
values, or the correct output for other inputs -- never for inputs of the workload's first distribution, as the
timed launches never give set 0 the "answer"; since version 13 at half the launches "stale": the correct output
for its own inputs, as the timed launches' stale outputs hold an earlier launch's result). A kernel that keeps a barrier only where the replay's conditions
used to be fixed (``rt_replay_refill_dodge``: outputs of all-ones bytes; ``rt_replay_scale_dodge``: rows of unit
scale; ``rt_replay_seed_dodge``: the inputs of seed 7, which ``sanitize`` now draws per call) takes its racy path
at a replayed launch unless every launch at its shape draws what it keeps the barrier for: for a kernel racing at a
share q of the timed launches' conditions, (1 - q)^k at k replayed launches of the timed shape (RMSNorm: k = 3, one
per eps; q = 4/5 for a dodge keyed on all-ones outputs or on unit-scale rows: 0.8%; q >= 1/2, what moving a median
takes: at most 12.5%). Without it (specs written before) every launch reads ``normal`` inputs into all-ones outputs.

Spec (JSON file, ``--spec``): ``workload`` (``Workload.spec()``: ``_target_`` and constructor options), ``shapes``
(list of the workload's shapes, any rank), ``seed`` (input seed, int), optionally ``edge_shapes`` (list of shapes replayed in the ``edge``
layout; absent: none) and ``draw_conditions`` (bool; absent: false), and either ``kernels`` (a list of {``id``,
``cubin`` (path), ``entry``, ``param_types``, ``launch`` (``LaunchConfig.to_json()``)}) or those keys at the top
level (one kernel, id 0). ``build_spec`` writes one.

When the environment names a lock file (``PTXFORGE_TIMING_LOCK``), each launch holds it
(``sanitizer.TimingLock``), so it never runs while a worker times a kernel on the same GPU. When it also leases a
share of the lock (``duty_cycle.DutyCycle.lease``: ``PTXFORGE_LOCK_SHARE`` ...), each launch first waits for
the bucket's credit and is charged its lock seconds after, and a ``{"paced": s}`` line reports each wait.

Prints one JSON line per kernel, shape, layout, drawn scalar setting and output (kernel, shape, placement, params,
distribution, pattern, output, max_abs_err, n_bad, n_poison, ok), a
``{"begin": id}`` line before each kernel's launches, a ``{"paced": s}`` line per wait for lock credit, with a
lock file ``{"lock": {kernel, shape}}`` when a launch takes the lock and ``{"unlock": s}`` when it lets it go, a last
``{"lock_seconds": s}`` line (seconds it held the timing lock; ``"longest"``: the launch that held it longest,
{s, kernel, shape, placement}; with a leased bucket also ``"credit"``, the bucket's credit at the end), and exits 0 when every output is within the workload's
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

import numpy as np

KERNEL_KEYS = ("cubin", "entry", "param_types", "launch")
SPEC_KEYS = ("workload", "shapes", "seed")


def kernel_entry(kernel: Any, cubin_path: str | Path, kid: int | str = 0) -> dict[str, Any]:
    """One ``kernels`` entry for ``kernel`` (a ``population.kernel.Kernel``) whose cubin lies at ``cubin_path``."""
    from evaluators.gpu.args import param_types

    return {"id": kid, "cubin": str(cubin_path), "entry": kernel.entry, "param_types": param_types(kernel),
            "launch": kernel.launch.to_json()}


def build_spec(kernel: Any, workload: Any, cubin_path: str | Path, shapes: Sequence[tuple[int, ...]],
               seed: int = 7, edge_shapes: Sequence[tuple[int, ...]] = ()) -> dict[str, Any]:
    """The replay spec (single-kernel form) for ``kernel`` whose cubin lies at ``cubin_path``: ``shapes`` in the
    exact layout, ``edge_shapes`` in the benchmark's (module docstring). KeyError when the kernel lacks its
    entry."""
    e = kernel_entry(kernel, cubin_path)
    e.pop("id")
    return {"workload": workload.spec(), **e, "shapes": [list(s) for s in shapes],
            "edge_shapes": [list(s) for s in edge_shapes], "seed": int(seed)}


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
    # a shape is the workload's own tuple (RMSNorm (M, N), KDA (H, N, T) or a varlen (H, T, V, ...)): any rank
    for key in ("shapes", "edge_shapes"):
        got = spec.get(key, [])
        if not isinstance(got, list) or any(not isinstance(s, list) or not s or
                                            not all(isinstance(v, int) and v > 0 for v in s) for s in got):
            raise ValueError(f"{path}: {key!r} must be a list of shapes (lists of positive ints), got {got!r}")
    edge = spec.get("edge_shapes", [])
    if not spec["shapes"] and not edge:
        raise ValueError(f"{path}: nothing to launch: 'shapes' and 'edge_shapes' are both empty")
    for k in kernels_of(spec):
        lack = [key for key in KERNEL_KEYS if key not in k]
        if lack:
            raise ValueError(f"{path}: kernel {k.get('id')!r} lacks {lack}")
        if not Path(k["cubin"]).is_file():
            raise ValueError(f"{path}: cubin {k['cubin']!r} does not exist")
    return spec


def _poisoned_outputs(wl: Any, shape: tuple[int, ...], cp: Any, pool: Any = None) -> dict[str, Any]:
    """The outputs of ``shape`` (name -> CuPy array of the output's storage dtype), every byte 0xFF: from the
    CuPy memory pool ``pool`` (what the worker's ``cp.empty`` gives its benchmark outputs: the edge layout), or
    with None from ``cp.empty`` (exact-size allocations once ``replay`` has switched the pool off)."""
    from workloads.dtypes import storage_dtype

    outs = {}
    for o in wl.outputs(shape):
        dt = storage_dtype(o.dtype, cp)
        if pool is None:
            buf = cp.empty(o.shape, dtype=dt)
        else:
            n = int(np.prod(o.shape)) * np.dtype(dt).itemsize
            buf = cp.ndarray(o.shape, dtype=dt, memptr=pool.malloc(max(n, 1)))
        cp.cuda.runtime.memset(buf.data.ptr, 0xFF, buf.nbytes)
        outs[o.name] = buf
    return outs


def scalar_settings(wl: Any) -> list[dict[str, float]]:
    """Every combination of the workload's runtime scalar draws (``Workload.scalar_draws``, crossed when it draws
    several), each a ``params`` mapping for ``scalars`` and ``reference``; ``[{}]`` when it draws none. The edge
    layout replays each, so a kernel that keeps its barrier only at one drawn value (``rt_replay_eps_dodge``:
    eps == 1e-6, the default) takes its racy path under the tool at the others."""
    import itertools

    names = sorted(wl.scalar_draws)
    return [dict(zip(names, vals)) for vals in itertools.product(*(wl.scalar_draws[n] for n in names))]


def replay_runs(spec: dict[str, Any], wl: Any) -> list[tuple[tuple[int, ...], str, dict[str, float]]]:
    """The launches of one kernel, in order: (shape, placement, params). Each of ``shapes`` once in the exact
    layout at the workload's default scalars (``params`` empty); each of ``edge_shapes`` in the benchmark's layout
    once per ``scalar_settings`` entry, as the timed launches draw them (RMSNorm: eps 1e-6, 1e-5, 1e-3)."""
    runs = [(tuple(int(v) for v in s), "exact", {}) for s in spec["shapes"]]
    runs += [(tuple(int(v) for v in s), "edge", p) for s in spec.get("edge_shapes", []) for p in scalar_settings(wl)]
    return runs


def launch_conditions(spec: dict[str, Any], wl: Any, count: int) -> list[tuple[str, str, int]]:
    """(input distribution, output pattern, fill seed) of each of ``count`` launches (``replay_runs`` order). With
    the spec's ``draw_conditions`` each is drawn from ``numpy.random.default_rng([seed, i])`` as the timed launches
    draw theirs (module docstring): the distribution uniformly among ``wl.distributions``, the pattern "stale"
    with probability ``timed_checks.STALE_SHARE`` (gate rules version 13: the outputs hold the correct output for
    the launch's own inputs, as after an earlier launch on the same set), else uniformly among
    ``timed_checks.PATTERNS`` ("answer" only for a distribution other than the workload's first); without,
    ``(first distribution, "ones", 0)`` for every launch (all-ones outputs, the replay's fill before gate rules
    version 10)."""
    from evaluators.gpu.timed_checks import PATTERNS, draw_pattern

    first = wl.distributions[0]
    if not spec.get("draw_conditions"):
        return [(first, "ones", 0)] * count
    out = []
    for i in range(count):
        rng = np.random.default_rng([int(spec["seed"]) % 2**63, i])
        dist = str(wl.distributions[int(rng.integers(len(wl.distributions)))])
        choices = [p for p in PATTERNS if p != "answer" or dist != first]
        out.append((dist, draw_pattern(rng, choices), int(rng.integers(2**62))))
    return out


def _fill_outputs(outs: dict[str, Any], wl: Any, shape: tuple[int, ...], pattern: str, fill_seed: int,
                  answer_seed: int, params: dict[str, float], cp: Any,
                  own: dict[str, Any] | None = None) -> int | None:
    """Give every output of ``outs`` the bytes of ``pattern`` (``launch_prep.fill`` on a host copy, then one copy
    to the device; all-ones and zeros by ``cudaMemset``); "answer": the correct output, at ``params``, for inputs
    of the workload's first distribution drawn from ``answer_seed``; "stale": ``own`` (the float64 reference of
    the launch's own inputs) in the output's type, what an earlier launch on the same inputs leaves there. Returns
    the poison id ``gate.compare`` counts unwritten elements by (0: NaN poison, 1: all-ones) or None."""
    from evaluators.gpu.gate import reference_for
    from evaluators.gpu.launch_prep import fill
    from workloads.dtypes import as_bits, from_float, host_dtype

    if pattern in ("ones", "zeros"):
        for buf in outs.values():
            cp.cuda.runtime.memset(buf.data.ptr, 0xFF if pattern == "ones" else 0, buf.nbytes)
        return 1 if pattern == "ones" else None
    answers: dict[str, Any] = {}
    if pattern in ("answer", "stale"):
        if pattern == "stale" and own is None:
            raise ValueError("_fill_outputs: the 'stale' pattern needs the launch's own reference (own=)")
        ref = own if pattern == "stale" else reference_for(
            wl, wl.make_inputs(shape, answer_seed, wl.distributions[0], np), np, params)
        answers = {o.name: as_bits(from_float(ref[o.name], o.dtype, np), o.dtype, np) if o.dtype == "bf16"
                   else from_float(ref[o.name], o.dtype, np) for o in wl.outputs(shape)}
    for o in wl.outputs(shape):
        buf = outs[o.name]
        host = np.empty(buf.shape, dtype=host_dtype(o.dtype) if o.dtype != "bf16" else np.uint16)
        fill(host, o.dtype, "answer" if pattern == "stale" else pattern, fill_seed, answers.get(o.name), np)
        cp.cuda.runtime.memcpy(buf.data.ptr, host.ctypes.data, host.nbytes, cp.cuda.runtime.memcpyHostToDevice)
    return 0 if pattern == "nan" else None


def replay(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Launch each kernel of the spec once per shape of ``shapes`` (exact layout) and once per shape of
    ``edge_shapes`` and drawn scalar setting (the benchmark's layout: module docstring, ``replay_runs``);
    returns one result dict per kernel, shape, layout, scalar setting and output. Prints each result as a JSON
    line as it goes, and last, even when a launch raised, ``{"lock_seconds": s}``: the seconds this process held
    the timing lock, and with a leased bucket (``duty_cycle``) ``"credit"``: its credit at the end, which the
    parent's ``DutyCycle`` takes over."""
    import contextlib
    import os
    import time

    import cupy as cp

    from evaluators.gpu.args import build_args, launch_function
    from evaluators.gpu.duty_cycle import DutyCycle
    from evaluators.gpu.gate import compare, reference_for
    from evaluators.gpu.sanitizer import TimingLock
    from evaluators.gpu.vmm import VMMError, place_at_edges, read_only_buffers
    from population.kernel import LaunchConfig
    from workloads.dtypes import as_bits
    from workloads.registry import build_workload

    lock_path = os.environ.get("PTXFORGE_TIMING_LOCK")
    duty = DutyCycle.from_env() if lock_path else None  # the parent's bucket, kept per launch (duty_cycle)
    cp.cuda.set_allocator(None)  # exact-size allocations: memcheck bounds are the buffers' own
    pool = cp.cuda.MemoryPool()  # the edge layout's outputs, pooled as the worker's are
    wl = build_workload(spec["workload"])
    atol, rtol = wl.tolerance
    runs = replay_runs(spec, wl)
    conditions = launch_conditions(spec, wl, len(runs))
    hosts = [wl.make_inputs(shape, int(spec["seed"]) + i, dist, np)
             for i, ((shape, _, _), (dist, _, _)) in enumerate(zip(runs, conditions))]
    refs = [reference_for(wl, h, np, params) for h, (_, _, params) in zip(hosts, runs)]
    out: list[dict[str, Any]] = []
    held = 0.0  # seconds this process held the timing lock: the caller's DutyCycle is charged with it
    longest: dict[str, Any] = {}  # the launch that held it longest: what a worker waited for at most
    try:
        for k in kernels_of(spec):
            print(json.dumps({"begin": k["id"]}), flush=True)
            mod = cp.cuda.Module()
            mod.load(Path(k["cubin"]).read_bytes())
            fn = mod.get_function(k["entry"])
            launch = LaunchConfig.from_json(k["launch"])
            for i, ((shape, placement, params), host, ref) in enumerate(zip(runs, hosts, refs)):
                dist, pattern, fill_seed = conditions[i]
                dev = {n: cp.asarray(np.ascontiguousarray(as_bits(v, wl.dtype, np) if v.dtype != np.float32 else v))
                       for n, v in host.items()}
                edges = None
                if placement == "edge":
                    try:
                        edges = place_at_edges(dev, read_only_buffers(wl, dev))
                        dev = edges.views
                        outs = _poisoned_outputs(wl, shape, cp, pool)
                    except (VMMError, ImportError) as e:
                        print(json.dumps({"note": f"edge layout not used at {list(shape)}: {e}"}), flush=True)
                        placement = "exact (VMM refused)"
                if edges is None:
                    outs = _poisoned_outputs(wl, shape, cp)
                poison = 1 if pattern == "ones" else _fill_outputs(outs, wl, shape, pattern, fill_seed,
                                                                    int(spec["seed"]) + len(runs) + i, params, cp,
                                                                    own=ref)
                grid, block, smem = wl.launch_dims(shape, launch)
                plan = wl.plan(dev, outs, shape, params or None, cp)  # a pipeline's reference stages around the kernel
                args = build_args(wl.abi, k["param_types"], plan.buffers, wl.scalars(shape, params) if params else wl.scalars(shape),
                                  k["entry"])
                try:
                    if duty is not None:
                        waited = duty.wait()
                        if waited > 0:
                            print(json.dumps({"paced": round(waited, 4)}), flush=True)
                    # never while a worker times a launch on this GPU (PTXFORGE_TIMING_LOCK, see sanitizer.TimingLock)
                    with TimingLock(lock_path) if lock_path else contextlib.nullcontext():
                        t_lock = time.perf_counter()
                        if lock_path:  # the parent may cut a launch that holds the lock too long (run_tool)
                            print(json.dumps({"lock": {"kernel": k["id"], "shape": list(shape)}}), flush=True)
                        plan.run_before()
                        launch_function(fn, grid, block, args, smem)
                        plan.run_after()
                        cp.cuda.Device().synchronize()
                        used = time.perf_counter() - t_lock
                        held += used
                    if used > longest.get("s", -1.0):
                        longest = {"s": round(used, 4), "kernel": k["id"], "shape": list(shape), "placement": placement}
                    if lock_path:
                        print(json.dumps({"unlock": round(used, 4)}), flush=True)
                    if duty is not None:
                        duty.charge(used)
                    for o in wl.outputs(shape):
                        got = cp.asnumpy(outs[o.name])
                        c = compare(got, ref[o.name], o.dtype, atol, rtol, np, pattern=poison)
                        out.append({"kernel": k["id"], "shape": list(shape), "placement": placement, "params": params,
                                    "distribution": dist, "pattern": pattern, "output": o.name,
                                    "max_abs_err": c.max_abs_err, "n_bad": c.n_bad, "n_poison": c.n_poison, "ok": c.ok})
                        print(json.dumps(out[-1]), flush=True)
                finally:
                    if edges is not None:
                        edges.close()
                    outs.clear()
    finally:
        last: dict[str, Any] = {"lock_seconds": round(held, 4)}
        if longest:
            last["longest"] = longest
        if duty is not None:
            last["credit"] = round(duty.credit(), 4)  # the parent takes it over (DutyCycle.settle)
        print(json.dumps(last), flush=True)
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
