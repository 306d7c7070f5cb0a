"""Template and crossover operators (KNOBS / LAUNCH / DIRECTIVE genes) and the operator registry."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.crossover import CrossoverOperator, crossover
from evolve.operators.hints import HintsOperator
from evolve.operators.registry import OPERATORS, build_operators
from evolve.operators.template import TemplateOperator, step_knobs
from population.edits import SetDirective, SetKnobs, SetLaunch, apply_script
from population.kernel import Kernel, LaunchConfig


@pytest.fixture(scope="module")
def workload():
    from workloads.registry import get_workload

    return get_workload("rmsnorm")


@pytest.fixture(scope="module")
def seeds(workload):
    return workload.seeds()


def test_template_moves_one_knob_one_step(seeds, workload):
    template = seeds[1]
    cur = workload.check_knobs(dict(template.launch.knobs))  # late knobs left out at their defaults
    op = TemplateOperator(workload=workload)
    for seed in range(30):
        script = op.propose(template, OperatorContext(workload), np.random.default_rng(seed))
        (edit,) = script.edits
        assert isinstance(edit, SetKnobs)
        new = dict(edit.knobs)
        changed = [k for k in new if new[k] != cur[k]]
        assert len(changed) == 1
        k = changed[0]
        ladder = workload.knob_space[k]
        assert abs(ladder.index(new[k]) - ladder.index(cur[k])) == 1
        workload.check_knobs(new)  # valid by construction


def test_template_from_naive_samples_and_applies(seeds, workload):
    naive = seeds[0]
    op = TemplateOperator(workload=workload)
    script = op.propose(naive, OperatorContext(workload), np.random.default_rng(3))
    knobs = dict(script.edits[0].knobs)
    assert set(knobs) == set(workload.knob_space)
    child = apply_script(naive, script, operator="template", instantiate=workload.instantiate)
    full = workload.check_knobs(knobs)
    assert dict(child.launch.knobs) == {k: v for k, v in full.items() if workload.late_knobs.get(k) != v}
    assert child.parents == (naive.identity,)


def test_template_without_knobs_has_no_proposal(seeds):
    @dataclass
    class NoKnobs:
        name: str = "plain"
        knob_space: dict | None = None

    with pytest.raises(NoProposal):
        TemplateOperator().propose(seeds[0], OperatorContext(NoKnobs()), np.random.default_rng(0))


def test_step_knobs_stays_on_ladder():
    space = {"a": (1, 2, 4), "b": (0, 1)}
    rng = np.random.default_rng(0)
    for _ in range(50):
        out = step_knobs({"a": 4, "b": 0}, space, rng, changes=2)
        assert out["a"] in (2, 4) and out["b"] in (0, 1) and out != {"a": 4, "b": 0}


def test_crossover_mixes_template_knobs(seeds, workload):
    a = seeds[1]
    ka = workload.check_knobs(dict(a.launch.knobs))
    kb = {**dict(a.launch.knobs), "threads": 512, "vec": 4, "cache_hint": 1}
    b = Kernel(module=a.module, entry=a.entry, launch=LaunchConfig(block=(512, 1, 1), knobs=tuple(kb.items())))
    mixes = set()
    for seed in range(40):
        script = crossover(a, b, np.random.default_rng(seed), knob_space=workload.knob_space,
                           late_knobs=workload.late_knobs)
        (edit,) = script.edits
        assert isinstance(edit, SetKnobs)
        new = dict(edit.knobs)
        assert set(new) == set(workload.knob_space) and new != ka
        for k, v in new.items():
            assert v in (ka[k], kb.get(k, ka[k]))
        mixes.add(tuple(sorted(new.items())))
    assert len(mixes) >= 4
    with pytest.raises(NoProposal):
        crossover(a, a, np.random.default_rng(0), knob_space=workload.knob_space, late_knobs=workload.late_knobs)


def test_crossover_launch_and_directives(seeds, workload):
    naive = seeds[0]
    b_script = [SetLaunch(block=(512, 1, 1)), SetDirective(naive.entry, "maxnreg", (64,))]
    from population.edits import EditScript

    b = apply_script(naive, EditScript(tuple(b_script)), operator="launch")
    kinds = set()
    for seed in range(30):
        script = CrossoverOperator(workload=workload).propose(
            naive, OperatorContext(workload, inspirations=[(b, None)]), np.random.default_rng(seed))
        child = apply_script(naive, script, operator="crossover")
        fn = child.module.function(child.entry)
        got_reg = any(d.name == "maxnreg" for d in fn.directives)
        got_block = child.launch.block == (512, 1, 1)
        assert got_reg or got_block
        kinds.add((got_reg, got_block))
    assert len(kinds) == 3
    with pytest.raises(NoProposal):
        CrossoverOperator().propose(naive, OperatorContext(workload), np.random.default_rng(0))


def test_registry_builds_configured_operators(workload):
    ops = build_operators([{"name": "hints", "weight": 2.0, "allow_nc": False},
                           {"name": "template", "weight": 0.5, "changes": 2},
                           {"name": "unroll", "factors": [2]}], workload)
    assert [o.name for o in ops] == ["hints", "template", "unroll"]
    assert isinstance(ops[0], HintsOperator) and ops[0].weight == 2.0 and ops[0].allow_nc is False
    assert ops[1].workload is workload and ops[1].changes == 2
    assert ops[2].factors == (2,)


def test_registry_errors_name_the_problem(workload):
    with pytest.raises(ValueError, match="allowed: async_copy, cluster_split, cma, crossover, hints, hoist, jump, launch, llm, mathops, prefetch"):
        build_operators([{"name": "bogus"}], workload)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['colour'\]"):
        build_operators([{"name": "hints", "colour": 1}], workload)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        build_operators([{"name": "hints", "weight": -1}], workload)
    with pytest.raises(ValueError, match="configured twice"):
        build_operators([{"name": "hints"}, {"name": "hints"}], workload)
    with pytest.raises(ValueError, match="no operators configured"):
        build_operators([], workload)
    with pytest.raises(ValueError, match="policies"):
        build_operators([{"name": "schedule", "policies": ["fastest"]}], workload)
    assert OPERATORS["llm"] == "evolve.operators.llm:LLMOperator"


def test_registry_accepts_omegaconf_specs(workload):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"ops": [{"name": "prefetch", "weight": 1.5, "ahead": [2, 4]}]})
    (op,) = build_operators(cfg.ops, workload)
    assert op.ahead == (2, 4) and op.weight == 1.5


def test_registry_imports_llm_lazily():
    import subprocess
    import sys

    code = ("import sys; from evolve.operators.registry import build_operators, operator_class; "
            "assert 'evolve.operators.llm' not in sys.modules; "
            "assert 'transformers' not in sys.modules; print('lazy')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "lazy" in out.stdout, out.stderr


def test_crossover_carries_body_hunks_between_lineages(seeds, workload):
    """Two lineages from the naive seed (one changed hints/math, the other unrolled/scheduled): crossing them
    gives children that take some of b's hunks, apply and compile."""
    from evaluators.toolchain import compile_ptx
    from evolve.operators.crossover import line_hunks
    from evolve.operators.mathops import MathOpsOperator
    from evolve.operators.unroll import UnrollOperator

    naive = seeds[0]
    ctx = OperatorContext(workload)
    a = apply_script(naive, HintsOperator().propose(naive, ctx, np.random.default_rng(1)), operator="hints")
    a = apply_script(a, MathOpsOperator().propose(a, ctx, np.random.default_rng(2)), operator="mathops")
    b = apply_script(naive, UnrollOperator(factors=(2,)).propose(naive, ctx, np.random.default_rng(0)),
                     operator="unroll")
    groups = line_hunks(a, b)
    # a's two edits (b has the original lines) and b's unrolled loop: copy + exit test and exit label together
    assert len(groups) == 3
    unrolled = next(g for g in groups if len(g) == 2)
    assert "_x;" in unrolled[0].to_text() and unrolled[1].to_text().splitlines()[1].endswith("_x:")
    seen = set()
    for seed in range(12):
        script = crossover(a, b, np.random.default_rng(seed), knob_space=workload.knob_space)
        child = apply_script(a, script, operator="crossover")
        compile_ptx(child)
        seen.add(child.identity)
    assert len(seen) >= 3
    # identical bodies and launch: nothing to cross
    with pytest.raises(NoProposal):
        crossover(b, b, np.random.default_rng(0), knob_space=workload.knob_space)
