"""Lineage DAG and figures from a hand-built store."""

import json

import plotly.io as pio
import pytest

from archive.grid import Dimension, GridArchive
from archive.lineage import (
    build_graph,
    family_tree_figure,
    graph_to_json,
    heatmap_figure,
    heatmap_figures,
    lineage_figure,
    lineage_path,
    lineage_steps,
    save_figure_json,
)
from archive.store import CandidateRow, Store


@pytest.fixture
def store(tmp_path):
    """seed(1) -> a(2) -> b(4) -> d(6, best); a -> c(3, compile_error); seed2(5); crossover e(7) of b and seed2."""
    s = Store(tmp_path / "run.sqlite")

    def add(ident, parents, op, edit, status="ok", obj=None, reason=""):
        return s.add_candidate(CandidateRow(identity=ident, parents=parents, operator=op, edit_text=edit,
                                            status=status, objective=obj, reason=reason))

    add("seed", [], "seed", "", obj=1.0)
    add("a", ["seed"], "hints", "MODIFIER 12 +nc", obj=1.2)
    add("c", ["a"], "llm", "REPLACE 3-4\nadd.s32 %r1, %r2, <b>;\nEND", status="compile_error",
        reason="ptxas error")
    add("b", ["a"], "unroll", "DELETE 7", obj=1.5)
    add("seed2", [], "seed", "", obj=0.9)
    add("d", ["b"], "launch", "LAUNCH block=512,1,1", obj=1.8)
    add("e", ["b", "seed2"], "crossover", "KNOBS vec=8", obj=1.1)
    return s


def test_graph_and_best_lineage(store):
    g = build_graph(store)
    assert g.number_of_nodes() == 7
    assert sorted(g.edges) == [(1, 2), (2, 3), (2, 4), (4, 6), (4, 7), (5, 7)]
    assert g.edges[5, 7]["order"] == 1 and g.edges[4, 7]["order"] == 0
    assert lineage_path(g, 7) == [1, 2, 4, 7]  # follows the primary parent
    steps = lineage_steps(store)
    assert [s["id"] for s in steps] == [1, 2, 4, 6]
    assert [s["operator"] for s in steps] == ["seed", "hints", "unroll", "launch"]
    assert [s["objective"] for s in steps] == [1.0, 1.2, 1.5, 1.8]
    assert steps[0]["delta"] is None and steps[3]["delta"] == pytest.approx(0.3)
    assert steps[2]["ratio"] == pytest.approx(1.25)
    assert steps[1]["edit_text"] == "MODIFIER 12 +nc"
    with pytest.raises(KeyError):
        lineage_path(g, 99)
    nl = graph_to_json(g)
    assert len(nl["nodes"]) == 7 and len(nl["edges"]) == 6


def test_figures(store, tmp_path):
    fig = lineage_figure(store)
    assert list(fig.data[0].x) == [0, 1, 2, 3] and list(fig.data[0].y) == [1.0, 1.2, 1.5, 1.8]
    assert "LAUNCH block=512,1,1" in fig.data[0].hovertext[3]
    tree = family_tree_figure(store)
    assert len(tree.data[1].x) + len(tree.data[2].x) == 7
    assert sorted(tree.data[1].customdata) == [1, 2, 4, 5, 6, 7] and list(tree.data[2].customdata) == [3]
    assert list(tree.data[1].marker.color) == [1.0, 1.2, 1.5, 0.9, 1.8, 1.1]
    # model-written edit text is escaped before Plotly renders it
    failed_hover = tree.data[2].hovertext[0]
    assert "&lt;b&gt;" in failed_hover and "<b>" not in failed_hover
    # depth of d is 3 (seed -> a -> b -> d)
    assert tree.data[1].x[list(tree.data[1].customdata).index(6)] == 3
    p = save_figure_json(tree, tmp_path / "fig" / "tree.json")
    assert len(pio.read_json(p).data) == 3
    assert json.loads(p.read_text())["layout"]["title"]["text"].startswith("Family tree (7 candidates")


def test_heatmaps():
    a = GridArchive([Dimension("x", (0, 1, 2)), Dimension("y", (0, 1, 2, 3)), Dimension("z", (0, 1))])
    a.add(1, 2.0, {"x": 0.5, "y": 2.5, "z": 0.5})
    a.add(2, 3.0, {"x": 1.5, "y": 0.5, "z": 0.5})
    fig = heatmap_figure(a, "x", "y")
    z = fig.data[0].z
    assert len(z) == 3 and len(z[0]) == 2
    assert z[2][0] == 2.0 and z[0][1] == 3.0 and z[1][0] is None
    assert list(fig.data[0].x) == ["(0, 1]", "(1, 2]"]
    assert sorted(heatmap_figures(a)) == ["x__y", "x__z", "y__z"]
    with pytest.raises(KeyError):
        heatmap_figure(a, "x", "nope")


def test_empty_store_has_no_best(tmp_path):
    with pytest.raises(ValueError, match="no candidate with status ok"):
        lineage_steps(Store(tmp_path / "e.sqlite"))
