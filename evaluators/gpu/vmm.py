"""The fault check: one gate check whose inputs end at an unmapped page and are mapped read-only.

An out-of-bounds read that arithmetic masks (a load past the end of ``x`` multiplied by 0) leaves no trace in
the output when the bytes past the buffer are finite; NaN padding (``gate.pack_inputs``) turns it into a NaN,
but a read further away still lands in someone else's memory. Here each input gets its own virtual address
range (CUDA virtual memory management, CUDA Driver API "Virtual Memory Management": ``cuMemAddressReserve``,
``cuMemCreate``, ``cuMemMap``, ``cuMemSetAccess``): physical memory is mapped for exactly the granules the
buffer needs, the buffer is placed so that it ends at the end of the mapping (up to 15 bytes of NaN before the
boundary when its size is not a multiple of 16, so that its start stays 16-byte aligned), and the next granule
is reserved but unmapped. A read past the end faults. Where the driver allows, the mapping of every ``input``
buffer is then made read-only (``CU_MEM_ACCESS_FLAGS_PROT_READ``), so a store into an input faults too; an
``inout`` buffer (KDA's state: read, then overwritten with the final value) ends at an unmapped page as well but
stays writable, and its final value is judged like an output (``read_only_buffers``). (Protecting it made every
KDA kernel fault at its final state store: H200, 2026-12-01.) A fault is a sticky CUDA
error: the worker answers and restarts (one restart, counted by the supervisor).

The same placement (``place_at_edges``) holds the benchmark input sets (``timed_checks.InputSets`` with
``edge``), each buffer with a second, read-write mapping of the same memory (``EdgeBuffer(alias=True)``) through
which the evaluator refills and perturbs them, so a read past an input or a store into one faults at every
benchmarked shape's timed launches too.

Costs one launch at a small gate shape, its inputs and reference (about a millisecond) once the worker holds the
mappings (``FaultCheckSets``: made at the first use of a shape, then refilled); making and freeing them per check
cost about 5 ms more on an H200. For the benchmark sets, the buffers rounded up to whole granules (2 MiB on an
H200). Cannot catch: reads before the start of an input (they
land in the head of the mapping, filled with NaN, unless the buffer fills whole granules) and out-of-bounds reads
at shapes that are neither the fault check's nor benchmarked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ALIGN = 16  # the buffer's start stays 16-byte aligned (vector loads)


def _device_allocation(cu: Any, device: int) -> tuple[Any, int]:
    """The allocation properties of pinned device memory on ``device`` and their minimum granularity (bytes;
    2 MiB on the H200): CUDA driver API, "Virtual Memory Management", cuMemGetAllocationGranularity."""
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = int(device)
    gran = int(_check(cu.cuMemGetAllocationGranularity(
        prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity"))
    return prop, gran


class VMMError(RuntimeError):
    """A driver call of the virtual memory management API failed (message: the call and the CUresult)."""


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def _check(result: Any, call: str) -> Any:
    """Unpack a cuda.bindings result tuple; VMMError unless CUDA_SUCCESS."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(getattr(err, "value", err)) != 0:
        raise VMMError(f"{call} failed: {err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


def _edge_size(nbytes: int, device: int) -> tuple[Any, Any, int, int, int]:
    """(driver module, allocation properties, granule bytes, padded, mapped) of a buffer of ``nbytes`` ending at
    an unmapped granule on ``device``: ``padded`` is ``nbytes`` rounded up to ALIGN (at least ALIGN), ``mapped``
    that rounded up to whole granules. Initialises the driver (cuInit). VMMError when a driver call fails."""
    cu = _driver()
    _check(cu.cuInit(0), "cuInit")
    prop, gran = _device_allocation(cu, device)
    padded = -(-max(int(nbytes), 1) // ALIGN) * ALIGN
    return cu, prop, gran, padded, -(-padded // gran) * gran


class EdgeBuffer:
    """``nbytes`` of device memory ending at an unmapped granule (see module docstring).

    ptr: the buffer's device address; read_only: whether ``protect`` succeeded; ``array(shape, dtype)`` a CuPy
    view. With ``alias`` the same physical memory is mapped a second time, read-write, at ``alias_ptr`` (the
    buffer) within ``alias_base`` (the whole mapping): what the evaluator writes through (refills of the
    benchmark inputs, their in-place perturbations, a restore) while ``ptr``, what a kernel gets, is read-only.
    Writes through one mapping are seen through the other by every later kernel on the stream (CUDA
    Programming Guide, "Virtual Aliasing Support": no coherence is promised within one kernel, which never
    touches both). ``close`` unmaps and frees (call after the stream is idle). VMMError when a driver call
    fails."""

    def __init__(self, nbytes: int, device: int = 0, alias: bool = False):
        self.nbytes = int(nbytes)
        cu, prop, gran, padded, self.mapped = _edge_size(self.nbytes, device)
        self._prop = prop
        self._base = _check(cu.cuMemAddressReserve(self.mapped + gran, gran, 0, 0), "cuMemAddressReserve")
        self._handle, self._gran, self._is_mapped = None, gran, False
        self._alias, self._alias_mapped = None, False
        try:
            self._handle = _check(cu.cuMemCreate(self.mapped, prop, 0), "cuMemCreate")
            _check(cu.cuMemMap(self._base, self.mapped, 0, self._handle, 0), "cuMemMap")
            self._is_mapped = True
            self._access(cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            if alias:
                self._alias = _check(cu.cuMemAddressReserve(self.mapped, gran, 0, 0), "cuMemAddressReserve")
                _check(cu.cuMemMap(self._alias, self.mapped, 0, self._handle, 0), "cuMemMap")
                self._alias_mapped = True
                self._access(cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE, self._alias)
        except BaseException:
            self._release()
            raise
        self.ptr = int(self._base) + self.mapped - padded
        self.base = int(self._base)
        self.alias_base = int(self._alias) if alias else self.base
        self.alias_ptr = self.alias_base + (self.ptr - self.base)
        self.read_only = False

    def _access(self, flags: Any, base: Any = None) -> None:
        cu = _driver()
        desc = cu.CUmemAccessDesc()
        desc.location = self._prop.location
        desc.flags = flags
        _check(cu.cuMemSetAccess(self._base if base is None else base, self.mapped, [desc], 1), "cuMemSetAccess")

    def protect(self) -> str | None:
        """Make the mapping read-only; None on success, else why the driver refused (the mapping stays
        read-write)."""
        cu = _driver()
        try:
            self._access(cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READ)
        except VMMError as e:
            return str(e)
        self.read_only = True
        return None

    def array(self, shape: tuple[int, ...], dtype: Any, owner: Any = None, writable: bool = False) -> Any:
        """A CuPy view of the buffer: through ``ptr`` (what a kernel gets), or with ``writable`` through the
        read-write alias (the same memory; ``ptr`` itself when there is no alias)."""
        import cupy as cp

        mem = cp.cuda.UnownedMemory(self.alias_ptr if writable else self.ptr, self.nbytes,
                                    owner if owner is not None else self)
        return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(mem, 0))

    def mapping(self, owner: Any = None) -> Any:
        """A uint8 CuPy view of the whole mapping (the bytes before the buffer, the buffer, the bytes after it up
        to the unmapped granule) through the read-write alias: what a fingerprint or a padding fill covers."""
        import cupy as cp

        mem = cp.cuda.UnownedMemory(self.alias_base, self.mapped, owner if owner is not None else self)
        return cp.ndarray((self.mapped,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))

    def _release(self) -> None:
        cu = _driver()
        if self._alias_mapped:
            cu.cuMemUnmap(self._alias, self.mapped)
            self._alias_mapped = False
        if self._alias is not None:
            cu.cuMemAddressFree(self._alias, self.mapped)
            self._alias = None
        if self._is_mapped:
            cu.cuMemUnmap(self._base, self.mapped)
            self._is_mapped = False
        if self._handle is not None:
            cu.cuMemRelease(self._handle)
            self._handle = None
        if self._base is not None:
            cu.cuMemAddressFree(self._base, self.mapped + self._gran)
            self._base = None

    def close(self) -> None:
        """Unmap, release and free (idempotent)."""
        self._release()


class WideBuffer:
    """``nbytes`` of device address space ending at an unmapped granule (placed as EdgeBuffer places a buffer),
    with ``guard`` bytes of reserved, never mapped address space before the mapping, backed by little physical
    memory: the granules from the one holding byte ``own_from`` of the buffer to the end have physical memory of
    their own, mapped once; the granules before it are one chunk of ``chunk`` bytes (rounded up to granules)
    mapped again and again (CUDA Programming Guide, "Virtual Aliasing Support": one allocation may be mapped at
    several addresses). What the index check (``evaluators.gpu.index_check``) puts a buffer of more than 2^31
    elements in: 4 GiB of address space for about ``chunk`` + 2 MiB of memory.

    ptr: the buffer's address; own_ptr: the first address with memory of its own (<= ptr + own_from); maps: the
    (address, bytes) of every mapping; allocations: one (address, bytes) per physical allocation (the chunk's
    first mapping, the own memory): what covers every byte of memory once. ``array(shape, dtype)`` a CuPy view of the whole buffer. Every mapping is
    read-write. ``close`` unmaps and frees (after the stream is idle). VMMError when a driver call fails (what
    was made is freed)."""

    def __init__(self, nbytes: int, own_from: int, chunk: int, guard: int, device: int = 0):
        self.nbytes = int(nbytes)
        cu, prop, gran, padded, self.mapped = _edge_size(self.nbytes, device)
        self._prop = prop
        self.guard = -(-max(int(guard), 0) // gran) * gran
        self._total = self.guard + self.mapped + gran
        self._va = _check(cu.cuMemAddressReserve(self._total, gran, 0, 0), "cuMemAddressReserve")
        self.base = int(self._va) + self.guard
        self.ptr = self.base + self.mapped - padded
        head = self.mapped - padded
        tail = min(self.mapped - gran, (head + max(int(own_from), 0)) // gran * gran)
        self.own_ptr = self.base + tail
        self.maps: list[tuple[int, int]] = []
        self.allocations: list[tuple[int, int]] = []
        self._handles: list[Any] = []
        try:
            own = _check(cu.cuMemCreate(self.mapped - tail, prop, 0), "cuMemCreate")
            self._handles.append(own)
            size = -(-max(int(chunk), 1) // gran) * gran
            if tail:
                size = min(size, tail)
                rep = _check(cu.cuMemCreate(size, prop, 0), "cuMemCreate")
                self._handles.append(rep)
                for off in range(0, tail, size):
                    self._map(self.base + off, min(size, tail - off), rep)
                self.allocations.append((self.base, size))
            self._map(self.base + tail, self.mapped - tail, own)
            self.allocations.append((self.base + tail, self.mapped - tail))
        except BaseException:
            self.close()
            raise

    def _map(self, addr: int, size: int, handle: Any) -> None:
        cu = _driver()
        _check(cu.cuMemMap(addr, size, 0, handle, 0), "cuMemMap")
        self.maps.append((addr, size))
        desc = cu.CUmemAccessDesc()
        desc.location = self._prop.location
        desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _check(cu.cuMemSetAccess(addr, size, [desc], 1), "cuMemSetAccess")

    def array(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A CuPy view of the buffer (what a kernel gets)."""
        import cupy as cp

        mem = cp.cuda.UnownedMemory(self.ptr, self.nbytes, self)
        return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(mem, 0))

    def close(self) -> None:
        """Unmap, release and free (idempotent)."""
        cu = _driver()
        for addr, size in self.maps:
            cu.cuMemUnmap(addr, size)
        self.maps = []
        for h in self._handles:
            cu.cuMemRelease(h)
        self._handles = []
        if getattr(self, "_va", None) is not None:
            cu.cuMemAddressFree(self._va, self._total)
            self._va = None


def close_buffers(buffers: dict[str, Any]) -> None:
    """Close every buffer of ``buffers`` (name -> EdgeBuffer or WideBuffer; a driver error while freeing one is
    ignored so the others are still freed), then empty the dict. The caller makes sure the stream is idle."""
    for b in buffers.values():
        try:
            b.close()
        except Exception:
            pass
    buffers.clear()


def evict_oldest(sets: Any, limit: int) -> None:
    """Free the least recently used entries of ``sets`` (an OrderedDict of objects with ``close``, oldest first)
    past ``limit``, synchronising the current stream before each so nothing still reads the mappings freed."""
    while len(sets) > limit:
        import cupy as cp

        _, old = sets.popitem(last=False)
        cp.cuda.get_current_stream().synchronize()
        old.close()


def fault_check_shape(workload: Any, seed: int) -> tuple[int, ...]:
    """The gate shape the fault check uses: drawn by ``seed`` among the small gate shapes (at most 2^22
    elements) whose every input is a whole number of 16-byte words (so a vectorised kernel keeps its vector path
    with the buffer ending at the boundary); the first small gate shape when none is."""
    from evaluators.gpu.gate import SMALL_CHECK_ELEMENTS

    key = (id(workload), tuple(tuple(s) for s in workload.gate_shapes))
    pool = _SHAPES.get(key)
    if pool is None:
        small = [tuple(s) for s in workload.gate_shapes if int(np.prod(s)) <= SMALL_CHECK_ELEMENTS]
        fits = [s for s in small
                if all(int(v.nbytes) % ALIGN == 0 for v in workload.make_inputs(s, 0, "normal", np).values())]
        pool = _SHAPES[key] = fits or small[:1]
    return pool[seed % len(pool)]


_SHAPES: dict[tuple, list[tuple[int, ...]]] = {}  # fault_check_shape's candidates per workload and gate shapes


def read_only_buffers(workload: Any, names: Any) -> list[str]:
    """Of the buffers ``names`` (``make_inputs``' keys), those the fault check maps read-only: every one but the
    workload's ``inout`` buffers, which the kernel must write."""
    inout = set(workload.buffer_names("inout"))
    return [k for k in names if k not in inout]


class EdgeSet:
    """Arrays each in its own EdgeBuffer (``place_at_edges``). ``views``: name -> what a kernel gets; ``rw``:
    name -> the same memory through the read-write alias (``views`` themselves without one); ``buffers``: name ->
    EdgeBuffer; ``read_only``: every buffer asked for was protected; ``refused``: why the driver refused a
    protection (empty when none was refused). ``close`` frees the mappings (after the stream is idle)."""

    def __init__(self) -> None:
        self.views: dict[str, Any] = {}
        self.rw: dict[str, Any] = {}
        self.buffers: dict[str, EdgeBuffer] = {}
        self.read_only = False
        self.refused: list[str] = []

    @property
    def nbytes(self) -> int:
        """Device memory held (whole granules)."""
        return sum(b.mapped for b in self.buffers.values())

    def fill(self, arrays: dict[str, Any]) -> None:
        """Write ``arrays`` (same names, shapes and dtypes as placed) into the buffers through the read-write
        mapping, every other byte of each mapping set to 0xFF (NaN in every float type: a read before a buffer,
        or into the up to 15 bytes between its end and the unmapped granule, reads NaN). No synchronisation."""
        import cupy as cp

        for k, v in arrays.items():
            b = self.buffers[k]
            cp.cuda.runtime.memsetAsync(b.alias_base, 0xFF, b.mapped, cp.cuda.get_current_stream().ptr)
            self.rw[k][...] = v

    def close(self) -> None:
        close_buffers(self.buffers)


def place_at_edges(arrays: dict[str, Any], protect: list[str], alias: bool = False) -> EdgeSet:
    """Copy each of ``arrays`` (CuPy, name -> array) into its own EdgeBuffer ending at an unmapped granule
    (``EdgeSet.fill``), then make the mappings of ``protect`` read-only where the driver allows (a refusal is
    recorded in ``refused``, the mapping stays read-write). With ``alias`` every buffer also gets its read-write
    alias (``EdgeSet.rw``). The one implementation behind the fault check and the benchmark input sets
    (``timed_checks.InputSets``). VMMError (after freeing what was mapped) when the driver refuses a mapping."""
    import cupy as cp

    out = EdgeSet()
    try:
        for k, v in arrays.items():
            b = out.buffers[k] = EdgeBuffer(int(v.nbytes), cp.cuda.runtime.getDevice(), alias=alias)
            out.views[k] = b.array(v.shape, v.dtype)
            out.rw[k] = b.array(v.shape, v.dtype, writable=True) if alias else out.views[k]
        out.fill(arrays)
        cp.cuda.get_current_stream().synchronize()  # the data is in before the mappings turn read-only
    except BaseException:
        out.close()
        raise
    out.refused = [f"{k}: {why}" for k in protect if (why := out.buffers[k].protect()) is not None]
    out.read_only = bool(protect) and not out.refused
    return out


class FaultCheckSets:
    """The fault check's mappings, kept across evaluations: one EdgeSet per input layout (names, shapes, dtypes:
    one per fault-check shape), inputs read-only where the driver allows, each buffer with a read-write alias
    through which every evaluation writes its fresh inputs (``EdgeSet.fill``: the padding before each buffer set
    to NaN again, then the inputs). The placement and protection a kernel sees are those of a fresh
    ``place_at_edges``; what is saved is the driver work of making and freeing the mappings (per input
    cuMemAddressReserve, cuMemCreate, cuMemMap, two cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree:
    about 5 ms of the fault check's 6.2 ms on an H200, experiments/results/gate_v5_h200_2026-12-01/gate_cost.md)
    and a synchronisation. The least recently used layout is freed past ``limit`` (RMSNorm's fault check draws
    among ten shapes; an H200 maps 2 MiB granules: 2 inputs x 2 MiB each)."""

    def __init__(self, limit: int = 16) -> None:
        from collections import OrderedDict

        self.limit = int(limit)
        self.sets: OrderedDict[tuple, EdgeSet] = OrderedDict()

    def edges(self, workload: Any, arrays: dict[str, Any]) -> EdgeSet:
        """An EdgeSet holding ``arrays`` (CuPy, name -> array): the cached one of their layout refilled (no
        synchronisation), else a new one (``place_at_edges`` with aliases). VMMError as ``place_at_edges``."""
        key = tuple((k, tuple(v.shape), str(v.dtype)) for k, v in arrays.items())
        e = self.sets.get(key)
        if e is not None:
            self.sets.move_to_end(key)
            e.fill(arrays)
            return e
        e = self.sets[key] = place_at_edges(arrays, read_only_buffers(workload, arrays), alias=True)
        evict_oldest(self.sets, self.limit)
        return e

    def close(self) -> None:
        """Free every mapping (after the stream is idle)."""
        for e in self.sets.values():
            e.close()
        self.sets.clear()


def fault_check(workload: Any, run: Any, seed: int,
                cache: FaultCheckSets | None = None) -> tuple[str | None, dict[str, Any]]:
    """Run the kernel once (``run(inputs, outputs, shape, params)``, synchronised) on inputs in EdgeBuffers,
    read-only where the driver allows, and compare the output with the reference. ``cache``: the worker's
    mappings kept across evaluations (``FaultCheckSets``); None makes and frees them here.

    Returns (reason when the output is wrong, else None; notes: shape, read_only, refused). KernelFault from
    ``run`` (the kernel read past an input or wrote into one) propagates: the caller owns the process. VMMError
    when the driver refuses the mappings themselves (no verdict)."""
    import cupy as cp

    from evaluators.gpu.gate import _inout_specs, allocate_poisoned, compare, reference_for, within_tolerance

    shape = fault_check_shape(workload, seed)
    params = workload.draw_params(seed)
    host = workload.make_inputs(shape, seed, "normal", cp)
    notes: dict[str, Any] = {"shape": list(shape)}
    edges = cache.edges(workload, host) if cache is not None else place_at_edges(host, read_only_buffers(workload, host))
    try:
        inputs = edges.views
        notes.update(read_only=not edges.refused, refused=edges.refused[:1])
        ref = reference_for(workload, inputs, cp, params)  # inout buffers: from their initial value
        outs = {s.name: allocate_poisoned(s, 0, cp) for s in workload.outputs(shape)}
        run(inputs, {n: b.view for n, b in outs.items()}, shape, params)
        atol, rtol = workload.tolerance
        for s in [*workload.outputs(shape), *_inout_specs(workload, inputs)]:
            got = outs[s.name].view if s.name in outs else inputs[s.name]
            if not within_tolerance(got, ref[s.name], s.dtype, atol, rtol, cp, 0):
                c = compare(got, ref[s.name], s.dtype, atol, rtol, cp, 0)
                return (f"fault check: {c.n_bad} of {c.total} elements of {s.name} wrong at shape {shape} with the "
                        f"inputs ending at an unmapped page (max |err| {c.max_abs_err:.4g}, {c.n_nan} NaN, "
                        f"{c.n_poison} never written)"), notes
        return None, notes
    finally:
        if cache is None:
            edges.close()
