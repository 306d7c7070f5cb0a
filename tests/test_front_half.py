"""The front half in worker processes (``evaluators.front_half``) gives what ``prepare`` gives in the calling
thread: the same cubin, resources, occupancy, features and traffic for kernels that pass, the same status,
reason and step for one that does not. Real spawned processes, real ptxas."""

from __future__ import annotations

import pytest

from evaluators.front_half import FrontHalf
from evaluators.pipeline import Rejected, prepare
from evaluators.types import Status
from targets.spec import resolve_gpu
from workloads.registry import get_workload


@pytest.fixture(scope="module")
def rms():
    return get_workload("rmsnorm")


@pytest.fixture(scope="module")
def front(rms):
    f = FrontHalf(rms, resolve_gpu(None), where="process", workers=2)
    yield f
    f.close()


def test_a_process_front_half_gives_what_the_thread_gives(rms, front):
    gpu = resolve_gpu(None)
    kernels = [*rms.seeds(), rms.instantiate({"rows_per_cta": 4, "vec": 4})]
    for k in kernels:
        here = prepare(k, rms, gpu, rms.search_shapes)
        there = front(k, rms.search_shapes)
        assert there.compiled.cubin == here.compiled.cubin
        assert there.param_types == here.param_types and there.resources == here.resources
        assert there.occupancy == here.occupancy and there.features == here.features
        assert {s: t.bytes for s, t in there.traffic.items()} == {s: t.bytes for s, t in here.traffic.items()}
        assert there.fields["traffic_bytes"] == here.fields["traffic_bytes"] > 0


def test_a_rejection_comes_back_as_the_same_rejected(rms, front):
    kda_seed = get_workload("kda_recurrent").seeds()[0]  # another workload's ABI: refused at step 3
    with pytest.raises(Rejected) as here:
        prepare(kda_seed, rms, resolve_gpu(None), rms.search_shapes)
    with pytest.raises(Rejected) as there:
        front(kda_seed, rms.search_shapes)
    assert there.value.status == here.value.status == Status.LAUNCH_ERROR
    assert (there.value.reason, there.value.step) == (here.value.reason, here.value.step) and "ABI" in here.value.reason


def test_an_unknown_place_is_refused_by_name():
    with pytest.raises(ValueError, match=r"front_half must be one of \('thread', 'process'\), got 'gpu'"):
        FrontHalf(get_workload("rmsnorm"), resolve_gpu(None), where="gpu")
    from evaluators.gpu.pool import GPUPool

    with pytest.raises(ValueError, match="front_half must be one of"):  # before any worker starts
        GPUPool(get_workload("rmsnorm"), front_half="gpu")
