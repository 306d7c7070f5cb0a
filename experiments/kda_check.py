"""Helpers shared by the KDA GPU studies (``experiments/kda_h200.py``, ``experiments/kda_chunk_h200.py``): the
kernels under study, and the two error measures each correctness row reports.

Error measures (float64 arrays, NaN in ``ref`` marking elements not checked): the largest error in units of the
workload tolerance, ``max |out - ref| / (atol + rtol |ref| + half_ulp)`` (<= 1 passes: the gate's criterion,
``evaluators.gpu.gate.within_tolerance``), and fla's test criterion ``RMS(ref - out) / RMS(ref)`` (< 5e-3
passes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# fla's test criterion: RMS(ref - out) / RMS(ref) below this passes.
RMS_LIMIT = 5e-3


def parse_variants(text: str) -> list[dict[str, int]]:
    """'cols=8,warps=2;bv=128' -> [{'cols': 8, 'warps': 2}, {'bv': 128}] (knob sets, ';'-separated; empty
    parts skipped). ValueError on a part that is not ``name=int``."""
    return [{k.strip(): int(v) for k, v in (kv.split("=") for kv in part.split(","))}
            for part in filter(None, (p.strip() for p in text.split(";")))]


def kernels_of(wl: Any, variants: str, store: str | None = None) -> dict[str, Any]:
    """name -> Kernel: the workload's two seeds (``naive``, ``template``), its template at each knob set of
    ``variants`` (``parse_variants``), named ``template k=v,...``, and with ``store`` (a run's store.sqlite or a
    recorded .sqlite.xz) the best ok kernel of that run, named ``search #<row id>``. FileNotFoundError for a
    missing store, ValueError when it holds no ok kernel."""
    naive, template = wl.seeds()
    kernels = {"naive": naive, "template": template}
    for v in parse_variants(variants):
        kernels["template " + ",".join(f"{k}={x}" for k, x in v.items())] = wl.instantiate(v)
    if store:
        from evaluators.recorded import open_store

        row = open_store(store).best()
        if row is None:
            raise ValueError(f"{store}: no ok kernel to verify")
        kernels[f"search #{row.id}"] = row.kernel()
    return kernels


def rms_ratio(out: np.ndarray, ref: np.ndarray) -> float:
    """RMS(ref - out) / RMS(ref) over the elements where ref is not NaN (fla's test criterion)."""
    keep = ~np.isnan(ref)
    d, r = (out - ref)[keep], ref[keep]
    return float(np.sqrt(np.mean(d * d)) / max(np.sqrt(np.mean(r * r)), 1e-30))


def tol_units(out: np.ndarray, ref: np.ndarray, atol: float, rtol: float, half_ulp: np.ndarray | float) -> float:
    """max |out - ref| / (atol + rtol |ref| + half_ulp) over the non-NaN reference elements (<= 1 passes; a
    NaN output counts as infinitely far; 0.0 when nothing is checked). ``half_ulp``: an array shaped like
    ``ref`` or a scalar (only 0 is meant: the fp32 state has no output rounding)."""
    keep = ~np.isnan(ref)
    err = np.abs(out - ref)[keep] / (atol + rtol * np.abs(ref[keep]) + (half_ulp[keep] if np.ndim(half_ulp) else 0))
    return float(np.nan_to_num(err, nan=np.inf).max()) if err.size else 0.0


def error_stats(o: np.ndarray, ro: np.ndarray, st: np.ndarray, rs: np.ndarray, atol: float, rtol: float,
                o_half_ulp: np.ndarray) -> dict[str, float]:
    """The four measures of one correctness row: ``o_tol``, ``o_rms`` (the output o against its reference,
    ``o_half_ulp`` its bf16 rounding allowance) and ``state_tol``, ``state_rms`` (the final fp32 state)."""
    return {"o_tol": tol_units(o, ro, atol, rtol, o_half_ulp), "o_rms": rms_ratio(o, ro),
            "state_tol": tol_units(st, rs, atol, rtol, 0.0), "state_rms": rms_ratio(st, rs)}


def passes(row: dict[str, Any]) -> bool:
    """A row passes when both tolerance measures are <= 1 and both RMS measures are below RMS_LIMIT."""
    return (row["o_tol"] <= 1 and row["state_tol"] <= 1 and row["o_rms"] < RMS_LIMIT
            and row["state_rms"] < RMS_LIMIT)


def correctness_row(name: str, shape: tuple[int, ...], dist: str, o: np.ndarray, ro: np.ndarray, st: np.ndarray,
                    rs: np.ndarray, atol: float, rtol: float, pairs: Any, *, max_lengths: int | None = None
                    ) -> dict[str, Any]:
    """One correctness row: kernel ``name`` at ``shape`` (heads, then the sequence lengths; the first
    ``max_lengths`` of them kept when given) on inputs of distribution ``dist``, its ``error_stats`` (the output
    ``o`` against ``ro`` with the bf16 rounding allowance of ``ro``, the final state ``st`` against ``rs``; float64
    arrays), the ``sampled_pairs`` checked (None: all) and ``ok`` (``passes``)."""
    from workloads.dtypes import half_ulp

    lengths = list(shape[1:]) if max_lengths is None else list(shape[1:])[:max_lengths]
    row = {"kernel": name, "heads": shape[0], "lengths": lengths, "distribution": dist,
           **error_stats(o, ro, st, rs, atol, rtol, half_ulp(np.nan_to_num(ro), "bf16")), "sampled_pairs": pairs}
    row["ok"] = passes(row)
    return row


def row_line(row: dict[str, Any], shape: tuple[int, ...], regs: int, width: int) -> str:
    """The printed line of a ``correctness_row``: kernel (``width`` characters), registers, shape (heads,
    sequences, total tokens), distribution, the four measures and whether it passes."""
    where = f"({shape[0]}, {len(shape) - 1} seqs, T={sum(shape[1:])})"
    return (f"{row['kernel']:{width}s} {regs:4d} {where:>22s} {row['distribution']:>14s} {row['o_tol']:8.3f} "
            f"{row['o_rms']:9.2e} {row['state_tol']:8.3f} {row['state_rms']:9.2e} {'yes' if row['ok'] else 'NO'}")
