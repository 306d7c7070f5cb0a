"""A short ``python -m evolve`` run of a registered workload on the static (CPU-only) evaluator, in process:
what the workload tests use to check that a workload drives the engine end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_static(workload: str, run_dir: Path, monkeypatch: pytest.MonkeyPatch, evaluations: int = 6) -> dict[str, Any]:
    """The summary (``evolve.app.run``'s dict) of a run of ``conf/workload/<workload>.yaml`` with the static
    evaluator, no logger, no knowledge base, ``evaluations`` candidates, no progress bar or export, writing
    under ``run_dir``; W&B disabled through ``monkeypatch``."""
    from hydra import compose, initialize_config_dir

    from evolve.app import run
    from evolve.config import register

    monkeypatch.setenv("WANDB_MODE", "disabled")
    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"workload={workload}", "evaluator=static", "logger=none",
                                           "knowledge=none", f"budget.evaluations={evaluations}",
                                           "engine.progress=false", "engine.export=false", f"run_dir={run_dir}"])
    return run(cfg)
