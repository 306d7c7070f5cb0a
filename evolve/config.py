"""Configuration schema of ``python -m evolve``: dataclasses registered in Hydra's ConfigStore, plus the checks
that need more than a type (ranges, registry names, combinations), run before any work starts.

``conf/config.yaml`` puts ``ptxforge_schema`` first in its defaults list, so every group file merges into the
typed tree below and a wrong type, an unknown key or an enum value outside its set fails at composition with
OmegaConf's message (the full key and the allowed values). ``validate(cfg)`` then checks what types cannot say
and raises ``ConfigError`` naming the key and the allowed values or range.

Run directories: ``hydra.run.dir`` and ``hydra.sweep.dir`` use ``${now:...}`` plus ``${ptxforge.uid:}``, a
per-process value (pid and 4 random hex digits), so two runs started in the same second never share a folder.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from targets.spec import GPUS, PTXAS_ARCHES


class ParentSelection(StrEnum):
    uniform = "uniform"
    curiosity = "curiosity"


class EvaluatorKind(StrEnum):
    auto = "auto"
    gpu = "gpu"
    static = "static"
    replay = "replay"


class EvaluatorBackend(StrEnum):
    local = "local"
    ray = "ray"


class LoggerKind(StrEnum):
    wandb = "wandb"
    none = "none"


class SelectionKind(StrEnum):
    ucb = "ucb"
    weighted = "weighted"


@dataclass
class AlgorithmConfig:
    """_target_: the algorithm class (``evolve.algorithms.*``, or any importable class with the ask/tell
    protocol of ``evolve.algorithms.base.Algorithm``); name: its label in tags, tables and the store;
    selection: parent selection of map_elites/islands; GA: population_size, tournament_size, crossover_rate;
    islands: n_islands, migration_interval (non-seed tells), migrants; options: further keyword arguments of an
    out-of-tree class. ``evolve.app.make_algorithm`` passes each class only the keys its constructor names,
    plus ``archive`` / ``make_archive`` when it asks for them."""

    _target_: str = "evolve.algorithms.map_elites.MapElites"
    name: str = "map_elites"
    selection: ParentSelection = ParentSelection.uniform
    population_size: int = 16
    tournament_size: int = 3
    crossover_rate: float = 0.3
    n_islands: int = 4
    migration_interval: int = 50
    migrants: int = 1
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class MutatorConfig:
    """operators: specs ``{name, weight, **params}`` for ``evolve.operators.registry.build_operators``;
    selection: ``ucb`` (UCB1 bandit) or ``weighted`` (sample by weight); ucb_c: UCB1 exploration constant;
    reward_validity / reward_improvement: the bandit reward of a valid child / of one that entered the archive;
    max_repairs: repair attempts per failed child for operators with ``repair`` (0 = none)."""

    operators: list[Any] = field(default_factory=list)
    selection: SelectionKind = SelectionKind.ucb
    ucb_c: float = 1.0
    reward_validity: float = 0.2
    reward_improvement: float = 0.8
    max_repairs: int = 1


@dataclass
class RayConfig:
    """``evaluator.backend=ray`` settings (``evaluators.ray.RayEvaluator``, docs/ray.md): address: ``ray.init``
    address of a running cluster (``auto``, ``host:6379``, ``ray://host:10001``; null = start a local one);
    actors: evaluation actors (null = one per cluster GPU, 2 CPU actors for static); depth: candidates in
    flight per actor; num_cpus / num_gpus: resources of a local cluster (null = the host's); compile_tasks: run
    ptxas as Ray tasks on any node's CPU (false: inside the actor); actor_cpus: CPUs an actor reserves (null =
    0 for GPU actors, 1 for static ones);
    max_requeues: re-evaluations of a candidate whose actor or node was lost; ship_toolchain: send the driver's
    ptxas/nvcc to the nodes (null = when joining a cluster); runtime_env: merged into Ray's runtime environment."""

    address: str | None = None
    actors: int | None = None
    depth: int = 2
    num_cpus: int | None = None
    num_gpus: int | None = None
    compile_tasks: bool = True
    actor_cpus: float | None = None
    max_requeues: int = 3
    ship_toolchain: bool | None = None
    runtime_env: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvaluatorConfig:
    """kind: ``auto`` (GPU when one is visible, else static), ``gpu``, ``static`` or ``replay`` (answers from
    recorded GPU run stores, ``evaluators.replay``); stores: those stores (replay only); devices: GPU indices to
    use (null = all visible); gpus_per_job: in a multirun, give job ``hydra.job.num`` this many GPUs taken
    round-robin from the visible ones (0 = every job sees all); options: extra keyword arguments of
    ``evaluators.factory.make_evaluator``; _target_: an evaluator class of one's own (``evaluators.types.
    Evaluator`` protocol), built as ``cls(workload, gpu=GPUSpec, **options)`` instead of the ``kind``; backend:
    ``local`` (this host's GPUs or processes) or ``ray`` (actors over a Ray cluster, settings in ``ray``;
    devices and gpus_per_job do not apply there)."""

    _target_: str | None = None
    kind: EvaluatorKind = EvaluatorKind.auto
    backend: EvaluatorBackend = EvaluatorBackend.local
    ray: RayConfig = field(default_factory=RayConfig)
    devices: list[int] | None = None
    gpus_per_job: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    stores: list[str] = field(default_factory=list)


@dataclass
class TasksConfig:
    """Multi-task search over shape buckets (``evolve.tasks``). enabled: off by default (one objective over the
    evaluator's shapes); shapes: the named shape list (``benchmark``, ``search``, ``heldout``) or an explicit
    list of shapes the buckets hold; edges: increasing row-length upper bounds of every bucket but the last (null:
    one bucket per distinct row length of ``shapes``); neighbour_rate: probability that a child is evaluated on
    a task other than its parent's; radius: how far (buckets) that task may be; transfer: neighbours on each side
    a new elite is tried on."""

    enabled: bool = False
    shapes: Any = "benchmark"
    edges: list[int] | None = None
    neighbour_rate: float = 0.2
    radius: int = 1
    transfer: int = 1


@dataclass
class ObjectiveConfig:
    """What the GPU evaluator's speedup is taken against (``evaluators.objective.ObjectiveSpec``): baseline
    ``best`` (the fastest of ``libraries`` measured at each shape) or one baseline name (RMSNorm: ``torch``,
    ``torch_compile``, ``liger``, ``quack``, ``quack_tuned``, ``naive``; KDA: ``fla``); fallback: used in order at a
    shape where none of them ran. libraries / fallback null: the workload's own
    (``evaluators.objective.workload_objective``). The static evaluator keeps its own labelled objective (speedup
    over the naive seed under its model)."""

    baseline: str = "best"
    libraries: list[str] | None = None
    fallback: list[str] | None = None


@dataclass
class ArchiveConfig:
    """dims: descriptor axes ``{name, edges}`` or ``{name, lo, hi, bins, log}`` (archive.grid.dims_from_config);
    empty = ``archive.grid.default_dimensions`` for the hardware's compute capability; qd_offset: subtracted from
    each elite's objective in the QD score."""

    dims: list[Any] = field(default_factory=list)
    qd_offset: float = 0.0


@dataclass
class LoggerConfig:
    """kind: ``wandb`` or ``none``; mode: W&B mode (``offline`` unless WANDB_MODE says otherwise);
    log_every: evaluations between metric logs; media_every: evaluations between uploads of the lineage,
    heatmaps and tables (also uploaded at the end); tables / figures / artifact: what to upload."""

    kind: LoggerKind = LoggerKind.wandb
    mode: str = "offline"
    project: str = "ptxforge"
    entity: str | None = None
    log_every: int = 10
    media_every: int = 50
    tables: bool = True
    figures: bool = True
    artifact: bool = True


@dataclass
class HardwareConfig:
    """name: a GPU of ``targets.spec`` (h200, h100, b200); arch: the ptxas target;
    compile_only: no GPU of this kind is expected (only static evaluation makes sense). The run builds one
    ``targets.spec.GPUSpec`` from this node (``gpu_from_config``) and passes it to every consumer."""

    name: str = MISSING
    arch: str = MISSING
    compile_only: bool = False


@dataclass
class BudgetConfig:
    """evaluations: evaluator calls; seconds: wall seconds; candidates: recorded proposals (null = 20 x
    evaluations)."""

    evaluations: int | None = 200
    seconds: float | None = None
    candidates: int | None = None


@dataclass
class EngineConfig:
    """capacity: concurrent evaluations (null = the evaluator's capacity); ordered: tell results in the order
    they were asked (deterministic for any capacity) instead of as they complete; inspirations: elites from
    other cells shown to an operator; lessons: lesson lines shown to an operator; checkpoint_every: tells
    between checkpoints (rows and checkpoint commit together); progress: show the progress line; export: write
    the best kernels at the end; ahead: proposals made beyond ``capacity`` whose template instantiations (nvcc) run
    on a compile executor meanwhile (0: in the engine's thread); compile_executor: ``process``, ``thread``,
    ``inline`` or ``ray`` (``evaluators.compile_executor``); compile_workers: its workers (null: CPU cores - 1);
    lock: hold an exclusive lock on the run dir (``evolve.rundir``); max_evaluator_crashes: stop the run (its
    stop reason says why; the store stays resumable) after this many evaluations in a row on which the evaluator
    itself raised (0: never), so a broken evaluator does not spend a whole budget on ``crash`` rows;
    verdict_wait_s: seconds the end of a run waits for elite verdicts still out (compute-sanitizer; those left
    stay pending and are asked again on resume)."""

    capacity: int | None = None
    ordered: bool = True
    inspirations: int = 2
    lessons: int = 8
    checkpoint_every: int = 1
    progress: bool = True
    export: bool = True
    ahead: int = 0
    compile_executor: str = "process"
    compile_workers: int | None = None
    lock: bool = True
    max_evaluator_crashes: int = 20
    verdict_wait_s: float = 900.0


@dataclass
class Config:
    """The whole run. seed: RNG seed of the search; experiment_name: W&B group and report label;
    store: the SQLite store, relative to the run dir; resume: continue from the store's checkpoint when the run
    dir already holds one; knowledge: the cross-run knowledge store (``archive.knowledge.open_knowledge``):
    ``default`` (``$PTXFORGE_KNOWLEDGE`` or ``~/.cache/ptxforge/knowledge.sqlite``), a file path, or
    ``none`` (the default: a run reads and writes no shared lessons unless asked)."""

    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    # ``_target_`` (a Workload class path) + its constructor's keyword arguments (conf/workload/<name>.yaml);
    # any keys, so an out-of-tree workload needs no schema change.
    workload: dict[str, Any] = field(default_factory=dict)
    mutator: MutatorConfig = field(default_factory=MutatorConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    archive: ArchiveConfig = field(default_factory=ArchiveConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    llm: Any = None
    seed: int = 0
    experiment_name: str = "default"
    store: str = "store.sqlite"
    resume: bool = True
    knowledge: str | None = "none"
    run_dir: str = MISSING


class ConfigError(ValueError):
    """A configuration value that is out of range or unknown; the message names the key and what is allowed."""


ARCHES = PTXAS_ARCHES  # the ptxas targets targets.spec lists
HARDWARE = tuple(GPUS)  # the GPUs targets.spec describes
WANDB_MODES = ("online", "offline", "disabled", "shared", "run", "dryrun")  # wandb.init(mode=...)

_UID = f"{os.getpid()}-{secrets.token_hex(2)}"


def run_uid() -> str:
    """This process's unique run-dir suffix (pid and 4 random hex digits), stable for the process's lifetime."""
    return _UID


def register() -> None:
    """Register the schema (``ptxforge_schema``) in Hydra's ConfigStore and the ``ptxforge.uid`` resolver.
    Idempotent; call before composing."""
    ConfigStore.instance().store(name="ptxforge_schema", node=Config)
    if not OmegaConf.has_resolver("ptxforge.uid"):
        OmegaConf.register_new_resolver("ptxforge.uid", run_uid)


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


def validate(cfg: DictConfig) -> None:
    """Check what the schema's types cannot: ranges, registry names and combinations. Raises ConfigError with the
    key and the allowed values; touches nothing (no file, no GPU)."""
    _need(cfg.seed >= 0, "seed", f"must be >= 0, got {cfg.seed}")
    a = cfg.algorithm
    _need(a.population_size >= 2, "algorithm.population_size", f"must be >= 2, got {a.population_size}")
    _need(a.tournament_size >= 1, "algorithm.tournament_size", f"must be >= 1, got {a.tournament_size}")
    _need(0.0 <= a.crossover_rate <= 1.0, "algorithm.crossover_rate", f"must be in [0, 1], got {a.crossover_rate}")
    _need(a.n_islands >= 2, "algorithm.n_islands", f"must be >= 2, got {a.n_islands}")
    _need(a.migration_interval >= 0, "algorithm.migration_interval", f"must be >= 0, got {a.migration_interval}")
    _need(a.migrants >= 0, "algorithm.migrants", f"must be >= 0, got {a.migrants}")

    b = cfg.budget
    _need(b.evaluations is not None or b.seconds is not None, "budget", "set budget.evaluations or budget.seconds")
    _need(b.evaluations is None or b.evaluations >= 1, "budget.evaluations", f"must be >= 1, got {b.evaluations}")
    _need(b.seconds is None or b.seconds > 0, "budget.seconds", f"must be > 0, got {b.seconds}")
    _need(b.candidates is None or b.candidates >= 1, "budget.candidates", f"must be >= 1, got {b.candidates}")

    e = cfg.engine
    _need(e.capacity is None or e.capacity >= 1, "engine.capacity", f"must be >= 1 or null, got {e.capacity}")
    _need(e.checkpoint_every >= 1, "engine.checkpoint_every", f"must be >= 1, got {e.checkpoint_every}")
    _need(e.inspirations >= 0, "engine.inspirations", f"must be >= 0, got {e.inspirations}")
    _need(e.lessons >= 0, "engine.lessons", f"must be >= 0, got {e.lessons}")
    _need(e.ahead >= 0, "engine.ahead", f"must be >= 0, got {e.ahead}")
    _need(e.verdict_wait_s >= 0, "engine.verdict_wait_s", f"must be >= 0, got {e.verdict_wait_s}")
    _need(e.compile_executor in ("process", "thread", "inline", "ray"), "engine.compile_executor",
          f"{e.compile_executor!r} is not one of ['process', 'thread', 'inline', 'ray']")
    _need(e.compile_workers is None or e.compile_workers >= 1, "engine.compile_workers",
          f"must be >= 1 or null, got {e.compile_workers}")

    m = cfg.mutator
    _need(len(m.operators) > 0, "mutator.operators", "is empty; choose a mutator (rules, template, llm, mixed)")
    names = []
    for i, spec in enumerate(m.operators):
        _need(isinstance(spec, DictConfig | dict) and "name" in spec, f"mutator.operators[{i}]",
              f"must be a mapping with a 'name', got {spec!r}")
        w = spec.get("weight", 1.0)
        _need(isinstance(w, int | float) and w >= 0, f"mutator.operators[{i}].weight", f"must be >= 0, got {w!r}")
        names.append(spec["name"])
    _need(len(set(names)) == len(names), "mutator.operators", f"names must be unique, got {names}")
    from evolve.operators.registry import OPERATORS

    for i, (name, spec) in enumerate(zip(names, m.operators)):
        _need(name in OPERATORS or spec.get("_target_") is not None, f"mutator.operators[{i}].name",
              f"{name!r} is not one of {sorted(OPERATORS)} (or give the class as _target_)")
    _need(sum(float(spec.get("weight", 1.0)) for spec in m.operators) > 0, "mutator.operators",
          "every weight is 0; give at least one operator a weight > 0")
    _need(m.ucb_c >= 0, "mutator.ucb_c", f"must be >= 0, got {m.ucb_c}")
    _need(m.reward_validity >= 0 and m.reward_improvement >= 0
          and m.reward_validity + m.reward_improvement <= 1.0 + 1e-12,
          "mutator.reward_validity/reward_improvement", "must be >= 0 and sum to <= 1")
    _need(m.max_repairs >= 0, "mutator.max_repairs", f"must be >= 0, got {m.max_repairs}")

    t = cfg.tasks
    _need(0.0 <= t.neighbour_rate <= 1.0, "tasks.neighbour_rate", f"must be in [0, 1], got {t.neighbour_rate}")
    _need(int(cfg.engine.get("max_evaluator_crashes", 0)) >= 0, "engine.max_evaluator_crashes",
          f"must be >= 0, got {cfg.engine.get('max_evaluator_crashes')}")
    _need(t.radius >= 1, "tasks.radius", f"must be >= 1, got {t.radius}")
    _need(t.transfer >= 0, "tasks.transfer", f"must be >= 0, got {t.transfer}")
    o = cfg.objective
    _need(bool(o.baseline), "objective.baseline", "is empty; give 'best' or a baseline name such as 'torch'")
    _need(o.baseline != "best" or o.libraries is None or len(o.libraries) > 0, "objective.libraries",
          "is empty; 'best' needs a library (null: the workload's)")

    h = cfg.hardware
    _need(h.name in HARDWARE, "hardware.name", f"{h.name!r} is not one of {list(HARDWARE)}")
    _need(h.arch in ARCHES, "hardware.arch", f"{h.arch!r} is not one of {list(ARCHES)}")
    ev = cfg.evaluator
    _need(not (h.compile_only and ev.kind == EvaluatorKind.gpu), "evaluator.kind",
          f"hardware={h.name} is compile-only; use evaluator=static (allowed with it: ['static', 'auto'])")
    _need(ev.gpus_per_job >= 0, "evaluator.gpus_per_job", f"must be >= 0, got {ev.gpus_per_job}")
    r = ev.ray
    _need(r.depth >= 1, "evaluator.ray.depth", f"must be >= 1, got {r.depth}")
    _need(r.actors is None or r.actors >= 1, "evaluator.ray.actors", f"must be >= 1 or null, got {r.actors}")
    _need(r.actor_cpus is None or r.actor_cpus >= 0, "evaluator.ray.actor_cpus", f"must be >= 0, got {r.actor_cpus}")
    _need(r.max_requeues >= 0, "evaluator.ray.max_requeues", f"must be >= 0, got {r.max_requeues}")
    if ev.kind == EvaluatorKind.replay:
        _need(len(ev.stores) > 0, "evaluator.stores", "evaluator=replay needs at least one recorded run store "
              "(e.g. evaluator.stores=[experiments/data/rmsnorm_map_elites_s0.sqlite.xz])")
        from evaluators.recorded import resolve_store

        for i, st in enumerate(ev.stores):
            _need(resolve_store(str(st)).is_file(), f"evaluator.stores[{i}]", f"{st!r} is no file")
    _need(cfg.logger.log_every >= 1, "logger.log_every", f"must be >= 1, got {cfg.logger.log_every}")
    _need(cfg.logger.media_every >= 0, "logger.media_every", f"must be >= 0 (0 = only at the end), got "
          f"{cfg.logger.media_every}")
    _need(cfg.logger.mode in WANDB_MODES, "logger.mode", f"{cfg.logger.mode!r} is not one of {list(WANDB_MODES)}")

    target = cfg.workload.get("_target_") if isinstance(cfg.workload, DictConfig | dict) else None
    _need(isinstance(target, str) and "." in target, "workload._target_",
          f"must be the dotted path of a Workload class (e.g. workloads.rmsnorm.RMSNorm), got {target!r}; "
          f"choose a workload=<name> of conf/workload/ or give workload._target_")


def assign_devices(job_num: int | None, visible: list[int], per_job: int) -> list[int] | None:
    """The GPUs a sweep job uses: ``per_job`` consecutive devices starting at ``job_num * per_job``, wrapping
    round-robin over ``visible``; None (all visible) when ``per_job`` is 0, not in a multirun, or no GPU.
    E.g. job 3 of a sweep on 2 GPUs with per_job=1 gets [1]."""
    if per_job <= 0 or job_num is None or not visible:
        return None
    if per_job > len(visible):
        raise ConfigError(f"evaluator.gpus_per_job: {per_job} exceeds the {len(visible)} visible GPUs")
    start = job_num * per_job
    return [visible[(start + k) % len(visible)] for k in range(per_job)]


def check_override_keys(args: list[str]) -> None:
    """Refuse a command-line override whose key is not in the schema, with the nearest key named.

    args: the command line's arguments (``sys.argv[1:]``). ``key=value``, ``+key=value`` and ``++key=value``
    overrides are checked (``~key``, ``hydra.*``, ``group/option`` and ``key@package`` forms are Hydra's to
    judge); a key is followed down the dataclasses of ``Config`` and stops being checked at a field that is not a
    dataclass (``workload.*``, ``evaluator.options.*``: open dicts). A top-level key may also be a config group of
    ``conf/`` (``experiment``). Hydra's own message for such a typo ("To append to your config use +key=...")
    suggests adding the misspelt key; Hydra's ``+`` adds it even where the schema is closed, and nothing reads
    it, so ``+budget.evaluatons=30`` would run with the default budget: it is refused like the plain form.
    Raises ConfigError: "<key>: no such key; did you mean <nearest>? (the keys of <parent>: ...)".
    """
    import dataclasses
    import difflib
    import typing
    from pathlib import Path

    groups = {p.name for p in (Path(__file__).resolve().parents[1] / "conf").iterdir() if p.is_dir()}
    for arg in args:
        key = arg.split("=", 1)[0].lstrip("+")
        if ("=" not in arg or arg.startswith(("-", "~")) or key.startswith("hydra.") or key == "hydra"
                or any(c in key for c in "/@")):
            continue
        node: Any = Config
        parts = key.split(".")
        for i, part in enumerate(parts):
            if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
                break
            names = [f.name for f in dataclasses.fields(node)]
            if i == 0:
                names = sorted(set(names) | groups)
            if part not in names:
                where = ".".join(parts[:i])
                near = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
                hint = f"; did you mean {'.'.join([*parts[:i], near[0]])}?" if near else ""
                raise ConfigError(f"{key}: no such key{hint} (the keys of {where or 'the config'}: "
                                  f"{', '.join(names)})")
            node = typing.get_type_hints(node).get(part)


def check_group_options(args: list[str]) -> None:
    """Refuse a ``group=option`` override (or a sweep ``-m group=a,b``) naming an option that ``conf/<group>/``
    does not have, with the options and the nearest one: one ``configuration error:`` line (exit status 2)
    instead of Hydra's "Could not find 'group/option'" and its config search path.

    args: the command line's arguments (``sys.argv[1:]``). Skipped when ``hydra.searchpath``, ``--config-dir`` or
    ``--config-path`` is given (options may then live in another config folder, Hydra judges them), for ``hydra/...`` groups, and for values that
    are not plain names (sweep functions such as ``glob(*)``, interpolations). ``null`` is left to Hydra.
    Raises ConfigError: "<group>: '<option>' is not one of [...]; did you mean <nearest>?".
    """
    import difflib
    import re
    from pathlib import Path

    if any(a.lstrip("+").startswith("hydra.searchpath") or a.split("=", 1)[0] in ("-cd", "--config-dir", "-cp",
                                                                                   "--config-path") for a in args):
        return
    conf = Path(__file__).resolve().parents[1] / "conf"
    for arg in args:
        if "=" not in arg or arg.startswith(("-", "~")):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+")
        if not re.fullmatch(r"\w+", key) or key == "hydra" or not (conf / key).is_dir():
            continue
        if not re.fullmatch(r"[\w.-]+(,[\w.-]+)*", value):
            continue
        options = sorted(p.stem for p in (conf / key).glob("*.yaml"))
        for v in value.split(","):
            if v != "null" and v not in options:
                near = difflib.get_close_matches(v, options, n=1, cutoff=0.6)
                hint = f"; did you mean {near[0]}?" if near else ""
                raise ConfigError(f"{key}: {v!r} is not one of {options}{hint}")
