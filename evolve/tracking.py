"""Experiment tracking: W&B (offline by default) or nothing.

What a W&B run holds:
- config: the resolved Hydra config; group: ``experiment_name``; tags: algorithm, ``seed=N``, workload,
  hardware; job_type: the algorithm; name: ``<algorithm>-s<seed>-<run dir name>``.
- metrics against ``evaluations`` (``define_metric(step_metric="evaluations")``): best_objective, qd_score,
  coverage, valid_rate, failures/<status>, operator_reward/<name>, evals_per_s (``engine.Snapshot.flat``).
- tables every ``logger.media_every`` evaluations (default 50) and at the end: ``individuals`` (id, parent,
  operator, edit, status, reason, objective, cell), ``archive`` (cell, id, objective, descriptors) and
  ``lineage`` (the best kernel's steps: operator, edit, objective);
- Plotly figures from ``archive.lineage`` (best lineage, family tree, heatmaps) logged as ``wandb.Plotly`` on the
  same schedule, so a running or killed run shows them too. Every media log carries ``evaluations``.
- a resumed run first re-logs the snapshots of ``metrics.jsonl`` up to its checkpoint (``backfill``), so the
  W&B curves hold the earlier sessions' history too (W&B would drop points logged with a lower ``step``; the
  x-axis here is the ``evaluations`` metric, so the re-logged points keep their places).
- the exported best kernels (``archive.export``) as an artifact of type ``kernel``.

The run directory is ``<run dir>/wandb``; the run id is kept in the store's meta (``wandb_run_id``) so a
resumed run appends to the same id. Offline runs can be read back with
``wandb leet inspect --summary --json <run dir>/wandb/offline-run-*`` (see ``read_offline_summary``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Tracker(Protocol):
    """What the app calls; ``NullTracker`` and ``WandbTracker`` implement it."""

    def log(self, metrics: Mapping[str, float]) -> None: ...

    def finish(self, *, summary: Mapping[str, Any], store: Any, archive: Any, export_dir: Path | None) -> None: ...

    def media(self, *, store: Any, archive: Any, evaluations: int) -> None: ...

    def backfill(self, metrics_path: Path, upto: int) -> int: ...


class NullTracker:
    """``logger=none``: records nothing."""

    def log(self, metrics: Mapping[str, float]) -> None:
        return None

    def media(self, *, store: Any, archive: Any, evaluations: int) -> None:
        return None

    def backfill(self, metrics_path: Path, upto: int) -> int:
        return 0

    def finish(self, *, summary: Mapping[str, Any], store: Any, archive: Any, export_dir: Path | None) -> None:
        return None


class WandbTracker:
    """A W&B run inside ``run_dir``.

    mode: ``offline`` | ``online`` | ``disabled``; group: the experiment name; tags / name / job_type as in the
    module docstring; config: a plain dict; run_id: reuse this id (resume) or None for a new one;
    tables / figures / artifact: what ``finish`` uploads. Raises ImportError when wandb is missing.
    """

    def __init__(self, *, run_dir: Path, project: str, mode: str, group: str, name: str, tags: list[str],
                 job_type: str, config: dict[str, Any], entity: str | None = None, run_id: str | None = None,
                 tables: bool = True, figures: bool = True, artifact: bool = True) -> None:
        import wandb

        self.wandb = wandb
        self.tables, self.figures, self.artifact = tables, figures, artifact
        run_dir.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(console="off", silent=True, x_disable_stats=True)
        self.run = wandb.init(project=project, entity=entity, mode=mode, dir=str(run_dir), group=group, name=name,
                              tags=tags, job_type=job_type, config=config, id=run_id,
                              resume="allow" if run_id else None, settings=settings, reinit="create_new")
        self.run.define_metric("evaluations")
        self.run.define_metric("*", step_metric="evaluations")

    @property
    def run_id(self) -> str:
        return str(self.run.id)

    def log(self, metrics: Mapping[str, float]) -> None:
        """Log one snapshot (must contain ``evaluations``)."""
        self.run.log(dict(metrics))

    def media(self, *, store: Any, archive: Any, evaluations: int) -> None:
        """Log the tables (individuals, archive, lineage) and figures (lineage, family tree, heatmaps) at
        ``evaluations``. A table or figure that fails is a warning: the run's numbers are safe in the store."""
        wandb = self.wandb
        if self.tables and store is not None:
            try:
                tables = {"individuals": wandb.Table(columns=INDIVIDUAL_COLUMNS, data=individual_rows(store)),
                          "archive": wandb.Table(columns=archive_columns(archive), data=archive_rows(archive))}
                lin = lineage_rows(store)
                if lin:
                    tables["lineage"] = wandb.Table(columns=LINEAGE_COLUMNS, data=lin)
                self.run.log({**tables, "evaluations": evaluations})
            except Exception as e:
                log.warning("W&B tables not logged: %s", e)
        if self.figures and store is not None and archive is not None:
            for name, fig in lineage_figures(store, archive).items():
                try:
                    self.run.log({name: wandb.Plotly(fig), "evaluations": evaluations})
                except Exception as e:  # plotly/wandb conversion problems must not lose the run
                    log.warning("W&B figure %s not logged: %s", name, e)

    def backfill(self, metrics_path: Path, upto: int) -> int:
        """Re-log the snapshots of ``metrics_path`` (one JSON object per line; a resumed session's re-logged
        line replaces the earlier one) with ``evaluations <= upto``, in order; returns how many were logged."""
        if not Path(metrics_path).exists():
            return 0
        by_eval: dict[int, dict[str, Any]] = {}
        for line in Path(metrics_path).read_text().splitlines():
            try:
                snap = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill
                continue
            if isinstance(snap, dict) and "evaluations" in snap and int(snap["evaluations"]) <= upto:
                by_eval[int(snap["evaluations"])] = snap
        for e in sorted(by_eval):
            self.run.log(by_eval[e])
        return len(by_eval)

    def finish(self, *, summary: Mapping[str, Any], store: Any, archive: Any, export_dir: Path | None) -> None:
        """Final summary, tables, figures and the exported kernels; then close the run. A figure or artifact
        that fails is logged as a warning (the run's numbers are already safe in the store)."""
        wandb = self.wandb
        for k, v in summary.items():
            self.run.summary[k] = v
        self.media(store=store, archive=archive, evaluations=int(summary.get("evaluations", 0) or 0))
        if self.artifact and export_dir is not None and export_dir.exists() and any(export_dir.iterdir()):
            art = wandb.Artifact(f"best-kernels-{self.run.id}", type="kernel",
                                 description="the best kernels: PTX, cubin and a JSON card each")
            art.add_dir(str(export_dir))
            self.run.log_artifact(art)
        self.run.finish()


INDIVIDUAL_COLUMNS = ["id", "parent", "operator", "edit", "status", "reason", "objective", "cell", "island"]
LINEAGE_COLUMNS = ["step", "id", "operator", "edit", "status", "objective", "ratio"]


def lineage_rows(store: Any) -> list[list[Any]]:
    """The best kernel's lineage (``archive.lineage.lineage_steps``) as rows of ``LINEAGE_COLUMNS``; [] before
    the first ok candidate."""
    from archive.lineage import lineage_steps

    try:
        steps = lineage_steps(store)
    except ValueError:
        return []
    return [[s["step"], s["id"], s["operator"], s["edit_text"][:2000], s["status"], s["objective"], s["ratio"]]
            for s in steps]


def individual_rows(store: Any) -> list[list[Any]]:
    """One row per candidate in the store (PTX omitted): ``INDIVIDUAL_COLUMNS``."""
    rows = []
    for r in store.candidates(with_ptx=False):
        rows.append([r.id, r.parent_ids[0] if r.parent_ids else None, r.operator, r.edit_text[:2000], r.status,
                     r.reason[:500], r.objective, json.dumps(r.cell) if r.cell is not None else None, r.island])
    return rows


def archive_columns(archive: Any) -> list[str]:
    """Column names of ``archive_rows``: cell, id, objective, then one per descriptor (``archive.dims``)."""
    return ["cell", "id", "objective", *[d.name for d in archive.dims]]


def archive_rows(archive: Any) -> list[list[Any]]:
    """One row per elite: cell (JSON), candidate id, objective, descriptor values."""
    return [[json.dumps(list(e.cell)), e.candidate_id, e.objective, *[e.features.get(d.name) for d in archive.dims]]
            for e in archive.elites()]


def lineage_figures(store: Any, archive: Any) -> dict[str, Any]:
    """Plotly figures from ``archive.lineage``: ``best_lineage``, ``family_tree`` and ``heatmap/<pair>`` per
    descriptor pair. A figure that cannot be drawn (e.g. no valid kernel yet) is left out with a warning."""
    from archive import lineage

    figs: dict[str, Any] = {}
    graph = functools.cache(lambda: lineage.build_graph(store))  # one store scan for both figures
    for name, draw in (("best_lineage", lambda: lineage.lineage_figure(store, graph=graph())),
                       ("family_tree", lambda: lineage.family_tree_figure(graph()))):
        try:
            figs[name] = draw()
        except Exception as e:
            log.warning("figure %s not drawn: %s", name, e)
    if len(archive):
        try:
            for k, fig in lineage.heatmap_figures(archive).items():
                figs[f"heatmap/{k}"] = fig
        except Exception as e:
            log.warning("heatmaps not drawn: %s", e)
    return figs


def make_tracker(logger_cfg: Mapping[str, Any], *, run_dir: Path, group: str, name: str, tags: list[str],
                 job_type: str, config: dict[str, Any], run_id: str | None = None) -> Tracker:
    """``NullTracker`` for ``kind: none``, else a ``WandbTracker`` writing to ``<run_dir>/wandb``."""
    if str(logger_cfg["kind"]) == "none" or str(logger_cfg.get("mode")) == "disabled":
        return NullTracker()
    return WandbTracker(run_dir=run_dir, project=str(logger_cfg["project"]), mode=str(logger_cfg["mode"]),
                        entity=logger_cfg.get("entity"), group=group, name=name, tags=tags, job_type=job_type,
                        config=config, run_id=run_id, tables=bool(logger_cfg.get("tables", True)),
                        figures=bool(logger_cfg.get("figures", True)),
                        artifact=bool(logger_cfg.get("artifact", True)))


def offline_run_dirs(run_dir: Path) -> list[Path]:
    """The offline W&B run folders under ``<run_dir>/wandb`` (oldest first)."""
    return sorted((Path(run_dir) / "wandb").glob("offline-run-*"))


def _leet_inspect(wandb_run_dir: Path, *flags: str) -> str:
    """stdout of ``wandb leet inspect <flags> --json <wandb_run_dir>``; RuntimeError when the ``wandb`` command
    is not on PATH or exits non-zero (with the tail of its stderr)."""
    exe = shutil.which("wandb")
    if exe is None:
        raise RuntimeError("the wandb command is not on PATH")
    cmd = [exe, "leet", "inspect", *flags, "--json", str(wandb_run_dir)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "WANDB_SILENT": "true"})
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def read_offline_summary(wandb_run_dir: Path) -> dict[str, Any]:
    """Read an offline run back with ``wandb leet inspect --summary --json`` (wandb >= 0.31): a dict with
    ``config``, ``summary``, ``tags``, ``project``, ``run_id``, ``state``... RuntimeError with wandb's output
    when the command fails."""
    return json.loads(_leet_inspect(wandb_run_dir, "--summary"))


def read_offline_run(wandb_run_dir: Path) -> dict[str, Any]:
    """Everything a test or report needs from an offline run, read with wandb's own reader
    (``wandb leet inspect --json``, one JSON record per line): ``group``, ``tags``, ``job_type``, ``name``,
    ``config``, ``history`` (list of logged dicts in order), ``artifacts`` (list of (name, type, paths)) and
    ``summary`` (from ``read_offline_summary``). RuntimeError when wandb cannot read it."""
    run: dict[str, Any] = {"history": [], "artifacts": []}
    for line in _leet_inspect(wandb_run_dir).splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        kind = rec.get("type")
        if kind == "run":
            r = rec["run"]
            run.update(group=r.get("run_group", ""), tags=list(r.get("tags", [])), job_type=r.get("job_type", ""),
                       name=r.get("display_name", ""), run_id=r.get("run_id", ""))
        elif kind == "history":
            run["history"].append(rec["history"]["item"])
        elif kind == "artifact":
            a = rec["artifact"]
            run["artifacts"].append((a["name"], a["type"], [c["path"] for c in a["manifest"]["contents"]]))
    summary = read_offline_summary(wandb_run_dir)
    run["summary"], run["config"] = summary.get("summary", {}), summary.get("config", {})
    return run
