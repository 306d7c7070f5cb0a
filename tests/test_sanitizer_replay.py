"""The sanitizer replay in the benchmark's layout (gate rules version 7), on the CPU: which shapes it replays
(``sanitizer.replay_plan``), the spec ``sanitize`` hands each tool, and a dry run of ``sanitize_replay.replay``
on the CuPy and VMM stand-in (tests/cupy_standin.py) with emulated kernels: what a kernel sees at each launch
(its inputs' placement, protection and the shape), the driver calls and synchronisations it costs, and the two
fourth-round dodges keyed on what the replay used to differ in (rt_edge_race: placement; rt_sanitizer_dodge
RT_SENSE 3: the shape), which now take their racy path at a replayed launch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evaluators.gpu.sanitizer import SANITIZER_SHAPES, replay_plan
from tests import cupy_standin as sd
from workloads.rmsnorm import EPS, EPS_DRAWS, RMSNorm


def edge_race_careful(x_ptr: int, w_ptr: int, m: int, n: int, elt: int = 2) -> bool:
    """rt_edge_race.cu's test: the barrier is kept unless x + M N and w + N both end 64 KiB aligned."""
    return ((x_ptr + m * n * elt) | (w_ptr + 4 * n)) & 0xFFFF != 0


def sense3_careful(m: int, n: int) -> bool:
    """rt_sanitizer_dodge.cu RT_SENSE 3's test: the barrier is kept at every gate and fixed replay shape."""
    return n % 256 != 0 or n in (8192, 28672, 262144) or m < 1024


def test_the_replay_runs_the_fixed_shapes_in_both_layouts_and_the_smallest_timed_shape_as_the_benchmark_does():
    wl = RMSNorm("bf16")
    plan = replay_plan(wl.search_shapes)
    fixed = [list(s) for s in SANITIZER_SHAPES]
    assert plan == {"shapes": fixed, "edge_shapes": [*fixed, [32768, 512]]}
    assert replay_plan(wl.benchmark_shapes)["edge_shapes"] == [*fixed, [32768, 256], [32768, 512], [32768, 1024]]
    assert replay_plan([]) == {"shapes": fixed, "edge_shapes": fixed}
    assert replay_plan([(8, 8), (2, 2)], [(3, 5)]) == {"shapes": [[3, 5]], "edge_shapes": [[3, 5], [8, 8], [2, 2]]}


def test_rt_sanitizer_dodge_sense_3_keeps_its_barrier_wherever_the_replay_ran_and_drops_it_at_the_timed_shape():
    """The premise of RT_SENSE 3 (kept at every gate and fixed replay shape, dropped at every search shape) and
    why the replay now sees its race: the smallest search shape is replayed."""
    wl = RMSNorm("bf16")
    assert all(sense3_careful(m, n) for m, n in [*wl.gate_shapes, *SANITIZER_SHAPES])
    assert not any(sense3_careful(m, n) for m, n in wl.search_shapes)
    assert [s for s in replay_plan(wl.search_shapes)["edge_shapes"] if not sense3_careful(*s)] == [[32768, 512]]


@pytest.fixture
def cp(monkeypatch):
    return sd.install(monkeypatch)


def rms_bits(x_bits: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    import ml_dtypes

    x = (x_bits.astype(np.uint32) << 16).view(np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        r = np.float32(1) / np.sqrt((x * x).mean(axis=1, dtype=np.float32) + np.float32(eps))
        return (x * r[:, None] * w).astype(ml_dtypes.bfloat16).view(np.uint16)


def spy_twin(seen: list[dict]):
    """An emulated RMSNorm launch (x, w, y, M, N, eps) that records what a kernel could see and writes the right
    answer; its last record's ``racy`` says whether rt_edge_race would have dropped its barrier there."""

    def twin(grid, block, args):
        x_ptr, w_ptr, y_ptr, m, n, eps = (int(args[0]), int(args[1]), int(args[2]), int(args[3]), int(args[4]),
                                          float(args[5]))
        seen.append({"shape": (m, n), "eps": eps, "x_ro": not sd.writable(x_ptr, 2), "w_ro": not sd.writable(w_ptr, 4),
                     "past_x": sd.readable(x_ptr + m * n * 2, 1), "past_w": sd.readable(w_ptr + 4 * n, 1),
                     "racy": not edge_race_careful(x_ptr, w_ptr, m, n)})
        x = sd.host_view(x_ptr, (m, n), np.uint16)
        w = sd.host_view(w_ptr, (n,), np.float32)
        sd.host_view(y_ptr, (m, n), np.uint16)[...] = rms_bits(x, w, eps)

    return twin


def replay_spec(tmp_path: Path, name: str, shapes, edge_shapes) -> dict:
    from evaluators.gpu.args import param_types

    seed = RMSNorm("bf16").seeds()[1]
    cubin = tmp_path / f"{name}.cubin"
    cubin.write_bytes(name.encode())  # the stand-in's Module loads an emulated kernel by name
    spec = {"workload": RMSNorm("bf16").spec(), "shapes": [list(s) for s in shapes],
            "edge_shapes": [list(s) for s in edge_shapes], "seed": 7,
            "kernels": [{"id": 0, "cubin": str(cubin), "entry": seed.entry, "param_types": param_types(seed),
                         "launch": seed.launch.to_json()}]}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    return spec


def test_replay_places_the_edge_shapes_inputs_as_the_benchmark_does(cp, tmp_path, capsys):
    """Exact layout: nothing past x and w is mapped read-only-unmapped, the inputs are writable plain memory.
    Edge layout: both inputs read-only, each ending at an unmapped granule (so 64 KiB aligned: rt_edge_race's
    racy path), every output right; 9 VMM driver calls per input and edge launch (granularity, reserve, create,
    map, read-write access, read-only access, unmap, release, free), one synchronisation per launch and one per
    output read back plus the placement's one, and every mapping freed afterwards."""
    from evaluators.gpu.sanitize_replay import load_spec, replay

    seen: list[dict] = []
    sd.KERNELS["spy"] = spy_twin(seen)
    spec = replay_spec(tmp_path, "spy", [(7, 760)], [(7, 760), (64, 512)])
    assert load_spec(tmp_path / "spy.json")["edge_shapes"] == [[7, 760], [64, 512]]
    sd.COUNTS.clear()
    results = replay(spec)
    assert [(r["shape"], r["placement"], r["ok"]) for r in results] == [
        ([7, 760], "exact", True)] + [([7, 760], "edge", True)] * 3 + [([64, 512], "edge", True)] * 3
    exact, *edge = seen
    assert not exact["x_ro"] and not exact["racy"]  # a 2-call exact allocation: not where the benchmark's sit
    assert all(e["x_ro"] and e["w_ro"] and not e["past_x"] and not e["past_w"] and e["racy"] for e in edge), edge
    # the exact layout at the workload's eps; each edge shape at every eps the timed launches draw (version 9),
    # each checked against the reference at its own eps
    eps = [float(np.float32(e)) for e in EPS_DRAWS]
    assert [e["eps"] for e in seen] == [float(np.float32(EPS))] + eps * 2
    assert [r["params"] for r in results] == [{}] + [{"eps": e} for e in EPS_DRAWS] * 2
    assert sd.COUNTS["vmm"] == 6 * 9 * 2 and sd.COUNTS["kernel"] == 7
    assert sd.COUNTS["sync"] == 7 * 2 + 6  # per launch its synchronisation and y read back; per placement one
    assert sd.DRIVER[0].access == {} and sd.DRIVER[0].reserved == {} and sd.ALLOCATOR == [None]
    assert "\"placement\": \"edge\"" in capsys.readouterr().out


def test_replay_falls_back_to_exact_buffers_with_a_note_when_the_driver_refuses_vmm(cp, tmp_path, capsys,
                                                                                     monkeypatch):
    from evaluators.gpu import sanitize_replay, vmm

    def refuse(*a, **k):
        raise vmm.VMMError("cuMemCreate failed: CUDA_ERROR_NOT_SUPPORTED")

    monkeypatch.setattr(vmm, "place_at_edges", refuse)
    seen: list[dict] = []
    sd.KERNELS["spy"] = spy_twin(seen)
    results = sanitize_replay.replay(replay_spec(tmp_path, "spy", [(7, 760)], [(64, 512)]))
    assert [r["placement"] for r in results] == ["exact"] + ["exact (VMM refused)"] * 3
    assert all(r["ok"] for r in results)
    assert "edge layout not used at [64, 512]" in capsys.readouterr().out and not seen[1]["x_ro"]


def test_a_kernel_wrong_only_where_its_inputs_sit_as_the_benchmarks_do_fails_the_replay(cp, tmp_path):
    """rt_edge_race's race made visible (a wrong row where it drops its barrier): the replay's output check fails
    it at the edge launches whose inputs end flush at the granule, as racecheck sees its hazard there."""
    from evaluators.gpu.sanitize_replay import replay

    seen: list[dict] = []
    honest = spy_twin(seen)

    def edge_race(grid, block, args):
        honest(grid, block, args)
        if seen[-1]["racy"]:
            m, n = int(args[3]), int(args[4])
            sd.host_view(int(args[2]), (m, n), np.uint16)[0] ^= np.uint16(0x4000)

    sd.KERNELS["edge_race"] = edge_race
    results = replay(replay_spec(tmp_path, "edge_race", SANITIZER_SHAPES, SANITIZER_SHAPES))
    # 7 x 4099: x is 57386 bytes, no multiple of 16, so it ends up to 15 bytes before the granule (its start
    # stays 16-byte aligned), in the benchmark's layout as here: no racy path there
    assert [r["ok"] for r in results] == [True] * 3 + [False] * 3 + [True] * 3 + [False] * 3  # 3 eps each


def test_load_spec_refuses_malformed_edge_shapes(tmp_path):
    from evaluators.gpu.sanitize_replay import load_spec

    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"k")
    base = {"workload": {}, "shapes": [[1, 2]], "seed": 1, "cubin": str(cubin), "entry": "k", "param_types": [],
            "launch": {}}
    for bad in ([[0, 4]], [[]], "32768x512", [[1.5, 2]]):
        (tmp_path / "s.json").write_text(json.dumps({**base, "edge_shapes": bad}))
        with pytest.raises(ValueError, match="edge_shapes"):
            load_spec(tmp_path / "s.json")
    (tmp_path / "s.json").write_text(json.dumps(base))  # absent: no edge launches (specs written before)
    assert "edge_shapes" not in load_spec(tmp_path / "s.json")


def test_sanitize_hands_every_tool_the_fixed_shapes_in_both_layouts_and_the_pools_smallest_timed_shape(
        monkeypatch):
    """``sanitize`` (what GPUPool.sanitize calls with its timed shapes): every tool's first spec holds the fixed
    shapes in both layouts, its second 32768 x 512 alone in the benchmark's (``replay_phases``: a kernel with an
    error at the fixed shapes never pays for the timed one, tests/test_sanitizer_phases.py); a clean replay gives
    OK."""
    from evaluators.gpu import sanitizer
    from evaluators.types import Status

    specs = []

    def fake_tool(tool, spec_path, timeout_s, exe, env=None, **cap):
        spec = json.loads(Path(spec_path).read_text())
        specs.append((tool, spec))
        replay = [{"kernel": k["id"], "shape": s, "ok": True} for k in spec["kernels"]
                  for s in spec["shapes"] + spec["edge_shapes"]]
        return sanitizer.ToolRun(tool, 0, replay, 0, 0.1, "")

    monkeypatch.setattr(sanitizer, "run_tool", fake_tool)
    wl = RMSNorm("bf16")
    v = sanitizer.sanitize(wl.seeds()[1:], wl, arch="sm_90", exe="/bin/true", timed_shapes=wl.search_shapes)
    assert [x.status for x in v] == [Status.OK]
    assert [t for t, _ in specs] == list(sanitizer.ELITE_TOOLS) * 2
    fixed = [list(s) for s in SANITIZER_SHAPES]
    for i, (_, spec) in enumerate(specs):
        want = (fixed, fixed) if i < len(sanitizer.ELITE_TOOLS) else ([], [[32768, 512]])
        assert (spec["shapes"], spec["edge_shapes"]) == want, i


@pytest.mark.parametrize("name", ["rmsnorm", "softmax", "kda_recurrent", "kda_chunk"])
def test_every_spec_sanitize_writes_passes_the_replays_own_check(name, monkeypatch):
    """The specs ``sanitize`` writes are read by ``sanitize_replay.load_spec`` in the tool's process; a shape the
    reader refuses (it once took only [M, N], so every KDA verdict was SKIPPED on the H200: "'shapes' must be a
    list of [M, N], got [[1, 17], [3, 1, 63, 17], ...]") leaves every elite of that workload unverified."""
    from evaluators.gpu import sanitizer
    from evaluators.gpu.sanitize_replay import load_spec
    from evaluators.types import Status
    from workloads.registry import get_workload

    seen = []

    def checking_tool(tool, spec_path, timeout_s, exe, env=None, **cap):
        spec = load_spec(spec_path)  # raises as the tool's process would
        seen.append([tuple(s) for s in spec["shapes"] + spec["edge_shapes"]])
        replay = [{"kernel": k["id"], "shape": s, "ok": True} for k in spec["kernels"]
                  for s in spec["shapes"] + spec["edge_shapes"]]
        return sanitizer.ToolRun(tool, 0, replay, 0, 0.1, "")

    monkeypatch.setattr(sanitizer, "run_tool", checking_tool)
    wl = get_workload(name)
    v = sanitizer.sanitize(wl.seeds()[:1], wl, arch="sm_90", exe="/bin/true", timed_shapes=wl.search_shapes)
    assert [x.status for x in v] == [Status.OK], v[0].reason
    assert set(wl.sanitizer_shape_list()) <= {s for shapes in seen for s in shapes}


def test_a_stale_replay_launch_finds_its_own_answer_in_its_outputs(cp):
    """Version 13: the replay's "stale" launches emulate the timed launches' stale outputs (an earlier launch's
    result on the same inputs): the outputs hold the launch's own reference in the output's type, no poison."""
    from evaluators.gpu.gate import reference_for
    from evaluators.gpu.sanitize_replay import _fill_outputs
    from workloads.dtypes import as_bits, from_float

    wl = RMSNorm("bf16")
    shape = (7, 256)
    host = wl.make_inputs(shape, 3, "normal", np)
    own = reference_for(wl, host, np, {"eps": 1e-5})
    outs = {"y": cp.empty(shape, dtype=cp.uint16)}
    assert _fill_outputs(outs, wl, shape, "stale", 1, 2, {"eps": 1e-5}, cp, own=own) is None
    want = as_bits(from_float(own["y"], "bf16", np), "bf16", np)
    assert np.array_equal(cp.asnumpy(outs["y"]), want)
    with pytest.raises(ValueError, match="own reference"):
        _fill_outputs(outs, wl, shape, "stale", 1, 2, {}, cp)
