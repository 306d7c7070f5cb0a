"""Recorded GPU measurements: the ``ok`` candidates of one or more run stores (``archive.store``), for the
static model's calibration, the replay evaluator and the fidelity study.

A store is a ``.sqlite`` file or a compressed one: xz (``experiments/data/*.sqlite.xz``, what
``scripts/pack_store.py`` writes: about a tenth of gzip's size for these mostly-PTX stores) or gzip (``.gz``, older
packs). A compressed store is unpacked once into a cache folder (``$PTXFORGE_CACHE/recorded`` or
``~/.cache/ptxforge/recorded``) named by the content hash of the packed file, and opened read-only. Kernels are keyed by identity (``Kernel.identity``: SHA-256 of the canonical
PTX, entry and launch), so the same kernel measured in several runs is one ``Measured`` with several runs.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import shutil
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archive.store import CandidateRow, Store

Shape = tuple[int, ...]


def cache_dir() -> Path:
    """Where unpacked stores live: ``$PTXFORGE_CACHE/recorded`` or ``~/.cache/ptxforge/recorded``."""
    base = os.environ.get("PTXFORGE_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "ptxforge") / "recorded"


PROJECT_ROOT = Path(__file__).resolve().parents[1]


def resolve_store(path: str | Path) -> Path:
    """A store path as given when it names a file, else relative to the project root (so the shipped
    ``experiments/data/...`` stores are found from any working directory); the path as given when neither
    exists (the caller reports it)."""
    p = Path(path)
    if p.is_file() or p.is_absolute():
        return p
    q = PROJECT_ROOT / p
    return q if q.is_file() else p


# Compressed store suffix -> opener of its decompressed bytes.
_PACKED = {".xz": lzma.open, ".gz": gzip.open}


def open_store(path: str | Path) -> Store:
    """Open a recorded store read-only; an ``.xz`` or ``.gz`` is unpacked (once, by content hash) into
    ``cache_dir()``. Raises FileNotFoundError naming the path when it does not exist, StoreError when it is no
    ptxforge store (lzma.LZMAError / gzip.BadGzipFile when the packed file is corrupt)."""
    p = resolve_store(path)
    if not p.is_file():
        raise FileNotFoundError(f"recorded store {str(path)!r}: no such file")
    if p.suffix in _PACKED:
        h = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        out = cache_dir() / f"{p.name[:-len(p.suffix)]}.{h}"
        if not out.is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(out.suffix + f".tmp{os.getpid()}")
            with _PACKED[p.suffix](p, "rb") as src, tmp.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            tmp.replace(out)  # atomic: a concurrent reader never sees half a file
        p = out
    return Store(p, readonly=True)


def run_name(path: str | Path) -> str:
    """A run's name from its store path: the file name without ``.sqlite`` / ``.xz`` / ``.gz``."""
    name = Path(path).name
    for suffix in (*_PACKED, ".sqlite"):
        name = name.removesuffix(suffix)
    return name


@dataclass
class Measured:
    """One kernel as measured on the GPU, over every run that evaluated it.

    identity: ``Kernel.identity``; row: its first recorded row (PTX, launch, features, metrics...);
    runs: the run names that measured it (in the order the stores were given); times_us: shape -> the
    median over runs of the measured µs; baseline_us: shape -> baseline name -> µs (first run);
    objective: the recorded objective (first run)."""

    identity: str
    row: CandidateRow
    runs: list[str] = field(default_factory=list)
    times_us: dict[Shape, float] = field(default_factory=dict)
    baseline_us: dict[Shape, dict[str, float]] = field(default_factory=dict)
    objective: float | None = None
    _all_times: dict[Shape, list[float]] = field(default_factory=dict, repr=False)

    def kernel(self) -> Any:
        """The ``population.kernel.Kernel`` (parsed from the stored PTX)."""
        return self.row.kernel()


@dataclass
class Recording:
    """The ok measurements of a list of stores, deduplicated by identity.

    runs: run names in the order given; kernels: identity -> Measured (insertion order: first store first,
    row id order within a store); shapes: the shapes every kernel was measured at (the search shapes);
    meta: run name -> the store's meta (config, versions); rows: run name -> every row (all statuses, in id
    order) without PTX, for replaying a run's sequence."""

    runs: list[str]
    kernels: dict[str, Measured]
    shapes: list[Shape]
    meta: dict[str, dict[str, Any]]
    paths: dict[str, str]

    def of_run(self, run: str) -> list[Measured]:
        """Kernels a run measured (each once, in its first-measured order)."""
        return [m for m in self.kernels.values() if run in m.runs]

    def reference_times(self) -> dict[Shape, float]:
        """Per shape, the median GPU µs over every recorded kernel: a per-shape constant for geomean scores
        (any such constant leaves the ranking of kernels unchanged), available whatever baselines a run timed."""
        return {s: statistics.median(m.times_us[s] for m in self.kernels.values()) for s in self.shapes}

    def baseline_or_reference(self, name: str) -> tuple[str, dict[Shape, float]]:
        """(what it is, µs per shape): baseline ``name``'s recorded times when some kernel recorded it at every
        shape, else ``reference_times()``."""
        try:
            return name, self.baseline_times(name)
        except KeyError:
            return "median recorded kernel", self.reference_times()

    def baseline_times(self, name: str) -> dict[Shape, float]:
        """Median over all kernels' records of baseline ``name``'s µs at each shape (KeyError when it was
        never measured)."""
        out: dict[Shape, float] = {}
        for s in self.shapes:
            vals = [m.baseline_us[s][name] for m in self.kernels.values() if name in m.baseline_us.get(s, {})]
            if not vals:
                raise KeyError(f"baseline {name!r} has no recorded time at shape {s}")
            out[s] = statistics.median(vals)
        return out


def _shape_times(row: CandidateRow) -> tuple[dict[Shape, float], dict[Shape, dict[str, float]]]:
    times: dict[Shape, float] = {}
    base: dict[Shape, dict[str, float]] = {}
    for s in row.metrics.get("shapes", []):
        shape = tuple(int(v) for v in s["shape"])
        times[shape] = float(s["time_us"])
        base[shape] = {k: float(v) for k, v in (s.get("baseline_us") or {}).items()}
    return times, base


def load_recording(paths: Sequence[str | Path] | Iterable[str | Path]) -> Recording:
    """Read the ok, GPU-measured (not estimated) candidates of every store in ``paths``.

    Raises ValueError when ``paths`` is empty, names one run twice, or a store holds no measured ok row
    (naming the file); FileNotFoundError / StoreError from ``open_store``."""
    paths = list(paths)
    if not paths:
        raise ValueError("load_recording: no stores given")
    names = [run_name(p) for p in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"load_recording: a run is given twice: {names}")
    kernels: dict[str, Measured] = {}
    meta: dict[str, dict[str, Any]] = {}
    shapes: list[Shape] | None = None
    for path, name in zip(paths, names):
        with open_store(path) as st:
            meta[name] = st.meta()
            n = 0
            for row in st.candidates(status="ok"):
                if row.metrics.get("estimate") or row.objective is None:
                    continue
                times, base = _shape_times(row)
                if not times:
                    continue
                n += 1
                shapes = shapes or list(times)
                m = kernels.get(row.identity)
                if m is None:
                    m = kernels[row.identity] = Measured(row.identity, row, objective=row.objective,
                                                         baseline_us=base)
                if name not in m.runs:
                    m.runs.append(name)
                for s, t in times.items():
                    m._all_times.setdefault(s, []).append(t)
                    m.times_us[s] = statistics.median(m._all_times[s])
            if n == 0:
                raise ValueError(f"recorded store {str(path)!r} holds no GPU-measured ok candidate")
    return Recording(names, kernels, shapes or [], meta, {n: str(p) for n, p in zip(names, paths)})
