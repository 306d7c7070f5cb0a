"""Counts over a kernel's PTX that the static cost model does not price but that can move GPU time a little
(cache and eviction hints, prefetches, approximate math, instruction count, launch directives): features of
the replay surrogate (``evaluators.replay``). Names follow the PTX ISA 9.0 opcodes and qualifiers."""

from __future__ import annotations

from typing import Any

from population.analysis import flat_instructions

STAT_NAMES = ("instructions", "global_loads", "global_stores", "nc_loads", "cs_accesses", "evict_hints",
              "prefetches", "approx_math", "ftz_math", "shuffles", "bar_syncs", "maxnreg", "minnctapersm",
              "log_block")


def ptx_stats(kernel: Any) -> dict[str, float]:
    """``STAT_NAMES`` -> count (float) for ``kernel``'s entry: instructions; global loads/stores; loads through
    the non-coherent path (``.nc``); accesses with ``.cs`` (streaming); eviction-priority hints (``.L1::evict_*``,
    ``.L2::evict_*``, ``.L2::cache_hint``); ``prefetch``; ``.approx`` and ``.ftz`` math; ``shfl``; ``bar``;
    ``.maxnreg`` and ``.minnctapersm`` values (0 when absent); log2 of the threads per block.
    Raises KeyError when the module lacks the entry."""
    import math

    fn = kernel.module.function(kernel.entry)
    out = dict.fromkeys(STAT_NAMES, 0.0)
    for ins in flat_instructions(fn):
        out["instructions"] += 1
        mods = ins.modifiers
        glob = "global" in mods
        if ins.opcode == "ld" and glob:
            out["global_loads"] += 1
            out["nc_loads"] += "nc" in mods
        if ins.opcode == "st" and glob:
            out["global_stores"] += 1
        if ins.opcode in ("ld", "st") and "cs" in mods:
            out["cs_accesses"] += 1
        if any(m.startswith(("L1::evict", "L2::evict", "L2::cache_hint")) for m in mods):
            out["evict_hints"] += 1
        if ins.opcode in ("prefetch", "prefetchu"):
            out["prefetches"] += 1
        out["approx_math"] += "approx" in mods
        out["ftz_math"] += "ftz" in mods
        out["shuffles"] += ins.opcode == "shfl"
        out["bar_syncs"] += ins.opcode in ("bar", "barrier")
    for d in getattr(fn, "directives", ()):
        name, vals = getattr(d, "name", ""), getattr(d, "values", ())
        if name == "maxnreg" and vals:
            out["maxnreg"] = float(vals[0])
        if name == "minnctapersm" and vals:
            out["minnctapersm"] = float(vals[0])
    out["log_block"] = math.log2(max(1, kernel.launch.threads))
    return out
