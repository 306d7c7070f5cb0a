"""``python -m evolve``: compose the Hydra config (``conf/``) and run the search (``evolve.app.run``).

Examples::

    python -m evolve                                    # MAP-Elites on RMSNorm, static evaluator without a GPU
    python -m evolve algorithm=islands budget.evaluations=500
    python -m evolve -m algorithm=map_elites,random,hill_climb seed=0,1,2   # a comparison sweep
    python -m evolve experiment=rmsnorm_h200            # the GPU run
    python -m evolve hydra.run.dir=outputs/2026-11-30/01-02-03-123-abcd   # resume that run

A configuration error exits with status 2 and a message naming the key and the allowed values. Ctrl-C (SIGINT)
or SIGTERM closes the run and prints the command that resumes it (exit status 130 or 143).
"""

from __future__ import annotations

import os
import signal
import sys

import hydra
from omegaconf import DictConfig

from evolve.config import ConfigError, register

register()


def _check_experiment() -> None:
    """``experiment`` is an optional group (so that no experiment is the default), and Hydra silently skips an
    optional option that does not exist: a typo would run the defaults. Refuse it instead."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    choice = HydraConfig.get().runtime.choices.get("experiment")
    if choice in (None, "null"):
        return
    known = GlobalHydra.instance().config_loader().get_group_options("experiment")
    if choice not in known:
        raise ConfigError(f"experiment: {choice!r} is not one of {known}")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    """Hydra entry point (never call it from tests: use the compose API or a subprocess)."""
    from evolve.app import RunInterrupted, run

    received = _sigterm_as_interrupt()
    try:
        _check_experiment()
        summary = run(cfg)
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(2)
    except RunInterrupted as e:
        print(f"\n{e}\nresume it with:\n  {resume_command(_job_overrides(), e.run_dir)}", file=sys.stderr,
              flush=True)
        sys.exit(128 + (received[-1] if received else signal.SIGINT))
    print(_final_line(summary), flush=True)


def _sigterm_as_interrupt() -> list[int]:
    """Make SIGTERM (``kill <pid>``, a batch scheduler's time limit) close the run as Ctrl-C does: the run is
    interrupted, the resume command printed, and the exit status is 128 + 15 = 143 (130 for Ctrl-C). Returns the
    list the handler appends the signal number to. A second SIGTERM while the run closes ends the process at
    once (the handler restores the default). Only in the main thread, where Python allows a handler."""
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        return received

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    return received


def _job_overrides() -> list[str]:
    """This job's own overrides (in a multirun: the sweep point, not the sweep), else the command line's."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except Exception:  # outside a Hydra job
        return [a for a in sys.argv[1:] if a not in ("-m", "--multirun")]


def resume_command(args: list[str], run_dir: object) -> str:
    """The command line that resumes the run in ``run_dir``: the same overrides with ``hydra.run.dir`` set."""
    import shlex

    keep = [a for a in args if not a.startswith(("hydra.run.dir=", "resume="))]
    return shlex.join([os.path.basename(sys.executable) or "python", "-m", "evolve", *keep,
                       f"hydra.run.dir={run_dir}"])


def _precheck_run_dir(args: list[str]) -> None:
    """An unwritable ``hydra.run.dir`` (or ``hydra.sweep.dir`` with ``-m``; by default ``outputs/`` or
    ``multirun/`` under the current directory) fails inside Hydra's own setup with a traceback: check it first
    and stop with one message naming the key and the path."""
    from evolve.rundir import RunDirError, check_writable

    key, default = (("hydra.sweep.dir", "multirun") if {"-m", "--multirun"} & set(args)
                    else ("hydra.run.dir", "outputs"))
    path = next((a.split("=", 1)[1] for a in args if a.startswith(f"{key}=")), None)
    if path is not None and "${" in path:  # an interpolation only Hydra can resolve
        return
    try:
        check_writable(path if path is not None else default,
                       key=key if path is not None else f"{key} (default {default}/ under {os.getcwd()})")
    except RunDirError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(2)


def _final_line(summary: dict) -> str:
    """One line saying where the run went and how it ended. The best objective names what it is a speedup over
    (``summary["provenance"]["baseline"]``); estimates are labelled with the evaluator that made them
    (``summary["provenance"]["evaluator"]``): the static model, or replay (recorded GPU times where the kernel
    was measured, the surrogate's estimate otherwise). Coverage names the filled cells and the archive's size
    (``n_elites / coverage``)."""
    best = summary.get("best_objective")
    provenance = summary.get("provenance") or {}
    notes = []
    baseline = provenance.get("baseline")
    if isinstance(baseline, str) and baseline:  # what the objective is over (evolve.app.objective_definition)
        over = {"naive_seed": "the naive seed", "best": "the fastest library"}.get(baseline, baseline)
        notes.append(f"geomean speedup over {over}")
    if summary.get("estimate"):
        evaluator = provenance.get("evaluator") or summary.get("evaluator") or "static"
        notes.append("replay: recorded GPU time where measured, surrogate ESTIMATE otherwise" if evaluator == "replay"
                     else f"ESTIMATE: {evaluator} evaluator")
    kind = f" ({'; '.join(notes)})" if notes else ""
    best_text = f"{best:.4g}" if isinstance(best, int | float) else "none"
    cov = summary.get("coverage", 0)
    n = summary.get("n_elites")
    cells = f" ({n} of {round(n / cov)} cells)" if isinstance(n, int) and n > 0 and cov else ""
    why = f"; stopped: {summary['stop_reason']}" if summary.get("stop_reason") else ""
    return (f"done: {summary.get('evaluations', '?')} evaluations, best objective {best_text}{kind}, "
            f"QD score {summary.get('qd_score', float('nan')):.4g}, coverage {cov:.1%}{cells}; "
            f"run dir {summary.get('run_dir')} (store.sqlite, summary.json, best/){why}")


def _precheck_keys(args: list[str]) -> None:
    """A misspelt key stops with one line naming the nearest key (``evolve.config.check_override_keys``), before
    Hydra's message, which suggests appending the misspelt key with ``+``; so does an option a config group does
    not have (``evolve.config.check_group_options``), before Hydra's message and its config search path."""
    from evolve.config import check_group_options, check_override_keys

    try:
        check_override_keys(args)
        check_group_options(args)
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    _precheck_keys(sys.argv[1:])
    _precheck_run_dir(sys.argv[1:])
    main()
