"""Element-type facts shared by the host helpers (``workloads.dtypes``) and the fused CuPy kernels
(``workloads.fused``): widths, mantissa bits and the gate's poison NaNs. Plain constants, no imports, so both of
those modules can depend on this one without depending on each other.

Sources: IEEE 754 binary16 / binary32 (10 / 23 fraction bits) and bfloat16 (7 fraction bits, the upper half of
a binary32).
"""

from __future__ import annotations

ELEMENT_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
# Explicit mantissa (fraction) bits: the spacing of values in [2^e, 2^(e+1)) is 2^(e - bits).
MANTISSA_BITS: dict[str, int] = {"bf16": 7, "fp16": 10, "fp32": 23}

# NaNs with a payload no arithmetic produces (hardware and casts give canonical NaNs such as 0x7FFF / 0x7FC0):
# the first poison pattern the gate writes into outputs, so "never written" and "computed NaN" stay apart.
POISON_NAN_BITS: dict[str, int] = {"bf16": 0x7FA5, "fp16": 0x7DA5, "fp32": 0x7FA5A5A5}
