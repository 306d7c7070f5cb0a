"""No false rejections: every honest kernel the factory starts from passes the static input-store check
(evaluators/input_stores.py) and the global race lint (evaluators/race_lint.py).

Covers the RMSNorm seeds and template (every TUNED_KNOBS set, cluster variants with mapa/DSMEM included, and a
fixed sample of the knob space), the softmax and KDA seeds, the honest gate case, the PTX corpus in tests/data
(each entry's pointer parameters as outputs, the RMSNorm corpus with its ABI) and Triton-generated kernels.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from evaluators.input_stores import check_input_stores, input_stores
from evaluators.race_lint import race_lint
from population.defuse import POINTER_TYPES
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from workloads.registry import get_workload
from workloads.rmsnorm import RMSNorm

DATA = Path(__file__).parent / "data"
GATE_CASES = Path(__file__).parent / "gpu" / "kernels" / "gate_cases"


def assert_clean(kernel: Kernel, kinds: list[str], names: list[str] | None = None,
                 float_atomics_ok: bool = True) -> None:
    """Both checks pass; ``float_atomics_ok`` False: as the pipeline runs the lint for a workload without atomics
    (rules 4 and 6 on)."""
    rep = input_stores(kernel, kinds, names)
    assert rep.ok, rep.reason()
    races = race_lint(kernel, rep.provenance, float_atomics_ok, waits_ok=float_atomics_ok)
    assert races.ok, races.reason()


def knob_sample(wl: RMSNorm, n: int, seed: int) -> list[dict[str, int]]:
    """n valid knob sets drawn from wl.knob_space, one of each cluster size first."""
    rng = random.Random(seed)
    out: list[dict[str, int]] = []
    clusters = [2, 8]
    while len(out) < n:
        k = {name: rng.choice(vals) for name, vals in wl.knob_space.items()}
        if clusters:
            k["cluster"] = clusters[0]
        try:
            k = wl.check_knobs(k)
        except ValueError:
            continue
        if clusters:
            clusters.pop(0)
        out.append(k)
    return out


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_rmsnorm_seeds_tuned_sets_and_a_knob_sample_pass(dtype):
    wl = RMSNorm(dtype)
    kinds = [p.kind for p in wl.abi]
    kernels = [*wl.seeds(), *(wl.instantiate(k) for k in wl.recommended_knobs())]
    if dtype == "bf16":
        kernels += [wl.instantiate(k) for k in knob_sample(wl, 3, seed=11)]
    assert any(k.launch.knob("cluster", 1) > 1 for k in kernels)
    assert any("mapa" in k.ptx for k in kernels)  # the DSMEM variants are among them
    for k in kernels:
        assert_clean(k, kinds, [p.name for p in wl.abi], wl.uses_atomics)


@pytest.mark.parametrize("name", ["softmax", "kda_recurrent"])
def test_softmax_and_kda_seeds_pass(name):
    wl = get_workload(name)
    for k in wl.seeds():
        rep = check_input_stores(k, wl)
        assert rep.ok, rep.reason()
        assert race_lint(k, rep.provenance, wl.uses_atomics).ok, race_lint(k).reason()


def test_the_honest_gate_case_passes():
    from workloads.cuda_build import build_ptx

    wl = RMSNorm("bf16")
    k = Kernel(parse_module(build_ptx(GATE_CASES / "rt_honest.cu", {})), "rmsnorm", LaunchConfig(block=(256, 1, 1)))
    assert_clean(k, [p.kind for p in wl.abi], float_atomics_ok=wl.uses_atomics)


@pytest.mark.parametrize("path", sorted(DATA.glob("*.ptx")), ids=lambda p: p.name)
def test_the_ptx_corpus_passes(path):
    m = parse_module(path.read_text())
    assert m.entries
    for fn in m.entries:
        if path.name == "rmsnorm_bf16.ptx":
            kinds = ["input", "input", "output", "scalar", "scalar"]
        else:  # ABI unknown: every pointer may be written, but every store must be attributable to one
            kinds = ["output" if p.type in POINTER_TYPES else "scalar" for p in fn.params]
        assert_clean(Kernel(m, fn.name, LaunchConfig(block=(128, 1, 1))), kinds)


def test_triton_kernels_pass():
    from workloads.triton_kernels import matmul_fwd, rmsnorm_fwd, softmax_fwd
    from workloads.triton_seed import compile_triton, triton_seed

    wl = get_workload("rmsnorm")
    seed = triton_seed(rmsnorm_fwd, wl, grid=["M", 1, 1], constexprs={"BLOCK": 1024}, num_warps=4,
                       param_map={"x_ptr": "x", "w_ptr": "w", "y_ptr": "y", "M": "M", "N": "N", "eps": "eps",
                                  "stride": "N"})
    k = Kernel(parse_module(seed.ptx), "rmsnorm", seed.launch)
    assert check_input_stores(k, wl).ok and race_lint(k, None, wl.uses_atomics).ok
    for fn, sig, consts, warps, outputs in [
        (softmax_fwd, {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": "i32", "out_stride": "i32",
                       "n_cols": "i32"}, {"BLOCK": 1024}, 4, {"out_ptr"}),
        (matmul_fwd, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                      "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32"},
         {"BM": 128, "BN": 128, "BK": 64}, 8, {"c_ptr"}),
    ]:
        t = compile_triton(fn, sig, consts, num_warps=warps)
        kinds = ["output" if a in outputs else "input" if a.endswith("_ptr") else "scalar" for a in t.arg_names]
        kernel = Kernel(parse_module(t.ptx), t.name, LaunchConfig(block=(32 * warps, 1, 1)))
        assert len(kinds) == len(kernel.module.function(t.name).params)
        assert_clean(kernel, kinds, t.arg_names)
        # the same kernel with its output declared an input is rejected: the check sees its stores
        assert not input_stores(kernel, [k if k != "output" else "input" for k in kinds]).ok
