"""Values that are the same for every thread of a launch: kernel parameters, immediates and what is computed
from them alone. The static traffic model uses them to decide branches that depend only on the problem
(``N < 520``: keep the row in registers or re-read it; ``N % 8 == 0``: the vector path) and to count loops
whose trip count is a constant or a function of the parameters (a ``row_iters`` row loop).

A register has a uniform value when it has exactly one definition and that definition is one of the opcodes
below over uniform operands (PTX ISA 9.0, "Integer Arithmetic", "Logic and Shift", "Comparison and Selection",
"Data Movement and Conversion"): ``ld.param``, ``mov``, ``cvt``, ``cvta``, ``add``, ``sub``, ``mul``
(``.lo``/``.wide``), ``mad.lo``/``mad.wide``, ``div``, ``rem``, ``min``, ``max``, ``neg``, ``abs``, ``and``,
``or``, ``xor``, ``not``, ``shl``, ``shr``, ``selp`` and ``setp`` (predicates are Python bools). Special
registers (``%tid``, ``%ctaid``, ...) and registers written more than once are not uniform (None).
Integers are Python ints wrapped to the instruction's type width (``.s32`` signed, ``.u32`` unsigned ...).

Pointer parameters get ``POINTER_BASE``, a 4 KiB-aligned address (cudaMalloc returns 256-byte aligned
buffers, CUDA C Programming Guide "Device Memory Accesses"), so alignment tests take the aligned branch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from population.analysis import destinations
from population.ast import Address, Function, Immediate, Instruction, Register, Symbol

POINTER_BASE = 1 << 32  # an aligned device address for every pointer parameter
_MAX_DEPTH = 64

Value = int | float | bool


def _type_of(ins: Instruction) -> str | None:
    for m in reversed(ins.modifiers):
        if (m[:1] in ("s", "u", "b", "f", "p") and m[1:].isdigit()) or m == "pred":
            return m
    return None


def _wrap(v: Value, typ: str | None) -> Value:
    if isinstance(v, bool) or not isinstance(v, int) or typ is None or typ == "pred" or typ[0] == "f":
        return v
    bits = int(typ[1:])
    v &= (1 << bits) - 1
    if typ[0] == "s" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
    "ge": operator.ge, "lo": operator.lt, "ls": operator.le, "hi": operator.gt, "hs": operator.ge,
}


class UniformValues:
    """Uniform values of one function's registers given its parameter values.

    fn: the entry; params: parameter name -> value (ints for integer parameters, floats for ``.f32``/``.f64``);
    parameters of pointer type absent from ``params`` get ``POINTER_BASE``. ``value(reg)`` returns the
    register's value or None when it is not uniform (or not computable here). Never raises for odd PTX.
    """

    def __init__(self, fn: Function, params: Mapping[str, Value], defs: Mapping[str, list[Instruction]]
                 | None = None) -> None:
        self.fn = fn
        self.params: dict[str, Value] = {}
        for p in fn.params:
            if p.name in params:
                self.params[p.name] = params[p.name]
            elif p.type in ("u64", "b64", "s64"):
                self.params[p.name] = POINTER_BASE
        self.defs = defs if defs is not None else _defs(fn)
        self._memo: dict[str, Value | None] = {}

    def value(self, reg: str, depth: int = 0) -> Value | None:
        """The uniform value of register ``reg`` (None when not uniform)."""
        if reg in self._memo:
            return self._memo[reg]
        d = self.defs.get(reg, [])
        v = None
        if len(d) == 1 and depth < _MAX_DEPTH and d[0].predicate is None:
            try:
                v = self._eval(d[0], depth)
            except (ArithmeticError, ValueError, TypeError, IndexError):
                v = None
        self._memo[reg] = v
        return v

    def operand(self, op: Any, depth: int = 0) -> Value | None:
        """The value of an operand: an immediate, a uniform register, or a parameter symbol."""
        if isinstance(op, Immediate):
            return op.value
        if isinstance(op, Register):
            return self.value(op.name, depth + 1)
        if isinstance(op, Symbol):
            return self.params.get(op.name)
        return None

    def _eval(self, ins: Instruction, depth: int) -> Value | None:
        op, mods = ins.opcode, ins.modifiers
        typ = _type_of(ins)
        srcs = ins.operands[1:]
        if op == "ld":
            if "param" not in ins.base_modifiers:
                return None
            a = srcs[0] if srcs else None
            if isinstance(a, Address) and isinstance(a.base, Symbol) and not a.offset:
                return self.params.get(a.base.name)
            return None
        vals = [self.operand(s, depth) for s in srcs]
        if any(v is None for v in vals):
            return None
        if op in ("mov", "cvta"):
            return vals[0] if len(vals) == 1 else None
        if op == "cvt":
            v = vals[0]
            dst = mods[-2] if len(mods) >= 2 else typ
            if isinstance(v, float) and dst and dst[0] in "su":
                v = int(v)
            elif isinstance(v, int) and dst and dst[0] == "f":
                v = float(v)
            return _wrap(v, dst)
        if op == "setp":
            cmp = next((m for m in mods if m in _CMP), None)
            if cmp is None or len(vals) < 2:
                return None
            t = next((m for m in mods if m[:1] in "sufb" and m[1:].isdigit()), None)
            a, b = (_wrap(vals[0], "u" + t[1:]), _wrap(vals[1], "u" + t[1:])) if t and t[0] in "ub" else (vals[0],
                                                                                                    vals[1])
            r = _CMP[cmp](a, b)
            if len(vals) >= 3 and isinstance(vals[2], bool):  # setp.cmp.bool-op d, a, b, c
                comb = next((m for m in mods if m in ("and", "or", "xor")), None)
                if comb == "and":
                    r = r and vals[2]
                elif comb == "or":
                    r = r or vals[2]
                elif comb == "xor":
                    r = r != vals[2]
            return r
        if op == "selp":
            return vals[0] if vals[2] else vals[1]
        if op == "not":
            return (not vals[0]) if isinstance(vals[0], bool) else _wrap(~vals[0], typ)
        if op in ("neg", "abs"):
            return _wrap(-vals[0] if op == "neg" else abs(vals[0]), typ)
        if len(vals) < 2:
            return None
        a, b = vals[0], vals[1]
        if isinstance(a, bool) or isinstance(b, bool):
            if op == "and":
                return bool(a) and bool(b)
            if op == "or":
                return bool(a) or bool(b)
            if op == "xor":
                return bool(a) != bool(b)
            return None
        float_op = typ is not None and typ[0] == "f"
        if op == "add":
            r = a + b
        elif op == "sub":
            r = a - b
        elif op == "mul":
            r = a * b
            if "hi" in mods:
                return None
            if "wide" in mods and typ:
                typ = typ[0] + str(2 * int(typ[1:]))
        elif op == "mad":
            if len(vals) < 3 or "hi" in mods:
                return None
            r = a * b + vals[2]
            if "wide" in mods and typ:
                typ = typ[0] + str(2 * int(typ[1:]))
        elif op == "div":
            r = a / b if float_op else int(a / b) if b else None
        elif op == "rem":
            r = int(a - b * int(a / b)) if b else None
        elif op == "min":
            r = min(a, b)
        elif op == "max":
            r = max(a, b)
        elif op == "and":
            r = int(a) & int(b)
        elif op == "or":
            r = int(a) | int(b)
        elif op == "xor":
            r = int(a) ^ int(b)
        elif op == "shl":
            r = int(a) << int(b)
        elif op == "shr":
            if typ and typ[0] in "ub":
                bits = int(typ[1:])
                r = (int(a) & ((1 << bits) - 1)) >> int(b)
            else:
                r = int(a) >> int(b)
        else:
            return None
        return None if r is None else _wrap(r, typ)


def _defs(fn: Function) -> dict[str, list[Instruction]]:
    from population.analysis import flat_instructions

    out: dict[str, list[Instruction]] = {}
    for ins in flat_instructions(fn):
        for r in destinations(ins):
            out.setdefault(r, []).append(ins)
    return out


def param_values(fn: Function, abi: Any, scalars: Mapping[str, Value]) -> dict[str, Value]:
    """Map a workload's scalar values (ABI name -> value, ``Workload.scalars(shape)``) onto the entry's
    ``.param`` names by ABI position. abi: the workload's ``ParamSpec`` tuple (None: no mapping, empty dict)."""
    if not abi:
        return {}
    out: dict[str, Value] = {}
    for spec, p in zip(abi, fn.params):
        if spec.kind == "scalar" and spec.name in scalars:
            v = scalars[spec.name]
            out[p.name] = float(v) if p.type.startswith("f") else int(v)
    return out
