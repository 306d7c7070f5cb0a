"""The recorded H200 kernels against the static rules added since they were measured, in one pass.

A rule added at gate rules version N must not reject what an honest search produced before it: each kernel of
``recorded_h200`` measured under an older version (``recorded_before``) is parsed once, its provenance analysed
once, and every rule form newer than its own version applied to it. Three findings tables come out; one test per
rules version asserts on its own. (Each scan parsed and analysed the same kernels anew: three passes of ~2000
kernels took 5.5-8.9 of the suite's minutes on 2 cores, 2026-12-02.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from evaluators import race_lint as rl
from evaluators.input_stores import provenance
from population.cfg import basic_blocks
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module
from tests.gpu.rmsnorm_kernels import recorded_before

V8, V10, V11 = 8, 10, 11  # the gate rules versions whose new static forms are scanned


@dataclass
class Scan:
    """What the pass saw: kernels per version threshold, and every finding as (identity, entry, what)."""

    kernels: dict[int, int] = field(default_factory=lambda: {V8: 0, V10: 0, V11: 0})
    entries: dict[int, int] = field(default_factory=lambda: {V8: 0, V10: 0, V11: 0})
    findings: dict[int, list] = field(default_factory=lambda: {V8: [], V10: [], V11: []})
    atom_kernels: list = field(default_factory=list)
    shared_entries: int = 0
    cluster_kernels: int = 0


@pytest.fixture(scope="module")
def scan() -> Scan:
    s = Scan()
    for ident, (v, m) in recorded_before(V11).items():
        ptx = m.row.ptx
        launch = LaunchConfig.from_json(m.row.launch)
        module = parse_module(ptx)
        cut: dict[int, list] = {}

        def blocks_of(f, cut=cut):
            return cut.setdefault(id(f), basic_blocks(f))

        for thr in (V8, V10, V11):
            s.kernels[thr] += v < thr
        if v < V8 and "atom." in ptx:
            s.atom_kernels.append(ident)
        s.cluster_kernels += v < V10 and "mapa" in ptx
        for fn in module.functions:
            if fn.kind != "entry" or fn.body is None:
                continue
            k = Kernel(module, fn.name, launch)
            p = provenance(k)  # launch-independent: one analysis serves every version's forms
            if v < V8 and ".shared" in ptx:
                # version 8's forms as round 5 ran them: a 128-thread launch (they do not read the launch)
                k128 = Kernel(module, fn.name, LaunchConfig(block=(128, 1, 1)))
                s.shared_entries += 1
                s.findings[V8] += [(ident, fn.name, f) for f in rl._shared_spin_waits(k128, p, blocks_of)
                                   + rl._stale_shared_reads(k128, p, blocks_of) + rl._order_atomics(p)]
            if v < V10:
                s.entries[V10] += 1
                s.findings[V10] += [(ident, fn.name, f.kind)
                                    for f in rl.race_lint(k, p, False, False, False, False).findings]
            s.entries[V11] += 1
            s.findings[V11] += [(ident, fn.name, f) for f in rl._unvouched_loads(k, p)
                                + rl._global_exchanges(p, blocks_of) + rl._mbarrier_observations(p, blocks_of)
                                + rl._stale_local_reads(k, p, blocks_of)]
    return s


@pytest.mark.slow
def test_every_kernel_recorded_before_version_8_passes_its_new_forms(scan):
    """Round 5's forms (rule 6's shared form: a wait on a shared word; rule 3's stale shared read; rule 4's order
    form): of the 1464 kernels of the gate v1 and version 5 runs, the entries that use shared memory raise none,
    and no kernel uses ``atom`` at all."""
    assert scan.kernels[V8] >= 1400
    assert scan.atom_kernels == []
    assert scan.shared_entries >= 1400
    assert scan.findings[V8] == []


@pytest.mark.slow
def test_every_kernel_recorded_before_version_10_passes_its_race_lint(scan):
    """Version 10's whole race lint, each kernel with its recorded launch (285 of those runs' kernels are cluster
    kernels reading their peers' partial sums through mapa): none is rejected."""
    assert scan.kernels[V10] >= 1400 and scan.entries[V10] >= 1400
    assert scan.cluster_kernels >= 280
    assert scan.findings[V10] == []


@pytest.mark.slow
def test_every_kernel_recorded_before_version_11_passes_its_new_forms(scan):
    """Version 11's forms (rule 8; rule 4's mbarrier form; rule 5's address form and its ``.local`` form with
    guarded stores) over the 2034 kernels of the gate v1, version 5 and version 10 runs: none fires."""
    assert scan.kernels[V11] >= 2000 and scan.entries[V11] >= 2000
    assert scan.findings[V11] == []
