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

Costs a few driver calls and one launch at a small gate shape (about a millisecond). Cannot catch: reads before
the start of an input (the reserved range begins at the buffer's granule; a read a few bytes before lands in
the NaN-free head of the mapping) and out-of-bounds reads at shapes other than the one checked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ALIGN = 16  # the buffer's start stays 16-byte aligned (vector loads)


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


class EdgeBuffer:
    """``nbytes`` of device memory ending at an unmapped granule (see module docstring).

    ptr: the buffer's device address; read_only: whether ``protect`` succeeded; ``array(shape, dtype)`` a CuPy
    view. ``close`` unmaps and frees (call after the stream is idle). VMMError when a driver call fails."""

    def __init__(self, nbytes: int, device: int = 0):
        cu = _driver()
        _check(cu.cuInit(0), "cuInit")
        self.nbytes = int(nbytes)
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = int(device)
        self._prop = prop
        gran = int(_check(cu.cuMemGetAllocationGranularity(
            prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity"))
        padded = -(-max(self.nbytes, 1) // ALIGN) * ALIGN
        self.mapped = -(-padded // gran) * gran
        self._base = _check(cu.cuMemAddressReserve(self.mapped + gran, gran, 0, 0), "cuMemAddressReserve")
        self._handle, self._gran, self._is_mapped = None, gran, False
        try:
            self._handle = _check(cu.cuMemCreate(self.mapped, prop, 0), "cuMemCreate")
            _check(cu.cuMemMap(self._base, self.mapped, 0, self._handle, 0), "cuMemMap")
            self._is_mapped = True
            self._access(cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        except BaseException:
            self._release()
            raise
        self.ptr = int(self._base) + self.mapped - padded
        self.read_only = False

    def _access(self, flags: Any) -> None:
        cu = _driver()
        desc = cu.CUmemAccessDesc()
        desc.location = self._prop.location
        desc.flags = flags
        _check(cu.cuMemSetAccess(self._base, self.mapped, [desc], 1), "cuMemSetAccess")

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

    def array(self, shape: tuple[int, ...], dtype: Any, owner: Any = None) -> Any:
        import cupy as cp

        mem = cp.cuda.UnownedMemory(self.ptr, self.nbytes, owner if owner is not None else self)
        return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(mem, 0))

    def _release(self) -> None:
        cu = _driver()
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


def fault_check(workload: Any, run: Any, seed: int) -> tuple[str | None, dict[str, Any]]:
    """Run the kernel once (``run(inputs, outputs, shape, params)``, synchronised) on inputs in EdgeBuffers,
    read-only where the driver allows, and compare the output with the reference.

    Returns (reason when the output is wrong, else None; notes: shape, read_only, refused). KernelFault from
    ``run`` (the kernel read past an input or wrote into one) propagates: the caller owns the process. VMMError
    when the driver refuses the mappings themselves (no verdict)."""
    import cupy as cp

    from evaluators.gpu.gate import _inout_specs, allocate_poisoned, compare, reference_for, within_tolerance

    shape = fault_check_shape(workload, seed)
    params = workload.draw_params(seed)
    host = workload.make_inputs(shape, seed, "normal", cp)
    bufs: dict[str, EdgeBuffer] = {}
    notes: dict[str, Any] = {"shape": list(shape)}
    try:
        inputs = {}
        for k, v in host.items():
            b = bufs[k] = EdgeBuffer(int(v.nbytes), cp.cuda.runtime.getDevice())
            a = b.array(v.shape, v.dtype)
            a[...] = v
            tail = (-int(v.nbytes)) % ALIGN  # bytes between the buffer's end and the unmapped page: NaN
            if tail:
                cp.cuda.runtime.memset(b.ptr + int(v.nbytes), 0xFF, tail)
            inputs[k] = a
        cp.cuda.get_current_stream().synchronize()
        protect = read_only_buffers(workload, bufs)
        refused = [f"{k}: {why}" for k in protect if (why := bufs[k].protect()) is not None]
        notes.update(read_only=not refused, refused=refused[:1])
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
        for b in bufs.values():
            try:
                b.close()
            except Exception:
                pass
