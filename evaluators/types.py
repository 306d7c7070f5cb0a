"""Result types shared by the toolchain, the evaluators, the archive and the engine."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from population.kernel import Kernel
from targets.occupancy import Occupancy


class Status(StrEnum):
    """Outcome of evaluating one candidate (DESIGN.md vocabulary). Only ``OK`` enters the archive.

    ``INPUT_MUTATED``: the kernel writes (or may write) a buffer the ABI declares an input: found statically in
    the PTX (a store whose address derives from an input ``.param``; the reason names the line), on the device
    (the shared benchmark inputs differ from their pristine copy after the candidate ran, or a store faulted on
    an input mapped read-only). The inputs are restored before anything else runs.
    ``SANITIZER``: a compute-sanitizer tool (memcheck, racecheck, synccheck) reported errors for the kernel;
    the reason names the tool and the error count. See GATE.md for what each status closes.
    """

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    LOAD_ERROR = "load_error"
    LAUNCH_ERROR = "launch_error"
    TIMEOUT = "timeout"
    CRASH = "crash"
    WRONG_RESULT = "wrong_result"
    NONDETERMINISTIC = "nondeterministic"
    TOO_FAST_TO_BE_TRUE = "too_fast_to_be_true"
    SKIPPED = "skipped"
    INPUT_MUTATED = "input_mutated"
    SANITIZER = "sanitizer"


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas reports for one entry (``ptxas -v``), per thread unless said otherwise.

    registers: registers per thread; spill_stores_bytes / spill_loads_bytes: bytes spilled to local memory;
    stack_frame_bytes: per-thread stack frame; shared_static_bytes: static shared memory per CTA;
    constant_bytes: bank-0 constant memory (kernel params included); barriers: named barriers used (0..16);
    arch: the ``sm_XX`` compiled for.
    """

    entry: str
    arch: str
    registers: int
    spill_stores_bytes: int = 0
    spill_loads_bytes: int = 0
    stack_frame_bytes: int = 0
    shared_static_bytes: int = 0
    constant_bytes: int = 0
    barriers: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CompileError(Exception):
    """ptxas (or the parser) refused a module.

    message: the first error line; line: 1-based line in the printed PTX ptxas saw (None if not given);
    statement: the AST node printed on that line when known; log: ptxas' full output.
    """

    message: str
    line: int | None = None
    statement: Any = None
    log: str = ""

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.message}"


@dataclass
class ShapeResult:
    """Timing of one kernel at one problem shape.

    time_us: median kernel time in µs; gbps: workload bytes / time in GB/s (1e9 bytes/s);
    frac_copy: gbps / measured device-to-device copy GB/s; speedups: baseline name -> baseline µs / time_us;
    baseline_us: baseline name -> that baseline's median time in µs at this shape.
    estimate: True when the number comes from a model, not a measurement.
    """

    shape: tuple[int, ...]
    dtype: str
    time_us: float
    gbps: float
    frac_copy: float | None = None
    speedups: dict[str, float] = field(default_factory=dict)
    baseline_us: dict[str, float] = field(default_factory=dict)
    estimate: bool = False


@dataclass
class EvalResult:
    """Everything the engine learns from evaluating one kernel.

    objective: the workload's success metric (geomean speedup over the primary baseline across the evaluated
        shapes; for the static evaluator an estimate, see ``estimate``); None unless status is OK.
    features: behaviour measures the archive may index on, by name (``registers``, ``active_warps``,
        ``occupancy``, ``traffic_ratio``, ``shared_bytes``...).
    traffic_bytes: static DRAM traffic estimate in bytes (``evaluators.traffic``); measured_dram_bytes: DRAM
        bytes read + written as ncu measured them, when it ran; eval_seconds: wall time of the evaluation, s.
    """

    status: Status
    reason: str = ""
    objective: float | None = None
    shapes: list[ShapeResult] = field(default_factory=list)
    resources: ResourceUsage | None = None
    occupancy: Occupancy | None = None
    traffic_bytes: float | None = None
    features: dict[str, float] = field(default_factory=dict)
    estimate: bool = False
    measured_dram_bytes: float | None = None
    eval_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = str(self.status)
        return d


def geomean(xs: list[float]) -> float:
    """Geometric mean of positive numbers; ValueError on an empty list or a non-positive value."""
    if not xs or any(x <= 0 or math.isnan(x) for x in xs):
        raise ValueError(f"geomean needs positive numbers, got {xs!r}")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


class Evaluator(Protocol):
    """What the engine calls. ``evaluate`` blocks until the result is in and must be safe to call from as many
    threads as ``capacity`` says (two per GPU worker, so ptxas overlaps the GPU; CPU processes for the static
    evaluator)."""

    capacity: int

    def evaluate(self, kernel: Kernel) -> EvalResult: ...

    def close(self) -> None: ...
