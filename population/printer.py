"""Print ``population.ast`` nodes back to PTX text.

Two modes:
- ``print_module(m)``: trivia kept. A parsed node prints its trivia (the raw text before it) and its source
  spelling (``layout``) while its fields still equal what was parsed, so nvcc's output comes back byte for
  byte; a node built or changed by code prints in nvcc's layout (below) with nvcc's default spacing.
- ``print_module(m, canonical=True)``: no trivia, no comments, no debug directives (``.loc``, ``.file``,
  ``.section .debug_*``, the ``debug`` target); every node in nvcc's layout. This is what
  ``Kernel.identity`` hashes and what ``listing`` numbers for edits and prompts.

nvcc's layout (``nvcc -ptx``, CUDA 13.0): header lines at column 0, a blank line before each top-level item,
statements indented by one tab, labels at column 0 after a blank line, an instruction as
``[@%p ]opcode.mods \\t<operands joined by ", ">;``, ``.reg .type \\t%r<N>;``, nested ``{ }`` scopes at the
body's indentation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from population import ast

__all__ = [
    "LineInfo",
    "Listing",
    "function_header_key",
    "is_debug_directive",
    "listing",
    "operand_text",
    "print_module",
    "print_statement",
    "statement_key",
    "without_debug",
]

# Directives written without a trailing ';' (PTX ISA §11.5 debugging directives).
_NO_SEMICOLON = frozenset({"loc", "file", "section"})


# ----------------------------------------------------------------------------------------------- operands


def operand_text(op: ast.Operand) -> str:
    """One operand in PTX spelling (``%r1``, ``[%rd6+4]``, ``{%f1, %f2}``, ``%r2|%p1``, ``!%p1``, ``_``)."""
    t = type(op)
    if t is ast.Register or t is ast.SpecialRegister or t is ast.Symbol:
        return op.name  # type: ignore[union-attr]
    if t is ast.Immediate:
        return op.text  # type: ignore[union-attr]
    if t is ast.Address:
        base = operand_text(op.base)  # type: ignore[union-attr]
        off = op.offset  # type: ignore[union-attr]
        return f"[{base}]" if off is None else f"[{base}+{off}]"
    if t is ast.Vector:
        return "{" + ", ".join(operand_text(e) for e in op.elements) + "}"  # type: ignore[union-attr]
    if t is ast.HandleAddress:
        return "[" + ", ".join(operand_text(e) for e in op.elements) + "]"  # type: ignore[union-attr]
    if t is ast.OffsetExpr:
        return f"{op.base.name}+{op.offset}"  # type: ignore[union-attr]
    if t is ast.ArrayElement:
        return f"{op.base.name}[{op.index}]"  # type: ignore[union-attr]
    if t is ast.ParenList:
        return "(" + ", ".join(operand_text(e) for e in op.elements) + ")"  # type: ignore[union-attr]
    if t is ast.Sink:
        return "_"
    if t is ast.PredicatePair:
        return f"{op.first.name}|{op.second.name}"  # type: ignore[union-attr]
    if t is ast.Negated:
        return "!" + op.operand.name  # type: ignore[union-attr]
    raise TypeError(f"not a PTX operand: {op!r}")


# ---------------------------------------------------------------------------------------------- statements


def _instruction_text(s: ast.Instruction) -> str:
    head = s.opcode if not s.modifiers else s.opcode + "." + ".".join(s.modifiers)
    if s.predicate is not None:
        head = ("@!" if s.predicate.negated else "@") + s.predicate.register.name + " " + head
    if not s.operands:
        return head + ";"
    return head + " \t" + ", ".join([operand_text(o) for o in s.operands]) + ";"


def _label_text(s: ast.Label) -> str:
    return s.name + ":"


def _regdecl_text(s: ast.RegDecl) -> str:
    names = ", ".join(n if c is None else f"{n}<{c}>" for n, c in s.names)
    vec = f".{s.vector} " if s.vector else ""
    return f".reg {vec}.{s.type} \t{names};"


def _dims_text(dims: tuple[int | None, ...]) -> str:
    return "".join("[]" if d is None else f"[{d}]" for d in dims)


def _vardecl_text(s: ast.VarDecl) -> str:
    parts = [f".{x}" for x in s.linkage]
    parts.append(f".{s.state_space}")
    if s.align is not None:
        parts.append(f".align {s.align}")
    parts.extend(f".{a}" for a in s.attributes)
    parts.append(f".{s.type}")
    parts.append(s.name + _dims_text(s.dims))
    text = " ".join(parts)
    if s.initializer is not None:
        text += " = " + s.initializer
    return text + ";"


def _directive_text(s: ast.Directive) -> str:
    if s.name in _NO_SEMICOLON:
        return f".{s.name}\t{s.text}"
    return f".{s.name} {s.text};" if s.text else f".{s.name};"


def _param_text(p: ast.Param) -> str:
    parts = [f".{p.state_space}"]
    if p.align is not None:
        parts.append(f".align {p.align}")
    parts.append(f".{p.type}")
    parts.extend(f".{a}" for a in p.attributes)
    parts.append(p.name + _dims_text(p.dims))
    return " ".join(parts)


def _perf_text(d: ast.PerfDirective) -> str:
    return f".{d.name} " + ", ".join(str(v) for v in d.values) if d.values else f".{d.name}"


_TEXT: dict[type, Callable] = {
    ast.Instruction: _instruction_text,
    ast.Label: _label_text,
    ast.RegDecl: _regdecl_text,
    ast.VarDecl: _vardecl_text,
    ast.Directive: _directive_text,
}


def statement_key(s: ast.Statement) -> object:
    """The field values a statement's source spelling stands for (what ``layout[0]`` is compared with)."""
    t = type(s)
    if t is ast.Instruction:
        return (s.opcode, s.modifiers, s.operands, s.predicate)  # type: ignore[union-attr]
    if t is ast.Label:
        return s.name  # type: ignore[union-attr]
    if t is ast.RegDecl:
        return (s.type, s.names, s.vector)  # type: ignore[union-attr]
    if t is ast.VarDecl:
        return (s.state_space, s.type, s.name, s.align, s.dims, s.linkage, s.attributes, s.initializer)  # type: ignore[union-attr]
    if t is ast.Directive:
        return (s.name, s.text)  # type: ignore[union-attr]
    raise TypeError(f"no spelling key for {type(s).__name__}")


def _param_key(p: ast.Param) -> tuple:
    return (p.type, p.name, p.align, p.dims, p.attributes, p.state_space)


def function_header_key(fn: ast.Function) -> tuple:
    """The field values a function header's spelling stands for: kind, name, linkage, parameters, return
    parameters, performance directives and whether it has a body (a declaration ends with ``;``)."""
    return (
        fn.kind,
        fn.name,
        fn.linkage,
        tuple(_param_key(p) for p in fn.params),
        None if fn.return_params is None else tuple(_param_key(p) for p in fn.return_params),
        tuple((d.name, d.values) for d in fn.directives),
        fn.body is None,
    )


def is_debug_directive(s: object) -> bool:
    """True for ``.loc``, ``.file`` and ``.section .debug_*``: source-line info that canonical prints drop."""
    if type(s) is not ast.Directive:
        return False
    return s.name in ("loc", "file") or (s.name == "section" and s.text.startswith(".debug"))  # type: ignore[union-attr]


def _spelled(s: ast.Statement) -> str:
    """The statement's text: its source spelling when still valid, else nvcc's layout."""
    lay = s.layout  # type: ignore[union-attr]
    if lay is not None:
        key = lay[0]
        t = type(s)
        if t is ast.Instruction:
            cur: object = (s.opcode, s.modifiers, s.operands, s.predicate)  # type: ignore[union-attr]
        else:
            cur = statement_key(s)
        if cur == key:
            return lay[1]
    return _TEXT[type(s)](s)


def print_statement(stmt: ast.Statement) -> str:
    """One statement in nvcc's layout, no trivia, no trailing newline. A Scope prints on several lines:
    ``{``, each inner statement indented by one tab (labels at column 0), ``}``."""
    if isinstance(stmt, ast.Scope):
        em = _Emitter(canonical=True)
        em.body(stmt.body)
        return "{" + "".join(em.parts) + "\n}"
    fn = _TEXT.get(type(stmt))
    if fn is None:
        raise TypeError(f"not a PTX statement: {stmt!r}")
    return fn(stmt)


# ------------------------------------------------------------------------------------------------ emitter


@dataclass
class LineInfo:
    """One line of a listing: 1-based ``lineno``, its ``text``, the AST ``node`` printed there (a Statement,
    Function, Param, PerfDirective or top-level VarDecl/Directive; None for braces, ``)`` and blank lines),
    the Python list ``body`` that holds the node and its ``index`` there, and the enclosing ``function``."""

    lineno: int
    text: str
    node: object | None = None
    body: list | None = None
    index: int | None = None
    function: str | None = None


@dataclass
class Listing:
    """The canonical print of a module with a map from line numbers to AST nodes (edits, ptxas error
    mapping and prompts number lines this way)."""

    text: str
    lines: list[LineInfo] = field(default_factory=list)

    def line(self, lineno: int) -> LineInfo:
        """The LineInfo of 1-based ``lineno``; IndexError naming the valid range when out of range."""
        if not 1 <= lineno <= len(self.lines):
            raise IndexError(f"line {lineno} is outside the listing (1..{len(self.lines)})")
        return self.lines[lineno - 1]

    def numbered(self, start: int | None = None, end: int | None = None) -> str:
        """Lines ``start``..``end`` (1-based, inclusive; default all) as ``"  42| <line>"``, one per line."""
        lo = 1 if start is None else max(1, start)
        hi = len(self.lines) if end is None else min(len(self.lines), end)
        width = max(4, len(str(hi)))
        return "\n".join(f"{li.lineno:>{width}}| {li.text}" for li in self.lines[lo - 1 : hi])


class _Emitter:
    """Collects printed pieces; with ``track`` it also records which node each line holds."""

    def __init__(self, canonical: bool, track: bool = False) -> None:
        self.canonical = canonical
        self.track = track
        self.parts: list[str] = []
        self.line = 1
        self.marks: dict[int, tuple] = {}
        self.function: str | None = None

    def trivia(self, t: str | None, default: str) -> None:
        s = default if (t is None or self.canonical) else t
        self.parts.append(s)
        if self.track:
            n = s.count("\n")
            if self.function is not None:
                for k in range(self.line + 1, self.line + n + 1):
                    self.marks.setdefault(k, (None, None, None, self.function))
            self.line += n

    def text(self, s: str, node: object = None, body: list | None = None, index: int | None = None) -> None:
        self.parts.append(s)
        if self.track:
            n = s.count("\n")
            if node is not None:
                for k in range(self.line, self.line + n + 1):
                    self.marks[k] = (node, body, index, self.function)
            elif self.function is not None:
                for k in range(self.line, self.line + n + 1):
                    self.marks.setdefault(k, (None, None, None, self.function))
            self.line += n

    def newline(self) -> None:
        """A line break between two pieces of one node (function header lines)."""
        self.parts.append("\n")
        if self.track:
            self.line += 1

    # ----------------------------------------------------------------------------------------- body
    def body(self, stmts: list) -> None:
        if not self.canonical and not self.track:
            self._faithful_body(stmts)
            return
        canonical = self.canonical
        for event, s, lst, i, _depth in ast.iter_body(stmts, exits=True):
            t = type(s)
            if event == "enter":
                self.trivia(s.trivia, "\n\t")
                self.text("{", s, lst, i)
                continue
            if event == "exit":
                self.trivia(s.closing_trivia, "\n\t")
                self.text("}")
                continue
            if canonical and t is ast.Directive and is_debug_directive(s):
                continue
            self.trivia(s.trivia, "\n\n" if t is ast.Label else "\n\t")
            self.text(_TEXT[t](s) if canonical else _spelled(s), s, lst, i)

    def _faithful_body(self, stmts: list) -> None:
        """``body`` for print_module(canonical=False): the hot loop of printing, kept free of calls."""
        append = self.parts.append
        instruction = ast.Instruction
        scope = ast.Scope
        # scopes nest to any depth: an explicit stack of (list, next index, its Scope) instead of recursion
        stack: list = []
        lst = stmts
        i = 0
        owner = None
        while True:
            if i == len(lst):
                if not stack:
                    return
                tr = owner.closing_trivia
                append("\n\t}" if tr is None else tr + "}")
                lst, i, owner = stack.pop()
                continue
            s = lst[i]
            i += 1
            t = type(s)
            if t is scope:
                tr = s.trivia
                append("\n\t{" if tr is None else tr + "{")
                stack.append((lst, i, owner))
                lst, i, owner = s.body, 0, s
                continue
            tr = s.trivia
            append(tr if tr is not None else ("\n\n" if t is ast.Label else "\n\t"))
            lay = s.layout
            if lay is not None and t is instruction:
                if lay[0] == (s.opcode, s.modifiers, s.operands, s.predicate):
                    append(lay[1])
                    continue
                append(_instruction_text(s))
                continue
            append(_spelled(s))

    # ------------------------------------------------------------------------------------- function
    def function_def(self, fn: ast.Function, items: list, index: int) -> None:
        self.trivia(fn.trivia, "\n\n")
        self.function = fn.name
        lay = fn.layout
        if not self.canonical and lay is not None and lay[0] == function_header_key(fn):
            self.text(lay[1], fn, items, index)
        else:
            self._default_header(fn, items, index)
        if fn.body is not None:
            self.body(fn.body)
            self.trivia(fn.closing_trivia, "\n")
            self.text("}")
        self.function = None

    def _default_header(self, fn: ast.Function, items: list, index: int) -> None:
        head = "".join(f".{x} " for x in fn.linkage) + f".{fn.kind} "
        if fn.return_params is not None:
            head += "(" + ", ".join(_param_text(p) for p in fn.return_params) + ") "
        head += fn.name
        if not fn.params:
            self.text(head + "()", fn, items, index)
        else:
            self.text(head + "(", fn, items, index)
            last = len(fn.params) - 1
            for i, p in enumerate(fn.params):
                self.newline()
                self.text("\t" + _param_text(p) + ("," if i < last else ""), p, fn.params, i)
            self.newline()
            self.text(")")
        for i, d in enumerate(fn.directives):
            self.newline()
            self.text(_perf_text(d), d, fn.directives, i)
        self.newline()
        self.text("{" if fn.body is not None else ";")

    # --------------------------------------------------------------------------------------- module
    def module(self, m: ast.Module) -> None:
        ht = m.header_trivia if len(m.header_trivia) == 3 else (None, None, None)
        lay = m.layout
        if not self.canonical and lay is not None and lay[0] == (m.version, m.target, m.address_size):
            raws = lay[1]
        else:
            # canonical prints carry no debug sections, so they cannot promise them with ".target ..., debug"
            target = [t for t in m.target if not (self.canonical and t == "debug")]
            raws = (f".version {m.version}", ".target " + ", ".join(target), f".address_size {m.address_size}")
        defaults = ("", "\n", "\n")
        for k in range(3):
            if raws[k] is not None:
                self.trivia(ht[k], defaults[k])
                self.text(raws[k])
        items = m.items
        for i, item in enumerate(items):
            t = type(item)
            if t is ast.Function:
                self.function_def(item, items, i)
            elif self.canonical and is_debug_directive(item):
                continue
            else:
                self.trivia(item.trivia, "\n\n")
                self.text(_TEXT[t](item) if self.canonical else _spelled(item), item, items, i)
        self.trivia(m.trailing_trivia, "\n")


def print_module(module: ast.Module, canonical: bool = False) -> str:
    """The module as PTX text.

    canonical=False: trivia and source spellings kept (byte-identical for unmodified parsed text; nodes built
    or edited by code in nvcc's layout). canonical=True: nvcc's layout only, without comments, blank-line
    trivia, debug directives (``.loc``, ``.file``, ``.section .debug_*``) or the ``debug`` target;
    ``parse_module`` of the faithful print equals ``module``, of the canonical print ``without_debug(module)``.
    """
    em = _Emitter(canonical)
    em.module(module)
    return "".join(em.parts)


def listing(module: ast.Module) -> Listing:
    """The canonical print of ``module`` with one LineInfo per line (see ``LineInfo``)."""
    em = _Emitter(canonical=True, track=True)
    em.module(module)
    text = "".join(em.parts)
    raw_lines = text.split("\n")
    if raw_lines and raw_lines[-1] == "":
        raw_lines.pop()
    lines = []
    for k, t in enumerate(raw_lines, start=1):
        mark = em.marks.get(k)
        if mark is None or (mark[0] is None and not t.strip()):
            fn_name = mark[3] if mark is not None else None
            lines.append(LineInfo(k, t, None, None, None, fn_name))
        else:
            lines.append(LineInfo(k, t, mark[0], mark[1], mark[2], mark[3]))
    return Listing(text=text, lines=lines)


def without_debug(module: ast.Module) -> ast.Module:
    """A copy of ``module`` without debug directives and without the ``debug`` target (what
    ``parse_module(print_module(m, canonical=True))`` gives back). Nodes are shared with ``module``, lists are
    new."""
    import dataclasses

    def strip(body: list) -> list:
        out: list = []
        stack = [out]
        for event, s, _lst, _i, _depth in ast.iter_body(body, exits=True):
            if event == "enter":
                inner = dataclasses.replace(s, body=[])
                stack[-1].append(inner)
                stack.append(inner.body)
            elif event == "exit":
                stack.pop()
            elif not is_debug_directive(s):
                stack[-1].append(s)
        return out

    items = []
    for item in module.items:
        if is_debug_directive(item):
            continue
        if type(item) is ast.Function and item.body is not None:
            item = dataclasses.replace(item, body=strip(item.body))
        items.append(item)
    return dataclasses.replace(module, items=items, target=tuple(t for t in module.target if t != "debug"))
