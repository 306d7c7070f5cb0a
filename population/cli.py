"""``python -m population inspect FILE.ptx``: what one PTX module asks of the hardware, per entry.

Per ``.entry``: instruction count; registers declared and used (by type, from the ``.reg`` declarations,
``population.analysis``); memory instructions by kind, state space and bytes per thread
(``population.analysis.memory_sites``); the ptxas resource report (``evaluators.toolchain.compile_ptx``:
registers, spills, stack, static shared memory, barriers); theoretical occupancy for the block size and
``--dynamic-smem`` bytes of dynamic shared memory (``targets.occupancy``, the ``cuda_occupancy.h``
algorithm); and the static global-memory traffic estimate for a launch of ``--grid`` CTAs that each stream
``--elements`` elements per pass (``evaluators.traffic``, an estimate from the PTX, not a measurement).

ptxas compiles the file itself, byte for byte (debug sections, comments and all), so the resources are those
ptxas gives for this file and its errors point at the file's own lines (``file:line: ptxas error: ...``
followed by that line). A module newer than the default ptxas reads is compiled by an installed ptxas that
reads it (``evaluators.toolchain.select_ptxas``: Triton ships one), and the report names the ptxas that
produced the resources. A ``.target`` older than ptxas generates code for (ptxas 13: sm_75) is compiled for
ptxas' oldest target, with a note.

The block size is ``--block`` when given, else the entry's ``.reqntid`` / ``.maxntid``, else 256 threads.
Exit status: 0 on success, 1 when the file cannot be read or parsed (``file:line:col: message`` on stderr)
or ptxas rejects it, 2 on bad arguments. Without ptxas (or without one that reads the module's
``.version``) the resource, occupancy and traffic sections say why and the rest is still printed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from population import ast
from population.errors import PTXSyntaxError
from population.parser import parse_module

DEFAULT_BLOCK = 256
DEFAULT_GRID = 132  # CTAs: one per SM of an H200 (targets.spec)
DEFAULT_ELEMENTS = 4096


@dataclass
class EntryReport:
    """What ``inspect`` found for one entry. Sizes in bytes; ``memory`` rows are
    (kind, state_space, width_bytes per thread, count of instructions); ``resources`` / ``occupancy`` /
    ``traffic`` are None when ptxas (or the analysis) was unavailable, with the reason in ``notes``."""

    name: str
    block: tuple[int, int, int]
    instructions: int
    registers_declared: int
    registers_used: int
    registers_by_type: dict[str, int]
    memory: list[tuple[str, str, int, int]]
    resources: dict[str, Any] | None = None
    occupancy: dict[str, Any] | None = None
    traffic: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    ptxas: str | None = None  # "<path> (<release line>)" of the ptxas that produced ``resources``
    compiled_arch: str | None = None  # the target ptxas compiled for (differs from the .target when too old)


def _cc_of(arch: str) -> tuple[int, int]:
    m = re.fullmatch(r"sm_(\d+)(\d)[af]?", arch)
    if m is None:
        raise ValueError(f"--arch must look like sm_90, sm_90a or sm_100a, got {arch!r}")
    return int(m.group(1)), int(m.group(2))


def _block_of(fn: ast.Function, block: int | None) -> tuple[int, int, int]:
    if block is not None:
        return (block, 1, 1)
    for name in ("reqntid", "maxntid"):
        for d in fn.directives:
            if d.name == name and d.values:
                vals = (*d.values, 1, 1)
                return (vals[0], vals[1], vals[2])
    return (DEFAULT_BLOCK, 1, 1)


def _static_report(fn: ast.Function, block: int | None) -> EntryReport:
    from population.analysis import declared_registers, flat_instructions, memory_sites, used_registers

    declared = declared_registers(fn)
    used = used_registers(fn)
    by_type = Counter(declared[r] for r in used if r in declared)
    rows = Counter((s.kind, s.state_space, s.width_bytes) for s in memory_sites(fn))
    memory = sorted(((k, sp, w, n) for (k, sp, w), n in rows.items()), key=lambda r: (r[0], r[1], r[2]))
    return EntryReport(
        name=fn.name,
        block=_block_of(fn, block),
        instructions=len(flat_instructions(fn)),
        registers_declared=len(declared),
        registers_used=len(used),
        registers_by_type=dict(sorted(by_type.items())),
        memory=memory,
    )


def _compile_target(arch: str, targets: frozenset[str]) -> tuple[str | None, str | None]:
    """(the target to hand ptxas, a note) for the requested ``arch``: itself when ptxas generates it; ptxas'
    oldest target when ``arch`` is older (PTX for sm_XY compiles for every sm_MN with MN >= XY, ptxas --help);
    None when ptxas does not know a target that new."""
    if not targets or arch in targets:
        return arch, None
    plain = sorted((int(t[3:]), t) for t in targets if t[3:].isdigit())
    cc = _cc_of(arch)
    if plain and cc[0] * 10 + cc[1] < plain[0][0]:
        oldest = plain[0][1]
        return oldest, (f".target {arch} is older than this ptxas generates code for (oldest {oldest}): compiled "
                        f"for {oldest}, so resources and occupancy are {oldest}'s")
    return None, f"this ptxas does not generate code for {arch} (it knows {', '.join(t for _, t in plain)})"


def inspect_module(
    module: ast.Module,
    arch: str | None = None,
    block: int | None = None,
    grid: int = DEFAULT_GRID,
    elements: int = DEFAULT_ELEMENTS,
    *,
    text: str | None = None,
    dynamic_smem: int = 0,
) -> list[EntryReport]:
    """One EntryReport per ``.entry`` of ``module``.

    arch: ptxas target (default: the module's first ``.target``); block: threads per CTA (default per
    entry, see module docstring); grid: CTAs for the traffic estimate; elements: elements one CTA streams per
    pass (``elements_per_cta_sweep``); text: the PTX ptxas compiles (default ``print_module(module)``, which
    for a parsed module is its source byte for byte); dynamic_smem: bytes of dynamic shared memory per CTA
    for the occupancy. Raises ValueError for a malformed arch or non-positive sizes; a ptxas rejection
    raises ``evaluators.types.CompileError`` (``line`` is a line of ``text``).
    """
    arch = arch or module.target[0]
    _cc_of(arch)
    if block is not None and block < 1:
        raise ValueError(f"--block must be positive, got {block}")
    if grid < 1 or elements < 1:
        raise ValueError(f"--grid and --elements must be positive, got {grid} and {elements}")
    if dynamic_smem < 0:
        raise ValueError(f"--dynamic-smem must be >= 0 bytes, got {dynamic_smem}")
    if text is None:
        from population.printer import print_module

        text = print_module(module)
    reports = [_static_report(fn, block) for fn in module.entries]

    def note_all(note: str) -> list[EntryReport]:
        for r in reports:
            r.notes.append(note)
        return reports

    try:
        from evaluators.toolchain import (
            PTXVersionUnsupported,
            ToolchainNotFound,
            compile_ptx,
            ptxas_targets,
            ptxas_version,
            select_ptxas,
        )
    except ImportError as e:  # evaluators not importable: report what the PTX alone says
        return note_all(f"ptxas resources unavailable: {e}")
    try:
        ptxas, version_note = select_ptxas(text, arch)
        target, target_note = _compile_target(arch, ptxas_targets(ptxas))
        if target_note is not None:
            note_all(target_note)
        if target is None:
            return reports
        if target != arch:
            ptxas, version_note = select_ptxas(text, target)
        compiled = compile_ptx(text, arch=target, ptxas=ptxas)
    except ToolchainNotFound as e:
        return note_all(f"ptxas not found: {e}")
    except PTXVersionUnsupported as e:
        return note_all(f"ptxas: {e.message}")
    if version_note is not None:
        note_all(version_note)
    cc = _cc_of(target)

    from evaluators.traffic import estimate_traffic
    from targets.occupancy import occupancy

    for r, fn in zip(reports, module.entries):
        r.ptxas = f"{ptxas} ({ptxas_version(ptxas)})"
        r.compiled_arch = target
        ru = compiled.resources.get(r.name)
        if ru is None:
            r.notes.append(f"ptxas reported no resources for {r.name}")
            continue
        r.resources = ru.to_json()
        threads = r.block[0] * r.block[1] * r.block[2]
        try:
            occ = occupancy(threads, ru.registers, ru.shared_static_bytes, dynamic_shared_bytes=dynamic_smem,
                            barriers=ru.barriers, cc=cc)
            r.occupancy = {**asdict(occ), "dynamic_shared_bytes": dynamic_smem, "cc": list(cc)}
        except ValueError as e:
            r.notes.append(f"occupancy: {e}")
        try:
            t = estimate_traffic(fn, (grid, 1, 1), r.block, elements)
            r.traffic = {
                "grid": grid, "elements_per_cta_sweep": elements, "bytes": t.bytes, "load_bytes": t.load_bytes,
                "store_bytes": t.store_bytes, "bytes_per_cta": t.bytes_per_cta, "max_width_bytes": t.max_width_bytes,
            }
        except ValueError as e:
            r.notes.append(f"traffic: {e}")
    return reports


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def format_report(path: str, arch: str, reports: list[EntryReport]) -> str:
    """The human-readable inspect output (plain text, one section per entry)."""
    out = [f"{path}: {len(reports)} entr{'y' if len(reports) == 1 else 'ies'}, target {arch}"]
    compiled = next((r for r in reports if r.ptxas is not None), None)
    if compiled is not None:
        out.append(f"compiled the file itself with {compiled.ptxas} for {compiled.compiled_arch}")
    for r in reports:
        out.append("")
        out.append(f"entry {r.name}  (block {r.block[0]}x{r.block[1]}x{r.block[2]})")
        out.append(f"  instructions          {r.instructions}")
        types = ", ".join(f"{t} {n}" for t, n in r.registers_by_type.items())
        out.append(f"  registers declared    {r.registers_declared}")
        out.append(f"  registers used        {r.registers_used}" + (f"  ({types})" if types else ""))
        if r.memory:
            out.append("  memory instructions   kind        space     bytes/thread  count")
            for kind, space, width, n in r.memory:
                out.append(f"                        {kind:<11} {space:<9} {width:>12}  {n:>5}")
        else:
            out.append("  memory instructions   none")
        if r.resources is not None:
            ru = r.resources
            out.append(
                f"  ptxas                 {ru['registers']} registers, {ru['shared_static_bytes']} bytes smem, "
                f"{ru['barriers']} barriers, {ru['stack_frame_bytes']} bytes stack, "
                f"{ru['spill_stores_bytes']}/{ru['spill_loads_bytes']} bytes spill stores/loads"
            )
        if r.occupancy is not None:
            o = r.occupancy
            dyn = o.get("dynamic_shared_bytes", 0)
            out.append(
                f"  occupancy             {o['occupancy'] * 100:.1f}% ({o['blocks_per_sm']} CTAs/SM, "
                f"{o['active_warps']}/{o['max_warps']} warps, limited by {o['limiter']}"
                + (f"; {dyn} bytes dynamic smem" if dyn else "") + ")"
            )
        if r.traffic is not None:
            t = r.traffic
            out.append(
                f"  static traffic        {_fmt_bytes(t['bytes'])} for {t['grid']} CTAs x {t['elements_per_cta_sweep']} "
                f"elements (loads {_fmt_bytes(t['load_bytes'])}, stores {_fmt_bytes(t['store_bytes'])}, "
                f"{_fmt_bytes(t['bytes_per_cta'])}/CTA; estimate)"
            )
        for note in r.notes:
            out.append(f"  note: {note}")
    return "\n".join(out)


def _inspect(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as e:
        print(f"{path}: cannot read: {e.strerror or e}", file=sys.stderr)
        return 1
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:  # a binary or non-UTF-8 file: point at the first bad byte
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        print(f"{path}:{line}:{col}: not UTF-8 text (byte 0x{data[e.start]:02x}); is it a .ptx file?",
              file=sys.stderr)
        return 1
    try:
        module = parse_module(text, str(path))
    except PTXSyntaxError as e:
        print(str(e), file=sys.stderr)
        return 1
    arch = args.arch or module.target[0]
    try:
        reports = inspect_module(module, arch, args.block, args.grid, args.elements, text=text,
                                 dynamic_smem=args.dynamic_smem)
    except ValueError as e:
        print(f"inspect: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a ptxas rejection (evaluators.types.CompileError) ends the command
        if isinstance(e, _compile_error()):
            print(_ptxas_errors(str(path), text, e), file=sys.stderr)
            return 1
        raise
    if args.json:
        print(json.dumps({"file": str(path), "arch": arch, "entries": [asdict(r) for r in reports]}, indent=2))
    else:
        print(format_report(str(path), arch, reports))
    return 0


def _compile_error() -> type:
    try:
        from evaluators.types import CompileError
    except ImportError:  # pragma: no cover - evaluators always ship with population
        return type(None)
    return CompileError


def _ptxas_errors(path: str, text: str, err: Any) -> str:
    """ptxas' errors as ``path:line: ptxas <severity>: message`` lines, each followed by the file's line."""
    from evaluators.toolchain import parse_diagnostics

    lines = text.splitlines()
    diags = [d for d in parse_diagnostics(err.log) if d.severity in ("error", "fatal")
             and d.message != "Ptx assembly aborted due to errors"]
    if not diags:
        where = f"{path}:{err.line}" if err.line else path
        return f"{where}: ptxas rejected the file: {err.message}"
    out = []
    for d in diags:
        out.append(f"{path}:{d.line}: ptxas {d.severity}: {d.message}" if d.line else f"{path}: ptxas {d.severity}: {d.message}")
        if d.line and 0 < d.line <= len(lines):
            out.append(f"    {lines[d.line - 1].strip()}")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m population`` argument parser (sub-command ``inspect``)."""
    ap = argparse.ArgumentParser(prog="python -m population", description="PTX module tools.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="per-entry instructions, registers, memory, ptxas resources, occupancy, traffic")
    p.add_argument("file", help="a .ptx file")
    p.add_argument("--arch", default=None, help="ptxas target, e.g. sm_90 (default: the module's .target)")
    p.add_argument("--block", type=int, default=None, help="threads per CTA (default: .reqntid/.maxntid, else 256)")
    p.add_argument("--grid", type=int, default=DEFAULT_GRID, help=f"CTAs for the traffic estimate (default {DEFAULT_GRID})")
    p.add_argument("--elements", type=int, default=DEFAULT_ELEMENTS,
                   help=f"elements one CTA streams per pass, for the traffic estimate (default {DEFAULT_ELEMENTS})")
    p.add_argument("--dynamic-smem", type=int, default=0, metavar="BYTES",
                   help="dynamic shared memory per CTA for the occupancy (default 0)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_inspect)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m population``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # output piped into head/less that closed early
        sys.stderr.close()
        return 0
