"""The H200 factory run's verification and report, on a real small run made with the static evaluator.

The run is produced by ``python -m evolve experiment=rmsnorm_cpu_smoke`` in a subprocess (Hydra is never called
inside pytest); the GPU-only phases are exercised through the static dry run, and the report is checked
against a crafted verify.json whose numbers are known.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import rmsnorm_h200_report as report  # noqa: E402
import rmsnorm_h200_verify as verify  # noqa: E402
import sanitize_replay  # noqa: E402

from archive.lessons import Lessons  # noqa: E402
from archive.lineage import lineage_steps  # noqa: E402
from archive.store import Store  # noqa: E402
from workloads.rmsnorm import BENCHMARK_SHAPES, HELDOUT_SHAPES, RMSNorm  # noqa: E402

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("factory") / "run"
    subprocess.run([sys.executable, "-m", "evolve", "experiment=rmsnorm_cpu_smoke", f"hydra.run.dir={d}",
                    "budget.evaluations=14", "knowledge=null"], cwd=ROOT, env=_env(), check=True,
                   capture_output=True, timeout=300)
    assert (d / "store.sqlite").is_file()
    return d


def _crafted(run: Path, copy: float = 4000.0, big_frac: float = 0.9) -> dict:
    """A verify.json with known times: best t, naive 3t, torch 1.2t, torch.compile 0.95t, template 1.5t;
    at shapes of 32768 x 4096 and above the best runs at ``big_frac`` of ``copy``."""
    with Store(run / "store.sqlite", readonly=True) as s:
        best = s.best()
    wl = RMSNorm("bf16")
    shapes = []
    for i, sh in enumerate(BENCHMARK_SHAPES):
        if wl.bytes_moved(sh) >= wl.bytes_moved((32768, 4096)):
            t = wl.bytes_moved(sh) / (big_frac * copy * 1e9) * 1e6
        else:
            t = 10.0 + 7.0 * i
        shapes.append({"shape": list(sh), "dtype": "bf16", "time_us": t, "gbps": wl.gbps(sh, t),
                       "frac_copy": wl.gbps(sh, t) / copy,
                       "baseline_us": {"naive": 3 * t, "torch": 1.2 * t, "torch_compile": 0.95 * t},
                       "speedups": {}, "estimate": False})
    template = [{**s, "time_us": 1.5 * s["time_us"], "baseline_us": {}} for s in shapes]
    naive = [{**s, "time_us": 3 * s["time_us"], "baseline_us": {}} for s in shapes]
    held = [{"shape": list(sh), "dtype": "bf16", "time_us": 5.0, "gbps": wl.gbps(sh, 5.0)} for sh in HELDOUT_SHAPES]
    return {
        "schema": 1, "mode": "gpu", "estimate": False, "started_utc": "2026-11-30T02:00:00Z",
        "finished_utc": "2026-11-30T02:03:00Z", "run_dir": str(run), "dtype": "bf16", "device": "NVIDIA H200",
        "copy_gbps": copy, "versions": {"torch": "2.11.0"},
        "shapes": {"benchmark": [list(s) for s in BENCHMARK_SHAPES], "heldout": [list(s) for s in HELDOUT_SHAPES],
                   "sanitizer": [[199, 1128]], "ncu": [32768, 4096]},
        "finalists": {"best": {"candidate_id": best.id, "operator": best.operator, "search_objective": 1.5},
                      "template": {"candidate_id": 2, "operator": "seed", "search_objective": 1.2},
                      "naive": {"candidate_id": 1, "operator": "seed", "search_objective": 1.0}},
        "benchmark": {"best": {"status": "ok", "reason": "", "objective": 1.2, "shapes": shapes},
                      "template": {"status": "ok", "reason": "", "objective": 0.8, "shapes": template},
                      "naive": {"status": "ok", "reason": "", "objective": 0.4, "shapes": naive}},
        "heldout": {"best": {"status": "ok", "reason": "", "shapes": held}},
        "sanitizer": {"memcheck": {"errors": 0, "clean": True, "summary_lines": ["ERROR SUMMARY: 0 errors"]},
                      "racecheck": {"errors": 0, "clean": True, "summary_lines": ["ERROR SUMMARY: 0 errors"]}},
        "ncu": {"shape": [32768, 4096], "read_bytes": 2.7e8, "write_bytes": 2.69e8, "total_bytes": 5.39e8,
                "time_us": 140.0, "model_bytes": wl.bytes_moved((32768, 4096))},
        "search_timeline": {"rows": 14, "startup_s": 40.0, "search_s": 330.0, "teardown_s": 5.0, "total_s": 375.0},
        "phases": [{"name": "benchmark:best", "status": "done", "seconds": 30.0}],
    }


def test_report_numbers_equal_the_inputs(run_dir: Path, tmp_path: Path) -> None:
    data = _crafted(run_dir)
    vpath = tmp_path / "verify.json"
    vpath.write_text(json.dumps(data))
    numbers = report.write_report(run_dir, vpath, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    shapes = data["benchmark"]["best"]["shapes"]
    # geomeans from the per-shape times, computed independently of the report code
    for name, factor in (("naive", 3.0), ("torch", 1.2), ("torch_compile", 0.95), ("template", 1.5)):
        want = math.exp(sum(math.log(s["baseline_us"].get(name, factor * s["time_us"]) / s["time_us"])
                            for s in shapes) / len(shapes))
        assert numbers["verdicts"]["geomeans"][name] == pytest.approx(want, rel=1e-12)
        assert want == pytest.approx(factor)
    assert "| **geomean** |" in md and "**3.00x**" in md and "**0.95x**" in md and "**1.20x**" in md
    # per-shape cells: µs and GB/s of the best kernel at 32768 x 4096 (90% of 4000 GB/s)
    row = next(r for r in numbers["rows"] if r["shape"] == [32768, 4096])
    assert row["gbps"]["best"] == pytest.approx(3600.0)
    assert row["us"]["naive"] == pytest.approx(3 * row["us"]["best"])
    line = next(ln for ln in md.splitlines() if ln.startswith("| 32768 x 4096 |"))
    assert f"| {row['us']['best']:.1f} | 3600 | 90 |" in line and line.endswith("| 3.00x | 1.20x | 0.95x | 1.50x |")
    v = numbers["verdicts"]
    assert v["gate"] is True and v["held_out"] is True and v["sanitizer_clean"] is True
    assert v["roofline_target_met"] is True
    assert set(v["frac_copy_large"]) == {"32768x4096", "32768x8192", "32768x16384", "32768x32768", "32768x65536",
                                         "16384x131072", "8192x262144"}
    assert all(f == pytest.approx(0.9) for f in v["frac_copy_large"].values())
    # the store-derived sections equal the store
    with Store(run_dir / "store.sqlite", readonly=True) as s:
        assert numbers["status_counts"] == s.status_counts()
        steps = lineage_steps(s, data["finalists"]["best"]["candidate_id"])
        lessons = Lessons(s).rows()
    assert [x["id"] for x in numbers["lineage"]] == [x["id"] for x in steps]
    improved = {r["operator"] for r in lessons if r["improved"] and r["operator"] != "seed"}
    assert set(numbers["helped"]) == improved
    assert set(numbers["never_helped"]) == {r["operator"] for r in lessons if r["operator"] != "seed"} - improved
    for fig in ("bandwidth.png", "search.png", "lineage.png"):
        assert (tmp_path / "rep" / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "539.0 MB moved" in md and "ESTIMATES, NO GPU" not in md
    assert "start-up 40.0 s" in md


def test_roofline_target_fails_below_85_percent(run_dir: Path, tmp_path: Path) -> None:
    data = _crafted(run_dir, big_frac=0.8)
    data["sanitizer"]["racecheck"] = {"errors": 2, "clean": False, "summary_lines": ["ERROR SUMMARY: 2 errors"]}
    vpath = tmp_path / "verify.json"
    vpath.write_text(json.dumps(data))
    v = report.write_report(run_dir, vpath, tmp_path / "rep")["verdicts"]
    assert v["roofline_target_met"] is False and v["sanitizer_clean"] is False
    assert v["sanitizer"] == {"memcheck": True, "racecheck": False}
    assert "**NO** (32768x4096: 80%" in (tmp_path / "rep" / "report.md").read_text()


def test_static_dry_run_verify_then_report(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "verify.json"
    data = verify.verify(run_dir, out, deadline_s=300, evaluator="static")
    assert json.loads(out.read_text())["phases"] == data["phases"]
    status = {p["name"]: p["status"] for p in data["phases"]}
    assert all(status[f"sanitize:{t}"] == "skipped" for t in verify.SANITIZER_TOOLS)
    assert status["ncu"] == "skipped"
    assert status["benchmark:best"] == status["heldout:best"] == status["benchmark:naive"] == "done"
    assert data["estimate"] is True
    best = data["benchmark"]["best"]
    assert [tuple(s["shape"]) for s in best["shapes"]] == BENCHMARK_SHAPES
    assert all(s["estimate"] for s in best["shapes"])
    assert [tuple(s["shape"]) for s in data["heldout"]["best"]["shapes"]] == HELDOUT_SHAPES
    with Store(run_dir / "store.sqlite", readonly=True) as s:
        assert data["finalists"]["best"]["candidate_id"] == s.best().id
        assert data["finalists"]["naive"]["candidate_id"] == 1
    numbers = report.write_report(run_dir, out, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert numbers["estimate"] is True and "ESTIMATES, NO GPU" in md
    # the naive column of the dry run is the static model's naive-seed baseline
    for r, s in zip(numbers["rows"], best["shapes"]):
        assert r["us"]["naive"] == pytest.approx(s["baseline_us"]["naive_seed"])


def test_deadline_cuts_phases_and_report_says_why(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "verify.json"
    data = verify.verify(run_dir, out, deadline_s=5.0, evaluator="static")
    status = {p["name"]: p for p in data["phases"]}
    assert status["benchmark:best"]["status"] == "cut"
    assert "needs ~45 s" in status["benchmark:best"]["note"]
    numbers = report.write_report(run_dir, out, tmp_path / "rep")  # the rest of the report is still written
    md = (tmp_path / "rep" / "report.md").read_text()
    assert numbers["rows"] == [] and numbers["verdicts"]["geomean_vs_naive"] is None
    assert "matrix was not measured** (cut: " in md and "| geomean |" not in md
    assert not (tmp_path / "rep" / "bandwidth.png").exists() and (tmp_path / "rep" / "search.png").exists()


def test_sanitizer_summary_parsing() -> None:
    mem = "========= COMPUTE-SANITIZER\n{\"ok\": true}\n========= ERROR SUMMARY: 0 errors\n"
    assert verify.parse_sanitizer(mem) == {"errors": 0, "summary_lines": ["ERROR SUMMARY: 0 errors"]}
    race = ("========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"
            "========= ERROR SUMMARY: 1 error\n")
    p = verify.parse_sanitizer(race)
    assert p["errors"] == 1 and p["summary_lines"][0].startswith("RACECHECK SUMMARY: 1 hazard")
    assert verify.parse_sanitizer("Traceback: no summary")["errors"] is None


def test_replay_spec_roundtrip_and_errors(tmp_path: Path) -> None:
    wl = RMSNorm("bf16")
    naive = wl.seeds()[0]
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\x7fELF")
    spec = sanitize_replay.build_spec(naive, wl, cubin, [(199, 1128), (7, 4099)])
    assert spec["param_types"] == ["u64", "u64", "u64", "u32", "u32", "f32"]
    assert spec["shapes"] == [[199, 1128], [7, 4099]] and spec["launch"]["block"] == [256, 1, 1]
    p = tmp_path / "spec.json"
    p.write_text(json.dumps(spec))
    assert sanitize_replay.load_spec(p) == spec
    p.write_text(json.dumps({k: v for k, v in spec.items() if k != "entry"}))
    with pytest.raises(ValueError, match=r"spec.json: spec lacks \['entry'\]"):
        sanitize_replay.load_spec(p)
    p.write_text(json.dumps({**spec, "shapes": [[5, 0]]}))
    with pytest.raises(ValueError, match="'shapes' must be"):
        sanitize_replay.load_spec(p)
    assert sanitize_replay.main(["--spec", str(tmp_path / "missing.json")]) == 2


def test_search_timeline_from_rows() -> None:
    class Row:
        def __init__(self, created: float, eval_seconds: float) -> None:
            self.created, self.eval_seconds = created, eval_seconds

    rows = [Row(1050.0, 2.0), Row(1100.0, 0.5), Row(1390.0, 0.5)]
    t = verify.search_timeline(rows, {"seconds": 341.0, "evaluations": 682}, started=1000.0, ended=1400.0)
    assert t == {"rows": 3, "startup_s": 48.0, "search_s": 341.0, "teardown_s": 10.0, "total_s": 400.0,
                 "evaluations_per_s": 2.0}
    assert verify.search_timeline([], None, None, None)["startup_s"] is None


def test_report_rejects_bad_inputs(tmp_path: Path) -> None:
    bad = tmp_path / "verify.json"
    bad.write_text("{not json")
    with pytest.raises(report.ReportError, match=r"verify\.json: cannot read"):
        report.load_verify(bad)
    bad.write_text(json.dumps({"schema": 1}))
    with pytest.raises(report.ReportError, match="no 'phases' key"):
        report.load_verify(bad)
    m = tmp_path / "metrics.jsonl"
    m.write_text('{"evaluations": 1}\n{oops\n')
    with pytest.raises(report.ReportError, match=r"metrics.jsonl:2: not JSON"):
        report.load_metrics(m)


def test_factory_driver_dry_run(tmp_path: Path) -> None:
    out, run = tmp_path / "out", tmp_path / "run"
    env = {**_env(), "EVALUATOR": "static", "SEARCH_S": "4", "TOTAL_S": "240", "VERIFY_MIN_S": "60",
           "RUN": str(run), "OUT": str(out), "EVOLVE_ARGS": "knowledge=null logger=none budget.evaluations=6"}
    env.pop("PYTHONPATH")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "h200_factory.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    log = (out / "factory.log").read_text()
    for step in ("start:", "search: python3 -m evolve experiment=rmsnorm_h200", "search ended rc=0", "verify (deadline",
                 "verify ended rc=0", "report -> report.tar.gz", "pack", "done: search rc=0 verify rc=0"):
        assert step in log, step
    assert "DRY RUN" in log
    assert sorted(p.name for p in out.iterdir()) == ["factory.log", "report.tar.gz", "run.tar.gz", "verify.json"]
    data = json.loads((out / "verify.json").read_text())
    assert data["estimate"] is True and data["search_timeline"]["rows"] == 6
    assert data["search_timeline"]["startup_s"] > 0 and data["search_timeline"]["teardown_s"] >= 0
    with Store(run / "store.sqlite", readonly=True) as s:
        assert s.count() == 6


def test_racecheck_summary_gives_the_error_count() -> None:
    parse_sanitizer = verify.parse_sanitizer
    assert parse_sanitizer("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")["errors"] == 0
    assert parse_sanitizer("========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warnings)")["errors"] == 2
    assert parse_sanitizer("no summary at all")["errors"] is None
