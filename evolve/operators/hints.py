"""Cache and eviction hints on global loads and stores (PTX ISA 9.0, data movement instructions
``ld``, ``ld.global.nc``, ``st`` and ``createpolicy``).

A load or store's hints are split into independent *slots* and the operator moves one or two of them:

============  ==========================================================================================
slot          values
============  ==========================================================================================
nc            ``.nc`` (non-coherent, read-only data path): loads only, and only when no store, atomic or
              reduction in the kernel may write the buffer the load reads (see ``pointer_roots``)
cop           cache operator: loads ``.ca .cg .cs .lu`` (``.nc`` loads: ``.ca .cg .cs``), stores
              ``.wb .cg .cs .wt``
l1            ``.L1::evict_normal .L1::evict_unchanged .L1::evict_first .L1::evict_last .L1::no_allocate``
l2            an L2 eviction policy through ``.L2::cache_hint`` and a ``createpolicy.fractional.L2::evict_first``
              or ``::evict_last`` register placed just before the access
size          loads: ``.L2::64B .L2::128B .L2::256B`` prefetch size
============  ==========================================================================================

An existing L2 policy is recognised when its register's one definition is the operator's own
``createpolicy.fractional.L2::evict_*.b64 r, 1.0``; any other policy operand is left alone.

Legal combinations, as checked against ptxas 13.0 for sm_90: ``cop`` excludes ``l1`` (the ISA gives them as two
forms of the instruction and ptxas rejects "Modifier '.evict_last' cannot be combined with modifier '.cs'"),
``.nc`` excludes ``.lu``; the direct ``.L2::evict_first/last`` qualifiers need ``.v8.b32/.v4.b64`` accesses,
so the 32- to 128-bit accesses of sm_90 get their L2 policy through ``.L2::cache_hint`` instead.
Modifiers are written in the ISA's order: state space, cop, nc, L1, L2, cache_hint, prefetch size, vector, type.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import (
    UNKNOWN_ROOT,
    Site,
    address_roots,
    definitions,
    entry_function,
    fresh_name,
    instruction_sites,
    replace_stmts,
    used_names,
)
from population.analysis import flat_instructions
from population.ast import Immediate, Instruction, Register
from population.edits import EditScript
from population.kernel import Kernel

LOAD_COPS = ("ca", "cg", "cs", "lu")
NC_COPS = ("ca", "cg", "cs")
STORE_COPS = ("wb", "cg", "cs", "wt")
L1_EVICT = ("L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last", "L1::no_allocate")
L2_POLICIES = ("evict_first", "evict_last")
PREFETCH_SIZES = ("L2::64B", "L2::128B", "L2::256B")
VECTORS = ("v2", "v4", "v8")
_SEMANTICS_FORBIDDEN = ("volatile", "relaxed", "acquire", "release", "mmio", "cv", "unified")


@dataclass(frozen=True)
class HintState:
    """The hint slots of one global access (see the module docstring). ``l2`` is ``"evict_first"``,
    ``"evict_last"``, ``"other"`` (a cache_hint whose policy this operator did not write) or None."""

    nc: bool = False
    cop: str | None = None
    l1: str | None = None
    l2: str | None = None
    size: str | None = None


@dataclass(frozen=True)
class Access:
    """A global ld/st split into its parts: ``weak`` (the optional ``.weak``), hint state, ``vector``
    (``v2``/``v4``/``v8`` or None) and the element ``type``."""

    kind: str  # "ld" | "st"
    weak: bool
    state: HintState
    vector: str | None
    type: str


def decompose(instr: Instruction, defs: dict[str, list[Instruction]] | None = None) -> Access | None:
    """Split a ``ld.global``/``st.global`` into an Access, or None when it carries modifiers this operator does
    not rewrite (memory-order qualifiers, ``.cv``, the 256-bit-only ``.L2::evict_*`` forms, ``ld.global.nc``
    variants it does not know). With ``defs`` (``common.definitions``), an ``.L2::cache_hint`` whose policy
    register has one definition ``createpolicy.fractional.L2::evict_first|last.b64 r, 1.0`` reads as that
    policy; any other policy is ``"other"`` and left alone."""
    if instr.opcode not in ("ld", "st") or "global" not in instr.modifiers:
        return None
    mods = list(instr.modifiers)
    if len(mods) < 2:
        return None
    typ = mods.pop()
    weak = nc = False
    cop = l1 = size = vector = None
    cache_hint = False
    for m in mods:
        if m == "global":
            continue
        if m == "weak":
            weak = True
        elif m == "nc" and instr.opcode == "ld":
            nc = True
        elif m in (LOAD_COPS if instr.opcode == "ld" else STORE_COPS):
            cop = m
        elif m in L1_EVICT:
            l1 = m
        elif m == "L2::cache_hint":
            cache_hint = True
        elif m in PREFETCH_SIZES and instr.opcode == "ld":
            size = m
        elif m in VECTORS:
            vector = m
        else:
            return None
    l2 = _policy_of(instr, defs) if cache_hint else None
    return Access(instr.opcode, weak, HintState(nc, cop, l1, l2, size), vector, typ)


def _policy_of(instr: Instruction, defs: dict[str, list[Instruction]] | None) -> str:
    pol = instr.operands[2] if len(instr.operands) > 2 else None
    if defs is None or not isinstance(pol, Register) or len(defs.get(pol.name, [])) != 1:
        return "other"
    d = defs[pol.name][0]
    for p in L2_POLICIES:
        if d.opcode == "createpolicy" and d.modifiers == ("fractional", f"L2::{p}", "b64") and len(d.operands) == 2 \
                and isinstance(d.operands[1], Immediate) and d.operands[1].value == 1.0:
            return p
    return "other"


def legal(kind: str, s: HintState) -> bool:
    """Whether ptxas accepts the slot combination ``s`` on an access of ``kind`` (``"ld"``/``"st"``)."""
    if s.cop is not None and s.l1 is not None:
        return False
    if kind == "st":
        return not s.nc and s.size is None and (s.cop is None or s.cop in STORE_COPS)
    if s.nc:
        return s.cop is None or s.cop in NC_COPS
    return s.cop is None or s.cop in LOAD_COPS


def candidate_states(kind: str, current: HintState, nc_allowed: bool) -> list[HintState]:
    """Every legal state one or two slots away from ``current``. ``nc`` may only be turned on when
    ``nc_allowed``; a foreign ``L2::cache_hint`` policy is left alone."""
    cops = (None, *(LOAD_COPS if kind == "ld" else STORE_COPS))
    l2s = (current.l2,) if current.l2 == "other" else (None, *L2_POLICIES)
    sizes = (None, *PREFETCH_SIZES) if kind == "ld" else (None,)
    ncs = (False, True) if kind == "ld" and (nc_allowed or current.nc) else (False,)
    if current.nc and not nc_allowed:
        ncs = (True, False)  # an existing .nc may be removed, never needs proof
    out = []
    for nc, cop, l1, l2, size in itertools.product(ncs, cops, (None, *L1_EVICT), l2s, sizes):
        s = HintState(nc, cop, l1, l2, size)
        if s == current or not legal(kind, s):
            continue
        moved = sum(a != b for a, b in zip(
            (s.nc, s.cop, s.l1, s.l2, s.size), (current.nc, current.cop, current.l1, current.l2, current.size)))
        if moved <= 2:
            out.append(s)
    return out


def build_modifiers(a: Access, s: HintState) -> tuple[str, ...]:
    """Modifiers of an access with state ``s``, in PTX ISA order."""
    mods: list[str] = []
    if a.weak:
        mods.append("weak")
    mods.append("global")
    if s.cop is not None:
        mods.append(s.cop)
    if s.nc:
        mods.append("nc")
    if s.l1 is not None:
        mods.append(s.l1)
    if s.l2 is not None:
        mods.append("L2::cache_hint")
    if s.size is not None:
        mods.append(s.size)
    if a.vector is not None:
        mods.append(a.vector)
    mods.append(a.type)
    return tuple(mods)


def read_only_roots(kernel: Kernel, defs: dict[str, list[Instruction]] | None = None) -> tuple[set[str], dict]:
    """(roots no instruction of the entry may write, definitions map). A root is a pointer parameter or a
    variable (see ``common.pointer_roots``). Empty when any store, atomic, reduction or async copy has an
    address whose root is unknown: then nothing is provably read-only. Distinct pointer parameters are taken
    to be distinct buffers, which the workload ABI guarantees (the gate checks inputs are left unchanged)."""
    fn = entry_function(kernel)
    defs = defs if defs is not None else definitions(fn)
    written: set[str] = set()
    every: set[str] = set()
    for ins in flat_instructions(fn):
        if ins.opcode in ("ld", "ldu", "prefetch"):
            every |= address_roots(fn, ins, defs)
        elif ins.opcode in ("st", "atom", "red", "cp", "stmatrix", "sust", "sured", "wgmma", "tensormap", "call"):
            if ins.opcode in ("st", "atom", "red") and any(m.startswith("shared") or m == "local"
                                                             for m in ins.modifiers):
                continue
            roots = address_roots(fn, ins, defs) if ins.opcode != "call" else {UNKNOWN_ROOT}
            written |= roots
    if UNKNOWN_ROOT in written:
        return set(), defs
    return every - written - {UNKNOWN_ROOT}, defs


@dataclass
class HintsOperator:
    """Move the cache/eviction hints of one global load or store (module docstring).

    loads / stores: whether loads and stores are candidates. allow_nc: whether ``.nc`` may be added (still only
    on provably read-only buffers). weight: the operator's sampling weight for the engine's selector.
    """

    name: str = "hints"
    weight: float = 1.0
    loads: bool = True
    stores: bool = True
    allow_nc: bool = True

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """A REPLACE of one global access line with the same access carrying different hints (plus a
        ``createpolicy`` line when an L2 policy is added). NoProposal when the entry has no global access
        whose hints this operator can rewrite."""
        fn = entry_function(parent)
        kinds = tuple(k for k, on in (("ld", self.loads), ("st", self.stores)) if on)
        defs = definitions(fn)
        sites: list[tuple[Site, Access]] = []
        for s in instruction_sites(parent):
            a = decompose(s.node, defs) if s.node.opcode in kinds else None
            if a is not None:
                sites.append((s, a))
        if not sites:
            raise NoProposal(f"entry {parent.entry!r} has no global {'/'.join(kinds)} whose hints can change")
        ro = read_only_roots(parent, defs)[0] if self.allow_nc else set()
        order = rng.permutation(len(sites))
        for i in order:
            site, acc = sites[int(i)]
            nc_ok = False
            if acc.kind == "ld" and self.allow_nc:
                roots = address_roots(fn, site.node, defs)
                nc_ok = bool(roots) and UNKNOWN_ROOT not in roots and roots <= ro
            options = candidate_states(acc.kind, acc.state, nc_ok)
            if not options:
                continue
            new = options[int(rng.integers(len(options)))]
            stmts = self._rewrite(site.node, acc, new, used_names(fn) if new.l2 in L2_POLICIES else set())
            return EditScript((replace_stmts(site.line, site.line, stmts),))
        raise NoProposal("no global access has a legal hint change left")

    @staticmethod
    def _rewrite(instr: Instruction, acc: Access, new: HintState, taken: set[str]) -> list[Instruction]:
        operands = list(instr.operands)
        out: list[Instruction] = []
        n_base = 2  # ld d, [a] / st [a], b: a policy operand comes after these two
        had_policy = acc.state.l2 is not None
        if had_policy and new.l2 is None:
            operands = operands[:n_base]
        if new.l2 in L2_POLICIES and new.l2 != acc.state.l2:
            pol = fresh_name(taken, "%rdpol")
            out.append(Instruction("createpolicy", ("fractional", f"L2::{new.l2}", "b64"),
                                   (Register(pol), Immediate("1.0"))))
            operands = [*operands[:n_base], Register(pol)]
        out.append(replace(instr, modifiers=build_modifiers(acc, new), operands=tuple(operands), loc=None,
                           trivia=None))
        return out
