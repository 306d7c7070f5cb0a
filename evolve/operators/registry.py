"""Build the configured mutation operators from Hydra config dicts.

A spec is a mapping ``{name: str, weight: float = 1.0, _target_: str = None, **params}`` (e.g. from
``conf/mutator/rules.yaml``); ``params`` are the operator class's fields. ``_target_`` (Hydra's key) names the
class by dotted path, so an operator defined outside this repository is one spec line; without it, ``name``
is looked up among the built-in operators below (a short name for their class path). ``"llm"`` maps to
``evolve.operators.llm:LLMOperator``, imported only when asked for so the structural operators work without
the LLM stack.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

import evolve.operators.async_copy
import evolve.operators.cluster_split
import evolve.operators.hoist
import evolve.operators.vectorize  # noqa: F401  (registers the REWRITE kinds)
from evolve.operators.base import Operator

# name -> "module:Class"
OPERATORS: dict[str, str] = {
    "hints": "evolve.operators.hints:HintsOperator",
    "mathops": "evolve.operators.mathops:MathOpsOperator",
    "schedule": "evolve.operators.schedule:ScheduleOperator",
    "unroll": "evolve.operators.unroll:UnrollOperator",
    "launch": "evolve.operators.launch:LaunchOperator",
    "prefetch": "evolve.operators.prefetch:PrefetchOperator",
    "template": "evolve.operators.template:TemplateOperator",
    "jump": "evolve.operators.jump:TemplateJumpOperator",
    "cma": "evolve.operators.knob_es:KnobESOperator",
    "vectorize": "evolve.operators.vectorize:VectorizeOperator",
    "hoist": "evolve.operators.hoist:HoistLoadsOperator",
    "async_copy": "evolve.operators.async_copy:AsyncCopyOperator",
    "cluster_split": "evolve.operators.cluster_split:ClusterSplitOperator",
    "crossover": "evolve.operators.crossover:CrossoverOperator",
    "llm": "evolve.operators.llm:LLMOperator",
}


def _plain(value: Any) -> Any:
    """Config lists (Python or OmegaConf ListConfig) become tuples so dataclass defaults stay immutable."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return tuple(_plain(v) for v in value)
    return value


def operator_class(name: str, target: str | None = None) -> type:
    """The class at the dotted path ``target`` when given, else the built-in operator ``name``. ValueError
    naming the target that cannot be imported, or listing the allowed names for an unknown one."""
    if target is not None:
        from workloads.registry import get_class_quietly

        try:
            return get_class_quietly(str(target))
        except ImportError as e:
            raise ValueError(f"operator {name!r}: _target_ {target!r} cannot be imported: {e}") from None
    if name not in OPERATORS:
        raise ValueError(f"unknown operator {name!r}; allowed: {', '.join(sorted(OPERATORS))}")
    module, cls = OPERATORS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_operator(spec: Mapping[str, Any], workload: Any) -> Operator:
    """One operator from one spec. The workload is passed as ``workload=`` when the class takes it.

    Raises ValueError naming the spec (by position-independent name) and the offending key: a missing or
    unknown ``name``, a negative or non-numeric ``weight``, or a parameter the operator does not have.
    """
    spec = dict(spec)
    if "name" not in spec:
        raise ValueError(f"operator spec {spec!r} has no 'name'; allowed names: {', '.join(sorted(OPERATORS))}")
    name = str(spec.pop("name"))
    cls = operator_class(name, spec.pop("_target_", None))
    weight = spec.pop("weight", 1.0)
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise ValueError(f"operator {name!r}: weight must be a number, got {weight!r}") from None
    if weight < 0:
        raise ValueError(f"operator {name!r}: weight must be >= 0, got {weight}")
    if dataclasses.is_dataclass(cls):
        fields = {f.name for f in dataclasses.fields(cls)}
    else:  # a plain class: accept what its __init__ names
        import inspect

        fields = set(inspect.signature(cls).parameters)
    unknown = sorted(set(spec) - fields - {"workload"})
    if unknown:
        allowed = sorted(fields - {"name", "weight", "workload"})
        raise ValueError(f"operator {name!r}: unknown parameter(s) {unknown}; allowed: {allowed}")
    kwargs: dict[str, Any] = {k: _plain(v) for k, v in spec.items()}
    if "workload" in fields:
        kwargs["workload"] = workload
    if "weight" in fields:
        kwargs["weight"] = weight
    if "name" in fields:
        kwargs["name"] = name
    op = cls(**kwargs)
    if not hasattr(op, "weight"):
        op.weight = weight
    return op


def build_operators(specs: Sequence[Mapping[str, Any]], workload: Any) -> list[Operator]:
    """Operators for ``specs`` in order (see module docstring). Names must be unique: two specs with the same
    name would share one bandit arm. Raises ValueError for an empty list, a duplicate or any bad spec."""
    if not specs:
        raise ValueError(f"no operators configured; allowed names: {', '.join(sorted(OPERATORS))}")
    ops: list[Operator] = []
    seen: set[str] = set()
    for spec in specs:
        if not isinstance(spec, Mapping):
            raise ValueError(f"operator spec must be a mapping {{name, weight, ...}}, got {spec!r}")
        op = build_operator(spec, workload)
        if op.name in seen:
            raise ValueError(f"operator {op.name!r} configured twice")
        seen.add(op.name)
        ops.append(op)
    return ops
