"""The gate batch's inputs drawn together (``Workload.make_inputs_many``; RMSNorm's device form) on the CPU
stand-in for CuPy: every item keeps its distribution (the same zero rows, NaN and Inf positions and w pattern as
``make_inputs`` for its seed; the scale of its normal values), the draws are fresh per seed and deterministic,
cost a handful of device operations for the whole plan, and the batched gate still rejects kernels that drop eps
or flush non-finite rows."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.gate import SMALL_CHECK_ELEMENTS, gate_plan, run_gate
from tests import cupy_standin as sd
from tests.test_standin_dryrun import rms_bits
from workloads.rmsnorm import LARGE_SCALE, TINY_SCALE, RMSNorm


@pytest.fixture
def cp(monkeypatch):
    return sd.install(monkeypatch)


def small_plan(wl, seed):
    return [p for p in gate_plan(wl, seed) if int(np.prod(p[0])) <= SMALL_CHECK_ELEMENTS]


def host(a):
    return np.asarray(a.view(np.ndarray))


def values(x_bits, dtype):
    from workloads.rmsnorm_check import element_value_host

    return element_value_host(x_bits.view(np.uint32 if dtype == "fp32" else np.uint16), dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_each_item_keeps_its_distribution_and_the_host_draws_of_its_seed(cp, dtype):
    wl = RMSNorm(dtype)
    plan = small_plan(wl, 5)
    assert len(plan) == 36
    sd.COUNTS.clear()
    many = wl.make_inputs_many(plan, cp)
    assert sd.COUNTS["op"] <= 25 and sd.COUNTS["sync"] == 0  # ~400 one item at a time
    for (shape, dist, seed), got in zip(plan, many):
        one = wl.make_inputs(shape, seed, dist, cp)
        xb, x1 = values(host(got["x"]), dtype), values(host(one["x"]), dtype)
        assert got["x"].shape == shape and got["w"].shape == (shape[1],)
        assert np.array_equal(np.isnan(xb), np.isnan(x1)) and np.array_equal(np.isinf(xb), np.isinf(x1))
        assert np.array_equal(xb[np.isinf(xb)], x1[np.isinf(x1)])  # the same signed infinities
        assert np.array_equal((xb == 0).all(axis=1), (x1 == 0).all(axis=1))  # the same zero rows
        w, w1 = host(got["w"]), host(one["w"])
        assert np.array_equal(w == 0, w1 == 0) and w[0] == 0  # the same zeros of w (its host draw)
        if w.size >= 1000:
            assert 0.04 < (w < 0).mean() < 0.12  # about 1/16 negated, and the rare 1 + 0.5 g < 0
        finite = xb[np.isfinite(xb) & (xb != 0)]
        scale = {"large": LARGE_SCALE[dtype], "tiny": TINY_SCALE}.get(dist, 1.0)
        if finite.size >= 500:
            assert 0.8 < finite.std() / scale < 1.2, (shape, dist)
        assert not np.array_equal(host(got["x"]), host(one["x"])) or finite.size == 0  # another stream


def test_draws_are_deterministic_per_plan_and_fresh_for_other_seeds(cp):
    wl = RMSNorm("bf16")
    a = wl.make_inputs_many(small_plan(wl, 5), cp)
    b = wl.make_inputs_many(small_plan(wl, 5), cp)
    c = wl.make_inputs_many(small_plan(wl, 6), cp)
    assert all(np.array_equal(host(p["x"]), host(q["x"])) for p, q in zip(a, b))
    assert not any(p["x"].shape == q["x"].shape and np.array_equal(host(p["x"]), host(q["x"])) for p, q in zip(a, c))


def test_host_path_is_make_inputs_item_by_item():
    wl = RMSNorm("bf16")
    plan = small_plan(wl, 2)[:5]
    for (shape, dist, seed), got in zip(plan, wl.make_inputs_many(plan, np)):
        one = wl.make_inputs(shape, seed, dist)
        assert all(np.array_equal(np.asarray(got[k]).view(np.uint8), np.asarray(one[k]).view(np.uint8)) for k in one)


def twin(eps_of=lambda eps: eps, flush_nonfinite=False):
    """An emulated RMSNorm launch (x, w, y, M, N, eps) computing with ``eps_of(eps)``; ``flush_nonfinite`` writes
    zeros where a row holds a NaN or Inf (a kernel that sanitises its input)."""
    def run(grid, block, args):
        x_ptr, w_ptr, y_ptr, m, n, eps = (int(args[0]), int(args[1]), int(args[2]), int(args[3]), int(args[4]),
                                          float(args[5]))
        x = sd.host_view(x_ptr, (m, n), np.uint16).copy()
        if flush_nonfinite:
            bad = ((x & 0x7F80) == 0x7F80).any(axis=1)
            x[bad] = 0
        sd.host_view(y_ptr, (m, n), np.uint16)[...] = rms_bits(x, sd.host_view(w_ptr, (n,), np.float32),
                                                              eps_of(eps))
    return run


@pytest.mark.parametrize("cheat,what", [(twin(), None), (twin(lambda e: 1e-30), "tiny"),
                                        (twin(flush_nonfinite=True), "nonfinite")])
def test_the_batched_gate_passes_the_honest_kernel_and_rejects_the_cheats(cp, cheat, what):
    from evaluators.gpu.args import param_types
    from evaluators.gpu.gate_schedule import GateSchedule
    from evaluators.gpu.worker import make_launcher

    wl = RMSNorm("bf16")
    sd.KERNELS["k"] = cheat
    seed = wl.seeds()[1]
    run = make_launcher(wl, cp, sd._Function("k"), param_types(seed), seed.launch.to_json())
    shapes = [s for s in wl.gate_shapes if int(np.prod(s)) <= SMALL_CHECK_ELEMENTS]
    res = run_gate(wl, run, 11, shapes, cp, GateSchedule("rotating", 1, 3))
    if what is None:
        assert res.passed, res.reason
    else:
        assert not res.passed and what in res.reason, res.reason
