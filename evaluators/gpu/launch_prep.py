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
  raising a flag on the device when a row no longer holds the new values (a kernel wrote into its input);
- ``SectorPatch``: the same for one sector (``sector_bytes``) of every row but a few, at a column hashed from the
  row and a seed on the device (a thread a row), so the host draws one seed per launch, not a column per row;
- ``perturb_sectors``: that change in place, for an inout buffer restored before every launch (nothing to undo).

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
// A sector patch of an input viewed as m rows of per_row sectors of sec elements: in every row r not among the
// n_skip sorted rows `skip` (that launch's row patch), the sector at column sector_col(r) is changed. The
// columns come from a hash of (r, seed), so the host draws one seed per launch, not m columns (which cost more
// host time than the launch: ~0.65 ms a launch at m = 32768, 2026-12-02).
__host__ __device__ inline u64 sector_col(u64 r, u64 per_row, u64 seed) {
    return mix64(r, ~seed) % per_row;
}

// Whether r is among the n sorted values of `skip` (binary search).
__host__ __device__ inline bool among(u64 r, const long long* skip, u32 n) {
    u32 lo = 0, hi = n;
    while (lo < hi) {
        u32 mid = (lo + hi) / 2;
        if ((u64)skip[mid] < r) lo = mid + 1; else hi = mid;
    }
    return lo < n && (u64)skip[lo] == r;
}

// Row r of a sector patch: old row r <- the sector's values, new row r <- them perturbed (element index
// r * sec + e); a skipped row is left alone.
template <typename T>
__host__ __device__ inline void draw_sector_row(const T* base, u64 r, u64 per_row, u32 sec, const long long* skip,
                                                u32 n_skip, T* old, T* nu, u64 seed, u32 threshold, T emask, T lsb) {
    if (among(r, skip, n_skip)) return;
    const T* src = base + (r * per_row + sector_col(r, per_row, seed)) * sec;
    for (u32 e = 0; e < sec; ++e) {
        T v = src[e];
        old[r * sec + e] = v;
        nu[r * sec + e] = perturb_value<T>(v, r * sec + e, seed, threshold, emask, lsb);
    }
}

// Row r of a sector patch: the sector <- src row r; true when, with `check`, it did not hold `expect` row r.
template <typename T>
__host__ __device__ inline bool put_sector_row(T* base, u64 r, u64 per_row, u32 sec, const long long* skip,
                                               u32 n_skip, u64 seed, const T* src, const T* expect, int check) {
    if (among(r, skip, n_skip)) return false;
    T* dst = base + (r * per_row + sector_col(r, per_row, seed)) * sec;
    bool differs = false;
    for (u32 e = 0; e < sec; ++e) {
        if (check && dst[e] != expect[r * sec + e]) differs = true;
        dst[e] = src[r * sec + e];
    }
    return differs;
}

// Row r of an in-place sector perturbation (an inout buffer just restored to its initial value: nothing to put
// back, the next launch restores it again): the sector at sector_col perturbed where it lies.
template <typename T>
__host__ __device__ inline void perturb_sector_row(T* base, u64 r, u64 per_row, u32 sec, u64 seed, u32 threshold,
                                                   T emask, T lsb) {
    T* dst = base + (r * per_row + sector_col(r, per_row, seed)) * sec;
    for (u32 e = 0; e < sec; ++e) dst[e] = perturb_value<T>(dst[e], r * sec + e, seed, threshold, emask, lsb);
}

template <typename T>
__device__ void perturb_sectors(T* base, u64 m, u64 per_row, u32 sec, u64 seed, u32 threshold, T emask, T lsb) {
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < m; r += (u64)gridDim.x * blockDim.x)
        perturb_sector_row<T>(base, r, per_row, sec, seed, threshold, emask, lsb);
}

template <typename T>
__device__ void draw_sectors(const T* base, u64 m, u64 per_row, u32 sec, const long long* skip, u32 n_skip, T* old,
                             T* nu, u64 seed, u32 threshold, T emask, T lsb) {
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < m; r += (u64)gridDim.x * blockDim.x)
        draw_sector_row<T>(base, r, per_row, sec, skip, n_skip, old, nu, seed, threshold, emask, lsb);
}

template <typename T>
__device__ void put_sectors(T* base, u64 m, u64 per_row, u32 sec, const long long* skip, u32 n_skip, u64 seed,
                            const T* src, const T* expect, int check, u32* touched) {
    bool differs = false;
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < m; r += (u64)gridDim.x * blockDim.x)
        differs |= put_sector_row<T>(base, r, per_row, sec, skip, n_skip, seed, src, expect, check);
    if (differs) *touched = 1u;
}

extern "C" __global__ void perturb_sectors_u16(u16* base, u64 m, u64 per_row, u32 sec, u64 seed, u32 threshold,
                                               u32 emask, u32 lsb) {
    perturb_sectors<u16>(base, m, per_row, sec, seed, threshold, (u16)emask, (u16)lsb);
}
extern "C" __global__ void perturb_sectors_u32(u32* base, u64 m, u64 per_row, u32 sec, u64 seed, u32 threshold,
                                               u32 emask, u32 lsb) {
    perturb_sectors<u32>(base, m, per_row, sec, seed, threshold, emask, lsb);
}
extern "C" __global__ void draw_sectors_u16(const u16* base, u64 m, u64 per_row, u32 sec, const long long* skip,
                                            u32 n_skip, u16* old, u16* nu, u64 seed, u32 threshold, u32 emask,
                                            u32 lsb) {
    draw_sectors<u16>(base, m, per_row, sec, skip, n_skip, old, nu, seed, threshold, (u16)emask, (u16)lsb);
}
extern "C" __global__ void draw_sectors_u32(const u32* base, u64 m, u64 per_row, u32 sec, const long long* skip,
                                            u32 n_skip, u32* old, u32* nu, u64 seed, u32 threshold, u32 emask,
                                            u32 lsb) {
    draw_sectors<u32>(base, m, per_row, sec, skip, n_skip, old, nu, seed, threshold, emask, lsb);
}
extern "C" __global__ void put_sectors_u16(u16* base, u64 m, u64 per_row, u32 sec, const long long* skip, u32 n_skip,
                                           u64 seed, const u16* src, const u16* expect, int check, u32* touched) {
    put_sectors<u16>(base, m, per_row, sec, skip, n_skip, seed, src, expect, check, touched);
}
extern "C" __global__ void put_sectors_u32(u32* base, u64 m, u64 per_row, u32 sec, const long long* skip, u32 n_skip,
                                           u64 seed, const u32* src, const u32* expect, int check, u32* touched) {
    put_sectors<u32>(base, m, per_row, sec, skip, n_skip, seed, src, expect, check, touched);
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
# Rows of one patch: its kernels index them by blockIdx.y (CUDA's grid y limit).
MAX_PATCH_ROWS = 65535
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
        if len(r) > MAX_PATCH_ROWS:
            raise ValueError(f"RowPatch: {len(r)} rows, at most {MAX_PATCH_ROWS} a patch (split it)")
        row_elems = int(grid.shape[1])
        if xp is np:
            old = grid[r].copy()
            return cls(target, r, r, old, perturb_host(old, seed, kind, threshold), kind, whole)
        r_dev = xp.asarray(r) if rows_dev is None else rows_dev
        old = xp.empty((len(r), row_elems), dtype=grid.dtype) if old is None else old
        new = xp.empty_like(old) if new is None else new
        emask, lsb = EXPONENT[kind]
        if len(r) and row_elems:
            _kernel(f"draw_rows_{_suffix(kind)}")((_blocks(row_elems), len(r)), (FILL_BLOCK,),
                                                  (grid, _U64(row_elems), r_dev, old, new, _U64(seed % 2**64),
                                                   np.uint32(threshold), np.uint32(emask), np.uint32(lsb)))
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
        _kernel(f"put_rows_{_suffix(self.kind)}")((_blocks(int(grid.shape[1])), len(self.rows)), (FILL_BLOCK,),
                                                  (grid, _U64(grid.shape[1]), self.rows_dev, src, self.new,
                                                   np.int32(check), flag_view))


def sector_cols_host(m: int, per_row: int, seed: int) -> np.ndarray:
    """``sector_col`` of the CUDA source for rows 0 .. m - 1: the changed sector's column in each row."""
    return mix64_host(np.arange(m, dtype=_U64), 2**64 - 1 - seed % 2**64) % _U64(per_row)


@dataclass
class SectorPatch:
    """A change of one sector of every row of an input but the rows ``skip`` (sorted; a launch's RowPatch rows,
    so the two never overlap and each undo's write check sees its own values), for one launch (module
    docstring). ``target``: the (m, per_row, sec) bits view written through; the column of row r is
    ``sector_cols_host(m, per_row, seed)[r]``; ``old`` / ``new``: (m, sec) bits arrays (skipped rows unused);
    every element of a sector that may change is doubled or halved (PERTURB_ALL)."""

    target: Any
    skip: np.ndarray
    skip_dev: Any
    seed: int
    old: Any
    new: Any
    kind: str
    # numpy only: the rows changed and their sectors' columns, computed once at the draw
    host_index: tuple[np.ndarray, np.ndarray] | None = None

    @staticmethod
    def sectors(target: Any, kind: str, sector_bytes: int) -> Any:
        """``target`` (contiguous, two or more dimensions) as (rows, sectors a row, elements a sector) of its
        bits; ValueError when a row is not a whole number of sectors."""
        bits = target.view(bits_dtype(kind))
        sec = sector_bytes // bits.dtype.itemsize
        row = int(np.prod(bits.shape[1:])) if bits.ndim >= 2 else 0
        if bits.ndim < 2 or sec < 1 or row % sec:
            raise ValueError(f"SectorPatch: rows of {row} {kind} elements are not whole {sector_bytes}-byte sectors "
                             f"(shape {tuple(target.shape)})")
        return bits.reshape(bits.shape[0], row // sec, sec)

    @classmethod
    def draw(cls, target: Any, kind: str, skip: np.ndarray, seed: int, xp: ModuleType, skip_dev: Any = None,
             old: Any = None, new: Any = None, sector_bytes: int = 32) -> SectorPatch:
        """A sector patch of ``target`` (``kind``; see ``sectors``) sparing the rows ``skip``, columns and new
        values from ``seed``: one kernel on the GPU (a thread a row), no synchronisation. ``skip_dev``, ``old``,
        ``new``: ``skip`` already on the device and (m, sec) buffers to fill (shared allocations); made here
        when None. ValueError as ``sectors``, or for spared rows not distinct, sorted and in range."""
        grid = cls.sectors(target, kind, sector_bytes)
        m, per_row, sec = (int(v) for v in grid.shape)
        skip = np.asarray(skip, dtype=np.int64)
        if len(skip) and ((np.diff(skip) <= 0).any() or skip[0] < 0 or skip[-1] >= m):
            raise ValueError(f"SectorPatch: the spared rows must be distinct, sorted and in [0, {m}) (the kernels "
                             f"search them by bisection), got {skip[:8].tolist()}...")
        if xp is np:
            rows = np.delete(np.arange(m), skip)
            cols = sector_cols_host(m, per_row, seed).astype(np.int64)[rows]
            old = np.zeros((m, sec), dtype=grid.dtype)
            old[rows] = grid[rows, cols]
            return cls(grid, skip, skip, seed, old, perturb_host(old, seed, kind, PERTURB_ALL), kind, (rows, cols))
        skip_dev = xp.asarray(skip) if skip_dev is None else skip_dev
        old = xp.empty((m, sec), dtype=grid.dtype) if old is None else old
        new = xp.empty_like(old) if new is None else new
        emask, lsb = EXPONENT[kind]
        if m:
            _kernel(f"draw_sectors_{_suffix(kind)}")((_blocks(m),), (FILL_BLOCK,),
                                                     (grid, _U64(m), _U64(per_row), np.uint32(sec), skip_dev,
                                                      np.uint32(len(skip)), old, new, _U64(seed % 2**64),
                                                      np.uint32(PERTURB_ALL), np.uint32(emask), np.uint32(lsb)))
        return cls(grid, skip, skip_dev, seed, old, new, kind)

    def put(self, which: str, xp: ModuleType, touched: Any = None, flag: int = 0) -> None:
        """As ``RowPatch.put``: the ``which`` values ("new" or "old") into the sectors, with ``touched`` first
        ``touched[flag]`` set to 1 when a sector no longer holds the new values. One kernel, no synchronisation.
        ValueError for another ``which``."""
        if which not in ("new", "old"):
            raise ValueError(f"SectorPatch.put: 'new' or 'old', not {which!r}")
        src = self.new if which == "new" else self.old
        m, per_row, sec = (int(v) for v in self.target.shape)
        if xp is np:
            rows, cols = self.host_index
            if touched is not None and not np.array_equal(self.target[rows, cols], self.new[rows]):
                touched[flag] = 1
            self.target[rows, cols] = src[rows]
            return
        if not m:
            return
        check = touched is not None
        flag_view = touched[flag:flag + 1] if check else src  # any device pointer when unused
        _kernel(f"put_sectors_{_suffix(self.kind)}")((_blocks(m),), (FILL_BLOCK,),
                                                     (self.target, _U64(m), _U64(per_row), np.uint32(sec),
                                                      self.skip_dev, np.uint32(len(self.skip)),
                                                      _U64(self.seed % 2**64), src, self.new, np.int32(check),
                                                      flag_view))


def perturb_sectors(target: Any, kind: str, seed: int, xp: ModuleType, sector_bytes: int = 32) -> None:
    """Perturb ``target`` in place (``kind``; two or more dimensions, rows of whole ``sector_bytes`` sectors: see
    ``SectorPatch.sectors``): in every row the sector at ``sector_cols_host(rows, sectors a row, seed)``, every
    element of it doubled or halved where it may be (PERTURB_ALL), element index ``row * sec + e``. For an inout
    buffer just restored to its initial value (KDA's state before a timed launch): no old values to keep, since
    the next launch restores it again, and the same call after a restore recreates the same values (the
    checked launch's reference). One kernel (a thread a row), no synchronisation. ValueError as
    ``SectorPatch.sectors``."""
    grid = SectorPatch.sectors(target, kind, sector_bytes)
    m, per_row, sec = (int(v) for v in grid.shape)
    if xp is np:
        rows = np.arange(m)
        cols = sector_cols_host(m, per_row, seed).astype(np.int64)
        grid[rows, cols] = perturb_host(grid[rows, cols], seed, kind, PERTURB_ALL)
        return
    if m:
        emask, lsb = EXPONENT[kind]
        _kernel(f"perturb_sectors_{_suffix(kind)}")((_blocks(m),), (FILL_BLOCK,),
                                                    (grid, _U64(m), _U64(per_row), np.uint32(sec), _U64(seed % 2**64),
                                                     np.uint32(PERTURB_ALL), np.uint32(emask), np.uint32(lsb)))


def _suffix(kind: str) -> str:
    return "u16" if bits_dtype(kind).itemsize == 2 else "u32"


def _fill_twin(grid: tuple, block: tuple, args: tuple) -> None:
    out, n16, tail, n_tail, mode, value, seed = args
    assert block[0] >= 16 and int(n_tail) < 16
    b = out.reshape(-1).view(np.uint8)
    b[:16 * int(n16)] = fill_bytes_host(16 * int(n16), int(mode), int(value), int(seed))
    if int(n_tail):
        words = fill_bytes_host(16 * int(n16) + 16, int(mode), int(value), int(seed))
        tail.reshape(-1)[:int(n_tail)] = words[16 * int(n16):16 * int(n16) + int(n_tail)]


def _twin_kind(bits: Any, emask: Any) -> str:
    """The element kind a twin's bits array and exponent-mask argument stand for (u16 bits: bf16 or fp16)."""
    return "fp32" if bits.dtype.itemsize == 4 else ("bf16" if int(emask) == EXPONENT["bf16"][0] else "fp16")


def _draw_twin(grid: tuple, block: tuple, args: tuple) -> None:
    base, row_elems, rows, old, new, seed, threshold, emask, _lsb = args
    assert grid[1] == len(rows) <= MAX_PATCH_ROWS and int(threshold) in (PERTURB_THRESHOLD, PERTURB_ALL)
    kind = _twin_kind(base, emask)
    old[...] = base.reshape(-1, int(row_elems))[rows]
    new[...] = perturb_host(old, int(seed), kind, int(threshold))


def _put_twin(grid: tuple, block: tuple, args: tuple) -> None:
    base, row_elems, rows, src, expect, check, touched = args
    assert grid[1] == len(rows) <= MAX_PATCH_ROWS
    g = base.reshape(-1, int(row_elems))
    if int(check) and not np.array_equal(g[rows], expect):
        touched.reshape(-1)[0] = 1
    g[rows] = src


def _sector_args(args: tuple, seed: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """(the (m, per_row, sec) view, the rows changed, their columns) from a sector kernel's leading arguments
    (base, m, per_row, sec, skip, n_skip) and its seed."""
    base, m, per_row, sec, skip, n_skip = args[:6]
    grid = base.reshape(int(m), int(per_row), int(sec))
    rows = np.delete(np.arange(int(m)), np.asarray(skip).reshape(-1)[:int(n_skip)])
    return grid, rows, sector_cols_host(int(m), int(per_row), int(seed))[rows].astype(np.int64)


def _draw_sectors_twin(grid: tuple, block: tuple, args: tuple) -> None:
    assert len(grid) == 1
    old, new, seed, threshold, emask = args[6], args[7], int(args[8]), int(args[9]), int(args[10])
    g, rows, cols = _sector_args(args, seed)
    kind = _twin_kind(g, emask)
    full = np.zeros_like(old)
    full[rows] = g[rows, cols]
    old[rows] = full[rows]
    new[rows] = perturb_host(full, seed, kind, threshold)[rows]


def _put_sectors_twin(grid: tuple, block: tuple, args: tuple) -> None:
    assert len(grid) == 1
    g, rows, cols = _sector_args(args, args[6])
    src, expect, check, touched = args[7], args[8], int(args[9]), args[10]
    if check and not np.array_equal(g[rows, cols], expect[rows]):
        touched.reshape(-1)[0] = 1
    g[rows, cols] = src[rows]


def _perturb_sectors_twin(grid: tuple, block: tuple, args: tuple) -> None:
    assert len(grid) == 1
    base, m, per_row, sec, seed, threshold, emask, _lsb = args
    g = base.reshape(int(m), int(per_row), int(sec))
    kind = _twin_kind(g, emask)
    rows = np.arange(int(m))
    cols = sector_cols_host(int(m), int(per_row), int(seed)).astype(np.int64)
    g[rows, cols] = perturb_host(g[rows, cols], int(seed), kind, int(threshold))


# Host twins of the kernels by name, called as ``twin(grid, block, args)`` with numpy arrays in place of device
# arrays: what a CPU stand-in for CuPy (evaluators/gpu/standin.py) runs for these kernels.
HOST_TWINS: dict[str, Callable[[tuple, tuple, tuple], None]] = {
    "fill_pattern": _fill_twin, "draw_rows_u16": _draw_twin, "draw_rows_u32": _draw_twin,
    "put_rows_u16": _put_twin, "put_rows_u32": _put_twin,
    "draw_sectors_u16": _draw_sectors_twin, "draw_sectors_u32": _draw_sectors_twin,
    "put_sectors_u16": _put_sectors_twin, "put_sectors_u32": _put_sectors_twin,
    "perturb_sectors_u16": _perturb_sectors_twin, "perturb_sectors_u32": _perturb_sectors_twin}
