"""The CPU stand-in for CuPy refuses what CuPy and the CUDA driver refuse (tests/cupy_standin.py), so a dry run
on the CPU fails where the GPU would: kernel launches (tuple grid and block, CUDA's limits, one argument per
parameter of the kernel's source at the parameter's width), the runtime's async memset and copy (every argument
of CuPy's signature), the VMM calls (whole granules, map into a reserved range, protect a mapped range, free an
unmapped range of the reserved size); and the worker names CUDA error codes only as whole numbers."""

from __future__ import annotations

import numpy as np
import pytest

from tests import cupy_standin as sd


@pytest.fixture
def cp(monkeypatch):
    return sd.install(monkeypatch)


def test_signatures_of_the_evaluators_cuda_sources():
    from evaluators.gpu.benchmark import _FLUSH_SRC
    from evaluators.gpu.launch_prep import HOST_TWINS, SOURCE

    sigs = sd.kernel_signatures(SOURCE)
    assert set(sigs) == set(HOST_TWINS)
    assert sigs["fill_pattern"] == [None, 8, None, 4, 4, 8, 8]
    assert sigs["draw_rows_u16"] == [None, 8, None, None, None, 8, 4, 4, 4]
    assert sigs["put_rows_u32"] == [None, 8, None, None, None, 4, None]
    assert sd.kernel_signatures(_FLUSH_SRC) == {"l2_flush_read": [None, 8, None], "hold_stream": [8]}


def test_a_launch_needs_tuples_within_cudas_limits(cp):
    from evaluators.gpu.launch_prep import SOURCE

    fn = cp.RawModule(code=SOURCE).get_function("fill_pattern")
    out = cp.zeros(64, dtype=cp.uint8)
    args = (out, np.uint64(4), out, np.uint32(0), np.int32(0), np.uint64(0), np.uint64(0))
    with pytest.raises(TypeError, match="tuples"):
        fn([1], (256,), args)  # CuPy's Function.__call__(tuple grid, tuple block, ...)
    with pytest.raises(ValueError, match="limits"):
        fn((1, 65536), (256,), args)  # gridDim.y <= 65535
    with pytest.raises(ValueError, match="limits"):
        fn((1,), (2048,), args)  # at most 1024 threads
    fn((1,), (256,), args)
    assert out.view(np.ndarray).tolist() == [0] * 64


def test_kernel_arguments_must_match_the_parameters_of_the_source(cp):
    from evaluators.gpu.launch_prep import SOURCE

    fn = cp.RawModule(code=SOURCE).get_function("fill_pattern")
    out = cp.zeros(64, dtype=cp.uint8)
    good = [out, np.uint64(4), out, np.uint32(0), np.int32(0), np.uint64(0), np.uint64(0)]
    for i, bad, msg in [(1, np.uint32(4), "4-byte scalar"),  # a u64 parameter read past a 4-byte value
                        (3, 0, "8-byte scalar"),  # a Python int is CuPy's int64: 8 bytes for a u32 parameter
                        (0, np.zeros(4, dtype=np.uint8), "host numpy"),  # a host array for a pointer
                        (4, out, "device array"),  # a pointer for an int
                        (2, np.uint32(0), "pointer")]:
        args = list(good)
        args[i] = bad
        with pytest.raises(TypeError, match=msg):
            fn((1,), (256,), tuple(args))
    with pytest.raises(TypeError, match="7 parameters"):
        fn((1,), (256,), tuple(good[:6]))
    with pytest.raises(KeyError):
        cp.RawModule(code=SOURCE).get_function("no_such_kernel")


def test_memset_and_memcpy_take_every_argument_of_cupys_signature(cp):
    a, b = cp.zeros(16, dtype=cp.uint8), cp.full(16, 7, dtype=cp.uint8)
    with pytest.raises(TypeError):
        cp.cuda.runtime.memsetAsync(a.data.ptr, 0xFF, 16)  # the stream is not optional in CuPy
    with pytest.raises(TypeError):
        cp.cuda.runtime.memcpyAsync(a.data.ptr, b.data.ptr, 16, 3)
    cp.cuda.runtime.memsetAsync(a.data.ptr, 0xFF, 8, 0)
    cp.cuda.runtime.memcpyAsync(a.data.ptr + 8, b.data.ptr, 8, cp.cuda.runtime.memcpyDeviceToDevice, 0)
    assert a.view(np.ndarray).tolist() == [255] * 8 + [7] * 8


def test_vmm_calls_follow_the_drivers_rules(cp):
    import cuda.bindings.driver as cu

    g = sd.GRANULARITY
    assert cu.cuMemAddressReserve(g + 4096, g, 0, 0)[0] != 0  # not whole granules
    assert cu.cuMemCreate(4096, None, 0)[0] != 0
    err, base = cu.cuMemAddressReserve(2 * g, g, 0, 0)
    err2, handle = cu.cuMemCreate(g, None, 0)
    assert err == 0 and err2 == 0
    desc = cu.CUmemAccessDesc()
    desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    assert cu.cuMemSetAccess(base, g, [desc], 1)[0] != 0  # nothing mapped there yet
    assert cu.cuMemMap(base + 4096, g, 0, handle, 0)[0] != 0  # not at a granule
    assert cu.cuMemMap(base, 2 * g, 0, handle, 0)[0] != 0  # past the allocation
    assert cu.cuMemMap(base, g, 0, handle, 0)[0] == 0
    assert cu.cuMemMap(base, g, 0, handle, 0)[0] != 0  # already mapped
    assert cu.cuMemSetAccess(base, g, [desc], 1)[0] == 0
    assert cu.cuMemAddressFree(base, 2 * g)[0] != 0  # still mapped
    assert cu.cuMemUnmap(base, g)[0] == 0 and cu.cuMemRelease(handle)[0] == 0
    assert cu.cuMemAddressFree(base, g)[0] != 0  # not the size reserved
    assert cu.cuMemAddressFree(base, 2 * g)[0] == 0


def test_edge_buffers_with_aliases_map_and_free_cleanly_under_the_strict_driver(cp):
    from evaluators.gpu.vmm import place_at_edges

    x = cp.asarray(np.arange(3 * 1000, dtype=np.float32).reshape(3, 1000))
    w = cp.asarray(np.ones(5, dtype=np.float32))
    edges = place_at_edges({"x": x, "w": w}, ["x", "w"], alias=True)
    import cuda.bindings.driver as cu

    assert edges.read_only and not edges.refused
    assert edges.views["x"].view(np.ndarray).tolist() == x.view(np.ndarray).tolist()
    edges.rw["w"][...] = cp.full(5, 2.0, dtype=cp.float32)  # through the read-write alias ...
    assert edges.views["w"].view(np.ndarray).tolist() == [2.0] * 5  # ... seen through the read-only mapping
    assert not sd.writable(edges.buffers["w"].ptr, 4) and sd.writable(edges.buffers["w"].alias_ptr, 4)
    edges.close()
    assert cu.access == {} and cu.reserved == {} and cu.handles == {}


def test_error_codes_are_whole_numbers_in_the_workers_fault_rules():
    from evaluators.gpu.worker import KernelFault, _is_sticky, edge_fault
    from evaluators.types import Status

    assert not _is_sticky(RuntimeError("cudaErrorLaunchOutOfResources at shape (4096, 7168)"))  # not 716
    assert _is_sticky(RuntimeError("CUresult 716")) and _is_sticky(RuntimeError("CUDA error: 700"))
    assert not _is_sticky(RuntimeError("kernel faulted at shape (700, 7168): cudaErrorInvalidValue"))
    refused = KernelFault(Status.LAUNCH_ERROR, "launch (700, 1, 1)x(128, 1, 1) smem 0 at shape (700, 64) "
                          "refused: cudaErrorInvalidValue: invalid argument", fatal=False)
    assert edge_fault(refused, "a timed launch") is refused  # not an address fault
    fault = KernelFault(Status.CRASH, "kernel faulted: CUDA_ERROR_ILLEGAL_ADDRESS (700)", fatal=True)
    assert edge_fault(fault, "a timed launch").status == Status.WRONG_RESULT
