"""KDA fused recurrent forward (workloads/kda): the JAX float64 reference against a plain NumPy loop, the
tolerance against an fp32 implementation of the recurrence (and two wrong ones), shapes, launch rule, seeds,
and ``python -m evolve workload=kda_recurrent`` on the static evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.gate import within_tolerance
from population.kernel import LaunchConfig
from workloads.dtypes import from_float, to_float64
from workloads.kda import KDARecurrent
from workloads.kda.recurrent import BENCHMARK_SHAPES, VARLEN, D
from workloads.kda.reference import kda_reference, kda_reference_loop


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


@pytest.mark.parametrize("lens,extremes", [([1], False), ([5, 1, 3], False), ([4, 2], True)])
def test_jax_reference_matches_the_numpy_loop(lens, extremes):
    a = tiny(lens, extremes=extremes)
    o1, s1 = kda_reference(**a)
    o2, s2 = kda_reference_loop(**a)
    np.testing.assert_allclose(o1, o2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s1, s2, rtol=1e-12, atol=1e-12)
    o3, s3 = kda_reference(**a, pairs=[(len(lens) - 1, 1)])  # one (sequence, head) pair only
    lo = int(a["cu_seqlens"][-2])
    np.testing.assert_allclose(o3[lo:, 1], o2[lo:, 1], rtol=1e-12, atol=1e-12)
    assert np.isnan(o3[:, 0]).all() and np.isnan(s3[:, 0]).all()
    with pytest.raises(ValueError, match="cu_seqlens must rise from 0"):
        kda_reference(**{**a, "cu_seqlens": a["cu_seqlens"][::-1]})


def test_the_recurrence_by_hand_for_one_token():
    """K = V = 1, one token: S' = e^g S0, u = b (v - S' k/|k|), S = S' + k/|k| u, o = S q/|q| / sqrt(1)."""
    a = dict(q=[[[2.0]]], k=[[[-3.0]]], v=[[[0.5]]], g_raw=[[[0.0]]], beta_raw=[[0.0]], A_log=[0.0],
             dt_bias=[0.0], cu_seqlens=[0, 1], state=[[[[0.25]]]])
    gd = np.exp(-5.0 * 0.5)  # sigmoid(1 * 0) = 1/2
    kn, qn = -3 / np.sqrt(9 + 1e-6), 2 / np.sqrt(4 + 1e-6)
    s1 = gd * 0.25
    s = s1 + kn * 0.5 * (0.5 - s1 * kn)
    o, st = kda_reference(**{k: np.asarray(v, dtype=np.float64) for k, v in a.items()})
    assert st[0, 0, 0, 0] == pytest.approx(s, rel=1e-12) and o[0, 0, 0] == pytest.approx(s * qn, rel=1e-12)


def recurrence_f32(inputs, normalise_k=True, sigmoid_beta=True):
    """An fp32 implementation of the kernel's math (vectorised over heads), as a correct kernel computes it."""
    f = {n: to_float64(inputs[n], "bf16").astype(np.float32) for n in ("q", "k", "v", "g", "beta")}
    a = np.exp(inputs["A_log"]).astype(np.float32)[:, None]
    bias = inputs["dt_bias"].reshape(a.shape[0], D)
    state = inputs["state"].copy()
    o = np.zeros(f["v"].shape, np.float32)
    cu = inputs["cu_seqlens"]
    scale = np.float32(D ** -0.5)
    with np.errstate(over="ignore", invalid="ignore"):  # exp(-a * (g + bias)) overflows to inf at g = -30
        for n in range(len(cu) - 1):
            state[n] = _sequence_f32(f, a, bias, state[n], o, cu[n], cu[n + 1], scale, normalise_k, sigmoid_beta)
    return {"o": from_float(o, "bf16"), "state": state}


def _sequence_f32(f, a, bias, s, o, lo, hi, scale, normalise_k, sigmoid_beta):
    """One sequence of ``recurrence_f32``: returns its final state, writes its rows of ``o``."""
    for t in range(lo, hi):
        q, k = f["q"][t], f["k"][t]
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + np.float32(1e-6))
        if normalise_k:
            k = k / np.sqrt((k * k).sum(-1, keepdims=True) + np.float32(1e-6))
        dec = np.exp(np.float32(-5) / (1 + np.exp(-a * (f["g"][t] + bias))))
        b = 1 / (1 + np.exp(-f["beta"][t])) if sigmoid_beta else f["beta"][t]
        s = s * dec[:, :, None]
        u = b[:, None] * (f["v"][t] - np.einsum("hk,hkv->hv", k, s))
        s = s + k[:, :, None] * u[:, None, :]
        o[t] = np.einsum("hk,hkv->hv", q * scale, s)
    return s


def _passes(wl, inputs, out):
    ref = wl.reference(inputs)
    atol, rtol = wl.tolerance
    return (within_tolerance(out["o"], ref["o"], "bf16", atol, rtol)
            and within_tolerance(out["state"], ref["state"], "fp32", atol, rtol))


@pytest.mark.parametrize("shape", [(1, 1), (2, 63), (3, 1, 63, 17), (1, 2048)])
def test_tolerance_passes_an_fp32_recurrence_and_rejects_wrong_math(shape):
    wl = KDARecurrent()
    for i, dist in enumerate(wl.distributions):
        inputs = wl.make_inputs(shape, seed=11 + i, distribution=dist)
        assert _passes(wl, inputs, recurrence_f32(inputs)), (shape, dist)
    inputs = wl.make_inputs(shape, seed=5)
    assert not _passes(wl, inputs, recurrence_f32(inputs, normalise_k=False))
    assert not _passes(wl, inputs, recurrence_f32(inputs, sigmoid_beta=False))


def test_shapes_inputs_and_launch_rule():
    wl = KDARecurrent()
    assert wl.spec() == {"_target_": "workloads.kda.recurrent.KDARecurrent"}
    assert len(BENCHMARK_SHAPES) == 12 and (96, *VARLEN) in BENCHMARK_SHAPES and (64, *(1,) * 256) in BENCHMARK_SHAPES
    assert any(1 in s[1:] and len(s) > 2 for s in wl.gate_shapes) and {17, 63, 97} <= {x for s in wl.gate_shapes for x in s[1:]}
    inputs = wl.make_inputs((3, 1, 63, 17), seed=1)
    assert inputs["q"].shape == (81, 3, 128) and inputs["q"].dtype.name == "bfloat16"
    assert inputs["state"].shape == (3, 3, 128, 128) and inputs["state"].dtype == np.float32
    assert inputs["cu_seqlens"].tolist() == [0, 1, 64, 81] and inputs["cu_seqlens"].dtype == np.int32
    assert wl.scalars((3, 1, 63, 17)) == {"N": 3, "H": 3, "T": 81, "scale": 128 ** -0.5}
    assert [o.shape for o in wl.outputs((3, 1, 63, 17))] == [(81, 3, 128)]
    lc = LaunchConfig(block=(128, 1, 1), knobs=(("bv", 16),))
    assert wl.launch_dims((64, 5, 7), lc) == ((8, 64, 2), (128, 1, 1), 0)
    with pytest.raises(ValueError, match="bv=48 must divide 128"):
        wl.launch_dims((64, 5), LaunchConfig(knobs=(("bv", 48),)))
    with pytest.raises(ValueError, match=r"\(H, L_1, \.\.\., L_N\)"):
        wl.launch_dims((64,), lc)
    with pytest.raises(ValueError, match=r"knob warps=16 not in \(1, 2, 4, 8\)"):
        wl.check_knobs({"cols": 16, "warps": 16})
    ext = wl.make_inputs((1, 40), seed=2, distribution="gate_extremes")
    assert set(np.unique(to_float64(ext["g"], "bf16"))) == {-30.0, 30.0}
    # the audit of a large shape samples (sequence, head) pairs, the longest sequence among them
    big = {"cu_seqlens": np.array([0, 5, 9000]), "A_log": np.zeros(64, np.float32), "q": inputs["q"]}
    pairs = wl.sample_pairs(big, 4)
    assert len(pairs) == 4 and any(n == 1 for n, _ in pairs) and pairs == wl.sample_pairs(big, 4)


def test_seeds_compile_and_are_estimated():
    from evaluators.static import StaticEvaluator
    from evaluators.types import Status

    wl = KDARecurrent()
    naive, template = wl.seeds()
    assert naive.launch.knob("bv", 0) == 128 and template.launch.knob("bv", 0) == 16
    ev = StaticEvaluator(wl, processes=1)
    for k in (naive, template, wl.instantiate({"cols": 8, "warps": 2, "prefetch": 0})):
        r = ev.evaluate(k)
        assert r.status == Status.OK and r.estimate and r.resources.spill_stores_bytes == 0, r.reason
    assert ev.evaluate(naive).objective == pytest.approx(1.0)


def test_evolve_runs_kda_on_the_static_evaluator(tmp_path, monkeypatch):
    from tests.static_run import run_static

    summary = run_static("kda_recurrent", tmp_path, monkeypatch)
    assert summary["evaluations"] == 6 and summary["estimate"] is True and summary["best_objective"] > 1.0


def test_gate_checks_the_inout_state_on_the_cpu():
    """The gate with a NumPy launcher doing the recurrence in fp32: it passes (the state, an inout buffer, is
    restored between the two launches, left out of the inputs-unchanged check and compared at its final value),
    and a kernel that leaves the state as it found it, or a wrong recurrence, is rejected."""
    from evaluators.gpu.gate import run_gate
    from evaluators.types import Status

    wl = KDARecurrent()
    shapes = [(1, 1), (2, 17), (3, 1, 63, 17)]

    def launcher(**kw):
        def launch(inputs, outputs, shape, params=None):
            host = {k: np.asarray(v) for k, v in inputs.items()}
            out = recurrence_f32(host, **kw)
            outputs["o"][...] = out["o"]
            inputs["state"][...] = out["state"]
        return launch

    def forgets_state(inputs, outputs, shape, params=None):
        outputs["o"][...] = recurrence_f32({k: np.asarray(v) for k, v in inputs.items()})["o"]

    assert run_gate(wl, launcher(), seed=3, shapes=shapes).status == Status.OK
    bad = run_gate(wl, forgets_state, seed=3, shapes=shapes)
    assert bad.status == Status.WRONG_RESULT and "state" in bad.reason
    assert run_gate(wl, launcher(sigmoid_beta=False), seed=3, shapes=shapes).status == Status.WRONG_RESULT

    def scribbles_on_k(inputs, outputs, shape, params=None):
        launcher()(inputs, outputs, shape, params)
        inputs["k"][...] = inputs["q"]

    bad = run_gate(wl, scribbles_on_k, seed=3, shapes=shapes)
    assert bad.status == Status.WRONG_RESULT and "inputs_unchanged" in bad.reason and "'k'" in bad.reason


def test_template_operator_edits_apply_to_the_kda_template():
    """A KNOBS edit re-instantiates the template from the parent's launch knobs (which carry the derived bv)."""
    from evolve.operators.base import OperatorContext
    from evolve.operators.template import TemplateOperator
    from population.edits import apply_script

    wl = KDARecurrent()
    parent = wl.seeds()[1]
    op = TemplateOperator(workload=wl)
    script = op.propose(parent, OperatorContext(workload=wl), np.random.default_rng(1))
    child = apply_script(parent, script, operator="template", instantiate=wl.instantiate)
    cols, warps = child.launch.knob("cols", 0), child.launch.knob("warps", 0)
    assert child.launch.knob("bv", 0) == cols * warps and child.launch.block == (32 * warps, 1, 1)
    assert dict(child.launch.knobs) != dict(parent.launch.knobs)


def test_gpu_experiment_draws_large_checks_on_the_device_and_samples_them():
    """experiments/kda_h200.py's correctness plan (the step that ran out of its 55 s on the H200, 2026-12-01,
    at the decode batch 256 x H = 96: a 1.6 GB state drawn with NumPy, the float64 reference of 24,576 pairs and
    full-state comparisons): every check whose reference covers more than 2^16 token-heads or 2^10 states is
    drawn on the GPU and compared at two sampled (sequence, head) pairs; the others draw at most 128 MiB on the
    host."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "kda_h200", Path(__file__).resolve().parents[1] / "experiments" / "kda_h200.py")
    exp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exp)
    wl = KDARecurrent()
    plan = exp.check_plan(wl)
    assert ((96, *(1,) * 256), "normal", 100, True) in plan and ((8, *VARLEN), "normal", 100, False) in plan
    assert not any(s in wl.heldout_shapes for s, *_ in plan)
    with_heldout = exp.check_plan(wl, heldout=True)  # --heldout: a search's product is checked there too
    assert with_heldout[:len(plan)] == plan and ((96, 12288), "long_memory", 201, True) in with_heldout
    assert {s for s, *_ in with_heldout[len(plan):]} == set(map(tuple, wl.heldout_shapes))
    for shape, _, _, big in with_heldout:
        h, lens = shape[0], shape[1:]
        host_bytes = sum(lens) * h * (4 * D + 1) * 2 + len(lens) * h * D * D * 4  # bf16 tensors + fp32 state
        if not big:
            assert host_bytes <= 128 << 20 and sum(lens) * h <= 1 << 16 and len(lens) * h <= 1 << 10, shape
    assert exp.is_big((96, *(1,) * 256)) and not exp.is_big((3, 1, 63, 17))


def test_study_helpers_shared_by_the_kda_gpu_experiments():
    """experiments/kda_check.py (both KDA GPU studies) and workloads.dtypes.to_device: knob sets parsed, the
    kernels named, the error measures and the pass rule, bf16 host arrays sent as their uint16 bits."""
    from experiments.kda_check import error_stats, kernels_of, parse_variants, passes, rms_ratio, tol_units
    from workloads.dtypes import to_device

    assert parse_variants("cols=8,warps=2; ;bv=128") == [{"cols": 8, "warps": 2}, {"bv": 128}]
    assert list(kernels_of(KDARecurrent(), "cols=8,warps=2")) == ["naive", "template", "template cols=8,warps=2"]
    ref = np.array([1.0, -2.0, np.nan, 4.0])
    out = np.array([1.0, -2.0, 7.0, 4.4])
    assert rms_ratio(out, ref) == pytest.approx(0.4 / np.sqrt(21))  # the NaN reference element left out
    assert tol_units(out, ref, 0.1, 0.0, 0.0) == pytest.approx(4.0)
    assert tol_units(out, ref, 0.1, 0.0, np.full(4, 0.1)) == pytest.approx(2.0)
    row = error_stats(out, ref, out, ref, 0.1, 0.0, np.full(4, 0.1))
    assert row == {"o_tol": pytest.approx(2.0), "o_rms": rms_ratio(out, ref), "state_tol": pytest.approx(4.0),
                   "state_rms": rms_ratio(out, ref)}
    assert not passes(row) and passes({"o_tol": 1.0, "state_tol": 0.5, "o_rms": 4.9e-3, "state_rms": 0.0})
    host = KDARecurrent().make_inputs((1, 3), 0)
    dev = to_device(host, np)
    assert dev["q"].dtype == np.uint16 and np.array_equal(dev["q"], host["q"].view(np.uint16))
    assert dev["state"].dtype == np.float32 and np.array_equal(dev["state"], host["state"])


def test_the_kda_study_takes_a_search_runs_best_kernel_from_its_store(tmp_path):
    """``kernels_of(..., store=)``: the run's best ok kernel, by objective, joins the studied kernels (how
    experiments/kda_h200.py --store checks a search's product at every benchmark shape against fla)."""
    from archive.store import CandidateRow, Store
    from evaluators.types import EvalResult, Status
    from experiments.kda_check import kernels_of

    wl = KDARecurrent()
    store = Store(tmp_path / "store.sqlite")
    fast = wl.instantiate({"layout": 1, "cols": 8})
    for k, obj in ((wl.seeds()[0], 1.0), (fast, 1.4), (wl.seeds()[1], 1.2)):
        store.add_candidate(CandidateRow.from_eval(k, EvalResult(status=Status.OK, objective=obj)))
    store.close()
    got = kernels_of(wl, "", str(tmp_path / "store.sqlite"))
    assert list(got) == ["naive", "template", "search #2"] and got["search #2"].ptx == fast.ptx
    empty = Store(tmp_path / "empty.sqlite")
    empty.close()
    with pytest.raises(ValueError, match="no ok kernel"):
        kernels_of(wl, "", str(tmp_path / "empty.sqlite"))


def test_correctness_row_and_its_line():
    """experiments/kda_check.correctness_row / row_line (both KDA GPU studies): the row's keys and values, the
    lengths cut to max_lengths, the pass flag, and the printed line's columns."""
    from experiments.kda_check import correctness_row, row_line

    ref = np.array([1.0, -2.0, np.nan, 4.0])
    out = np.array([1.0, -2.0, 7.0, 4.0])
    row = correctness_row("naive", (2, 5, 7, 9), "normal", out, ref, out, ref, 0.1, 0.0, None, max_lengths=2)
    assert row == {"kernel": "naive", "heads": 2, "lengths": [5, 7], "distribution": "normal", "o_tol": 0.0,
                   "o_rms": 0.0, "state_tol": 0.0, "state_rms": 0.0, "sampled_pairs": None, "ok": True}
    assert row_line(row, (2, 5, 7, 9), 40, 8) == (
        "naive      40      (2, 3 seqs, T=21)         normal    0.000  0.00e+00    0.000  0.00e+00 yes")
    bad = correctness_row("t", (1, 3), "uniform", out + 1, ref, out, ref, 0.1, 0.0, [(0, 0)])
    assert bad["lengths"] == [3] and bad["sampled_pairs"] == [(0, 0)] and bad["ok"] is False
    # every checked element off by 1; the bf16 half-ulp allowance of ref=1.0 is 2**-8, the smallest
    assert bad["o_tol"] == pytest.approx(1 / (0.1 + 2**-8)) and bad["state_tol"] == 0.0
