"""The static global-memory race lint (evaluators/race_lint.py) on the red-team kernel and hand-written entries."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_input_stores import kernel  # the hand-written entry k(x, y, n): %rd4 = y, %rd7 = y + 4 tid

from evaluators.race_lint import race_lint
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module

REDTEAM = Path(__file__).parent / "gpu" / "kernels" / "redteam"


def test_the_red_team_cross_cta_exchange_is_flagged_by_both_rules():
    from workloads.cuda_build import build_ptx

    k = Kernel(parse_module(build_ptx(REDTEAM / "rt_global_race.cu", {})), "rmsnorm",
               LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 8),)))
    rep = race_lint(k)
    kinds = {f.kind: f for f in rep.findings}
    assert set(kinds) == {"spin_wait", "unfenced_publish"}
    assert kinds["spin_wait"].text.lstrip().startswith("ld.volatile.global.u32")
    assert kinds["unfenced_publish"].text.lstrip().startswith("st.global.f32")
    assert "atom" in kinds["unfenced_publish"].why
    assert rep.reason().startswith("static race lint: ") and "line" in rep.reason()


PUBLISH = "\tst.global.f32 [%rd7], %f1;\n{fence}\tatom{sem}.global.add.u32 %r3, [%rd4], 1;\n" \
          "\tld.global.f32 %f2, [%rd7+4];\n"


@pytest.mark.parametrize("fence, sem, flagged", [
    ("", "", True),  # data, then the flag: no ordering
    ("\tmembar.cta;\n", "", True),  # a CTA-scope fence does not order for other CTAs
    ("\tfence.acq_rel.gpu;\n", "", False),
    ("\tmembar.gl;\n", "", False),
    ("", ".release.gpu", False),  # the flag write is a release
])
def test_a_store_published_by_a_flag_needs_a_gpu_scope_fence_or_release(fence, sem, flagged):
    rep = race_lint(kernel(PUBLISH.format(fence=fence, sem=sem)))
    assert [f.kind for f in rep.findings] == (["unfenced_publish"] if flagged else []), rep.reason()


def test_stores_nobody_reads_back_are_not_a_publication():
    body = "\tst.global.f32 [%rd7], %f1;\n\tatom.global.add.u32 %r3, [%rd4+64], 1;\n"
    assert race_lint(kernel(body)).ok


SPIN = ("\tatom.global.add.u32 %r3, [%rd4], 1;\n$L__spin:\n\tld.volatile.global.u32 %r4, [%rd4];\n"
        "\tsetp.lt.u32 %p1, %r4, %r1;\n\t@%p1 bra $L__spin;\n")


def test_a_loop_waiting_on_a_global_location_the_kernel_writes_is_a_spin_wait():
    rep = race_lint(kernel(SPIN))
    assert [f.kind for f in rep.findings] == ["spin_wait"]
    assert "ld.volatile.global.u32" in rep.findings[0].text


def test_a_loop_over_data_the_kernel_only_reads_is_not_a_spin_wait():
    body = SPIN.replace("\tatom.global.add.u32 %r3, [%rd4], 1;\n", "")
    assert race_lint(kernel(body)).ok


def test_cluster_launches_are_exempt_from_the_spin_rule():
    k = kernel(SPIN)
    k.module.function("k").directives.append(__import__("population.ast", fromlist=["PerfDirective"])
                                             .PerfDirective("reqnctapercluster", (2, 1, 1)))
    assert race_lint(k).ok
