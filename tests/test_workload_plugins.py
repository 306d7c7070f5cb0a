"""Workloads as plug-ins: built from ``_target_`` specs, rebuilt from ``Workload.spec()`` in a spawned process
(as the GPU workers do), out-of-tree classes included; baselines dispatched through the workload."""

from __future__ import annotations

import multiprocessing as mp
import sys
import textwrap
from pathlib import Path

import pytest

from workloads.base import Workload
from workloads.registry import WorkloadConfigError, build_workload, get_workload, workload_config
from workloads.rmsnorm import RMSNorm

PLUGIN = textwrap.dedent('''
    from workloads.rmsnorm import RMSNorm


    class WideEps(RMSNorm):
        """An out-of-tree workload: RMSNorm under another name, with an option of its own."""

        name = "wide_eps"

        def __init__(self, dtype="bf16", scale=10.0):
            super().__init__(dtype, eps=1e-6 * scale)
            self.scale = scale

        def options(self):
            return {"dtype": self.dtype, "scale": self.scale}
''')


def _rebuild(spec, path, q):
    sys.path.insert(0, path)
    from workloads.registry import build_workload

    wl = build_workload(spec)
    q.put((wl.name, wl.dtype, wl.eps, wl.spec()))


def test_spec_round_trips_in_process():
    wl = get_workload("rmsnorm", dtype="fp16")
    assert wl.spec() == {"_target_": "workloads.rmsnorm.RMSNorm", "dtype": "fp16", "eps": 1e-6,
                         "baseline_weight": "workload"}
    again = build_workload(wl.spec())
    assert isinstance(again, RMSNorm) and again.spec() == wl.spec()
    assert workload_config("rmsnorm")["_target_"] == "workloads.rmsnorm.RMSNorm"
    # the stored form of runs written before the _target_ configs
    assert build_workload({"name": "rmsnorm", "options": {"dtype": "fp32"}}).dtype == "fp32"


def test_out_of_tree_workload_rebuilds_in_a_spawned_process(tmp_path, monkeypatch):
    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    wl = build_workload({"_target_": "my_plugin.WideEps", "dtype": "fp32", "scale": 100.0})
    spec = wl.spec()
    assert spec == {"_target_": "my_plugin.WideEps", "dtype": "fp32", "scale": 100.0}
    ctx = mp.get_context("spawn")  # what the GPU supervisor uses: nothing is inherited but the arguments
    q = ctx.Queue()
    p = ctx.Process(target=_rebuild, args=(spec, str(tmp_path), q))
    p.start()
    name, dtype, eps, spec2 = q.get(timeout=120)
    p.join(30)
    assert (name, dtype, spec2) == ("wide_eps", "fp32", spec) and eps == pytest.approx(1e-4)


def test_bad_specs_name_the_key():
    with pytest.raises(WorkloadConfigError, match=r"workload\._target_: cannot import 'nowhere\.Thing'"):
        build_workload({"_target_": "nowhere.Thing"})
    with pytest.raises(WorkloadConfigError, match=r"workload\._target_: 'collections\.OrderedDict' returned "
                                                  r"OrderedDict, not a workloads\.base\.Workload"):
        build_workload({"_target_": "collections.OrderedDict"})
    with pytest.raises(WorkloadConfigError, match=r"workload: no _target_"):
        build_workload({"dtype": "bf16"})


def test_baselines_come_from_the_workload():
    class NoLibs(RMSNorm):
        name = "nolibs"
        baselines = Workload.baselines

    notes: dict[str, str] = {}
    assert NoLibs().baselines({}, (1, 8), ("torch",), notes) == {}
    assert notes == {"all": "workload 'nolibs' defines no library baselines"}
    assert RMSNorm().baseline_names == ("torch", "torch_compile", "liger", "quack")


def test_default_objective_follows_the_workload_baselines():
    from evaluators.objective import workload_objective as default_objective

    assert default_objective(get_workload("rmsnorm")).libraries == ("torch_compile", "liger", "quack", "quack_tuned")
    assert default_objective(get_workload("rmsnorm")).fallback == ("torch", "naive")
    soft, kda = default_objective(get_workload("softmax")), default_objective(get_workload("kda_recurrent"))
    assert (soft.libraries, soft.fallback) == (("torch",), ("torch", "naive"))
    assert (kda.libraries, kda.fallback) == (("fla",), ("fla", "naive"))
    chunk = default_objective(get_workload("kda_chunk"))
    assert (chunk.libraries, chunk.fallback) == (("fla_fwd_h",), ("fla_fwd_h", "naive"))


def test_the_composed_config_searches_each_workload_against_its_own_libraries():
    """conf/config.yaml's objective leaves libraries null, so a KDA run is scored against fla, not RMSNorm's
    libraries (on the H200 the KDA search fell back to the naive seed at every shape and printed "speedup over
    the fastest library" for a speedup over its own seed: 7.7)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from evaluators.objective import ObjectiveSpec, workload_objective
    from evolve.config import register

    register()  # the schema conf/config.yaml names first (python -m evolve registers it the same way)
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        for name, libs in (("kda_recurrent", ("fla",)), ("rmsnorm", ("torch_compile", "liger", "quack", "quack_tuned"))):
            cfg = compose("config", overrides=[f"workload={name}"])
            node = OmegaConf.to_container(cfg.objective, resolve=True)
            spec = ObjectiveSpec.from_config(node, default=workload_objective(get_workload(name)))
            assert spec.libraries == libs, name
        cfg = compose("config", overrides=["workload=kda_recurrent", "objective.libraries=[fla]",
                                           "objective.baseline=fla"])
        spec = ObjectiveSpec.from_config(OmegaConf.to_container(cfg.objective, resolve=True),
                                         default=workload_objective(get_workload("kda_recurrent")))
        assert (spec.baseline, spec.contenders, spec.fallback) == ("fla", ("fla",), ("fla", "naive"))
