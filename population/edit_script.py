"""The edit-script language: the edit dataclasses, their text form, its parser and its constrained-decoding
grammar. ``population.edits`` re-exports everything here and applies scripts to kernels.

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
(:func:`ebnf_grammar`) can only write well-formed scripts. A PTX line is any non-blank line that does not
start with a keyword followed by a space or the line end (labels such as ``SKIP:`` are fine); blank lines are
ignored. :func:`parse_edit_script` reads the text (raising :class:`EditSyntaxError` with line and column);
:meth:`EditScript.to_text` writes it back (``parse_edit_script(s.to_text()) == s``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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

KEYWORDS = ("REPLACE", "INSERT", "DELETE", "MODIFIER", "LAUNCH", "DIRECTIVE", "KNOBS", "REWRITE", "END")
_KEYWORD_LINE = re.compile(r"(?:" + "|".join(KEYWORDS) + r")(?:[ \t]|$)")
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
            if _KEYWORD_LINE.match(s):
                raise ValueError(f"{kind}: line {s!r} starts with an edit keyword, so it cannot be a PTX line")
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


@dataclass(frozen=True)
class Rewrite:
    """A named structural rewrite (``REWRITE name line key=value ...``) at canonical ``line`` of the parent,
    with integer parameters ``args``. ``population.edits.apply_script`` expands it into line edits through the
    function registered under ``name`` (``population.edits.register_rewrite``; the structural operators of
    ``evolve.operators`` register theirs, e.g. ``vectorize`` and ``hoist_loads``), so an operator and a language
    model asking for it by name get the same code."""

    name: str
    line: int
    args: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if not _KNOB_NAME.fullmatch(self.name):
            raise ValueError(f"REWRITE: {self.name!r} is not a rewrite name")
        object.__setattr__(self, "line", _check_line(self.line, "REWRITE"))
        object.__setattr__(self, "args", _check_knobs(self.args, "REWRITE") if self.args else ())

    def to_text(self) -> str:
        return " ".join([f"REWRITE {self.name} {self.line}", *(f"{k}={v}" for k, v in self.args)])


Edit = Replace | Insert | Delete | SetModifier | SetLaunch | SetDirective | SetKnobs | Rewrite
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


# The text keyword of each edit class, in the order of the format description.
_KIND = {Replace: "REPLACE", Insert: "INSERT", Delete: "DELETE", SetModifier: "MODIFIER",
         SetLaunch: "LAUNCH", SetDirective: "DIRECTIVE", SetKnobs: "KNOBS", Rewrite: "REWRITE"}


def edit_kind(edit: Edit) -> str:
    """The text keyword of an edit: REPLACE, INSERT, DELETE, MODIFIER, LAUNCH, DIRECTIVE or KNOBS."""
    return _KIND[type(edit)]


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

    def rewrite(self, items):  # type: ignore[no-untyped-def]
        name, line, *assigns = items
        m = self._assign_map(assigns, "REWRITE") if assigns else {}
        return self._at(name, lambda: Rewrite(str(name), int(line), tuple((k, v[0]) for k, v in m.items())))

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
    all_kinds = tuple(_KIND.values())
    chosen = tuple(kinds) if kinds is not None else all_kinds
    unknown = [k for k in chosen if k not in all_kinds]
    if unknown or not chosen:
        raise ValueError(f"ebnf_grammar kinds {unknown or chosen!r} not in {all_kinds}")
    if max_edits is not None and max_edits < 1:
        raise ValueError(f"ebnf_grammar: max_edits must be >= 1, got {max_edits}")

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
        "rewrite": 'rewrite ::= "REWRITE " knobname " " num (" " knob)*',
    }
    used = [k.lower() for k in chosen]
    root = '( edit "\\n" )+' if max_edits is None else " ".join(
        ['edit "\\n"'] + ['( edit "\\n"'] * (max_edits - 1) + [")?"] * (max_edits - 1))
    lines = [f"root ::= {root}", "edit ::= " + " | ".join(used)]
    lines += [rules[k] for k in used]
    lines += [
        'range ::= num ("-" num)?',
        'num ::= [1-9] [0-9]*',
        'uint ::= "0" | [1-9] [0-9]*',
        # a lower-case/punctuation start, or an upper-case label ("SKIP:"), never a bare keyword
        'ptxline ::= [a-z$.@{}/_%!] [^\\n]* | [A-Z] [A-Za-z0-9_$]* ":" [^\\n]*',
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
