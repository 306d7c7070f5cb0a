"""Fifth red-team round (tests/gpu/kernels/redteam, README: fifth round), on the CPU: what gate rules version 7
did with each kernel and what version 8 does. Static verdicts through ``evaluators.pipeline.prepare`` (ptxas,
the input-store check, the race lint) with RMSNorm's settings; the two new race lint forms on hand-written PTX
and on every PTX file, seed and recorded H200 kernel; the index check's shape on the CuPy and VMM stand-in
(tests/cupy_standin.py, the scaled limit of tests/test_index_check.py); the sanitizer replay's scalars from the
code. GPU tests: tests/gpu/test_gate_redteam5.py.

- rt_alu_pace_dodge: rt_sleep_dodge's timer with a chain of ALU operations (not instrumented by
  compute-sanitizer) in place of ``nanosleep``. Was: ok (rule 6 read only sleeps). Now: rule 6's shared form.
- rt_shared_state: rt_local_state's launch counter in uninitialised shared memory. Was: ok (rule 5 read only
  ``.global`` variables and ``.local`` memory). Now: rule 5's ``.shared`` form.
- rt_index_tail64: 32-bit indices on the main path, 64-bit in the tail CTA; the index check's only row past
  2^31 (16385 x 131072) was a tail row. Was: ok. Now: RMSNorm's index shape 16641 x 131072.
- rt_atomic_race_clock: the same timer without any wait: two warps race to a shared compare-and-swap after an ALU
  chain and a chain of shared atomics. Was: ok (racecheck does not report atomics). Now: rule 4's order form.
- rt_replay_eps_dodge: the barrier kept only at the replay's eps (the workload's default). Was: ok with a clean
  sanitizer verdict. Now (version 9): the replay's benchmark-layout launches run at every drawn eps.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
from test_input_stores import HEAD, TAIL

from evaluators.input_stores import provenance
from evaluators.race_lint import (
    _launch_state_writes,
    _order_atomics,
    _shared_spin_waits,
    _stale_local_reads,
    _stale_shared_reads,
    _time_reads,
    _wall_clock_waits,
    race_lint,
)
from evaluators.types import Status
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from tests.gpu.rmsnorm_kernels import DODGE, ROOT, WARP_ROWS, judge, redteam
from tests.test_index_check import LIMIT, row_launch, scaled_standin
from workloads.rmsnorm import EPS, EPS_DRAWS, RMSNorm


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def v7_findings(k: Kernel) -> list:
    """The race lint forms gate rules version 7 ran that could see state or time (rules 3, 5, 6 as they were)."""
    p = provenance(k)
    return _time_reads(p) + _wall_clock_waits(p) + _launch_state_writes(k, p) + _stale_local_reads(k, p)


# --------------------------------------------------------------- rule 6's shared form: a wait on a shared word
def test_a_sanitizer_dodge_timed_by_an_alu_chain_is_rejected_before_any_gpu_time(wl):
    """Was: ok (no clock register, no sleep, no module or local state). Now: rule 6's shared form names the
    counting loop's read of the flag."""
    k = redteam("rt_alu_pace_dodge")
    assert "nanosleep" not in k.ptx and "%clock" not in k.ptx and "mad.lo.s32" in k.ptx
    assert v7_findings(k) == []
    r = judge(k, wl)
    assert r is not None and (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint"), r
    assert "wall_clock_wait" in str(r) and "atom.shared.or.b32" in str(r) and "shared variable" in str(r)


SHARED = ".shared .align 4 .b32 flag;\n.shared .align 4 .b32 count;\n"
SPIN = "\tmov.u32 %r1, flag;\n$L_spin:\n\t{load}\n\tsetp.eq.u32 %p1, %r2, 0;\n\t@%p1 bra $L_spin;\n"


@pytest.mark.parametrize("store, load, flagged", [
    ("st.shared.u32 [flag], 0;", "ld.volatile.shared.u32 %r2, [%r1];", True),
    ("st.shared.u32 [flag], 0;", "atom.shared.or.b32 %r2, [%r1], 0;", True),
    ("st.shared.u32 [flag], 0;", "ld.shared.u32 %r2, [%r1];", True),  # ptxas may keep it: a PTX-level spin
    ("st.shared.u32 [count], 0;", "ld.volatile.shared.u32 %r2, [%r1];", False),  # flag never written
    ("", "ld.volatile.shared.u32 %r2, [%r1];", False),
])
def test_shared_spin_forms(store, load, flagged):
    head = HEAD.replace(".address_size 64\n", f".address_size 64\n\n{SHARED}\n")
    body = f"\t{store}\n\tbar.sync 0;\n" + SPIN.replace("{load}", load)
    k = Kernel(parse_module(head + body + TAIL), "k", LaunchConfig(block=(64, 1, 1)))
    rep = race_lint(k, None, waits_ok=False)
    assert [f.kind for f in rep.findings if f.kind == "wall_clock_wait"] == (["wall_clock_wait"] if flagged else [])
    assert race_lint(k, None).ok  # off for a workload declaring atomics, as rule 6


MBAR = ".shared .align 8 .b64 bar;\n.shared .align 4 .b32 count;\n"
MBAR_LOOP = ("\tmov.u32 %r1, bar;\n\tmbarrier.init.shared::cta.b64 [%r1], 1;\n\tbar.sync 0;\n$L_wait:\n{extra}"
             "\tmbarrier.test_wait.parity.shared::cta.b64 %p1, [%r1], 0;\n\t@!%p1 bra $L_wait;\n")


@pytest.mark.parametrize("extra, flagged", [
    ("\tatom.shared.add.u32 %r2, [count], 1;\n", True),  # counts while it waits: a clock
    ("", False),  # a pipeline's retry loop: the wait and its branch
])
def test_a_counting_loop_on_an_mbarrier_wait_is_a_shared_wait_and_a_retry_loop_is_not(extra, flagged):
    head = HEAD.replace(".address_size 64\n", f".address_size 64\n\n{MBAR}\n")
    k = Kernel(parse_module(head + MBAR_LOOP.replace("{extra}", extra) + TAIL), "k", LaunchConfig(block=(64, 1, 1)))
    rep = race_lint(k, None, waits_ok=False)
    assert [f.kind for f in rep.findings] == (["wall_clock_wait"] if flagged else []), rep.reason()


# ------------------------------------------------------------------- rule 4's order form: arrival order seen
def test_a_sanitizer_dodge_timed_by_a_race_to_a_shared_atomic_is_rejected_before_any_gpu_time(wl):
    """Was: ok (no loop waits on a shared read, so not even rule 6's shared form sees it). Now: rule 4's order
    form names the compare-and-swap."""
    k = redteam("rt_atomic_race_clock")
    p = provenance(k)
    assert v7_findings(k) == [] and _shared_spin_waits(k, p) == [] and _stale_shared_reads(k, p) == []
    r = judge(k, wl)
    assert r is not None and (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint"), r
    assert "atomic_order" in str(r) and "atom.shared.cas.b32" in str(r) and "arrive" in str(r)


@pytest.mark.parametrize("ins, flagged", [
    ("atom.shared.cas.b32 %r2, [count], 0, 1;", True),  # the first to arrive wins
    ("atom.shared.exch.b32 %r2, [count], 1;", True),  # the last to arrive stays
    ("atom.shared.add.u32 %r2, [count], 1;\n\tst.global.u32 [%rd4], %r2;", True),  # a ticket: its arrival rank
    ("atom.shared.add.u32 %r5, [count], 1;", False),  # the result never read: a commutative update
    ("red.shared.add.u32 [count], 1;", False),
    ("atom.global.add.f32 %f1, [%rd4], %f2;", False),  # rule 4's float form says it
])
def test_atomic_order_forms(ins, flagged):
    head = HEAD.replace(".address_size 64\n", f".address_size 64\n\n{SHARED}\n")
    k = Kernel(parse_module(head + f"\t{ins}\n" + TAIL), "k", LaunchConfig(block=(64, 1, 1)))
    rep = race_lint(k, None, order_ok=False)
    assert [f.kind for f in rep.findings] == (["atomic_order"] if flagged else []), rep.reason()
    assert race_lint(k, None).ok  # off for a workload declaring atomics


# ------------------------------------------------------------ rule 5's .shared form: a read before any store
def test_a_launch_counter_in_uninitialised_shared_memory_is_rejected_before_any_gpu_time(wl):
    """Was: ok (rule 5 read ``.global`` variables and ``.local`` memory only). Now: its ``.shared`` form."""
    k = redteam("rt_shared_state")
    assert "ld.volatile.shared.v2.u32" in k.ptx and ".local" not in k.ptx
    assert v7_findings(k) == []
    r = judge(k, wl)
    assert r is not None and (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint"), r
    assert "launch_state" in str(r) and "slot" in str(r) and "not cleared between launches" in str(r)


ARR = ".shared .align 4 .b8 arr[64];\n"


@pytest.mark.parametrize("body, flagged", [
    ("\tld.shared.u32 %r2, [arr];\n", True),  # read before any store
    ("\tatom.shared.add.u32 %r2, [arr], 1;\n", True),  # an atomic returns what was there
    ("\tst.shared.u32 [arr], 0;\n\tbar.sync 0;\n\tld.shared.u32 %r2, [arr+4];\n", False),
    # a store by another warp's branch, a barrier, then the read (warp specialisation)
    ("\tsetp.eq.u32 %p1, %r1, 0;\n\t@!%p1 bra $L_skip;\n\tst.shared.u32 [arr], 0;\n$L_skip:\n\tbar.sync 0;\n"
     "\tld.shared.u32 %r2, [arr];\n", False),
    # the read first in a loop whose later iterations follow a store: its first iteration reads stale memory
    ("\tmov.u32 %r3, 0;\n$L_top:\n\tld.shared.u32 %r2, [arr];\n\tst.shared.u32 [arr], %r3;\n\tadd.u32 %r3, %r3, 1;\n"
     "\tsetp.lt.u32 %p1, %r3, 4;\n\t@%p1 bra $L_top;\n", True),
])
def test_stale_shared_read_forms(body, flagged):
    head = HEAD.replace(".address_size 64\n", f".address_size 64\n\n{ARR}\n")
    k = Kernel(parse_module(head + "\tmov.u32 %r1, %tid.x;\n" + body + TAIL), "k", LaunchConfig(block=(64, 1, 1)))
    rep = race_lint(k, None, launch_state_ok=False)
    assert [f.kind for f in rep.findings] == (["launch_state"] if flagged else []), rep.reason()
    assert race_lint(k, None).ok  # off for a workload declaring atomics, as rule 5


def _entries(text: str) -> list[Kernel]:
    m = parse_module(text)
    return [Kernel(m, fn.name, LaunchConfig(block=(128, 1, 1))) for fn in m.functions
            if fn.kind == "entry" and fn.body is not None]


def _new_forms(k: Kernel) -> list:
    p = provenance(k)
    return _shared_spin_waits(k, p) + _stale_shared_reads(k, p) + _order_atomics(p)


def test_every_ptx_file_and_seed_with_shared_memory_passes_the_new_forms():
    from workloads.kda import KDAChunk, KDARecurrent
    from workloads.softmax import Softmax

    files = [Path(p) for p in glob.glob(str(ROOT / "**" / "*.ptx"), recursive=True) if "/.git/" not in p]
    kernels = [k for f in files if ".shared" in (t := f.read_text()) or "atom." in t for k in _entries(t)]
    seeds = [k for w in (RMSNorm("bf16"), RMSNorm("fp16"), KDARecurrent(), KDAChunk(), Softmax())
             for k in w.seeds() if ".shared" in k.ptx or "atom." in k.ptx]
    assert len(kernels) >= 5 and len(seeds) >= 4
    for k in kernels + seeds:
        assert _new_forms(k) == [], k.entry


# ----------------------------------------------------------------------- dynamic-side kernels: no static rule
@pytest.mark.parametrize("name, knobs", [("rt_index_tail64", WARP_ROWS), ("rt_replay_eps_dodge", DODGE)])
def test_the_dynamic_side_kernels_pass_every_static_check(wl, name, knobs):
    assert judge(redteam(name, knobs), wl) is None


def test_the_replay_launches_at_every_eps_the_timed_launches_draw(wl):
    """rt_replay_eps_dodge keeps its barrier at eps == 1e-6 only; the timed launches draw eps from EPS_DRAWS
    (another value two times in three). Since gate rules version 9 the replay's benchmark-layout launches run once
    per drawn value, each with its own scalars, and only those: the exact layout keeps the default eps."""
    from evaluators.gpu import sanitize_replay
    from evaluators.gpu.sanitizer import replay_plan

    drawn = [wl.draw_params(s)["eps"] for s in range(3000)]
    other = np.mean([e != EPS for e in drawn])
    assert set(drawn) == set(EPS_DRAWS) and 0.6 < other < 0.73, other
    assert sanitize_replay.scalar_settings(wl) == [{"eps": e} for e in EPS_DRAWS]
    runs = sanitize_replay.replay_runs(replay_plan([(32768, 512), (32768, 4096)]), wl)
    timed = [(p, wl.scalars(s, p)["eps"]) for s, place, p in runs if s == (32768, 512)]
    assert [e for _, e in timed] == list(EPS_DRAWS) and all(place == "edge" for s, place, _ in runs
                                                           if s == (32768, 512))
    assert {place for _, place, p in runs if not p} == {"exact"}
    assert len(runs) == 3 + 4 * len(EPS_DRAWS)


# ------------------------------------------------------------------ the index check's shape (stand-in dry run)
def test_rmsnorms_index_shape_puts_whole_ctas_and_a_tail_row_past_2_to_the_31(wl):
    from evaluators.gpu import index_check as ic

    (m, n), = wl.index_shapes
    first = ic.checked_rows((m, n))
    past = m - first
    assert (first, past) == (16384, 257)
    for g in (1, 2, 4, 8, 16, 32, 64, 128, 256):  # rows per CTA (or per row group) of a kernel
        whole = [c for c in range(first // g, m // g)]  # CTAs wholly past element 2^31
        assert len(whole) >= 1 and m % g == (1 if g > 1 else 0), g


N_SMALL = 4096


@pytest.fixture
def cp(monkeypatch):
    return scaled_standin(monkeypatch)


def tail64_twin(rows_per_cta: int = 8):
    """rt_index_tail64 on the stand-in at the scaled limit: rows in whole CTAs index in signed 32 bits of the
    scaled limit (a flat index past it wraps to idx - 2 LIMIT, below x), the tail CTA's rows in 64 bits."""
    def rows(r: int, m: int, n: int) -> tuple[int, int]:
        idx = r * n
        if r // rows_per_cta < m // rows_per_cta and idx >= LIMIT:
            idx -= 2 * LIMIT
        return idx, idx

    return row_launch(rows)


def _index_run(cp, shape):
    from evaluators.gpu import index_check as ic
    from evaluators.gpu.args import param_types
    from evaluators.gpu.worker import make_launcher
    from tests import cupy_standin as sd

    class Scaled(RMSNorm):
        index_shapes = (shape,)

    sd.KERNELS["tail64"] = tail64_twin()
    seed = RMSNorm("bf16").seeds()[1]
    run = make_launcher(Scaled("bf16"), cp, sd._Function("tail64"), param_types(seed), seed.launch.to_json())
    return ic.index_check(Scaled("bf16"), run, shape, 3, ic.IndexCheckSets())  # kept: no sync after a fault


def test_a_tail_only_64_bit_index_passed_the_one_row_shape_and_faults_at_the_version_8_shape(cp):
    """Scaled: 2^16 elements, rows of 4096, the first row past the limit 16. (17, 4096) is 16385 x 131072's
    analogue (one row past: the tail), (16 + 256 + 1, 4096) 16641 x 131072's (257 rows past)."""
    from evaluators.gpu.worker import KernelFault

    bad, notes = _index_run(cp, (17, N_SMALL))
    assert bad is None and notes["checked_rows"] == [16, 17]  # gate rules version 7: passed
    with pytest.raises(KernelFault) as e:
        _index_run(cp, (16 + 257, N_SMALL))
    assert e.value.fatal and "IllegalAddress" in str(e.value)
