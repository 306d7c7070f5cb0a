"""Timing on the GPU with CUDA events: warm-up, L2 flush before every timed launch, interleaving, median.

Method (DESIGN.md, "Traps"): each callable is warmed up, then the callables are timed round-robin in the same
process (candidate, baseline 1, baseline 2, candidate, ...) so clock and thermal drift hit all alike; before
every timed launch a buffer of twice the L2 size is *read* (a streaming kernel with 16-byte loads) so the launch
reads its inputs from DRAM. Reading, not writing, matters: a memset leaves the L2 full of dirty lines whose
write-back to DRAM would then be charged to the timed launch (tens of MB at ~4 TB/s: ~15 µs, which dominates
small shapes); the flush ends with a 200 µs hold of the stream, so the host enqueues the launch and its events
while the GPU is still busy and the interval measures GPU execution, not host launch overhead; each launch sits
between two events on the stream; the result is the median in µs.
The copy roofline is a device-to-device ``cudaMemcpyAsync`` of ``COPY_BYTES``, counted as bytes read plus
bytes written, median of repeats. Only runs inside a process that owns a GPU (the worker).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

COPY_BYTES = 1 << 30  # 1 GiB each way: far beyond the 60 MiB L2 of an H200
# A measured bandwidth above the copy roofline by more than this factor is a bug, not a result.
ROOFLINE_SLACK = 1.05


def cupy_module() -> Any:
    """Import CuPy (raises ImportError with a hint when it is missing)."""
    try:
        import cupy
    except ImportError as e:  # pragma: no cover - only on a machine without CuPy
        raise ImportError("GPU evaluation needs CuPy (pip install cupy-cuda13x)") from e
    return cupy


_FLUSH_SRC = r"""
extern "C" __global__ void l2_flush_read(const ulonglong2* __restrict__ p, unsigned long long n,
                                         unsigned long long* __restrict__ sink) {
    unsigned long long acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        ulonglong2 v = p[i];
        acc ^= v.x ^ v.y;
    }
    if (acc == 0x9E3779B97F4A7C15ull) sink[0] = acc;  // never true for the filled buffer; keeps the loads alive
}

// Keeps the stream busy for `ns` nanoseconds (%globaltimer, PTX ISA 10.31) so the host can enqueue the timed
// launch and its two events before the GPU reaches them: the interval then holds GPU work only, not the
// host-side launch overhead (Python, CuPy, torch.compile guards) of the callable being timed.
extern "C" __global__ void hold_stream(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(500);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
"""


@dataclass
class L2Flusher:
    """Evicts the L2 by reading ``nbytes`` (twice the L2 by default) of clean device memory on the current
    stream, then holds the stream for ``hold_us`` µs so that the host-side launch overhead of the next timed
    callable is hidden behind GPU work instead of being counted. The buffer is filled once at construction,
    so every flush leaves only clean lines behind."""

    nbytes: int
    buf: Any = None
    sink: Any = None
    kernel: Any = None
    blocks: int = 1056
    hold: Any = None
    hold_us: float = 200.0

    @classmethod
    def for_device(cls, factor: int = 2) -> L2Flusher:
        cp = cupy_module()
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
        n = max(factor * int(props["l2CacheSize"]), 8 << 20) // 16 * 16
        buf = cp.empty(n, dtype=cp.uint8)
        buf.fill(1)
        cp.cuda.get_current_stream().synchronize()
        module = cp.RawModule(code=_FLUSH_SRC)
        return cls(n, buf, cp.zeros(1, dtype=cp.uint64), module.get_function("l2_flush_read"),
                   8 * int(props["multiProcessorCount"]), module.get_function("hold_stream"))

    def __call__(self) -> None:
        cp = cupy_module()
        self.kernel((self.blocks,), (512,), (self.buf, cp.uint64(self.nbytes // 16), self.sink))
        if self.hold is not None and self.hold_us > 0:
            self.hold((1,), (1,), (cp.uint64(int(self.hold_us * 1000)),))


@dataclass
class TimedCall:
    """A timed callable with untimed set-up and follow-up work, all enqueued on the current stream.

    launch(): the timed work (one kernel launch). prepare(r): enqueued before repeat ``r``'s flush, outside
    the timed interval (refill the outputs with a pattern drawn for this launch, pick the input set); warm-up
    launches get ``r = -1 - k``. after(r): enqueued right after repeat ``r``'s end event (e.g. keep a copy of
    the output of the launch that will be checked). Candidates and baselines get the same kind of set-up, so
    the work around each timed launch, and therefore the L2 state, is alike.
    """

    launch: Callable[[], Any]
    prepare: Callable[[int], Any] | None = None
    after: Callable[[int], Any] | None = None


# The CUDA events of an enqueued round-robin timing: name -> (start, end) per timed launch, in launch order.
Marks = dict[str, list[tuple[Any, Any]]]


def enqueue_interleaved(fns: dict[str, Callable[[], Any] | TimedCall], flush: Callable[[], None] | None = None, *,
                        warmup: int = 3, repeats: int = 20) -> Marks:
    """``time_interleaved`` up to its last enqueue: the warm-up launches (then one synchronisation), then every
    timed launch with its flush, events and untimed work enqueued, without waiting for the GPU to run them; the
    host is free for other work (the next shape's draws) until ``elapsed_us``."""
    cp = cupy_module()
    calls = {n: f if isinstance(f, TimedCall) else TimedCall(f) for n, f in fns.items()}
    for call in calls.values():
        for k in range(warmup):
            if call.prepare is not None:
                call.prepare(-1 - k)
            call.launch()
    cp.cuda.get_current_stream().synchronize()
    marks: dict[str, list[tuple[Any, Any]]] = {n: [] for n in calls}
    for r in range(repeats):
        for name, call in calls.items():
            if call.prepare is not None:
                call.prepare(r)
            if flush is not None:
                flush()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            call.launch()
            end.record()
            if call.after is not None:
                call.after(r)
            marks[name].append((start, end))
    return marks


def elapsed_us(marks: Marks) -> dict[str, list[float]]:
    """Wait for the current stream, then name -> per-launch times in µs of an ``enqueue_interleaved`` timing.
    An error of a launch (a fault) surfaces here as CuPy's CUDADriverError/CUDARuntimeError."""
    cp = cupy_module()
    cp.cuda.get_current_stream().synchronize()
    return {n: [cp.cuda.get_elapsed_time(s, e) * 1e3 for s, e in ms] for n, ms in marks.items()}


def time_interleaved(fns: dict[str, Callable[[], Any] | TimedCall], flush: Callable[[], None] | None = None, *,
                     warmup: int = 3, repeats: int = 20) -> dict[str, list[float]]:
    """Time each callable ``repeats`` times, round-robin, each launch between two CUDA events after ``flush``.

    fns: name -> a callable that enqueues the work (a kernel launch) on the current stream, or a TimedCall
    (its ``prepare`` runs before the flush, its ``after`` after the end event: neither is timed).
    Returns name -> list of per-launch times in µs (take the median). Exceptions of the callables propagate.
    ``enqueue_interleaved`` then ``elapsed_us``: the same with host work in between.
    """
    return elapsed_us(enqueue_interleaved(fns, flush, warmup=warmup, repeats=repeats))


def median_us(samples: list[float]) -> float:
    """Median of per-launch times (µs)."""
    return float(statistics.median(samples))


def copy_bandwidth_gbps(nbytes: int = COPY_BYTES, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in GB/s (1e9 B/s), counting ``2 * nbytes`` (read + write), median of
    ``repeats`` after warm-up, on the current device."""
    cp = cupy_module()
    src = cp.empty(nbytes, dtype=cp.uint8)
    src.fill(1)  # never time on untouched pages
    dst = cp.empty_like(src)
    stream = cp.cuda.get_current_stream()

    def copy() -> None:
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes,
                                    cp.cuda.runtime.memcpyDeviceToDevice, stream.ptr)

    t = median_us(time_interleaved({"copy": copy}, warmup=3, repeats=repeats)["copy"])
    return 2 * nbytes / (t * 1e-6) / 1e9


def too_fast(gbps: float, copy_gbps: float, slack: float = ROOFLINE_SLACK) -> bool:
    """True when a bandwidth is beyond the measured copy roofline (times ``slack``): a bug, not a result."""
    return copy_gbps > 0 and gbps > copy_gbps * slack
