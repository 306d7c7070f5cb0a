"""Launch configuration and performance directives (PTX ISA 9.0 §11.4 performance-tuning directives).

Moves, one per proposal, drawn uniformly among those that apply to the parent:

- ``maxnreg``: set ``.maxnreg`` to a register count next to the parent's (from its ptxas resources when the
  parent was evaluated, else its current ``.maxnreg``, else 128) among the sm_90 occupancy cliffs
  ``REGISTER_STEPS``, or remove it. Registers are allocated per warp in units of 256 (cuda_occupancy.h,
  ``regAllocationUnitSize``), so only these counts change how many warps fit in the 64K-register file.
- ``maxntid``: add ``.maxntid`` equal to the launch block (lets ptxas budget registers for that block size)
  or remove it.
- ``minnctapersm``: set ``.minnctapersm k`` (with ``.maxntid`` added when missing, since ptxas ignores the
  former without the latter) or remove it.
- ``block``: only when the entry reads ``%ntid`` (its code is written for any block size): a block size next
  to the parent's from ``BLOCK_SIZES``; ``.maxntid``/``.reqntid`` of the parent are updated to stay valid.
- ``knob``: a workload launch knob (``workload.launch_knob_space``, when the workload declares one) moved to
  a neighbouring value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import entry_function
from population.analysis import flat_instructions
from population.ast import SpecialRegister
from population.edits import EditScript, SetDirective, SetLaunch
from population.kernel import Kernel

# Register counts where an sm_90 SM (65536 registers, 256-register allocation units per warp, 64 warps max)
# changes the number of resident warps for common block sizes (cuda_occupancy.h).
REGISTER_STEPS = (32, 40, 48, 56, 64, 72, 80, 96, 128, 168, 255)
BLOCK_SIZES = (64, 96, 128, 192, 256, 384, 512, 768, 1024)
MIN_CTAS = (1, 2, 3, 4, 6, 8)
MOVES = ("maxnreg", "maxntid", "minnctapersm", "block", "knob")


def reads_ntid(kernel: Kernel) -> bool:
    """True when the entry reads ``%ntid`` (blockDim), i.e. its code adapts to the launch block."""
    fn = entry_function(kernel)
    return any(isinstance(o, SpecialRegister) and o.name.startswith("%ntid")
               for ins in flat_instructions(fn) for o in ins.operands)


def neighbours(values: tuple[int, ...], current: int, reach: int = 1) -> list[int]:
    """Values of the sorted ``values`` within ``reach`` positions of ``current`` (its nearest slot when
    ``current`` is not in ``values``), excluding ``current``."""
    vals = sorted(values)
    pos = min(range(len(vals)), key=lambda i: (abs(vals[i] - current), vals[i]))
    lo, hi = max(0, pos - reach), min(len(vals), pos + reach + 1)
    return [v for v in vals[lo:hi] if v != current]


def _registers(parent: Kernel, ctx: OperatorContext, directives: Mapping[str, tuple[int, ...]]) -> int:
    res = getattr(ctx.parent_result, "resources", None)
    regs = getattr(res, "registers", None)
    if isinstance(regs, int) and regs > 0:
        return regs
    if "maxnreg" in directives:
        return directives["maxnreg"][0]
    return 128


@dataclass
class LaunchOperator:
    """Change the launch configuration or one performance directive of the entry (module docstring).

    workload: the Workload (for ``launch_knob_space``, optional). moves: the move kinds allowed.
    block_sizes / register_steps / min_ctas: the value ladders the moves walk. weight: sampling weight.
    """

    workload: object = None
    name: str = "launch"
    weight: float = 1.0
    moves: tuple[str, ...] = MOVES
    block_sizes: tuple[int, ...] = BLOCK_SIZES
    register_steps: tuple[int, ...] = REGISTER_STEPS
    min_ctas: tuple[int, ...] = MIN_CTAS

    def __post_init__(self) -> None:
        bad = [m for m in self.moves if m not in MOVES]
        if bad or not self.moves:
            raise ValueError(f"launch operator: moves {bad or list(self.moves)} invalid; allowed: {list(MOVES)}")
        self.moves = tuple(self.moves)

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """A LAUNCH and/or DIRECTIVE script. NoProposal when no allowed move applies."""
        fn = entry_function(parent)
        directives = {d.name: tuple(d.values) for d in fn.directives}
        workload = ctx.workload if ctx.workload is not None else self.workload
        knob_space = dict(getattr(workload, "launch_knob_space", None) or {})
        movable = [m for m in self.moves if m != "block" or reads_ntid(parent)]
        if "knob" in movable and not knob_space:
            movable.remove("knob")
        order = list(rng.permutation(len(movable)))
        for i in order:
            script = getattr(self, f"_{movable[int(i)]}")(parent, ctx, rng, directives, knob_space)
            if script is not None:
                return script
        raise NoProposal(f"no launch move applies to {parent.entry!r} (moves tried: {movable})")

    # -- moves: each returns a script or None -----------------------------------------------------------

    def _maxnreg(self, parent, ctx, rng, directives, knob_space) -> EditScript | None:
        cur = _registers(parent, ctx, directives)
        options: list[int | None] = list(neighbours(self.register_steps, cur, reach=2))
        if "maxnreg" in directives:
            options = [v for v in options if v != directives["maxnreg"][0]] + [None]
        if not options:
            return None
        v = options[int(rng.integers(len(options)))]
        return EditScript((SetDirective(parent.entry, "maxnreg", None if v is None else (v,)),))

    def _maxntid(self, parent, ctx, rng, directives, knob_space) -> EditScript | None:
        if "reqntid" in directives:
            return None
        if "maxntid" in directives:
            if "minnctapersm" in directives:
                return None  # .minnctapersm needs .maxntid
            return EditScript((SetDirective(parent.entry, "maxntid", None),))
        return EditScript((SetDirective(parent.entry, "maxntid", parent.launch.block),))

    def _minnctapersm(self, parent, ctx, rng, directives, knob_space) -> EditScript | None:
        cur = directives.get("minnctapersm", (0,))[0]
        options: list[int | None] = [k for k in self.min_ctas if k != cur
                                     and k * parent.launch.threads <= 2048]  # 64 warps x 32 lanes per SM
        if cur:
            options.append(None)
        if not options:
            return None
        v = options[int(rng.integers(len(options)))]
        edits = []
        if v is not None and "maxntid" not in directives and "reqntid" not in directives:
            edits.append(SetDirective(parent.entry, "maxntid", parent.launch.block))
        edits.append(SetDirective(parent.entry, "minnctapersm", None if v is None else (v,)))
        return EditScript(tuple(edits))

    def _block(self, parent, ctx, rng, directives, knob_space) -> EditScript | None:
        x, y, z = parent.launch.block
        if y != 1 or z != 1:
            return None
        options = neighbours(self.block_sizes, x, reach=2)
        if not options:
            return None
        nx = options[int(rng.integers(len(options)))]
        edits: list = [SetLaunch(block=(nx, 1, 1))]
        for d in ("maxntid", "reqntid"):
            if d in directives:
                edits.append(SetDirective(parent.entry, d, (nx, 1, 1)))
        return EditScript(tuple(edits))

    def _knob(self, parent, ctx, rng, directives, knob_space) -> EditScript | None:
        names = sorted(knob_space)
        for j in rng.permutation(len(names)):
            k = names[int(j)]
            values = tuple(sorted(knob_space[k]))
            cur = parent.launch.knob(k, values[0])
            options = neighbours(values, cur)
            if options:
                v = options[int(rng.integers(len(options)))]
                return EditScript((SetLaunch(knobs=((k, int(v)),)),))
        return None
