"""Static lint for results that depend on scheduling, on the PTX before any GPU time.

compute-sanitizer racecheck looks at shared memory only, and a race between CTAs through global memory
almost never shows on a quiet GPU: a kernel that exchanges partial results between CTAs without ordering passes
every run of the gate and is wrong (or hangs) when the memory system reorders its stores or another kernel
shares the SMs. Conservative rules, each naming the line it found (the entry and every function it calls,
``evaluators.input_stores.provenance``):

1. **Spin wait on global memory** (``spin_wait``): a loop whose exit condition depends (def-use within the
   loop) on a global or generic read -- ``ld``/``ldu`` of any strength (``.volatile``, ``.relaxed``,
   ``.acquire``), ``ldmatrix``, ``suld`` or an ``atom`` result (``_loads_registers``, since version 15 the one
   list of reads of every rule) -- of a location the kernel itself writes (``st``/``atom``/``red``;
   locations compared by provenance roots, ``evaluators.input_stores.provenance``). The exit condition is the
   guard of every ``bra`` that leaves or closes the loop, the index of a ``brx.idx`` there, and the guard of a
   predicated ``exit``/``ret`` inside it (a loop left only by ending the thread). The def-use goes through
   memory too (gate rules version 10): a value the loop loads from local, shared or global memory depends on
   whatever the loop's writes to that location (roots that meet) store there, and a value a ``call`` returns on
   the reads of the function called (``_through_memory``: ``rt_local_spin_dodge`` tested a ``volatile`` local
   copy of its flag). One CTA waits for another: without a cooperative launch nothing guarantees that the other
   CTA is resident, and the wait hangs when it is not (CUDA C++ Programming Guide, "Grid Synchronization": only a
   cooperative launch co-schedules every CTA). Exempt, for a workload that declares atomics: cluster launches of
   more than one CTA per cluster (the product of ``.reqnctapercluster``, else the ``cluster`` knob), whose CTAs
   are co-scheduled; rule 2 still applies. A cluster of one CTA (``__cluster_dims__(1, 1, 1)``) co-schedules
   nothing (``rt_cluster_of_one``: version 9 exempted any cluster directive), and a workload without atomics
   gets no exemption (its cluster kernels exchange through distributed shared memory and cluster barriers;
   version 9 exempted them, so a spin between CTAs of different clusters passed).
2. **Publish without a fence** (``unfenced_publish``): a global/generic write (``st``, ``atom``, ``red``, any
   strength) of data that the kernel also reads back (its address roots meet those of a global ``ld``: another
   CTA may consume it) followed, on some control-flow path, by another flag write -- ``atom``, ``red`` or a
   strong ``st`` (``.relaxed``/``.volatile``/``.mmio``/``.release``) -- with no ordering fence in between, and the flag write
   itself no release at a scope that reaches other CTAs. A fence orders here when it is ``membar.gl``/``.sys``
   or ``fence.sc``/``.acq_rel``/``.release`` at gpu or sys scope -- at cluster scope only in a cluster launch of
   more than one CTA per cluster (otherwise a cluster is one CTA) -- and not a restricted fence (``fence.mbarrier_init``,
   ``fence.op_restrict``: prior ``mbarrier.init`` only) or a proxy fence; a flag's ``.release``/``.acq_rel``
   counts at the same scopes (an ``atom``/``red`` without a scope is gpu scope). The PTX memory model ("Memory
   Consistency Model": release patterns, "Scope") orders the data before the flag only through such a fence or
   release; without it the consumer may see the flag and stale data.
3. **Time or placement** (``time_dependent``): a read of ``%clock``, ``%clock_hi``, ``%clock64``,
   ``%globaltimer``(``_lo``/``_hi``), ``%smid``, ``%warpid``, ``%gridid`` (the context's grid launch number) or a
   performance counter ``%pm*`` (PTX ISA "Special Registers"). No correct kernel of a deterministic workload
   needs them; a kernel that reads them can tell a slow run (compute-sanitizer instruments every access) or a
   fresh process (the sanitizer replay) from the worker, a timed launch from a gate launch by what ran between
   them, or pace itself to just under the roofline.
4. **Floating-point atomic accumulation** (``float_atomic``, only when the workload declares no atomics:
   ``Workload.uses_atomics`` False promises bitwise equal results on equal inputs): ``atom``/``red`` ``.add``
   (or ``.min``/``.max``, exact but used to accumulate) on a floating-point type in any state space: the
   order in which CTAs or warps arrive decides the rounding of the sum. Its order form (``atomic_order``,
   version 8): an ``atom`` of any type whose returned value is read, and every ``atom.exch``/``atom.cas``
   (the last or first to arrive decides the stored value). Either tells threads their arrival order, which
   racecheck does not report for atomics: two warps racing to one shared word after different work, one of them
   instrumented by compute-sanitizer and one not (a chain of arithmetic), are a clock with no loop and no clock
   register (``rt_atomic_race_clock``). Integer ``red`` (and an ``atom`` whose result no instruction reads:
   the same commutative update) stays allowed; none of the 1502 distinct kernels of the recorded H200 stores
   and no seed uses ``atom`` at all.
   Its mbarrier form (gate rules version 11): ``mbarrier.pending_count`` (the arrivals still owed when this
   thread arrived), and an ``mbarrier.test_wait``/``try_wait`` whose result does anything but decide the retry of
   a loop around it (the innermost loop holding it branches on nothing else, computes nothing else -- a count of
   the retries kept in a register is a clock -- and nothing else reads the result):
   a single test says whether another thread has arrived yet, the same arrival order
   (``rt_mbarrier_race_clock``: an instrumented chain of shared loads against an ALU chain, no loop, no atom).
   Since gate rules version 15 also: a read (any register-loading read, ``_loads_registers``) of a location a
   ``red`` (or an ``atom`` whose result nobody reads) updated, on a path with no barrier between, which sees the
   count of the threads that arrived before it as the atom's result would (``rt12_red_order_clock``); and the
   state token an ``mbarrier.arrive`` returns read by anything but a wait (its bits hold the pending count:
   ``rt12_arrive_token_clock``).

5. **State kept across launches** (``launch_state``, only when the workload declares no atomics): a write
   (``st``, ``atom``, ``red``, any strength, direct or through a generic address) into a ``.global`` variable
   of the module or of a function -- memory with the program's lifetime (PTX ISA "State Spaces": ``.global``
   variables persist until the module is unloaded). Every launch of a deterministic workload computes its
   outputs from its own arguments; a kernel that writes such a variable can count its launches (and so tell
   the worker from a fresh sanitizer replay), memoise a previous launch's answer or pass results between
   launches. Workloads whose kernels cooperate across CTAs through a counter (``Workload.uses_atomics``) may.
   The same rule rejects a read of ``.local`` memory that the thread did not write before it on every path:
   local memory is a per-context allocation addressed by the hardware thread slot and is not cleared between
   launches, so such a read sees what the last thread on that slot left (``rt_local_state``: a launch counter
   without a ``.global`` variable). A load at a constant offset of a ``.local`` variable (nvcc's
   ``__local_depot`` addressing, ``cvta.local`` of a named variable) needs every byte it reads stored before it
   on every path (a forward must-analysis over the function's blocks; a guarded store, ``@p st``, counts only
   for a load under the same guard later in its block, gate rules version 11: ``rt_guarded_init_state``
   initialised its counter under a guard that never holds), unless the thread stores into that
   variable at an offset the lint cannot compute (a local array filled in a loop and read unrolled); a load at
   an offset the lint cannot compute needs a store somewhere in the function to the same variable (a local
   array filled in one loop and read in another); a local load whose address no ``.local`` variable vouches
   for is rejected. Cannot see: a read of a variable the thread also stores into at an offset the lint cannot
   compute (the store may land elsewhere in it).
   Its ``.shared`` form rejects a load (``ld``/``ldu``/``ldmatrix``, an ``atom`` result; ``.shared`` or generic
   through a ``.shared`` variable) of a shared variable that no path from the entry without a back edge reaches
   through a store into it (any thread's code: another thread's store reaches a load through the barrier between
   them, which lies on such a path too): shared memory is not cleared between CTAs or launches, so such a load
   sees what an earlier CTA on the SM left there (``rt_shared_state``: a launch counter that tells the worker from
   a fresh sanitizer replay). Leaving out back edges makes the first iteration of every loop count: a load that
   only a later iteration's store precedes reads stale memory the first time. Cannot see: a store into another
   part of the same variable before the load (variables are compared, not offsets), stores on paths the inputs
   never take, loads in called functions (the entry only). Since version 15 a read-modify-write (``red``,
   ``atom``, ``sured``) is a read of the variable and initialises nothing (``rt12_red_shared_state``: a counter
   bumped by ``red.shared.add`` before its load), and an address is examined by the shared variables among its
   roots whatever else it carries (``rt12_hashed_shared_state``: an index of y's bits).
   Its address form (gate rules version 11): a generic or ``.shared`` load whose address no variable, parameter or
   buffer vouches for (no provenance roots, or only ``UNKNOWN``: built from constants, rebuilt bit by bit through
   branches, loaded from memory). Both forms above follow variables; such an address may point anywhere in the
   thread's local window or the CTA's shared window (``rt_laundered_state``: a counter's address rebuilt through
   branches). Cannot see: a laundered distance added to a buffer's address (the load then names the buffer:
   ``rt_laundered_state`` RT_SPACE 2 names y and reads local memory).
6. **Wall-clock waits** (``wall_clock_wait``, only when the workload declares no atomics): ``nanosleep`` (PTX ISA
   9.0 "nanosleep": the thread is suspended for about the given number of nanoseconds) or an
   ``mbarrier.try_wait`` given a ``suspendTimeHint`` (it returns false once that many nanoseconds have passed).
   Each is a clock without a clock register: a warp that sleeps while another counts how often it can bump a
   shared counter measures how fast the kernel runs, so it can tell a launch under compute-sanitizer (every
   shared access instrumented, tens of times slower) from a native one and keep a barrier only there
   (``rt_sleep_dodge``). A kernel of a deterministic workload has nothing to wait for but barriers; a backoff
   in a spin on a counter (``Workload.uses_atomics``) may sleep. A ``try_wait`` without the hint (the retry
   loop of a TMA pipeline) is left alone: its time limit is the system's, and it decides only when to retry.
   The same rule rejects a loop whose exit depends (as in rule 1) on a read -- ``ld``/``ldu`` of any strength,
   or an ``atom`` result -- of a ``.shared`` variable the kernel writes (directly or through a generic
   address): one thread of the CTA waits for another through shared memory, and whatever it does meanwhile
   (bump a counter) measures how long the other one took. With a fixed-time chain of arithmetic on the other
   side (compute-sanitizer instruments memory accesses, not ALU instructions) that is a clock that runs slow
   only under the tool (``rt_alu_pace_dodge``). Threads of a CTA of a deterministic workload meet at barriers
   (``bar``/``barrier``, ``mbarrier`` waits), never in a spin on a shared word. A loop that waits on an
   ``mbarrier.test_wait``/``try_wait`` counts too when it also writes memory (a counter bumped while waiting); a
   pipeline's retry loop (the wait and its branch) does not. A count kept in a register of such a loop is
   rule 4's mbarrier form (version 11). Rejects too: an honest work queue inside a CTA on a shared atomic counter (``while ((i =
   atomicAdd(&next, 1)) < n)``), for workloads without atomics.

7. **Distributed shared memory outside cluster barriers** (``cluster_lifetime``, every workload, gate rules
   version 10): in a cluster launch of more than one CTA per cluster, an ``ld``/``ldu``/``st``/``atom``/``red``
   of another CTA's shared memory (``.shared::cluster``, or generic at an address ``mapa`` gave, as nvcc writes
   ``cluster.map_shared_rank``) that a path from the entry reaches without crossing a cluster barrier (an
   unpredicated ``barrier.cluster.arrive`` then ``barrier.cluster.wait``: the peer may not have started), or from
   which a path reaches the kernel's exit without crossing one whose arrive is not ``.relaxed`` (every CTA runs
   the same code, so the CTA whose shared memory is read may have exited: its memory then belongs to no CTA, or
   to the next one). Since version 15 any instruction with an address operand at a ``mapa`` address counts (a
   bulk copy into the peer, a remote mbarrier arrival: ``rt12_cluster_bulk_push``). CUDA C++ Programming Guide, "Distributed Shared Memory": every block must have started
   before its shared memory is accessed, and a block must not exit before the accesses to it are done
   (``cluster.sync()`` at the end). Dropping that last barrier saves a rendezvous per row group and almost
   never shows on a GPU (``rt_cluster_exit_race``); the template keeps it. Entry only; a call to a function
   that accesses distributed shared memory counts as an access.

8. **Exchange through global memory inside a CTA** (``global_exchange``, with rule 4's order form: workloads
   without atomics, gate rules version 11): a global/generic ``ld``/``ldu``, or a ``cp`` copying out of global
   memory (``cp.async`` into shared memory), of a location the same function
   writes (roots that meet), on a path from the write that crosses a barrier (``bar``/``barrier`` but a bare
   arrive) or an mbarrier wait. Threads of a CTA then pass data through global memory, where racecheck (shared
   memory only) does not look at the order of the accesses and no other rule applies without a loop, an atomic
   or a strong store: two warps storing into one output word after different work (an instrumented chain of
   shared loads, an ALU chain) and everyone reading it after a barrier is a clock (``rt_global_lww_clock``).
   Shared memory is the place for such exchanges (racecheck checks it). Since gate rules version 15 the path may
   leave at a barrier and go on past another statement's wait of the same barrier (named barriers: producers
   ``bar.arrive 1, 256``, consumers ``bar.sync 1, 256`` on another branch, ``rt11_named_barrier_exchange``), and a
   read on a branch apart from a write it meets (no path of one thread runs both) counts too: it can see only
   another thread's store; a ``call`` on the path brings the called functions' reads onto it
   (``rt12_callee_readback_clock``). Rule 5's ``.shared`` form follows the same barrier edges (the producers' stores reach
   the consumers' loads). Cannot see: a read with a path from the write through no barrier (another thread's
   store, by chance of timing, in a kernel that also reads its own), another CTA's ("cannot see" below).

A kernel flagged by any rule is rejected before any GPU time with status ``nondeterministic`` (its results
depend on scheduling, the memory system's ordering or time; GATE.md). Costs one CFG per function, the natural
loops and the provenance pass the input-store check also runs (a few ms). Cannot see: races through a fenced
but logically wrong protocol (a flag set before the data is written), consumption without a loop or a flag (a
CTA reading another's output by chance of timing), races through memory the lint cannot attribute to the same
location (roots that do not meet), a missing acquire on the consumer's side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from evaluators.input_stores import (
    _STATE_SPACES,
    UNKNOWN,
    Provenance,
    destination_space,
    first_finding,
    provenance,
    writes_memory,
)
from population.ast import Address, Immediate, Instruction, Register, SpecialRegister, Symbol, VarDecl
from population.cfg import basic_blocks, cfg, dominates, flat_instructions, loops, walk
from population.defuse import TYPE_BITS, destinations, sources
from population.kernel import Kernel
from population.printer import listing

_STRONG_STORE = frozenset({"relaxed", "volatile", "mmio"})
_RELEASE = frozenset({"release", "acq_rel"})
_SCOPES = frozenset({"cta", "cluster", "gpu", "sys"})
# Fences that order only some operations (PTX ISA 9.0 "membar/fence": ``fence.mbarrier_init``/``op_restrict``
# order prior mbarrier.init operations; ``fence.proxy.*`` order between proxies of one thread).
_RESTRICTED_FENCE = frozenset({"mbarrier_init", "op_restrict", "proxy"})
# Special registers whose value depends on time or on where the thread runs (PTX ISA 9.0 "Special Registers").
# %gridid counts the grids launched in the context: a fresh process (the sanitizer replay) has launched few.
_TIME_REGISTERS = frozenset({"%clock", "%clock_hi", "%clock64", "%globaltimer", "%globaltimer_lo",
                             "%globaltimer_hi", "%smid", "%warpid", "%gridid"} | {f"%pm{i}" for i in range(8)}
                            | {f"%pm{i}_64" for i in range(8)})
# Operand count of ``mbarrier.try_wait`` with a suspendTimeHint (waitComplete, [addr], state|parity, hint).
_TRY_WAIT_WITH_HINT = 4
_FLOAT_TYPES = frozenset({"f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "e4m3x2", "e5m2x2"})
_ACCUMULATE = frozenset({"add", "min", "max"})


@dataclass(frozen=True)
class RaceFinding:
    """One pattern of the module docstring.

    kind: ``"spin_wait"``, ``"unfenced_publish"``, ``"time_dependent"``, ``"float_atomic"``,
    ``"atomic_order"``, ``"launch_state"``, ``"wall_clock_wait"``, ``"cluster_lifetime"`` or ``"global_exchange"``; line: 1-based line in the module's canonical listing of the instruction that shows it
    (the spin's global read, the unfenced data write, the clock read, the atomic, the variable's store); text: that line; why: the pattern in words (with the flag
    write for ``unfenced_publish``).
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
        """One line for the store's reason column: the first finding, how many there are and, when they are
        of more than one kind, every kind (``"... (and 3 more; kinds: unfenced_publish, launch_state)"``)."""
        kinds = list(dict.fromkeys(f.kind for f in self.findings))
        note = f"; kinds: {', '.join(kinds)}" if len(kinds) > 1 else ""
        return first_finding("static race lint", self.findings, note)


def _global_write(ins: Instruction) -> bool:
    return writes_memory(ins) and destination_space(ins) in ("global", "generic")


def _loads_registers(ins: Instruction) -> bool:
    """A read of memory whose value lands in registers: ``ld``/``ldu``, ``ldmatrix``, ``suld``, an ``atom``
    result, ``multimem.ld_reduce``. The one list every rule's reads come from (``rt12_ldmatrix_spin_clock``: a spin
    on a shared flag read by ``ldmatrix`` was no read for rules 1 and 6)."""
    if ins.opcode == "multimem":
        return "ld_reduce" in ins.modifiers
    return ins.opcode in ("ld", "ldu", "ldmatrix", "suld", "atom")


def _global_read(ins: Instruction) -> bool:
    """A read of global/generic memory whose value lands in a register (``_loads_registers``)."""
    return _loads_registers(ins) and destination_space(ins) in ("global", "generic")


def _reaches_other_ctas(mods: set[str], clustered: bool, default: str = "gpu") -> bool:
    """Whether an operation at the scope named in ``mods`` (``default`` when none) orders for other CTAs: gpu
    and sys scope do; cluster scope only in a cluster launch (without clusters a cluster is its one CTA)."""
    scope = next((m for m in ("sys", "gpu", "cluster", "cta") if m in mods), default)
    return scope in ("gpu", "sys") or (scope == "cluster" and clustered)


def _is_fence(ins: Instruction, clustered: bool = False) -> bool:
    """``membar.gl``/``.sys`` or a ``fence.sc``/``.acq_rel``/``.release`` that orders for other CTAs (module
    docstring, rule 2; PTX ISA 9.0 "membar/fence"): ``.cta`` scope, cluster scope outside a cluster launch,
    ``fence.mbarrier_init``/``op_restrict`` and proxy fences do not."""
    mods = set(ins.modifiers)
    if ins.opcode == "membar":
        return "cta" not in mods
    if ins.opcode == "fence":
        return (bool(mods & {"sc", "acq_rel", "release"}) and not mods & _RESTRICTED_FENCE
                and bool(mods & _SCOPES) and _reaches_other_ctas(mods, clustered))
    return False


def _is_release(ins: Instruction, clustered: bool) -> bool:
    """A write with ``.release``/``.acq_rel`` semantics at a scope that reaches other CTAs (``atom``/``red``
    default to gpu scope; ``st.release`` names its scope)."""
    mods = set(ins.modifiers)
    return bool(mods & _RELEASE) and _reaches_other_ctas(mods, clustered)


def _meets(a: frozenset[str], b: frozenset[str]) -> bool:
    return bool(a & b) or (UNKNOWN in a and bool(b)) or (UNKNOWN in b and bool(a))


def _cluster_size(kernel: Kernel, fn) -> int:
    """CTAs per cluster of ``kernel``'s launch, as ``evaluators.static.cluster_size`` counts them: the product of
    ``fn``'s ``.reqnctapercluster`` (what nvcc writes for ``__cluster_dims__``), else the launch's ``cluster`` knob
    (``.explicitcluster`` or ``.maxclusterrank`` alone leave the size to the launch), else 1."""
    req = next((d for d in fn.directives if d.name == "reqnctapercluster" and d.values), None)
    if req is not None:
        return max(1, math.prod(int(v) for v in req.values))
    knob = getattr(kernel.launch, "knob", None)  # a LaunchConfig; other launch rules name no cluster knob
    return max(1, int(knob("cluster", 1))) if knob is not None else 1


def _clustered(kernel: Kernel, fn) -> bool:
    """A cluster launch of more than one CTA per cluster (``_cluster_size``): only then are other CTAs
    co-scheduled with this one and does cluster scope reach beyond it. A cluster of one CTA
    (``__cluster_dims__(1, 1, 1)``) is a plain launch (``rt_cluster_of_one``: gate rules version 9 took any cluster
    directive for a cluster launch)."""
    return _cluster_size(kernel, fn) > 1


def _spin_waits(fn, prov: Provenance, written: frozenset[str], blocks,
                is_read: Callable[[Instruction], bool] | None = None,
                keep: Callable[[Instruction, list[Instruction]], bool] | None = None) -> list[tuple[Instruction, str]]:
    """Rule 1 (module docstring): loops whose exit depends on a read (``is_read``, default a global or generic
    read) of a location whose roots meet ``written``; (the read, why) per loop. ``keep(read, body)``: whether a
    found loop counts (default: every one)."""
    is_read = is_read or _global_read
    out: list[tuple[Instruction, str]] = []
    graph = cfg(fn, blocks)
    for lp in loops(fn, graph):
        body = [ins for b in sorted(lp.blocks) for ins in blocks[b].instructions]
        defs: dict[str, list[Instruction]] = {}
        for ins in body:
            for r in destinations(ins):
                defs.setdefault(r, []).append(ins)
        # blocks that leave or close the loop, and blocks in it that end the thread under a guard
        deciding = {u for u, _ in lp.exits} | set(lp.latches) | {
            b for b in lp.blocks if blocks[b].terminator is not None
            and blocks[b].terminator.opcode in ("ret", "exit") and blocks[b].terminator.predicate is not None}
        work = []
        for b in deciding:
            t = blocks[b].terminator
            if t is None or t.opcode not in ("bra", "brx", "ret", "exit"):
                continue
            if t.predicate is not None:
                work.append(t.predicate.register.name)
            if t.opcode == "brx":  # brx.idx index, targets: the index picks the successor
                work.extend(sources(t))
        seen: set[str] = set()
        followed: set[int] = set()  # loads already traced through memory
        spin = None

        def found(d: Instruction, body: list[Instruction] = body) -> bool:
            return is_read(d) and _meets(prov.address_roots(d), written) and (keep is None or keep(d, body))

        while work and spin is None:
            r = work.pop()
            if r in seen:
                continue
            seen.add(r)
            for d in defs.get(r, ()):
                if found(d):
                    spin = d
                    break
                work.extend(s for s in sources(d) if s not in seen)
                if _loads_registers(d) and d.opcode != "atom" and id(d) not in followed:  # went through memory
                    followed.add(id(d))
                    regs, callee_read = _through_memory(d, body, prov, found)
                    if callee_read is not None:
                        spin = callee_read
                        break
                    work.extend(s for s in regs if s not in seen)
        if spin is not None:
            out.append((spin, f"decides the exit of the loop at block {lp.header}: a spin wait on global memory "
                              "another CTA writes (no co-scheduling without a cooperative or cluster launch)"))
    return out


def _through_memory(load: Instruction, body: list[Instruction], prov: Provenance,
                    found: Callable[[Instruction], bool]) -> tuple[list[str], Instruction | None]:
    """Where a value ``load`` reads from memory (that no rule's read matched) came from in the loop ``body``:
    (the registers read by every write in the body that may store where it loads -- address roots that meet,
    ``UNKNOWN`` meeting any; none for ``.const``/``.nc`` loads, read-only while the kernel runs --, the first read
    ``found`` accepts in a function that a ``call`` of the body returns through the ``.param`` it loads, or None;
    a kernel's own ``.param`` is never written). A copy through a thread's own local memory (a ``volatile``
    automatic variable: ``rt_local_spin_dodge``), through shared or global scratch, or a value a called function
    returns keeps its dependence on the read it copies (gate rules version 10; version 9 traced registers only)."""
    regs: list[str] = []
    addr = next((o for o in load.operands if isinstance(o, Address)), None)
    if "param" not in load.modifiers:
        if "const" in load.modifiers or "nc" in load.modifiers:  # read-only while the kernel runs
            return regs, None
        roots = prov.address_roots(load)
        for ins in body:
            if ins is not load and writes_memory(ins) and _meets(prov.address_roots(ins), roots):
                regs.extend(sources(ins))
        return regs, None
    if addr is None or not isinstance(addr.base, Symbol):  # a kernel's own parameters: never written
        return regs, None
    bodies = {f.name: f for f in prov.functions}
    for ins in body:  # `call (retval0), f, (...)` then `ld.param [retval0]`: f's reads decide the value
        if ins.opcode != "call" or not ins.operands:
            continue
        rets = getattr(ins.operands[0], "elements", None) or ()
        if not any(isinstance(e, Symbol) and e.name == addr.base.name for e in rets):
            continue
        todo, done = prov.called(ins), set()  # through .alias; every function for an indirect call
        while todo:
            name = todo.pop()
            if name in done or name not in bodies:
                continue
            done.add(name)
            for c in flat_instructions(bodies[name]):
                if found(c):
                    return regs, c
                if c.opcode == "call":
                    todo.extend(prov.called(c))
    return regs, None


def _shared_variables(kernel: Kernel, fn) -> frozenset[str]:
    """Roots (``"s:<name>"``) of the ``.shared`` variables ``fn`` may name: the module's and its own (any scope,
    ``extern`` dynamic shared memory included)."""
    names = {it.name for it in kernel.module.items if isinstance(it, VarDecl) and it.state_space == "shared"}
    names |= {loc.stmt.name for loc in walk(fn) if isinstance(loc.stmt, VarDecl) and loc.stmt.state_space == "shared"}
    return frozenset("s:" + n for n in names)


def _shared_read(ins: Instruction) -> bool:
    """A read of shared (or generic) memory whose value lands in a register (``_loads_registers``)."""
    return _loads_registers(ins) and destination_space(ins) in ("shared", "generic")


def _mbarrier_wait(ins: Instruction) -> bool:
    return ins.opcode == "mbarrier" and bool(set(ins.modifiers) & {"try_wait", "test_wait"})


def _counts_while_waiting(read: Instruction, body: list[Instruction]) -> bool:
    """A loop found waiting on ``read`` counts unless it waits on an mbarrier and writes no memory (a pipeline's
    retry loop: the wait and its branch)."""
    return not _mbarrier_wait(read) or any(writes_memory(i) for i in body if i is not read)


def _shared_spin_waits(kernel: Kernel, prov: Provenance, blocks_of: Callable[[Any], list] = basic_blocks
                       ) -> list[tuple[Instruction, str]]:
    """Rule 6's shared form (module docstring): loops whose exit waits on a ``.shared`` variable the kernel
    writes (or on an mbarrier, when the loop also writes memory), in the entry and every function it calls."""
    out: list[tuple[Instruction, str]] = []
    for f in prov.functions or [kernel.module.function(kernel.entry)]:
        shared = _shared_variables(kernel, f)
        written = frozenset(r for ins in prov.instructions if (writes_memory(ins) or ins.opcode == "mbarrier")
                            and destination_space(ins) in ("shared", "generic")
                            for r in prov.address_roots(ins) & shared)
        if not written:
            continue
        is_read = lambda d: _shared_read(d) or _mbarrier_wait(d)  # noqa: E731
        for ins, _ in _spin_waits(f, prov, written, blocks_of(f), is_read, _counts_while_waiting):
            out.append((ins, "decides the exit of a loop: a wait on a shared variable another thread of the CTA "
                             "writes, and what the loop does meanwhile measures how long that thread took (a clock "
                             "that runs slow under compute-sanitizer; the workload declares no atomics)"))
    return out


def _unfenced_publishes(prov: Provenance, blocks, consumed: frozenset[str], clustered: bool
                        ) -> list[tuple[Instruction, str]]:
    flags = {id(ins) for b in blocks for ins in b.instructions if _global_write(ins)
             and (ins.opcode in ("atom", "red") or (ins.opcode == "st" and set(ins.modifiers) & (_STRONG_STORE | _RELEASE)))
             and not _is_release(ins, clustered)}
    if not flags:
        return []
    out: list[tuple[Instruction, str]] = []
    for b in blocks:
        for i, d in enumerate(b.instructions):
            if d.opcode not in ("st", "atom", "red") or not _global_write(d):
                continue
            if not _meets(prov.address_roots(d), consumed):
                continue
            flag = _reach_flag(blocks, b.id, i + 1, flags, skip=id(d), clustered=clustered)
            if flag is not None:
                out.append((d, flag))
    return out


def _reach_flag(blocks, start_block: int, start_pos: int, flags: set[int], skip: int,
                clustered: bool = False) -> str | None:
    """Depth-first from (block, position) until a fence ends the path; the first flag write reached (as
    ``"then <text>"``), or None."""
    stack = [(start_block, start_pos)]
    entered: set[int] = set()
    while stack:
        b, pos = stack.pop()
        blk = blocks[b]
        fenced = False
        for ins in blk.instructions[pos:]:
            if _is_fence(ins, clustered):
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


def _operands_flat(ops) -> list:
    out = []
    for o in ops:
        elements = getattr(o, "elements", None)
        out.extend(_operands_flat(elements) if elements is not None else [o])
    return out


def _time_reads(prov: Provenance) -> list[tuple[Instruction, str]]:
    out = []
    for ins in prov.instructions:
        regs = sorted({o.name for o in _operands_flat(ins.operands)
                       if isinstance(o, SpecialRegister) and o.name in _TIME_REGISTERS})
        if regs:
            out.append((ins, f"reads {regs[0]}: a result or a path that depends on time, on where the thread runs or "
                             "on what ran before (a kernel can tell a slow, instrumented or timed launch from another)"))
    return out


def _float_atomics(prov: Provenance) -> list[tuple[Instruction, str]]:
    out = []
    for ins in prov.instructions:
        mods = set(ins.modifiers)
        if ins.opcode in ("atom", "red") and mods & _ACCUMULATE and mods & _FLOAT_TYPES:
            op = next(m for m in ins.modifiers if m in _ACCUMULATE)
            out.append((ins, f"accumulates floating-point values with an atomic {op}: the arrival order of the "
                             "threads decides the rounding (the workload declares no atomics)"))
    return out


def _order_atomics(prov: Provenance) -> list[tuple[Instruction, str]]:
    """Rule 4's order form (module docstring): ``atom`` whose result is read, and ``atom.exch``/``atom.cas``.
    "Read" by register name anywhere in the functions (nvcc names each virtual register once; a register reused
    by hand counts as read, the conservative side)."""
    read: set[str] = {r for ins in prov.instructions for r in sources(ins)}
    out = []
    for ins in prov.instructions:
        if ins.opcode != "atom":
            continue
        mods = set(ins.modifiers)
        if mods & _ACCUMULATE and mods & _FLOAT_TYPES:
            continue  # the float form says it
        order = mods & {"exch", "cas"}
        used = [r for r in destinations(ins) if r in read]
        if order or used:
            what = f"an atomic {sorted(order)[0]}" if order else "an atomic whose returned value is read"
            out.append((ins, f"{what}: its outcome is the order in which threads arrive, which racecheck does not "
                             "report (a race between an instrumented and an uninstrumented warp is a clock; the "
                             "workload declares no atomics)"))
    return out


def _reads_after_reductions(prov: Provenance, blocks_of: Callable[[Any], list]) -> list[tuple[Instruction, str]]:
    """Rule 4's order form, split in two (gate rules version 15): a ``red`` (or an ``atom`` whose result no one
    reads, or a bulk ``cp.reduce``: ``_rmw``) followed, on a path without a barrier of the whole CTA
    (``_whole_cta_wait``: a warp barrier or a named barrier with a count leaves other threads' updates open,
    ``rt13_warp_sync_order_clock``), by a read (``_loads_registers``) of a location it updates (roots that meet).
    The read sees the updates of the threads that arrived before it, as the atom's result would
    (``rt12_red_order_clock``: ``red.shared.add`` then ``ld.volatile.shared`` of the word). After such a barrier
    every thread's update is in, and the integer sum is the same in any order (the honest count)."""
    read: set[str] = {r for ins in prov.instructions for r in sources(ins)}
    out: list[tuple[Instruction, str]] = []
    for f in prov.functions:
        blocks = blocks_of(f)
        found: dict[int, Instruction] = {}
        for b0, blk in enumerate(blocks):
            for i0, ins in enumerate(blk.instructions):
                if not ((ins.opcode in ("red", "cp") and _rmw(ins))
                        or (ins.opcode == "atom" and not any(r in read for r in destinations(ins)))):
                    continue
                roots = prov.address_roots(ins)
                stack, seen = [(b0, i0 + 1)], set()
                while stack:
                    b, pos = stack.pop()
                    for c in blocks[b].instructions[pos:]:
                        # a warp's or a partial barrier leaves other threads' reds open; a cluster barrier's wait
                        # (every thread of every CTA of the cluster) closes them, as a whole-CTA one does
                        if _whole_cta_wait(c) or (c.opcode == "barrier" and "cluster" in c.modifiers
                                                  and "wait" in c.modifiers and c.predicate is None):
                            break
                        if _loads_registers(c) and c.opcode != "atom" and _meets(prov.address_roots(c), roots):
                            found[id(c)] = c
                    else:
                        for t in blocks[b].successors:
                            if t not in seen:
                                seen.add(t)
                                stack.append((t, 0))
        out += [(c, "reads a location a reduction (red) updated, with no barrier between: the value is the count "
                    "of the threads that arrived before it, as an atomic's result (its outcome is the arrival "
                    "order; the workload declares no atomics)") for c in found.values()]
    return out


def _wall_clock_waits(prov: Provenance) -> list[tuple[Instruction, str]]:
    """Rule 6 (module docstring): every ``nanosleep`` and every ``mbarrier.try_wait`` with a suspendTimeHint."""
    out = []
    for ins in prov.instructions:
        if ins.opcode == "nanosleep":
            out.append((ins, "sleeps for a wall-clock time: with anything that counts meanwhile it is a clock (a kernel "
                             "can tell an instrumented, slow launch from a native one; the workload declares no atomics)"))
        elif (ins.opcode == "mbarrier" and ins.modifiers and ins.modifiers[0] == "try_wait"
              and len(ins.operands) >= _TRY_WAIT_WITH_HINT):
            out.append((ins, "waits on an mbarrier with a suspend-time hint: its result says whether that many "
                             "nanoseconds passed, a clock (the workload declares no atomics)"))
    return out


def _global_variables(kernel: Kernel) -> frozenset[str]:
    """Roots (``"s:<name>"``) of the module's ``.global`` variables and of those declared inside functions."""
    names = {it.name for it in kernel.module.items if isinstance(it, VarDecl) and it.state_space == "global"}
    for f in kernel.module.functions:
        if f.body is not None:
            names |= {loc.stmt.name for loc in walk(f)
                      if isinstance(loc.stmt, VarDecl) and loc.stmt.state_space == "global"}
    return frozenset("s:" + n for n in names)


def _local_variables(kernel: Kernel, fn) -> frozenset[str]:
    """Roots (``"s:<name>"``) of the ``.local`` variables ``fn`` may name: the module's and its own (any scope)."""
    names = {it.name for it in kernel.module.items if isinstance(it, VarDecl) and it.state_space == "local"}
    names |= {loc.stmt.name for loc in walk(fn) if isinstance(loc.stmt, VarDecl) and loc.stmt.state_space == "local"}
    return frozenset("s:" + n for n in names)


def _access_bytes(ins: Instruction) -> int | None:
    """Bytes a ``ld``/``st`` moves: its element type's size times its vector width; None when no type is named."""
    bits = next((TYPE_BITS[m] for m in ins.modifiers if m in TYPE_BITS), None)
    if bits is None:
        return None
    width = next((int(m[1:]) for m in ins.modifiers if m in ("v2", "v4", "v8")), 1)
    return max(1, bits // 8) * width


def _local_offsets(fn, local: frozenset[str]) -> dict[str, tuple[str, int]]:
    """Register -> (``.local`` root, constant byte offset) where every definition of the register is ``mov`` of a
    ``.local`` variable or of such a register, ``cvta.local``/``cvta.to.local`` of one, or ``add``/``sub`` of one
    and an immediate (nvcc's ``__local_depot`` addressing, ``cvta.local`` of a named variable)."""
    defs: dict[str, list[Instruction]] = {}
    for ins in flat_instructions(fn):
        for r in destinations(ins):
            defs.setdefault(r, []).append(ins)
    out: dict[str, tuple[str, int]] = {}

    def base(op) -> tuple[str, int] | None:
        if isinstance(op, Symbol):
            return ("s:" + op.name, 0) if "s:" + op.name in local else None
        if isinstance(op, Register):
            return out.get(op.name)
        return None

    changed = True
    while changed:
        changed = False
        for reg, ds in defs.items():
            vals = set()
            for d in ds:
                ops = d.operands[1:]
                v = None
                if d.opcode in ("mov", "cvta") and len(ops) == 1 and d.predicate is None:
                    v = base(ops[0])
                elif d.opcode in ("add", "sub") and len(ops) == 2 and d.predicate is None:
                    a, b = ops
                    if isinstance(b, Immediate) and isinstance(b.value, int):
                        v = base(a)
                        v = v and (v[0], v[1] + (b.value if d.opcode == "add" else -b.value))
                    elif isinstance(a, Immediate) and isinstance(a.value, int) and d.opcode == "add":
                        v = base(b)
                        v = v and (v[0], v[1] + a.value)
                vals.add(v)
            new = vals.pop() if len(vals) == 1 else None
            if new is not None and out.get(reg) != new:
                out[reg] = new
                changed = True
            elif new is None and reg in out:
                del out[reg]
                changed = True
    return out


def _local_location(ins: Instruction, prov: Provenance, local: frozenset[str],
                    offsets: dict[str, tuple[str, int]]) -> tuple[frozenset[str], int | None]:
    """(the ``.local`` roots ``ins``'s address may name, its constant byte offset in the one root when known)."""
    addr = next((o for o in ins.operands if isinstance(o, Address)), None)
    if addr is None:
        return frozenset(), None
    extra = addr.offset or 0
    if isinstance(addr.base, Symbol) and "s:" + addr.base.name in local:
        return frozenset({"s:" + addr.base.name}), extra
    if isinstance(addr.base, Register) and addr.base.name in offsets:
        root, off = offsets[addr.base.name]
        return frozenset({root}), off + extra
    return prov.address_roots(ins) & local, None


_LocalAccess = tuple[str, frozenset[str], int | None, int | None]  # kind, roots, offset, bytes


def _local_access(ins: Instruction, prov: Provenance, local: frozenset[str],
                  offsets: dict[str, tuple[str, int]]) -> _LocalAccess | None:
    """("load" or "store", the ``.local`` roots, the constant offset in the one root or None, the bytes moved or
    None) of an ``ld``/``ldu``/``st`` of local memory (``.local``, or generic through a ``.local`` variable)."""
    kind = "load" if ins.opcode in ("ld", "ldu") else "store" if ins.opcode == "st" else None
    space = destination_space(ins)
    if kind is None or space not in ("local", "generic"):
        return None
    roots, off = _local_location(ins, prov, local, offsets)
    if space == "generic" and not roots:
        return None  # a generic access of no .local variable
    return kind, roots, off, _access_bytes(ins)


def _stores_into(cur: set[tuple[str, int]], a: _LocalAccess) -> None:
    """Add the (root, byte) pairs a store at a known offset writes (a store at an unknown offset adds none)."""
    _, roots, off, size = a
    if len(roots) == 1 and off is not None and size is not None:
        root = next(iter(roots))
        cur.update((root, off + k) for k in range(size))


def _predecessors(blocks, back: frozenset[tuple[int, int]] | set[tuple[int, int]] = frozenset()) -> dict[int, list[int]]:
    """Block id -> the ids of its predecessors, leaving out the edges in ``back``."""
    preds: dict[int, list[int]] = {b.id: [] for b in blocks}
    for b in blocks:
        for t in b.successors:
            if (b.id, t) not in back:
                preds[t].append(b.id)
    return preds


def _forward(blocks, preds: dict[int, list[int]], meet: Callable[[list[frozenset]], frozenset],
             transfer: Callable[..., frozenset]) -> dict[int, frozenset | None]:
    """Block id -> the state on entry to the block of a forward analysis over ``blocks`` (block 0 starts empty;
    None: unreachable), iterated to its fixed point. meet: the states out of the visited predecessors -> the
    state in (unvisited ones are left out); transfer: (block, state in) -> state out."""
    state_in: dict[int, frozenset | None] = {b.id: None for b in blocks}
    state_out: dict[int, frozenset | None] = {b.id: None for b in blocks}
    changed = True
    while changed:
        changed = False
        for b in blocks:
            outs = [state_out[p] for p in preds[b.id] if state_out[p] is not None]
            new_in = frozenset() if b.id == 0 else meet(outs) if outs else None
            if new_in is None or (new_in == state_in[b.id] and state_out[b.id] is not None):
                continue
            state_in[b.id] = new_in
            new_out = transfer(b, new_in)
            if new_out != state_out[b.id]:
                state_out[b.id] = new_out
                changed = True
    return state_in


def _guard(ins: Instruction) -> tuple[str, bool] | None:
    """The guard of ``ins`` as (predicate register, negated), None when it has none."""
    return None if ins.predicate is None else (ins.predicate.register.name, ins.predicate.negated)


def _written_on_every_path(blocks, sites: dict[int, _LocalAccess]) -> dict[int, frozenset | None]:
    """Block id -> the (root, byte) pairs every path from the entry has stored before the block (None:
    unreachable), a forward must-analysis (meet: intersection; unvisited predecessors count as every byte)."""

    def transfer(b, state: frozenset) -> frozenset:
        cur = set(state)
        for ins in b.instructions:
            a = sites.get(id(ins))
            if a is not None and a[0] == "store" and _guard(ins) is None:  # a guarded store may not run
                _stores_into(cur, a)
        return frozenset(cur)

    return _forward(blocks, _predecessors(blocks), lambda outs: frozenset.intersection(*outs), transfer)


def _stale_local_reads(kernel: Kernel, prov: Provenance, blocks_of: Callable[[Any], list] = basic_blocks
                       ) -> list[tuple[Instruction, str]]:
    """Rule 5's second form (module docstring): loads of ``.local`` memory no store of the thread wrote before."""
    out: list[tuple[Instruction, str]] = []
    for fn in prov.functions:
        local = _local_variables(kernel, fn)
        offsets = _local_offsets(fn, local)
        sites = {id(i): a for i in flat_instructions(fn) if (a := _local_access(i, prov, local, offsets)) is not None}
        if not any(a[0] == "load" for a in sites.values()):
            continue
        stored_anywhere = frozenset().union(*(a[1] for a in sites.values() if a[0] == "store"))
        # variables the thread stores into at offsets the lint cannot compute (a local array filled in a loop)
        stored_somewhere = frozenset().union(*(a[1] for a in sites.values() if a[0] == "store" and
                                               (a[2] is None or a[3] is None or len(a[1]) != 1)))
        blocks = blocks_of(fn)
        for b, st in zip(blocks, _written_on_every_path(blocks, sites).values()):
            if st is None:
                continue  # unreachable
            cur = set(st)
            # bytes stored in this block under a guard (register, negated) not redefined since: they count for a
            # load under the same guard (gate rules version 11; version 10 counted a guarded store for every load)
            guarded: dict[tuple[str, bool], set[tuple[str, int]]] = {}
            for ins in b.instructions:
                for r in destinations(ins):
                    guarded = {g: v for g, v in guarded.items() if g[0] != r}
                a = sites.get(id(ins))
                if a is None:
                    continue
                guard = _guard(ins)
                if a[0] == "store":
                    _stores_into(cur if guard is None else guarded.setdefault(guard, set()), a)
                    continue
                _, roots, off, size = a
                if len(roots) == 1 and off is not None and size is not None:
                    root = next(iter(roots))
                    have = cur | guarded.get(guard, set()) if guard is not None else cur
                    if root in stored_somewhere or all((root, off + k) in have for k in range(size)):
                        continue
                    why = (f"reads {size} bytes at offset {off} of the .local variable {root[2:]!r} that no store "
                           "of this thread wrote before it on every path")
                elif roots and roots <= stored_anywhere:
                    continue  # an offset the lint cannot compute, in a variable the thread stores to
                elif roots:
                    why = f"reads the .local variable {sorted(roots)[0][2:]!r}, which no store of this thread writes"
                else:
                    why = "reads local memory at an address no .local variable of this function vouches for"
                out.append((ins, why + ": what an earlier launch left on the same hardware thread slot (local "
                                       "memory is not cleared between launches), state that outlives the launch"))
    return out


def _shared_load(ins: Instruction) -> bool:
    """A read of memory whose value lands in a register (``_loads_registers``)."""
    return _loads_registers(ins)


def _rmw(ins: Instruction) -> bool:
    """A read-modify-write of memory: ``atom``, ``red``, ``sured``, ``cp.reduce`` (PTX ISA "cp.reduce.async.bulk":
    the destination combined with the source), an mbarrier operation other than ``init`` and
    ``inval`` (arrivals, ``expect_tx``, ``complete_tx`` update the phase and counts in place: PTX ISA 9.0
    "mbarrier")."""
    if ins.opcode in ("atom", "red", "sured") or (ins.opcode == "cp" and "reduce" in ins.modifiers):
        return True  # cp.reduce.async.bulk: a bulk reduction into its destination (rt13_bulk_reduce_shared_state)
    return ins.opcode == "mbarrier" and bool(ins.modifiers) and ins.modifiers[0] not in (
        "init", "inval", "test_wait", "try_wait", "pending_count")


def _stale_shared_reads(kernel: Kernel, prov: Provenance, blocks_of: Callable[[Any], list] = basic_blocks
                        ) -> list[tuple[Instruction, str]]:
    """Rule 5's ``.shared`` form (module docstring): in the entry, loads of a ``.shared`` variable that no path
    from the entry without a back edge (the first iteration of every loop) reaches through a store into it.

    A forward may-analysis over the blocks in which back edges are left out: the variables some path stores
    into before a point, in any thread's code (another thread's store reaches the load through the barrier
    between them, which lies on such a path too). A load of a variable not in that set reads, on its first
    execution, what an earlier CTA on the SM left there."""
    fn = kernel.module.function(kernel.entry)
    shared = _shared_variables(kernel, fn)
    if not shared:
        return []
    blocks = blocks_of(fn)

    def roots_of(ins: Instruction) -> frozenset[str]:
        # the shared variables among the address's roots: other roots (bits of y in an index, rt12_hashed_shared_state)
        # do not take the access out of the variable
        if destination_space(ins) not in ("shared", "generic"):
            return frozenset()
        return prov.address_roots(ins) & shared

    # a read-modify-write (red, atom, an mbarrier arrival) reads what is there: it is a read of the variable and
    # initialises nothing (rt12_red_shared_state: a counter bumped by red.shared.add, then loaded)
    stores = {id(i): roots_of(i) for b in blocks for i in b.instructions if writes_memory(i) and not _rmw(i)}
    # (an mbarrier operation is neither: the barrier's phase, not data, and racecheck and the mbarrier forms of
    # rules 4 and 6 look at its use)
    loads = {id(i): roots_of(i) for b in blocks for i in b.instructions if _shared_load(i) or (_rmw(i)
             and i.opcode != "mbarrier")}
    if not any(loads.values()):
        return []
    back = {(u, lp.header) for lp in loops(fn, cfg(fn, blocks)) for u in lp.latches}
    preds = _predecessors(blocks, back)
    # Another statement's arrival at the same barrier hands what was stored before it to the code past a wait
    # (``_barrier_jumps``: a named-barrier hand-off, the producers' stores on another branch); iterated with the
    # states at the arrivals until they stop growing.
    jumps = _barrier_jumps(fn, blocks, prov)
    handed: dict[tuple[int, int], frozenset[str]] = {}

    def run(b, st: frozenset, at: dict | None = None) -> frozenset:
        cur = set(st)
        for k, i in enumerate(b.instructions):
            cur |= handed.get((b.id, k), frozenset())
            if at is not None:
                at[(b.id, k)] = frozenset(cur)
            cur |= stores.get(id(i), frozenset())
        return frozenset(cur | handed.get((b.id, len(b.instructions)), frozenset()))

    while True:
        # acyclic once the back edges are gone: converges in a pass or two over the block order
        state_in = _forward(blocks, preds, lambda outs: frozenset().union(*outs), run)
        at: dict[tuple[int, int], frozenset] = {}
        for b in blocks:
            if state_in[b.id] is not None:
                run(b, state_in[b.id], at)
        new: dict[tuple[int, int], frozenset[str]] = {}
        for site, targets in jumps.items():
            for t in targets:
                new[t] = new.get(t, frozenset()) | at.get(site, frozenset())
        new = {t: v for t, v in new.items() if v}
        if new == handed:
            break
        handed = new
    found: list[tuple[Instruction, str]] = []
    for b in blocks:
        if state_in[b.id] is None:
            continue
        cur = set(state_in[b.id])
        for k, i in enumerate(b.instructions):
            cur |= handed.get((b.id, k), frozenset())
            r = loads.get(id(i), frozenset())
            if r and not r & cur:
                found.append((i, f"reads the .shared variable {sorted(r)[0][2:]!r} before any store into it (no path "
                                 "from the entry stores there first): what an earlier CTA on the same SM left (shared "
                                 "memory is not cleared between launches)"))
            cur |= stores.get(id(i), frozenset())
    return found


def _launch_state_writes(kernel: Kernel, prov: Provenance) -> list[tuple[Instruction, str]]:
    gvars = _global_variables(kernel)
    if not gvars:
        return []
    out = []
    for ins in prov.instructions:
        if writes_memory(ins) and destination_space(ins) in ("global", "generic"):
            hit = sorted(prov.address_roots(ins) & gvars)
            if hit:
                out.append((ins, f"writes the .global variable {hit[0][2:]!r}: state that outlives the launch (a "
                                 "kernel can count its launches, memoise an answer or pass results between launches)"))
    return out


def _unvouched(roots: frozenset[str]) -> bool:
    """No variable, parameter or buffer vouches for an address with these roots: none at all (built from
    constants, or through control flow bit by bit) or only ``UNKNOWN`` (a value loaded from memory)."""
    return not roots or roots == frozenset({UNKNOWN})


def _unvouched_loads(kernel: Kernel, prov: Provenance) -> list[tuple[Instruction, str]]:
    """Rule 5's address form (gate rules version 11): a generic or ``.shared`` load (``ld``/``ldu``/``ldmatrix``,
    an ``atom`` result) whose address no variable or parameter vouches for (``_unvouched``). Such an address may
    point anywhere in the thread's local window or the CTA's shared window, so the forms above, which follow
    variables, cannot say what it reads; ``rt_laundered_state`` rebuilt its counter's address bit by bit through
    branches. (An ``ld.local`` at such an address is the ``.local`` form's own finding.)"""
    out = []
    for ins in prov.instructions:
        if not _shared_load(ins) or destination_space(ins) not in ("generic", "shared"):
            continue
        if any(isinstance(o, Address) for o in ins.operands) and _unvouched(prov.address_roots(ins)):
            out.append((ins, f"reads {destination_space(ins)} memory at an address no variable, parameter or buffer "
                             "vouches for (built from constants or through control flow): it may read local or "
                             "shared memory an earlier launch left (neither is cleared between launches), state "
                             "that outlives the launch"))
    return out


def _is_cta_sync(ins: Instruction) -> bool:
    """An instruction after which a thread may see what other threads of its CTA (or warp) stored before it: a
    barrier (``bar``/``barrier`` of any form but a bare arrive) or an mbarrier wait."""
    if ins.opcode in ("bar", "barrier"):
        return "arrive" not in ins.modifiers or "wait" in ins.modifiers
    return _mbarrier_wait(ins)


def _barrier_key(ins: Instruction) -> tuple[str, int | None] | None:
    """The barrier ``ins`` arrives at, for any ``bar``/``barrier`` form (PTX ISA 9.0 "bar, barrier"): ("cta", id)
    for a CTA barrier with an immediate id (``bar.red``'s id is its second operand), ("cta", None) when the id is a
    register (it may be any), ("cluster", None) for ``barrier.cluster``, ("warp", None) for ``bar.warp.sync``;
    None for any other instruction."""
    if ins.opcode not in ("bar", "barrier"):
        return None
    if "cluster" in ins.modifiers:
        return ("cluster", None)
    if "warp" in ins.modifiers:
        return ("warp", None)
    pos = 1 if "red" in ins.modifiers else 0
    op = ins.operands[pos] if len(ins.operands) > pos else None
    return ("cta", op.value if isinstance(op, Immediate) else None) if op is not None else ("cta", 0)


def _whole_cta_wait(ins: Instruction) -> bool:
    """An unguarded CTA barrier wait with an immediate id and no thread count (``bar.sync 0``,
    ``barrier.sync.aligned 1``): every thread of the CTA takes part in each of its generations (PTX ISA "bar,
    barrier": without a count, all threads of the CTA)."""
    if ins.opcode not in ("bar", "barrier") or ins.predicate is not None or not _is_cta_sync(ins):
        return False
    key = _barrier_key(ins)
    if key is None or key[0] != "cta" or key[1] is None:
        return False
    pos = 1 if "red" in ins.modifiers else 0
    rest = [o for o in ins.operands[pos + 1:]]
    return not rest if "red" not in ins.modifiers else len(rest) <= 1  # bar.red: d, a{, b}, {!}c


def _mbarrier_site(ins: Instruction, prov: Provenance | None) -> tuple[str, frozenset[str]] | None:
    """("mbarrier", the object's address roots) for an arrival at an mbarrier or a wait on one (``arrive``,
    ``arrive_drop``, ``test_wait``, ``try_wait``), None otherwise or without provenance. An arrival releases the
    threads waiting on the same object's phase, whatever statement they wait at (PTX ISA 9.0 "mbarrier":
    release semantics at the arrive, acquire at the completed wait)."""
    if prov is None or ins.opcode != "mbarrier" or ins.modifiers[:1] not in (
            ("arrive",), ("arrive_drop",), ("test_wait",), ("try_wait",)):
        return None
    return ("mbarrier", prov.address_roots(ins))


def _barrier_jumps(fn, blocks, prov: Provenance | None = None) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(block id, position) of every barrier instruction -> the positions just past the waits (``_is_cta_sync``)
    of the same barrier (``_barrier_key``; a register id meets every id) at other statements that do not dominate
    it. Threads that take different branches meet at one named barrier at different statements (warp
    specialisation: producers ``bar.arrive 1, 256``, consumers ``bar.sync 1, 256``; PTX ISA "bar, barrier": the
    arrive makes the producer's earlier accesses visible to the threads the wait releases), so what a thread did
    before its arrival is seen past another statement's wait: a path for the rules that follow accesses across
    barriers (``rt11_named_barrier_exchange``). A wait that dominates the arrival is left out when it waits for the
    whole CTA (``_whole_cta_wait``): a thread passes it before arriving, so the two meet in one generation only
    through a loop, which the control-flow paths already follow. A guarded wait, or one whose id or thread count
    is a register or that counts fewer threads, keeps the edge (``rt13_dominated_wait_clock``: consumers behind a
    guarded ``@p bar.sync 1, 256``; ``bar.sync %id, %count`` as CUTLASS writes it). With ``prov``, mbarrier
    arrivals hand over to the waits on the same object (``_mbarrier_site``; address roots that meet), always
    (``rt13_mbarrier_handoff_clock``: a producer's ``mbarrier.arrive``, a consumer's ``try_wait`` loop)."""
    sites = [(b.id, i, _barrier_key(ins) or _mbarrier_site(ins, prov)) for b in blocks
             for i, ins in enumerate(b.instructions) if (_barrier_key(ins) or _mbarrier_site(ins, prov)) is not None]
    waits = [(b, i, k) for b, i, k in sites if _is_cta_sync(blocks[b].instructions[i])]
    if not waits or len(sites) < 2:
        return {}
    idom = nx.immediate_dominators(cfg(fn, blocks), 0)

    def before(wb: int, wi: int, pb: int, pi: int) -> bool:  # the wait dominates the arrival
        if not _whole_cta_wait(blocks[wb].instructions[wi]):
            return False  # some threads may not run it, or it counts fewer: the two can meet in one generation
        return (wi < pi) if wb == pb else (pb in idom and dominates(idom, wb, pb))

    jumps: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for pb, pi, pk in sites:
        for wb, wi, wk in waits:
            if (wb, wi) == (pb, pi) or pk[0] != wk[0]:
                continue
            if pk[0] == "mbarrier":
                if pk[1] and wk[1] and _meets(pk[1], wk[1]):
                    jumps.setdefault((pb, pi), []).append((wb, wi + 1))
                continue
            if None not in (pk[1], wk[1]) and pk[1] != wk[1]:
                continue
            if not before(wb, wi, pb, pi):
                jumps.setdefault((pb, pi), []).append((wb, wi + 1))
    return jumps


def _copy_source_space(ins: Instruction) -> str | None:
    """The state space a ``cp`` reads (its second state-space modifier: ``cp.async.ca.shared.global``), or None."""
    spaces = [m.split("::", 1)[0] for m in ins.modifiers if m.split("::", 1)[0] in _STATE_SPACES]
    return spaces[1] if len(spaces) >= 2 else None


def _global_exchanges(prov: Provenance, blocks_of: Callable[[Any], list]) -> list[tuple[Instruction, str]]:
    """Rule 8 (``global_exchange``, gate rules version 11): a global/generic ``ld``/``ldu`` (or a ``cp`` out of
    global memory) of a location (address
    roots that meet, ``UNKNOWN`` meeting any) that a global write of the same function stores into, on a path from
    that write through a barrier or an mbarrier wait (``_is_cta_sync``): threads of a CTA exchange data through
    global memory, where neither racecheck (shared memory only) nor memcheck (bounds) looks at the order of the
    accesses. A last-writer race between two warps read back after a barrier is a clock no rule saw
    (``rt_global_lww_clock``). The path may leave the write's statement at a barrier and go on past another
    statement's wait of the same barrier (``_barrier_jumps``: a named-barrier hand-off, ``bar.arrive`` ->
    ``bar.sync``, gate rules version 15). Version 15 also flags a read that no path of one thread runs before or
    after a write it meets (the two on branches apart): it can only see another thread's store, ordered or not."""
    out: list[tuple[Instruction, str]] = []
    bodies = {f.name: f for f in prov.functions}

    def reads_of(f) -> dict[int, tuple[Instruction, frozenset[str]]]:
        r = {id(ins): (ins, prov.address_roots(ins)) for b in blocks_of(f) for ins in b.instructions
             if _loads_registers(ins) and ins.opcode != "atom" and destination_space(ins) in ("global", "generic")
             and "param" not in ins.modifiers}
        # a copy out of global memory (cp.async, cp.async.bulk into shared memory) reads its source
        r.update({id(ins): (ins, prov.source_roots(ins)) for b in blocks_of(f) for ins in b.instructions
                  if ins.opcode == "cp" and _copy_source_space(ins) == "global" and prov.source_roots(ins)})
        return r

    own = {f.name: reads_of(f) for f in prov.functions}

    def callees(ins: Instruction) -> list[str]:
        """The functions a ``call`` may run (``Provenance.called``: through ``.alias``, every one for an indirect
        call)."""
        return prov.called(ins) if ins.opcode == "call" else []

    reached: dict[int, list[str]] = {}  # id(call) -> the functions it reaches

    def reaches_functions(ins: Instruction) -> list[str]:
        """Every function a call reaches, transitively (computed once per call)."""
        if id(ins) not in reached:
            todo, done = callees(ins), []
            while todo:
                n = todo.pop()
                if n in done or n not in bodies:
                    continue
                done.append(n)
                todo += [c for b in blocks_of(bodies[n]) for i in b.instructions for c in callees(i)]
            reached[id(ins)] = done
        return reached[id(ins)]

    def called_reads(ins: Instruction) -> list[tuple[Instruction, frozenset[str]]]:
        """The reads of every function a call reaches: a read-back done in a callee after the caller's barrier
        (``rt12_callee_readback_clock``) is on the caller's path (gate rules version 15)."""
        return [r for n in reaches_functions(ins) for r in own[n].values()]

    own_writes = {f.name: frozenset().union(*(prov.address_roots(i) for b in blocks_of(f) for i in b.instructions
                                               if _global_write(i))) for f in prov.functions}

    def called_writes(ins: Instruction) -> frozenset[str]:
        """The roots of every global write of the functions a call reaches: the call is a write site of the
        caller (``rt13_callee_store_clock``: the racing stores in a called function)."""
        return frozenset().union(*(own_writes[n] for n in reaches_functions(ins)))

    for f in prov.functions:
        blocks = blocks_of(f)
        writes = [(b.id, i, prov.address_roots(ins)) for b in blocks for i, ins in enumerate(b.instructions)
                  if _global_write(ins)]
        writes += [(b.id, i, w) for b in blocks for i, ins in enumerate(b.instructions)
                   if ins.opcode == "call" and (w := called_writes(ins))]
        reads = {k: r for k, (_, r) in own[f.name].items()}
        has_calls = any(callees(ins) for b in blocks for ins in b.instructions)
        if not writes or not (reads or has_calls):
            continue
        where = {id(ins): (b.id, i) for b in blocks for i, ins in enumerate(b.instructions) if id(ins) in reads}
        jumps = _barrier_jumps(f, blocks, prov)

        after: dict[tuple[int, int], dict[int, int]] = {}  # position -> block id -> first position reached

        def reaches(a: tuple[int, int], z: tuple[int, int], blocks=blocks, jumps=jumps, after=after) -> bool:
            """Position z runs after position a: on a path of one thread, or past a wait that another
            statement's arrival after a releases (``_barrier_jumps``: a read ordered before a write by a named
            barrier is a write-after-read, no exchange; ``rt13_honest_kda_loader``). One walk per a."""
            if a not in after:
                first: dict[int, int] = {}
                stack = [(a[0], a[1] + 1)]
                while stack:
                    b, pos = stack.pop()
                    if first.get(b, len(blocks[b].instructions) + 1) <= pos:
                        continue
                    start, first[b] = first.get(b, len(blocks[b].instructions) + 1), pos
                    stack += [site for k in range(pos, min(start, len(blocks[b].instructions)))
                              for site in jumps.get((b, k), ())]
                    stack += [(t, 0) for t in blocks[b].successors]
                after[a] = first
            return after[a].get(z[0], len(blocks[z[0]].instructions) + 1) <= z[1]

        apart: dict[int, Instruction] = {}
        for b0, i0, roots in writes:
            for k, r in reads.items():
                if k not in apart and _meets(r, roots) and not reaches((b0, i0), where[k]) \
                        and not reaches(where[k], (b0, i0)):
                    apart[k] = blocks[where[k][0]].instructions[where[k][1]]
        found: dict[int, Instruction] = {}
        for b0, i0, roots in writes:
            targets = {k for k, r in reads.items() if _meets(r, roots) and k not in found}
            if not targets and not has_calls:
                continue
            stack, seen = [(b0, i0 + 1, False)], set()
            while stack:
                b, pos, crossed = stack.pop()
                for k, ins in enumerate(blocks[b].instructions[pos:], pos):
                    if crossed and id(ins) in targets:
                        found[id(ins)] = ins
                    if crossed and ins.opcode == "call":
                        found.update({id(c): c for c, r in called_reads(ins) if _meets(r, roots)})
                    for site in jumps.get((b, k), ()):  # another statement's wait of the same barrier
                        if (*site, True) not in seen:
                            seen.add((*site, True))
                            stack.append((*site, True))
                    crossed = crossed or _is_cta_sync(ins)
                for t in blocks[b].successors:
                    if (t, 0, crossed) not in seen:
                        seen.add((t, 0, crossed))
                        stack.append((t, 0, crossed))
        for ins in found.values():
            out.append((ins, "reads global memory that this kernel writes, after a barrier on the way from the "
                             "write: threads of the CTA exchange data through global memory, which neither racecheck "
                             "(shared memory only) nor any rule orders (a last-writer race read back after a barrier "
                             "is a clock; the workload declares no atomics)"))
        for k, ins in apart.items():
            if k not in found:
                out.append((ins, "reads global memory that this kernel writes on a path that never meets this "
                                 "read (neither runs after the other in one thread): what it sees is another "
                                 "thread's store or what was there before, by timing -- an exchange or a race "
                                 "between threads through global memory (the workload declares no atomics)"))
    return out


def _mbarrier_observations(prov: Provenance, blocks_of: Callable[[Any], list]) -> list[tuple[Instruction, str]]:
    """Rule 4's mbarrier form (gate rules version 11): ``mbarrier.pending_count`` (how many arrivals were still
    owed when this thread arrived), and an ``mbarrier.test_wait``/``try_wait`` whose result does anything but
    decide the retry of a loop around it: the innermost loop holding the test has no conditional branch but on
    its result, and nothing else reads it. A pipeline waits until the phase completes; a single test says whether
    another thread has arrived yet, its arrival order (``rt_mbarrier_race_clock``). Since version 15 also an
    arrival's token read other than by a wait (``_token_misuse``) and a plain read of an mbarrier object's word."""
    out: list[tuple[Instruction, str]] = []
    users: dict[str, list[Instruction]] = {}
    for ins in prov.instructions:
        for r in sources(ins):
            users.setdefault(r, []).append(ins)
    # the mbarrier objects (what mbarrier.init names): a plain read of one is its phase and pending count as data
    # (rt13_mbarrier_word_clock: ld.volatile.shared.u64 of the barrier's word)
    objects = frozenset().union(*(prov.address_roots(i) for i in prov.instructions
                                  if i.opcode == "mbarrier" and i.modifiers[:1] == ("init",))) - {UNKNOWN}
    if objects:
        out += [(i, "reads an mbarrier object's word as data: its phase and pending arrival count, the order in "
                    "which threads arrived (the workload declares no atomics)")
                for i in prov.instructions if i.opcode != "mbarrier" and _loads_registers(i)
                and prov.address_roots(i) & objects]
    for f in prov.functions:
        blocks = blocks_of(f)
        lps = None
        for b in blocks:
            for ins in b.instructions:
                misuse = _token_misuse(ins, users) if ins.opcode == "mbarrier" and ins.modifiers[:1] in (
                    ("arrive",), ("arrive_drop",)) else None
                if misuse is not None:
                    out.append((misuse, "reads the state token an mbarrier arrival returned other than to wait on it: "
                                        "the token holds the phase's pending arrival count (what pending_count "
                                        "decodes), the order in which threads arrived (the workload declares no "
                                        "atomics)"))
                    continue
                if ins.opcode == "mbarrier" and "pending_count" in ins.modifiers:
                    out.append((ins, "reads an mbarrier's pending arrival count: the order in which threads "
                                     "arrived, which racecheck does not report (the workload declares no atomics)"))
                    continue
                if not _mbarrier_wait(ins):
                    continue
                dst = destinations(ins)
                if lps is None:
                    lps = sorted(loops(f, cfg(f, blocks)), key=lambda lp: -lp.depth)
                inner = next((lp for lp in lps if b.id in lp.blocks), None)
                if dst and inner is not None and _retries_on(dst[0], inner, blocks, prov.instructions):
                    continue
                out.append((ins, "tests an mbarrier's phase other than in a loop that only retries the test until "
                                 "it succeeds (a single test, or a loop that also counts or decides on something "
                                 "else): whether or how long before another thread arrived, the order of their "
                                 "arrival, a clock (the workload declares no atomics)"))
    return out


def _token_misuse(arrive: Instruction, users: dict[str, list[Instruction]]) -> Instruction | None:
    """The first instruction that reads the state token ``arrive`` (an ``mbarrier.arrive``) returns, through
    ``mov`` copies, for anything but the state operand of an ``mbarrier.test_wait``/``try_wait`` (or
    ``pending_count``, rule 4's own finding), or None. The token is opaque by the PTX ISA ("mbarrier.arrive": an
    opaque state for a later wait), and its bits hold the pending count (ptxas lowers ``pending_count`` for sm_90 to
    a shift and mask of it: ``rt12_arrive_token_clock`` decoded it by hand)."""
    todo, seen = list(destinations(arrive)), set()
    while todo:
        r = todo.pop()
        if r in seen:
            continue
        seen.add(r)
        for u in users.get(r, ()):
            if u.opcode == "mov":
                todo.extend(destinations(u))
            elif not (u.opcode == "mbarrier" and u.modifiers[:1] in (("test_wait",), ("try_wait",), ("pending_count",))):
                return u
    return None


def _retries_on(pred: str, lp, blocks, instructions: list[Instruction]) -> bool:
    """Whether loop ``lp`` is a retry loop on predicate ``pred`` (an mbarrier test's result): the registers the
    loop computes from ``pred`` alone (and constants: nvcc's ``selp``/``setp`` of the inline asm's result) guard
    every conditional branch in it, no instruction anywhere reads them but those branches and that computation,
    and the loop computes nothing else but constants (gate rules version 11: a count of the retries is a clock,
    which rule 6 left to loops that write memory)."""
    body = [i for b in sorted(lp.blocks) for i in blocks[b].instructions]
    derived, steps = {pred}, set()
    changed = True
    while changed:
        changed = False
        for i in body:
            srcs, dst = sources(i), destinations(i)
            if dst and srcs and id(i) not in steps and i.predicate is None and set(srcs) <= derived \
                    and i.opcode in ("mov", "selp", "setp", "not", "and", "or", "xor"):
                steps.add(id(i))
                derived |= set(dst)
                changed = True
    guards = set()
    for b in lp.blocks:
        t = blocks[b].terminator
        if t is not None and t.predicate is not None:
            if t.opcode != "bra" or t.predicate.register.name not in derived:
                return False
            guards.add(id(t))
    if not guards:
        return False
    # nothing else computed while waiting (a count of the retries kept in a register is a clock): the wait,
    # what is derived from it, the branches and constants (nvcc's parity operand, `mov.u32 %r, 0`)
    for i in body:
        if _mbarrier_wait(i) or id(i) in steps or i.opcode == "bra" or (destinations(i) and not sources(i)):
            continue
        return False
    users = [i for i in instructions if set(sources(i)) & derived
             or (i.predicate is not None and i.predicate.register.name in derived)]
    return all(id(i) in guards or id(i) in steps for i in users)


# Instructions through which a register keeps holding (an offset into) the address ``mapa`` gave.
_ADDRESS_ARITH = frozenset({"mov", "add", "sub", "mad", "cvt", "cvta", "selp"})
_PLAIN_ACCESS = frozenset({"ld", "ldu", "st", "atom", "red"})


def _remote_registers(fn) -> set[str]:
    """Registers of ``fn`` that hold an address ``mapa`` produced (another CTA's shared memory in the cluster), or
    one computed from such an address by ``_ADDRESS_ARITH`` (the guard predicate is not a source of it)."""
    instrs = flat_instructions(fn)
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for ins in instrs:
            srcs = sources(ins)[1:] if ins.predicate is not None else sources(ins)
            if ins.opcode == "mapa" or (ins.opcode in _ADDRESS_ARITH and any(r in out for r in srcs)):
                for r in destinations(ins):
                    if r not in out:
                        out.add(r)
                        changed = True
    return out


def _remote_access(ins: Instruction, remote: set[str]) -> bool:
    """An access of distributed shared memory: an ``ld``/``ldu``/``st``/``atom``/``red`` in ``.shared::cluster``,
    or any instruction with an address operand in a register of ``remote`` (generic, as nvcc writes
    ``cluster.map_shared_rank``): a bulk copy into or out of a peer's shared memory (``cp.async.bulk``), a remote
    ``mbarrier`` arrival or ``st.async`` (``rt12_cluster_bulk_push``: a push into the peer by ``cp`` was none). A
    bulk or tensor copy's ``.shared::cluster`` destination alone does not count: on sm_90 it is also the only
    form of a copy into the CTA's own shared memory (a TMA load)."""
    if ins.opcode == "mapa":
        return False
    if ins.opcode in _PLAIN_ACCESS and any(m == "shared::cluster" for m in ins.modifiers):
        return True
    return any(isinstance(o, Address) and isinstance(o.base, Register) and o.base.name in remote
               for o in ins.operands)


def _cluster_barrier_step(ins: Instruction, arrived: bool, relaxed_ok: bool) -> tuple[bool, bool]:
    """(arrived, done) after ``ins`` on a path: an unpredicated ``barrier.cluster.arrive`` (not ``.relaxed`` unless
    ``relaxed_ok``) arrives; an unpredicated ``barrier.cluster.wait`` after an arrival completes the barrier."""
    if ins.opcode != "barrier" or "cluster" not in ins.modifiers or ins.predicate is not None:
        return arrived, False
    if "arrive" in ins.modifiers and (relaxed_ok or "relaxed" not in ins.modifiers):
        return True, False
    return arrived, arrived and "wait" in ins.modifiers


def _unbarriered_path(blocks, start: tuple[int, int], target: Callable[[Instruction], bool],
                      relaxed_ok: bool, to_exit: bool) -> Instruction | None:
    """The first instruction ``target`` accepts that a path from ``start`` (block id, position) reaches with no
    cluster barrier (``_cluster_barrier_step``) completed on the way; with ``to_exit`` the path's end (``ret``,
    ``exit``, or a block without successors: its last instruction) counts as a target too. None: every path
    crosses one."""
    stack = [(start[0], start[1], False)]
    seen: set[tuple[int, int, bool]] = set()
    while stack:
        b, pos, arrived = stack.pop()
        if (b, pos, arrived) in seen:
            continue
        seen.add((b, pos, arrived))
        blk, done = blocks[b], False
        for ins in blk.instructions[pos:]:
            if target(ins):
                return ins
            arrived, done = _cluster_barrier_step(ins, arrived, relaxed_ok)
            if done:
                break
            if ins.opcode in ("ret", "exit") and ins.predicate is None:
                done = True
                break
        if done:
            continue
        if not blk.successors:
            if to_exit and blk.instructions:
                return blk.instructions[-1]
            continue
        stack.extend((t, 0, arrived) for t in blk.successors)
    return None


def _cluster_lifetimes(kernel: Kernel, prov: Provenance, blocks_of: Callable[[Any], list]
                       ) -> list[tuple[Instruction, str]]:
    """Rule 7 (module docstring): in a cluster launch, accesses of another CTA's shared memory that a path from
    the entry reaches before any cluster barrier, or from which a path reaches the kernel's exit without one."""
    fn = kernel.module.function(kernel.entry)
    if not _clustered(kernel, fn):
        return []
    remote = _remote_registers(fn)
    with_remote = {f.name for f in prov.functions[1:]
                   if any(_remote_access(i, _remote_registers(f)) for i in flat_instructions(f))}

    def is_remote(ins: Instruction) -> bool:
        if ins.opcode == "call":
            return any(n in with_remote for n in prov.called(ins))
        return _remote_access(ins, remote)

    blocks = blocks_of(fn)
    out: list[tuple[Instruction, str]] = []
    first = _unbarriered_path(blocks, (0, 0), is_remote, relaxed_ok=True, to_exit=False)
    if first is not None:
        out.append((first, "accesses another CTA's shared memory on a path from the entry that crosses no cluster "
                           "barrier (barrier.cluster.arrive, then .wait): that CTA may not have started (CUDA C++ "
                           "Programming Guide, \"Distributed Shared Memory\")"))
    for b in blocks:
        for i, ins in enumerate(b.instructions):
            if not is_remote(ins):
                continue
            end = _unbarriered_path(blocks, (b.id, i + 1), lambda x: x.opcode in ("ret", "exit"), relaxed_ok=False,
                                    to_exit=True)
            if end is not None:
                out.append((ins, "accesses another CTA's shared memory, and a path from it reaches the kernel's exit "
                                 "with no cluster barrier (barrier.cluster.arrive, then .wait) after it: every CTA "
                                 "runs this code, so the CTA whose shared memory it reads may already have exited "
                                 "(CUDA C++ Programming Guide, \"Distributed Shared Memory\": a block must not exit "
                                 "before the distributed shared memory accesses to it are done)"))
                return out
    return out


def race_lint(kernel: Kernel, prov: Provenance | None = None, float_atomics_ok: bool = True,
              launch_state_ok: bool = True, waits_ok: bool = True, order_ok: bool = True) -> RaceReport:
    """Lint ``kernel``'s entry, and every function it calls, for the patterns of the module docstring.

    prov: the entry's provenance when already computed (``InputStoreReport.provenance``), else computed here;
    float_atomics_ok / launch_state_ok / waits_ok / order_ok: rule 4 / rule 5 / rule 6 / rule 4's order form off
    (the default, for kernels of no workload); the evaluation pipeline passes ``Workload.uses_atomics`` for all
    four.
    Returns a RaceReport (lines in the module's canonical listing); ValueError when the entry has no body.
    """
    fn = kernel.module.function(kernel.entry)
    prov = prov if prov is not None else provenance(kernel)
    cut: dict[int, list] = {}  # id(function) -> its basic blocks, cut once for every rule that walks them

    def blocks_of(f: Any) -> list:
        if id(f) not in cut:
            cut[id(f)] = basic_blocks(f)
        return cut[id(f)]

    hits: list[tuple[str, Instruction, str]] = []
    hits += [("time_dependent", ins, why) for ins, why in _time_reads(prov)]
    if not waits_ok:
        hits += [("wall_clock_wait", ins, why) for ins, why in _wall_clock_waits(prov)]
        hits += [("wall_clock_wait", ins, why) for ins, why in _shared_spin_waits(kernel, prov, blocks_of)]
    if not float_atomics_ok:
        hits += [("float_atomic", ins, why) for ins, why in _float_atomics(prov)]
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
    clustered = _clustered(kernel, fn)
    if any(_meets(r, written) for r in reads):  # a global location both written and read: may pass between CTAs
        for f in prov.functions or [fn]:
            blocks = blocks_of(f)
            if not clustered or not waits_ok:  # version 10: no cluster exemption without atomics
                hits += [("spin_wait", ins, why) for ins, why in _spin_waits(f, prov, written, blocks)]
            hits += [("unfenced_publish", ins, why)
                     for ins, why in _unfenced_publishes(prov, blocks, loaded, clustered)]
    hits += [("cluster_lifetime", ins, why) for ins, why in _cluster_lifetimes(kernel, prov, blocks_of)]
    if not order_ok:  # after the ordering findings, which say more about what a kernel gets wrong
        hits += [("atomic_order", ins, why) for ins, why in _order_atomics(prov)]
        hits += [("atomic_order", ins, why) for ins, why in _reads_after_reductions(prov, blocks_of)]
        hits += [("atomic_order", ins, why) for ins, why in _mbarrier_observations(prov, blocks_of)]
        hits += [("global_exchange", ins, why) for ins, why in _global_exchanges(prov, blocks_of)]
    if not launch_state_ok:  # last: the ordering findings above say more about what a kernel gets wrong
        hits += [("launch_state", ins, why) for ins, why in _launch_state_writes(kernel, prov)]
        hits += [("launch_state", ins, why) for ins, why in _stale_local_reads(kernel, prov, blocks_of)]
        hits += [("launch_state", ins, why) for ins, why in _stale_shared_reads(kernel, prov, blocks_of)]
        hits += [("launch_state", ins, why) for ins, why in _unvouched_loads(kernel, prov)]
    if not hits:
        return RaceReport([])
    lines = {id(li.node): li for li in listing(kernel.module).lines if li.node is not None}
    found = []
    for kind, ins, why in hits:
        li = lines.get(id(ins))
        found.append(RaceFinding(kind, li.lineno if li else 0, li.text if li else str(ins), why))
    return RaceReport(found)
