"""GPU targets: the facts about each GPU model the project compiles for, in one place.

``spec``: GPUSpec and the known GPUs (SM count, bandwidths, L2, limits; sources cited there);
``occupancy``: the ``cuda_occupancy.h`` algorithm and its per-compute-capability tables.
"""

from targets.occupancy import DeviceProps, device_props, occupancy
from targets.spec import GPUS, GPUSpec, get_gpu

__all__ = ["GPUS", "DeviceProps", "GPUSpec", "device_props", "get_gpu", "occupancy"]
