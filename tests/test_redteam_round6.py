"""Sixth red-team round (tests/gpu/kernels/redteam, README: sixth round), on the CPU: what gate rules version 9 did
with each kernel and what version 10 does. Static verdicts through ``evaluators.pipeline.prepare`` (ptxas, the
input-store check, the race lint) with RMSNorm's settings, version 9's race lint emulated by switching off what
version 10 added (``v9_kinds``); the new forms on hand-written PTX and on every PTX file, seed and recorded H200
kernel; the sanitizer replay's drawn launch conditions on the CuPy and VMM stand-in (tests/cupy_standin.py) with
emulated kernels that decide as each dodge does, and the timed launches' conditions (``timed_checks.timed_call``
on numpy) they race at. GPU tests: tests/gpu/test_gate_redteam6.py.

- rt_cluster_exit_race: a cluster's CTAs exchange partial sums through distributed shared memory and drop the
  trailing cluster barrier (a CTA may exit while its peer reads its shared memory). Was: ok (no rule looks at
  distributed shared memory). Now: race lint rule 7 (``cluster_lifetime``).
- rt_local_spin_dodge: rt_alu_pace_dodge's clock on a flag in the output, the counting loop testing a volatile
  local copy of it. Was: ok (rules 1 and 6 traced a loop's exit through registers only). Now: traced through
  memory (rule 1: ``spin_wait``).
- rt_cluster_of_one: a two-CTA global exchange with a spin and a cluster-scope fence, declared a cluster of one
  CTA. Was: ok (any cluster directive exempted rule 1 and made cluster scope reach other CTAs). Now: a cluster
  launch needs more than one CTA per cluster, and rule 1 has no cluster exemption without atomics.
- rt_replay_refill_dodge, rt_replay_scale_dodge, rt_replay_seed_dodge: the barrier kept only where the replay's
  conditions were fixed (all-ones outputs; rows of unit scale; the inputs of seed 7). Was: ok with a clean
  sanitizer verdict. Now: the replay draws each launch's input distribution and refill pattern, from a seed drawn
  per call.
"""

from __future__ import annotations

import glob
import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_input_stores import HEAD, TAIL

from evaluators import race_lint as rl
from evaluators.input_stores import provenance
from evaluators.types import Status
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from tests import cupy_standin as sd
from tests.gpu.rmsnorm_kernels import (
    DODGE,
    REDTEAM,
    ROOT,
    WARP_ROWS,
    judge,
    redteam,
    rmsnorm_kernel,
)
from workloads.rmsnorm import RMSNorm

CLUSTER2 = (("rows_per_cta", 8), ("cluster", 2))
KNOBS = {"rt_cluster_exit_race": CLUSTER2, "rt_local_spin_dodge": DODGE, "rt_cluster_of_one": WARP_ROWS,
         "rt_replay_refill_dodge": DODGE, "rt_replay_scale_dodge": DODGE, "rt_replay_seed_dodge": DODGE}


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def _v9_clustered(kernel: Kernel, fn) -> bool:
    """Version 9's test: any cluster directive, or a cluster knob above 1."""
    dirs = {"reqnctapercluster", "explicitcluster", "maxclusterrank"}
    return any(d.name in dirs for d in fn.directives) or kernel.launch.knob("cluster", 1) > 1


def v9_kinds(k: Kernel, monkeypatch, atomics: bool = False) -> list[str]:
    """The kinds the race lint of gate rules version 9 found in ``k`` (RMSNorm's settings unless ``atomics``):
    the current lint with version 10's and 11's additions switched off -- no tracing through memory, no rule 7,
    any cluster directive a cluster launch, and rule 1's cluster exemption for every workload (rule 6 run
    alongside); no rule 8, no mbarrier or address forms, guarded local stores counted as stores."""
    with monkeypatch.context() as m:
        m.setattr(rl, "_through_memory", lambda *a, **kw: ([], None))
        m.setattr(rl, "_cluster_lifetimes", lambda *a, **kw: [])
        m.setattr(rl, "_clustered", _v9_clustered)
        for name in ("_global_exchanges", "_mbarrier_observations", "_unvouched_loads"):  # version 11's forms
            m.setattr(rl, name, lambda *a, **kw: [])
        m.setattr(rl, "_guard", lambda ins: None)
        p = provenance(k)
        kinds = [f.kind for f in rl.race_lint(k, p, atomics, atomics, True, atomics).findings]
        if not atomics:
            kinds += ["wall_clock_wait"] * len(rl._wall_clock_waits(p) + rl._shared_spin_waits(k, p))
    return sorted(set(kinds))


def kinds(k: Kernel, atomics: bool = False) -> list[str]:
    return sorted({f.kind for f in rl.race_lint(k, None, atomics, atomics, atomics, atomics).findings})


# ------------------------------------------------------------------------------ the six kernels, statically
@pytest.mark.parametrize("name", list(KNOBS))
def test_every_kernel_passed_the_version_9_race_lint(name, monkeypatch):
    assert v9_kinds(redteam(name, KNOBS[name]), monkeypatch) == []


@pytest.mark.parametrize("name, kind, text", [
    ("rt_cluster_exit_race", "cluster_lifetime", "may already have exited"),
    ("rt_local_spin_dodge", "spin_wait", "ld.volatile.global.u32"),
    ("rt_cluster_of_one", "spin_wait", "ld.volatile.global.u32"),
])
def test_the_static_holes_are_rejected_before_any_gpu_time(wl, name, kind, text):
    r = judge(redteam(name, KNOBS[name]), wl)
    assert r is not None and (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint"), r
    assert f"static race lint: {kind}" in str(r) and text in str(r), str(r)


@pytest.mark.parametrize("name", ["rt_replay_refill_dodge", "rt_replay_scale_dodge", "rt_replay_seed_dodge"])
def test_the_replay_dodges_pass_every_static_check(wl, name):
    assert judge(redteam(name, KNOBS[name]), wl) is None


def test_what_each_static_trick_launders_was_caught_by_version_9_without_it(wl, monkeypatch):
    """The forms without the trick: the flag tested directly (rt_local_spin_dodge RT_VIA_LOCAL=0) and no cluster
    attribute (rt_cluster_of_one RT_CLUSTER_OF_ONE=0) were version 9 findings; the trick alone got them through.
    The honest control of rt_cluster_exit_race (RT_EXIT_SYNC=1, the template's trailing cluster.sync()) passes."""
    direct = rmsnorm_kernel(REDTEAM / "rt_local_spin_dodge.cu", {"RT_VIA_LOCAL": 0}, DODGE)
    assert v9_kinds(direct, monkeypatch) == ["spin_wait"]
    laundered = redteam("rt_local_spin_dodge", DODGE)
    assert "st.local.u32 [rt_copy]" in laundered.ptx and "ld.local.u32 %r" in laundered.ptx
    plain = rmsnorm_kernel(REDTEAM / "rt_cluster_of_one.cu", {"RT_CLUSTER_OF_ONE": 0}, WARP_ROWS)
    assert v9_kinds(plain, monkeypatch) == ["spin_wait", "unfenced_publish"]
    assert ".reqnctapercluster 1, 1, 1" in redteam("rt_cluster_of_one", WARP_ROWS).ptx
    honest = rmsnorm_kernel(REDTEAM / "rt_cluster_exit_race.cu", {"RT_EXIT_SYNC": 1}, CLUSTER2)
    assert judge(honest, wl) is None
    cheat = redteam("rt_cluster_exit_race", CLUSTER2)
    assert cheat.ptx.count("barrier.cluster.wait") == honest.ptx.count("barrier.cluster.wait") - 1
    assert "mapa.u64" in cheat.ptx


# ------------------------------------------------------------------------ rule 1 and 6: waits through memory
SLOT = "\t.local .align 4 .b8 slot[8];\n"
SPIN = "\tst.global.u32 [%rd7], 0;\n$L_spin:\n\tld.volatile.global.u32 %r3, [%rd7];\n{copy}\tsetp.eq.u32 %p1, %r4, 0;\n" \
       "\t@%p1 bra $L_spin;\n"
PEEK = """.func (.param .b32 peek_ret) peek(.param .b64 peek_p)
{
\t.reg .b32 %r<3>;
\t.reg .b64 %rd<3>;
\tld.param.u64 %rd1, [peek_p];
\tld.volatile.global.u32 %r1, [%rd1];
\tst.param.b32 [peek_ret], %r1;
\tret;
}
"""
CALL = ("\tst.global.u32 [%rd7], 0;\n$L_spin:\n\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd7;\n"
        "\t.param .b32 retval0;\n\tcall.uni (retval0), peek, (param0);\n\tld.param.b32 %r4, [retval0];\n\t}\n"
        "\tsetp.eq.u32 %p1, %r4, 0;\n\t@%p1 bra $L_spin;\n")


def _k(body: str, head: str = HEAD, knobs: tuple = ()) -> Kernel:
    return Kernel(parse_module(head + SLOT + body + TAIL), "k", LaunchConfig(block=(64, 1, 1), knobs=knobs))


@pytest.mark.parametrize("body, head, now, v9", [
    (SPIN.replace("{copy}", "\tmov.u32 %r4, %r3;\n"), HEAD, ["spin_wait"], ["spin_wait"]),  # in registers
    (SPIN.replace("{copy}", "\tst.local.u32 [slot], %r3;\n\tld.local.u32 %r4, [slot];\n"), HEAD, ["spin_wait"], []),
    (SPIN.replace("{copy}", "\tst.shared.u32 [buf], %r3;\n\tld.shared.u32 %r4, [buf];\n"), HEAD, ["spin_wait"], []),
    (CALL, HEAD.replace(".address_size 64\n", ".address_size 64\n\n" + PEEK + "\n"), ["spin_wait"], []),
    # a loop on a local copy of an input (never written): no spin
    ("$L_c:\n\tld.global.u32 %r3, [%rd6];\n\tst.local.u32 [slot], %r3;\n\tld.local.u32 %r4, [slot];\n"
     "\tsetp.eq.u32 %p1, %r4, 0;\n\t@%p1 bra $L_c;\n\tst.global.u32 [%rd7], %r4;\n\tld.global.u32 %r5, [%rd7+4];\n",
     HEAD, [], []),
    # a counter kept in local memory, the kernel's global write and read elsewhere: no spin
    ("\tst.global.u32 [%rd7], 0;\n\tld.global.u32 %r5, [%rd7+4];\n\tst.local.u32 [slot], %r1;\n$L_c:\n"
     "\tld.local.u32 %r4, [slot];\n\tadd.u32 %r4, %r4, 1;\n\tst.local.u32 [slot], %r4;\n\tsetp.lt.u32 %p1, %r4, 10;\n"
     "\t@%p1 bra $L_c;\n", HEAD, [], []),
])
def test_a_loops_exit_is_traced_through_memory_and_calls(body, head, now, v9, monkeypatch):
    """Rule 1 for a workload declaring atomics (rules 4-6 off): a wait on a word the kernel writes is a spin
    wait whether the loop tests the loaded register, a copy of it through local or shared memory, or the value a
    called function returns; version 9 followed registers only."""
    k = _k(body, head)
    assert kinds(k, atomics=True) == now
    assert v9_kinds(k, monkeypatch, atomics=True) == v9


def _cluster_head(n: int) -> str:
    return HEAD.replace(")\n{\n", f")\n.explicitcluster\n.reqnctapercluster {n}, 1, 1\n{{\n") if n else HEAD


GLOBAL_SPIN = SPIN.replace("{copy}", "\tmov.u32 %r4, %r3;\n")
CLUSTER_FENCE = ("\tst.global.u32 [%rd7+4], %r2;\n\tfence.acq_rel.cluster;\n\tst.volatile.global.u32 [%rd7], 1;\n"
                 "\tld.global.u32 %r5, [%rd7+4];\n")


@pytest.mark.parametrize("n, knobs, atomics, spin, fence", [
    (1, (), True, ["spin_wait"], ["unfenced_publish"]),  # a cluster of one CTA: a plain launch
    (2, (), True, [], []),  # co-scheduled pairs; cluster scope reaches the peer
    (0, (("cluster", 2),), True, [], []),  # the size from the launch knob
    (0, (("cluster", 1),), True, ["spin_wait"], ["unfenced_publish"]),
    (2, (), False, ["spin_wait"], []),  # no exemption from rule 1 without atomics
])
def test_a_cluster_launch_needs_more_than_one_cta_per_cluster(n, knobs, atomics, spin, fence, monkeypatch):
    s = _k(GLOBAL_SPIN, _cluster_head(n), knobs)
    f = _k(CLUSTER_FENCE, _cluster_head(n), knobs)
    assert kinds(s, atomics) == spin and kinds(f, atomics) == fence
    if n == 1:  # version 9 took the directive for a cluster launch
        assert v9_kinds(s, monkeypatch, atomics) == [] and v9_kinds(f, monkeypatch, atomics) == []


# --------------------------------------------------------- rule 7: distributed shared memory and cluster barriers
SYNC = "\tbarrier.cluster.arrive;\n\tbarrier.cluster.wait;\n"
REMOTE = ("\tmov.u32 %r3, buf;\n\tst.shared.u32 [%r3], %r2;\n{before}\tmapa.shared::cluster.u32 %r4, %r3, 1;\n"
          "\tld.shared::cluster.u32 %r5, [%r4];\n\tst.global.u32 [%rd7], %r5;\n{after}")
GENERIC = ("\tmov.u32 %r3, buf;\n\tst.shared.u32 [%r3], %r2;\n{before}\tcvta.shared.u64 %rd8, buf;\n"
           "\tmapa.u64 %rd9, %rd8, 1;\n\tld.u32 %r5, [%rd9+4];\n\tst.global.u32 [%rd7], %r5;\n{after}")
SKIP = "\tsetp.eq.u32 %p1, %r2, 0;\n\t@%p1 bra $L_end;\n" + SYNC + "$L_end:\n"


@pytest.mark.parametrize("body, n, knobs, flagged", [
    (REMOTE.format(before=SYNC, after=""), 2, (), True),  # rt_cluster_exit_race's form
    (REMOTE.format(before=SYNC, after=SYNC), 2, (), False),  # the template's: cluster.sync() before the exit
    (GENERIC.format(before=SYNC, after=""), 2, (), True),  # nvcc's map_shared_rank: a generic mapa address
    (GENERIC.format(before=SYNC, after=SYNC), 2, (), False),
    (REMOTE.format(before="", after=SYNC), 2, (), True),  # before any barrier: the peer may not have started
    (REMOTE.format(before="\tbarrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait;\n", after=SYNC), 2, (), False),
    (REMOTE.format(before=SYNC, after="\tbarrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait;\n"), 2, (), True),
    (REMOTE.format(before=SYNC, after="\tbarrier.cluster.wait;\n\tbarrier.cluster.arrive;\n"), 2, (), True),
    (REMOTE.format(before=SYNC, after=SKIP), 2, (), True),  # one path leaves without the barrier
    (REMOTE.format(before=SYNC, after=SKIP.replace("\tbarrier.cluster", "\t@%p1 barrier.cluster")), 2, (), True),
    (REMOTE.format(before=SYNC, after=""), 0, (("cluster", 2),), True),
    (REMOTE.format(before=SYNC, after=""), 1, (), False),  # a cluster of one: its own shared memory
    (REMOTE.format(before=SYNC, after=""), 0, (), False),
])
def test_distributed_shared_memory_accesses_need_a_cluster_barrier_on_every_path_around_them(body, n, knobs,
                                                                                          flagged, monkeypatch):
    k = _k(body, _cluster_head(n), knobs)
    for atomics in (False, True):  # rule 7 holds for every workload
        assert kinds(k, atomics) == (["cluster_lifetime"] if flagged else [])
    assert v9_kinds(k, monkeypatch) == []


# ------------------------------------------------------- no honest kernel is newly rejected by version 10's lint
def _entries(text: str, launch: LaunchConfig) -> list[Kernel]:
    m = parse_module(text)
    return [Kernel(m, fn.name, launch) for fn in m.functions if fn.kind == "entry" and fn.body is not None]


def test_every_ptx_file_seed_and_cluster_template_gets_the_version_9_verdict(monkeypatch):
    """Every PTX file of the repo and of ../shared (cases, corpus), every seed of every workload (with its own
    atomics setting) and the template at every recommended knob set and at clusters of 2, 4 and 8: the race lint
    finds what version 9 found, nothing more."""
    from workloads.kda import KDAChunk, KDARecurrent
    from workloads.softmax import Softmax

    files = [Path(p) for p in glob.glob(str(ROOT / "**" / "*.ptx"), recursive=True) if "/.git/" not in p]
    files += [Path(p) for p in glob.glob(str(ROOT.parent / "shared" / "**" / "*.ptx"), recursive=True)]
    kernels = [(k, False) for f in files for k in _entries(f.read_text(), LaunchConfig(block=(128, 1, 1)))]
    wls = (RMSNorm("bf16"), RMSNorm("fp16"), RMSNorm("fp32"), KDARecurrent(), KDAChunk(), Softmax())
    kernels += [(k, w.uses_atomics) for w in wls for k in w.seeds()]
    rms = RMSNorm("bf16")
    knob_sets = rms.recommended_knobs() + [dict(rms.default_knobs, cluster=c, threads=t)
                                           for c in (2, 4, 8) for t in (128, 512)]
    templates = [rms.instantiate(kn) for kn in knob_sets]
    assert sum(".reqnctapercluster" in k.ptx for k in templates) >= 9
    kernels += [(k, False) for k in templates]
    assert len(files) >= 25 and len(kernels) >= 80
    for k, atomics in kernels:
        assert kinds(k, atomics) == v9_kinds(k, monkeypatch, atomics), k.entry


# ----------------------------------------------------------------------- the replay dodges: what each sees
TABLE = [int(v, 16) for v in re.findall(r"0x([0-9a-f]{8})u", (REDTEAM / "rt_replay_seed_dodge.cu").read_text())]


def refill_careful(y_first: int) -> bool:
    """rt_replay_refill_dodge's test: the first element of the CTA's first output row holds 0xFFFF."""
    return y_first == 0xFFFF


def scale_careful(x_bits: np.ndarray) -> bool:
    """rt_replay_scale_dodge's test, for a whole launch: every row's mean square in [1/4, 4] (a row outside it
    takes the racy path)."""
    x = (x_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ms = (x * x).mean(axis=1)
    return bool(np.all((ms >= 0.25) & (ms <= 4.0)))


def seed_careful(x_bits: np.ndarray) -> bool:
    """rt_replay_seed_dodge's test: x[0, 0:2] (one little-endian word) is in its table."""
    return (int(x_bits[0, 0]) | int(x_bits[0, 1]) << 16) in TABLE


def test_the_seed_dodges_table_is_the_replays_inputs_at_seeds_7_to_30(wl):
    """numpy's standard normal fills x row-major from the first draw: x[0, 0:2] of make_inputs(shape, seed) is the
    same at every shape, and the table holds it for every seed a version 9 replay used (7 + launch index)."""
    from workloads.dtypes import as_bits

    got = [as_bits(wl.make_inputs(shape, s, "normal", np)["x"], "bf16", np) for s in range(7, 31)
           for shape in [(3, 512), (64, 256)]]
    assert len(TABLE) == 24 and all(seed_careful(x) for x in got)
    assert not any(seed_careful(as_bits(wl.make_inputs((3, 512), s, "normal", np)["x"], "bf16", np))
                   for s in range(31, 200))


DODGES = {"refill": lambda y0, x: refill_careful(y0), "scale": lambda y0, x: scale_careful(x),
          "seed": lambda y0, x: seed_careful(x)}


def test_the_timed_launches_take_each_dodges_racy_path_at_most_launches(wl):
    """Premise: over the timed launches of a shape with five input sets (``timed_call`` on numpy, the correct
    answer for set 0 among the refill patterns, as the worker has it) the refill dodge keeps its barrier only at
    all-ones refills (about 1 in 10: 1 in 5 of the refilled half, the rest stale), the scale dodge only on set 0
    (normal, 1 in 5), the seed dodge never."""
    from evaluators.gpu.timed_checks import InputSets, set_count, timed_call
    from tests.timed_launches import drive, rms_honest
    from workloads.dtypes import storage_dtype

    shape = (256, 64)
    nbytes = sum(int(v.nbytes) for v in wl.make_inputs(shape, 0).values())
    sets = InputSets.make(wl, shape, [300 + i for i in range(set_count(wl, nbytes))], np)
    out = {s.name: np.empty(s.shape, dtype=storage_dtype(s.dtype, np)) for s in wl.outputs(shape)}
    answer = {"y": np.empty_like(out["y"])}
    rms_honest(sets.sets[0], answer, shape)
    sets.answers = answer
    seen: list[dict[str, bool]] = []

    def kernel(inputs, outputs, shape, params=None):
        y0, x = int(outputs["y"].view(np.uint16)[0, 0]), inputs["x"].view(np.uint16)
        seen.append({name: test(y0, x) for name, test in DODGES.items()})
        rms_honest(inputs, outputs, shape, params)

    call, _ = timed_call(wl, kernel, sets, out, shape, np.random.default_rng(6), repeats=400)
    drive(call, 400)
    timed = seen[3:]
    share = {name: np.mean([s[name] for s in timed]) for name in DODGES}
    assert len(timed) == 400 and len(sets.sets) == 5
    assert 0.05 < share["refill"] < 0.16 and 0.12 < share["scale"] < 0.28 and share["seed"] == 0.0, share


@pytest.fixture
def cp(monkeypatch):
    return sd.install(monkeypatch)


def spy(seen: list[dict], race: str | None = None):
    """An emulated launch that records each dodge's decision (``DODGES``), then writes the right answer; with
    ``race``, that dodge's race made visible: a wrong row wherever it would have dropped its barrier."""
    from tests.test_sanitizer_replay import rms_bits

    def twin(grid, block, args):
        x_ptr, w_ptr, y_ptr, m, n, eps = (int(args[0]), int(args[1]), int(args[2]), int(args[3]), int(args[4]),
                                          float(args[5]))
        x = sd.host_view(x_ptr, (m, n), np.uint16)
        y = sd.host_view(y_ptr, (m, n), np.uint16)
        seen.append({"shape": (m, n), **{name: test(int(y[0, 0]), x) for name, test in DODGES.items()}})
        y[...] = rms_bits(x, sd.host_view(w_ptr, (n,), np.float32), eps)
        if race is not None and not seen[-1][race]:
            y[0] ^= np.uint16(0x4000)

    return twin


def _spec(tmp_path: Path, name: str, seed: int, draw: bool) -> dict:
    from tests.test_sanitizer_replay import replay_spec

    spec = replay_spec(tmp_path, name, [(7, 760)], [(7, 760), (64, 512)])
    spec["seed"] = seed
    if draw:
        spec["draw_conditions"] = True
    return spec


def test_version_9s_replay_kept_every_dodges_barrier(cp, tmp_path):
    """A version 9 spec (seed 7, no drawn conditions): every launch reads normal rows of seed 7 + i into all-ones
    outputs, and every dodge keeps its barrier at every one of them."""
    from evaluators.gpu.sanitize_replay import replay

    seen: list[dict] = []
    sd.KERNELS["spy"] = spy(seen)
    results = replay(_spec(tmp_path, "spy", 7, draw=False))
    assert len(seen) == 7 and all(r["ok"] for r in results)
    assert all(s[name] for s in seen for name in DODGES), seen
    assert {(r["distribution"], r["pattern"]) for r in results} == {("normal", "ones")}


DRAWN_SEED = 20261208  # a replay seed whose draws at 64 x 512 hold a non-all-ones fill and a non-normal set


@pytest.mark.parametrize("race", list(DODGES))
def test_a_replay_with_drawn_conditions_takes_each_dodges_racy_path(cp, tmp_path, race):
    """Version 10: each launch draws its distribution and refill pattern (and the seed is drawn per call): each
    dodge's race, made visible, fails the replay at a launch of the timed shape (64 x 512 here)."""
    from evaluators.gpu.sanitize_replay import replay

    seen: list[dict] = []
    sd.KERNELS["racy"] = spy(seen, race)
    results = replay(_spec(tmp_path, "racy", DRAWN_SEED, draw=True))
    timed = [r for r in results if r["shape"] == [64, 512]]
    assert len(timed) == 3 and not all(r["ok"] for r in timed), timed
    assert [r["ok"] for r in results] == [s[race] for s in seen]
    assert len({r["distribution"] for r in results}) >= 3 and len({r["pattern"] for r in results}) >= 3


def test_an_honest_kernel_passes_the_replay_under_every_drawn_condition(cp, tmp_path):
    """Every distribution (NaN and Inf rows included) and every refill pattern, the "answer" too: the honest
    emulation is right at every launch, and the poison is counted where one was written."""
    from evaluators.gpu.sanitize_replay import launch_conditions, replay

    wl = RMSNorm("bf16")
    seed = next(s for s in range(1000) if {p for _, p, _ in launch_conditions({"seed": s, "draw_conditions": True},
                                                                              wl, 7)} >= {"answer", "nan", "random"})
    seen: list[dict] = []
    sd.KERNELS["spy"] = spy(seen)
    results = replay(_spec(tmp_path, "spy", seed, draw=True))
    assert all(r["ok"] and r["n_poison"] == 0 for r in results), results
    assert {r["pattern"] for r in results} >= {"answer", "nan", "random"}


def test_the_drawn_conditions_follow_the_timed_launches_and_escape_with_one_in_125(wl):
    """launch_conditions over 4000 seeds, the three launches of the timed shape (phase 2 of the replay: indices
    0-2): every distribution and pattern about equally often, "answer" never with the first distribution; a dodge
    keeping its barrier at one refill pattern (or one distribution) meets its racy path unless all three draw it:
    (1/5)^3 = 0.8% (below that now: half the launches are "stale"), one keeping it at stale outputs (1/2)^3."""
    from evaluators.gpu.sanitize_replay import launch_conditions

    draws = [launch_conditions({"seed": s, "draw_conditions": True}, wl, 3) for s in range(4000)]
    flat = [c for d in draws for c in d]
    dists = {d: np.mean([c[0] == d for c in flat]) for d in wl.distributions}
    assert all(0.17 < v < 0.23 for v in dists.values()), dists
    assert not any(c[0] == "normal" and c[1] == "answer" for c in flat)
    ones = np.mean([all(c[1] == "ones" for c in d) for d in draws])
    normal = np.mean([all(c[0] == "normal" for c in d) for d in draws])
    assert ones < 0.02 and normal < 0.02, (ones, normal)
    # version 13: half the launches "stale" (outputs holding the launch's own answer), as the timed launches
    stale = np.mean([c[1] == "stale" for c in flat])
    assert 0.47 < stale < 0.53, stale
    assert np.mean([all(c[1] == "stale" for c in d) for d in draws]) < 0.15  # (1/2)^3 = 12.5%
    assert launch_conditions({"seed": 5}, wl, 2) == [("normal", "ones", 0)] * 2  # specs without draws


def test_sanitize_draws_the_replay_seed_per_call_and_asks_for_drawn_conditions(monkeypatch):
    from evaluators.gpu import sanitizer

    specs = []

    def fake_tool(tool, spec_path, timeout_s, exe, env=None, **cap):
        spec = json.loads(Path(spec_path).read_text())
        specs.append(spec)
        return sanitizer.ToolRun(tool, 0, [{"kernel": k["id"], "shape": s, "ok": True} for k in spec["kernels"]
                                           for s in spec["shapes"] + spec["edge_shapes"]], 0, 0.1, "")

    monkeypatch.setattr(sanitizer, "run_tool", fake_tool)
    wl = RMSNorm("bf16")
    a = sanitizer.sanitize(wl.seeds()[1:], wl, arch="sm_90", exe="/bin/true", timed_shapes=wl.search_shapes)
    b = sanitizer.sanitize(wl.seeds()[1:], wl, arch="sm_90", exe="/bin/true", timed_shapes=wl.search_shapes)
    c = sanitizer.sanitize(wl.seeds()[1:], wl, arch="sm_90", exe="/bin/true", seed=11)
    assert all(s["draw_conditions"] is True for s in specs)
    assert a[0].seed != b[0].seed and c[0].seed == 11 and a[0].status == Status.OK
    assert {s["seed"] for s in specs} == {a[0].seed, b[0].seed, 11}


def test_the_gpu_tests_pool_seed_draws_racy_conditions_for_the_replay_dodges(wl):
    """tests/gpu/test_gate_redteam6.py's pool (POOL_SEED) gives its k-th sanitize call the replay seed
    (POOL_SEED 7919 + k) mod 2^31 (GPUPool.sanitize): for each of its first eight calls, each of the three replay
    dodges takes its racy path at a launch of the timed shape (phase 2: three launches) -- the GPU tests' verdicts
    do not depend on luck."""
    from evaluators.gpu.sanitize_replay import launch_conditions
    from tests.gpu.test_gate_redteam6 import POOL_SEED

    for k in range(8):
        seed = (POOL_SEED * 7919 + k) % (1 << 31)
        cond = launch_conditions({"seed": seed, "draw_conditions": True}, wl, 3)
        assert any(p != "ones" for _, p, _ in cond) and any(d != "normal" for d, _, _ in cond), (k, cond)
        assert not any(7 <= seed + i <= 30 for i in range(3))
