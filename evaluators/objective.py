"""The search objective of the GPU evaluator: geomean speedup over a reference baseline chosen per shape.

Definition (``ObjectiveSpec``). At each benchmarked shape ``s`` the candidate's median time ``t(s)`` (µs) is
compared with one reference time ``r(s)`` (µs) measured in the same worker:

- ``baseline="best"`` (default): ``r(s)`` = the fastest of the ``libraries`` measured at ``s`` (torch.compile,
  Liger, QuACK default, QuACK autotuned: whichever ran there). A library missing at ``s`` (not installed, or it
  failed at that shape) is left out and named in ``missing``; when none of them ran, the first of ``fallback``
  present is used (``torch`` eager, then the naive seed) and the shape is reported as a fallback.
- ``baseline=<name>``: ``r(s)`` = that baseline's time (e.g. ``torch`` for eager ``rms_norm``); when it is
  absent, the ``fallback`` chain again.

A contender measured earlier in the same pool at ``s`` but absent from this evaluation is judged at its last
measured time (``ReferenceMemory``, applied by ``GPUPool.evaluate``), so a library that fails once on a worker does
not change the reference set an objective is taken against.

``objective = geomean_s(r(s) / t(s))`` over the shapes (a geometric mean of per-shape speedups, the metric QuACK
and Liger publish their comparisons in). When no reference ran at some shape the objective falls back to the
geomean of the fraction of the copy roofline (``ShapeResult.frac_copy``), named ``copy_roofline``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evaluators.types import ShapeResult, geomean

# RMSNorm's contenders, the default of a bare ObjectiveSpec(); a run takes its workload's
# (``workload_objective``: ``Workload.libraries``). Eager torch is a column of every RMSNorm table but not a
# contender (torch.compile of the same function is always at least as fast).
DEFAULT_LIBRARIES: tuple[str, ...] = ("torch_compile", "liger", "quack", "quack_tuned")
DEFAULT_FALLBACK: tuple[str, ...] = ("torch", "naive")


@dataclass(frozen=True)
class ObjectiveSpec:
    """What the objective's speedup is taken against (module docstring).

    baseline: ``"best"`` or one baseline name (``"torch"``, ``"torch_compile"``, ``"liger"``, ``"quack"``,
    ``"quack_tuned"``, ``"naive"``); libraries: the contenders of ``"best"``; fallback: used in order where the
    reference is absent; library_inputs: what the baselines are given where it differs from the kernel's view
    (``Workload.library_inputs``, e.g. RMSNorm's weight dtype), part of the definition ("" = nothing to say).
    Raises ValueError for an empty baseline or an empty contender list with ``"best"``.
    """

    baseline: str = "best"
    libraries: tuple[str, ...] = DEFAULT_LIBRARIES
    fallback: tuple[str, ...] = DEFAULT_FALLBACK
    library_inputs: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "libraries", tuple(str(x) for x in self.libraries))
        object.__setattr__(self, "fallback", tuple(str(x) for x in self.fallback))
        if not self.baseline:
            raise ValueError("objective.baseline is empty; give 'best' or a baseline name such as 'torch'")
        if self.baseline == "best" and not self.libraries:
            raise ValueError("objective.libraries is empty; 'best' needs at least one library to compare against")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | ObjectiveSpec | str | None,
                    default: ObjectiveSpec | None = None) -> ObjectiveSpec:
        """From ``{baseline, libraries?, fallback?}`` (the ``objective`` config node), a baseline name, an
        ObjectiveSpec, or None. What it leaves out or sets to null comes from ``default`` (a run passes its
        workload's, ``workload_objective``; None: ``ObjectiveSpec()``). ValueError naming an unknown key."""
        base = default if default is not None else cls()
        if cfg is None:
            return base
        if isinstance(cfg, ObjectiveSpec):
            return cfg
        if isinstance(cfg, str):
            return cls(baseline=cfg, libraries=base.libraries, fallback=base.fallback,
                       library_inputs=base.library_inputs)
        d = dict(cfg)
        unknown = set(d) - {"baseline", "libraries", "fallback"}
        if unknown:
            raise ValueError(f"objective: unknown key(s) {sorted(unknown)}; allowed: baseline, libraries, fallback")
        return cls(baseline=str(d.get("baseline") or "best"),
                   libraries=tuple(d["libraries"]) if d.get("libraries") is not None else base.libraries,
                   fallback=tuple(d["fallback"]) if d.get("fallback") is not None else base.fallback,
                   library_inputs=base.library_inputs)

    @property
    def contenders(self) -> tuple[str, ...]:
        """The baselines the reference is chosen among before any fallback."""
        return self.libraries if self.baseline == "best" else (self.baseline,)

    @property
    def baseline_names(self) -> tuple[str, ...]:
        """Every baseline the objective may need timed (contenders, then fallbacks; naive is timed anyway)."""
        names = [*self.contenders, *self.fallback]
        return tuple(dict.fromkeys(n for n in names if n != "naive"))

    def describe(self) -> str:
        """One line for cards and reports, e.g. ``speedup over the fastest of torch_compile, liger ...``."""
        inputs = f"; {self.library_inputs}" if self.library_inputs else ""
        if self.baseline == "best":
            return (f"geomean over shapes of the speedup over the fastest of {', '.join(self.libraries)} measured at "
                    f"each shape (fallback {' > '.join(self.fallback)}){inputs}")
        return f"geomean over shapes of the speedup over {self.baseline} (fallback {' > '.join(self.fallback)}){inputs}"

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "libraries": list(self.libraries), "fallback": list(self.fallback),
                "library_inputs": self.library_inputs, "definition": self.describe()}


@dataclass
class ObjectiveValue:
    """An evaluated objective: value (geomean speedup), reference (shape -> the baseline used there),
    missing (shape -> contenders absent there), fallback_shapes (shapes where a fallback was the reference),
    name (a label for ``EvalResult.extra["objective_baseline"]``)."""

    value: float
    name: str
    reference: dict[str, str] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)
    fallback_shapes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "name": self.name, "reference": self.reference, "missing": self.missing,
                "fallback_shapes": self.fallback_shapes}


def workload_objective(workload: Any) -> ObjectiveSpec:
    """The objective ``workload`` is searched against unless the config names libraries: the fastest of its
    ``libraries`` (``Workload.libraries``; empty: its ``baseline_names``) at each shape, falling back to its
    ``primary_baseline`` and then the naive seed (RMSNorm: torch.compile, Liger, QuACK default and autotuned,
    fallback eager torch; KDA recurrent: fla; softmax: torch)."""
    libraries = tuple(getattr(workload, "libraries", ()) or workload.baseline_names or (workload.primary_baseline,))
    return ObjectiveSpec(libraries=libraries, fallback=tuple(dict.fromkeys((workload.primary_baseline, "naive"))),
                         library_inputs=str(getattr(workload, "library_inputs", "") or ""))


def shape_key(shape: Sequence[int]) -> str:
    """``"32768x4096"``: the JSON key of a shape."""
    return "x".join(str(int(v)) for v in shape)


def reference_of(baseline_us: Mapping[str, float], spec: ObjectiveSpec) -> tuple[str, float, list[str], bool] | None:
    """(name, µs, missing contenders, is_fallback) of the reference at one shape, None when nothing usable ran.
    Non-positive or non-finite times count as absent."""
    ok = {n: float(t) for n, t in baseline_us.items() if t is not None and 0 < float(t) < float("inf")}
    missing = [n for n in spec.contenders if n not in ok]
    present = [n for n in spec.contenders if n in ok]
    if present:
        name = min(present, key=lambda n: (ok[n], spec.contenders.index(n)))
        return name, ok[name], missing, False
    for n in spec.fallback:
        if n in ok:
            return n, ok[n], missing, True
    return None


def evaluate_objective(shapes: Sequence[ShapeResult], spec: ObjectiveSpec) -> ObjectiveValue:
    """The objective over ``shapes`` (module docstring). ValueError for an empty list or a non-positive time."""
    if not shapes:
        raise ValueError("objective over no shapes")
    ratios: list[float] = []
    out = ObjectiveValue(value=0.0, name=spec.baseline)
    for s in shapes:
        if s.time_us <= 0:
            raise ValueError(f"candidate time at shape {s.shape} is {s.time_us} µs; must be > 0")
        ref = reference_of(s.baseline_us, spec)
        key = shape_key(s.shape)
        if ref is None:
            out.value = geomean([sr.frac_copy or 1e-9 for sr in shapes])
            out.name = "copy_roofline"
            out.reference = {}
            return out
        name, us, missing, fb = ref
        out.reference[key] = name
        if missing:
            out.missing[key] = missing
        if fb:
            out.fallback_shapes.append(key)
        ratios.append(us / s.time_us)
    out.value = geomean(ratios)
    if spec.baseline == "best":
        out.name = "best_library" if not out.fallback_shapes else "best_library+fallback"
    return out


class ReferenceMemory:
    """The last time measured for each contender at each shape in one pool: a contender absent from one
    evaluation (a library that failed there on this worker, once) is judged at its remembered time instead of
    being dropped, so every objective of a run is taken against the same reference set once it has been seen.
    Without it the same kernel times judged against a partial set score higher and displace elites judged
    against the full one (red-team round 17: QuACK missing at 16384 x 131072 lifts a four-shape objective by
    (2300 / 2050)^(1/4) = 1.029). A contender never measured at a shape stays missing (``ObjectiveValue.missing``)."""

    def __init__(self, spec: ObjectiveSpec) -> None:
        self.spec = spec
        self._us: dict[tuple[tuple[int, ...], str], float] = {}

    def fill(self, shapes: Sequence[ShapeResult]) -> tuple[list[ShapeResult], dict[str, list[str]]]:
        """(``shapes`` with every remembered contender missing from a shape's ``baseline_us`` filled in, shape key ->
        the names filled); remembers every valid contender time ``shapes`` measured."""
        out: list[ShapeResult] = []
        filled: dict[str, list[str]] = {}
        for s in shapes:
            base = dict(s.baseline_us)
            for name in self.spec.contenders:
                t = base.get(name)
                if t is not None and 0 < float(t) < float("inf"):
                    self._us[(tuple(s.shape), name)] = float(t)
                elif (tuple(s.shape), name) in self._us:
                    base[name] = self._us[(tuple(s.shape), name)]
                    filled.setdefault(shape_key(s.shape), []).append(name)
            out.append(replace(s, baseline_us=base) if base != s.baseline_us else s)
        return out, filled


def best_library_speedups(shapes: Sequence[ShapeResult], spec: ObjectiveSpec) -> dict[str, float]:
    """shape key -> speedup over that shape's reference (shapes without a reference left out): the per-shape
    column of the reports."""
    out: dict[str, float] = {}
    for s in shapes:
        ref = reference_of(s.baseline_us, spec)
        if ref is not None and s.time_us > 0:
            out[shape_key(s.shape)] = ref[1] / s.time_us
    return out
