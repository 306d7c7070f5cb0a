"""An evolution-strategy emitter over the template's knob space (CMA-ME style).

CMA-ME (M. C. Fontaine, J. Togelius, S. Nikolaidis, A. K. Hoover, "Covariance Matrix Adaptation for the Rapid
Illumination of Behavior Space", GECCO 2020; pyribs' ``EvolutionStrategyEmitter``) drives MAP-Elites with CMA-ES
instances that sample many coordinates at once and adapt their step sizes and correlations from what the
archive accepted. Here the coordinates are the template knobs: knob ``k`` with value ladder
``workload.knob_space[k]`` is the real coordinate ``x_k`` in ``[0, len - 1]`` (the rung index); a sample is
decoded by rounding each coordinate to the nearest rung. CMA-ES is the ``cma`` package (N. Hansen's reference
implementation), one instance per task in a multi-task run (``ctx.task``), started at the parent's knobs (or the
workload's defaults) with step size ``sigma0`` rungs.

Ranking. CMA-ES minimises ``f = -objective``; a child that fails (compile, gate) or a decoded set the template
rejects gets ``f = penalty`` (worse than any speedup). Results come back through ``reflect`` (the engine calls it
after each evaluation of this operator's children); a generation is told to CMA-ES once each of its ``popsize``
samples has a value. Decoded sets already evaluated take their remembered value without a new evaluation;
samples whose value never arrives (the engine's hash cache dropped them as duplicates of another operator's
child) are told with the worst value of their generation once ``popsize`` further proposals have gone by; while
a generation waits, extra samples of the current distribution are proposed (and remembered, not told).

State (``state_dict``): each CMA-ES instance pickled (base64) plus its pending generation and the memo of values,
so a resumed run continues the same search. Each instance samples from its own NumPy Generator (``cma``'s
``randn`` option, seeded from the engine's Generator), pickled with it, so NumPy's global state is never used.
"""

from __future__ import annotations

import base64
import pickle
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.template import (
    current_knobs,
    is_template_instance,
    knob_space_of,
    knobs_valid,
    late_knobs_of,
)
from population.edits import EditScript, SetKnobs
from population.kernel import Kernel

Key = tuple[tuple[str, int], ...]


def encode(knobs: Mapping[str, int], space: Mapping[str, tuple[int, ...]]) -> np.ndarray:
    """Rung indices of ``knobs`` in the sorted knob order of ``space`` (a value off the ladder: its nearest rung)."""
    out = []
    for k in sorted(space):
        vals = space[k]
        v = knobs.get(k, vals[0])
        out.append(float(vals.index(v)) if v in vals else float(np.argmin([abs(x - v) for x in vals])))
    return np.asarray(out)


def decode(x: np.ndarray, space: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """The knob set of coordinates ``x``: each rounded to the nearest rung and clipped to its ladder."""
    out = {}
    for xi, k in zip(x, sorted(space)):
        vals = space[k]
        out[k] = int(vals[int(np.clip(np.rint(xi), 0, len(vals) - 1))])
    return out


def _import_cma() -> None:
    try:
        import cma  # noqa: F401
    except ImportError:  # reported when the operator first proposes
        pass


class _Randn:
    """``randn(lam, N)`` for ``cma`` from a private NumPy Generator (picklable with its state)."""

    def __init__(self, seed: int) -> None:
        self.gen = np.random.default_rng(seed)

    def __call__(self, *shape: int) -> np.ndarray:
        return self.gen.standard_normal(shape)


@dataclass
class _Generation:
    xs: list[list[float]]
    keys: list[Key | None]
    values: list[float | None]
    next: int = 0
    waited: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"xs": self.xs, "keys": [None if k is None else [list(p) for p in k] for k in self.keys],
                "values": self.values, "next": self.next, "waited": self.waited}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> _Generation:
        keys = [None if k is None else tuple((str(a), int(b)) for a, b in k) for k in d["keys"]]
        return cls([list(map(float, x)) for x in d["xs"]], keys, list(d["values"]), int(d["next"]), int(d["waited"]))


@dataclass
class KnobESOperator:
    """CMA-ES over the knob space (module docstring).

    workload: the Workload with a template (``ctx.workload`` wins); popsize: samples per generation (lambda);
    sigma0: initial step size in rungs; penalty: ``f`` of a failed child or rejected set; tries: samples drawn
    per proposal before NoProposal; weight: sampling weight.
    """

    workload: object = None
    name: str = "cma"
    weight: float = 1.0
    popsize: int = 8
    sigma0: float = 1.5
    penalty: float = 1.0
    tries: int = 16
    _es: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _gen: dict[str, _Generation] = field(default_factory=dict, init=False, repr=False)
    _memo: dict[str, dict[Key, float]] = field(default_factory=dict, init=False, repr=False)
    generations: dict[str, int] = field(default_factory=dict, init=False)
    _blobs: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # pickled ES, kept until it changes

    def __post_init__(self) -> None:
        # ``import cma`` pulls in scipy.stats (seconds): start it now, in the background, so the first proposal
        # does not stall the engine's thread (the GPU workers are still starting when operators are built).
        threading.Thread(target=_import_cma, name="import-cma", daemon=True).start()

    # --------------------------------------------------------------------------------------------- sampling
    def _new_es(self, x0: np.ndarray, space: Mapping[str, tuple[int, ...]], seed: int) -> Any:
        import cma

        upper = [float(len(space[k]) - 1) for k in sorted(space)]
        opts = {"popsize": self.popsize, "bounds": [[0.0] * len(upper), upper], "randn": _Randn(seed), "verbose": -9,
                "CMA_stds": [max(u, 1.0) / 4.0 for u in upper]}
        return cma.CMAEvolutionStrategy(list(x0), self.sigma0 / 2.0, opts)

    def _sample(self, slot: str, n: int) -> list[list[float]]:
        es = self._es[slot]
        xs = es.ask(n) if n != es.popsize else es.ask()
        self._blobs.pop(slot, None)
        return [list(map(float, x)) for x in xs]

    def _tell(self, slot: str) -> None:
        gen = self._gen.pop(slot)
        known = [v for v in gen.values if v is not None]
        worst = max(known) if known else self.penalty
        values = [worst if v is None else float(v) for v in gen.values]
        self._es[slot].tell([np.asarray(x) for x in gen.xs], values)
        self._blobs.pop(slot, None)
        self.generations[slot] = self.generations.get(slot, 0) + 1

    def _fill(self, slot: str) -> None:
        gen, memo = self._gen[slot], self._memo.setdefault(slot, {})
        for i, k in enumerate(gen.keys):
            if gen.values[i] is None and k is not None and k in memo:
                gen.values[i] = memo[k]

    # -------------------------------------------------------------------------------------------- operator
    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        """A KNOBS script for the next sample of this task's CMA-ES not yet evaluated. NoProposal when the
        workload has no knobs or ``tries`` samples all decoded to remembered or rejected sets."""
        workload = ctx.workload if ctx.workload is not None else self.workload
        space = knob_space_of(workload)
        slot = str(getattr(ctx.task, "index", "all"))
        memo = self._memo.setdefault(slot, {})
        if slot not in self._es:
            late = late_knobs_of(workload)
            start = current_knobs(parent, space, late) if is_template_instance(parent, space, late) else dict(
                getattr(workload, "default_knobs", {}))
            self._es[slot] = self._new_es(encode(start, space), space, int(rng.integers(1, 2**31 - 1)))
        for _ in range(self.tries):
            gen = self._gen.get(slot)
            if gen is not None:
                self._fill(slot)
                if all(v is not None for v in gen.values) or gen.waited >= self.popsize:
                    self._tell(slot)
                    gen = None
            if gen is None:
                xs = self._sample(slot, self.popsize)
                gen = self._gen[slot] = _Generation(xs, [None] * len(xs), [None] * len(xs))
            if gen.next < len(gen.xs):
                i = gen.next
                gen.next += 1
                x = gen.xs[i]
            else:  # the generation waits for results: explore with an extra sample, remembered but not told
                gen.waited += 1
                i, x = -1, self._sample(slot, 1)[0]
            knobs = decode(np.asarray(x), space)
            key: Key = tuple(sorted(knobs.items()))
            if i >= 0:
                gen.keys[i] = key
            if key in memo:
                if i >= 0:
                    gen.values[i] = memo[key]
                continue
            if not knobs_valid(workload, knobs):
                memo[key] = self.penalty
                if i >= 0:
                    gen.values[i] = self.penalty
                continue
            return EditScript((SetKnobs(key),))
        raise NoProposal(f"cma: {self.tries} samples decoded to knob sets already evaluated or rejected")

    def reflect(self, kernel: Kernel, result: Any, ctx: OperatorContext) -> str | None:
        """Record the child's value (``-objective``, or ``penalty`` when it failed) for its knob set; returns no
        lesson line."""
        workload = ctx.workload if ctx.workload is not None else self.workload
        space = knob_space_of(workload)
        late = late_knobs_of(workload)
        if not is_template_instance(kernel, space, late):
            return None
        knobs = current_knobs(kernel, space, late)
        key: Key = tuple(sorted((k, int(knobs[k])) for k in space))
        ok = getattr(result, "objective", None) is not None and str(getattr(result, "status", "")) == "ok"
        value = -float(result.objective) if ok else self.penalty
        task = (getattr(result, "features", {}) or {}).get("task")
        slots = [str(int(task))] if task is not None else list(self._memo) or ["all"]
        for slot in slots:
            self._memo.setdefault(slot, {})[key] = value
            if slot in self._gen:
                self._fill(slot)
        return None

    # ------------------------------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: pickled CMA-ES instances (base64), pending generations, memo, generation counts."""
        for s, es in self._es.items():  # the engine checkpoints after every tell: pickle only what changed
            if s not in self._blobs:
                self._blobs[s] = base64.b64encode(pickle.dumps(es)).decode()
        return {"es": dict(self._blobs),
                "gen": {s: g.to_json() for s, g in self._gen.items()},
                "memo": {s: [[[list(p) for p in k], v] for k, v in m.items()] for s, m in self._memo.items()},
                "generations": dict(self.generations)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self._es = {s: pickle.loads(base64.b64decode(b)) for s, b in state.get("es", {}).items()}
        self._blobs = dict(state.get("es", {}))
        self._gen = {s: _Generation.from_json(g) for s, g in state.get("gen", {}).items()}
        self._memo = {s: {tuple((str(a), int(b)) for a, b in k): float(v) for k, v in m}
                      for s, m in state.get("memo", {}).items()}
        self.generations = {s: int(n) for s, n in state.get("generations", {}).items()}
