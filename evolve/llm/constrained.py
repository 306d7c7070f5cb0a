"""Grammars for constrained decoding: the edit language, narrowed to one parent kernel.

``population.edits.ebnf_grammar`` states the edit language in general (any line number, any PTX-looking line).
A 135M-parameter model needs a narrower road, so :func:`focused_edit_grammar` writes an EBNF (xgrammar / GBNF
dialect, start symbol ``root``) in the same spelling whose
- line numbers are only those of the focus region of the parent's canonical listing (MODIFIER only on
  instruction lines),
- PTX lines have the shape of a PTX ISA §4 statement: an optional guard ``@%p`` / ``@!%p``, an opcode from
  the parent or the common set, dotted modifiers from the parent or the common set, and up to six operands
  (registers with the parent's prefixes, special registers, immediates incl. ``0f`` floats, ``[base+off]``
  addresses, ``{...}`` vectors, the parent's symbols), the first operand a register, vector or address; or a
  label ``$L__name:`` (no ``.reg`` lines: apply_script declares new registers itself),
- LAUNCH sets the block size only, KNOBS values come from the workload's knob space and stand alone in a
  script (apply_script's rule), and DIRECTIVE names the parent's entries,
- scripts hold at most ``max_edits`` edits of at most ``max_block_lines`` PTX lines, so a generation of
  bounded length can finish.
Every string the grammar accepts parses with ``population.edits.parse_edit_script`` (tested).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from population.analysis import walk
from population.ast import (
    Address,
    Function,
    Instruction,
    Negated,
    ParenList,
    PredicatePair,
    RegDecl,
    Register,
    Symbol,
    VarDecl,
    Vector,
)

EDIT_KINDS = ("REPLACE", "INSERT", "DELETE", "MODIFIER", "LAUNCH", "DIRECTIVE", "KNOBS", "REWRITE")

# Opcodes a memory-bound kernel is likely to need (PTX ISA §9.7); the parent's own opcodes are added.
COMMON_OPCODES = (
    "ld", "st", "mov", "add", "sub", "mul", "mad", "fma", "div", "rcp", "rsqrt", "sqrt", "max", "min", "abs",
    "neg", "cvt", "cvta", "setp", "selp", "bra", "bar", "shfl", "and", "or", "xor", "not", "shl", "shr",
    "prefetch", "ret", "exit", "red", "atom", "membar", "fence", "ex2", "lg2", "cp",
)
# Modifiers (types, state spaces, cache operators §9.7.9.1, rounding, comparison, shuffle modes).
COMMON_MODIFIERS = (
    "f32", "f16", "bf16", "f16x2", "bf16x2", "f64", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64",
    "b8", "b16", "b32", "b64", "pred", "v2", "v4", "global", "shared", "local", "param", "const", "nc", "ca",
    "cg", "cs", "lu", "cv", "wb", "wt", "L1::no_allocate", "L1::evict_last", "L1::evict_first",
    "L2::evict_last", "L2::evict_first", "L2::128B", "L2", "approx", "ftz", "rn", "rz", "rm", "rp", "rni",
    "sat", "lo", "hi", "wide", "sync", "aligned", "uni", "eq", "ne", "lt", "le", "gt", "ge", "and", "or",
    "bfly", "down", "up", "idx", "full", "to",
)
# Fundamental types (PTX ISA §5.2.1) an instruction's type modifier can take.
TYPE_MODIFIERS = ("f16", "bf16", "f16x2", "bf16x2", "f32", "f64", "u8", "u16", "u32", "u64", "s8", "s16", "s32",
                  "s64", "b8", "b16", "b32", "b64", "pred")
SPECIAL_REGISTERS = ("%tid.x", "%tid.y", "%ntid.x", "%ctaid.x", "%ctaid.y", "%nctaid.x", "%laneid", "%warpid")
BLOCK_SIZES = (32, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def _lit(s: str) -> str:
    """An EBNF string literal for ``s``."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _alts(words: Iterable[str]) -> str:
    ws = sorted(set(words), key=lambda w: (-len(w), w))  # longest first only for readability
    if not ws:
        raise ValueError("empty alternative set in grammar")
    return " | ".join(_lit(w) for w in ws)


@dataclass(frozen=True)
class GrammarSpec:
    """What the focused grammar may emit for one parent.

    lines: canonical-listing line numbers (1-based) edits may name (REPLACE/DELETE ranges, INSERT AFTER).
    instruction_lines: lines MODIFIER may name (instructions only).
    entries: function names for DIRECTIVE.
    knob_space: workload knob name -> allowed values (LAUNCH knobs and KNOBS).
    register_prefixes: register name stems of the parent (``%r``, ``%rd``, ``%f``, ``%p``); new registers
        with these stems are auto-declared by apply_script.
    opcodes, modifiers, symbols: vocabularies for PTX lines.
    kinds: the edit keywords allowed. max_edits / max_block_lines / max_operands bound the output length;
    max_span: the most lines a REPLACE/DELETE range may cover. line_modifiers: instruction line -> its
    modifiers; when given, MODIFIER may only remove a modifier the instruction has, and a removed type
    (``TYPE_MODIFIERS``) must be replaced by a different type, from ``line_types[line]`` when given (the types
    compatible with the instruction's destination register, see :func:`compatible_types`).
    """

    lines: tuple[int, ...]
    instruction_lines: tuple[int, ...]
    entries: tuple[str, ...]
    knob_space: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    register_prefixes: tuple[str, ...] = ("%r", "%rd", "%f", "%p")
    opcodes: tuple[str, ...] = COMMON_OPCODES
    modifiers: tuple[str, ...] = COMMON_MODIFIERS
    symbols: tuple[str, ...] = ()
    kinds: tuple[str, ...] = EDIT_KINDS
    max_edits: int = 2
    max_block_lines: int = 4
    max_operands: int = 6
    max_span: int = 8
    line_modifiers: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    line_types: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


def focused_edit_grammar(spec: GrammarSpec) -> str:
    """The EBNF grammar (start ``root``) for ``spec``; see the module docstring.

    Raises ValueError for an unknown edit kind, a bound below 1, or a kind left with nothing to name
    (e.g. MODIFIER with no instruction lines is dropped, not an error; no kinds left at all is)."""
    bad = [k for k in spec.kinds if k not in EDIT_KINDS]
    if bad:
        raise ValueError(f"grammar kinds {bad} not in {EDIT_KINDS}")
    if min(spec.max_edits, spec.max_block_lines) < 1 or spec.max_operands < 2:
        raise ValueError("grammar bounds: need max_edits >= 1, max_block_lines >= 1, max_operands >= 2")
    kinds = [k for k in spec.kinds
             if not (k in ("REPLACE", "INSERT", "DELETE") and not spec.lines)
             and not (k == "MODIFIER" and not spec.instruction_lines)
             and not (k == "KNOBS" and not spec.knob_space)
             and not (k == "DIRECTIVE" and not spec.entries)
             and not (k == "REWRITE" and not spec.instruction_lines)]
    if not kinds:
        raise ValueError(f"no edit kind of {spec.kinds} has anything to name for this parent")
    n_edit = spec.max_edits
    # KNOBS re-instantiates the whole module, so apply_script accepts it only alone in a script.
    line_kinds = [k for k in kinds if k != "KNOBS"]
    alts = []
    if line_kinds:
        alts.append('edit "\\n"' + "".join(' (edit "\\n"' for _ in range(n_edit - 1)) + ")?" * (n_edit - 1))
    if "KNOBS" in kinds:
        alts.append('knobs "\\n"')
    rules: list[str] = [f"root ::= {' | '.join(alts)}"]
    if line_kinds:
        rules.append("edit ::= " + " | ".join(k.lower() for k in line_kinds))
    block = " ".join(["ptxline"] + ["ptxline?"] * (spec.max_block_lines - 1))
    if "REPLACE" in kinds:
        rules.append('replace ::= "REPLACE " span "\\n" ' + block + ' "END"')
    if "INSERT" in kinds:
        rules.append('insert ::= "INSERT AFTER " ln "\\n" ' + block + ' "END"')
    if "DELETE" in kinds:
        rules.append('delete ::= "DELETE " span')
    if "MODIFIER" in kinds:
        if spec.line_modifiers:
            # Per line: only a modifier the instruction has can be removed.
            # An instruction keeps its type: a removed type modifier must be swapped for another type.
            alts = []
            for n in sorted(set(spec.instruction_lines)):
                have = [m for m in spec.line_modifiers.get(n, ()) if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_:]*", m)]
                typed = [m for m in have if m in TYPE_MODIFIERS]
                other = [m for m in have if m not in TYPE_MODIFIERS]
                rm = ""
                for m in typed:  # never the same type back: that edit would be a no-op
                    to = [t for t in spec.line_types.get(n, TYPE_MODIFIERS) if t != m]
                    if to:
                        rm += f'" -" {_lit(m)} " +" ({_alts(to)}) | '
                if other:
                    rm += f'" -" ({_alts(other)}) (" +" mod)? | '
                alts.append(f'{_lit(str(n))} ({rm}" +" mod)')
            rules.append('modifier ::= "MODIFIER " (' + " | ".join(alts) + ")")
        else:
            rules.append('modifier ::= "MODIFIER " iln (" -" mod (" +" mod)? | " +" mod)')
            rules.append("iln ::= " + _alts(str(n) for n in spec.instruction_lines))
    if "LAUNCH" in kinds:
        # Block size only: launch knobs change what the template's PTX expects, KNOBS re-instantiates it instead.
        rules.append('launch ::= "LAUNCH block=" blk ",1,1"')
        rules.append("blk ::= " + _alts(str(b) for b in BLOCK_SIZES))
    if "DIRECTIVE" in kinds:
        rules.append('directive ::= "DIRECTIVE " entry " " (".maxnreg " nreg | ".minnctapersm " ("1" | "2" | "3" '
                     '| "4") | ".maxntid " blk ",1,1" | "-.maxnreg" | "-.minnctapersm" | "-.maxntid")')
        rules.append("entry ::= " + _alts(spec.entries))
        rules.append("nreg ::= " + _alts(str(n) for n in (32, 40, 48, 56, 64, 72, 80, 96, 128, 168, 255)))
    if "REWRITE" in kinds:
        # The named structural rewrites (population.edits.register_rewrite), at an instruction line of the focus.
        rules.append('rewrite ::= "REWRITE " ("vectorize " rwln (" width=" ("2" | "4"))? | "hoist_loads " rwln '
                     '| "async_copy " rwln (" count=" [1-8])? | "cluster_split " rwln (" cluster=" ("2" | "4" | "8"))?)')
        rules.append("rwln ::= " + _alts(str(n) for n in sorted(set(spec.instruction_lines))))
    if "KNOBS" in kinds:
        # Each knob at most once, in a fixed order: alternative i starts at knob i, the rest optional.
        names = list(spec.knob_space)
        chains = []
        for i in range(len(names)):
            chains.append(" ".join([f'" " k{i}'] + [f'(" " k{j})?' for j in range(i + 1, len(names))]))
        rules.append('knobs ::= "KNOBS" (' + " | ".join(chains) + ")")
        for i, name in enumerate(names):
            rules.append(f"k{i} ::= {_lit(name + '=')} ({_alts(str(v) for v in spec.knob_space[name])})")
    if any(k in kinds for k in ("REPLACE", "INSERT", "DELETE")):
        rules.append("ln ::= " + _alts(str(n) for n in spec.lines))
        # Ranges ascend and span at most max_span lines: each start line lists the ends it may take.
        allowed = sorted(set(spec.lines))
        spans = []
        for a in allowed:
            ends = [b for b in allowed if a < b <= a + spec.max_span]
            spans.append(_lit(str(a)) + (f' ("-" ({_alts(str(b) for b in ends)}))?' if ends else ""))
        rules.append("span ::= " + " | ".join(spans))
    if any(k in kinds for k in ("REPLACE", "INSERT")):
        ops = " ".join(["operand"] + ['(", " operand)?'] * (spec.max_operands - 2))
        rules += [
            # No .reg lines: apply_script declares new registers, and a model re-declaring old ones breaks ptxas.
            'ptxline ::= "\\t" (instr | label) "\\n"',
            f'instr ::= guard? opcode mods (" " first (", " {ops})?)? ";"',
            "first ::= reg | vec | addr | preg | sym",
            'guard ::= "@" "!"? preg " "',
            "opcode ::= " + _alts(spec.opcodes),
            "mods ::= " + " ".join(['("." mod)?'] * 4),
            "operand ::= reg | sreg | imm | addr | vec | sym | \"!\" preg",
            "reg ::= regstem [0-9] [0-9]? [0-9]?",
            "regstem ::= " + _alts(spec.register_prefixes),
            'preg ::= "%p" [0-9] [0-9]?',
            "sreg ::= " + _alts(SPECIAL_REGISTERS),
            'imm ::= "-"? [0-9] [0-9]? [0-9]? [0-9]? [0-9]? | "0f" hex hex hex hex hex hex hex hex',
            "hex ::= [0-9A-F]",
            'addr ::= "[" (reg | sym) ("+" [0-9] [0-9]? [0-9]? [0-9]?)? "]"',
            'vec ::= "{" reg ", " reg (", " reg ", " reg)? "}"',
            'label ::= "$L__" [A-Za-z0-9_] [A-Za-z0-9_]? [A-Za-z0-9_]? [A-Za-z0-9_]? [A-Za-z0-9_]? ":"',
        ]
        sym_words = [s for s in spec.symbols if re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", s)]
        rules.append("sym ::= " + (_alts(sym_words) if sym_words else '"$L__BB0_1"'))
    if "MODIFIER" in kinds or any(k in kinds for k in ("REPLACE", "INSERT")):
        rules.append("mod ::= " + _alts(spec.modifiers))
    return "\n".join(rules) + "\n"


# ------------------------------------------------------------------------------------ vocabularies of a kernel

# Instruction types that fit a register of a declared type: same kind and size, or the untyped bits of that
# size (PTX ISA §5.2.3 and the per-instruction operand type rules, e.g. "mul.f32 d, a, b": d is .f32).
_COMPATIBLE = {
    "f32": ("f32", "b32"), "f64": ("f64", "b64"), "f16": ("f16", "b16"), "bf16": ("bf16", "b16"),
    "f16x2": ("f16x2", "b32"), "bf16x2": ("bf16x2", "b32"),
    "b32": ("b32", "u32", "s32", "f32"), "u32": ("u32", "s32", "b32"), "s32": ("s32", "u32", "b32"),
    "b64": ("b64", "u64", "s64", "f64"), "u64": ("u64", "s64", "b64"), "s64": ("s64", "u64", "b64"),
    "b16": ("b16", "u16", "s16", "f16", "bf16"), "u16": ("u16", "s16", "b16"), "s16": ("s16", "u16", "b16"),
    "b8": ("b8", "u8", "s8"), "u8": ("u8", "s8", "b8"), "s8": ("s8", "u8", "b8"), "pred": ("pred",),
}


def register_types(fn: Function) -> dict[str, str]:
    """Declared type of every register name of ``fn``: ``%r<6>`` declares ``%r0``..``%r5``; a stem maps too
    (``"%r" -> "b32"``) so a register past the declared range still has a type."""
    out: dict[str, str] = {}
    for s in (loc.stmt for loc in walk(fn)):
        if isinstance(s, RegDecl):
            for name, count in s.names:
                out[name] = s.type
                if count is not None:
                    out.update({f"{name}{i}": s.type for i in range(count)})
    return out


def compatible_types(instr: Instruction, reg_types: Mapping[str, str]) -> tuple[str, ...] | None:
    """Types an instruction with a single type modifier may take given its destination register's declared
    type, or None when that cannot be told (no register destination, several type modifiers, unknown)."""
    if sum(m in TYPE_MODIFIERS for m in instr.modifiers) != 1 or not instr.operands:
        return None
    dest = instr.operands[0]
    if not isinstance(dest, Register):
        return None
    declared = reg_types.get(dest.name) or reg_types.get(re.sub(r"\d+$", "", dest.name))
    return _COMPATIBLE.get(declared) if declared else None


def _operand_names(op: object, regs: set[str], syms: set[str]) -> None:
    if isinstance(op, Register):
        regs.add(op.name)
    elif isinstance(op, Symbol):
        syms.add(op.name)
    elif isinstance(op, Address):
        _operand_names(op.base, regs, syms)
    elif isinstance(op, Vector | ParenList):
        for e in op.elements:
            _operand_names(e, regs, syms)
    elif isinstance(op, PredicatePair):
        regs.update((op.first.name, op.second.name))
    elif isinstance(op, Negated):
        regs.add(op.operand.name)


def kernel_vocabulary(fn: Function) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(register stems, opcodes, modifiers, symbols) used by ``fn``, each sorted.

    Register stems are declared names without their trailing digits (``%rd`` from ``%rd<12>``);
    symbols are parameter names, labels, variables and branch targets."""
    regs: set[str] = set()
    syms: set[str] = {p.name for p in fn.params}
    opcodes: set[str] = set()
    mods: set[str] = set()
    stems: set[str] = set()
    for s in (loc.stmt for loc in walk(fn)):
        if isinstance(s, RegDecl):
            stems.update(re.sub(r"\d+$", "", name) for name, _ in s.names)
        elif isinstance(s, VarDecl):
            syms.add(s.name)
        elif isinstance(s, Instruction):
            opcodes.add(s.opcode)
            mods.update(s.modifiers)
            for op in s.operands:
                _operand_names(op, regs, syms)
    stems.update(re.sub(r"\d+$", "", r) for r in regs if r.startswith("%"))
    stems = {s for s in stems if re.fullmatch(r"%[A-Za-z_][A-Za-z_]*", s)}
    return tuple(sorted(stems)), tuple(sorted(opcodes)), tuple(sorted(mods)), tuple(sorted(syms))
