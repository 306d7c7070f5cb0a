"""Behaviour descriptors of a kernel: what the archive may index on, from ptxas resources, occupancy and the
static traffic estimate. Every evaluator (GPU or static) computes them the same way.

Descriptor ranges come from hardware limits, never from the data seen so far (a moving range makes cells drift):
``feature_ranges(cc)`` gives them for a compute capability.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evaluators.traffic import TrafficEstimate, TrafficModel
from evaluators.types import Occupancy, ResourceUsage
from evaluators.uniform import param_values
from population.kernel import Kernel
from targets.occupancy import device_props
from workloads.dtypes import ELEMENT_BYTES

Shape = tuple[int, ...]

# The workload dtypes, plus the PTX spellings of the same types.
_ELEMENT_BYTES = {**ELEMENT_BYTES, "f32": 4, "f16": 2}

# Global load sites per loop body counted at most (unrolled straight-line code can have more).
MAX_LOADS_IN_FLIGHT = 128.0


def feature_ranges(cc: tuple[int, int]) -> dict[str, tuple[float, float]]:
    """(low, high) per descriptor on a GPU of compute capability ``cc`` (``GPUSpec.cc``): 255 registers per
    thread (PTX ISA ``.maxnreg`` limit), the SM's resident warps (``targets.occupancy.device_props``), occupancy
    in [0, 1], traffic_ratio from 1 (the workload's minimum bytes) to 4 (every byte requested four times), the
    opt-in shared memory per CTA, spills up to 1 KiB per thread, accesses up to 16 bytes wide, global load sites
    per loop body up to MAX_LOADS_IN_FLIGHT. ValueError for a compute capability the calculator lacks."""
    props = device_props(tuple(cc))
    return {
        "registers": (0.0, 255.0),
        "active_warps": (0.0, float(props.max_warps_per_sm)),
        "occupancy": (0.0, 1.0),
        "traffic_ratio": (1.0, 4.0),
        "shared_bytes": (0.0, float(props.shared_mem_per_block_optin)),
        "spill_bytes": (0.0, 1024.0),
        "vector_bytes": (0.0, 16.0),
        "loads_in_flight": (0.0, MAX_LOADS_IN_FLIGHT),
    }


def element_bytes(workload) -> int:
    """Bytes per element of the workload's streamed dtype (``workload.elt`` when it has one, else from
    ``workload.dtype``: bf16/fp16 -> 2, fp32 -> 4). ValueError for an unknown dtype."""
    elt = getattr(workload, "elt", None)
    if isinstance(elt, int) and elt > 0:
        return elt
    dtype = getattr(workload, "dtype", None)
    if dtype not in _ELEMENT_BYTES:
        raise ValueError(f"workload {getattr(workload, 'name', workload)!r}: unknown dtype {dtype!r}")
    return _ELEMENT_BYTES[dtype]


def kernel_traffic(kernel: Kernel, workload, shapes: Sequence[Shape] | None = None,
                   model: TrafficModel | None = None) -> dict[Shape, TrafficEstimate]:
    """The static traffic estimate of ``kernel``'s entry at each shape (default: the workload's search shapes),
    launched as ``workload.launch_dims(shape, kernel.launch)`` says, with the workload's scalar values at that
    shape (``workload.scalars``) deciding uniform branches and counted loops. Pass ``model`` to reuse an analysis.

    Raises KeyError when the module lacks the entry and ValueError from the workload's launch rule."""
    model = model or TrafficModel(kernel.module.function(kernel.entry))
    elt = element_bytes(workload)
    abi = getattr(workload, "abi", None)
    out: dict[Shape, TrafficEstimate] = {}
    for shape in (workload.search_shapes if shapes is None else shapes):
        grid, block, _ = workload.launch_dims(tuple(shape), kernel.launch)
        sweep = workload.elements_per_cta_sweep(tuple(shape), kernel.launch)
        params = param_values(model.fn, abi, workload.scalars(tuple(shape))) if abi else None
        out[tuple(shape)] = model.estimate(grid, block, sweep, element_bytes=elt, params=params)
    return out


def traffic_ratio(workload, traffic: Mapping[Shape, TrafficEstimate]) -> float:
    """Mean over the shapes of estimated requested bytes / ``workload.bytes_moved(shape)`` (1.0 = the
    workload's minimum). ValueError on an empty mapping."""
    if not traffic:
        raise ValueError("traffic_ratio needs at least one shape")
    return sum(t.bytes / workload.bytes_moved(s) for s, t in traffic.items()) / len(traffic)


def kernel_features(
    kernel: Kernel,
    workload,
    resources: ResourceUsage,
    occupancy: Occupancy | None,
    traffic: TrafficEstimate | Mapping[Shape, TrafficEstimate] | None = None,
) -> dict[str, float]:
    """Behaviour descriptors of one compiled kernel, by name (ranges in ``feature_ranges(cc)``). The GPU and the
    static evaluator both call this, so the archive sees the same descriptors from either.

    registers: ptxas registers per thread; active_warps / occupancy: from ``occupancy`` (0 when None: the
    launch cannot run); traffic_ratio: static requested bytes / the workload's minimum bytes, averaged over
    ``workload.search_shapes`` (a fixed definition, so descriptors agree across evaluators): taken from
    ``traffic`` when it is a mapping holding every search shape (see ``kernel_traffic``), computed here
    otherwise (a single estimate, or None, is not enough);
    shared_bytes: static + dynamic shared memory per CTA; spill_bytes: spill stores + loads per thread;
    vector_bytes: widest global access per thread; loads_in_flight: most global load sites in one loop body
    or in the straight-line code (clipped at 128).

    Raises KeyError when the module lacks the entry and ValueError from the workload's launch rule.
    """
    search = [tuple(s) for s in workload.search_shapes]
    if not (isinstance(traffic, Mapping) and all(s in traffic for s in search)):
        traffic = kernel_traffic(kernel, workload, search)
    per_shape = {s: traffic[s] for s in search}
    any_t = per_shape[search[0]]
    return {
        "registers": float(resources.registers),
        "active_warps": float(occupancy.active_warps) if occupancy is not None else 0.0,
        "occupancy": float(occupancy.occupancy) if occupancy is not None else 0.0,
        "traffic_ratio": float(traffic_ratio(workload, per_shape)),
        "shared_bytes": float(resources.shared_static_bytes + kernel.launch.dynamic_smem_bytes),
        "spill_bytes": float(resources.spill_stores_bytes + resources.spill_loads_bytes),
        "vector_bytes": float(any_t.max_width_bytes),
        "loads_in_flight": float(min(any_t.loads_per_iteration, MAX_LOADS_IN_FLIGHT)),
    }
