"""UCB1 operator selection and the budget."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evolve.budget import Budget
from evolve.selection import OperatorSelector, operator_reward


def test_ucb_tries_each_arm_then_prefers_the_better_one():
    sel = OperatorSelector(["a", "b", "c"])
    rng = np.random.default_rng(0)
    first = [sel.select(rng) for _ in range(1)]
    assert first == ["a"]
    payoff = {"a": 0.1, "b": 0.9, "c": 0.3}
    picks = []
    for _ in range(300):
        arm = sel.select(rng)
        picks.append(arm)
        sel.update(arm, payoff[arm])
    assert picks[:3] == ["a", "b", "c"]
    assert picks.count("b") > 200
    # The UCB1 index by hand for arm "a" after the run.
    n = sum(sel.counts.values())
    idx_a = sel.mean("a") + math.sqrt(2 * math.log(n) / sel.counts["a"])
    assert idx_a == pytest.approx(0.1 + math.sqrt(2 * math.log(300) / sel.counts["a"]))


def test_ucb_exclude_and_state_round_trip():
    sel = OperatorSelector(["a", "b"], kind="ucb")
    rng = np.random.default_rng(0)
    assert sel.select(rng, exclude={"a"}) == "b"
    with pytest.raises(ValueError, match="no operator left"):
        sel.select(rng, exclude={"a", "b"})
    sel.update("a", 1.0)
    sel.update("b", 0.0)
    other = OperatorSelector(["a", "b"])
    other.load_state(json.loads(json.dumps(sel.state_dict())))
    assert other.counts == {"a": 1, "b": 1} and other.sums == {"a": 1.0, "b": 0.0}
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sel.update("a", 1.5)
    with pytest.raises(KeyError, match="unknown operator"):
        sel.update("z", 0.5)


def test_weighted_selection_follows_weights_and_skips_zero():
    sel = OperatorSelector(["a", "b", "c"], weights=[3.0, 1.0, 0.0], kind="weighted")
    rng = np.random.default_rng(1)
    picks = [sel.select(rng) for _ in range(4000)]
    assert "c" not in picks
    assert 0.70 < picks.count("a") / 4000 < 0.80


def test_selector_rejects_bad_config():
    with pytest.raises(ValueError, match=r"selection\.kind"):
        OperatorSelector(["a"], kind="thompson")
    with pytest.raises(ValueError, match="unique"):
        OperatorSelector(["a", "a"])
    with pytest.raises(ValueError, match="weights"):
        OperatorSelector(["a", "b"], weights=[0.0, 0.0])


def test_operator_reward():
    assert operator_reward(False, True) == 0.0
    assert operator_reward(True, False) == pytest.approx(0.2)
    assert operator_reward(True, True) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        operator_reward(True, True, validity=0.5, improvement=0.8)


def test_budget_limits_and_state():
    b = Budget(max_evaluations=10)
    assert b.max_candidates == 200
    b.evaluations = 8
    assert not b.exhausted()
    assert b.exhausted(in_flight=2)
    b.candidates = 200
    assert b.exhausted()
    s = b.state_dict()
    c = Budget(max_evaluations=10)
    c.load_state(json.loads(json.dumps(s)))
    assert c.evaluations == 8 and c.candidates == 200 and c.seconds >= s["seconds"]
    t = Budget(max_evaluations=None, max_seconds=1e-9)
    assert t.exhausted()
    with pytest.raises(ValueError, match="budget"):
        Budget(max_evaluations=None, max_seconds=None)
    with pytest.raises(ValueError, match=r"budget\.evaluations"):
        Budget(max_evaluations=0)
