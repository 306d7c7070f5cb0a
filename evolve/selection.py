"""Operator selection: a UCB1 multi-armed bandit over mutation operators, or fixed-rate sampling.

UCB1 (Auer, Cesa-Bianchi and Fischer, "Finite-time Analysis of the Multiarmed Bandit Problem", Machine Learning
47, 2002, Fig. 1): play every arm once, then the arm maximising ``mean_i + c * sqrt(2 ln n / n_i)``, where n is
the total number of plays, n_i the plays of arm i and mean_i its mean reward in [0, 1]. ``c = 1`` is the paper's
constant; larger values explore more.

The engine rewards an operator with ``operator_reward``: 0 for a proposal that did not apply, compile or pass the
gate, ``validity`` for a valid child, plus ``improvement`` more when the child entered the archive (a new cell or
a better elite).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def operator_reward(valid: bool, improved: bool, *, validity: float = 0.2, improvement: float = 0.8) -> float:
    """Reward in [0, 1] for one proposal: 0 if invalid, ``validity`` if valid, ``validity + improvement`` if it
    also entered the archive. ValueError when the two weights are negative or sum above 1."""
    if validity < 0 or improvement < 0 or validity + improvement > 1.0 + 1e-12:
        raise ValueError(f"reward weights must be >= 0 and sum to <= 1, got validity={validity}, "
                         f"improvement={improvement}")
    if not valid:
        return 0.0
    return validity + (improvement if improved else 0.0)


@dataclass
class OperatorSelector:
    """Picks which operator proposes next.

    arms: operator names (unique, non-empty). weights: sampling weights for ``kind="weighted"`` (and arms with
    weight 0 are never picked under either kind). kind: ``"ucb"`` (UCB1) or ``"weighted"`` (sample by weight).
    c: UCB1 exploration constant. Counts and reward sums are per arm; the state is JSON-able.
    Raises ValueError on an unknown kind, duplicate or empty arms, or weights that are negative or all zero.
    """

    arms: list[str]
    weights: list[float] | None = None
    kind: str = "ucb"
    c: float = 1.0
    counts: dict[str, int] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)

    KINDS = ("ucb", "weighted")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"selection.kind: {self.kind!r} is not one of {list(self.KINDS)}")
        if not self.arms:
            raise ValueError("operator selection needs at least one operator (mutator.operators is empty)")
        if len(set(self.arms)) != len(self.arms):
            raise ValueError(f"operator names must be unique, got {self.arms}")
        if self.weights is None:
            self.weights = [1.0] * len(self.arms)
        if len(self.weights) != len(self.arms) or any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError(f"operator weights must be >= 0, not all 0, one per operator; got {self.weights}")
        for a in self.arms:
            self.counts.setdefault(a, 0)
            self.sums.setdefault(a, 0.0)

    @property
    def active(self) -> list[str]:
        """Arms with a positive weight."""
        return [a for a, w in zip(self.arms, self.weights) if w > 0]

    def select(self, rng: np.random.Generator, exclude: set[str] | frozenset[str] = frozenset()) -> str:
        """The next operator name. ``exclude``: arms not to pick this time (e.g. one that just had no proposal);
        ValueError when every active arm is excluded."""
        arms = [a for a in self.active if a not in exclude]
        if not arms:
            raise ValueError(f"no operator left to select (excluded: {sorted(exclude)})")
        if self.kind == "weighted":
            w = np.array([self.weights[self.arms.index(a)] for a in arms], dtype=np.float64)
            return arms[int(rng.choice(len(arms), p=w / w.sum()))]
        untried = [a for a in arms if self.counts[a] == 0]
        if untried:
            return untried[0]
        n = sum(self.counts[a] for a in arms)
        scores = [self.mean(a) + self.c * math.sqrt(2.0 * math.log(n) / self.counts[a]) for a in arms]
        best = max(scores)
        # Ties are broken in arm order, so the choice is deterministic given the history.
        return arms[scores.index(best)]

    def update(self, arm: str, reward: float) -> None:
        """Record ``reward`` (in [0, 1]) for ``arm``. KeyError on an unknown arm, ValueError outside [0, 1]."""
        if arm not in self.counts:
            raise KeyError(f"unknown operator {arm!r}; operators: {self.arms}")
        if not 0.0 <= reward <= 1.0:
            raise ValueError(f"reward must lie in [0, 1], got {reward}")
        self.counts[arm] += 1
        self.sums[arm] += reward

    def mean(self, arm: str) -> float:
        """Mean reward of ``arm`` so far (0 before its first play)."""
        return self.sums[arm] / self.counts[arm] if self.counts[arm] else 0.0

    def state_dict(self) -> dict[str, Any]:
        """JSON-able ``{"counts": {arm: plays}, "sums": {arm: summed reward}}``."""
        return {"counts": dict(self.counts), "sums": dict(self.sums)}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output; arms missing from it start at zero, arms it has that this selector
        lacks are ignored. KeyError when ``counts`` or ``sums`` is missing."""
        for a in self.arms:
            self.counts[a] = int(state["counts"].get(a, 0))
            self.sums[a] = float(state["sums"].get(a, 0.0))
