"""On a GPU: RMSNorm seeds derived from Triton pass the gate, are timed, and a search started from one
(``workload.seed_ptx``) keeps it in the archive. The Triton kernels are compiled with the installed Triton at
the project ptxas's PTX version and adapted to the RMSNorm ABI (workloads.triton_seed); the Inductor one is
the kernel ``torch.compile`` generates for the reference (needs CUDA torch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.types import Status
from workloads.registry import build_workload, get_workload

pytestmark = pytest.mark.gpu

SMALL_BENCH = [(4096, 1024), (2048, 8192)]
SPEC = {"_target_": "workloads.rmsnorm.RMSNorm", "dtype": "bf16"}


def triton_rmsnorm_file(tmp: Path) -> tuple[Path, dict]:
    from workloads.triton_kernels import rmsnorm_fwd
    from workloads.triton_seed import triton_seed

    seed = triton_seed(rmsnorm_fwd, get_workload("rmsnorm"), grid=["M", 1, 1], constexprs={"BLOCK": 1024},
                       num_warps=4, param_map={"x_ptr": "x", "w_ptr": "w", "y_ptr": "y", "M": "M", "N": "N",
                                               "eps": "eps", "stride": "N"})
    path = tmp / "rmsnorm_triton.ptx"
    path.write_text(seed.ptx)
    return path, seed.launch.to_config()


def test_triton_rmsnorm_seed_passes_the_gate_and_enters_the_archive(tmp_path: Path) -> None:
    from archive.grid import GridArchive, default_dimensions
    from archive.lessons import Lessons
    from archive.store import Store
    from evaluators.gpu.pool import GPUPool
    from evolve.algorithms.map_elites import MapElites
    from evolve.budget import Budget
    from evolve.engine import Engine, EngineSettings
    from evolve.operators.registry import build_operators
    from evolve.selection import OperatorSelector

    path, launch = triton_rmsnorm_file(tmp_path)
    wl = build_workload({**SPEC, "seed_ptx": str(path), "seed_launch": launch})
    with GPUPool(wl, devices=[0], shapes=SMALL_BENCH, timeout_s=60, baseline_names=("torch",), repeats=10,
                 seed=7) as pool:
        (seed,) = wl.seeds()
        r = pool.evaluate(seed)
        assert r.status == Status.OK, r.reason
        assert r.extra["gate_checks"] >= len(wl.gate_shapes) and r.objective is not None and r.objective > 0
        assert all(s.time_us > 0 and "torch" in s.speedups for s in r.shapes)
        store = Store(tmp_path / "s.sqlite")
        archive = GridArchive(default_dimensions())
        operators = build_operators([{"name": n} for n in ("template", "hints", "launch")], wl)
        engine = Engine(workload=wl, evaluator=pool, algorithm=MapElites(archive), archive=archive,
                        operators=operators, selector=OperatorSelector([o.name for o in operators]), store=store,
                        budget=Budget(max_evaluations=4), seed=0, settings=EngineSettings(capacity=1),
                        lessons=Lessons(store))
        engine.run()
    rows = store.candidates(with_ptx=False)
    assert rows[0].operator == "seed" and rows[0].status == "ok" and rows[0].identity == seed.identity
    assert len(archive) >= 1
    print(f"triton seed: objective {r.objective:.3f}, {[(s.shape, round(s.gbps)) for s in r.shapes]}")


def test_inductor_rmsnorm_seed_passes_the_gate(tmp_path: Path) -> None:
    from evaluators.gpu.pool import GPUPool
    from workloads.triton_seed import inductor_rmsnorm_seed

    seed = inductor_rmsnorm_seed(get_workload("rmsnorm"))
    path = tmp_path / "rmsnorm_inductor.ptx"
    path.write_text(seed.ptx)
    wl = build_workload({**SPEC, "seed_ptx": str(path), "seed_launch": seed.launch.to_config()})
    with GPUPool(wl, devices=[0], shapes=SMALL_BENCH, timeout_s=60, baseline_names=("torch_compile",), repeats=10,
                 seed=7) as pool:
        r = pool.evaluate(wl.seeds()[0])
    assert r.status == Status.OK, r.reason
    print(f"inductor seed ({seed.compiled.name}, {seed.launch}): objective {r.objective:.3f}, "
          f"{[(s.shape, round(s.gbps), s.speedups) for s in r.shapes]}")
