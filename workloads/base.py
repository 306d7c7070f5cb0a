"""What every workload provides: the operation's ABI, inputs, reference, shapes, launch rule and roofline model.

A workload is one operation (e.g. RMSNorm forward for one dtype). The evaluators only talk to kernels through
it: the gate asks it for inputs and the float64 reference, the benchmark for the bytes moved, the worker for
the grid of a launch and for how each ``.param`` of the entry is bound.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from population.defuse import POINTER_TYPES
from population.kernel import Kernel, LaunchConfig

Shape = tuple[int, ...]
Dim3 = tuple[int, int, int]
# ParamSpec kinds (see ParamSpec).
PARAM_KINDS = ("input", "output", "inout", "scalar")


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter of the workload's ABI, in ``.param`` order.

    name: the buffer or scalar it carries (``"x"``, ``"M"``); kind: ``"input"`` (device buffer only read: the
    gate rejects any write to it, statically and on the device), ``"output"`` (device buffer written),
    ``"inout"`` (a state buffer read and written, e.g. a recurrent state updated in place: ``make_inputs``
    gives its initial value, ``reference`` its expected final value under the same name; the input-store and
    inputs-unchanged checks skip it, the gate compares its final value) or ``"scalar"``; ptx_type: the
    ``.param`` type a conforming entry declares (``"u64"`` for every pointer; ``"s32"``, ``"u32"``, ``"f32"``
    ... for scalars).
    """

    name: str
    kind: str
    ptx_type: str

    def __post_init__(self) -> None:
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"ParamSpec {self.name!r}: kind must be one of {'/'.join(PARAM_KINDS)}, "
                             f"got {self.kind!r}")
        if self.kind != "scalar" and self.ptx_type not in POINTER_TYPES:
            raise ValueError(f"ParamSpec {self.name!r}: a buffer is passed as a 64-bit pointer, got .{self.ptx_type}")


class AbiMismatch(ValueError):
    """An entry's ``.param`` list does not match the workload's ABI (count or type); the message says which."""


def check_abi(abi: tuple[ParamSpec, ...], param_types: list[str], entry: str = "kernel") -> None:
    """Check that an entry's ``.param`` types (in order, e.g. ``["u64", "u64", "u64", "u32", "u32", "f32"]``)
    conform to ``abi``: same count, pointers 64-bit, scalars of the same width and kind (int vs float).

    Raises AbiMismatch naming the first offending parameter.
    """
    if len(param_types) != len(abi):
        raise AbiMismatch(f"entry {entry!r} has {len(param_types)} params, the workload ABI has {len(abi)}: "
                          f"{[p.name for p in abi]}")
    for i, (spec, t) in enumerate(zip(abi, param_types)):
        if spec.kind != "scalar":
            if t not in POINTER_TYPES:
                raise AbiMismatch(f"entry {entry!r} param {i} ({spec.name}): a pointer needs .u64/.b64, got .{t}")
            continue
        want, got = spec.ptx_type, t
        if want[1:] != got[1:] or (want[0] == "f") != (got[0] == "f"):
            raise AbiMismatch(f"entry {entry!r} param {i} ({spec.name}): expected .{want}, got .{got}")


@dataclass(frozen=True)
class OutputSpec:
    """An output buffer: its name, shape and element dtype name (``"bf16"``...)."""

    name: str
    shape: Shape
    dtype: str


@dataclass
class StagePlan:
    """One run of a workload's operation laid out around the kernel under search (``Workload.plan``).

    buffers: the kernel's ABI buffers by name (device arrays, or NumPy arrays in CPU tests); before / after:
    zero-argument callables that enqueue the work to do before / after the kernel on the same stream (None:
    nothing). A one-kernel workload has neither: its kernel reads the operation's inputs and writes its outputs.
    A pipeline workload (``workloads.pipeline``) runs its reference stages there: ``before`` computes the
    kernel's input intermediates and poisons its output intermediates, ``after`` computes the operation's
    outputs from them. The benchmark times the kernel alone (``before`` and ``after`` are outside the timed
    interval); the gate, the fault check and every checked launch judge the operation's outputs after ``after``.
    """

    buffers: dict[str, Any] = field(default_factory=dict)
    before: Callable[[], None] | None = None
    after: Callable[[], None] | None = None

    def run_before(self) -> None:
        """Enqueue ``before`` (if any)."""
        if self.before is not None:
            self.before()

    def run_after(self) -> None:
        """Enqueue ``after`` (if any)."""
        if self.after is not None:
            self.after()


class Workload(ABC):
    """Base of all workloads. Subclasses set the attributes below and implement the methods that raise here.

    Attributes: name, entry (the ``.entry`` every seed exports), dtype, abi (tuple[ParamSpec, ...]),
    knob_space (knob -> allowed values), default_knobs, late_knobs (knobs a template gained after kernels of it
    were recorded, with the value an instance without them has: ``instantiate`` leaves them out of the launch
    config at that value, so a recorded kernel's identity, PTX and launch, stays what it was; empty: none),
    search_shapes / benchmark_shapes / gate_shapes /
    heldout_shapes (lists of shapes), distributions (input generators by name; the gate runs every one),
    primary_baseline (the baseline the objective's speedup is taken against), baseline_names (the library
    baselines ``baselines`` can build; the GPU evaluator times these unless told otherwise), libraries (the
    contenders of the default ``best`` objective, ``evaluators.objective.workload_objective``; empty:
    ``baseline_names``), uses_atomics (True lets the gate
    skip the bitwise determinism check), scalar_draws (runtime scalar -> the values the gate draws from per
    check, e.g. ``{"eps": (1e-6, 1e-5, 1e-3)}``: a kernel must honour the value it is passed, not a constant;
    a workload with draws must accept ``params`` in ``scalars``, ``reference`` and ``reference_rows``),
    nonfinite_distributions (distributions whose inputs hold NaN/Inf: the reference has NaN where the exact
    formula gives NaN and the comparator accepts NaN exactly there), index_shapes (shapes whose row buffers
    hold more than 2^31 elements, where a 32-bit element index wraps: the GPU worker's index check,
    ``evaluators.gpu.index_check``, launches there with the row buffers backed by little memory and compares
    the rows past element 2^31; empty: no check. Declare one only when rows are independent, the row buffers'
    leading dimension is the shape's first and there are no inout buffers; docs/add-a-workload.md),
    sanitizer_shapes (the fixed shapes compute-sanitizer replays an elite at, ``evaluators.gpu.sanitizer``:
    small, since an instrumented launch runs ~100x slower and holds the GPU's timing lock throughout; None: the
    gate shapes; ``sanitizer_shape_list``).

    Data contract the gate relies on: ``make_inputs`` returns every ``input`` and ``inout`` buffer of the ABI
    by name; ``outputs`` lists every ``output`` buffer; ``reference`` returns a float64 array for each output
    and each inout buffer (its final value) by name. A pipeline workload (``workloads.pipeline``: several
    kernels of which the search evolves one) keeps this contract for the operation's own buffers and lists
    its intermediates (buffers passed between stages) in ``abi`` only; ``plan`` supplies them.
    """

    name: str
    entry: str
    dtype: str
    abi: tuple[ParamSpec, ...]
    knob_space: dict[str, tuple[int, ...]]
    default_knobs: dict[str, int]
    late_knobs: dict[str, int] = {}
    search_shapes: list[Shape]
    benchmark_shapes: list[Shape]
    gate_shapes: list[Shape]
    heldout_shapes: list[Shape]
    distributions: tuple[str, ...]
    primary_baseline: str
    baseline_names: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    uses_atomics: bool = False
    sanitizer_shapes: list[Shape] | None = None
    scalar_draws: Mapping[str, tuple[float, ...]] = {}
    nonfinite_distributions: tuple[str, ...] = ()
    index_shapes: tuple[Shape, ...] = ()

    # -- construction spec, so a worker process can rebuild the same workload ---------------------------------
    def options(self) -> dict[str, Any]:
        """The constructor's keyword arguments that rebuild this workload (plain data: str, int, float, lists).
        Subclasses with more options than ``dtype`` override it."""
        return {"dtype": self.dtype}

    def spec(self) -> dict[str, Any]:
        """``{"_target_": "<module>.<Class>", **options()}``: what ``workloads.registry.build_workload`` (or
        ``hydra.utils.instantiate``) turns back into an equal workload in another process. GPU workers, Ray
        actors and replay scripts receive this, so a workload defined outside this repository works there as
        long as its module is importable."""
        cls = type(self)
        return {"_target_": f"{cls.__module__}.{cls.__qualname__}", **self.options()}

    # -- baselines ----------------------------------------------------------------------------------------------
    def baselines(self, inputs: Mapping[str, Any], shape: Shape, names: tuple[str, ...],
                  notes: dict[str, str]) -> dict[str, Any]:
        """Library implementations to time against, as zero-argument callables launching on ``inputs``
        (device arrays, CuPy) at ``shape``: name -> callable. Only the ``names`` asked for are built; one that
        cannot be (library missing, shape unsupported) is left out with the reason in ``notes[name]``.
        ``primary_baseline`` should be among them. The default has none (a note says so), so the objective
        falls back to the naive seed."""
        notes["all"] = f"workload {self.name!r} defines no library baselines"
        return {}

    # -- kernels ------------------------------------------------------------------------------------------------
    @abstractmethod
    def seeds(self) -> list[Kernel]:
        """Seed kernels: the naive one first, then the template at default knobs."""

    @abstractmethod
    def instantiate(self, knobs: Mapping[str, int]) -> Kernel:
        """The template compiled with ``knobs`` (missing ones default); ValueError on an invalid knob."""

    def check_knobs(self, knobs: Mapping[str, int]) -> dict[str, int]:
        """All knobs (``default_knobs`` filled in, values as int), each within its ``knob_space`` values.
        ValueError naming an unknown knob or a value outside its allowed set. Workloads with rules across knobs
        extend this."""
        unknown = set(knobs) - set(self.default_knobs)
        if unknown:
            raise ValueError(f"unknown {self.name} knob(s) {sorted(unknown)}; have {sorted(self.default_knobs)}")
        k = {**self.default_knobs, **{n: int(v) for n, v in knobs.items()}}
        for n, v in k.items():
            if v not in self.knob_space[n]:
                raise ValueError(f"knob {n}={v} not in {self.knob_space[n]}")
        return k

    # -- launch and roofline ------------------------------------------------------------------------------------
    @abstractmethod
    def launch_dims(self, shape: Shape, launch: LaunchConfig) -> tuple[Dim3, Dim3, int]:
        """(grid, block, dynamic shared bytes) for launching ``launch`` on ``shape``; ValueError if impossible."""

    @abstractmethod
    def elements_per_cta_sweep(self, shape: Shape, launch: LaunchConfig) -> int:
        """Elements one CTA streams per pass over its data (for the static traffic estimate)."""

    @abstractmethod
    def bytes_moved(self, shape: Shape) -> int:
        """Fewest DRAM bytes any correct kernel moves at ``shape`` (each input read, each output written once)."""

    @abstractmethod
    def flops(self, shape: Shape) -> int:
        """Floating-point operations at ``shape``."""

    # -- data ---------------------------------------------------------------------------------------------------
    @abstractmethod
    def make_inputs(self, shape: Shape, seed: int, distribution: str = "normal",
                    xp: ModuleType = np) -> dict[str, Any]:
        """Fresh inputs for ``shape`` from ``seed`` and a named distribution, in ``xp``'s representation."""

    @abstractmethod
    def outputs(self, shape: Shape) -> list[OutputSpec]:
        """The output buffers a launch at ``shape`` writes."""

    @abstractmethod
    def scalars(self, shape: Shape, params: Mapping[str, float] | None = None) -> dict[str, int | float]:
        """Values of the ABI's scalar parameters at ``shape``; ``params`` (from ``draw_params``) overrides the
        drawn ones. Workloads without ``scalar_draws`` may omit ``params`` from their signature."""

    @abstractmethod
    def reference(self, inputs: Mapping[str, Any], xp: ModuleType = np,
                  params: Mapping[str, float] | None = None) -> dict[str, Any]:
        """Float64 reference outputs (and final inout values) by name for ``inputs`` (either representation)
        and the drawn scalars ``params`` (None: the workload's defaults). Non-finite inputs give NaN exactly
        where the formula evaluated in float64 gives NaN."""

    @property
    @abstractmethod
    def tolerance(self) -> tuple[float, float]:
        """(atol, rtol): an output element passes when ``|out - ref| <= atol + rtol * |ref|`` plus half an ulp of
        the output type at ``ref`` (workloads.dtypes.half_ulp: no kernel can round better)."""

    # -- how a launch is laid out ----------------------------------------------------------------------------
    def plan(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], shape: Shape,
             params: Mapping[str, float] | None = None, xp: ModuleType = np) -> StagePlan:
        """How one run of the operation at ``shape`` on ``inputs`` (``make_inputs``' buffers) and ``outputs``
        (``outputs``' buffers) is laid around the kernel (StagePlan). The default, a one-kernel workload: the
        kernel's ABI buffers are the operation's own, nothing runs before or after it. Pipeline workloads
        (``workloads.pipeline.PipelineWorkload``) override it; every launcher (the GPU worker's, the sanitizer
        and ncu replays) launches through it."""
        return StagePlan(buffers={**inputs, **outputs})

    # -- shared helpers -----------------------------------------------------------------------------------------
    def buffer_names(self, *kinds: str) -> list[str]:
        """Names of the ABI buffers of the given kinds (``"input"``, ``"output"``, ``"inout"``), ABI order."""
        bad = set(kinds) - set(PARAM_KINDS)
        if bad:
            raise ValueError(f"unknown ParamSpec kind(s) {sorted(bad)}; have {PARAM_KINDS}")
        return [p.name for p in self.abi if p.kind in kinds]

    def draw_params(self, seed: int) -> dict[str, float]:
        """Runtime scalars for one gate check, one value per ``scalar_draws`` entry drawn from ``seed``
        (deterministic in it); empty when the workload declares no draws. Pass the result as ``params`` to
        ``scalars``, ``reference`` and ``reference_rows``."""
        rng = np.random.default_rng([int(seed) % (2**63), 0x5CA1A5])
        return {k: vals[int(rng.integers(len(vals)))] for k, vals in sorted(self.scalar_draws.items())}

    def reference_rows(self, inputs: Mapping[str, Any], rows: Any, xp: ModuleType = np,
                       params: Mapping[str, float] | None = None) -> dict[str, Any]:
        """Float64 reference of each output at the rows ``rows`` (1-D integer array, in ``xp``) of its leading
        dimension: what ``out[rows]`` must hold; and the final value of each ``inout`` buffer, whole (its own
        rows are not the outputs': the checked timed launches sample it themselves, ``timed_checks.flat_rows``).
        The default computes the whole reference and indexes the outputs; workloads whose rows are independent
        override it (the audit samples rows of huge shapes)."""
        ref = self.reference(inputs, xp, params) if params else self.reference(inputs, xp)
        inout = set(self.buffer_names("inout"))
        return {k: v if k in inout else v[rows] for k, v in ref.items()}

    def make_inputs_many(self, items: list[tuple[Shape, str, int]], xp: ModuleType = np) -> list[dict[str, Any]]:
        """``make_inputs(shape, seed, distribution, xp)`` for each (shape, distribution, seed) of ``items``, in
        order: the inputs of a gate batch. The default calls ``make_inputs`` per item; a workload may draw them
        together (fewer device operations: RMSNorm) as long as each item's inputs follow its distribution and
        are fresh for its seed (they need not equal ``make_inputs``' values for the same seed)."""
        return [self.make_inputs(shape, seed, distribution, xp) for shape, distribution, seed in items]

    def count_bad_rows(self, inputs: Mapping[str, Any], rows: Any, got: Mapping[str, Any], counter: Any,
                       xp: ModuleType, params: Mapping[str, float] | None = None) -> bool:
        """Fused form of ``reference_rows`` + the gate's comparator for a checked timed launch: add to ``counter``
        (a 1-element uint64 array of ``xp``) the elements of the outputs ``got`` (output name -> its rows ``rows``
        as gathered after the launch, (len(rows), ...) in ``xp``'s storage) that fail
        ``gate.compare``'s rule against the float64 reference of ``inputs`` with ``params``, without
        materialising the reference and without synchronising. Return False when there is no fused form (the
        default; and for workloads with inout buffers, whose final values ``reference_rows`` gives): the caller
        then compares with ``reference_rows``. Workloads whose float64 reference rows are costly to hold
        (RMSNorm at 16384 x 131072: 1.1 GB per checked launch) override it."""
        return False

    def reference_blocks(self, inputs: Mapping[str, Any], max_elements: int, xp: ModuleType = np,
                         params: Mapping[str, float] | None = None
                         ) -> Iterator[tuple[tuple[slice, ...], dict[str, Any]]]:
        """(index, reference) pairs that together cover every output element, each reference small enough
        (about ``max_elements``) to hold in float64; ``out[index]`` is compared with it. The default is one
        block; workloads whose rows are independent override it so huge shapes can be checked."""
        yield (), (self.reference(inputs, xp, params) if params else self.reference(inputs, xp))

    def gbps(self, shape: Shape, time_us: float) -> float:
        """Achieved bandwidth in GB/s (1e9 bytes/s): ``bytes_moved(shape) / time``."""
        return self.bytes_moved(shape) / (time_us * 1e-6) / 1e9

    def sanitizer_shape_list(self) -> list[Shape]:
        """The fixed shapes of the sanitizer replay: ``sanitizer_shapes``, or the gate shapes when it is None."""
        return [tuple(s) for s in (self.sanitizer_shapes if self.sanitizer_shapes is not None else self.gate_shapes)]

    def shape_list(self, which: str) -> list[Shape]:
        """One of the named shape lists: ``search``, ``benchmark``, ``gate`` or ``heldout``."""
        lists = {"search": self.search_shapes, "benchmark": self.benchmark_shapes, "gate": self.gate_shapes,
                 "heldout": self.heldout_shapes}
        if which not in lists:
            raise ValueError(f"shape list must be one of {sorted(lists)}, got {which!r}")
        return list(lists[which])
