"""make_evaluator on a machine without a GPU: static by default (with the estimate banner), gpu refused."""

from __future__ import annotations

import pytest

from evaluators.factory import STATIC_BANNER, make_evaluator
from evaluators.gpu.devices import gpu_count
from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.skipif(gpu_count() > 0, reason="checks the CPU-only fallback")


def test_auto_falls_back_to_static_with_banner(capsys):
    ev = make_evaluator("auto", RMSNorm("bf16"), repeats=5, timeout_s=3)  # GPU-only options are dropped
    try:
        assert type(ev).__name__ == "StaticEvaluator" and ev.capacity >= 1
        assert STATIC_BANNER in capsys.readouterr().err
        r = ev.evaluate(RMSNorm("bf16").seeds()[0])
        assert r.estimate and r.ok and r.objective > 0
    finally:
        ev.close()


def test_gpu_kind_refused_without_gpu_and_bad_kind():
    from evaluators.gpu.pool import NoGPU

    with pytest.raises(NoGPU, match="no GPU visible"):
        make_evaluator("gpu", RMSNorm("bf16"))
    with pytest.raises(ValueError, match=r"one of \('auto', 'gpu', 'static', 'replay'\)"):
        make_evaluator("tpu", RMSNorm("bf16"))
