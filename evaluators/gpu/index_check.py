"""The index check: one launch at a shape whose row buffers hold more than 2^31 elements, cheaply.

A kernel that keeps its element indices in 32-bit ``int`` (``row * N`` in ``mul.lo.s32``: one register and one
multiply-add fewer per address) is right as long as every buffer holds fewer than 2^31 elements, and every gate,
benchmark, held-out and replay shape does (RMSNorm's largest, 16384 x 131072 and 8192 x 262144, hold exactly
2^31): red-team kernel ``rt_index32``. A workload declares the shapes where such an index wraps
(``Workload.index_shapes``: RMSNorm 16641 x 131072, 2^31 + 257 x 131072 elements, a bf16 x of 4 GiB + 64.25
MiB: 257 rows past element 2^31, whole CTAs of them and a tail row, so a kernel that indexes its main path in 32
bits and only its remainder in 64 wraps too, red-team ``rt_index_tail64``); the
worker runs one launch there after the fault check, in every ``full`` gate schedule (final verification, gate
stability) and in one rotating evaluation in ``gate_schedule.INDEX_PERIOD`` (``gate_schedule.select``).

A naive check would allocate, fill and compare 8 GiB. Here each row buffer (a buffer whose leading dimension is
the shape's M: RMSNorm's x and y) lives in a ``vmm.WideBuffer``: the address space of the whole buffer, ending
at an unmapped granule, with

- the granules from the one holding the first row that has an element at index 2^31 or above (the *checked
  rows*, rows ``r >= floor(2^31 / row_elements)``) to the end backed by physical memory of their own, mapped
  once;
- every granule before them backed by one chunk of CHUNK_BYTES mapped again and again (its content repeats;
  nothing is compared there);
- GUARD: 2^31 elements' worth of address space before the mapping reserved and never mapped.

Why the aliasing cannot hide a wrapped index (the proof the check rests on). Let e be a buffer's element bytes,
p its address, L = 2^31. (1) A signed 32-bit index of element j >= L wraps to j - 2^32, so the kernel touches
p + e (j - 2^32). For every shape here j < L + D with D = M N - L much smaller than L (RMSNorm: D = 257 x 2^17 < 2^26), so
j - 2^32 lies in [-L, -L + D): the address lies in [p - e L, p - e (L - D)). The mapping starts at most one
granule (g) before p, so that range is below the mapping whenever e (L - D) > g (RMSNorm: 2^32 - 257 x 2^18 bytes
against 2 MiB), and at or above p - e L >= (mapping start) - GUARD: inside the guard, never mapped. The access
faults (``wrong_result``, one worker restart), whatever the alias period. (2) The checked rows' bytes, for x and
for y, are backed by memory mapped exactly once, at exactly their own addresses: no other address, wrapped,
masked or aliased, reaches that memory. So a kernel that reads a checked row of x from anywhere else (an index
taken mod 2^31, say) reads the chunk's repeated filler, not the row, and its output differs from the reference of
the row (drawn fresh per check); and one that writes a checked row of y anywhere else leaves the poison there
(``never written``). What the check compares is therefore exactly what a check on 8 GiB of plain memory would
compare at the checked rows. (3) The rows below the checked ones share memory (for y: many rows write each
physical byte), so nothing is concluded about them: they are checked at every other shape.

Workload contract (``Workload.index_shapes``): rows independent (the checked rows' reference is
``reference_for`` of ``make_inputs`` drawn for those rows alone, with the same non-row inputs), row buffers with
leading dimension M, no inout buffers. Cost once the mappings exist (kept by the worker: ``IndexCheckSets``):
the kernel over the whole shape (RMSNorm: 4 GiB read and 4 GiB written, ~2.2 ms of an H200's bandwidth), 20
device operations (two 256 MiB fills among them) and two synchronisations; the first use maps the chunks
(RMSNorm: 2 buffers x (16 chunk maps + 1), ~76 driver calls, ~21 ms, once per worker). Cannot catch: an index kept in unsigned 32 bits
(right up to 2^32 elements: it would need a shape of twice the size), other wrong kernels at the rows below the
checked ones (judged at the other shapes), indices that wrap only at shapes past the declared ones.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

# Elements past which a signed 32-bit element index wraps.
INDEX_LIMIT = 1 << 31
# Bytes of the physical chunk mapped over the unchecked part of a row buffer (rounded up to granules): 16 maps
# cover 4 GiB; larger than an H200's 50 MB L2, so the launch streams from memory as it would over 4 GiB.
CHUNK_BYTES = 256 << 20
# Byte that fills the repeated chunk and the own memory around the checked rows: finite in bf16 (0x3F3F ~
# 0.746), fp16 (~1.81) and fp32 (0x3F3F3F3F ~ 0.747), and unlike any row drawn for the check.
FILLER = 0x3F


def checked_rows(shape: tuple[int, ...]) -> int:
    """The first row of ``shape`` (M, ...) holding an element at flat index INDEX_LIMIT or above:
    floor(INDEX_LIMIT / row elements). ValueError when the shape holds no such element."""
    row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    if int(np.prod(shape)) <= INDEX_LIMIT:
        raise ValueError(f"index shape {tuple(shape)} holds {int(np.prod(shape))} elements, not more than "
                         f"{INDEX_LIMIT}")
    return INDEX_LIMIT // row


_ROW_NAMES: dict[tuple, list[str]] = {}


def row_inputs(workload: Any, shape: tuple[int, ...]) -> list[str]:
    """Names of the inputs of ``workload`` whose leading dimension follows M (drawn on the host at 1 and 2 rows of
    ``shape``'s row; cached per workload and shape)."""
    key = (id(workload), tuple(shape))
    if key not in _ROW_NAMES:
        a = workload.make_inputs((1, *shape[1:]), 0, "normal", np)
        b = workload.make_inputs((2, *shape[1:]), 0, "normal", np)
        _ROW_NAMES[key] = [k for k in a if np.shape(a[k]) != np.shape(b[k])]
    return _ROW_NAMES[key]


class IndexSet:
    """The WideBuffers of one index shape: ``inputs`` and ``outputs`` (name -> CuPy view of the whole buffer),
    ``buffers`` (name -> WideBuffer), ``first`` (the first checked row). ``close`` frees them."""

    def __init__(self, workload: Any, shape: tuple[int, ...], rows: Mapping[str, tuple[tuple[int, ...], Any]]):
        import cupy as cp

        from evaluators.gpu.vmm import WideBuffer

        self.shape, self.first = tuple(shape), checked_rows(shape)
        self.buffers: dict[str, WideBuffer] = {}
        self.views: dict[str, Any] = {}
        try:
            for name, (full, dtype) in rows.items():
                item = np.dtype(dtype).itemsize
                row_bytes = int(np.prod(full[1:])) * item if len(full) > 1 else item
                b = self.buffers[name] = WideBuffer(int(np.prod(full)) * item, self.first * row_bytes, CHUNK_BYTES,
                                                    INDEX_LIMIT * item, cp.cuda.runtime.getDevice())
                self.views[name] = b.array(full, dtype)
        except BaseException:
            self.close()
            raise

    def fill(self) -> None:
        """Every byte of memory set to FILLER (no synchronisation): one memset per physical allocation (the
        chunk once, not once per mapping: 256 MiB, not 4 GiB)."""
        import cupy as cp

        stream = cp.cuda.get_current_stream().ptr
        for b in self.buffers.values():
            for addr, size in b.allocations:
                cp.cuda.runtime.memsetAsync(addr, FILLER, size, stream)

    def close(self) -> None:
        from evaluators.gpu.vmm import close_buffers

        close_buffers(self.buffers)


class IndexCheckSets:
    """The index check's mappings, kept across evaluations (one IndexSet per shape; the chunk maps are the cost:
    ~76 driver calls for RMSNorm's shape); ``limit`` shapes at most, the least recently used freed first."""

    def __init__(self, limit: int = 2) -> None:
        self.limit = int(limit)
        self.sets: OrderedDict[tuple, IndexSet] = OrderedDict()

    def get(self, workload: Any, shape: tuple[int, ...], rows: Mapping[str, tuple[tuple[int, ...], Any]]) -> IndexSet:
        from evaluators.gpu.vmm import evict_oldest

        key = (tuple(shape), tuple((k, v[0], str(np.dtype(v[1]))) for k, v in rows.items()))
        s = self.sets.get(key)
        if s is None:
            s = self.sets[key] = IndexSet(workload, shape, rows)
            evict_oldest(self.sets, self.limit)
        self.sets.move_to_end(key)
        return s

    def close(self) -> None:
        for s in self.sets.values():
            s.close()
        self.sets.clear()


def index_check(workload: Any, run: Callable[..., None], shape: tuple[int, ...], seed: int,
                cache: IndexCheckSets | None = None) -> tuple[str | None, dict[str, Any]]:
    """One launch of ``run(inputs, outputs, shape, params)`` (synchronised) at ``shape`` (one of
    ``workload.index_shapes``) with every row buffer in a WideBuffer (module docstring), the checked rows of the
    row inputs drawn fresh from ``seed`` (``make_inputs`` at those rows alone; the other inputs from the same
    draw), the rest FILLER, the checked rows of the outputs poisoned (NaN pattern); then those rows compared
    with the float64 reference of the rows drawn. ``cache``: the worker's mappings (None: made and freed here).

    Returns (reason when the output is wrong, else None; notes: shape, checked rows). KernelFault from ``run``
    (a wrapped index faults in the guard) propagates: the caller owns the process. VMMError when the driver
    refuses the mappings (no verdict). ValueError for a shape of at most INDEX_LIMIT elements, or a workload
    with inout buffers."""
    import cupy as cp

    from evaluators.gpu.gate import compare, poison_bits, reference_for, within_tolerance
    from workloads.dtypes import bits_dtype, storage_dtype

    if workload.buffer_names("inout"):
        raise ValueError(f"{workload.name}: the index check cannot hold inout buffers")
    shape = tuple(int(v) for v in shape)
    first = checked_rows(shape)
    m, rest = shape[0], shape[1:]
    drawn = workload.make_inputs((m - first, *rest), seed, "normal", cp)
    params = workload.draw_params(seed)
    names = row_inputs(workload, shape)
    outs = [o for o in workload.outputs(shape) if o.shape and int(o.shape[0]) == m]
    rows = {k: ((m, *drawn[k].shape[1:]), drawn[k].dtype) for k in names}
    rows.update({o.name: (tuple(o.shape), np.dtype(storage_dtype(o.dtype, cp))) for o in outs})
    sets = cache.get(workload, shape, rows) if cache is not None else IndexSet(workload, shape, rows)
    notes: dict[str, Any] = {"shape": list(shape), "checked_rows": [first, m]}
    try:
        sets.fill()
        inputs = {k: (sets.views[k] if k in names else v) for k, v in drawn.items()}
        for k in names:
            inputs[k][first:] = drawn[k]
        got = {o.name: sets.views[o.name] for o in outs}
        for o in outs:
            got[o.name][first:].view(bits_dtype(o.dtype)).fill(poison_bits(o.dtype, 0))
        run(inputs, got, shape, params)
        ref = reference_for(workload, drawn, cp, params)
        atol, rtol = workload.tolerance
        for o in outs:
            part = got[o.name][first:]
            if not within_tolerance(part, ref[o.name], o.dtype, atol, rtol, cp, 0):
                c = compare(part, ref[o.name], o.dtype, atol, rtol, cp, 0)
                return (f"index check: {c.n_bad} of {c.total} elements of {o.name} wrong at shape {shape} in rows "
                        f"{first}-{m - 1}, past element 2^31 of the row buffers (max |err| {c.max_abs_err:.4g}, "
                        f"{c.n_nan} NaN, {c.n_poison} never written): an element index kept in 32 bits?"), notes
        return None, notes
    finally:
        if cache is None:
            cp.cuda.get_current_stream().synchronize()
            sets.close()
