"""The work around a timed launch, at copy rate and with no host synchronisation: output refills and in-place
changes of a few input rows, one kernel launch or one driver call each, on the current stream.

Gate v2 refills every output before every timed launch and changes part of the inputs of some launches
(``timed_checks``). Its first version did this with chains of CuPy operations per launch (a Philox generator and
about ten elementwise kernels per perturbation, an elementwise fill of 2-byte elements per refill): on an H200
the timing loop's wall time at 16384 x 131072 went from 77 ms to 255 ms (experiments/results/
gate_v2_h200_2026-12-01/gate_cost.md), seven times what writing the 4 GiB output costs. Here:

- ``fill``: zeros and all-ones through ``cudaMemsetAsync``, the NaN poison and random finite values through one
  kernel that writes 16 bytes per thread and step (``fill_pattern``: a constant 64-bit word, or splitmix64 of
  the word index and a seed masked so every lane is a finite value in (-2, 2)), the correct answer for another
  input set through ``cudaMemcpyAsync``;
- ``RowPatch.draw``: the rows of an input to change and their old and new values, drawn before the timing loop
  (one kernel per input: the rows gathered, a random 1/16 of their elements doubled or halved by flipping the
  lowest exponent bit, as ``gate.perturbed`` does);
- ``RowPatch.put``: the new or the old values written into the rows (one kernel per input), the second also
  raising a flag on the device when a row no longer holds the new values (a kernel wrote into its input).
  Rows of up to SHORT_ROW_BYTES (a sector patch) get a thread each, longer ones a CTA row of the grid each.

Every function takes the array module ``xp``: numpy runs the host twins (``HOST_TWINS``, the same bit-exact
formulas: tests/test_launch_prep.py runs the CUDA source's ``__host__ __device__`` functions on the CPU and
compares), CuPy the kernels. Splitmix64: Steele, Lea and Flood, "Fast splittable pseudorandom number
generators" (OOPSLA 2014), as in ``workloads.fused``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np

from workloads.dtypes import POISON_NAN_BITS, bits_dtype

SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

// splitmix64 of (i, seed): Steele, Lea and Flood (2014).
__host__ __device__ inline u64 mix64(u64 i, u64 seed) {
    u64 h = i * 0x9E3779B97F4A7C15ull + seed;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

// 64-bit word i of a refill: `value` (mode 0), or mix64(i, seed) & `value` (mode 1: `value` keeps each lane's
// sign and the bits below its exponent's highest one, so every lane is finite).
__host__ __device__ inline u64 fill_word(u64 i, int mode, u64 value, u64 seed) {
    return mode == 0 ? value : (mix64(i, seed) & value);
}

// Element idx of a perturbation: the lowest exponent bit `lsb` flipped (the value doubled or halved) when the
// hash of (idx, seed) falls below `threshold` (of 2^32) and the exponent is neither 0 nor one of the two highest.
template <typename T>
__host__ __device__ inline T perturb_value(T v, u64 idx, u64 seed, u32 threshold, T emask, T lsb) {
    T e = (T)(v & emask);
    bool pick = (u32)(mix64(idx, seed) >> 32) < threshold;
    bool ok = e != 0 && e != emask && e != (T)(emask - lsb);
    return (pick && ok) ? (T)(v ^ lsb) : v;
}

// Writes n16 16-byte words at out (16-byte aligned), then n_tail (< 16) bytes at tail = out + 16 n16.
extern "C" __global__ void fill_pattern(uint4* __restrict__ out, u64 n16, unsigned char* __restrict__ tail,
                                        u32 n_tail, int mode, u64 value, u64 seed) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 k = blockIdx.x * (u64)blockDim.x + threadIdx.x; k < n16; k += stride) {
        u64 a = fill_word(2 * k, mode, value, seed), b = fill_word(2 * k + 1, mode, value, seed);
        uint4 v;
        v.x = (u32)a; v.y = (u32)(a >> 32); v.z = (u32)b; v.w = (u32)(b >> 32);
        out[k] = v;
    }
    if (blockIdx.x == 0 && threadIdx.x < n_tail) {
        u64 w = fill_word(2 * n16 + threadIdx.x / 8, mode, value, seed);
        tail[threadIdx.x] = (unsigned char)(w >> (8 * (threadIdx.x % 8)));
    }
}

// Row r (blockIdx.y) of a patch: old <- base[rows[r]]; new <- perturbed old (element index r * row_elems + j).
template <typename T>
__device__ void draw_rows(const T* base, u64 row_elems, const long long* rows, T* old, T* nu, u64 seed,
                          u32 threshold, T emask, T lsb) {
    const T* src = base + (u64)rows[blockIdx.y] * row_elems;
    u64 o = (u64)blockIdx.y * row_elems;
    for (u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x; j < row_elems; j += (u64)gridDim.x * blockDim.x) {
        T v = src[j];
        old[o + j] = v;
        nu[o + j] = perturb_value<T>(v, o + j, seed, threshold, emask, lsb);
    }
}

// base[rows[r]] <- src row r; with `check`, first raise *touched when the row differs from `expect` row r.
template <typename T>
__device__ void put_rows(T* base, u64 row_elems, const long long* rows, const T* src, const T* expect, int check,
                         u32* touched) {
    T* dst = base + (u64)rows[blockIdx.y] * row_elems;
    u64 o = (u64)blockIdx.y * row_elems;
    bool differs = false;
    for (u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x; j < row_elems; j += (u64)gridDim.x * blockDim.x) {
        if (check && dst[j] != expect[o + j]) differs = true;
        dst[j] = src[o + j];
    }
    if (differs) *touched = 1u;
}

// As draw_rows and put_rows with one thread per row, for n rows of at most SHORT_ROW_BYTES (a sector patch: tens
// of thousands of 32-byte rows, where a CTA per row would launch that many CTAs for 16 elements each).
template <typename T>
__device__ void draw_short_rows(const T* base, u64 row_elems, const long long* rows, u64 n, T* old, T* nu, u64 seed,
                                u32 threshold, T emask, T lsb) {
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < n; r += (u64)gridDim.x * blockDim.x) {
        const T* src = base + (u64)rows[r] * row_elems;
        u64 o = r * row_elems;
        for (u64 j = 0; j < row_elems; ++j) {
            T v = src[j];
            old[o + j] = v;
            nu[o + j] = perturb_value<T>(v, o + j, seed, threshold, emask, lsb);
        }
    }
}

template <typename T>
__device__ void put_short_rows(T* base, u64 row_elems, const long long* rows, u64 n, const T* src, const T* expect,
                               int check, u32* touched) {
    bool differs = false;
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < n; r += (u64)gridDim.x * blockDim.x) {
        T* dst = base + (u64)rows[r] * row_elems;
        u64 o = r * row_elems;
        for (u64 j = 0; j < row_elems; ++j) {
            if (check && dst[j] != expect[o + j]) differs = true;
            dst[j] = src[o + j];
        }
    }
    if (differs) *touched = 1u;
}

extern "C" __global__ void draw_rows_u16(const u16* base, u64 row_elems, const long long* rows, u16* old, u16* nu,
                                         u64 seed, u32 threshold, u32 emask, u32 lsb) {
    draw_rows<u16>(base, row_elems, rows, old, nu, seed, threshold, (u16)emask, (u16)lsb);
}
extern "C" __global__ void draw_rows_u32(const u32* base, u64 row_elems, const long long* rows, u32* old, u32* nu,
                                         u64 seed, u32 threshold, u32 emask, u32 lsb) {
    draw_rows<u32>(base, row_elems, rows, old, nu, seed, threshold, emask, lsb);
}
extern "C" __global__ void put_rows_u16(u16* base, u64 row_elems, const long long* rows, const u16* src,
                                        const u16* expect, int check, u32* touched) {
    put_rows<u16>(base, row_elems, rows, src, expect, check, touched);
}
extern "C" __global__ void put_rows_u32(u32* base, u64 row_elems, const long long* rows, const u32* src,
                                        const u32* expect, int check, u32* touched) {
    put_rows<u32>(base, row_elems, rows, src, expect, check, touched);
}
extern "C" __global__ void draw_short_rows_u16(const u16* base, u64 row_elems, const long long* rows, u64 n, u16* old,
                                               u16* nu, u64 seed, u32 threshold, u32 emask, u32 lsb) {
    draw_short_rows<u16>(base, row_elems, rows, n, old, nu, seed, threshold, (u16)emask, (u16)lsb);
}
extern "C" __global__ void draw_short_rows_u32(const u32* base, u64 row_elems, const long long* rows, u64 n, u32* old,
                                               u32* nu, u64 seed, u32 threshold, u32 emask, u32 lsb) {
    draw_short_rows<u32>(base, row_elems, rows, n, old, nu, seed, threshold, emask, lsb);
}
extern "C" __global__ void put_short_rows_u16(u16* base, u64 row_elems, const long long* rows, u64 n, const u16* src,
                                              const u16* expect, int check, u32* touched) {
    put_short_rows<u16>(base, row_elems, rows, n, src, expect, check, touched);
}
extern "C" __global__ void put_short_rows_u32(u32* base, u64 row_elems, const long long* rows, u64 n, const u32* src,
                                              const u32* expect, int check, u32* touched) {
    put_short_rows<u32>(base, row_elems, rows, n, src, expect, check, touched);
}
"""

# Per element type: the bits of each lane a random finite refill value may set (the sign and everything below
# the exponent's highest bit: |v| < 2 for bf16/fp32, < 1 for fp16), and (exponent mask, its lowest bit).
LANE_MASK = {"bf16": 0xBFFF, "fp16": 0xBBFF, "fp32": 0xBFFFFFFF}
EXPONENT = {"bf16": (0x7F80, 0x0080), "fp16": (0x7C00, 0x0400), "fp32": (0x7F800000, 0x00800000)}
# Share of a changed row's elements that are doubled or halved (as gate.PERTURB_SHARE), as a threshold of 2^32.
PERTURB_THRESHOLD = 1 << 28
# The threshold that changes every element it may (finite, neither zero nor at the top exponent): a sector patch.
PERTURB_ALL = 0xFFFFFFFF
FILL_BLOCK, FILL_BLOCKS_PER_SM = 256, 8
# Rows of one patch of long rows: their kernels index them by blockIdx.y (CUDA's grid y limit).
MAX_PATCH_ROWS = 65535
# Rows of at most this many bytes get one thread each (the *_short_rows kernels: any number of rows); longer ones
# a CTA row of the grid each. A sector patch (32-byte rows) over 32768 rows took ~0.2 ms a launch as 32768 CTAs
# of which 16 threads worked (H200, 2026-12-02: gate_cost.md's "all of v2" column, 13.5 ms at 32768 x 512).
SHORT_ROW_BYTES = 64
_U64 = np.uint64


def _replicate(lane: int, width: int) -> int:
    """``lane`` (``width`` bits) repeated over 64 bits."""
    out = 0
    for k in range(64 // width):
        out |= lane << (k * width)
    return out


def fill_word_value(dtype: str, pattern: str) -> tuple[int, int]:
    """(mode, value) of ``fill_pattern`` for ``pattern`` "nan" (the gate's NaN poison, constant) or "random"
    (the lane mask). ValueError for another pattern."""
    width = 8 * bits_dtype(dtype).itemsize
    if pattern == "nan":
        return 0, _replicate(POISON_NAN_BITS[dtype], width)
    if pattern == "random":
        return 1, _replicate(LANE_MASK[dtype], width)
    raise ValueError(f"fill_pattern draws 'nan' or 'random', not {pattern!r}")


def mix64_host(i: np.ndarray, seed: int) -> np.ndarray:
    """``mix64`` of the CUDA source over a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        h = i.astype(_U64) * _U64(0x9E3779B97F4A7C15) + _U64(seed % 2**64)
        h = (h ^ (h >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> _U64(27))) * _U64(0x94D049BB133111EB)
        return h ^ (h >> _U64(31))


def fill_bytes_host(nbytes: int, mode: int, value: int, seed: int) -> np.ndarray:
    """The ``nbytes`` bytes ``fill_pattern`` writes (little-endian words)."""
    n_words = -(-nbytes // 8)
    words = (np.full(n_words, value, dtype=_U64) if mode == 0
             else mix64_host(np.arange(n_words, dtype=_U64), seed) & _U64(value))
    return words.astype("<u8").view(np.uint8)[:nbytes]


def perturb_host(old: np.ndarray, seed: int, kind: str, threshold: int = PERTURB_THRESHOLD) -> np.ndarray:
    """``perturb_value`` over a (rows, row_elems) bits array (element index = its flat position); an element is
    changed when its hash's high word is below ``threshold`` (of 2^32)."""
    emask, lsb = EXPONENT[kind]
    t = bits_dtype(kind).type
    idx = np.arange(old.size, dtype=_U64).reshape(old.shape)
    pick = (mix64_host(idx, seed) >> _U64(32)) < _U64(threshold)
    e = old & t(emask)
    ok = (e != 0) & (e != t(emask)) & (e != t(emask - lsb))
    return np.where(pick & ok, old ^ t(lsb), old).astype(old.dtype)


@cache
def _module() -> Any:
    import cupy as cp

    return cp.RawModule(code=SOURCE)


def _kernel(name: str) -> Any:
    return _module().get_function(name)


def warm() -> None:
    """Compile the kernels now (NVRTC, about a second on first use) so no evaluation's deadline pays it."""
    for name in HOST_TWINS:
        _kernel(name)


def _ptr(a: Any) -> int:
    return int(a.data.ptr)


def _blocks(n: int) -> int:
    """CTAs for a grid-stride loop over ``n`` items: enough to fill the GPU, no more than the items need."""
    import cupy as cp

    sms = _sm_count(cp.cuda.runtime.getDevice())
    return max(1, min(FILL_BLOCKS_PER_SM * sms, -(-n // FILL_BLOCK)))


@cache
def _sm_count(device: int) -> int:
    import cupy as cp

    return int(cp.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"])


def fill(out: Any, dtype: str, pattern: str, seed: int, answer: Any | None, xp: ModuleType) -> None:
    """Overwrite output ``out`` (contiguous, ``dtype`` storage) in place with ``pattern``: "nan" (the gate's NaN
    poison), "ones" (all-ones bits), "zeros", "random" (finite values in (-2, 2) from ``seed``) or "answer" (a
    copy of ``answer``, same shape; "random" when it is None). One memset, copy or kernel on the current stream;
    no synchronisation. ValueError for an unknown pattern."""
    if pattern not in ("nan", "ones", "zeros", "random", "answer"):
        raise ValueError(f"unknown refill pattern {pattern!r}")
    if pattern == "answer" and answer is None:
        pattern = "random"
    nbytes = int(out.nbytes)
    if xp is np:
        flat = out.reshape(-1).view(np.uint8)
        if pattern in ("zeros", "ones"):
            flat[...] = 0 if pattern == "zeros" else 0xFF
        elif pattern == "answer":
            out[...] = answer
        else:
            flat[...] = fill_bytes_host(nbytes, *fill_word_value(dtype, pattern), seed)
        return
    if nbytes == 0:
        return
    cp = xp
    stream = cp.cuda.get_current_stream().ptr
    if pattern in ("zeros", "ones"):
        cp.cuda.runtime.memsetAsync(_ptr(out), 0 if pattern == "zeros" else 0xFF, nbytes, stream)
    elif pattern == "answer":
        cp.cuda.runtime.memcpyAsync(_ptr(out), _ptr(answer), nbytes, cp.cuda.runtime.memcpyDeviceToDevice, stream)
    else:
        if _ptr(out) % 16:
            raise ValueError(f"fill: output at {_ptr(out):#x} is not 16-byte aligned")
        mode, value = fill_word_value(dtype, pattern)
        n16 = nbytes // 16
        tail = out.reshape(-1).view(cp.uint8)[16 * n16:] if nbytes % 16 else out.reshape(-1).view(cp.uint8)
        _kernel("fill_pattern")((_blocks(n16),), (FILL_BLOCK,),
                                (out, _U64(n16), tail, np.uint32(nbytes % 16), np.int32(mode), _U64(value),
                                 _U64(seed % 2**64)))


@dataclass
class RowPatch:
    """A change of some rows of one input for one launch (module docstring). ``target``: the array changed (a
    row-major view: what the writes go through); ``rows``: the host row indices (sorted, distinct) of its leading
    axis, ``[0]`` with ``whole``; ``rows_dev``: them in ``xp``; ``old`` / ``new``: (len(rows), row_elems) bits
    arrays; ``kind``: "bf16", "fp16" or "fp32"; ``whole``: the whole array is one row."""

    target: Any
    rows: np.ndarray
    rows_dev: Any
    old: Any
    new: Any
    kind: str
    whole: bool

    @staticmethod
    def _grid(target: Any, kind: str, whole: bool) -> Any:
        bits = target.view(bits_dtype(kind))
        return bits.reshape(1, -1) if whole else bits.reshape(bits.shape[0], -1)

    @classmethod
    def draw(cls, target: Any, kind: str, rows: np.ndarray | None, seed: int, xp: ModuleType,
             rows_dev: Any = None, old: Any = None, new: Any = None,
             threshold: int = PERTURB_THRESHOLD) -> RowPatch:
        """A patch of ``target`` (contiguous; ``kind``) at ``rows`` of its leading axis (None: the whole array as
        one row), new values from ``seed``: one kernel (gather + perturb) on the GPU, no synchronisation.
        ``rows_dev``, ``old``, ``new``: the rows already on the device and (len(rows), row_elems) buffers of the
        element width to fill (so many patches share one transfer and one allocation); made here when None.
        threshold: the share of elements changed, of 2^32 (PERTURB_ALL: every one it may). ValueError for rows of
        an array with fewer than two dimensions, or more than 65535 of them (the kernels' grid y)."""
        whole = rows is None
        if not whole and target.ndim < 2:
            raise ValueError("RowPatch: rows need an array of two or more dimensions")
        grid = cls._grid(target, kind, whole)
        r = np.zeros(1, dtype=np.int64) if whole else np.asarray(rows, dtype=np.int64)
        row_elems = int(grid.shape[1])
        short = _short(row_elems, kind)
        if len(r) > MAX_PATCH_ROWS and not short:
            raise ValueError(f"RowPatch: {len(r)} rows of {row_elems} elements, at most {MAX_PATCH_ROWS} a patch "
                             f"of rows longer than {SHORT_ROW_BYTES} bytes (split it)")
        if xp is np:
            old = grid[r].copy()
            return cls(target, r, r, old, perturb_host(old, seed, kind, threshold), kind, whole)
        r_dev = xp.asarray(r) if rows_dev is None else rows_dev
        old = xp.empty((len(r), row_elems), dtype=grid.dtype) if old is None else old
        new = xp.empty_like(old) if new is None else new
        emask, lsb = EXPONENT[kind]
        tail = (_U64(seed % 2**64), np.uint32(threshold), np.uint32(emask), np.uint32(lsb))
        if len(r) and row_elems and short:
            _kernel(f"draw_short_rows_{_suffix(kind)}")((_blocks(len(r)),), (FILL_BLOCK,),
                                                        (grid, _U64(row_elems), r_dev, _U64(len(r)), old, new, *tail))
        elif len(r) and row_elems:
            _kernel(f"draw_rows_{_suffix(kind)}")((_blocks(row_elems), len(r)), (FILL_BLOCK,),
                                                  (grid, _U64(row_elems), r_dev, old, new, *tail))
        return cls(target, r, r_dev, old, new, kind, whole)

    def put(self, which: str, xp: ModuleType, touched: Any = None, flag: int = 0) -> None:
        """Write the ``which`` values ("new" or "old") into the rows; with ``touched`` (a uint32 array), first set
        ``touched[flag]`` to 1 when a row no longer holds the new values. One kernel, no synchronisation.
        ValueError for another ``which``."""
        if which not in ("new", "old"):
            raise ValueError(f"RowPatch.put: 'new' or 'old', not {which!r}")
        grid = self._grid(self.target, self.kind, self.whole)
        src = self.new if which == "new" else self.old
        if xp is np:
            if touched is not None and not np.array_equal(grid[self.rows], self.new):
                touched[flag] = 1
            grid[self.rows] = src
            return
        if not len(self.rows) or not grid.shape[1]:
            return
        check = touched is not None
        flag_view = touched[flag:flag + 1] if check else src  # any device pointer when unused
        row_elems, n = int(grid.shape[1]), len(self.rows)
        tail = (src, self.new, np.int32(check), flag_view)
        if _short(row_elems, self.kind):
            _kernel(f"put_short_rows_{_suffix(self.kind)}")((_blocks(n),), (FILL_BLOCK,),
                                                            (grid, _U64(row_elems), self.rows_dev, _U64(n), *tail))
        else:
            _kernel(f"put_rows_{_suffix(self.kind)}")((_blocks(row_elems), n), (FILL_BLOCK,),
                                                      (grid, _U64(row_elems), self.rows_dev, *tail))


def _suffix(kind: str) -> str:
    return "u16" if bits_dtype(kind).itemsize == 2 else "u32"


def _short(row_elems: int, kind: str) -> bool:
    """Rows of ``row_elems`` elements of ``kind`` take the one-thread-per-row kernels (SHORT_ROW_BYTES)."""
    return row_elems * bits_dtype(kind).itemsize <= SHORT_ROW_BYTES


def _fill_twin(grid: tuple, block: tuple, args: tuple) -> None:
    out, n16, tail, n_tail, mode, value, seed = args
    assert block[0] >= 16 and int(n_tail) < 16
    b = out.reshape(-1).view(np.uint8)
    b[:16 * int(n16)] = fill_bytes_host(16 * int(n16), int(mode), int(value), int(seed))
    if int(n_tail):
        words = fill_bytes_host(16 * int(n16) + 16, int(mode), int(value), int(seed))
        tail.reshape(-1)[:int(n_tail)] = words[16 * int(n16):16 * int(n16) + int(n_tail)]


def _draw_host(base: Any, row_elems: Any, rows: Any, old: Any, new: Any, seed: Any, threshold: Any, emask: Any,
               _lsb: Any) -> None:
    assert int(threshold) in (PERTURB_THRESHOLD, PERTURB_ALL)
    kind = "fp32" if base.dtype.itemsize == 4 else ("bf16" if int(emask) == EXPONENT["bf16"][0] else "fp16")
    old[...] = base.reshape(-1, int(row_elems))[rows]
    new[...] = perturb_host(old, int(seed), kind, int(threshold))


def _put_host(base: Any, row_elems: Any, rows: Any, src: Any, expect: Any, check: Any, touched: Any) -> None:
    g = base.reshape(-1, int(row_elems))
    if int(check) and not np.array_equal(g[rows], expect):
        touched.reshape(-1)[0] = 1
    g[rows] = src


def _rows_twin(core: Callable[..., None]) -> Callable[[tuple, tuple, tuple], None]:
    """The twin of a CTA-per-row kernel (draw_rows_*, put_rows_*): a grid row per patch row, at most 65535."""

    def run(grid: tuple, block: tuple, args: tuple) -> None:
        assert grid[1] == len(args[2]) <= MAX_PATCH_ROWS
        core(*args)

    return run


def _short_twin(core: Callable[..., None]) -> Callable[[tuple, tuple, tuple], None]:
    """The twin of a thread-per-row kernel (*_short_rows_*): a 1-D grid, the row count an argument."""

    def run(grid: tuple, block: tuple, args: tuple) -> None:
        base, row_elems, rows, n, *rest = args
        assert len(grid) == 1 and int(n) == len(rows) and int(row_elems) * base.dtype.itemsize <= SHORT_ROW_BYTES
        core(base, row_elems, rows, *rest)

    return run


# Host twins of the kernels by name, called as ``twin(grid, block, args)`` with numpy arrays in place of device
# arrays: what a CPU stand-in for CuPy (evaluators/gpu/standin.py) runs for these kernels.
HOST_TWINS: dict[str, Callable[[tuple, tuple, tuple], None]] = {
    "fill_pattern": _fill_twin,
    **{f"draw_rows_{t}": _rows_twin(_draw_host) for t in ("u16", "u32")},
    **{f"put_rows_{t}": _rows_twin(_put_host) for t in ("u16", "u32")},
    **{f"draw_short_rows_{t}": _short_twin(_draw_host) for t in ("u16", "u32")},
    **{f"put_short_rows_{t}": _short_twin(_put_host) for t in ("u16", "u32")}}
