"""The ptxas toolchain: find the tools, compile PTX to a cubin, read back what the hardware will spend on it.

``compile_ptx`` runs ``ptxas -v -arch=<sm>`` in a private temporary directory and returns the cubin bytes
(load them with ``cupy.cuda.Module().load(cubin)``; no cuobjdump needed) and, per ``.entry``, a
``ResourceUsage`` read field by field from the ``-v`` report. ptxas 13.0 prints, per entry::

    ptxas info    : Compiling entry function '_Z1kPfS_i' for 'sm_90'
    ptxas info    : Function properties for _Z1kPfS_i
        72 bytes stack frame, 72 bytes spill stores, 72 bytes spill loads
    ptxas info    : Used 24 registers, used 4 barriers, 72 bytes cumulative stack size, 1024 bytes smem

It no longer prints ``cmem[0]`` (older releases did; the parser accepts it when present), so the bank-0
constant size (kernel parameters plus the driver's area) is read from the cubin's ``.nv.constant0.<entry>``
ELF section instead.

Verify-only mode compiles for the *virtual* target (``-arch=compute_90``): ptxas parses and checks the
module and suppresses code generation ("This can be used for parsing only", ``ptxas --help``), so it rejects
bad PTX without register allocation or scheduling. ``experiments/static_model.py`` measures the gain: with
ptxas 13.0 on a shared 2-core CPU machine (median of 7, two runs), the 174-line naive RMSNorm seed took
56-71 ms for ``sm_90 -v`` and 28-30 ms verify-only (1.9-2.5x), the 2108-line template 119-218 ms and
32-36 ms (3.7-6.1x). No cubin and no resources come back in that mode.

PTX newer than ptxas: each ptxas reads PTX up to one ISA version (ptxas 13.0: 9.0; it rejects ``.version 9.4``
with "Unsupported .version 9.4; current version is '9.0'"). ``compile_ptx`` reads the module's ``.version``
and, when the default ptxas is too old for it, compiles with the first installed ptxas that reads it
(``ptxas_candidates``: PATH / CUDA_HOME / the nvidia-cuda-nvcc wheel, then every ``/usr/local/cuda*``, then
the ptxas binaries Triton ships in ``triton/backends/nvidia/bin``); ``CompileResult.ptxas`` names the one that
produced the cubin and the resources. When none reads it, ``PTXVersionUnsupported`` says which version was
asked for and what each ptxas reads.

Results are cached by the SHA-256 of (ptxas version, target, options, PTX text): an in-process LRU and,
when ``cache_dir`` is given (or ``$PTXFORGE_PTXAS_CACHE`` is set), one file pair per compile on disk.
Failed compiles are cached too, so a resumed run does not pay ptxas twice for the same broken child.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators.types import CompileError, ResourceUsage
from population.ast import Module
from population.kernel import Kernel
from population.printer import listing, print_module

PTX_FILENAME = "module.ptx"
_ARCH_RE = re.compile(r"^sm_(\d{2,3})([af]?)$")


class ToolchainNotFound(RuntimeError):
    """No usable ptxas / nvcc; the message lists every place that was tried."""


class PTXVersionUnsupported(CompileError):
    """The module's ``.version`` is newer than every installed ptxas reads; the message names the version,
    each ptxas tried and the newest PTX ISA version it reads. ``line`` is the ``.version`` line."""


# --------------------------------------------------------------------------------------------- locating


def _wheel_bin_dirs() -> list[Path]:
    """``site-packages/nvidia/cu13/bin`` (and cu12) of the nvidia-cuda-nvcc wheel, for every sys.path entry."""
    out: list[Path] = []
    for entry in sys.path:
        for cu in ("cu13", "cuda_nvcc", "cu12"):
            d = Path(entry or ".") / "nvidia" / cu / "bin"
            if d.is_dir():
                out.append(d)
    return out


def _find_tool(name: str) -> Path:
    tried: list[str] = []
    found = shutil.which(name)
    tried.append(f"PATH ({name})")
    if found:
        return Path(found)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            cand = Path(home) / "bin" / name
            tried.append(str(cand))
            if cand.is_file() and os.access(cand, os.X_OK):
                return cand
        else:
            tried.append(f"${var} (unset)")
    for d in _wheel_bin_dirs():
        cand = d / name
        tried.append(str(cand))
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    tried.append("site-packages/nvidia/cu13/bin (nvidia-cuda-nvcc wheel not installed)")
    raise ToolchainNotFound(f"{name} not found; tried: " + "; ".join(tried)
                            + ". Install nvidia-cuda-nvcc==13.0.88 or put a CUDA 13 toolkit on PATH.")


def find_ptxas() -> Path:
    """Path of ``ptxas``: PATH first, then ``$CUDA_HOME/bin`` (or ``$CUDA_PATH/bin``), then the
    nvidia-cuda-nvcc wheel's ``site-packages/nvidia/cu13/bin``. Raises ToolchainNotFound listing each place."""
    return _find_tool("ptxas")


def find_nvcc() -> Path:
    """Path of ``nvcc``, searched like ``find_ptxas``. Raises ToolchainNotFound."""
    return _find_tool("nvcc")


_version_lock = threading.Lock()
_versions: dict[str, str] = {}


_isa_versions: dict[str, tuple[int, int] | None] = {}
_targets: dict[str, frozenset[str]] = {}
_VERSION_LINE = re.compile(r"^[ \t]*\.version\s+(\d+)\.(\d+)", re.MULTILINE)
# A string literal (kept: ``.file 1 "a//b.cu"``), a block comment or a line comment (PTX ISA "Comments": C/C++ style).
_COMMENT_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|/\*.*?\*/|//[^\n]*', re.DOTALL)


def _code_only(text: str) -> str:
    """``text`` with its comments blanked (newlines kept, so line numbers still hold): the text a directive lookup
    by regex must read, as ptxas does (red-team round 16, ``rt16_comment_target_export``: a ``.target sm_100a`` in
    a block comment before the real header decided the export's ptxas target)."""
    if "/" not in text:
        return text
    return _COMMENT_RE.sub(lambda m: m.group(0) if m.group(0).startswith('"') else re.sub(r"[^\n]", " ", m.group(0)),
                           text)


def ptx_isa_version(ptxas: Path | None = None) -> tuple[int, int] | None:
    """The newest PTX ISA version ``ptxas`` reads, e.g. (9, 0) for ptxas 13.0: asked of ptxas itself by
    compiling a module that declares ``.version 99.9`` (it answers "current version is '9.0'"). None when the
    answer does not come in that form."""
    path = str(ptxas or find_ptxas())
    with _version_lock:
        if path in _isa_versions:
            return _isa_versions[path]
    with tempfile.TemporaryDirectory(prefix="ptxforge-ptxas-") as tmp:
        (Path(tmp) / "v.ptx").write_text(".version 99.9\n.target sm_90\n.address_size 64\n")
        proc = subprocess.run([path, "-arch=sm_90", "v.ptx", "-o", "v.cubin"], cwd=tmp, capture_output=True,
                              text=True, check=False, timeout=60)
    m = re.search(r"current version is '(\d+)\.(\d+)'", proc.stdout + proc.stderr)
    found = (int(m.group(1)), int(m.group(2))) if m else None
    with _version_lock:
        _isa_versions[path] = found
    return found


def ptxas_targets(ptxas: Path | None = None) -> frozenset[str]:
    """The GPU targets ``ptxas`` generates code for (``sm_75``, ``sm_90a``, ...), read from the "Allowed values"
    of ``--gpu-name`` in ``ptxas --help``; empty when the help text has no such list."""
    path = str(ptxas or find_ptxas())
    with _version_lock:
        if path in _targets:
            return _targets[path]
    out = subprocess.run([path, "--help"], capture_output=True, text=True, check=False, timeout=60).stdout
    m = re.search(r"--gpu-name.*?Allowed values for this option:(.*?)(?:\n\s*\n|\n--)", out, re.S)
    found = frozenset(re.findall(r"'(sm_\d+[af]?)'", m.group(1))) if m else frozenset()
    with _version_lock:
        _targets[path] = found
    return found


def ptxas_candidates() -> list[Path]:
    """Every ptxas installed here, the default (``find_ptxas``) first, then ``/usr/local/cuda*/bin/ptxas``
    (newest first), then the ptxas binaries Triton ships (``triton/backends/nvidia/bin/ptxas-blackwell`` and
    ``ptxas``; found without importing triton). Duplicates (same real path) are listed once."""
    out: list[Path] = []
    try:
        out.append(find_ptxas())
    except ToolchainNotFound:
        pass
    out += sorted(Path("/usr/local").glob("cuda*/bin/ptxas"), reverse=True)
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            b = Path(loc) / "backends" / "nvidia" / "bin"
            out += [b / "ptxas-blackwell", b / "ptxas"]
    seen: set[Path] = set()
    unique = []
    for p in out:
        if p.is_file() and os.access(p, os.X_OK) and p.resolve() not in seen:
            seen.add(p.resolve())
            unique.append(p)
    return unique


def ptx_version_of(text: str) -> tuple[int, int] | None:
    """The ``.version`` a PTX module declares, e.g. (9, 4), or None when it has no ``.version`` line."""
    m = _VERSION_LINE.search(_code_only(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def select_ptxas(text: str, arch: str) -> tuple[Path, str | None]:
    """The ptxas to compile ``text`` for ``arch`` with, and a note when it is not the default one.

    The default ptxas (``find_ptxas``) unless the module's ``.version`` is newer than it reads; then the first of
    ``ptxas_candidates`` that reads that version and generates ``arch``. Raises PTXVersionUnsupported (naming
    the version and what each ptxas reads) when none does; ToolchainNotFound when there is no ptxas at all.
    """
    default = find_ptxas()
    want = ptx_version_of(text)
    if want is None:
        return default, None
    have = ptx_isa_version(default)
    if have is None or want <= have:
        return default, None
    tried = []
    for cand in ptxas_candidates():
        isa = ptx_isa_version(cand)
        tried.append(f"{cand} ({ptxas_version(cand)}: PTX ISA up to {f'{isa[0]}.{isa[1]}' if isa else 'unknown'})")
        targets = ptxas_targets(cand)
        if isa is not None and want <= isa and (not targets or arch in targets):
            note = (f"the module's .version {want[0]}.{want[1]} is newer than {default} reads "
                    f"(PTX ISA {have[0]}.{have[1]}): compiled with {cand} ({ptxas_version(cand)})")
            return cand, note
    line = text.count("\n", 0, _VERSION_LINE.search(_code_only(text)).start()) + 1  # type: ignore[union-attr]
    raise PTXVersionUnsupported(
        message=(f".version {want[0]}.{want[1]} is newer than any installed ptxas reads for {arch}; tried: "
                 + "; ".join(tried) + ". Install a newer CUDA toolkit (or Triton, which ships its own ptxas), "
                 "or lower the .version if the module uses no newer PTX features"),
        line=line)


def ptxas_version(ptxas: Path | None = None) -> str:
    """The release line of ``ptxas --version`` (e.g. ``"Cuda compilation tools, release 13.0, V13.0.88"``)."""
    path = str(ptxas or find_ptxas())
    with _version_lock:
        if path not in _versions:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
            lines = [ln for ln in out.splitlines() if "release" in ln]
            _versions[path] = lines[0].strip() if lines else out.strip()
        return _versions[path]


# ---------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CompileResult:
    """One successful ptxas run.

    cubin: the ELF cubin bytes (empty in verify-only mode); resources: entry name -> ResourceUsage (empty in
    verify-only mode); log: ptxas' combined output with the temporary path replaced by ``module.ptx``;
    seconds: wall time of this call (ptxas run, or cache lookup when ``cached``); arch: the target given;
    gmem_bytes: module-level ``.global`` variables (ptxas "bytes gmem"); warnings: ptxas warning lines.
    """

    cubin: bytes
    resources: dict[str, ResourceUsage]
    log: str
    seconds: float
    cached: bool
    arch: str
    verify_only: bool = False
    gmem_bytes: int = 0
    warnings: tuple[str, ...] = ()
    ptxas: str = ""
    ptxas_release: str = ""
    ptxas_note: str | None = None


@dataclass(frozen=True)
class Diagnostic:
    """One ptxas message: severity ``"error" | "warning" | "fatal"``, 1-based line in the compiled text or
    None, and the message text after the colon."""

    severity: str
    line: int | None
    message: str


_DIAG_RE = re.compile(
    r"^ptxas(?:-[\w-]+)? (?:(?P<file>.+?), line (?P<line>\d+); )?(?P<sev>error|warning|fatal)\s*: (?P<msg>.*)$")
_ON_LINE = re.compile(r" on line (\d+)\b")


def parse_diagnostics(log: str) -> list[Diagnostic]:
    """Errors, warnings and fatal lines of a ptxas log, in order (``ptxas module.ptx, line 30; error : ...``)."""
    out = []
    for ln in log.splitlines():
        m = _DIAG_RE.match(ln.strip())
        if m:
            line = m["line"]
            if line is None:  # "Unexpected non-ASCII character encountered on line 10" carries it in the text
                on = _ON_LINE.search(m["msg"])
                line = on.group(1) if on else None
            out.append(Diagnostic(m["sev"], int(line) if line else None, m["msg"].strip()))
    return out


_INT = r"(\d+)"
_FIELDS = {
    "registers": re.compile(r"Used " + _INT + r" registers"),
    "barriers": re.compile(r"used " + _INT + r" barriers"),
    "cumulative_stack": re.compile(_INT + r" bytes cumulative stack size"),
    "smem": re.compile(_INT + r" bytes smem"),
    "cmem0": re.compile(_INT + r" bytes cmem\[0\]"),
}
_PROPS_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_resources(log: str, arch: str) -> dict[str, ResourceUsage]:
    """Per-entry ResourceUsage from a ``ptxas -v`` log (field by field; missing fields are 0).

    stack_frame_bytes is the larger of the entry's own frame and its "cumulative stack size" (which adds the
    callees' frames); spills are the entry's own. Raises ValueError when a "Used ..." line precedes any
    "Compiling entry function" line (a log this parser does not understand).
    """
    entries: dict[str, dict[str, int]] = {}
    props: dict[str, tuple[int, int, int]] = {}
    current: str | None = None
    props_for: str | None = None
    for raw in log.splitlines():
        ln = raw.strip()
        m = re.search(r"Compiling entry function '([^']+)'", ln)
        if m:
            current = m.group(1)
            entries.setdefault(current, {})
            continue
        m = re.search(r"Function properties for (\S+)", ln)
        if m:
            props_for = m.group(1)
            continue
        m = _PROPS_RE.search(ln)
        if m and props_for is not None:
            props[props_for] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            props_for = None
            continue
        if "Used " in ln and " registers" in ln:
            if current is None:
                raise ValueError(f"ptxas log: resource line before any entry: {ln!r}")
            for key, rx in _FIELDS.items():
                fm = rx.search(ln)
                if fm:
                    entries[current][key] = int(fm.group(1))
    out: dict[str, ResourceUsage] = {}
    for name, f in entries.items():
        frame, spill_st, spill_ld = props.get(name, (0, 0, 0))
        out[name] = ResourceUsage(
            entry=name,
            arch=arch,
            registers=f.get("registers", 0),
            spill_stores_bytes=spill_st,
            spill_loads_bytes=spill_ld,
            stack_frame_bytes=max(frame, f.get("cumulative_stack", 0)),
            shared_static_bytes=f.get("smem", 0),
            constant_bytes=f.get("cmem0", 0),
            barriers=f.get("barriers", 0),
        )
    return out


# ----------------------------------------------------------------------------------------- cubin (ELF)


def cubin_sections(cubin: bytes) -> dict[str, int]:
    """Section name -> size in bytes of an ELF64 little-endian cubin (ELF spec, section header table).

    Entry-specific sections are named ``.text.<entry>``, ``.nv.constant0.<entry>`` (kernel parameter bank),
    ``.nv.shared.<entry>`` (static shared memory), ``.nv.info.<entry>``. Raises ValueError when the bytes are
    not an ELF64 little-endian image or a header points outside it.
    """
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        raise ValueError("not an ELF image (cubin must start with 0x7f 'ELF')")
    if cubin[4] != 2 or cubin[5] != 1:
        raise ValueError(f"cubin is not ELF64 little-endian (class={cubin[4]}, data={cubin[5]})")
    (e_shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if e_shoff + e_shnum * e_shentsize > len(cubin) or e_shstrndx >= max(e_shnum, 1):
        raise ValueError("cubin section header table lies outside the image")
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    str_off = headers[e_shstrndx][4]
    out: dict[str, int] = {}
    for h in headers:
        start = str_off + h[0]
        end = cubin.find(b"\0", start)
        name = cubin[start:end].decode("ascii", "replace") if end >= 0 else ""
        if name:
            out[name] = h[5]
    return out


# -------------------------------------------------------------------------------------------- compiling


def _source_text(src: str | Module | Kernel) -> tuple[str, Module | None]:
    """(text to compile, module or None). Modules and kernels compile their canonical print (what
    ``population.printer.listing`` numbers), so ptxas line numbers map back to AST nodes."""
    if isinstance(src, str):
        return src, None
    if isinstance(src, Kernel):
        return src.canonical_ptx, src.module  # cached on the kernel: identity hashing printed it already
    if not isinstance(src, Module):
        raise TypeError(f"compile_ptx takes PTX text, a Module or a Kernel, got {type(src).__name__}")
    return print_module(src, canonical=True), src


def _statement_at(text: str, module: Module | None, line: int | None) -> Any:
    """What the compiled ``text`` shows at 1-based ``line``: the AST node of ``module``'s canonical listing
    printed there (its text for a brace or blank line), the stripped text line for str input, or None."""
    if line is None:
        return None
    if module is not None:
        lines = listing(module).lines
        if not 0 < line <= len(lines):
            return None
        info = lines[line - 1]
        return info.node if info.node is not None else info.text
    text_lines = text.splitlines()
    return text_lines[line - 1].strip() if 0 < line <= len(text_lines) else None


_TARGET_RE = re.compile(r"^[ \t]*\.target\s+(sm_\w+)", re.MULTILINE)


def module_target(text: str) -> str:
    """The ``sm_XY`` target named by the PTX text's ``.target`` directive (``.target sm_90a, debug`` ->
    ``sm_90a``; comments skipped). ValueError when the module has none (a ``compute_XY``-only or missing target)."""
    m = _TARGET_RE.search(_code_only(text))
    if m is None:
        raise ValueError("the PTX module has no .target sm_XY directive; pass arch= (GPUSpec.arch)")
    return m.group(1)


def _check_arch(arch: str) -> None:
    if not _ARCH_RE.match(arch):
        raise ValueError(f"arch must look like sm_90, sm_90a or sm_100a, got {arch!r}")


class _LRU:
    """A thread-safe in-memory LRU of compile outcomes (CompileResult or a CompileError tuple)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._d: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
            return None

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


_memory_cache = _LRU(512)


def clear_cache() -> None:
    """Drop the in-process compile cache (the on-disk cache is left alone)."""
    _memory_cache.clear()


@dataclass(frozen=True)
class _Outcome:
    ok: bool
    cubin: bytes = b""
    log: str = ""
    arch: str = ""
    verify_only: bool = False
    error_line: int | None = None
    error_message: str = ""


def _disk_paths(cache_dir: Path, key: str) -> tuple[Path, Path]:
    d = cache_dir / key[:2]
    return d / f"{key}.cubin", d / f"{key}.json"


def _disk_get(cache_dir: Path, key: str) -> _Outcome | None:
    cubin_p, meta_p = _disk_paths(cache_dir, key)
    try:
        meta = json.loads(meta_p.read_text())
        cubin = cubin_p.read_bytes() if meta["ok"] and not meta["verify_only"] else b""
    except (OSError, ValueError, KeyError):
        return None
    return _Outcome(ok=meta["ok"], cubin=cubin, log=meta["log"], arch=meta["arch"], verify_only=meta["verify_only"],
                    error_line=meta.get("error_line"), error_message=meta.get("error_message", ""))


def _disk_put(cache_dir: Path, key: str, out: _Outcome) -> None:
    cubin_p, meta_p = _disk_paths(cache_dir, key)
    cubin_p.parent.mkdir(parents=True, exist_ok=True)
    meta = {"ok": out.ok, "log": out.log, "arch": out.arch, "verify_only": out.verify_only,
            "error_line": out.error_line, "error_message": out.error_message}
    # Write-then-rename so a concurrent reader never sees half a file.
    for path, data in ((cubin_p, out.cubin), (meta_p, json.dumps(meta).encode())):
        if path is cubin_p and not out.cubin:
            continue
        tmp = path.with_suffix(path.suffix + f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def _run_ptxas(text: str, arch: str, verify_only: bool, max_registers: int | None, options: tuple[str, ...],
               ptxas: Path, timeout_s: float) -> _Outcome:
    target = ("compute_" + arch[3:]) if verify_only else arch
    with tempfile.TemporaryDirectory(prefix="ptxforge-ptxas-") as tmp:
        (Path(tmp) / PTX_FILENAME).write_text(text)
        cmd = [str(ptxas), f"-arch={target}", PTX_FILENAME, "-o", "module.cubin"]
        if not verify_only:
            cmd.insert(1, "-v")
        if max_registers is not None:
            cmd += ["-maxrregcount", str(max_registers)]
        cmd += list(options)
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return _Outcome(ok=False, arch=arch, verify_only=verify_only,
                            error_message=f"ptxas did not finish within {timeout_s:g} s", log="")
        log = (proc.stdout + proc.stderr).replace(tmp + os.sep, "")
        if proc.returncode != 0:
            diags = parse_diagnostics(log)
            first = next((d for d in diags if d.severity in ("error", "fatal")), None)
            if first is not None:
                # ptxas often gives the root cause second on the same line ("Arguments mismatch", then
                # "Unknown symbol '%r99'"): keep every distinct message of the first failing line.
                same = [d.message for d in diags if d.severity == "error" and d.line == first.line]
                message = "; ".join(dict.fromkeys(same)) if first.line is not None and same else first.message
            else:
                message = (log.strip().splitlines() or [f"ptxas exit {proc.returncode}"])[0]
            return _Outcome(ok=False, log=log, arch=arch, verify_only=verify_only,
                            error_line=first.line if first else None, error_message=message)
        cubin_path = Path(tmp) / "module.cubin"
        cubin = b"" if verify_only or not cubin_path.exists() else cubin_path.read_bytes()
        return _Outcome(ok=True, cubin=cubin, log=log, arch=arch, verify_only=verify_only)


def _cache_key(release: str, arch: str, verify_only: bool, max_registers: int | None, options: tuple[str, ...],
               text: str) -> str:
    """SHA-256 of (ptxas release, target, options, PTX text): the memory and disk caches' key."""
    return hashlib.sha256((json.dumps([release, arch, verify_only, max_registers, list(options)]) + "\0"
                           + text).encode()).hexdigest()


def remember_compile(src: str | Module | Kernel, arch: str, result: CompileResult | CompileError, *,
                     ptxas_release: str) -> bool:
    """Put a compile done in another process or on another node into this process's cache, so that
    ``compile_ptx(src, arch)`` (default options) returns it without running ptxas (``cached`` True).

    result: what ``compile_ptx(src, arch)`` returned or raised there; ptxas_release: ``ptxas_version`` of the
    ptxas ``select_ptxas(text, arch)`` chose there. Returns False, storing nothing, when that release differs
    from the one ``select_ptxas`` chooses here (the cache key names
    the ptxas release, so a result is never filed under another compiler) or when ``result`` is verify-only.
    Raises ToolchainNotFound when this node has no ptxas.
    """
    text, _ = _source_text(src)
    try:
        local, _ = select_ptxas(text, arch)
    except CompileError:  # no ptxas here reads the module's .version: compile_ptx will say so itself
        return False
    if ptxas_release != ptxas_version(local):
        return False
    key = _cache_key(ptxas_release, arch, False, None, (), text)
    if isinstance(result, CompileError):
        outcome = _Outcome(ok=False, log=result.log, arch=arch, error_line=result.line, error_message=result.message)
    elif result.verify_only:
        return False
    else:
        outcome = _Outcome(ok=True, cubin=result.cubin, log=result.log, arch=arch)
    _memory_cache.put(key, outcome)
    return True


def compile_ptx(
    src: str | Module | Kernel,
    arch: str | None = None,
    *,
    verify_only: bool = False,
    max_registers: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    options: tuple[str, ...] = (),
    timeout_s: float = 120.0,
    ptxas: str | os.PathLike[str] | None = None,
) -> CompileResult:
    """Compile PTX to a cubin with ptxas and report per-entry resources.

    src: PTX text, a ``population.ast.Module`` or a ``Kernel`` (modules are printed canonically with
    ``population.printer.listing`` so an error line maps back to its AST node); arch: the ptxas target,
    ``sm_90``, ``sm_90a``, ``sm_100a`` or any ``sm_XY[a|f]`` ptxas accepts (callers pass ``GPUSpec.arch``);
    None: the module's own ``.target`` (ValueError when it names no ``sm_XY`` target); verify_only: parse and check only against
    the virtual target ``compute_XY`` (no cubin, no resources, faster); max_registers: ``-maxrregcount``;
    cache_dir: on-disk cache folder (default ``$PTXFORGE_PTXAS_CACHE`` if set); options: extra ptxas flags;
    timeout_s: wall-clock limit for ptxas (a CompileError past it, not cached); ptxas: the ptxas binary to
    use (default: ``select_ptxas``, which picks a newer installed ptxas when the module's ``.version`` needs
    one; ``CompileResult.ptxas`` / ``ptxas_release`` / ``ptxas_note`` say which one ran and why).

    Raises ``types.CompileError`` (message = ptxas' errors on the first failing line, joined by "; ", line = its 1-based line in the compiled
    text, statement = the AST node printed there, or the text line for str input, log = the whole log),
    ``ValueError`` for a malformed ``arch``, ``ToolchainNotFound`` when no ptxas is found,
    ``PTXVersionUnsupported`` (a CompileError) when no installed ptxas reads the module's ``.version``.
    """
    start = time.perf_counter()
    text, module = _source_text(src)
    if arch is None:
        arch = module_target(text)
    _check_arch(arch)
    if max_registers is not None and not 16 <= max_registers <= 255:
        raise ValueError(f"max_registers must be in [16, 255], got {max_registers}")
    note: str | None = None
    if ptxas is None:
        ptxas, note = select_ptxas(text, arch)
    ptxas = Path(ptxas)
    key = _cache_key(ptxas_version(ptxas), arch, verify_only, max_registers, tuple(options), text)
    disk = cache_dir if cache_dir is not None else os.environ.get("PTXFORGE_PTXAS_CACHE")
    disk_dir = Path(disk) if disk else None

    cached = True
    outcome = _memory_cache.get(key)
    if outcome is None and disk_dir is not None:
        outcome = _disk_get(disk_dir, key)
        if outcome is not None:
            _memory_cache.put(key, outcome)
    if outcome is None:
        cached = False
        outcome = _run_ptxas(text, arch, verify_only, max_registers, tuple(options), ptxas, timeout_s)
        if outcome.ok or outcome.log:  # a timeout depends on the machine's load, not on the PTX: not cached
            _memory_cache.put(key, outcome)
            if disk_dir is not None:
                _disk_put(disk_dir, key, outcome)

    if not outcome.ok:
        raise CompileError(message=outcome.error_message, line=outcome.error_line,
                           statement=_statement_at(text, module, outcome.error_line), log=outcome.log)
    resources = {} if verify_only else parse_resources(outcome.log, arch)
    if outcome.cubin:
        sections = cubin_sections(outcome.cubin)
        for name, ru in list(resources.items()):
            cmem = sections.get(f".nv.constant0.{name}")
            if cmem is not None and ru.constant_bytes == 0:
                resources[name] = ResourceUsage(**{**ru.to_json(), "constant_bytes": cmem})
    gm = re.search(r"(\d+) bytes gmem", outcome.log)
    warnings = tuple(f"line {d.line}: {d.message}" if d.line else d.message
                     for d in parse_diagnostics(outcome.log) if d.severity == "warning")
    return CompileResult(cubin=outcome.cubin, resources=resources, log=outcome.log,
                         seconds=time.perf_counter() - start, cached=cached, arch=arch, verify_only=verify_only,
                         gmem_bytes=int(gm.group(1)) if gm else 0, warnings=warnings, ptxas=str(ptxas),
                         ptxas_release=ptxas_version(ptxas), ptxas_note=note)
