"""Where each statement of a module sits in its canonical listing: the line numbers edit scripts use.

Operators that find a node through the analyses (``population.analysis``) turn it into the line an edit names
with ``line_map(module).line(node)``; ``apply_script`` resolves an edit's lines back to body lists with it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from population.ast import Function, Module, Scope, iter_body
from population.printer import LineInfo, Listing, listing


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
        """The listing's LineInfo for 1-based ``lineno``; IndexError naming the valid range when outside it."""
        return self.listing.line(lineno)

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

    def rec(body: list, fn: Function) -> None:
        # Post-order over the scopes without recursion (they nest to any depth): one [lo, hi] line range per
        # open body list; a scope's range is known at its "exit" event and widens its parent's.
        functions[id(body)] = fn
        ranges: list[list[int | None]] = [[None, None]]

        def widen(a: int, b: int) -> None:
            r = ranges[-1]
            r[0] = a if r[0] is None else min(r[0], a)
            r[1] = b if r[1] is None else max(r[1], b)

        for event, st, lst, k, _depth in iter_body(body, exits=True):
            if event == "enter":
                functions[id(st.body)] = fn
                owner[id(st.body)] = (lst, k)
                ranges.append([None, None])
                continue
            if event == "exit":
                lo, hi = ranges.pop()
                o = scope_open(st, None if lo is None else (lo, hi))
                if o is None or o not in match:
                    continue
                opens[o] = st.body
                closes[match[o]] = st.body
                spans[id(st)] = (o, match[o])
            elif id(st) in own:
                spans[id(st)] = (min(own[id(st)]), max(own[id(st)]))
            else:
                continue
            widen(*spans[id(st)])

    for fn in module.functions:
        if fn.body is None:
            continue
        rec(fn.body, fn)
        o = first_open.get(fn.name)
        if o is not None and o in match:
            opens[o] = fn.body
            closes[match[o]] = fn.body
    return LineMap(lst, spans, owner, functions, opens, closes)
