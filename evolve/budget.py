"""The search budget: how many evaluations, how many wall seconds, how many candidates the engine may spend.

An *evaluation* is one call of ``Evaluator.evaluate`` (a ptxas compile plus, on a GPU, the gate and benchmark).
A *candidate* is any proposal the engine records, including those that failed to apply or hit the hash cache;
``max_candidates`` guards against a loop of proposals that never reach the evaluator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Budget:
    """Limits and counters of one run.

    max_evaluations: evaluator calls allowed (None = unlimited).
    max_seconds: wall seconds of search allowed, summed over resumed sessions (None = unlimited).
    max_candidates: recorded candidates allowed (None = 20 x max_evaluations, or unlimited when that is None).
    At least one of max_evaluations and max_seconds must be set, else the run would never end (ValueError).
    """

    max_evaluations: int | None = 200
    max_seconds: float | None = None
    max_candidates: int | None = None
    evaluations: int = 0
    candidates: int = 0
    elapsed_before: float = 0.0
    _started: float = field(default_factory=time.monotonic, repr=False)

    def __post_init__(self) -> None:
        if self.max_evaluations is None and self.max_seconds is None:
            raise ValueError("budget: set budget.evaluations and/or budget.seconds; both are null")
        if self.max_evaluations is not None and self.max_evaluations < 1:
            raise ValueError(f"budget.evaluations must be >= 1, got {self.max_evaluations}")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(f"budget.seconds must be > 0, got {self.max_seconds}")
        if self.max_candidates is None and self.max_evaluations is not None:
            self.max_candidates = 20 * self.max_evaluations
        if self.max_candidates is not None and self.max_candidates < 1:
            raise ValueError(f"budget.candidates must be >= 1, got {self.max_candidates}")

    @property
    def seconds(self) -> float:
        """Wall seconds spent, this session plus earlier sessions of a resumed run."""
        return self.elapsed_before + (time.monotonic() - self._started)

    def exhausted(self, in_flight: int = 0) -> bool:
        """True when no new candidate may be proposed; ``in_flight`` evaluations already submitted count."""
        if self.max_evaluations is not None and self.evaluations + in_flight >= self.max_evaluations:
            return True
        if self.max_candidates is not None and self.candidates >= self.max_candidates:
            return True
        return self.max_seconds is not None and self.seconds >= self.max_seconds

    def fraction(self) -> float:
        """Spent share of the tightest limit, in [0, 1] (for progress bars)."""
        parts = []
        if self.max_evaluations is not None:
            parts.append(self.evaluations / self.max_evaluations)
        if self.max_seconds is not None:
            parts.append(self.seconds / self.max_seconds)
        return min(1.0, max(parts))

    def state_dict(self) -> dict[str, Any]:
        """JSON-able counters (limits come from the config, not the checkpoint)."""
        return {"evaluations": self.evaluations, "candidates": self.candidates, "seconds": self.seconds}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore counters saved by ``state_dict``; the wall clock restarts from the saved seconds."""
        self.evaluations = int(state["evaluations"])
        self.candidates = int(state["candidates"])
        self.elapsed_before = float(state["seconds"])
        self._started = time.monotonic()
