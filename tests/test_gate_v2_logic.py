"""Gate v2 on the CPU: numpy launchers that cheat the way the gate cases do, each caught by its run."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from evaluators.gpu.gate import check_batch, gate_plan, run_gate
from evaluators.types import Status
from population.kernel import LaunchConfig
from workloads.base import OutputSpec, ParamSpec, Shape, Workload
from workloads.dtypes import from_float, to_float64
from workloads.rmsnorm import RMSNorm

SMALL = [(1, 192), (7, 760), (199, 1001)]


def rms(x, w, eps):
    xf = to_float64(np.asarray(x), "bf16").astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        r = 1.0 / np.sqrt((xf * xf).sum(axis=1, dtype=np.float32) / np.float32(xf.shape[1]) + np.float32(eps))
        return from_float(xf * r[:, None] * w, "bf16")


def honest(inputs, outputs, shape, params):
    outputs["y"][...] = rms(inputs["x"], inputs["w"], params["eps"])


def test_honest_kernel_passes_all_four_runs():
    res = run_gate(RMSNorm("bf16"), honest, seed=3, shapes=SMALL)
    assert res.status == Status.OK, res.reason


def test_poison_sniffer_is_caught_when_the_output_holds_finite_values():
    def sniff(inputs, outputs, shape, params):
        y = outputs["y"]
        if np.isnan(to_float64(y.reshape(-1)[:1], "bf16")).all():
            honest(inputs, outputs, shape, params)  # a checked launch: NaN-poisoned output

    res = run_gate(RMSNorm("bf16"), sniff, seed=4, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "run 3 (outputs pre-filled with finite values)" in res.reason


def test_memoising_on_the_buffer_addresses_is_caught_by_the_stale_answer_run():
    seen: set[tuple[int, int]] = set()

    def memo(inputs, outputs, shape, params):
        key = (inputs["x"].__array_interface__["data"][0], outputs["y"].__array_interface__["data"][0])
        if key in seen:
            return  # "same call as before": keep the answer already in y
        seen.add(key)
        honest(inputs, outputs, shape, params)

    wl = RMSNorm("bf16")
    checks = check_batch(wl, memo, gate_plan(wl, 5, SMALL))
    assert checks[-1].failed == "correctness"
    assert "run 4" in checks[-1].detail and "answer for the old inputs" in checks[-1].detail
    seen.clear()
    assert run_gate(wl, memo, seed=5, shapes=SMALL).status == Status.WRONG_RESULT


def test_ignoring_eps_is_caught_on_tiny_rows():
    def no_eps(inputs, outputs, shape, params):
        outputs["y"][...] = rms(inputs["x"], inputs["w"], 1e-6)  # the default eps, whatever is passed

    res = run_gate(RMSNorm("bf16"), no_eps, seed=6, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "tiny inputs" in res.reason


def test_flushing_nonfinite_rows_to_zero_is_caught():
    def flush(inputs, outputs, shape, params):
        y = to_float64(rms(inputs["x"], inputs["w"], params["eps"]), "bf16")
        outputs["y"][...] = from_float(np.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0), "bf16")

    res = run_gate(RMSNorm("bf16"), flush, seed=7, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "nonfinite inputs" in res.reason


def test_order_dependent_result_is_caught_by_the_third_run():
    calls = {"n": 0}
    wl = RMSNorm("bf16")
    per_run = len(gate_plan(wl, 8, [(7, 760)]))

    def drifts(inputs, outputs, shape, params):
        calls["n"] += 1
        honest(inputs, outputs, shape, params)
        if 2 * per_run < calls["n"] <= 3 * per_run and shape == (7, 760):  # only in the third run
            b = outputs["y"].view(np.uint16)
            b[2, 5] ^= 1  # one ulp: within tolerance, not bitwise equal

    res = run_gate(wl, drifts, seed=8, shapes=[(7, 760)])
    assert res.status == Status.NONDETERMINISTIC and "run 3" in res.reason and "differ in 1 of" in res.reason


def test_out_of_bounds_read_masked_by_zero_reads_nan_padding():
    def reads_past_x(inputs, outputs, shape, params):
        honest(inputs, outputs, shape, params)
        x = inputs["x"]
        if x.base is not None:  # in the batch: the padded arena
            raw = np.asarray(x.base).view(np.uint8)
            end = x.__array_interface__["data"][0] - raw.__array_interface__["data"][0] + x.nbytes
            past = raw[end:end + 2].view(np.uint16).copy().view(x.dtype)  # the element after x
            y = to_float64(outputs["y"], "bf16")
            y[-1, -1] += 0.0 * float(past[0])
            outputs["y"][...] = from_float(y, "bf16")

    res = run_gate(RMSNorm("bf16"), reads_past_x, seed=9, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT and "nan check failed" in res.reason


class Accumulate(Workload):
    """A toy workload with an inout state: s += a * x, and y = 2 * x."""

    name, entry, dtype = "accumulate", "acc", "fp32"
    abi = (ParamSpec("x", "input", "u64"), ParamSpec("s", "inout", "u64"), ParamSpec("y", "output", "u64"),
           ParamSpec("n", "scalar", "u32"), ParamSpec("a", "scalar", "f32"))
    knob_space: dict = {}
    default_knobs: dict = {}
    search_shapes = benchmark_shapes = heldout_shapes = [(64,)]
    gate_shapes = [(5,), (64,)]
    distributions = ("normal",)
    primary_baseline = "none"
    scalar_draws = {"a": (0.5, 2.0)}

    def seeds(self):
        return []

    def instantiate(self, knobs):
        raise ValueError("no template")

    def launch_dims(self, shape: Shape, launch: LaunchConfig):
        return (1, 1, 1), (32, 1, 1), 0

    def elements_per_cta_sweep(self, shape, launch):
        return shape[0]

    def bytes_moved(self, shape):
        return 16 * shape[0]

    def flops(self, shape):
        return 2 * shape[0]

    def make_inputs(self, shape, seed, distribution="normal", xp: ModuleType = np):
        rng = np.random.default_rng(seed)
        return {"x": xp.asarray(rng.standard_normal(shape, dtype=np.float32)),
                "s": xp.asarray(rng.standard_normal(shape, dtype=np.float32))}

    def outputs(self, shape):
        return [OutputSpec("y", tuple(shape), "fp32")]

    def scalars(self, shape, params: Mapping[str, float] | None = None):
        return {"n": shape[0], "a": (params or {}).get("a", 1.0)}

    def reference(self, inputs, xp=np, params=None) -> dict[str, Any]:
        a = (params or {}).get("a", 1.0)
        x, s = inputs["x"].astype(np.float64), inputs["s"].astype(np.float64)
        return {"y": 2 * x, "s": s + np.float64(np.float32(a)) * x}

    @property
    def tolerance(self):
        return (1e-5, 1e-5)


def test_inout_state_is_judged_by_its_final_value_and_restored_between_runs():
    def right(inputs, outputs, shape, params):
        outputs["y"][...] = 2 * inputs["x"]
        inputs["s"][...] = inputs["s"] + np.float32(params["a"]) * inputs["x"]

    res = run_gate(Accumulate(), right, seed=1)
    assert res.status == Status.OK, res.reason
    assert len(res.checks) == 2

    def forgets_state(inputs, outputs, shape, params):
        outputs["y"][...] = 2 * inputs["x"]

    res = run_gate(Accumulate(), forgets_state, seed=1)
    assert res.status == Status.WRONG_RESULT and "elements of s out of tolerance" in res.reason

    def writes_x(inputs, outputs, shape, params):
        right(inputs, outputs, shape, params)
        inputs["x"][0] += 1

    res = run_gate(Accumulate(), writes_x, seed=1)
    assert res.status == Status.WRONG_RESULT and "inputs_unchanged" in res.reason and "['x']" in res.reason
    import pytest

    with pytest.raises(ValueError, match="inout"):
        check_batch(Accumulate(), right, gate_plan(Accumulate(), 1))


def test_large_checks_compare_sampled_rows_and_count_the_poison_everywhere(monkeypatch):
    import evaluators.gpu.gate as gate

    monkeypatch.setattr(gate, "SMALL_CHECK_ELEMENTS", 100)
    monkeypatch.setattr(gate, "SAMPLE_ROWS", 40)
    wl = RMSNorm("bf16")
    shape = (400, 64)

    def every_fourth_row_wrong(inputs, outputs, shape, params):
        honest(inputs, outputs, shape, params)
        outputs["y"][3::4] = outputs["y"][2::4]

    chk = gate.check_shape(wl, every_fourth_row_wrong, shape, "normal", 3)
    assert chk.failed == "correctness" and "sampled rows" in chk.detail

    def one_element_unwritten(inputs, outputs, shape, params):
        keep = outputs["y"][217, 5].copy()
        honest(inputs, outputs, shape, params)
        outputs["y"][217, 5] = keep  # row 217 is most likely not sampled: the poison count over all elements sees it

    chk = gate.check_shape(wl, one_element_unwritten, shape, "normal", 3)
    assert chk.failed == "unwritten" and "1 of 25600 elements" in chk.detail
    assert gate.check_shape(wl, honest, shape, "normal", 3).failed is None
