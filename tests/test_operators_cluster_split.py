"""REWRITE cluster_split: the CTAs of a cluster act as one virtual CTA of C x T threads; the cross-warp reduction
goes through rank 0's distributed shared memory with cluster barriers."""

from __future__ import annotations

import itertools
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from evaluators.pipeline import prepare
from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.cluster_split import ClusterSplitOperator, barrier_lines, check
from evolve.operators.registry import build_operators
from population.edit_script import parse_edit_script
from population.edits import EditApplyError, apply_script, rewrite_names
from population.kernel import Kernel
from population.parser import parse_module
from targets.spec import get_gpu
from workloads.rmsnorm import RMSNorm

WL = RMSNorm()
NAIVE, TEMPLATE = WL.seeds()  # naive: one 256-thread CTA per row, warp sums in shared memory, two bar.sync
BAR = 93  # canonical line of the naive seed's first bar.sync


def flat(k: Kernel) -> list[str]:
    return [" ".join(ln.split()) for ln in k.ptx.splitlines() if ln.strip() and not ln.strip().startswith("//")]


def split(k: Kernel, cluster: int = 4, line: int = BAR) -> Kernel:
    return apply_script(k, parse_edit_script(f"REWRITE cluster_split {line} cluster={cluster}\n"),
                        operator="cluster_split")


def test_naive_seed_becomes_a_virtual_cta_over_the_cluster():
    assert barrier_lines(NAIVE) == [93, 138] and flat(NAIVE).count("bar.sync 0;") == 2
    child = split(NAIVE, 4)
    lines = flat(child)
    assert child.launch.knob("cluster", 1) == 4 and child.launch.block == (256, 1, 1)
    assert lines[lines.index(".reqnctapercluster 4, 1, 1") - 1] == ".explicitcluster"
    start = lines.index("barrier.cluster.arrive;")
    assert lines[start:start + 9] == [
        "barrier.cluster.arrive;", "barrier.cluster.wait;",  # every CTA has started before any remote access
        "mov.u32 %cs_t0, %tid.x;", "mov.u32 %cs_n0, %ntid.x;", "mov.u32 %cs_r0, %cluster_ctarank;",
        "mad.lo.u32 %cs_vt0, %cs_r0, %cs_n0, %cs_t0;", "mul.lo.u32 %cs_vn0, %cs_n0, 4;",
        "setp.gt.u32 %cs_p0, %cs_vn0, 1024;", "@%cs_p0 trap;"]
    assert lines[start + 9] == "ld.param.u64 %rd8, [rmsnorm_param_0];"
    # the row is the cluster's index, the thread's index and count along the row are the virtual CTA's
    assert "mov.u32 %r11, %clusterid.x;" in lines and "mov.u32 %r59, %cs_vt0;" in lines
    assert "mov.u32 %r2, %cs_vn0;" in lines and "mov.u32 %r34, %cs_vn0;" in lines and "mov.u32 %r7, %cs_vn0;" in lines
    rest = lines[start + 9:]
    assert not any(s in x for x in rest for s in ("%tid.x", "%ntid.x", "%ctaid.x", "bar.sync", ".shared.f32"))
    # every shared access goes to rank 0's warp_sums through mapa
    shared = [(a, b) for a, b in itertools.pairwise(rest) if "shared::cluster.f32" in b]
    assert shared == [
        ("mapa.shared::cluster.u32 %cs_m0, %r33, 0;", "st.shared::cluster.f32 [%cs_m0], %f4;"),
        ("mapa.shared::cluster.u32 %cs_m1, %r38, 0;", "ld.shared::cluster.f32 %f42, [%cs_m1];"),
        ("mapa.shared::cluster.u32 %cs_m2, %cs_a0, 0;", "st.shared::cluster.f32 [%cs_m2], %f7;"),
        ("mapa.shared::cluster.u32 %cs_m3, %cs_a1, 0;", "ld.shared::cluster.f32 %f32, [%cs_m3];")]
    assert rest[rest.index("mapa.shared::cluster.u32 %cs_m2, %cs_a0, 0;") - 1] == \
        "mov.u32 %cs_a0, _ZZ7rmsnormE9warp_sums;"
    # each bar.sync became an arrive/wait pair at its place, and one pair precedes the ret
    pairs = [i for i, x in enumerate(rest) if x == "barrier.cluster.arrive;"]
    assert all(rest[i + 1] == "barrier.cluster.wait;" for i in pairs) and len(pairs) == 3
    assert rest[pairs[0] - 1] == "$L__BB0_6:" and rest[pairs[1] - 1] == "$L__BB0_11:"
    assert rest[pairs[2] - 1] == "$L__BB0_14:" and rest[pairs[2] + 2] == "ret;"
    assert rest.index("st.shared::cluster.f32 [%cs_m0], %f4;") < pairs[0] < rest.index(
        "ld.shared::cluster.f32 %f42, [%cs_m1];") < rest.index("st.shared::cluster.f32 [%cs_m2], %f7;") < pairs[1]
    assert child.edit_text == f"REWRITE cluster_split {BAR} cluster=4\n"


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("cluster", [2, 4])
def test_passes_ptxas_and_the_static_gate_checks(dtype, cluster):
    wl = RMSNorm(dtype=dtype)
    naive = wl.seeds()[0]
    child = split(naive, cluster, barrier_lines(naive)[0])
    # prepare = ptxas, ABI, input-store check, race lint, launch rule, occupancy (raises Rejected otherwise)
    prep = prepare(child, wl, get_gpu("h200"), [(7, 1128)], arch="sm_90")
    assert prep.resources.shared_static_bytes == 128
    grid, block, _ = wl.launch_dims((7, 1128), child.launch)
    assert grid == (7 * cluster, 1, 1) and block == (256, 1, 1)


def test_refuses_what_it_cannot_split():
    # the template hard-codes its threads (no %ntid.x, .maxntid 256): KNOBS cluster= is its way
    with pytest.raises(ValueError, match=r"\.maxntid \(256, 1, 1\) is below"):
        check(TEMPLATE, barrier_lines(TEMPLATE)[0], 2)
    with pytest.raises(EditApplyError, match="exceeds 1024 threads per block"):
        split(NAIVE, 8)
    with pytest.raises(EditApplyError, match="not a CTA barrier"):
        split(NAIVE, 2, BAR + 1)
    with pytest.raises(EditApplyError, match="cluster=3"):
        split(NAIVE, 3)
    with pytest.raises(EditApplyError, match=r"needs \(T, 1, 1\)"):
        split(replace(NAIVE, launch=replace(NAIVE.launch, block=(128, 2, 1))))
    with pytest.raises(EditApplyError, match="already uses clusters of 2"):
        split(replace(NAIVE, launch=replace(NAIVE.launch, knobs=(("cluster", 2), ("rows_per_cta", 1)))), 2)
    with pytest.raises(EditApplyError, match="not a CTA barrier"):  # a split kernel has none left
        split(split(NAIVE, 2), 2, BAR)
    text = NAIVE.ptx

    def variant(old: str, new: str) -> Kernel:
        assert old in text
        return replace(NAIVE, module=parse_module(text.replace(old, new, 1)))

    cases = [
        (variant("bar.sync \t0;", "membar.cta;\n\tbar.sync \t0;"), "membar"),
        (variant("st.shared.f32 \t[%r33], %f4;", "st.volatile.shared.f32 \t[%r33], %f4;"), "plain ld.shared"),
        (variant("st.shared.f32 \t[%r33], %f4;", "red.shared.add.f32 \t[%r33], %f4;"), "plain ld.shared"),
        (variant("mov.u32 \t%r34, %ntid.x;", "mov.u32 \t%r34, %warpid;"), "%warpid"),
        (variant("bar.sync \t0;", "bar.sync \t0, 128;"), "only full"),
    ]
    for k, why in cases:
        with pytest.raises(ValueError, match=why):
            check(k, barrier_lines(k)[0], 2)
    no_ntid = replace(NAIVE, module=parse_module(text.replace("%ntid.x", "256")))
    with pytest.raises(ValueError, match=r"never reads %ntid\.x"):
        check(no_ntid, BAR, 2)


def test_operator_and_llm_edit_kind():
    assert "cluster_split" in rewrite_names()
    (op,) = build_operators([{"name": "cluster_split", "sizes": [2, 4]}], WL)
    script = op.propose(NAIVE, OperatorContext(workload=WL), np.random.default_rng(0))
    (edit,) = script.edits
    assert (edit.name, edit.line) == ("cluster_split", BAR) and dict(edit.args)["cluster"] in (2, 4)
    with pytest.raises(NoProposal, match="maxntid"):
        op.propose(TEMPLATE, OperatorContext(workload=WL), np.random.default_rng(0))
    with pytest.raises(NoProposal, match="no 'cluster' launch knob"):
        op.propose(NAIVE, OperatorContext(workload=SimpleNamespace(knob_space={})), np.random.default_rng(0))
    with pytest.raises(ValueError, match="sizes"):
        ClusterSplitOperator(sizes=(3,))
    from evolve.llm.constrained import GrammarSpec, focused_edit_grammar
    from evolve.llm.prompts import FORMAT_HELP

    g = focused_edit_grammar(GrammarSpec(lines=(3, 4), instruction_lines=(4,), entries=("k",), kinds=("REWRITE",)))
    assert '"cluster_split " rwln (" cluster=" ("2" | "4" | "8"))?' in g
    assert "REWRITE cluster_split n cluster=4" in FORMAT_HELP


def test_constrained_grammar_accepts_exactly_the_parameterised_forms():
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string

    from evolve.llm.constrained import GrammarSpec, focused_edit_grammar

    g = xgr.Grammar.from_ebnf(focused_edit_grammar(
        GrammarSpec(lines=(3, 4), instruction_lines=(4,), entries=("k",), kinds=("REWRITE",))))
    ok = ["REWRITE cluster_split 4 cluster=4\n", "REWRITE cluster_split 4\n", "REWRITE async_copy 4 count=8\n",
          "REWRITE async_copy 4\n"]
    bad = ["REWRITE cluster_split 4 cluster=3\n", "REWRITE async_copy 4 count=0\n", "REWRITE cluster_split 3\n"]
    assert [_is_grammar_accept_string(g, s) for s in ok + bad] == [True] * len(ok) + [False] * len(bad)
