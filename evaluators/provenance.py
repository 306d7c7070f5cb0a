"""Versions of what a run or a measurement ran on: recorded next to every number reported."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import platform
from collections.abc import Iterable


def versions(packages: Iterable[str], *, absent: str | None = "absent") -> dict[str, str]:
    """``{"python": ..., <package>: <version>, ..., "ptxas": <ptxas --version line>}``.

    packages: distribution names (``"hydra-core"``) or importable module names (``"cupy"``, ``"liger_kernel"``);
    the installed distribution's metadata is read first, the module's ``__version__`` second.
    absent: the value recorded for a package (or ptxas) that cannot be found; None leaves it out.
    Never raises for a missing package or toolchain.
    """
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            try:
                out[name] = str(importlib.import_module(name).__version__)
            except Exception:
                if absent is not None:
                    out[name] = absent
    try:
        from evaluators.toolchain import ptxas_version

        out["ptxas"] = ptxas_version()
    except Exception as e:
        if absent is not None:
            out["ptxas"] = f"{absent} ({e})"
    return out
