"""Static lint for global-memory races between CTAs, on the PTX before any GPU time.

compute-sanitizer racecheck looks at shared memory only, and a race between CTAs through global memory
almost never shows on a quiet GPU: a kernel that exchanges partial results between CTAs without ordering passes
every run of the gate and is wrong (or hangs) when the memory system reorders its stores or another kernel
shares the SMs. Two conservative rules, each naming the line it found:

1. **Spin wait on global memory** (``spin_wait``): a loop whose exit condition depends (def-use within the
   loop) on a global or generic read -- ``ld``/``ldu`` of any strength (``.volatile``, ``.relaxed``,
   ``.acquire``) or an ``atom`` result -- of a location the kernel itself writes (``st``/``atom``/``red``;
   locations compared by provenance roots, ``evaluators.input_stores.provenance``). One CTA waits for another:
   without a cooperative launch nothing guarantees that the other CTA is resident, and the wait hangs when it
   is not (CUDA C++ Programming Guide, "Grid Synchronization": only a cooperative launch co-schedules every
   CTA). Exempt: entries launched as thread-block clusters (``.reqnctapercluster``/``.explicitcluster``/
   ``.maxclusterrank``, or a ``cluster`` knob above 1), whose CTAs are co-scheduled; rule 2 still applies.
2. **Publish without a fence** (``unfenced_publish``): a global/generic store of data that the kernel also
   reads back (its address roots meet those of a global ``ld``: another CTA may consume it) followed, on some
   control-flow path, by a flag write -- ``atom``, ``red`` or a strong ``st`` (``.relaxed``/``.volatile``/
   ``.mmio``) -- with no ``membar.gl``/``.sys`` or ``fence.sc``/``.acq_rel``/``.release`` at GPU, cluster or
   system scope in between, and the flag write itself without ``.release``/``.acq_rel`` semantics. The PTX
   memory model ("Memory Consistency Model": release patterns) orders the data before the flag only through
   such a fence or release; without it the consumer may see the flag and stale data.

A kernel flagged by either rule is rejected before any GPU time with status ``nondeterministic`` (its results
depend on scheduling and the memory system's ordering; GATE.md). Costs one CFG, the natural loops and the
provenance pass the input-store check also runs (a few ms). Cannot see: races through a fenced but
logically wrong protocol (a flag set before the data is written), consumption without a loop or a flag
(a CTA reading another's output by chance of timing), races through memory the lint cannot attribute
to the same location (roots that do not meet).
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluators.input_stores import UNKNOWN, Provenance, destination_space, provenance, writes_memory
from population.ast import Instruction
from population.cfg import basic_blocks, cfg, loops
from population.defuse import destinations, sources
from population.kernel import Kernel
from population.printer import listing

_CLUSTER_DIRECTIVES = frozenset({"reqnctapercluster", "explicitcluster", "maxclusterrank"})
_STRONG_STORE = frozenset({"relaxed", "volatile", "mmio"})
_RELEASE = frozenset({"release", "acq_rel"})
_WIDE_SCOPES = frozenset({"gpu", "sys", "cluster"})


@dataclass(frozen=True)
class RaceFinding:
    """One global-memory race pattern.

    kind: ``"spin_wait"`` or ``"unfenced_publish"``; line: 1-based line in the module's canonical listing of
    the instruction that shows it (the spin's global read, or the unfenced data store); text: that line;
    why: the pattern in words (with the flag write's line for ``unfenced_publish``).
    """

    kind: str
    line: int
    text: str
    why: str

    def __str__(self) -> str:
        return f"{self.kind} at line {self.line}: `{self.text.strip()}` {self.why}"


@dataclass
class RaceReport:
    """The lint's findings (empty: no pattern found)."""

    findings: list[RaceFinding]

    @property
    def ok(self) -> bool:
        return not self.findings

    def reason(self) -> str:
        """One line for the store's reason column: the first finding and how many there are."""
        if not self.findings:
            return ""
        more = f" (and {len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        return f"static race lint: {self.findings[0]}{more}"


def _global_write(ins: Instruction) -> bool:
    return writes_memory(ins) and destination_space(ins) in ("global", "generic")


def _global_read(ins: Instruction) -> bool:
    """A read of global/generic memory whose value lands in a register (``ld``/``ldu``, ``atom``)."""
    if ins.opcode not in ("ld", "ldu", "atom"):
        return False
    return destination_space(ins) in ("global", "generic")


def _is_fence(ins: Instruction) -> bool:
    """``membar.gl``/``.sys`` or a ``fence.sc``/``.acq_rel``/``.release`` at gpu, cluster or sys scope (PTX ISA
    9.0 "membar/fence"); ``.cta`` scope and proxy fences do not order between CTAs."""
    mods = set(ins.modifiers)
    if ins.opcode == "membar":
        return "cta" not in mods
    if ins.opcode == "fence":
        return bool(mods & {"sc", "acq_rel", "release"}) and bool(mods & _WIDE_SCOPES)
    return False


def _meets(a: frozenset[str], b: frozenset[str]) -> bool:
    return bool(a & b) or (UNKNOWN in a and bool(b)) or (UNKNOWN in b and bool(a))


def _clustered(kernel: Kernel, fn) -> bool:
    return any(d.name in _CLUSTER_DIRECTIVES for d in fn.directives) or kernel.launch.knob("cluster", 1) > 1


def _spin_waits(fn, prov: Provenance, written: frozenset[str], blocks) -> list[tuple[Instruction, str]]:
    out: list[tuple[Instruction, str]] = []
    graph = cfg(fn, blocks)
    for lp in loops(fn, graph):
        body = [ins for b in sorted(lp.blocks) for ins in blocks[b].instructions]
        defs: dict[str, list[Instruction]] = {}
        for ins in body:
            for r in destinations(ins):
                defs.setdefault(r, []).append(ins)
        deciding = {u for u, _ in lp.exits} | set(lp.latches)
        work = []
        for b in deciding:
            t = blocks[b].terminator
            if t is not None and t.opcode == "bra" and t.predicate is not None:
                work.append(t.predicate.register.name)
        seen: set[str] = set()
        spin = None
        while work and spin is None:
            r = work.pop()
            if r in seen:
                continue
            seen.add(r)
            for d in defs.get(r, ()):
                if _global_read(d) and _meets(prov.address_roots(d), written):
                    spin = d
                    break
                work.extend(s for s in sources(d) if s not in seen)
        if spin is not None:
            out.append((spin, f"decides the exit of the loop at block {lp.header}: a spin wait on global memory "
                              "another CTA writes (no co-scheduling without a cooperative or cluster launch)"))
    return out


def _unfenced_publishes(prov: Provenance, blocks, consumed: frozenset[str]) -> list[tuple[Instruction, str]]:
    flags = {id(ins) for b in blocks for ins in b.instructions if _global_write(ins)
             and (ins.opcode in ("atom", "red") or (ins.opcode == "st" and set(ins.modifiers) & _STRONG_STORE))
             and not set(ins.modifiers) & _RELEASE}
    if not flags:
        return []
    out: list[tuple[Instruction, str]] = []
    for b in blocks:
        for i, d in enumerate(b.instructions):
            if d.opcode != "st" or not _global_write(d) or set(d.modifiers) & _RELEASE:
                continue
            if not _meets(prov.address_roots(d), consumed):
                continue
            flag = _reach_flag(blocks, b.id, i + 1, flags, skip=id(d))
            if flag is not None:
                out.append((d, flag))
    return out


def _reach_flag(blocks, start_block: int, start_pos: int, flags: set[int], skip: int) -> str | None:
    """Depth-first from (block, position) until a fence ends the path; the first flag write reached (as
    ``"then <text>"``), or None."""
    stack = [(start_block, start_pos)]
    entered: set[int] = set()
    while stack:
        b, pos = stack.pop()
        blk = blocks[b]
        fenced = False
        for ins in blk.instructions[pos:]:
            if _is_fence(ins):
                fenced = True
                break
            if id(ins) in flags and id(ins) != skip:
                return f"is published by the flag write `{ins.full_opcode}` with no gpu-scope fence or release " \
                       "between them: another CTA may see the flag before the data"
        if fenced:
            continue
        for s in blk.successors:
            if s not in entered:
                entered.add(s)
                stack.append((s, 0))
    return None


def race_lint(kernel: Kernel, prov: Provenance | None = None) -> RaceReport:
    """Lint ``kernel``'s entry for the global-memory race patterns of the module docstring.

    prov: the entry's provenance when already computed (``InputStoreReport.provenance``), else computed here.
    Returns a RaceReport (lines in the module's canonical listing); ValueError when the entry has no body.
    """
    fn = kernel.module.function(kernel.entry)
    prov = prov if prov is not None else provenance(kernel)
    written: frozenset[str] = frozenset()
    reads: set[frozenset[str]] = set()
    loaded: frozenset[str] = frozenset()
    for ins in prov.instructions:
        if _global_write(ins):
            written |= prov.address_roots(ins)
        if _global_read(ins):
            reads.add(prov.address_roots(ins))
            if ins.opcode != "atom":  # a flag's own read-modify-write consumes no data
                loaded |= prov.address_roots(ins)
    if not any(_meets(r, written) for r in reads):
        return RaceReport([])  # no global location both written and read: nothing passes between CTAs
    blocks = basic_blocks(fn)
    hits: list[tuple[str, Instruction, str]] = []
    if not _clustered(kernel, fn):
        hits += [("spin_wait", ins, why) for ins, why in _spin_waits(fn, prov, written, blocks)]
    hits += [("unfenced_publish", ins, why) for ins, why in _unfenced_publishes(prov, blocks, loaded)]
    if not hits:
        return RaceReport([])
    lines = {id(li.node): li for li in listing(kernel.module).lines if li.node is not None}
    found = []
    for kind, ins, why in hits:
        li = lines.get(id(ins))
        found.append(RaceFinding(kind, li.lineno if li else 0, li.text if li else str(ins), why))
    return RaceReport(found)

