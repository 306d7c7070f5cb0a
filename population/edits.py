"""The edit language: the one way every operator (rules, template, LLM, crossover) expresses a change.

An *edit script* is a sequence of edits. Line numbers always refer to the canonical listing of the PARENT
kernel's module (``population.printer.listing(parent.module)``, 1-based), and every edit in one script refers to
the parent's numbering, so a script reads like a diff against the text the operator (or the model) was shown.

Text format (grammar: ``population/edit_grammar.lark``; one edit per line, except REPLACE and INSERT whose PTX
lines follow on their own lines and end with a line ``END``)::

    REPLACE 42-45                 replace lines 42..45 inclusive ("REPLACE 42" = one line) with:
    ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4];
    END
    INSERT AFTER 50               insert after line 50:
    prefetch.global.L2 [%rd9];
    END
    DELETE 60-61                  delete lines 60..61 ("DELETE 60" = one line)
    MODIFIER 42 -nc +cs           instruction at line 42: remove modifier .nc and/or add modifier .cs
    LAUNCH block=256,1,1 smem=0 rows_per_cta=2
    DIRECTIVE rmsnorm .maxnreg 64   set a performance-tuning directive of an entry
    DIRECTIVE rmsnorm -.maxnreg     remove it
    KNOBS threads=256 vec=8       re-instantiate the workload template with these knobs

Keywords are upper case and few, so that a small language model under constrained decoding
(:func:`ebnf_grammar`) can only write well-formed scripts. A PTX line starts (after indentation) with a lower-case
letter or one of ``$ . @ { } / _ % !``; blank lines are ignored.

:func:`parse_edit_script` reads the text (raising :class:`EditSyntaxError` with line and column),
:meth:`EditScript.to_text` writes it back (``parse_edit_script(s.to_text()) == s``), and :func:`apply_script`
turns a parent Kernel plus a script into a child Kernel (raising :class:`EditApplyError`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from functools import lru_cache
from pathlib import Path

from lark import (
    Lark,
    Token,
    Transformer,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)
from lark.exceptions import VisitError

from population.ast import (
    Address,
    Directive,
    Function,
    Instruction,
    Label,
    Module,
    PerfDirective,
    Register,
    Scope,
    Statement,
    Symbol,
    Vector,
)
from population.cfg import DECLARING_DIRECTIVES
from population.defuse import declare_missing
from population.kernel import Kernel
from population.printer import LineInfo, Listing, listing

GRAMMAR_PATH = Path(__file__).with_name("edit_grammar.lark")

# Performance-tuning and cluster directives an entry may carry (PTX ISA 9.0 "Performance-Tuning
# Directives" and "Cluster Dimension Directives"), with the number of values each takes (min, max).
PERF_DIRECTIVES: dict[str, tuple[int, int]] = {
    "maxnreg": (1, 1),
    "maxntid": (1, 3),
    "reqntid": (1, 3),
    "minnctapersm": (1, 1),
    "maxnctapersm": (1, 1),
    "maxclusterrank": (1, 1),
    "reqnctapercluster": (1, 3),
    "explicitcluster": (0, 0),
    "noreturn": (0, 0),
}

_PTX_LINE_START = re.compile(r"[a-z$.@{}/_%!]")
_MODIFIER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_:]*")
_KNOB_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


# ------------------------------------------------------------------------------------------------- errors


class EditSyntaxError(ValueError):
    """An edit script that does not follow the grammar. ``line``/``column`` are 1-based in the script text."""

    def __init__(self, line: int, column: int, message: str) -> None:
        self.line = line
        self.column = column
        self.message = message
        super().__init__(f"edit script:{line}:{column}: {message}")


class EditApplyError(ValueError):
    """A well-formed edit that cannot be applied to this parent. ``edit_index`` is 0-based in the script."""

    def __init__(self, edit_index: int, reason: str, edit_text: str | None = None) -> None:
        self.edit_index = edit_index
        self.reason = reason
        self.edit_text = edit_text
        head = f"edit {edit_index}" + (f" ({edit_text})" if edit_text else "")
        super().__init__(f"{head}: {reason}")


# -------------------------------------------------------------------------------------------------- edits


def _clean_lines(lines: tuple[str, ...] | list[str], kind: str) -> tuple[str, ...]:
    """Split embedded newlines, strip each line, drop blank ones; reject lines that could not be PTX lines."""
    out: list[str] = []
    for raw in lines:
        for part in str(raw).splitlines():
            s = part.strip()
            if not s:
                continue
            if not _PTX_LINE_START.match(s):
                raise ValueError(
                    f"{kind}: line {s!r} cannot start a PTX line (must begin with a lower-case letter or one of "
                    "$ . @ { } / _ % !)")
            out.append(s)
    return tuple(out)


def _check_line(n: int, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what} must be a line number >= 1, got {n!r}")
    return n


def _check_knobs(knobs: tuple[tuple[str, int], ...] | dict[str, int], kind: str) -> tuple[tuple[str, int], ...]:
    items = tuple(knobs.items()) if isinstance(knobs, dict) else tuple(knobs)
    seen: set[str] = set()
    out = []
    for name, value in items:
        if not _KNOB_NAME.fullmatch(str(name)):
            raise ValueError(f"{kind}: knob name {name!r} is not an identifier")
        if name in seen:
            raise ValueError(f"{kind}: knob {name!r} given twice")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{kind}: knob {name}={value!r} must be a non-negative int")
        seen.add(name)
        out.append((str(name), int(value)))
    return tuple(out)


@dataclass(frozen=True)
class Replace:
    """Replace parent lines ``start..end`` (inclusive, 1-based) with ``lines`` (PTX statements, one per line).

    Zero lines is allowed and equals :class:`Delete`. The range must lie within one body list (a function body
    or one ``{ }`` scope, or cover whole scopes)."""

    start: int
    end: int
    lines: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_line(self.start, "REPLACE start")
        _check_line(self.end, "REPLACE end")
        if self.end < self.start:
            raise ValueError(f"REPLACE range {self.start}-{self.end} ends before it starts")
        object.__setattr__(self, "lines", _clean_lines(self.lines, "REPLACE"))

    def to_text(self) -> str:
        rng = f"{self.start}" if self.start == self.end else f"{self.start}-{self.end}"
        return "\n".join([f"REPLACE {rng}", *self.lines, "END"])


@dataclass(frozen=True)
class Insert:
    """Insert ``lines`` after parent line ``after`` (1-based). After a ``{`` line the lines go first inside
    that body; after a scope's ``}`` they follow the scope."""

    after: int
    lines: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_line(self.after, "INSERT AFTER")
        cleaned = _clean_lines(self.lines, "INSERT")
        if not cleaned:
            raise ValueError("INSERT needs at least one PTX line")
        object.__setattr__(self, "lines", cleaned)

    def to_text(self) -> str:
        return "\n".join([f"INSERT AFTER {self.after}", *self.lines, "END"])


@dataclass(frozen=True)
class Delete:
    """Delete parent lines ``start..end`` (inclusive, 1-based)."""

    start: int
    end: int

    def __post_init__(self) -> None:
        _check_line(self.start, "DELETE start")
        _check_line(self.end, "DELETE end")
        if self.end < self.start:
            raise ValueError(f"DELETE range {self.start}-{self.end} ends before it starts")

    def to_text(self) -> str:
        return f"DELETE {self.start}" if self.start == self.end else f"DELETE {self.start}-{self.end}"


@dataclass(frozen=True)
class SetModifier:
    """On the instruction at parent line ``line``: remove modifier ``remove`` and/or add modifier ``add``.

    Modifiers are written without the leading dot (``"nc"``, ``"L1::no_allocate"``, ``"L2::evict_last"``).
    With both given the new modifier takes the removed one's place; see :func:`insert_modifier` for where an
    added modifier goes otherwise."""

    line: int
    remove: str | None = None
    add: str | None = None

    def __post_init__(self) -> None:
        _check_line(self.line, "MODIFIER line")
        if self.remove is None and self.add is None:
            raise ValueError("MODIFIER needs a modifier to remove (-x) or to add (+x)")
        for attr in ("remove", "add"):
            v = getattr(self, attr)
            if v is not None:
                v = v[1:] if v.startswith(".") else v
                if not _MODIFIER_NAME.fullmatch(v):
                    raise ValueError(f"MODIFIER: {v!r} is not a modifier name")
                object.__setattr__(self, attr, v)

    def to_text(self) -> str:
        parts = [f"MODIFIER {self.line}"]
        if self.remove is not None:
            parts.append(f"-{self.remove}")
        if self.add is not None:
            parts.append(f"+{self.add}")
        return " ".join(parts)


@dataclass(frozen=True)
class SetLaunch:
    """Change the launch configuration: ``block`` (x, y, z threads; None keeps the parent's),
    ``dynamic_smem_bytes`` (bytes; None keeps), ``knobs`` (workload launch knobs merged into the parent's)."""

    block: tuple[int, int, int] | None = None
    dynamic_smem_bytes: int | None = None
    knobs: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.block is not None:
            b = tuple(self.block)
            if not 1 <= len(b) <= 3 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in b):
                raise ValueError(f"LAUNCH block must be 1 to 3 positive ints, got {self.block!r}")
            object.__setattr__(self, "block", (*b, *(1,) * (3 - len(b))))
        if self.dynamic_smem_bytes is not None and (
                not isinstance(self.dynamic_smem_bytes, int) or self.dynamic_smem_bytes < 0):
            raise ValueError(f"LAUNCH smem must be a non-negative int (bytes), got {self.dynamic_smem_bytes!r}")
        knobs = _check_knobs(self.knobs, "LAUNCH")
        if any(k in ("block", "smem") for k, _ in knobs):
            raise ValueError("LAUNCH: 'block' and 'smem' are not knobs; use the block=/smem= fields")
        object.__setattr__(self, "knobs", knobs)
        if self.block is None and self.dynamic_smem_bytes is None and not self.knobs:
            raise ValueError("LAUNCH needs at least one of block=, smem= or a knob")

    def to_text(self) -> str:
        parts = ["LAUNCH"]
        if self.block is not None:
            parts.append("block=" + ",".join(str(b) for b in self.block))
        if self.dynamic_smem_bytes is not None:
            parts.append(f"smem={self.dynamic_smem_bytes}")
        parts.extend(f"{k}={v}" for k, v in self.knobs)
        return " ".join(parts)


@dataclass(frozen=True)
class SetDirective:
    """Set (``values`` a tuple) or remove (``values`` None) the performance directive ``name`` of function
    ``entry``. ``name`` is stored without the dot (``"maxnreg"``); allowed names and value counts:
    :data:`PERF_DIRECTIVES` (PTX ISA "Performance-Tuning Directives", "Cluster Dimension Directives")."""

    entry: str
    name: str
    values: tuple[int, ...] | None

    def __post_init__(self) -> None:
        if not _SYMBOL.fullmatch(self.entry):
            raise ValueError(f"DIRECTIVE: {self.entry!r} is not a function name")
        name = self.name[1:] if self.name.startswith(".") else self.name
        if name not in PERF_DIRECTIVES:
            raise ValueError(f"DIRECTIVE: unknown directive .{name}; allowed: "
                             + ", ".join("." + d for d in PERF_DIRECTIVES))
        object.__setattr__(self, "name", name)
        if self.values is not None:
            vals = tuple(self.values)
            lo, hi = PERF_DIRECTIVES[name]
            if not lo <= len(vals) <= hi:
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                raise ValueError(f"DIRECTIVE .{name} takes {want} value(s), got {len(vals)}")
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vals):
                raise ValueError(f"DIRECTIVE .{name} values must be positive ints, got {vals!r}")
            object.__setattr__(self, "values", vals)

    def to_text(self) -> str:
        if self.values is None:
            return f"DIRECTIVE {self.entry} -.{self.name}"
        vals = ",".join(str(v) for v in self.values)
        return f"DIRECTIVE {self.entry} .{self.name}" + (f" {vals}" if vals else "")


@dataclass(frozen=True)
class SetKnobs:
    """Re-instantiate the workload's parametric template with the parent's knobs updated by ``knobs``.

    Replaces the whole module, so it cannot be combined with line edits in one script."""

    knobs: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        knobs = _check_knobs(self.knobs, "KNOBS")
        if not knobs:
            raise ValueError("KNOBS needs at least one name=value")
        object.__setattr__(self, "knobs", knobs)

    def to_text(self) -> str:
        return "KNOBS " + " ".join(f"{k}={v}" for k, v in self.knobs)


Edit = Replace | Insert | Delete | SetModifier | SetLaunch | SetDirective | SetKnobs
LINE_EDITS = (Replace, Insert, Delete, SetModifier)


@dataclass(frozen=True)
class EditScript:
    """An ordered tuple of edits, all referring to the parent's line numbers."""

    edits: tuple[Edit, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "edits", tuple(self.edits))
        for i, e in enumerate(self.edits):
            if not isinstance(e, Edit):
                raise TypeError(f"EditScript edit {i} is {type(e).__name__}, not an edit")

    def to_text(self) -> str:
        """The script in the text format, newline-terminated (empty string for no edits)."""
        return "".join(e.to_text() + "\n" for e in self.edits)

    def __len__(self) -> int:
        return len(self.edits)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.edits)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The keyword of each edit (``"REPLACE"``, ``"MODIFIER"`` ...), e.g. for the lessons memory."""
        return tuple(edit_kind(e) for e in self.edits)


def edit_kind(edit: Edit) -> str:
    """The text keyword of an edit: REPLACE, INSERT, DELETE, MODIFIER, LAUNCH, DIRECTIVE or KNOBS."""
    return {Replace: "REPLACE", Insert: "INSERT", Delete: "DELETE", SetModifier: "MODIFIER",
            SetLaunch: "LAUNCH", SetDirective: "DIRECTIVE", SetKnobs: "KNOBS"}[type(edit)]


# ------------------------------------------------------------------------------------------------ parsing


class _ToEdits(Transformer):
    """Lark tree -> edit dataclasses; a ValueError from a dataclass is re-raised with the edit's position."""

    def _at(self, tok: Token, build):  # type: ignore[no-untyped-def]
        try:
            return build()
        except ValueError as e:
            raise EditSyntaxError(tok.line or 1, tok.column or 1, str(e)) from None

    def start(self, items):  # type: ignore[no-untyped-def]
        return EditScript(tuple(items))

    def range(self, items):  # type: ignore[no-untyped-def]
        a = int(items[0])
        b = int(items[1]) if len(items) > 1 else a
        return (items[0], a, b)

    def replace(self, items):  # type: ignore[no-untyped-def]
        (tok, a, b), *lines = items
        return self._at(tok, lambda: Replace(a, b, tuple(str(t).strip() for t in lines)))

    def insert(self, items):  # type: ignore[no-untyped-def]
        tok, *lines = items
        return self._at(tok, lambda: Insert(int(tok), tuple(str(t).strip() for t in lines)))

    def delete(self, items):  # type: ignore[no-untyped-def]
        ((tok, a, b),) = items
        return self._at(tok, lambda: Delete(a, b))

    def modifier(self, items):  # type: ignore[no-untyped-def]
        tok, *changes = items
        remove = [str(c)[1:] for c in changes if str(c).startswith("-")]
        add = [str(c)[1:] for c in changes if str(c).startswith("+")]
        if len(remove) > 1 or len(add) > 1:
            bad = changes[1]
            raise EditSyntaxError(bad.line, bad.column,
                                  "MODIFIER takes at most one -removed and one +added modifier")
        return self._at(tok, lambda: SetModifier(int(tok), remove[0] if remove else None, add[0] if add else None))

    def assignment(self, items):  # type: ignore[no-untyped-def]
        name, *values = items
        return (name, tuple(int(v) for v in values))

    def _assign_map(self, items, kind: str) -> dict[str, tuple[int, ...]]:  # type: ignore[no-untyped-def]
        out: dict[str, tuple[int, ...]] = {}
        for name, values in items:
            if str(name) in out:
                raise EditSyntaxError(name.line, name.column, f"{kind}: {name} given twice")
            if str(name) != "block" and len(values) != 1:
                raise EditSyntaxError(name.line, name.column, f"{kind}: {name} takes one value, got {len(values)}")
            out[str(name)] = values
        return out

    def launch(self, items):  # type: ignore[no-untyped-def]
        m = self._assign_map(items, "LAUNCH")
        block = m.pop("block", None)
        smem = m.pop("smem", None)
        tok = items[0][0]
        return self._at(tok, lambda: SetLaunch(
            block=block, dynamic_smem_bytes=smem[0] if smem else None,
            knobs=tuple((k, v[0]) for k, v in m.items())))

    def knobs(self, items):  # type: ignore[no-untyped-def]
        m = self._assign_map(items, "KNOBS")
        if "block" in m:
            name = next(n for n, _ in items if str(n) == "block")
            raise EditSyntaxError(name.line, name.column, "KNOBS: block takes one value per knob; use LAUNCH block=")
        return self._at(items[0][0], lambda: SetKnobs(tuple((k, v[0]) for k, v in m.items())))

    def directive(self, items):  # type: ignore[no-untyped-def]
        entry, change, *values = items
        text = str(change)
        if text.startswith("-"):
            if values:
                raise EditSyntaxError(values[0].line, values[0].column, "DIRECTIVE -.name (remove) takes no values")
            return self._at(change, lambda: SetDirective(str(entry), text[1:], None))
        return self._at(change, lambda: SetDirective(str(entry), text, tuple(int(v) for v in values)))


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(GRAMMAR_PATH.read_text(), parser="lalr", lexer="contextual", propagate_positions=False,
                maybe_placeholders=False)


_EXPECTED_NAMES = {
    "_NL": "end of line", "INT": "a number", "PTX_LINE": "a PTX line", "MOD_CHANGE": "-modifier or +modifier",
    "NAME": "name=value", "SYMBOL": "a function name", "DIRECTIVE_CHANGE": ".directive or -.directive",
    "EQUAL": "'='", "COMMA": "','", "MINUS": "'-'", "$END": "end of script",
}


def _expected(tokens: set[str]) -> str:
    names = sorted({_EXPECTED_NAMES.get(t, t.strip('"').replace("_", "") if t.isupper() else t) for t in tokens})
    return ", ".join(names)


def parse_edit_script(text: str) -> EditScript:
    """Parse edit-script text (format in the module docstring) into an :class:`EditScript`.

    Raises EditSyntaxError(line, column, message) for text off the grammar or values out of range (an empty
    range, an unknown directive, a knob given twice ...). The empty string parses to an empty script."""
    if not text.endswith("\n"):
        text += "\n"
    try:
        tree = _parser().parse(text)
    except UnexpectedCharacters as e:
        line_text = text.splitlines()[e.line - 1] if 0 < e.line <= len(text.splitlines()) else ""
        snippet = line_text[e.column - 1:e.column + 19]
        raise EditSyntaxError(e.line, e.column,
                              f"unexpected text {snippet!r}; expected {_expected(set(e.allowed or ()))}") from None
    except UnexpectedToken as e:
        tok = e.token
        what = "end of line" if tok.type == "_NL" else "end of script" if tok.type == "$END" else repr(str(tok))
        hint = ""
        if tok.type == "$END":
            hint = " (a REPLACE/INSERT block must end with a line END)"
        raise EditSyntaxError(e.line if e.line > 0 else text.count("\n"), max(e.column, 1),
                              f"unexpected {what}; expected {_expected(set(e.expected))}{hint}") from None
    except UnexpectedEOF as e:
        raise EditSyntaxError(text.count("\n"), 1, "unexpected end of script (a REPLACE/INSERT block must end "
                              f"with a line END); expected {_expected(set(e.expected))}") from None
    except UnexpectedInput as e:  # any other lark input error still gets a position
        raise EditSyntaxError(getattr(e, "line", 1), getattr(e, "column", 1), str(e)) from None
    try:
        return _ToEdits().transform(tree)
    except VisitError as e:
        if isinstance(e.orig_exc, EditSyntaxError):
            raise e.orig_exc from None
        raise


# ------------------------------------------------------------------------------- constrained decoding grammar


def ebnf_grammar(*, kinds: tuple[str, ...] | None = None, entries: tuple[str, ...] | None = None,
                 knob_names: tuple[str, ...] | None = None, max_edits: int | None = None) -> str:
    """The edit language as an xgrammar / GBNF EBNF grammar (root rule ``root``) for constrained decoding.

    It accepts the canonical text :meth:`EditScript.to_text` writes (single spaces, ``\\n`` line ends, at least
    one edit); every generation it allows parses with :func:`parse_edit_script` except for value rules a
    context-free grammar cannot state (a knob named twice, ``block=``/``smem=`` written as knobs, a
    descending range), which the parser reports as EditSyntaxError. Each directive takes exactly its number
    of positive values (:data:`PERF_DIRECTIVES`). ``kinds`` limits the edit keywords (e.g. ``("REPLACE", "INSERT", "DELETE", "MODIFIER")``);
    ``entries`` limits DIRECTIVE to those function names; ``knob_names`` limits LAUNCH/KNOBS knob names;
    ``max_edits`` bounds the script length. Directive names are those of :data:`PERF_DIRECTIVES`.
    Raises ValueError for an unknown kind or an empty choice."""
    all_kinds = ("REPLACE", "INSERT", "DELETE", "MODIFIER", "LAUNCH", "DIRECTIVE", "KNOBS")
    chosen = tuple(kinds) if kinds is not None else all_kinds
    unknown = [k for k in chosen if k not in all_kinds]
    if unknown or not chosen:
        raise ValueError(f"ebnf_grammar kinds {unknown or chosen!r} not in {all_kinds}")

    def alt(words: tuple[str, ...] | list[str], what: str) -> str:
        if not words:
            raise ValueError(f"ebnf_grammar: empty {what}")
        return " | ".join('"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in words)

    if entries is not None:
        for e in entries:
            if not _SYMBOL.fullmatch(e):
                raise ValueError(f"ebnf_grammar: entry {e!r} is not a function name")
    if knob_names is not None:
        for k in knob_names:
            if not _KNOB_NAME.fullmatch(k) or k in ("block", "smem"):
                raise ValueError(f"ebnf_grammar: knob name {k!r} is not allowed")

    rules = {
        "replace": 'replace ::= "REPLACE " range "\\n" block "END"',
        "insert": 'insert ::= "INSERT AFTER " num "\\n" ptxline "\\n" block "END"',
        "delete": 'delete ::= "DELETE " range',
        "modifier": 'modifier ::= "MODIFIER " num (" -" modname (" +" modname)? | " +" modname)',
        # LAUNCH carries at least one field, in the order to_text writes them.
        "launch": 'launch ::= "LAUNCH" (" block=" num ("," num)? ("," num)? (" smem=" uint)? (" " knob)* '
                  '| " smem=" uint (" " knob)* | (" " knob)+)',
        "directive": 'directive ::= "DIRECTIVE " entry " " ("-." dname | dset)',
        "knobs": 'knobs ::= "KNOBS" (" " knob)+',
    }
    used = [k.lower() for k in chosen]
    root = '( edit "\\n" )+' if max_edits is None else " ".join(
        ['edit "\\n"'] + ['( edit "\\n"'] * (max_edits - 1) + [")?"] * (max_edits - 1))
    if max_edits is not None and max_edits < 1:
        raise ValueError(f"ebnf_grammar: max_edits must be >= 1, got {max_edits}")
    lines = [f"root ::= {root}", "edit ::= " + " | ".join(used)]
    lines += [rules[k] for k in used]
    lines += [
        'range ::= num ("-" num)?',
        'num ::= [1-9] [0-9]*',
        'uint ::= "0" | [1-9] [0-9]*',
        'ptxline ::= [a-z$.@{}/_%!] [^\\n]*',
        'block ::= (ptxline "\\n")*',
        'modname ::= [A-Za-z0-9_] [A-Za-z0-9_:]*',
        "knob ::= knobname \"=\" uint",
        "knobname ::= " + (alt(knob_names, "knob_names") if knob_names is not None
                           else "[A-Za-z_] [A-Za-z0-9_]*"),
        "entry ::= " + (alt(entries, "entries") if entries is not None else "[A-Za-z_$] [A-Za-z0-9_$]*"),
        "dname ::= " + alt(list(PERF_DIRECTIVES), "directives"),
        "dset ::= " + " | ".join(_directive_ebnf(name, lo, hi) for name, (lo, hi) in PERF_DIRECTIVES.items()),
    ]
    return "\n".join(lines) + "\n"


def _directive_ebnf(name: str, lo: int, hi: int) -> str:
    """``".maxntid" " " num ("," num)? ("," num)?`` for a directive taking lo..hi positive values."""
    if hi == 0:
        return f'".{name}"'
    parts = [f'".{name} " num'] + ['"," num'] * (lo - 1) + ['("," num)?'] * (hi - lo)
    return "(" + " ".join(parts) + ")"


# --------------------------------------------------------------------------------------- listing line map


@dataclass
class LineMap:
    """Where each statement of a module sits in its canonical listing (``population.printer.listing``).

    listing: the Listing the numbers refer to.
    spans: id(statement) -> (first, last) line, 1-based inclusive; a Scope's span runs from its ``{`` line to
        its ``}`` line. Statements the canonical print leaves out (``.loc``, comments) have no span.
    owner: id(body list) -> (parent body list, index of the Scope in it), for scope bodies only.
    functions: id(body list) -> the Function whose body (or nested scope) it is.
    opens / closes: line -> body list, for the ``{`` / ``}`` line of every function body and scope.
    """

    listing: Listing
    spans: dict[int, tuple[int, int]]
    owner: dict[int, tuple[list, int]]
    functions: dict[int, Function]
    opens: dict[int, list]
    closes: dict[int, list]

    def span(self, node: object) -> tuple[int, int]:
        """(first, last) line of a statement; KeyError when the canonical listing does not show it."""
        try:
            return self.spans[id(node)]
        except KeyError:
            raise KeyError(f"{type(node).__name__} is not shown in the canonical listing") from None

    def line(self, node: object) -> int:
        """The first line of a statement (what an edit names to address it)."""
        return self.span(node)[0]

    def info(self, lineno: int) -> LineInfo:
        """The listing's LineInfo for 1-based ``lineno``."""
        return self.listing.lines[lineno - 1]

    def __len__(self) -> int:
        return len(self.listing.lines)


def line_map(module: Module, listing_: Listing | None = None) -> LineMap:
    """Build the :class:`LineMap` of ``module`` (its canonical listing unless ``listing_`` is given; it must be
    ``listing(module)`` of this very object, since nodes are matched by identity).

    Braces are matched by one stack pass over the listing (a line starting with ``{`` opens, one starting with
    ``}`` closes); a Scope's span runs from its ``{`` line to the matching ``}``. Linear in the listing size."""
    lst = listing(module) if listing_ is None else listing_
    lines = lst.lines
    own: dict[int, list[int]] = {}
    match: dict[int, int] = {}
    stack: list[int] = []
    first_open: dict[str, int] = {}
    for info in lines:
        if info.node is not None:
            own.setdefault(id(info.node), []).append(info.lineno)
        t = info.text.strip()
        if t.startswith("{"):
            if info.function is not None and info.function not in first_open:
                first_open[info.function] = info.lineno
            if t.endswith("}") and len(t) > 1:
                match[info.lineno] = info.lineno
            else:
                stack.append(info.lineno)
        elif t.startswith("}") and stack:
            match[stack.pop()] = info.lineno
    open_lines = sorted(match)
    spans: dict[int, tuple[int, int]] = {}
    owner: dict[int, tuple[list, int]] = {}
    functions: dict[int, Function] = {}
    opens: dict[int, list] = {}
    closes: dict[int, list] = {}

    def scope_open(s: Scope, inner: tuple[int, int] | None) -> int | None:
        mine = own.get(id(s), [])
        if mine and lines[mine[0] - 1].text.strip().startswith("{"):
            return mine[0]
        if inner is None:
            return None
        # no own "{" line: the innermost brace pair enclosing the scope's statements
        k = bisect.bisect_left(open_lines, inner[0]) - 1
        while k >= 0 and match[open_lines[k]] < inner[1]:
            k -= 1
        return open_lines[k] if k >= 0 else None

    def rec(body: list, fn: Function) -> tuple[int, int] | None:
        functions[id(body)] = fn
        lo = hi = None
        for k, st in enumerate(body):
            if isinstance(st, Scope):
                owner[id(st.body)] = (body, k)
                o = scope_open(st, rec(st.body, fn))
                if o is None or o not in match:
                    continue
                opens[o] = st.body
                closes[match[o]] = st.body
                spans[id(st)] = (o, match[o])
            elif id(st) in own:
                spans[id(st)] = (min(own[id(st)]), max(own[id(st)]))
            else:
                continue
            a, b = spans[id(st)]
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        return None if lo is None else (lo, hi)

    for fn in module.functions:
        if fn.body is None:
            continue
        rec(fn.body, fn)
        o = first_open.get(fn.name)
        if o is not None and o in match:
            opens[o] = fn.body
            closes[match[o]] = fn.body
    return LineMap(lst, spans, owner, functions, opens, closes)


# ----------------------------------------------------------------------------------------------- modifiers

# Where an added modifier goes, following the modifier order of the PTX ISA 9.0 instruction syntax
# (ld: ``ld{.weak,.volatile,.relaxed.scope,.acquire.scope}{.ss}{.cop}{.nc}{.level::eviction_priority}
# {.level::cache_hint}{.level::prefetch_size}{.vec}.type``; st likewise; "Floating-Point Instructions":
# ``op{.rnd|.approx|.full}{.ftz}{.sat}.type``).
_SEMANTICS = ("weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "mmio")
_SCOPES = ("cta", "cluster", "gpu", "sys")
_CACHE_OPS = ("ca", "cg", "cs", "lu", "cv", "wb", "wt")
_ROUNDING = ("rn", "rz", "rm", "rp", "rna", "rni", "rzi", "rmi", "rpi", "approx", "full")


def _is_space(m: str) -> bool:
    return m.split("::", 1)[0] in ("global", "shared", "local", "param", "const")


def _is_tail(m: str) -> bool:
    from population.defuse import TYPE_BITS

    return m in TYPE_BITS or m in ("v2", "v4", "v8")


def insert_modifier(modifiers: tuple[str, ...], add: str) -> tuple[str, ...]:
    """``modifiers`` with ``add`` placed where the PTX ISA syntax puts that kind of qualifier: memory
    semantics first, then scope; cache operators (``.cs``) right after the state space; ``.nc`` after those;
    rounding/``.approx`` first among arithmetic qualifiers, then ``.ftz``, then ``.sat``; anything else
    (``L1::no_allocate``, ``L2::evict_last``, ``L2::256B``) just before the trailing vector/type modifiers."""
    mods = list(modifiers)
    tail = len(mods)
    while tail > 0 and _is_tail(mods[tail - 1]):
        tail -= 1

    def after_last(pred) -> int:  # type: ignore[no-untyped-def]
        idx = [i for i, m in enumerate(mods[:tail]) if pred(m)]
        return idx[-1] + 1 if idx else -1

    if add in _SEMANTICS:
        pos = 0
    elif add in _SCOPES:
        pos = max(after_last(lambda m: m in _SEMANTICS), 0)
    elif add in _CACHE_OPS:
        pos = after_last(_is_space)
        pos = pos if pos >= 0 else max(after_last(lambda m: m in _SEMANTICS + _SCOPES), 0)
    elif add == "nc":
        pos = max(after_last(lambda m: _is_space(m) or m in _CACHE_OPS), 0)
    elif add in _ROUNDING:
        pos = max(after_last(lambda m: m in ("wide", "lo", "hi")), 0)
    elif add == "ftz":
        pos = max(after_last(lambda m: m in _ROUNDING), 0)
    elif add == "sat":
        pos = max(after_last(lambda m: m in (*_ROUNDING, "ftz")), 0)
    else:
        pos = tail
    mods.insert(pos, add)
    return tuple(mods)


def set_modifier(instr: Instruction, remove: str | None, add: str | None) -> Instruction:
    """A copy of ``instr`` with modifier ``remove`` taken out and/or ``add`` put in (in the removed one's place
    when both are given, else by :func:`insert_modifier`). Raises ValueError when ``remove`` is absent or
    ``add`` already present."""
    mods = list(instr.modifiers)
    if remove is not None and remove not in mods:
        raise ValueError(f"{instr.full_opcode} has no modifier .{remove}")
    if add is not None and add in mods and add != remove:
        raise ValueError(f"{instr.full_opcode} already has modifier .{add}")
    if remove is not None:
        pos = mods.index(remove)
        if add is not None:
            mods[pos] = add
            return dc_replace(instr, modifiers=tuple(mods))
        del mods[pos]
    new = tuple(mods) if add is None else insert_modifier(tuple(mods), add)
    return dc_replace(instr, modifiers=new)


# ------------------------------------------------------------------------------------------------ applying


def _shallow(o):  # type: ignore[no-untyped-def]
    """copy.copy for plain (non-slots) dataclasses without the __reduce_ex__ round trip."""
    c = object.__new__(type(o))
    c.__dict__.update(o.__dict__)
    return c


def _copy_statement(s: Statement) -> Statement:
    c = _shallow(s)
    if isinstance(c, Scope):
        c.body = [_copy_statement(x) for x in c.body]
    return c


def copy_module(module: Module) -> Module:
    """A copy of ``module`` in which every node that holds mutable state is new (the module, functions,
    parameters, directives, statements and every body list) while immutable parts (operand tuples, frozen
    operand dataclasses, strings) are shared: as safe as ``copy.deepcopy`` for AST edits and about 100x faster
    (0.3 ms against 32 ms for the softmax corpus kernel)."""
    m = _shallow(module)
    items: list = []
    for it in module.items:
        if isinstance(it, Function):
            fn = _shallow(it)
            fn.params = [_shallow(p) for p in it.params]
            fn.return_params = None if it.return_params is None else [_shallow(p) for p in it.return_params]
            fn.directives = [_shallow(d) for d in it.directives]
            fn.body = None if it.body is None else [_copy_statement(x) for x in it.body]
            items.append(fn)
        else:
            items.append(_shallow(it))
    m.items = items
    return m


@dataclass
class _Plan:
    index: int  # edit index in the script
    edit: Edit
    key: float  # position in parent lines; applied from the largest down
    body: list | None = None
    lo: int = 0  # body[lo:hi] is replaced
    hi: int = 0
    new: list | None = None
    instr: Instruction | None = None
    lines: tuple[int, int] = (0, 0)  # occupied parent lines (Insert: (after, after) as a gap)


def _describe(lm: LineMap, lineno: int) -> str:
    info = lm.info(lineno)
    text = info.text.strip()
    return f"line {lineno} ({text[:60]!r})" if text else f"line {lineno} (blank)"


def _statement_at(lm: LineMap, lineno: int) -> tuple[list, int, object] | None:
    """(body, index, node) of the statement whose span is the innermost one holding ``lineno``."""
    info = lm.info(lineno)
    node = info.node
    if node is not None and info.body is not None and id(node) in lm.spans:
        return info.body, info.index, node
    if lineno in lm.opens or lineno in lm.closes:
        body = lm.opens.get(lineno) or lm.closes.get(lineno)
        if id(body) in lm.owner:
            parent, k = lm.owner[id(body)]
            return parent, k, parent[k]
    return None


def _ancestor_in(lm: LineMap, body: list, index: int, target: list) -> int | None:
    """Index in ``target`` of the statement holding body[index] (itself or an enclosing scope), or None."""
    while body is not target:
        if id(body) not in lm.owner:
            return None
        body, index = lm.owner[id(body)]
    return index


def _resolve_range(lm: LineMap, start: int, end: int) -> tuple[list, int, int, Function]:
    """(body, lo, hi, function) such that body[lo:hi] is exactly what parent lines start..end show."""
    found: list[tuple[int, list, int]] = []  # (line, body, index)
    for ln in range(start, end + 1):
        info = lm.info(ln)
        if not info.text.strip():
            continue
        hit = _statement_at(lm, ln)
        if hit is None:
            where = "a function's brace" if (ln in lm.opens or ln in lm.closes) else "not a statement in a body"
            raise ValueError(f"{_describe(lm, ln)} is {where}; a range must hold body statements only")
        found.append((ln, hit[0], hit[1]))
    if not found:
        raise ValueError(f"lines {start}-{end} hold no statement")

    def depth(body: list) -> int:
        d = 0
        while id(body) in lm.owner:
            body = lm.owner[id(body)][0]
            d += 1
        return d

    _, target, _ = min(found, key=lambda f: depth(f[1]))
    idx: list[int] = []
    for ln, body, k in found:
        a = _ancestor_in(lm, body, k, target)
        if a is None:
            raise ValueError(f"{_describe(lm, ln)} lies in a different {{ }} scope than {_describe(lm, found[0][0])};"
                             " a range must lie within one body (a function body or one scope)")
        idx.append(a)
    lo, hi = min(idx), max(idx) + 1
    for k in range(lo, hi):
        sp = lm.spans.get(id(target[k]))
        if sp is not None and (sp[0] < start or sp[1] > end):
            raise ValueError(f"the range {start}-{end} covers only part of the {{ }} scope at lines "
                             f"{sp[0]}-{sp[1]}; cover all of it or stay inside it")
    return target, lo, hi, lm.functions[id(target)]


def _resolve_insert(lm: LineMap, after: int) -> tuple[list, int, Function]:
    """(body, position, function): where lines inserted after parent line ``after`` go."""
    ln = after
    while ln >= 1 and not lm.info(ln).text.strip():
        ln -= 1  # after a blank line = after the statement above it
    if ln < 1:
        raise ValueError(f"line {after} is not inside a function body")
    if ln in lm.opens:
        body = lm.opens[ln]
        return body, 0, lm.functions[id(body)]
    if ln in lm.closes:
        body = lm.closes[ln]
        if id(body) not in lm.owner:
            raise ValueError(f"{_describe(lm, ln)} closes a function body; insert before it instead")
        parent, k = lm.owner[id(body)]
        return parent, k + 1, lm.functions[id(parent)]
    hit = _statement_at(lm, ln)
    if hit is None:
        raise ValueError(f"{_describe(lm, ln)} is not a statement in a function body")
    body, k, node = hit
    nxt = body[k + 1] if k + 1 < len(body) else None
    if isinstance(node, Label) and isinstance(nxt, Directive) and nxt.name in DECLARING_DIRECTIVES:
        raise ValueError(f"{_describe(lm, ln)} names a .{nxt.name} declaration; insert after the declaration")
    if lm.spans[id(node)][1] != ln:
        raise ValueError(f"{_describe(lm, ln)} is inside a statement that ends at line {lm.spans[id(node)][1]}")
    return body, k + 1, lm.functions[id(body)]


def _parse_lines(lines: tuple[str, ...], fn: Function, edit_index: int) -> list:
    from population.defuse import bare_register_names
    from population.errors import PTXSyntaxError
    from population.parser import parse_statements

    try:
        stmts = parse_statements("\n".join(lines), registers=bare_register_names(fn),
                                 filename=f"edit {edit_index}")
    except PTXSyntaxError as e:
        raise ValueError(f"PTX line {e.line} of the edit, column {e.column}: {e.message}") from None
    return _promote_written_names(stmts)


def _promote_written_names(stmts: list) -> list:
    """Bare names (no ``%``) the new lines *write* but nobody declared parse as Symbols; they can only be
    registers, so turn them into Registers in the new lines (declare_missing then declares them). A name that
    is only read stays a Symbol, for ptxas to report if it is undefined."""
    from population.defuse import has_destination

    def walk_instrs(body: list):  # type: ignore[no-untyped-def]
        for k, st in enumerate(body):
            if isinstance(st, Scope):
                yield from walk_instrs(st.body)
            elif isinstance(st, Instruction):
                yield body, k, st

    written: set[str] = set()
    for _, _, ins in walk_instrs(stmts):
        if ins.opcode not in ("call", "bra", "brx") and ins.operands and has_destination(ins):
            d = ins.operands[0]
            elems = d.elements if isinstance(d, Vector) else (d,)
            written.update(e.name for e in elems if isinstance(e, Symbol))
    if not written:
        return stmts

    def conv(op):  # type: ignore[no-untyped-def]
        if isinstance(op, Symbol) and op.name in written:
            return Register(op.name)
        if isinstance(op, Vector):
            return Vector(tuple(conv(e) for e in op.elements))
        if isinstance(op, Address) and isinstance(op.base, Symbol) and op.base.name in written:
            return Address(Register(op.base.name), op.offset)
        return op

    for body, k, ins in list(walk_instrs(stmts)):
        if ins.opcode not in ("call", "bra", "brx"):
            body[k] = dc_replace(ins, operands=tuple(conv(o) for o in ins.operands))
    return stmts


def _plan_line_edit(i: int, e: Edit, lm: LineMap) -> _Plan:
    n = len(lm)
    if isinstance(e, (Replace, Delete)):
        if e.end > n:
            raise ValueError(f"line {e.end} is past the end of the listing ({n} lines)")
        body, lo, hi, fn = _resolve_range(lm, e.start, e.end)
        new = _parse_lines(e.lines, fn, i) if isinstance(e, Replace) else []
        return _Plan(i, e, e.start, body, lo, hi, new, lines=(e.start, e.end))
    if isinstance(e, Insert):
        if e.after > n:
            raise ValueError(f"line {e.after} is past the end of the listing ({n} lines)")
        body, pos, fn = _resolve_insert(lm, e.after)
        return _Plan(i, e, e.after + 0.5, body, pos, pos, _parse_lines(e.lines, fn, i), lines=(e.after, e.after))
    assert isinstance(e, SetModifier)
    if e.line > n:
        raise ValueError(f"line {e.line} is past the end of the listing ({n} lines)")
    node = lm.info(e.line).node
    if not isinstance(node, Instruction):
        what = type(node).__name__ if node is not None else "no statement"
        raise ValueError(f"{_describe(lm, e.line)} is not an instruction ({what})")
    info = lm.info(e.line)
    return _Plan(i, e, e.line, info.body, info.index, info.index + 1, None, instr=node, lines=(e.line, e.line))


def _check_overlaps(plans: list[_Plan], script: EditScript) -> None:
    ranges = [p for p in plans if isinstance(p.edit, (Replace, Delete))]
    for p in plans:
        for r in ranges:
            if r is p:
                continue
            a, b = r.lines
            if isinstance(p.edit, (Replace, Delete)):
                clash = not (p.lines[1] < a or b < p.lines[0])
            elif isinstance(p.edit, Insert):
                clash = a <= p.lines[0] < b  # the gap after line N lies inside a..b
            else:
                clash = a <= p.lines[0] <= b
            if clash and (isinstance(p.edit, (Insert, SetModifier)) or r.index < p.index):
                other = script.edits[r.index].to_text().splitlines()[0]
                raise EditApplyError(p.index, f"overlaps edit {r.index} ({other}): edits of one script must "
                                     "touch disjoint lines", script.edits[p.index].to_text().splitlines()[0])


def apply_script(kernel: Kernel, script: EditScript, *, operator: str,
                 instantiate: Callable[[dict[str, int]], Kernel] | None = None) -> Kernel:
    """Apply ``script`` to ``kernel`` and return the child (the parent is never modified).

    Line numbers refer to ``listing(kernel.module)``; all edits refer to the parent's numbering and are
    applied bottom-up; ranges must not overlap and must lie within one body list. Replacement PTX is parsed
    with ``parse_statements`` knowing the function's declared registers. KNOBS re-instantiates the template
    through ``instantiate`` (with the parent's launch knobs updated by the edit's) and cannot be combined with
    line edits; LAUNCH and DIRECTIVE then apply on top of it. Finally registers the new code uses are
    declared (``declare_missing``).

    The child has ``parents=(kernel.identity,)``, ``operator=operator`` and ``edit_text=script.to_text()``.
    Raises EditApplyError(edit_index, reason) naming the edit and the parent line that broke a rule (an
    unknown line, a range across scopes, a non-instruction under MODIFIER, a missing modifier, replacement PTX
    that does not parse, an unknown function, KNOBS without ``instantiate``, a register whose type cannot be
    inferred ...)."""
    edits = script.edits
    if not edits:
        raise EditApplyError(0, "the script has no edits")
    first = [e.to_text().splitlines()[0] for e in edits]
    knob_edits = [i for i, e in enumerate(edits) if isinstance(e, SetKnobs)]
    line_edits = [i for i, e in enumerate(edits) if isinstance(e, LINE_EDITS)]
    entry, launch = kernel.entry, kernel.launch
    if knob_edits:
        i = knob_edits[0]
        if len(knob_edits) > 1:
            raise EditApplyError(knob_edits[1], "only one KNOBS edit per script", first[knob_edits[1]])
        if line_edits:
            raise EditApplyError(line_edits[0], "KNOBS replaces the whole module, so line edits cannot be in the "
                                 "same script (their line numbers would refer to the old module)", first[line_edits[0]])
        if instantiate is None:
            raise EditApplyError(i, "KNOBS needs the workload's instantiate function", first[i])
        knobs = {**dict(kernel.launch.knobs), **dict(edits[i].knobs)}  # type: ignore[union-attr]
        try:
            base = instantiate(knobs)
        except (ValueError, KeyError) as err:
            raise EditApplyError(i, f"the template rejected knobs {knobs}: {err}", first[i]) from None
        module, entry, launch = copy_module(base.module), base.entry, base.launch
    else:
        module = copy_module(kernel.module)

    touched: set[int] = set()
    if line_edits:
        lm = line_map(module)
        plans: list[_Plan] = []
        for i in line_edits:
            try:
                plans.append(_plan_line_edit(i, edits[i], lm))
            except ValueError as err:
                raise EditApplyError(i, str(err), first[i]) from None
        _check_overlaps(plans, script)
        # bottom-up; several inserts after one line keep script order; modifiers on one line apply in order
        plans.sort(key=lambda p: (-p.key, -p.index if isinstance(p.edit, Insert) else p.index))
        for p in plans:
            assert p.body is not None
            fn = lm.functions[id(p.body)]
            touched.add(id(fn))
            if isinstance(p.edit, SetModifier):
                current = p.body[p.lo]
                try:
                    p.body[p.lo] = set_modifier(current, p.edit.remove, p.edit.add)
                except ValueError as err:
                    raise EditApplyError(p.index, f"line {p.edit.line}: {err}", first[p.index]) from None
            else:
                p.body[p.lo:p.hi] = p.new or []

    for i, e in enumerate(edits):
        if isinstance(e, SetLaunch):
            try:
                launch = dc_replace(
                    launch,
                    block=e.block if e.block is not None else launch.block,
                    dynamic_smem_bytes=(e.dynamic_smem_bytes if e.dynamic_smem_bytes is not None
                                        else launch.dynamic_smem_bytes),
                    knobs=tuple({**dict(launch.knobs), **dict(e.knobs)}.items()))
            except ValueError as err:
                raise EditApplyError(i, str(err), first[i]) from None
        elif isinstance(e, SetDirective):
            try:
                fn = module.function(e.entry)
            except KeyError as err:
                raise EditApplyError(i, str(err.args[0]), first[i]) from None
            _set_directive(fn, e, i, first[i])

    for fn in module.functions:
        if fn.body is not None and (id(fn) in touched or knob_edits):
            try:
                declare_missing(fn)
            except ValueError as err:
                idx = line_edits[0] if line_edits else 0
                raise EditApplyError(idx, str(err), first[idx]) from None
    return Kernel(module=module, entry=entry, launch=launch, parents=(kernel.identity,), operator=operator,
                  edit_text=script.to_text())


def _directive_name(d: PerfDirective) -> str:
    return d.name.lstrip(".")


def _set_directive(fn: Function, e: SetDirective, i: int, text: str) -> None:
    existing = [k for k, d in enumerate(fn.directives) if _directive_name(d) == e.name]
    if e.values is None:
        if not existing:
            have = ", ".join("." + _directive_name(d) for d in fn.directives) or "none"
            raise EditApplyError(i, f"function {fn.name} has no .{e.name} to remove (has: {have})", text)
        for k in reversed(existing):
            del fn.directives[k]
        return
    # keep the parser's spelling of directive names (with or without the dot)
    dotted = any(d.name.startswith(".") for d in fn.directives)
    new = PerfDirective(("." if dotted else "") + e.name, tuple(e.values))
    if existing:
        fn.directives[existing[0]] = new
        for k in reversed(existing[1:]):
            del fn.directives[k]
    else:
        fn.directives.append(new)


def diff_text(parent: Kernel, child: Kernel, context: int = 2) -> str:
    """A unified diff of the canonical PTX of ``parent`` and ``child`` (difflib), with launch-config changes as
    a leading ``# launch:`` line: what the lineage view shows for one step. Empty when nothing changed."""
    import difflib

    out: list[str] = []
    if parent.launch != child.launch:
        out.append(f"# launch: {parent.launch.to_json()} -> {child.launch.to_json()}\n")
    out.extend(difflib.unified_diff(parent.canonical_ptx.splitlines(keepends=True),
                                    child.canonical_ptx.splitlines(keepends=True),
                                    fromfile=f"parent {parent.short_id}", tofile=f"child {child.short_id}",
                                    n=context))
    return "".join(out)
