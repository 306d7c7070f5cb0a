"""The front half of every evaluation: compile -> entry -> ABI -> input stores -> launch/occupancy -> traffic and
features, with one status per failure. The static evaluator, the GPU pool (and the replay evaluator) all call
``prepare``, so a broken kernel gets the same status and reason whichever evaluator sees it.

Steps, in order; the first that fails decides (``Rejected.status``):

1. ``compile``: ptxas for ``arch`` (``evaluators.toolchain.compile_ptx``) -> ``compile_error`` with ptxas'
   first error and its line.
2. ``entry``: the kernel's ``.entry`` is in the PTX module and in ptxas' report -> else ``load_error`` (what
   ``cuModuleGetFunction`` reports for a cubin without that function).
3. ``abi``: the entry's ``.param`` types against the workload ABI (``workloads.base.check_abi``) ->
   ``launch_error`` (a launch with these arguments would be undefined).
4. ``input stores``: every global store provably into an output/inout buffer or a module variable
   (``evaluators.input_stores``) -> else ``input_mutated``; no global-memory race pattern between CTAs
   (``evaluators.race_lint``) -> else ``nondeterministic``.
5. ``launch``: the workload's launch rule at every shape asked for (``Workload.launch_dims``), then occupancy
   on the target GPU (``targets.occupancy.occupancy_detail`` with the launched block, ptxas' registers, static
   and dynamic shared memory and barriers) -> ``launch_error`` when the rule refuses or no CTA fits on an SM.
6. ``traffic and features``: the static traffic estimate at the shapes asked for and at the workload's search
   shapes (one ``evaluators.traffic.TrafficModel`` analysis), and the behaviour descriptors
   (``evaluators.features.kernel_features``). Advisory: a kernel the traffic model cannot analyse is still
   evaluated, ``notes`` says why (an evaluator that needs the estimate decides what to do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evaluators.features import kernel_features, kernel_traffic
from evaluators.input_stores import check_input_stores
from evaluators.race_lint import race_lint
from evaluators.toolchain import CompileResult, compile_ptx
from evaluators.traffic import TrafficEstimate, TrafficModel
from evaluators.types import CompileError, EvalResult, Occupancy, ResourceUsage, Status
from population.kernel import Kernel
from targets.occupancy import OccupancyDetail, occupancy_detail
from targets.spec import GPUSpec
from workloads.base import AbiMismatch, Shape, Workload, check_abi


@dataclass
class Prepared:
    """A kernel that passed the front half.

    compiled: ptxas' result (cubin bytes, resources of every entry, seconds, cached); resources: the entry's
    ResourceUsage; param_types: the entry's ``.param`` types in order (``"u64"``, ``"u32"``, ``"f32"``...);
    block: the launched CTA shape at the first shape; dynamic_smem: its dynamic shared memory in bytes;
    occupancy / detail: on the target GPU; traffic: TrafficEstimate per shape (the shapes asked for and the
    search shapes; empty when the analysis failed); features: behaviour descriptors by name (empty when they
    could not be computed); notes: why an advisory step gave nothing.
    """

    compiled: CompileResult
    resources: ResourceUsage
    param_types: list[str]
    block: tuple[int, int, int]
    dynamic_smem: int
    occupancy: Occupancy
    detail: OccupancyDetail
    traffic: dict[Shape, TrafficEstimate] = field(default_factory=dict)
    features: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def fields(self) -> dict[str, Any]:
        """The EvalResult fields the front half fills: resources, occupancy, features, traffic_bytes (bytes at
        the first shape, None without an estimate)."""
        first = next(iter(self.traffic.values()), None)
        return {"resources": self.resources, "occupancy": self.occupancy, "features": dict(self.features),
                "traffic_bytes": float(first.bytes) if first is not None else None}


class Rejected(Exception):
    """The kernel stopped in the front half. status: the Status; reason: what failed, where; step: the step
    name (``compile``, ``entry``, ``abi``, ``input_stores``, ``launch``); fields: EvalResult fields known by
    then (resources, occupancy, features); extra: EvalResult.extra entries (ptxas line, log...)."""

    def __init__(self, status: Status, reason: str, step: str, fields: dict[str, Any] | None = None,
                 extra: dict[str, Any] | None = None):
        super().__init__(reason)
        self.status, self.reason, self.step = status, reason, step
        self.fields, self.extra = dict(fields or {}), dict(extra or {})

    def result(self, *, estimate: bool, eval_seconds: float, prefix: str = "",
               extra: dict[str, Any] | None = None) -> EvalResult:
        """The EvalResult of this rejection (``prefix`` starts the reason, e.g. ``"estimate: "``)."""
        return EvalResult(status=self.status, reason=prefix + self.reason, estimate=estimate,
                          eval_seconds=eval_seconds, extra={**(extra or {}), **self.extra}, **self.fields)


def _entry_param_types(kernel: Kernel) -> list[str]:
    fn = kernel.module.function(kernel.entry)  # KeyError when the module has no such entry
    return [p.type for p in fn.params]


def prepare(kernel: Kernel, workload: Workload, gpu: GPUSpec, shapes: list[Shape], *, arch: str | None = None,
            cache_dir: str | None = None, check_stores: bool = True) -> Prepared:
    """Run the front half (module docstring) of ``kernel`` for ``workload`` on ``gpu`` at ``shapes`` (at
    least one; the first is where occupancy and ``traffic_bytes`` are taken).

    arch: ptxas target (None: ``gpu.arch``); cache_dir: on-disk ptxas cache; check_stores: run the input-store
    check and the race lint (step 4). Returns Prepared; raises Rejected (never CompileError, KeyError or ValueError for a bad
    kernel) and ValueError for an empty ``shapes``.
    """
    if not shapes:
        raise ValueError("prepare needs at least one shape")
    shapes = [tuple(int(v) for v in s) for s in shapes]
    arch = arch or gpu.arch
    try:
        compiled = compile_ptx(kernel, arch, cache_dir=cache_dir)
    except CompileError as e:
        raise Rejected(Status.COMPILE_ERROR, f"ptxas: {e}", "compile",
                       extra={"line": e.line, "statement": str(e.statement) if e.statement else None,
                              "log": e.log}) from None
    ru = compiled.resources.get(kernel.entry)
    try:
        types = _entry_param_types(kernel)
    except KeyError:
        ru = None
    if ru is None:
        raise Rejected(Status.LOAD_ERROR, f"entry {kernel.entry!r} is not in the compiled module (entries: "
                       f"{sorted(compiled.resources)})", "entry")
    try:
        check_abi(workload.abi, types, kernel.entry)
    except AbiMismatch as e:
        raise Rejected(Status.LAUNCH_ERROR, f"ABI: {e}", "abi", {"resources": ru}) from None
    if check_stores:
        stores = check_input_stores(kernel, workload)
        if not stores.ok:
            raise Rejected(Status.INPUT_MUTATED, stores.reason(), "input_stores", {"resources": ru})
        if not (races := race_lint(kernel, stores.provenance, workload.uses_atomics, workload.uses_atomics,
                                    workload.uses_atomics, workload.uses_atomics)).ok:
            raise Rejected(Status.NONDETERMINISTIC, races.reason(), "race_lint", {"resources": ru})
    dims = {}
    for s in shapes:
        try:
            dims[s] = workload.launch_dims(s, kernel.launch)
        except ValueError as e:
            raise Rejected(Status.LAUNCH_ERROR, f"launch rule at shape {s}: {e}", "launch",
                           {"resources": ru}) from None
    _, block, dyn = dims[shapes[0]]
    threads = block[0] * block[1] * block[2]
    try:
        detail = occupancy_detail(threads, ru.registers, ru.shared_static_bytes, dynamic_shared_bytes=dyn,
                                  barriers=ru.barriers, cc=gpu.cc)
    except ValueError as e:
        raise Rejected(Status.LAUNCH_ERROR, f"occupancy: {e}", "launch", {"resources": ru}) from None
    occ = detail.to_occupancy()
    if occ.blocks_per_sm == 0:
        raise Rejected(
            Status.LAUNCH_ERROR,
            f"cannot launch {threads} threads with {ru.registers} registers, {ru.shared_static_bytes} B static + "
            f"{dyn} B dynamic shared memory, {ru.barriers} barriers on {gpu.name} (limits per SM: registers "
            f"{detail.limit_registers}, shared memory {detail.limit_shared_memory}, warps {detail.limit_warps} "
            f"CTAs; limiter {occ.limiter})", "launch", {"resources": ru, "occupancy": occ})
    prepared = Prepared(compiled, ru, types, tuple(block), int(dyn), occ, detail)
    _traffic_and_features(prepared, kernel, workload, shapes)
    return prepared


def _traffic_and_features(p: Prepared, kernel: Kernel, workload: Workload, shapes: list[Shape]) -> None:
    """Fill p.traffic (shapes + search shapes, one analysis) and p.features; failures go to p.notes."""
    wanted = list(dict.fromkeys([*shapes, *(tuple(s) for s in workload.search_shapes)]))
    try:
        model = TrafficModel(kernel.module.function(kernel.entry))
        p.traffic = kernel_traffic(kernel, workload, wanted, model)
    except Exception as e:  # the estimate is advisory; a kernel it cannot model is still evaluated
        p.notes["traffic"] = f"{type(e).__name__}: {e}"
        return
    try:
        p.features = dict(kernel_features(kernel, workload, p.resources, p.occupancy, p.traffic))
    except Exception as e:
        p.notes["features"] = f"{type(e).__name__}: {e}"
