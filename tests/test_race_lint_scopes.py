"""Registers declared in nested ``{ }`` blocks are resolved to their block by the race lint (evaluators/race_lint.py,
``_RegisterScopes``): two copies of nvcc's inline-asm retry loop ``{ .reg .pred pw0; ... }`` use two registers."""

from __future__ import annotations

import functools

from evaluators.race_lint import race_lint
from population.kernel import Kernel
from population.parser import parse_module
from workloads.registry import get_workload

KNOBS = dict(cluster_push=1, cluster=4, smem_stages=1, row_iters=2, rows_per_cta=16, threads=256, vec=8, max_chunks=16)
WAIT = ("\t{\n\t.reg .pred pw0;\nWAIT_0:\n\tmbarrier.try_wait.parity.shared::cta.b64 pw0, [%r41], %r1346;\n"
        "\t@!pw0 bra WAIT_0;\n\t}\n")


@functools.cache
def _rmsnorm() -> Kernel:
    """RMSNorm's cluster-push instance, whose wait for the pushed partial sums is one inline-asm retry loop."""
    return get_workload("rmsnorm").instantiate(KNOBS)


def _with_second_wait(copy: str, after: str = "") -> Kernel:
    """The instance with ``copy`` (a second wait) right after its wait loop, and ``after`` after that."""
    k = _rmsnorm()
    assert k.ptx.count(WAIT) == 1
    text = k.ptx.replace(WAIT, WAIT + copy + after)
    return Kernel(parse_module(text), k.entry, k.launch)


def _order_findings(k: Kernel) -> list:
    return [f for f in race_lint(k, float_atomics_ok=False, launch_state_ok=False, order_ok=False).findings
            if f.kind == "atomic_order"]


def test_two_copies_of_a_scoped_retry_loop_are_two_registers():
    k = _with_second_wait(WAIT.replace("WAIT_0", "WAIT_0_u1"))
    assert _order_findings(_rmsnorm()) == []
    assert _order_findings(k) == []


def test_a_block_without_its_own_declaration_uses_the_outer_register():
    # the second copy (its label renamed, as the unroll operator does) declares nothing: its pw0 is the
    # function's, which the code after it reads to count the phases it saw complete
    outer = WAIT.replace("WAIT_0", "WAIT_0_u1").replace("\t.reg .pred pw0;\n", "")
    count = "\tselp.u32 %r1347, 1, 0, pw0;\n\tadd.s32 %r1363, %r1363, %r1347;\n"
    text = _rmsnorm().ptx.replace("\t.reg .pred \t%p<208>;\n", "\t.reg .pred \t%p<208>;\n\t.reg .pred pw0;\n", 1)
    assert text != _rmsnorm().ptx
    k0 = _rmsnorm()
    k = Kernel(parse_module(text.replace(WAIT, WAIT + outer + count)), k0.entry, k0.launch)
    found = _order_findings(k)
    assert len(found) == 1 and "WAIT" not in found[0].text and "pw0" in found[0].text
    assert found[0].text.lstrip().startswith("mbarrier.try_wait")
    waits = [n for n, line in enumerate(k.canonical_ptx.splitlines(), 1) if "try_wait" in line and "pw0" in line]
    assert len(waits) == 2 and found[0].line == waits[1]  # the second copy, not the honest first


# nvcc's older spelling of the wait (a C++ loop around one test): the test's result passes through function-scope
# registers, %r9000 and %p9000, which an unrolled copy of the loop writes again before it reads them.
CXX_WAIT = ("$L__W{n}:\n\t{{\n\t.reg .pred pw0;\n\tmbarrier.try_wait.parity.shared::cta.b64 pw0, [%r41], %r1346;\n"
            "\tselp.u32 %r9000, 1, 0, pw0;\n\t}}\n\tsetp.eq.s32 %p9000, %r9000, 0;\n\t@%p9000 bra $L__W{n};\n")


def _with_cxx_waits(after: str) -> Kernel:
    """The instance with its wait replaced by two copies of the C++-loop spelling, then ``after``."""
    k = _rmsnorm()
    text = k.ptx.replace("\t.reg .pred \t%p<208>;\n", "\t.reg .pred \t%p<208>;\n\t.reg .pred %p9000;\n"
                         "\t.reg .b32 %r9000;\n", 1)
    text = text.replace(WAIT, CXX_WAIT.format(n=0) + CXX_WAIT.format(n=1) + after)
    return Kernel(parse_module(text), k.entry, k.launch)


def test_an_unrolled_copy_that_rewrites_the_registers_reads_nothing_of_the_first_loop():
    """Each copy writes %r9000 and %p9000 before it reads them: no read is reached by the other loop's value
    (R56 on the H200, 2026-12-03: three `unroll` edits of cluster-push kernels were rejected for this)."""
    assert _order_findings(_with_cxx_waits("")) == []


def test_the_retry_result_read_after_the_loop_is_still_an_arrival_order():
    # after the second loop, %r9000 still holds its last test's result: adding it up counts the tests
    found = _order_findings(_with_cxx_waits("\tadd.s32 %r1363, %r1363, %r9000;\n"))
    assert len(found) == 1 and "try_wait" in found[0].text
