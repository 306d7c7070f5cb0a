"""experiments/gate_sequence_ab.py on the CPU: the recorded sequence in order through four passes (v2, v1, v1,
v2), each evaluator built with the run's options plus the v1 overrides where due."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
STORE = ROOT / "experiments" / "data" / "rmsnorm_gate14_map_elites_s4.sqlite.xz"


def _script():
    spec = importlib.util.spec_from_file_location("gate_sequence_ab", ROOT / "experiments" / "gate_sequence_ab.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_each_pass_evaluates_the_recorded_sequence_in_order_with_its_gates_options(monkeypatch, capsys):
    mod = _script()
    built: list[dict] = []
    seen: list[list[str]] = []
    real = mod.make_evaluator

    def spy(kind, wl, **opts):
        built.append(opts)
        ev = real(kind, wl, **opts)
        order: list[str] = []
        seen.append(order)
        inner = ev.evaluate
        ev.evaluate = lambda k: (order.append(k.identity), inner(k))[1]
        return ev

    monkeypatch.setattr(mod, "make_evaluator", spy)
    assert mod.main([str(STORE), "--evaluator", "static", "--n", "3"]) == 0
    out = capsys.readouterr().out
    from evaluators.recorded import open_store

    with open_store(STORE) as st:
        want = [r.identity for r in st.candidates()[:3]]
    assert seen == [want] * 4  # one worker thread (the static evaluator has no capacity): the recorded order
    assert [o.get("gate_schedule") for o in built] == [None, "v1", "v1", None]
    assert all(o["seed"] == 0 for o in built) and built[1]["fault_check"] is False
    assert out.count("statuses {'ok': 3}") == 4 and "DRY RUN" in out


def test_a_sequence_of_no_candidates_is_refused():
    with pytest.raises(SystemExit):
        _script().main([str(STORE), "--n", "0"])
