"""ptxas toolchain: locating the tools, compiling, the -v report, errors with lines, caching, verify-only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from evaluators import toolchain
from evaluators.toolchain import (
    ToolchainNotFound,
    clear_cache,
    compile_ptx,
    cubin_sections,
    find_nvcc,
    find_ptxas,
    parse_diagnostics,
    parse_resources,
)
from evaluators.types import CompileError

KERNEL = """\
.version 9.0
.target sm_90
.address_size 64

.visible .entry scale(
	.param .u64 scale_param_0,
	.param .u64 scale_param_1,
	.param .u32 scale_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<8>;
	.shared .align 4 .b8 tile[1024];

	ld.param.u64 	%rd1, [scale_param_0];
	ld.param.u64 	%rd2, [scale_param_1];
	ld.param.u32 	%r2, [scale_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd3, %rd1;
	mul.wide.s32 	%rd4, %r1, 4;
	add.s64 	%rd5, %rd3, %rd4;
	ld.global.f32 	%f1, [%rd5];
	st.shared.f32 	[tile], %f1;
	bar.sync 	0;
	ld.shared.f32 	%f2, [tile+4];
	cvta.to.global.u64 	%rd6, %rd2;
	add.s64 	%rd7, %rd6, %rd4;
	st.global.f32 	[%rd7], %f2;
$L__BB0_2:
	ret;

}
"""

NVCC_SPILL_LOG = """\
ptxas info    : Overriding maximum register limit 256 for '_Z2spPK6float4Pf' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z2spPK6float4Pf' for 'sm_90'
ptxas info    : Function properties for _Z2spPK6float4Pf
    72 bytes stack frame, 72 bytes spill stores, 80 bytes spill loads
ptxas info    : Used 24 registers, used 4 barriers, 96 bytes cumulative stack size, 1024 bytes smem
ptxas info    : Compile time = 7.020 ms
ptxas info    : Function properties for _Z1ff
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'other' for 'sm_90'
ptxas info    : Function properties for other
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 368 bytes cmem[0]
"""


def test_find_tools_on_path():
    ptxas = find_ptxas()
    assert ptxas.name == "ptxas" and os.access(ptxas, os.X_OK)
    assert find_nvcc().name == "nvcc"
    assert "release 13.0" in toolchain.ptxas_version(ptxas)


def test_find_ptxas_falls_back_to_cuda_home_then_wheel(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    fake_home = tmp_path / "cuda"
    (fake_home / "bin").mkdir(parents=True)
    fake = fake_home / "bin" / "ptxas"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(fake_home))
    assert find_ptxas() == fake
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    wheel_dirs = toolchain._wheel_bin_dirs()
    if wheel_dirs and (wheel_dirs[0] / "ptxas").exists():
        assert find_ptxas() == wheel_dirs[0] / "ptxas"
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(ToolchainNotFound) as info:
        find_ptxas()
    msg = str(info.value)
    assert "PATH" in msg and "$CUDA_HOME (unset)" in msg and "nvidia-cuda-nvcc" in msg


def test_compile_reports_resources_and_cubin():
    clear_cache()
    res = compile_ptx(KERNEL)
    assert not res.cached
    assert res.cubin[:4] == b"\x7fELF"
    ru = res.resources["scale"]
    assert ru.arch == "sm_90"
    assert 6 <= ru.registers <= 16
    assert ru.shared_static_bytes == 1024
    assert ru.barriers == 1
    assert ru.spill_stores_bytes == ru.spill_loads_bytes == ru.stack_frame_bytes == 0
    # bank 0: the 0x210-byte driver area on sm_90 plus 20 bytes of parameters (8 + 8 + 4).
    assert ru.constant_bytes == 0x210 + 20
    sections = cubin_sections(res.cubin)
    assert ".text.scale" in sections and sections[".nv.constant0.scale"] == ru.constant_bytes
    again = compile_ptx(KERNEL)
    assert again.cached and again.cubin == res.cubin and again.resources == res.resources


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_other_targets(arch):
    res = compile_ptx(KERNEL, arch=arch)
    assert res.resources["scale"].arch == arch
    assert res.resources["scale"].shared_static_bytes == 1024


def _live_values_ptx(live: int) -> str:
    """An entry that keeps ``live`` volatile-loaded floats live at once (consumed last-loaded-first)."""
    body = [f"\tld.volatile.global.f32 \t%f{i}, [%rd1+{4 * i}];" for i in range(live)]
    body += [f"\tfma.rn.f32 \t%f{live - 1}, %f{live - 1}, %f{live - 1}, %f{i};" for i in range(live - 2, -1, -1)]
    return "\n".join([
        ".version 9.0", ".target sm_90", ".address_size 64",
        ".visible .entry live(.param .u64 p)", "{", f"\t.reg .f32 \t%f<{live}>;", "\t.reg .b64 \t%rd<2>;",
        "\tld.param.u64 \t%rd1, [p];", *body, f"\tst.global.f32 \t[%rd1], %f{live - 1};", "\tret;", "}", ""])


def test_max_registers_forces_spills():
    free = compile_ptx(_live_values_ptx(60)).resources["live"]
    assert free.registers >= 60 and free.spill_stores_bytes == 0
    capped = compile_ptx(_live_values_ptx(60), max_registers=32).resources["live"]
    assert capped.registers <= 32
    assert capped.spill_stores_bytes > 0 and capped.spill_loads_bytes > 0
    assert capped.stack_frame_bytes >= capped.spill_stores_bytes


def test_parse_resources_field_by_field():
    out = parse_resources(NVCC_SPILL_LOG, "sm_90")
    assert set(out) == {"_Z2spPK6float4Pf", "other"}
    sp = out["_Z2spPK6float4Pf"]
    assert (sp.registers, sp.barriers, sp.spill_stores_bytes, sp.spill_loads_bytes) == (24, 4, 72, 80)
    assert sp.stack_frame_bytes == 96  # the cumulative stack size exceeds the own frame
    assert sp.shared_static_bytes == 1024
    other = out["other"]
    assert (other.registers, other.barriers, other.constant_bytes) == (10, 1, 368)
    with pytest.raises(ValueError, match="before any entry"):
        parse_resources("ptxas info    : Used 3 registers", "sm_90")


def test_compile_error_names_line_and_statement():
    bad = KERNEL.replace("mad.lo.s32 \t%r1", "mad.lo.q32 \t%r1")
    lineno = bad.splitlines().index("\tmad.lo.q32 \t%r1, %r3, %r4, %r5;") + 1
    with pytest.raises(CompileError) as info:
        compile_ptx(bad)
    err = info.value
    assert err.line == lineno
    assert ".q32" in err.message
    assert err.statement == "mad.lo.q32 \t%r1, %r3, %r4, %r5;"
    assert "module.ptx" in err.log and "/tmp" not in err.log
    assert str(err).startswith(f"line {lineno}: ")
    # The failure is cached: the second call raises the same error without running ptxas.
    with pytest.raises(CompileError) as again:
        compile_ptx(bad)
    assert again.value.line == lineno


def test_undeclared_register_and_fatal_without_line():
    with pytest.raises(CompileError) as info:
        compile_ptx(KERNEL.replace("%r4, %ntid.x", "%r99, %ntid.x"))
    assert info.value.line is not None and "%r99" in info.value.message
    with pytest.raises(CompileError) as fatal:
        compile_ptx(KERNEL, arch="sm_80")  # .target sm_90 cannot be compiled for an older SM
    assert fatal.value.line is None and "SM version" in fatal.value.message


def test_verify_only_accepts_and_rejects_without_codegen():
    res = compile_ptx(KERNEL, verify_only=True)
    assert res.verify_only and res.cubin == b"" and res.resources == {}
    with pytest.raises(CompileError) as info:
        compile_ptx(KERNEL.replace("ld.global.f32", "ld.global.f33"), verify_only=True)
    assert info.value.line is not None


def test_disk_cache_round_trip(tmp_path):
    clear_cache()
    first = compile_ptx(KERNEL, cache_dir=tmp_path)
    assert not first.cached
    files = sorted(p.suffix for p in tmp_path.rglob("*") if p.is_file())
    assert files == [".cubin", ".json"]
    clear_cache()
    second = compile_ptx(KERNEL, cache_dir=tmp_path)
    assert second.cached and second.cubin == first.cubin and second.resources == first.resources


def test_bad_arguments():
    with pytest.raises(ValueError, match="arch must look like"):
        compile_ptx(KERNEL, arch="hopper")
    with pytest.raises(ValueError, match="max_registers"):
        compile_ptx(KERNEL, max_registers=8)
    with pytest.raises(TypeError, match="PTX text, a Module or a Kernel"):
        compile_ptx(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not an ELF"):
        cubin_sections(b"not a cubin" * 10)


def test_parse_diagnostics():
    log = ("ptxas module.ptx, line 30; error   : Unknown modifier '.foo32'\n"
           "ptxas module.ptx, line 31; warning : Unused thing\n"
           "ptxas fatal   : Ptx assembly aborted due to errors\n")
    d = parse_diagnostics(log)
    assert [(x.severity, x.line) for x in d] == [("error", 30), ("warning", 31), ("fatal", None)]
    assert d[0].message == "Unknown modifier '.foo32'"


def test_cubin_loads_without_cuobjdump(tmp_path: Path):
    # The cubin is a self-contained ELF image: every entry's code section is present.
    res = compile_ptx(KERNEL)
    assert cubin_sections(res.cubin)[".text.scale"] > 0


def test_compile_error_maps_to_the_ast_node():
    from population.kernel import Kernel
    from population.parser import parse_module
    from population.printer import listing, print_module

    module = parse_module(KERNEL.replace("mad.lo.s32", "mad.lo.q32"))
    # The text compiled for a Module is the canonical print that listing() numbers.
    assert listing(module).text == print_module(module, canonical=True)
    for src in (module, Kernel(module=module, entry="scale")):
        with pytest.raises(CompileError) as info:
            compile_ptx(src)
        node = info.value.statement
        assert any(stmt is node for stmt in module.entries[0].body)
        assert node.opcode == "mad" and node.modifiers == ("lo", "q32")


def test_module_input_compiles_like_its_text():
    from population.parser import parse_module

    module = parse_module(KERNEL)
    assert compile_ptx(module).resources == compile_ptx(KERNEL).resources


def test_timeout_is_a_compile_error_and_not_cached():
    clear_cache()
    text = KERNEL.replace("scale", "scale_timeout")
    with pytest.raises(CompileError, match="did not finish within"):
        compile_ptx(text, timeout_s=1e-4)
    assert compile_ptx(text).resources["scale_timeout"].registers > 0
