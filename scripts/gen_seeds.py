"""Regenerate the committed seed PTX under workloads/seeds/ from the CUDA sources.

Writes, for bf16 / fp16 / fp32: rmsnorm_naive[_DTYPE].ptx and rmsnorm_template[_DTYPE].ptx (default knobs).
The nvcc flags are fixed (workloads.cuda_build.NVCC_FLAGS), so a second run with the same nvcc
rewrites identical bytes. Usage: ``python scripts/gen_seeds.py [--check]`` (--check: exit 1 if a committed
file differs from a fresh build, writing nothing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads.cuda_build import SEEDS_DIR, build_ptx
from workloads.rmsnorm import DTYPE_MACRO, KNOB_MACROS, RMSNorm, _seed_file


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = ap.parse_args()
    stale = []
    for dtype in ("bf16", "fp16", "fp32"):
        wl = RMSNorm(dtype)
        macro = {"DTYPE": DTYPE_MACRO[dtype]}
        builds = {
            _seed_file("naive", dtype): build_ptx("rmsnorm_naive.cu", macro, use_cache=False),
            _seed_file("template", dtype): build_ptx(
                "rmsnorm_template.cu", macro | {KNOB_MACROS[k]: v for k, v in wl.default_knobs.items()},
                use_cache=False),
        }
        for name, text in builds.items():
            path = SEEDS_DIR / name
            same = path.is_file() and path.read_text() == text
            if args.check:
                if not same:
                    stale.append(name)
                continue
            if not same:
                path.write_text(text)
            print(f"{'unchanged' if same else 'wrote'} {path.relative_to(SEEDS_DIR.parents[2])} "
                  f"({len(text.splitlines())} lines)")
    if stale:
        print("stale:", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
