"""GPU targets: the facts about each GPU model the project compiles for, in one place.

``spec``: GPUSpec and the known GPUs (SM count, bandwidths, L2, limits; sources cited there);
``occupancy``: the ``cuda_occupancy.h`` algorithm and its per-compute-capability tables.
"""

from targets.occupancy import DeviceProps, device_props, occupancy
from targets.spec import DEFAULT_GPU, GPUS, SEED_ARCH, GPUSpec, get_gpu, gpu_from_config, resolve_gpu

__all__ = ["DEFAULT_GPU", "GPUS", "SEED_ARCH", "DeviceProps", "GPUSpec", "device_props", "get_gpu", "gpu_from_config",
           "occupancy", "resolve_gpu"]
