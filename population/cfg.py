"""Control flow of one PTX function: the flattened statement stream, basic blocks, the CFG and natural loops.

Follows the PTX ISA 9.0 sections "Control Flow Instructions" (``bra``, ``brx.idx``, ``call``, ``ret``,
``exit``) and "Miscellaneous Instructions" (``trap``): a label starts a basic block; ``bra``/``brx.idx``/``ret``/``exit``/``trap`` end one; a
predicated ``bra`` has two successors (target and fall-through), an unpredicated one only its target; a
predicated ``ret``/``exit``/``trap`` falls through when its guard is false. ``call`` returns to the next
instruction, so it does not end a block. Nested ``{ }`` scopes are flattened into the linear stream (a scope
only limits the visibility of the declarations inside it). Loops are found by back edges whose head dominates
their tail (dominators from ``networkx.immediate_dominators``, the Cooper-Harvey-Kennedy algorithm); their
natural-loop bodies follow Aho, Lam, Sethi & Ullman, *Compilers* (2nd ed.) §9.6.6. Irreducible cycles (no
dominating head) are not reported as loops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from population.ast import Directive, Function, Instruction, Label, Statement, Symbol, iter_body

# Opcodes after which control does not fall through to the next instruction when unpredicated.
TERMINATORS = frozenset({"bra", "brx", "ret", "exit", "trap"})


@dataclass
class Located:
    """A statement with where it lives: ``body`` is the Python list holding it (a Function.body or a
    Scope.body), ``index`` its position there, ``depth`` the number of enclosing ``{ }`` scopes (0 = function
    body)."""

    stmt: Statement
    body: list[Statement]
    index: int
    depth: int


@dataclass
class BasicBlock:
    """A maximal straight-line run of instructions.

    id: position in ``basic_blocks(fn)`` (0 = the entry block).
    labels: labels that name the block's start (several consecutive labels name one block).
    instructions: the block's instructions in order (labels, directives and declarations are not included).
    start, end: half-open range of the block's instructions in ``flat_instructions(fn)``.
    successors: ids of the blocks control may pass to next, branch target first for a predicated ``bra``.
    """

    id: int
    labels: tuple[str, ...] = ()
    instructions: list[Instruction] = field(default_factory=list)
    start: int = 0
    end: int = 0
    successors: list[int] = field(default_factory=list)

    @property
    def label(self) -> str | None:
        """The first label naming the block, or None."""
        return self.labels[0] if self.labels else None

    @property
    def terminator(self) -> Instruction | None:
        """The last instruction if it is a branch/ret/exit/trap, else None (the block falls through)."""
        if self.instructions and self.instructions[-1].opcode in TERMINATORS:
            return self.instructions[-1]
        return None


@dataclass(frozen=True)
class Loop:
    """A natural loop.

    header: id of the block every iteration enters through (it dominates the whole body).
    latches: ids of the blocks with a back edge to the header.
    blocks: ids of all blocks in the body, header included.
    depth: nesting depth, 1 for an outermost loop.
    parent: header of the innermost enclosing loop, or None.
    exits: (inside, outside) block-id edges that leave the loop.
    """

    header: int
    latches: tuple[int, ...]
    blocks: frozenset[int]
    depth: int
    parent: int | None
    exits: tuple[tuple[int, int], ...]


def walk(fn: Function) -> list[Located]:
    """Every statement of ``fn``'s body in textual order, scopes flattened (a Scope itself is not listed,
    its statements are). Empty for a function without a body."""
    return [Located(s, body, i, depth) for event, s, body, i, depth in iter_body(fn.body or []) if event == "stmt"]


# Directives a label can name that are declarations, not code (PTX ISA "Control Flow Directives":
# ``p: .callprototype ...``, ``ts: .branchtargets L1, L2;``, ``ct: .calltargets f, g;``).
DECLARING_DIRECTIVES = frozenset({"callprototype", "branchtargets", "calltargets"})


def _declaring(loc: Located) -> Directive | None:
    """The declaration directive a label names (``prototype_1: .callprototype ...``), else None."""
    nxt = loc.index + 1
    if nxt < len(loc.body):
        d = loc.body[nxt]
        if isinstance(d, Directive) and d.name in DECLARING_DIRECTIVES:
            return d
    return None


def flat_statements(fn: Function) -> list[Located]:
    """The instructions and labels of ``fn`` in textual order, scopes flattened (directives and declarations
    dropped, and so are labels that name a ``.callprototype``/``.branchtargets``/``.calltargets``
    declaration): the stream basic blocks are cut from."""
    return [loc for loc in walk(fn) if isinstance(loc.stmt, Instruction)
            or (isinstance(loc.stmt, Label) and _declaring(loc) is None)]


def branch_tables(fn: Function) -> dict[str, tuple[str, ...]]:
    """``.branchtargets`` lists of ``fn`` by their label: ``{"ts": ("$L1", "$L2")}`` (the targets of a
    ``brx.idx`` naming ``ts``)."""
    out: dict[str, tuple[str, ...]] = {}
    for loc in walk(fn):
        if isinstance(loc.stmt, Label):
            d = _declaring(loc)
            if d is not None and d.name == "branchtargets":
                out[loc.stmt.name] = tuple(t.strip() for t in d.text.rstrip(";").split(",") if t.strip())
    return out


def flat_located(fn: Function) -> list[Located]:
    """The instructions of ``fn`` in textual order, each with the body list and index that hold it: entry k
    is ``flat_instructions(fn)[k]`` (so flat indices from blocks, def-use and memory sites map to a place an
    edit can name, via ``population.edits.line_map``)."""
    return [loc for loc in walk(fn) if isinstance(loc.stmt, Instruction)]


def flat_instructions(fn: Function) -> list[Instruction]:
    """The instructions of ``fn`` in textual order with ``{ }`` scopes flattened. Indices into this list are
    what :class:`BasicBlock` ranges, def-use sites and memory sites refer to."""
    return [loc.stmt for loc in flat_located(fn)]


def branch_target(instr: Instruction) -> str | None:
    """The label a ``bra`` jumps to (its last Symbol operand), or None for other instructions."""
    if instr.opcode != "bra":
        return None
    for op in reversed(instr.operands):
        if isinstance(op, Symbol):
            return op.name
    return None


def basic_blocks(fn: Function) -> list[BasicBlock]:
    """Cut ``fn`` into basic blocks and link their successors (rules in the module docstring).

    A ``brx.idx`` (indirect branch) gets the labels of its ``.branchtargets`` list as successors (every
    labelled block when the list is not found, a sound over-approximation). Raises ValueError naming the
    function, the label and the source line when a ``bra`` targets a label the function does not define."""
    if not fn.body:
        return []
    blocks: list[BasicBlock] = []
    cur = BasicBlock(0)
    n = 0  # index into flat_instructions
    for loc in flat_statements(fn):
        s = loc.stmt
        if isinstance(s, Label):
            if cur.instructions:
                cur.end = n
                blocks.append(cur)
                cur = BasicBlock(len(blocks), start=n)
            cur.labels = (*cur.labels, s.name)
            continue
        assert isinstance(s, Instruction)
        cur.instructions.append(s)
        n += 1
        if s.opcode in TERMINATORS:
            cur.end = n
            blocks.append(cur)
            cur = BasicBlock(len(blocks), start=n)
    if cur.instructions or cur.labels or not blocks:
        cur.end = n
        blocks.append(cur)

    by_label = {lab: b.id for b in blocks for lab in b.labels}
    tables = branch_tables(fn)
    for b in blocks:
        nxt = b.id + 1 if b.id + 1 < len(blocks) else None
        t = b.terminator
        if t is None:
            b.successors = [nxt] if nxt is not None else []
            continue
        succ: list[int] = []
        if t.opcode == "bra":
            target = branch_target(t)
            if target not in by_label:
                raise ValueError(f"function {fn.name}: bra to undefined label {target!r}"
                                 + (f" at line {t.loc.line}" if t.loc else ""))
            succ.append(by_label[target])
        elif t.opcode == "brx":
            table = next((tables[o.name] for o in t.operands if isinstance(o, Symbol) and o.name in tables), None)
            names = [lab for lab in table if lab in by_label] if table is not None else list(by_label)
            succ.extend(sorted({by_label[lab] for lab in names}))
        if t.predicate is not None and nxt is not None and nxt not in succ:
            succ.append(nxt)
        b.successors = succ
    return blocks


def cfg(fn: Function, blocks: list[BasicBlock] | None = None) -> nx.DiGraph:
    """The control-flow graph: one node per basic block id (attribute ``block`` holds the BasicBlock), an edge
    per successor with attribute ``kind`` = ``"branch"`` (to a bra target) or ``"fallthrough"``. Node 0 is the
    entry; blocks ending in ret/exit/trap have no successors."""
    blocks = basic_blocks(fn) if blocks is None else blocks
    g = nx.DiGraph(function=fn.name)
    for b in blocks:
        g.add_node(b.id, block=b)
    for b in blocks:
        t = b.terminator
        target = branch_target(t) if t is not None else None
        for s in b.successors:
            kind = "branch" if target is not None and target in blocks[s].labels else "fallthrough"
            g.add_edge(b.id, s, kind=kind)
    return g


def dominates(idom: dict[int, int], a: int, b: int) -> bool:
    """True when block ``a`` dominates block ``b`` given immediate dominators (root maps to itself)."""
    while True:
        if a == b:
            return True
        parent = idom.get(b)
        if parent is None or parent == b:
            return False
        b = parent


def loops(fn: Function, graph: nx.DiGraph | None = None) -> list[Loop]:
    """Natural loops of ``fn``, outermost first (sorted by depth, then header). Back edges u -> h with h
    dominating u; back edges sharing a header form one loop. Unreachable blocks are ignored."""
    g = cfg(fn) if graph is None else graph
    if 0 not in g:
        return []
    idom = nx.immediate_dominators(g, 0)
    back: dict[int, list[int]] = {}
    for u, h in g.edges:
        if u in idom and h in idom and dominates(idom, h, u):
            back.setdefault(h, []).append(u)
    bodies: dict[int, set[int]] = {}
    for h, latches in back.items():
        body = {h}
        stack = [u for u in latches if u != h]
        while stack:
            x = stack.pop()
            if x in body:
                continue
            body.add(x)
            stack.extend(p for p in g.predecessors(x) if p in idom)
        bodies[h] = body
    out: list[Loop] = []
    for h, body in bodies.items():
        enclosing = [h2 for h2, b2 in bodies.items() if h2 != h and body < b2]
        parent = min(enclosing, key=lambda h2: len(bodies[h2])) if enclosing else None
        exits = tuple(sorted((u, v) for u in body for v in g.successors(u) if v not in body))
        out.append(Loop(h, tuple(sorted(back[h])), frozenset(body), len(enclosing) + 1, parent, exits))
    return sorted(out, key=lambda lp: (lp.depth, lp.header))


def loop_depths(fn: Function, blocks: list[BasicBlock] | None = None) -> dict[int, int]:
    """Loop nesting depth of every basic block id (0 = not in a loop)."""
    blocks = basic_blocks(fn) if blocks is None else blocks
    depth = {b.id: 0 for b in blocks}
    for lp in loops(fn, cfg(fn, blocks)):
        for b in lp.blocks:
            depth[b] = max(depth[b], lp.depth)
    return depth


def block_of(blocks: list[BasicBlock], flat_index: int) -> int:
    """Id of the block holding the instruction at ``flat_index`` in ``flat_instructions(fn)``.
    Raises IndexError when no block holds it."""
    for b in blocks:
        if b.start <= flat_index < b.end:
            return b.id
    raise IndexError(f"no basic block holds flat instruction {flat_index}")
