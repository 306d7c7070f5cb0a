"""On a GPU: the refill and row-patch kernels (evaluators/gpu/launch_prep.py) write what their numpy twins write,
bit for bit, for long rows (a CTA row of the grid each) and sector rows (a thread each, past the grid-y limit)."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.launch_prep import MAX_PATCH_ROWS, PERTURB_ALL, RowPatch, fill
from workloads.dtypes import bits_dtype

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def _bits(shape: tuple, kind: str, seed: int) -> np.ndarray:
    f = (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16) if kind == "bf16" else f.view(np.uint32)


@pytest.mark.parametrize("kind", ["bf16", "fp32"])
@pytest.mark.parametrize("layout", ["long", "sector"])
def test_row_patches_on_the_device_equal_the_numpy_path(cp, kind, layout):
    """draw (gather + perturb), put new, the write check of put old, and the undo, on both kernel forms."""
    sec = 32 // bits_dtype(kind).itemsize
    if layout == "long":
        host = _bits((300, 4096), kind, 1)
        rows, threshold = np.sort(np.random.default_rng(2).choice(300, 64, replace=False)), 1 << 28
    else:  # a sector patch of every row but one, more rows than a grid's y dimension holds
        host = _bits((MAX_PATCH_ROWS + 5000, sec), kind, 3)
        rows, threshold = np.delete(np.arange(host.shape[0], dtype=np.int64), 17), PERTURB_ALL
    dev = cp.asarray(host)
    want = RowPatch.draw(host.copy(), kind, rows, 11, np, threshold=threshold)
    got = RowPatch.draw(dev, kind, rows, 11, cp, threshold=threshold)
    assert np.array_equal(cp.asnumpy(got.old), want.old) and np.array_equal(cp.asnumpy(got.new), want.new)
    assert (want.new != want.old).any()
    got.put("new", cp)
    after_new = cp.asnumpy(dev)
    assert np.array_equal(after_new[rows], want.new) and np.array_equal(np.delete(after_new, rows, 0),
                                                                          np.delete(host, rows, 0))
    touched = cp.zeros(2, dtype=cp.uint32)
    got.put("old", cp, touched, 0)
    assert np.array_equal(cp.asnumpy(dev), host) and cp.asnumpy(touched).tolist() == [0, 0]
    got.put("new", cp)
    dev[int(rows[-1]), sec - 1] ^= 1  # a kernel wrote into the last changed row
    got.put("old", cp, touched, 1)
    assert np.array_equal(cp.asnumpy(dev), host) and cp.asnumpy(touched).tolist() == [0, 1]


@pytest.mark.parametrize("pattern", ["nan", "ones", "zeros", "random"])
def test_refills_on_the_device_equal_the_numpy_path(cp, pattern):
    host = np.zeros(4099 * 3, dtype=np.uint16)  # a tail of 6 bytes past the last 16-byte word
    fill(host, "bf16", pattern, 21, None, np)
    dev = cp.full(host.shape, 7, dtype=cp.uint16)
    fill(dev, "bf16", pattern, 21, None, cp)
    assert np.array_equal(cp.asnumpy(dev), host)
