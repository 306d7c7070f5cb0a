"""Run-dir reliability: an exclusive lock (a second process is refused naming the holder), resume=false into a
used dir refused, and bad inputs that gave tracebacks now give one message naming the key or path."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from evolve.app import run
from evolve.config import ConfigError, register
from evolve.rundir import RunDirError, RunDirLock, RunDirLocked, check_fresh_dir

REPO = Path(__file__).resolve().parents[1]
CONF = str(REPO / "conf")
HOLD = ("import sys; sys.path.insert(0, sys.argv[2]); from evolve.rundir import RunDirLock; "
        "lock = RunDirLock(sys.argv[1]).acquire(); print('ready', flush=True); sys.stdin.readline()")


def cfg_for(run_dir: Path, *overrides: str):
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[f"run_dir={run_dir}", "evaluator=static", "engine.progress=false",
                                            "logger=none", "engine.export=false", "budget.evaluations=3",
                                            "mutator=template", *overrides])


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock on tmp_path/run."""
    d = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(d), str(REPO)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    yield d, p
    p.stdin.close()
    p.wait(timeout=30)


def test_second_process_is_refused_naming_the_holder(holder):
    d, p = holder
    with pytest.raises(RunDirLocked) as e:
        RunDirLock(d).acquire()
    assert f"pid {p.pid} on host {os.uname().nodename}" in str(e.value) and e.value.holder["pid"] == p.pid
    # the same through the app: nothing written into the dir
    with pytest.raises(ConfigError, match=f"in use by another run: pid {p.pid}"):
        run(cfg_for(d))
    assert not (d / "store.sqlite").exists()


def test_lock_is_released_when_the_holder_dies(tmp_path):
    d = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(d), str(REPO)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    p.kill()  # kill -9: the kernel drops the flock
    p.wait(timeout=30)
    with RunDirLock(d) as lock:
        assert lock.held


def test_a_filesystem_without_locks_is_reported(tmp_path):
    def no_locks(fd: int, op: int) -> None:  # what flock answers on an NFS mount without a lock manager
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    with pytest.raises(RunDirError, match=r"cannot lock .*run.lock .*No locks available.*engine.lock=false"):
        RunDirLock(tmp_path, flock=no_locks).acquire()


def test_resume_false_into_a_used_dir_is_refused(tmp_path):
    run(cfg_for(tmp_path))
    rows = (tmp_path / "store.sqlite").stat().st_size
    with pytest.raises(ConfigError, match=r"resume=false but .* already holds a run \(store.sqlite, metrics.jsonl"):
        run(cfg_for(tmp_path, "resume=false"))
    assert (tmp_path / "store.sqlite").stat().st_size == rows
    check_fresh_dir(tmp_path / "new", resume=False)  # an empty or missing dir is fine


@pytest.mark.parametrize("override,message", [
    ("evaluator=gpu", "evaluator.kind: gpu, but no GPU is visible"),
    ("archive.dims=[{name: regs, lo: 0, hi: 255, bins: 8}]", "archive.dims[0].name: 'regs' is not a descriptor"),
])
def test_bad_config_gives_one_message(tmp_path, override, message):
    pytest.importorskip("hydra")
    try:
        import cupy  # noqa: F401

        if override == "evaluator=gpu":
            pytest.skip("a GPU may be visible here")
    except ImportError:
        pass
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run(cfg_for(tmp_path, override))
    assert not (tmp_path / "store.sqlite").exists()


def test_store_file_that_is_not_sqlite(tmp_path):
    (tmp_path / "store.sqlite").write_text("this is not a database\n" * 100)
    with pytest.raises(ConfigError, match=r"store: .*store.sqlite is not a ptxforge store"):
        run(cfg_for(tmp_path))


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run([sys.executable, "-m", "evolve", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_unwritable_run_dir_cli(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = _cli(f"hydra.run.dir={blocker}/run", "logger=none")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"configuration error: hydra.run.dir: cannot create {blocker}/run: "
                                               "Not a directory"]


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_closes_the_run_and_prints_the_resume_command(tmp_path, sig, status):
    """Ctrl-C, and SIGTERM (kill, a scheduler's time limit; it used to end the process with no message)."""
    d = tmp_path / "run"
    args = ["evaluator=static", "logger=none", "budget.evaluations=100000", "mutator=template",
            "engine.export=false", "logger.log_every=1", f"hydra.run.dir={d}"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    p = subprocess.Popen([sys.executable, "-m", "evolve", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    metrics = d / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert p.poll() is None, p.stderr.read()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    p.send_signal(sig)
    _out, err = p.communicate(timeout=120)
    assert p.returncode == status, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert f"interrupted; the run in {d} is saved up to its last checkpoint" in err
    cmd = err.split("resume it with:\n", 1)[1].strip().splitlines()[0]
    assert cmd.endswith(f"-m evolve {' '.join(args[:-1])} hydra.run.dir={d}")
    assert not (d / "summary.json").exists()
