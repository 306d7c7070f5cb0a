"""Refills and row patches around timed launches (evaluators/gpu/launch_prep.py) on the CPU: the numpy path, and
the CUDA source's ``__host__ __device__`` functions compiled with nvcc for the host and compared with the numpy
twins bit for bit (so the kernels compute what the CPU tests check)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from evaluators.gpu.launch_prep import (
    EXPONENT,
    HOST_TWINS,
    LANE_MASK,
    SOURCE,
    RowPatch,
    fill,
    fill_bytes_host,
    fill_word_value,
    mix64_host,
    perturb_host,
)
from workloads.dtypes import POISON_NAN_BITS, bits_dtype, to_float64


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000, 4099])
def test_fill_writes_each_pattern(dtype, n):
    bits = np.zeros(n, dtype=bits_dtype(dtype))
    out = bits.view(bits_dtype(dtype))
    fill(out, dtype, "nan", 3, None, np)
    assert (bits == POISON_NAN_BITS[dtype]).all()
    fill(out, dtype, "ones", 3, None, np)
    assert (bits == np.iinfo(bits.dtype).max).all()
    fill(out, dtype, "zeros", 3, None, np)
    assert (bits == 0).all()
    fill(out, dtype, "random", 3, None, np)
    v = to_float64(bits.view(np.float32) if dtype == "fp32" else bits, dtype) if dtype != "fp16" else \
        bits.view(np.float16).astype(np.float64)
    assert np.isfinite(v).all() and (np.abs(v) < 2).all()
    if n >= 1000:
        assert len(np.unique(bits)) > n // 4 and (v < 0).any() and (v > 0).any()
    first = bits.copy()
    fill(out, dtype, "random", 4, None, np)
    assert n < 8 or not np.array_equal(first, bits)  # another seed, other values
    answer = np.arange(n, dtype=bits.dtype)
    fill(out, dtype, "answer", 5, answer, np)
    assert np.array_equal(bits, answer)
    fill(out, dtype, "answer", 5, None, np)  # no answer kept: random finite values instead
    assert not np.array_equal(bits, answer) or n == 1


def test_fill_refuses_unknown_patterns():
    with pytest.raises(ValueError):
        fill(np.zeros(4, np.uint16), "bf16", "stale", 1, None, np)
    with pytest.raises(ValueError):
        fill_word_value("bf16", "zeros")


def test_random_lanes_keep_sign_and_stay_below_two():
    for dtype, lane in LANE_MASK.items():
        mode, value = fill_word_value(dtype, "random")
        width = 8 * bits_dtype(dtype).itemsize
        assert mode == 1 and all((value >> (k * width)) & ((1 << width) - 1) == lane for k in range(64 // width))


def test_fill_twin_writes_what_the_numpy_path_writes_with_a_tail():
    out = np.zeros(37, dtype=np.uint16)  # 74 bytes: four 16-byte words and a 10-byte tail
    mode, value = fill_word_value("bf16", "random")
    b = out.view(np.uint8)
    HOST_TWINS["fill_pattern"]((1,), (256,), (out, np.uint64(4), b[64:], np.uint32(10), np.int32(mode),
                                              np.uint64(value), np.uint64(99)))
    want = np.zeros(37, dtype=np.uint16)
    fill(want, "bf16", "random", 99, None, np)
    assert np.array_equal(out, want)


@pytest.mark.parametrize("kind", ["bf16", "fp32"])
def test_row_patch_changes_a_sixteenth_of_the_rows_and_puts_them_back(kind):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 256)).astype(np.float32)
    if kind == "bf16":
        a = (a.view(np.uint32) >> 16).astype(np.uint16)
    before = a.copy()
    rows = np.sort(rng.choice(300, 64, replace=False))
    p = RowPatch.draw(a, kind, rows, 7, np)
    assert p.old.shape == (64, 256) and np.array_equal(p.old, before.reshape(300, -1)[rows].view(p.old.dtype))
    changed = (p.new != p.old).mean()
    assert 0.04 < changed < 0.09  # 1/16 of the elements, all eligible for normal values
    p.put("new", np)
    assert np.array_equal(a.view(p.old.dtype)[rows], p.new)
    untouched = np.setdiff1d(np.arange(300), rows)
    assert np.array_equal(a[untouched], before[untouched])
    touched = np.zeros(3, dtype=np.uint32)
    p.put("old", np, touched, 1)
    assert np.array_equal(a, before) and touched.tolist() == [0, 0, 0]
    p.put("new", np)
    a.view(p.old.dtype)[rows[5], 3] ^= 1  # the kernel wrote into a changed row
    p.put("old", np, touched, 2)
    assert np.array_equal(a, before) and touched.tolist() == [0, 0, 1]


def test_row_patch_of_a_whole_vector_and_the_twins_agree():
    w = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    w0 = w.copy()
    p = RowPatch.draw(w, "fp32", None, 5, np)
    assert p.whole and p.old.shape == (1, 1000)
    old, new = np.empty_like(p.old), np.empty_like(p.new)
    HOST_TWINS["draw_rows_u32"]((4, 1), (256,), (w.view(np.uint32).reshape(1, -1), np.uint64(1000), p.rows, old,
                                                  new, np.uint64(5), np.uint32(1 << 28),
                                                  np.uint32(EXPONENT["fp32"][0]), np.uint32(EXPONENT["fp32"][1])))
    assert np.array_equal(old, p.old) and np.array_equal(new, p.new)
    touched = np.zeros(1, dtype=np.uint32)
    HOST_TWINS["put_rows_u32"]((4, 1), (256,), (w.view(np.uint32).reshape(1, -1), np.uint64(1000), p.rows, p.new,
                                                 p.new, np.int32(1), touched))
    assert touched[0] == 1 and np.array_equal(w.view(np.uint32), p.new[0])  # w held the old values
    p.put("old", np)
    assert np.array_equal(w, w0)
    with pytest.raises(ValueError):
        RowPatch.draw(w, "fp32", np.array([1, 2]), 5, np)


def test_perturbation_leaves_zeros_nonfinite_and_the_top_binades_alone():
    v = np.array([0.0, np.inf, -np.inf, np.nan, 3e38, -2e38, 1.0, -2.5] * 64, dtype=np.float32).view(np.uint32)
    out = perturb_host(v.reshape(1, -1), 3, "fp32").reshape(-1)
    assert np.array_equal(out.reshape(-1, 8)[:, :6], v.reshape(-1, 8)[:, :6])
    assert (out != v).any()


HARNESS = r"""
#include <cstdio>
%s
int main() {
    for (u64 i = 0; i < 64; ++i) printf("%%llu %%llu\n", mix64(i * 977ull, 12345ull), fill_word(i, 1, %dull, 77ull));
    for (u32 i = 0; i < 4096; ++i) {
        u16 v = (u16)(i * 16 + (i %% 16));
        printf("%%u\n", (unsigned)perturb_value<u16>(v, i, 99ull, %du, (u16)0x7F80, (u16)0x0080));
    }
    for (u32 i = 0; i < 4096; ++i) {
        u32 v = i * 1048573u;
        printf("%%u\n", perturb_value<u32>(v, i, 5ull, %du, 0x7F800000u, 0x00800000u));
    }
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_source_computes_what_the_numpy_twins_compute(tmp_path):
    """The kernels' arithmetic (mix64, fill_word, perturb_value) compiled by nvcc for the host and for sm_90."""
    from evaluators.gpu.launch_prep import PERTURB_THRESHOLD

    value = fill_word_value("bf16", "random")[1]
    src = tmp_path / "h.cu"
    src.write_text(HARNESS % (SOURCE, value, PERTURB_THRESHOLD, PERTURB_THRESHOLD))
    exe = tmp_path / "h"
    subprocess.run(["nvcc", "-arch=sm_90", "-o", str(exe), str(src)], check=True, capture_output=True, timeout=300)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=60).stdout.split("\n")
    pairs = np.array([[int(t) for t in ln.split()] for ln in lines[:64]], dtype=np.uint64)
    i = np.arange(64, dtype=np.uint64)
    assert np.array_equal(pairs[:, 0], mix64_host(i * np.uint64(977), 12345))
    assert np.array_equal(pairs[:, 1], fill_bytes_host(64 * 8, 1, value, 77).view("<u8"))
    v16 = np.array([(k * 16 + k % 16) & 0xFFFF for k in range(4096)], dtype=np.uint16)
    got16 = np.array([int(t) for t in lines[64:64 + 4096]], dtype=np.uint16)
    assert np.array_equal(got16, perturb_host(v16.reshape(1, -1), 99, "bf16").reshape(-1))
    v32 = (np.arange(4096, dtype=np.uint64) * 1048573 % 2**32).astype(np.uint32)
    got32 = np.array([int(t) for t in lines[64 + 4096:64 + 8192]], dtype=np.uint32)
    assert np.array_equal(got32, perturb_host(v32.reshape(1, -1), 5, "fp32").reshape(-1))
    assert (got16 != v16).any() and (got32 != v32).any()


def _normal_bits(shape: tuple, kind: str, seed: int) -> np.ndarray:
    f = (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32).view(np.uint32)
    return (f >> 16).astype(np.uint16) if kind == "bf16" else f


@pytest.mark.parametrize("kind", ["bf16", "fp32"])
def test_sector_patch_changes_one_sector_of_every_row_but_the_spared_ones(kind):
    """One 32-byte sector of each row not spared, at a column that varies with the seed, every element of it
    doubled or halved; put back exactly; the write check raises the flag when a sector lost its new values; the
    kernels' twins compute what the numpy path computes."""
    from evaluators.gpu.launch_prep import EXPONENT, SectorPatch, sector_cols_host

    sec = 32 // bits_dtype(kind).itemsize
    a = _normal_bits((500, 8 * sec), kind, 4)
    before = a.copy()
    skip = np.array([0, 17, 499])
    p = SectorPatch.draw(a, kind, skip, 11, np)
    cols = sector_cols_host(500, 8, 11)
    assert 6 <= len(np.unique(cols)) <= 8 and not np.array_equal(cols, sector_cols_host(500, 8, 12))
    p.put("new", np)
    changed = (a != before).reshape(500, 8, sec).any(axis=2)
    rows = np.delete(np.arange(500), skip)
    assert changed[skip].sum() == 0 and changed[rows, cols[rows].astype(int)].all() and changed.sum() == 497
    assert (a != before).reshape(500, 8, sec)[rows, cols[rows].astype(int)].mean() > 0.99
    touched = np.zeros(2, dtype=np.uint32)
    p.put("old", np, touched, 0)
    assert np.array_equal(a, before) and touched.tolist() == [0, 0]
    p.put("new", np)
    r = int(rows[100])
    a.reshape(500, 8, sec)[r, int(cols[r]), 0] ^= 1  # a kernel wrote into a changed sector
    p.put("old", np, touched, 1)
    assert np.array_equal(a, before) and touched.tolist() == [0, 1]
    suffix, e = ("u16" if sec == 16 else "u32"), EXPONENT[kind]
    old, new = np.zeros_like(p.old), np.zeros_like(p.new)
    common = (a.reshape(-1), np.uint64(500), np.uint64(8), np.uint32(sec), skip, np.uint32(3))
    HOST_TWINS[f"draw_sectors_{suffix}"]((4,), (256,), (*common, old, new, np.uint64(11), np.uint32(0xFFFFFFFF),
                                                       np.uint32(e[0]), np.uint32(e[1])))
    assert np.array_equal(old[rows], p.old[rows]) and np.array_equal(new[rows], p.new[rows])
    HOST_TWINS[f"put_sectors_{suffix}"]((4,), (256,), (*common, np.uint64(11), new, new, np.int32(1), touched))
    assert touched[0] == 1 and not np.array_equal(a, before)  # a held the old values; now the new ones
    with pytest.raises(ValueError, match="whole 32-byte sectors"):
        SectorPatch.draw(np.zeros((4, 3), dtype=bits_dtype(kind)), kind, skip[:0], 1, np)
    with pytest.raises(ValueError, match="sorted"):  # the device kernels bisect them
        SectorPatch.draw(a, kind, np.array([17, 0]), 1, np)


SECTOR_HARNESS = r"""
#include <cstdio>
%s
int main() {
    const u64 m = 300, per_row = 6;
    const u32 sec = 16;
    static u16 base[m * per_row * sec], old[m * sec], nu[m * sec];
    for (u64 i = 0; i < m * per_row * sec; ++i) base[i] = (u16)(0x3F80 + (i * 7919u) %% 0x0400);
    const long long skip[3] = {2, 150, 299};
    for (u64 r = 0; r < m; ++r)
        draw_sector_row<u16>(base, r, per_row, sec, skip, 3, old, nu, 77ull, 0xFFFFFFFFu, (u16)0x7F80, (u16)0x0080);
    int differs = 0;
    for (u64 r = 0; r < m; ++r) differs += put_sector_row<u16>(base, r, per_row, sec, skip, 3, 77ull, nu, nu, 1);
    printf("%%d\n", differs);
    for (u64 r = 0; r < m; ++r) printf("%%llu %%d\n", sector_col(r, per_row, 77ull), (int)among(r, skip, 3));
    for (u64 i = 0; i < m * sec; ++i) printf("%%u %%u\n", (unsigned)old[i], (unsigned)nu[i]);
    for (u64 i = 0; i < m * per_row * sec; ++i) printf("%%u\n", (unsigned)base[i]);
    for (u64 r = 0; r < m; ++r) perturb_sector_row<u16>(base, r, per_row, sec, 91ull, 0xFFFFFFFFu, (u16)0x7F80,
                                                        (u16)0x0080);
    for (u64 i = 0; i < m * per_row * sec; ++i) printf("%%u\n", (unsigned)base[i]);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_sector_rows_compute_what_the_numpy_path_computes(tmp_path):
    """The sector kernels' per-row bodies (sector_col, among, draw_sector_row, put_sector_row,
    perturb_sector_row) compiled by nvcc for the host, run over every row, against the numpy paths (SectorPatch,
    perturb_sectors), bit for bit."""
    from evaluators.gpu.launch_prep import SectorPatch, perturb_sectors, sector_cols_host

    src = tmp_path / "s.cu"
    src.write_text(SECTOR_HARNESS % SOURCE)
    exe = tmp_path / "s"
    subprocess.run(["nvcc", "-arch=sm_90", "-o", str(exe), str(src)], check=True, capture_output=True, timeout=300)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=60).stdout.split("\n")
    m, per_row, sec, skip = 300, 6, 16, np.array([2, 150, 299])
    base = np.array([(0x3F80 + (i * 7919) % 0x0400) & 0xFFFF for i in range(m * per_row * sec)], dtype=np.uint16)
    p = SectorPatch.draw(base.reshape(m, per_row * sec).copy(), "bf16", skip, 77, np)
    assert int(lines[0]) == m - 3  # every changed sector held its old values, not the new: the check says so
    cols = np.array([[int(t) for t in ln.split()] for ln in lines[1:1 + m]])
    assert np.array_equal(cols[:, 0], sector_cols_host(m, per_row, 77)) and cols[:, 1].tolist() == [
        int(r in skip) for r in range(m)]
    pairs = np.array([[int(t) for t in ln.split()] for ln in lines[1 + m:1 + m + m * sec]], dtype=np.uint16)
    rows = np.delete(np.arange(m), skip)
    assert np.array_equal(pairs[:, 0].reshape(m, sec)[rows], p.old[rows])
    assert np.array_equal(pairs[:, 1].reshape(m, sec)[rows], p.new[rows])
    after = np.array([int(t) for t in lines[1 + m + m * sec:1 + m + m * sec + m * per_row * sec]], dtype=np.uint16)
    p.put("new", np)
    assert np.array_equal(after.reshape(m, -1), p.target.reshape(m, -1))
    n = 1 + m + m * sec + m * per_row * sec
    perturbed = np.array([int(t) for t in lines[n:n + m * per_row * sec]], dtype=np.uint16)
    want = after.reshape(m, -1).copy()
    perturb_sectors(want, "bf16", 91, np)
    assert np.array_equal(perturbed.reshape(m, -1), want) and not np.array_equal(want, after.reshape(m, -1))


@pytest.mark.parametrize("kind", ["bf16", "fp32"])
def test_in_place_sector_perturbation_of_an_inout_buffer(kind):
    """perturb_sectors changes one sector of every row where it lies, the same sectors and values as a
    SectorPatch of the same seed sparing nothing; again after a restore it recreates the same values; its twin
    agrees."""
    from evaluators.gpu.launch_prep import EXPONENT, SectorPatch, perturb_sectors

    sec = 32 // bits_dtype(kind).itemsize
    made = _normal_bits((300, 4 * sec), kind, 5)
    a = made.copy()
    perturb_sectors(a, kind, 21, np)
    patch = SectorPatch.draw(b := made.copy(), kind, np.zeros(0, dtype=np.int64), 21, np)
    patch.put("new", np)
    assert np.array_equal(a, b) and (a != made).reshape(300, 4, sec).any(axis=2).sum(axis=1).tolist() == [1] * 300
    again = made.copy()
    perturb_sectors(again, kind, 21, np)
    assert np.array_equal(again, a)
    other = made.copy()
    perturb_sectors(other, kind, 22, np)
    assert not np.array_equal(other, a)
    twin = made.copy()
    e = EXPONENT[kind]
    HOST_TWINS[f"perturb_sectors_{'u16' if sec == 16 else 'u32'}"](
        (4,), (256,), (twin.reshape(-1), np.uint64(300), np.uint64(4), np.uint32(sec), np.uint64(21),
                       np.uint32(0xFFFFFFFF), np.uint32(e[0]), np.uint32(e[1])))
    assert np.array_equal(twin, a)
