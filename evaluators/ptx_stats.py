"""Counts over a kernel's PTX that the static cost model does not price but that can move GPU time a little
(cache and eviction hints, prefetches, approximate math, instruction count, launch directives): features of
the replay surrogate (``evaluators.replay``). Names follow the PTX ISA 9.0 opcodes and qualifiers."""

from __future__ import annotations

from typing import Any

from population.analysis import flat_instructions

STAT_NAMES = ("instructions", "global_loads", "global_stores", "nc_loads", "cs_accesses", "evict_hints",
              "prefetches", "approx_math", "ftz_math", "shuffles", "bar_syncs", "maxnreg", "minnctapersm",
              "log_block",
              # instruction mix by kind (static counts)
              "mov", "cvt", "bit_ops", "int_arith", "wide_int_arith", "fp_arith", "fp_fma", "fp_div_sqrt",
              "setp", "selp", "branches", "uniform_branches", "shared_loads", "shared_stores", "param_loads",
              "vector_loads", "vector_stores", "policy_loads", "cluster_ops", "cvta")
_BIT_OPS = frozenset(("and", "or", "xor", "not", "shl", "shr", "bfi", "bfe", "prmt", "lop3"))
_INT_ARITH = frozenset(("add", "sub", "mul", "mad", "min", "max", "neg", "abs"))
_FP_TYPES = frozenset(("f16", "f16x2", "bf16", "bf16x2", "f32", "f64"))


def ptx_stats(kernel: Any) -> dict[str, float]:
    """``STAT_NAMES`` -> count (float) for ``kernel``'s entry: instructions; global loads/stores; loads through
    the non-coherent path (``.nc``); accesses with ``.cs`` (streaming); eviction-priority hints (``.L1::evict_*``,
    ``.L2::evict_*``, ``.L2::cache_hint``); ``prefetch``; ``.approx`` and ``.ftz`` math; ``shfl``; ``bar``;
    ``.maxnreg`` and ``.minnctapersm`` values (0 when absent); log2 of the threads per block; then the
    instruction mix by kind (static counts, not weighted by loop trips): mov, cvt, bit operations, integer
    arithmetic (of which 64-bit or ``.wide``), floating-point add/mul/min/max, fma, div/rcp/sqrt/rsqrt, setp,
    selp, branches (of which ``.uni``), shared loads/stores, ``ld.param``, vector (``.v2/.v4/.v8``) loads and
    stores, accesses with an ``L2::cache_hint`` policy, cluster operations (``mapa``, ``barrier.cluster``), cvta.
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
        op = ins.opcode
        fp = any(m in _FP_TYPES for m in mods)
        out["mov"] += op == "mov"
        out["cvt"] += op == "cvt"
        out["cvta"] += op == "cvta"
        out["bit_ops"] += op in _BIT_OPS
        if op in _INT_ARITH and not fp:
            out["int_arith"] += 1
            out["wide_int_arith"] += "wide" in mods or any(m in ("s64", "u64") for m in mods)
        if op in ("add", "sub", "mul", "min", "max", "neg", "abs") and fp:
            out["fp_arith"] += 1
        out["fp_fma"] += op in ("fma", "mad") and fp
        out["fp_div_sqrt"] += op in ("div", "rcp", "sqrt", "rsqrt") and fp
        out["setp"] += op == "setp"
        out["selp"] += op == "selp"
        out["branches"] += op == "bra"
        out["uniform_branches"] += op == "bra" and "uni" in mods
        if op == "ld" and "shared" in mods:
            out["shared_loads"] += 1
        if op == "st" and "shared" in mods:
            out["shared_stores"] += 1
        out["param_loads"] += op == "ld" and "param" in ins.base_modifiers
        out["vector_loads"] += op == "ld" and any(m in ("v2", "v4", "v8") for m in mods)
        out["vector_stores"] += op == "st" and any(m in ("v2", "v4", "v8") for m in mods)
        out["policy_loads"] += op in ("ld", "st") and "L2::cache_hint" in mods
        out["cluster_ops"] += op in ("mapa", "getctarank") or (op == "barrier" and "cluster" in mods)
    for d in getattr(fn, "directives", ()):
        name, vals = getattr(d, "name", ""), getattr(d, "values", ())
        if name == "maxnreg" and vals:
            out["maxnreg"] = float(vals[0])
        if name == "minnctapersm" and vals:
            out["minnctapersm"] = float(vals[0])
    out["log_block"] = math.log2(max(1, kernel.launch.threads))
    return out
