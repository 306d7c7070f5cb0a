"""Which GPUs CuPy can see, asked in a child process so this process never initialises CUDA.

A CUDA context created in the parent would be inherited badly by forked children and would hold GPU memory
for nothing; the workers own the GPUs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import lru_cache

_PROBE = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"


@lru_cache(maxsize=1)
def gpu_count() -> int:
    """Number of GPUs CuPy sees (0 when CuPy is missing, no driver is loaded, or the probe fails/hangs)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if proc.returncode != 0:
        return 0
    try:
        return int(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def visible_devices() -> list[int]:
    """Indices 0..gpu_count()-1 (indices into CUDA_VISIBLE_DEVICES when it is set)."""
    return list(range(gpu_count()))


def physical_device(index: int) -> str:
    """What to put in a worker's CUDA_VISIBLE_DEVICES for visible device ``index`` (respects an outer mask)."""
    outer = os.environ.get("CUDA_VISIBLE_DEVICES")
    if outer:
        ids = [s.strip() for s in outer.split(",") if s.strip()]
        if index < len(ids):
            return ids[index]
    return str(index)
