"""ncu CSV parsing and the replay script (CPU); the measurement itself is in tests/gpu/test_gpu_ncu_dram.py."""

from __future__ import annotations

import ast

import pytest

from evaluators.gpu.ncu import NcuError, parse_ncu_csv, replay_script

SAMPLE = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "rmsnorm": 0%....50%....100% - 3 passes
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","rmsnorm","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","33,587,200"
"0","4242","python3.12","127.0.0.1","rmsnorm","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","33,554,432"
"0","4242","python3.12","127.0.0.1","rmsnorm","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","21,344"
'''


def test_parse_ncu_csv_values():
    vals = parse_ncu_csv(SAMPLE)
    assert vals == {"dram__bytes_read.sum": 33587200.0, "dram__bytes_write.sum": 33554432.0,
                    "gpu__time_duration.sum": 21344.0}
    with pytest.raises(NcuError, match="no ncu CSV table"):
        parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM - no permission\n")


def test_replay_script_is_valid_python_with_the_spec():
    spec = {"workload": {"_target_": "workloads.rmsnorm.RMSNorm", "dtype": "bf16"}, "shape": [7, 760], "cubin": "/tmp/k.cubin",
            "entry": "rmsnorm", "param_types": ["u64"] * 3 + ["u32", "u32", "f32"], "launch": {"block": [256, 1, 1]}}
    text = replay_script(spec, ["/repo"])
    tree = ast.parse(text)
    assert any(isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "load" for n in ast.walk(tree))
    assert '"shape": [7, 760]' in text and "sys.path[:0] = ['/repo']" in text


def test_the_profile_table_reads_ncu_base_units():
    """experiments/ncu_profile.py's cells: ns -> µs, DRAM bytes over the compulsory bytes, SM active share."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    from ncu_profile import rows_of

    cells = rows_of({"gpu__time_duration.sum": 2_031_900.0, "dram__bytes_read.sum": 4.4e9,
                     "dram__bytes_write.sum": 4.2e9, "sm__cycles_active.avg": 900.0, "sm__cycles_elapsed.avg": 1000.0,
                     "Waves Per SM": 1.52, "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio":
                     12.345}, compulsory=int(8.6e9))
    assert cells["duration (µs)"] == "2031.9" and cells["DRAM bytes / compulsory"] == "1.000"
    assert cells["SM active / elapsed cycles"] == "0.900" and cells["waves per SM"] == "1.52"
    assert cells["stall long_scoreboard"] == "12.35" and cells["L2 hit rate (%)"] == "-"
