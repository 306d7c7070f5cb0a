"""tests/gpu/kernels/gate_cases/rt_drop_eps.cu as a numpy launcher through the gate on the CPU: which of the
gate's distributions catch it, and why the ``nonfinite`` inputs do (a true catch, not a comparator artefact:
the honest formula passes the same checks).

The kernel's scale is ``rsqrtf(fmaxf(mean(x^2), 1e-30f))``. CUDA's ``fmaxf`` returns the other operand when one
is NaN (C99 fmax, CUDA Math API), so a row holding a NaN gets the finite scale 1e15 instead of NaN, and its
outputs are +-x * 1e15 * w (-0 where w = 0) where the contract (and torch) gives NaN everywhere in the row.
``np.fmax`` has the same NaN rule.
"""

from __future__ import annotations

import numpy as np

from evaluators.gpu.gate import run_gate
from evaluators.types import Status
from workloads.dtypes import from_float, to_float64
from workloads.rmsnorm import RMSNorm

SMALL = [(1, 192), (7, 760), (199, 1001), (199, 1128)]


def launcher(drop_eps: bool):
    """The kernel's arithmetic in float32: honest (``drop_eps`` False) or rt_drop_eps's scale."""

    def launch(inputs, outputs, shape, params=None):
        eps = np.float32((params or {}).get("eps", 1e-6))
        xf = to_float64(np.asarray(inputs["x"]), "bf16").astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            ms = (xf * xf).sum(axis=1, dtype=np.float32) / np.float32(xf.shape[1])
            r = 1 / np.sqrt(np.fmax(ms, np.float32(1e-30)) if drop_eps else ms + eps)
            outputs["y"][...] = from_float(xf * r.astype(np.float32)[:, None]
                                           * np.asarray(inputs["w"], dtype=np.float32), "bf16")

    return launch


class Only(RMSNorm):
    """RMSNorm bf16 whose gate draws its inputs from one distribution only."""

    def __init__(self, distribution: str):
        super().__init__("bf16")
        self.distributions = (distribution,)
        self.nonfinite_distributions = (distribution,) if distribution == "nonfinite" else ()


def test_fmax_swallows_the_nan_of_a_row_so_the_whole_row_is_finite_where_the_contract_says_nan():
    wl = RMSNorm("bf16")
    inputs = wl.make_inputs((1, 192), 3, "nonfinite")  # row 0 holds one NaN
    y = np.empty((1, 192), dtype=np.asarray(inputs["x"]).dtype)
    launcher(True)(inputs, {"y": y}, (1, 192))
    ref = wl.reference(inputs)["y"]
    got = to_float64(y, "bf16")
    assert np.isnan(ref).all()
    assert np.isfinite(got).sum() >= 150  # x * 1e15 * w overflows bf16 only where |x w| > ~3.4e23
    assert got[0, 0] == 0 and np.signbit(got[0, 0]) == (float(to_float64(np.asarray(inputs["x"]), "bf16")[0, 0]) < 0)


def test_tiny_inputs_alone_catch_the_dropped_eps():
    res = run_gate(Only("tiny"), launcher(True), seed=20261201, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT, res.reason
    assert "correctness check failed" in res.reason and "tiny inputs" in res.reason


def test_nonfinite_inputs_alone_catch_the_dropped_eps_and_pass_the_honest_formula():
    res = run_gate(Only("nonfinite"), launcher(True), seed=20261201, shapes=SMALL)
    assert res.status == Status.WRONG_RESULT, res.reason
    assert "nonfinite inputs" in res.reason and "want nan" in res.reason
    honest = run_gate(Only("nonfinite"), launcher(False), seed=20261201, shapes=SMALL)
    assert honest.status == Status.OK, honest.reason


def test_honest_formula_passes_the_tiny_inputs():
    res = run_gate(Only("tiny"), launcher(False), seed=20261201, shapes=SMALL)
    assert res.status == Status.OK, res.reason
