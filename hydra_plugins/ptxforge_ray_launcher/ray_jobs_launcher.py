"""A Hydra launcher that runs each job of a sweep as a Ray job: ``python -m evolve -m hydra/launcher=ray_jobs ...``.

Each job of the sweep becomes one ``python -m evolve <its overrides> hydra.run.dir=<sweep dir>/<subdir>`` submitted
with Ray's job submission API (``ray.job_submission.JobSubmissionClient``), reserving ``gpus_per_job`` GPUs and
``cpus_per_job`` CPUs for its entrypoint: Ray places the jobs over the cluster one per GPU, queues the rest until
a GPU frees up, and sets the job's ``CUDA_VISIBLE_DEVICES`` to the GPU it got, so the run's local GPU pool sees
exactly that one. The project tree travels as the job's ``working_dir`` (``evaluators.ray.cluster``). The
launcher waits for every job, streams nothing, and reports each job's status and the tail of its log; a failed
job does not stop the others (its ``JobReturn`` carries the error, so Hydra reports it at the end).

Run dirs: each job writes its run dir (store, metrics, W&B offline run) on the node that ran it, at the sweep's
path; put ``hydra.sweep.dir`` on a file system every node mounts to find them all on the driver (docs/ray.md).
The maintained Hydra Ray launcher plugin targets Ray 1.x; this one uses only the job submission API of Ray 2.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


class RayJobFailed(RuntimeError):
    """A sweep job ended in FAILED or STOPPED; the message holds the tail of its log."""


class RayJobsLauncher(Launcher):
    """Hydra ``Launcher`` over Ray jobs (module docstring).

    address: the Ray dashboard of the cluster (``http://head:8265``; None: ``$RAY_ADDRESS``, else
    ``http://127.0.0.1:8265``); gpus_per_job / cpus_per_job: resources of each job's entrypoint (0 GPUs for
    static-evaluator sweeps); python: the interpreter on the nodes; poll_s: status poll interval (s);
    timeout_s: give up waiting after this long (None: never); runtime_env: merged into each job's runtime
    environment (``working_dir`` is the project tree); extra_args: overrides appended to every job.
    """

    def __init__(self, address: str | None = None, gpus_per_job: float = 1, cpus_per_job: float = 1,
                 python: str = "python", poll_s: float = 2.0, timeout_s: float | None = None,
                 runtime_env: dict[str, Any] | None = None, extra_args: Sequence[str] = ()) -> None:
        self.address, self.gpus_per_job, self.cpus_per_job = address, float(gpus_per_job), float(cpus_per_job)
        self.python, self.poll_s, self.timeout_s = python, float(poll_s), timeout_s
        self.runtime_env = dict(runtime_env or {})
        self.extra_args = list(extra_args)
        self.config: DictConfig | None = None
        self.hydra_context: Any = None
        self.task_function: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def _client(self) -> Any:
        import os

        from ray.job_submission import JobSubmissionClient

        address = self.address or os.environ.get("RAY_ADDRESS") or "http://127.0.0.1:8265"
        try:
            return JobSubmissionClient(address)
        except Exception as e:
            raise ConnectionError(f"hydra.launcher.address={address!r}: no Ray job server there ({e}); start the "
                                  "cluster with `ray start --head` (ray[default]) and pass its dashboard address") from e

    def command(self, overrides: Sequence[str], run_dir: str) -> str:
        """The entrypoint of one job: ``python -m evolve`` with the job's overrides and its run dir."""
        quoted = run_dir.replace("\\", "\\\\").replace("'", "\\'")
        args = [*overrides, *self.extra_args, f"hydra.run.dir='{quoted}'"]  # the subdir holds '=' and ','

        return " ".join([self.python, "-m", "evolve", *(shlex.quote(a) for a in args)])

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from evaluators.ray.cluster import project_runtime_env

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).resolve()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        client = self._client()
        env = project_runtime_env(extra=self.runtime_env)
        jobs: list[tuple[str, list[str], DictConfig, str]] = []
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = f"ray-{idx}"
                cfg.hydra.job.num = idx
            HydraConfig.instance().set_config(cfg)
            run_dir = str(sweep_dir / str(OmegaConf.select(cfg, "hydra.sweep.subdir")))
            job_id = self._submit(client, entrypoint=self.command(list(overrides), run_dir), runtime_env=env,
                                  entrypoint_num_gpus=self.gpus_per_job or None, entrypoint_num_cpus=self.cpus_per_job,
                                  metadata={"sweep_dir": str(sweep_dir), "job_num": str(idx)})
            log.info("#%d %s -> Ray job %s", idx, " ".join(filter_overrides(overrides)), job_id)
            jobs.append((job_id, list(overrides), cfg, run_dir))
        return [self._wait(client, *j) for j in jobs]

    def _submit(self, client: Any, **kwargs: Any) -> str:
        """``client.submit_job`` retried for up to 120 s while the cluster's job agents are still starting."""
        t0 = time.monotonic()
        while True:
            try:
                return client.submit_job(**kwargs)
            except RuntimeError as e:
                if "No available agent" not in str(e) or time.monotonic() - t0 > 120:
                    raise
            time.sleep(self.poll_s)

    def _wait(self, client: Any, job_id: str, overrides: list[str], cfg: DictConfig, run_dir: str) -> JobReturn:
        t0 = time.monotonic()
        while True:
            status = str(client.get_job_status(job_id)).split(".")[-1]
            if status in TERMINAL:
                break
            if self.timeout_s is not None and time.monotonic() - t0 > self.timeout_s:
                client.stop_job(job_id)
                status = "STOPPED"
                break
            time.sleep(self.poll_s)
        ret = JobReturn(overrides=overrides, cfg=cfg, hydra_cfg=cfg, working_dir=run_dir, task_name="evolve")
        if status == "SUCCEEDED":
            ret.status, ret.return_value = JobStatus.COMPLETED, {"ray_job_id": job_id, "run_dir": run_dir}
        else:
            tail = "\n".join(client.get_job_logs(job_id).splitlines()[-30:])
            ret.status = JobStatus.FAILED
            ret.return_value = RayJobFailed(f"Ray job {job_id} ({' '.join(overrides)}) ended {status}:\n{tail}")
        log.info("Ray job %s: %s (%s)", job_id, status, run_dir)
        return ret
