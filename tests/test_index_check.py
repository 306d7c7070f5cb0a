"""The index check (gate rules version 7, evaluators/gpu/index_check.py), on the CPU: RMSNorm's index shape and
its checked rows, the schedule that runs it, and dry runs on the CuPy and VMM stand-in (tests/cupy_standin.py)
at a scaled-down limit (2^16 elements, 64 KiB granules, 64 KiB chunks: the same code, a shape of 17 x 4096)
with emulated kernels: an honest one passes; rt_index32's signed 32-bit wrap faults in the guard below x; an
index taken mod the limit (reads the repeated filler) and a write of the checked rows elsewhere (leaves the
poison) are wrong; the driver calls, device operations and synchronisations it costs, first use and kept."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from evaluators.gpu import index_check as ic
from evaluators.gpu.gate_schedule import INDEX_PERIOD, GateSchedule, select
from tests import cupy_standin as sd
from workloads.rmsnorm import RMSNorm

LIMIT = 1 << 16
SHAPE = (17, 4096)  # 69632 elements: row 16 holds elements 65536 and up


def test_rmsnorm_declares_one_shape_257_rows_past_2_to_the_31_elements():
    """Gate rules version 8: 257 rows past element 2^31 (was one, 16385 x 131072): whole CTAs of any power-of-two
    row count up to 256 and a tail row (red-team rt_index_tail64, tests/test_redteam_round5.py)."""
    wl = RMSNorm("bf16")
    assert wl.index_shapes == ((16641, 131072),)
    (m, n), = wl.index_shapes
    assert m * n == 2**31 + 257 * n and ic.checked_rows((m, n)) == 16384 == m - 257
    assert all(a * b <= 2**31 for a, b in [*wl.search_shapes, *wl.benchmark_shapes, *wl.gate_shapes]), \
        "every other shape stays within 2^31 elements: the check is the only one past it"
    assert ic.row_inputs(wl, (m, n)) == ["x"]  # w's length is N, x's rows follow M
    with pytest.raises(ValueError, match="not more than"):
        ic.checked_rows((16384, 131072))


def test_the_index_check_runs_in_every_full_schedule_and_one_rotating_evaluation_in_four():
    assert select(36, 2, GateSchedule("full", 5, 9)).index and not select(36, 2, GateSchedule("v1", 0, 0)).index
    for key in (0, 5, 6, 77, 12345):
        runs = [select(36, 2, GateSchedule("rotating", k, key)).index for k in range(40)]
        for k in range(40 - INDEX_PERIOD + 1):
            assert sum(runs[k:k + INDEX_PERIOD]) == 1, (key, k)


def scaled_standin(monkeypatch: pytest.MonkeyPatch):
    """The CuPy and VMM stand-in (tests/cupy_standin.py) installed for one test at the scaled-down limit: LIMIT
    (2^16) elements, 64 KiB granules and 64 KiB chunks. Returns the stand-in ``cupy`` module."""
    cupy = sd.install(monkeypatch)
    monkeypatch.setattr(sd, "GRANULARITY", 64 << 10)
    monkeypatch.setattr(ic, "INDEX_LIMIT", LIMIT)
    monkeypatch.setattr(ic, "CHUNK_BYTES", 64 << 10)
    return cupy


@pytest.fixture
def cp(monkeypatch):
    return scaled_standin(monkeypatch)


class Small(RMSNorm):
    """RMSNorm with a scaled-down index shape (the stand-in emulates the limit, not 8 GiB)."""

    index_shapes = (SHAPE,)


def rms_bits(x_bits: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    import ml_dtypes

    x = (x_bits.astype(np.uint32) << 16).view(np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        r = np.float32(1) / np.sqrt((x * x).mean(axis=1, dtype=np.float32) + np.float32(eps))
        return (x * r[:, None] * w).astype(ml_dtypes.bfloat16).view(np.uint16)


def row_launch(rows: Callable[[int, int, int], tuple[int, int]]):
    """An emulated RMSNorm launch (x, w, y, M, N, eps; bf16 x and y, fp32 w) on the CuPy stand-in, row by row:
    row r of an (M, N) launch is read from flat element index src of x and written at dst of y, where
    (src, dst) = rows(r, M, N). The first row whose bytes are not all mapped (``sd.readable`` / ``sd.writable``)
    faults the launch (``sd.fault``) and ends it."""

    def run(grid, block, args):
        x_ptr, w_ptr, y_ptr, m, n, eps = (int(args[0]), int(args[1]), int(args[2]), int(args[3]), int(args[4]),
                                          float(args[5]))
        w = sd.host_view(w_ptr, (n,), np.float32)
        for r in range(m):
            src, dst = rows(r, m, n)
            if not sd.readable(x_ptr + 2 * src, 2 * n) or not sd.writable(y_ptr + 2 * dst, 2 * n):
                sd.fault()
                return
            row = sd.host_view(x_ptr + 2 * src, (1, n), np.uint16)
            sd.host_view(y_ptr + 2 * dst, (1, n), np.uint16)[...] = rms_bits(row, w, eps)

    return run


def twin(mode: str = "honest"):
    """An emulated RMSNorm launch (x, w, y, M, N, eps) row by row; the scaled limit applies at SHAPE only.
    ``wrap``: rt_index32, the flat index of a row
    past the limit wrapped as a signed int of the scaled limit (idx - 2 LIMIT): it reads below x, which faults
    where nothing is mapped; ``mod``: rows past the limit read and written at idx mod LIMIT; ``read_mod``: read
    there, written where they belong."""

    def rows(r: int, m: int, n: int) -> tuple[int, int]:
        idx = r * n
        if (m, n) != SHAPE:  # every other shape holds fewer than 2^31 elements on the GPU: nothing wraps
            idx = -1
        src = dst = max(idx, r * n)
        if idx >= LIMIT and mode == "wrap":
            src = dst = idx - 2 * LIMIT
        elif idx >= LIMIT and mode in ("mod", "read_mod"):
            src = idx % LIMIT
            dst = src if mode == "mod" else idx
        return src, dst

    return row_launch(rows)


def launcher(cp, name):
    from evaluators.gpu.args import param_types
    from evaluators.gpu.worker import make_launcher

    seed = RMSNorm("bf16").seeds()[1]
    return make_launcher(Small("bf16"), cp, sd._Function(name), param_types(seed), seed.launch.to_json())


def test_the_row_buffers_are_backed_by_a_repeated_chunk_their_checked_rows_by_memory_of_their_own(cp):
    wl = Small("bf16")
    s = ic.IndexSet(wl, SHAPE, {"x": ((17, 4096), np.uint16), "y": ((17, 4096), np.uint16)})
    gran, drv = 64 << 10, sd.DRIVER[0]
    for b in s.buffers.values():
        # 136 KiB in 3 granules: 56 KiB of head, rows 0-15 from 56 KiB, row 16 at 184 KiB in granule 2 (own)
        assert b.ptr + b.nbytes == b.base + 3 * gran and b.own_ptr == b.base + 2 * gran
        assert b.maps == [(b.base, gran), (b.base + gran, gran), (b.base + 2 * gran, gran)]
        assert b.allocations == [(b.base, gran), (b.base + 2 * gran, gran)]
        assert not drv.readable(b.ptr + b.nbytes, 1)  # the granule after: unmapped
        assert not drv.readable(b.base - 1, 1) and not drv.readable(b.ptr - 2 * LIMIT, 1)  # the guard
        assert b.ptr + 2 * 16 * 4096 >= b.own_ptr  # the checked row lies in own memory
    x = s.buffers["x"]
    sd.host_view(x.base, (4,), np.uint8)[...] = 7  # the chunk's first bytes...
    assert (sd.host_view(x.base + gran, (4,), np.uint8) == 7).all()  # ...are the second map's: one chunk
    assert (sd.host_view(x.own_ptr, (4,), np.uint8) != 7).all()  # own memory is not the chunk
    s.close()
    assert drv.access == {} and drv.reserved == {} and drv.handles == {}


def test_an_honest_kernel_passes_and_the_kept_mappings_cost_no_driver_call_the_second_time(cp):
    sd.KERNELS["honest"] = twin()
    wl, run, cache = Small("bf16"), launcher(cp, "honest"), ic.IndexCheckSets()
    counts = []
    for seed in (3, 4):
        sd.COUNTS.clear()
        bad, notes = ic.index_check(wl, run, SHAPE, seed, cache)
        assert bad is None and notes == {"shape": [17, 4096], "checked_rows": [16, 17]}
        counts.append(dict(sd.COUNTS))
    # x and y: granularity, reserve, 2 creates, 3 maps with their access each = 10 calls; then none
    assert counts[0]["vmm"] == 2 * 10 and counts[1].get("vmm", 0) == 0
    # per check 20 device operations: 2 + 2 memsets (each buffer's chunk once and its own memory), the rows drawn
    # (make_inputs of the checked rows and w), x's checked rows written in, y's poisoned, the launch, the
    # reference kernel, the comparison; 2 kernels (the launch, the reference) and 2 synchronisations (the
    # launch's, the comparison's)
    assert (counts[1]["op"], counts[1]["kernel"], counts[1]["sync"]) == (20, 2, 2), counts[1]
    assert counts[1]["op"] == counts[0]["op"], counts
    cache.close()
    assert sd.DRIVER[0].access == {}


def test_a_32_bit_signed_index_faults_in_the_guard_below_x(cp):
    from evaluators.gpu.worker import KernelFault

    sd.KERNELS["wrap"] = twin("wrap")
    with pytest.raises(KernelFault) as e:
        ic.index_check(Small("bf16"), launcher(cp, "wrap"), SHAPE, 3, ic.IndexCheckSets())
    assert e.value.fatal and "IllegalAddress" in str(e.value)


@pytest.mark.parametrize("mode, what", [("mod", "never written"), ("read_mod", "out of tolerance")])
def test_an_index_taken_modulo_the_limit_meets_the_filler_or_leaves_the_poison(cp, mode, what):
    """Aliasing cannot hide it: the checked rows' memory is mapped once, at their own addresses."""
    sd.KERNELS[mode] = twin(mode)
    bad, _ = ic.index_check(Small("bf16"), launcher(cp, mode), SHAPE, 3)
    assert bad is not None and "rows 16-16, past element 2^31" in bad, bad
    n_poison = int(bad.split(" NaN, ")[1].split(" never")[0])
    assert (n_poison == 4096) == (what == "never written"), bad
    assert sd.DRIVER[0].access == {}  # made and freed without a cache


def test_the_worker_runs_the_index_check_when_the_schedule_selects_it_and_a_fault_is_wrong_result(cp):
    from tests.test_standin_dryrun import kernel_twin, request, worker_state

    sd.KERNELS["honest"] = kernel_twin()
    sd.KERNELS["wrap"] = twin("wrap")
    st = worker_state(cp)
    st.workload = Small("bf16")
    from evaluators.gpu.index_check import IndexCheckSets

    st.index_sets = IndexCheckSets()
    full = GateSchedule("full", 0, 0).to_json()
    reply, fatal = st.evaluate(request(b"honest", bench=(), gate_schedule=full))
    assert reply["status"] == "ok" and not fatal and reply["notes"]["index_check"] == "shape [17, 4096], rows [16, 17]"
    skipped = GateSchedule("rotating", 1, 0).to_json()
    assert not select(0, 0, GateSchedule.from_json(skipped)).index
    reply, _ = st.evaluate(request(b"wrap", bench=(), gate_schedule=skipped))
    assert reply["status"] == "ok" and "index_check" not in reply["notes"]  # rt_index32 passes everything else
    reply, fatal = st.evaluate(request(b"wrap", bench=(), gate_schedule=full))
    assert reply["status"] == "wrong_result" and fatal, reply
    assert "index check at shape (17, 4096)" in reply["reason"] and "32 bits" in reply["reason"]
