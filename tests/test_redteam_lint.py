"""Red-team kernels against the static race lint (evaluators/race_lint.py) and the static checks' reach into
callees (evaluators/input_stores.py), on the CPU.

Each RMSNorm kernel in tests/gpu/kernels/redteam named here passed the static checks of gate v2 as they stood
(the constants say which rule let it through) and should be rejected before any GPU time; the evaluation
pipeline (``evaluators.pipeline.prepare``, the GPU pool's front half) now rejects each with the status its header
names. Hand-written entries isolate each rule; honest controls must stay accepted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_input_stores import KINDS, kernel  # the hand-written entry k(x, y, n): %rd4 = y, %rd6 = x + 4 tid

from evaluators.input_stores import check_input_stores, input_stores
from evaluators.pipeline import Rejected, prepare
from evaluators.race_lint import race_lint
from evaluators.types import Status
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from targets.spec import get_gpu
from workloads.rmsnorm import RMSNorm

REDTEAM = Path(__file__).parent / "gpu" / "kernels" / "redteam"

CALLEE = "the input-store check and the race lint followed def-use inside the entry only, never into a `call`ed .func"
WEAK_FENCE = ("a fence or flag with .release/.acq_rel at cluster scope counted as ordering between CTAs in a launch "
              "without clusters; fence.mbarrier_init counted as a fence; a flag's own .release scope was not read")
ATOMIC_DATA = "the publication rule took only `st` for the data write; data written by atom/red was never looked at"
BRX_EXIT = "the spin rule followed only the guards of `bra`; a loop left through brx.idx (or a guarded exit) had none"
CLOCK = ("no rule looked at clock or launch-count reads: a kernel could keep a barrier only when it ran slowly or "
         "in a fresh process (under racecheck)")
FLOAT_ATOMICS = "no rule looked at atomics' types: a float atomic sum's rounding depends on the arrival order"


def redteam(name: str, defines: dict[str, int] | None = None) -> Kernel:
    from workloads.cuda_build import build_ptx

    ptx = build_ptx(REDTEAM / f"{name}.cu", defines or {})
    return Kernel(parse_module(ptx), "rmsnorm", LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 8),)))


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def rejection(kernel: Kernel, wl: RMSNorm) -> Rejected:
    """What the GPU pool's front half says (ptxas included: every kernel here assembles)."""
    with pytest.raises(Rejected) as ei:
        prepare(kernel, wl, get_gpu("h200"), wl.search_shapes[:1])
    return ei.value


def test_x_as_scratch_through_a_called_function_is_rejected(wl):
    """Was: {CALLEE}."""
    k = redteam("rt_callee_scratch")
    rep = check_input_stores(k, wl)
    assert not rep.ok and {s.param for s in rep.stores} == {"x"}, rep.reason()
    assert "called from the entry" in rep.reason() and "st.volatile.global" in rep.reason()
    r = rejection(k, wl)
    assert (r.status, r.step) == (Status.INPUT_MUTATED, "input_stores")


@pytest.mark.parametrize("fence, what", [(0, "fence.acq_rel.cluster"), (1, "fence.mbarrier_init.release.cluster"),
                                         (2, "atom.release.cta")])
def test_a_publication_behind_a_fence_that_orders_nothing_between_ctas_is_rejected(wl, fence, what):
    """Was: {WEAK_FENCE}."""
    k = redteam("rt_weak_fence", {"RT_FENCE": fence})
    assert what in k.ptx
    rep = race_lint(k, None, wl.uses_atomics, launch_state_ok=True)
    assert [f.kind for f in rep.findings] == ["unfenced_publish"], rep.reason()
    assert "rt_wf_part" in k.ptx and rep.findings[0].text.lstrip().startswith("st.volatile.global.f32")
    if fence == 0:  # through the pipeline once (ptxas included): the verdict and step the pool reports
        r = rejection(k, wl)
        assert (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint")


def test_the_same_exchange_behind_a_gpu_scope_fence_is_accepted(wl):
    k = redteam("rt_weak_fence", {"RT_FENCE": 3})
    assert check_input_stores(k, wl).ok
    assert race_lint(k, None, launch_state_ok=True).ok, race_lint(k).reason()  # a workload declaring counters
    # RMSNorm declares none: its counter in a .global variable outlives the launch (race lint rule 5)
    rep = race_lint(k, None, wl.uses_atomics, wl.uses_atomics)
    assert {f.kind for f in rep.findings} == {"launch_state"} and "rt_wf_" in rep.findings[0].why, rep.reason()


def test_data_published_by_an_atomic_exchange_without_a_fence_is_rejected(wl):
    """Was: {ATOMIC_DATA}."""
    rep = race_lint(redteam("rt_red_publish"), None, wl.uses_atomics, launch_state_ok=True)
    assert [f.kind for f in rep.findings] == ["unfenced_publish"], rep.reason()
    assert rep.findings[0].text.lstrip().startswith("atom.global.exch.b32")


def test_a_spin_wait_left_through_an_indirect_branch_is_rejected(wl):
    """Was: {BRX_EXIT}."""
    k = redteam("rt_spin_brx")
    assert "brx.idx" in k.ptx and "membar.gl" in k.ptx  # the publication itself is fenced
    rep = race_lint(k, None, wl.uses_atomics, launch_state_ok=True)
    assert [f.kind for f in rep.findings] == ["spin_wait"], rep.reason()
    assert rep.findings[0].text.lstrip().startswith("ld.acquire.gpu.global.u32")


@pytest.mark.parametrize("sense, reg, reads", [(0, "%clock64", 2), (1, "%gridid", 1)])
def test_a_barrier_kept_only_where_the_sanitizer_runs_is_rejected(wl, sense, reg, reads):
    """Was: {CLOCK} (0: slow under instrumentation; 1: few grids launched before, a fresh process)."""
    k = redteam("rt_sanitizer_dodge", {"RT_SENSE": sense})
    rep = race_lint(k, None, wl.uses_atomics)
    assert [f.kind for f in rep.findings] == ["time_dependent"] * reads, rep.reason()
    assert reg in rep.findings[0].text
    if sense == 1:
        r = rejection(k, wl)
        assert (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint") and reg in r.reason


def test_a_float_atomic_row_sum_is_rejected_unless_the_workload_declares_atomics(wl):
    """Was: {FLOAT_ATOMICS}."""
    k = redteam("rt_smem_atomic_sum")
    rep = race_lint(k, None, wl.uses_atomics)
    assert [f.kind for f in rep.findings] == ["float_atomic"], rep.reason()
    assert "atom.shared.add.f32" in rep.findings[0].text
    assert race_lint(k, None, float_atomics_ok=True).ok  # a workload with uses_atomics: its own comparison
    r = rejection(k, wl)
    assert (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint")


def test_the_unperturbed_skip_kernel_is_rejected_for_the_table_it_keeps_across_launches(wl):
    """rt_unperturbed_skip.cu keeps its table's addresses free of pointer bits and reads no clock, so the
    input-store check and rules 1-4 pass it; its table lives in a ``.global`` variable, which rule 5 rejects.
    Without rule 5 (a workload declaring counters) only the checked timed launches catch it
    (tests/test_redteam_unperturbed.py)."""
    k = redteam("rt_unperturbed_skip")
    rep = check_input_stores(k, wl)
    assert rep.ok, rep.reason()
    assert race_lint(k, rep.provenance, wl.uses_atomics, launch_state_ok=True).ok
    lint = race_lint(k, rep.provenance, wl.uses_atomics, wl.uses_atomics)
    assert lint.findings and {f.kind for f in lint.findings} == {"launch_state"}, lint.reason()
    r = rejection(k, wl)
    assert (r.status, r.step) == (Status.NONDETERMINISTIC, "race_lint")


@pytest.mark.parametrize("decl, store, flagged", [
    (".global .align 4 .u32 cnt;", "st.global.u32 [cnt], %r1;", True),
    (".global .align 4 .u32 cnt;", "atom.global.add.u32 %r2, [cnt], 1;", True),
    (".global .align 4 .u32 cnt;", "mov.u64 %rd9, cnt;\n\tcvta.global.u64 %rd9, %rd9;\n\tst.u32 [%rd9], %r1;", True),
    (".global .align 4 .u32 cnt;", "ld.global.u32 %r2, [cnt];", False),  # read-only state: a constant table
    (".shared .align 4 .u32 cnt;", "st.shared.u32 [cnt], %r1;", False),  # shared memory dies with the CTA
])
def test_launch_state_rule_forms(decl, store, flagged):
    from test_input_stores import HEAD, TAIL

    head = HEAD.replace(".address_size 64\n", f".address_size 64\n\n{decl}\n")
    k = Kernel(parse_module(head + f"\t{store}\n" + TAIL), "k", LaunchConfig(block=(32, 1, 1)))
    rep = race_lint(k, None, launch_state_ok=False)
    assert [f.kind for f in rep.findings] == (["launch_state"] if flagged else []), rep.reason()
    assert race_lint(k, None).ok  # rule 5 off: a workload declaring atomics


# Hand-written forms: k(x, y, n) with %rd4 = y (a "flag" word), %rd7 = y + 4 tid (data read back below).
PUBLISH = "\t{data}\n{fence}\t{flag}\n\tld.global.f32 %f2, [%rd7+4];\n"


@pytest.mark.parametrize("data, fence, flag, flagged", [
    ("st.global.f32 [%rd7], %f1;", "\tfence.acq_rel.cluster;\n", "atom.global.add.u32 %r3, [%rd4], 1;", True),
    ("st.global.f32 [%rd7], %f1;", "\tfence.mbarrier_init.release.cluster;\n", "atom.global.add.u32 %r3, [%rd4], 1;",
     True),
    ("st.global.f32 [%rd7], %f1;", "\tfence.proxy.async;\n", "atom.global.add.u32 %r3, [%rd4], 1;", True),
    ("st.global.f32 [%rd7], %f1;", "", "atom.release.cta.global.add.u32 %r3, [%rd4], 1;", True),
    ("st.global.f32 [%rd7], %f1;", "", "red.release.cluster.global.add.u32 [%rd4], 1;", True),
    ("st.global.f32 [%rd7], %f1;", "", "st.release.cta.global.u32 [%rd4], 1;", True),
    ("st.release.gpu.global.f32 [%rd7], %f1;", "", "atom.global.add.u32 %r3, [%rd4], 1;", True),  # orders what came before
    ("atom.global.exch.b32 %r5, [%rd7], %r1;", "", "atom.global.add.u32 %r3, [%rd4], 1;", True),
    ("red.global.add.f32 [%rd7], %f1;", "", "atom.global.add.u32 %r3, [%rd4], 1;", True),
    ("st.global.f32 [%rd7], %f1;", "\tfence.sc.sys;\n", "atom.global.add.u32 %r3, [%rd4], 1;", False),
    ("st.global.f32 [%rd7], %f1;", "", "atom.release.global.add.u32 %r3, [%rd4], 1;", False),  # gpu scope by default
    ("st.global.f32 [%rd7], %f1;", "", "red.release.gpu.global.add.u32 [%rd4], 1;", False),
    ("red.global.add.f32 [%rd7], %f1;", "\tmembar.gl;\n", "atom.global.add.u32 %r3, [%rd4], 1;", False),
])
def test_publication_rule_forms(data, fence, flag, flagged):
    rep = race_lint(kernel(PUBLISH.format(data=data, fence=fence, flag=flag)))
    assert [f.kind for f in rep.findings] == (["unfenced_publish"] if flagged else []), rep.reason()


def test_a_cluster_scope_fence_orders_in_a_cluster_launch():
    k = kernel(PUBLISH.format(data="st.global.f32 [%rd7], %f1;", fence="\tfence.acq_rel.cluster;\n",
                              flag="atom.global.add.u32 %r3, [%rd4], 1;"))
    k.module.function("k").directives.append(__import__("population.ast", fromlist=["PerfDirective"])
                                             .PerfDirective("reqnctapercluster", (2, 1, 1)))
    assert race_lint(k).ok


SPIN_TAIL = "\tatom.global.add.u32 %r3, [%rd4], 1;\n$L__spin:\n\tld.volatile.global.u32 %r4, [%rd4];\n" \
            "\tsetp.lt.u32 %p1, %r4, %r1;\n"


@pytest.mark.parametrize("leave", [
    "\tselp.u32 %r5, 0, 1, %p1;\n$L__t: .branchtargets $L__spin, $L__done;\n\tbrx.idx %r5, $L__t;\n$L__done:\n",
    "\t@!%p1 exit;\n\tbra $L__spin;\n",
    "\t@!%p1 ret;\n\tbra $L__spin;\n",
])
def test_spin_waits_left_without_a_guarded_bra_are_found(leave):
    rep = race_lint(kernel(SPIN_TAIL + leave))
    assert [f.kind for f in rep.findings] == ["spin_wait"], rep.reason()


@pytest.mark.parametrize("reg, flagged", [("%clock", True), ("%clock64", True), ("%globaltimer", True),
                                          ("%globaltimer_lo", True), ("%smid", True), ("%warpid", True),
                                          ("%pm0", True), ("%gridid", True), ("%nsmid", False), ("%laneid", False)])
def test_time_and_placement_registers(reg, flagged):
    wide = reg in ("%clock64", "%globaltimer", "%gridid")
    body = f"\tmov.u{64 if wide else 32} {'%rd8' if wide else '%r3'}, {reg};\n"
    rep = race_lint(kernel(body))
    assert [f.kind for f in rep.findings] == (["time_dependent"] if flagged else []), rep.reason()


@pytest.mark.parametrize("ins, flagged", [("atom.global.add.f32 %f2, [%rd7], %f1;", True),
                                          ("red.shared.add.f32 [buf], %f1;", True),
                                          ("red.global.add.noftz.bf16x2 [%rd7], %r1;", True),
                                          ("atom.global.max.f32 %f2, [%rd7], %f1;", True),
                                          ("atom.global.add.u32 %r3, [%rd7], 1;", False),
                                          ("atom.global.exch.b32 %r3, [%rd7], %r1;", False)])
def test_float_atomics_rule_forms(ins, flagged):
    rep = race_lint(kernel(f"\t{ins}\n"), None, float_atomics_ok=False)
    assert [f.kind for f in rep.findings] == (["float_atomic"] if flagged else []), rep.reason()


FUNC = """.func store_at(
\t.param .b64 store_at_param_0,
\t.param .b32 store_at_param_1
)
{
\t.reg .b64 %rd<3>;
\t.reg .f32 %f<2>;
\tld.param.u64 %rd1, [store_at_param_0];
\tld.param.f32 %f1, [store_at_param_1];
\tst.global.f32 [%rd1], %f1;
\tret;
}

"""
CALL = """\t{{
\t.param .b64 param0;
\tst.param.b64 [param0+0], {ptr};
\t.param .b32 param1;
\tst.param.f32 [param1+0], %f1;
\tcall.uni store_at, (param0, param1);
\t}}
"""


def _with_callee(ptr: str) -> Kernel:
    k = kernel(CALL.format(ptr=ptr))
    text = k.ptx.replace(".visible .entry k(", FUNC + ".visible .entry k(")
    return Kernel(parse_module(text), "k", k.launch)


@pytest.mark.parametrize("ptr, bad", [("%rd7", []), ("%rd6", ["x"])])
def test_a_callee_writes_through_the_pointer_it_is_passed(ptr, bad):
    """The callee's parameter carries the root of what the call site passes: y's address is fine, x's is not."""
    rep = input_stores(_with_callee(ptr), KINDS, ["x", "y", "n"])
    assert [s.param for s in rep.stores] == bad, rep.reason()
    if bad:
        assert "in function 'store_at'" in rep.reason()


SPIN_FUNC = """.func wait_for(
\t.param .b64 wait_for_param_0,
\t.param .b32 wait_for_param_1
)
{
\t.reg .pred %p<2>;
\t.reg .b32 %r<3>;
\t.reg .b64 %rd<2>;
\tld.param.u64 %rd1, [wait_for_param_0];
\tld.param.u32 %r1, [wait_for_param_1];
$L__w:
\tld.volatile.global.u32 %r2, [%rd1];
\tsetp.lt.u32 %p1, %r2, %r1;
\t@%p1 bra $L__w;
\tret;
}

"""


def test_a_spin_wait_inside_a_called_function_is_found():
    """The race lint runs its rules over every function the entry calls, with the roots the call passes."""
    body = ("\tatom.global.add.u32 %r3, [%rd4], 1;\n\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0+0], %rd4;\n"
            "\t.param .b32 param1;\n\tst.param.b32 [param1+0], %r1;\n\tcall.uni wait_for, (param0, param1);\n\t}\n")
    k = kernel(body)
    k = Kernel(parse_module(k.ptx.replace(".visible .entry k(", SPIN_FUNC + ".visible .entry k(")), "k", k.launch)
    rep = race_lint(k)
    assert [f.kind for f in rep.findings] == ["spin_wait"], rep.reason()
    assert "ld.volatile.global.u32" in rep.findings[0].text
