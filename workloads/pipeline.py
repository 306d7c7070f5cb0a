"""Pipeline workloads: an operation computed by several kernels, of which the search evolves one.

Some operations are several kernels in every fast implementation (KDA's chunked prefill: an intra-chunk pass, a
serial inter-chunk state pass, an output pass). A ``PipelineWorkload`` names its stages in order
(``stages``: each reads and writes buffers by name); exactly one is **evolved** (its kernel is the search's
genome, its parameter list is the workload's ``abi``), the others are **reference** stages the workload computes
itself (``run_stage``: CuPy/NumPy on the device or the host, in the stream order of the launch).

How it plugs into the Workload API (nothing in the gate or the evaluators knows which workload it runs):

- **Data** (``make_inputs``, ``outputs``, ``reference``, ``tolerance``, the distributions and shape lists) is
  the *operation's*: the gate draws the operation's inputs, poisons the operation's outputs, and judges the
  operation's final outputs and inout buffers against the float64 reference of the whole operation, with the
  usual rules (inout buffers restored before each launch and judged at their final value; inputs unchanged).
- **Kernel** (``entry``, ``abi``, seeds, knobs, ``launch_dims``, ``scalars``) is the *evolved stage's*. Its ABI
  buffers are either the operation's own buffers (an input, an output, the inout state) or **intermediates**
  (``intermediates(shape)``): buffers passed between stages, allocated per launch by ``plan``. The static
  checks (ABI, input stores, race lint, occupancy, traffic) therefore see the evolved kernel alone, as the
  kind of each ABI entry says (an intermediate the kernel reads is an ``input``, one it writes an ``output``).
- **Launch** goes through ``plan`` (``workloads.base.StagePlan``): ``before`` runs the reference stages that
  precede the evolved one and fills every intermediate the evolved kernel writes with the gate's NaN poison
  (so a kernel that skips a write, or relies on what a previous launch left, gives a wrong final output);
  the kernel runs on ``buffers``; ``after`` runs the stages that follow. Every launcher (the GPU worker's gate,
  fault check, checked timed launches and audit; the sanitizer and ncu replays) launches through it.
- **Timing**: the benchmark times the evolved kernel alone (``before`` and ``after`` are enqueued outside the
  timed interval), so ``bytes_moved``, ``flops``, ``elements_per_cta_sweep`` and the library ``baselines``
  describe the evolved stage (a library's implementation of the same stage on the same intermediates). The
  time of the whole pipeline against a library's whole operation is a report (e.g.
  ``experiments/kda_chunk_h200.py``), not the objective.

Limits: the fault check (inputs ending at an unmapped page) covers the operation's inputs, not the
intermediates (they are ordinary allocations); compute-sanitizer memcheck, which an elite passes before it
counts, covers every buffer.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from workloads.base import Shape, StagePlan, Workload
from workloads.elements import POISON_NAN_BITS


@dataclass(frozen=True)
class Stage:
    """One stage of a pipeline, in execution order.

    name: the stage's name (``run_stage`` receives it); reads / writes: the buffers it reads / writes, by name
    (the operation's buffers and intermediates); evolved: True for the one stage the search evolves (its
    kernel's ABI is the workload's ``abi``), False for a reference stage the workload computes.
    """

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    evolved: bool = False


@dataclass(frozen=True)
class Intermediate:
    """A buffer passed between stages: name, shape, numpy dtype name (``"float32"``, ``"int32"``...)."""

    name: str
    shape: Shape
    dtype: str


def _poison(a: Any) -> None:
    """Fill float array ``a`` in place with the gate's first poison NaN (``POISON_NAN_BITS``; a plain NaN for
    float64)."""
    if a.dtype.itemsize == 4:
        a.view(np.uint32).fill(POISON_NAN_BITS["fp32"])
    elif a.dtype.itemsize == 2:
        a.view(np.uint16).fill(POISON_NAN_BITS["fp16" if a.dtype == np.float16 else "bf16"])
    else:
        a.fill(np.nan)


class PipelineWorkload(Workload):
    """Base of pipeline workloads (module docstring). Subclasses set ``stages`` and implement
    ``intermediates`` and ``run_stage`` besides the Workload members."""

    stages: tuple[Stage, ...]

    @abstractmethod
    def intermediates(self, shape: Shape) -> list[Intermediate]:
        """The buffers passed between stages at ``shape`` (every ABI buffer that is not one of the operation's
        own: ``make_inputs``' keys and ``outputs``' names)."""

    @abstractmethod
    def run_stage(self, stage: str, buffers: Mapping[str, Any], shape: Shape,
                  params: Mapping[str, float] | None, xp: ModuleType) -> None:
        """Enqueue the reference stage named ``stage`` at ``shape``: read and write ``buffers`` (every buffer by
        name: the operation's and the intermediates) in place, with array module ``xp``."""

    # ------------------------------------------------------------------------------------------- structure
    def evolved_stage(self) -> Stage:
        """The stage the search evolves; ValueError unless exactly one stage is marked evolved."""
        evolved = [s for s in self.stages if s.evolved]
        if len(evolved) != 1:
            raise ValueError(f"pipeline {self.name!r}: exactly one stage must be evolved, got "
                             f"{[s.name for s in evolved]}")
        return evolved[0]

    def validate_stages(self, shape: Shape, input_names: list[str]) -> None:
        """Check the stage list against the ABI at ``shape`` (``input_names``: ``make_inputs``' keys): one
        evolved stage, reading exactly the ABI's input and inout buffers and writing exactly its output and
        inout buffers; every buffer a stage reads is an operation input or written by an earlier stage; every
        operation output and every intermediate is written by some stage. ValueError naming the first breach."""
        ev = self.evolved_stage()
        reads = set(self.buffer_names("input", "inout"))
        writes = set(self.buffer_names("output", "inout"))
        if set(ev.reads) != reads or set(ev.writes) != writes:
            raise ValueError(f"evolved stage {ev.name!r}: reads {sorted(ev.reads)} / writes {sorted(ev.writes)} "
                             f"must be the ABI's inputs {sorted(reads)} / outputs {sorted(writes)}")
        own = set(input_names) | {o.name for o in self.outputs(shape)}
        inter = {b.name for b in self.intermediates(shape)}
        unknown = (reads | writes) - own - inter
        if unknown:
            raise ValueError(f"ABI buffers {sorted(unknown)} are neither the operation's nor intermediates")
        have = set(input_names)
        for s in self.stages:
            missing = set(s.reads) - have
            if missing:
                raise ValueError(f"stage {s.name!r} reads {sorted(missing)} before any stage writes them")
            have |= set(s.writes)
        unwritten = ({o.name for o in self.outputs(shape)} | inter) - have
        if unwritten:
            raise ValueError(f"no stage writes {sorted(unwritten)}")

    # ---------------------------------------------------------------------------------------------- launch
    def plan(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], shape: Shape,
             params: Mapping[str, float] | None = None, xp: ModuleType = np) -> StagePlan:
        """Allocate the intermediates at ``shape`` and lay the stages around the evolved kernel: ``before`` runs
        the reference stages that precede it and poisons (NaN) the float intermediates it writes, ``after``
        runs the stages that follow it (module docstring)."""
        ev = self.evolved_stage()
        at = self.stages.index(ev)
        inter = {b.name: xp.empty(b.shape, dtype=np.dtype(b.dtype)) for b in self.intermediates(shape)}
        bufs: dict[str, Any] = {**inputs, **outputs, **inter}
        poisoned = [n for n in ev.writes if n in inter and np.dtype(inter[n].dtype).kind == "f"]

        def before() -> None:
            for s in self.stages[:at]:
                self.run_stage(s.name, bufs, shape, params, xp)
            for n in poisoned:
                _poison(inter[n])

        def after() -> None:
            for s in self.stages[at + 1:]:
                self.run_stage(s.name, bufs, shape, params, xp)

        kernel_bufs = {p.name: bufs[p.name] for p in self.abi if p.kind != "scalar"}
        return StagePlan(buffers=kernel_bufs, before=before, after=after)

    def stage_inputs(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], shape: Shape,
                     params: Mapping[str, float] | None = None, xp: ModuleType = np) -> StagePlan:
        """A plan whose ``before`` has run (the evolved kernel's inputs computed, its outputs poisoned): what a
        library baseline of the evolved stage, or a report timing the stage alone, launches on."""
        p = self.plan(inputs, outputs, shape, params, xp)
        p.run_before()
        return p
