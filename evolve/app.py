"""Build a run from a composed config and execute it: what ``python -m evolve`` does after Hydra composes.

``run(cfg)`` validates the config before touching anything, then builds the workload, evaluator, archive,
algorithm, operators, bandit, store, lessons memory and tracker, runs the engine (resuming from the store's
checkpoint when the run dir already holds one and ``resume`` is true), exports the best kernels, and returns
the final metrics. Tests call it with a config from Hydra's compose API; nothing here needs a ``@hydra.main``.

Outputs in the run dir: ``store.sqlite`` (every candidate, checkpoints, lessons), ``metrics.jsonl`` (one
``Snapshot.flat()`` per line, the source of ``experiments/compare_algorithms.py``), ``summary.json``,
``best/`` (exported kernels), ``wandb/`` (the W&B run), ``evolve.log``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from archive.grid import GridArchive, default_dimensions, dims_from_config
from archive.knowledge import open_knowledge
from archive.lessons import Lessons
from archive.store import Store, StoreError
from evolve.budget import Budget
from evolve.config import ConfigError, assign_devices, validate
from evolve.engine import Engine, EngineSettings, Snapshot
from evolve.progress import ProgressLine
from evolve.rundir import RunDirError, RunDirLock, check_fresh_dir, check_writable
from evolve.runinfo import run_provenance, stop_reason
from evolve.selection import OperatorSelector
from evolve.tracking import make_tracker
from targets.spec import gpu_from_config

log = logging.getLogger(__name__)

ESTIMATE_BANNER = ("No GPU evaluator: running with the static evaluator. Objectives are ESTIMATES from ptxas "
                   "resources, occupancy and a roofline model, not measurements.")


ALGORITHM_METHODS = ("ask", "tell", "state_dict", "load_state")  # evolve.algorithms.base.Algorithm


def make_algorithm(cfg: Any, archive: GridArchive, make_archive: Callable[[], GridArchive]) -> Any:
    """The algorithm of the ``algorithm`` config node: its ``_target_`` class built with the node's keys that
    the constructor names (``selection``, ``population_size``... and everything under ``options``), plus
    ``archive`` (the run's archive) and ``make_archive`` (a factory of empty ones) when it asks for them.
    Raises ConfigError naming ``algorithm._target_`` (not importable, not a class, lacking a member of the
    ``Algorithm`` contract) or ``algorithm.options`` (a key the constructor does not take, or a value its own
    check refuses with TypeError / ValueError)."""
    import inspect

    from workloads.registry import get_class_quietly

    target = str(cfg._target_)
    try:
        cls = get_class_quietly(target)
    except ImportError as e:
        raise ConfigError(f"algorithm._target_: cannot import {target!r}: {e}") from None
    params = inspect.signature(cls).parameters
    node = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) if isinstance(cfg, DictConfig) else dict(cfg)
    extra = dict(node.pop("options", None) or {})
    unknown = sorted(set(extra) - set(params))
    if unknown:
        raise ConfigError(f"algorithm.options: {target} takes no {unknown}; it takes {sorted(params)}")
    missing = [m for m in ALGORITHM_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"algorithm._target_: {target} has no {missing}; an algorithm needs name, "
                          f"{', '.join(ALGORITHM_METHODS)} (evolve.algorithms.base.Algorithm, docs/add-an-algorithm.md)")
    context = {"archive": archive, "make_archive": make_archive}
    kwargs = {k: v for k, v in {**node, **context, **extra}.items() if k in params and k != "name"}
    try:
        algorithm = cls(**kwargs)
    except (TypeError, ValueError) as e:  # the constructor's own check of its options: a config error
        shown = {k: v for k, v in kwargs.items() if k not in context}
        raise ConfigError(f"algorithm.options: {target} rejected {shown}: {e}") from None
    if not isinstance(getattr(algorithm, "name", None), str):
        raise ConfigError(f"algorithm._target_: {target} has no str attribute 'name' (the label in the store, "
                          f"tables and W&B)")
    return algorithm


def archive_dimensions(cfg: Any, gpu: Any) -> list[Any]:
    """``archive.dims`` from the config, or ``archive.grid.default_dimensions(gpu)`` when it is empty."""
    dims = OmegaConf.to_container(cfg.dims, resolve=True) if isinstance(cfg.dims, ListConfig) else list(cfg.dims)
    if not dims:
        return default_dimensions(gpu)
    from evaluators.features import feature_ranges

    known = sorted(feature_ranges(tuple(gpu.cc)))
    for i, d in enumerate(dims):
        name = d.get("name") if isinstance(d, dict) else None
        if name is not None and name not in known:
            raise ConfigError(f"archive.dims[{i}].name: {name!r} is not a descriptor the evaluators compute; "
                              f"known: {known}")
    try:
        return dims_from_config(dims)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def make_tasks(cfg: Any, workload: Any) -> Any:
    """The ``evolve.tasks.TaskSet`` of ``cfg`` (the ``tasks`` node), or None when multi-task search is off.
    ConfigError naming ``tasks.shapes`` / ``tasks.edges`` for a bad shape list or bucket edges."""
    from evolve.tasks import build_tasks

    if not cfg.enabled:
        return None
    shapes = cfg.shapes
    try:
        if isinstance(shapes, str):
            shapes = workload.shape_list(shapes)
        else:
            shapes = [tuple(int(v) for v in s) for s in OmegaConf.to_container(shapes, resolve=True)]
    except (ValueError, TypeError) as e:
        raise ConfigError(f"tasks.shapes: {e}") from None
    edges = None if cfg.edges is None else [int(e) for e in cfg.edges]
    try:
        return build_tasks(shapes, edges, neighbour_rate=float(cfg.neighbour_rate), radius=int(cfg.radius),
                           transfer=int(cfg.transfer))
    except ValueError as e:
        raise ConfigError(str(e) if str(e).startswith("tasks") else f"tasks: {e}") from None


def objective_definition(cfg: DictConfig, tasks: Any, evaluator: Any, estimate: bool,
                         workload: Any = None) -> dict[str, Any]:
    """What every objective of this run means, for the store's meta ``objective`` and the exported cards: the
    baselines (``evaluators.objective.ObjectiveSpec``: the evaluator's, else ``cfg.objective`` with what it leaves
    null taken from ``workload``), the shapes (per task in a multi-task run), the gate version and whether it is an
    estimate."""
    from evaluators.objective import ObjectiveSpec, workload_objective

    try:
        from evaluators.gpu.gate import GATE_VERSION as gate_version
    except ImportError:
        gate_version = None
    declared = getattr(evaluator, "objective_definition", None)
    if estimate and isinstance(declared, str) and declared:  # e.g. replay: recorded times over the library's
        spec: dict[str, Any] = {"baseline": getattr(evaluator, "baseline", None), "definition": declared}
        gate_version = getattr(evaluator, "gate_version", gate_version)
    elif estimate:
        spec = {"baseline": "naive_seed", "definition": "ESTIMATE: geomean over shapes of the "
                "speedup over the naive seed under the static model (evaluators.static)"}
    else:
        spec = getattr(evaluator, "objective", None) or ObjectiveSpec.from_config(
            OmegaConf.to_container(cfg.objective, resolve=True),
            default=workload_objective(workload) if workload is not None else None)
        spec = spec.to_json() if hasattr(spec, "to_json") else dict(spec)
    shapes = getattr(evaluator, "shapes", None)
    return {**spec, "estimate": bool(estimate), "gate_version": gate_version,
            "shapes": [list(s) for s in shapes] if shapes is not None and tasks is None else None,
            "tasks": tasks.to_json() if tasks is not None else None}


def visible_gpus() -> list[int]:
    """Indices of the GPUs the evaluators can see ([] without CuPy or a GPU). ``gpu_count`` probes CuPy in a
    subprocess, so this process never initialises CUDA before the GPU workers start."""
    from evaluators.gpu.devices import gpu_count

    return list(range(gpu_count()))


def _job_num() -> int | None:
    """``hydra.job.num`` inside a multirun job, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        return int(hc.job.num) if hc.mode == RunMode.MULTIRUN else None
    except Exception:
        return None


def build_workload_from(cfg: DictConfig) -> Any:
    """The workload of ``cfg.workload`` (``_target_`` + options, ``workloads.registry.build_workload``), its
    seeds checked against its own ABI and launch rule (``workloads.preflight.check_workload``). Raises
    ConfigError naming ``workload._target_``, the option the workload rejected, or the seed that does not fit."""
    from workloads.external import SeedConfigError
    from workloads.preflight import check_workload
    from workloads.registry import WorkloadConfigError, build_workload

    try:
        workload = build_workload(cfg.workload)
        check_workload(workload)
        return workload
    except (WorkloadConfigError, SeedConfigError) as e:  # e.g. dtype=int8, a misspelt class path, a seed_ptx
        raise ConfigError(str(e)) from None  # without its seed_launch: a config error, not a traceback


def resolve_evaluator_kind(cfg: DictConfig, gpu: Any, gpus: list[int] | None = None) -> str:
    """``static``, ``replay`` or ``gpu``: what ``cfg.evaluator.kind`` means here. ``auto`` picks the GPU evaluator when CuPy
    sees a GPU (and ``gpu``, the run's GPUSpec, is runnable). ConfigError for ``gpu`` when no GPU is visible."""
    kind = str(cfg.evaluator.kind)
    if kind in ("static", "replay"):  # no GPU involved (replay answers from recorded measurements)
        return kind
    gpus = visible_gpus() if gpus is None else gpus
    if kind == "auto":
        return "gpu" if gpus and gpu.runnable else "static"
    if not gpus:
        raise ConfigError("evaluator.kind: gpu, but no GPU is visible here (CuPy found none, or is not installed: "
                          "pip install -e '.[gpu]'); use evaluator=static for estimates or evaluator=auto")
    return kind


def takes_shapes(evaluator: Any) -> bool:
    """Whether ``evaluator.evaluate`` accepts the ``shapes=`` keyword a multi-task run passes (engine.py: a
    candidate is evaluated on one task's shapes). False when its signature cannot be read."""
    import inspect

    try:
        params = inspect.signature(evaluator.evaluate).parameters
    except (TypeError, ValueError, AttributeError):
        return False
    return "shapes" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def make_evaluator_from(cfg: DictConfig, workload: Any, gpu: Any = None, tasks: Any = None) -> tuple[Any, bool]:
    """The evaluator for ``cfg.evaluator`` and whether its results are estimates. ``auto`` picks the GPU
    evaluator when CuPy sees a GPU (and the hardware is not compile-only), else static. gpu: the run's
    ``targets.spec.GPUSpec`` (None: built from ``cfg.hardware``), passed to the evaluator. The GPU evaluator gets
    ``cfg.objective`` and, in a multi-task run (``tasks``), every task's shapes as the shapes its workers warm up
    on. ConfigError for ``evaluator=gpu`` without a GPU (``resolve_evaluator_kind``)."""
    from evaluators.factory import make_evaluator

    gpu = gpu if gpu is not None else gpu_from_config(cfg.hardware)
    if cfg.evaluator.get("_target_"):
        return _evaluator_from_target(cfg, workload, gpu)
    if str(cfg.evaluator.backend) == "ray":
        from evaluators.ray.config import ray_evaluator

        evaluator = ray_evaluator(cfg, workload, gpu, tasks)
        return evaluator, bool(evaluator.estimate)
    gpus = visible_gpus() if str(cfg.evaluator.kind) not in ("static", "replay") else []
    kind = resolve_evaluator_kind(cfg, gpu, gpus)
    options = dict(OmegaConf.to_container(cfg.evaluator.options, resolve=True))
    options.setdefault("gpu", gpu)
    if kind == "replay":
        options.setdefault("stores", [str(s) for s in cfg.evaluator.stores])
    elif kind != "static":
        devices = list(cfg.evaluator.devices) if cfg.evaluator.devices is not None else None
        if devices is None:
            devices = assign_devices(_job_num(), gpus, int(cfg.evaluator.gpus_per_job))
        if devices is not None:
            options.setdefault("devices", devices)
        if "objective" in cfg:
            options.setdefault("objective", OmegaConf.to_container(cfg.objective, resolve=True))
        if tasks is not None:
            options.setdefault("shapes", [list(s) for t in tasks.tasks for s in t.shapes])
    try:
        evaluator = make_evaluator(kind, workload, banner=False, **options)
    except (ValueError, FileNotFoundError) as e:
        if kind != "replay":
            raise
        raise ConfigError(str(e)) from None  # the replay stores the user named: "evaluator.stores: ..."
    return evaluator, kind == "static" or bool(getattr(evaluator, "estimate", False))


def _evaluator_from_target(cfg: DictConfig, workload: Any, gpu: Any) -> tuple[Any, bool]:
    """``cls(workload, gpu=gpu, **evaluator.options)`` for ``evaluator._target_``; its results are estimates
    when it says so (``estimate`` attribute). ConfigError naming the key when it cannot be built."""
    from workloads.registry import get_class_quietly

    target = str(cfg.evaluator._target_)
    try:
        cls = get_class_quietly(target)
    except ImportError as e:
        raise ConfigError(f"evaluator._target_: cannot import {target!r}: {e}") from None
    options = dict(OmegaConf.to_container(cfg.evaluator.options, resolve=True))
    try:
        evaluator = cls(workload, gpu=gpu, **options)
    except TypeError as e:
        raise ConfigError(f"evaluator.options: {target} rejected {sorted(options)}: {e}") from None
    return evaluator, bool(getattr(evaluator, "estimate", False))


def _versions() -> dict[str, str]:
    from evaluators.provenance import versions

    return versions(("numpy", "hydra-core", "omegaconf", "wandb", "lark", "networkx"), absent=None)

# What a resumed run must share with the run that started the store: the checkpoint's archive, algorithm state,
# bandit arms and RNG only mean something under the same settings (the budget and engine knobs may change).
# Config keys a resume must keep (dotted: one key of a node). evaluator.kind / evaluator.stores: static estimates,
# replayed GPU times and GPU measurements differ in scale.
RESUME_KEYS = ("seed", "algorithm", "workload", "archive", "hardware", "tasks", "objective", "evaluator.kind",
               "evaluator.stores")
_ABSENT = object()


def _at(node: Any, key: str) -> Any:
    """The value at the dotted ``key`` of the nested dict ``node``; ``_ABSENT`` when a step is missing."""
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _leaf_diffs(old: Any, new: Any, key: str) -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for k in sorted(set(old) | set(new), key=str):
            out += _leaf_diffs(old.get(k), new.get(k), f"{key}.{k}")
        return out
    return [] if old == new else [(key, old, new)]


def check_resume_compatible(cfg: DictConfig, store_path: Path) -> None:
    """Raise ConfigError when ``store_path`` was started with other search settings than ``cfg`` (a resume
    under another algorithm, seed, workload, archive, hardware, operator set, evaluator kind or replay stores),
    naming the key and both values."""
    if not cfg.resume or not store_path.exists():
        return
    try:
        with Store(store_path, readonly=True) as s:
            old = s.get_meta("config")
    except Exception:  # an unreadable or foreign file: the store itself reports it when opened for writing
        return
    if not isinstance(old, dict):
        return
    new = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    diffs: list[tuple[str, Any, Any]] = []
    for key in RESUME_KEYS:
        was = _at(old, key)
        if was is not _ABSENT:
            now = _at(new, key)
            diffs += _leaf_diffs(was, None if now is _ABSENT else now, key)
    old_ops = [o.get("name") for o in (old.get("mutator") or {}).get("operators", []) if isinstance(o, dict)]
    new_ops = [o.get("name") for o in new["mutator"]["operators"]]
    if old_ops and old_ops != new_ops:
        diffs.append(("mutator.operators", old_ops, new_ops))
    if diffs:
        key, was, now = diffs[0]
        more = f" (and {len(diffs) - 1} more: {', '.join(d[0] for d in diffs[1:4])})" if len(diffs) > 1 else ""
        raise ConfigError(f"{key}: the run in {store_path.parent} was started with {was!r}, this command has "
                          f"{now!r}{more}; resume it with the same settings, or leave out hydra.run.dir to start a new run")


def run(cfg: DictConfig, *, evaluator: Any = None) -> dict[str, Any]:
    """Execute the run described by ``cfg`` (a composed ``conf/config.yaml``); returns the final metrics.

    evaluator: use this evaluator instead of building one (benchmarks and tests of the engine itself).
    Raises ``evolve.config.ConfigError`` (before any work) for invalid values.
    """
    validate(cfg)
    run_dir = Path(str(cfg.run_dir))
    try:
        check_writable(run_dir)
        lock = RunDirLock(run_dir).acquire() if cfg.engine.get("lock", True) else None
    except RunDirError as e:
        raise ConfigError(str(e)) from None
    if lock is None:
        log.warning("engine.lock=false: %s is not locked; a second process there would corrupt the run", run_dir)
    try:
        return _run_locked(cfg, run_dir, evaluator)
    except KeyboardInterrupt:
        raise RunInterrupted(run_dir) from None
    finally:
        if lock is not None:
            lock.release()


class RunInterrupted(Exception):
    """Ctrl-C (SIGINT) ended the run; the store holds everything up to the last checkpoint. ``run_dir``: where."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(f"interrupted; the run in {run_dir} is saved up to its last checkpoint")
        self.run_dir = run_dir


def _open_store(path: Path) -> Store:
    try:
        return Store(path)
    except (sqlite3.DatabaseError, StoreError) as e:
        raise ConfigError(f"store: {path} is not a ptxforge store ({e}); move it away or choose another "
                          f"hydra.run.dir") from None


def _run_locked(cfg: DictConfig, run_dir: Path, evaluator: Any) -> dict[str, Any]:
    try:
        check_fresh_dir(run_dir, bool(cfg.resume))
    except RunDirError as e:
        raise ConfigError(str(e)) from None
    store_path = run_dir / str(cfg.store)
    if store_path.exists():
        _open_store(store_path).close()  # a file that is not a store: one message before anything else
    check_resume_compatible(cfg, store_path)

    from evolve.operators.registry import build_operators

    workload = build_workload_from(cfg)
    gpu = gpu_from_config(cfg.hardware)
    tasks = make_tasks(cfg.tasks, workload) if "tasks" in cfg else None
    estimate = False
    created_here = evaluator is None
    if evaluator is None:
        if tasks is not None and (str(cfg.evaluator.kind) == "replay" or str(cfg.evaluator.backend) == "ray"):
            # Refused before a Ray cluster starts or a record is loaded; the check below covers the rest.
            which = "evaluator=replay" if str(cfg.evaluator.kind) == "replay" else "evaluator.backend=ray"
            raise ConfigError(f"tasks.enabled=true with {which}: this evaluator measures only its fixed shapes, "
                              "not a task's shapes; use evaluator=gpu or evaluator=static, or tasks.enabled=false")
        evaluator, estimate = make_evaluator_from(cfg, workload, gpu, tasks)
        kind = (str(cfg.evaluator._target_) if cfg.evaluator.get("_target_")  # one's own class: named as such
                else str(cfg.evaluator.kind) if str(cfg.evaluator.kind) != "auto" else ("static" if estimate else "gpu"))
    else:
        estimate = bool(getattr(evaluator, "estimate", False))
        kind = "static" if estimate else str(getattr(evaluator, "kind", "custom"))
    if tasks is not None and not takes_shapes(evaluator):
        if created_here and callable(getattr(evaluator, "close", None)):
            evaluator.close()
        raise ConfigError(f"tasks.enabled=true: {type(evaluator).__name__}.evaluate takes no shapes= argument, so it "
                          "cannot evaluate a candidate on one task's shapes; use evaluator=gpu or evaluator=static, "
                          "or tasks.enabled=false")
    objective = objective_definition(cfg, tasks, evaluator, estimate, workload)
    provenance = run_provenance(cfg, evaluator_kind=kind, estimate=estimate, workload=workload, evaluator=evaluator,
                                objective=objective)
    if estimate:
        # The evaluator's own banner says what its numbers are and their measured fidelity (static, replay).
        text = evaluator.banner() if callable(getattr(evaluator, "banner", None)) else ESTIMATE_BANNER
        print(f"\n{'=' * 100}\n{text}\n{'=' * 100}\n", file=sys.stderr, flush=True)
        # For the record: under `python -m evolve` this logger writes only to the run's evolve.log
        # (conf/hydra/job_logging/ptxforge.yaml), so the console shows the banner once.
        logging.getLogger("evolve.banner").warning(text)

    dims = archive_dimensions(cfg.archive, gpu)
    if tasks is not None:
        dims = [tasks.dimension(), *dims]
    qd_offset = float(cfg.archive.qd_offset)
    archive = GridArchive(dims, qd_offset=qd_offset)
    algorithm = make_algorithm(cfg.algorithm, archive, lambda: GridArchive(dims, qd_offset=qd_offset))
    specs = OmegaConf.to_container(cfg.mutator.operators, resolve=True)
    try:
        operators = build_operators(specs, workload)
    except ValueError as e:  # e.g. a parameter the operator does not take
        raise ConfigError(f"mutator.operators: {e}") from None
    selector = OperatorSelector([op.name for op in operators],
                                weights=[float(getattr(op, "weight", 1.0)) for op in operators],
                                kind=str(cfg.mutator.selection), c=float(cfg.mutator.ucb_c))
    budget = Budget(max_evaluations=cfg.budget.evaluations, max_seconds=cfg.budget.seconds,
                    max_candidates=cfg.budget.candidates)
    capacity = cfg.engine.capacity or int(getattr(evaluator, "capacity", 1))
    settings = EngineSettings(capacity=int(capacity), ordered=bool(cfg.engine.ordered),
                              inspirations=int(cfg.engine.inspirations), lessons=int(cfg.engine.lessons),
                              checkpoint_every=int(cfg.engine.checkpoint_every),
                              max_repairs=int(cfg.mutator.max_repairs),
                              reward_validity=float(cfg.mutator.reward_validity),
                              reward_improvement=float(cfg.mutator.reward_improvement),
                              log_every=int(cfg.logger.get("log_every", 10)),
                              ahead=int(cfg.engine.get("ahead", 0) or 0),
                              max_evaluator_crashes=int(cfg.engine.get("max_evaluator_crashes", 20)),
                              verdict_wait_s=float(cfg.engine.get("verdict_wait_s", 900.0)))

    store = _open_store(store_path)
    knowledge = None
    compile_executor = None
    tracker = None
    try:
        try:
            knowledge = open_knowledge(cfg.knowledge)
        except (OSError, sqlite3.Error, ValueError) as e:
            raise ConfigError(f"knowledge: cannot open {str(cfg.knowledge)!r}: {e}; give a writable file path, "
                              f"'default' or 'none'") from None
        lessons = Lessons(store, knowledge, family=str(workload.name), gpu=str(cfg.hardware.name), run=run_dir.name,
                          evaluator=kind, estimate=estimate)
        plain_cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        if store.get_meta("config") is None:
            store.set_meta("config", plain_cfg)
            store.set_meta("versions", _versions())
            store.set_meta("estimate", estimate)
            store.set_meta("objective", objective)
            store.set_meta("provenance", provenance)
        metrics_path = run_dir / "metrics.jsonl"
        algo = str(cfg.algorithm.name)
        tracker = make_tracker(cfg.logger, run_dir=run_dir, group=str(cfg.experiment_name),
                               name=f"{algo}-s{cfg.seed}-{run_dir.name}",
                               tags=[algo, f"seed={cfg.seed}", str(workload.name), gpu.name],
                               job_type=algo, config=plain_cfg, run_id=store.get_meta("wandb_run_id"))
        if getattr(tracker, "run_id", None):
            store.set_meta("wandb_run_id", tracker.run_id)
        progress = ProgressLine(cfg.budget.evaluations, enabled=bool(cfg.engine.progress))

        media_every = int(cfg.logger.get("media_every", 50) or 0)
        last_media = [0]

        def on_snapshot(snap: Snapshot) -> None:
            flat = snap.flat()
            with metrics_path.open("a") as f:
                f.write(json.dumps(flat) + "\n")
            tracker.log(flat)
            progress.update(snap)
            # lineage, heatmaps and tables every media_every evaluations, so a running or killed run has them
            if media_every and snap.evaluations // media_every > last_media[0] // media_every:
                last_media[0] = snap.evaluations
                tracker.media(store=store, archive=archive, evaluations=snap.evaluations)

        if settings.ahead > 0:
            from evaluators.compile_executor import make_compile_executor

            compile_executor = make_compile_executor(str(cfg.engine.compile_executor), cfg.engine.compile_workers)
        engine = Engine(workload=workload, evaluator=evaluator, algorithm=algorithm, archive=archive,
                        operators=operators, selector=selector, store=store, budget=budget, seed=int(cfg.seed),
                        settings=settings, lessons=lessons, on_snapshot=on_snapshot, tasks=tasks,
                        compile_executor=compile_executor)
        if cfg.resume and engine.try_resume():
            last_media[0] = engine.evaluated
            n = tracker.backfill(metrics_path, upto=engine.evaluated)
            if n:
                log.info("W&B: re-logged %d snapshots of the earlier sessions from %s", n, metrics_path.name)
        with progress:
            final = engine.run()

        export_dir = None
        if cfg.engine.export and len(archive):
            export_dir = run_dir / "best"
            try:
                from archive.export import export_best

                # A multi-task run's product is the dispatch below; its cells are exported through it.
                export_best(store, archive, export_dir, cells=tasks is None)
            except Exception as e:  # the store holds everything; an export problem must not lose the run
                log.warning("export of the best kernels failed: %s", e)
            if tasks is not None:
                try:
                    from archive.dispatch import export_dispatch

                    export_dispatch(store, archive, tasks, workload, export_dir / "dispatch")
                except Exception as e:
                    log.warning("export of the per-task dispatch failed: %s", e)
        summary = {**final.flat(), "algorithm": algo, "seed": int(cfg.seed), "estimate": estimate,
                   "experiment": str(cfg.experiment_name), "run_dir": str(run_dir), "resumed": engine.resumed,
                   "stop_reason": stop_reason(budget, final, engine.halted), "provenance": store.get_meta("provenance") or provenance,
                   "lessons": lessons.top_lines(8)}
        lock_stats = getattr(evaluator, "sanitizer_stats", None)
        if callable(lock_stats):  # the verdicts' share of the timing lock (GPU pool: evaluators/gpu/duty_cycle.py)
            summary["sanitizer_lock"] = lock_stats()
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        tracker.finish(summary={k: v for k, v in summary.items() if k != "lessons"}, store=store,
                       archive=archive, export_dir=export_dir)
        tracker = None
        return summary
    finally:
        if tracker is not None:  # an exception: close the W&B run so its files are complete
            try:
                tracker.run.finish(exit_code=1)
            except Exception:
                pass
        store.close()
        if compile_executor is not None:
            compile_executor.shutdown(wait=False, cancel_futures=True)
        if knowledge is not None:
            knowledge.close()
        close = getattr(evaluator, "close", None)
        if close is not None:
            close()
