"""Analyses of a PTX function, in one import: control flow (``population.cfg``), registers and def-use
(``population.defuse``) and memory access sites (``population.memory``).

    from population.analysis import basic_blocks, cfg, loops, def_use, memory_sites, declare_missing

Every analysis takes a ``population.ast.Function`` and flattens its ``{ }`` scopes into one linear instruction
stream; indices ("flat indices") refer to :func:`flat_instructions`. The tables each module follows are cited
in its docstring (PTX ISA 9.0 "State Spaces", "Types", "Type Information for Instructions and Operands", and
the instruction descriptions).
"""

from __future__ import annotations

from population.cfg import (
    DECLARING_DIRECTIVES,
    TERMINATORS,
    BasicBlock,
    Located,
    Loop,
    basic_blocks,
    block_of,
    branch_tables,
    branch_target,
    cfg,
    dominates,
    flat_instructions,
    flat_located,
    flat_statements,
    loop_depths,
    loops,
    walk,
)
from population.defuse import (
    NO_DESTINATION,
    NVCC_PREFIX_TYPES,
    POINTER_TYPES,
    TYPE_BITS,
    DefUse,
    bare_register_names,
    compatible,
    declare_missing,
    declared_registers,
    def_use,
    definitions,
    destinations,
    has_destination,
    infer_register_types,
    nvcc_prefix_type,
    operand_types,
    registers_in,
    scopes,
    sources,
    undeclared_registers,
    used_registers,
)
from population.memory import KINDS, STATE_SPACES, MemorySite, classify, memory_sites

__all__ = [
    "DECLARING_DIRECTIVES",
    "KINDS",
    "NO_DESTINATION",
    "NVCC_PREFIX_TYPES",
    "POINTER_TYPES",
    "STATE_SPACES",
    "TERMINATORS",
    "TYPE_BITS",
    "BasicBlock",
    "DefUse",
    "Located",
    "Loop",
    "MemorySite",
    "bare_register_names",
    "basic_blocks",
    "block_of",
    "branch_tables",
    "branch_target",
    "cfg",
    "classify",
    "compatible",
    "declare_missing",
    "declared_registers",
    "def_use",
    "definitions",
    "destinations",
    "dominates",
    "flat_instructions",
    "flat_located",
    "flat_statements",
    "has_destination",
    "infer_register_types",
    "loop_depths",
    "loops",
    "memory_sites",
    "nvcc_prefix_type",
    "operand_types",
    "registers_in",
    "scopes",
    "sources",
    "undeclared_registers",
    "used_registers",
    "walk",
]
