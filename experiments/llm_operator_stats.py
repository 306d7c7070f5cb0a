"""How well the LLM operator proposes: scripts/s, parse, apply, compile, gate-pass and improvement rates.

Method. For each model (the embedded SmolLM2-135M-Instruct by default; ``--hf MODEL`` adds a local
transformers model, ``--openai URL MODEL`` an OpenAI-compatible server), ``--n`` proposals (default 100) are
asked of the optimizer role, alternating between the RMSNorm seeds (naive, then template at default knobs).
Every proposal is one generation (``attempts=1``, no inline repair), so the rates are per generation:
- parse: the text is an edit script (``population.edits.parse_edit_script``, after cutting an unfinished
  last edit); apply: ``apply_script`` accepts it on the parent; compile: ptxas verify-only accepts the child;
- gate: the evaluator returns status ok for the child (the static evaluator on a machine without a GPU: ptxas
  resources, occupancy and a roofline estimate, so "gate" there means compiles, launches and fits; on the
  H200 the GPU pool runs the real correctness gate);
- improved: the child's objective exceeds its parent's (static estimates without a GPU).
scripts/s is generations per wall second of generation (prompt + decoding), excluding evaluation.
Constrained decoding (xgrammar) is on for local models and sent as ``guided_grammar`` to servers.

Usage::

    python experiments/llm_operator_stats.py [--n 100] [--threads 1] [--evaluator auto|static|gpu] [--kinds K,..]
        [--hf Qwen/Qwen2.5-Coder-1.5B-Instruct] [--openai http://127.0.0.1:8000/v1 MODEL] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from evaluators.factory import make_evaluator
from evolve.llm.base import LLMBackend
from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.llm import LLMOperator
from population.edits import apply_script
from workloads.registry import get_workload


def measure(name: str, backend: LLMBackend, workload: Any, evaluator: Any, n: int, seed: int,
            max_new_tokens: int, kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Run ``n`` one-generation proposals with ``backend`` and return the counts and rates.
    ``kinds``: edit keywords the grammar allows (None: all)."""
    roles: list[dict[str, Any]] = [{"name": "optimizer", "kind": "optimizer", "max_new_tokens": max_new_tokens}]
    if kinds:
        roles[0]["kinds"] = kinds
    op = LLMOperator(workload, backends={"default": backend}, roles=roles, attempts=1, inline_repairs=0)
    seeds = workload.seeds()
    parent_results = [evaluator.evaluate(k) for k in seeds]
    rng = np.random.default_rng(seed)
    gate = improved = 0
    stages: dict[str, int] = {}
    kind_counts: dict[str, int] = {}
    for i in range(n):
        j = i % len(seeds)
        parent, pres = seeds[j], parent_results[j]
        ctx = OperatorContext(workload=workload, parent_result=pres)
        try:
            script = op.propose(parent, ctx, rng)
        except NoProposal as e:
            stage = str(e).split("last ", 1)[-1].split(":", 1)[0]
            stages[stage] = stages.get(stage, 0) + 1
            continue
        for k in script.kinds:
            kind_counts[k] = kind_counts.get(k, 0) + 1
        child = apply_script(parent, script, operator=op.name, instantiate=workload.instantiate)
        res = evaluator.evaluate(child)
        if res.ok:
            gate += 1
            if pres.objective is not None and res.objective is not None and res.objective > pres.objective:
                improved += 1
        op.reflect(child, res, ctx)
        print(f"  {name} {i + 1}/{n}: {' '.join(script.kinds)} -> {res.status}"
              + (f" {res.objective:.3f} (parent {pres.objective:.3f})" if res.ok and pres.objective else ""),
              flush=True)
    s = op.stats
    gens = max(1, s.generations)
    return {"model": name, "n": n, "generations": s.generations, "seconds": s.seconds,
            "scripts_per_s": s.generations / s.seconds if s.seconds else float("nan"),
            "tokens_per_generation": s.tokens / gens, "parse": s.parsed / gens, "apply": s.applied / gens,
            "compile": s.compiled / gens, "gate": gate / gens, "improved": improved / gens,
            "failures": stages, "kinds": kind_counts, "estimate": bool(getattr(parent_results[0], "estimate", False))}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=100, help="proposals per model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads for local models")
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--evaluator", default="auto", choices=("auto", "static", "gpu"))
    p.add_argument("--kinds", default=None, help="comma-separated edit keywords to allow, e.g. "
                   "REPLACE,INSERT,DELETE,MODIFIER (default: all)")
    p.add_argument("--no-embedded", action="store_true", help="skip SmolLM2")
    p.add_argument("--hf", action="append", default=[], help="a local transformers model (hub id or dir)")
    p.add_argument("--openai", nargs=2, action="append", default=[], metavar=("URL", "MODEL"))
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    if args.n < 1:
        p.error("--n must be >= 1")

    workload = get_workload("rmsnorm")
    evaluator = make_evaluator(args.evaluator, workload)
    models: list[tuple[str, Any]] = []
    from evolve.llm.transformers_backend import TransformersBackend

    if not args.no_embedded:
        models.append(("smollm2", lambda: TransformersBackend("smollm2", threads=args.threads)))
    for m in args.hf:
        models.append((m, lambda m=m: TransformersBackend(m, threads=args.threads)))
    for url, m in args.openai:
        from evolve.llm.openai_backend import OpenAIBackend

        models.append((f"{m}@{url}", lambda url=url, m=m: OpenAIBackend(url, m)))
    rows = []
    try:
        for name, make in models:
            t = time.perf_counter()
            backend = make()
            print(f"{name}: loaded in {time.perf_counter() - t:.1f} s", flush=True)
            kinds = tuple(args.kinds.split(",")) if args.kinds else None
            rows.append(measure(name, backend, workload, evaluator, args.n, args.seed, args.max_new_tokens, kinds))
    finally:
        evaluator.close()
    est = " (static estimates: no GPU)" if rows and rows[0]["estimate"] else ""
    print(f"\nLLM operator on RMSNorm seeds, {args.n} proposals per model, one generation each{est}")
    head = f"{'model':<28} {'scripts/s':>9} {'tok/gen':>7} {'parse':>6} {'apply':>6} {'compile':>7} " \
           f"{'gate':>6} {'improved':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model'][:28]:<28} {r['scripts_per_s']:>9.3f} {r['tokens_per_generation']:>7.0f} "
              f"{r['parse']:>6.2f} {r['apply']:>6.2f} {r['compile']:>7.2f} {r['gate']:>6.2f} {r['improved']:>8.2f}")
        if r["failures"]:
            print(f"{'':<28} failures by stage: {r['failures']}")
        if r["kinds"]:
            print(f"{'':<28} edit kinds proposed: {r['kinds']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
