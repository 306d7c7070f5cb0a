"""Why a run stopped, in one sentence (evolve.runinfo.stop_reason), for each way a run ends."""

from __future__ import annotations

from types import SimpleNamespace

from evolve.budget import Budget
from evolve.runinfo import stop_reason


def test_stop_reasons():
    snap = SimpleNamespace(statuses={"ok": 3, "no_proposal": 40, "llm_error": 2}, duplicates=0)
    b = Budget(max_evaluations=10)
    b.evaluations, b.candidates = 10, 12
    assert stop_reason(b, snap) == "evaluation budget spent (10 of 10 evaluations)"
    # a run of 200 evaluations resumed with budget.evaluations=60 ran nothing: not "200 of 60"
    b = Budget(max_evaluations=60)
    b.evaluations, b.candidates = 200, 213
    assert stop_reason(b, snap) == ("evaluation budget spent: the run already held 200 evaluations, more than "
                                    "budget.evaluations=60")
    # the failing input: an endpoint whose every answer is a duplicate used the whole candidate budget
    b = Budget(max_evaluations=200, max_candidates=200)
    b.evaluations, b.candidates = 4, 200
    dup = SimpleNamespace(statuses={"ok": 4}, duplicates=196)
    assert stop_reason(b, dup) == ("candidate budget spent (200 of 200 candidates) after only 4 evaluations, "
                                   "mostly duplicates: 196 duplicates")
    b.evaluations, b.candidates = 3, 200
    assert stop_reason(b, snap).startswith("candidate budget spent (200 of 200 candidates) after only 3 "
                                           "evaluations, mostly errors: 40 no_proposal, 2 llm_error")
    t = Budget(max_evaluations=None, max_seconds=1e-9)
    assert stop_reason(t, snap).startswith("time budget spent (")
    assert stop_reason(Budget(), snap, halted="every operator is switched off: llm: 5 LLM failures") == (
        "errors: every operator is switched off: llm: 5 LLM failures (after 0 evaluations)")


def test_static_model_version_names_the_model():
    import evaluators.static as static
    from evolve.runinfo import static_model_version

    v = static_model_version()
    declared = getattr(static, "MODEL_VERSION", None)
    assert v == declared if declared is not None else (v.startswith("source:") and len(v) == 19)


def test_static_model_version_names_the_calibration(tmp_path):
    """Two calibrations of one model are two versions: runs under each are never pooled."""
    import json
    import shutil
    from pathlib import Path

    from evaluators.static import StaticEvaluator
    from evolve.runinfo import static_model_version
    from workloads.registry import get_workload

    src = Path(__file__).resolve().parents[1] / "evaluators" / "static_calibration.json"
    other = tmp_path / "cal.json"
    shutil.copy(src, other)
    data = json.loads(other.read_text())
    data["id"] = "20990101-test"
    other.write_text(json.dumps(data))
    wl = get_workload("rmsnorm")
    a, b = StaticEvaluator(wl), StaticEvaluator(wl, calibration=str(other))
    va, vb = static_model_version(a), static_model_version(b)
    assert va.startswith(f"{a.model_version}+") and va.endswith(static_model_version())
    assert vb.startswith("static-v") and "/20990101-test+" in vb and va != vb
