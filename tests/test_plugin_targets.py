"""Operators and LLM backends as plug-ins: a ``_target_`` class path in the config instead of a built-in name."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.llm.base import ChatMessage, ChatRequest, Completion, LLMError, Usage
from evolve.llm.factory import build_backend
from evolve.operators.registry import build_operators
from workloads.registry import get_workload

OPERATOR = '''
from dataclasses import dataclass

from population.edit_script import EditScript, SetLaunch


@dataclass
class NoOpLaunch:
    """Sets the parent's own block size again: a valid edit that changes nothing."""

    name: str = "noop"
    weight: float = 1.0
    label: str = "x"

    def propose(self, parent, ctx, rng):
        return EditScript((SetLaunch(block=parent.launch.block),))
'''


class EchoBackend:
    """A backend that answers with the last user message (a stand-in model with the real interface)."""

    def __init__(self, model: str = "echo", prefix: str = ""):
        self.model, self.prefix, self.usage = model, prefix, Usage()

    def chat(self, request: ChatRequest) -> Completion:
        c = Completion(text=self.prefix + request.messages[-1].content, model=self.model)
        self.usage.add(c)
        return c


def test_operator_by_target(tmp_path, monkeypatch):
    (tmp_path / "my_ops.py").write_text(OPERATOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    wl = get_workload("rmsnorm")
    ops = build_operators([{"name": "mine", "_target_": "my_ops.NoOpLaunch", "weight": 0.5, "label": "y"},
                           {"name": "hints"}], wl)
    assert [(o.name, o.weight) for o in ops] == [("mine", 0.5), ("hints", 1.0)]
    assert type(ops[0]).__name__ == "NoOpLaunch" and ops[0].label == "y"
    seed = wl.seeds()[0]
    assert ops[0].propose(seed, None, None).to_text() == f"LAUNCH block={','.join(map(str, seed.launch.block))}\n"
    with pytest.raises(ValueError) as ei:
        build_operators([{"name": "mine", "_target_": "my_ops.Nope"}], wl)
    assert str(ei.value).endswith("operator 'mine': _target_ 'my_ops.Nope' cannot be imported: module 'my_ops' has "
                                  "no attribute or submodule 'Nope'")
    with pytest.raises(ValueError, match=r"operator 'mine': unknown parameter\(s\) \['colour'\]"):
        build_operators([{"name": "mine", "_target_": "my_ops.NoOpLaunch", "colour": 1}], wl)
    with pytest.raises(ValueError, match=r"unknown operator 'nope'; allowed: .*crossover, hints"):
        build_operators([{"name": "nope"}], wl)


def test_llm_backend_by_target(tmp_path):
    cfg = {"_target_": f"{__name__}.EchoBackend", "model": "e1", "prefix": "> ", "max_new_tokens": 10,
           "temperature": 0.5, "cache": str(tmp_path / "c.sqlite")}
    b = build_backend(cfg)
    assert build_backend(dict(cfg)) is b  # loaded once per config value
    req = ChatRequest(messages=(ChatMessage("user", "hello"),), max_new_tokens=10, seed=1)  # cacheable
    assert b.chat(req).text == "> hello"
    assert b.chat(req).cached  # the response cache wraps plug-in backends too
    with pytest.raises(LLMError, match=r"^llm\._target_: cannot build 'nowhere\.Model'"):
        build_backend({"_target_": "nowhere.Model"})


class ConstantEvaluator:
    """An evaluator of one's own: every kernel gets the same estimated objective."""

    estimate = True
    capacity = 1

    def __init__(self, workload, gpu, value: float = 1.0):
        self.workload, self.gpu, self.value = workload, gpu, value


def test_evaluator_by_target(caplog, tmp_path):
    from hydra import compose, initialize_config_dir

    from evolve.app import make_evaluator_from
    from evolve.config import ConfigError, register
    from workloads.rmsnorm import RMSNorm

    register()
    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose("config", overrides=[f"evaluator._target_={__name__}.ConstantEvaluator",
                                           "+evaluator.options.value=2.5", "hardware=h100", "run_dir=/tmp/x"])
        bad = compose("config", overrides=["evaluator._target_=nowhere.Eval", "run_dir=/tmp/x"])
        whole = compose("config", overrides=[f"evaluator._target_={__name__}.ConstantEvaluator", "logger=none",
                                             "budget.evaluations=3", f"run_dir={tmp_path}"])
    from evolve.app import run

    # the run names the class it was evaluated by (its final line said "ESTIMATE: static evaluator")
    summary = run(whole)
    assert summary["provenance"]["evaluator"] == f"{__name__}.ConstantEvaluator" and summary["evaluations"] == 3
    ev, estimate = make_evaluator_from(cfg, RMSNorm())
    assert isinstance(ev, ConstantEvaluator) and estimate and ev.value == 2.5 and ev.gpu.name == "h100"
    with pytest.raises(ConfigError) as ei:
        make_evaluator_from(bad, RMSNorm())
    assert not [r for r in caplog.records if r.name == "hydra.utils"]  # hydra's own ERROR line is not written
    assert str(ei.value) == ("evaluator._target_: cannot import 'nowhere.Eval': no module named 'nowhere': put the "
                             "folder that holds it on PYTHONPATH (the GPU workers need it too)")
