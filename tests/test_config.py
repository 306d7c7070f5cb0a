"""Hydra configuration: composition of every group option, schema errors with key and allowed values, the
checks of ``evolve.config.validate``, per-job GPU assignment and unique run directories. Uses the compose API
and subprocesses, never the ``@hydra.main`` function in-process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException

from evolve.config import ConfigError, assign_devices, register, run_uid, validate

REPO = Path(__file__).resolve().parents[1]
CONF = str(REPO / "conf")


def cfg_of(*overrides: str, hydra: bool = False):
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[*overrides, "run_dir=/tmp/unused"], return_hydra_config=hydra)


def test_defaults(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = cfg_of()
    validate(cfg)
    assert cfg.algorithm.name == "map_elites" and cfg.algorithm.selection == "uniform"
    assert cfg.workload._target_ == "workloads.rmsnorm.RMSNorm" and cfg.workload.dtype == "bf16"
    assert cfg.evaluator.kind == "auto"
    assert cfg.budget.evaluations == 200 and cfg.budget.seconds is None
    assert cfg.logger.kind == "wandb" and cfg.logger.mode == "offline"
    assert cfg.hardware.name == "h200" and cfg.hardware.arch == "sm_90"
    assert cfg.knowledge == "none" and cfg.llm.backend == "transformers"
    names = [o["name"] for o in cfg.mutator.operators]
    assert {"hints", "mathops", "schedule", "unroll", "launch", "prefetch", "template", "crossover"} <= set(names)


def test_wandb_mode_follows_env(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert cfg_of().logger.mode == "disabled"


@pytest.mark.parametrize("override", [
    "algorithm=map_elites", "algorithm=random", "algorithm=hill_climb", "algorithm=ga", "algorithm=islands",
    "evaluator=auto", "evaluator=gpu", "evaluator=static", "evaluator=replay", "hardware=h200", "hardware=h100",
    "hardware=b200",
    "logger=wandb", "logger=none", "mutator=rules", "mutator=template", "archive=default",
    "experiment=rmsnorm_cpu_smoke", "experiment=rmsnorm_h200", "experiment=compare",
])
def test_every_option_composes_and_validates(override):
    cfg = cfg_of(override)
    validate(cfg)


def test_experiments_set_what_they_promise():
    gpu = cfg_of("experiment=rmsnorm_h200")
    assert gpu.evaluator.kind == "gpu" and gpu.budget.seconds == 480 and gpu.budget.evaluations is None
    assert gpu.experiment_name == "rmsnorm_h200" and gpu.algorithm.name == "map_elites"
    smoke = cfg_of("experiment=rmsnorm_cpu_smoke")
    assert smoke.evaluator.kind == "static" and smoke.logger.kind == "none"
    assert cfg_of("experiment=compare").knowledge == "none"
    cmp_ = cfg_of("experiment=compare", hydra=True)
    assert cmp_.hydra.sweeper.params.algorithm == "map_elites,random,hill_climb,ga,islands"


@pytest.mark.parametrize("override,key,allowed", [
    ("algorithm.selection=best", "algorithm.selection", "[uniform, curiosity]"),
    ("evaluator.kind=tpu", "evaluator.kind", "[auto, gpu, static, replay]"),
    ("logger.kind=tensorboard", "logger.kind", "[wandb, none]"),
    ("mutator.selection=thompson", "mutator.selection", "[ucb, weighted]"),
    ("budget.evaluations=lots", "budget.evaluations", "Integer"),
])
def test_schema_rejects_bad_values_with_key_and_allowed(override, key, allowed):
    with pytest.raises(ConfigCompositionException) as ei:
        cfg_of(override)
    msg = str(ei.value.__cause__)
    assert key in msg and allowed in msg


def test_unknown_group_option_lists_the_options():
    with pytest.raises(MissingConfigException) as ei:
        cfg_of("algorithm=cmaes")
    assert "map_elites" in str(ei.value) and "islands" in str(ei.value)


@pytest.mark.parametrize("overrides,key", [
    (["budget.evaluations=0"], "budget.evaluations"),
    (["budget.evaluations=null"], "budget"),
    (["algorithm=ga", "algorithm.crossover_rate=2"], "algorithm.crossover_rate"),
    (["algorithm=islands", "algorithm.n_islands=1"], "algorithm.n_islands"),
    (["hardware=b200", "evaluator=gpu"], "evaluator.kind"),
    (["hardware.arch=sm_75"], "hardware.arch"),
    (["hardware.name=a100"], "hardware.name"),
    (["mutator.operators=[]"], "mutator.operators"),
    (["~workload._target_"], "workload._target_"),
    (["engine.capacity=0"], "engine.capacity"),
    (["engine.verdict_wait_s=-1"], "engine.verdict_wait_s"),
    (["seed=-1"], "seed"),
    (["mutator.operators=[{name:foo}]"], "mutator.operators[0].name"),
    (["mutator.operators=[{name:hints,weight:0}]"], "mutator.operators"),
])
def test_validate_names_the_key(overrides, key):
    cfg = cfg_of(*overrides)
    with pytest.raises(ConfigError) as ei:
        validate(cfg)
    assert str(ei.value).startswith(key)


def test_unknown_workload_lists_the_configs():
    with pytest.raises(MissingConfigException) as ei:
        cfg_of("workload=softmaxx")
    assert "rmsnorm" in str(ei.value)


def test_workload_target_and_options_errors_name_the_key(tmp_path):
    from evolve.app import build_workload_from

    with pytest.raises(ConfigError, match=r"^workload\._target_: cannot import 'workloads\.nope\.Nope'"):
        build_workload_from(cfg_of("workload._target_=workloads.nope.Nope"))
    with pytest.raises(ConfigError, match=r"^workload: workloads\.rmsnorm\.RMSNorm rejected options.*int8"):
        build_workload_from(cfg_of("workload.dtype=int8"))
    with pytest.raises(ConfigError, match=r"colour"):
        build_workload_from(cfg_of("+workload.colour=red"))
    assert build_workload_from(cfg_of("workload.dtype=fp16")).dtype == "fp16"
    # a seed kernel of one's own: a missing file or launch rule is a configuration error too, not a traceback
    with pytest.raises(ConfigError, match=r"^workload\.seed_ptx=/nonexistent\.ptx: no such file$"):
        build_workload_from(cfg_of("workload.seed_ptx=/nonexistent.ptx",
                                   "workload.seed_launch={grid: [M, 1, 1], block: [128, 1, 1]}"))
    seed = REPO / "tests" / "data" / "rmsnorm_bf16.ptx"
    with pytest.raises(ConfigError, match=r"^workload\.seed_launch\.grid is required: the grid of the seed kernel"):
        build_workload_from(cfg_of(f"workload.seed_ptx={seed}"))


def test_algorithms_are_built_from_their_target(tmp_path, monkeypatch):
    from archive.grid import GridArchive, default_dimensions
    from evolve.app import make_algorithm

    archive = GridArchive(default_dimensions("h200"))
    built = {o: make_algorithm(cfg_of(f"algorithm={o}").algorithm, archive, lambda: GridArchive(archive.dims))
             for o in ("map_elites", "random", "hill_climb", "ga", "islands")}
    assert {o: a.name for o, a in built.items()} == {o: o for o in built}
    assert built["ga"].population_size == 16 and built["islands"].n_islands == 4
    assert make_algorithm(cfg_of("algorithm=map_elites", "algorithm.selection=curiosity").algorithm, archive,
                          lambda: archive).selection == "curiosity"
    # an out-of-tree algorithm: its class path and its own option
    (tmp_path / "my_algo.py").write_text(
        "from evolve.algorithms.hill_climb import HillClimb\n\n\n"
        "class Patient(HillClimb):\n    name = 'patient'\n\n"
        "    def __init__(self, patience: int = 3):\n        super().__init__()\n        self.patience = patience\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    algo = make_algorithm(cfg_of("algorithm._target_=my_algo.Patient", "algorithm.name=patient",
                                 "+algorithm.options.patience=7").algorithm, archive, lambda: archive)
    assert (type(algo).__name__, algo.patience) == ("Patient", 7)
    with pytest.raises(ConfigError) as ei:  # one line: no Hydra "Are you sure ...", no ERROR log of hydra.utils
        make_algorithm(cfg_of("algorithm._target_=my_algo.Nope").algorithm, archive, lambda: archive)
    assert str(ei.value) == ("algorithm._target_: cannot import 'my_algo.Nope': module 'my_algo' has no attribute "
                             "or submodule 'Nope'")
    with pytest.raises(ConfigError, match=r"^algorithm\.options: my_algo\.Patient takes no \['colour'\]"):
        make_algorithm(cfg_of("algorithm._target_=my_algo.Patient", "+algorithm.options.colour=red").algorithm,
                       archive, lambda: archive)


def test_cli_fails_before_any_work(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "evolve", "budget.evaluations=0", f"hydra.run.dir={run_dir}",
                          "logger=none"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "budget.evaluations: must be >= 1, got 0" in out.stderr
    assert not (run_dir / "store.sqlite").exists()
    out = subprocess.run([sys.executable, "-m", "evolve", "algorithm.selection=best", f"hydra.run.dir={run_dir}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "expected one of [uniform, curiosity]" in out.stderr and "algorithm.selection" in out.stderr


def test_misspelt_key_names_the_nearest_key(tmp_path):
    """A typo in a key stops with one line naming the nearest key and the keys of its parent, not Hydra's advice
    to append the misspelt key with +; open dicts (workload.*) and Hydra's own forms are not judged."""
    from evolve.config import check_override_keys

    with pytest.raises(ConfigError) as e:
        check_override_keys(["budget.evaluatons=30"])
    assert str(e.value) == ("budget.evaluatons: no such key; did you mean budget.evaluations? "
                            "(the keys of budget: evaluations, seconds, candidates)")
    with pytest.raises(ConfigError, match=r"^evaluator\.ray\.adress: no such key; did you mean evaluator\.ray\.address\?"):
        check_override_keys(["evaluator.ray.adress=auto"])
    with pytest.raises(ConfigError, match=r"^evalutor: no such key; did you mean evaluator\? \(the keys of the config: "):
        check_override_keys(["evalutor=static"])
    with pytest.raises(ConfigError, match=r"^zzz: no such key \(the keys of the config: algorithm, "):
        check_override_keys(["zzz=1"])
    # Hydra's "+" appends even into the closed schema, and nothing reads the misspelt key: refused the same way.
    with pytest.raises(ConfigError, match=r"^budget\.evaluatons: no such key; did you mean budget\.evaluations\?"):
        check_override_keys(["+budget.evaluatons=30"])
    with pytest.raises(ConfigError, match=r"^sed: no such key; did you mean seed\?"):
        check_override_keys(["++sed=3"])
    check_override_keys(["-m", "experiment=compare", "algorithm=map_elites,random", "workload.rows=4096",
                         "+algorithm.options.epsilon=0.1", "+workload.colour=red", "+experiment=compare",
                         "++engine.ahead=2", "~logger.entity", "algorithm._target_=a.B", "hydra.run.dir=x",
                         "hydra/launcher=ray_jobs", "evaluator.ray.address=auto", "llm.model=m",
                         "engine.max_evaluator_crashes=3", "workload.seed_launch={grid: [M, 1, 1]}"])
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "evolve", "budget.evaluatons=30", f"hydra.run.dir={run_dir}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and not run_dir.exists()
    assert out.stderr == ("configuration error: budget.evaluatons: no such key; did you mean budget.evaluations? "
                          "(the keys of budget: evaluations, seconds, candidates)\n")


def test_unknown_group_option_names_the_group_and_its_options(tmp_path):
    """An option a group lacks: one line naming the group, its options and the nearest (Hydra's own message
    ended with its config search path and exit status 1)."""
    from evolve.config import check_group_options

    algorithms = "['ga', 'hill_climb', 'islands', 'map_elites', 'random']"
    with pytest.raises(ConfigError) as e:
        check_group_options(["algorithm=map_elite"])
    assert str(e.value) == f"algorithm: 'map_elite' is not one of {algorithms}; did you mean map_elites?"
    with pytest.raises(ConfigError, match=r"^evaluator: 'statc' is not one of \['auto', 'gpu', 'ray', 'replay', "
                                          r"'static'\]; did you mean static\?$"):
        check_group_options(["-m", "evaluator=static,statc"])
    with pytest.raises(ConfigError, match=r"^algorithm: 'nope' is not one of \[.*\]$"):
        check_group_options(["algorithm=nope"])
    check_group_options(["-m", "algorithm=map_elites,random", "workload=softmax", "evaluator=static",
                         "experiment=compare", "+experiment=rmsnorm_cpu_smoke", "hydra/launcher=ray_jobs",
                         "algorithm=glob(*)", "seed=0,1", "algorithm.name=anything", "experiment=null"])
    # an option of one's own config folder is Hydra's to find
    check_group_options(["hydra.searchpath=[file:///x/conf]", "workload=my_op"])
    check_group_options(["--config-dir", "/x/conf", "workload=my_op"])
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "evolve", "algorithm=nope", f"hydra.run.dir={run_dir}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and not run_dir.exists()
    assert out.stderr == f"configuration error: algorithm: 'nope' is not one of {algorithms}\n"


def test_assign_devices():
    assert assign_devices(None, [0, 1], 1) is None  # not a sweep: all visible GPUs
    assert assign_devices(3, [0, 1], 0) is None  # per-job assignment off
    assert assign_devices(3, [], 1) is None  # no GPU
    assert [assign_devices(j, [0, 1], 1) for j in range(4)] == [[0], [1], [0], [1]]
    assert assign_devices(1, [0, 1, 2, 3], 2) == [2, 3]
    assert assign_devices(2, [0, 1, 2, 3], 2) == [0, 1]
    with pytest.raises(ConfigError, match="gpus_per_job"):
        assign_devices(0, [0], 2)


def test_run_dirs_are_unique_per_process():
    cfg = cfg_of(hydra=True)
    assert cfg.hydra.run.dir.endswith(run_uid()) and cfg.hydra.sweep.dir.endswith(run_uid())
    code = "from evolve.config import run_uid; print(run_uid())"
    uids = {subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                           timeout=120).stdout.strip() for _ in range(3)}
    assert len(uids) == 3 and all(u for u in uids)


def test_resume_under_other_search_settings_names_the_key(tmp_path):
    from omegaconf import OmegaConf

    from archive.store import Store
    from evolve.app import check_resume_compatible

    path = tmp_path / "store.sqlite"
    check_resume_compatible(cfg_of(), path)  # no store yet: nothing to compare
    with Store(path) as s:
        s.set_meta("config", OmegaConf.to_container(cfg_of(), resolve=True, enum_to_str=True))
    # the budget and engine knobs may change on resume
    check_resume_compatible(cfg_of("budget.evaluations=500", "engine.capacity=1"), path)
    check_resume_compatible(cfg_of("algorithm=ga", "resume=false"), path)
    for overrides, key in [(["algorithm=ga"], "algorithm._target_"), (["seed=1"], "seed"),
                           (["hardware=h100"], "hardware.name"), (["mutator=template"], "mutator.operators"),
                           (["evaluator=replay"], "evaluator.kind")]:
        with pytest.raises(ConfigError) as ei:
            check_resume_compatible(cfg_of(*overrides), path)
        assert str(ei.value).startswith(f"{key}: the run in {tmp_path} was started with")


@pytest.mark.parametrize("override,message", [
    ("experiment=nope", "experiment: 'nope' is not one of ['compare', 'rmsnorm_cpu_smoke', 'rmsnorm_h200', 'rmsnorm_h200_tasks']"),
    ("workload.dtype=int8", "workload: workloads.rmsnorm.RMSNorm rejected options {'dtype': 'int8', 'eps': 1e-06, 'baseline_weight': 'workload'}: "
                            "dtype must be one of ['bf16', 'fp16', 'fp32'], got 'int8'"),
    ("knowledge=/proc/nope/k.sqlite", "knowledge: cannot open '/proc/nope/k.sqlite'"),
])
def test_cli_names_the_key_without_a_traceback(tmp_path, override, message):
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "evolve", override, "evaluator=static", "logger=none",
                          "budget.evaluations=1", f"hydra.run.dir={run_dir}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"configuration error: {message}" in out.stderr and "Traceback" not in out.stderr
    assert not (run_dir / "store.sqlite").exists() or override.startswith("knowledge")


def test_replay_needs_existing_stores():
    cfg = cfg_of("evaluator=replay", "evaluator.stores=[no/such/store.sqlite.xz]")
    with pytest.raises(ConfigError, match=r"evaluator.stores\[0\]"):
        validate(cfg)
    with pytest.raises(ConfigError, match=r"evaluator\.stores"):
        validate(cfg_of("evaluator=replay", "evaluator.stores=[]"))
