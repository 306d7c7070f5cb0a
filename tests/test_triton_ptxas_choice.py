"""Which ptxas Triton assembles a seed with (workloads.triton_seed.choose_ptxas), with the real binaries installed
here: Triton 3.9's bundled ``bin/ptxas`` (CUDA 12.9, PTX ISA 8.8) stands in for Triton 3.6's (12.8, 8.7), which
failed on the ``.version 9.0`` PTX the seeds are compiled at ("Unsupported .version 9.0; current version is
'8.7'", H200, 2026-12-01)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import triton

from evaluators.toolchain import find_ptxas, ptx_isa_version
from workloads.triton_kernels import rmsnorm_fwd
from workloads.triton_seed import (
    TRITON_PTXAS_ENV,
    TritonSeedError,
    choose_ptxas,
    compile_triton,
    triton_arch,
    triton_ptxas,
)

OLD = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"  # Triton's pre-Blackwell ptxas


@pytest.fixture(scope="module")
def old_ptxas() -> Path:
    isa = ptx_isa_version(OLD) if OLD.is_file() else None
    if isa is None or isa >= ptx_isa_version(find_ptxas()):
        pytest.skip(f"{OLD} is not older than the project's ptxas")
    return OLD


def test_triton_arch_names_the_a_targets_from_sm90():
    assert (triton_arch(80), triton_arch(90), triton_arch(100)) == ("sm_80", "sm_90a", "sm_100a")


def test_tritons_own_ptxas_is_kept_when_it_reads_the_version(old_ptxas):
    major, minor = ptx_isa_version(old_ptxas)
    assert choose_ptxas(10 * major + minor, "sm_90a", [old_ptxas, find_ptxas()]) == old_ptxas


def test_a_newer_ptxas_is_chosen_when_tritons_own_is_too_old(old_ptxas):
    major, minor = ptx_isa_version(find_ptxas())
    assert choose_ptxas(10 * major + minor, "sm_90a", [None, old_ptxas, find_ptxas()]) == find_ptxas()


def test_no_ptxas_for_the_version_or_target_names_every_one_tried(old_ptxas):
    with pytest.raises(TritonSeedError) as e:
        choose_ptxas(999, "sm_90a", [old_ptxas, find_ptxas()])
    assert "PTX 99.9" in str(e.value) and str(old_ptxas) in str(e.value) and "reads PTX 8." in str(e.value)
    with pytest.raises(TritonSeedError, match="no sm_12345"):
        choose_ptxas(80, "sm_12345", [find_ptxas()])


def test_the_ptxas_environment_is_restored_after_the_compile(monkeypatch):
    monkeypatch.setenv(TRITON_PTXAS_ENV[0], "/before")
    monkeypatch.delenv(TRITON_PTXAS_ENV[1], raising=False)
    with triton_ptxas(Path("/x/ptxas")):
        assert [os.environ[k] for k in TRITON_PTXAS_ENV] == ["/x/ptxas", "/x/ptxas"]
    assert os.environ[TRITON_PTXAS_ENV[0]] == "/before" and TRITON_PTXAS_ENV[1] not in os.environ


def test_triton_compiles_ptx_9_0_when_its_own_ptxas_reads_only_8_x(old_ptxas, monkeypatch, tmp_path):
    """Triton pointed at the old ptxas (as Triton 3.6 is by default) and asked for PTX 9.0: the compile runs
    with the project's ptxas and says so."""
    for k in TRITON_PTXAS_ENV:
        monkeypatch.setenv(k, str(old_ptxas))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    out = compile_triton(rmsnorm_fwd, {"x_ptr": "*bf16", "w_ptr": "*fp32", "y_ptr": "*bf16", "M": "i32",
                                       "N": "i32", "eps": "fp32", "stride": "i32"}, {"BLOCK": 1024},
                         num_warps=4, ptx_version=90)
    assert ".version 9.0" in out.ptx and out.cubin[:4] == b"\x7fELF"
    assert out.ptxas.startswith(str(find_ptxas())) and "V13." in out.ptxas
    assert [os.environ[k] for k in TRITON_PTXAS_ENV] == [str(old_ptxas)] * 2
