"""Does the gate judge honest kernels the same way every time? Seeds, TUNED_KNOBS sets and template variants,
each evaluated ``--repeats`` times (gate v2 with fresh inputs, then the benchmark's checked timed launches and
input fingerprints at ``--shapes``, no baselines).

Kernels: the workload's seeds, every ``TUNED_KNOBS`` set, and ``--variants`` template variants (the first
``--variants`` of the valid knob space shuffled with ``--seed``: by default the 32 that
experiments/gpu_throughput.py draws for its two batches of 16). All are honest, so every rejection is a false
rejection (or a real race the gate caught once): the table prints every distinct failure reason. Exit status 1
when any kernel was rejected at least once.

Usage (GPU machine): ``python experiments/gate_stability.py [--variants 32] [--repeats 6] [--shapes search|none]``;
writes $OUT/gate_stability.md when OUT is set.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluators.gpu.gate import GATE_VERSION
from evaluators.types import Status
from workloads.rmsnorm import TUNED_KNOBS, RMSNorm


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--shapes", default="search", choices=("search", "none"),
                    help="benchmark shapes after the gate (checked timed launches), or none (gate only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args()

    from gpu_throughput import candidates  # the same variants, in the same order

    from evaluators.gpu.pool import GPUPool

    wl = RMSNorm("bf16")
    named = [(f"seed {i}", k) for i, k in enumerate(wl.seeds())]
    named += [(f"TUNED_KNOBS[{n}]", wl.instantiate(kn)) for n, kn in sorted(TUNED_KNOBS.items())]
    named += [(f"variant {i}", k) for i, k in enumerate(candidates(wl, args.variants, args.seed))]
    shapes = "search" if args.shapes == "search" else []
    rows = []
    # every gate check at every evaluation (schedule "full"): a false rejection must show in any of them
    with GPUPool(wl, shapes=shapes, baselines="none", naive_baseline=False, baseline_names=(), timeout_s=120,
                 sanitize_elites=False, gate_schedule="full") as pool:
        for name, k in named:
            with ThreadPoolExecutor(2) as ex:
                results = list(ex.map(lambda kern: pool.evaluate(kern), [k] * args.repeats))
            passed = sum(r.status == Status.OK for r in results)
            reasons = collections.Counter(f"{r.status.value}: {r.reason[:300]}" for r in results
                                          if r.status != Status.OK)
            rows.append((f"{name} `{dict(k.launch.knobs)}`", passed, reasons))
            print(f"{passed}/{args.repeats} {name} {dict(k.launch.knobs)} {dict(reasons)}", flush=True)
        device = pool.info[0].get("device", "?")
        restarts = sum(s.restarts for s in pool._sups)
    flaky = [r for r in rows if 0 < r[1] < args.repeats]
    md = [f"# Gate stability (gate v{GATE_VERSION}): {len(rows)} honest kernels x {args.repeats} evaluations", "",
          f"{device}, {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; fresh inputs per run; benchmark "
          f"shapes: {args.shapes}; worker restarts: {restarts}.", "",
          f"Always passed: {sum(r[1] == args.repeats for r in rows)}; never passed: "
          f"{sum(r[1] == 0 for r in rows)}; sometimes: {len(flaky)}.", "",
          "| kernel | passed | failures |", "|---|---|---|"]
    for name, passed, reasons in rows:
        if passed < args.repeats:
            md.append(f"| {name} | {passed}/{args.repeats} | "
                      + "; ".join(f"{n}x {t}" for t, n in reasons.items()).replace("|", "/") + " |")
    text = "\n".join(md) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gate_stability.md").write_text(text)
    return 0 if all(r[1] == args.repeats for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
