"""Kernel argument packing from .param types."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.args import build_args, pack_scalar
from workloads.base import AbiMismatch
from workloads.rmsnorm import RMSNorm


def test_build_args_types_follow_params():
    wl = RMSNorm("bf16")
    args = build_args(wl.abi, ["u64", "u64", "u64", "u32", "s32", "f32"],
                      {"x": 0x7F0000001000, "w": 0x7F0000002000, "y": 0x7F0000003000},
                      wl.scalars((199, 1128)), entry="rmsnorm")
    assert [type(a) for a in args] == [np.uint64, np.uint64, np.uint64, np.uint32, np.int32, np.float32]
    assert int(args[0]) == 0x7F0000001000 and int(args[3]) == 199 and int(args[4]) == 1128
    assert args[5] == np.float32(1e-6) and args[5].nbytes == 4


def test_build_args_errors_name_the_param():
    wl = RMSNorm("bf16")
    bufs = {"x": 1, "w": 2, "y": 3}
    with pytest.raises(AbiMismatch, match=r"param 3 \(M\)"):
        build_args(wl.abi, ["u64", "u64", "u64", "f32", "u32", "f32"], bufs, wl.scalars((1, 1)))
    with pytest.raises(KeyError, match="no buffer 'y'"):
        build_args(wl.abi, ["u64"] * 3 + ["u32", "u32", "f32"], {"x": 1, "w": 2}, wl.scalars((1, 1)))
    with pytest.raises(TypeError, match="device array"):
        build_args(wl.abi, ["u64"] * 3 + ["u32", "u32", "f32"], {"x": "oops", "w": 2, "y": 3}, wl.scalars((1, 1)))


def test_pack_scalar_ranges():
    assert pack_scalar(-1, "s32") == np.int32(-1)
    with pytest.raises(ValueError, match=r"does not fit \.u32"):
        pack_scalar(-1, "u32")
    with pytest.raises(ValueError, match=r"does not fit \.s32"):
        pack_scalar(2**31, "s32")
    with pytest.raises(ValueError, match="not an integer"):
        pack_scalar(1.5, "u64")
    with pytest.raises(ValueError, match=r"unsupported \.param type \.pred"):
        pack_scalar(1, "pred")
    assert type(pack_scalar(2.5, "f64")) is np.float64
