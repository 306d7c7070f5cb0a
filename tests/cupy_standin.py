"""A CPU stand-in for CuPy and the CUDA driver's virtual memory management, to dry-run the evaluator's CuPy code
paths on a machine without a GPU and to count what they enqueue.

``install(monkeypatch)`` puts a module named ``cupy`` in ``sys.modules`` (and ``cuda.bindings.driver``) and
replaces the fused kernels of ``workloads.fused`` by numpy formulas of the same rules. Arrays are numpy arrays of
a subclass (``DevArray``) that has ``.data.ptr`` and ``.get()`` and counts every array operation as one
enqueued device operation, every conversion to a host value as a synchronisation, every call of the VMM driver
API as ``vmm`` (``COUNTS``). Kernels of ``RawModule``/``RawKernel`` run their host twins
(``evaluators.gpu.launch_prep.HOST_TWINS``, ``workloads.rmsnorm_check.HOST_TWINS``; the L2 flush and the stream
hold do nothing). ``cudaMemsetAsync``/``cudaMemcpyAsync`` write host memory at the given addresses.

The VMM driver is emulated with real address-space tricks (Linux): ``cuMemAddressReserve`` reserves inaccessible
address space (mmap PROT_NONE), ``cuMemCreate`` makes a memfd, ``cuMemMap`` maps it at the reserved address
(MAP_FIXED, MAP_SHARED, so a second mapping of the same handle is a true alias) and ``cuMemSetAccess`` sets the
pages' protection (mprotect): a read past a buffer placed at the end of its mapping, or a write through a
read-only mapping, is a segmentation fault, as it is an illegal address on the GPU. Emulated kernels ask
``readable``/``writable`` first and call ``fault`` instead, which makes the next synchronisation raise what CuPy
raises for a sticky error (``CUDARuntimeError: cudaErrorIllegalAddress: ...``).

Not a GPU: no timing, no concurrency, kernels' CUDA source is not compiled here (tests/test_launch_prep.py
compiles it with nvcc). Only what the evaluator's timed-check, input-set, fault-check and gate paths use is
there. Where CuPy or the driver would refuse a call, the stand-in refuses it too, so a CPU run catches it:
grid and block must be tuples (CuPy's ``Function.__call__`` types them ``tuple``) within CUDA's limits; a
kernel whose CUDA source the stand-in has (``RawModule``/``RawKernel``) must get one argument per parameter,
a device array (or None) for a pointer and, for a scalar, a value of the parameter's width (a NumPy scalar;
a Python int is CuPy's int64, a float its float64), since CuPy passes each scalar at the width of its own type
and the kernel reads the parameter's; ``memsetAsync``/``memcpyAsync`` take every argument CuPy's ``cpdef``
signature requires (the stream included); the VMM calls need whole granules, a reserved range to map into,
a mapped range to protect, and an unmapped range of the reserved size to free.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import mmap
import os
import re
import sys
import types
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

COUNTS: Counter[str] = Counter()
_COUNTING = [True]


class _Ptr:
    def __init__(self, ptr: int):
        self.ptr = int(ptr)


def _raw(a: Any) -> Any:
    """Base-class numpy view of a DevArray (or the value itself)."""
    if isinstance(a, DevArray):
        return a.view(np.ndarray)
    if isinstance(a, (list, tuple)):
        return type(a)(_raw(v) for v in a)
    return a


def _wrap(r: Any) -> Any:
    if isinstance(r, np.ndarray):
        return r.view(DevArray)
    if isinstance(r, np.generic):
        return np.asarray(r).view(DevArray)  # CuPy reductions give 0-d device arrays
    if isinstance(r, tuple):
        return tuple(_wrap(v) for v in r)
    if isinstance(r, list):
        return [_wrap(v) for v in r]
    return r


def count(kind: str, n: int = 1) -> None:
    if _COUNTING[0]:
        COUNTS[kind] += n


def _host_scalar(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A DevArray conversion method (``__int__``...) that counts a synchronisation and applies ``convert`` to
    the host value."""

    def method(self: Any) -> Any:
        count("sync")
        return convert(self.view(np.ndarray))

    return method


class DevArray(np.ndarray):
    """A device array: numpy memory, CuPy's ``.data.ptr`` and ``.get()``; operations counted."""

    @property
    def data(self) -> _Ptr:  # type: ignore[override]
        return _Ptr(self.__array_interface__["data"][0])

    def get(self) -> np.ndarray:
        count("sync")
        return np.array(self.view(np.ndarray))

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        count("op")
        if "out" in kwargs:
            kwargs["out"] = tuple(_raw(o) for o in kwargs["out"])
        return _wrap(getattr(ufunc, method)(*(_raw(i) for i in inputs), **kwargs))

    def __array_function__(self, func: Any, types_: Any, args: Any, kwargs: Any) -> Any:
        count("op")
        return _wrap(func(*_raw(args), **{k: _raw(v) for k, v in kwargs.items()}))

    def __getitem__(self, idx: Any) -> Any:
        if _fancy(idx):
            count("op")
        return _wrap(self.view(np.ndarray)[_raw(idx)])

    def __setitem__(self, idx: Any, value: Any) -> None:
        count("op")
        self.view(np.ndarray)[_raw(idx)] = _raw(value)

    def nonzero(self) -> Any:  # type: ignore[override]
        count("op")
        return _wrap(self.view(np.ndarray).nonzero())

    def copy(self, order: str = "C") -> Any:  # type: ignore[override]
        count("op")
        count("alloc")
        return _wrap(self.view(np.ndarray).copy(order))

    def astype(self, dtype: Any, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        count("op")
        return _wrap(self.view(np.ndarray).astype(dtype, *a, **k))

    def fill(self, value: Any) -> None:
        count("op")
        self.view(np.ndarray).fill(value)

    # Conversions to a host scalar copy the value back: each is counted as a synchronisation.
    __bool__ = _host_scalar(bool)
    __int__ = _host_scalar(int)
    __float__ = _host_scalar(float)
    __index__ = _host_scalar(int)

    def item(self, *a: Any) -> Any:
        count("sync")
        return self.view(np.ndarray).item(*a)

    def tolist(self) -> Any:
        count("sync")
        return self.view(np.ndarray).tolist()


def _fancy(idx: Any) -> bool:
    parts = idx if isinstance(idx, tuple) else (idx,)
    return any(isinstance(p, (np.ndarray, list)) for p in parts)


# ------------------------------------------------------------------------------------------------ the module
def _creator(fn: Any) -> Any:
    def make(*a: Any, **k: Any) -> Any:
        count("alloc")
        count("op")
        return _wrap(fn(*_raw(a), **{kk: _raw(v) for kk, v in k.items()}))
    return make


class _Stream:
    ptr = 0

    def synchronize(self) -> None:
        count("sync")
        _raise_sticky()


class _Event:
    def record(self, stream: Any = None) -> None:
        count("event")

    def synchronize(self) -> None:
        _Stream().synchronize()


class CUDARuntimeError(RuntimeError):
    """What CuPy raises for a failed runtime call: ``<cudaError name>: <message>``."""


_STICKY: list[str] = []


def fault(name: str = "cudaErrorIllegalAddress", message: str = "an illegal memory access was encountered") -> None:
    """An emulated kernel hit an illegal address: the context is gone; every later synchronisation raises."""
    _STICKY.append(f"{name}: {message}")


def _raise_sticky() -> None:
    if _STICKY:
        raise CUDARuntimeError(_STICKY[0])


def _memset_async(ptr: int, value: int, size: int, stream: int) -> None:
    """``cupy.cuda.runtime.memsetAsync(ptr, value, size, stream)``: every argument required, as in CuPy."""
    count("op")
    _check_access(ptr, size, write=True)
    ctypes.memset(int(ptr), int(value), int(size))


def _memcpy_async(dst: int, src: int, size: int, kind: int, stream: int) -> None:
    """``cupy.cuda.runtime.memcpyAsync(dst, src, size, kind, stream)``: every argument required."""
    count("op")
    _check_access(int(dst), size, write=True)
    ctypes.memmove(int(dst), int(src), int(size))


class _UnownedMemory:
    def __init__(self, ptr: int, size: int, owner: Any):
        self.ptr, self.size, self.owner = int(ptr), int(size), owner


class _MemoryPointer:
    def __init__(self, mem: _UnownedMemory, offset: int):
        self.mem, self.ptr = mem, mem.ptr + int(offset)


def _ndarray(shape: Any, dtype: Any = np.float64, memptr: _MemoryPointer | None = None) -> DevArray:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if memptr is None:
        return _wrap(np.empty(shape, dtype=dtype))
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = (ctypes.c_char * max(n, 1)).from_address(memptr.ptr)
    a = np.frombuffer(buf, dtype=np.uint8, count=n).view(dtype).reshape(shape).view(DevArray)
    a._owner = memptr.mem.owner  # keep the mapping's owner alive as long as the view
    return a


# Bytes of the scalar parameter types the project's CUDA sources use (typedefs of launch_prep's source included).
_C_BYTES = {"u64": 8, "unsigned long long": 8, "long long": 8, "size_t": 8, "double": 8, "u32": 4,
            "unsigned int": 4, "unsigned": 4, "int": 4, "float": 4, "u16": 2, "unsigned short": 2, "short": 2,
            "unsigned char": 1, "char": 1, "bool": 1}
_ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)')


def kernel_signatures(code: str) -> dict[str, list[int | None]]:
    """Each ``extern "C" __global__`` function of CUDA source ``code``: its parameters in order, None for a
    pointer, else the scalar's bytes. KeyError for a scalar type not in ``_C_BYTES``."""
    sigs: dict[str, list[int | None]] = {}
    for m in _ENTRY.finditer(code):
        params: list[int | None] = []
        for p in filter(None, (x.strip() for x in m.group(2).split(","))):
            if "*" in p:
                params.append(None)
                continue
            words = [w for w in p.split() if w not in ("const", "volatile", "__restrict__")][:-1]
            params.append(_C_BYTES[" ".join(words)])
        sigs[m.group(1)] = params
    return sigs


def _arg_bytes(a: Any) -> int | None:
    """The bytes CuPy passes for kernel argument ``a`` (None: a device pointer). TypeError where CuPy raises."""
    if a is None or isinstance(a, DevArray):
        return None
    if isinstance(a, np.ndarray):
        raise TypeError(f"a host numpy.ndarray of shape {a.shape} passed as a kernel argument (CuPy refuses one of "
                        "size > 1 and passes one of size 1 by value; a pointer needs a cupy.ndarray)")
    if isinstance(a, np.generic):
        return a.dtype.itemsize
    if isinstance(a, bool):
        return 1
    if isinstance(a, (int, float)):
        return 8  # CuPy: int -> int64 (uint64 from 2**63), float -> float64
    raise TypeError(f"Unsupported type {type(a)}")


def check_launch(name: str, grid: Any, block: Any, args: Any, signature: list[int | None] | None) -> None:
    """What CuPy and the driver refuse at a launch: grid / block not tuples (TypeError, as Cython's ``tuple``
    parameters), dimensions outside CUDA's limits (grid x < 2^31, y and z <= 65535; at most 1024 threads of a
    block, z <= 64: ValueError, the driver's CUDA_ERROR_INVALID_VALUE), and with ``signature``
    (``kernel_signatures``) a wrong number of arguments, a scalar where a pointer belongs or the reverse, or a
    scalar of another width than its parameter (TypeError)."""
    if not isinstance(grid, tuple) or not isinstance(block, tuple):
        raise TypeError(f"kernel {name!r}: grid and block must be tuples (got {type(grid).__name__}, "
                        f"{type(block).__name__})")
    g, b = (tuple(int(v) for v in (*d, 1, 1)[:3]) for d in (grid, block))
    if min(g + b) < 1 or g[0] >= 2**31 or max(g[1:]) > 65535 or b[0] * b[1] * b[2] > 1024 or b[2] > 64:
        raise ValueError(f"kernel {name!r}: launch {g}x{b} outside CUDA's limits (CUDA_ERROR_INVALID_VALUE)")
    if signature is None:
        return
    if len(args) != len(signature):
        raise TypeError(f"kernel {name!r}: {len(args)} arguments for {len(signature)} parameters")
    for i, (a, want) in enumerate(zip(args, signature)):
        got = _arg_bytes(a)
        if want is None and got not in (None, 8):
            raise TypeError(f"kernel {name!r}: argument {i} is a {got}-byte scalar where a pointer belongs")
        if want is not None and got != want:
            what = "a device array" if got is None else f"a {got}-byte scalar ({type(a).__name__})"
            raise TypeError(f"kernel {name!r}: argument {i} is {what}; the parameter is {want} bytes (CuPy passes "
                            "a scalar at its own width and the kernel reads the parameter's)")


class _Function:
    def __init__(self, name: str, signature: list[int | None] | None = None):
        self.name, self.ptr, self.signature = name, 0, signature

    def __call__(self, grid: Any, block: Any, args: Any, shared_mem: int = 0, stream: Any = None) -> None:
        from evaluators.gpu.launch_prep import HOST_TWINS
        from workloads.rmsnorm_check import HOST_TWINS as ROW_CHECK_TWINS

        count("kernel")
        count("op")
        check_launch(self.name, grid, block, args, self.signature)
        if self.name in ("l2_flush_read", "hold_stream"):
            return
        twin = HOST_TWINS.get(self.name) or ROW_CHECK_TWINS.get(self.name) or KERNELS.get(self.name)
        if twin is None:
            raise NotImplementedError(f"cupy stand-in: no host twin for kernel {self.name!r}")
        _COUNTING[0] = False
        try:
            twin(grid, block, tuple(_raw(a) for a in args))
        finally:
            _COUNTING[0] = True


# Emulated candidate kernels by name (a Function the test registers): twin(grid, block, args).
KERNELS: dict[str, Any] = {}


class _RawModule:
    def __init__(self, code: str = "", options: Any = (), name_expressions: Any = None, **k: Any):
        self.code = code
        self.signatures = kernel_signatures(code)

    def get_function(self, name: str) -> _Function:
        if name not in self.signatures:
            raise KeyError(f"cupy stand-in: no extern \"C\" __global__ function {name!r} in the module's source")
        return _Function(name, self.signatures[name])


class _Module:
    """``cupy.cuda.Module``: ``load(cubin)`` takes the name of an emulated kernel (``KERNELS``) as bytes."""

    def load(self, cubin: bytes) -> None:
        self.cubin = cubin

    def get_function(self, name: str) -> _Function:
        return _Function(self.cubin.decode())


class _Generator:
    def __init__(self, bitgen: Any):
        self.g = np.random.Generator(bitgen)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> DevArray:
        count("op")
        return _wrap(self.g.standard_normal(size, dtype=dtype))

    def random(self, size: Any = None, dtype: Any = np.float64) -> DevArray:
        count("op")
        return _wrap(self.g.random(size, dtype=dtype))


class _MemoryPool:
    """``cupy.cuda.MemoryPool``: ``malloc(nbytes)`` gives a MemoryPointer to fresh host memory (counted as an
    allocation, as a pool that has no free block of the size allocates)."""

    def malloc(self, nbytes: int) -> _MemoryPointer:
        count("alloc")
        buf = np.empty(max(int(nbytes), 1), dtype=np.uint8)
        return _MemoryPointer(_UnownedMemory(buf.__array_interface__["data"][0], int(nbytes), buf), 0)


class _Device:
    def __init__(self, i: int = 0):
        self.id = int(i)

    def use(self) -> None:
        pass

    def synchronize(self) -> None:
        _Stream().synchronize()


ALLOCATOR: list[Any] = []  # what ``cupy.cuda.set_allocator`` was last given (the sanitizer replay: None)


def _props(device: int = 0) -> dict[str, Any]:
    return {"name": b"CPU stand-in", "multiProcessorCount": 4, "l2CacheSize": 1 << 20}


def _make_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.__version__ = "standin"
    cp.__file__ = __file__
    cp.ndarray = _ndarray  # type: ignore[attr-defined]
    for name in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "float32",
                 "float64", "bool_", "nan", "inf", "dtype", "iinfo", "finfo", "newaxis"):
        setattr(cp, name, getattr(np, name))
    for name in ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "arange",
                 "asarray", "array", "ascontiguousarray"):
        setattr(cp, name, _creator(getattr(np, name)))

    def asnumpy(a: Any) -> np.ndarray:
        count("sync")
        return np.array(_raw(a))

    cp.asnumpy = asnumpy  # type: ignore[attr-defined]

    def module_getattr(name: str) -> Any:
        v = getattr(np, name)
        if callable(v) and not isinstance(v, type):
            def op(*a: Any, **k: Any) -> Any:
                count("op")
                return _wrap(v(*_raw(a), **{kk: _raw(x) for kk, x in k.items()}))
            return op
        return v

    cp.__getattr__ = module_getattr  # type: ignore[attr-defined]
    cp.random = types.SimpleNamespace(Generator=_Generator, Philox4x3210=lambda seed: np.random.Philox(seed),
                                      default_rng=lambda seed=None: _Generator(np.random.PCG64(seed)))
    runtime = types.SimpleNamespace(
        memsetAsync=_memset_async, memcpyAsync=_memcpy_async,
        memset=lambda p, v, n: _memset_async(p, v, n, 0), getDevice=lambda: 0, getDeviceProperties=_props,
        memcpy=lambda d, s, n, k: _memcpy_async(d, s, n, k, 0), memcpyHostToDevice=1,
        memcpyDeviceToDevice=3, CUDARuntimeError=CUDARuntimeError)
    stream = _Stream()
    cp.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Event=_Event, get_current_stream=lambda: stream, runtime=runtime, UnownedMemory=_UnownedMemory,
        MemoryPointer=_MemoryPointer, Device=_Device, MemoryPool=_MemoryPool,
        set_allocator=lambda a=None: ALLOCATOR.append(a), get_elapsed_time=lambda s, e: 1.0, Module=_Module,
        driver=types.SimpleNamespace(funcSetAttribute=lambda *a: None))
    cp.RawModule = _RawModule  # type: ignore[attr-defined]
    cp.RawKernel = lambda code, name, **k: _RawModule(code).get_function(name)  # type: ignore[attr-defined]
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)  # type: ignore
    return cp


# ----------------------------------------------------------------------------------- fused kernels as numpy
def _f64(a: Any, dtype: str) -> np.ndarray:
    a = _raw(a)
    if dtype == "bf16" and a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def _bad_mask(out: Any, ref: Any, dtype: str, atol: float, rtol: float, poison: int | None) -> np.ndarray:
    from workloads.dtypes import bits_dtype, half_ulp

    got, r = _f64(out, dtype), _raw(ref)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = (np.abs(got - r) <= atol + rtol * np.abs(r) + half_ulp(r, dtype, np)) | (got == r) | (
            np.isnan(got) & np.isnan(r))
    bad = ~ok
    if poison is not None:
        bad |= _raw(out).view(bits_dtype(dtype)) == poison
    return bad


def _patch_fused(monkeypatch: Any) -> None:
    from workloads import fused

    def count_bad_array(out, ref, dtype, atol, rtol, poison=None):
        count("op", 2)
        return _wrap(np.int64(_bad_mask(out, ref, dtype, atol, rtol, poison).sum()))

    def count_bad(out, ref, dtype, atol, rtol, poison=None):
        return int(count_bad_array(out, ref, dtype, atol, rtol, poison)) if out.size else 0

    def max_abs_err_array(out, ref, dtype):
        count("op", 2)
        got, r = _f64(out, dtype), _raw(ref)
        with np.errstate(invalid="ignore"):
            same = (got == r) | (np.isnan(got) & np.isnan(r))
            e = np.where(same, 0.0, np.where(np.isnan(np.abs(got - r)), np.inf, np.abs(got - r)))
        return _wrap(np.float64(e.max() if e.size else 0.0))

    def count_differ(a, b):
        count("op", 2)
        return int(_wrap(np.int64((_raw(a) != _raw(b)).sum())))

    def row_sum_squares(x, dtype):
        count("op")
        v = _f64(x, dtype)
        return _wrap((v * v).sum(axis=1))

    def round_bf16(f):
        import ml_dtypes

        count("op")
        return _wrap(np.asarray(_raw(f), np.float32).astype(ml_dtypes.bfloat16).view(np.uint16))

    def fill_random_finite(out, dtype, seed):
        count("op")
        from evaluators.gpu.launch_prep import fill_bytes_host, fill_word_value

        b = _raw(out).reshape(-1).view(np.uint8)
        b[...] = fill_bytes_host(b.size, *fill_word_value(dtype, "random"), seed)

    def fingerprint(a):
        count("op", 2)
        h = hashlib.sha256(np.ascontiguousarray(_raw(a)).view(np.uint8).tobytes()).digest()
        return _wrap(np.frombuffer(h[:8], dtype=np.uint64).copy())

    def elementwise(name, in_params, out_params, body):
        raise NotImplementedError(f"cupy stand-in: no numpy form of elementwise kernel {name!r}")

    for name, fn in [("count_bad_array", count_bad_array), ("count_bad", count_bad),
                     ("max_abs_err_array", max_abs_err_array),
                     ("max_abs_err", lambda o, r, d: float(max_abs_err_array(o, r, d)) if o.size else 0.0),
                     ("count_differ", count_differ), ("bytes_differ", lambda a, b: count_differ(
                         _raw(a).reshape(-1).view(np.uint8), _raw(b).reshape(-1).view(np.uint8)) > 0),
                     ("row_sum_squares", row_sum_squares), ("round_bf16", round_bf16),
                     ("fill_random_finite", fill_random_finite), ("fingerprint", fingerprint),
                     ("elementwise", elementwise)]:
        monkeypatch.setattr(fused, name, fn)


# ---------------------------------------------------------------------------------------- the VMM driver
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FIXED, MAP_NORESERVE = 0x10, 0x4000
GRANULARITY = 2 << 20  # an H200's minimum allocation granularity


class Driver(types.SimpleNamespace):
    """The part of ``cuda.bindings.driver`` evaluators/gpu/vmm.py uses. Results are (CUresult, value) tuples
    with CUresult 0 for success. ``access``: reserved address -> (size, protection) of every mapped range;
    ``refuse_read_only``: answer CUDA_ERROR_NOT_SUPPORTED (801) to a read-only cuMemSetAccess."""

    def __init__(self) -> None:
        super().__init__()
        self.access: dict[int, tuple[int, int]] = {}
        self.handles: dict[int, tuple[int, int]] = {}  # handle -> (fd, size)
        self.reserved: dict[int, int] = {}
        self.refuse_read_only = False
        self.CUmemAllocationType = types.SimpleNamespace(CU_MEM_ALLOCATION_TYPE_PINNED=1)
        self.CUmemLocationType = types.SimpleNamespace(CU_MEM_LOCATION_TYPE_DEVICE=1)
        self.CUmemAllocationGranularity_flags = types.SimpleNamespace(CU_MEM_ALLOC_GRANULARITY_MINIMUM=0)
        self.CUmemAccess_flags = types.SimpleNamespace(CU_MEM_ACCESS_FLAGS_PROT_READ=1,
                                                       CU_MEM_ACCESS_FLAGS_PROT_READWRITE=3)

    def cuInit(self, flags: int) -> tuple[int]:
        return (0,)

    def CUmemAllocationProp(self) -> Any:
        return types.SimpleNamespace(type=None, location=types.SimpleNamespace(type=None, id=0))

    def CUmemAccessDesc(self) -> Any:
        return types.SimpleNamespace(location=None, flags=None)

    def cuMemGetAllocationGranularity(self, prop: Any, flags: Any) -> tuple[int, int]:
        count("vmm")
        return 0, GRANULARITY

    def cuMemAddressReserve(self, size: int, align: int, addr: int, flags: int) -> tuple[int, int]:
        count("vmm")
        if int(size) <= 0 or int(size) % GRANULARITY:
            return 1, 0  # CUDA_ERROR_INVALID_VALUE: whole granules only
        size, align = int(size), max(int(align), mmap.PAGESIZE)
        raw = _libc.mmap(None, size + align, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        if raw in (None, ctypes.c_void_p(-1).value):
            return 2, 0
        base = -(-raw // align) * align
        if base > raw:
            _libc.munmap(raw, base - raw)
        if raw + size + align > base + size:
            _libc.munmap(base + size, raw + size + align - base - size)
        self.reserved[base] = size
        return 0, base

    def cuMemCreate(self, size: int, prop: Any, flags: int) -> tuple[int, int]:
        count("vmm")
        if int(size) <= 0 or int(size) % GRANULARITY:
            return 1, 0
        fd = os.memfd_create("standin-vmm")
        os.ftruncate(fd, int(size))
        self.handles[fd] = (fd, int(size))
        return 0, fd

    def cuMemMap(self, addr: int, size: int, offset: int, handle: int, flags: int) -> tuple[int]:
        count("vmm")
        if int(handle) not in self.handles:
            return (1,)
        fd, hsize = self.handles[int(handle)]
        inside = any(b <= int(addr) and int(addr) + int(size) <= b + n for b, n in self.reserved.items())
        if (int(size) % GRANULARITY or int(addr) % GRANULARITY or int(offset) + int(size) > hsize or not inside
                or any(self._prot_at(a) is not None for a in (int(addr), int(addr) + int(size) - 1))):
            return (1,)  # a range not reserved, already mapped, past the allocation or not in whole granules
        r = _libc.mmap(int(addr), int(size), 0, mmap.MAP_SHARED | MAP_FIXED, fd, int(offset))
        if r != int(addr):
            return (2,)
        self.access[int(addr)] = (int(size), 0)
        return (0,)

    def cuMemSetAccess(self, addr: int, size: int, descs: Any, count_: int) -> tuple[int]:
        count("vmm")
        if self.access.get(int(addr), (None,))[0] != int(size):
            return (1,)  # the range must be a mapped range (here: exactly one cuMemMap's)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if descs[0].flags == 3 else 0)
        if descs[0].flags == 1 and self.refuse_read_only:
            return (801,)
        if _libc.mprotect(int(addr), int(size), prot) != 0:
            return (1,)
        self.access[int(addr)] = (int(size), prot)
        return (0,)

    def cuMemUnmap(self, addr: int, size: int) -> tuple[int]:
        count("vmm")
        _libc.mmap(int(addr), int(size), 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0)
        self.access.pop(int(addr), None)
        return (0,)

    def cuMemRelease(self, handle: int) -> tuple[int]:
        count("vmm")
        fd, _ = self.handles.pop(int(handle))
        os.close(fd)
        return (0,)

    def cuMemAddressFree(self, addr: int, size: int) -> tuple[int]:
        count("vmm")
        if self.reserved.get(int(addr)) != int(size) or any(
                int(addr) <= a < int(addr) + int(size) for a in self.access):
            return (1,)  # the size reserved, and nothing mapped in it any more
        _libc.munmap(int(addr), int(size))
        self.reserved.pop(int(addr), None)
        return (0,)

    def _prot_at(self, ptr: int) -> int | None:
        for base, (size, prot) in self.access.items():
            if base <= ptr < base + size:
                return prot
        return None

    def readable(self, ptr: int, n: int) -> bool:
        """Whether [ptr, ptr + n) lies in mapped, readable ranges (memory outside VMM ranges counts as
        readable: ordinary allocations)."""
        for p in (ptr, ptr + n - 1):
            prot = self._prot_at(p)
            if prot is None and self._reserved_at(p):
                return False
            if prot is not None and not prot & mmap.PROT_READ:
                return False
        return True

    def writable(self, ptr: int, n: int) -> bool:
        for p in (ptr, ptr + n - 1):
            prot = self._prot_at(p)
            if (prot is None and self._reserved_at(p)) or (prot is not None and not prot & mmap.PROT_WRITE):
                return False
        return True

    def _reserved_at(self, ptr: int) -> bool:
        return any(b <= ptr < b + s for b, s in self.reserved.items())


DRIVER: list[Driver] = []


def _check_access(ptr: int, size: int, write: bool) -> None:
    """A memset or copy into a range an emulated GPU could not write faults (instead of a segfault here)."""
    if DRIVER and size and not (DRIVER[0].writable(ptr, size) if write else DRIVER[0].readable(ptr, size)):
        fault()
        raise CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")


def readable(ptr: int, n: int) -> bool:
    return not DRIVER or DRIVER[0].readable(ptr, n)


def writable(ptr: int, n: int) -> bool:
    return not DRIVER or DRIVER[0].writable(ptr, n)


def host_view(ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A numpy view of device memory at ``ptr`` (an emulated kernel's operand)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * max(n, 1)).from_address(int(ptr)), dtype=np.uint8, count=n).view(
        dtype).reshape(shape)


def install(monkeypatch: Any) -> types.ModuleType:
    """Put the stand-in in place for the rest of the test (undone by ``monkeypatch``); returns the cupy module.
    Resets the counters and any emulated sticky fault."""
    cp = _make_cupy()
    driver = Driver()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    cuda_pkg = types.ModuleType("cuda")
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = driver  # type: ignore[attr-defined]
    cuda_pkg.bindings = bindings  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda", cuda_pkg)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    _patch_fused(monkeypatch)
    import evaluators.gpu.launch_prep as lp

    lp._module.cache_clear()
    lp._sm_count.cache_clear()
    DRIVER[:] = [driver]
    COUNTS.clear()
    _STICKY.clear()
    KERNELS.clear()
    ALLOCATOR.clear()
    return cp
