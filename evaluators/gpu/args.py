"""Kernel argument tuples built from the entry's ``.param`` types.

CuPy packs a Python ``int`` or ``float`` as 64 bits; a ``.u32``/``.f32`` parameter then reads the wrong bytes.
Every argument is therefore converted to the numpy scalar of its declared PTX type (PTX ISA §5.2.2, "Fundamental
Types"), and buffers to their 64-bit device address.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workloads.base import POINTER_TYPES, ParamSpec, check_abi

# PTX fundamental type -> numpy scalar type of the same width and kind.
PTX_TO_NUMPY: dict[str, type[np.generic]] = {
    "u8": np.uint8, "s8": np.int8, "b8": np.uint8,
    "u16": np.uint16, "s16": np.int16, "b16": np.uint16, "f16": np.float16,
    "u32": np.uint32, "s32": np.int32, "b32": np.uint32, "f32": np.float32,
    "u64": np.uint64, "s64": np.int64, "b64": np.uint64, "f64": np.float64,
}


def param_types(kernel_or_module: Any, entry: str | None = None) -> list[str]:
    """The ``.param`` types (``["u64", ..., "f32"]``) of ``entry`` in a Kernel or Module, in order.

    Raises KeyError if the entry is absent, ValueError for an array parameter (``.b8 p[16]``: by-value
    structs are outside the workload ABIs).
    """
    module = getattr(kernel_or_module, "module", kernel_or_module)
    name = entry or kernel_or_module.entry
    fn = module.function(name)
    out = []
    for p in fn.params:
        if p.dims:
            raise ValueError(f"entry {name!r} param {p.name!r} is an array ({p.type}{list(p.dims)}); "
                             "only scalar and pointer parameters are supported")
        out.append(p.type)
    return out


def device_pointer(buf: Any) -> int:
    """The device address of a CuPy array (``.data.ptr``) or an int already holding one."""
    if isinstance(buf, (int, np.integer)):
        return int(buf)
    try:
        return int(buf.data.ptr)
    except AttributeError:
        raise TypeError(f"expected a device array or an address, got {type(buf).__name__}") from None


def pack_scalar(value: int | float, ptx_type: str, where: str = "argument") -> np.generic:
    """``value`` as the numpy scalar of ``ptx_type``. ValueError if the type is unknown or the value does not
    fit (an int out of range, a float for an integer type)."""
    if ptx_type not in PTX_TO_NUMPY:
        raise ValueError(f"{where}: unsupported .param type .{ptx_type}")
    t = PTX_TO_NUMPY[ptx_type]
    if np.issubdtype(t, np.integer):
        if isinstance(value, float) and not float(value).is_integer():
            raise ValueError(f"{where}: {value!r} is not an integer but the parameter is .{ptx_type}")
        info = np.iinfo(t)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"{where}: {value} does not fit .{ptx_type} [{info.min}, {info.max}]")
        return t(int(value))
    return t(value)


def build_args(abi: tuple[ParamSpec, ...], types: list[str], buffers: Mapping[str, Any],
               scalars: Mapping[str, int | float], entry: str = "kernel") -> tuple[np.generic, ...]:
    """The argument tuple for one launch.

    abi: the workload's ParamSpecs; types: the entry's ``.param`` types (checked against the ABI, AbiMismatch
    otherwise); buffers: name -> device array or address for input/output params; scalars: name -> value.
    Pointers become numpy.uint64 (or int64 for ``.s64``), scalars the numpy type of their declared ``.param``.
    KeyError names a missing buffer or scalar.
    """
    check_abi(abi, types, entry)
    args: list[np.generic] = []
    for i, (spec, t) in enumerate(zip(abi, types)):
        where = f"entry {entry!r} param {i} ({spec.name})"
        if spec.kind == "scalar":
            if spec.name not in scalars:
                raise KeyError(f"{where}: no value for scalar {spec.name!r}; have {sorted(scalars)}")
            args.append(pack_scalar(scalars[spec.name], t, where))
        else:
            if spec.name not in buffers:
                raise KeyError(f"{where}: no buffer {spec.name!r}; have {sorted(buffers)}")
            assert t in POINTER_TYPES  # check_abi guarantees it
            args.append(pack_scalar(device_pointer(buffers[spec.name]), "u64" if t != "s64" else "s64", where))
    return tuple(args)


# CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuda.h): the attribute that raises a kernel's dynamic shared
# memory above the default per-block limit (CUDA C++ Programming Guide, "Shared Memory").
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


def launch_function(fn: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple, smem: int,
                    stream: Any = None) -> None:
    """Launch the CuPy ``Function`` ``fn`` with ``smem`` bytes of dynamic shared memory on ``stream`` (None: the
    current one), opting in first when ``smem`` exceeds the default per-block limit
    (``targets.occupancy.DeviceProps.shared_mem_per_block``, 48 KiB; without the opt-in the driver refuses the
    launch with CUDA_ERROR_INVALID_VALUE). The one launch path of the worker, the sanitizer's replay, ncu's
    replay and the exported launcher. Raises whatever CuPy raises for a refused launch."""
    from targets.occupancy import DeviceProps

    if smem > DeviceProps.shared_mem_per_block:
        import cupy as cp

        cp.cuda.driver.funcSetAttribute(fn.ptr, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    fn(grid, block, args, shared_mem=smem, stream=stream)
