"""An instant, deterministic evaluator for tests of what surrounds evaluation (the app, comparisons, LLM
failure handling): status ok, objective and descriptors derived from the kernel identity."""

from __future__ import annotations

import hashlib

from evaluators.types import EvalResult, Status


class HashEvaluator:
    """objective in [0.5, 1.5] and the three default descriptors from sha256(identity); ``estimate`` is True
    (its objectives are not measurements)."""

    capacity = 1
    estimate = True

    def evaluate(self, kernel):
        h = hashlib.sha256(kernel.identity.encode()).digest()
        return EvalResult(Status.OK, objective=0.5 + h[1] / 255,
                          features={"registers": 16 + h[2] % 100, "active_warps": h[3] % 64,
                                    "traffic_ratio": 1 + h[4] / 80})

    def close(self) -> None:
        pass
