"""An instant, deterministic evaluator for tests of what surrounds evaluation (the app, the engine, comparisons,
LLM failure handling): status, objective and descriptors derived from the kernel identity."""

from __future__ import annotations

import hashlib

from evaluators.types import EvalResult, Status


def hash_result(identity: str, fail_below: int = 0, objective_key: str | None = None) -> EvalResult:
    """The result sha256(identity) decides: ``wrong_result`` ("synthetic gate failure") when its first byte is
    below ``fail_below`` (0..256; 0: never), else ok with objective in [0.5, 1.5] and the three default
    descriptors (registers 16..115, active_warps 0..63, traffic_ratio 1..4.19). objective_key: hash this string
    for the objective instead (e.g. identity plus shapes, so the value differs per task)."""
    h = hashlib.sha256(identity.encode()).digest()
    if h[0] < fail_below:
        return EvalResult(Status.WRONG_RESULT, reason="synthetic gate failure")
    o = h if objective_key is None else hashlib.sha256(objective_key.encode()).digest()
    return EvalResult(Status.OK, objective=0.5 + o[1] / 255,
                      features={"registers": 16 + h[2] % 100, "active_warps": h[3] % 64,
                                "traffic_ratio": 1 + h[4] / 80})


class HashEvaluator:
    """Always ok: ``hash_result(identity)``; ``estimate`` is True (its objectives are not measurements)."""

    capacity = 1
    estimate = True

    def evaluate(self, kernel):
        return hash_result(kernel.identity)

    def close(self) -> None:
        pass
