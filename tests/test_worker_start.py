"""A GPU worker that finishes starting after its supervisor has gone exits quietly (no BrokenPipe traceback)."""

from __future__ import annotations

import multiprocessing as mp

from evaluators.gpu.worker import _send_ready


def test_ready_to_a_closed_pipe_reports_the_supervisor_gone():
    parent, child = mp.Pipe()
    assert _send_ready(child, {"op": "ready", "ok": True})
    assert parent.recv() == {"op": "ready", "ok": True}
    parent.close()
    assert _send_ready(child, {"op": "ready", "ok": True}) is False
