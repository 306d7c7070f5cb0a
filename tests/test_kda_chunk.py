"""KDA chunked prefill (workloads/kda/chunk.py), a pipeline workload, on the CPU: the float64 chunked form equals
the recurrent reference; the chunk layout; the stage list against the ABI; the fp32 pipeline (NumPy reference
stages around a NumPy stand-in for the evolved state pass) through the gate, which rejects wrong or lazy state
passes; the benchmark's timed call runs the reference stages outside the timed launch and checks the pipeline's
output; seeds through the static evaluator; ``python -m evolve workload=kda_chunk``."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.gate import run_gate
from evaluators.types import Status
from population.kernel import LaunchConfig
from workloads.dtypes import storage_dtype
from workloads.kda import KDAChunk
from workloads.kda.chunk_math import chunk_layout, kda_chunk_reference
from workloads.kda.reference import kda_reference
from workloads.pipeline import StagePlan


def tiny(lens, h=2, k=4, v=3, seed=0, extremes=False):
    rng = np.random.default_rng(seed)
    t = sum(lens)
    g = rng.standard_normal((t, h, k)) * 3
    beta = rng.standard_normal((t, h))
    if extremes:  # decay at the lower bound / none at all, beta at 0 / 1
        g = np.where(rng.random((t, h, k)) < 0.5, -30.0, 30.0)
        beta = np.where(rng.random((t, h)) < 0.5, -12.0, 12.0)
    return dict(q=rng.standard_normal((t, h, k)), k=rng.standard_normal((t, h, k)), v=rng.standard_normal((t, h, v)),
                g_raw=g, beta_raw=beta, A_log=np.log(rng.uniform(1, 16, h)), dt_bias=rng.standard_normal(h * k),
                cu_seqlens=np.concatenate([[0], np.cumsum(lens)]), state=rng.standard_normal((len(lens), h, k, v)))


@pytest.mark.parametrize("lens,extremes,chunk", [([9], False, 4), ([5, 1, 3, 11], False, 4), ([13, 1, 2], True, 4),
                                                 ([70, 1], False, 64)])
def test_chunked_form_equals_the_recurrence_in_float64(lens, extremes, chunk):
    """Odd lengths, a length-1 sequence, several chunks per sequence (chunk 4), an initial state, gates at the
    lower bound: the UT-transform form and the token-by-token scan agree to rounding."""
    a = tiny(lens, extremes=extremes)
    o1, s1 = kda_reference(**a)
    o2, s2 = kda_chunk_reference(**a, chunk=chunk)
    np.testing.assert_allclose(o2, o1, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(s2, s1, rtol=1e-11, atol=1e-12)
    with pytest.raises(ValueError, match="cu_seqlens must rise from 0"):
        kda_chunk_reference(**{**a, "cu_seqlens": np.array([0, *a["cu_seqlens"][1:-1], 10**6])})


def test_chunk_layout_by_hand():
    lay = chunk_layout((5, 1, 4), 4)  # chunks: [0..3], [4], [5], [6..9]
    assert lay.counts.tolist() == [2, 1, 1] and lay.offsets.tolist() == [0, 2, 3, 4] and lay.n_chunks == 4
    assert lay.first.tolist() == [0, 4, 5, 6] and lay.last.tolist() == [3, 4, 5, 9] and lay.seq.tolist() == [0, 0, 1, 2]
    assert lay.index.tolist() == [[0, 1, 2, 3], [4, 10, 10, 10], [5, 10, 10, 10], [6, 7, 8, 9]]
    assert lay.slots.tolist() == [0, 1, 2, 3, 4, 8, 12, 13, 14, 15]
    with pytest.raises(ValueError, match="lengths >= 1"):
        chunk_layout((3, 0), 4)


def test_stages_abi_shapes_and_launch_rule():
    wl = KDAChunk()
    shape = (3, 1, 63, 17)
    inputs = wl.make_inputs(shape, seed=1)
    wl.validate_stages(shape, list(inputs))
    assert wl.evolved_stage().name == "state_pass" and wl.spec() == {"_target_": "workloads.kda.chunk.KDAChunk"}
    assert wl.scalars((3, 1, 63, 130)) == {"N": 3, "H": 3, "T": 194, "NCT": 1 + 1 + 3}
    sizes = {b.name: b.shape for b in wl.intermediates((3, 1, 63, 130))}
    assert sizes["h"] == (5, 3, 128, 128) and sizes["Aqk"] == (194, 3, 64) and sizes["chunk_offsets"] == (4,)
    assert wl.launch_dims((64, 5, 7), LaunchConfig(block=(32, 1, 1), knobs=(("bv", 32),))) == ((4, 64, 2), (32, 1, 1), 0)
    with pytest.raises(ValueError, match="bv=48 must divide 128"):
        wl.launch_dims((64, 5), LaunchConfig(knobs=(("bv", 48),)))
    with pytest.raises(ValueError, match=r"knob bv=8 not in"):
        wl.check_knobs({"bv": 8})
    assert len(wl.benchmark_shapes) == 6 and {17, 63, 65, 97, 1} <= {x for s in wl.gate_shapes for x in s[1:]}
    # the state pass's fewest bytes at (1, 64): kg, w, u, v_new 4 x 128 fp32 per token, one chunk's decay and h,
    # the state in and out, cu_seqlens and chunk_offsets
    assert wl.bytes_moved((1, 64)) == 4 * (64 * 4 * 128 + (128 + 128 * 128) + 2 * 128 * 128 + 4)

    class Broken(KDAChunk):
        stages = (KDAChunk.stages[1], KDAChunk.stages[0], KDAChunk.stages[2])

    with pytest.raises(ValueError, match=r"reads .* before any stage writes them"):
        Broken().validate_stages(shape, list(inputs))


def state_pass_launcher(wl, breach=None):
    """A gate launcher running the pipeline with a NumPy stand-in for the evolved kernel: ``breach`` makes the
    stand-in wrong in one way (what a broken candidate would do)."""

    def launch(inputs, outputs, shape, params=None):
        plan = wl.plan(inputs, outputs, shape, params, np)
        plan.run_before()
        b = plan.buffers
        if breach == "keeps_state":  # computes h and v_new but leaves the state buffer as it found it
            keep = b["state"].copy()
            wl.emulate_state_pass(b, shape)
            b["state"][...] = keep
        elif breach == "skips_last_h":  # never writes the last chunk's h (stays poisoned)
            saved = b["h"][-1].copy()
            wl.emulate_state_pass(b, shape)
            b["h"][-1] = saved
        elif breach == "no_decay":  # forgets the chunk decay
            b["gdecay"][...] = 1.0
            wl.emulate_state_pass(b, shape)
        else:
            wl.emulate_state_pass(b, shape)
        plan.run_after()

    return launch


def test_pipeline_passes_the_gate_and_lazy_or_wrong_state_passes_fail():
    """The gate sees the operation (o and the inout state) and runs the pipeline through the launcher: the fp32
    pipeline passes at chunk edges, odd lengths and a varlen batch with a length-1 sequence; a state pass that
    keeps the state, skips a write of h (the poison reaches o) or forgets the decay is rejected."""
    wl = KDAChunk()
    shapes = [(1, 65), (3, 1, 63, 17)]
    assert run_gate(wl, state_pass_launcher(wl), seed=3, shapes=shapes).status == Status.OK
    for breach, word in (("keeps_state", "state"), ("skips_last_h", "o"), ("no_decay", "")):
        bad = run_gate(wl, state_pass_launcher(wl, breach), seed=3, shapes=shapes)
        assert bad.status == Status.WRONG_RESULT and word in bad.reason, (breach, bad.reason)


def test_plan_poisons_the_evolved_outputs_and_leaves_the_inputs_alone():
    wl = KDAChunk()
    shape = (2, 70)
    inputs = wl.make_inputs(shape, seed=4)
    before = {k: v.copy() for k, v in inputs.items()}
    outs = {s.name: np.empty(s.shape, dtype=storage_dtype(s.dtype, np)) for s in wl.outputs(shape)}
    plan = wl.plan(inputs, outs, shape)
    assert isinstance(plan, StagePlan) and list(plan.buffers) == [p.name for p in wl.abi if p.kind != "scalar"]
    plan.run_before()
    assert np.isnan(plan.buffers["h"]).all() and np.isnan(plan.buffers["v_new"]).all()
    assert np.isfinite(plan.buffers["w"]).all() and plan.buffers["chunk_offsets"].tolist() == [0, 2]
    assert plan.buffers["state"] is inputs["state"]  # the operation's inout buffer itself
    assert all(np.array_equal(before[k].view(np.uint8), inputs[k].view(np.uint8)) for k in inputs)


def recording_stages(wl, events, breach=None):
    """A stand-in for the worker's launcher (``plan`` and ``kernel``) that records the order of the stages and
    the kernel in ``events``; the kernel is the NumPy state pass, wrong (no decay) with ``breach``."""

    class Stages:
        @staticmethod
        def plan(inputs, outs, shp, params=None):
            p = wl.plan(inputs, outs, shp, params, np)
            before, after = p.before, p.after
            p.before = lambda: (events.append("before"), before())
            p.after = lambda: (events.append("after"), after())
            return p

        @staticmethod
        def kernel(buffers, shp, params=None):
            events.append("kernel")
            if breach == "no_decay":
                buffers["gdecay"][...] = 1.0
            wl.emulate_state_pass(buffers, shp)

    return Stages


def test_timed_launch_runs_the_stages_outside_the_kernel_and_checks_the_pipeline_output():
    """The benchmark's TimedCall with ``stages``: the plan's ``before`` runs in ``prepare`` (untimed), the kernel
    alone in ``launch``, ``after`` in ``after`` before the checked rows are copied; the checked launches then
    match the reference of the operation (o), and a state pass that forgets the decay is caught."""
    from evaluators.gpu.timed_checks import InputSets, timed_call, verify_checked

    wl = KDAChunk()
    shape = (1, 70)
    sets = InputSets.make(wl, shape, [11, 12], np)
    outputs = {s.name: np.empty(s.shape, dtype=storage_dtype(s.dtype, np)) for s in wl.outputs(shape)}
    for breach, want_ok in ((None, True), ("no_decay", False)):
        events: list[str] = []
        stages = recording_stages(wl, events, breach)
        call, checked = timed_call(wl, None, sets, outputs, shape, np.random.default_rng(5), repeats=6, checks=2,
                                   stages=stages)
        for r in range(6):
            call.prepare(r)
            call.launch()
            call.after(r)
        assert events == ["before", "kernel", "after"] * 6
        assert (verify_checked(wl, sets, checked, shape) is None) == want_ok


def test_reference_rows_by_the_chunked_form_match_the_recurrence(monkeypatch):
    from workloads.kda import data

    wl = KDAChunk()
    inputs = wl.make_inputs((2, 40, 90), seed=6)
    rows = np.array([0, 39, 40, 129])
    full = wl.reference(inputs)
    monkeypatch.setattr(data, "CHUNKED_REFERENCE_ABOVE", 0)
    got = wl.reference_rows(inputs, rows)
    np.testing.assert_allclose(got["o"], full["o"][rows], rtol=1e-9, atol=1e-12)
    # the final state, whole (the checked timed launches sample its rows)
    np.testing.assert_allclose(got["state"], full["state"], rtol=1e-9, atol=1e-12)


def test_seeds_compile_and_are_estimated():
    from evaluators.static import StaticEvaluator

    wl = KDAChunk()
    naive, template = wl.seeds()
    assert naive.launch.knob("bv", 0) == 128 and template.launch.block == (32, 1, 1)
    ev = StaticEvaluator(wl, processes=1)
    for k in (naive, template):
        r = ev.evaluate(k)
        assert r.status == Status.OK and r.estimate and r.resources.spill_stores_bytes == 0, r.reason
    assert ev.evaluate(naive).objective == pytest.approx(1.0)


def test_evolve_runs_kda_chunk_on_the_static_evaluator(tmp_path, monkeypatch):
    from tests.static_run import run_static

    summary = run_static("kda_chunk", tmp_path, monkeypatch)
    assert summary["evaluations"] == 6 and summary["estimate"] is True and summary["best_objective"] > 1.0


def state_pass_twin(breach=None):
    """The evolved kernel emulated from its argument tuple (the ABI: kg, w, u, gdecay, cu_seqlens, chunk_offsets,
    state, h, v_new, N, H, T, NCT) on the CuPy stand-in's memory, with ``chunk_math.state_pass``; ``breach``
    "no_decay" forgets the chunk decay."""
    from tests import cupy_standin as sd
    from workloads.kda.chunk_math import chunk_layout, from_chunks, state_pass, to_chunks

    def twin(grid, block, args):
        n, h, t, nct = (int(a) for a in args[9:13])
        view = {name: sd.host_view(int(args[i]), shp, dt) for i, (name, shp, dt) in enumerate([
            ("kg", (t, h, 128), np.float32), ("w", (t, h, 128), np.float32), ("u", (t, h, 128), np.float32),
            ("gdecay", (nct, h, 128), np.float32), ("cu", (n + 1,), np.int32), ("co", (n + 1,), np.int32),
            ("state", (n, h, 128, 128), np.float32), ("h", (nct, h, 128, 128), np.float32),
            ("v_new", (t, h, 128), np.float32)])}
        lay = chunk_layout(tuple(np.diff(view["cu"]).tolist()), 64)
        assert view["co"].tolist() == lay.offsets.tolist() and grid == (128 // block[0], h, n)
        decay = np.ones_like(view["gdecay"]) if breach == "no_decay" else view["gdecay"]
        hh, vn, s = state_pass(*(to_chunks(view[k], lay, np) for k in ("kg", "w", "u")), decay, view["state"], lay)
        view["h"][...], view["v_new"][...], view["state"][...] = hh, from_chunks(vn, lay, np), s

    return twin


@pytest.mark.parametrize("breach", [None, "no_decay"])
def test_worker_evaluates_the_pipeline_on_the_cupy_standin(monkeypatch, breach):
    """The GPU worker's evaluate (gate with the inout state, fault check, benchmark input sets at unmapped
    pages, timed launches of the kernel alone, checked pipeline outputs) on the CPU stand-in for CuPy, with the
    reference stages running through the stand-in: an honest state pass is ok, one without the decay is not."""
    import contextlib
    import types
    from collections import OrderedDict

    from evaluators.gpu.gate_schedule import GateSchedule
    from evaluators.gpu.worker import WorkerState
    from tests import cupy_standin as sd

    cp = sd.install(monkeypatch)
    sd.KERNELS["kda_chunk_twin"] = state_pass_twin(breach)
    wl = KDAChunk()
    st = object.__new__(WorkerState)
    st.cp, st.workload, st.copy_gbps, st.flush = cp, wl, 4000.0, lambda: None
    st.device_name = "CPU stand-in"
    st.baselines = types.SimpleNamespace(notes={}, build=lambda inputs, shape: {})
    st.bench_sets, st.bench_outputs, st.set_builds, st.edge_sets = OrderedDict(), {}, 0, True
    st.timing_lock, st.baseline_us, st.baseline_fns, st.notes = contextlib.nullcontext(), {}, {}, {}
    st.naive, st.bench_seed = None, 7
    from evaluators.gpu.vmm import FaultCheckSets

    st.fault_sets = FaultCheckSets()  # the worker's: an inout buffer (the state) in a kept, writable mapping
    seed = wl.seeds()[1]
    from evaluators.gpu.args import param_types

    req = {"op": "evaluate", "cubin": b"kda_chunk_twin", "entry": seed.entry, "param_types": param_types(seed),
           "launch": seed.launch.to_json(), "gate": True, "gate_seed": 3, "gate_shapes": [(1, 65), (2, 1, 17)],
           "bench_shapes": [[1, 70, 3]], "warmup": 1, "repeats": 6, "baselines": "none", "check_output": "one",
           "gate_schedule": GateSchedule("rotating", 1, 5).to_json()}
    reply, fatal = st.evaluate(req)
    if breach is None:
        assert reply["status"] == "ok" and not fatal, reply["reason"]
        assert len(reply["shapes"]) == 1 and reply["gate_checks"] >= 4
    else:
        assert reply["status"] == "wrong_result" and not fatal, reply
