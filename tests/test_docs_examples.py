"""The docs' examples are the code: the files shown on docs/add-a-workload.md are the repository's files, the
softmax example passes the gate against a NumPy implementation on the CPU and runs under ``python -m evolve``
with the static evaluator; an out-of-tree workload is found through Hydra's search path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evaluators.gpu.gate import run_gate
from evaluators.types import Status
from workloads.registry import get_workload

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def shown_files(page: Path) -> dict[str, str]:
    """path -> content of every fenced block preceded by ``<!-- file: path -->`` on ``page``."""
    text = page.read_text()
    return {m.group(1): m.group(2) for m in re.finditer(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```\n", text, re.S)}


@pytest.mark.parametrize("page", ["add-a-workload.md", "add-an-algorithm.md", "add-an-operator.md"])
def test_pages_show_the_files_exactly(page):
    files = shown_files(DOCS / page)
    assert files, f"{page} shows no file"
    for path, body in files.items():
        assert (REPO / path).read_text() == body, f"{page}: the block for {path} differs from the file"


def shown_excerpts(page: Path) -> list[tuple[str, str]]:
    """(path, text) of every fenced block preceded by ``<!-- excerpt: path -->`` on ``page``."""
    text = page.read_text()
    return re.findall(r"<!-- excerpt: (\S+) -->\n```\w*\n(.*?)```\n", text, re.S)


def test_excerpts_are_in_their_files():
    excerpts = shown_excerpts(DOCS / "add-a-workload.md")
    assert [p for p, _ in excerpts] == ["workloads/kda/chunk.py"]
    for path, body in excerpts:
        assert body in (REPO / path).read_text(), f"the excerpt of {path} is not in the file"


def softmax_f32(x):
    """What a correct fp32 kernel computes (float32 arithmetic throughout)."""
    x = np.asarray(x, dtype=np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True, dtype=np.float32)


def test_softmax_gate_on_the_cpu():
    wl = get_workload("softmax", rows=64)
    assert wl.spec() == {"_target_": "workloads.softmax.Softmax", "rows": 64}

    def right(inputs, outputs, shape, params=None):
        outputs["y"][...] = softmax_f32(inputs["x"])

    def no_max(inputs, outputs, shape, params=None):  # overflows on the "shifted" rows
        x = np.asarray(inputs["x"], dtype=np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(x)
            outputs["y"][...] = e / e.sum(axis=-1, keepdims=True)

    assert run_gate(wl, right, seed=3).status == Status.OK
    bad = run_gate(wl, no_max, seed=3)
    assert bad.status == Status.WRONG_RESULT and "shifted" in bad.reason


def test_softmax_runs_under_evolve_static_and_out_of_tree_config(tmp_path):
    (tmp_path / "conf" / "workload").mkdir(parents=True)
    (tmp_path / "conf" / "workload" / "my_op.yaml").write_text("_target_: my_soft.MySoftmax\nrows: 64\n")
    (tmp_path / "my_soft.py").write_text("from workloads.softmax import Softmax\n\n\n"
                                         "class MySoftmax(Softmax):\n    name = 'my_softmax'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "WANDB_MODE": "disabled"}
    common = ["evaluator=static", "logger=none", "knowledge=none", "engine.progress=false", "engine.export=false"]
    out = subprocess.run([sys.executable, "-m", "evolve", "workload=softmax", "workload.rows=256",
                          "budget.evaluations=8", "mutator=rules", f"hydra.run.dir={tmp_path / 'run'}", *common],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["evaluations"] == 8 and summary["estimate"] is True and summary["best_objective"] >= 1.0
    from hydra import compose, initialize_config_dir

    from evolve.app import build_workload_from
    from evolve.config import register

    register()
    sys.path.insert(0, str(tmp_path))
    try:
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "workload=my_op",
                                               "run_dir=/tmp/unused"])
        wl = build_workload_from(cfg)
    finally:
        sys.path.remove(str(tmp_path))
    assert (wl.name, wl.spec()) == ("my_softmax", {"_target_": "my_soft.MySoftmax", "rows": 64})


def test_algorithm_and_operator_examples_run_in_the_engine(tmp_path, monkeypatch):
    """docs/examples: the epsilon-greedy algorithm and the streaming-stores operator, given by _target_ only,
    drive a short static run; the operator's children compile and enter the store."""
    from hydra import compose, initialize_config_dir

    from archive.store import Store
    from evolve.app import run
    from evolve.config import register

    monkeypatch.syspath_prepend(str(DOCS / "examples"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    register()
    # the pages' commands: the example YAMLs found through hydra.searchpath (docs/examples/conf)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[
            f"hydra.searchpath=[file://{DOCS / 'examples' / 'conf'}]", "algorithm=epsilon_greedy",
            "algorithm.options.epsilon=0.5", "mutator=rules_plus", "evaluator=static", "logger=none",
            "knowledge=none", "budget.evaluations=12", "engine.progress=false", "engine.export=false",
            f"run_dir={tmp_path}"])
    assert [o["name"] for o in cfg.mutator.operators] == ["hints", "template", "streaming_stores", "crossover"]
    summary = run(cfg)
    assert summary["evaluations"] == 12 and summary["algorithm"] == "epsilon_greedy"
    with Store(tmp_path / "store.sqlite", readonly=True) as s:
        rows = [r for r in s.candidates() if r.operator == "streaming_stores"]
    assert rows and all("+cs" in r.edit_text and "st.global.cs." in r.ptx and r.status == "ok" for r in rows), [(r.status, r.reason) for r in rows]
