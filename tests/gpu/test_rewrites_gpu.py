"""On a GPU: the PTX rewrites async_copy and cluster_split applied to the RMSNorm seeds pass the gate (GPUPool with
the settings of ``experiment=rmsnorm_h200``), and each prints its objective next to its parent's.

Run: ``python -m pytest -m gpu tests/gpu/test_rewrites_gpu.py -s`` (or ``bash scripts/gpu_tests.sh tests``)."""

from __future__ import annotations

import pytest

import evolve.operators.registry  # noqa: F401  (registers the REWRITE kinds)
from evaluators.types import Status
from evolve.operators.async_copy import candidate_lines
from evolve.operators.cluster_split import barrier_lines
from population.edit_script import parse_edit_script
from population.edits import apply_script

pytestmark = pytest.mark.gpu

# The ``pool`` fixture (tests/gpu/conftest.py): experiment=rmsnorm_h200 settings, torch baseline only.
POOL_SEED = 20261202


def _child(parent, text: str):
    return apply_script(parent, parse_edit_script(text), operator="rewrite")


@pytest.mark.parametrize("which, rewrite", [
    ("template", "async_copy {first}"),
    ("template", "async_copy {first} count=4"),
    ("naive", "cluster_split {bar} cluster=2"),
    ("naive", "cluster_split {bar} cluster=4"),
])
def test_rewritten_seed_passes_the_gate(pool, workload, which, rewrite):
    naive, template = workload.seeds()
    parent = template if which == "template" else naive
    text = "REWRITE " + rewrite.format(first=candidate_lines(template)[0], bar=barrier_lines(naive)[0]) + "\n"
    child = _child(parent, text)
    base = pool.evaluate(parent)
    r = pool.evaluate(child)
    print(f"\n{which} {text.strip()}: parent {base.status.value} {base.objective}, child {r.status.value} "
          f"{r.objective} ({r.objective / base.objective if r.objective and base.objective else float('nan'):.3f}x)")
    assert base.status == Status.OK, base.reason
    assert r.status == Status.OK, r.reason
