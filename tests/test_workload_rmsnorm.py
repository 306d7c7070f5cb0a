"""RMSNorm workload: reference, inputs, shapes, bytes model, launch rule, knobs, seed PTX."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from population.kernel import LaunchConfig
from workloads.base import AbiMismatch, check_abi
from workloads.dtypes import from_float, to_float64
from workloads.registry import available_workloads, get_workload
from workloads.rmsnorm import BENCHMARK_SHAPES, RMSNorm


def test_registry_builds_and_rejects():
    assert "rmsnorm" in available_workloads()
    wl = get_workload("rmsnorm", dtype="fp16")
    assert wl.dtype == "fp16" and wl.entry == "rmsnorm"
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        get_workload("nope")
    with pytest.raises(ValueError, match="dtype must be one of"):
        get_workload("rmsnorm", dtype="int8")
    with pytest.raises(ValueError, match=r"rejected options.*colour"):
        get_workload("rmsnorm", colour="red")


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_reference_matches_torch_float64(dtype):
    torch = pytest.importorskip("torch")
    wl = RMSNorm(dtype)
    inputs = wl.make_inputs((37, 1001), seed=3, distribution="normal")
    ref = wl.reference(inputs)["y"]
    x = torch.from_numpy(np.asarray(inputs["x"], dtype=np.float64))
    w = torch.from_numpy(inputs["w"].astype(np.float64))
    want = torch.nn.functional.rms_norm(x, (1001,), weight=w, eps=1e-6).numpy()
    np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-12)


def test_reference_independent_formula_and_zero_rows():
    wl = RMSNorm("bf16")
    inputs = wl.make_inputs((64, 760), seed=11, distribution="zero_rows")
    x = np.asarray(inputs["x"], dtype=np.float64)
    assert inputs["x"].dtype == ml_dtypes.bfloat16 and inputs["w"].dtype == np.float32
    assert not x[0].any(), "zero_rows must zero row 0"
    rms = np.sqrt(np.einsum("ij,ij->i", x, x) / 760 + 1e-6)
    want = x / rms[:, None] * inputs["w"].astype(np.float64)
    got = wl.reference(inputs)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert np.all(got[0] == 0)


def test_inputs_are_fresh_per_seed_and_distributions_differ():
    wl = RMSNorm("bf16")
    a = wl.make_inputs((8, 192), 1)["x"].astype(np.float32)
    b = wl.make_inputs((8, 192), 2)["x"].astype(np.float32)
    again = wl.make_inputs((8, 192), 1)["x"].astype(np.float32)
    assert not np.array_equal(a, b) and np.array_equal(a, again)
    large = wl.make_inputs((8, 192), 1, "large")["x"].astype(np.float32)
    assert np.abs(large).max() > 1e5 > np.abs(a).max()
    with pytest.raises(ValueError, match="unknown distribution 'uniform'"):
        wl.make_inputs((8, 192), 1, "uniform")


def test_bf16_rounding_matches_ml_dtypes():
    vals = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 65504.0, 1e-30, 0.0], dtype=np.float32)
    bits = from_float(vals, "bf16", np)  # ml_dtypes path
    # the bit-level path the CuPy side uses, run on numpy arrays through a stand-in module object
    u = vals.view(np.uint32)
    manual = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    assert np.array_equal(bits.view(np.uint16), manual)
    np.testing.assert_array_equal(to_float64(manual, "bf16", np), bits.astype(np.float64))


def test_bytes_flops_shapes_and_tolerances():
    wl = RMSNorm("bf16")
    assert wl.bytes_moved((32768, 4096)) == 2 * 32768 * 4096 * 2 + 4 * 4096
    assert RMSNorm("fp32").bytes_moved((7, 760)) == 2 * 7 * 760 * 4 + 4 * 760
    assert wl.flops((3, 5)) == 60
    assert len(wl.benchmark_shapes) == 11 and wl.benchmark_shapes == BENCHMARK_SHAPES
    assert (16384, 131072) in wl.benchmark_shapes and (8192, 262144) in wl.benchmark_shapes
    assert 3 <= len(wl.search_shapes) <= 4 and set(wl.search_shapes) <= set(wl.benchmark_shapes)
    gate_m = {m for m, _ in wl.gate_shapes}
    assert {1, 7, 199, 32768} <= gate_m
    assert any(n % 8 for _, n in wl.gate_shapes), "a gate N must force the narrow (misaligned) path"
    assert len(wl.heldout_shapes) == 15 and (4096, 28672) in wl.heldout_shapes
    assert wl.tolerance == (3e-2, 1e-3) and RMSNorm("fp16").tolerance == (1e-2, 1e-3)
    assert RMSNorm("fp32").tolerance == (1e-4, 1e-3)
    assert wl.gbps((32768, 4096), 100.0) == pytest.approx(wl.bytes_moved((32768, 4096)) / 100e-6 / 1e9)


def test_launch_rule():
    wl = RMSNorm("bf16")
    grid, block, smem = wl.launch_dims((199, 1128), LaunchConfig(block=(128, 1, 1), knobs=(("rows_per_cta", 4),)))
    assert grid == (50, 1, 1) and block == (128, 1, 1) and smem == 0
    assert wl.launch_dims((7, 192), LaunchConfig())[0] == (7, 1, 1)  # no knob: one row per CTA
    assert wl.elements_per_cta_sweep((7, 192), LaunchConfig(knobs=(("rows_per_cta", 2),))) == 384
    with pytest.raises(ValueError, match=r"shape must be \(M, N\)"):
        wl.launch_dims((0, 5), LaunchConfig())


def test_knob_validation():
    wl = RMSNorm("bf16")
    assert wl.check_knobs({"threads": 128, "rows_per_cta": 4})["vec"] == 8
    for bad, msg in [({"threads": 100}, "threads=100"), ({"threads": 96, "rows_per_cta": 2}, "rows_per_cta=2"),
                     ({"vec": 3}, "vec=3"), ({"cache_hint": 7}, "cache_hint=7"), ({"speed": 1}, "unknown")]:
        with pytest.raises(ValueError, match=msg):
            wl.check_knobs(bad)
    with pytest.raises(ValueError, match="vec=8"):
        RMSNorm("fp32").check_knobs({"vec": 8})
    assert RMSNorm("fp32").default_knobs["vec"] == 4


def test_abi_check():
    abi = RMSNorm.abi
    check_abi(abi, ["u64", "u64", "u64", "u32", "u32", "f32"])
    check_abi(abi, ["b64", "u64", "u64", "s32", "s32", "f32"])  # signedness does not change packing
    with pytest.raises(AbiMismatch, match="5 params"):
        check_abi(abi, ["u64", "u64", "u64", "u32", "u32"])
    with pytest.raises(AbiMismatch, match=r"param 5 \(eps\): expected .f32, got .u32"):
        check_abi(abi, ["u64", "u64", "u64", "u32", "u32", "u32"])
    with pytest.raises(AbiMismatch, match="pointer"):
        check_abi(abi, ["u32", "u64", "u64", "u32", "u32", "f32"])


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_seeds_compile_with_ptxas_and_match_the_abi(dtype):
    from evaluators.gpu.args import param_types
    from evaluators.toolchain import compile_ptx

    wl = RMSNorm(dtype)
    naive, template = wl.seeds()
    assert naive.entry == template.entry == "rmsnorm"
    assert naive.launch.block == (256, 1, 1) and naive.launch.knob("rows_per_cta") == 1
    assert wl.check_knobs(dict(template.launch.knobs)) == wl.default_knobs
    # the knobs added after the recorded runs are left out at their defaults (the recorded identities hold)
    assert set(dict(template.launch.knobs)) == set(wl.default_knobs) - set(wl.late_knobs)
    for k in (naive, template):
        check_abi(wl.abi, param_types(k), k.entry)
        res = compile_ptx(k).resources["rmsnorm"]
        assert 0 < res.registers <= 255 and res.spill_stores_bytes == 0 and res.barriers >= 1


def test_instantiate_other_knobs_and_committed_ptx_is_reproducible(tmp_path, monkeypatch):
    from evaluators.toolchain import compile_ptx
    from workloads.cuda_build import SEEDS_DIR, build_ptx

    monkeypatch.setenv("PTXFORGE_CACHE", str(tmp_path))
    wl = RMSNorm("bf16")
    k = wl.instantiate({"threads": 128, "rows_per_cta": 4, "cache_hint": 2})
    assert k.launch.block == (128, 1, 1) and k.launch.knob("rows_per_cta") == 4
    assert "ld.global.cs" in k.ptx and "st.global.cs" in k.ptx  # the cache-hint knob reached the PTX
    assert compile_ptx(k).resources["rmsnorm"].registers > 0
    assert list((tmp_path / "seeds").glob("rmsnorm_template-*.ptx")), "instantiate caches by content hash"
    fresh = build_ptx("rmsnorm_naive.cu", {"DTYPE": 0}, use_cache=False)
    assert fresh == (SEEDS_DIR / "rmsnorm_naive.ptx").read_text()
    with pytest.raises(ValueError, match="threads=48"):
        wl.instantiate({"threads": 48})


def test_baselines_get_the_fp32_weight_unless_told_x():
    """The libraries read the very fp32 w the kernel reads (``baseline_weight="workload"``, the default: like for
    like, as QuACK's own benchmark); ``"x"`` hands them w cast to x's dtype (the definition of runs recorded before
    2026-12-08). Eager torch with the fp32 weight returns x's dtype and matches the float64 reference."""
    import torch

    from workloads.rmsnorm_baselines import _torch_views, rmsnorm_baselines

    wl = RMSNorm("bf16")
    assert wl.baseline_weight == "workload" and wl.options()["baseline_weight"] == "workload"
    drawn = wl.make_inputs((5, 384), seed=3)
    inputs = {**drawn, "x": drawn["x"].view(np.uint16)}  # bf16 as its uint16 bits, as CuPy holds it
    x, w = _torch_views(inputs, "bf16")
    assert x.dtype == torch.bfloat16 and w.dtype == torch.float32
    assert w.data_ptr() == inputs["w"].ctypes.data  # the kernel's own buffer, no copy
    assert _torch_views(inputs, "bf16", "x")[1].dtype == torch.bfloat16
    notes: dict[str, str] = {}
    fns = rmsnorm_baselines(inputs, (5, 384), "bf16", wl.eps, ("torch",), notes)
    y = fns["torch"]()
    assert y.dtype == torch.bfloat16 and not notes
    ref = wl.reference(drawn)["y"]
    got = y.float().numpy().astype(np.float64)
    assert np.allclose(got, ref, rtol=1e-2, atol=1e-2)
    # the "x" definition rounds w to bf16 first: a different (less exact) result on the same inputs
    y_x = rmsnorm_baselines(inputs, (5, 384), "bf16", wl.eps, ("torch",), {}, weight="x")["torch"]()
    assert not torch.equal(y, y_x)
    assert RMSNorm("bf16", baseline_weight="x").spec()["baseline_weight"] == "x"
    with pytest.raises(ValueError, match="baseline_weight='fp16': must be one of workload, x"):
        RMSNorm("bf16", baseline_weight="fp16")
