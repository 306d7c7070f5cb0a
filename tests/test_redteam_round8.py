"""Eighth red-team round (tests/gpu/kernels/redteam/rt8_*.cu), against gate rules version 11 as it applies to the
KDA recurrent workload, on the CPU: what the static checks the GPU pool runs before any GPU time
(``evaluators.pipeline.prepare``: ptxas for sm_90, the input-store check, the race lint, the launch rule at every
search shape) do with each kernel today, where each kernel's trick fires against the shapes the gate and the
sanitizer replay run, and, for the window kernel, its arithmetic emulated in float64 against the reference.
GPU tests: tests/gpu/test_gate_redteam8.py.

- rt8_kda_window: sequences of >= 1024 tokens cut into 4 chunks run side by side, each after the first started
  from a zero state 256 tokens before it. Passes every static check; its emulation is within tolerance at the
  gate's (1, 2048) under the three distributions the workload had (they forget within ~256 tokens) and at a
  varlen piece, and out of it under ``long_memory`` (decay 1), the distribution added for it: closed (predicted:
  wrong_result at the gate's (1, 2048)); an honest fp32 recurrence stays within tolerance there.
- rt8_kda_long_race: the norm reduction's barrier dropped from token 64 of a sequence on (a read-after-write race).
  Passes every static check; the gate's (1, 97) and (1, 2048) run the racy path, and (since this round) the
  replay's (4, 65, 129) too.
- rt8_kda_latent_war: one slot for both parities from token 64 on, the barrier kept (a write-after-read race whose
  window practically never opens). Passes every static check; the replay's (4, 65, 129) runs the path under
  racecheck (predicted: its hazard is reported whether or not the window opens).
- rt8_kda_heads_race: the barrier dropped at H > 3 for sequences of more than one token. Passes every static check;
  no gate shape has H > 3; the replay's (4, 65, 129) runs the racy path (before this round none did).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from evaluators import race_lint as rl
from evaluators.gpu.gate import within_tolerance
from evaluators.gpu.sanitizer import replay_plan
from evaluators.input_stores import check_input_stores
from population.kernel import Kernel, LaunchConfig
from workloads.dtypes import from_float, to_float64
from workloads.kda import KDARecurrent
from workloads.kda.reference import preprocess

REDTEAM = Path(__file__).resolve().parent / "gpu" / "kernels" / "redteam"
# name -> (defines, threads per CTA); every kernel launches at bv 128, grid (1, H, N), as the naive seed
KERNELS = {
    "rt8_kda_window": ({}, 512),
    "rt8_kda_long_race": ({}, 128),
    "rt8_kda_latent_war": ({}, 128),
    "rt8_kda_heads_race": ({}, 128),
}
CONTROL = ("rt8_kda_long_race", {"RT_HONEST": 1}, 128)  # the race kernels' honest form: a barrier at every token
WARM, GROUPS, CHUNK_FROM = 256, 4, 1024  # rt8_kda_window's defaults


def build(name: str, defines: dict[str, int] | None = None, threads: int | None = None) -> Kernel:
    """The round-8 kernel ``name`` (``defines``) as a KDA Kernel at bv 128 (tests/gpu/test_gate_redteam_dynamic.py's
    ``kda_kernel``, with the block of KERNELS: the window kernel runs 4 groups of 128 threads)."""
    from population.parser import parse_module
    from workloads.cuda_build import build_ptx

    d, t = KERNELS.get(name, ({}, 128))
    return Kernel(parse_module(build_ptx(REDTEAM / f"{name}.cu", d if defines is None else defines)), "kda_fwd",
                  LaunchConfig(block=(threads or t, 1, 1), knobs=(("bv", 128),)))


@pytest.fixture(scope="module")
def wl():
    return KDARecurrent()


@pytest.fixture(scope="module")
def built():
    return {name: build(name) for name in KERNELS} | {"control": build(CONTROL[0], CONTROL[1], CONTROL[2])}


# ------------------------------------------------------------------------------- the static checks, today
@pytest.mark.parametrize("name", [*KERNELS, "control"])
def test_every_kernel_passes_every_static_check_the_pool_runs_before_gpu_time(wl, built, name):
    """ptxas (sm_90), the entry, the ABI, the input-store check, the race lint and the launch rule at every search
    shape: none rejects any of the four kernels (nor the control), so each reaches the GPU gate."""
    from evaluators.pipeline import prepare
    from targets.spec import get_gpu

    k = built[name]
    p = prepare(k, wl, get_gpu("h200"), wl.search_shapes)  # raises Rejected on any failure
    assert p.resources.arch == "sm_90" and p.resources.spill_stores_bytes == 0
    report = check_input_stores(k, wl)
    assert report.ok, report
    lint = rl.race_lint(k, report.provenance, *(wl.uses_atomics,) * 4)
    assert lint.findings == [], lint.findings


def test_what_each_kernel_looks_like_in_ptx(built):
    """The window kernel has no shared memory and no barrier (nothing for racecheck or the race lint); the race
    kernels keep one shared array of partials; the long and heads races branch around their only bar.sync, the
    latent race and the control reach it unconditionally."""
    win = built["rt8_kda_window"].ptx
    assert ".shared" not in win and "bar.sync" not in win and "atom" not in win and ".global .align" not in win
    for name in ("rt8_kda_long_race", "rt8_kda_heads_race", "rt8_kda_latent_war", "control"):
        ptx = built[name].ptx
        assert ptx.count("bar.sync") == 1 and ".shared .align 4 .b8" in ptx, name
        before = ptx.split("bar.sync")[0].rstrip().splitlines()[-1]
        assert ("bra" in before) == (name in ("rt8_kda_long_race", "rt8_kda_heads_race")), (name, before)


# ------------------------------------------------------------------------------- where the tricks fire
def _lens(shape):
    return int(shape[0]), [int(x) for x in shape[1:]]


def long_keyed(shape) -> bool:  # rt8_kda_long_race / rt8_kda_latent_war: a token at position >= 64
    return max(_lens(shape)[1]) > 64


def heads_keyed(shape) -> bool:  # rt8_kda_heads_race: H > 3 and a sequence of more than one token
    h, lens = _lens(shape)
    return h > 3 and max(lens) > 1


def window_keyed(shape) -> bool:
    return max(_lens(shape)[1]) >= CHUNK_FROM


def test_the_sanitizer_replay_runs_every_race_path(wl):
    """The replay (``replay_plan`` at the pool's search shapes): the fixed shapes and the decode batch (64, 1 x 32)
    alone of the timed ones (by exact product). Before this round the fixed shapes were (1, 17), (3, 1, 63, 17),
    (2, 5, 1, 33, 2): no replayed sequence reached token 64 and the one replayed shape with H > 3 had one token a
    sequence, so racecheck instrumented only the barrier path of every race kernel. (4, 65, 129) runs both racy
    paths; the window (a value trick, no race) is left to the long-memory inputs."""
    plan = replay_plan(wl.search_shapes, wl.sanitizer_shape_list())
    replayed = [tuple(s) for s in plan["shapes"] + plan["edge_shapes"]]
    assert (64, *(1,) * 32) in replayed and len(set(replayed)) == 5, replayed
    racy = [s for s in set(replayed) if long_keyed(s) and heads_keyed(s)]
    assert racy == [(4, 65, 129)]
    assert not any(window_keyed(s) for s in replayed)


def test_where_the_gate_and_the_timed_checks_meet_each_trick(wl):
    """The long races fire at the gate's (1, 97) and (1, 2048) (every element and bitwise determinism judged
    there) and at the prefill search shapes; the heads race at no gate shape, only at the prefill search shapes
    (sampled rows of the checked timed launches); the window at (1, 2048) and the prefill search shapes."""
    gate, search = wl.gate_shapes, wl.search_shapes
    assert [s for s in gate if long_keyed(s)] == [(1, 97), (1, 2048)]
    assert [s for s in gate if heads_keyed(s)] == [] and max(s[0] for s in gate) == 3
    assert [s for s in gate if window_keyed(s)] == [(1, 2048)]
    for keyed in (long_keyed, heads_keyed, window_keyed):
        assert [s for s in search if keyed(s)] == search[1:], keyed  # (64, 1024 x 8), (96, VARLEN); not decode
    # the prefill search shapes are checked by sampled rows only: 1026 of T H token-head rows a launch
    assert [sum(_lens(s)[1]) * s[0] for s in search[1:]] == [524288, 786432]
    assert math.prod(search[0]) == 64


# ------------------------------------------------------------------------------- the window's arithmetic
def window_emulation(inputs, groups: int = GROUPS, warm: int = WARM, chunk_from: int = CHUNK_FROM,
                     dtype=np.float64):
    """rt8_kda_window's algorithm (o [T, H, V], final state [N, H, K, V], in ``dtype``): sequences of at least
    ``chunk_from`` tokens in ``groups`` chunks, chunk g > 0 from a zero state ``warm`` tokens before it. With
    ``groups=1`` it is the honest recurrence; ``dtype=np.float32`` rounds the preprocessed inputs, the state and
    every product as a float32 kernel does."""
    w = {n: to_float64(np.asarray(inputs[n]), "bf16") for n in ("q", "k", "v", "g", "beta")}
    qn, kn, g, b = (a.astype(dtype) for a in preprocess(w["q"], w["k"], w["g"], w["beta"], inputs["A_log"],
                                                        inputs["dt_bias"]))
    dec, v, cu = np.exp(g), w["v"].astype(dtype), np.asarray(inputs["cu_seqlens"])
    o, s_out = np.zeros(v.shape, dtype), np.array(inputs["state"], dtype=dtype)
    scale = dtype(128 ** -0.5)
    for n in range(len(cu) - 1):
        bos, eos = int(cu[n]), int(cu[n + 1])
        split = eos - bos >= chunk_from and groups > 1
        chunk = -(-(eos - bos) // groups) if split else eos - bos
        for grp in range(groups if split else 1):
            c0, c1 = bos + grp * chunk, min(eos, bos + (grp + 1) * chunk)
            s = s_out[n].copy() if grp == 0 else np.zeros_like(s_out[n])
            for t in range(bos if grp == 0 else max(bos, c0 - warm), c1):
                s = dec[t][:, :, None] * s
                u = b[t][:, None] * (v[t] - np.einsum("hk,hkv->hv", kn[t], s))
                s = s + kn[t][:, :, None] * u[:, None, :]
                if t >= c0:
                    o[t] = np.einsum("hk,hkv->hv", qn[t] * scale, s)
            if c1 == eos:
                last = s
        s_out[n] = last
    return o, s_out


def _passes(wl, inputs) -> tuple[bool, bool]:
    """(o within the gate's tolerance, final state within it): the window emulation against the reference."""
    ref = wl.reference(inputs)
    o, s = window_emulation(inputs)
    atol, rtol = wl.tolerance
    return (within_tolerance(from_float(o, "bf16"), ref["o"], "bf16", atol, rtol),
            within_tolerance(s.astype(np.float32), ref["state"], "fp32", atol, rtol))


FORGETFUL = ("normal", "gate_extremes", "beta_extremes")  # the workload's distributions before this round


@pytest.mark.parametrize("distribution", FORGETFUL)
def test_the_window_is_within_tolerance_at_the_gates_long_shape(wl, distribution):
    """At (1, 2048), the gate shape the window chunks, every element of o and of the final state passes under each
    distribution the gate and the timed launches drew before this round: chunks 1-3 started from zero 256 tokens back agree with the
    true recurrence (the inputs forget: gate saturation, gate_extremes' exp(-5) at half the channels, the delta
    rule's contraction). GPU: the kernel's fp32 error adds ~1e-6 relative."""
    assert _passes(wl, wl.make_inputs((1, 2048), 8, distribution)) == (True, True)


def test_the_window_is_within_tolerance_on_a_varlen_batch(wl):
    """Several heads (other A_log and dt_bias draws), one chunked sequence beside one run exactly."""
    assert _passes(wl, wl.make_inputs((4, 1300, 547), 9, "normal")) == (True, True)


def test_the_window_is_wrong_under_the_long_memory_distribution(wl):
    """``long_memory``: g_raw = -30 everywhere (decay 1 at every channel, as a learned gate holds its long-memory
    channels): only the delta rule forgets, ~beta / 128 a token, and the window's o and final state are out of
    tolerance. The gate draws it at every shape, (1, 2048) among them (KDAData.distributions)."""
    assert "long_memory" in wl.distributions
    x = wl.make_inputs((1, 2048), 10, "long_memory")
    assert np.all(to_float64(np.asarray(x["g"]), "bf16") == -30.0)
    assert _passes(wl, x) == (False, False)


@pytest.mark.parametrize("shape", [(1, 2048), (4, 1300, 547)])
def test_an_honest_fp32_recurrence_stays_within_tolerance_under_long_memory(wl, shape):
    """No false rejection from the new distribution: with nothing forgotten but the delta rule's share, float32
    arithmetic over 2048 tokens stays within the gate's tolerance for o and the final state."""
    x = wl.make_inputs(shape, 11, "long_memory")
    ref = wl.reference(x)
    o, s = window_emulation(x, groups=1, dtype=np.float32)  # the honest recurrence in float32
    atol, rtol = wl.tolerance
    assert within_tolerance(from_float(o, "bf16"), ref["o"], "bf16", atol, rtol)
    assert within_tolerance(s, ref["state"], "fp32", atol, rtol)
