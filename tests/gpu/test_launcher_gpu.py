"""archive.launcher on a GPU: the exported template seed launched through the manifest (CuPy, the workload's
launch rule) on torch tensors and through the torch custom op, compared with torch.nn.functional.rms_norm."""

from __future__ import annotations

import pytest

from archive.export import export_best
from archive.launcher import load
from archive.store import CandidateRow, Store
from evaluators.types import EvalResult, Status
from workloads.registry import get_workload


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    wl = get_workload("rmsnorm")
    d = tmp_path_factory.mktemp("run")
    with Store(d / "store.sqlite") as s:
        s.set_meta("config", {"workload": wl.spec(), "hardware": {"name": "h200", "arch": "sm_90"}})
        with s.transaction() as tx:
            tx.add_candidate(CandidateRow.from_eval(wl.seeds()[1], EvalResult(Status.OK, objective=1.0)))
        export_best(s, None, d / "best", arch="sm_90")
    return d / "best", wl


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 4096), (37, 1000), (1, 65536)])
def test_launch_matches_torch_rms_norm(exported, shape):
    import torch

    best, wl = exported
    k = load(best)
    m, n = shape
    g = torch.Generator(device="cuda").manual_seed(m * 7919 + n)
    x = torch.randn(m, n, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(n, device="cuda", generator=g) * 0.5 + 1.0
    y = k(x=x, w=w)["y"]
    torch.cuda.synchronize()
    ref = torch.nn.functional.rms_norm(x.double(), (n,), w.double(), eps=wl.eps)
    assert y.dtype == torch.bfloat16 and y.shape == (m, n)
    err = (y.double() - ref).abs()
    assert bool(torch.all(err <= 1e-2 + 1e-2 * ref.abs())), float(err.max())
    op = k.torch_op(f"test_rmsnorm_{m}_{n}")
    y2 = op(x, w)
    assert torch.equal(y2, y)  # the same kernel, deterministic


@pytest.mark.gpu
def test_launch_refuses_bad_buffers_on_the_gpu(exported):
    import torch

    from archive.launcher import BufferError

    k = load(exported[0])
    x = torch.randn(8, 64, device="cuda").to(torch.bfloat16)
    with pytest.raises(BufferError, match="buffer 'x': not contiguous"):
        k(x=x.t().contiguous().t(), w=torch.ones(64, device="cuda"))
    with pytest.raises(BufferError, match="buffer 'w': dtype bf16, the ABI needs fp32"):
        k(x=x, w=torch.ones(64, device="cuda", dtype=torch.bfloat16))
