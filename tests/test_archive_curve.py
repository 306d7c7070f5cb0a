"""experiments/archive_curve.py: QD score, coverage and best objective after e evaluations, rebuilt from a store
(checked on the gate-5 random-search run recorded on an H200: its log printed these numbers)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "experiments" / "data" / "rmsnorm_gate5_random_s1.sqlite.xz"


@pytest.fixture(scope="module")
def curve():
    spec = importlib.util.spec_from_file_location("archive_curve", ROOT / "experiments" / "archive_curve.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["archive_curve"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_curve_of_a_recorded_run_matches_its_log(curve, tmp_path):
    pts, archive, cp = curve.archive_curve(STORE, [291, 100, 400])
    assert [p.evaluations for p in pts] == [100, 291, 291]  # past the run's end: its final archive
    assert pts[0].best == pytest.approx(0.7411, abs=1e-4) and pts[0].qd_score == pytest.approx(5.719, abs=1e-3)
    assert pts[0].n_elites == 10
    # the run's last line: "291 evaluations, best objective 0.7724, QD score 9.189, coverage 3.1%"
    assert pts[1].best == pytest.approx(0.7724, abs=1e-4) and pts[1].qd_score == pytest.approx(9.189, abs=1e-3)
    assert pts[1].n_elites == 18 and pts[1].coverage == pytest.approx(0.031, abs=5e-4)
    assert curve.rebuilt_equals_checkpoint(archive, cp)
    with pytest.raises(ValueError):
        curve.archive_curve(STORE, [0])
    out = tmp_path / "c.json"
    assert curve.main([str(STORE), "--at", "100", "--json", str(out)]) == 0
    assert '"rebuilt_equals_checkpoint": true' in out.read_text()


def test_cli_run_dir_past_the_end_and_missing_store(curve, tmp_path, capsys):
    """A run dir stands for its store.sqlite; a count past the run's end says where the run ended instead of
    repeating the final numbers; a missing store is one line on stderr with status 2, not a traceback."""
    import lzma
    import shutil

    run = tmp_path / "06-33-21-658-47dd"
    run.mkdir()
    with lzma.open(STORE, "rb") as src, (run / "store.sqlite").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    assert curve.main([str(run), "--at", "291,400"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "06-33-21-658-47dd: final archive equals the checkpoint's"
    assert out[1].startswith("  after   291 evaluations: best 0.7724  QD 9.189  coverage 3.1%  elites 18")
    assert out[2] == "  after   400 evaluations: the run ended after 291"
    assert curve.main([str(tmp_path / "nope.sqlite"), "--at", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: recorded store {str(tmp_path / 'nope.sqlite')!r}: no such file"
    assert curve.main([str(tmp_path), "--at", "10"]) == 2
    assert "a directory without store.sqlite" in capsys.readouterr().err
