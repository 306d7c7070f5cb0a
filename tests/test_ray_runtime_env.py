"""What travels to the nodes of a Ray cluster: the project tree, and ptxas/nvcc laid out where the toolchain
looks for the wheel (no Ray cluster needed)."""

from __future__ import annotations

import os
import sys

import pytest

from evaluators.ray.cluster import PROJECT_ROOT, local_toolchain_dir, project_runtime_env, toolchain_module


def test_runtime_env_ships_the_tree_without_outputs_and_forwards_settings(monkeypatch):
    monkeypatch.setenv("PTXFORGE_CACHE", "/shared/ptxforge")
    env = project_runtime_env(ship_code=True, extra={"env_vars": {"A": 1}, "excludes": ["big/"], "pip": ["x"]})
    assert env["working_dir"] == str(PROJECT_ROOT) and (PROJECT_ROOT / "evaluators" / "ray").is_dir()
    assert {".git", "outputs", "multirun", "*.sqlite", ".whl", "big/"} <= set(env["excludes"])
    assert env["env_vars"]["PTXFORGE_CACHE"] == "/shared/ptxforge" and env["env_vars"]["A"] == "1"
    assert env["pip"] == ["x"] and "py_modules" not in env
    assert "working_dir" not in project_runtime_env(ship_code=False)


@pytest.mark.skipif(local_toolchain_dir() is None, reason="the nvidia-cuda-nvcc wheel is not installed")
def test_shipped_toolchain_is_found_on_a_node(tmp_path, monkeypatch):
    from evaluators import toolchain

    mod = toolchain_module(tmp_path)
    assert mod.name == "nvidia" and project_runtime_env(ship_code=False, ship_toolchain=True)["py_modules"]
    for tool in ("ptxas", "nvcc"):
        path = mod / "cu13" / "bin" / tool
        assert path.is_file() and os.access(path, os.X_OK)
    assert (mod / "cu13" / "nvvm" / "bin" / "cicc").is_file() and not (mod / "cu13" / "lib").exists()
    assert toolchain_module(tmp_path) == mod  # built once per source
    # On a node Ray puts the unpacked module's parent on sys.path; the toolchain's wheel fallback finds it there.
    monkeypatch.setattr(sys, "path", [str(mod.parent)])
    assert toolchain._wheel_bin_dirs() == [mod / "cu13" / "bin"]
    assert local_toolchain_dir() == mod / "cu13" and toolchain_module(tmp_path) == mod  # a node ships what it got
