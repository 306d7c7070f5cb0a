"""How ``sanitizer.sanitize`` schedules its tool runs (``replay_phases``): the fixed shapes first, the timed shape
only for kernels still clean, batches split on failure. The tool is a stand-in executable that reads the replay
spec it is given, logs it and reports errors by a rule (a kernel racy at the fixed shapes, one racy only at the
timed shape); the real tool's verdicts are tests/gpu's (test_gate_cases.py, test_gate_redteam*.py)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from evaluators.gpu.sanitizer import SANITIZER_SHAPES, replay_phases, replay_plan, sanitize, tool_command
from evaluators.types import Status
from workloads.rmsnorm import RMSNorm

FAKE = '''#!{python}
import json, os, sys
args = sys.argv[1:]
tool = args[args.index("--tool") + 1]
spec = json.load(open(args[args.index("--spec") + 1]))
rules = json.loads(os.environ["FAKE_RULES"])  # tool -> kernel id -> "fixed" | "timed"
ids = [k["id"] for k in spec["kernels"]]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({{"tool": tool, "ids": ids, "shapes": spec["shapes"], "edge": spec["edge_shapes"],
                         "api": args[args.index("--report-api-errors") + 1]}}) + "\\n")
timed = [32768, 512] in spec["edge_shapes"]
errors = 0
for k in ids:
    print(json.dumps({{"begin": k}}))
    print(json.dumps({{"kernel": k, "shape": [7, 4099], "ok": True}}))
    where = rules.get(tool, {{}}).get(str(k))
    errors += 3 if where == "fixed" or (where == "timed" and timed) else 0
print(f"========= ERROR SUMMARY: {{errors}} errors")
'''


def stand_in(tmp_path: Path, script: str, monkeypatch) -> tuple[str, Path]:
    """An executable ``compute-sanitizer`` in ``tmp_path`` running ``script`` (a template with ``{python}``),
    and the log file it is told about (FAKE_LOG)."""
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(script.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "runs.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    return str(exe), log


@pytest.fixture
def fake(tmp_path, monkeypatch):
    return stand_in(tmp_path, FAKE, monkeypatch)


def runs(log: Path) -> list[dict]:
    return [json.loads(ln) for ln in log.read_text().splitlines()]


def test_replay_phases_split_the_plan_into_fixed_shapes_then_timed_shapes():
    wl = RMSNorm("bf16")
    fixed, timed = replay_phases(wl.search_shapes)
    fixed_shapes = [list(s) for s in SANITIZER_SHAPES]
    assert fixed == {"shapes": fixed_shapes, "edge_shapes": fixed_shapes}
    assert timed == {"shapes": [], "edge_shapes": [[32768, 512]]}
    plan = replay_plan(wl.search_shapes)  # together they are the whole plan
    assert fixed["edge_shapes"] + timed["edge_shapes"] == plan["edge_shapes"]
    assert replay_phases(()) == [fixed]  # no timed shapes: one phase


def test_a_kernel_racy_at_the_fixed_shapes_never_reaches_the_timed_shape(fake, monkeypatch):
    exe, log = fake
    wl = RMSNorm("bf16")
    kernels = [wl.seeds()[0], wl.seeds()[1], wl.instantiate({"rows_per_cta": 4})]
    monkeypatch.setenv("FAKE_RULES", json.dumps({"racecheck": {"1": "fixed", "2": "timed"}}))
    v = sanitize(kernels, wl, arch="sm_90", exe=exe, timed_shapes=wl.search_shapes)
    assert [x.status for x in v] == [Status.OK, Status.SANITIZER, Status.SANITIZER]
    assert v[1].reason == v[2].reason == "compute-sanitizer racecheck: 3 error(s)"
    assert v[0].tools == {t: {"errors": 0, "clean": True} for t in ("memcheck", "racecheck", "synccheck")}
    seen = [(r["tool"], r["ids"], [32768, 512] in r["edge"]) for r in runs(log)]
    assert seen == [
        ("memcheck", [0, 1, 2], False), ("racecheck", [0, 1, 2], False),  # the batch, then split
        ("racecheck", [0], False), ("racecheck", [1], False), ("racecheck", [2], False),
        ("synccheck", [0, 2], False),
        ("memcheck", [0, 2], True), ("racecheck", [0, 2], True),  # the timed shape: kernel 1 is out
        ("racecheck", [0], True), ("racecheck", [2], True),
        ("synccheck", [0], True)]
    assert all(r["api"] == "no" for r in runs(log))
    assert v[2].tools["racecheck"] == {"errors": 3, "clean": False}  # 0 at the fixed shapes + 3 at the timed


def test_the_tool_command_reports_device_errors_only():
    cmd = tool_command("cs", "racecheck", "s.json")
    assert cmd[:9] == ["cs", "--tool", "racecheck", "--print-limit", "20", "--report-api-errors", "no",
                       "--racecheck-report", "all"]
    assert cmd[-4:] == ["-m", "evaluators.gpu.sanitize_replay", "--spec", "s.json"]
    assert "--racecheck-report" not in tool_command("cs", "memcheck", "s.json")


def test_a_batch_of_one_kernel_is_not_run_again_alone(fake, monkeypatch):
    """A racy kernel alone in its batch: each tool runs once per phase it reaches (the split of a one-kernel batch
    would repeat the same run, and at the timed shape a racy kernel's racecheck can take minutes)."""
    exe, log = fake
    wl = RMSNorm("bf16")
    monkeypatch.setenv("FAKE_RULES", json.dumps({"racecheck": {"0": "timed"}}))
    v = sanitize([wl.instantiate({"rows_per_cta": 4})], wl, arch="sm_90", exe=exe, timed_shapes=wl.search_shapes)
    assert (v[0].status, v[0].reason) == (Status.SANITIZER, "compute-sanitizer racecheck: 3 error(s)")
    seen = [(r["tool"], [32768, 512] in r["edge"]) for r in runs(log)]
    assert seen == [("memcheck", False), ("racecheck", False), ("synccheck", False),
                    ("memcheck", True), ("racecheck", True)]


def test_a_timed_out_batch_of_one_is_its_verdict(fake, monkeypatch):
    import subprocess

    from evaluators.gpu import sanitizer

    exe, _ = fake
    calls = []

    def hang(tool, spec, timeout_s, exe, env, **cap):
        calls.append(tool)
        raise subprocess.TimeoutExpired([exe], timeout_s)

    monkeypatch.setattr(sanitizer, "run_tool", hang)
    wl = RMSNorm("bf16")
    v = sanitize([wl.seeds()[0]], wl, arch="sm_90", exe=exe, timeout_s=7.0)
    assert (v[0].status, v[0].reason) == (Status.SANITIZER, "compute-sanitizer memcheck: timed out after 7 s")
    assert calls == ["memcheck"]


def test_the_timed_phase_runs_only_the_tools_asked_for_it(fake, monkeypatch):
    """timed_tools=("racecheck",): every tool at the fixed shapes, racecheck alone at the timed shape; a race seen
    only there is still caught."""
    exe, log = fake
    wl = RMSNorm("bf16")
    monkeypatch.setenv("FAKE_RULES", json.dumps({"racecheck": {"1": "timed"}}))
    kernels = [wl.seeds()[0], wl.instantiate({"rows_per_cta": 4})]
    v = sanitize(kernels, wl, arch="sm_90", exe=exe, timed_shapes=wl.search_shapes, timed_tools=("racecheck",))
    assert [x.status for x in v] == [Status.OK, Status.SANITIZER]
    seen = [(r["tool"], r["ids"], [32768, 512] in r["edge"]) for r in runs(log)]
    assert seen == [("memcheck", [0, 1], False), ("racecheck", [0, 1], False), ("synccheck", [0, 1], False),
                    ("racecheck", [0, 1], True), ("racecheck", [0], True), ("racecheck", [1], True)]
    assert v[0].tools["memcheck"] == {"errors": 0, "clean": True}  # from the fixed shapes alone


def test_the_pool_refuses_timed_tools_it_does_not_run_before_starting_a_worker():
    from evaluators.gpu.pool import GPUPool

    with pytest.raises(ValueError, match=r"sanitizer_timed_tools \['initcheck'\] are not in sanitizer_tools"):
        GPUPool(RMSNorm("bf16"), sanitizer_timed_tools=["initcheck"])


def test_each_workload_replays_its_own_small_shapes_and_no_varlen_shape_passes_for_small(fake, monkeypatch):
    """KDA under RMSNorm's fixed shapes replayed (3, 28672): 28672 serial tokens of the naive seed, instrumented,
    held the GPU's timing lock past every tool's timeout (H200, 2026-12-02: a KDA search stalled after its first
    evaluation). And numpy's int64 product of (64, 1024 x 8) wraps to 0, so the varlen shapes passed for "at most
    2^25 elements" and joined the timed phase."""
    import numpy as np

    from workloads.kda.recurrent import SANITIZER_SHAPES as KDA_SHAPES
    from workloads.registry import get_workload

    exe, log = fake
    monkeypatch.setenv("FAKE_RULES", "{}")
    kda = get_workload("kda_recurrent")
    assert int(np.prod((64, *(1024,) * 8))) == 0  # the wrap the plan no longer trusts
    phases = replay_phases(kda.search_shapes, kda.sanitizer_shape_list())
    assert phases[1]["edge_shapes"] == [[64, *(1,) * 32]]  # the decode batch alone: the smallest
    v = sanitize([kda.seeds()[0]], kda, arch="sm_90", exe=exe, timed_shapes=kda.search_shapes, tools=("memcheck",))
    assert v[0].status == Status.OK
    fixed, timed = runs(log)
    assert fixed["shapes"] == [list(s) for s in KDA_SHAPES] == fixed["edge"]
    assert timed["shapes"] == [] and timed["edge"] == [[64, *(1,) * 32]]
    assert RMSNorm("bf16").sanitizer_shape_list() == [tuple(s) for s in SANITIZER_SHAPES]
    assert get_workload("softmax").sanitizer_shape_list() == get_workload("softmax").gate_shapes  # the default
