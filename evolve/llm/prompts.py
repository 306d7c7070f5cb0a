"""Prompt text for the LLM roles: instructions, the kernel listing, measurements, inspirations, lessons.

Everything a model wrote (edit scripts of earlier children, lessons from the critic) passes through
:func:`sanitize` before it reaches a prompt: PTX comments (``//``, ``/* */``) and chat-template control
sequences are removed, so model text is shown as data and cannot smuggle instructions into the next prompt.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

ROLE_INSTRUCTIONS = {
    "optimizer": (
        "Make this kernel faster. It is memory-bound: time is set by bytes moved through DRAM. Good moves: wider "
        "vector loads and stores (ld.global.v4), read-only or streaming cache hints (.nc, .cs, L1::no_allocate, "
        "L2::evict_first), fewer instructions in the inner loop, approximate math (rsqrt.approx.f32), keeping "
        "the row in registers instead of reading it twice, a better block size. Change as little as needed."),
    "repairer": (
        "The kernel below was produced by an edit and failed. Fix the failure with the smallest edit: declare "
        "or rename registers, fix operand types and modifiers, restore the line that was broken. Keep the "
        "intended optimisation if you can."),
    "critic": (
        "Write ONE line (at most 150 characters) that states a lesson for future edits of this workload: what "
        "the edit changed and why it helped or failed. No code, no line numbers."),
}

FORMAT_HELP = """Answer with an edit script and nothing else. Line numbers refer to the listing above. Edits:
REPLACE a-b            replace lines a..b with the PTX lines that follow, then a line END
INSERT AFTER n         insert the PTX lines that follow after line n, then a line END
DELETE a-b             delete lines a..b
MODIFIER n -old +new   on the instruction at line n remove modifier .old and/or add .new
LAUNCH block=256,1,1   change threads per block
DIRECTIVE entry .maxnreg 64   set a performance directive
KNOBS name=value       re-instantiate the kernel template with these knobs
REWRITE vectorize n width=4   combine the adjacent scalar loads/stores starting at line n into one vector access
REWRITE hoist_loads n  issue every load of the block holding line n before the arithmetic that uses it
REWRITE async_copy n count=8   turn the 16-byte loads from line n on into cp.async copies into shared memory
REWRITE cluster_split n cluster=4   split each CTA's row over a 4-CTA cluster; n is the reduction's bar.sync line
Registers you introduce are declared automatically."""

_CONTROL = re.compile(r"<\|[^|>]*\|>|<\/?(?:s|im_start|im_end|system|user|assistant)>", re.IGNORECASE)
_BLOCK_COMMENT = re.compile(r"/\*.*?(\*/|$)", re.DOTALL)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_NONPRINT = re.compile(r"[^\t\n\x20-\x7e\u00b5\u00b0-\u00ff]")


def sanitize(text: str, max_chars: int = 2000) -> str:
    """Model-written text made safe to show in a prompt: comments, chat control tokens, code fences and
    non-printable characters removed, trailing blanks trimmed, cut at ``max_chars`` characters."""
    t = _BLOCK_COMMENT.sub("", text)
    t = _LINE_COMMENT.sub("", t)
    t = _CONTROL.sub("", t).replace("```", "")
    t = _NONPRINT.sub("", t)
    t = "\n".join(ln.rstrip() for ln in t.splitlines())
    return t[:max_chars].strip("\n")


def one_line(text: str, max_chars: int = 160) -> str | None:
    """The first non-empty sanitised line of ``text``, at most ``max_chars`` characters, or None."""
    for ln in sanitize(text).splitlines():
        ln = " ".join(ln.split()).strip(" -*#>")
        if ln:
            return ln[:max_chars]
    return None


# ------------------------------------------------------------------------------------------------ sections


def listing_section(listing: Any, focus: tuple[int, int] | None, *, show: str = "focus",
                    reason: str = "") -> str:
    """The numbered PTX listing (``Listing.numbered``). ``show="full"`` prints every line;
    ``show="focus"`` prints the register declarations, then only the focus lines (with their true numbers,
    so edits still refer to the whole listing). ``focus`` is an inclusive 1-based line range or None."""
    n = len(listing.lines)
    if focus is None or show == "full":
        body = listing.numbered()
        head = f"## Kernel (PTX, {n} lines)\n"
        if focus is not None:
            head += f"Focus on lines {focus[0]}-{focus[1]}{' (' + reason + ')' if reason else ''}.\n"
        return head + body
    decl = [i.lineno for i in listing.lines if i.text.lstrip().startswith((".reg", ".shared", ".param"))]
    parts = [f"## Kernel (PTX, {n} lines; shown: declarations and lines {focus[0]}-{focus[1]}"
             f"{', ' + reason if reason else ''})"]
    if decl:
        parts.append(listing.numbered(min(decl), min(max(decl), focus[0] - 1)) if min(decl) < focus[0]
                     else "")
        parts.append("   ...")
    parts.append(listing.numbered(focus[0], focus[1]))
    return "\n".join(p for p in parts if p)


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def measurements_section(result: Any, workload: Any = None, gpu_dram_gbps: float | None = None) -> str:
    """The parent's numbers: per shape µs, GB/s and % of roofline (measured copy bandwidth when the
    evaluator gives it, else ``gpu_dram_gbps``), then registers, occupancy and static traffic vs minimum."""
    if result is None:
        return "## Measurements\nnot evaluated yet"
    est = " (static estimate, no GPU)" if getattr(result, "estimate", False) else " (measured on the GPU)"
    lines = [f"## Measurements{est}"]
    if getattr(result, "objective", None) is not None:
        lines.append(f"objective (geomean speedup over the baseline): {result.objective:.3f}")
    for s in getattr(result, "shapes", [])[:6]:
        frac = s.frac_copy if s.frac_copy is not None else (s.gbps / gpu_dram_gbps if gpu_dram_gbps else None)
        shape = "x".join(str(d) for d in s.shape)
        lines.append(f"shape {shape} {s.dtype}: {s.time_us:.1f} us, {s.gbps:.0f} GB/s, {_pct(frac)} of roofline")
    r = getattr(result, "resources", None)
    if r is not None:
        spill = f", spills {r.spill_stores_bytes} B" if r.spill_stores_bytes else ""
        lines.append(f"registers {r.registers}/thread{spill}, static shared {r.shared_static_bytes} B")
    o = getattr(result, "occupancy", None)
    if o is not None:
        lines.append(f"occupancy {_pct(o.occupancy)} ({o.active_warps} warps/SM, limited by {o.limiter})")
    f = getattr(result, "features", {}) or {}
    if "traffic_ratio" in f:
        lines.append(f"memory traffic {f['traffic_ratio']:.2f}x the minimum bytes")
    if getattr(result, "status", "ok") != "ok":
        lines.append(f"status {result.status}: {sanitize(str(result.reason), 300)}")
    return "\n".join(lines)


def script_from_diff(parent_lines: Sequence[str], other_lines: Sequence[str], max_lines: int = 24) -> str | None:
    """An edit script (REPLACE/INSERT/DELETE against the parent's 1-based numbering) turning
    ``parent_lines`` into ``other_lines`` (difflib.SequenceMatcher opcodes), or None when it would take
    more than ``max_lines`` lines or the texts are equal."""
    sm = difflib.SequenceMatcher(a=list(parent_lines), b=list(other_lines), autojunk=False)
    out: list[str] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        new = [ln.strip() for ln in other_lines[j1:j2]]
        if tag == "replace":
            out += [f"REPLACE {i1 + 1}" + (f"-{i2}" if i2 > i1 + 1 else ""), *new, "END"]
        elif tag == "delete":
            out.append(f"DELETE {i1 + 1}" + (f"-{i2}" if i2 > i1 + 1 else ""))
        elif tag == "insert":
            if i1 == 0:
                return None
            out += [f"INSERT AFTER {i1}", *new, "END"]
        if len(out) > max_lines:
            return None
    return "\n".join(out) if out else None


def inspirations_section(parent: Any, parent_listing: Any, inspirations: Sequence[tuple[Any, Any]],
                         listing_fn: Any, k: int = 2) -> str:
    """Up to ``k`` elites from other cells, each as the edit script that turns the parent into it (a diff
    of canonical listings, the parent being the common ancestor shown) or, when that is long, the edit that
    produced the elite from its own parent; with its objective, registers and occupancy."""
    if not inspirations or k <= 0:
        return ""
    parts = ["## Elites from other cells of the archive"]
    plines = [i.text for i in parent_listing.lines]
    for idx, (kern, res) in enumerate(inspirations[:k], 1):
        obj = getattr(res, "objective", None)
        regs = getattr(getattr(res, "resources", None), "registers", None)
        occ = getattr(getattr(res, "occupancy", None), "occupancy", None)
        head = f"### elite {idx}: objective {obj:.3f}" if obj is not None else f"### elite {idx}"
        head += f", registers {regs}" if regs is not None else ""
        head += f", occupancy {_pct(occ)}" if occ is not None else ""
        script = None
        if kern.entry == parent.entry:
            script = script_from_diff(plines, [i.text for i in listing_fn(kern.module).lines])
            if script is not None and kern.launch != parent.launch:
                b = kern.launch.block
                script += f"\nLAUNCH block={b[0]},{b[1]},{b[2]}"
        if script is not None:
            parts += [head + " (edit script from this kernel)", sanitize(script)]
        elif kern.edit_text:
            parts += [head + " (the edit that made it from its parent)", sanitize(kern.edit_text, 1200)]
        else:
            parts.append(head + f" (block {kern.launch.block[0]}, knobs {dict(kern.launch.knobs)})")
    return "\n".join(parts)


def lessons_section(lessons: Sequence[str], n: int = 8) -> str:
    """Up to ``n`` lessons, sanitised, one per line."""
    lines = [one_line(str(ln), 200) for ln in lessons[:n]]
    lines = [ln for ln in lines if ln]
    return "## Lessons from earlier evaluations\n" + "\n".join(f"- {ln}" for ln in lines) if lines else ""


def failure_section(status: str, reason: str, line: int | None = None, text: str | None = None) -> str:
    """What went wrong with a child: status, the (sanitised) message and the offending line if known."""
    out = [f"## Failure: {status}", sanitize(reason, 600)]
    if line is not None:
        out.append(f"at line {line}" + (f": {sanitize(text or '', 200).strip()}" if text else ""))
    return "\n".join(out)


def assemble(*sections: str) -> str:
    """Join non-empty sections with blank lines."""
    return "\n\n".join(s.strip("\n") for s in sections if s and s.strip())
