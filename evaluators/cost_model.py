"""The static cost model (v4): kernel time at one shape from the static traffic estimate, occupancy and a few
calibrated constants. Used by the static evaluator, its calibration and the replay surrogate's features.

Split in two so the constants can be fitted quickly: ``shape_terms`` computes everything that does not depend
on a free constant (a dict of floats, ``TERM_NAMES``), ``predict_time_us`` turns terms into µs with
``CostConstants`` and works on NumPy arrays of terms as well as on floats.

The model, per launch at one shape (times in s, bytes, bandwidths in bytes/s; GPU numbers from
``targets.spec``):

1. Bytes. ``compulsory`` = the workload's minimum (``workload.bytes_moved``): DRAM traffic never falls below
   it. Requested bytes of buffers each CTA reads its own part of (x, y) beyond it are re-reads (a second pass
   over a row); they hit in L2 when the re-read working set (concurrent CTAs x bytes one CTA streams per pass)
   fits in ``l2_fraction`` of the L2, else miss in proportion ``1 - l2_fraction * L2 / working set``.
   Buffers shared by all CTAs (the weight vector, ``TrafficEstimate.shared_groups``) are L2 hits past their
   first read. Spills count as DRAM bytes. ``dram = max(compulsory, compulsory + missed re-reads + spills)``;
   ``l2 = re-read hits + shared bytes``.
2. The latency chain of one CTA (V. Volkov, "Understanding Latency Hiding on GPUs", UC Berkeley 2016): it
   waits ``rounds * latency`` for memory, one round trip per iteration of straight-line code and counted loops
   (all of an iteration's loads are issued at once) and one per ``loop_mlp`` iterations of a sweep loop (ptxas
   pipelines a loop's loads whatever the unrolling in the PTX), but never less than one round trip per sweep-loop
   body with loads (v4: a loop's first loads have no earlier iteration to hide behind, and two bodies separated
   by a barrier, such as the two passes of a re-read, cannot overlap; v3 charged a one-iteration loop a quarter
   of a round trip, which priced the re-read path 15-30 % too fast at short rows). When the kernel re-reads,
   one of two or more bodies is the re-read pass, whose round trip is an L2 hit (``L2_HIT_LATENCY_RATIO`` of a
   DRAM one) for the share of re-read bytes that hits. It spends ``serial`` on everything else it
   must do in order: a fixed cost per CTA (``cta_ns``), CTA barriers (``barrier_ns`` each), cluster barriers
   (``cluster_barrier_ns``) and distributed-shared-memory accesses (``dsmem_ns``). ``concurrent = min(CTAs,
   slots)`` CTAs, ``slots = blocks_per_sm * SMs``.
3. Terms. ``t_dram = dram / BW`` with ``BW = copy bandwidth * bw_scale``; ``t_l2 = l2 / l2_gbps``; ``t_issue``
   = requested bytes over the L1 rate of the active SMs (one warp-wide access per clock, at most 128 B:
   ``min(32 w, 128)`` B per clock per SM for accesses ``w`` bytes wide per thread); ``t_cta = ceil(CTAs /
   slots) * (rounds * latency + serial)``, the latency floor of the CTAs that run one after another on a slot
   (wave quantisation enters here only). The latency limit is ``t_cta`` alone: a Little's-law cap on the DRAM
   rate as well (model v2) counted the same round trips twice, once in each term.
4. ``time = (t_dram^p + t_l2^p + t_issue^p + t_cta^p)^(1/p) + (rounds * latency + serial) + launch_us``: a
   smooth maximum of the limits (``p = sharpness``; p -> infinity is the roofline's max), plus the latency
   chain of one CTA (the pipeline fills at the start and drains at the end: the last CTAs' chain is not
   hidden behind other CTAs' transfers) and a fixed launch time.

The constants are free parameters fitted to recorded H200 measurements (``evaluators.calibration``); the
defaults below are the priors the fit starts from (latency: Hopper microbenchmarks report a few hundred ns to
~700 ns for an unloaded HBM access, more under load; barriers and cluster barriers: tens to hundreds of ns).
Leave-one-run-out on the two recorded H200 runs (2026-12-01, ``experiments/static_fidelity.py``): v2 -> v3
raised the pooled Spearman 0.89 -> 0.93, the Spearman within the GPU's top 50 -0.32 -> 0.13 and the top-50
overlap 32 -> 41. v3 -> v4 (designed looking at the two later gate-5 runs; only a future recording validates it),
fitted on the two gate-v1 runs and scored on the two gate-5 runs: top-50 overlap 11 -> 25, the favourite at the
GPU's 19.3 % -> 8.4 %, Spearman 0.90 -> 0.92, but the Spearman within the GPU's top 50 0.61 -> -0.40
(``experiments/results/static_v4_family_diagnosis_2026-12-01.md``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from evaluators.traffic import TrafficEstimate

MODEL_NAME = "static-v4"
CALIBRATION_FILE = Path(__file__).with_name("static_calibration.json")
# An L2 hit's round trip over an HBM one (not fitted): published Hopper microbenchmarks put an L2 hit at about
# 200-300 cycles and an HBM access at about 450-600 (Luo et al., "Benchmarking and Dissecting the Nvidia Hopper
# GPU Architecture", IPDPS 2024; Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023).
L2_HIT_LATENCY_RATIO = 0.5
# The sweep loop's latency floor, per body with loads: "mean" (the shipped v4: the mean over a CTA's threads of
# the body's iterations, at most one round trip) or "busiest" (a candidate term, not shipped: one round trip for
# every body any thread runs, the busiest thread's chain; V. Volkov, "Understanding Latency Hiding on GPUs", UC
# Berkeley 2016; proposed in experiments/results/static_v4_gate11_diagnosis_2026-12-02.md, judged on later runs
# with ``experiments/static_fidelity.py --loop-floor busiest``).
LOOP_FLOORS = ("mean", "busiest")
LOOP_FLOOR = "mean"


@dataclass(frozen=True)
class CostConstants:
    """The model's free constants (module docstring, steps 1-4).

    bw_scale: achievable DRAM bandwidth / the GPU's copy bandwidth; latency_ns: DRAM round trip under load;
    l2_gbps: L2 hit bandwidth in GB/s; cta_ns: fixed serial time per CTA; barrier_ns: per CTA barrier;
    cluster_barrier_ns: per cluster barrier; dsmem_ns: per distributed-shared-memory access; l2_fraction: share
    of the L2 that re-read data may occupy; launch_us: fixed launch time; sharpness: the smooth
    maximum's exponent p; loop_mlp: copies of a sweep loop's body whose loads ptxas keeps in flight at once."""

    bw_scale: float = 1.0
    latency_ns: float = 600.0
    l2_gbps: float = 10000.0
    cta_ns: float = 500.0
    barrier_ns: float = 100.0
    cluster_barrier_ns: float = 500.0
    dsmem_ns: float = 50.0
    l2_fraction: float = 0.5
    launch_us: float = 2.0
    sharpness: float = 4.0
    loop_mlp: float = 2.0

    def to_json(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CostConstants:
        """From a dict of constants; ValueError naming an unknown key."""
        names = {f.name for f in fields(cls)}
        bad = set(d) - names
        if bad:
            raise ValueError(f"unknown cost constant(s) {sorted(bad)}; known: {sorted(names)}")
        return cls(**{k: float(v) for k, v in d.items()})


# Bounds the calibration keeps the constants within (physically plausible ranges).
BOUNDS: dict[str, tuple[float, float]] = {
    "bw_scale": (0.5, 1.05), "latency_ns": (200.0, 3000.0), "l2_gbps": (2000.0, 40000.0),
    "cta_ns": (0.0, 20000.0), "barrier_ns": (0.0, 5000.0), "cluster_barrier_ns": (0.0, 20000.0),
    "dsmem_ns": (0.0, 5000.0), "l2_fraction": (0.05, 1.0), "launch_us": (0.0, 20.0), "sharpness": (1.0, 16.0),
    "loop_mlp": (1.0, 8.0),
}


@dataclass(frozen=True)
class Calibration:
    """Constants with where they came from: id (short name recorded with every result), constants, and info
    (stores fitted on, date, fit quality)."""

    id: str
    constants: CostConstants
    info: dict[str, Any]

    @property
    def version(self) -> str:
        """The model version string recorded with results: ``static-v4/<calibration id>``."""
        return f"{MODEL_NAME}/{self.id}"


UNCALIBRATED = Calibration("priors", CostConstants(), {"note": "prior constants, not fitted"})


def load_calibration(path: str | Path | None = None) -> Calibration:
    """The calibration in ``path`` (default ``CALIBRATION_FILE``); the priors when the default file is absent.
    Raises FileNotFoundError for an explicit path that does not exist, ValueError for a malformed file."""
    p = Path(path) if path is not None else CALIBRATION_FILE
    if not p.is_file():
        if path is not None:
            raise FileNotFoundError(f"calibration file {str(p)!r}: no such file")
        return UNCALIBRATED
    try:
        d = json.loads(p.read_text())
        return Calibration(str(d["id"]), CostConstants.from_json(d["constants"]), dict(d.get("info", {})))
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: not a calibration file ({e})") from e


TERM_NAMES = ("ctas", "threads", "slots", "cluster", "compulsory", "partitioned_bytes", "shared_bytes",
              "spill_bytes", "sweep_bytes", "rounds", "inflight_thread", "loop_rounds", "loop_inflight_thread",
              "loop_share", "width", "barriers", "cluster_barriers", "dsmem", "copy_bps", "l2_bytes", "sm_count",
              "clock_hz", "requested", "loop_bodies")


def shape_terms(gpu: Any, traffic: TrafficEstimate, bytes_moved: float, sweep_bytes: float, blocks_per_sm: int,
                spill_bytes_per_thread: float, cluster: int = 1) -> dict[str, float]:
    """The constant-free terms of one launch at one shape (``TERM_NAMES``).

    gpu: ``targets.spec.GPUSpec``; traffic: the static estimate at this shape; bytes_moved: the workload's
    compulsory bytes; sweep_bytes: bytes one CTA streams per pass; blocks_per_sm: resident CTAs per SM (>= 1);
    spill_bytes_per_thread: ptxas spill stores + loads; cluster: CTAs per cluster. ValueError when
    blocks_per_sm < 1."""
    if blocks_per_sm < 1:
        raise ValueError(f"blocks_per_sm must be >= 1 to estimate a time, got {blocks_per_sm}")
    ctas, threads = traffic.ctas, traffic.threads_per_cta
    part = sum(v for (g, _), v in traffic.group_bytes.items() if g not in traffic.shared_groups) * ctas
    shared = sum(v for (g, _), v in traffic.group_bytes.items() if g in traffic.shared_groups) * ctas
    if not traffic.group_bytes:  # an estimate without the split: everything streams
        part = traffic.bytes
    # Two kinds of bodies (step 2): straight-line code and counted loops issue all their loads of an iteration
    # at once (one round trip per iteration); a sweep loop's in-flight bytes are those of one copy of its body
    # (PTX-level unrolling does not add memory-level parallelism: ptxas pipelines the loop either way), scaled
    # by the fitted ``loop_mlp``.
    rounds = {"straight": 0.0, "loop": 0.0}
    inflight_num = {"straight": 0.0, "loop": 0.0}
    loads = {"straight": 0.0, "loop": 0.0}
    loop_bodies = 0
    acc_bytes = acc_w = 0.0
    for b in traffic.bodies:
        w = b.mean_width_bytes or 4.0
        acc_bytes += b.bytes_per_cta
        acc_w += b.bytes_per_cta * w
        if b.partitioned_load_bytes_per_cta <= 0 or b.load_bytes_per_iteration <= 0:
            continue
        per_thread_total = b.partitioned_load_bytes_per_cta / threads
        if b.sweep:
            kind = "loop"
            loop_bodies += 1
            per_thread = float(b.distinct_load_bytes_per_iteration or b.load_bytes_per_iteration)
        else:
            kind = "straight"
            per_thread = min(float(b.load_bytes_per_iteration), per_thread_total / b.iterations_per_cta)
        rounds[kind] += per_thread_total / per_thread
        inflight_num[kind] += per_thread * b.partitioned_load_bytes_per_cta
        loads[kind] += b.partitioned_load_bytes_per_cta
    total_loads = loads["straight"] + loads["loop"]
    return {
        "ctas": float(ctas), "threads": float(threads), "slots": float(blocks_per_sm * gpu.sm_count),
        "cluster": float(cluster), "compulsory": float(bytes_moved), "partitioned_bytes": float(part),
        "shared_bytes": float(shared), "spill_bytes": float(spill_bytes_per_thread) * threads * ctas,
        "sweep_bytes": float(sweep_bytes),
        "rounds": rounds["straight"], "inflight_thread": (inflight_num["straight"] / loads["straight"]
                                                          if loads["straight"] > 0 else 16.0),
        "loop_rounds": rounds["loop"], "loop_inflight_thread": (inflight_num["loop"] / loads["loop"]
                                                                if loads["loop"] > 0 else 16.0),
        "loop_share": loads["loop"] / total_loads if total_loads > 0 else 0.0,
        "width": acc_w / acc_bytes if acc_bytes > 0 else 4.0,
        "barriers": float(traffic.cta_barriers), "cluster_barriers": float(traffic.cluster_barriers),
        "dsmem": float(traffic.dsmem_loads), "copy_bps": gpu.copy_gbps * 1e9, "l2_bytes": float(gpu.l2_bytes),
        "sm_count": float(gpu.sm_count), "clock_hz": gpu.boost_mhz * 1e6, "requested": float(traffic.bytes),
        "loop_bodies": float(loop_bodies),  # sweep-loop bodies with loads: a surrogate feature, not priced
    }


def predict_parts(terms: Mapping[str, Any], c: CostConstants) -> dict[str, Any]:
    """The model's parts (seconds unless said): t_dram, t_l2, t_issue, t_cta, t_chain (one CTA's latency chain),
    dram_bytes, l2_hit_bytes, duty (share of a CTA's chain spent waiting on memory), time_us. ``terms`` values
    may be floats or equal-length NumPy arrays."""
    t = {k: np.asarray(terms[k], dtype=float) for k in TERM_NAMES}
    lat = c.latency_ns * 1e-9
    bw = t["copy_bps"] * c.bw_scale
    conc = np.minimum(t["ctas"], t["slots"])
    reread = np.maximum(0.0, t["partitioned_bytes"] - t["compulsory"])
    ws = conc * t["sweep_bytes"]
    room = c.l2_fraction * t["l2_bytes"]
    miss = np.where(ws <= room, 0.0, 1.0 - room / np.maximum(ws, 1.0))
    dram = t["compulsory"] + reread * miss + t["spill_bytes"]
    l2 = reread * (1.0 - miss) + t["shared_bytes"]
    serial = (c.cta_ns + c.barrier_ns * t["barriers"] + c.cluster_barrier_ns * t["cluster_barriers"]
              + c.dsmem_ns * t["dsmem"]) * 1e-9
    # A sweep loop with loads waits at least one round trip per body (its first loads cannot be hidden behind
    # earlier iterations; two bodies separated by a barrier, e.g. the two passes of a re-read, cannot overlap).
    # When the kernel re-reads and has two or more such bodies, one is the re-read pass: its round trip is an L2
    # hit (``L2_HIT_LATENCY_RATIO`` of a DRAM one) for the share of re-read bytes that hits.
    if LOOP_FLOOR == "busiest":
        bodies = np.where(t["loop_rounds"] > 0, t["loop_bodies"], 0.0)
    else:
        bodies = np.minimum(t["loop_rounds"], t["loop_bodies"])
    rebody = np.where(reread > 0, np.clip(bodies - 1.0, 0.0, 1.0), 0.0)
    floor = bodies - rebody * (1.0 - miss) * (1.0 - L2_HIT_LATENCY_RATIO)
    loop_trips = np.maximum(t["loop_rounds"] / c.loop_mlp, floor)
    mem = np.maximum((t["rounds"] + loop_trips) * lat, 1e-12)
    chain = mem + serial
    t_dram = dram / bw
    t_l2 = l2 / (c.l2_gbps * 1e9)
    active = np.minimum(t["sm_count"], t["ctas"])
    t_issue = t["requested"] / (active * t["clock_hz"] * np.minimum(32.0 * t["width"], 128.0))
    t_cta = np.ceil(t["ctas"] / t["slots"]) * chain
    p = c.sharpness
    top = np.maximum(np.maximum(t_dram, t_l2), np.maximum(t_issue, t_cta))
    smooth = top * ((t_dram / top) ** p + (t_l2 / top) ** p + (t_issue / top) ** p + (t_cta / top) ** p) ** (1 / p)
    return {"t_dram": t_dram, "t_l2": t_l2, "t_issue": t_issue, "t_cta": t_cta, "t_chain": chain,
            "dram_bytes": dram, "l2_hit_bytes": l2, "duty": mem / chain,
            "time_us": (smooth + chain) * 1e6 + c.launch_us}


def predict_time_us(terms: Mapping[str, Any], c: CostConstants) -> Any:
    """Estimated µs (float, or an array for array terms) of the launch(es) described by ``terms``."""
    out = predict_parts(terms, c)["time_us"]
    return float(out) if np.ndim(out) == 0 else out


def is_finite_terms(terms: Mapping[str, float]) -> bool:
    """Whether every term is a finite number (a guard for hand-built terms)."""
    return all(math.isfinite(float(terms[k])) for k in TERM_NAMES)
