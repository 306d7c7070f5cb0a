"""Joining or starting a Ray cluster, and the runtime environment that carries the project to its nodes.

``connect(address)`` calls ``ray.init(address=...)`` to join a running cluster (``"auto"``, ``"ray://host:10001"``
or ``"host:6379"``); without an address it starts a local one in this process (the embedded default: one host,
its CPUs and GPUs, whose workers share this host's files). Joining a cluster, every Ray worker gets the runtime
environment ``project_runtime_env`` builds:

- ``working_dir``: the project tree (``.gitignore`` honoured, so no run outputs, stores or wheels travel), put
  first on each worker's ``sys.path``: nodes run the driver's code, whatever version they have installed.
- ``py_modules``: optionally the CUDA compiler tools (``ptxas``, ``nvcc`` with ``cicc`` and the headers) of the
  driver's ``nvidia-cuda-nvcc`` wheel, laid out as ``nvidia/cu13/...`` so ``evaluators.toolchain.find_ptxas``
  finds them on the node's ``sys.path`` (its wheel fallback); Ray's packaging keeps the executable bits.
  About 210 MB unpacked, uploaded once per cluster (Ray caches packages by content hash).
- ``env_vars``: ``PTXFORGE_*`` and ``WANDB_MODE`` from the driver's environment.

Nodes still need what cannot travel as files: Python with the project's dependencies (``pip install
'ptxforge[ray]'``, plus ``'.[gpu]'`` on GPU nodes) and, on GPU nodes, the NVIDIA driver (docs/ray.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Parts of the nvidia-cuda-nvcc wheel's ``nvidia/cu13`` that ptxas and ``nvcc -ptx`` need (lib/ is for linking).
TOOLCHAIN_PARTS = ("bin", "include", "nvvm")
# Never shipped in working_dir, .gitignore or not (Ray also skips .git).
WORKING_DIR_EXCLUDES = [".git", "outputs", "multirun", "wandb", "runs", ".whl", ".cache", "*.sqlite",
                        "*.sqlite-wal", "*.sqlite-shm", "__pycache__", ".pytest_cache", ".ruff_cache", "*.egg-info"]
ENV_PREFIXES = ("PTXFORGE_", "WANDB_", "HF_HUB_OFFLINE")


def local_toolchain_dir() -> Path | None:
    """The driver's ``site-packages/nvidia/cu13`` (nvidia-cuda-nvcc wheel) holding ``bin/ptxas``, or None."""
    from evaluators.toolchain import _wheel_bin_dirs

    for d in _wheel_bin_dirs():
        if (d / "ptxas").is_file() and d.parent.name == "cu13":
            return d.parent
    return None


def toolchain_module(cache_root: Path | None = None) -> Path:
    """A directory ``<root>/nvidia`` holding hard links (copies across file systems) of the driver's
    ``nvidia/cu13/{bin,include,nvvm}``: a ``py_modules`` entry that puts ptxas and nvcc on every node.

    Raises FileNotFoundError when the nvidia-cuda-nvcc wheel is not installed here.
    """
    src = local_toolchain_dir()
    if src is None:
        raise FileNotFoundError("ray.ship_toolchain: the nvidia-cuda-nvcc wheel (nvidia/cu13/bin/ptxas) is not "
                                "installed on the driver; pip install nvidia-cuda-nvcc==13.0.88, or set "
                                "evaluator.ray.ship_toolchain=false and install a CUDA toolkit on every node")
    root = (cache_root or Path(tempfile.gettempdir())) / f"ptxforge-toolchain-{os.getuid()}"
    dest = root / "nvidia" / "cu13"
    if src.resolve() == dest.resolve():  # this process runs on a node that received the shipped tools
        return root / "nvidia"
    stamp = root / "source.txt"
    if stamp.is_file() and stamp.read_text() == str(src):
        return root / "nvidia"
    shutil.rmtree(root, ignore_errors=True)
    for part in TOOLCHAIN_PARTS:
        if (src / part).is_dir():
            shutil.copytree(src / part, dest / part, copy_function=_link_or_copy)
    stamp.write_text(str(src))
    return root / "nvidia"


def _link_or_copy(a: str, b: str) -> None:
    try:
        os.link(a, b)
    except OSError:
        shutil.copy2(a, b)


def project_runtime_env(*, ship_code: bool = True, ship_toolchain: bool = False,
                        extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The runtime environment of every task and actor (module docstring). ``extra`` is merged on top
    (``env_vars`` merged key by key); FileNotFoundError from ``toolchain_module`` when shipping is asked for
    without the wheel."""
    env: dict[str, Any] = {}
    if ship_code:
        env["working_dir"] = str(PROJECT_ROOT)
        env["excludes"] = list(WORKING_DIR_EXCLUDES)
    if ship_toolchain:
        env["py_modules"] = [str(toolchain_module())]
    env_vars = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    for k, v in (extra or {}).items():
        if k == "env_vars":
            env_vars.update({str(a): str(b) for a, b in v.items()})
        elif k in ("py_modules", "excludes") and k in env:
            env[k] = list(env[k]) + list(v)
        else:
            env[k] = v
    if env_vars:
        env["env_vars"] = env_vars
    return env


def connect(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None,
            ship_code: bool | None = None, ship_toolchain: bool | None = None,
            runtime_env: dict[str, Any] | None = None,
            namespace: str = "ptxforge") -> dict[str, Any]:
    """Join the cluster at ``address`` (None: start a local one with ``num_cpus`` / ``num_gpus``, default
    all of this host's) unless this process is already connected; returns ``ray.cluster_resources()``.

    ship_code / ship_toolchain: None ships the project tree / ptxas and nvcc only when joining an existing
    cluster: the workers of a local one run on this host, start with the driver's ``sys.path`` (Ray puts the
    driver's directory first) and find this host's ptxas, and need no runtime-environment agent (whose
    ``working_dir`` support needs aiohttp, part of ``ray[default]``). Raises ImportError naming the extra when Ray is not installed, ConnectionError when ``address``
    cannot be reached.
    """
    try:
        import ray
    except ImportError as e:
        raise ImportError("evaluator.backend=ray needs Ray: pip install 'ptxforge[ray]' "
                          "(or bash scripts/setup.sh, which installs it)") from e
    if not ray.is_initialized():
        if ship_code is None:
            ship_code = address is not None
        if ship_toolchain is None:
            ship_toolchain = address is not None and local_toolchain_dir() is not None
        env = project_runtime_env(ship_code=ship_code, ship_toolchain=bool(ship_toolchain), extra=runtime_env)
        kwargs: dict[str, Any] = {"namespace": namespace, "runtime_env": env, "log_to_driver": True,
                                  "configure_logging": False}
        if address is None:
            kwargs.update(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False)
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as e:
            raise ConnectionError(f"evaluator.ray.address={address!r}: cannot join the Ray cluster: {e}") from e
        log.info("Ray %s: %s", "joined " + address if address else "started locally", ray.cluster_resources())
    return dict(ray.cluster_resources())
