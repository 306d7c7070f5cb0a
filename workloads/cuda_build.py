"""CUDA C++ seed sources -> PTX text with nvcc, reproducibly and with a content-hash disk cache.

The flags are fixed (``NVCC_FLAGS``) so the same source, macros and nvcc version always give the same PTX
bytes; the cache key is the SHA-256 of the source (with the files it includes), the macros, the flags and the nvcc
version line. Cache directory: ``$PTXFORGE_CACHE/seeds`` when set, else ``~/.cache/ptxforge/seeds``.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from evaluators.toolchain import find_nvcc
from targets.spec import SEED_ARCH

SEEDS_DIR = Path(__file__).resolve().parent / "seeds"

# -O3 and C++17 (the template uses ``if constexpr``); no -lineinfo, so the PTX carries no file paths.
NVCC_FLAGS: tuple[str, ...] = ("-ptx", "-O3", "-std=c++17")


class SeedBuildError(RuntimeError):
    """nvcc refused a seed source; ``log`` holds its output, ``source`` the .cu path, ``defines`` the macros."""

    def __init__(self, source: Path, defines: Mapping[str, int], log: str):
        self.source, self.defines, self.log = source, dict(defines), log
        first = next((ln for ln in log.splitlines() if "error" in ln), log.strip()[:300])
        super().__init__(f"{source.name} with {dict(defines)}: nvcc failed: {first}")


def cache_dir() -> Path:
    """Where generated PTX is cached: ``$PTXFORGE_CACHE/seeds`` or ``~/.cache/ptxforge/seeds``."""
    root = os.environ.get("PTXFORGE_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "ptxforge") / "seeds"


@lru_cache(maxsize=4)
def _nvcc_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


_QUOTED_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def _source_digest(source: Path) -> bytes:
    """SHA-256 of ``source`` and of every file it includes with ``#include "..."``, followed recursively
    (resolved against the including file's folder, as nvcc does without -I; each file once), so a change to a
    shared header or to an included seed in another folder changes the key. Conditional includes count too."""
    h = hashlib.sha256()
    seen: set[Path] = set()

    def add(path: Path, name: bytes) -> None:
        path = path.resolve()
        if path in seen or not path.is_file():
            return
        seen.add(path)
        text = path.read_bytes()
        h.update(name + b"\0" + str(len(text)).encode() + b"\0" + text)
        for inc in _QUOTED_INCLUDE.findall(text):
            add(path.parent / inc.decode(), inc)

    add(source, source.name.encode())
    return h.digest()


def build_ptx(source: str | Path, defines: Mapping[str, int] | None = None, arch: str = SEED_ARCH,
              *, use_cache: bool = True) -> str:
    """Compile a CUDA C++ file to PTX text for ``arch`` with ``-D NAME=VALUE`` for each entry of ``defines``.
    arch: ``targets.spec.SEED_ARCH`` unless given (seeds are generated for the oldest supported target).

    source: a path, or a file name under ``workloads/seeds``. Returns the PTX (str).
    Raises FileNotFoundError (no source), ``evaluators.toolchain.ToolchainNotFound`` (no nvcc) or
    SeedBuildError (nvcc failed; the log says why).
    """
    src = Path(source)
    if not src.is_absolute() and not src.exists():
        src = SEEDS_DIR / src
    if not src.is_file():
        raise FileNotFoundError(f"CUDA source {source} not found (looked in {SEEDS_DIR})")
    defs = {str(k): int(v) for k, v in sorted((defines or {}).items())}
    nvcc = find_nvcc()  # PATH, $CUDA_HOME/bin, then the nvidia-cuda-nvcc wheel
    flags = [f"-arch={arch}", *NVCC_FLAGS, *(f"-D{k}={v}" for k, v in defs.items())]
    key = hashlib.sha256(_source_digest(src) + repr((flags, _nvcc_version(str(nvcc)))).encode()).hexdigest()
    cached = cache_dir() / f"{src.stem}-{key[:24]}.ptx"
    if use_cache and cached.is_file():
        return cached.read_text()
    with tempfile.TemporaryDirectory(prefix="ptxforge-nvcc-") as tmp:
        out = Path(tmp) / f"{src.stem}.ptx"
        proc = subprocess.run([str(nvcc), *flags, str(src), "-o", str(out)], capture_output=True, text=True)
        if proc.returncode != 0 or not out.is_file():
            raise SeedBuildError(src, defs, proc.stdout + proc.stderr)
        text = out.read_text()
    if use_cache:
        cached.parent.mkdir(parents=True, exist_ok=True)
        part = cached.with_suffix(f".{os.getpid()}.tmp")
        part.write_text(text)
        os.replace(part, cached)  # atomic: concurrent builders never see half a file
    return text
