"""The CPU models against recorded GPU runs: uniform values and counted loops in the traffic model, the cost
model's accounting rules, the fidelity metrics, the replay evaluator (recorded answers, archive reproduction,
the surrogate on unseen kernels) and leave-one-run-out validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from archive.grid import GridArchive, default_dimensions
from archive.store import Store
from evaluators.cost_model import L2_HIT_LATENCY_RATIO, CostConstants, predict_parts, shape_terms
from evaluators.features import kernel_traffic
from evaluators.fidelity import fidelity_line, median_relative_error, rank_metrics
from evaluators.recorded import load_recording, open_store
from evaluators.traffic import BodyTraffic, TrafficEstimate
from targets.spec import get_gpu
from workloads.registry import get_workload

DATA = Path(__file__).resolve().parents[1] / "experiments" / "data"
RANDOM = DATA / "rmsnorm_random_s1.sqlite.xz"
MAP_ELITES = DATA / "rmsnorm_map_elites_s0.sqlite.xz"


@pytest.fixture(scope="module")
def wl():
    return get_workload("rmsnorm", dtype="bf16")


# ------------------------------------------------------------------------------------------------ traffic
def test_row_loop_is_counted_and_keep_path_decided_by_n(wl):
    k = wl.instantiate({"threads": 256, "rows_per_cta": 16, "max_chunks": 4, "row_iters": 4})
    tr = kernel_traffic(k, wl)
    small = tr[(32768, 512)]
    # The row loop runs ROW_ITERS = 4 times: rule 7, from the AST (setp.lt.u32 %r, 4).
    assert 4 in small.loop_trips.values()
    # N = 512 fits max_chunks * 8 * 16 threads-per-row: the register path, x read once per row.
    x, y = "rmsnorm_param_0", "rmsnorm_param_2"
    assert small.sweeps[x] == pytest.approx(4.0) and small.sweeps[y] == pytest.approx(4.0)
    assert small.group_bytes[(x, "load")] * small.ctas == pytest.approx(32768 * 512 * 2)
    assert small.decided_branches >= 1
    # N = 4096 does not fit: the re-read path, x twice per row.
    big = tr[(32768, 4096)]
    assert big.sweeps[x] == pytest.approx(8.0)
    assert big.group_bytes[(x, "load")] * big.ctas == pytest.approx(2 * 32768 * 4096 * 2)
    # w is indexed by the thread's position along the row only: shared by all CTAs (rule 8).
    assert small.shared_groups == frozenset({"rmsnorm_param_1"})


def _static_fidelity():
    """experiments/static_fidelity.py as a module (a script, not a package member)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("static_fidelity", DATA.parent / "static_fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cluster_kernel_counts_cluster_barriers_and_dsmem(wl):
    k = wl.instantiate({"threads": 512, "cluster": 4, "max_chunks": 8})
    t = kernel_traffic(k, wl, [(16384, 131072)])[(16384, 131072)]
    assert t.cluster_barriers == 2.0  # the partial-sum exchange and the final exit barrier
    assert t.dsmem_loads >= 4.0  # one mapa per cluster rank
    assert t.sweeps["rmsnorm_param_0"] == pytest.approx(1.0)  # the row fits the cluster's registers


# Recorded H200 kernels (MAP-Elites run) whose bytes the traffic model once undercounted below the workload's
# compulsory bytes: (identity prefix, expected requested bytes / compulsory, expected x+y bytes / compulsory) per
# search shape. The first two are row_iters=2, keep_in_regs=0, w_regs=0 template children whose streaming loops
# the ``unroll`` operator unrolled 2x and 4x (exit test after each copy): x read twice, y written once, w (fp32)
# read per row, i.e. 10 M N bytes = 2.5x and 6 M N = 1.5x the compulsory 4 M N + 4 N. The third keeps rows of
# N <= 16384 in registers (x once: 8 M N = 2.0x, 1.0x) and streams N = 131072; its unrolled scalar fallback,
# ruled out by the parameters, set the coverage requirement to half a row loop (rule 4e).
RECORDED_BYTES = [
    ("aead6a758c7a", {(32768, 512): (2.5, 1.5), (32768, 4096): (2.5, 1.5), (32768, 16384): (2.5, 1.5),
                      (16384, 131072): (2.5, 1.5)}),
    ("fd75188a33dd", {(32768, 512): (2.5, 1.5), (32768, 4096): (2.5, 1.5), (32768, 16384): (2.5, 1.5),
                      (16384, 131072): (2.5, 1.5)}),
    ("26cf98881fee", {(32768, 512): (2.0, 1.0), (32768, 4096): (2.0, 1.0), (32768, 16384): (2.0, 1.0),
                      (16384, 131072): (2.5, 1.5)}),
]


@pytest.fixture(scope="module")
def recorded_rows():
    with open_store(MAP_ELITES) as st:
        rows = {r.identity[:12]: r for r in st.candidates(status="ok")
                if r.identity[:12] in {p for p, _ in RECORDED_BYTES}}
    return rows


@pytest.mark.parametrize("prefix,expected", RECORDED_BYTES, ids=[p for p, _ in RECORDED_BYTES])
def test_recorded_row_iters_2_kernels_request_at_least_the_compulsory_bytes(wl, recorded_rows, prefix, expected):
    row = recorded_rows[prefix]
    k = row.kernel()
    assert k.launch.knob("row_iters", 1) == 2 and k.launch.knob("w_regs", 0) == 0
    tr = kernel_traffic(k, wl)
    for shape, (requested, partitioned) in expected.items():
        t = tr[shape]
        compulsory = wl.bytes_moved(shape)
        part = sum(v for (g, _), v in t.group_bytes.items() if g not in t.shared_groups) * t.ctas
        assert t.bytes >= compulsory and part >= compulsory * (1 - 1e-3), shape
        # Within 0.5 % of the bytes the kernel requests (the 4 N of w in the compulsory bytes is the only gap).
        assert t.bytes / compulsory == pytest.approx(requested, rel=5e-3), shape
        assert part / compulsory == pytest.approx(partitioned, rel=5e-3), shape
        assert t.loop_trips and set(t.loop_trips.values()) == {2}, shape  # the row loop: ROW_ITERS = 2


# ------------------------------------------------------------------------------------------------ cost model
def _traffic(part_per_cta: float, shared_per_cta: float, ctas: int, threads: int = 256) -> TrafficEstimate:
    body = BodyTraffic(loop=None, bytes_per_cta=part_per_cta + shared_per_cta, load_bytes_per_iteration=64,
                       loads_per_iteration=4, access_bytes_per_iteration=16, accesses_per_iteration=1,
                       iterations_per_cta=1.0, partitioned_load_bytes_per_cta=part_per_cta / 2)
    gb = {("x", "load"): part_per_cta / 2, ("y", "store"): part_per_cta / 2, ("w", "load"): shared_per_cta}
    return TrafficEstimate(bytes=(part_per_cta + shared_per_cta) * ctas, load_bytes=0.0, store_bytes=0.0,
                           bytes_per_cta=part_per_cta + shared_per_cta, ctas=ctas, threads_per_cta=threads,
                           element_bytes=2, bodies=(body,), group_bytes=gb, shared_groups=frozenset({"w"}))


def test_dram_never_below_compulsory_and_shared_bytes_hit_l2():
    gpu = get_gpu("h200")
    c = CostConstants()
    ctas = 8 * 132 * 8
    t = _traffic(16384.0, 32768.0, ctas)
    compulsory = 2 * 16384.0 * ctas
    # A traffic estimate below the compulsory bytes is charged the compulsory bytes.
    parts = predict_parts(shape_terms(gpu, t, compulsory, 8192.0, 8, 0), c)
    assert float(parts["dram_bytes"]) == pytest.approx(compulsory)
    assert float(parts["l2_hit_bytes"]) == pytest.approx(32768.0 * ctas)  # w: every CTA's read is an L2 hit
    # A second pass over a row too big for the L2 share goes (partly) to DRAM.
    t2 = _traffic(2 * 16384.0 * 64, 0.0, ctas)
    p2 = predict_parts(shape_terms(gpu, t2, 16384.0 * 64 * ctas, 8192.0 * 64, 8, 0), c)
    assert float(p2["dram_bytes"]) > 16384.0 * 64 * ctas


def test_partial_wave_costs_one_cta_time_not_a_second_bandwidth_penalty():
    gpu = get_gpu("h200")
    c = CostConstants(sharpness=16.0)
    slots = 8 * 132
    full = shape_terms(gpu, _traffic(16384.0, 0.0, slots), 16384.0 * slots, 8192.0, 8, 0)
    plus = shape_terms(gpu, _traffic(16384.0, 0.0, slots + 1), 16384.0 * (slots + 1), 8192.0, 8, 0)
    pf, pp = predict_parts(full, c), predict_parts(plus, c)
    assert float(pp["t_cta"]) == pytest.approx(2 * float(pf["t_cta"]))  # two rounds of CTAs
    assert float(pp["t_dram"]) == pytest.approx(float(pf["t_dram"]) * (slots + 1) / slots)  # bytes only
    # Arrays of terms give the same as one at a time.
    arr = {k: np.array([full[k], plus[k]]) for k in full}
    both = predict_parts(arr, c)["time_us"]
    assert both[0] == pytest.approx(float(pf["time_us"])) and both[1] == pytest.approx(float(pp["time_us"]))


def _sweeps(iterations: tuple[float, ...], ctas: int, threads: int = 256) -> TrafficEstimate:
    """One sweep-loop body per entry of ``iterations``: each thread loads 16 B per iteration of x."""
    bodies = tuple(BodyTraffic(loop=i, bytes_per_cta=16.0 * threads * n, load_bytes_per_iteration=16,
                               loads_per_iteration=1, access_bytes_per_iteration=16, accesses_per_iteration=1,
                               iterations_per_cta=n, partitioned_load_bytes_per_cta=16.0 * threads * n,
                               distinct_load_bytes_per_iteration=16, sweep=True)
                   for i, n in enumerate(iterations))
    per_cta = sum(b.bytes_per_cta for b in bodies)
    return TrafficEstimate(bytes=per_cta * ctas, load_bytes=per_cta * ctas, store_bytes=0.0, bytes_per_cta=per_cta,
                           ctas=ctas, threads_per_cta=threads, element_bytes=2, bodies=bodies,
                           group_bytes={("x", "load"): per_cta}, cta_barriers=1)


def test_a_sweep_loop_waits_at_least_one_round_trip_per_body():
    gpu = get_gpu("h200")
    c = CostConstants(latency_ns=500.0, loop_mlp=4.0, cta_ns=100.0, barrier_ns=200.0)
    ctas = 8 * 132
    # Two one-iteration passes over a short row (a reduction, a barrier, a re-read): 2 round trips of 500 ns,
    # not 2 / loop_mlp = 0.5 of one (model v3), plus 100 ns per CTA and one 200 ns barrier.
    short = shape_terms(gpu, _sweeps((1.0, 1.0), ctas), 2 * 16.0 * 256 * ctas, 4096.0, 8, 0)
    assert short["loop_rounds"] == 2.0 and short["loop_bodies"] == 2.0
    p = predict_parts(short, c)
    assert float(p["t_chain"]) == pytest.approx((2 * 500.0 + 100.0 + 200.0) * 1e-9)
    assert float(p["duty"]) == pytest.approx(1000.0 / 1300.0)
    # Long loops keep the pipelined count: 2 x 64 iterations with 4 in flight = 32 round trips (>= 2 bodies).
    long = shape_terms(gpu, _sweeps((64.0, 64.0), ctas), 2 * 64 * 16.0 * 256 * ctas, 4096.0 * 64, 8, 0)
    assert long["loop_rounds"] == 128.0
    assert float(predict_parts(long, c)["t_chain"]) == pytest.approx((32 * 500.0 + 300.0) * 1e-9)
    # The same two passes over data read twice (compulsory = half the loads), re-read working set in L2
    # (1056 CTAs x 4 KiB): the second pass's round trip is an L2 hit, L2_HIT_LATENCY_RATIO (0.5) of a DRAM one.
    reread = shape_terms(gpu, _sweeps((1.0, 1.0), ctas), 16.0 * 256 * ctas, 4096.0, 8, 0)
    assert L2_HIT_LATENCY_RATIO == 0.5
    assert float(predict_parts(reread, c)["t_chain"]) == pytest.approx((1.5 * 500.0 + 300.0) * 1e-9)
    # A re-read working set far beyond the L2 (1056 CTAs x 1 GiB) misses: two full DRAM round trips again.
    big = shape_terms(gpu, _sweeps((1.0, 1.0), ctas), 16.0 * 256 * ctas, 2.0**30, 8, 0)
    assert float(predict_parts(big, c)["t_chain"]) == pytest.approx((2 * 500.0 + 300.0) * 1e-9, rel=1e-3)
    # One pass of 3 iterations: max(3 / 4, 1) = 1 round trip.
    one = shape_terms(gpu, _sweeps((3.0,), ctas), 3 * 16.0 * 256 * ctas, 4096.0, 8, 0)
    assert float(predict_parts(one, c)["t_chain"]) == pytest.approx((500.0 + 300.0) * 1e-9)


# ------------------------------------------------------------------------------------------------ metrics
def test_rank_metrics_values():
    gpu = np.arange(100, dtype=float)  # higher is better
    m = rank_metrics(gpu, gpu)
    assert m["spearman"] == pytest.approx(1.0) and m["overlap_top"] == 50 and m["favourite_percentile"] == 0.0
    rev = rank_metrics(gpu, -gpu)
    assert rev["spearman"] == pytest.approx(-1.0) and rev["overlap_top"] == 0
    assert rev["favourite_percentile"] == pytest.approx(0.99)
    # Times: lower is better; the model's favourite is the GPU's 3rd best of 10.
    times = np.array([1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    model = times.copy()
    model[2] = 0.5
    t = rank_metrics(times, model, higher_is_better=False, top=3)
    assert t["favourite_percentile"] == pytest.approx(0.2) and t["overlap_top"] == 3
    assert median_relative_error([10.0, 20.0, 40.0], [11.0, 20.0, 20.0]) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        rank_metrics([1.0, 2.0], [1.0, 2.0])


def test_fidelity_line_names_the_version(tmp_path):
    p = tmp_path / "f.json"
    p.write_text('{"static": {"model_version": "static-v2/x", "stores": ["a"], "held_out": {"n": 10, '
                 '"spearman": 0.5, "spearman_top": 0.1, "overlap_top": 7, "favourite_percentile": 0.2}, '
                 '"median_rel_error_per_shape": {"1x2": 0.1, "3x4": 0.3}}}')
    line = fidelity_line("static", "static-v2/x", p)
    assert "Spearman 0.50" in line and "7/50" in line and "10-30%" in line
    assert "No fidelity" in fidelity_line("static", "static-v2/other", p)
    # recorded on RMSNorm (no "workload" field: the only workload then); another workload gets no borrowed numbers
    assert "Spearman 0.50" in fidelity_line("static", "static-v2/x", p, workload="rmsnorm")
    other = fidelity_line("static", "static-v2/x", p, workload="kda_recurrent")
    assert "No fidelity was measured for workload 'kda_recurrent'" in other and "Spearman" not in other
    assert "recorded after" not in line


def test_fidelity_line_quotes_runs_recorded_after_the_fit(tmp_path):
    rec = {"model_version": "static-v4/x", "stores": ["a"], "median_rel_error_per_shape": {"1x2": 0.1},
           "held_out": {"n": 10, "spearman": 0.5, "spearman_top": 0.1, "overlap_top": 7, "favourite_percentile": 0.2},
           "later_runs": {"stores": ["later.sqlite.xz"], "median_rel_error_per_shape": {"1x2": 0.08, "3x4": 0.149},
                          "held_out": {"n": 556, "spearman": 0.8747, "spearman_top": 0.923, "overlap_top": 35,
                                       "favourite_percentile": 0.0072}}}
    p = tmp_path / "f.json"
    p.write_text(json.dumps({"static": rec}))
    line = fidelity_line("static", "static-v4/x", p)
    assert ("On runs recorded after it was fitted (later.sqlite.xz; 556 kernels): Spearman 0.87 overall, 0.92 within "
            "the GPU's top 50, top-50 overlap 35/50, its favourite inside the GPU's top 1 %, median time error "
            "8-15%.") in line
    assert line.index("Spearman 0.50") < line.index("recorded after") < line.index("Rankings below")


# ------------------------------------------------------------------------------------------------ replay
def test_replay_answers_recorded_kernels_and_rebuilds_the_archive(wl):
    from evaluators.replay import ReplayEvaluator

    ev = ReplayEvaluator(wl, [str(RANDOM)])
    with open_store(RANDOM) as st:
        rows = st.candidates(limit=30)
        config = st.get_meta("config")
    assert not config["archive"]["dims"]  # the run used the default dimensions
    archive = GridArchive(default_dimensions(get_gpu("h200")), qd_offset=float(config["archive"]["qd_offset"]))
    expected: dict[tuple[int, ...], int] = {}
    for row in rows:
        k = row.kernel()
        assert k.identity == row.identity  # identity survives the store round trip
        r = ev.evaluate(k)
        assert r.status == row.status and r.objective == row.objective and r.features == row.features
        assert [s.time_us for s in r.shapes] == [s["time_us"] for s in row.metrics["shapes"]]
        assert r.extra["replay"]["row"] == row.id and not r.estimate
        if r.ok:
            res = archive.add(row.id, r.objective, r.features)
            assert (list(res.cell) if res.added else None) == row.cell
        if row.cell is not None:
            expected[tuple(row.cell)] = row.id
    assert {e.cell: e.candidate_id for e in archive.elites()} == expected
    assert ev.stats() == {"recorded": 30, "surrogate": 0}


@pytest.fixture(scope="module")
def small_stores(tmp_path_factory):
    """Two small stores cut from the recorded runs: their kernels with the smallest PTX (quick for ptxas)."""
    out = []
    for src in (MAP_ELITES, RANDOM):
        with open_store(src) as st:
            rows = sorted(st.candidates(status="ok"), key=lambda r: (len(r.ptx), r.id))[:10]
        path = tmp_path_factory.mktemp("rec") / src.name.replace(".xz", "")
        with Store(path) as dst:
            for r in sorted(rows, key=lambda r: r.id):
                r.id = None
                r.parent_ids = []
                dst.add_candidate(r)
        out.append(str(path))
    return out


@pytest.fixture(scope="module")
def small_terms(wl, small_stores, tmp_path_factory):
    """The static terms of the small stores' kernels, cached in a file both tests below use."""
    from evaluators.calibration import recorded_terms

    path = tmp_path_factory.mktemp("terms") / "terms.json"
    rec = load_recording(small_stores)
    return rec, recorded_terms(rec.kernels.values(), wl, processes=1, cache=path), path


def test_replay_surrogate_estimates_unseen_kernels(wl, small_stores, small_terms, caplog):
    import logging

    from evaluators.replay import ReplayEvaluator

    ev = ReplayEvaluator(wl, small_stores, members=2, steps=200, terms_cache=str(small_terms[2]))
    unseen = wl.seeds()[1]  # the template at default knobs: in neither small store
    with caplog.at_level(logging.INFO, logger="evaluators.replay"):
        r = ev.evaluate(unseen)
    # the fit is announced before its silent seconds, and its end is logged
    msgs = [m for m in caplog.messages if "replay surrogate" in m]
    assert msgs[0] == (f"first kernel not on record: fitting the replay surrogate on {len(ev)} recorded kernels "
                       "(2 members x 200 steps; about a minute on 2 cores, once per run)")
    assert msgs[1].startswith("replay surrogate fitted on ")
    assert r.ok and r.estimate and r.reason.startswith("estimate: replay surrogate")
    assert set(r.extra["surrogate_log_std"]) == {str(list(s)) for s in wl.search_shapes}
    assert r.extra["uncertainty"] >= 0.0 and r.objective > 0
    ref = load_recording(small_stores).baseline_times("torch")
    for s in r.shapes:
        assert s.baseline_us["torch"] == ref[s.shape] and s.time_us > 0
    assert ev.stats()["surrogate"] == 1
    assert "recorded kernels" in ev.banner()


def test_leave_one_run_out_never_scores_a_fitted_kernel(small_terms):
    from evaluators.holdout import fold_metrics, leave_one_run_out

    rec, terms, _ = small_terms
    folds = leave_one_run_out(rec, terms, members=2, steps=100)
    assert [f.run for f in folds] == rec.runs
    for f in folds:
        held = {m.identity for m in rec.of_run(f.run)}
        assert set(f.identities) <= held
        assert f.train_kernels == sum(1 for m in rec.kernels.values() if m.identity not in held
                                      and terms[m.identity]["status"] == "ok")
        assert np.all(f.static_us > 0) and np.all(np.isfinite(f.replay_us))
        ref = np.array(list(rec.baseline_times("torch").values()))
        m = fold_metrics(f, ref, rec.shapes, "replay", top=5)
        assert -1.0 <= m["spearman"] <= 1.0 and set(m["per_shape"]) == {"x".join(map(str, s)) for s in rec.shapes}


def test_fit_then_score_fits_once_and_scores_only_unseen_kernels(small_stores, small_terms):
    from dataclasses import replace

    from evaluators.calibration import fit_constants, term_arrays
    from evaluators.holdout import fit_then_score

    _, terms, _ = small_terms
    fit = load_recording(small_stores[:1])
    score = load_recording(small_stores[1:])
    # the scored run also measured three of the fitted run's kernels (like the seeds every run measures)
    shared = list(fit.kernels.values())[:3]
    score.kernels.update({m.identity: replace(m, runs=list(score.runs)) for m in shared})
    folds = fit_then_score(fit, [score], terms, members=2, steps=100)
    assert [f.run for f in folds] == score.runs
    (f,) = folds
    unseen = [m.identity for m in score.kernels.values() if m.identity not in fit.kernels]
    assert f.identities == unseen and len(unseen) == 10 and len(score.kernels) == 13
    assert f.train_kernels == len(fit.kernels) == 10
    # the constants are those a calibration on the fitted run alone gives (same seed)
    arr, meas, sidx, _ = term_arrays(list(fit.kernels.values()), terms, fit.shapes)
    assert f.constants == fit_constants(arr, meas, sidx, seed=0)[0]
    # GPU times are the scored run's own measurements
    assert f.gpu_us[0].tolist() == [score.kernels[unseen[0]].times_us[s] for s in score.shapes]
    assert np.all(f.static_us > 0) and np.all(np.isfinite(f.replay_us)) and np.all(f.replay_std >= 0)
    with pytest.raises(ValueError, match="did not measure"):
        fit_then_score(fit, [fit], terms, surrogate=False)  # nothing left to score
    with pytest.raises(ValueError, match="measured at"):
        fit_then_score(fit, [replace(score, shapes=score.shapes[::-1])], terms, surrogate=False)


def test_static_fidelity_cli_fit_and_score(small_stores, small_terms, tmp_path, monkeypatch):
    import json

    static_fidelity = _static_fidelity()
    monkeypatch.setenv("PTXFORGE_CACHE", str(small_terms[2].parent))
    path = small_terms[2]
    # the CLI's default terms cache is <PTXFORGE_CACHE>/recorded/<name>: seed it with the computed terms
    from evaluators.calibration import terms_version

    cache = small_terms[2].parent / "recorded" / f"terms-rmsnorm-h200-{terms_version()}.json"
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(path.read_text())
    out = tmp_path / "split.json"
    assert static_fidelity.main(["--fit", small_stores[0], "--score", small_stores[1], "--no-surrogate",
                                 "--top", "5", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    run = Path(small_stores[1]).name.removesuffix(".sqlite")
    assert set(d["static"]) == {run, "pooled"} and d["static"]["pooled"]["n"] == 10
    assert d["method"].startswith("fitted on ") and d["folds"][run]["train_kernels"] == 10
    for bad in (["--fit", small_stores[0]], ["--fit", small_stores[0], "--score", small_stores[1], "--write"],
                [small_stores[0], "--fit", small_stores[0], "--score", small_stores[1]]):
        with pytest.raises(SystemExit):
            static_fidelity.main(bad)


def test_static_fidelity_cli_missing_store_is_one_line(tmp_path, capsys):
    """A store path that does not exist is a usage error (status 2) naming the path, not a traceback."""
    static_fidelity = _static_fidelity()
    nope = str(tmp_path / "nope.sqlite.xz")
    with pytest.raises(SystemExit) as e:
        static_fidelity.main(["--fit", nope, "--score", nope])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].endswith(f": error: recorded store {nope!r}: no such file")  # prog: argv[0]


def test_a_search_on_replay_rewalks_the_recorded_run(tmp_path):
    """A run recorded by this code (on the static evaluator here), then the same search on evaluator=replay over
    its store: the same candidates in the same order and the same archive (every result comes back as recorded,
    so every later proposal is the same too)."""
    from hydra import compose, initialize_config_dir

    from evolve.app import run
    from evolve.config import register

    def cfg(run_dir: Path, *extra: str):
        register()
        with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
            return compose("config", overrides=[f"run_dir={run_dir}", "algorithm=map_elites", "seed=3",
                                                "budget.evaluations=10", "logger=none", "knowledge=none",
                                                "engine.progress=false", "engine.export=false", *extra])

    first = run(cfg(tmp_path / "a", "evaluator=static"))
    store = tmp_path / "a" / "store.sqlite"
    again = run(cfg(tmp_path / "b", "evaluator=replay", f"evaluator.stores=[{store}]"))
    with Store(store, readonly=True) as a, Store(tmp_path / "b" / "store.sqlite", readonly=True) as b:
        want = [(r.identity, r.status, r.objective, r.cell) for r in a.candidates(with_ptx=False)]
        got = [(r.identity, r.status, r.objective, r.cell) for r in b.candidates(with_ptx=False)]
        assert a.load_checkpoint("engine")["archive"] == b.load_checkpoint("engine")["archive"]
    assert got == want and len(got) >= 10
    assert again["best_objective"] == first["best_objective"] and again["qd_score"] == first["qd_score"]


def test_retime_dry_run_on_the_static_evaluator(tmp_path):
    """experiments/retime.py end to end on a CPU (the static evaluator stands in for the GPU pool)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("retime", Path(__file__).resolve().parents[1] / "experiments"
                                                  / "retime.py")
    retime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(retime)
    out = tmp_path / "retime.json"
    assert retime.main([str(RANDOM), "--n", "3", "--top", "2", "--evaluator", "static", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["n"] == 3 and d["ok"] == 3 and d["evaluator"] == "static"
    rec = load_recording([RANDOM])
    best = sorted(rec.kernels.values(), key=lambda m: -m.objective)[:2]
    ids = [c["identity"] for c in d["candidates"]]
    assert ids[:2] == [m.identity for m in best]  # the recorded best are always re-timed
    assert all(len(c["retimed_us"]) == len(rec.shapes) and min(c["retimed_us"]) > 0 for c in d["candidates"])
    assert -1.0 <= d["metrics"]["spearman"] <= 1.0


def test_replay_puts_objectives_of_mixed_references_on_one_scale(wl, tmp_path):
    """Runs recorded against different objective references (a later gate's best-library objective): every
    objective is recomputed from the recorded times against one reference, the recorded one kept."""
    from evaluators.replay import ReplayEvaluator

    with open_store(RANDOM) as st:
        rows = st.candidates(status="ok", limit=5)
    path = tmp_path / "best_ref.sqlite"
    with Store(path) as dst:
        for r in rows:
            r.id, r.parent_ids = None, []
            r.metrics["extra"]["objective_baseline"] = "best"
            dst.add_candidate(r)
    ev = ReplayEvaluator(wl, [str(path)])
    assert not ev.recorded_objectives and ev.objective_baselines == ["best"]
    r = ev.evaluate(rows[1].kernel())
    ref = load_recording([path]).baseline_times("torch")
    want = float(np.exp(np.mean([np.log(ref[s.shape] / s.time_us) for s in r.shapes])))
    assert r.objective == pytest.approx(want) and r.extra["recorded_objective"] == rows[1].objective
    assert ("The recorded objectives were taken against best: every objective is recomputed from the recorded "
            "times against one reference (torch).") in ev.banner()


def test_surrogate_features_instruction_mix_knobs_and_roofline_base(wl):
    from evaluators.ptx_stats import STAT_NAMES, ptx_stats
    from evaluators.surrogate import feature_names, knob_features, knob_names_of, roofline_us

    seed, template = wl.seeds()[:2]
    s0, s1 = ptx_stats(seed), ptx_stats(template)
    assert set(s0) == set(STAT_NAMES)
    # the scalar seed: 2 ld.shared + 2 st.shared (the block reduction), div.rn + rsqrt.approx, no vector access
    assert (s0["shared_loads"], s0["shared_stores"], s0["fp_div_sqrt"], s0["vector_loads"]) == (2, 2, 2, 0)
    assert (s1["vector_loads"], s1["vector_stores"]) == (36, 11)  # the template at vec=8: ld/st .v4
    names = knob_names_of([dict(template.launch.knobs), {"rows_per_cta": 2, "note": "x"}, None])
    assert names == ("cache_hint", "cluster", "keep_in_regs", "max_chunks", "min_blocks", "row_iters",
                     "rows_per_cta", "threads", "vec", "w_regs")
    f = knob_features({"threads": 255, "vec": 8}, ("threads", "vec", "cluster"))
    assert f == pytest.approx([np.log(256.0), np.log(9.0), 0.0])
    assert feature_names(names)[-1] == "knob:w_regs"
    assert roofline_us({"compulsory": 4.0e9, "copy_bps": 4.0e12}) == pytest.approx(1000.0)


def test_top_weights_favour_the_fastest_rows_of_each_shape():
    from evaluators.surrogate import top_weights

    y = np.array([0.0, 0.1, 1.0, 0.5, 0.6])  # log time over the roofline; shapes 0, 0, 0, 1, 1
    w = top_weights(y, np.array([0, 0, 0, 1, 1]), 10.0, 0.1)
    assert w == pytest.approx([11.0, 1 + 10 / np.e, 1 + 10 * np.exp(-10), 11.0, 1 + 10 / np.e], rel=1e-6)
    with pytest.raises(ValueError, match="tau"):
        top_weights(y, np.zeros(5), 1.0, 0.0)


def test_surrogate_rank_term_fits_and_needs_shapes():
    from evaluators.surrogate import fit_surrogate

    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 3)).astype(np.float32)
    y = 0.5 * x[:, 0]
    groups = np.repeat(np.arange(12), 2)
    with pytest.raises(ValueError, match="shape_index and base_us"):
        fit_surrogate(x, y, groups, members=2, steps=10, rank_weight=1.0)
    m = fit_surrogate(x, y, groups, members=2, steps=300, rank_weight=0.5, temperature=0.1,
                      shape_index=np.tile([0, 1], 12), base_us=np.full(24, 10.0))
    pred, sd = m.predict(x, np.full(24, 10.0))
    assert m.info["rank_weight"] == 0.5 and np.all(np.isfinite(pred)) and np.all(sd >= 0)
    # the fit learns the order of the target: log(pred / base) tracks y
    assert np.corrcoef(np.log(pred / 10.0), y)[0, 1] > 0.9


def test_replay_refuses_stores_of_another_workload(tmp_path):
    """Replay over RMSNorm stores for a softmax (or an fp16 RMSNorm) run: refused at construction, naming the store
    and both workloads (it crashed on every candidate after fitting the surrogate), and as a configuration error
    from the command line before any store is written."""
    import subprocess
    import sys

    from evaluators.replay import ReplayEvaluator

    with pytest.raises(ValueError) as e:
        ReplayEvaluator(get_workload("softmax"), [str(RANDOM)])
    assert str(e.value) == (f"evaluator.stores: {RANDOM} recorded workload rmsnorm (bf16), this run's is softmax "
                            "(fp32); replay needs stores recorded on the run's workload")
    with pytest.raises(ValueError, match=r"recorded workload rmsnorm \(bf16\), this run's is rmsnorm \(fp16\)"):
        ReplayEvaluator(get_workload("rmsnorm", dtype="fp16"), [str(RANDOM)])
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "evolve", "workload=softmax", "evaluator=replay",
                          f"evaluator.stores=[{RANDOM}]", "logger=none", f"hydra.run.dir={run_dir}"],
                         cwd=DATA.parents[1], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and not (run_dir / "store.sqlite").exists()
    assert out.stderr.strip().splitlines()[-1] == (
        f"configuration error: evaluator.stores: {RANDOM} recorded workload rmsnorm (bf16), this run's is softmax "
        "(fp32); replay needs stores recorded on the run's workload")


def test_replay_run_objective_meta_names_its_reference(wl):
    """A replay run's objective meta, provenance and cards say what its numbers are (speedups over the recorded
    torch times, recorded or surrogate), not the static model's speedup over the naive seed under a gate it never
    ran."""
    from omegaconf import OmegaConf

    from archive.export import measured_against
    from evaluators.replay import ReplayEvaluator
    from evolve.app import objective_definition

    ev = ReplayEvaluator(wl, [str(RANDOM)])
    spec = objective_definition(OmegaConf.create({}), None, ev, True)
    assert spec["baseline"] == "torch" and spec["gate_version"] is None and spec["estimate"] is True
    assert spec["definition"] == (
        "geomean over shapes of the speedup over the median recorded H200 time of torch at that shape: the recorded "
        "GPU time for a kernel a recorded run measured, else an ESTIMATE of the replay surrogate (evaluators.replay; "
        "runs rmsnorm_random_s1)")
    card = measured_against({"provenance": {"evaluator": "replay", "estimate": True, "baseline": "torch"}})
    assert card["kind"] == ("replay: recorded H200 GPU time where a recorded run measured the kernel, else a "
                            "surrogate ESTIMATE")
    assert measured_against({"provenance": {"evaluator": "static", "estimate": True}})["kind"] == (
        "ESTIMATE (static model, no GPU measurement)")


def test_write_later_records_the_shipped_models_numbers_on_later_runs(tmp_path, monkeypatch, capsys):
    """``--write-later`` needs the shipped calibration's own stores as --fit, and adds ``later_runs`` to the
    shipped version's entries only (the leave-one-run-out record stays)."""
    import json

    from evaluators.cost_model import load_calibration

    sf = _static_fidelity()
    with pytest.raises(SystemExit) as e:
        sf.main(["--fit", str(RANDOM), "--score", str(RANDOM), "--write-later"])
    assert e.value.code == 2 and "the shipped calibration's stores (rmsnorm_gate5" in capsys.readouterr().err
    version = load_calibration().version
    f = tmp_path / "fidelity.json"
    f.write_text(json.dumps({"static": {"model_version": version, "held_out": {"n": 1}}}))
    monkeypatch.setattr(sf, "FIDELITY_FILE", f)
    pooled = {"n": 556.0, "spearman": 0.87, "per_shape": {"1x2": {"spearman": 0.9, "median_rel_error": 0.15}}}
    sf.write_later({"static": {"run": pooled, "pooled": pooled}}, ["later.sqlite.xz"], "fitted on four")
    rec = json.loads(f.read_text())["static"]
    assert rec["held_out"] == {"n": 1} and rec["later_runs"]["stores"] == ["later.sqlite.xz"]
    assert rec["later_runs"]["held_out"] == {"n": 556.0, "spearman": 0.87}
    assert rec["later_runs"]["median_rel_error_per_shape"] == {"1x2": 0.15}
    with pytest.raises(SystemExit, match="no replay entry"):
        sf.write_later({"replay": {"pooled": pooled}}, ["later.sqlite.xz"], "fitted on four")


def test_terms_cache_keeps_what_was_computed_when_the_pass_is_killed(wl, small_stores, small_terms, tmp_path,
                                                                     monkeypatch):
    """A kill mid-way (here: the progress callback raises after the third kernel) leaves the checkpointed terms
    on disk, and the next pass computes only the rest."""
    from evaluators import calibration

    rec, full, _ = small_terms
    kernels = list(rec.kernels.values())
    path = tmp_path / "terms.json"
    monkeypatch.setattr(calibration, "CHECKPOINT_EVERY", 2)

    def kill_after_three(i: int, n: int) -> None:
        if i == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibration.recorded_terms(kernels, wl, processes=1, cache=path, progress=kill_after_three)
    kept = json.loads(path.read_text())
    assert len(kept) == 2 and all(kept[k] == full[k] for k in kept)
    seen: list[int] = []
    again = calibration.recorded_terms(kernels, wl, processes=1, cache=path, progress=lambda i, n: seen.append(n))
    assert again == full and seen[-1] == len(kernels) - 2


def test_the_busiest_thread_floor_charges_a_round_trip_per_body_that_only_some_threads_run(monkeypatch):
    """Two passes in which a quarter of the threads load (the mean iteration count 0.25 a body): v4's floor
    charges 0.5 round trips, the candidate floor ('busiest') the busiest thread's 2; long loops are unchanged."""
    from evaluators import cost_model

    gpu = get_gpu("h200")
    c = CostConstants(latency_ns=500.0, loop_mlp=4.0, cta_ns=100.0, barrier_ns=200.0)
    ctas = 8 * 132
    quarter = shape_terms(gpu, _sweeps((0.25, 0.25), ctas), 2 * 0.25 * 16.0 * 256 * ctas, 4096.0, 8, 0)
    assert quarter["loop_rounds"] == 0.5 and quarter["loop_bodies"] == 2.0
    long = shape_terms(gpu, _sweeps((64.0, 64.0), ctas), 2 * 64 * 16.0 * 256 * ctas, 4096.0 * 64, 8, 0)
    assert cost_model.LOOP_FLOOR == "mean"  # the shipped v4
    assert float(predict_parts(quarter, c)["t_chain"]) == pytest.approx((0.5 * 500.0 + 300.0) * 1e-9)
    monkeypatch.setattr(cost_model, "LOOP_FLOOR", "busiest")
    assert float(predict_parts(quarter, c)["t_chain"]) == pytest.approx((2 * 500.0 + 300.0) * 1e-9)
    assert float(predict_parts(long, c)["t_chain"]) == pytest.approx((32 * 500.0 + 300.0) * 1e-9)


def test_static_fidelity_refuses_to_write_a_candidate_floor(capsys):
    mod = _static_fidelity()
    with pytest.raises(SystemExit):
        mod.main(["a.sqlite.xz", "b.sqlite.xz", "--loop-floor", "busiest", "--write"])
    assert "--loop-floor other than the shipped one is a candidate" in capsys.readouterr().err
