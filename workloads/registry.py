"""Build workloads from Hydra ``_target_`` specs; look the in-tree ones up by their config name.

A workload is configured by a mapping whose ``_target_`` is the dotted path of a ``Workload`` subclass (or of a
function returning one) and whose other keys are its constructor's keyword arguments, exactly what
``conf/workload/<name>.yaml`` holds::

    _target_: workloads.rmsnorm.RMSNorm
    dtype: bf16

``build_workload(spec)`` instantiates such a mapping (``hydra.utils.instantiate``); ``Workload.spec()`` gives
it back, so a spawned GPU worker, a Ray actor or a replay script rebuilds the same workload from plain data,
out-of-tree workloads included (their module only has to be importable there). ``get_workload(name,
**options)`` reads ``conf/workload/<name>.yaml`` and overrides its options: the names are the config files,
there is no second list to keep in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workloads.base import Workload

CONF_DIR = Path(__file__).resolve().parents[1] / "conf" / "workload"


class WorkloadConfigError(ValueError):
    """A workload spec that cannot be built: missing or unimportable ``_target_``, a bad option, or a target
    that does not return a Workload. The message names the key (``workload._target_``, ``workload.<option>``)."""


def available_workloads(conf_dir: Path = CONF_DIR) -> list[str]:
    """Names of the workload configs (``conf/workload/*.yaml``), sorted."""
    return sorted(p.stem for p in Path(conf_dir).glob("*.yaml"))


def workload_config(name: str, conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """The mapping in ``conf/workload/<name>.yaml`` (``_target_`` + options) as a plain dict.

    Raises WorkloadConfigError for an unknown name, listing the known ones."""
    from omegaconf import OmegaConf

    path = Path(conf_dir) / f"{name}.yaml"
    if not path.is_file():
        raise WorkloadConfigError(f"unknown workload {name!r}; available: {available_workloads(conf_dir)} "
                                  f"(the files of {conf_dir})")
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(node, dict) or "_target_" not in node:
        raise WorkloadConfigError(f"{path}: a workload config needs a _target_ (the Workload class path)")
    return node


def get_class_quietly(target: str) -> type:
    """``hydra.utils.get_class(target)`` without the ERROR log line it writes before re-raising, so the caller
    reports the failure in one line. Raises ImportError whose message is ``import_failure(target, error)`` for
    whatever ``get_class`` raised (not importable, not a class)."""
    import logging

    from hydra.utils import get_class

    logger = logging.getLogger("hydra.utils")
    was = logger.disabled
    logger.disabled = True
    try:
        return get_class(target)
    except Exception as e:
        raise ImportError(import_failure(target, e)) from None
    finally:
        logger.disabled = was


def import_failure(target: str, error: BaseException) -> str:
    """Why importing the dotted path ``target`` failed, from the error ``hydra.utils`` raised (``error``, whose
    ``__cause__`` is the import's own exception): the module is not on the path (with where to put it), a module
    lacks the named attribute, or the module's code raised while importing (the exception and the innermost
    ``file:line`` inside that module's folder, not Hydra's "Are you sure that module ... is installed?"); else
    ``str(error)``."""
    import importlib.util
    import traceback

    inner = error.__cause__ if isinstance(error, ImportError) else None
    top = target.split(".")[0]
    if isinstance(inner, ModuleNotFoundError) and inner.name and target.startswith(inner.name):
        if inner.name == top:
            return (f"no module named {top!r}: put the folder that holds it on PYTHONPATH (the GPU workers need "
                    f"it too)")
        parent, _, attr = inner.name.rpartition(".")
        return f"module {parent!r} has no attribute or submodule {attr!r}"
    if inner is not None:
        frames = [f for f in traceback.extract_tb(inner.__traceback__) if not f.filename.startswith("<")]
        try:
            spec = importlib.util.find_spec(top)
            home = str(Path(spec.origin).parent) if spec and spec.origin else None
        except (ImportError, ValueError):
            home = None
        own = [f for f in frames if home and f.filename.startswith(home)]
        frame = (own or frames or [None])[-1]
        at = f" at {frame.filename}:{frame.lineno}" if frame else ""
        return f"importing it raised {type(inner).__name__}: {inner}{at}"
    return str(error)


def build_workload(spec: Mapping[str, Any], *, key: str = "workload") -> Workload:
    """The workload a ``_target_`` spec describes (see module docstring).

    Also accepts the older stored form ``{"name": NAME, "options": {...}}`` (run stores written before the
    ``_target_`` configs), resolved through ``conf/workload/NAME.yaml``. ``key`` names the config node in
    error messages. Raises WorkloadConfigError naming ``key._target_`` or the rejected option.
    """
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(spec, DictConfig):
            spec = OmegaConf.to_container(spec, resolve=True)  # type: ignore[assignment]
    except ImportError:
        pass
    spec = dict(spec)
    if "_target_" not in spec:
        if "name" in spec:
            return get_workload(str(spec["name"]), **dict(spec.get("options") or {}))
        raise WorkloadConfigError(f"{key}: no _target_ (the dotted path of a Workload class), got keys "
                                  f"{sorted(spec)}")
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    # seed_ptx / seed_entry / seed_launch: the user's own seed kernel (workloads.external), not constructor options
    seed = {k: spec.pop(k) for k in ("seed_ptx", "seed_entry", "seed_launch") if k in spec}
    target = spec["_target_"]
    try:
        workload = instantiate(spec, _convert_="all")
    except InstantiationException as e:
        cause = e.__cause__ or e
        if isinstance(cause, ImportError) or "Error locating target" in str(e):
            raise WorkloadConfigError(f"{key}._target_: cannot import {target!r}: {import_failure(target, cause)}"
                                      ) from None
        if isinstance(cause, TypeError) and "abstract" in str(cause):
            raise WorkloadConfigError(f"{key}._target_: {target} cannot be built: {cause} (a Workload defines every "
                                      f"abstract method of workloads.base.Workload)") from None
        raise WorkloadConfigError(f"{key}: {target} rejected options "
                                  f"{ {k: v for k, v in spec.items() if k != '_target_'} }: {cause}") from None
    if not isinstance(workload, Workload):
        raise WorkloadConfigError(f"{key}._target_: {target!r} returned {type(workload).__name__}, not a "
                                  f"workloads.base.Workload")
    if seed.get("seed_ptx"):
        from workloads.external import with_seed_ptx

        return with_seed_ptx(workload, seed, key)
    return workload


def get_workload(name: str, **options: Any) -> Workload:
    """The workload of ``conf/workload/<name>.yaml`` with ``options`` overriding its keys (e.g.
    ``get_workload("rmsnorm", dtype="fp16")``). Raises WorkloadConfigError (a ValueError) for an unknown name
    (listing the known ones) or an option the workload rejects."""
    spec = {**workload_config(name), **options}
    return build_workload(spec, key=f"workload {name!r}")
