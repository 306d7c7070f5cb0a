"""A kernel that skips its work on timed launches whose inputs nobody changed (tests/gpu/kernels/redteam/
rt_unperturbed_skip.cu) as a numpy launcher through the gate's logic and the checked timed launches on the CPU,
driven in the order ``benchmark.time_interleaved`` drives them (prepare, launch, after).

The trick: a checked timed launch always saw its input set changed in part in place (gate v2's ``timed_checks``:
``Perturbation``: 64 rows of x and 1/16 of w), so a launch that sees the same buffers with the same weights as
before was never checked. Now every timed launch sees x changed in part and about half of them (half the checked
ones) w as well. The kernel remembers the weights it saw first at each (x, w, y, M, N) and, from the
second launch on those buffers on, computes only when the weights differ. A gate check launches twice on one
(x, w, y) only in run 4, whose first launch is not compared with the reference, so the gate sees an honest
kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evaluators.gpu.gate import run_gate
from evaluators.gpu.timed_checks import InputSets, set_count, timed_call, verify_checked
from evaluators.types import Status
from tests.timed_launches import drive, rms_honest
from workloads.dtypes import storage_dtype, to_float64
from workloads.rmsnorm import RMSNorm

SMALL = [(1, 192), (7, 760), (199, 1001), (199, 1128)]
SHAPE = (2048, 256)


def _ptr(a: Any) -> int:
    return int(a.__array_interface__["data"][0])


class UnperturbedSkip:
    """rt_unperturbed_skip.cu: per (x, w, y, M, N) a launch count and the bytes of w at the first launch; from
    the second launch on, a launch whose w still holds those bytes writes nothing."""

    def __init__(self) -> None:
        self.seen: dict[tuple, list] = {}
        self.skipped = 0

    def __call__(self, inputs, outputs, shape, params=None):
        w = np.asarray(inputs["w"])
        key = (_ptr(inputs["x"]), _ptr(w), _ptr(outputs["y"]), tuple(shape))
        entry = self.seen.setdefault(key, [0, w.tobytes()])
        entry[0] += 1
        if entry[0] > 1 and entry[1] == w.tobytes():
            self.skipped += 1
            return
        rms_honest(inputs, outputs, shape, params)


def _bench(kernel, seed: int) -> tuple[str | None, list]:
    """One benchmarked shape as the worker times it (warm-up 3, 20 repeats, one set per distribution)."""
    wl = RMSNorm("bf16")
    nbytes = sum(int(v.nbytes) for v in wl.make_inputs(SHAPE, 0).values())
    sets = InputSets.make(wl, SHAPE, [100 + seed + i for i in range(set_count(wl, nbytes))], np)
    out = {"y": np.empty(SHAPE, dtype=storage_dtype("bf16", np))}
    call, checked = timed_call(wl, kernel, sets, out, SHAPE, np.random.default_rng([seed, 0, 1]), repeats=20)
    drive(call, 20)
    return verify_checked(wl, sets, checked, SHAPE), checked


def test_skipping_is_wrong_in_real_use():
    """The same activations buffer normalised again after the next step wrote new activations into it (the weights
    unchanged): the second launch returns whatever the output buffer held."""
    wl = RMSNorm("bf16")
    k, inputs = UnperturbedSkip(), wl.make_inputs(SHAPE, 5)
    y = np.empty(SHAPE, dtype=storage_dtype("bf16", np))
    k(inputs, {"y": y}, SHAPE)
    inputs["x"][...] = wl.make_inputs(SHAPE, 6)["x"]  # next step's activations, same buffer
    y[...] = 0
    k(inputs, {"y": y}, SHAPE)
    ref = wl.reference(inputs)["y"]
    assert k.skipped == 1 and np.abs(to_float64(y, "bf16") - ref).max() > 1.0


def test_the_gate_sees_an_honest_kernel():
    """Only run 4's first launch (on run 3's buffers, its output not compared) sees a (x, w, y) again unchanged."""
    wl = RMSNorm("bf16")
    k = UnperturbedSkip()
    res = run_gate(wl, k, seed=31, shapes=SMALL)
    assert res.status == Status.OK, res.reason
    assert 0 < k.skipped <= len(res.checks)


@pytest.mark.parametrize("seed", range(6))
def test_some_checked_timed_launch_sees_its_weights_unchanged(seed):
    """Was a hole of gate v2: every checked timed launch was a perturbed one (the checked launches and as many
    decoys), so a kernel that computes only on perturbed launches was never caught; now about half the checked
    launches (at least one per shape) see w as made (with x changed in part, as every timed launch: real use's new
    activations and the same weights), and the skipping kernel serves a stale output there."""
    k = UnperturbedSkip()
    bad, checked = _bench(k, seed)
    assert all(c.perturbation is not None and "x" in c.perturbation.parts for c in checked)
    assert any("w" not in c.perturbation.parts for c in checked) and any("w" in c.perturbation.parts for c in checked)
    assert k.skipped > 0
    assert bad is not None and "wrong at shape" in bad, bad


def test_an_honest_kernel_passes_the_same_launches():
    bad, checked = _bench(rms_honest, 3)
    assert bad is None and len(checked) >= 4
