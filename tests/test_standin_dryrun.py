"""Dry runs of the evaluator's CuPy code paths on the CPU (tests/cupy_standin.py): refills and row patches,
timed launches with their checks, benchmark input sets in VMM mappings at unmapped pages (read-only, aliased),
and the worker's evaluate (gate, fault check, benchmark) with emulated kernels, an honest one and one that reads
past x only at a large shape. Also what the timing loop enqueues per launch: no host synchronisation."""

from __future__ import annotations

import contextlib
import types
from collections import OrderedDict

import numpy as np
import pytest

from tests import cupy_standin as sd
from tests.timed_launches import drive
from workloads.rmsnorm import RMSNorm

SHAPE = (3000, 64)


@pytest.fixture
def cp(monkeypatch):
    return sd.install(monkeypatch)


def rms_bits(x_bits: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """What a correct bf16 kernel writes (float32 arithmetic, round to nearest even), as uint16 bits."""
    import ml_dtypes

    x = (x_bits.astype(np.uint32) << 16).view(np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        r = np.float32(1) / np.sqrt((x * x).mean(axis=1, dtype=np.float32) + np.float32(eps))
        return (x * r[:, None] * w).astype(ml_dtypes.bfloat16).view(np.uint16)


@contextlib.contextmanager
def uncounted():
    sd._COUNTING[0] = False
    try:
        yield
    finally:
        sd._COUNTING[0] = True


def honest(inputs, outputs, shape, params=None):
    """An emulated kernel launch on device arrays (not counted: it stands for the kernel itself)."""
    with uncounted():
        x = inputs["x"].view(np.ndarray)
        outputs["y"].view(np.ndarray)[...] = rms_bits(x, inputs["w"].view(np.ndarray), (params or {}).get("eps", 1e-6))


@pytest.mark.parametrize("pattern", ["nan", "ones", "zeros", "random", "answer"])
def test_device_fill_writes_what_the_host_path_writes_in_one_operation(cp, pattern):
    from evaluators.gpu.launch_prep import fill

    n = 1000 * 7 + 3  # a tail of 6 bytes after the 16-byte words
    out = cp.empty(n, dtype=cp.uint16)
    answer = cp.arange(n, dtype=cp.uint16)
    sd.COUNTS.clear()
    fill(out, "bf16", pattern, 12345, answer, cp)
    assert sd.COUNTS["op"] == 1 and sd.COUNTS["sync"] == 0
    want = np.zeros(n, dtype=np.uint16)
    fill(want, "bf16", pattern, 12345, np.arange(n, dtype=np.uint16), np)
    assert np.array_equal(out.view(np.ndarray), want)


def test_device_row_patch_matches_the_host_patch(cp):
    from evaluators.gpu.launch_prep import RowPatch

    host = (np.random.default_rng(0).standard_normal((500, 96)).astype(np.float32).view(np.uint32) >> 16).astype(
        np.uint16)
    dev = cp.asarray(host)
    rows = np.sort(np.random.default_rng(1).choice(500, 64, replace=False))
    a, b = RowPatch.draw(dev, "bf16", rows, 9, cp), RowPatch.draw(host, "bf16", rows, 9, np)
    assert np.array_equal(a.new.view(np.ndarray), b.new) and np.array_equal(a.old.view(np.ndarray), b.old)
    touched = cp.zeros(2, dtype=cp.uint32)
    sd.COUNTS.clear()
    a.put("new", cp)
    a.put("old", cp, touched, 1)
    assert sd.COUNTS["op"] == 2 and sd.COUNTS["sync"] == 0
    assert np.array_equal(dev.view(np.ndarray), host) and touched.get().tolist() == [0, 0]
    a.put("new", cp)
    dev[rows[0], 0] = dev[rows[0], 0] ^ np.uint16(1)
    a.put("old", cp, touched, 0)
    assert touched.get().tolist() == [1, 0]


def make_sets(cp, edge=True, seeds=(11, 12, 13)):
    from evaluators.gpu.timed_checks import InputSets

    wl = RMSNorm("bf16")
    sets = InputSets.make(wl, SHAPE, list(seeds), cp, edge=edge)
    out = {"y": cp.empty(SHAPE, dtype=cp.uint16)}
    answer = {"y": cp.empty(SHAPE, dtype=cp.uint16)}
    honest(sets.sets[0], answer, SHAPE)
    sets.answers = answer
    return wl, sets, out


def test_timing_loop_enqueues_a_few_operations_per_launch_and_never_synchronises(cp, monkeypatch):
    from evaluators.gpu import timed_checks
    from evaluators.gpu.timed_checks import timed_call, verify_checked

    fills = []
    real_fill = timed_checks.fill
    monkeypatch.setattr(timed_checks, "fill", lambda *a: (fills.append(a[2]), real_fill(*a))[1])
    wl, sets, out = make_sets(cp)
    call, checked = timed_call(wl, honest, sets, out, SHAPE, np.random.default_rng(4), repeats=20)
    sd.COUNTS.clear()
    drive(call, 20)
    # per timed launch not left stale one refill (STALE_SHARE: about half of them); per timed launch x's changed
    # rows and its other rows' sectors (SECTOR_BYTES) written in and back; per launch whose w changes too (half of
    # the 20: 2 of the 4 checked and 8 others) w written in and back; per checked launch one gather of its sampled
    # rows; warm-ups nothing but the launch
    assert sd.COUNTS["sync"] == 0 and "stale" not in fills and 4 <= len(fills) <= 16
    assert sd.COUNTS["op"] == len(fills) + 20 * 2 * 2 + 10 * 2 + 4 and sd.COUNTS["alloc"] == 0
    assert verify_checked(wl, sets, checked, SHAPE) is None
    assert sets.read_only and sets.prints == [None] * 3  # no fingerprints: a store would have faulted
    sd.COUNTS.clear()
    assert sets.mutated() == [] and sd.COUNTS["sync"] == 1  # the perturbations' flags, read once


def test_memo_on_a_row_probe_is_caught_on_the_device_path(cp):
    from evaluators.gpu.timed_checks import timed_call, verify_checked

    wl, sets, out = make_sets(cp)
    table: dict = {}

    def memo(inputs, outputs, shape, params):
        with uncounted():
            x = inputs["x"].view(np.ndarray)
            y = rms_bits(x, inputs["w"].view(np.ndarray), params["eps"])
            for i in range(x.shape[0]):
                key = (i, params["eps"], x[i, :8].tobytes())
                y[i] = table.setdefault(key, y[i])
            outputs["y"].view(np.ndarray)[...] = y

    call, checked = timed_call(wl, memo, sets, out, SHAPE, np.random.default_rng(5), repeats=20)
    drive(call, 20)
    why = verify_checked(wl, sets, checked, SHAPE)
    assert why is not None and "changed in part" in why


def test_checked_launches_are_compared_by_the_fused_row_check_in_a_few_operations(cp):
    """RMSNorm's fused reference-and-compare (workloads/rmsnorm_check.py) on the device path: per checked launch
    its perturbation (x's changed rows, x's other rows' sectors, w at half of them) written in and back and one
    kernel; one counter and one synchronisation per shape. A
    kernel that drops eps is caught at the checked launch on the tiny set, and the reason is the generic one."""
    from evaluators.gpu.timed_checks import InputSets, timed_call, verify_checked

    wl = RMSNorm("bf16")
    sets = InputSets.make(wl, SHAPE, [11, 12, 13], cp, ["normal", "tiny", "nonfinite"], edge=True)
    out = {"y": cp.empty(SHAPE, dtype=cp.uint16)}
    call, checked = timed_call(wl, honest, sets, out, SHAPE, np.random.default_rng(4), repeats=20)
    drive(call, 20)
    sd.COUNTS.clear()
    assert verify_checked(wl, sets, checked, SHAPE) is None
    n, with_w = len(checked), sum("w" in c.perturbation.parts for c in checked)
    assert n == 4 and with_w == 2
    assert sd.COUNTS["kernel"] == n + 2 * 2 * n + 2 * with_w and sd.COUNTS["op"] == sd.COUNTS["kernel"] + 1
    assert sd.COUNTS["sync"] == 1 and sd.COUNTS["alloc"] == 1

    def no_eps(inputs, outputs, shape, params=None):
        honest(inputs, outputs, shape, {"eps": 0.0})

    call, checked = timed_call(wl, no_eps, sets, out, SHAPE, np.random.default_rng(4), repeats=20)
    drive(call, 20)
    why = verify_checked(wl, sets, checked, SHAPE)
    assert why is not None and "(tiny" in why and "out of tolerance" in why, why
    sets.close()


def test_a_workload_that_changes_the_reference_keeps_the_generic_comparison(cp):
    from evaluators.gpu.timed_checks import timed_call, verify_checked

    class Doubled(RMSNorm):
        def reference(self, inputs, xp=np, params=None):
            return {"y": 2 * super().reference(inputs, xp, params)["y"]}

    wl, sets, out = make_sets(cp)
    wl = Doubled("bf16")
    call, checked = timed_call(wl, honest, sets, out, SHAPE, np.random.default_rng(4), repeats=20)
    drive(call, 20)
    sd.COUNTS.clear()
    why = verify_checked(wl, sets, checked, SHAPE)  # the honest RMSNorm is wrong for this workload
    assert why is not None and "out of tolerance" in why
    assert wl.count_bad_rows(sets.sets[0], cp.arange(2), {"y": out["y"][:2]}, cp.zeros(1, cp.uint64), cp) is False
    sets.close()


def test_benchmark_inputs_sit_at_unmapped_pages_read_only_with_a_writable_alias(cp):
    _, sets, _ = make_sets(cp)
    drv = sd.DRIVER[0]
    for i in range(3):
        for name, a in sets.sets[i].items():
            ptr, n = int(a.data.ptr), int(a.nbytes)
            assert sd.readable(ptr, n) and not sd.writable(ptr, 1)  # read-only to kernels
            if n % 16 == 0:
                assert not drv.readable(ptr + n, 1)  # the next byte is an unmapped page
            rw = sets.rw[i][name]
            assert int(rw.data.ptr) != ptr and sd.writable(int(rw.data.ptr), n)
        xa = sets.arenas[i][0]
        assert xa.view(np.ndarray)[: int(xa.size) - int(sets.sets[i]["x"].nbytes)].min() == 0xFF  # NaN before x
    before = sets.sets[1]["x"].view(np.ndarray).copy()
    sets.rw[1]["x"][5, 5] = sets.rw[1]["x"][5, 5] ^ np.uint16(1)  # written through the alias...
    assert sets.sets[1]["x"].view(np.ndarray)[5, 5] != before[5, 5]  # ...seen through the kernel's view
    sets.restore()
    assert np.array_equal(sets.sets[1]["x"].view(np.ndarray), before)
    sets.close()


def test_when_the_driver_refuses_read_only_the_fingerprints_stay(cp):
    sd.DRIVER[0].refuse_read_only = True
    _, sets, _ = make_sets(cp)
    assert not sets.read_only and sets.refused and all(p is not None for p in sets.prints)
    sets.rw[2]["x"][0, 0] = sets.rw[2]["x"][0, 0] ^ np.uint16(1)  # what a kernel could now do through x
    assert sets.mutated() == [2]


# ------------------------------------------------------------------------------------------- the worker
def kernel_twin(cheat_past_end_from_rows: int | None = None):
    """An emulated RMSNorm launch from its argument tuple (x, w, y, M, N, eps); with ``cheat_past_end_from_rows``
    it also loads 16 bytes past x when M is at least that (rt_prefetch_past_end's trick), which faults where x
    ends at an unmapped page."""
    def twin(grid, block, args):
        x_ptr, w_ptr, y_ptr, m, n, eps = (int(args[0]), int(args[1]), int(args[2]), int(args[3]), int(args[4]),
                                          float(args[5]))
        x = sd.host_view(x_ptr, (m, n), np.uint16)
        w = sd.host_view(w_ptr, (n,), np.float32)
        sd.host_view(y_ptr, (m, n), np.uint16)[...] = rms_bits(x, w, eps)
        if cheat_past_end_from_rows is not None and m >= cheat_past_end_from_rows:
            if not sd.readable(x_ptr + m * n * 2, 16):
                sd.fault()
    return twin


def worker_state(cp):
    from evaluators.gpu.worker import WorkerState

    st = object.__new__(WorkerState)
    st.cp, st.workload, st.copy_gbps, st.flush = cp, RMSNorm("bf16"), 4000.0, lambda: None
    st.device_name = "CPU stand-in"
    st.baselines = types.SimpleNamespace(notes={}, build=lambda inputs, shape: {})
    st.bench_sets, st.bench_outputs, st.set_builds, st.edge_sets = OrderedDict(), {}, 0, True
    st.timing_lock, st.baseline_us, st.baseline_fns, st.notes = contextlib.nullcontext(), {}, {}, {}
    st.naive, st.bench_seed = None, 7
    from evaluators.gpu.vmm import FaultCheckSets

    st.fault_sets = FaultCheckSets()
    return st


def request(cubin: bytes, bench=((2048, 64), (3000, 64)), **kw):
    from evaluators.gpu.args import param_types
    from evaluators.gpu.gate_schedule import GateSchedule

    seed = RMSNorm("bf16").seeds()[1]
    return {"op": "evaluate", "cubin": cubin, "entry": seed.entry, "param_types": param_types(seed),
            "launch": seed.launch.to_json(), "gate": True, "gate_seed": 3,
            "gate_shapes": [(7, 760), (1, 192), (199, 1001)], "bench_shapes": [list(s) for s in bench],
            "warmup": 2, "repeats": 10, "baselines": "none", "check_output": "one",
            "gate_schedule": GateSchedule("rotating", 1, 5).to_json(), **kw}


def test_worker_evaluates_an_honest_kernel_through_gate_fault_check_and_checked_timed_launches(cp):
    sd.KERNELS["honest"] = kernel_twin()
    st = worker_state(cp)
    reply, fatal = st.evaluate(request(b"honest"))
    assert reply["status"] == "ok" and not fatal, reply["reason"]
    assert len(reply["shapes"]) == 2 and reply["gate_checks"] == 9  # 3 small shapes x 3 distributions
    assert "fault_check" not in reply["notes"] and "benchmark_inputs" not in reply["notes"]
    assert all(s.read_only for s in st.bench_sets.values())


def test_the_worker_draws_the_next_shape_while_the_gpu_runs_this_one(cp, monkeypatch):
    """Shape i + 1's timed-launch draws are made between shape i's enqueue and its collection (host work off the
    GPU's critical path), and a draw's own error is a crash that names the shape it was drawn for."""
    import evaluators.gpu.benchmark as bm
    import evaluators.gpu.timed_checks as tc

    order: list[str] = []
    real_draw, real_elapsed = tc.timed_call, bm.elapsed_us
    monkeypatch.setattr(tc, "timed_call", lambda wl, enq, sets, out, shape, *a, **k: (
        order.append(f"draw {tuple(shape)}"), real_draw(wl, enq, sets, out, shape, *a, **k))[1])
    monkeypatch.setattr(bm, "elapsed_us", lambda marks: (order.append("collect"), real_elapsed(marks))[1])
    sd.KERNELS["honest"] = kernel_twin()
    st = worker_state(cp)
    bench = ((2048, 64), (3000, 64), (1024, 128))
    reply, fatal = st.evaluate(request(b"honest", bench=bench))
    assert reply["status"] == "ok" and not fatal, reply["reason"]
    assert order == ["draw (2048, 64)", "draw (3000, 64)", "collect", "draw (1024, 128)", "collect", "collect"]

    def broken(wl, enq, sets, out, shape, *a, **k):
        if tuple(shape) == (3000, 64):
            raise ValueError("no draw")
        return real_draw(wl, enq, sets, out, shape, *a, **k)

    monkeypatch.setattr(tc, "timed_call", broken)
    reply, fatal = st.evaluate(request(b"honest", bench=bench))
    assert reply["status"] == "crash" and not fatal, reply
    assert "draws at shape (3000, 64) failed: no draw" in reply["reason"]
    assert [s["shape"] for s in reply["shapes"]] == [] or reply["shapes"][0]["shape"] == [2048, 64]


def test_a_read_past_x_only_at_a_large_benchmark_shape_faults_and_restarts_the_worker(cp):
    """rt_prefetch_past_end's trick, emulated: the gate and the fault check (small shapes) pass; at the
    benchmark shape with M >= 3000 the load past x hits the unmapped page: wrong_result, fatal (a restart)."""
    sd.KERNELS["prefetch"] = kernel_twin(cheat_past_end_from_rows=3000)
    st = worker_state(cp)
    reply, fatal = st.evaluate(request(b"prefetch"))
    assert reply["status"] == "wrong_result" and fatal, reply
    assert "timed launch at shape (3000, 64)" in reply["reason"] and "unmapped page" in reply["reason"]
    assert len(reply["shapes"]) == 0 or reply["shapes"][0]["shape"] == [2048, 64]


def _launcher(cp, name):
    from evaluators.gpu.args import param_types
    from evaluators.gpu.worker import make_launcher

    seed = RMSNorm("bf16").seeds()[1]
    return make_launcher(RMSNorm("bf16"), cp, sd._Function(name), param_types(seed), seed.launch.to_json())


def test_the_fault_check_keeps_its_mappings_and_refills_them_with_fresh_inputs(cp):
    """With the worker's FaultCheckSets the second fault check at a shape makes no VMM driver call and one
    synchronisation fewer; the kernel still sees fresh inputs, read-only, ending at an unmapped page, and a read
    past x still faults there."""
    from evaluators.gpu.vmm import FaultCheckSets, fault_check, fault_check_shape
    from evaluators.gpu.worker import KernelFault

    wl = RMSNorm("bf16")
    seen = []

    def spy(grid, block, args):
        x_ptr, m, n = int(args[0]), int(args[3]), int(args[4])
        seen.append((x_ptr, sd.host_view(x_ptr, (m, n), np.uint16).copy(), sd.writable(x_ptr, 2),
                     sd.readable(x_ptr + m * n * 2, 1) if (m * n * 2) % 16 == 0 else None))
        kernel_twin()(grid, block, args)

    sd.KERNELS["spy"] = spy
    run = _launcher(cp, "spy")
    pool = {fault_check_shape(wl, s) for s in range(64)}
    s0 = next(s for s in range(64) if fault_check_shape(wl, s) == (7, 192))
    s1 = next(s for s in range(s0 + 1, 256) if fault_check_shape(wl, s) == (7, 192))
    cache = FaultCheckSets()
    counts = []
    for seed in (s0, s1):
        sd.COUNTS.clear()
        bad, notes = fault_check(wl, run, seed, cache)
        assert bad is None and notes["read_only"] and notes["shape"] == [7, 192]
        counts.append(dict(sd.COUNTS))
    # first use: per input the granularity, a reserve, a create, a map and an access for each of its two
    # mappings, the read-only access; then nothing
    assert counts[0]["vmm"] == 2 * 9 and counts[1].get("vmm", 0) == 0 and counts[1]["sync"] == counts[0]["sync"] - 1
    assert len(pool) >= 8 and len(cache.sets) == 1
    (p0, x0, w0, past0), (p1, x1, w1, past1) = seen
    assert p0 == p1 and not w0 and not w1 and past0 is False and past1 is False  # same placement, read-only
    fresh = wl.make_inputs((7, 192), s1, "normal", cp)["x"].view(np.ndarray)
    assert np.array_equal(x1, fresh) and not np.array_equal(x0, x1)  # the second seed's inputs, not the first's
    sd.COUNTS.clear()
    fault_check(wl, run, s0)  # without the cache: per input 6 calls to make the mapping, 3 to free it
    assert sd.COUNTS["vmm"] == 2 * 9 and sd.COUNTS["sync"] == counts[0]["sync"] and len(cache.sets) == 1
    sd.KERNELS["past"] = kernel_twin(cheat_past_end_from_rows=1)
    with pytest.raises(KernelFault):
        fault_check(wl, _launcher(cp, "past"), s1, cache)


def test_the_fault_check_frees_the_least_recently_used_mappings_past_its_limit(cp):
    from evaluators.gpu.vmm import FaultCheckSets, fault_check, fault_check_shape

    wl = RMSNorm("bf16")
    sd.KERNELS["honest"] = kernel_twin()
    run = _launcher(cp, "honest")
    seeds = {}
    for s in range(64):
        seeds.setdefault(fault_check_shape(wl, s), s)
    a, b = list(seeds.values())[:2]
    cache = FaultCheckSets(limit=1)
    fault_check(wl, run, a, cache)
    first = set(sd.DRIVER[0].access)
    fault_check(wl, run, b, cache)
    assert len(cache.sets) == 1 and not first & set(sd.DRIVER[0].access)  # the first shape's mappings are gone
    cache.close()
    assert sd.DRIVER[0].access == {}


def test_v1_cost_reference_times_plain_launches_and_audits_one_shape(cp):
    sd.KERNELS["honest"] = kernel_twin()
    st = worker_state(cp)
    from evaluators.gpu.gate_schedule import GateSchedule

    reply, fatal = st.evaluate(request(b"honest", timed_checks=False, fault_check=False,
                                       gate_schedule=GateSchedule("v1").to_json()))
    assert reply["status"] == "ok" and not fatal, reply["reason"]
    assert reply["seconds"]["audit"] > 0 and len(reply["shapes"]) == 2


def test_gate_cost_experiment_dry_run(cp, monkeypatch):
    """experiments/gate_cost.py's measurements on the stand-in: every path it times runs (numbers meaningless)."""
    import importlib.util
    from pathlib import Path

    import evaluators.gpu.gate as gate
    from evaluators.gpu.args import param_types
    from evaluators.gpu.worker import make_launcher

    monkeypatch.setattr(gate, "SMALL_CHECK_ELEMENTS", 760 * 7)  # (199, 192) and (3, 4096) become large checks
    spec = importlib.util.spec_from_file_location(
        "gate_cost", Path(__file__).resolve().parents[1] / "experiments" / "gate_cost.py")
    gate_cost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gate_cost)
    import evaluators.gpu.index_check as ic

    sd.KERNELS["honest"] = kernel_twin()
    wl = RMSNorm("bf16")
    monkeypatch.setattr(ic, "INDEX_LIMIT", 1 << 16)  # the index check at a scaled-down limit and shape
    wl.index_shapes = ((17, 4096),)
    seed = wl.seeds()[1]
    run = make_launcher(wl, cp, sd._Function("honest"), param_types(seed), seed.launch.to_json())
    text = gate_cost.measure(wl, run, cp, repeats=1, rounds=2, bench_shapes=[(2048, 64), (3000, 64)],
                             gate_shapes=[(1, 192), (7, 760), (199, 192), (3, 4096)])
    assert "run_gate, rotating schedule" in text and "Per candidate, gate + audit" in text
    assert "| 2048x64 |" in text and "read-only True" in text and "ratio **" in text
    assert "the worker's kept mappings" in text and "made and freed per check" in text
    assert "verify ms, reference rows" in text and "of it, draws ms (host)" in text
    assert "| index check at 17x4096 (kept mappings; one rotating evaluation in 4) |" in text
    assert "index check, first use" in text and "ms index check (its time / 4)" in text


def test_kernels_are_compiled_at_worker_start_and_sticky_errors_are_recognised_by_their_runtime_names(cp):
    from evaluators.gpu import launch_prep
    from evaluators.gpu.worker import KernelFault, _is_sticky, edge_fault
    from evaluators.types import Status

    launch_prep.warm()
    assert launch_prep._module() is launch_prep._module()  # built once
    sd.COUNTS.clear()
    worker_state(cp)._warm_row_check()  # RMSNorm's fused row check runs once at start (its kernel compiled)
    assert sd.COUNTS["kernel"] == 1 and sd.COUNTS["sync"] == 0
    runtime = sd.CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")
    assert _is_sticky(runtime) and _is_sticky(RuntimeError("CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure"))
    assert _is_sticky(RuntimeError("cudaErrorLaunchFailure: unspecified launch failure"))
    assert not _is_sticky(RuntimeError("cudaErrorInvalidValue: invalid argument"))
    f = KernelFault(Status.CRASH, f"benchmark at shape (8, 8) failed: {runtime}", fatal=True)
    g = edge_fault(f, "a timed launch at shape (8, 8)")
    assert g.status == Status.WRONG_RESULT and g.fatal and "unmapped page" in str(g)
    trap = KernelFault(Status.CRASH, "benchmark failed: cudaErrorLaunchFailure: unspecified launch failure", True)
    assert edge_fault(trap, "x") is trap  # not an address fault: stays a crash


def test_input_sets_evicted_past_the_budget_free_their_mappings(cp, monkeypatch):
    import evaluators.gpu.worker as worker

    sd.KERNELS["honest"] = kernel_twin()
    st = worker_state(cp)
    monkeypatch.setattr(worker, "BENCH_BYTES_BUDGET", 30 << 20)  # room for one shape's five sets (2 MiB a buffer)
    reply, _ = st.evaluate(request(b"honest", bench=((2048, 64),)))
    first = st.bench_sets[(2048, 64)]
    mapped = {b.base for e in first.edges for b in e.buffers.values()}
    assert reply["status"] == "ok" and first.edges and mapped <= set(sd.DRIVER[0].access)
    reply, _ = st.evaluate(request(b"honest", bench=((3000, 64),)))
    assert reply["status"] == "ok" and list(st.bench_sets) == [(3000, 64)]
    gone = not mapped & set(sd.DRIVER[0].access)  # (a failing assert's report would read the freed mappings)
    assert first.edges == [] and gone  # the evicted mappings are gone; the fault check's stay


def test_the_worker_warms_every_gate_path_and_the_fault_check_at_start_up(cp, monkeypatch):
    """The naive seed runs the gate at every gate shape (the batched small checks and the one-by-one large
    check) and the fault check inside the start-up, so the first candidate pays none of their one-time work; a
    seed that fails says so in the start-up notes."""
    import evaluators.gpu.gate as gate
    from evaluators.gpu.args import param_types

    one_by_one: list[tuple[int, ...]] = []
    real = gate.check_shape
    monkeypatch.setattr(gate, "check_shape", lambda wl, run, shape, *a, **k: (
        one_by_one.append(tuple(shape)), real(wl, run, shape, *a, **k))[1])
    sd.KERNELS["honest"] = kernel_twin()
    st = worker_state(cp)
    seed = st.workload.seeds()[1]
    st.workload.gate_shapes = [(7, 760), (199, 1001), (4100, 1024)]  # the last above SMALL_CHECK_ELEMENTS
    st.naive, st.naive_types, st.naive_launch = st._load(b"honest", seed.entry), param_types(seed), seed.launch.to_json()
    st._warm_gate()
    assert st.notes["warm_gate"].startswith("gate and fault check warmed on the naive seed in ")
    assert one_by_one == [(4100, 1024)] and len(st.fault_sets.sets) == 1

    def zeros(grid, block, args):
        m, n = int(args[3]), int(args[4])
        sd.host_view(int(args[2]), (m, n), np.uint16)[...] = 0

    sd.KERNELS["zeros"] = zeros
    st = worker_state(cp)
    st.workload.gate_shapes = [(7, 760)]
    st.naive, st.naive_types, st.naive_launch = st._load(b"zeros", seed.entry), param_types(seed), seed.launch.to_json()
    st._warm_gate()
    assert st.notes["warm_gate"].startswith("naive seed failed the warm-up gate: gate: ")
    assert len(st.fault_sets.sets) == 0
