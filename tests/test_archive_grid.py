"""GridArchive semantics: binning, replacement, ties, clipping, curiosity, QD metrics and state round trip."""

import json
import math

import numpy as np
import pytest

from archive.grid import (
    REGISTER_EDGES,
    Dimension,
    GridArchive,
    default_dimensions,
    dims_from_config,
)
from archive.metrics import area_under_curve, compute_stats, coverage


def small_archive(offset: float = 0.0) -> GridArchive:
    return GridArchive([Dimension("a", (0, 1, 2, 3)), Dimension("b", (0, 10, 20))], qd_offset=offset)


def test_default_dimensions_sm90_edges():
    dims = default_dimensions((9, 0))
    assert [d.name for d in dims] == ["registers", "active_warps", "traffic_ratio"]
    assert dims[0].edges == REGISTER_EDGES
    assert dims[0].edges[1:] == (32, 40, 48, 64, 80, 96, 128, 168, 255)
    assert dims[1].edges == (0, 8, 16, 24, 32, 40, 48, 56, 64)
    assert dims[2].edges[0] == 1.0 and dims[2].edges[-1] == pytest.approx(4.0)
    assert dims[2].n_bins == 8
    assert dims[2].edges[4] == pytest.approx(2.0)  # log-spaced: the midpoint of 1..4 is 2
    assert default_dimensions("sm_86")[1].edges[-1] == 48  # 48 warps/SM on sm_86
    assert default_dimensions("h200") == dims
    with pytest.raises(ValueError, match="unknown compute capability"):
        default_dimensions((1, 0))


def test_register_bins_at_occupancy_cliffs():
    d = default_dimensions((9, 0))[0]
    # right-closed: 32 regs still belongs to the full-occupancy bin, 33 does not
    assert [d.bin(r) for r in (1, 32, 33, 40, 41, 64, 65, 128, 129, 168, 169, 255)] == \
           [0, 0, 1, 1, 2, 3, 4, 6, 7, 7, 8, 8]


def test_register_edges_are_occupancy_cliffs():
    from targets.occupancy import occupancy

    for e in REGISTER_EDGES[1:-1]:
        assert occupancy(128, int(e)).active_warps > occupancy(128, int(e) + 1).active_warps, e
    assert [occupancy(128, int(e)).active_warps for e in REGISTER_EDGES[1:-1]] == [64, 48, 40, 32, 24, 20, 16, 12]


def test_clip_out_of_range_into_edge_cells():
    a = small_archive()
    assert a.index_of({"a": -5, "b": 100}) == (0, 1)
    assert a.index_of({"a": 1e9, "b": -1}) == (2, 0)
    assert a.index_of({"a": 1.5, "b": 10}) == (1, 0)
    assert a.index_of({"a": 1.0000001, "b": 10.5}) == (1, 1)
    with pytest.raises(ValueError, match="NaN"):
        a.index_of({"a": math.nan, "b": 1})
    with pytest.raises(KeyError, match="'b'"):
        a.index_of({"a": 1})


def test_add_new_improved_tie_not_added():
    a = small_archive(offset=0.5)
    r = a.add(1, 2.0, {"a": 0.5, "b": 5})
    assert (r.status, r.cell, r.previous, r.improvement) == ("new", (0, 0), None, 1.5)
    r = a.add(2, 2.0, {"a": 0.7, "b": 9})  # tie keeps the incumbent
    assert (r.status, r.previous, r.improvement) == ("not_added", 2.0, 0.0)
    assert a.get((0, 0)).candidate_id == 1
    r = a.add(3, 1.0, {"a": 0.1, "b": 1})
    assert (r.status, r.improvement) == ("not_added", -1.0)
    r = a.add(4, 3.25, {"a": 1.0, "b": 0})
    assert (r.status, r.cell, r.previous, r.improvement) == ("improved", (0, 0), 2.0, 1.25)
    assert 1 not in a and 4 in a
    assert a.get((0, 0)).candidate_id == 4
    assert a.add(5, 1.0, {"a": 2.5, "b": 15}).status == "new"
    assert a.remove(5).cell == (2, 1) and a.remove(5) is None and a.get((2, 1)) is None
    assert a.add(5, 1.0, {"a": 2.5, "b": 15}).status == "new"
    s = a.stats()
    assert s.n_elites == 2 and s.n_cells == 6
    assert s.qd_score == pytest.approx((3.25 - 0.5) + (1.0 - 0.5))
    assert s.coverage == pytest.approx(2 / 6)
    assert s.best == 3.25 and s.mean == pytest.approx(2.125)
    assert a.best().candidate_id == 4
    with pytest.raises(ValueError, match="finite"):
        a.add(6, math.inf, {"a": 0, "b": 0})


def test_empty_stats_and_metrics_helpers():
    s = small_archive().stats()
    assert (s.qd_score, s.coverage, s.best, s.mean, s.n_elites) == (0.0, 0.0, None, None, 0)
    assert compute_stats([1.0, 3.0], 4, 1.0).qd_score == 2.0
    with pytest.raises(ValueError):
        coverage(5, 4)
    assert area_under_curve([0, 10, 20], [0.0, 1.0, 1.0]) == pytest.approx(15.0)


def test_curiosity_credit_and_weighted_sampling():
    a = small_archive()
    a.add(1, 1.0, {"a": 0.5, "b": 5})
    a.add(2, 1.0, {"a": 1.5, "b": 5})
    for _ in range(4):
        assert a.credit(1, True)
    assert a.credit(2, False)
    assert a.elite_of(1).curiosity == 4.0 and a.elite_of(2).curiosity == -0.5
    assert a.credit(99, True) is False
    rng = np.random.default_rng(0)
    picks = [e.candidate_id for e in a.sample(rng, 4000, weighting="curiosity")]
    # weights shifted so the minimum weighs 1: elite 1 -> 4 - (-0.5) + 1 = 5.5, elite 2 -> 1
    assert picks.count(1) / len(picks) == pytest.approx(5.5 / 6.5, abs=0.03)
    uni = [e.candidate_id for e in a.sample(rng, 4000)]
    assert uni.count(1) / len(uni) == pytest.approx(0.5, abs=0.03)
    # replacing the elite resets curiosity (scores belong to individuals)
    a.add(3, 2.0, {"a": 0.5, "b": 5})
    assert a.elite_of(3).curiosity == 0.0 and a.credit(1, True) is False
    with pytest.raises(ValueError, match="empty"):
        small_archive().sample(rng, 1)


def test_state_round_trip_exact_through_json():
    a = GridArchive(default_dimensions((9, 0)), qd_offset=0.0)
    rng = np.random.default_rng(1)
    for i in range(200):
        a.add(i, float(rng.lognormal()), {"registers": float(rng.integers(16, 255)),
                                          "active_warps": float(rng.integers(1, 65)),
                                          "traffic_ratio": float(rng.uniform(0.9, 5))})
    a.credit(next(iter(e.candidate_id for e in a.elites())), True)
    state = json.loads(json.dumps(a.state_dict()))
    b = GridArchive.from_state(state)
    assert b == a and b.stats() == a.stats()
    assert [e.curiosity for e in b.elites()] == [e.curiosity for e in a.elites()]
    # the restored archive keeps behaving identically
    assert a.add(1000, 9.0, {"registers": 40, "active_warps": 8, "traffic_ratio": 1.0}) == \
           b.add(1000, 9.0, {"registers": 40, "active_warps": 8, "traffic_ratio": 1.0})
    assert [e.candidate_id for e in a.sample(np.random.default_rng(5), 7)] == \
           [e.candidate_id for e in b.sample(np.random.default_rng(5), 7)]
    with pytest.raises(ValueError, match="dimensions"):
        small_archive().load_state(state)


def test_projection_and_config_dims():
    a = GridArchive([Dimension("x", (0, 1, 2)), Dimension("y", (0, 1, 2)), Dimension("z", (0, 1, 2))])
    a.add(1, 1.0, {"x": 0.5, "y": 0.5, "z": 0.5})
    a.add(2, 3.0, {"x": 0.5, "y": 0.5, "z": 1.5})
    a.add(3, 2.0, {"x": 1.5, "y": 0.5, "z": 0.5})
    p = a.project("x", "y")
    assert p.shape == (2, 2)
    assert p[0, 0] == 3.0 and p[0, 1] == 2.0 and np.isnan(p[1, 0]) and np.isnan(p[1, 1])
    dims = dims_from_config([{"name": "r", "edges": [0, 32, 64]}, {"name": "t", "lo": 1, "hi": 4, "bins": 2,
                                                                     "log": True}])
    assert dims[1].edges == pytest.approx((1.0, 2.0, 4.0))
    with pytest.raises(ValueError, match=r"archive.dims\[0\]"):
        dims_from_config([{"name": "r", "lo": 1}])
    with pytest.raises(ValueError, match="strictly increasing"):
        Dimension("bad", (0, 2, 1))
