"""RMSNorm template v2: knob validation, launch rule, recommended sets, ptxas resources of a spread of knob sets,
and a CPU emulation of the template's work decomposition (which CTA / thread / row iteration reads and writes
which elements), checked against the float64 reference on gate shapes."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from population.kernel import LaunchConfig
from workloads.dtypes import from_float, to_float64
from workloads.rmsnorm import GATE_SHAPES, TUNED_KNOBS, RMSNorm, tuned_knobs

# ----------------------------------------------------------------------------------------- knobs and launch


def test_new_knobs_validate_with_clear_messages():
    wl = RMSNorm("bf16")
    k = wl.check_knobs({"threads": 256, "rows_per_cta": 32})  # 8-lane row groups are legal
    assert k["cluster"] == 1 and k["row_iters"] == 1 and k["w_regs"] == 0 and k["min_blocks"] == 0
    assert wl.check_knobs({"threads": 64, "rows_per_cta": 4})["rows_per_cta"] == 4  # 16-lane groups
    for bad, msg in [({"threads": 64, "rows_per_cta": 16}, "rows_per_cta=16"),  # 4 lanes per row
                     ({"threads": 96, "rows_per_cta": 2}, "rows_per_cta=2"),  # 48 threads per row
                     ({"cluster": 3}, "cluster=3"), ({"cluster": 16}, "cluster=16"),
                     ({"row_iters": 0}, "row_iters=0"), ({"w_regs": 2}, "w_regs=2"),
                     ({"threads": 1024, "min_blocks": 4}, "min_blocks=4")]:
        with pytest.raises(ValueError, match=msg):
            wl.check_knobs(bad)


def test_launch_rule_grid_is_a_multiple_of_the_cluster():
    wl = RMSNorm("bf16")

    def grid(m, **knobs):
        return wl.launch_dims((m, 4096), LaunchConfig(block=(256, 1, 1), knobs=tuple(knobs.items())))[0][0]

    assert grid(199, rows_per_cta=2, row_iters=2) == 50  # ceil(199 / 4)
    assert grid(199, cluster=8) == 8 * 199
    assert grid(7, rows_per_cta=4, row_iters=4, cluster=2) == 2  # one row group, two CTAs
    assert grid(1) == 1
    assert grid(32768, **TUNED_KNOBS[256]) == 32768 // (32 * 2)
    for m in (1, 7, 199, 8192):
        assert grid(m, cluster=4, rows_per_cta=2) % 4 == 0
    with pytest.raises(ValueError, match="row_iters must be >= 1"):
        grid(5, row_iters=0)
    launch = LaunchConfig(block=(512, 1, 1), knobs=(("cluster", 8),))
    assert wl.elements_per_cta_sweep((8192, 262144), launch) == 262144 // 8


def test_tuned_knobs_hold_each_row_in_registers_and_cover_the_matrix():
    wl = RMSNorm("bf16")
    assert tuned_knobs(256) == TUNED_KNOBS[256] and tuned_knobs(257) == TUNED_KNOBS[512]
    assert tuned_knobs(3072) == TUNED_KNOBS[4096] and tuned_knobs(10**6) == TUNED_KNOBS[262144]
    with pytest.raises(ValueError, match="row length"):
        tuned_knobs(0)
    assert sorted(TUNED_KNOBS) == sorted({n for _, n in wl.benchmark_shapes})
    for n, knobs in TUNED_KNOBS.items():
        k = wl.check_knobs(knobs)
        tpr = k["threads"] // k["rows_per_cta"]
        capacity = k["max_chunks"] * k["vec"] * tpr * k["cluster"]
        assert capacity >= n, f"N={n}: {knobs} holds only {capacity} elements in registers"
        assert capacity < 4 * n, f"N={n}: {knobs} leaves most chunk registers idle"


# ------------------------------------------------------------------------------------------ ptxas resources

# (dtype, knobs, register ceiling): the recommended sets plus corners of every knob.
SPREAD = [("bf16", kn, 64) for kn in TUNED_KNOBS.values()] + [
    ("bf16", {"threads": 256, "rows_per_cta": 32, "max_chunks": 4, "row_iters": 4, "w_regs": 1}, 96),
    ("bf16", {"threads": 1024, "cluster": 8, "max_chunks": 4}, 64),
    ("bf16", {"threads": 128, "rows_per_cta": 8, "vec": 2, "keep_in_regs": 0, "cache_hint": 2}, 64),
    ("bf16", {"threads": 512, "cluster": 4, "row_iters": 2, "rows_per_cta": 2, "cache_hint": 1}, 96),
    ("bf16", {"threads": 256, "max_chunks": 4, "row_iters": 2, "min_blocks": 4}, 64),
    ("fp16", {"threads": 256, "rows_per_cta": 16, "max_chunks": 4, "row_iters": 4, "w_regs": 1}, 128),
    ("fp32", {"threads": 512, "cluster": 8, "max_chunks": 8}, 96),
    ("fp32", {"threads": 64, "rows_per_cta": 8, "vec": 1, "max_chunks": 16}, 96),
]


@pytest.mark.parametrize("dtype,knobs,max_regs", SPREAD, ids=[
    f"{d}-" + "-".join(f"{k}{v}" for k, v in kn.items()) for d, kn, _ in SPREAD])
def test_knob_sets_assemble_without_spills(dtype, knobs, max_regs):
    from evaluators.toolchain import compile_ptx

    wl = RMSNorm(dtype)
    kern = wl.instantiate(knobs)
    k = dict(kern.launch.knobs)
    res = compile_ptx(kern).resources["rmsnorm"]
    assert 16 <= res.registers <= max_regs, f"{res.registers} registers"
    assert res.spill_stores_bytes == 0 and res.spill_loads_bytes == 0 and res.stack_frame_bytes == 0
    if k["min_blocks"]:
        assert res.registers <= 65536 // (k["min_blocks"] * k["threads"])
    ptx = kern.ptx
    assert re.search(rf"\.maxntid {k['threads']}, 1, 1", ptx)
    if k["cluster"] > 1:  # compile-time cluster shape and the DSMEM exchange
        assert re.search(rf"\.reqnctapercluster {k['cluster']}, 1, 1", ptx)
        assert f".reqnctapercluster {k['cluster']}, 1, 1" in kern.canonical_ptx  # what ptxas compiled
        assert "mapa" in ptx and "barrier.cluster.wait" in ptx and "%cluster_ctarank" in ptx
    else:
        assert "reqnctapercluster" not in ptx and "barrier.cluster" not in ptx
    if k["vec"] * wl.elt == 16:  # 16-byte x accesses and float4 w accesses
        assert re.search(r"ld\.global(\.nc)?(\.cs)?\.v4\.[ubf]32", ptx)
        assert re.search(r"st\.global(\.cs)?\.v4\.[ubf]32", ptx)
    if k["vec"] >= 4:
        assert "ld.global.nc.v4.f32" in ptx
    if k["cache_hint"]:
        assert "st.global.cs" in ptx


# ------------------------------------------------------------------------------------------ CPU emulation


def emulate(x: np.ndarray, w: np.ndarray, knobs: dict[str, int], wl: RMSNorm) -> tuple[np.ndarray, np.ndarray]:
    """Run the template's decomposition on the CPU: for every CTA of the launch grid, its cluster rank, row
    iterations, row groups and threads, the chunks each thread reads (register path or re-read path, as the
    kernel decides), the sum over the row's threads and cluster CTAs, and the elements each thread writes.

    x: (M, N) float64 values of the input; w: (N,) float64. Returns (y float64 (M, N), NaN where never written;
    writes int (M, N), how often each element was written).
    """
    m, n = x.shape
    k = wl.check_knobs(knobs)
    threads, rpc, vec, c = k["threads"], k["rows_per_cta"], k["vec"], k["cluster"]
    tpr, stride = threads // rpc, (threads // rpc) * c
    v = vec if n % vec == 0 else 1  # 16-byte aligned buffers: only N decides the narrow path here
    nchunks = n // v
    keep = bool(k["keep_in_regs"]) and v == vec and nchunks <= k["max_chunks"] * stride
    (grid, _, _), _, _ = wl.launch_dims((m, n), LaunchConfig(block=(threads, 1, 1), knobs=tuple(k.items())))
    assert grid % c == 0

    def chunks(u: int) -> list[int]:
        if keep:
            return [u + i * stride for i in range(k["max_chunks"]) if u + i * stride < nchunks]
        return list(range(u, nchunks, stride))

    y = np.full((m, n), np.nan)
    writes = np.zeros((m, n), dtype=np.int64)
    for cluster_id in range(grid // c):
        row0 = cluster_id * rpc * k["row_iters"]
        for it in range(k["row_iters"]):
            base = row0 + it * rpc
            if base >= m:
                break
            for g in range(rpc):
                row = base + g
                if row >= m:
                    continue
                # Partial sums: per CTA of the cluster (rank), over its TPR threads; then in rank order.
                part = [sum(float(np.sum(x[row, ch * v:(ch + 1) * v] ** 2))
                            for t in range(tpr) for ch in chunks(rank * tpr + t)) for rank in range(c)]
                r = 1.0 / math.sqrt(sum(part) / n + wl.eps)
                for rank in range(c):
                    for t in range(tpr):
                        for ch in chunks(rank * tpr + t):
                            sl = slice(ch * v, (ch + 1) * v)
                            y[row, sl] = x[row, sl] * r * w[sl]
                            writes[row, sl] += 1
    return y, writes


EMULATED = [TUNED_KNOBS[256], TUNED_KNOBS[1024], TUNED_KNOBS[4096], TUNED_KNOBS[65536], TUNED_KNOBS[262144],
            {"threads": 128, "rows_per_cta": 8, "keep_in_regs": 0, "row_iters": 3, "cluster": 2},
            {"threads": 64, "rows_per_cta": 4, "max_chunks": 1, "row_iters": 2, "cluster": 4}]


def check_emulated(knobs: dict, extra_shapes: list, seed0: int, equal_nan: bool = False) -> None:
    """``emulate`` the template at ``knobs`` (bf16) on the small gate shapes and ``extra_shapes``: every element
    written once, values within the workload's tolerance of the float64 reference (``equal_nan``: NaN matches
    NaN). Inputs seeded ``seed0 + i``, ``large`` and ``zero_rows`` alternating."""
    wl = RMSNorm("bf16")
    shapes = [s for s in GATE_SHAPES if s[0] * s[1] <= 200_000] + list(extra_shapes)
    for i, shape in enumerate(shapes):
        inputs = wl.make_inputs(shape, seed=seed0 + i, distribution="zero_rows" if i % 2 else "large")
        x = to_float64(inputs["x"], "bf16", np)
        y, writes = emulate(x, inputs["w"].astype(np.float64), knobs, wl)
        assert (writes == 1).all(), f"{shape}: elements written {writes.min()}..{writes.max()} times"
        ref = wl.reference(inputs)["y"]
        got = to_float64(from_float(y.astype(np.float32), "bf16", np), "bf16", np)
        atol, rtol = wl.tolerance
        assert np.allclose(got, ref, atol=atol, rtol=rtol, equal_nan=equal_nan), \
            f"{shape}: max error {np.abs(got - ref).max()}"


@pytest.mark.parametrize("knobs", EMULATED, ids=lambda kn: "-".join(f"{k}{v}" for k, v in kn.items()))
def test_emulated_decomposition_writes_every_element_once_and_matches_the_reference(knobs):
    check_emulated(knobs, [(9, 2048)], seed0=100)
