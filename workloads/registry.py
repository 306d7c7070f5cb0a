"""Workloads by name: ``get_workload("rmsnorm", dtype="bf16")``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workloads.base import Workload


def _rmsnorm(**options: Any) -> Workload:
    from workloads.rmsnorm import RMSNorm

    return RMSNorm(**options)


WORKLOADS: dict[str, Callable[..., Workload]] = {"rmsnorm": _rmsnorm}


def register_workload(name: str, factory: Callable[..., Workload]) -> None:
    """Make ``get_workload(name, **options)`` call ``factory(**options)``. ValueError if the name is taken."""
    if name in WORKLOADS:
        raise ValueError(f"workload {name!r} is already registered")
    WORKLOADS[name] = factory


def available_workloads() -> list[str]:
    """Registered workload names, sorted."""
    return sorted(WORKLOADS)


def get_workload(name: str, **options: Any) -> Workload:
    """The workload ``name`` built with ``options`` (e.g. ``dtype="fp16"``).

    Raises ValueError for an unknown name (listing the known ones) or an invalid option (the workload's message).
    """
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; available: {available_workloads()}")
    try:
        return WORKLOADS[name](**options)
    except TypeError as e:  # an option the workload does not take
        raise ValueError(f"workload {name!r}: bad options {options}: {e}") from None
