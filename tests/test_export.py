"""Export of the best kernels: PTX + cubin (real ptxas) + JSON card whose numbers equal the stored row's."""

import json

import pytest

from archive.export import export_best
from archive.grid import Dimension, GridArchive
from archive.store import CandidateRow, Store
from evaluators.types import EvalResult, ShapeResult, Status
from workloads.registry import get_workload


@pytest.fixture(scope="module")
def workload():
    return get_workload("rmsnorm")


def test_export_best_and_cells(tmp_path, workload):
    seed = workload.seeds()[0]
    store = Store(tmp_path / "run.sqlite")
    store.set_meta("gpu", "h200")
    store.set_meta("evaluator", "static")
    res = EvalResult(status=Status.OK, objective=1.37, estimate=True, eval_seconds=0.25,
                     features={"registers": 40.0, "active_warps": 48.0},
                     shapes=[ShapeResult(shape=(1000, 4096), dtype="bf16", time_us=9.75, gbps=1681.2,
                                         speedups={"torch": 1.37}, baseline_us={"torch": 13.3575}, estimate=True)])
    good = CandidateRow.from_eval(seed, res, cell=[1, 5])
    store.add_candidate(good)
    broken = CandidateRow.from_eval(seed, EvalResult(status=Status.OK, objective=0.8,
                                                     features={"registers": 20.0, "active_warps": 60.0}),
                                    cell=[0, 7])
    broken.identity = "f" * 64
    broken.ptx = seed.ptx.replace("ld.param.u64", "ld.param.u77", 1)  # ptxas refuses this one
    store.add_candidate(broken)
    archive = GridArchive([Dimension("registers", (0, 32, 64)), Dimension("active_warps", tuple(range(0, 72, 8)))])
    assert archive.add(good.id, good.objective, good.features).cell == (1, 5)
    assert archive.add(broken.id, broken.objective, broken.features).cell == (0, 7)

    out = tmp_path / "export"
    done = export_best(store, archive, out, workload)
    assert [k.name for k in done] == ["best", "cell_0_7", "cell_1_5"]
    best = done[0]
    assert best.candidate_id == good.id
    assert best.ptx_path.read_text() == seed.canonical_ptx  # the text the gate compiled (judged_ptx)
    assert best.cubin_path.read_bytes()[:4] == b"\x7fELF"
    card = json.loads(best.card_path.read_text())
    assert card["objective"] == 1.37 and card["identity"] == seed.identity
    assert card["shapes"] == store.get(good.id).metrics["shapes"]
    assert card["shapes"][0]["time_us"] == 9.75 and card["shapes"][0]["speedups"] == {"torch": 1.37}
    assert card["entry"] == "rmsnorm" and card["launch"] == seed.launch.to_json()
    assert [p["name"] for p in card["abi"]][:2] == ["x", "w"]
    assert card["launch_dims"] == [{"shape": [1000, 4096], "grid": [1000, 1, 1], "block": [256, 1, 1],
                                    "smem_bytes": 0}]
    assert card["method"] == {"evaluator": "static", "estimate": True, "eval_seconds": 0.25, "gate_version": None}
    assert card["gpu"] == "h200" and card["status"] == "ok" and card["cell"] == [1, 5]
    assert "release 13" in card["versions"]["ptxas"]
    assert card["cubin_source"] == "ptxas -arch=sm_90"
    assert card["lineage"] == [{"id": good.id, "operator": "seed", "objective": 1.37}]
    # the refused kernel is exported without a cubin and the card says why
    bad = done[1]
    assert bad.cubin_path is None and not (out / "cell_0_7.cubin").exists()
    assert "CompileError" in json.loads(bad.card_path.read_text())["cubin_error"]
    index = json.loads((out / "index.json").read_text())
    assert [(i["name"], i["objective"], i["cell"]) for i in index] == \
           [("best", 1.37, [1, 5]), ("cell_0_7", 0.8, [0, 7]), ("cell_1_5", 1.37, [1, 5])]


def test_export_uses_stored_cubin_and_needs_an_ok_row(tmp_path):
    store = Store(tmp_path / "run.sqlite")
    with pytest.raises(ValueError, match="no ok candidate"):
        export_best(store, None, tmp_path / "x")
    store.add_candidate(CandidateRow(identity="a" * 64, status="ok", objective=2.0, ptx="// no ptx needed\n",
                                     cubin=b"\x7fELFstored"))
    done = export_best(store, None, tmp_path / "x")
    assert len(done) == 1 and done[0].cubin_path.read_bytes() == b"\x7fELFstored"
    assert json.loads(done[0].card_path.read_text())["cubin_source"] == "store"


def test_export_reads_run_config_from_store_meta(tmp_path, workload):
    seed = workload.seeds()[0]
    store = Store(tmp_path / "run.sqlite")
    store.set_meta("config", {"workload": {"name": "rmsnorm", "options": {"dtype": "bf16"}},
                              "hardware": {"name": "h200", "arch": "sm_90a"}, "evaluator": {"kind": "static"}})
    store.add_candidate(CandidateRow.from_eval(seed, EvalResult(status=Status.OK, objective=1.0)))
    card = json.loads(export_best(store, None, tmp_path / "out")[0].card_path.read_text())
    assert (card["workload"], card["dtype"], card["gpu"], card["arch"]) == ("rmsnorm", "bf16", "h200", "sm_90a")
    assert card["method"]["evaluator"] == "static" and card["abi"][0] == {"name": "x", "kind": "input",
                                                                           "ptx_type": "u64"}
    assert card["objective_definition"].startswith("geomean speedup over ")
    assert card["cubin_source"] == "ptxas -arch=sm_90a" and card["versions"]["ptxforge"].startswith("0.1.0")


def test_the_export_runs_where_plotly_is_absent():
    """The kernels and their lineage need networkx only; the figures import plotly when drawn (on the GPU
    machine, whose wheel set may lack plotly, the whole export once failed on the module's import)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; sys.modules['plotly'] = None; sys.modules['plotly.graph_objects'] = None\n"
            "from archive.export import export_best\n"
            "import archive.lineage as L\n"
            "try:\n    L.family_tree_figure(L.nx.DiGraph())\nexcept ImportError:\n    print('figure needs plotly')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "figure needs plotly"


def test_cards_say_which_elites_lack_a_sanitizer_verdict(tmp_path, workload):
    """A verdict still owed at the end of the run (pending) or one the tool could not give (the engine marks the
    row "unverified: ...") shows on the card and in index.json; a checked elite's card says None."""
    seed = workload.seeds()[0]
    store = Store(tmp_path / "run.sqlite")
    dims = [Dimension("registers", (0, 32, 64)), Dimension("active_warps", tuple(range(0, 72, 8)))]
    archive = GridArchive(dims)
    rows = []
    for i, (regs, pend) in enumerate([(40.0, True), (20.0, False), (50.0, False)]):
        row = CandidateRow.from_eval(seed, EvalResult(status=Status.OK, objective=1.0 + i,
                                                      features={"registers": regs, "active_warps": 8.0 * (i + 1)}))
        row.identity = f"{i}" * 64
        store.add_candidate(row)
        archive.add(row.id, row.objective, row.features, pending=pend)
        rows.append(row)
    store.update_candidate(rows[1].id, reason="unverified: sanitizer verdict skipped: memcheck gave no verdict")
    done = export_best(store, archive, tmp_path / "export", workload)
    got = {json.loads(k.card_path.read_text())["candidate_id"]: json.loads(k.card_path.read_text())["unverified"]
           for k in done}
    assert got[rows[0].id].startswith("pending")
    assert got[rows[1].id] == "unverified: sanitizer verdict skipped: memcheck gave no verdict"
    assert got[rows[2].id] is None
    index = json.loads((tmp_path / "export" / "index.json").read_text())
    assert index[0]["name"] == "best" and index[0]["unverified"] is None  # rows[2], objective 3.0
