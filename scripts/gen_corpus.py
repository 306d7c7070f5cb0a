"""Regenerate the PTX test corpus: ``tests/data/*.cu`` -> ``tests/data/*.ptx`` with nvcc.

Each source is compiled with ``nvcc -arch=<arch> -ptx -lineinfo`` where arch is the default GPU's
(``targets.spec.DEFAULT_GPU``: ``sm_90``) unless the source
has a ``// ptxforge-arch: sm_90a`` line (wgmma needs the architecture-specific target); a
``// ptxforge-nvcc-flags: -G`` line replaces ``-lineinfo`` with those flags (full debug information). File names in the
``.file`` directives are made relative (the source's own name; CUDA headers as ``cuda/include/...``) so the
committed PTX does not depend on where the repository or the CUDA toolkit lives.

Usage: ``python scripts/gen_corpus.py [--check] [NAME.cu ...]``. ``--check`` regenerates into memory and
exits 1 when any committed ``.ptx`` differs (same nvcc release assumed: the header records it; what depends on the
checkout's path is ignored: see ``path_independent``).
Needs nvcc (PATH, ``$CUDA_HOME/bin``, or the nvidia-cuda-nvcc wheel); exits 2 with the places tried if none.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
_ARCH_LINE = re.compile(r"^//\s*ptxforge-arch:\s*(sm_\w+)\s*$", re.MULTILINE)
_FLAGS_LINE = re.compile(r"^//\s*ptxforge-nvcc-flags:\s*(.+?)\s*$", re.MULTILINE)
_FILE_LINE = re.compile(r'^(\t\.file\t\d+ ")([^"]*)(")', re.MULTILINE)
_B8_LINE = re.compile(r"^(\s*\.b8\s+)(\d+(?:,\d+)*)(\s*)$")
_INTERNAL_HASH = re.compile(rb"_INTERNAL_[0-9a-f]{1,16}_")
_DATA_DIR = re.compile(rb"(^|\x00)/[^\x00]*/tests/data\x00")


def find_nvcc() -> Path:
    """nvcc through ``evaluators.toolchain.find_nvcc`` when importable, else PATH. Raises FileNotFoundError."""
    sys.path.insert(0, str(ROOT))
    try:
        from evaluators.toolchain import ToolchainNotFound
        from evaluators.toolchain import find_nvcc as _find

        try:
            return _find()
        except ToolchainNotFound as e:
            raise FileNotFoundError(str(e)) from None
    except ImportError:
        found = shutil.which("nvcc")
        if found is None:
            raise FileNotFoundError("nvcc not on PATH") from None
        return Path(found)


def arch_of(source: str) -> str:
    """The target named by a ``// ptxforge-arch: sm_XX`` line, else the default GPU's (``targets.spec``)."""
    m = _ARCH_LINE.search(source)
    if m:
        return m.group(1)
    sys.path.insert(0, str(ROOT))
    from targets.spec import resolve_gpu

    return resolve_gpu(None).arch


def flags_of(source: str) -> list[str]:
    """The nvcc flags named by a ``// ptxforge-nvcc-flags: ...`` line, default ``["-lineinfo"]``."""
    m = _FLAGS_LINE.search(source)
    return m.group(1).split() if m else ["-lineinfo"]


def relative_file_name(path: str, source_name: str) -> str:
    """``/abs/tests/data/x.cu`` -> ``x.cu``; ``/usr/local/cuda/include/crt/a.hpp`` -> ``cuda/include/crt/a.hpp``."""
    if Path(path).name == source_name and "/include/" not in path:
        return source_name
    k = path.rfind("/include/")
    if k >= 0:
        return "cuda/include/" + path[k + len("/include/") :]
    return Path(path).name


def path_independent(ptx: str) -> str:
    """``ptx`` in a form that does not depend on where the checkout lives, for ``--check``: each run of ``.b8``
    lines (the ``.debug_str`` strings) becomes one line, with nvcc's per-source hash in internal-linkage names
    (``_ZN42_INTERNAL_1728e86a_14_x_cu...``, derived from the source's absolute path) zeroed and the compilation
    directory that ``-G`` records (``/.../tests/data``) replaced by ``<checkout>/tests/data``. Not covered: the
    DWARF section lengths of a ``-G`` source (``debug_g.cu``) grow with that directory's length, so its check
    passes only in a checkout whose path has the committed one's length (``/work/main``)."""
    out: list[str] = []
    run: list[bytes] = []

    def flush() -> None:
        if run:
            data = b"".join(run)
            data = _INTERNAL_HASH.sub(lambda h: b"_INTERNAL_" + b"0" * (len(h.group(0)) - 11) + b"_", data)
            data = _DATA_DIR.sub(lambda d: d.group(1) + b"<checkout>/tests/data\x00", data)
            out.append(".b8 " + data.hex())
            run.clear()

    for line in ptx.split("\n"):
        m = _B8_LINE.match(line)
        if m:
            run.append(bytes(int(v) for v in m.group(2).split(",")))
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def generate(cu: Path, nvcc: Path) -> str:
    """The PTX for one source, with relative ``.file`` names. Raises CalledProcessError with nvcc's output."""
    source = cu.read_text()
    arch = arch_of(source)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / (cu.stem + ".ptx")
        subprocess.run(
            [str(nvcc), f"-arch={arch}", "-ptx", *flags_of(source), cu.name, "-o", str(out)],
            cwd=cu.parent, check=True, capture_output=True, text=True,
        )
        ptx = out.read_text()
    return _FILE_LINE.sub(lambda m: m.group(1) + relative_file_name(m.group(2), cu.name) + m.group(3), ptx)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed .ptx instead of writing")
    ap.add_argument("sources", nargs="*", help="file names under tests/data (default: every .cu there)")
    args = ap.parse_args(argv)
    try:
        nvcc = find_nvcc()
    except FileNotFoundError as e:
        print(f"gen_corpus: no nvcc: {e}", file=sys.stderr)
        return 2
    sources = [DATA / s for s in args.sources] if args.sources else sorted(DATA.glob("*.cu"))
    stale = 0
    for cu in sources:
        try:
            ptx = generate(cu, nvcc)
        except subprocess.CalledProcessError as e:
            print(f"gen_corpus: nvcc failed on {cu.name}:\n{e.stdout}{e.stderr}", file=sys.stderr)
            return 1
        target = cu.with_suffix(".ptx")
        if args.check:
            same = target.exists() and path_independent(target.read_text()) == path_independent(ptx)
            stale += not same
            print(f"{'ok   ' if same else 'STALE'} {target.name}")
        else:
            target.write_text(ptx)
            print(f"wrote {target.relative_to(ROOT)} ({arch_of(cu.read_text())}, {ptx.count(chr(10))} lines)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
