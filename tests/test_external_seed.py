"""``workload.seed_ptx``: a search started from the user's own kernel (workloads.external): .ptx and .cu files,
the ABI check naming the parameter, the launch rule from the config, no template knobs (the template operator
declines and says so), Hydra overrides, the spec a worker rebuilds it from, and a short static-evaluator search
from a Triton-derived seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from archive.grid import GridArchive, default_dimensions
from archive.lessons import Lessons
from archive.store import Store
from evaluators.static import StaticEvaluator
from evolve.algorithms.map_elites import MapElites
from evolve.budget import Budget
from evolve.config import register
from evolve.engine import Engine, EngineSettings
from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.registry import build_operators
from evolve.operators.template import TemplateOperator
from evolve.selection import OperatorSelector
from population.kernel import LaunchConfig
from workloads.external import ExternalSeedWorkload, LaunchRule, SeedConfigError, eval_int
from workloads.registry import build_workload, get_workload

REPO = Path(__file__).resolve().parents[1]
NAIVE = REPO / "workloads" / "seeds" / "rmsnorm_naive.ptx"
LAUNCH = {"grid": ["M", 1, 1], "block": [256, 1, 1], "dynamic_smem": 0}


def spec(**extra) -> dict:
    return {"_target_": "workloads.rmsnorm.RMSNorm", "dtype": "bf16", **extra}


def test_seed_ptx_starts_the_search_from_the_file() -> None:
    wl = build_workload(spec(seed_ptx=str(NAIVE), seed_launch=LAUNCH))
    assert isinstance(wl, ExternalSeedWorkload)
    (seed,) = wl.seeds()
    assert seed.entry == "rmsnorm" and seed.operator == "seed" and seed.launch == LaunchConfig(block=(256, 1, 1))
    assert seed.ptx == NAIVE.read_text()
    # launch rule: one CTA per row; the workload's data, reference and shapes are untouched
    assert wl.launch_dims((199, 1001), seed.launch) == ((199, 1, 1), (256, 1, 1), 0)
    inner = get_workload("rmsnorm")
    assert wl.gate_shapes == inner.gate_shapes and wl.abi == inner.abi and wl.bytes_moved((7, 9)) == inner.bytes_moved((7, 9))
    x = wl.make_inputs((3, 5), 1)
    np.testing.assert_array_equal(wl.reference(x)["y"], inner.reference(x)["y"])
    assert wl.elements_per_cta_sweep((8, 4096), seed.launch) == 4096
    # no template: the template operator declines and says why
    assert wl.knob_space == {}
    with pytest.raises(NoProposal, match="has no template knobs"):
        TemplateOperator().propose(seed, OperatorContext(workload=wl), np.random.default_rng(0))
    with pytest.raises(ValueError, match="has no template knobs"):
        wl.instantiate({"threads": 128})
    # what a GPU worker receives rebuilds the same workload
    again = build_workload(wl.spec())
    assert isinstance(again, ExternalSeedWorkload) and again.seeds()[0].identity == seed.identity


def test_cu_seed_is_compiled_with_nvcc() -> None:
    wl = build_workload(spec(seed_ptx=str(REPO / "workloads" / "seeds" / "rmsnorm_naive.cu"), seed_launch=LAUNCH))
    (seed,) = wl.seeds()
    assert seed.entry == "rmsnorm" and [p.type for p in seed.module.function("rmsnorm").params] == \
        ["u64", "u64", "u64", "u32", "u32", "f32"]


def test_abi_mismatch_names_the_parameter(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ptx"
    bad.write_text(NAIVE.read_text().replace(".param .f32 rmsnorm_param_5", ".param .u32 rmsnorm_param_5"))
    with pytest.raises(SeedConfigError) as e:
        build_workload(spec(seed_ptx=str(bad), seed_launch=LAUNCH))
    msg = str(e.value)
    assert msg.startswith(f"workload.seed_ptx={bad}: entry 'rmsnorm' param 5 (eps): expected .f32, got .u32")
    assert "the rmsnorm ABI is (x .u64, w .u64, y .u64, M .u32, N .u32, eps .f32)" in msg
    short = tmp_path / "short.ptx"
    short.write_text(NAIVE.read_text().replace(",\n\t.param .f32 rmsnorm_param_5", ""))
    with pytest.raises(SeedConfigError, match="has 5 params, the workload ABI has 6"):
        build_workload(spec(seed_ptx=str(short), seed_launch=LAUNCH))


@pytest.mark.parametrize("launch, message", [
    (None, r"workload.seed_launch.grid is required"),
    ({"grid": ["M +", 1, 1]}, r"workload.seed_launch.grid\[0\]: 'M \+' is not an expression"),
    ({"grid": ["M"], "block": [2048]}, r"workload.seed_launch.block: \(2048, 1, 1\) has more than 1024 threads"),
    ({"grid": ["M"], "smem": 4}, r"workload.seed_launch: unknown key\(s\) \['smem'\]"),
    ({"grid": ["M"], "dynamic_smem": -1}, r"workload.seed_launch.dynamic_smem: bytes >= 0"),
    ({"grid": "M,1,1"}, r"workload.seed_launch.grid\[0\]: 'M,1,1': only integers"),
    ({"grid": ["M ** 2"]}, r"workload.seed_launch.grid\[0\]: 'M \*\* 2': operator Pow is not allowed"),
])
def test_launch_rule_errors_name_the_key(launch, message: str) -> None:
    with pytest.raises(SeedConfigError, match=message):
        build_workload(spec(seed_ptx=str(NAIVE), seed_launch=launch))


def test_missing_file_and_entry(tmp_path: Path) -> None:
    with pytest.raises(SeedConfigError, match=r"workload.seed_ptx=/nonexistent.ptx: no such file"):
        build_workload(spec(seed_ptx="/nonexistent.ptx", seed_launch=LAUNCH))
    # without a launch rule the path is still what is named first (it was "seed_launch.grid is required")
    with pytest.raises(SeedConfigError, match=r"^workload.seed_ptx=/nonexistent.ptx: no such file$"):
        build_workload(spec(seed_ptx="/nonexistent.ptx"))
    notes = tmp_path / "seed.txt"
    notes.write_text(NAIVE.read_text())
    with pytest.raises(SeedConfigError, match=r"^workload.seed_ptx=.*seed.txt: expected a .ptx or .cu file$"):
        build_workload(spec(seed_ptx=str(notes)))
    with pytest.raises(SeedConfigError, match=r"workload.seed_entry=other: .* has entries \['rmsnorm'\]"):
        build_workload(spec(seed_ptx=str(NAIVE), seed_launch=LAUNCH, seed_entry="other"))


def test_grid_expressions() -> None:
    names = {"M": 1000, "N": 4096}
    assert eval_int("cdiv(M, 4)", names) == 250 and eval_int("max(1, M // 3) + 1", names) == 334
    assert eval_int(7, names) == 7
    for bad, why in (("M ** 2", "not allowed"), ("__import__('os')", "only integers"), ("K", "unknown name 'K'")):
        with pytest.raises(ValueError, match=why):
            eval_int(bad, names)
    rule = LaunchRule.from_config({"grid": ["cdiv(M, block_y)", "N // 1024"], "block": [32, 8]})
    assert rule.grid_for(names, (32, 8, 1)) == (125, 4, 1)
    with pytest.raises(ValueError, match=r"seed_launch.grid\[1\] = 'N // 1024' gives 0 CTAs"):
        rule.grid_for({"M": 4, "N": 100}, (32, 8, 1))


def test_hydra_override_builds_the_external_seed() -> None:
    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"workload.seed_ptx={NAIVE}",
                                           "workload.seed_launch={grid: [M, 1, 1], block: [128, 1, 1]}",
                                           "run_dir=/tmp/unused"])
    wl = build_workload(cfg.workload)
    assert isinstance(wl, ExternalSeedWorkload) and wl.seeds()[0].launch.block == (128, 1, 1)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        plain = compose("config", overrides=["run_dir=/tmp/unused"])
    assert not isinstance(build_workload(plain.workload), ExternalSeedWorkload)


def test_static_search_from_a_triton_seed(tmp_path: Path) -> None:
    from workloads.triton_kernels import rmsnorm_fwd
    from workloads.triton_seed import triton_seed

    seed = triton_seed(rmsnorm_fwd, get_workload("rmsnorm"), grid=["M", 1, 1], constexprs={"BLOCK": 1024},
                       num_warps=4, param_map={"x_ptr": "x", "w_ptr": "w", "y_ptr": "y", "M": "M", "N": "N",
                                               "eps": "eps", "stride": "N"})
    path = tmp_path / "rmsnorm_triton.ptx"
    path.write_text(seed.ptx)
    wl = build_workload(spec(seed_ptx=str(path), seed_launch=seed.launch.to_config()))
    store = Store(tmp_path / "s.sqlite")
    archive = GridArchive(default_dimensions())
    operators = build_operators([{"name": n} for n in ("template", "hints", "launch", "unroll")], wl)
    engine = Engine(workload=wl, evaluator=StaticEvaluator(wl, gpu="h200"), algorithm=MapElites(archive),
                    archive=archive, operators=operators, selector=OperatorSelector([o.name for o in operators]),
                    store=store, budget=Budget(max_evaluations=6), seed=0, settings=EngineSettings(capacity=1),
                    lessons=Lessons(store))
    engine.run()
    rows = store.candidates(with_ptx=False)
    assert rows[0].operator == "seed" and rows[0].status == "ok"
    assert rows[0].identity == wl.seeds()[0].identity
    # the template operator leaves the seed alone and says why; the PTX operators edit it
    template = [r for r in rows if r.operator == "template"]
    assert template and all(r.status == "no_proposal" and "has no template knobs" in r.reason for r in template)
    assert {r.operator for r in rows if r.status == "ok"} > {"seed"}
    assert len(archive) >= 1
