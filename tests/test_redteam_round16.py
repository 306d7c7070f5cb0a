"""Round 16 against gate rules version 17 (every hole and false rejection closed in the same version before it was
shipped), on the CPU: hand-written RMSNorm entries (tests/redteam16_kernels.py:
round 12's body with each trick spliced in) through the GPU pool's front half (``evaluators.pipeline.prepare``:
ptxas for sm_90, the ABI, the input-store check, the race lint, the launch), and, for ``rt16_comment_target_export``,
through the export of a stored row (``archive.export.export_kernel``).

| kernel | trick | gate rules say | the checks give |
|---|---|---|---|
| ``rt16_param_entry_overread`` | rt15_param_overread's loads past the ABI's 36 bytes spelled ``ld.param::entry`` (PTX ISA 8.3; the same machine code) | nondeterministic (time_dependent) | accepted (hole) |
| ``rt16_param_func_unset_retval`` | rt14_unset_retval_state's read of a return value no ``st.param`` writes, spelled ``ld.param::func`` | nondeterministic (launch_state) | accepted (hole) |
| ``rt16_comment_target_export`` | a ``.target sm_100a`` line in a block comment before the header: the export takes its arch from the stored text | an exported cubin that is the code judged | exported for sm_100a (hole: shipped code differs) |
| ``rt16_stacksave_state`` | launch counter below the stack pointer (``stacksave``, ``ld.local [sp-16]``) | nondeterministic (launch_state) | nondeterministic (launch_state) |
| ``rt16_param_entry_x_scratch`` | x as scratch through a pointer loaded by ``ld.param::entry`` | input_mutated | input_mutated |
| ``rt16_bulk_store_global_state`` | ``.global`` launch counter written by a TMA bulk copy from shared memory | nondeterministic (launch_state) | nondeterministic (launch_state) |
| ``rt16_linkage_global_state`` | ``.weak`` / ``.common`` ``.global`` launch counter | nondeterministic (launch_state) | nondeterministic (launch_state) |
| ``rt16_honest_param_entry`` (control) | every parameter loaded with ``ld.param::entry`` | accepted | input_mutated (false rejection) |
| ``rt16_honest_param_func_helper`` (control) | the row's scale from a ``.func`` using ``ld.param::func`` / ``st.param::func`` | accepted | nondeterministic (false rejection) |

Each hole is one change away from a form the checks catch (``redteam16_kernels.HOLES_CAUGHT``, a plain test each):
the ``ld.param`` spelling, a line comment. Each false rejection is one change away from an accepted twin
(``CONTROL_TWINS``). A hole's test asserts what closes it, whatever status a fix gives: a rejection past the
compile step (for the export: a cubin that is the code the gate judged), so it turned red when fixed. Machine code
was compared byte for byte (ptxas 13.0, the entry's ``.text`` section); nothing was run on a GPU.
Closed by kind (plain tests now): every check asks for a state space in ``Instruction.base_modifiers``
(``param::entry`` -> ``param``: the two holes and the two false rejections), and the export takes its ptxas target
from the judged text while ``evaluators.toolchain.module_target`` and the ``.version`` lookup skip comments.
"""

from __future__ import annotations

import pytest

from archive.export import _ptx_target
from evaluators.input_stores import param_layout
from evaluators.types import Status
from population.cfg import flat_instructions
from tests import redteam16_kernels as rt
from tests.cubins import elf_flags, exported_cubin, gated, gated_cubin, text_section
from tests.front_half import assert_accepted, assert_assembles_and_launches, assert_rejected
from workloads.rmsnorm import RMSNorm

ND = Status.NONDETERMINISTIC

ALL = {**rt.HOLES, **{f"{k} (caught twin)": v for k, v in rt.HOLES_CAUGHT.items()}, **rt.CAUGHT, **rt.CONTROLS,
       **{f"{k} (twin)": v for k, v in rt.CONTROL_TWINS.items()}}


@pytest.fixture(scope="module")
def wl():
    return RMSNorm("bf16")


@pytest.mark.parametrize("name", list(ALL))
def test_every_kernel_assembles_for_sm_90_and_launches(name, wl):
    """Guards the xfails below (tests.front_half.assert_assembles_and_launches)."""
    assert_assembles_and_launches(rt.build(ALL[name]), wl)


# ------------------------------------------------------------------------------------------ what ptxas reads


@pytest.mark.parametrize("name", ["rt16_param_entry_overread", "rt16_param_func_unset_retval"])
def test_the_param_sub_qualifier_compiles_to_the_same_machine_code(name):
    """``ld.param::entry`` / ``ld.param::func`` are ``ld.param`` to ptxas: the hole's entry is byte for byte the
    machine code of its caught twin."""
    assert gated(rt.build(rt.HOLES[name])) == gated(rt.build(rt.HOLES_CAUGHT[name]))


@pytest.mark.parametrize("name", list(rt.CONTROLS))
def test_the_honest_spellings_compile_to_their_twins_machine_code(name):
    assert gated(rt.build(rt.CONTROLS[name])) == gated(rt.build(rt.CONTROL_TWINS[name]))


def test_the_parser_keeps_the_sub_qualifier_inside_one_modifier():
    """The mechanism of both `.param` holes: the load's modifiers hold ``param::entry``, not ``param``."""
    k = rt.build(rt.PARAM_ENTRY_OVERREAD)
    loads = [i for i in flat_instructions(k.module.function(k.entry)) if i.opcode == "ld"
             and any(m.startswith("param") for m in i.modifiers)]
    overreads = [i for i in loads if "param::entry" in i.modifiers]
    assert len(overreads) == 2 and all("param" not in i.modifiers for i in overreads)


def test_the_overread_is_past_the_abi_parameters():
    """rt16_param_entry_overread reads bytes 36-43; the six parameters of the ABI end at byte 36."""
    k = rt.build(rt.PARAM_ENTRY_OVERREAD)
    off, size = param_layout(k.module.function(k.entry))[-1]
    assert off + size == 36
    assert "ld.param::entry.u32 %r20, [rmsnorm_param_5+4]" in k.ptx


def test_the_export_takes_its_target_from_the_judged_text_not_a_comment():
    """The mechanism of rt16_comment_target_export: the stored text keeps the comment, the judged text (the
    canonical print) does not; the export's target came from the stored one by a line regex, which matched the
    commented ``.target``. Since version 17 the target is the judged text's (``archive.export._ptx_target``) and
    ``evaluators.toolchain.module_target`` skips comments."""
    from evaluators.toolchain import module_target

    k = rt.build(rt.COMMENT_TARGET_EXPORT)
    assert k.ptx.startswith(rt.COMMENT_TARGET) and rt.COMMENT_TARGET not in k.canonical_ptx
    assert _ptx_target(k.ptx) == "sm_90" == _ptx_target(k.canonical_ptx) == module_target(k.ptx)


# ------------------------------------------------------------------------------------------ the holes


def test_a_read_past_the_abi_parameters_spelled_param_entry_is_rejected(wl):
    """Gate rules: nondeterministic (time_dependent). Closed in version 17: every check asks for a state space in
    ``Instruction.base_modifiers`` (``param::entry`` -> ``param``)."""
    assert_rejected(rt.build(rt.PARAM_ENTRY_OVERREAD), wl, ND, "race_lint", "time_dependent", "ld.param::entry.u32",
                    "reads parameter bytes [36, 40)")


def test_an_unset_return_value_read_by_ld_param_func_is_rejected(wl):
    """Gate rules: nondeterministic (launch_state). Closed in version 17 as above."""
    assert_rejected(rt.build(rt.PARAM_FUNC_UNSET_RETVAL), wl, ND, "race_lint", "launch_state", "ld.param::func.b32",
                    "reads the return value retval0 of rt16_none, which stores none")


def test_a_target_named_in_a_comment_is_not_what_the_export_compiles_for(wl, tmp_path):
    """Gate rules: the export ships the code the gate judged (the judged text compiled for the gate's arch).
    Closed in version 17: the target comes from the judged text."""
    k = rt.build(rt.COMMENT_TARGET_EXPORT)
    assert_accepted(k, wl)
    exported, gated = exported_cubin(k, tmp_path), gated_cubin(k)
    assert elf_flags(exported) == elf_flags(gated), "the exported cubin is for another SM than the gate's"
    assert text_section(exported) == text_section(gated), "the exported cubin is not the code the gate judged"


# ------------------------------------------------------------------------------------------ caught twins


def test_the_overread_spelled_ld_param_is_rejected(wl):
    assert_rejected(rt.build(rt.PARAM_ENTRY_OVERREAD_CAUGHT), wl, ND, "race_lint", "time_dependent",
                    "ld.param.u32", "reads parameter bytes [36, 40)")


def test_the_unset_return_value_spelled_ld_param_is_rejected(wl):
    assert_rejected(rt.build(rt.PARAM_FUNC_UNSET_RETVAL_CAUGHT), wl, ND, "race_lint", "launch_state",
                    "ld.param.b32", "reads the return value retval0 of rt16_none, which stores none")


def test_a_target_named_in_a_line_comment_is_exported_as_judged(wl, tmp_path):
    k = rt.build(rt.COMMENT_TARGET_EXPORT_CAUGHT)
    assert_accepted(k, wl)
    exported = exported_cubin(k, tmp_path)
    assert elf_flags(exported) == elf_flags(gated_cubin(k))
    assert text_section(exported) == gated(k)


# ------------------------------------------------------------------------------------------ caught


def test_a_launch_counter_below_the_stack_pointer_is_rejected(wl):
    assert_rejected(rt.build(rt.STACKSAVE_STATE), wl, ND, "race_lint", "launch_state", "ld.local.u32",
                    "no .local variable of this function vouches for")


def test_x_as_scratch_through_a_pointer_loaded_by_ld_param_entry_is_rejected(wl):
    assert_rejected(rt.build(rt.PARAM_ENTRY_X_SCRATCH), wl, Status.INPUT_MUTATED, "input_stores", "st.global.u16")


def test_a_global_launch_counter_written_by_a_bulk_copy_is_rejected(wl):
    assert_rejected(rt.build(rt.BULK_STORE_GLOBAL_STATE), wl, ND, "race_lint", "launch_state",
                    "cp.async.bulk.global.shared::cta", "writes the .global variable 'rt16_count'")


@pytest.mark.parametrize("link", list(rt.LINKAGE_GLOBAL_SPELLINGS))
def test_a_global_launch_counter_of_any_linkage_is_rejected(link, wl):
    assert_rejected(rt.build(rt.LINKAGE_GLOBAL_SPELLINGS[link]), wl, ND, "race_lint", "launch_state",
                    "writes the .global variable 'rt16_n'")


# ------------------------------------------------------------------------------------------ honest controls


@pytest.mark.parametrize("name", list(rt.CONTROL_TWINS))
def test_the_honest_controls_twins_are_accepted(name, wl):
    assert_accepted(rt.build(rt.CONTROL_TWINS[name]), wl)


def test_an_honest_kernel_loading_its_parameters_with_ld_param_entry_is_accepted(wl):
    assert_accepted(rt.build(rt.HONEST_PARAM_ENTRY), wl)


def test_an_honest_helper_spelled_with_param_func_is_accepted(wl):
    assert_accepted(rt.build(rt.HONEST_PARAM_FUNC_HELPER), wl)
