"""Fourth red-team round (tests/gpu/kernels/redteam, README: fourth round), on the CPU: what gate rules version 5
does with each kernel before any GPU time (``evaluators.pipeline.prepare``: ptxas, the input-store check, the race
lint), the new race lint rule 6 (``wall_clock_wait``) on hand-written forms and on every PTX the repo holds or
recorded, and the tricks only a dynamic check could see as numpy launchers through the gate's logic. GPU tests:
tests/gpu/test_gate_redteam4.py.

- rt_sleep_dodge: a sanitizer dodge timed by ``nanosleep`` against a shared counter (no clock register). Was: no
  rule looked at wall-clock waits. Now: rule 6.
- rt_heap_state: a launch counter in a device-heap block (malloc/free hand the same block back). Caught by the
  input-store check (a store through a call's result), not by rule 5.
- rt_local_state: a launch counter in the thread's own uninitialised ``.local`` memory. Was: rule 5 looked at
  ``.global`` variables only. Now: rule 5's second form (a read of ``.local`` bytes the launch did not write).
- rt_edge_race, rt_index32: holes of the dynamic checks in gate rules version 6 (placement of the replay's
  inputs; no shape of 2^31 elements or more); nothing static sees them. Closed in version 7 by the sanitizer
  replay in the benchmark's layout (tests/test_sanitizer_replay.py) and the index check
  (tests/test_index_check.py).
- rt_softmax_sampled_max: softmax shifted by the max of the row's first 256 elements, not of the row: right for
  every input the softmax workload drew (perturbed or not), NaN on a left-padded row. Was: a hole of the
  workload's distributions. Now: a "masked" distribution (a front of up to half the row at -1e4). Its first
  version, shifted by x[r, 0], was caught by gate run 4 already.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
from test_input_stores import HEAD, TAIL

from evaluators.race_lint import race_lint
from evaluators.types import Status
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from tests.gpu.rmsnorm_kernels import DODGE, ROOT, judge, recorded_h200, redteam
from workloads.rmsnorm import RMSNorm

SLEEP = "no race lint rule looked at nanosleep: a wall-clock sleep against a counted loop is a clock"


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


# ------------------------------------------------------------------------------------ rule 6: wall-clock waits
def test_a_sanitizer_dodge_timed_by_nanosleep_is_rejected_before_any_gpu_time(wl):
    """Was: {SLEEP}. The race lint as gate v5 ran it (rules 1-5) passes it; rule 6 names the sleep."""
    k = redteam("rt_sleep_dodge")
    assert "nanosleep.u32" in k.ptx and "%clock" not in k.ptx and "%globaltimer" not in k.ptx
    assert race_lint(k, None, wl.uses_atomics, wl.uses_atomics).ok  # gate v5's rules
    r = judge(k, wl)
    assert r is not None and (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint"), r
    assert "wall_clock_wait" in str(r) and "nanosleep" in str(r)


SHARED_BAR = ".shared .align 8 .b64 bar;"


@pytest.mark.parametrize("ins, flagged", [
    ("nanosleep.u32 %r1;", True),
    ("nanosleep.u32 1000;", True),
    ("mbarrier.try_wait.shared::cta.b64 %p1, [bar], %rd8, 20000;", True),
    ("mbarrier.try_wait.parity.shared::cta.b64 %p1, [bar], %r1, 20000;", True),
    ("mbarrier.try_wait.parity.shared::cta.b64 %p1, [bar], %r1;", False),  # a TMA pipeline's retry loop
    ("mbarrier.test_wait.shared::cta.b64 %p1, [bar], %rd8;", False),
    ("mbarrier.arrive.shared::cta.b64 %rd8, [bar];", False),
])
def test_wall_clock_wait_rule_forms(ins, flagged):
    head = HEAD.replace(".address_size 64\n", f".address_size 64\n\n{SHARED_BAR}\n")
    k = Kernel(parse_module(head + f"\t{ins}\n" + TAIL), "k", LaunchConfig(block=(32, 1, 1)))
    rep = race_lint(k, None, waits_ok=False)
    assert [f.kind for f in rep.findings] == (["wall_clock_wait"] if flagged else []), rep.reason()
    assert race_lint(k, None).ok  # rule 6 off: a workload declaring atomics (a backoff in a spin may sleep)


def test_the_wall_clock_rule_reaches_into_called_functions():
    func = ".func pause()\n{\n\tnanosleep.u32 500;\n\tret;\n}\n\n"
    text = (HEAD + "\t{\n\tcall.uni pause, ();\n\t}\n" + TAIL).replace(".visible .entry k(", func + ".visible .entry k(")
    rep = race_lint(Kernel(parse_module(text), "k", LaunchConfig(block=(32, 1, 1))), None, waits_ok=False)
    assert [f.kind for f in rep.findings] == ["wall_clock_wait"], rep.reason()


def _waits(text: str) -> bool:
    return "nanosleep" in text or "try_wait" in text


def test_every_ptx_file_of_the_repo_passes_rule_6():
    """Rule 6 reads only ``nanosleep`` and ``mbarrier.try_wait``: a PTX without either cannot meet it; every file
    that holds one is linted (tests/data/bulk_mbarrier.ptx: a try_wait retry loop without a hint) except the
    broken kernel of tests/gpu/kernels, which sleeps in its hang on purpose (no PTX file of it is kept)."""
    files = [Path(p) for p in glob.glob(str(ROOT / "**" / "*.ptx"), recursive=True) if "/.git/" not in p]
    assert len(files) >= 20
    linted = 0
    for f in files:
        text = f.read_text()
        if not _waits(text):
            continue
        m = parse_module(text)
        for fn in m.functions:
            if fn.kind == "entry" and fn.body is not None:
                rep = race_lint(Kernel(m, fn.name, LaunchConfig(block=(128, 1, 1))), None, waits_ok=False)
                assert not [x for x in rep.findings if x.kind == "wall_clock_wait"], (f, rep.reason())
                linted += 1
    assert linted >= 1  # bulk_mbarrier.ptx


def test_every_recorded_h200_kernel_passes_rule_6():
    """The distinct kernels of the recorded H200 runs (experiments/data/*.sqlite.xz, gate v1, v5 and v10 runs): none
    holds a wall-clock wait, so rule 6 rejects none of them."""
    rec = recorded_h200()
    assert len(rec.kernels) >= 1400
    assert [i for i, m in rec.kernels.items() if _waits(m.row.ptx)] == []


# ------------------------------------------------------------------------------ state kept across launches
def test_a_launch_counter_in_the_device_heap_is_rejected_by_the_input_store_check(wl):
    """rt_heap_state keeps no .global variable (rule 5's variable forms pass it); its counter's store goes through
    malloc's result, which no output or module variable vouches for: input_mutated before any GPU time. Since
    gate rules version 11 rule 5's address form also finds its reads of the heap block (an address that a call
    returned, which nothing vouches for), its only launch_state findings; the input-store check runs first."""
    k = redteam("rt_heap_state")
    state = [f for f in race_lint(k, None, False, False, False).findings if f.kind == "launch_state"]
    assert "malloc" in k.ptx and state and all("no variable, parameter or buffer vouches for" in f.why for f in state)
    r = judge(k, wl)
    assert r is not None and (r.status, r.step) == (Status.INPUT_MUTATED, "input_stores"), r
    assert "st.volatile.u32" in str(r) and "loaded from memory" in str(r)


def test_a_launch_counter_in_uninitialised_local_memory_is_rejected_before_any_gpu_time(wl):
    """rt_local_state keeps its counter in the thread's own .local memory: the input-store check skips .local
    destinations and the .global form of rule 5 passes it; the .local form names the read of bytes no store of
    the launch wrote."""
    k = redteam("rt_local_state")
    assert ".local .align 8 .b8 rt_slot[8]" in k.ptx and "ld.volatile.v2.u32" in k.ptx
    rep = race_lint(k, None, False, False, False)
    assert [f.kind for f in rep.findings] == ["launch_state"], rep.reason()
    assert "rt_slot" in rep.findings[0].why and "ld.volatile.v2.u32" in rep.findings[0].text
    r = judge(k, wl)
    assert r is not None and (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint"), r
    assert "launch_state" in str(r) and "hardware thread slot" in str(r)


SLOT = "\t.local .align 8 .b8 slot[16];\n"
BRANCH = "\tsetp.eq.u32 %p1, %r1, 0;\n\t@%p1 bra $L__a;\n"


@pytest.mark.parametrize("body, flagged", [
    ("ld.local.u32 %r3, [slot];", True),  # read before any write
    ("st.local.u32 [slot], %r1;\n\tld.local.u32 %r3, [slot];", False),
    ("st.local.u32 [slot], %r1;\n\tld.local.u32 %r3, [slot+4];", True),  # another word of the variable
    ("st.local.v2.u32 [slot], {%r1, %r2};\n\tld.local.u32 %r3, [slot+4];", False),
    ("mov.u64 %rd8, slot;\n\tcvta.local.u64 %rd9, %rd8;\n\tld.u32 %r3, [%rd9+8];", True),  # generic
    ("mov.u64 %rd8, slot;\n\tcvta.local.u64 %rd9, %rd8;\n\tst.u32 [%rd9+8], %r1;\n\tld.local.u32 %r3, [slot+8];",
     False),
    (BRANCH + "\tst.local.u32 [slot], %r1;\n$L__a:\n\tld.local.u32 %r3, [slot];", True),  # written on one path
    (BRANCH + "\tst.local.u32 [slot], %r1;\n\tbra $L__j;\n$L__a:\n\tst.local.u32 [slot], %r2;\n$L__j:\n"
     "\tld.local.u32 %r3, [slot];", False),  # written on both
    ("mov.u64 %rd8, slot;\n\tadd.u64 %rd9, %rd8, %rd5;\n\tst.local.u32 [%rd9], %r1;\n\tld.local.u32 %r3, [%rd9];",
     False),  # a dynamically indexed array the thread fills
    ("mov.u64 %rd8, slot;\n\tadd.u64 %rd9, %rd8, %rd5;\n\tld.local.u32 %r3, [%rd9];", True),  # never written
    ("mov.u64 %rd8, slot;\n\tadd.u64 %rd9, %rd8, %rd5;\n\tst.local.u32 [%rd9], %r1;\n\tld.local.u32 %r3, [slot+12];",
     False),  # filled at computed offsets, read at a constant one (an unrolled read of a loop-filled array)
    ("ld.local.u32 %r3, [8];", True),  # a local address no variable vouches for
    ("st.shared.u32 [buf], %r1;\n\tld.shared.u32 %r3, [buf+4];", False),  # shared memory: not this rule
])
def test_stale_local_read_forms(body, flagged):
    k = Kernel(parse_module(HEAD + SLOT + f"\t{body}\n" + TAIL), "k", LaunchConfig(block=(32, 1, 1)))
    rep = race_lint(k, None, launch_state_ok=False)
    assert [f.kind for f in rep.findings] == (["launch_state"] if flagged else []), rep.reason()
    assert race_lint(k, None).ok  # rule 5 off: a workload declaring atomics


def test_every_ptx_file_and_seed_with_local_memory_passes_the_local_form_of_rule_5():
    """The PTX files of the repo that use local memory (tests/data/calls_printf.ptx: printf's argument buffer)
    and the seeds that do (the KDA naive seeds keep per-thread arrays in local memory) pass; no recorded H200
    kernel uses local memory (test below)."""
    from workloads.kda import KDAChunk, KDARecurrent

    files = [Path(p) for p in glob.glob(str(ROOT / "**" / "*.ptx"), recursive=True) if "/.git/" not in p]
    kernels = []
    for f in files:
        text = f.read_text()
        if ".local" in text:
            m = parse_module(text)
            kernels += [Kernel(m, fn.name, LaunchConfig(block=(128, 1, 1))) for fn in m.functions
                        if fn.kind == "entry" and fn.body is not None]
    seeds = [k for wl in (KDARecurrent(), KDAChunk()) for k in wl.seeds() if ".local" in k.ptx]
    assert len(kernels) >= 1 and len(seeds) >= 2
    for k in kernels + seeds:
        rep = race_lint(k, None, launch_state_ok=False)
        assert not [f for f in rep.findings if "hardware thread slot" in f.why], (k.entry, rep.reason())


def test_no_recorded_h200_kernel_uses_local_memory():
    rec = recorded_h200()
    assert [i for i, m in rec.kernels.items() if ".local" in m.row.ptx] == []


@pytest.mark.parametrize("name, knobs", [("rt_edge_race", DODGE), ("rt_index32", (("rows_per_cta", 8),))])
def test_the_dynamic_side_holes_pass_every_static_check(wl, name, knobs):
    """Nothing static sees them (a placement test feeding a barrier's guard; 32-bit index arithmetic): the
    dynamic checks of gate rules version 7 do (the replay in the benchmark's layout, the index check; GPU tests
    in tests/gpu/test_gate_redteam4.py)."""
    assert judge(redteam(name, knobs), wl) is None


CHILD_LAUNCH = """.version 8.0
.target sm_90
.address_size 64

.extern .func (.param .b32 func_retval0) cudaLaunchDeviceV2
(
\t.param .b64 cudaLaunchDeviceV2_param_0,
\t.param .b64 cudaLaunchDeviceV2_param_1
)
;

.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .b32 %r<2>;
\t.reg .b64 %rd<2>;

\tld.param.u64 %rd1, [k_param_0];
\t{
\t.param .b64 param0;
\tst.param.b64 [param0+0], %rd1;
\t.param .b64 param1;
\tst.param.b64 [param1+0], %rd1;
\t.param .b32 retval0;
\tcall.uni (retval0), cudaLaunchDeviceV2, (param0, param1);
\tld.param.b32 %r1, [retval0+0];
\t}
\tret;
}
"""


def test_a_child_grid_launched_from_the_kernel_does_not_assemble():
    """Work moved into a child grid (CUDA dynamic parallelism: ``cudaLaunchDeviceV2``, what nvcc -rdc emits for
    ``<<<>>>`` in device code) needs the device runtime linked in; the toolchain assembles one PTX module with
    ptxas and links nothing, so such a kernel is a compile error before any GPU time (and a parent grid counts
    as complete only when its children are, so the timed interval would hold their work anyway)."""
    from evaluators.toolchain import CompileError, compile_ptx

    k = Kernel(parse_module(CHILD_LAUNCH), "k", LaunchConfig(block=(32, 1, 1)))
    with pytest.raises(CompileError, match="Unresolved extern function 'cudaLaunchDeviceV2'"):
        compile_ptx(k, "sm_90")


# ------------------------------------------------------------- 32-bit indices: one check past 2^31 elements
def _checked_shapes(wl: RMSNorm) -> list[tuple[int, int]]:
    """Every shape a check ran at in gate rules version 6: gate, benchmark, search, held-out, sanitizer replay."""
    from evaluators.gpu.sanitizer import SANITIZER_SHAPES

    return [*wl.gate_shapes, *wl.benchmark_shapes, *wl.search_shapes, *wl.heldout_shapes,
            *(tuple(s) for s in SANITIZER_SHAPES)]


def test_32_bit_element_indices_are_right_at_every_shape_any_other_check_runs(wl):
    """rt_index32's `int` index of the last element of every shape the other checks run: it never wraps (the
    benchmark's largest shapes hold exactly 2^31 elements)."""
    last = [(m - 1) * n + n - 1 for m, n in _checked_shapes(wl)]
    assert max(last) == 2**31 - 1 and all(np.int64(v) == np.int64(np.int32(v)) for v in last)


def test_some_check_runs_a_shape_of_2_to_the_31_elements_or_more(wl):
    """Was: a strict xfail (no shape of 2^31 elements or more anywhere). Gate rules version 7: the index check
    (evaluators/gpu/index_check.py) at RMSNorm's index shape, whose last row's `int` index wraps negative."""
    shapes = [*_checked_shapes(wl), *wl.index_shapes]
    assert any(m * n > 2**31 for m, n in shapes)
    (m, n), = wl.index_shapes
    assert np.int64(np.int32(np.int64(m - 1) * n - 2**32)) < 0 and (m - 1) * n >= 2**31


# ---------------------------------------------------------------- softmax shifted by a sample of the row's front
def shifted_softmax(sample: int):
    """rt_softmax_sampled_max as a numpy launcher: fp32 exp(x - m) over its fp32 row sum, m the max of the row's
    first ``sample`` elements (256: one per thread of the default CTA; 1: RT_FIRST_SHIFT, x[r, 0])."""

    def launch(inputs, outputs, shape, params=None) -> None:
        x = inputs["x"].astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(x - x[:, :sample].max(axis=1, keepdims=True))
            outputs["y"][...] = e * (np.float32(1) / e.sum(axis=1, dtype=np.float32, keepdims=True))

    return launch


def test_the_sampled_shift_is_right_on_the_normal_and_shifted_inputs_and_nan_on_a_left_padded_row():
    """What let it through gate v5: the softmax workload's distributions were "normal" and "shifted" only."""
    from evaluators.gpu.gate import compare
    from workloads.softmax import Softmax

    sm, launch = Softmax(rows=64), shifted_softmax(256)
    atol, rtol = sm.tolerance
    for shape in [*sm.gate_shapes, *sm.search_shapes, *sm.heldout_shapes]:
        for d in ("normal", "shifted"):
            inp = sm.make_inputs(shape, 5, d)
            y = np.empty(shape, dtype=np.float32)
            launch(inp, {"y": y}, shape)
            assert compare(y, sm.reference(inp)["y"], "fp32", atol, rtol).ok, (shape, d)
    # real use: the first 300 positions masked (a left-padded prompt), or a hot entry 100 above the rest
    x = np.random.default_rng(0).standard_normal((2, 1024)).astype(np.float32) * 4
    x[0, :300] = -1e4
    x[1, 700] = 120.0
    y = np.empty_like(x)
    launch({"x": x}, {"y": y}, x.shape)
    c = compare(y, sm.reference({"x": x})["y"], "fp32", atol, rtol)
    # inf * (1 / inf) wherever x - m > 88.7: the 724 unmasked entries of row 0, the hot entry of row 1 (whose sum
    # is inf: every other entry becomes 0, the hot one NaN -- and 0 is within atol of their ~e^-100 reference)
    assert c.n_nan == c.n_bad == 724 + 1, c


def _gate_and_timed(launch, seed: int) -> str | None:
    """The softmax gate (every run, every check) and the checked timed launches at the search shapes (64 rows),
    as the worker runs them; the first failure's reason, None when the kernel passes."""
    from evaluators.gpu.gate import run_gate
    from evaluators.gpu.timed_checks import InputSets, set_count, timed_call, verify_checked
    from tests.timed_launches import drive
    from workloads.softmax import Softmax

    sm = Softmax(rows=64)
    g = run_gate(sm, launch, seed=seed)
    if not g.passed:
        return g.reason
    for i, shape in enumerate(sm.search_shapes):
        nbytes = sum(int(v.nbytes) for v in sm.make_inputs(shape, 0).values())
        sets = InputSets.make(sm, shape, [seed * 10 + i + k for k in range(set_count(sm, nbytes))], np)
        out = {"y": np.empty(shape, dtype=np.float32)}
        call, checked = timed_call(sm, launch, sets, out, shape, np.random.default_rng([seed, i]), repeats=20)
        drive(call, 20)
        why = verify_checked(sm, sets, checked, shape)
        if why:
            return why
    return None


def test_a_softmax_shifted_by_the_rows_first_element_is_caught_by_gate_run_4():
    """RT_FIRST_SHIFT=1: run 4 doubles 1/16 of a shifted row's elements in place (~1000 -> ~2000), ~1000 above
    x[r, 0]: NaN where the reference is finite."""
    why = _gate_and_timed(shifted_softmax(1), seed=3)
    assert why is not None and "NaN" in why and "run 4" in why, why


@pytest.mark.parametrize("seed", [3, 4])
def test_the_gate_rejects_a_softmax_shifted_by_the_max_of_the_rows_front(seed):
    """Was: every softmax input distribution, perturbed or not, kept a row's maximum within 88 of the max of its
    first 256 elements. Now the "masked" distribution sets a front of up to half of each row to -1e4 (left
    padding): rows masked past their 256th element are NaN, at the gate shapes of N >= 1000."""
    why = _gate_and_timed(shifted_softmax(256), seed)
    assert why is not None and "masked" in why and "NaN" in why, why


def test_the_masked_softmax_inputs_leave_the_seed_right():
    from evaluators.gpu.gate import run_gate
    from workloads.softmax import Softmax

    def seed_like(inputs, outputs, shape, params=None):  # the seed's math in fp32: exp(x - row max) / sum
        x = inputs["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        outputs["y"][...] = e / e.sum(axis=1, dtype=np.float32, keepdims=True)

    sm = Softmax(rows=64)
    x = sm.make_inputs((7, 1000), 11, "masked")["x"]
    front = (x == np.float32(-1e4)).argmin(axis=1)  # each row's masked prefix length
    assert front.max() > 256 and (x[:, 500:] != np.float32(-1e4)).all()
    assert run_gate(sm, seed_like, seed=5).passed
