"""``python -m population inspect`` on the PTX cases it used to get wrong (tests/data/cases/ptx): it compiles
the file itself (debug target: ptxas' own register count), reports ptxas' errors at the file's lines, counts
matrix memory instructions, gives occupancy for every compute capability with dynamic shared memory, notes an
old ``.target`` instead of exiting, and compiles PTX newer than the default ptxas with one that reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators.toolchain import (
    PTXVersionUnsupported,
    compile_ptx,
    parse_diagnostics,
    ptx_isa_version,
    ptx_version_of,
    ptxas_candidates,
    ptxas_targets,
    select_ptxas,
)
from population.cli import main
from population.memory import memory_sites
from population.parser import parse_module

CASES = Path(__file__).parent / "data" / "cases" / "ptx"


def inspect(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    rc = main(["inspect", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def inspect_json(capsys: pytest.CaptureFixture, *args: str) -> dict:
    rc, out, err = inspect(capsys, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_debug_target_reports_ptxas_registers_for_this_file_fail_08(capsys: pytest.CaptureFixture) -> None:
    path = CASES / "fail_08_debug_target_resources.ptx"
    report = inspect_json(capsys, str(path))
    (entry,) = report["entries"]
    own = compile_ptx(path.read_text(), "sm_90").resources["saxpy"].registers
    assert entry["resources"]["registers"] == own == 14
    assert entry["compiled_arch"] == "sm_90" and "release 13.0" in entry["ptxas"]
    rc, out, _ = inspect(capsys, str(path))
    assert rc == 0 and "ptxas                 14 registers" in out and "compiled the file itself with" in out


def test_ptxas_rejection_fails_with_the_file_line_fail_10(capsys: pytest.CaptureFixture) -> None:
    path = CASES / "fail_10_nonascii_comment.ptx"
    rc, out, err = inspect(capsys, str(path))
    assert rc == 1 and out == ""
    assert err.splitlines() == [
        f"{path}:10: ptxas fatal: Unexpected non-ASCII character encountered on line 10",
        "    // 指针 (pointer) — café",
    ]


def test_ptxas_errors_name_the_file_and_its_own_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # blank lines and comments before the error: a re-print would move it, the file's own line must be given
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_90\n.address_size 64\n\n\n// note\n.visible .entry k()\n{\n"
                   "\t.reg .b32 %r<2>;\n\n\n\tadd.u32 %r1, %r9, 1;\n\tret;\n}\n")
    rc, _, err = inspect(capsys, str(bad))
    assert rc == 1
    lines = err.splitlines()
    assert f"{bad}:12: ptxas error: Unknown symbol '%r9'" in lines
    assert lines[lines.index(f"{bad}:12: ptxas error: Unknown symbol '%r9'") + 1] == "    add.u32 %r1, %r9, 1;"


def test_wmma_traffic_is_counted_fail_12(capsys: pytest.CaptureFixture) -> None:
    path = CASES / "fail_12_wmma_traffic.ptx"
    report = inspect_json(capsys, str(path), "--block", "32", "--grid", "1", "--elements", "256")
    (entry,) = report["entries"]
    # per warp: 2 x 16x16 f16 loaded (512 B each = 16 B/thread), one 16x16 f32 stored (1024 B = 32 B/thread)
    assert ["load", "global", 16, 2] in entry["memory"] and ["store", "global", 32, 1] in entry["memory"]
    assert entry["traffic"]["load_bytes"] == 1024 and entry["traffic"]["store_bytes"] == 1024


def test_occupancy_for_sm86_with_dynamic_smem_fail_13(capsys: pytest.CaptureFixture) -> None:
    path = CASES / "fail_13_occupancy_sm86.ptx"
    (entry,) = inspect_json(capsys, str(path))["entries"]
    occ = entry["occupancy"]
    # 8 registers, 256 threads on cc 8.6: 1536 threads per SM -> 6 CTAs = 48/48 warps
    assert (occ["blocks_per_sm"], occ["active_warps"], occ["max_warps"], occ["cc"]) == (6, 48, 48, [8, 6])
    assert not any("occupancy" in n for n in entry["notes"])
    # 40000 B dynamic + 1 KiB reserved -> 41088 B per CTA (128 B granules); 100 KiB carveout -> 2 CTAs
    (entry,) = inspect_json(capsys, str(path), "--dynamic-smem", "40000")["entries"]
    assert (entry["occupancy"]["blocks_per_sm"], entry["occupancy"]["limiter"]) == (2, "shared_memory")
    rc, out, _ = inspect(capsys, str(path), "--dynamic-smem", "40000")
    assert rc == 0 and "33.3% (2 CTAs/SM, 16/48 warps, limited by shared_memory; 40000 bytes dynamic smem)" in out
    rc, _, err = inspect(capsys, str(path), "--dynamic-smem", "-1")
    assert rc == 2 and "--dynamic-smem" in err


def test_old_target_gets_a_note_and_a_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    old = tmp_path / "old.ptx"
    old.write_text((CASES / "fail_13_occupancy_sm86.ptx").read_text().replace(".target sm_86", ".target sm_70"))
    oldest = min((t for t in ptxas_targets() if t[3:].isdigit()), key=lambda t: int(t[3:]))
    assert oldest == "sm_75"
    rc, out, err = inspect(capsys, str(old))
    assert rc == 0, err
    assert "note: .target sm_70 is older than this ptxas generates code for (oldest sm_75)" in out
    (entry,) = inspect_json(capsys, str(old))["entries"]
    assert entry["compiled_arch"] == "sm_75" and entry["resources"]["registers"] > 0
    # sm_75: 1024 threads per SM -> 4 CTAs of 256
    assert entry["occupancy"]["blocks_per_sm"] == 4 and entry["occupancy"]["max_warps"] == 32


def newer_ptxas_installed() -> bool:
    return any((ptx_isa_version(p) or (0, 0)) >= (9, 4) for p in ptxas_candidates())


def test_ptx_newer_than_the_default_ptxas(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = (CASES / "fail_01_ptr_global_param.ptx").read_text().replace(".version 8.0", ".version 9.4")
    assert ptx_version_of(text) == (9, 4) and ptx_isa_version() == (9, 0)
    path = tmp_path / "v94.ptx"
    path.write_text(text)
    if not newer_ptxas_installed():  # pragma: no cover - Triton (a test dependency) ships ptxas 13.x
        with pytest.raises(PTXVersionUnsupported, match=r"\.version 9\.4 is newer than any installed ptxas"):
            select_ptxas(text, "sm_90")
        return
    ptxas, note = select_ptxas(text, "sm_90")
    assert ptx_isa_version(ptxas) >= (9, 4)
    assert note is not None and "9.4" in note and str(ptxas) in note
    result = compile_ptx(text, "sm_90")
    assert result.ptxas == str(ptxas) and result.ptxas_note == note and result.resources["k"].registers > 0
    (entry,) = inspect_json(capsys, str(path))["entries"]
    assert entry["ptxas"].startswith(str(ptxas)) and entry["resources"]["registers"] > 0
    assert any("newer than" in n for n in entry["notes"])


def test_no_ptxas_reads_the_version(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = (CASES / "fail_01_ptr_global_param.ptx").read_text().replace(".version 8.0", ".version 42.0")
    with pytest.raises(PTXVersionUnsupported) as exc:
        compile_ptx(text, "sm_90")
    assert exc.value.line == 2 and ".version 42.0 is newer than any installed ptxas reads" in exc.value.message
    assert "PTX ISA up to 9.0" in exc.value.message
    path = tmp_path / "v42.ptx"
    path.write_text(text)
    rc, out, _ = inspect(capsys, str(path))
    assert rc == 0 and "note: ptxas: .version 42.0 is newer than any installed ptxas reads" in out


def test_diagnostics_of_a_renamed_ptxas_and_of_line_less_messages() -> None:
    log = ("ptxas-blackwell module.ptx, line 3; error   : Unknown symbol 'x'\n"
           "ptxas fatal   : Unexpected non-ASCII character encountered on line 10\n")
    assert [(d.severity, d.line, d.message) for d in parse_diagnostics(log)] == [
        ("error", 3, "Unknown symbol 'x'"), ("fatal", 10, "Unexpected non-ASCII character encountered on line 10")]


# ------------------------------------------------------------------------------------------- memory table


MATRIX_KERNEL = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p, .param .align 64 .b8 tmap[128])
{
	.reg .b32 %r<40>;
	.reg .f32 %f<20>;
	.reg .b64 %rd<8>;
	.shared .align 128 .b8 buf[8192];
	.shared .align 8 .b64 bar;
	ld.param.u64 %rd1, [p];
	cvta.to.global.u64 %rd2, %rd1;
	mov.u32 %r1, buf;
	mov.u32 %r2, bar;
	mov.u64 %rd3, tmap;
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r3, %r4, %r5, %r6}, [%r1];
	stmatrix.sync.aligned.m8n8.x2.shared.b16 [%r1], {%r3, %r4};
	cp.async.ca.shared.global [%r1], [%rd2], 8;
	cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 256, [%r2];
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd3, {%r3, %r4}], [%r2];
	wmma.load.c.sync.aligned.row.m16n16k16.global.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd2], 16;
	mov.b64 %rd4, 0;
	wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8, %f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16}, %rd4, %rd4, 1, 1, 1, 0, 0;
	ret;
}
"""


def test_matrix_and_bulk_memory_rows_with_widths() -> None:
    fn = parse_module(MATRIX_KERNEL).function("k")
    rows = [(s.instruction.opcode, s.kind, s.state_space, s.width_bytes) for s in memory_sites(fn)
            if s.state_space != "param"]
    assert rows == [
        ("ldmatrix", "load", "shared", 16),      # 4 8x8 b16 matrices per warp: 4 x 128 B / 32 threads
        ("stmatrix", "store", "shared", 8),
        ("cp", "async_copy", "global", 8),      # cp-size
        ("cp", "async_copy", "global", 256),    # bulk size, issued by one thread
        ("cp", "async_copy", "global", 0),      # tensor copy: the box lives in the tensor map
        ("wmma", "load", "global", 32),         # 16x16 f32 C matrix: 1024 B / 32 threads
        ("wgmma", "load", "shared", 24),        # A 64x16 bf16 + B 16x32 bf16 = 3072 B / 128 threads
    ]
    sites = [s for s in memory_sites(fn) if s.instruction.opcode == "cp"]
    # the global side's address: the source of a shared<-global copy; none for a tensor map
    assert [str(getattr(s.address, "base", None)) for s in sites] == [
        "Register(name='%rd2')", "Register(name='%rd2')", "None"]
    assert compile_ptx(MATRIX_KERNEL, "sm_90a").resources["k"].registers > 0
