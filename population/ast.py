"""The PTX module AST: plain dataclasses, one per syntactic form of the PTX ISA 9.0 module grammar.

Vocabulary follows the PTX ISA manual ("Instruction Statements" §4.x, "State Spaces, Types and Variables" §5,
"Directives" §11). Every node compares by its PTX meaning only: source locations and *trivia* (the exact
whitespace, blank lines and comments that preceded a node in the source) are excluded from ``==`` so that
``parse(print(m)) == m`` holds, while the printer uses trivia to give nvcc's output back byte for byte.

Conventions
- Names keep their PTX spelling: registers ``"%r1"``, special registers ``"%tid.x"``, labels ``"$L__BB0_2"``.
- Types and state spaces are stored without the leading dot: ``"u64"``, ``"shared"``.
- An instruction's ``opcode`` is the first dotted component (``"ld"``); ``modifiers`` hold the rest in order,
  ``::`` sub-qualifiers kept inside one modifier (``("global", "L1::no_allocate", "v4", "f32")``).
- ``trivia`` is ``None`` on nodes built by code (the printer then lays them out the way nvcc does) and the raw
  source text before the node on parsed nodes.
- ``layout`` (statements, functions, the module header) is ``None`` on nodes built by code and
  ``(key, spelling)`` on parsed ones: the node's exact source text and the field values it spelled. The printer
  uses the spelling only while the fields still equal ``key``, so an edited node (``dataclasses.replace``
  or in-place assignment) prints in nvcc's layout instead of its stale source text.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

# ----------------------------------------------------------------------------------------------- locations


@dataclass(frozen=True)
class SourceLoc:
    """1-based line and column of a node's first token in the text it was parsed from."""

    line: int
    column: int
    file: str | None = None


def _loc() -> SourceLoc | None:
    return field(default=None, compare=False, repr=False)  # type: ignore[return-value]


def _trivia() -> str | None:
    return field(default=None, compare=False, repr=False)  # type: ignore[return-value]


def _layout() -> tuple | None:
    # (key, spelling): the exact source spelling of a parsed node and the field values it spelled. The printer
    # reuses the spelling only while the node's fields still equal ``key``; edited nodes get nvcc's layout.
    return field(default=None, compare=False, repr=False)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------ operands


@dataclass(frozen=True)
class Register:
    """A general register (``%r1``, ``%rd4``, ``%p1``, or a name declared by ``.reg`` without ``%``)."""

    name: str


@dataclass(frozen=True)
class SpecialRegister:
    """A read-only special register (PTX ISA §10): ``%tid.x``, ``%ctaid.y``, ``%laneid``, ``%clock64`` ..."""

    name: str


@dataclass(frozen=True)
class Immediate:
    """A literal as written: ``4``, ``-1``, ``0x1F``, ``0f3F800000`` (f32 bits), ``0d3FF0000000000000``.

    ``text`` keeps the spelling so printing is exact; ``value`` decodes it (int, or float for 0f/0d/decimal).
    """

    text: str

    @property
    def value(self) -> int | float:
        t = self.text
        neg = t.startswith("-")
        body = t[1:] if neg else t
        if body[:2] in ("0f", "0F"):
            v: int | float = struct.unpack(">f", bytes.fromhex(body[2:]))[0]
        elif body[:2] in ("0d", "0D"):
            v = struct.unpack(">d", bytes.fromhex(body[2:]))[0]
        elif body[:2] in ("0x", "0X"):
            v = int(body[2:].rstrip("Uu"), 16)
        elif body[:2] in ("0b", "0B"):
            v = int(body[2:].rstrip("Uu"), 2)
        elif any(c in body for c in ".eE"):
            v = float(body)
        elif len(body) > 1 and body.startswith("0") and body.rstrip("Uu").isdigit():
            v = int(body.rstrip("Uu"), 8)
        else:
            v = int(body.rstrip("Uu"))
        return -v if neg else v


@dataclass(frozen=True)
class Symbol:
    """A name that is not a register: a label, a variable, a ``.param``, a function."""

    name: str


@dataclass(frozen=True)
class Address:
    """A memory operand ``[base]``, ``[base+offset]`` (PTX ISA §6.4.1). ``offset`` None means none written;
    nvcc writes ``+0`` explicitly for some ``.param`` accesses, so 0 and None differ."""

    base: Register | Symbol | Immediate
    offset: int | None = None


@dataclass(frozen=True)
class HandleAddress:
    """An address made of an opaque handle and coordinates: ``[tex, {%f1}]``, ``[tex, smp, {%f1, %f2}]``
    (``tex``/``tld4``, PTX ISA §9.7.10.3), ``[surf, {%r1, %r2}]`` (``suld``/``sust``, §9.7.10.6) and
    ``[tmap, {%r1, %r2}]`` (``cp.async.bulk.tensor``, §9.7.9.25.5.1: a tensor map and tensor coordinates).

    ``elements`` are the comma-separated operands inside the brackets, in order: the handle (a ``.texref`` /
    ``.surfref`` / ``.param`` symbol or a 64-bit register), an optional sampler, then the coordinate Vector.
    """

    elements: tuple[Operand, ...]

    @property
    def handle(self) -> Operand:
        """The texture / surface / tensor-map handle (the first element)."""
        return self.elements[0]

    @property
    def coordinates(self) -> Vector | None:
        """The coordinate vector (the last element when it is a ``{...}`` list), else None."""
        last = self.elements[-1]
        return last if isinstance(last, Vector) else None


@dataclass(frozen=True)
class OffsetExpr:
    """``base+offset`` written as a source operand without brackets (``%rd1+8``, ``arr+16``): the value of
    ``base`` plus the integer ``offset`` (PTX ISA §6.4.1 address expressions; ptxas takes it wherever a
    register or an address constant is read, e.g. ``mov.u64 %rd2, arr+8;``)."""

    base: Register | Symbol
    offset: int


@dataclass(frozen=True)
class ArrayElement:
    """``a[i]``: element ``i`` of the array variable ``a`` (PTX ISA §6.4.1 "Arrays as Operands":
    ``ld.global.u32 s, a[0];`` reads it, ``mov.u32 s, a[1];`` takes its address)."""

    base: Symbol
    index: int


@dataclass(frozen=True)
class Vector:
    """A brace-enclosed operand list ``{%f1, %f2, %f3, %f4}`` (vector loads/stores, wgmma fragments)."""

    elements: tuple[Operand, ...]


@dataclass(frozen=True)
class ParenList:
    """A parenthesised operand list, as in ``call (retval0), f, (param0, param1);``."""

    elements: tuple[Operand, ...]


@dataclass(frozen=True)
class Sink:
    """The bit bucket ``_`` used as a destination."""


@dataclass(frozen=True)
class PredicatePair:
    """Dual predicate destination ``p|q`` (``setp`` with two results, PTX ISA §9.7.5)."""

    first: Register
    second: Register


@dataclass(frozen=True)
class Negated:
    """A negated predicate source operand ``!%p1``."""

    operand: Register


Operand = (
    Register | SpecialRegister | Immediate | Symbol | Address | HandleAddress | OffsetExpr | ArrayElement | Vector
    | ParenList | Sink | PredicatePair | Negated
)


# ---------------------------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Predicate:
    """An instruction guard ``@%p1`` or ``@!%p1``."""

    register: Register
    negated: bool = False


@dataclass
class Instruction:
    """One instruction statement: ``[@pred] opcode{.modifier} operand, ...;``.

    ``opcode`` is e.g. ``"ld"``; ``modifiers`` the dotted qualifiers in written order. ``full_opcode`` joins
    them back (``"ld.global.nc.f32"``).
    """

    opcode: str
    modifiers: tuple[str, ...] = ()
    operands: tuple[Operand, ...] = ()
    predicate: Predicate | None = None
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()
    layout: tuple | None = _layout()

    @property
    def full_opcode(self) -> str:
        return ".".join((self.opcode, *self.modifiers))

    @property
    def base_modifiers(self) -> tuple[str, ...]:
        """``modifiers`` with any ``::`` sub-qualifier dropped (``param::entry`` -> ``param``, ``shared::cta`` ->
        ``shared``, ``L2::cache_hint`` -> ``L2``): what a check asks when it asks for a state space. PTX ISA 8.3
        spells a kernel's parameters ``.param::entry`` and a function's ``.param::func``; a test of
        ``"param" in modifiers`` missed them (red-team round 16: ``rt16_param_entry_overread``)."""
        return tuple(m.split("::", 1)[0] for m in self.modifiers)


@dataclass
class Label:
    """A label definition ``$L__BB0_2:``."""

    name: str
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()
    layout: tuple | None = _layout()


@dataclass
class RegDecl:
    """``.reg .type name<count>, name2;`` — ``names`` pairs each name with its ``<N>`` range or None.

    ``%r<105>`` declares ``%r0`` .. ``%r104`` (PTX ISA §5.1.1, parameterized variable names).
    """

    type: str
    names: tuple[tuple[str, int | None], ...]
    vector: str | None = None  # "v2" / "v4" for vector register declarations
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()
    layout: tuple | None = _layout()

    def declared(self) -> list[str]:
        """Every register name declared here, ``<N>`` ranges expanded (``%r<3>`` -> ``%r0, %r1, %r2``)."""
        out: list[str] = []
        for name, count in self.names:
            out.extend([f"{name}{i}" for i in range(count)] if count is not None else [name])
        return out


@dataclass
class VarDecl:
    """A variable in a state space: ``[linkage] .shared .align 16 .b8 smem[1024] [= {...}];``.

    ``dims`` holds array sizes; ``None`` in it is an unsized dimension (``buf[]``). ``initializer`` is the
    text after ``=``, verbatim. ``attributes`` holds anything else written (``.ptr``, ``.v4``, ``.attribute``).
    """

    state_space: str
    type: str
    name: str
    align: int | None = None
    dims: tuple[int | None, ...] = ()
    linkage: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    initializer: str | None = None
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()
    layout: tuple | None = _layout()


@dataclass
class Directive:
    """A directive kept as name plus verbatim argument text: ``.loc 1 4 3``, ``.file 1 "a.cu"``,
    ``.pragma "nounroll"``, ``.section ...``, ``.callprototype ...``. Debug directives are kept so nvcc output
    prints back byte for byte; analyses ignore them."""

    name: str
    text: str
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()
    layout: tuple | None = _layout()


@dataclass(eq=False, repr=False)
class Scope:
    """A nested ``{ ... }`` block (nvcc wraps inline asm and call sequences in these).

    Scopes nest without limit (ptxas reads 1,000 levels), so ``==``, ``repr``, pickling and ``copy.deepcopy``
    work on the flattened statement stream (``iter_body``) instead of recursing once per level.
    """

    body: list[Statement] = field(default_factory=list)
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()
    closing_trivia: str | None = _trivia()

    def __eq__(self, other: object) -> bool:
        if type(other) is not Scope:
            return NotImplemented
        return _body_stream(self.body) == _body_stream(other.body)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the other statements

    def __repr__(self) -> str:
        parts: list[str] = ["Scope(body=["]
        for event, node, _body, index, _depth in iter_body(self.body, exits=True):
            if event == "exit":
                parts.append("])")
                continue
            if index:
                parts.append(", ")
            parts.append("Scope(body=[" if event == "enter" else repr(node))
        parts.append("])")
        return "".join(parts)

    def __reduce__(self) -> tuple:
        # (stream of the whole subtree, without nesting): pickle and deepcopy stay flat at any depth
        events = []
        for event, node, _body, _index, _depth in iter_body(self.body, exits=True):
            if event == "enter":
                events.append((0, node.loc, node.trivia, node.closing_trivia))
            elif event == "exit":
                events.append(1)
            else:
                events.append((2, node))
        return (_rebuild_scope, (self.loc, self.trivia, self.closing_trivia, events))


def _rebuild_scope(loc: SourceLoc | None, trivia: str | None, closing: str | None, events: list) -> Scope:
    """The Scope that ``Scope.__reduce__`` flattened into ``events``."""
    root = Scope([], loc, trivia, closing)
    stack = [root]
    for ev in events:
        if ev == 1:
            stack.pop()
        elif ev[0] == 0:
            inner = Scope([], ev[1], ev[2], ev[3])
            stack[-1].body.append(inner)
            stack.append(inner)
        else:
            stack[-1].body.append(ev[1])
    return root


def iter_body(body: list, exits: bool = False):  # type: ignore[no-untyped-def]
    """Every statement of ``body`` in textual order, ``{ }`` scopes entered without recursion, as
    ``(event, statement, body_list, index, depth)``: event ``"stmt"`` for a statement that is not a Scope,
    ``"enter"`` for a Scope (before its statements), and with ``exits=True`` ``"exit"`` after a Scope's last
    statement (same Scope, list and index as its "enter"). depth counts the enclosing scopes (0 = ``body``)."""
    stack: list[tuple[list, int, Scope | None, list | None, int]] = [(body, 0, None, None, -1)]
    while stack:
        lst, i, scope, parent, pidx = stack.pop()
        depth = len(stack)
        while i < len(lst):
            s = lst[i]
            if type(s) is Scope:
                yield "enter", s, lst, i, depth
                stack.append((lst, i + 1, scope, parent, pidx))
                stack.append((s.body, 0, s, lst, i))
                break
            yield "stmt", s, lst, i, depth
            i += 1
        else:
            if exits and scope is not None:
                yield "exit", scope, parent, pidx, depth - 1


def _body_stream(body: list) -> list:
    """``body`` flattened for comparison: statements, with scope boundaries as markers."""
    out: list = []
    for event, node, _b, _i, _d in iter_body(body, exits=True):
        out.append(node if event == "stmt" else event)
    return out


Statement = Instruction | Label | RegDecl | VarDecl | Directive | Scope


# ----------------------------------------------------------------------------------------------- functions


@dataclass
class Param:
    """An entry or function parameter ``.param .u64 .ptr.global.align 16 name`` or ``.param .align 8 .b8 p[16]``."""

    type: str
    name: str
    align: int | None = None
    dims: tuple[int | None, ...] = ()
    attributes: tuple[str, ...] = ()
    state_space: str = "param"
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()


@dataclass
class PerfDirective:
    """A performance-tuning directive (PTX ISA §11.4): ``.maxntid 256, 1, 1``, ``.reqntid``, ``.minnctapersm``,
    ``.maxnreg``, ``.maxclusterrank``, ``.reqnctapercluster``, ``.explicitcluster``, ``.noreturn``..."""

    name: str
    values: tuple[int, ...] = ()
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()


@dataclass
class Function:
    """A ``.entry`` (kernel) or ``.func`` with its parameters, directives and body.

    ``body`` is None for a declaration without a body (``.extern .func f(...);``).
    """

    kind: str  # "entry" | "func"
    name: str
    params: list[Param] = field(default_factory=list)
    return_params: list[Param] | None = None
    linkage: tuple[str, ...] = ()
    directives: list[PerfDirective] = field(default_factory=list)
    body: list[Statement] | None = field(default_factory=list)
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()
    closing_trivia: str | None = _trivia()
    layout: tuple | None = _layout()

    @property
    def is_entry(self) -> bool:
        return self.kind == "entry"


TopLevel = Function | VarDecl | Directive


@dataclass
class Module:
    """A PTX module: ``.version``, ``.target`` (one or more comma-separated targets), ``.address_size`` and
    the top-level items in source order."""

    version: str
    target: tuple[str, ...]
    address_size: int = 64
    items: list[TopLevel] = field(default_factory=list)
    loc: SourceLoc | None = _loc()
    trivia: str | None = _trivia()
    header_trivia: tuple[str | None, str | None, str | None] = field(default=(None, None, None), compare=False, repr=False)
    trailing_trivia: str | None = _trivia()
    layout: tuple | None = _layout()

    @property
    def functions(self) -> list[Function]:
        return [i for i in self.items if isinstance(i, Function)]

    @property
    def entries(self) -> list[Function]:
        return [f for f in self.functions if f.is_entry]

    def function(self, name: str) -> Function:
        """The function named ``name``. Raises KeyError listing the names present."""
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"no function {name!r} in module; have {[f.name for f in self.functions]}")
