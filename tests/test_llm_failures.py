"""Bounded LLM failures in whole runs against a real local HTTP server on 127.0.0.1 that answers 500, 429, hangs,
or repeats one answer: every failure is a store row at once (status llm_error, never a lesson), the LLM operator
switches itself off after its failure budget and the run goes on with the other operators (or stops saying
why), and no call outlives its timeouts."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hash_evaluator import HashEvaluator
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from archive.knowledge import KnowledgeStore
from evolve.app import run
from evolve.config import ConfigError, register
from evolve.engine import CHECKPOINT
from evolve.llm.base import ChatMessage, ChatRequest, LLMTimeout
from evolve.llm.openai_backend import OpenAIBackend
from evolve.progress import format_line

CONF = str(Path(__file__).resolve().parents[1] / "conf")


class Endpoint:
    """A chat-completions server: ``mode`` "500" / "429" answer that status, "hang" never answers (until
    shutdown), "same" always answers ``answer``. Records, per request, how many llm_error rows the run's store
    already holds (``seen``), so a test can tell that failures were written at once."""

    def __init__(self, mode: str, store: Path | None = None, answer: str = "") -> None:
        self.mode, self.store, self.answer = mode, store, answer
        self.seen: list[int] = []
        self.release = threading.Event()
        ep = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                return

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                ep.seen.append(ep.llm_error_rows())
                if ep.mode == "hang":
                    ep.release.wait(30)
                    return
                if ep.mode in ("500", "429"):
                    data, code = b'{"error": {"message": "overloaded"}}', int(ep.mode)
                else:
                    data, code = json.dumps({"choices": [{"message": {"role": "assistant", "content": ep.answer},
                                                          "finish_reason": "stop"}],
                                             "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).encode(), 200
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def llm_error_rows(self) -> int:
        if self.store is None or not self.store.exists():
            return 0
        con = sqlite3.connect(f"file:{self.store}?mode=ro", uri=True, timeout=5)
        try:
            return int(con.execute("SELECT COUNT(*) FROM candidates WHERE status='llm_error'").fetchone()[0])
        except sqlite3.Error:
            return 0
        finally:
            con.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> Endpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def cfg_for(run_dir: Path, url: str, *, others: list[str], budget: int = 12, knowledge: str = "none", **op):
    register()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=[
            f"run_dir={run_dir}", "evaluator=static", "engine.progress=false", "logger=none", "engine.export=false",
            f"budget.evaluations={budget}", "mutator=llm", "llm=openai", f"llm.base_url={url}", "llm.model=m",
            "llm.timeout_s=0.3", "llm.max_retries=1", "llm.backoff_s=0.01", f"knowledge={knowledge}",
            "mutator.max_repairs=0"])
    llm = OmegaConf.to_container(cfg.mutator.operators[0], resolve=True)
    llm.update({"compile_check": False, "critic_every": 0, "failure_budget": 3, "proposal_timeout_s": 2.0, **op})
    cfg.mutator.operators = [*({"name": n, "weight": 1.0} for n in others), llm]
    return cfg


def rows(store: Path, status: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return con.execute("SELECT operator, reason FROM candidates WHERE status=? ORDER BY id", (status,)).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("mode", ["500", "429"])
def test_http_errors_switch_the_llm_off_and_the_run_goes_on(tmp_path, mode, caplog):
    store = tmp_path / "store.sqlite"
    kfile = tmp_path / "knowledge.sqlite"
    with Endpoint(mode, store) as ep:
        with caplog.at_level(logging.WARNING, logger="evolve.progress"):
            summary = run(cfg_for(tmp_path, ep.url, others=["template"], knowledge=str(kfile), budget=40),
                          evaluator=HashEvaluator())
    assert summary["evaluations"] == 40 and summary["stop_reason"].startswith("evaluation budget spent")
    failed = rows(store, "llm_error")
    assert len(failed) == 3 and all(op == "llm" for op, _ in failed)
    assert f"HTTP {mode}" in failed[0][1] and "LLM failure 1/3" in failed[0][1]
    # two requests (one retry) per failure; each failure was in the store before the next request went out (six
    # requests in all: the retries are bounded by count, which a wall-clock bound on a shared machine only blurs)
    assert ep.seen == [0, 0, 1, 1, 2, 2]
    assert "LLM failure 1/3" in caplog.text and "switched off after 3 LLM failures" in caplog.text
    assert summary.get("switched_off/llm") == 1
    # failures are never lessons: not in the run's lesson events, not in the shared knowledge store
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    assert con.execute("SELECT COUNT(*) FROM lesson_events WHERE operator='llm'").fetchone()[0] == 0
    cp = json.loads(con.execute("SELECT state FROM checkpoints WHERE name=?", (CHECKPOINT,)).fetchone()[0])
    con.close()
    assert cp["operators"]["llm"]["disabled"].startswith("3 LLM failures")  # resume keeps it switched off
    with KnowledgeStore(kfile) as k:
        assert not [f for f in k.failures("rmsnorm", "h200", limit=100) if f.operator == "llm"]


def test_hanging_endpoint_is_bounded_and_a_run_of_only_llm_stops_saying_why(tmp_path):
    store = tmp_path / "store.sqlite"
    with Endpoint("hang", store) as ep:
        t0 = time.monotonic()
        summary = run(cfg_for(tmp_path, ep.url, others=[]), evaluator=HashEvaluator())
        took = time.monotonic() - t0
    # 3 failures x 2 attempts x 0.3 s socket timeout, plus the seeds: nowhere near 121 s per request
    assert took < 30, took
    assert len(ep.seen) == 6 and len(rows(store, "llm_error")) == 3
    assert "timed out" in rows(store, "llm_error")[0][1]
    assert summary["stop_reason"].startswith("errors: every operator is switched off: llm: 3 LLM failures")
    assert summary["evaluations"] == 2  # the two seeds


def test_proposal_deadline_stops_retries(tmp_path):
    """A 500 endpoint with many retries: the request deadline (the proposal's 0.5 s) ends them."""
    with Endpoint("500") as ep:
        be = OpenAIBackend(ep.url, "m", max_retries=1000, backoff_s=0.05, timeout_s=5)
        t0 = time.monotonic()
        with pytest.raises(LLMTimeout, match="deadline"):
            be.chat(ChatRequest(messages=(ChatMessage("user", "x"),), timeout_s=0.5))
        assert time.monotonic() - t0 < 2.0 and 2 <= len(ep.seen) <= 6


def test_an_endpoint_that_repeats_itself_is_switched_off(tmp_path):
    store = tmp_path / "store.sqlite"
    with Endpoint("same", store, answer="DIRECTIVE rmsnorm .maxnreg 64\n") as ep:
        summary = run(cfg_for(tmp_path, ep.url, others=[], budget=50, duplicate_budget=3), evaluator=HashEvaluator())
    assert summary["stop_reason"].startswith("errors: every operator is switched off: llm: 3 proposals in a row "
                                             "repeated an evaluated kernel")
    assert len(ep.seen) < 20  # was: the whole candidate budget (200 requests for 4 evaluations)
    assert summary["duplicates"] >= 3


def test_progress_line_shows_llm_failures():
    from evolve.engine import Snapshot

    snap = Snapshot(evaluations=4, candidates=9, valid_rate=1.0, best=1.0, qd_score=1.0, coverage=0.01, n_elites=1,
                    evals_per_s=1.0, seconds=3.0, statuses={"ok": 4, "llm_error": 3}, duplicates=0,
                    operator_rewards={}, disabled={"llm": "3 LLM failures"})
    assert format_line(snap, 12).endswith("| llm_error 3 | switched off: llm")


def test_bad_base_url_is_a_config_error(tmp_path):
    cfg = cfg_for(tmp_path, "notaurl", others=["template"])
    with pytest.raises(ConfigError, match=r"llm\.base_url: 'notaurl' is not an http"):
        run(cfg)


def test_activity_shows_while_the_llm_generates(caplog):
    from evolve.progress import activity, current_activity

    assert current_activity() == ""
    with activity("LLM generating (optimizer)"):
        assert current_activity() == "LLM generating (optimizer), 0 s"
    assert current_activity() == ""
