"""Parse + print throughput of the PTX front end, in instructions per second on one core.

Method: for each file (default: every corpus file; the largest one is the headline), time
``parse_module`` then ``print_module`` (faithful) together, ``repeats`` times after one warm-up, and report
the median and best run; instructions are the ``ast.Instruction`` nodes in the module. The headline uses the
best run (timeit's convention: the minimum is the run least disturbed by other processes) and prints the
median and the load average beside it. Timing uses
``time.process_time`` (CPU time of this process), so other processes on a shared machine inflate it less
than wall time would. Also times the canonical print and the token-level reference grammar (no RUN fast
path) for comparison. Target: >= 50,000 instructions/s for parse+print on the largest corpus file, and on a
module of about ``--concat-mb`` MB (default 5) made by concatenating the corpus files' kernels (each file's
items after its header, repeated until the size is reached; duplicate names are fine for the parser).

Usage: ``python experiments/parse_throughput.py [--repeats N] [--concat-mb MB] [FILE.ptx ...]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from population import ast  # noqa: E402
from population.cfg import flat_instructions  # noqa: E402
from population.parser import parse_module, reference_parse_module  # noqa: E402
from population.printer import print_module  # noqa: E402


def count_instructions(module: ast.Module) -> int:
    """Instruction statements in all function bodies, nested scopes included."""
    return sum(len(flat_instructions(f)) for f in module.functions)


def concatenated_module(files: list[Path], megabytes: float) -> str:
    """One module of at least ``megabytes`` MB: a header, then the items of ``files`` (their text after the
    ``.address_size`` line) appended in turn until the size is reached."""
    header = ".version 9.0\n.target sm_90a\n.address_size 64\n"
    bodies = []
    for path in files:
        text = path.read_text()
        cut = text.find(".address_size")
        bodies.append(text[text.index("\n", cut) + 1:] if cut >= 0 else text)
    parts = [header]
    size = len(header)
    while size < megabytes * 1e6:
        for b in bodies:
            parts.append(b)
            size += len(b)
    return "".join(parts)


def timed(fn, repeats: int) -> list[float]:
    """CPU seconds of ``repeats`` calls of fn after one warm-up call."""
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--concat-mb", type=float, default=5.0, help="size of the concatenated module (0: skip)")
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    files = args.files or sorted((ROOT / "tests" / "data").glob("*.ptx"), key=lambda p: p.stat().st_size)
    if not files:
        print("no PTX files found", file=sys.stderr)
        return 2
    header = f"{'file':<24} {'lines':>6} {'instr':>6} {'parse+print':>12} {'instr/s':>9} {'best/s':>9} " \
             f"{'canonical':>10} {'reference':>10} {'ref instr/s':>11}"
    print(header)
    print("-" * len(header))
    largest = max(files, key=lambda p: p.stat().st_size)
    headline = headline_median = 0.0
    for path in files:
        text = path.read_text()
        module = parse_module(text, str(path))
        n = count_instructions(module)
        both = timed(lambda text=text: print_module(parse_module(text)), args.repeats)
        canon = timed(lambda module=module: print_module(module, canonical=True), args.repeats)
        ref = timed(lambda text=text: reference_parse_module(text), max(3, args.repeats // 4))
        med = statistics.median(both)
        rate = n / med
        if path == largest:
            headline = n / min(both)
            headline_median = rate
        print(f"{path.name:<24} {text.count(chr(10)):>6} {n:>6} {med * 1e3:>9.2f} ms {rate:>9,.0f} "
              f"{n / min(both):>9,.0f} {statistics.median(canon) * 1e3:>7.2f} ms "
              f"{statistics.median(ref) * 1e3:>7.2f} ms {n / statistics.median(ref):>11,.0f}")
    concat_rate = None
    if args.concat_mb > 0:
        text = concatenated_module(files, args.concat_mb)
        module = parse_module(text)
        n = count_instructions(module)
        both = timed(lambda: print_module(parse_module(text)), max(3, args.repeats // 5))
        concat_rate = n / min(both)
        print(f"{'concatenated':<24} {text.count(chr(10)):>6} {n:>6} {statistics.median(both) * 1e3:>9.2f} ms "
              f"{n / statistics.median(both):>9,.0f} {concat_rate:>9,.0f}   ({len(text) / 1e6:.1f} MB)")
    print()
    verdict = "meets" if headline >= 50_000 else "misses"
    print(f"largest file {largest.name}: {headline:,.0f} instructions/s parse+print (best of {args.repeats}; "
          f"median {headline_median:,.0f}), {verdict} the 50,000/s target")
    print(f"load average while measuring: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs (the best run is the one least disturbed by other processes)")
    if concat_rate is not None:
        verdict = "meets" if concat_rate >= 50_000 else "misses"
        print(f"concatenated {args.concat_mb:g} MB module: {concat_rate:,.0f} instructions/s parse+print, {verdict} "
              f"the 50,000/s target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
