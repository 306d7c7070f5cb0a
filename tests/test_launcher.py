"""archive.launcher on the CPU: the manifest an export writes (real ptxas cubin), buffer shape / dtype / device
checks against the workload ABI with clear errors, bucket dispatch, and the card's measured_against."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import torch

from archive.export import export_best
from archive.launcher import Bucket, BufferError, ManifestError, NoBucket, dtype_name, load, write_manifest
from archive.store import CandidateRow, Store
from evaluators.types import EvalResult, Status
from workloads.registry import get_workload


@pytest.fixture(scope="module")
def workload():
    return get_workload("rmsnorm")


@pytest.fixture(scope="module")
def best(workload, tmp_path_factory):
    """A run store with the template seed as its best row, exported."""
    d = tmp_path_factory.mktemp("run")
    seed = workload.seeds()[1]
    with Store(d / "store.sqlite") as s:
        s.set_meta("config", {"workload": workload.spec(), "hardware": {"name": "h200", "arch": "sm_90"}})
        s.set_meta("provenance", {"evaluator": "static", "estimate": True, "baseline": "naive_seed",
                                  "gate_version": None, "objective": "estimated speedup over naive_seed"})
        with s.transaction() as tx:
            tx.add_candidate(CandidateRow.from_eval(seed, EvalResult(Status.OK, objective=1.7)))
        export_best(s, None, d / "best")
    return d / "best"


def test_export_writes_manifest_launcher_and_measured_against(best):
    m = json.loads((best / "dispatch.json").read_text())
    assert m["dims"] == ["M", "N"] and m["entry"] == "rmsnorm"
    assert m["buffers"] == {"x": {"kind": "input", "shape": ["M", "N"], "dtype": "bf16"},
                            "w": {"kind": "input", "shape": ["N"], "dtype": "fp32"},
                            "y": {"kind": "output", "shape": ["M", "N"], "dtype": "bf16"}}
    (bucket,) = m["buckets"]
    assert bucket["cubin"] == "best.cubin" and bucket["when"] == {}
    assert bucket["param_types"] == ["u64", "u64", "u64", "u32", "u32", "f32"]
    assert (best / "best.cubin").read_bytes()[:4] == b"\x7fELF"
    assert (best / "launcher.py").read_text().startswith('"""The launcher of exported kernels')
    card = json.loads((best / "best.json").read_text())
    assert card["measured_against"]["estimate"] is True
    assert card["measured_against"]["kind"].startswith("ESTIMATE")
    assert card["measured_against"]["baseline"] == "naive_seed"
    assert m["measured_against"] == card["measured_against"]


def test_shape_and_dtype_checks(best):
    k = load(best)
    x = np.zeros((4, 8), dtype=ml_dtypes.bfloat16)
    w = np.ones(8, dtype=np.float32)
    assert k.shape_of({"x": x, "w": w}) == (4, 8)
    assert k.shape_of({"x": torch.zeros(3, 5, dtype=torch.bfloat16), "w": torch.ones(5)}) == (3, 5)
    cases = [
        ({"x": x.astype(np.float32), "w": w}, "buffer 'x': dtype fp32, the ABI needs bf16"),
        ({"x": x, "w": np.ones(9, np.float32)}, r"buffer 'w' axis 0: size 9, but N = 8 from x\.shape\[1\]"),
        ({"x": x[0], "w": w}, r"buffer 'x': 1 dimension\(s\) \(8,\), the ABI needs 2 \(M, N\)"),
        ({"x": x}, r"missing input buffer\(s\) \['w'\]"),
        ({"x": x, "w": w, "z": w}, r"unknown buffer\(s\) \['z'\]"),
        ({"x": x, "w": w, "y": np.zeros((4, 8), np.float16)}, "buffer 'y': dtype fp16, the ABI needs bf16"),
        ({"x": [[1.0]], "w": w}, "buffer 'x': list with dtype None is not a bf16 array"),
    ]
    for bufs, msg in cases:
        with pytest.raises(BufferError, match=msg):
            k.shape_of(bufs)


def test_cpu_tensors_are_refused_before_any_gpu_work(best):
    k = load(best)
    with pytest.raises(BufferError, match="buffer 'x': a cpu tensor; the kernel needs a CUDA tensor"):
        k(x=torch.zeros(2, 4, dtype=torch.bfloat16), w=torch.ones(4))


def test_bucket_dispatch(best, workload, tmp_path):
    for name in ("small.cubin", "large.cubin"):
        (tmp_path / name).write_bytes((best / "best.cubin").read_bytes())
    launch = json.loads((best / "dispatch.json").read_text())["buckets"][0]["launch"]
    types = ["u64", "u64", "u64", "u32", "u32", "f32"]
    write_manifest(tmp_path, workload, [Bucket("small", "small.cubin", launch, types, {"N": (None, 1024)}),
                                        Bucket("large", "large.cubin", launch, types, {"N": (1025, 65536)})])
    k = load(tmp_path)
    assert k.bucket_for((4, 512)).name == "small" and k.bucket_for((4, 1024)).name == "small"
    assert k.bucket_for((4, 4096)).name == "large"
    with pytest.raises(NoBucket, match=r"no bucket serves shape \{'M': 4, 'N': 70000\}"):
        k.bucket_for((4, 70000))


def test_bad_manifests(best, tmp_path):
    with pytest.raises(ManifestError, match="cannot read the manifest"):
        load(tmp_path)
    m = json.loads((best / "dispatch.json").read_text())
    (tmp_path / "dispatch.json").write_text(json.dumps(m))  # its cubin is not next to it
    with pytest.raises(ManifestError, match=r"bucket 'best': cubin file .*best.cubin is missing"):
        load(tmp_path)
    (tmp_path / "dispatch.json").write_text(json.dumps({**m, "format": 99}))
    with pytest.raises(ManifestError, match="format 99, this launcher reads 1"):
        load(tmp_path)
    with pytest.raises(ManifestError, match=r"cubin missing.cubin is not in"):
        write_manifest(tmp_path, get_workload("rmsnorm"), [Bucket("b", "missing.cubin", {}, [])])


def test_dtype_names():
    assert [dtype_name(t) for t in (torch.bfloat16, torch.float16, torch.float32, np.dtype(ml_dtypes.bfloat16),
                                    np.float32, np.dtype("uint16"))] == ["bf16", "fp16", "fp32", "bf16", "fp32",
                                                                         "uint16"]
    with pytest.raises(ValueError, match="no workload dtype name"):
        dtype_name(torch.complex64)


def test_torch_op_registers_with_a_fake_implementation(best):
    op = load(best).torch_op("cpu_test_rmsnorm")
    x = torch.empty(5, 96, dtype=torch.bfloat16, device="meta")
    y = op(x, torch.empty(96, device="meta"))
    assert (y.shape, y.dtype, y.device.type) == ((5, 96), torch.bfloat16, "meta")
    assert torch.ops.ptxforge.cpu_test_rmsnorm.default._schema.arguments[0].name == "x"
