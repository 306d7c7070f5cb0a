"""On a GPU: the refill, row-patch, sector-patch and in-place sector kernels (evaluators/gpu/launch_prep.py) write
what their numpy paths write, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.gpu.launch_prep import RowPatch, SectorPatch, fill, perturb_sectors
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
@pytest.mark.parametrize("layout", ["rows", "sectors"])
def test_patches_on_the_device_equal_the_numpy_path(cp, kind, layout):
    """draw (gather + perturb), put new, the write check of put old, and the undo: a row patch of 64 rows of
    4096 elements, and a sector patch of every row of 70000 but three (more rows than a grid's y dimension)."""
    if layout == "rows":
        host = _bits((300, 4096), kind, 1)
        where = np.sort(np.random.default_rng(2).choice(300, 64, replace=False))
        changed, patch = np.arange(len(where)), RowPatch  # old/new: a row per patch row
    else:
        host = _bits((70000, 128 // bits_dtype(kind).itemsize), kind, 3)
        where = np.array([0, 17, 69999])
        changed, patch = np.delete(np.arange(70000), where), SectorPatch
    want = patch.draw(after := host.copy(), kind, where, 11, np)
    want.put("new", np)
    dev = cp.asarray(host)
    got = patch.draw(dev, kind, where, 11, cp)
    assert np.array_equal(cp.asnumpy(got.old)[changed], want.old[changed])
    assert np.array_equal(cp.asnumpy(got.new)[changed], want.new[changed]) and (want.new != want.old).any()
    got.put("new", cp)
    assert np.array_equal(cp.asnumpy(dev), after)
    touched = cp.zeros(2, dtype=cp.uint32)
    got.put("old", cp, touched, 0)
    assert np.array_equal(cp.asnumpy(dev), host) and cp.asnumpy(touched).tolist() == [0, 0]
    got.put("new", cp)
    row, col = (int(v) for v in np.argwhere(after != host)[-1])
    dev[row, col] ^= 1  # a kernel wrote into a changed element
    got.put("old", cp, touched, 1)
    assert np.array_equal(cp.asnumpy(dev), host) and cp.asnumpy(touched).tolist() == [0, 1]


@pytest.mark.parametrize("pattern", ["nan", "ones", "zeros", "random"])
def test_refills_on_the_device_equal_the_numpy_path(cp, pattern):
    host = np.zeros(4099 * 3, dtype=np.uint16)  # a tail of 6 bytes past the last 16-byte word
    fill(host, "bf16", pattern, 21, None, np)
    dev = cp.full(host.shape, 7, dtype=cp.uint16)
    fill(dev, "bf16", pattern, 21, None, cp)
    assert np.array_equal(cp.asnumpy(dev), host)


@pytest.mark.parametrize("kind", ["bf16", "fp32"])
def test_in_place_sector_perturbation_on_the_device_equals_the_numpy_path(cp, kind):
    host = _bits((70000, 128 // bits_dtype(kind).itemsize), kind, 5)  # KDA's state rows: 128 fp32
    want = host.copy()
    perturb_sectors(want, kind, 33, np)
    dev = cp.asarray(host)
    perturb_sectors(dev, kind, 33, cp)
    assert np.array_equal(cp.asnumpy(dev), want) and not np.array_equal(want, host)
