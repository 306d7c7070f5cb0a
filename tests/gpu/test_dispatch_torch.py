"""On a GPU: the dispatch a multi-task run exports (archive.dispatch) runs from PyTorch through the launcher's
torch.library custom op and matches torch.nn.functional.rms_norm at shapes of every bucket and between them."""

from __future__ import annotations

import pytest

from archive.grid import GridArchive, default_dimensions
from archive.store import Store
from evolve.tasks import build_tasks

pytestmark = pytest.mark.gpu

TASK_SHAPES = [(64, 512), (64, 4096), (16, 65536)]


@pytest.fixture(scope="module")
def dispatch_dir(tmp_path_factory):
    """A real multi-task run (static evaluator: no GPU pool needed for the search itself) over three buckets,
    then its dispatch export."""
    from archive.dispatch import export_dispatch
    from evaluators.static import StaticEvaluator
    from evolve.algorithms.map_elites import MapElites
    from evolve.budget import Budget
    from evolve.engine import Engine, EngineSettings
    from evolve.operators.registry import build_operators
    from evolve.selection import OperatorSelector
    from workloads.rmsnorm import RMSNorm

    wl = RMSNorm("bf16")
    tasks = build_tasks(TASK_SHAPES)
    archive = GridArchive([tasks.dimension(), *default_dimensions()])
    ops = build_operators([{"name": n} for n in ("hints", "launch", "vectorize")], wl)
    out = tmp_path_factory.mktemp("run")
    with Store(out / "store.sqlite") as store:
        Engine(workload=wl, evaluator=StaticEvaluator(wl), algorithm=MapElites(archive), archive=archive,
               operators=ops, selector=OperatorSelector([o.name for o in ops]), store=store,
               budget=Budget(max_evaluations=12), seed=0, settings=EngineSettings(), tasks=tasks).run()
        export_dispatch(store, archive, tasks, wl, out / "dispatch")
    return out / "dispatch"


@pytest.mark.parametrize("shape", [(64, 512), (33, 3000), (64, 4096), (7, 20000), (16, 65536), (3, 1001)])
def test_dispatch_matches_torch_rms_norm(dispatch_dir, shape):
    launcher = pytest.importorskip("archive.launcher")
    import torch
    import torch.nn.functional as F

    kern = launcher.load(dispatch_dir)
    op = kern.torch_op(f"rmsnorm_dispatch_test_{shape[0]}_{shape[1]}")
    m, n = shape
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = (1 + 0.5 * torch.randn(n, device="cuda", dtype=torch.float32))
    y = op(x, w)
    ref = F.rms_norm(x.double(), (n,), w.double(), 1e-6)
    err = (y.double() - ref).abs()
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    assert torch.all(err <= 3e-2 + 1e-2 * ref.abs()), f"max error {err.max().item()} at shape {shape}"
    assert kern.bucket_for(shape).info["task"] == build_tasks(TASK_SHAPES).task_of(n).index
