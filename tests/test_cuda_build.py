"""workloads.cuda_build: the PTX cache key covers every file a seed includes, in any folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.cuda_build import build_ptx


def test_cache_key_follows_includes_across_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source including a header of another folder, which includes a second one: editing the inner header
    rebuilds (the cached PTX of the old header is not returned); an unchanged tree hits the cache."""
    monkeypatch.setenv("PTXFORGE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "inc").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "inc" / "outer.cuh").write_text('#include "inner.cuh"\n')
    inner = tmp_path / "inc" / "inner.cuh"
    inner.write_text("#define SCALE 3.0f\n")
    src = tmp_path / "src" / "k.cu"
    src.write_text('#include "../inc/outer.cuh"\n'
                   'extern "C" __global__ void k(float *x) { x[threadIdx.x] *= SCALE; }\n')
    first = build_ptx(src)
    assert "0f40400000" in first  # 3.0f
    assert len(list((tmp_path / "cache" / "seeds").glob("k-*.ptx"))) == 1
    assert build_ptx(src) == first and len(list((tmp_path / "cache" / "seeds").glob("k-*.ptx"))) == 1
    inner.write_text("#define SCALE 5.0f\n")
    second = build_ptx(src)
    assert "0f40A00000" in second and "0f40400000" not in second  # 5.0f, rebuilt
    assert len(list((tmp_path / "cache" / "seeds").glob("k-*.ptx"))) == 2
