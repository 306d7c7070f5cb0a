"""What a run's numbers were measured against: the provenance written into ``summary.json``, the store's meta
(``provenance``), every exported card and every lesson.

Two runs can be compared (``experiments/compare_algorithms.py``) only when every ``POOL_KEYS`` entry is equal:
the same workload (name and options), budget, evaluator kind, hardware, gate version, objective definition and
static-model version. A version a module does not declare yet is recorded as None (and then compares equal only
to None).

Sources: ``evaluators.gpu.gate.GATE_VERSION`` (the gate's version constant), ``evaluators.static.MODEL_VERSION``
(the static cost model's; a hash of its source files while it declares none; for the static and replay evaluators
preceded by the evaluator's ``model_version``, which names the calibration), the workload's ``primary_baseline``, and ``evaluators.static.BASELINE_NAME`` (the
baseline of the static evaluator's estimated speedup).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

POOL_KEYS = ("workload", "budget", "evaluator", "hardware", "gate_version", "objective", "static_model_version")


def _constant(module: str, *names: str) -> Any:
    """The first of ``names`` defined in ``module`` (None when the module or every name is missing)."""
    try:
        mod = importlib.import_module(module)
    except Exception:  # an optional module that cannot be imported here
        return None
    for n in names:
        if hasattr(mod, n):
            return getattr(mod, n)
    return None


def gate_version() -> Any:
    """``evaluators.gpu.gate.GATE_VERSION`` (None when not declared)."""
    return _constant("evaluators.gpu.gate", "GATE_VERSION")


STATIC_MODEL_SOURCES = ("evaluators.static", "evaluators.traffic", "evaluators.cost_model")


def static_model_version(evaluator: Any = None) -> Any:
    """The static model's version: ``evaluators.static.MODEL_VERSION`` when declared, else ``"source:<12 hex>"``
    (the SHA-256 of its source files, ``STATIC_MODEL_SOURCES``); given an evaluator that names its model
    (``model_version``: the static evaluator's ``static-v4/<calibration id>``, the replay evaluator's
    ``replay+static-v4/<calibration id>``) that name comes first, ``"<model_version>+<source version>"``, so runs
    of two different models, or of one model under two calibrations, are never taken as one (None when nothing
    can be read)."""
    named = getattr(evaluator, "model_version", None) if evaluator is not None else None
    source = _static_source_version()
    if isinstance(named, str) and named:
        return f"{named}+{source}" if source is not None else named
    return source


def _static_source_version() -> Any:
    declared = _constant("evaluators.static", "MODEL_VERSION", "STATIC_MODEL_VERSION")
    if declared is not None:
        return declared
    import hashlib

    h = hashlib.sha256()
    try:
        for name in STATIC_MODEL_SOURCES:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                return None
            with open(spec.origin, "rb") as f:
                h.update(f.read())
    except (OSError, ImportError, ValueError):
        return None
    return f"source:{h.hexdigest()[:12]}"


def objective_definition(evaluator_kind: str, workload: Any, evaluator: Any = None) -> tuple[str, str | None]:
    """(definition text, baseline name) of the objective a run's evaluator reports.

    An evaluator that declares ``objective_definition`` / ``baseline`` wins; else the static evaluator's
    estimated speedup over ``evaluators.static.BASELINE_NAME`` and the GPU evaluator's measured geomean speedup
    over ``workload.primary_baseline`` across the search shapes."""
    declared = getattr(evaluator, "objective_definition", None)
    if isinstance(declared, str) and declared:
        return declared, getattr(evaluator, "baseline", None)
    if evaluator_kind == "static":
        base = _constant("evaluators.static", "BASELINE_NAME") or "naive_seed"
        return f"estimated speedup over {base} (static roofline model, not a measurement)", str(base)
    base = getattr(workload, "primary_baseline", None)
    return f"geomean speedup over {base} across the search shapes (GPU measurement)", base


def _workload_key(workload: Any, node: Any) -> dict[str, Any]:
    """What identifies the workload: ``Workload.spec()`` (``_target_`` and options) when it has one, else its
    config node."""
    spec = getattr(workload, "spec", None)
    if callable(spec):
        try:
            return dict(spec())
        except Exception:  # a workload without options() support: fall back to the config
            pass
    return dict(node) if isinstance(node, dict) else {"name": getattr(workload, "name", None)}


def run_provenance(cfg: Any, *, evaluator_kind: str, estimate: bool, workload: Any = None,
                   evaluator: Any = None, objective: dict[str, Any] | None = None) -> dict[str, Any]:
    """The provenance of a run (module docstring) from its composed config (a plain dict or DictConfig):
    keys ``POOL_KEYS`` plus ``estimate`` (bool), ``baseline`` and ``seed``. objective: the run's objective meta
    (``evolve.app.objective_definition``: ``definition``, ``baseline``, ``gate_version``...); when given, its
    definition, baselines and gate version are what the provenance records."""
    def get(*path: str) -> Any:
        node: Any = cfg
        for p in path:
            node = node.get(p) if hasattr(node, "get") else None
            if node is None:
                return None
        return node

    def plain(x: Any) -> Any:
        try:
            from omegaconf import DictConfig, ListConfig, OmegaConf

            if isinstance(x, DictConfig | ListConfig):
                return OmegaConf.to_container(x, resolve=True)
        except ImportError:
            pass
        return x

    definition, baseline = objective_definition(evaluator_kind, workload, evaluator)
    gate = gate_version() if evaluator_kind != "static" else None
    if objective:
        obj = {k: v for k, v in objective.items() if k not in ("estimate", "shapes", "tasks", "gate_version")}
        definition = obj if len(obj) > 1 else obj.get("definition", definition)
        baseline = objective.get("baseline", objective.get("baselines", baseline))
        if evaluator_kind != "static":
            gate = objective.get("gate_version", gate)
    return {
        "workload": _workload_key(workload, plain(get("workload"))),
        "budget": {k: get("budget", k) for k in ("evaluations", "seconds", "candidates")},
        "evaluator": evaluator_kind,
        "hardware": {"name": get("hardware", "name"), "arch": get("hardware", "arch")},
        "gate_version": gate,
        "objective": definition,
        "static_model_version": (static_model_version(evaluator) if evaluator_kind in ("static", "replay")
                                 else None),
        "estimate": bool(estimate),
        "baseline": baseline,
        "seed": get("seed"),
    }


def stop_reason(budget: Any, snapshot: Any, halted: str | None = None) -> str:
    """Why a run ended, in one sentence: which ``evolve.budget.Budget`` limit was reached and, when the
    candidate limit ended it, what the candidates went to (duplicates, rows per failure status), so a run whose
    proposals were all duplicates or errors says so instead of looking finished.

    budget: the run's Budget (limits and counters); snapshot: the final ``evolve.engine.Snapshot``; halted:
    ``Engine.halted`` (why the engine stopped before the budget, e.g. every operator switched off)."""
    if halted:
        return f"errors: {halted} (after {int(budget.evaluations)} evaluations)"
    ev, cand = int(budget.evaluations), int(budget.candidates)
    if budget.max_evaluations is not None and ev >= budget.max_evaluations:
        if ev > budget.max_evaluations:  # a resume of a longer run with a smaller budget: nothing new ran
            return (f"evaluation budget spent: the run already held {ev} evaluations, more than "
                    f"budget.evaluations={budget.max_evaluations}")
        return f"evaluation budget spent ({ev} of {budget.max_evaluations} evaluations)"
    if budget.max_seconds is not None and budget.seconds >= budget.max_seconds:
        return f"time budget spent ({budget.seconds:.0f} of {budget.max_seconds:.0f} s, {ev} evaluations)"
    if budget.max_candidates is not None and cand >= budget.max_candidates:
        statuses = dict(getattr(snapshot, "statuses", {}) or {})
        parts = []
        dups = int(getattr(snapshot, "duplicates", 0) or 0)
        if dups:
            parts.append(f"{dups} duplicates")
        for status, n in sorted(statuses.items(), key=lambda kv: -kv[1]):
            if status != "ok" and n:
                parts.append(f"{n} {status}")
        what = ", ".join(parts[:6]) or "none recorded"
        main = "duplicates" if dups * 2 >= cand else "errors"
        return (f"candidate budget spent ({cand} of {budget.max_candidates} candidates) after only {ev} "
                f"evaluations, mostly {main}: {what}")
    return f"stopped after {ev} evaluations and {cand} candidates (no parent left to propose from)"
