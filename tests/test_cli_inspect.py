"""``python -m population inspect`` as a subprocess on corpus files: the values it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from population import ast
from population.parser import parse_module

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "population", "inspect", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def instruction_count(fn: ast.Function) -> int:
    n, stack = 0, [fn.body]
    while stack:
        for s in stack.pop():
            if isinstance(s, ast.Instruction):
                n += 1
            elif isinstance(s, ast.Scope):
                stack.append(s.body)
    return n


def ptxas_available() -> bool:
    try:
        from evaluators.toolchain import find_ptxas

        find_ptxas()
        return True
    except Exception:
        return False


def test_inspect_json_values() -> None:
    path = DATA / "elementwise.ptx"
    proc = run(str(path), "--block", "128", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["arch"] == "sm_90"
    entries = {e["name"]: e for e in report["entries"]}
    assert set(entries) == {"saxpy", "scale_vec4"}
    module = parse_module(path.read_text())
    vec4 = entries["scale_vec4"]
    assert vec4["instructions"] == instruction_count(module.function("scale_vec4"))
    assert vec4["block"] == [128, 1, 1]
    # one float4 load of x and one float4 store of y per thread, plus the scalar tail
    assert ["load", "global", 16, 1] in vec4["memory"] and ["store", "global", 16, 1] in vec4["memory"]
    assert ["load", "global", 4, 1] in vec4["memory"] and ["store", "global", 4, 1] in vec4["memory"]
    # seven parameters: three 4-byte, four 8-byte
    assert ["load", "param", 4, 3] in vec4["memory"] and ["load", "param", 8, 4] in vec4["memory"]
    declared = sum(c for d in module.function("scale_vec4").body if isinstance(d, ast.RegDecl) for _, c in d.names)
    assert vec4["registers_declared"] == declared
    if ptxas_available():
        from evaluators.toolchain import compile_ptx

        ru = compile_ptx(path.read_text(), arch="sm_90").resources["scale_vec4"]
        assert vec4["resources"]["registers"] == ru.registers
        assert ru.registers <= 32
        # <= 32 registers at 128 threads: 16 CTAs of 4 warps fill the 64 warps of an SM (cuda_occupancy.h)
        assert vec4["occupancy"]["blocks_per_sm"] == 16 and vec4["occupancy"]["occupancy"] == 1.0
        assert vec4["traffic"]["grid"] == 132 and vec4["traffic"]["bytes"] > 0
    else:
        assert vec4["resources"] is None and any("ptxas" in n for n in vec4["notes"])


def test_inspect_text_block_from_maxntid() -> None:
    path = DATA / "wgmma_sm90a.ptx"
    proc = run(str(path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"{path}: 1 entry, target sm_90a")
    assert "entry wgmma_m64n32  (block 128x1x1)" in out
    n = instruction_count(parse_module(path.read_text()).function("wgmma_m64n32"))
    assert f"  instructions          {n}\n" in out
    # 16 scalar f32 stores of the accumulators per thread
    assert "store       global               4     16" in out
    if ptxas_available():
        assert "  ptxas                 " in out and "  occupancy             " in out


@pytest.mark.parametrize(
    ("text", "where"),
    [(".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret\n}\n", ":7:1: unexpected '}'"),
     (".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\t.frob 1;\n}\n", ":6:2: unknown directive '.frob'")],
)
def test_inspect_reports_syntax_errors(tmp_path: Path, text: str, where: str) -> None:
    bad = tmp_path / "bad.ptx"
    bad.write_text(text)
    proc = run(str(bad))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"{bad}{where}")
    assert "Traceback" not in proc.stderr


def test_inspect_binary_file_gives_position_not_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bin.ptx"
    bad.write_bytes(b".version 9.0\nab\xffc\n")
    proc = run(str(bad))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"{bad}:2:3: not UTF-8")
    assert "Traceback" not in proc.stderr


def test_inspect_missing_file_and_bad_arch(tmp_path: Path) -> None:
    proc = run(str(tmp_path / "none.ptx"))
    assert proc.returncode == 1 and "cannot read" in proc.stderr
    proc = run(str(DATA / "elementwise.ptx"), "--arch", "sm9")
    assert proc.returncode == 2 and "--arch" in proc.stderr


def test_inspect_without_ptxas_still_reports_the_ptx(monkeypatch: pytest.MonkeyPatch) -> None:
    toolchain = pytest.importorskip("evaluators.toolchain")
    from population.cli import format_report, inspect_module

    def no_ptxas(*args, **kwargs):
        raise toolchain.ToolchainNotFound("tried PATH, $CUDA_HOME/bin and the nvidia-cuda-nvcc wheel")

    monkeypatch.setattr(toolchain, "compile_ptx", no_ptxas)
    module = parse_module((DATA / "reduce_shfl.ptx").read_text())
    reports = inspect_module(module)
    assert [r.name for r in reports] == ["block_sum", "argmax_rows"]
    block_sum = reports[0]
    assert block_sum.resources is None and block_sum.occupancy is None and block_sum.traffic is None
    assert block_sum.notes == ["ptxas not found: tried PATH, $CUDA_HOME/bin and the nvidia-cuda-nvcc wheel"]
    assert ("atomic", "global", 4, 1) in block_sum.memory
    assert block_sum.instructions == instruction_count(module.function("block_sum"))
    text = format_report("reduce_shfl.ptx", "sm_90", reports)
    assert "note: ptxas not found" in text and "occupancy" not in text
