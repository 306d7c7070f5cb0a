"""Workload data API used by gate v2: ParamSpec kinds, drawn scalars, non-finite and tiny inputs, the
non-finite comparator."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.gate import compare, poison_bits
from workloads.base import ParamSpec
from workloads.dtypes import from_float, to_float64
from workloads.rmsnorm import EPS_DRAWS, TINY_SCALE, RMSNorm


def test_paramspec_kinds_include_inout_and_reject_others():
    assert ParamSpec("state", "inout", "u64").kind == "inout"
    with pytest.raises(ValueError, match="input/output/inout/scalar"):
        ParamSpec("state", "inplace", "u64")
    with pytest.raises(ValueError, match="64-bit pointer"):
        ParamSpec("state", "inout", "u32")
    wl = RMSNorm()
    assert wl.buffer_names("input") == ["x", "w"] and wl.buffer_names("output") == ["y"]
    assert wl.buffer_names("inout") == []
    with pytest.raises(ValueError, match="unknown ParamSpec kind"):
        wl.buffer_names("state")


def test_draw_params_is_deterministic_per_seed_and_covers_every_value():
    wl = RMSNorm()
    draws = [wl.draw_params(s)["eps"] for s in range(200)]
    assert draws == [wl.draw_params(s)["eps"] for s in range(200)]
    assert set(draws) == set(EPS_DRAWS)
    assert wl.scalars((3, 8), {"eps": 1e-3})["eps"] == 1e-3 and wl.scalars((3, 8))["eps"] == 1e-6


def test_reference_uses_the_drawn_eps():
    wl = RMSNorm("fp32")
    inp = wl.make_inputs((4, 64), 3, "tiny")
    x = inp["x"].astype(np.float64)
    assert 0.3 * TINY_SCALE < np.sqrt((x * x).mean()) < 3 * TINY_SCALE
    for eps in EPS_DRAWS:
        want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + float(np.float32(eps))) * inp["w"]
        np.testing.assert_allclose(wl.reference(inp, params={"eps": eps})["y"], want, rtol=1e-12)
    small, big = (wl.reference(inp, params={"eps": e})["y"] for e in (1e-6, 1e-3))
    assert np.abs(small).max() > 10 * np.abs(big).max()  # eps matters on tiny rows


def test_weights_have_zeros_and_negatives():
    w = RMSNorm().make_inputs((2, 4096), 5)["w"]
    assert w[0] == 0 and w[1] < 0
    assert 0.03 < (w == 0).mean() < 0.1 and (w < 0).mean() > 0.05


def test_nonfinite_inputs_and_reference_follow_ieee_as_torch_does():
    wl = RMSNorm("bf16")
    inp = wl.make_inputs((64, 100), 9, "nonfinite")
    x = to_float64(inp["x"], "bf16")
    nan_rows = np.isnan(x).any(axis=1)
    inf_rows = np.isinf(x).any(axis=1) & ~nan_rows
    assert nan_rows[0] and inf_rows[1] and nan_rows.sum() >= 2 and inf_rows.sum() >= 2
    y = wl.reference(inp)["y"]
    assert np.isnan(y[nan_rows]).all()
    for r in np.flatnonzero(inf_rows):
        at_inf = np.isinf(x[r])
        assert np.isnan(y[r][at_inf]).all()
        rest = y[r][~at_inf]
        assert (rest == 0).all()
    finite = ~(nan_rows | inf_rows)
    assert np.isfinite(y[finite]).all()
    torch = pytest.importorskip("torch")
    xt = torch.from_numpy(x)
    want = torch.nn.functional.rms_norm(xt, (100,), torch.from_numpy(inp["w"].astype(np.float64)), eps=1e-6)
    np.testing.assert_array_equal(np.isnan(want.numpy()), np.isnan(y))


def test_comparator_accepts_nan_exactly_where_the_reference_is_nan():
    ref = np.array([[1.0, np.nan, 0.0, 2.0]])
    good = from_float(np.array([[1.0, np.nan, 0.0, 2.0]], np.float32), "bf16")
    assert compare(good, ref, "bf16", 3e-2, 1e-3).ok
    extra_nan = from_float(np.array([[1.0, np.nan, np.nan, 2.0]], np.float32), "bf16")
    c = compare(extra_nan, ref, "bf16", 3e-2, 1e-3)
    assert not c.ok and c.n_nan == 1 and c.n_bad == 1 and c.worst == (0, 2)
    missing_nan = from_float(np.array([[1.0, 0.0, 0.0, 2.0]], np.float32), "bf16")
    c = compare(missing_nan, ref, "bf16", 3e-2, 1e-3)
    assert not c.ok and c.n_bad == 1 and c.n_nan == 0
    # the poison is a NaN too, but an element never written fails even where the reference is NaN
    poisoned = good.copy()
    poisoned.view(np.uint16)[0, 1] = poison_bits("bf16", 0)
    c = compare(poisoned, ref, "bf16", 3e-2, 1e-3, pattern=0)
    assert not c.ok and c.n_poison == 1
    # infinities compare equal
    assert compare(np.array([np.inf], np.float32), np.array([np.inf]), "fp32", 1e-4, 1e-3).ok
    assert compare(good, ref, "bf16", 3e-2, 1e-3).max_abs_err == 0.0
