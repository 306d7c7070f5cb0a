"""On a GPU: the fifth red-team round's kernels (tests/gpu/kernels/redteam, README: fifth round) through GPUPool
with the settings of ``experiment=rmsnorm_h200``, each with the status its header names. A strict xfail is a hole
of the gate as it stands (gate rules version 8); its reason names the check that would have to change. CPU
counterparts: tests/test_redteam_round5.py.

Expected at the next GPU session:
- rt_alu_pace_dodge: nondeterministic before any GPU time (race lint rule 6's shared form: the counting loop
  waits on a shared flag another thread writes); version 7: ok with a clean sanitizer verdict (racecheck on the
  barrier path);
- rt_atomic_race_clock: nondeterministic before any GPU time (race lint rule 4's order form: a compare-and-swap
  whose winner is the first warp to arrive); version 7: ok with a clean sanitizer verdict;
- rt_shared_state: nondeterministic before any GPU time (race lint rule 5's .shared form: the counter is read
  before any store into it); ``test_shared_memory_outlives_a_launch`` measures the premise;
- rt_index_tail64: wrong_result in a full schedule (the index check at 16641 x 131072: CTAs wholly past element
  2^31 wrap into the guard below x); version 7 (16385 x 131072, one tail row past 2^31): ok;
- rt_replay_eps_dodge: ok from the gate, then a racecheck verdict (version 9: the replay launches at every drawn eps).
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.types import Status
from tests.gpu.rmsnorm_kernels import WARP_ROWS, redteam

POOL_SEED = 20261207  # the pool fixture's seed (tests/gpu/conftest.py): its draws differ from the other rounds'

pytestmark = pytest.mark.gpu

def test_a_sanitizer_dodge_timed_by_an_alu_chain_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_alu_pace_dodge"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: wall_clock_wait" in r.reason and "shared variable" in r.reason
    assert "seconds" not in r.extra


def test_a_sanitizer_dodge_timed_by_a_race_to_a_shared_atomic_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_atomic_race_clock"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: atomic_order" in r.reason and "cas" in r.reason and "seconds" not in r.extra


SHARED_PROBE = r"""
extern "C" __global__ void probe(unsigned int* out) {
    __shared__ __align__(16) unsigned int slot[4096];
    if (threadIdx.x == 0) {
        const unsigned int a = (unsigned int)__cvta_generic_to_shared(slot + 4094);
        unsigned int m, c;
        asm volatile("ld.volatile.shared.v2.u32 {%0, %1}, [%2];" : "=r"(m), "=r"(c) : "r"(a) : "memory");
        c = m == 0x5EC0DEu ? c : 0u;
        asm volatile("st.volatile.shared.v2.u32 [%0], {%1, %2};" :: "r"(a), "r"(0x5EC0DEu), "r"(c + 1u) : "memory");
        out[blockIdx.x] = c;
    }
}
"""


def test_shared_memory_outlives_a_launch():
    """The premise of rt_shared_state: a shared word read before any store into it holds what an earlier CTA on
    the SM left there. Two launches of 8 CTAs per SM, another kernel in between: the share of the second's CTAs
    that see a count, printed; most should."""
    import cupy as cp

    fn = cp.RawModule(code=SHARED_PROBE).get_function("probe")
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    out = cp.zeros(8 * sms, dtype=cp.uint32)
    fn((8 * sms,), (256,), (out,))
    first = out.get()
    float(cp.arange(1 << 20, dtype=cp.float32).sum())  # another kernel between the two launches
    fn((8 * sms,), (256,), (out,))
    second = out.get()
    print("CTAs that saw an earlier count:", (first >= 1).mean(), (second >= 1).mean())
    assert (second >= 1).mean() > 0.5, (np.bincount(first)[:4], np.bincount(second)[:4])


def test_a_launch_counter_in_uninitialised_shared_memory_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_shared_state"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: launch_state" in r.reason and "slot" in r.reason and "seconds" not in r.extra


def test_32_bit_indices_on_the_main_path_only_are_rejected(pool):
    """Gate rules version 8: the index check at 16641 x 131072 (every full schedule): CTAs 2048-2079 hold rows
    16384-16639 whole and index them in 32 bits, which wrap into the guard below x (version 7, 16385 x 131072:
    row 16384 alone, the tail CTA's, indexed in 64 bits: ok)."""
    r = pool.evaluate(redteam("rt_index_tail64", WARP_ROWS), gate_schedule="full")
    assert r.status == Status.WRONG_RESULT and "index check" in r.reason, (r.status, r.reason)


def test_a_sanitizer_dodge_keyed_on_the_replays_eps_is_caught(pool):
    """Gate rules version 9: the replay's benchmark-layout launches run at every drawn eps, so the racy path
    (taken at eps 1e-5 and 1e-3) runs under racecheck (or a checked timed launch already saw the race)."""
    from evaluators.gpu.sanitizer import find_sanitizer

    r = pool.evaluate(redteam("rt_replay_eps_dodge"))
    if r.status != Status.OK:
        return
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    v = pool.sanitize([redteam("rt_replay_eps_dodge")])[0]
    assert v.status == Status.SANITIZER and v.reason.startswith("compute-sanitizer racecheck"), v.reason
    assert v.tools["memcheck"]["clean"], v.tools  # the verdict is the race's, not a memory error
