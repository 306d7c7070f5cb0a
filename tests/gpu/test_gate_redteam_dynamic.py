"""On a GPU: the third red-team round's kernels (tests/gpu/kernels/redteam, README: third round) through GPUPool,
each with the status (or speed) its header names. CPU counterparts: tests/test_redteam_dynamic.py (the same
tricks as numpy launchers through timed_call, verify_checked and audit_output).

Expected at the next GPU session (gate rules version 5):
- rt_kda_state_skip at the decode search shape (64, 1 x 32): wrong_result at a checked timed launch, "final value
  of inout buffer state" in the reason (gate v3: ok, about 2x the naive seed);
- rt_kda_memo: nondeterministic before any GPU time (race lint rule 5: its table is .global state; gate v3
  accepted it at about 1.9x the naive seed it wraps, the median of 10 memo hits and 10 computed launches);
- rt_sanitizer_dodge RT_SENSE 2: nondeterministic before any GPU time (rule 5: its launch counter); RT_SENSE 3:
  sanitizer (racecheck at the smallest search shape, which the replay runs since gate rules version 7; a strict
  xfail before).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.types import Status
from population.kernel import Kernel, LaunchConfig
from workloads.kda import KDARecurrent
from workloads.rmsnorm import RMSNorm

pytestmark = pytest.mark.gpu

REDTEAM = Path(__file__).resolve().parent / "kernels" / "redteam"
DECODE = (64, *(1,) * 32)  # KDARecurrent's decode search shape
PREFILL = (16, 1024, 1024, 1024, 1024)  # within rt_kda_memo's capacity; ~ms of token recurrence per launch


def kda_kernel(name: str) -> Kernel:
    from population.parser import parse_module
    from workloads.cuda_build import build_ptx

    return Kernel(parse_module(build_ptx(REDTEAM / f"{name}.cu", {})), "kda_fwd",
                  LaunchConfig(block=(128, 1, 1), knobs=(("bv", 128),)))


@pytest.fixture(scope="module")
def kda():
    return KDARecurrent()


def test_a_final_state_left_unwritten_at_the_benchmark_batches_is_rejected(kda):
    from evaluators.gpu.pool import GPUPool

    with GPUPool(kda, devices=[0], shapes=[DECODE], baseline_names=(), timeout_s=180, seed=20261203) as pool:
        r = pool.evaluate(kda_kernel("rt_kda_state_skip"))
        assert r.status == Status.WRONG_RESULT, (r.status, r.reason)
        assert "timed launch" in r.reason and "final value of inout buffer state" in r.reason, r.reason
        control = pool.evaluate(kda.seeds()[0])
        assert control.status == Status.OK, control.reason


def test_a_whole_input_memo_is_rejected_before_any_gpu_time(kda):
    """The memo is right on every launch; its table lives in .global variables, which race lint rule 5 rejects
    for a workload without atomics (gate version 5; since version 16 rule 5's exchange form finds its reads of
    the table too, and the reason names the first kind found, listing the rest). Without the rule the timed launches never repeat an earlier
    one's inputs, so its time would be the naive recurrence's plus the hash (tests/test_redteam_dynamic.py)."""
    from evaluators.gpu.pool import GPUPool

    with GPUPool(kda, devices=[0], shapes=[PREFILL], baseline_names=(), timeout_s=300, seed=20261204) as pool:
        memo = pool.evaluate(kda_kernel("rt_kda_memo"))
        assert memo.status == Status.NONDETERMINISTIC, (memo.status, memo.reason)
        assert memo.reason.startswith("static race lint: "), memo.reason
        assert "launch_state" in memo.reason and "seconds" not in memo.extra, memo.reason
        naive = pool.evaluate(kda.seeds()[0])
        assert naive.status == Status.OK, naive.reason


@pytest.mark.parametrize("sense", [2, 3])
def test_a_sanitizer_dodge_without_clock_or_launch_register_is_caught(sense):
    """RT_SENSE 3 keeps its barrier at every gate shape and the replay's fixed ones and drops it at every search
    shape: since gate rules version 7 the replay also runs the pool's smallest search shape (32768 x 512), where
    racecheck sees the race (version 6: a strict xfail, known gap)."""
    from evaluators.gpu.pool import GPUPool
    from evaluators.gpu.sanitizer import find_sanitizer
    from population.parser import parse_module
    from workloads.cuda_build import build_ptx

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    kernel = Kernel(parse_module(build_ptx(REDTEAM / "rt_sanitizer_dodge.cu", {"RT_SENSE": sense})), "rmsnorm",
                    LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1), ("row_iters", 4))))
    with GPUPool(RMSNorm("bf16"), devices=[0], baseline_names=("torch",), seed=20261205) as pool:
        r = pool.evaluate(kernel)
        if sense == 2:  # its launch counter is .global state: race lint rule 5, before any GPU time
            assert r.status == Status.NONDETERMINISTIC and "launch_state" in r.reason, (r.status, r.reason)
            return
        verdict = pool.sanitize([kernel])[0]
    assert r.status != Status.OK or verdict.status == Status.SANITIZER, (r.status, verdict.status, verdict.reason)
