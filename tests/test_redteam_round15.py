"""Round 15 against gate rules version 16 (four holes closed in version 17), on the CPU: hand-written RMSNorm
entries (tests/redteam15_kernels.py: round 12's body with each trick spliced in) through the GPU pool's front half (``evaluators.pipeline.prepare``:
ptxas for sm_90, the ABI, the input-store check, the race lint, the launch), and, for the two `.loc` kernels,
through the export of a stored row (``archive.export.export_kernel``), whose cubin is compiled from the stored text.

| kernel | trick | gate rules say | the checks give |
|---|---|---|---|
| ``rt15_loc_hidden_store`` | instructions after ``.loc`` on its line: the parser reads them as the directive's text, ptxas compiles them; the gate compiles the canonical print (without them), the export the stored text (with them); 2 spellings: a store into x, a ``%clock64`` dodge | input_mutated / nondeterministic (time_dependent) | accepted, and the exported cubin ran the hidden code (hole); closed in version 17: the export ships the judged canonical print |
| ``rt15_loc_phantom_init`` | ``.loc ... /*`` ... ``// */``: an initialising store the checks and the gate see, the exported cubin lacks | nondeterministic (launch_state) | accepted, the exported cubin read a stale shared counter (hole); closed in version 17 as above |
| ``rt15_bulk_copy_stale_shared`` | a stale shared launch counter read by a TMA bulk copy (``cp.async.bulk.shared::cluster.shared::cta``), not a load | nondeterministic (launch_state) | accepted (hole); version 17: nondeterministic (launch_state) |
| ``rt15_carry_state`` | ``addc`` with no ``add.cc`` before it: the carry-in is a predicate register no instruction writes | nondeterministic (launch_state) | accepted (hole); version 17: nondeterministic (launch_state) |
| ``rt15_param_overread`` | ``ld.param`` of bytes 36-43, past the ABI's six parameters (a constant-bank word the launch does not write) | nondeterministic (time_dependent) | accepted (hole); version 17: nondeterministic (time_dependent) |
| ``rt15_vector_register_state`` | launch counter in ``%rv.y`` of a ``.v2`` register whose ``.x`` is written | nondeterministic (launch_state) | nondeterministic (launch_state) |
| ``rt15_const_state`` | launch counter in a ``.const`` variable written through ``cvta.const`` | input_mutated | input_mutated |
| ``rt15_function_global_state`` | launch counter in a ``.global`` declared inside the entry | nondeterministic (launch_state) | nondeterministic (launch_state) |
| ``rt15_honest_lineinfo`` (control) | nvcc -lineinfo's ``.file``/``.loc``/``.debug_str``, ``inlined_at`` | accepted | accepted (and exported as judged) |
| ``rt15_honest_carry_address`` (control) | y's address as a 64-bit add in 32-bit halves (``add.cc``/``addc``) | accepted | input_mutated (false rejection) |

Each hole but ``rt15_param_overread`` is one change away from a form the checks catch
(``redteam15_kernels.HOLES_CAUGHT``, a plain test each): the hidden instructions on lines of their own, the
phantom lines left out, the counter loaded by ``ld.shared``, the bit read from a register no path writes.

A hole's test asserts what closes it, whatever status a fix gives: a rejection past the compile step (for the
`.loc` kernels: or an exported cubin that is the code the gate judged), so it turns red when fixed. Nothing here
was run on a GPU (what the hardware leaves in a predicate register or past the parameters is predicted).
"""

from __future__ import annotations

import pytest

from evaluators.input_stores import param_layout
from evaluators.pipeline import Rejected
from evaluators.toolchain import compile_ptx
from evaluators.types import Status
from population.ast import Address, Register
from population.cfg import flat_instructions
from population.kernel import Kernel
from tests import redteam15_kernels as rt
from tests.cubins import exported_cubin, gated, text_section
from tests.front_half import assert_accepted, assert_assembles_and_launches, assert_rejected, front_half
from workloads.rmsnorm import RMSNorm

ND = Status.NONDETERMINISTIC

ALL = {**rt.HOLES, **{f"rt15_loc_hidden_store ({k})": v for k, v in rt.LOC_HIDDEN_SPELLINGS.items()},
       **{f"{k} (caught twin)": v for k, v in rt.HOLES_CAUGHT.items()},
       **{f"rt15_loc_hidden_store ({k}, caught twin)": v for k, v in rt.LOC_HIDDEN_SPELLINGS_CAUGHT.items()},
       **rt.CAUGHT, **rt.CONTROLS}


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


def _gated(k: Kernel) -> bytes:
    return gated(k)


def _exported(k: Kernel, tmp_path) -> bytes:
    """The entry's machine code in the cubin ``archive.export`` writes for the kernel's stored row."""
    return text_section(exported_cubin(k, tmp_path))


@pytest.mark.parametrize("name", list(ALL))
def test_every_kernel_assembles_for_sm_90_and_launches(name, wl):
    """Guards the xfails below (tests.front_half.assert_assembles_and_launches)."""
    assert_assembles_and_launches(rt.build(ALL[name]), wl)


# ------------------------------------------------------------------------------------------ what ptxas reads


def test_the_parser_reads_the_instructions_after_a_loc_as_its_text():
    """The mechanism of rt15_loc_hidden_store: the text holds the stores into x, the parsed entry has none."""
    k = rt.build(rt.LOC_HIDDEN_STORE)
    assert ".loc 1 40 0 @%p2 st.global.u16 [%rd13], %rs3;" in k.ptx
    stores = [i for i in flat_instructions(k.module.function(k.entry)) if i.opcode == "st"
              and isinstance(i.operands[0], Address) and i.operands[0].base == Register("%rd13")]
    assert stores == []


@pytest.mark.parametrize("spelling", list(rt.LOC_HIDDEN_SPELLINGS))
def test_ptxas_compiles_the_instructions_after_a_loc(spelling):
    """ptxas on the text as written (what the store keeps and ``archive.export`` compiles): the entry's machine code
    is byte for byte that of the same instructions on lines of their own, the twin the checks reject."""
    k = rt.build(rt.LOC_HIDDEN_SPELLINGS[spelling])
    twin = rt.build(rt.LOC_HIDDEN_SPELLINGS_CAUGHT[spelling])
    assert text_section(compile_ptx(k.ptx, "sm_90").cubin) == _gated(twin)


def test_ptxas_skips_the_lines_a_loc_comment_opens():
    """The mechanism of rt15_loc_phantom_init: ptxas on the text as written compiles the twin without the phantom
    initialisation, byte for byte; with the phantom lines uncommented the code differs (they are real code)."""
    k = rt.build(rt.LOC_PHANTOM_INIT)
    twin = rt.build(rt.LOC_PHANTOM_INIT_CAUGHT)
    assert text_section(compile_ptx(k.ptx, "sm_90").cubin) == _gated(twin)
    uncommented = rt.build(dict(rt.LOC_PHANTOM_INIT, pre=rt.LOC_PHANTOM_INIT["pre"].replace(
        "\t.loc 1 7 0 /*\n", "").replace("\t// */\n", "")))
    assert _gated(uncommented) != _gated(twin)


def test_the_parameter_overread_is_past_the_abi_parameters():
    """rt15_param_overread reads bytes 36-43; the six parameters of the ABI end at byte 36."""
    k = rt.build(rt.PARAM_OVERREAD)
    off, size = param_layout(k.module.function(k.entry))[-1]
    assert off + size == 36
    assert "[rmsnorm_param_5+4]" in k.ptx and "[rmsnorm_param_5+8]" in k.ptx


# ------------------------------------------------------------------------------------------ the holes


def _rejected_or_exported_as_judged(k: Kernel, wl, tmp_path) -> None:
    """Closed when the front half rejects the kernel past the compile step, or when the cubin the export writes for
    its stored row is the code the gate judged."""
    r = front_half(k, wl)
    if isinstance(r, Rejected):
        assert r.step != "compile", r.reason
        return
    assert _exported(k, tmp_path) == _gated(k), "the exported cubin is not the code the gate judged"


@pytest.mark.parametrize("spelling", list(rt.LOC_HIDDEN_SPELLINGS))
def test_instructions_hidden_after_a_loc_are_rejected_or_not_exported(spelling, wl, tmp_path):
    """Gate rules: x_scratch input_mutated, clock nondeterministic (time_dependent). Closed (gate rules version
    17) by what ships: ``archive.export`` writes and compiles the canonical print the gate judged
    (``archive.export.judged_ptx``), so the hidden instructions, which no check saw, are in no exported cubin."""
    _rejected_or_exported_as_judged(rt.build(rt.LOC_HIDDEN_SPELLINGS[spelling]), wl, tmp_path)


def test_a_phantom_initialisation_after_a_loc_is_rejected_or_not_exported(wl, tmp_path):
    """Gate rules: nondeterministic (launch_state). Closed (version 17) as above: the exported cubin holds the
    initialising store the checks saw and the gate ran."""
    _rejected_or_exported_as_judged(rt.build(rt.LOC_PHANTOM_INIT), wl, tmp_path)


def test_a_stale_shared_counter_read_by_a_bulk_copy_is_rejected(wl):
    """Gate rules: nondeterministic (launch_state). Closed in version 17: rule 5's ``.shared`` form reads a copy's
    source as a load (``cp`` with a shared variable among its source's roots)."""
    assert_rejected(rt.build(rt.BULK_COPY_STALE_SHARED), wl, ND, "race_lint", "launch_state", "cp.async.bulk",
                    "reads the .shared variable 'rt15_seen' before any store into it")


def test_a_launch_state_bit_in_the_carry_flag_is_rejected(wl):
    """Gate rules: nondeterministic (launch_state). Closed in version 17: rule 5's register form counts the carry
    flag as a register that ``.cc`` instructions write and ``addc``/``subc``/``madc`` read."""
    assert_rejected(rt.build(rt.CARRY_STATE), wl, ND, "race_lint", "launch_state", "addc.u32",
                    "reads the carry flag (CC.CF), which no path from the entry writes before it")


def test_an_addc_after_its_add_cc_is_no_unwritten_carry_read(wl):
    """The honest carry idiom (``add.cc`` then ``addc``) reads a carry the path wrote: the race lint has no finding
    (what rejects rt15_honest_carry_address is the input-store check, below)."""
    from evaluators.race_lint import race_lint

    assert race_lint(rt.build(rt.HONEST_CARRY_ADDRESS)).ok


def test_a_read_past_the_abi_parameters_is_rejected(wl):
    """Gate rules: nondeterministic (time_dependent). Closed in version 17 by rule 3's parameter form: an entry's
    ``ld.param`` outside its parameter layout (or at an address naming no parameter)."""
    assert_rejected(rt.build(rt.PARAM_OVERREAD), wl, ND, "race_lint", "time_dependent", "ld.param.u32",
                    "reads parameter bytes [36, 40) of an entry whose parameters end at byte 36")


# ------------------------------------------------------------------------------------------ caught


def test_the_hidden_store_on_lines_of_its_own_is_rejected(wl):
    assert_rejected(rt.build(rt.LOC_HIDDEN_SPELLINGS_CAUGHT["x_scratch"]), wl, Status.INPUT_MUTATED, "input_stores",
                    "st.global.u16", "input 'x' (param 0)")


def test_the_hidden_clock_on_lines_of_its_own_is_rejected(wl):
    assert_rejected(rt.build(rt.LOC_HIDDEN_SPELLINGS_CAUGHT["clock"]), wl, ND, "race_lint", "time_dependent",
                    "%clock64")


def test_the_shared_counter_without_the_phantom_store_is_rejected(wl):
    assert_rejected(rt.build(rt.LOC_PHANTOM_INIT_CAUGHT), wl, ND, "race_lint", "launch_state", "rt15_seen")


def test_the_shared_counter_read_by_a_load_is_rejected(wl):
    assert_rejected(rt.build(rt.BULK_COPY_STALE_SHARED_CAUGHT), wl, ND, "race_lint", "launch_state",
                    "ld.shared.u32", "rt15_seen")


def test_the_bit_read_from_an_unwritten_register_is_rejected(wl):
    assert_rejected(rt.build(rt.CARRY_STATE_CAUGHT), wl, ND, "race_lint", "launch_state", "register %r41")


def test_a_launch_counter_in_a_vector_register_component_is_rejected(wl):
    assert_rejected(rt.build(rt.VECTOR_REGISTER_STATE), wl, ND, "race_lint", "launch_state", "register %rv.y")


def test_a_launch_counter_in_const_memory_is_rejected(wl):
    assert_rejected(rt.build(rt.CONST_STATE), wl, Status.INPUT_MUTATED, "input_stores", "st.u32", "no provenance")


def test_a_launch_counter_in_a_function_scope_global_is_rejected(wl):
    assert_rejected(rt.build(rt.FUNCTION_GLOBAL_STATE), wl, ND, "race_lint", "launch_state", "rt15_launches")


# ------------------------------------------------------------------------------------------ honest controls


def test_an_honest_lineinfo_kernel_is_accepted_and_exported_as_judged(wl, tmp_path):
    """nvcc -lineinfo's debug directives: accepted, and the exported cubin is the code the gate judged (a fix for
    the `.loc` holes must keep both)."""
    k = rt.build(rt.HONEST_LINEINFO)
    assert_accepted(k, wl)
    assert _exported(k, tmp_path) == _gated(k)


@pytest.mark.xfail(strict=True, reason="round 15 false rejection: the input-store check takes y's address rebuilt "
                                       "from its 32-bit halves through add.cc/addc (mov.b64 unpack and pack) for "
                                       "bits of y, which vouch for no write address")
def test_an_honest_address_added_in_32_bit_halves_is_accepted(wl):
    assert_accepted(rt.build(rt.HONEST_CARRY_ADDRESS), wl)
