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
