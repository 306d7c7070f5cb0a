"""Structural operators on the RMSNorm seeds and the PTX corpus: every proposal applies and ptxas accepts the
child; operator-specific properties on crafted kernels; a NoProposal case per operator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evaluators.toolchain import compile_ptx
from evaluators.types import CompileError
from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import definitions
from evolve.operators.hints import HintsOperator, candidate_states, decompose
from evolve.operators.launch import LaunchOperator, reads_ntid
from evolve.operators.mathops import MathOpsOperator
from evolve.operators.prefetch import PrefetchOperator
from evolve.operators.schedule import ScheduleOperator
from evolve.operators.unroll import UnrollOperator
from population.analysis import flat_instructions
from population.edits import apply_script, parse_edit_script
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module

CORPUS = Path("/work/shared/ptx-corpus")
DATA = Path(__file__).parent / "data"


def _corpus_kernels() -> list[Kernel]:
    files = sorted(CORPUS.glob("*.ptx")) if CORPUS.is_dir() else []
    files += sorted(DATA.glob("*.ptx"))
    out = []
    seen = set()
    for f in files:
        if f.name in seen:
            continue
        seen.add(f.name)
        m = parse_module(f.read_text(), filename=str(f))
        for e in m.entries:
            out.append(Kernel(module=m, entry=e.name, launch=LaunchConfig(block=(128, 1, 1))))
    return out


@pytest.fixture(scope="module")
def workload():
    from workloads.registry import get_workload

    return get_workload("rmsnorm")


@pytest.fixture(scope="module")
def seeds(workload) -> list[Kernel]:
    return workload.seeds()


@pytest.fixture(scope="module")
def corpus() -> list[Kernel]:
    return _corpus_kernels()


def _arch(k: Kernel) -> str:
    return "sm_90a" if any(t.endswith("a") for t in k.module.target) else "sm_90"


def _check_operator(op, kernels: list[Kernel], ctx: OperatorContext, n_seeds: int) -> int:
    """Propose with ``n_seeds`` rng seeds on every kernel; every script must round-trip as text, apply and
    compile. Returns how many children compiled."""
    ok = 0
    compiled: set[str] = set()
    for k in kernels:
        for seed in range(n_seeds):
            rng = np.random.default_rng(seed)
            try:
                script = op.propose(k, ctx, rng)
            except NoProposal:
                continue
            assert parse_edit_script(script.to_text()) == script
            child = apply_script(k, script, operator=op.name)
            assert child.parents == (k.identity,)
            assert child.identity != k.identity, script.to_text()
            if child.identity in compiled:
                ok += 1
                continue
            compiled.add(child.identity)
            try:
                compile_ptx(child, _arch(child))
            except CompileError as e:  # pragma: no cover - the failure message is the point
                pytest.fail(f"{op.name} on {k.entry} seed {seed}: ptxas refused the child: {e}\n"
                            f"{script.to_text()}")
            ok += 1
    return ok


LINE_OPS = [HintsOperator(), MathOpsOperator(), ScheduleOperator(), UnrollOperator(), PrefetchOperator()]


@pytest.mark.parametrize("op", LINE_OPS, ids=lambda o: o.name)
def test_operator_children_compile_on_seeds(op, seeds, workload):
    ctx = OperatorContext(workload=workload)
    assert _check_operator(op, seeds, ctx, n_seeds=6) > 0


@pytest.mark.parametrize("op", LINE_OPS, ids=lambda o: o.name)
def test_operator_children_compile_on_corpus(op, corpus):
    if not corpus:
        pytest.skip("no PTX corpus present")
    ctx = OperatorContext(workload=None)
    assert _check_operator(op, corpus, ctx, n_seeds=2) > 0


def test_launch_children_compile(seeds, workload):
    op = LaunchOperator(workload=workload)
    assert _check_operator(op, seeds, OperatorContext(workload=workload), n_seeds=10) > 0


def test_parent_is_not_mutated(seeds, workload):
    k = seeds[0]
    before = k.canonical_ptx
    for op in [*LINE_OPS, LaunchOperator(workload=workload)]:
        for seed in range(3):
            try:
                script = op.propose(k, OperatorContext(workload=workload), np.random.default_rng(seed))
            except NoProposal:
                continue
            apply_script(k, script, operator=op.name)
    fresh = Kernel(module=k.module, entry=k.entry, launch=k.launch)
    assert fresh.canonical_ptx == before


# ------------------------------------------------------------------------------------------ crafted kernels

HEAD = """.version 9.0
.target sm_90
.address_size 64
"""

INPLACE = HEAD + """
.visible .entry inplace(.param .u64 p_x, .param .u64 p_w, .param .u32 p_n)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [p_x];
    ld.param.u64 %rd2, [p_w];
    ld.param.u32 %r1, [p_n];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r2, %tid.x;
    setp.ge.s32 %p1, %r2, %r1;
    @%p1 bra $L__done;
    mul.wide.s32 %rd5, %r2, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f1, [%rd6];
    ld.global.f32 %f2, [%rd7];
    mul.f32 %f3, %f1, %f2;
    st.global.f32 [%rd6], %f3;
$L__done:
    ret;
}
"""


def test_hints_nc_only_on_buffers_never_stored():
    k = Kernel(module=parse_module(INPLACE), entry="inplace")
    op = HintsOperator(stores=False)
    x_nc = w_nc = 0
    for seed in range(300):
        child = apply_script(k, op.propose(k, OperatorContext(None), np.random.default_rng(seed)), operator="hints")
        text = "\n".join(" ".join(ln.split()) for ln in child.canonical_ptx.splitlines())
        x_line = next(ln for ln in text.splitlines() if "%f1," in ln and ln.strip().startswith("ld."))
        w_line = next(ln for ln in text.splitlines() if "%f2," in ln and ln.strip().startswith("ld."))
        x_nc += ".nc" in x_line
        w_nc += ".nc" in w_line
    assert x_nc == 0  # x is written back in place: the read-only path would be wrong
    assert w_nc > 0


def test_hints_l2_policy_adds_createpolicy_and_compiles():
    k = Kernel(module=parse_module(INPLACE), entry="inplace")
    op = HintsOperator()
    seen = 0
    for seed in range(200):
        script = op.propose(k, OperatorContext(None), np.random.default_rng(seed))
        if "createpolicy" not in script.to_text():
            continue
        child = apply_script(k, script, operator="hints")
        assert "L2::cache_hint" in child.canonical_ptx
        compile_ptx(child)
        seen += 1
        if seen >= 3:
            break
    assert seen >= 3
    # the child's policy is recognised as the operator's own, so it can be switched or dropped again
    fn = child.module.function("inplace")
    defs = definitions(fn)
    ld = next(i for i in flat_instructions(fn) if "L2::cache_hint" in i.modifiers)
    acc = decompose(ld, defs)
    assert acc is not None and acc.state.l2 in ("evict_first", "evict_last")
    options = candidate_states(acc.kind, acc.state, nc_allowed=False)
    assert any(o.l2 is None for o in options) and any(o.l2 not in (None, acc.state.l2) for o in options)


MATH = HEAD + """
.visible .entry mathk(.param .u64 p_y, .param .f32 p_a, .param .f32 p_b)
{
    .reg .f32 %f<10>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p_y];
    ld.param.f32 %f1, [p_a];
    ld.param.f32 %f2, [p_b];
    rsqrt.approx.f32 %f3, %f1;
    div.rn.f32 %f4, %f3, %f2;
    sqrt.rn.f32 %f5, %f2;
    rcp.rn.f32 %f6, %f5;
    add.f32 %f7, %f4, %f6;
    cvta.to.global.u64 %rd2, %rd1;
    st.global.f32 [%rd2], %f7;
    ret;
}
"""


def test_mathops_rewrites():
    k = Kernel(module=parse_module(MATH), entry="mathk")
    op = MathOpsOperator()
    children = {}
    for seed in range(200):
        child = apply_script(k, op.propose(k, OperatorContext(None), np.random.default_rng(seed)),
                             operator="mathops")
        children[child.canonical_ptx] = child
    for child in children.values():
        compile_ptx(child)
    texts = set(children)
    joined = "\n".join(" ".join(ln.split()) for t in texts for ln in t.splitlines())
    assert "rcp.rn.f32 %f3, %f3;" in joined  # rsqrt.approx -> sqrt.rn + rcp.rn
    assert "div.rn.f32 %f3, 0f3F800000, %f3;" in joined  # ... or sqrt.rn + div.rn 1/x
    assert "rsqrt.approx.f32 %f6, %f2;" in joined  # sqrt.rn + rcp.rn -> rsqrt.approx
    assert "div.full.f32" in joined and "div.approx.f32" in joined
    assert "add.ftz.f32" in joined


SCHED = HEAD + """
.visible .entry sched(.param .u64 p_a, .param .u64 p_b)
{
    .reg .f32 %f<12>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<12>;
    .shared .align 4 .b8 buf[512];
    ld.param.u64 %rd1, [p_a];
    ld.param.u64 %rd2, [p_b];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    mov.u32 %r2, buf;
    shl.b32 %r3, %r1, 2;
    add.s32 %r4, %r2, %r3;
    ld.global.f32 %f1, [%rd6];
    mul.f32 %f2, %f1, %f1;
    st.shared.f32 [%r4], %f2;
    add.s32 %r5, %r1, 7;
    ld.global.f32 %f3, [%rd7];
    st.global.f32 [%rd6], %f3;
    ld.global.f32 %f4, [%rd6+4];
    add.f32 %f5, %f4, %f3;
    bar.sync 0;
    mul.lo.s32 %r6, %r5, 3;
    ld.shared.f32 %f6, [%r4+4];
    add.f32 %f7, %f6, %f5;
    st.global.f32 [%rd7], %f7;
    ld.global.f32 %f8, [%rd7+8];
    cvt.rn.f32.s32 %f9, %r6;
    add.f32 %f10, %f8, %f9;
    st.global.f32 [%rd7+4], %f10;
    ret;
}
"""


def _body_lines(k: Kernel) -> list[str]:
    lines = [ln.strip() for ln in k.canonical_ptx.splitlines()]
    start = lines.index("{")
    return [ln for ln in lines[start + 1:] if ln and not ln.startswith(".") and ln != "}"]


def test_schedule_never_crosses_barriers_or_stores():
    k = Kernel(module=parse_module(SCHED), entry="sched")
    base = _body_lines(k)
    assert len(set(base)) == len(base)
    pos0 = {ln: i for i, ln in enumerate(base)}
    op = ScheduleOperator()
    children = set()
    for seed in range(80):
        child = apply_script(k, op.propose(k, OperatorContext(None), np.random.default_rng(seed)),
                             operator="schedule")
        lines = _body_lines(child)
        assert sorted(lines) == sorted(base)
        pos = {ln: i for i, ln in enumerate(lines)}
        for a in base:
            for b in base:
                if pos0[a] >= pos0[b]:
                    continue
                barrier = a.startswith(("bar.", "ret")) or b.startswith(("bar.", "ret"))
                mem_a, mem_b = a.startswith(("ld.global", "st.", "ld.shared")), b.startswith(
                    ("ld.global", "st.", "ld.shared"))
                store_pair = mem_a and mem_b and (a.startswith("st.") or b.startswith("st."))
                same_space = store_pair and a.split(".")[1] == b.split(".")[1]
                if barrier or same_space:
                    assert pos[a] < pos[b], f"{a!r} moved across {b!r}"
        children.add(tuple(lines))
        compile_ptx(child)
    assert len(children) > 2  # several distinct valid orders were proposed


LOOP = HEAD + """
.visible .entry loopk(.param .u64 p_x, .param .u32 p_n)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_x];
    ld.param.u32 %r1, [p_n];
    cvta.to.global.u64 %rd2, %rd1;
    mov.f32 %f1, 0f00000000;
    mov.u32 %r2, 0;
$L__loop:
    ld.global.f32 %f2, [%rd2];
    add.f32 %f1, %f1, %f2;
    add.s64 %rd2, %rd2, 4;
    add.s32 %r2, %r2, 1;
    setp.lt.s32 %p1, %r2, %r1;
    @%p1 bra $L__loop;
    st.global.f32 [%rd2], %f1;
    ret;
}
"""


def test_unroll_structure_on_counted_loop():
    k = Kernel(module=parse_module(LOOP), entry="loopk")
    op = UnrollOperator(factors=(2,))
    child = apply_script(k, op.propose(k, OperatorContext(None), np.random.default_rng(0)), operator="unroll")
    lines = _body_lines(child)
    body = ["ld.global.f32 %f2, [%rd2];", "add.f32 %f1, %f1, %f2;", "add.s64 %rd2, %rd2, 4;",
            "add.s32 %r2, %r2, 1;", "setp.lt.s32 %p1, %r2, %r1;"]
    norm = [" ".join(ln.split()) for ln in lines]
    h = norm.index("$L__loop:")
    assert norm[h + 1:h + 6] == body  # copy 1
    assert norm[h + 6].startswith("@!%p1 bra") and norm[h + 6].endswith("$L__loop_x;")  # exit test kept
    assert norm[h + 7:h + 12] == body  # copy 2
    assert norm[h + 12] == "@%p1 bra $L__loop;"  # the one back edge
    assert norm[h + 13] == "$L__loop_x:"
    assert norm[h + 14] == "st.global.f32 [%rd2], %f1;"
    compile_ptx(child)
    # by 4: four copies, three exit tests
    child4 = apply_script(k, UnrollOperator(factors=(4,)).propose(k, OperatorContext(None),
                                                                  np.random.default_rng(0)), operator="unroll")
    norm4 = [" ".join(ln.split()) for ln in _body_lines(child4)]
    assert norm4.count("ld.global.f32 %f2, [%rd2];") == 4
    assert sum(ln.startswith("@!%p1 bra") for ln in norm4) == 3
    compile_ptx(child4)


def test_prefetch_uses_pointer_stride():
    k = Kernel(module=parse_module(LOOP), entry="loopk")
    op = PrefetchOperator(ahead=(4,), variants=("L2",))
    child = apply_script(k, op.propose(k, OperatorContext(None), np.random.default_rng(0)), operator="prefetch")
    norm = [" ".join(ln.split()) for ln in _body_lines(child)]
    i = norm.index("prefetch.global.L2 [%rd2+16];")  # 4 iterations x 4 bytes ahead
    assert norm[i + 1] == "ld.global.f32 %f2, [%rd2];"
    compile_ptx(child)
    # a second proposal on the child has nothing left to do in that loop
    with pytest.raises(NoProposal):
        op.propose(child, OperatorContext(None), np.random.default_rng(0))


def test_launch_block_only_when_kernel_reads_ntid(seeds, workload):
    naive, template = seeds
    assert reads_ntid(naive)
    op = LaunchOperator(workload=workload, moves=("block",))
    blocks = set()
    for seed in range(20):
        child = apply_script(naive, op.propose(naive, OperatorContext(workload), np.random.default_rng(seed)),
                             operator="launch")
        blocks.add(child.launch.block)
    assert (256, 1, 1) not in blocks and len(blocks) >= 3
    if not reads_ntid(template):
        with pytest.raises(NoProposal):
            op.propose(template, OperatorContext(workload), np.random.default_rng(0))


def test_launch_directives(seeds, workload):
    naive = seeds[0]
    op = LaunchOperator(workload=workload, moves=("minnctapersm",))
    child = apply_script(naive, op.propose(naive, OperatorContext(workload), np.random.default_rng(1)),
                         operator="launch")
    fn = child.module.function(child.entry)
    names = {d.name: d.values for d in fn.directives}
    assert "minnctapersm" in names and names["maxntid"][0] == 256
    compile_ptx(child)


# ------------------------------------------------------------------------------------------------ NoProposal

EMPTY = HEAD + """
.visible .entry empty(.param .u32 p_n)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [p_n];
    ret;
}
"""


@pytest.mark.parametrize("op", [HintsOperator(), MathOpsOperator(), ScheduleOperator(), UnrollOperator(),
                                PrefetchOperator(), LaunchOperator(moves=("block",))], ids=lambda o: o.name)
def test_no_proposal_on_trivial_kernel(op):
    k = Kernel(module=parse_module(EMPTY), entry="empty")
    with pytest.raises(NoProposal):
        op.propose(k, OperatorContext(None), np.random.default_rng(0))


# ------------------------------------------------------------------------------------- hint legality table


def _all_states(kind: str):
    import itertools

    from evolve.operators.hints import L1_EVICT, L2_POLICIES, LOAD_COPS, PREFETCH_SIZES, STORE_COPS, HintState

    cops = LOAD_COPS if kind == "ld" else STORE_COPS
    sizes = PREFETCH_SIZES if kind == "ld" else ()
    for nc, cop, l1, l2, size in itertools.product((False, True), (None, *cops), (None, *L1_EVICT),
                                                   (None, *L2_POLICIES), (None, *sizes)):
        yield HintState(nc, cop, l1, l2, size)


def _access_kernel(lines: list[str]) -> str:
    body = "\n    ".join(lines)
    return HEAD + f"""
.visible .entry acc(.param .u64 p_a)
{{
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [p_a];
    cvta.to.global.u64 %rd2, %rd1;
    createpolicy.fractional.L2::evict_last.b64 %rd3, 1.0;
    mov.f32 %f2, 0f3F800000;
    {body}
    st.global.f32 [%rd2], %f1;
    ret;
}}
"""


@pytest.mark.parametrize("kind", ["ld", "st"])
def test_hint_legality_table_matches_ptxas(kind):
    from evolve.operators.hints import Access, build_modifiers, legal

    acc = Access(kind, False, None, None, "f32")  # type: ignore[arg-type]
    good, bad = [], []
    for st in _all_states(kind):
        mods = ".".join(build_modifiers(acc, st))
        pol = ", %rd3" if st.l2 else ""
        line = f"{kind}.{mods} %f1, [%rd2]{pol};" if kind == "ld" else f"{kind}.{mods} [%rd2+4], %f2{pol};"
        (good if legal(kind, st) else bad).append(line)
    assert len(good) >= 30
    compile_ptx(_access_kernel(good))  # every state the operator may produce assembles, in one module
    rng = np.random.default_rng(0)
    for line in rng.choice(bad, size=6, replace=False):  # and a sample of the excluded ones does not
        with pytest.raises(CompileError):
            compile_ptx(_access_kernel([str(line)]))


@pytest.mark.slow
def test_operator_chains_compile(seeds, workload):
    """Descendants of descendants: 3 walks of 12 random structural edits from each seed, every child
    compiled, so operators also work on code other operators produced (unrolled loops, policies, hints)."""
    ops = [*LINE_OPS, LaunchOperator(workload=workload)]
    ctx = OperatorContext(workload=workload)
    rng = np.random.default_rng(7)
    applied = 0
    for k0 in seeds:
        for _ in range(3):
            k = k0
            for _ in range(12):
                op = ops[int(rng.integers(len(ops)))]
                try:
                    script = op.propose(k, ctx, rng)
                except NoProposal:
                    continue
                child = apply_script(k, script, operator=op.name)
                try:
                    compile_ptx(child)
                except CompileError as e:  # pragma: no cover
                    pytest.fail(f"{op.name} after {k.operator}: {e}\n{script.to_text()}")
                k = child
                applied += 1
    assert applied >= 60
