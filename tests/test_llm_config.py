"""conf/llm and conf/mutator/{llm,mixed}: composition through Hydra's compose API, and the operators the registry
builds from them (no model is loaded: backends are built on first generation)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from evolve.config import register, validate
from evolve.llm.base import LLMError
from evolve.llm.factory import build_backend
from evolve.operators.llm import LLMOperator
from evolve.operators.registry import build_operators

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def cfg_of(*overrides: str):
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[*overrides, "run_dir=/tmp/ptxforge-run"])


@pytest.fixture(scope="module")
def workload():
    from workloads.registry import get_workload

    return get_workload("rmsnorm")


def test_mutator_llm_selects_the_embedded_model_and_builds_the_roles(workload):
    cfg = cfg_of("mutator=llm")
    validate(cfg)
    assert cfg.llm.backend == "transformers" and cfg.llm.model == "smollm2"
    assert cfg.llm.cache == "/tmp/ptxforge-run/llm_cache.sqlite"
    ops = build_operators(cfg.mutator.operators, workload)
    op = next(o for o in ops if o.name == "llm")
    assert isinstance(op, LLMOperator) and op.workload is workload
    assert set(op.roles) == {"optimizer", "optimizer_block", "repairer", "critic"}
    assert op.selectors["optimizer"].arms == ["optimizer", "optimizer_block"]
    assert "KNOBS" in op.roles["optimizer"].kinds and "KNOBS" not in op.roles["optimizer_block"].kinds
    assert op.roles["repairer"].kinds == ("REPLACE", "INSERT", "DELETE", "MODIFIER")
    assert op.roles["optimizer"].max_new_tokens == 160  # sampling defaults come from the llm group
    assert op.arch == "sm_90" and op.n_inspirations == cfg.engine.inspirations


def test_mixed_has_rules_template_and_llm_with_rates(workload):
    cfg = cfg_of("mutator=mixed", "llm=openai")
    validate(cfg)
    weights = {o["name"]: o["weight"] for o in cfg.mutator.operators}
    assert weights["llm"] == 0.5 and weights["template"] == 1.0 and weights["hints"] == 1.0
    assert cfg.llm.backend == "openai" and cfg.llm.guided == "guided_grammar"
    ops = build_operators(cfg.mutator.operators, workload)
    op = next(o for o in ops if o.name == "llm")
    assert op.critic_every == 4 and set(op.roles) == {"optimizer", "repairer", "critic"}
    assert "KNOBS" not in op.roles["optimizer"].kinds  # the template operator covers knobs in this mix


@pytest.mark.parametrize("name", ["smollm2", "hf", "openai"])
def test_every_llm_option_composes(name):
    cfg = cfg_of("mutator=llm", f"llm={name}")
    assert cfg.llm.backend in ("transformers", "openai")
    assert cfg.mutator.operators[0]["llm"]["backend"] == cfg.llm.backend


def test_backend_config_errors_name_the_key():
    with pytest.raises(LLMError, match=r"llm\.backend: 'vllm' is not one of"):
        build_backend({"backend": "vllm"})
    with pytest.raises(LLMError, match=r"unknown field\(s\) \['modle'\]"):
        build_backend({"backend": "transformers", "modle": "x"})
    with pytest.raises(LLMError, match="needs base_url and model"):
        build_backend({"backend": "openai"})
