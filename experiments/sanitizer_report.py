"""Print compute-sanitizer's own report for one RMSNorm seed (or PTX file) under the gate's replay, per layout.

The pool's verdict keeps only the error count; this prints the tool's first lines (the faulting access, its
address, the allocation it lies near), one process per layout, so a verdict on an honest kernel can be traced to
the layout that produced it (``exact``: exact-size buffers at the fixed shapes; ``edge``: the benchmark's
layout at the fixed shapes and the smallest timed shape, once per drawn scalar setting). GPU machine only.

    python3 experiments/sanitizer_report.py [--seed 1 | --ptx FILE] [--tool memcheck] [--layout exact edge]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from evaluators.gpu.sanitize_replay import build_spec
    from evaluators.gpu.sanitizer import SANITIZER_SHAPES, find_sanitizer, replay_plan, tool_command
    from evaluators.toolchain import compile_ptx
    from population.kernel import Kernel
    from population.parser import parse_module
    from workloads.rmsnorm import RMSNorm

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seed", type=int, default=1, help="index into RMSNorm('bf16').seeds() (default 1: template)")
    ap.add_argument("--ptx", help="a PTX file instead of a seed (its launch: the seed's)")
    ap.add_argument("--tool", default="memcheck")
    ap.add_argument("--layout", nargs="+", default=["exact", "edge"], choices=["exact", "edge", "timed"])
    ap.add_argument("--lines", type=int, default=60, help="report lines printed per layout")
    a = ap.parse_args(argv)
    wl = RMSNorm("bf16")
    k = wl.seeds()[a.seed]
    if a.ptx:
        k = Kernel(module=parse_module(Path(a.ptx).read_text(), a.ptx), launch=k.launch, entry=k.entry)
    exe = find_sanitizer()
    if exe is None:
        print("compute-sanitizer not found")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(compile_ptx(k, "sm_90").cubin)
        timed = replay_plan(wl.search_shapes)["edge_shapes"][len(SANITIZER_SHAPES):]
        plans = {"exact": (SANITIZER_SHAPES, []), "edge": ([SANITIZER_SHAPES[0]], SANITIZER_SHAPES),
                 "timed": ([SANITIZER_SHAPES[0]], timed)}
        for layout in a.layout:
            shapes, edge = plans[layout]
            spec = Path(tmp) / f"{layout}.json"
            spec.write_text(json.dumps(build_spec(k, wl, cubin, shapes, edge_shapes=edge)))
            cmd = tool_command(exe, a.tool, spec, print_limit=8)
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            text = (p.stdout + p.stderr).splitlines()
            print(f"## {layout}: shapes {shapes}, edge {edge}, rc {p.returncode}")
            print("\n".join(text[: a.lines]))
            print("\n".join(ln for ln in text[a.lines:] if "SUMMARY" in ln or '"ok"' in ln))
    return 0


if __name__ == "__main__":
    sys.exit(main())
