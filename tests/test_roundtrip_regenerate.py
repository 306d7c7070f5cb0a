"""scripts/gen_corpus.py regenerates the committed PTX from the CUDA sources (when nvcc is present)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gen_corpus  # noqa: E402


def test_relative_file_names() -> None:
    assert gen_corpus.relative_file_name("/work/x/tests/data/a.cu", "a.cu") == "a.cu"
    assert gen_corpus.relative_file_name("/usr/local/cuda/include/crt/sm_70_rt.hpp", "a.cu") == "cuda/include/crt/sm_70_rt.hpp"
    assert gen_corpus.relative_file_name(
        "/x/site-packages/nvidia/cu13/include/cuda_bf16.hpp", "a.cu") == "cuda/include/cuda_bf16.hpp"


def test_arch_marker() -> None:
    assert gen_corpus.arch_of("// ptxforge-arch: sm_90a\n__global__ void k() {}") == "sm_90a"
    assert gen_corpus.arch_of("__global__ void k() {}") == "sm_90"


def test_flags_marker() -> None:
    assert gen_corpus.flags_of("// ptxforge-nvcc-flags: -G\n") == ["-G"]
    assert gen_corpus.flags_of("__global__ void k() {}") == ["-lineinfo"]


def test_check_ignores_what_depends_on_the_checkout_path() -> None:
    def b8(s: bytes) -> str:  # .debug_str bytes as nvcc prints them, 8 a line
        return "\n".join(".b8 " + ",".join(str(c) for c in s[i : i + 8]) for i in range(0, len(s), 8))

    a = b8(b"_ZN42_INTERNAL_1728e86a_14_x_cu\x00/work/main/tests/data\x00")
    b = b8(b"_ZN42_INTERNAL_c92115c3_14_x_cu\x00/tmp/a/longer/checkout/tests/data\x00")
    assert a != b and gen_corpus.path_independent(a) == gen_corpus.path_independent(b)
    c = b8(b"_ZN42_INTERNAL_1728e86a_14_y_cu\x00/work/main/tests/data\x00")
    assert gen_corpus.path_independent(a) != gen_corpus.path_independent(c)


def test_committed_ptx_is_what_nvcc_emits() -> None:
    try:
        gen_corpus.find_nvcc()
    except FileNotFoundError as e:
        pytest.skip(f"no nvcc: {e}")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_corpus.py"), "--check", "elementwise.cu",
                           "wgmma_sm90a.cu"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["ok    elementwise.ptx", "ok    wgmma_sm90a.ptx"]
