"""Static facts about a compiled kernel that every evaluation reports: occupancy, traffic and features.

Uses the project's occupancy calculator (cuda_occupancy.h algorithm), the static traffic estimate and
``evaluators.features.kernel_features`` for the archive's behaviour measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evaluators.features import kernel_features, kernel_traffic
from evaluators.traffic import TrafficModel
from evaluators.types import Occupancy, ResourceUsage
from population.kernel import Kernel
from targets.occupancy import occupancy
from workloads.base import Shape, Workload


@dataclass
class Description:
    """occupancy (None if the launch cannot run); traffic: the TrafficEstimate (or None when the analysis
    failed, with ``notes`` saying why); features: behaviour measures by name."""

    occupancy: Occupancy | None
    traffic: Any
    features: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def describe(kernel: Kernel, workload: Workload, resources: ResourceUsage, shape: Shape,
             cc: tuple[int, int]) -> Description:
    """Occupancy, static traffic at ``shape`` and behaviour features of ``kernel`` given ptxas' ``resources``,
    on a GPU of compute capability ``cc`` (``GPUSpec.cc``).

    Raises ValueError if the launch rule refuses the kernel's launch config at ``shape``.
    """
    grid, block, smem = workload.launch_dims(shape, kernel.launch)
    notes: dict[str, str] = {}
    occ: Occupancy | None
    try:
        occ = occupancy(kernel.launch.threads, resources.registers, resources.shared_static_bytes,
                        dynamic_shared_bytes=smem, barriers=max(1, resources.barriers), cc=cc)
    except ValueError as e:
        occ, notes["occupancy"] = None, str(e)
    traffic = None
    model = None  # one analysis of the entry serves this shape and the features' search shapes
    try:
        model = TrafficModel(kernel.module.function(kernel.entry))
        elt = getattr(workload, "elt", None)
        traffic = model.estimate(grid, block, workload.elements_per_cta_sweep(shape, kernel.launch),
                                 element_bytes=elt)
    except Exception as e:  # the estimate is advisory; a kernel it cannot model is still evaluated
        notes["traffic"] = f"{type(e).__name__}: {e}"
    features: dict[str, float]
    try:
        per_shape = kernel_traffic(kernel, workload, model=model) if model is not None else None
        features = dict(kernel_features(kernel, workload, resources, occ, per_shape))
    except Exception as e:
        features, notes["features"] = {}, f"{type(e).__name__}: {e}"
    return Description(occ, traffic, features, notes)
