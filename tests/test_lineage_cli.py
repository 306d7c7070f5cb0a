"""Lineage tools: the template operator keeps the parent's PTX edits (the .minnctapersm 6 that vanished), the
lineage says which edits a template step dropped, and ``python -m archive lineage`` prints seed -> kernel with
operator, edit script, objective and PTX diff."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from archive.lineage import lineage_report, template_step
from archive.store import CandidateRow, Store
from evaluators.types import EvalResult, Status
from evolve.operators.base import OperatorContext
from evolve.operators.template import TemplateOperator, directive_map
from population.edits import EditScript, SetDirective, SetKnobs, apply_script, parse_edit_script
from workloads.registry import get_workload

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def workload():
    return get_workload("rmsnorm")


@pytest.fixture(scope="module")
def chain(workload):
    """template seed -> launch step (.minnctapersm 6) -> template step, as the operators make them."""
    seed = workload.seeds()[1]
    launch = apply_script(seed, EditScript((SetDirective(seed.entry, "minnctapersm", (6,)),)), operator="launch",
                          instantiate=workload.instantiate)
    script = TemplateOperator(workload=workload).propose(launch, OperatorContext(workload),
                                                         np.random.default_rng(3))
    child = apply_script(launch, script, operator="template", instantiate=workload.instantiate)
    return seed, launch, script, child


def test_template_step_keeps_the_parents_directive(chain, workload):
    seed, launch, script, child = chain
    assert isinstance(script.edits[0], SetKnobs)
    assert script.edits[1:] == (SetDirective(seed.entry, "minnctapersm", (6,)),)
    assert directive_map(child)["minnctapersm"] == (6,)  # was: vanished on re-instantiation
    assert dict(child.launch.knobs) != dict(launch.launch.knobs)
    assert template_step(launch, child, workload) == {"kept": [".minnctapersm 6"], "dropped": []}


def test_lineage_names_what_a_knobs_only_step_dropped(chain, workload):
    _seed, launch, script, _child = chain
    knobs_only = apply_script(launch, EditScript(script.edits[:1]), operator="template",
                              instantiate=workload.instantiate)
    assert "minnctapersm" not in directive_map(knobs_only)
    assert template_step(launch, knobs_only, workload)["dropped"] == [".minnctapersm 6"]


@pytest.fixture(scope="module")
def run_dir(chain, workload, tmp_path_factory):
    """A run store holding the chain (objectives 1.0, 1.2, 1.5) and the config naming its workload."""
    seed, launch, _script, child = chain
    d = tmp_path_factory.mktemp("run")
    with Store(d / "store.sqlite") as s:
        s.set_meta("config", {"workload": {"name": "rmsnorm", "options": {}}, "hardware": {"arch": "sm_90"}})
        s.set_meta("provenance", {"objective": "estimated speedup over naive_seed", "estimate": True})
        with s.transaction() as tx:
            for k, obj in ((seed, 1.0), (launch, 1.2), (child, 1.5)):
                tx.add_candidate(CandidateRow.from_eval(k, EvalResult(Status.OK, objective=obj)))
    return d


def test_lineage_report_and_diff(run_dir, workload):
    with Store(run_dir / "store.sqlite", readonly=True) as s:
        steps = lineage_report(s, workload=workload, diff=True)
    assert [(x["id"], x["operator"], x["objective"]) for x in steps] == [(1, "seed", 1.0), (2, "launch", 1.2),
                                                                          (3, "template", 1.5)]
    assert steps[1]["edit_text"].strip() == "DIRECTIVE rmsnorm .minnctapersm 6"
    assert "\n+.minnctapersm 6\n" in steps[1]["ptx_diff"] and "@@ -12,4 +12,5 @@" in steps[1]["ptx_diff"]
    assert steps[2]["kept"] == [".minnctapersm 6"] and steps[2]["dropped"] == []
    assert steps[2]["ratio"] == pytest.approx(1.25)
    assert parse_edit_script(steps[2]["edit_text"]).edits[1] == SetDirective("rmsnorm", "minnctapersm", (6,))


def test_cli(run_dir, tmp_path, capsys):
    out = subprocess.run([sys.executable, "-m", "archive", "lineage", str(run_dir), "--diff"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("lineage of candidate #3: 3 step(s), seed -> kernel; estimated speedup over naive_seed "
                           "(ESTIMATE)")
    assert "step  1  #2      launch" in text and "| DIRECTIVE rmsnorm .minnctapersm 6" in text
    assert "(+25.0%)" in text and "kept from the parent: .minnctapersm 6" in text
    assert "@@" in text  # the unified PTX diff
    from archive.__main__ import main

    assert main(["lineage", str(run_dir), "--id", "2", "--json"]) == 0
    assert [s["id"] for s in json.loads(capsys.readouterr().out)] == [1, 2]
    assert main(["lineage", str(run_dir), "--id", "99"]) == 2
    assert capsys.readouterr().err.strip() == "error: no candidate 99 in the lineage graph"
    sweep = tmp_path / "sweep"
    (sweep / "0-seed=0").mkdir(parents=True)
    (sweep / "0-seed=0" / "store.sqlite").write_bytes((run_dir / "store.sqlite").read_bytes())
    assert main(["lineage", str(sweep)]) == 2  # a multirun dir: name one of its jobs
    assert capsys.readouterr().err.strip() == (f"error: {sweep}/store.sqlite: no such store; {sweep} holds the run "
                                               f"dirs of a sweep: give one of them, e.g. {sweep}/0-seed=0")
    (tmp_path / "store.sqlite").write_text("not sqlite " * 50)
    assert main(["lineage", str(tmp_path)]) == 2
    assert "is not a ptxforge store" in capsys.readouterr().err


def test_objective_label_of_a_run_provenance():
    """A run stores its objective as a dict (evolve.app); the report names the baseline, not the dict."""
    from archive.__main__ import objective_label

    objective = {"baseline": "naive_seed", "definition": "ESTIMATE: geomean over shapes of the speedup ..."}
    assert objective_label(objective, True) == "estimated speedup over naive_seed"
    assert objective_label({"baseline": "torch", "definition": "..."}, False) == "speedup over torch"
    assert objective_label("estimated speedup over naive_seed", True) == "estimated speedup over naive_seed"
    assert objective_label(None, False) == "objective"
