"""Split each CTA's work over a thread-block cluster: C CTAs act as one virtual CTA of C x T threads, and the
cross-warp reduction runs through distributed shared memory.

A kernel written for any block size (it reads ``%ntid.x``: one CTA per row, a loop ``for i = tid; i < N;
i += ntid``, a shared-memory reduction over the warps, ``bar.sync``) computes the same result when its CTA is
made of more threads. This rewrite gives it C times more threads per row without touching its arithmetic: the
CTAs of a cluster of ``(C, 1, 1)`` form one *virtual CTA* of ``C * T`` threads, seen by the code through

- ``%tid.x``   -> ``%cluster_ctarank * %ntid.x + %tid.x`` (the thread's index in the virtual CTA),
- ``%ntid.x``  -> ``C * %ntid.x``, ``%ctaid.x`` -> ``%clusterid.x``, ``%nctaid.x`` -> ``%nclusterid.x``,
- every ``ld.shared``/``st.shared`` -> ``mapa.shared::cluster`` of its address to rank 0, then
  ``ld.shared::cluster``/``st.shared::cluster`` (the virtual CTA's shared memory is rank 0's),
- every ``bar.sync``/``barrier.sync`` -> ``barrier.cluster.arrive`` + ``barrier.cluster.wait`` (release /
  acquire at cluster scope by default, so shared writes before it are visible to every thread of the cluster
  after it),
- a cluster barrier at the start (every CTA of the cluster has started before any distributed shared memory
  access: CUDA C++ Programming Guide, "Distributed Shared Memory") and before every ``ret``/``exit`` (rank 0's
  shared memory outlives every access to it),
- ``.explicitcluster`` and ``.reqnctapercluster C, 1, 1`` on the entry (as nvcc writes ``__cluster_dims__``) and the launch knob ``cluster=C`` (the workload's launch rule
  multiplies the grid by it: ``workloads.rmsnorm``), so the grid is C CTAs per former CTA.

Warps stay whole (``T`` is a multiple of 32), so shuffles and votes keep their meaning; the reduction's order
is the one the kernel uses for a CTA of ``C * T`` threads, so results are deterministic.
PTX ISA 9.0: "Special Registers" (``%cluster_ctarank``, ``%clusterid``, ``%nclusterid``), "Data Movement and
Conversion Instructions: mapa", "ld"/"st" with ``.shared::cluster``, "Parallel Synchronization and
Communication Instructions: barrier.cluster", "Performance-Tuning Directives: .reqnctapercluster".

**Which variant, and why.** The RMSNorm template already splits rows over clusters itself (knob ``cluster``:
partial sums through ``map_shared_rank`` and ``cluster.sync``), and its thread index arithmetic is folded into
constants (``THREADS``, chunk offsets in the addresses), so no PTX rewrite can re-split it soundly: the
template operator's ``KNOBS cluster=`` is the way there. This rewrite serves the other kernels: the naive seed,
kernels brought with ``workload.seed_ptx`` and their PTX-edited descendants, whose row loop and reduction are
written for any block size.

**Refused** (ValueError; the operator raises NoProposal) unless: ``line`` holds a ``bar.sync``/``barrier.sync``
(the reduction's barrier); the module targets sm_90 or later; the launch block is ``(T, 1, 1)`` with ``T`` a
multiple of 32 and ``C * T`` at most the target's threads per block (``targets.occupancy.DeviceProps.
max_threads_per_block``); the entry reads ``%ntid.x``, has no ``.reqntid``, no ``.maxntid`` below ``C * T``, no
cluster directive and no launch knob ``cluster`` above 1; every special register it reads is a thread, CTA or
grid index or a lane register (``%warpid``, ``%smid``, cluster registers ... are refused); every barrier is a
full, unpredicated ``bar.sync``/``barrier.sync`` (no thread count, no ``bar.arrive``/``bar.red``); it has no
fence or membar (their CTA scope would no longer cover the threads that share data), no call, no predicated
``ret``/``exit``, no atomic or ``cp``/``mbarrier``/``ldmatrix`` on shared memory, no ``cvta`` to or from the
shared window, and no ``.volatile``/ordered shared access. Every threads-per-block assumption of the kernel is
checked at run time too: a thread of a virtual CTA larger than the target allows executes ``trap`` (a later
launch edit cannot make it silently wrong).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import (
    entry_function,
    entry_sites,
    fresh_name,
    line_edits,
    target_cc,
    used_names,
)
from evolve.operators.common import (
    make_instruction as _ins,
)
from population.analysis import declared_registers, flat_instructions
from population.ast import (
    Address,
    Immediate,
    Instruction,
    Predicate,
    Register,
    SpecialRegister,
    Symbol,
    VarDecl,
)
from population.edits import Edit, EditScript, Rewrite, SetDirective, SetLaunch, register_rewrite
from population.kernel import Kernel
from targets.occupancy import device_props

SIZES = (2, 4, 8)
MIN_CC = (9, 0)  # thread-block clusters and distributed shared memory: sm_90 and later
_CLUSTER_DIRECTIVES = ("reqnctapercluster", "explicitcluster", "maxclusterrank")
# Special registers whose meaning the virtual CTA keeps (after the .x substitutions below).
_ALLOWED_SPECIAL = ("%tid.", "%ntid.", "%ctaid.", "%nctaid.", "%laneid", "%lanemask_")
_VIRTUAL = {"%ctaid.x": "%clusterid.x", "%nctaid.x": "%nclusterid.x"}
_ORDERED = ("volatile", "relaxed", "acquire", "release", "mmio", "weak")


def _is_shared(m: str) -> bool:
    return m.split("::")[0] == "shared"


def _barrier(ins: Instruction) -> bool:
    """A CTA barrier (``bar``/``barrier`` other than ``bar.warp.sync`` and ``barrier.cluster``)."""
    return ins.opcode in ("bar", "barrier") and "warp" not in ins.modifiers and "cluster" not in ins.modifiers


def check(kernel: Kernel, line: int, cluster: int) -> int:
    """The CTA's threads ``T`` when ``REWRITE cluster_split <line> cluster=<cluster>`` applies (module
    docstring); ValueError naming the first reason it does not."""
    if cluster not in SIZES:
        raise ValueError(f"cluster={cluster}: must be one of {SIZES}")
    fn = entry_function(kernel)
    site = next((s for s in entry_sites(kernel) if s.line == line), None)
    if site is None or not isinstance(site.node, Instruction) or not _barrier(site.node):
        raise ValueError(f"line {line} is not a CTA barrier (bar.sync) of the entry's reduction")
    if target_cc(kernel) < MIN_CC:
        raise ValueError(f"thread-block clusters need sm_90 or later; the module targets {kernel.module.target}")
    t, by, bz = kernel.launch.block
    props = device_props(target_cc(kernel))
    if by != 1 or bz != 1 or t % props.warp_size:
        raise ValueError(f"launch block {kernel.launch.block}: needs (T, 1, 1) with T a multiple of 32")
    if cluster * t > props.max_threads_per_block:
        raise ValueError(f"a virtual CTA of {cluster} x {t} threads exceeds {props.max_threads_per_block} threads "
                         "per block")
    if kernel.launch.knob("cluster", 1) > 1:
        raise ValueError(f"the launch already uses clusters of {kernel.launch.knob('cluster', 1)}")
    dirs = {d.name: tuple(d.values) for d in fn.directives}
    if any(d in dirs for d in _CLUSTER_DIRECTIVES):
        raise ValueError("the entry already declares a cluster shape")
    if "reqntid" in dirs:
        raise ValueError(f".reqntid {dirs['reqntid']}: the code asks for an exact block size")
    if "maxntid" in dirs and int(np.prod(dirs["maxntid"])) < cluster * t:
        raise ValueError(f".maxntid {dirs['maxntid']} is below the virtual CTA's {cluster * t} threads")
    reads_ntid = False
    for ins in flat_instructions(fn):
        for o in ins.operands:
            if isinstance(o, SpecialRegister):
                if not o.name.startswith(_ALLOWED_SPECIAL):
                    raise ValueError(f"{ins.opcode} reads {o.name}, which a virtual CTA cannot keep")
                reads_ntid |= o.name == "%ntid.x"
        _check_instruction(ins)
    if not reads_ntid:
        raise ValueError("the entry never reads %ntid.x: its code is not written for any block size")
    return t


def _check_instruction(ins: Instruction) -> None:
    op, mods = ins.opcode, ins.modifiers
    text = f"{op}{''.join('.' + m for m in mods)}"
    if _barrier(ins):
        if ins.predicate is not None or "sync" not in mods or len(ins.operands) != 1 or "red" in mods:
            raise ValueError(f"{text}: only full, unpredicated bar.sync / barrier.sync become cluster barriers")
    elif op in ("membar", "fence", "call"):
        raise ValueError(f"{text}: a {op} is not rewritten")
    elif op in ("ret", "exit") and ins.predicate is not None:
        raise ValueError(f"predicated {op}: the exit barrier would be skipped by part of the cluster")
    elif op == "cvta" and any(_is_shared(m) for m in mods):
        raise ValueError(f"{text}: a generic pointer into shared memory")
    elif any(_is_shared(m) for m in mods):
        if op not in ("ld", "st") or any(m in _ORDERED for m in mods):
            raise ValueError(f"{text}: only plain ld.shared/st.shared are mapped to the cluster")


def cluster_split_edits(kernel: Kernel, line: int, cluster: int = 2) -> list[Edit]:
    """The edits of ``REWRITE cluster_split <line> cluster=<C>`` (module docstring): the prologue, every
    rewritten instruction's line, the ``.reqnctapercluster`` directive and the launch knob. ValueError naming
    the reason when it does not apply."""
    check(kernel, line, cluster)
    fn = entry_function(kernel)
    regtypes = declared_registers(fn)
    taken = used_names(fn) | {i.name for i in kernel.module.items if isinstance(i, VarDecl)}

    def fresh(stem: str) -> Register:
        r = Register(fresh_name(taken, stem))
        taken.add(r.name)
        return r

    tid, ntid, rank, vtid, vntid, bad = (fresh(s) for s in ("%cs_t", "%cs_n", "%cs_r", "%cs_vt", "%cs_vn", "%cs_p"))
    limit = device_props(target_cc(kernel)).max_threads_per_block
    prologue = [
        _ins("barrier", ("cluster", "arrive")),
        _ins("barrier", ("cluster", "wait")),
        _ins("mov", ("u32",), tid, SpecialRegister("%tid.x")),
        _ins("mov", ("u32",), ntid, SpecialRegister("%ntid.x")),
        _ins("mov", ("u32",), rank, SpecialRegister("%cluster_ctarank")),
        _ins("mad", ("lo", "u32"), vtid, rank, ntid, tid),
        _ins("mul", ("lo", "u32"), vntid, ntid, Immediate(str(cluster))),
        _ins("setp", ("gt", "u32"), bad, vntid, Immediate(str(limit))),
        _ins("trap", (), pred=Predicate(bad)),
    ]
    subst = {"%tid.x": vtid, "%ntid.x": vntid}
    repl: dict[int, list] = {}
    for s in entry_sites(kernel):
        ins = s.node
        if not isinstance(ins, Instruction):
            continue
        out = _rewrite(ins, subst, regtypes, fresh)
        if out != [ins]:
            if s.body is not fn.body:
                raise ValueError(f"line {s.line}: an instruction to rewrite sits inside a {{ }} scope")
            repl[s.line] = out
    edits = line_edits(kernel, repl, prologue)
    edits.append(SetDirective(kernel.entry, "explicitcluster", ()))
    edits.append(SetDirective(kernel.entry, "reqnctapercluster", (cluster, 1, 1)))
    edits.append(SetLaunch(knobs=(("cluster", cluster),)))
    return edits


def _rewrite(ins: Instruction, subst: dict[str, Register], regtypes: dict[str, str], fresh) -> list[Instruction]:
    """``ins`` in the virtual CTA (module docstring): substituted special registers, shared accesses through
    rank 0's distributed shared memory, CTA barriers as cluster barriers, a cluster barrier before an exit."""
    ops = tuple(subst.get(o.name, SpecialRegister(_VIRTUAL.get(o.name, o.name)))
                if isinstance(o, SpecialRegister) else o for o in ins.operands)
    if ops != ins.operands:
        ins = Instruction(opcode=ins.opcode, modifiers=ins.modifiers, operands=ops, predicate=ins.predicate)
    if _barrier(ins):
        return [_ins("barrier", ("cluster", "arrive")), _ins("barrier", ("cluster", "wait"))]
    if ins.opcode in ("ret", "exit"):
        return [_ins("barrier", ("cluster", "arrive")), _ins("barrier", ("cluster", "wait")), ins]
    if ins.opcode in ("ld", "st") and any(_is_shared(m) for m in ins.modifiers):
        k = 1 if ins.opcode == "ld" else 0
        addr = ins.operands[k]
        if not isinstance(addr, Address):
            raise ValueError(f"{ins.opcode}.shared without an address operand")
        pre: list[Instruction] = []
        if isinstance(addr.base, Symbol):
            base = fresh("%cs_a")
            pre.append(_ins("mov", ("u32",), base, addr.base, pred=ins.predicate))
            width = "u32"
        elif isinstance(addr.base, Register):
            base = addr.base
            width = "u64" if regtypes.get(base.name, "b32").endswith("64") else "u32"
        else:
            raise ValueError(f"{ins.opcode}.shared at an absolute address")
        mapped = fresh("%cs_m")
        if width == "u64":
            mapped = Register(mapped.name.replace("%cs_m", "%cs_md"))
        pre.append(_ins("mapa", ("shared::cluster", width), mapped, base, Immediate("0"), pred=ins.predicate))
        mods = tuple("shared::cluster" if _is_shared(m) else m for m in ins.modifiers)
        ops = list(ins.operands)
        ops[k] = Address(mapped, addr.offset)
        return [*pre, Instruction(opcode=ins.opcode, modifiers=mods, operands=tuple(ops), predicate=ins.predicate)]
    return [ins]


def _expand(kernel: Kernel, line: int, args: dict[str, int]) -> list[Edit]:
    cluster = args.pop("cluster", 2)
    if args:
        raise ValueError(f"unknown parameter(s) {sorted(args)}; cluster_split takes cluster=2|4|8")
    return cluster_split_edits(kernel, line, cluster)


register_rewrite("cluster_split", _expand)


def barrier_lines(kernel: Kernel) -> list[int]:
    """Canonical lines of the entry's CTA barriers (where ``REWRITE cluster_split`` may be asked for)."""
    return [s.line for s in entry_sites(kernel) if isinstance(s.node, Instruction) and _barrier(s.node)]


@dataclass
class ClusterSplitOperator:
    """Propose ``REWRITE cluster_split <line> cluster=<C>`` (module docstring).

    sizes: cluster sizes drawn from (each of 2, 4, 8; those whose virtual CTA fits are kept); weight: sampling
    weight. Declines (NoProposal) when the workload has no ``cluster`` launch knob: its launch rule would not
    multiply the grid."""

    name: str = "cluster_split"
    weight: float = 1.0
    sizes: tuple[int, ...] = (2, 4)

    def __post_init__(self) -> None:
        if not self.sizes or any(s not in SIZES for s in self.sizes):
            raise ValueError(f"cluster_split operator: sizes must be drawn from {SIZES}, got {list(self.sizes)}")

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """One REWRITE edit; NoProposal naming the reason when the parent or the workload does not allow it."""
        space = getattr(ctx.workload, "knob_space", None) or {}
        if ctx.workload is not None and "cluster" not in space:
            raise NoProposal("the workload has no 'cluster' launch knob: its launch rule cannot grow the grid")
        lines = barrier_lines(parent)
        if not lines:
            raise NoProposal(f"entry {parent.entry!r} has no CTA barrier: no cross-warp reduction to split")
        why = ""
        for c in rng.permutation(list(self.sizes)):
            try:
                check(parent, lines[0], int(c))
            except ValueError as e:
                why = str(e)
                continue
            return EditScript((Rewrite("cluster_split", lines[0], (("cluster", int(c)),)),))
        raise NoProposal(f"entry {parent.entry!r}: {why}")
