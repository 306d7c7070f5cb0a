"""Does the gate judge a kernel the same way every time? Gate-only evaluations of template variants, repeated.

Each of ``--variants`` template variants (the first ``--variants`` of the valid knob space shuffled with
``--seed``: by default the 32 that experiments/gpu_throughput.py draws for its two batches of 16) is gated
``--repeats`` times through GPUPool (fresh inputs each time, no benchmark). A variant that passes sometimes and
fails sometimes is either racy (the gate caught it once) or the gate is wrong about it: the table prints every
distinct failure reason so the two can be told apart.

Usage (GPU machine): ``python experiments/gate_stability.py [--variants 32] [--repeats 5]``; writes
$OUT/gate_stability.md when OUT is set.
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

from evaluators.types import Status
from workloads.rmsnorm import RMSNorm


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args()

    from gpu_throughput import candidates  # the same variants, in the same order

    from evaluators.gpu.pool import GPUPool

    wl = RMSNorm("bf16")
    kernels = candidates(wl, args.variants, args.seed)
    rows = []
    with GPUPool(wl, shapes=[], baselines="none", naive_baseline=False, baseline_names=()) as pool:
        for k in kernels:
            with ThreadPoolExecutor(2) as ex:
                results = list(ex.map(lambda kern: pool.evaluate(kern, shapes=[]), [k] * args.repeats))
            passed = sum(r.status == Status.OK for r in results)
            reasons = collections.Counter(f"{r.status.value}: {r.reason[:300]}" for r in results
                                          if r.status != Status.OK)
            rows.append((dict(k.launch.knobs), passed, reasons))
            print(f"{passed}/{args.repeats} {dict(k.launch.knobs)} {dict(reasons)}", flush=True)
        device = pool.info[0].get("device", "?")
    flaky = [r for r in rows if 0 < r[1] < args.repeats]
    md = [f"# Gate stability: {len(rows)} template variants x {args.repeats} gate runs", "",
          f"{device}, {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; fresh inputs per run.", "",
          f"Always passed: {sum(r[1] == args.repeats for r in rows)}; never passed: "
          f"{sum(r[1] == 0 for r in rows)}; sometimes: {len(flaky)}.", "",
          "| knobs | passed | failures |", "|---|---|---|"]
    for knobs, passed, reasons in rows:
        if passed < args.repeats:
            md.append(f"| `{knobs}` | {passed}/{args.repeats} | "
                      + "; ".join(f"{n}x {t}" for t, n in reasons.items()).replace("|", "/") + " |")
    text = "\n".join(md) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gate_stability.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
