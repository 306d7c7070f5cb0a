"""On a GPU: the fourth red-team round's kernels (tests/gpu/kernels/redteam, README: fourth round) through GPUPool
with the settings of ``experiment=rmsnorm_h200`` (the softmax kernels with the softmax workload), each with the
status its header names. A strict xfail would be a hole of the gate as it stands (gate rules version 7); its
reason names the check that would have to change. CPU counterparts:
tests/test_redteam_round4.py.

Expected at the next GPU session:
- rt_sleep_dodge: nondeterministic before any GPU time (race lint rule 6, wall_clock_wait);
- rt_heap_state: input_mutated before any GPU time (the input-store check: a store through malloc's result);
- rt_local_state: nondeterministic before any GPU time (race lint rule 5, its .local form: a read of local
  memory the launch did not write); ``test_local_memory_outlives_a_launch`` measures the premise (a launch sees
  what the previous one left in local memory on the same hardware slot);
- rt_edge_race: sanitizer (racecheck; gate rules version 7: the replay places its inputs as the benchmark does,
  at the fixed shapes and at the smallest timed shape; version 6: ok with a clean verdict, a strict xfail);
- rt_index32: wrong_result (gate rules version 7: the index check at 16385 x 131072, 16641 x 131072 since
  version 8, faults in the guard below x;
  version 6: ok, a strict xfail); wrong on a 4 GiB x in a direct launch;
- rt_softmax_sampled_max: wrong_result on the softmax workload's "masked" rows (gate v5 had no such
  distribution: ok there), NaN on a left-padded row in a direct launch; RT_FIRST_SHIFT=1 wrong_result (gate run 4).
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.types import Status
from population.kernel import Kernel, LaunchConfig
from tests.gpu.rmsnorm_kernels import REDTEAM, WARP_ROWS, redteam, sanitized

pytestmark = pytest.mark.gpu

# The ``pool`` fixture (tests/gpu/conftest.py): experiment=rmsnorm_h200 settings, torch baseline only.
POOL_SEED = 20261206

def softmax_kernel(first_shift: int) -> Kernel:
    from population.parser import parse_module
    from workloads.cuda_build import build_ptx

    ptx = build_ptx(REDTEAM / "rt_softmax_sampled_max.cu", {"RT_FIRST_SHIFT": first_shift})
    return Kernel(parse_module(ptx), "softmax", LaunchConfig(block=(256, 1, 1), knobs=(("threads", 256),)))


def launcher(wl, kernel: Kernel):
    """``worker.make_launcher`` for ``kernel`` on the current device (the module kept alive with it)."""
    import cupy as cp

    from evaluators.gpu.args import param_types
    from evaluators.gpu.worker import make_launcher
    from evaluators.toolchain import compile_ptx
    from targets.spec import resolve_gpu

    mod = cp.cuda.Module()
    mod.load(compile_ptx(kernel, resolve_gpu(None).arch).cubin)
    run = make_launcher(wl, cp, mod.get_function(kernel.entry), param_types(kernel), kernel.launch.to_json())
    run.module = mod
    return run


def test_a_sanitizer_dodge_timed_by_nanosleep_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_sleep_dodge"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: wall_clock_wait" in r.reason and "nanosleep" in r.reason and "seconds" not in r.extra


def test_a_launch_counter_in_the_device_heap_is_rejected_before_any_gpu_time(pool):
    r = pool.evaluate(redteam("rt_heap_state"))
    assert r.status == Status.INPUT_MUTATED, (r.status, r.reason)
    assert "static input-store check" in r.reason and "seconds" not in r.extra


LOCAL_PROBE = r"""
extern "C" __global__ void probe(unsigned int* out) {
    unsigned int count;
    asm volatile("{\n\t.local .align 8 .b8 rt_slot[8];\n\t.reg .b32 m, c;\n\t.reg .pred fresh;\n\t.reg .b64 p;\n\t"
                 "cvta.local.u64 p, rt_slot;\n\tld.volatile.v2.u32 {m, c}, [p];\n\t"
                 "setp.ne.u32 fresh, m, 0x5EC0DE;\n\t@fresh mov.u32 c, 0;\n\tmov.u32 %0, c;\n\t"
                 "add.u32 c, c, 1;\n\tmov.u32 m, 0x5EC0DE;\n\tst.volatile.v2.u32 [p], {m, c};\n\t}"
                 : "=r"(count) :: "memory");
    out[blockIdx.x * blockDim.x + threadIdx.x] = count;
}
"""


def test_local_memory_outlives_a_launch():
    """The premise of rt_local_state: a `.local` word read before it is written holds what the previous launch's
    thread on the same hardware slot left there (rt_local_state's counter, as a probe that returns it). Two
    launches of 8 CTAs per SM, another kernel in between: most threads of the second see the first's count."""
    import cupy as cp

    fn = cp.RawModule(code=LOCAL_PROBE).get_function("probe")
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    out = cp.zeros(8 * sms * 256, dtype=cp.uint32)
    fn((8 * sms,), (256,), (out,))
    first = out.get()
    float(cp.arange(1 << 20, dtype=cp.float32).sum())  # another kernel between the two launches
    fn((8 * sms,), (256,), (out,))
    second = out.get()
    assert (second >= 1).mean() > 0.5, (np.bincount(first)[:4], np.bincount(second)[:4])


def test_a_sanitizer_dodge_counting_launches_in_local_memory_is_rejected_before_any_gpu_time(pool):
    """Race lint rule 5's .local form: the counter is read before the launch writes it."""
    r = pool.evaluate(redteam("rt_local_state"))
    assert r.status == Status.NONDETERMINISTIC, (r.status, r.reason)
    assert "static race lint: launch_state" in r.reason and "rt_slot" in r.reason and "seconds" not in r.extra


def test_a_sanitizer_dodge_keyed_on_the_inputs_placement_is_caught(pool):
    """Gate rules version 7: the replay runs the fixed shapes again, and the pool's smallest timed shape, with
    the inputs placed as the benchmark's (``vmm.place_at_edges``, read-only): both inputs end at a granule, so
    the barrier is dropped under racecheck (version 6: ok with a clean verdict, a strict xfail)."""
    status, verdict = sanitized(pool, redteam("rt_edge_race"))
    assert status != Status.OK or verdict == Status.SANITIZER, (status, verdict)


def test_the_replay_at_a_timed_shape_fits_the_sanitizer_budget(pool):
    """What the replay's new launches cost: each tool over the template seed at the fixed shapes in both layouts
    and at 32768 x 512 in the benchmark's, one process per tool; printed (the cost in GATE.md, check 8, is a
    prediction until this runs) and within the pool's per-tool timeout with room for a batch of kernels."""
    import time

    from evaluators.gpu.sanitizer import find_sanitizer, sanitize

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not installed")
    seed = pool.workload.seeds()[1]
    seconds = {}
    for tool in ("memcheck", "racecheck", "synccheck"):
        t0 = time.perf_counter()
        for timed in ((), pool.shapes):
            v = sanitize([seed], pool.workload, arch=pool.arch, tools=(tool,), timed_shapes=timed)[0]
            assert v.status == Status.OK, (tool, v.reason)
            seconds[(tool, bool(timed))] = time.perf_counter() - t0
            t0 = time.perf_counter()
    print("sanitizer seconds per tool (fixed shapes only, with the timed shape):", seconds)
    assert all(s < pool.sanitizer_timeout_s / 4 for s in seconds.values()), seconds


def test_32_bit_element_indices_are_rejected(pool):
    """Gate rules version 7: the index check at 16385 x 131072, since version 8 16641 x 131072 (every full schedule; one rotating evaluation in
    four): the wrapped index of row 16384 reads below x, into the unmapped guard (version 6: ok, a strict xfail)."""
    r = pool.evaluate(redteam("rt_index32", WARP_ROWS), gate_schedule="full")
    assert r.status == Status.WRONG_RESULT and "index check" in r.reason, (r.status, r.reason)


def test_the_index_check_passes_the_seeds_and_costs_a_few_milliseconds(pool, workload):
    """No false rejection (the naive seed and the template) and the check's time, kept mappings (second run) and
    first use, printed: predicted ~3 ms (20 operations, 2 synchronisations, the launch over 2^31 elements) and
    ~21 ms more at first use (76 driver calls)."""
    import time

    import cupy as cp

    from evaluators.gpu.index_check import IndexCheckSets, index_check

    cache, shape = IndexCheckSets(), workload.index_shapes[0]
    for kernel in workload.seeds():
        run = launcher(workload, kernel)
        seconds = []
        for seed in (1, 2, 3):
            t0 = time.perf_counter()
            bad, _ = index_check(workload, run, shape, seed, cache)
            cp.cuda.get_current_stream().synchronize()
            seconds.append(time.perf_counter() - t0)
            assert bad is None, bad
        print(f"index check {kernel.entry} ms: first {1e3 * seconds[0]:.1f}, kept {1e3 * min(seconds[1:]):.1f}")
        assert min(seconds[1:]) < 0.02, seconds
    cache.close()


def test_32_bit_element_indices_are_wrong_on_a_4_gib_input(workload):
    """rt_index32 and the naive seed at 16385 x 131072 (2^31 + 131072 elements: 4 GiB of x): x and y each sit
    4 GiB into a buffer of their own, so the wrapped addresses of the last row land in memory of the test (no
    fault); the naive seed's last row matches the float64 reference, rt_index32's is never written."""
    import cupy as cp

    from evaluators.gpu.gate import compare
    from workloads.dtypes import from_float

    m, n = 16385, 131072
    pad = 1 << 31  # elements: row 16384 of rt_index32 starts 2^31 elements before x
    xbuf = cp.full(pad + m * n, 0x3F80, dtype=cp.uint16)  # 1.0 everywhere
    x = xbuf[pad:].reshape(m, n)
    x[-1] = from_float(cp.random.default_rng(1).standard_normal(n, dtype=cp.float32), "bf16", cp)
    w = cp.asarray(workload.make_inputs((1, n), 2)["w"])
    ref = workload.reference_rows({"x": x, "w": w}, cp.asarray([m - 1]), cp, {"eps": 1e-6})["y"]
    atol, rtol = workload.tolerance
    errors = {}
    for name, kernel in (("naive", workload.seeds()[0]), ("rt_index32", redteam("rt_index32", WARP_ROWS))):
        ybuf = cp.full(pad + m * n, 0x7FC0, dtype=cp.uint16)  # NaN
        y = ybuf[pad:].reshape(m, n)
        launcher(workload, kernel)({"x": x, "w": w}, {"y": y}, (m, n), {"eps": 1e-6})
        errors[name] = compare(y[-1:], ref, "bf16", atol, rtol, cp)
        del ybuf, y
    assert errors["naive"].ok, errors["naive"]
    assert errors["rt_index32"].n_nan == n, errors["rt_index32"]


@pytest.fixture(scope="module")
def softmax_pool():
    from evaluators.gpu.pool import GPUPool
    from workloads.softmax import Softmax

    p = GPUPool(Softmax(), devices=[0], baseline_names=("torch",), seed=POOL_SEED)
    yield p
    p.close()


def test_a_softmax_shifted_by_the_rows_first_element_is_rejected(softmax_pool):
    """Gate run 4 (and the timed launches) double 1/16 of a changed shifted row's elements: ~1000 above x[r, 0]."""
    r = softmax_pool.evaluate(softmax_kernel(1))
    assert r.status == Status.WRONG_RESULT and "NaN" in r.reason, (r.status, r.reason)


def test_a_softmax_shifted_by_the_max_of_the_rows_front_is_rejected(softmax_pool):
    """The softmax workload's "masked" rows (a front of up to half the row at -1e4) are NaN under the sampled
    shift (gate v5's two distributions held no such row)."""
    r = softmax_pool.evaluate(softmax_kernel(0))
    assert r.status == Status.WRONG_RESULT and "masked" in r.reason, (r.status, r.reason)


def test_a_softmax_shifted_by_the_max_of_the_rows_front_is_nan_on_a_left_padded_row():
    import cupy as cp

    from evaluators.gpu.gate import compare
    from workloads.softmax import Softmax

    sm = Softmax()
    x = np.random.default_rng(0).standard_normal((2, 1024)).astype(np.float32) * 4
    x[0, :300] = -1e4  # a left-padded prompt: the first 300 positions masked
    x[1, 700] = 120.0  # a hot entry 100 above the rest
    xd, y = cp.asarray(x), cp.full((2, 1024), np.nan, dtype=cp.float32)
    for first_shift, bad in ((0, 724 + 1), (1, None)):
        launcher(sm, softmax_kernel(first_shift))({"x": xd}, {"y": y}, (2, 1024), {})
        c = compare(y, sm.reference({"x": xd}, cp)["y"], "fp32", *sm.tolerance, cp)
        assert c.n_nan == c.n_bad and (bad is None or c.n_bad == bad) and c.n_bad >= 700, (first_shift, c)
