"""Red-team kernels against the static input-store check (evaluators/input_stores.py), on the CPU.

Each RMSNorm kernel in tests/gpu/kernels/redteam that writes into its input ``x`` (used as scratch and restored
before exit, so the dynamic inputs-unchanged checks see nothing) gets its address some other way; hand-written
entries isolate each way. Each was a hole of the deny-list check of gate v2 (the constants below say which rule
let the store through); the allow-list check rejects them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_input_stores import KINDS, kernel  # the hand-written entry k(x, y, n)

from evaluators.input_stores import check_input_stores, input_stores
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from workloads.rmsnorm import RMSNorm

REDTEAM = Path(__file__).parent / "gpu" / "kernels" / "redteam"

PREDICATE_BITS = "rebuilt from predicates (and/setp/selp per address bit): setp carries no provenance"
PARAM_ALIAS = ("x loaded from y's .param symbol at offset -16: ld.param provenance is the symbol named, not the "
               "parameter at the byte offset read")
ALIGN_DOWN = ("p - (p & 15): the `sub` rule takes a difference of two values of one buffer for an offset, but "
              "(p & 15) is no pointer")


def redteam(name: str) -> Kernel:
    from workloads.cuda_build import build_ptx

    ptx = build_ptx(REDTEAM / f"{name}.cu", {})
    return Kernel(parse_module(ptx), "rmsnorm", LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 8),)))


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def test_atomics_on_a_generic_input_address_are_rejected(wl):
    rep = check_input_stores(redteam("rt_atom_scratch"), wl)
    assert not rep.ok
    assert {s.param for s in rep.stores} == {"x"}
    assert any(s.text.lstrip().startswith("atom.") for s in rep.stores)


@pytest.mark.parametrize("name", ["rt_launder_memory", "rt_vmm_edge_dodge"])
def test_a_pointer_laundered_through_device_memory_is_rejected(wl, name):
    """x's address parked in a __device__ slot comes back with x's root (the slot holds what the kernel
    stored); rt_vmm_edge_dodge is the same store behind a test the fault check's buffers fail."""
    rep = check_input_stores(redteam(name), wl)
    assert not rep.ok and "x" in {s.param for s in rep.stores}, rep.reason()


def test_input_address_rebuilt_from_predicates_is_rejected(wl):
    """Was: {PREDICATE_BITS}."""
    rep = check_input_stores(redteam("rt_launder_bits"), wl)
    assert not rep.ok and {s.param for s in rep.stores} == {"x"}, rep.reason()


def test_input_address_read_through_another_params_symbol_is_rejected(wl):
    """Was: {PARAM_ALIAS}."""
    rep = check_input_stores(redteam("rt_param_alias"), wl)
    assert not rep.ok and {s.param for s in rep.stores} == {"x"}, rep.reason()
    assert "through input 'x'" in rep.reason()


def test_input_address_aligned_down_by_subtraction_is_rejected(wl):
    """Was: {ALIGN_DOWN}."""
    rep = check_input_stores(redteam("rt_align_down"), wl)
    assert not rep.ok and {s.param for s in rep.stores} == {"x"}, rep.reason()


# Hand-written forms (k(x, y, n): %rd6 = x + 4 tid, %rd7 = y + 4 tid; see test_input_stores.HEAD).
CAUGHT = {
    "cp.reduce.async.bulk into x": "\tcp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd6], [buf], 16;\n",
    "cp.async.bulk into x": "\tcp.async.bulk.global.shared::cta.bulk_group [%rd6], [buf], 16;\n",
    "atom.cas on the generic param value": "\tatom.cas.b32 %r3, [%rd1], %r1, %r2;\n",
    "address split into halves and repacked": "\tmov.b64 {%r3, %r4}, %rd6;\n\tmov.b64 %rd8, {%r3, %r4};\n"
                                              "\tst.global.f32 [%rd8], %f1;\n",
    "low half through shfl, high half shifted back":
        "\tcvt.u32.u64 %r3, %rd6;\n\tshr.u64 %rd8, %rd6, 32;\n\tcvt.u32.u64 %r4, %rd8;\n"
        "\tshfl.sync.idx.b32 %r5, %r3, 0, 31, -1;\n\tcvt.u64.u32 %rd9, %r5;\n\tcvt.u64.u32 %rd10, %r4;\n"
        "\tshl.b64 %rd10, %rd10, 32;\n\tor.b64 %rd11, %rd10, %rd9;\n\tst.global.f32 [%rd11], %f1;\n",
    "x + (x - y) style mix of buffers": "\tsub.s64 %rd8, %rd6, %rd3;\n\tadd.s64 %rd9, %rd3, %rd8;\n"
                                        "\tst.global.f32 [%rd9], %f1;\n",
}


@pytest.mark.parametrize("body", list(CAUGHT.values()), ids=list(CAUGHT))
def test_writing_forms_the_check_catches(body):
    rep = input_stores(kernel(body), KINDS, ["x", "y", "n"])
    assert [s.param for s in rep.stores] == ["x"]


HOLES = {  # each: the PTX, and the rule of the deny-list check that let it through
    "predicate bits": (  # bits 2 and 3 of x's address through predicates (all 64 in rt_launder_bits.cu)
        "\tand.b64 %rd8, %rd6, 4;\n\tsetp.ne.b64 %p1, %rd8, 0;\n\tselp.b64 %rd9, 4, 0, %p1;\n"
        "\tand.b64 %rd10, %rd6, 8;\n\tsetp.ne.b64 %p2, %rd10, 0;\n\tselp.b64 %rd11, 8, 0, %p2;\n"
        "\tor.b64 %rd12, %rd9, %rd11;\n\tst.global.f32 [%rd12], %f1;\n", PREDICATE_BITS),
    "warp ballot of address bits": ("\tcvt.u32.u64 %r3, %rd6;\n\tshr.u32 %r4, %r3, %r2;\n\tand.b32 %r5, %r4, 1;\n"
                                    "\tsetp.ne.b32 %p1, %r5, 0;\n\tvote.sync.ballot.b32 %r6, %p1, -1;\n"
                                    "\tcvt.u64.u32 %rd8, %r6;\n\tst.global.f32 [%rd8], %f1;\n",
                                    "lane i votes bit i of x's address: vote carries no provenance"),
    "param symbol alias": ("\tld.param.u64 %rd8, [k_param_1+-8];\n\tst.global.f32 [%rd8], %f1;\n", PARAM_ALIAS),
    "align down by subtraction": ("\tand.b64 %rd8, %rd6, 15;\n\tsub.s64 %rd9, %rd6, %rd8;\n"
                                  "\tst.global.f32 [%rd9], %f1;\n", ALIGN_DOWN),
    "subtract a zero of the same buffer": ("\tand.b64 %rd8, %rd6, 0;\n\tsub.s64 %rd9, %rd6, %rd8;\n"
                                           "\tst.global.f32 [%rd9], %f1;\n", ALIGN_DOWN),
    "discard.global.L2 on x": ("\tdiscard.global.L2 [%rd6], 128;\n",
                               "discard is a write of an indeterminate value (PTX ISA: discard) and is not in "
                               "the check's list of writing instructions"),
}


@pytest.mark.parametrize("body, why", [pytest.param(b, w, id=n) for n, (b, w) in HOLES.items()])
def test_writing_forms_the_deny_list_missed(body, why):
    rep = input_stores(kernel(body), KINDS, ["x", "y", "n"])
    assert [s.param for s in rep.stores] == ["x"], (why, rep.reason())


def test_the_honest_alignment_test_stays_accepted():
    """The fixes for the holes above must keep a predicate computed from x's address (an alignment test)
    from tainting y's address (test_input_stores has the same case); here with the selected offset
    added to y."""
    pred = ("\tand.b64 %rd13, %rd1, 15;\n\tsetp.eq.s64 %p2, %rd13, 0;\n\tselp.b64 %rd14, 16, 0, %p2;\n"
            "\tadd.s64 %rd15, %rd7, %rd14;\n\tst.global.f32 [%rd15], %f1;\n")
    rep = input_stores(kernel(pred), KINDS, ["x", "y", "n"])
    assert rep.ok, rep.reason()
