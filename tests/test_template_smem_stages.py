"""RMSNorm template: the shared-memory staging path (``smem_stages``) and the push-model cluster reduction
(``cluster_push``), without a GPU: knob validation, the launch rule's dynamic shared memory, byte-identical PTX at
the default knobs, ptxas resources (registers, spills, shared memory) and occupancy of the long-row candidates,
the static front half (input-store check, race lint), a CPU model of the staging schedule and the mbarrier
phases, and the ``--long-rows`` study's table with a stand-in pool."""

from __future__ import annotations

import re

import pytest

from population.kernel import LaunchConfig
from workloads.cuda_build import build_ptx
from workloads.rmsnorm import (
    DTYPE_MACRO,
    KNOB_MACROS,
    LONG_ROW_CANDIDATES,
    MAX_DYNAMIC_SMEM,
    TUNED_KNOBS,
    RMSNorm,
    stage_bytes,
)

NEW_KNOBS = ("smem_stages", "cluster_push")
CANDIDATES = [(n, k) for n, sets in LONG_ROW_CANDIDATES.items() for k in sets]


def _id(kn: dict[str, int]) -> str:
    return "-".join(f"{k}{v}" for k, v in kn.items())


# ----------------------------------------------------------------------------------------- knobs and launch


def test_new_knobs_validate_with_clear_messages():
    wl = RMSNorm("bf16")
    k = wl.check_knobs({})
    assert k["smem_stages"] == 0 and k["cluster_push"] == 0 and len(k) == len(KNOB_MACROS) == 12
    assert wl.knob_space["smem_stages"] == (0, 1, 2) and wl.knob_space["cluster_push"] == (0, 1)
    assert wl.check_knobs({"cluster_push": 1})["cluster_push"] == 1  # no effect without a cluster, but legal
    for bad, msg in [({"smem_stages": 3}, "smem_stages=3"), ({"smem_stages": -1}, "smem_stages=-1"),
                     ({"smem_stages": 1, "vec": 4}, "smem_stages=1: needs 16-byte accesses"),
                     ({"smem_stages": 1, "keep_in_regs": 0}, "smem_stages=1: needs keep_in_regs=1"),
                     ({"smem_stages": 2, "threads": 1024, "max_chunks": 8}, "smem_stages=2: .* exceeds"),
                     ({"cluster_push": 2}, "cluster_push=2")]:
        with pytest.raises(ValueError, match=msg):
            wl.check_knobs(bad)
    # fp32 x: 16-byte accesses are vec 4
    assert RMSNorm("fp32").check_knobs({"smem_stages": 1, "vec": 4})["smem_stages"] == 1
    with pytest.raises(ValueError, match="smem_stages=1"):
        RMSNorm("fp32").check_knobs({"smem_stages": 1, "vec": 2})


def test_stage_bytes_and_launch_rule():
    wl = RMSNorm("bf16")
    assert stage_bytes({}) == 0 and stage_bytes(wl.default_knobs) == 0
    assert stage_bytes({"smem_stages": 1, "threads": 256, "max_chunks": 8}) == 32768
    assert stage_bytes({"smem_stages": 2, "threads": 512, "max_chunks": 8}) == 131072
    assert MAX_DYNAMIC_SMEM < 227 * 1024
    full = wl.check_knobs({"threads": 256, "cluster": 4, "smem_stages": 1, "cluster_push": 1})
    launch = LaunchConfig(block=(256, 1, 1), knobs=tuple(full.items()), dynamic_smem_bytes=stage_bytes(full))
    grid, block, smem = wl.launch_dims((199, 65536), launch)
    assert grid == (4 * 199, 1, 1) and block == (256, 1, 1) and smem == 32768
    # an edit that lowers the dynamic size cannot starve the staging buffer; a larger one is kept
    assert wl.launch_dims((199, 65536), LaunchConfig(block=(256, 1, 1), knobs=launch.knobs))[2] == 32768
    bigger = LaunchConfig(block=(256, 1, 1), knobs=launch.knobs, dynamic_smem_bytes=40000)
    assert wl.launch_dims((199, 65536), bigger)[2] == 40000
    # today's sets launch as before: no dynamic shared memory
    for knobs in TUNED_KNOBS.values():
        k = wl.check_knobs(knobs)
        assert wl.launch_dims((7, 4096), LaunchConfig(block=(k["threads"], 1, 1), knobs=tuple(k.items())))[2] == 0


def test_candidates_hold_each_row_and_fit_shared_memory():
    wl = RMSNorm("bf16")
    assert set(LONG_ROW_CANDIDATES) <= {n for _, n in wl.benchmark_shapes}
    for n, knobs in CANDIDATES:
        k = wl.check_knobs(knobs)
        capacity = k["max_chunks"] * k["vec"] * k["threads"] // k["rows_per_cta"] * k["cluster"]
        assert capacity == n, f"N={n}: {knobs} holds {capacity} elements"
        assert 0 < stage_bytes(k) <= 131072 or not k["smem_stages"]


# ------------------------------------------------------------------------------------- byte-identical defaults

IDENTITY_SETS = [("bf16", TUNED_KNOBS[65536]), ("bf16", TUNED_KNOBS[262144]), ("bf16", TUNED_KNOBS[512]),
                 ("bf16", {"threads": 512, "cluster": 4, "row_iters": 2, "rows_per_cta": 2, "cache_hint": 1}),
                 ("fp32", {"threads": 512, "cluster": 8, "max_chunks": 8})]


@pytest.mark.parametrize("dtype,knobs", IDENTITY_SETS, ids=[f"{d}-{_id(k)}" for d, k in IDENTITY_SETS])
def test_default_new_knobs_leave_the_ptx_byte_identical(dtype, knobs):
    """smem_stages 0 and cluster_push 0 (passed as -D macros, as template_ptx does) give the PTX of the
    template compiled without the new macros: today's recorded kernels are unchanged."""
    wl = RMSNorm(dtype)
    k = wl.check_knobs(knobs)
    old_macros = {KNOB_MACROS[n]: v for n, v in k.items() if n not in NEW_KNOBS} | {"DTYPE": DTYPE_MACRO[dtype]}
    assert wl.template_ptx(k) == build_ptx("rmsnorm_template.cu", old_macros)
    ptx = wl.template_ptx(k)
    assert "cp.async" not in ptx and "st.async" not in ptx and "mbarrier" not in ptx


def test_cluster_push_without_a_cluster_is_the_plain_kernel():
    wl = RMSNorm("bf16")
    assert wl.template_ptx({"cluster_push": 1, "threads": 512}) == wl.template_ptx({"threads": 512})


# ------------------------------------------------------------------------------- ptxas resources, front half


@pytest.mark.parametrize("n,knobs", CANDIDATES, ids=[f"{n}-{_id(k)}" for n, k in CANDIDATES])
def test_candidates_assemble_and_pass_the_front_half(n, knobs):
    """ptxas -v for sm_90: no spills or stack, at most 48 registers (the row lives in shared memory), the static
    shared memory of the warp partials / cluster slots / mbarriers only, the dynamic size the launch rule gives,
    and the occupancy the design assumes (shared memory or warps, not registers, bound the CTAs per SM). Then
    evaluators.pipeline.prepare (ptxas, ABI, input-store check, race lint) accepts the kernel."""
    from evaluators.toolchain import compile_ptx
    from targets.occupancy import occupancy
    from tests.front_half import assert_accepted

    wl = RMSNorm("bf16")
    kern = wl.instantiate(knobs)
    k = wl.check_knobs(dict(kern.launch.knobs))  # late knobs at their defaults are left out
    res = compile_ptx(kern).resources["rmsnorm"]
    assert res.spill_stores_bytes == 0 and res.spill_loads_bytes == 0 and res.stack_frame_bytes == 0
    assert res.registers <= (48 if k["smem_stages"] else 64), res.registers
    assert res.shared_static_bytes <= 512, res.shared_static_bytes
    dyn = k["smem_stages"] * k["max_chunks"] * k["threads"] * 16
    assert kern.launch.dynamic_smem_bytes == dyn
    occ = occupancy(k["threads"], res.registers, res.shared_static_bytes, dynamic_shared_bytes=dyn)
    if k["smem_stages"]:
        # 1 KiB reserved per CTA; 228 KiB per SM: 32 KiB -> 6 CTAs, 64 KiB -> 3 (or 2048 threads for 1024)
        want = {32768: 6, 65536: 3 if k["threads"] < 1024 else 2}[dyn]
        assert occ.blocks_per_sm == want, occ
        assert occ.limiter in ("shared_memory", "warps", "registers"), occ
        if occ.limiter == "registers":  # a tie: registers allow no fewer CTAs than shared memory does
            assert 65536 // (res.registers * k["threads"]) == want
    ptx = kern.ptx
    if k["smem_stages"]:
        assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group" in ptx
        assert ".extern .shared .align 16 .b8 stage_buf[]" in ptx
        if k["smem_stages"] == 2:
            assert "cp.async.wait_group 1;" in ptx
    if k["cluster"] > 1:
        assert re.search(rf"\.reqnctapercluster {k['cluster']}, 1, 1", ptx)
    if k["cluster_push"] and k["cluster"] > 1:
        assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32" in ptx
        assert "mbarrier.arrive.expect_tx.shared::cta.b64" in ptx and "fence.mbarrier_init.release.cluster" in ptx
        assert "barrier.cluster.arrive.relaxed" in ptx
        # no cluster barrier per row: the start (one arrive) and the exit (cluster.sync) only
        assert len(re.findall(r"barrier\.cluster\.arrive", ptx)) == 2
    assert_accepted(kern, wl)


def test_push_and_staging_also_pass_with_row_groups_and_other_dtypes():
    """Corners: several row groups per CTA with a cluster (mbarrier arrival count = rows_per_cta), 16-lane row
    groups, fp16 and fp32 x (fp32: vec 4 is the 16-byte access)."""
    from evaluators.toolchain import compile_ptx
    from tests.front_half import assert_accepted

    for dtype, knobs in [("bf16", {"threads": 256, "rows_per_cta": 2, "cluster": 2, "smem_stages": 2,
                                   "row_iters": 3, "cluster_push": 1, "max_chunks": 4}),
                         ("bf16", {"threads": 128, "rows_per_cta": 8, "cluster": 2, "cluster_push": 1,
                                   "max_chunks": 2, "row_iters": 2}),
                         ("fp16", {"threads": 256, "cluster": 4, "smem_stages": 1, "cluster_push": 1}),
                         ("fp32", {"threads": 256, "vec": 4, "cluster": 8, "smem_stages": 1, "cluster_push": 1})]:
        wl = RMSNorm(dtype)
        kern = wl.instantiate(knobs)
        res = compile_ptx(kern).resources["rmsnorm"]
        assert res.spill_stores_bytes == 0 and res.stack_frame_bytes == 0, (dtype, knobs)
        assert_accepted(kern, wl)


@pytest.mark.parametrize("row_iters", [2, 4])
def test_push_on_the_register_path_with_a_row_loop_passes_the_front_half(row_iters):
    """The sets a search on the H200 reached (2026-12-03, seed 8: cluster_push with the row in registers and a row
    loop) were rejected by rule 4's mbarrier form while the wait was a C++ loop around one test: nvcc placed the
    barrier's address arithmetic inside that loop. The retry loop is now the asm's own: two instructions."""
    from tests.front_half import assert_accepted

    wl = RMSNorm("bf16")
    kern = wl.instantiate({"cache_hint": 1, "cluster": 2, "cluster_push": 1, "keep_in_regs": 1, "max_chunks": 2,
                           "min_blocks": 2, "row_iters": row_iters, "rows_per_cta": 2, "threads": 512, "vec": 4,
                           "w_regs": 1})
    waits = re.findall(r"(WAIT_\d+):\s*mbarrier\.try_wait\.parity\.shared::cta\.b64 (pw\d+), \[%r\d+\], %r\d+;"
                       r"\s*@!(pw\d+) bra (WAIT_\d+);", kern.ptx)
    assert waits and all(a == d and p == q for a, p, q, d in waits), waits
    assert kern.ptx.count("mbarrier.try_wait") == len(waits)
    assert_accepted(kern, wl)


# ------------------------------------------------------------------------------------------ CPU models


def stage_schedule(stages: int, iters: int) -> list[tuple[str, int, int]]:
    """One thread's staging events in program order, as rmsnorm_template.cu's rows_impl issues them: ("copy",
    row iteration, stage) and ("read", row iteration, stage) (the sum pass and the output pass each read)."""
    ev = [("copy", 0, 0)]  # prologue
    for it in range(iters):
        stage = (it & 1) if stages == 2 else 0
        if stages == 2 and it + 1 < iters:
            ev.append(("copy", it + 1, stage ^ 1))
        elif stages == 1 and it > 0:
            ev.append(("copy", it, 0))
        ev += [("read", it, stage), ("read", it, stage)]
    return ev


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("iters", [1, 2, 3, 4, 8])
def test_staging_schedule_reads_each_row_from_its_own_copy(stages, iters):
    """Every read of a stage sees the copy of the same row iteration (no later copy overwrote it first), the
    copies of the next row are in flight during this row's reads only with two stages, and the wait before the
    reads leaves exactly the prefetched group pending (wait_group 1) or none (wait_group 0)."""
    held: dict[int, int] = {}
    pending: list[int] = []
    for kind, it, stage in stage_schedule(stages, iters):
        if kind == "copy":
            held[stage] = it
            pending.append(it)
        else:
            allowed = 1 if (stages == 2 and it + 1 < iters) else 0
            pending = [p for p in pending if p > it][:allowed]  # wait_group: row it's group done
            assert held[stage] == it, f"iteration {it} reads stage {stage} holding row iteration {held[stage]}"
            assert all(p == it + 1 for p in pending)


@pytest.mark.parametrize("iters", [1, 2, 5, 8])
def test_mbarrier_parities_follow_the_phases(iters):
    """With cluster_push, row iteration it uses mbarrier it % 2 and waits for the parity of that barrier's
    (it // 2)-th phase: bits 0 and 1 of it & 3, what the template passes to row_sum."""
    phases = {0: 0, 1: 0}
    for it in range(iters):
        slot, parity = (it & 3) & 1, (it & 3) >> 1
        assert slot == it % 2 and parity == phases[slot] % 2
        phases[slot] += 1


STAGED_EMULATED = [*(k for _, k in CANDIDATES[:6]),
                   {"threads": 64, "rows_per_cta": 4, "max_chunks": 1, "row_iters": 3, "cluster": 2, "smem_stages": 2,
                    "cluster_push": 1}]


@pytest.mark.parametrize("knobs", STAGED_EMULATED, ids=_id)
def test_emulated_decomposition_of_the_staged_sets(knobs):
    """The work decomposition of the new sets (which CTA, thread and row iteration reads and writes which
    elements: tests/test_workload_template_v2.py's emulator, whose chunk mapping the staged path shares) writes
    every element once and matches the float64 reference on the small gate shapes and a few long rows."""
    from tests.test_workload_template_v2 import check_emulated

    check_emulated(knobs, [(3, 65544), (2, 100003)], seed0=300, equal_nan=True)


# ------------------------------------------------------------------------------------- the --long-rows study


def test_long_rows_study_lists_tuned_and_candidates(monkeypatch, tmp_path, capsys):
    """experiments/rmsnorm_baselines.py --long-rows with a stand-in pool: per N the TUNED_KNOBS set first,
    then every candidate (staging, then w in registers), each at the benchmark shape only, in a pool whose libraries
    get the fp32 w; then the TUNED_KNOBS sets again in a pool whose libraries get w in x's dtype. The table prints
    the weight definition, µs, % of copy and the ratio to the tuned set."""
    import experiments.rmsnorm_baselines as rb
    from evaluators.gpu import pool as pool_mod
    from evaluators.types import EvalResult, ShapeResult, Status
    from workloads.rmsnorm import LONG_ROW_CANDIDATES, WREG_CANDIDATES

    calls: list[tuple[dict[str, int], list, str]] = []

    class FakePool:
        copy_gbps = 4258.0
        info = [{"device": "stand-in"}]

        def __init__(self, wl, **kw):
            self.wl = wl

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def evaluate(self, kern, shapes, baselines):
            calls.append((dict(kern.launch.knobs), shapes, self.wl.baseline_weight))
            us = 100.0 if kern.launch.knobs and dict(kern.launch.knobs).get("smem_stages", 0) else 120.0
            s = ShapeResult(shapes[0], "bf16", us, self.wl.gbps(shapes[0], us), baseline_us={"torch": 200.0})
            return EvalResult(Status.OK, objective=1.0, shapes=[s])

    monkeypatch.setattr(pool_mod, "GPUPool", FakePool)
    assert rb.long_rows(RMSNorm("bf16"), [65536, 262144], 5, str(tmp_path / "out"), results_dir=None) == 0
    n65 = 1 + len(LONG_ROW_CANDIDATES[65536]) + len(WREG_CANDIDATES[65536])
    n262 = 1 + len(LONG_ROW_CANDIDATES[262144]) + len(WREG_CANDIDATES[262144])
    assert [c[1] for c in calls] == ([[(32768, 65536)]] * n65 + [[(8192, 262144)]] * n262
                                     + [[(32768, 65536)], [(8192, 262144)]])
    assert [c[2] for c in calls] == ["workload"] * (n65 + n262) + ["x", "x"]
    assert calls[-1][0] == calls[n65][0]  # the tuned 262144 set again, for the libraries' bf16 w
    assert "smem_stages" not in calls[0][0] and calls[1][0]["smem_stages"] == 1  # 0: left out (a late knob)
    assert calls[1 + len(LONG_ROW_CANDIDATES[65536])][0]["w_regs"] == 1
    out = capsys.readouterr().out
    assert "| 32768 x 65536 | workload | `tuned cluster=4 max_chunks=8 threads=256` | ok | 120.0 |" in out
    assert "| 32768 x 65536 | x | `tuned cluster=4 max_chunks=8 threads=256` | ok | 120.0 |" in out
    assert "1.200x" in out and (tmp_path / "out" / "rmsnorm_long_rows_bf16.md").is_file()


@pytest.mark.parametrize("knobs", [
    {"threads": 256, "cluster": 8, "max_chunks": 4, "w_regs": 1, "smem_stages": 2, "cluster_push": 1, "row_iters": 4},
    {"threads": 1024, "cluster": 8, "max_chunks": 4, "w_regs": 1, "smem_stages": 1, "cluster_push": 1},
], ids=["c8-staged2-push-iters4", "t1024-c8-staged1-push"])
def test_w_in_registers_on_the_staged_path(knobs):
    """w_regs on the staged path (WREG_CANDIDATES): the store loop takes w from the registers loaded before the row
    loop (a different kernel from the w_regs 0 one, which reads w per chunk there), ptxas spills nothing at <= 64
    registers, and the front half accepts it."""
    from evaluators.toolchain import compile_ptx
    from tests.front_half import assert_accepted
    from workloads.rmsnorm import WREG_CANDIDATES

    assert any(knobs == k for sets in WREG_CANDIDATES.values() for k in sets)
    wl = RMSNorm("bf16")
    kern = wl.instantiate(knobs)
    res = compile_ptx(kern).resources["rmsnorm"]
    assert res.spill_stores_bytes == 0 and res.spill_loads_bytes == 0 and res.registers <= 64, res
    assert kern.ptx != wl.instantiate({**knobs, "w_regs": 0}).ptx
    assert_accepted(kern, wl)
