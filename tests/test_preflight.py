"""A workload's authoring mistakes stop ``python -m evolve`` before any work with one message naming the seed,
the key and the cause (``workloads.preflight``, ``workloads.registry.import_failure``,
``evolve.app.make_algorithm``), instead of a run of 0 % valid candidates or a traceback."""

from __future__ import annotations

import textwrap

import pytest

from evolve.config import ConfigError
from workloads.preflight import check_workload
from workloads.registry import WorkloadConfigError, build_workload, get_workload

# Each class breaks the softmax example (docs/add-a-workload.md) in one way a newcomer might.
BAD = '''
from workloads.base import Workload
from workloads.kda.chunk import KDAChunk
from workloads.pipeline import Stage
from workloads.softmax import Softmax


class NoN(Softmax):  # the ABI lacks the seed's N parameter
    abi = Softmax.abi[:3]


class WrongEntry(Softmax):
    entry = "softmax_fwd"

    def seeds(self):
        return [k.__class__(module=k.module, entry="softmax_fwd", launch=k.launch) for k in super().seeds()]


class SmallBlocks(Softmax):  # refuses the seeds' 128 and 256 threads
    def launch_dims(self, shape, launch):
        if launch.threads > 64:
            raise ValueError("at most 64 threads")
        return super().launch_dims(shape, launch)


class NoSeeds(Softmax):
    def seeds(self):
        return []


class BrokenSeed(Softmax):
    def seeds(self):
        raise FileNotFoundError("softmax_v2.ptx")


class DefaultOptions(Softmax):  # options() not overridden: the workers would call DefaultOptions(dtype="fp32")
    def options(self):
        return Workload.options(self)


class NoHeldout(Softmax):
    def __init__(self, rows: int = 8192):
        super().__init__(rows)
        del self.heldout_shapes


class OutputFirst(KDAChunk):  # the output stage before the state pass that writes h
    stages = (KDAChunk.stages[0], KDAChunk.stages[2], KDAChunk.stages[1])
'''


@pytest.fixture
def bad(tmp_path, monkeypatch):
    (tmp_path / "bad_wl.py").write_text(BAD)
    (tmp_path / "raises_wl.py").write_text(textwrap.dedent('''
        from workloads.base import ParamSpec

        X = ParamSpec("x", "input", "u32")
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def built(name: str, **options):
    return build_workload({"_target_": f"bad_wl.{name}", **options})


@pytest.mark.parametrize("name, message", [
    ("NoN", r"seed 0 does not match the workload's abi: entry 'softmax' has 4 params, the workload ABI has 3: "
            r"\['x', 'y', 'M'\]; the abi is \(x \.u64, y \.u64, M \.u32\)"),
    ("WrongEntry", r"seed 0: entry 'softmax_fwd' is not in its module \(entries: \['softmax'\]\)"),
    ("SmallBlocks", r"seed 0 \(block \(128, 1, 1\)\): launch_dims refuses search shape \(64, 1024\): at most 64"),
    ("NoSeeds", r"seeds\(\) returned no kernels"),
    ("BrokenSeed", r"seeds\(\) raised FileNotFoundError: softmax_v2\.ptx"),
    ("DefaultOptions", r"spec\(\) \{'_target_': 'bad_wl\.DefaultOptions', 'dtype': 'fp32'\} does not rebuild it.*"
                       r"rejected options \{'dtype': 'fp32'\}"),
    ("NoHeldout", r"no \['heldout_shapes'\]; a workload sets name, entry"),
])
def test_each_mistake_is_named(bad, name, message):
    wl = built(name, rows=64)
    with pytest.raises(WorkloadConfigError, match=rf"^workload \(bad_wl\.{name}\): {message}"):
        check_workload(wl)


def test_a_pipeline_stage_list_is_checked(bad):
    with pytest.raises(WorkloadConfigError, match=r"^workload \(bad_wl\.OutputFirst\): stages: stage 'output' reads "
                                                  r"\['h', 'v_new'\] before any stage writes them"):
        check_workload(built("OutputFirst"))


@pytest.mark.parametrize("name, options", [("rmsnorm", {}), ("rmsnorm", {"dtype": "fp16"}), ("softmax", {}),
                                           ("kda_recurrent", {}), ("kda_chunk", {}),
                                           ("rmsnorm", {"seed_ptx": "workloads/seeds/rmsnorm_naive.ptx",
                                                        "seed_launch": {"grid": ["M", 1, 1], "block": [128, 1, 1]}})])
def test_the_repository_workloads_pass(name, options):
    check_workload(get_workload(name, **options))


def test_import_failures_name_the_cause(bad):
    with pytest.raises(WorkloadConfigError, match=r"cannot import 'raises_wl\.X': importing it raised ValueError: "
                                                  r"ParamSpec 'x': a buffer is passed as a 64-bit pointer, got \.u32 "
                                                  r"at .*raises_wl\.py:4$"):
        build_workload({"_target_": "raises_wl.X"})
    with pytest.raises(WorkloadConfigError, match=r"'bad_wl\.Nope': module 'bad_wl' has no attribute or submodule "
                                                  r"'Nope'$"):
        build_workload({"_target_": "bad_wl.Nope"})
    with pytest.raises(WorkloadConfigError, match=r"'not_here\.Op': no module named 'not_here': put the folder that "
                                                  r"holds it on PYTHONPATH"):
        build_workload({"_target_": "not_here.Op"})


def test_build_workload_from_reports_a_config_error(bad):
    from omegaconf import OmegaConf

    from evolve.app import build_workload_from

    cfg = OmegaConf.create({"workload": {"_target_": "bad_wl.NoN", "rows": 64}})
    with pytest.raises(ConfigError, match=r"^workload \(bad_wl\.NoN\): seed 0 does not match"):
        build_workload_from(cfg)


class NoTell:
    name = "no_tell"

    def ask(self, rng): ...

    def state_dict(self): ...

    def load_state(self, state): ...


class Picky(NoTell):
    def __init__(self, rate: float = 0.5):
        if not 0 <= rate <= 1:
            raise ValueError(f"rate must be in [0, 1], got {rate}")

    def tell(self, told): ...


def test_algorithm_contract_and_constructor_errors_are_config_errors():
    from omegaconf import OmegaConf

    from archive.grid import GridArchive, default_dimensions
    from evolve.app import make_algorithm

    archive = GridArchive(default_dimensions("h200"))

    def make(target, **options):
        return make_algorithm(OmegaConf.create({"_target_": target, "name": "x", "options": options}), archive,
                              lambda: GridArchive(archive.dims))

    with pytest.raises(ConfigError, match=r"^algorithm\._target_: test_preflight\.NoTell has no \['tell'\]"):
        make("test_preflight.NoTell")
    with pytest.raises(ConfigError, match=r"^algorithm\.options: test_preflight\.Picky rejected \{'rate': 2\}: "
                                          r"rate must be in \[0, 1\], got 2$"):
        make("test_preflight.Picky", rate=2)
    assert isinstance(make("test_preflight.Picky", rate=0.1), Picky)
