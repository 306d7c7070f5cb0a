"""The static input-store check on real PTX: nvcc output of the gate cases and hand-written entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.input_stores import check_input_stores, input_stores
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from workloads.rmsnorm import RMSNorm

CASES = Path(__file__).parent / "gpu" / "kernels" / "gate_cases"

HEAD = """.version 8.0
.target sm_90
.address_size 64

.visible .entry k(
\t.param .u64 k_param_0,
\t.param .u64 k_param_1,
\t.param .u32 k_param_2
)
{
\t.reg .pred %p<3>;
\t.reg .b32 %r<8>;
\t.reg .f32 %f<4>;
\t.reg .b64 %rd<16>;
\t.shared .align 4 .b8 buf[128];

\tld.param.u64 %rd1, [k_param_0];
\tld.param.u64 %rd2, [k_param_1];
\tld.param.u32 %r1, [k_param_2];
\tcvta.to.global.u64 %rd3, %rd1;
\tcvta.to.global.u64 %rd4, %rd2;
\tmov.u32 %r2, %tid.x;
\tmul.wide.u32 %rd5, %r2, 4;
\tadd.s64 %rd6, %rd3, %rd5;
\tadd.s64 %rd7, %rd4, %rd5;
\tld.global.f32 %f1, [%rd6];
"""
TAIL = "\tret;\n}\n"


def kernel(body: str) -> Kernel:
    return Kernel(parse_module(HEAD + body + TAIL), "k", LaunchConfig(block=(32, 1, 1)))


KINDS = ["input", "output", "scalar"]


def test_store_to_output_is_fine_and_store_to_input_is_found_with_its_line():
    ok = input_stores(kernel("\tst.global.f32 [%rd7], %f1;\n"), KINDS, ["x", "y", "n"])
    assert ok.ok and ok.stores == []
    bad = input_stores(kernel("\tst.global.f32 [%rd7], %f1;\n\tst.global.f32 [%rd6+4], %f1;\n"), KINDS,
                       ["x", "y", "n"])
    assert not bad.ok and len(bad.stores) == 1
    s = bad.stores[0]
    assert s.param == "x" and s.index == 0 and "st.global.f32" in s.text and "[%rd6+4]" in s.text
    listing = kernel("\tst.global.f32 [%rd7], %f1;\n\tst.global.f32 [%rd6+4], %f1;\n").module
    from population.printer import listing as make_listing

    assert make_listing(listing).line(s.line).text == s.text
    assert "line" in bad.reason() and "'x'" in bad.reason()


@pytest.mark.parametrize("instr", [
    "\tatom.global.add.f32 %f2, [%rd6], %f1;\n",
    "\tred.global.add.f32 [%rd6], %f1;\n",
    "\tst.f32 [%rd1], %f1;\n",  # generic address straight from the param
    "\tselp.b64 %rd8, %rd6, %rd7, %p1;\n\tst.global.f32 [%rd8], %f1;\n",  # either buffer: may be x
    "\tmov.b64 %rd9, %rd6;\n\tadd.s64 %rd10, %rd9, 64;\n\tst.volatile.global.f32 [%rd10], %f1;\n",
])
def test_every_writing_form_through_the_input_is_found(instr):
    rep = input_stores(kernel(instr), KINDS, ["x", "y", "n"])
    assert [s.param for s in rep.stores] == ["x"]


def test_shared_stores_inout_buffers_and_pointer_differences_are_not_input_stores():
    shared = "\tmov.u32 %r3, buf;\n\tst.shared.f32 [%r3], %f1;\n"
    assert input_stores(kernel(shared), KINDS).ok
    # y + (p - x) with p inside x: an offset into y
    diff = "\tsub.s64 %rd11, %rd6, %rd3;\n\tadd.s64 %rd12, %rd4, %rd11;\n\tst.global.f32 [%rd12], %f1;\n"
    assert input_stores(kernel(diff), KINDS).ok
    # the same store is allowed when the first buffer is an in/out state
    assert input_stores(kernel("\tst.global.f32 [%rd6], %f1;\n"), ["inout", "output", "scalar"]).ok
    # a predicate computed from x's address (an alignment test) does not make y's address an x address
    pred = ("\tand.b64 %rd13, %rd1, 15;\n\tsetp.eq.s64 %p2, %rd13, 0;\n\tselp.b64 %rd14, 16, 0, %p2;\n"
            "\tadd.s64 %rd15, %rd7, %rd14;\n\tst.global.f32 [%rd15], %f1;\n")
    assert input_stores(kernel(pred), KINDS).ok


def test_a_pointer_loaded_from_memory_is_rejected():
    body = "\tld.global.u64 %rd11, [%rd7];\n\tst.global.f32 [%rd11], %f1;\n"
    rep = input_stores(kernel(body), KINDS)
    assert not rep.ok and rep.stores[0].param == "" and "no provenance" in rep.stores[0].why


def test_gate_cases_x_scratch_is_rejected_and_the_honest_kernels_pass():
    from workloads.cuda_build import build_ptx

    wl = RMSNorm("bf16")
    found = {}
    for name in ("rt_x_scratch", "rt_honest", "rt_poison_sniff", "rt_smem_war_race"):
        k = Kernel(parse_module(build_ptx(CASES / f"{name}.cu", {})), "rmsnorm", LaunchConfig(block=(256, 1, 1)))
        found[name] = check_input_stores(k, wl)
    bad = found.pop("rt_x_scratch")
    assert not bad.ok and {s.param for s in bad.stores} == {"x"}
    assert any(".global" in s.text and s.text.lstrip().startswith("st.") for s in bad.stores)
    assert all(r.ok for r in found.values())


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_seeds_have_no_input_store(dtype):
    wl = RMSNorm(dtype)
    for k in wl.seeds():
        rep = check_input_stores(k, wl)
        assert rep.ok, rep.reason()
