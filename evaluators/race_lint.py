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
   performance counter ``%pm*`` (PTX ISA "Special Registers"), and since gate rules version 16 of any special
   register but those the launch and the ABI fix (``_LAUNCH_REGISTERS``: thread, CTA and cluster coordinates and
   counts, lane masks, shared memory sizes, ``%nsmid``: a constant of the device, the same for the worker and the
   sanitizer replay): ``%envreg<32>`` (driver-defined, ``rt14_envreg_dodge``), ``%nwarpid``,
   ``%current_graph_exec``; since version 17 also an entry's ``ld.param`` of bytes outside its parameter list, or
   at an address naming no parameter (``rt15_param_overread``: the launch writes nothing past the ABI's
   parameters). No correct kernel of a deterministic workload
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
   Its registers are resolved to the ``{ }`` block declaring them (``_RegisterScopes``, gate rules version 16):
   two copies of one inline-asm retry loop ``{ .reg .pred p; ... }`` are two registers, neither read elsewhere.
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
   an offset the lint cannot compute needs a store somewhere in the thread's functions to the same variable (a
   local array filled in one loop and read in another); a local load whose address no ``.local`` variable
   vouches for is rejected. Since gate rules version 16 across calls: a called function is summarised by the
   bytes it stores on every path to its return and the bytes it reads before storing them, through its pointer
   parameters (``ld.param`` of one as an address base) and the module's ``.local`` variables, and a call
   stores and reads those bytes of what its arguments point to in the caller (``rt12_callee_local_state``: a
   counter read by a helper through ``&local``; ``rt12_honest_out_param``: an out-parameter a helper fills).
   Cannot see: a read of a variable the thread also stores into at an offset the lint cannot compute (the store
   may land elsewhere in it), nor a read at such an offset of a variable the thread stores into anywhere.
   Its ``.shared`` form rejects a load (``ld``/``ldu``/``ldmatrix``, an ``atom`` result; ``.shared`` or generic
   through a ``.shared`` variable; since version 17 also a ``cp`` copy whose source names one,
   ``rt15_bulk_copy_stale_shared``) of a shared variable that no path from the entry without a back edge reaches
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
   ``rt_laundered_state`` RT_SPACE 2 names y and reads local memory). Since version 16 a ``.shared`` load needs a
   ``.shared`` variable among its roots, and no pointer vouches that is subtracted from the address or combined
   with its own bits (``y + mad(y, -1, K)``, ``y + (K - y)``, ``(y & 0) + K``: ``rt13_cancelled_shared_state``).
   Its register form (gate rules version 16): a read of a register (a source or a guard) that no path from the
   function's entry writes before it, and the ``ld.param`` of a return value after a direct call of a function
   that stores into no ``.param`` return value of its own: the hardware register keeps what the last warp on its
   slot left, a launch counter without memory (``rt14_register_state``, ``rt14_unset_retval_state``). A write on
   any path counts, guarded or not (a may-analysis: nvcc's code reads registers that a skipped load leaves
   unwritten on some paths). Since gate rules version 17 the carry flag is such a register: ``.cc`` instructions
   write it, ``addc``/``subc``/``madc`` read it (``rt15_carry_state``: an ``addc`` with no ``add.cc`` before it,
   which ptxas compiles to a predicate register no instruction writes), and a branch, barrier, exit or call whose
   guard derives from a register read where only guarded instructions wrote it on some path
   (``_guarded_only_decisions``: ``rt14_register_state`` "guarded", a definition under a guard that never holds).
   Cannot see: such a value that decides through arithmetic instead of a guard, a definition on a path never
   taken, a callee that writes its return value on some paths only.
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
   that accesses distributed shared memory counts as an access. Since version 16 an access need not come from
   ``mapa``: any address in ``.shared::cluster`` (or generic, naming a shared variable or vouched for by no
   pointer) that is not provably the CTA's own -- one of its variables plus less than 2^23 bytes, by a range
   analysis of the registers (``_ranges``) -- and any ``.multicast::cluster`` copy counts
   (``rt13_handmade_dsmem_push``: the peer's address by ``and``/``shl``/``or``). Assumed: a ``.shared``/
   ``.shared::cta`` access addresses the CTA's own window (PTX ISA "State Spaces").

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
    _READS_CARRY,
    _STATE_SPACES,
    ALLOCA_ROOT,
    CARRY,
    UNKNOWN,
    Provenance,
    _pos,
    _vouchers,
    alloca_roots,
    destination_space,
    first_finding,
    param_layout,
    provenance,
    writes_memory,
)
from population.ast import (
    Address,
    Immediate,
    Instruction,
    OffsetExpr,
    RegDecl,
    Register,
    Scope,
    SpecialRegister,
    Symbol,
    VarDecl,
    iter_body,
)
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
# Special registers fixed by the launch and the ABI (PTX ISA 9.0 "Special Registers"): the thread's and CTA's
# coordinates and counts in the grid and the cluster, the lane masks, and the shared memory sizes and the reserved
# window the launch configuration gives, and %nsmid (the device's SM count: the same for the worker and the sanitizer
# replay on one GPU). Rule 3 rejects a read of any other: the time and placement registers above, and the rest whose
# value neither the inputs nor the launch fix (%envreg<32>: "driver-defined", %nwarpid: the hardware's,
# %current_graph_exec: how the launch was issued).
_LAUNCH_REGISTERS = frozenset({"%tid", "%ntid", "%laneid", "%ctaid", "%nctaid", "%is_explicit_cluster", "%clusterid",
                               "%nclusterid", "%cluster_ctaid", "%cluster_nctaid", "%cluster_ctarank",
                               "%cluster_nctarank", "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge",
                               "%lanemask_gt", "%total_smem_size", "%aggr_smem_size", "%dynamic_smem_size",
                               "%reserved_smem_offset_begin", "%reserved_smem_offset_end",
                               "%reserved_smem_offset_cap", "%reserved_smem_offset_0", "%reserved_smem_offset_1",
                               "%nsmid"})
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
    if "param" not in load.base_modifiers:
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


def _unfixed_special(name: str) -> bool:
    """Whether special register ``name`` (``%tid.x``: its component dropped) is one rule 3 rejects: any not in
    ``_LAUNCH_REGISTERS`` (an allow-list since gate rules version 16; ``rt14_envreg_dodge`` read ``%envreg0..3``,
    which the deny-list ``_TIME_REGISTERS`` did not name)."""
    return name.split(".", 1)[0] not in _LAUNCH_REGISTERS


def _time_reads(prov: Provenance) -> list[tuple[Instruction, str]]:
    """Rule 3: the instructions that read a special register the launch and the ABI do not fix, naming it."""
    out = []
    for ins in prov.instructions:
        regs = sorted({o.name for o in _operands_flat(ins.operands)
                       if isinstance(o, SpecialRegister) and _unfixed_special(o.name)})
        if not regs:
            continue
        timed = [r for r in regs if r in _TIME_REGISTERS]
        if timed:
            out.append((ins, f"reads {timed[0]}: a result or a path that depends on time, on where the thread runs or "
                             "on what ran before (a kernel can tell a slow, instrumented or timed launch from another)"))
        else:
            out.append((ins, f"reads {regs[0]}: a special register that neither the inputs nor the launch configuration "
                             "fix (driver-defined or the hardware's, PTX ISA \"Special Registers\"): a result or a path "
                             "that can differ between launches (a kernel can tell an instrumented or replayed launch "
                             "from another)"))
    return out


def _param_overreads(kernel: Kernel) -> list[tuple[Instruction, str]]:
    """Rule 3's parameter form (gate rules version 17): an ``ld.param`` of the entry that reads bytes outside its
    parameters (``input_stores.param_layout``), or at an address the lint cannot bound (a parameter's address in a
    register; a call site's own ``.param`` variables are no kernel parameters and are left alone). The launch
    writes the ABI's parameters and nothing past them; the bytes there are whatever the
    driver left in the constant bank (``rt15_param_overread`` read bytes 36-43 of a 36-byte list and kept its
    barrier on them), a value neither the inputs nor the launch fix, like a special register off the allow-list."""
    fn = kernel.module.function(kernel.entry)
    layout = param_layout(fn)
    offsets = {p.name: off for p, (off, _) in zip(fn.params, layout)}
    end = layout[-1][0] + layout[-1][1] if layout else 0
    out = []
    for ins in flat_instructions(fn):
        if ins.opcode not in ("ld", "ldu") or "param" not in ins.base_modifiers:
            continue
        addr = next((o for o in ins.operands if isinstance(o, Address)), None)
        if addr is None:
            continue
        if isinstance(addr.base, Symbol) and addr.base.name not in offsets:
            continue  # a call's own .param variable (an argument or return value the call site declares)
        if not isinstance(addr.base, Symbol):
            out.append((ins, "reads kernel parameter memory at an address held in a register (it cannot be bounded "
                             "to the parameter list): bytes past the parameters are not written by the launch"))
            continue
        start = offsets[addr.base.name] + (addr.offset or 0)
        nbytes = _access_bytes(ins) or 1
        if start < 0 or start + nbytes > end:
            out.append((ins, f"reads parameter bytes [{start}, {start + nbytes}) of an entry whose parameters end at "
                             f"byte {end}: the launch writes nothing there, so the value is whatever the driver left "
                             "(neither the inputs nor the launch configuration fix it)"))
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
    """Roots (``"s:<name>"``) of the ``.local`` variables ``fn`` may name: the module's and its own (any scope).
    (The buffers ``alloca`` returns are among ``_variables(.., ("local",))``, which every caller adds.)"""
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


def _param_pointer(d: Instruction, fn) -> tuple[str, int] | None:
    """("a:<i>", 0) when ``d`` loads the whole of ``fn``'s ``.param`` i (a called function's pointer parameter:
    ``ld.param.u64 %rd1, [f_param_0]``), else None. Entries' parameters are the kernel's arguments, no such base."""
    addr = next((o for o in d.operands if isinstance(o, Address)), None)
    if fn.is_entry or d.opcode != "ld" or "param" not in d.base_modifiers or addr is None or addr.offset \
            or not isinstance(addr.base, Symbol) or len(destinations(d)) != 1:
        return None
    i = next((k for k, q in enumerate(fn.params) if q.name == addr.base.name), None)
    if i is None or (_access_bytes(d) or 0) * 8 != TYPE_BITS.get(fn.params[i].type, 0):
        return None
    return (f"a:{i}", 0)


def _local_offsets(fn, local: frozenset[str]) -> dict[str, tuple[str, int]]:
    """Register -> (``.local`` root, constant byte offset) where every definition of the register is ``mov`` of a
    ``.local`` variable or of such a register, ``cvta.local``/``cvta.to.local`` of one, or ``add``/``sub`` of one
    and an immediate (nvcc's ``__local_depot`` addressing, ``cvta.local`` of a named variable); in a called
    function, a pointer parameter loaded whole is such a base too (root ``"a:<i>"``, ``_param_pointer``: what the
    caller's argument points to, resolved at each call site by ``_stale_local_reads``)."""
    defs: dict[str, list[Instruction]] = {}
    for ins in flat_instructions(fn):
        for r in destinations(ins):
            defs.setdefault(r, []).append(ins)
    allocas = alloca_roots(fn)
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
                v = _param_pointer(d, fn) if d.predicate is None else None
                if v is not None:
                    pass
                elif d.opcode == "alloca" and d.predicate is None and id(d) in allocas:
                    v = (allocas[id(d)], 0)  # the start of the buffer it returns
                elif d.opcode in ("mov", "cvta") and len(ops) == 1 and isinstance(ops[0], Register) \
                        and ops[0].name == reg and d.predicate is None:
                    continue  # `cvta.to.local %rd1, %rd1`: the same location, relabelled
                elif d.opcode in ("mov", "cvta") and len(ops) == 1 and d.predicate is None:
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


def _written_on_every_path(blocks, sites: dict[int, _LocalAccess], calls: dict[int, _CallEffect] | None = None
                           ) -> dict[int, frozenset | None]:
    """Block id -> the (root, byte) pairs every path from the entry has stored before the block (None:
    unreachable), a forward must-analysis (meet: intersection; unvisited predecessors count as every byte); an
    unguarded ``call`` stores what ``calls`` says its functions store on every path."""
    calls = calls or {}

    def transfer(b, state: frozenset) -> frozenset:
        cur = set(state)
        for ins in b.instructions:
            a = sites.get(id(ins))
            if a is not None and a[0] == "store" and _guard(ins) is None:  # a guarded store may not run
                _stores_into(cur, a)
            c = calls.get(id(ins))
            if c is not None and _guard(ins) is None:
                cur |= c.writes
        return frozenset(cur)

    return _forward(blocks, _predecessors(blocks), lambda outs: frozenset.intersection(*outs), transfer)


@dataclass(frozen=True)
class _LocalSummary:
    """What a called function does to local memory its caller can name (rule 5's ``.local`` form across calls):
    writes, the (root, byte) pairs it stores on every path to its return; reads, its loads of bytes it did not
    store first on every path, as (the load, root, offset, size, the guard). Roots: ``"a:<i>"`` (what pointer
    parameter i points to) or a module ``.local`` variable's."""

    writes: frozenset[tuple[str, int]]
    reads: tuple[tuple[Instruction, str, int, int], ...]


@dataclass(frozen=True)
class _CallEffect:
    """A ``call``'s summary in its caller's terms: writes, the (root, byte) pairs the called functions store on
    every path; reads, the bytes they read first, as (the callee's load, root, offset, size); unknown, the caller's
    ``.local`` roots an argument points into at an offset the lint cannot compute (a read of them needs a store
    somewhere, as a load at such an offset does)."""

    writes: frozenset[tuple[str, int]]
    reads: tuple[tuple[Instruction, str, int, int], ...]
    unknown: frozenset[str]


def _call_arguments(fn) -> dict[int, list]:
    """id(call) -> the operand each of its arguments carries: a register or immediate named in the call, or what
    the last ``st.param`` before it stored into the ``.param`` variable named (nvcc's ``st.param.b64 [param0],
    %rd21`` in the call's own scope)."""
    stored: dict[str, Any] = {}
    out: dict[int, list] = {}
    for ins in flat_instructions(fn):
        addr = next((o for o in ins.operands if isinstance(o, Address)), None)
        if ins.opcode == "st" and "param" in ins.base_modifiers and addr is not None and isinstance(addr.base, Symbol) \
                and not addr.offset and len(ins.operands) == 2:
            stored[addr.base.name] = ins.operands[1]
        elif ins.opcode == "call":
            ops = ins.operands
            k = 1 if ops and hasattr(ops[0], "elements") and not isinstance(ops[0], Symbol) else 0
            args = getattr(ops[k + 1], "elements", ()) if k + 1 < len(ops) else ()
            out[id(ins)] = [stored.get(a.name, a) if isinstance(a, Symbol) else a for a in args]
    return out


def _call_effect(ins: Instruction, args: list, names: list[str], summaries: dict[str, _LocalSummary | None],
                 offsets: dict[str, tuple[str, int]], prov: Provenance, local: frozenset[str]) -> _CallEffect:
    """A call's ``_CallEffect``: each callee's summary with ``"a:<i>"`` replaced by where argument i points in the
    caller (its ``.local`` root and offset, ``_local_offsets``; roots at an unknown offset go to ``unknown``, other
    arguments to nothing: global memory). Several callees (an indirect call): the writes all of them make, the reads
    of any. A callee without a summary (a recursive call) writes nothing and may read whatever its arguments
    point to."""

    def where(i: int) -> tuple[str, int] | frozenset[str] | None:
        a = args[i] if i < len(args) else None
        if isinstance(a, Register):
            return offsets.get(a.name) or (prov.register_roots(ins, a.name) & local or None)
        return None

    writes: frozenset[tuple[str, int]] | None = None
    reads: list[tuple[Instruction, str, int, int]] = []
    unknown: set[str] = set()
    for n in names:
        summ = summaries.get(n)
        if summ is None:
            writes = frozenset()
            for i in range(len(args)):
                w = where(i)
                unknown |= set(w) if isinstance(w, frozenset) else {w[0]} if w else set()
            continue
        mine: set[tuple[str, int]] = set()
        for root, byte in summ.writes:
            w = where(int(root[2:])) if root.startswith("a:") else (root, 0)
            if isinstance(w, tuple):
                mine.add((w[0], w[1] + byte))
        writes = frozenset(mine) if writes is None else writes & mine
        for load, root, off, size in summ.reads:
            w = where(int(root[2:])) if root.startswith("a:") else (root, 0)
            if isinstance(w, tuple):
                reads.append((load, w[0], w[1] + off, size))
            elif w:
                unknown |= w
    return _CallEffect(writes or frozenset(), tuple(reads), frozenset(unknown))


def _call_order(prov: Provenance) -> list:
    """``prov.functions`` callees first (a depth-first post-order of the calls from the entry); a function on a
    cycle comes before some caller that has no summary of it yet (``_call_effect``: no summary)."""
    bodies = {f.name: f for f in prov.functions}
    order: list = []
    state: dict[str, int] = {}

    def visit(f) -> None:
        state[f.name] = 1
        for ins in flat_instructions(f):
            if ins.opcode == "call":
                for n in prov.called(ins):
                    if n in bodies and n not in state:
                        visit(bodies[n])
        state[f.name] = 2
        order.append(f)

    for f in prov.functions:
        if f.name not in state:
            visit(f)
    return order


def _stale_local_reads(kernel: Kernel, prov: Provenance, blocks_of: Callable[[Any], list] = basic_blocks
                       ) -> list[tuple[Instruction, str]]:
    """Rule 5's second form (module docstring): loads of ``.local`` memory no store of the thread wrote before.
    Since gate rules version 16 across calls: each called function is summarised (``_LocalSummary``) before its
    callers, a call stores what its functions store on every path through its pointer arguments and reads what
    they read first (``rt12_callee_local_state``: a counter read by a helper through ``&local``;
    ``rt12_honest_out_param``: a helper that fills the caller's out-parameter)."""
    out: list[tuple[Instruction, str]] = []
    module_local = frozenset("s:" + it.name for it in kernel.module.items
                             if isinstance(it, VarDecl) and it.state_space == "local")
    every_local = _variables(kernel, prov, ("local",))
    if not every_local and not any(destination_space(i) == "local" for i in prov.instructions):
        return out  # no local memory named anywhere: nothing to read stale (the common case)
    summaries: dict[str, _LocalSummary | None] = {}
    found: dict[int, tuple[Instruction, str]] = {}
    stored_any: set[str] = set()  # every .local root some function stores into (at any offset)
    analysed = []
    for fn in _call_order(prov):
        local = _local_variables(kernel, fn) | every_local
        offsets = _local_offsets(fn, local)
        sites = {id(i): a for i in flat_instructions(fn) if (a := _local_access(i, prov, local, offsets)) is not None}
        analysed.append((fn, local, offsets, sites))
        stored_any |= {r for a in sites.values() if a[0] == "store" for r in a[1]}
    if not any(a[0] == "load" for *_, sites in analysed for a in sites.values()):
        return out
    # variables some function stores into at an offset the lint cannot compute (a local array filled in a loop, here
    # or by a called function through a pointer): a load of them at a known offset is not judged
    somewhere = frozenset().union(*(a[1] for *_, sites in analysed for a in sites.values() if a[0] == "store" and
                                    (a[2] is None or a[3] is None or len(a[1]) != 1)))
    every_calls = []
    for fn, local, offsets, sites in analysed:
        args = _call_arguments(fn)
        calls = {k: _call_effect(c, args[k], prov.called(c), summaries, offsets, prov, local)
                 for c in flat_instructions(fn) if c.opcode == "call" and (k := id(c)) in args and prov.called(c)}
        stored_any |= {r for c in calls.values() for r, _ in c.writes}
        summaries[fn.name] = _local_function(fn, blocks_of(fn), sites, calls, module_local, somewhere, found)
        every_calls.append((fn, sites, calls))
    analysed = every_calls
    # loads at offsets the lint cannot compute need a store into the variable somewhere in the thread's functions;
    # an alloca'd buffer's (fresh in its function) a store into it on a path of that function that reaches the load
    # (gate rules version 17, red-team round 18: rt18_alloca_unknown_offset_state read its counter before any store)
    for fn, sites, calls in analysed:
        reaching = _alloca_stores_reaching(fn, blocks_of(fn), sites, calls)
        for ins in flat_instructions(fn):
            a = sites.get(id(ins))
            if a is not None and a[0] == "load" and not (len(a[1]) == 1 and a[2] is not None and a[3] is not None):
                roots = a[1]
                fresh = {r for r in roots if r.startswith(ALLOCA_ROOT)} - reaching.get(id(ins), frozenset())
                if not roots:
                    found[id(ins)] = (ins, "reads local memory at an address no .local variable of this function "
                                           "vouches for")
                elif not roots <= stored_any:
                    found[id(ins)] = (ins, f"reads the .local variable {sorted(roots - stored_any)[0][2:]!r}, which "
                                           "no store of this thread writes")
                elif fresh:
                    found[id(ins)] = (ins, f"reads the alloca'd buffer {sorted(fresh)[0][2:]!r} at an offset the lint "
                                           "cannot compute, which no store of this function reaches first")
            c = calls.get(id(ins))
            if c is not None and not c.unknown <= stored_any:
                found[id(ins)] = (ins, f"passes a pointer into the .local variable "
                                       f"{sorted(c.unknown - stored_any)[0][2:]!r}, which no store of this thread "
                                       "writes, to a function that reads it")
    for ins, why in found.values():
        out.append((ins, why + ": what an earlier launch left on the same hardware thread slot (local memory is not "
                               "cleared between launches), state that outlives the launch"))
    return out


def _alloca_stores_reaching(fn, blocks, sites: dict[int, _LocalAccess], calls: dict[int, _CallEffect]
                            ) -> dict[int, frozenset[str]]:
    """id(load) -> the ``alloca`` roots some store of ``fn`` (or a call's writes) reaches it with, along any path
    of the function's control flow (back edges included: a loop's earlier iteration counts). A forward
    may-analysis; only the loads of ``sites`` are keyed."""

    def stored(ins: Instruction) -> frozenset[str]:
        a = sites.get(id(ins))
        r = frozenset(a[1]) if a is not None and a[0] == "store" else frozenset()
        c = calls.get(id(ins))
        return r | (frozenset(root for root, _ in c.writes) if c is not None else frozenset())

    def transfer(b, st: frozenset) -> frozenset:
        cur = set(st)
        for ins in b.instructions:
            cur |= stored(ins)
        return frozenset(cur)

    state = _forward(blocks, _predecessors(blocks), lambda outs: frozenset().union(*outs), transfer)
    out: dict[int, frozenset[str]] = {}
    for b in blocks:
        if state[b.id] is None:
            continue
        cur = set(state[b.id])
        for ins in b.instructions:
            a = sites.get(id(ins))
            if a is not None and a[0] == "load":
                out[id(ins)] = frozenset(r for r in cur if r.startswith(ALLOCA_ROOT))
            cur |= stored(ins)
    return out


def _local_function(fn, blocks, sites: dict[int, _LocalAccess], calls: dict[int, _CallEffect],
                    module_local: frozenset[str], stored_somewhere: frozenset[str],
                    found: dict[int, tuple[Instruction, str]]) -> _LocalSummary | None:
    """One function of ``_stale_local_reads``: record in ``found`` its loads at known offsets (and its calls'
    first reads, ``calls``) of bytes no store wrote before them on every path, when they name the function's own
    variables (the entry: every variable) and no function stores into the variable at an unknown offset
    (``stored_somewhere``); return its summary for its callers (the writes on every path to a return and the first
    reads of what its pointer parameters and the module's ``.local`` variables hold)."""
    passed_up = (lambda root: False) if fn.is_entry else (lambda root: root.startswith("a:") or root in module_local)
    reads: list[tuple[Instruction, str, int, int]] = []
    states = _written_on_every_path(blocks, sites, calls)
    ends: list[frozenset] = []
    for b, st in zip(blocks, states.values()):
        if st is None:
            continue  # unreachable
        cur = set(st)
        # bytes stored in this block under a guard (register, negated) not redefined since: they count for a
        # load under the same guard (gate rules version 11; version 10 counted a guarded store for every load)
        guarded: dict[tuple[str, bool], set[tuple[str, int]]] = {}

        def check(load: Instruction, root: str, off: int, size: int, have: set, why_at: Instruction) -> None:
            if root in stored_somewhere or all((root, off + k) in have for k in range(size)):
                return
            if passed_up(root):
                reads.append((load, root, off, size))
            else:
                found.setdefault(id(why_at), (load, f"reads {size} bytes at offset {off} of the .local variable "
                                                    f"{root[2:]!r} that no store of this thread wrote before it on "
                                                    "every path" + ("" if why_at is load else
                                                                    " (in a function called from here)")))

        for ins in b.instructions:
            for r in destinations(ins):
                guarded = {g: v for g, v in guarded.items() if g[0] != r}
            guard = _guard(ins)
            have = cur | guarded.get(guard, set()) if guard is not None else cur
            c = calls.get(id(ins))
            if c is not None:
                for load, root, off, size in c.reads:
                    check(load, root, off, size, have, ins)
                if guard is None:
                    cur |= c.writes
                continue
            a = sites.get(id(ins))
            if a is None:
                continue
            if a[0] == "store":
                _stores_into(cur if guard is None else guarded.setdefault(guard, set()), a)
                continue
            _, roots, off, size = a
            if len(roots) == 1 and off is not None and size is not None:
                check(ins, next(iter(roots)), off, size, have, ins)
        if not b.successors or (b.terminator is not None and b.terminator.opcode in ("ret", "exit")
                                and b.terminator.predicate is None):
            ends.append(frozenset(cur))
    if fn.is_entry:
        return None
    writes = frozenset.intersection(*ends) if ends else frozenset()
    return _LocalSummary(frozenset(w for w in writes if passed_up(w[0])), tuple(reads))


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
    # a copy out of shared memory reads its source as a load does (``cp.async.bulk`` shared::cta -> shared::cluster or
    # -> global, ``cp.reduce.async.bulk``'s source: rt15_bulk_copy_stale_shared read a stale counter by a TMA copy)
    def read_roots(i: Instruction) -> frozenset[str]:
        r = roots_of(i) if _shared_load(i) or (_rmw(i) and i.opcode != "mbarrier") else frozenset()
        return r | (prov.source_roots(i) & shared) if i.opcode == "cp" else r

    loads = {id(i): r for b in blocks for i in b.instructions if (r := read_roots(i))}
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


def _variables(kernel: Kernel, prov: Provenance, spaces: tuple[str, ...]) -> frozenset[str]:
    """Roots (``"s:<name>"``) of the variables in ``spaces`` that the module or any analysed function declares
    (a callee's pointer parameter carries its callers' variables). One walk per provenance, kept on it (several
    rules ask)."""
    cache = prov.__dict__.setdefault("_race_lint_variables", {})
    if (id(kernel), spaces) not in cache:
        names = {it.name for it in kernel.module.items if isinstance(it, VarDecl) and it.state_space in spaces}
        allocas: set[str] = set()
        for f in prov.functions:
            names |= {loc.stmt.name for loc in walk(f)
                      if isinstance(loc.stmt, VarDecl) and loc.stmt.state_space in spaces}
            if "local" in spaces:
                allocas |= set(alloca_roots(f).values())
        cache[(id(kernel), spaces)] = frozenset("s:" + n for n in names) | frozenset(allocas)
    return cache[(id(kernel), spaces)]


def _pointer_vouchers(P: frozenset[str], W: frozenset[str]) -> frozenset[str]:
    """The pointer roots that vouch for an address of pointer roots P and bit roots W: added and never subtracted
    (``input_stores._vouchers``), not ``UNKNOWN``, and not among the address's own bit roots. A pointer's bits
    added to it may be its negation (``y + mad(y, -1, K)``, ``y + ((y ^ -1) + 1)``: bits, which the provenance
    does not tell from alignment arithmetic), so such a pointer vouches for nothing (gate rules version 16,
    ``rt13_cancelled_shared_state``); ``y + (K - y)`` cancels y by subtraction, ``(y & 0) + K`` adds no pointer."""
    return frozenset(r for r in _vouchers(P) if r != UNKNOWN and r not in W)


def _unvouched(P: frozenset[str], W: frozenset[str], shared: frozenset[str], local: frozenset[str],
               space: str) -> bool:
    """No variable, parameter or buffer vouches for a load address of pointer roots P and bit roots W in
    ``space``. A ``.shared`` address needs a ``.shared`` variable among its roots (pointer or bit roots: nvcc
    zero-extends a 32-bit shared address with ``cvt``): nothing else can name the CTA's shared memory, whatever
    else the address holds (a global buffer's root whose offset cancels it names the window through a constant:
    ``rt13_cancelled_shared_state``). A generic address needs a ``.shared`` or ``.local`` variable among its roots
    (the forms that follow variables judge it as that variable) or a pointer root that vouches
    (``_pointer_vouchers``): built from constants, through control flow bit by bit, loaded from memory
    (``UNKNOWN`` alone), or with every pointer cancelled it may point anywhere in the thread's windows."""
    named = _pos(P) | W
    if space == "shared":
        return not named & shared
    return not named & (shared | local) and not _pointer_vouchers(P, W)


def _unvouched_loads(kernel: Kernel, prov: Provenance) -> list[tuple[Instruction, str]]:
    """Rule 5's address form (gate rules version 11; version 16: ``_unvouched``): a generic or ``.shared`` load
    (``ld``/``ldu``/``ldmatrix``, an ``atom`` result) whose address no variable or parameter vouches for. Such an
    address may point anywhere in the thread's local window or the CTA's shared window, so the forms above, which
    follow variables, cannot say what it reads; ``rt_laundered_state`` rebuilt its counter's address bit by bit
    through branches, ``rt13_cancelled_shared_state`` added y to a constant less y. (An ``ld.local`` at such an
    address is the ``.local`` form's own finding.)"""
    shared, local = _variables(kernel, prov, ("shared",)), _variables(kernel, prov, ("local",))
    out = []
    for ins in prov.instructions:
        space = destination_space(ins)
        if not _shared_load(ins) or space not in ("generic", "shared"):
            continue
        if not any(isinstance(o, Address) for o in ins.operands):
            continue
        P, W = prov.address_value(ins)
        if _unvouched(P, W, shared, local, space):
            what = ("no .shared variable is among the roots of (a global buffer or a constant names no part of "
                    "the CTA's shared window)" if space == "shared" and (P or W) else
                    "no variable, parameter or buffer vouches for (built from constants or through control flow, "
                    "or every pointer in it cancelled)")
            out.append((ins, f"reads {space} memory at an address {what}: it may read local or shared memory an "
                             "earlier launch left (neither is cleared between launches), state that outlives the "
                             "launch"))
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
             and "param" not in ins.base_modifiers}
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
    scopes = _RegisterScopes(prov.functions)
    users: dict[tuple[int, str], list[Instruction]] = {}
    for ins in prov.instructions:
        for r in sources(ins):
            users.setdefault(scopes.key(ins, r), []).append(ins)
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
                misuse = _token_misuse(ins, users, scopes) if ins.opcode == "mbarrier" and ins.modifiers[:1] in (
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
                if dst and inner is not None and _retries_on(dst[0], inner, blocks, prov.instructions, ins,
                                                             scopes):
                    continue
                out.append((ins, "tests an mbarrier's phase other than in a loop that only retries the test until "
                                 "it succeeds (a single test, or a loop that also counts or decides on something "
                                 "else): whether or how long before another thread arrived, the order of their "
                                 "arrival, a clock (the workload declares no atomics)"))
    return out


def _token_misuse(arrive: Instruction, users: dict[tuple[int, str], list[Instruction]],
                  scopes: _RegisterScopes) -> Instruction | None:
    """The first instruction that reads the state token ``arrive`` (an ``mbarrier.arrive``) returns, through
    ``mov`` copies, for anything but the state operand of an ``mbarrier.test_wait``/``try_wait`` (or
    ``pending_count``, rule 4's own finding), or None. The token is opaque by the PTX ISA ("mbarrier.arrive": an
    opaque state for a later wait), and its bits hold the pending count (ptxas lowers ``pending_count`` for sm_90 to
    a shift and mask of it: ``rt12_arrive_token_clock`` decoded it by hand)."""
    todo, seen = list(scopes.destinations(arrive)), set()
    while todo:
        r = todo.pop()
        if r in seen:
            continue
        seen.add(r)
        for u in users.get(r, ()):
            if u.opcode == "mov":
                todo.extend(scopes.destinations(u))
            elif not (u.opcode == "mbarrier" and u.modifiers[:1] in (("test_wait",), ("try_wait",), ("pending_count",))):
                return u
    return None


def _scope_declarations(body: list) -> frozenset[str]:
    """The register names a ``.reg`` directive directly in ``body`` declares (``%r<4>``: ``%r0`` .. ``%r3``,
    PTX ISA 5.1.1 "Parameterized Variable Names")."""
    out: set[str] = set()
    for s in body:
        if isinstance(s, RegDecl):
            for name, count in s.names:
                out |= {f"{name}{k}" for k in range(count)} if count is not None else {name}
    return frozenset(out)


class _RegisterScopes:
    """Resolves a register name read or written by an instruction to the register it names: a ``.reg`` declared
    in a ``{ }`` block is visible only in that block and hides any register of the same name outside it (PTX ISA
    "Variables": a declaration in a block is local to it), so two copies of nvcc's inline asm
    ``{ .reg .pred p; ... }`` use two registers ``p``. A register is identified by the block that declares it
    (the function for one declared at its top level or not found) and its name; registers of different
    functions never meet."""

    def __init__(self, functions) -> None:  # type: ignore[no-untyped-def]
        self._chain: dict[int, tuple[tuple[int, frozenset[str]], ...]] = {}
        self._fn: dict[int, int] = {}
        for fn in functions:
            self._index(fn)

    def _index(self, fn) -> None:  # type: ignore[no-untyped-def]
        """Record, for each instruction of ``fn``, its function and the blocks around it with their
        declarations (innermost last)."""
        chain: list[tuple[int, frozenset[str]]] = []
        for event, s, _body, _i, _depth in iter_body(fn.body or [], exits=True):
            if event == "enter" and type(s) is Scope:
                chain.append((id(s), _scope_declarations(s.body)))
            elif event == "exit":
                chain.pop()
            elif isinstance(s, Instruction):
                self._chain[id(s)] = tuple(c for c in chain if c[1])
                self._fn[id(s)] = id(fn)

    def key(self, ins: Instruction, name: str) -> tuple[int, str]:
        """The register ``name`` denotes at ``ins``: (the id of its declaring block or function, name)."""
        for scope, names in reversed(self._chain.get(id(ins), ())):
            if name in names:
                return scope, name
        return self._fn.get(id(ins), 0), name

    def sources(self, ins: Instruction) -> set[tuple[int, str]]:
        """The registers ``ins`` reads (its guard predicate too)."""
        out = {self.key(ins, r) for r in sources(ins)}
        if ins.predicate is not None:
            out.add(self.key(ins, ins.predicate.register.name))
        return out

    def destinations(self, ins: Instruction) -> set[tuple[int, str]]:
        """The registers ``ins`` writes."""
        return {self.key(ins, r) for r in destinations(ins)}


def _retries_on(pred: str, lp, blocks, instructions: list[Instruction], wait: Instruction | None = None,
                scopes: _RegisterScopes | None = None) -> bool:
    """Whether loop ``lp`` is a retry loop on predicate ``pred`` (an mbarrier test's result): the registers the
    loop computes from ``pred`` alone (and constants: nvcc's ``selp``/``setp`` of the inline asm's result) guard
    every conditional branch in it, no instruction reads them but those branches and that computation (in the
    loop; after it, wherever the loop's value reaches before the register is written again: ``_reads_after_exit``),
    and the loop computes nothing else but constants (gate rules version 11: a count of the retries is a clock,
    which rule 6 left to loops that write memory)."""
    body = [i for b in sorted(lp.blocks) for i in blocks[b].instructions]
    if scopes is None:
        scopes = _RegisterScopes([])
    derived, steps = {scopes.key(wait, pred) if wait is not None else (0, pred)}, set()
    changed = True
    while changed:
        changed = False
        for i in body:
            srcs, dst = {scopes.key(i, r) for r in sources(i)}, scopes.destinations(i)
            if dst and srcs and id(i) not in steps and i.predicate is None and srcs <= derived \
                    and i.opcode in ("mov", "selp", "setp", "not", "and", "or", "xor"):
                steps.add(id(i))
                derived |= dst
                changed = True
    guards = set()
    for b in lp.blocks:
        t = blocks[b].terminator
        if t is not None and t.predicate is not None:
            if t.opcode != "bra" or scopes.key(t, t.predicate.register.name) not in derived:
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
    if any(scopes.sources(i) & derived and id(i) not in guards and id(i) not in steps for i in body):
        return False
    # outside the loop: a read the loop's value reaches on a path from its exit; an instruction in no block
    # (code the CFG does not reach) is judged as a reader, flow-insensitively
    in_cfg = {id(j) for b in blocks for j in b.instructions}
    return not _reads_after_exit(derived, lp, blocks, scopes) and not any(
        scopes.sources(i) & derived for i in instructions if id(i) not in in_cfg)


def _reads_after_exit(derived: set, lp, blocks, scopes: _RegisterScopes) -> bool:
    """Whether a path from an exit of loop ``lp`` reads one of ``derived`` (register keys of the retry's result)
    before an unguarded write of it: the loop's own value reaches that read. Flow-sensitive, so that a copy of
    the retry loop (the ``unroll`` operator's) that writes the same function-scope registers again before it
    reads them is no reader of this loop's result (reaching definitions over the CFG's blocks)."""
    todo = [(s, frozenset(derived)) for b in lp.blocks for s in blocks[b].successors if s not in lp.blocks]
    seen: set = set()
    while todo:
        b, live = todo.pop()
        if (b, live) in seen:
            continue
        seen.add((b, live))
        cur = set(live)
        for ins in blocks[b].instructions:
            if scopes.sources(ins) & cur:
                return True
            if ins.predicate is None:
                cur -= scopes.destinations(ins)
            if not cur:
                break
        if cur:
            todo += [(s, frozenset(cur)) for s in blocks[b].successors]
    return False


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


# An address of the CTA's own shared memory stays its own within 2^23 bytes of a variable's: on sm_90 a
# shared::cluster address holds the CTA's rank in the cluster in bits 24 and up (ptxas 13.0 forms a shared variable's
# address as `LEA R, SR_CgaCtaId, 0x400 + offset, 0x18`), a window of 16 MiB a CTA of which at most 228 KiB is
# memory, so an offset of less than 2^23 either way cannot reach another CTA's memory (it may fault).
_OWN_REACH = 1 << 23
# A value's range for rule 7: ("n", lo, hi) a number in [lo, hi]; ("a", lo, hi) the address of one of the CTA's own
# shared variables (32-bit shared or 64-bit generic) plus an offset in [lo, hi]; None: anything.
_Range = tuple[str, int, int] | None
_SPECIAL_RANGES = {"%tid": (0, 1023), "%ntid": (1, 1024), "%laneid": (0, 31), "%cluster_ctarank": (0, 15),
                   "%cluster_nctarank": (1, 16), "%nwarpid": (1, 64)}
_WIDEN = 4  # changes of a register's range before it counts as anything (a loop's induction variable)
# Instructions with an address operand that access no memory there (PTX ISA: mapa, getctarank and isspacep compute
# from it; the rest are hints).
_NO_ACCESS = frozenset({"mapa", "getctarank", "isspacep", "prefetch", "prefetchu", "applypriority", "createpolicy"})


def _union(a: _Range, b: _Range) -> _Range:
    """The smallest range holding both (anything when their kinds differ)."""
    if a is None or b is None or a[0] != b[0]:
        return None
    return (a[0], min(a[1], b[1]), max(a[2], b[2]))


def _type_range(ins: Instruction) -> tuple[int, int] | None:
    """The values of ``ins``'s result type (its first type modifier): [-2^(n-1), 2^(n-1) - 1] for ``.s<n>``,
    [0, 2^n - 1] otherwise; None for floating-point or no type."""
    t = next((m for m in ins.modifiers if m in TYPE_BITS), None)
    if t is None or t[0] not in "sub" or t == "bf16" or t == "bf16x2":
        return None
    n = TYPE_BITS[t]
    return (-(1 << (n - 1)), (1 << (n - 1)) - 1) if t[0] == "s" else (0, (1 << n) - 1)


def _number(lo: int, hi: int, ins: Instruction) -> _Range:
    """("n", lo, hi) when it fits ``ins``'s result type (else the value wraps: anything)."""
    tr = _type_range(ins) or (-(1 << 63), (1 << 64) - 1)
    return ("n", lo, hi) if tr[0] <= lo and hi <= tr[1] else None


def _bits_bound(hi: int) -> int:
    """The largest value with no more bits than ``hi`` (an OR or XOR of non-negative values up to hi)."""
    return (1 << max(hi, 0).bit_length()) - 1


def _arith_range(op: str, ins: Instruction, a: _Range, b: _Range) -> _Range:
    """The range of ``op`` (a two-operand integer operation; ``ins`` gives the result type) of ``a`` and ``b``."""
    masks = [v[1] for v in (a, b) if v is not None and v[0] == "n" and v[1] == v[2] and v[1] >= 0]
    if op == "and" and masks and not (a is not None and a[0] == "a") and not (b is not None and b[0] == "a"):
        return ("n", 0, min(masks))  # a non-negative mask bounds anything
    if a is None or b is None:
        return None
    (ka, la, ha), (kb, lb, hb) = a, b
    if op == "add":
        if ka == "a" and kb == "a":
            return None
        kind = "a" if "a" in (ka, kb) else "n"
        return (kind, la + lb, ha + hb) if kind == "a" else _number(la + lb, ha + hb, ins)
    if op == "sub" and kb == "n":
        return ("a", la - hb, ha - lb) if ka == "a" else _number(la - hb, ha - lb, ins)
    if ka == "a" or kb == "a":  # bit operations on an own address with a constant that keeps its rank bits
        (_, lo, hi), c = (a, b) if ka == "a" else (b, a)
        if op not in ("and", "or", "xor") or c[0] != "n" or c[1] != c[2]:
            return None
        tr = _type_range(ins)
        width = 64 if tr is None or tr[1] > 1 << 32 else 32
        cv = c[1] - (1 << width) if c[1] >= 1 << (width - 1) else c[1]  # the mask as a signed number
        if op == "and" and -_OWN_REACH <= cv < 0:  # rounds down by at most ~cv (an alignment)
            return ("a", lo + cv + 1, hi)
        if op in ("or", "xor") and 0 <= cv < _OWN_REACH:
            return ("a", lo - (cv if op == "xor" else 0), hi + cv)
        return None
    corners = [la * lb, la * hb, ha * lb, ha * hb]
    if op == "mul":
        return _number(min(corners), max(corners), ins)
    if op == "shl" and lb == hb and 0 <= lb < 64 and la >= 0:
        return _number(la << lb, ha << lb, ins)
    if op == "shr" and lb == hb and 0 <= lb < 64 and la >= 0:
        return ("n", la >> lb, ha >> lb)
    if op == "and" and (la >= 0 or lb >= 0):
        return ("n", 0, min(h for lo_, h in ((la, ha), (lb, hb)) if lo_ >= 0))
    if op in ("or", "xor") and la >= 0 and lb >= 0:
        return ("n", 0, _bits_bound(max(ha, hb)))
    if op == "rem" and la >= 0 and lb > 0:
        return ("n", 0, min(ha, hb - 1))
    if op == "div" and la >= 0 and lb > 0:
        return ("n", la // hb, ha // lb)
    if op in ("min", "max"):
        f = min if op == "min" else max
        return ("n", f(la, lb), f(ha, hb))
    return None


def _operand_range(op, ranges: dict[str, _Range], shared: frozenset[str]) -> _Range:
    """The range of one operand: an immediate, a register's range, a special register's bounds, one of the
    module's shared variables (the CTA's own: ("a", 0, 0)) or ``sym+k`` of one."""
    if isinstance(op, Immediate):
        return ("n", op.value, op.value) if isinstance(op.value, int) else None
    if isinstance(op, Register):
        return ranges.get(op.name)
    if isinstance(op, SpecialRegister):
        bounds = _SPECIAL_RANGES.get(op.name.split(".")[0])
        return ("n", *bounds) if bounds else None
    if isinstance(op, Symbol):
        return ("a", 0, 0) if "s:" + op.name in shared else None
    if isinstance(op, OffsetExpr):
        base = _operand_range(op.base, ranges, shared)
        return base and (base[0], base[1] + op.offset, base[2] + op.offset)
    return None


def _def_range(ins: Instruction, ranges: dict[str, _Range], shared: frozenset[str]) -> _Range:
    """The range of the value ``ins`` defines, from its operands' ranges (None: anything)."""
    op, srcs = ins.opcode, ins.operands[1:]
    vals = [_operand_range(o, ranges, shared) for o in srcs]
    if op in ("ld", "ldu") and len(destinations(ins)) == 1 and (_access_bytes(ins) or 8) <= 2:
        tr = _type_range(ins)  # a loaded byte or half word
        return ("n", *tr) if tr else None
    if op == "mov" and len(vals) == 1:
        return vals[0]
    if op == "cvta" and len(vals) == 1 and any(m.split("::")[0] == "shared" for m in ins.modifiers):
        return vals[0] if vals[0] is not None and vals[0][0] == "a" else None  # shared <-> generic, same memory
    if op == "cvt" and len(vals) == 1 and vals[0] is not None:
        if vals[0][0] == "a":  # a 32-bit shared address zero-extended, or a generic one cut to its shared address
            return vals[0] if all(TYPE_BITS.get(m, 0) >= 32 for m in ins.modifiers if m in TYPE_BITS) else None
        tr = _type_range(ins)
        return None if tr is None else vals[0] if tr[0] <= vals[0][1] and vals[0][2] <= tr[1] else ("n", *tr)
    if op == "selp" and len(vals) == 3:
        return _union(vals[0], vals[1])
    if op == "neg" and len(vals) == 1 and vals[0] is not None and vals[0][0] == "n":
        return _number(-vals[0][2], -vals[0][1], ins)
    if op == "mad" and len(vals) == 3 and "hi" not in ins.modifiers:
        return _arith_range("add", ins, _arith_range("mul", ins, vals[0], vals[1]), vals[2])
    if len(vals) == 2 and op in ("add", "sub", "mul", "shl", "shr", "and", "or", "xor", "rem", "div", "min", "max") \
            and "hi" not in ins.modifiers:
        return _arith_range(op, ins, vals[0], vals[1])
    return None


def _ranges(fn, shared: frozenset[str]) -> dict[str, _Range]:
    """Register -> its range (``_Range``) over every definition in ``fn`` (flow-insensitive, as the provenance):
    a least fixed point, a register whose range keeps growing (an induction variable) widened to anything, a
    register with only guarded definitions (its value where the guard fails is undefined) or none anything. Rule 7
    asks it whether an address is the CTA's own (``_own_address``)."""
    defs: dict[str, list[Instruction]] = {}
    for ins in flat_instructions(fn):
        for r in destinations(ins):
            defs.setdefault(r, []).append(ins)
    ranges: dict[str, _Range] = {r: None for r, ds in defs.items() if all(d.predicate is not None for d in ds)}
    changes: dict[str, int] = {}
    unresolved = True
    while unresolved:
        changed = True
        while changed:
            changed = False
            for r, ds in defs.items():
                if r in ranges and ranges[r] is None:
                    continue
                vals = []
                for d in ds:
                    if any(isinstance(o, Register) and o.name not in ranges and o.name in defs
                           for o in d.operands[1:]):
                        continue  # an operand not yet reached: its contribution comes later
                    vals.append(_def_range(d, ranges, shared) if len(destinations(d)) == 1 else None)
                if not vals:
                    continue
                new = vals[0]
                for v in vals[1:]:
                    new = _union(new, v)
                new = _union(ranges[r], new) if r in ranges else new
                if r not in ranges or new != ranges[r]:
                    changes[r] = changes.get(r, 0) + 1
                    ranges[r] = new if changes[r] <= _WIDEN else None
                    changed = True
        # registers only a cycle without a start defines (never reached) hold anything; then propagate again
        unresolved = [r for r in defs if r not in ranges]
        ranges.update({r: None for r in unresolved})
    return ranges


def _own_address(addr: Address, ranges: dict[str, _Range], shared: frozenset[str]) -> bool:
    """Whether ``addr`` is provably in the CTA's own shared memory: one of its shared variables plus an offset of
    less than ``_OWN_REACH`` either way (``_ranges``)."""
    base = _operand_range(addr.base, ranges, shared)
    off = addr.offset or 0
    return base is not None and base[0] == "a" and -_OWN_REACH < base[1] + off and base[2] + off < _OWN_REACH


def _address_spaces(ins: Instruction) -> list[tuple[Address, str]]:
    """Each address operand of ``ins`` with the state space it addresses (``shared::cluster``, ``generic`` ...):
    a copy's destination, source and completion mbarrier (``cp.async.bulk.dst.src``: the mbarrier lies with the
    destination), the first state space named for any other instruction, ``generic`` when none is."""
    spaces = [m for m in ins.modifiers if m.split("::", 1)[0] in _STATE_SPACES]
    addrs = [o for o in ins.operands if isinstance(o, Address)]
    if ins.opcode != "cp":
        return [(a, spaces[0] if spaces else "generic") for a in addrs]
    return [(a, spaces[k] if k < 2 and k < len(spaces) else spaces[0] if spaces else "generic")
            for k, a in enumerate(addrs)]


@dataclass
class _DsmemSites:
    """What rule 7 needs of one function to tell its accesses of another CTA's shared memory (``_remote_access``):
    the registers computed from a ``mapa`` result, the registers' ranges, the module's shared variables and their
    bounds for ``_unvouched``."""

    remote: set[str]
    fn: Any
    shared: frozenset[str]
    local: frozenset[str]
    _ranges: dict[str, _Range] | None = None

    @property
    def ranges(self) -> dict[str, _Range]:
        """``_ranges`` of the function, computed at the first address that needs it."""
        if self._ranges is None:
            self._ranges = _ranges(self.fn, self.shared)
        return self._ranges


def _remote_access(ins: Instruction, sites: _DsmemSites, prov: Provenance) -> bool:
    """An access of distributed shared memory (rule 7): an ``ld``/``ldu``/``st``/``atom``/``red`` in
    ``.shared::cluster``; a ``.multicast::cluster`` copy (it writes every CTA of its mask); any instruction with an
    address operand in a register of ``sites.remote`` (a ``mapa`` result, as nvcc writes
    ``cluster.map_shared_rank``: a bulk copy into a peer, a remote mbarrier arrival: ``rt12_cluster_bulk_push``);
    and (gate rules version 16) any other address operand in ``.shared::cluster`` or generic space that is not
    provably the CTA's own (``_own_address``) and, when generic, names a shared variable or has no pointer
    that vouches for it (``_unvouched``): another CTA's address made without ``mapa``, by bit arithmetic on the
    CTA's own (``rt13_handmade_dsmem_push``), an offset of the rank's weight, or a constant. A bulk or tensor copy
    into the CTA's own shared memory (a TMA load: on sm_90 its destination is always ``.shared::cluster``) at its
    variables plus a bounded offset is none."""
    if ins.opcode in _NO_ACCESS:
        return False
    if ins.opcode in _PLAIN_ACCESS and any(m == "shared::cluster" for m in ins.modifiers):
        return True
    if any(m.startswith("multicast::cluster") for m in ins.modifiers):
        return True
    for addr, space in _address_spaces(ins):
        if isinstance(addr.base, Register) and addr.base.name in sites.remote:
            return True
        if space == "generic":
            P, W = prov.address_value(ins, addr)
            if not (_pos(P) | W) & sites.shared and not _unvouched(P, W, sites.shared, sites.local, "generic"):
                continue  # a buffer's or a local variable's address
        elif space != "shared::cluster":
            continue
        if not _own_address(addr, sites.ranges, sites.shared):
            return True
    return False


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
    shared, local = _variables(kernel, prov, ("shared",)), _variables(kernel, prov, ("local",))

    def sites_of(f) -> _DsmemSites:
        return _DsmemSites(_remote_registers(f), f, shared, local)

    entry = sites_of(fn)
    with_remote = set()
    for f in prov.functions[1:]:
        fs = sites_of(f)
        if any(_remote_access(i, fs, prov) for i in flat_instructions(f)):
            with_remote.add(f.name)

    def is_remote(ins: Instruction) -> bool:
        if ins.opcode == "call":
            return any(n in with_remote for n in prov.called(ins))
        return _remote_access(ins, entry, prov)

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


def _register_parameters(fn) -> frozenset[tuple[int, str]]:
    """The registers a ``.func`` is given on entry: its ``.reg`` parameters (PTX ISA "Kernel and Function
    Directives: .func": parameters in the register state space), keyed as ``_RegisterScopes.key`` keys them."""
    return frozenset((id(fn), p.name) for p in list(fn.params) + list(fn.return_params or [])
                     if p.state_space == "reg")


def _write_keys(ins: Instruction, scopes: _RegisterScopes) -> set[tuple[int, str]]:
    """The registers ``ins`` writes, the carry flag among them for a ``.cc`` instruction (``input_stores.CARRY``:
    PTX ISA "Extended-Precision Integer Arithmetic Instructions", ``add.cc`` and the like set CC.CF)."""
    out = scopes.destinations(ins)
    return out | {scopes.key(ins, CARRY)} if "cc" in ins.modifiers else out


def _written_on_some_path(blocks, scopes: _RegisterScopes) -> dict[int, frozenset | None]:
    """Block id -> the registers some path from the entry has written before the block (None: unreachable), a
    forward may-analysis (meet: union; a guarded write counts, it may run)."""

    def transfer(b, state: frozenset) -> frozenset:
        cur = set(state)
        for ins in b.instructions:
            cur |= _write_keys(ins, scopes)
        return frozenset(cur)

    return _forward(blocks, _predecessors(blocks), lambda outs: frozenset().union(*outs), transfer)


def _read_keys(ins: Instruction, scopes: _RegisterScopes) -> list[tuple[tuple[int, str], str]]:
    """The registers ``ins`` reads, each with its name: its sources, its guard predicate and, for ``addc``/``subc``/
    ``madc``, the carry flag (a register no operand names: ``rt15_carry_state``, whose carry-in ptxas made a
    predicate register no instruction writes)."""
    out = [(scopes.key(ins, r), r) for r in sources(ins)]
    if ins.predicate is not None:
        out.append((scopes.key(ins, ins.predicate.register.name), ins.predicate.register.name))
    if ins.opcode in _READS_CARRY:
        out.append((scopes.key(ins, CARRY), "the carry flag (CC.CF)"))
    return out


def _unwritten_register_reads(prov: Provenance, blocks_of: Callable[[Any], list]) -> list[tuple[Instruction, str]]:
    """Rule 5's register form (gate rules version 16): a read of a register that no path from the function's
    entry writes before it (PTX ISA "Registers": a register holds no defined value until written). The hardware
    register ptxas gives it keeps what the last warp on its slot left there: a launch counter without memory
    (``rt14_register_state``, spellings "undefined" and "predicate"). A may-analysis, not a must-analysis: nvcc's
    own code reads registers that a skipped branch or a guarded load leaves unwritten on some paths (the values
    unused there), so a write on any earlier path, guarded or not, counts."""
    scopes = _RegisterScopes(prov.functions)
    out: list[tuple[Instruction, str]] = []
    for f in prov.functions:
        blocks = blocks_of(f)
        given = _register_parameters(f)
        state = _written_on_some_path(blocks, scopes)
        for b in blocks:
            if state[b.id] is None:
                continue
            cur = set(state[b.id]) | given
            for ins in b.instructions:
                bad = next((name for k, name in _read_keys(ins, scopes) if k not in cur), None)
                if bad is not None:
                    what = bad if bad.startswith("the carry") else f"register {bad}"
                    out.append((ins, f"reads {what}, which no path from the entry writes before it: an "
                                     "unwritten register holds what the last thread on its hardware slot left, "
                                     "state kept across launches (the workload declares no atomics)"))
                cur |= _write_keys(ins, scopes)
    return out


# Instructions whose guard decides the control flow or a barrier (the dodges' targets): a branch, an exit or return,
# a trap, a CTA or cluster barrier, a call.
_DECIDING = frozenset({"bra", "brx", "exit", "ret", "trap", "bar", "barrier", "call"})


def _guarded_only_decisions(prov: Provenance, blocks_of: Callable[[Any], list]) -> list[tuple[Instruction, str]]:
    """Rule 5's register form, guarded spelling (gate rules version 17): a branch, barrier, exit or call whose guard
    derives from a register read unguarded where no unguarded instruction has written it on every path from the
    function's entry: its only definitions on some path are guarded ones that may not run (``rt14_register_state``
    "guarded": ``@%p13 mov.u32 %r40, 0`` under a guard that never holds, then ``add.u32 %r40, %r40, 1`` and a
    dodge on the count). Where the guard fails, the register keeps what the last warp on its hardware slot left.
    The must-analysis alone rejects nvcc's own code (an unguarded unpack of a guarded load's registers, used only
    where the guard held), so only values that reach a decision count: a taint from such a read through every
    instruction that reads a tainted register (a may-analysis; an unguarded untainted write clears it) to the guard
    of a deciding instruction (``_DECIDING``). Cannot see: such a value that decides through arithmetic instead of
    a guard (a select, a store address), nor a guarded read under the guard that defined it."""
    scopes = _RegisterScopes(prov.functions)
    out: list[tuple[Instruction, str]] = []
    for f in prov.functions:
        blocks = blocks_of(f)
        preds = _predecessors(blocks)

        def unguarded_writes(b, st: frozenset) -> frozenset:
            cur = set(st)
            for ins in b.instructions:
                if ins.predicate is None:
                    cur |= _write_keys(ins, scopes)
            return frozenset(cur)

        must = _forward(blocks, preds, lambda outs: frozenset.intersection(*outs), unguarded_writes)
        walk_block = _GuardedTaint(scopes, must, frozenset(_register_parameters(f)))
        state = _forward(blocks, preds, lambda outs: frozenset().union(*outs), walk_block)
        for b in blocks:
            if state[b.id] is not None:
                walk_block(b, state[b.id])
        out += list(walk_block.found.values())
    return out


class _GuardedTaint:
    """The transfer of ``_guarded_only_decisions``' taint over one block: state = frozenset of (register key, the
    name of the register whose unset read it derives from); ``found`` collects the deciding instructions whose guard
    is tainted (instruction id -> finding)."""

    def __init__(self, scopes: _RegisterScopes, must: dict[int, frozenset | None], given: frozenset) -> None:
        self.scopes, self.must, self.given = scopes, must, given
        self.found: dict[int, tuple[Instruction, str]] = {}

    def __call__(self, b, st: frozenset) -> frozenset:
        scopes = self.scopes
        cur_must = set(self.must[b.id] or frozenset()) | self.given
        cur = dict(st)
        for ins in b.instructions:
            guard = scopes.key(ins, ins.predicate.register.name) if ins.predicate is not None else None
            if guard in cur and ins.opcode in _DECIDING:
                self.found.setdefault(id(ins), (ins, (
                    f"decides on {ins.predicate.register.name}, which derives from register {cur[guard]}, read where "
                    "only guarded instructions wrote it on some path: where their guard failed it holds what the last "
                    "thread on its hardware slot left, state kept across launches (the workload declares no "
                    "atomics)")))
            reads = [(k, n) for k, n in _read_keys(ins, scopes) if k != guard]
            origin = next((n for k, n in reads if ins.predicate is None and k not in cur_must), None)
            origin = origin or next((cur[k] for k, _ in reads if k in cur), None)
            writes = _write_keys(ins, scopes)
            if origin is not None:
                cur.update((k, origin) for k in writes)
            elif ins.predicate is None:
                for k in writes:
                    cur.pop(k, None)
            if ins.predicate is None:
                cur_must |= writes
        return frozenset(cur.items())


def _writes_return(callee) -> bool:
    """Whether ``callee``'s body stores into one of its ``.param`` return values anywhere (``st.param`` at it:
    PTX ISA "Kernel and Function Directives: .func", the return values are written with ``st.param``), or has
    ``.reg`` return values (written as registers, left to the register form)."""
    rets = {p.name for p in callee.return_params or [] if p.state_space != "reg"}
    if len(rets) < len(callee.return_params or []):
        return True
    for ins in flat_instructions(callee):
        if ins.opcode == "st" and "param" in ins.base_modifiers:
            a = next((o for o in ins.operands if isinstance(o, Address)), None)
            if a is not None and isinstance(a.base, Symbol) and a.base.name in rets:
                return True
    return False


def _call_returns(ins: Instruction) -> tuple[list[str], str | None]:
    """A direct ``call``'s return parameter names (its first operand list) and the callee's name."""
    ops = list(ins.operands)
    rets: list[str] = []
    if ops and getattr(ops[0], "elements", None) is not None:
        rets = [o.name for o in ops.pop(0).elements if isinstance(o, Symbol)]
    callee = ops[0].name if ops and isinstance(ops[0], Symbol) else None
    return rets, callee


def _unwritten_return_loads(kernel: Kernel, prov: Provenance) -> list[tuple[Instruction, str]]:
    """Rule 5's register form for a call's return value (gate rules version 16): the ``ld.param`` of a return
    value after a direct call of a function with a body that stores into no ``.param`` return value of its own
    (``rt14_unset_retval_state``): under the ABI the value is a register the callee never wrote, what the last
    thread on the slot left. Callees without a body (system calls) and indirect calls are not judged."""
    out: list[tuple[Instruction, str]] = []
    for f in prov.functions:
        pending: dict[str, str] = {}  # an unwritten return value's call-site name -> the callee's
        for ins in flat_instructions(f):
            if ins.opcode == "call":
                rets, name = _call_returns(ins)
                for r in rets:
                    pending.pop(r, None)
                callee = next((g for g in kernel.module.functions if g.name == name and g.body is not None), None)
                if callee is not None and callee.return_params \
                        and not _writes_return(callee):
                    pending.update({r: name for r in rets})
            elif ins.opcode == "ld" and "param" in ins.base_modifiers:
                a = next((o for o in ins.operands if isinstance(o, Address)), None)
                if a is not None and isinstance(a.base, Symbol) and a.base.name in pending:
                    out.append((ins, f"reads the return value {a.base.name} of {pending[a.base.name]}, which stores "
                                     "none: an unwritten register that holds what the last thread on its hardware "
                                     "slot left, state kept across launches (the workload declares no atomics)"))
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
    hits += [("time_dependent", ins, why) for ins, why in _param_overreads(kernel)]
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
        hits += [("launch_state", ins, why) for ins, why in _unwritten_register_reads(prov, blocks_of)]
        hits += [("launch_state", ins, why) for ins, why in _guarded_only_decisions(prov, blocks_of)]
        hits += [("launch_state", ins, why) for ins, why in _unwritten_return_loads(kernel, prov)]
    if not hits:
        return RaceReport([])
    lines = {id(li.node): li for li in listing(kernel.module).lines if li.node is not None}
    found = []
    for kind, ins, why in hits:
        li = lines.get(id(ins))
        found.append(RaceFinding(kind, li.lineno if li else 0, li.text if li else str(ins), why))
    return RaceReport(found)
