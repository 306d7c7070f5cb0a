"""The OpenAI-compatible HTTP backend against real local HTTP servers: retries with backoff, errors that do
not retry, the API key from the environment, token and cost accounting, the SQLite response cache, and the
project's own server (here proxying to an upstream server, so no model is needed)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evolve.llm.base import ChatMessage, ChatRequest, LLMError
from evolve.llm.cache import CachedBackend, ResponseCache
from evolve.llm.openai_backend import OpenAIBackend
from evolve.llm.server import LLMServer


class Upstream:
    """A real HTTP server speaking the chat-completions protocol that fails the first ``fail`` requests with
    ``status`` and then answers with the request's last message reversed. Records every request body."""

    def __init__(self, fail: int = 0, status: int = 503) -> None:
        self.fail = fail
        self.status = status
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        up = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                return

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                up.bodies.append(body)
                up.headers.append(dict(self.headers))
                if len(up.bodies) <= up.fail:
                    data = b'{"error": {"message": "busy"}}'
                    self.send_response(up.status)
                else:
                    text = body["messages"][-1]["content"][::-1]
                    data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text},
                                                    "finish_reason": "stop"}],
                                       "usage": {"prompt_tokens": 1000, "completion_tokens": 50}}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _req(text: str = "hello", seed: int | None = 7, grammar: str | None = None) -> ChatRequest:
    return ChatRequest(messages=(ChatMessage("user", text),), max_new_tokens=16, seed=seed, grammar=grammar)


def test_retries_transient_errors_with_backoff_and_accounts_cost():
    with Upstream(fail=2, status=503) as up:
        be = OpenAIBackend(up.url, "m", backoff_s=0.01, max_retries=3, usd_per_mtok_prompt=2.0,
                           usd_per_mtok_completion=10.0)
        c = be.chat(_req("abc", grammar='root ::= "x"'))
    assert c.text == "cba"
    assert be.retries == 2 and len(up.bodies) == 3
    assert (c.prompt_tokens, c.completion_tokens) == (1000, 50)
    assert c.cost_usd == pytest.approx((1000 * 2.0 + 50 * 10.0) / 1e6)
    assert be.usage.requests == 1 and be.usage.cost_usd == pytest.approx(0.0025)
    body = up.bodies[-1]
    assert body["seed"] == 7 and body["max_tokens"] == 16 and body["guided_grammar"] == 'root ::= "x"'


def test_client_errors_fail_at_once_and_unreachable_servers_after_retries():
    with Upstream(fail=5, status=400) as up:
        be = OpenAIBackend(up.url, "m", backoff_s=0.01, max_retries=3)
        with pytest.raises(LLMError, match="HTTP 400"):
            be.chat(_req())
        assert len(up.bodies) == 1
        port = up.httpd.server_address[1]
    be = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", backoff_s=0.01, max_retries=1, timeout_s=2)
    with pytest.raises(LLMError, match="gave up after 2 attempts"):
        be.chat(_req())


def test_api_key_comes_from_the_named_environment_variable(monkeypatch):
    monkeypatch.delenv("PTXFORGE_TEST_KEY", raising=False)
    with pytest.raises(LLMError, match="PTXFORGE_TEST_KEY is not set"):
        OpenAIBackend("http://127.0.0.1:9/v1", "m", api_key_env="PTXFORGE_TEST_KEY")
    monkeypatch.setenv("PTXFORGE_TEST_KEY", "sk-test-123")
    with Upstream() as up:
        be = OpenAIBackend(up.url, "m", api_key_env="PTXFORGE_TEST_KEY", guided="none")
        be.chat(_req(grammar='root ::= "x"'))
    assert up.headers[0]["Authorization"] == "Bearer sk-test-123"
    assert "guided_grammar" not in up.bodies[0]  # guided="none": parse and reject instead


def test_bad_settings_are_named():
    with pytest.raises(LLMError, match="base_url"):
        OpenAIBackend("127.0.0.1:8000", "m")
    with pytest.raises(LLMError, match=r"llm\.guided"):
        OpenAIBackend("http://x/v1", "m", guided="outlines")


def test_response_cache_answers_a_resumed_run_without_a_call(tmp_path):
    path = tmp_path / "cache.sqlite"
    with Upstream() as up:
        be = CachedBackend(OpenAIBackend(up.url, "m"), ResponseCache(path))
        first = be.chat(_req("abc", seed=1))
        again = be.chat(_req("abc", seed=1))
        other_seed = be.chat(_req("abc", seed=2))
        unseeded = [be.chat(_req("abc", seed=None)) for _ in range(2)]
        assert len(up.bodies) == 4  # abc/1, abc/2 and both unseeded calls; the repeat was a hit
        # A new process (fresh cache object on the same file) is answered from disk.
        be2 = CachedBackend(OpenAIBackend(up.url, "m"), ResponseCache(path))
        resumed = be2.chat(_req("abc", seed=1))
        assert len(up.bodies) == 4
    assert not first.cached and again.cached and resumed.cached and not other_seed.cached
    assert resumed.text == first.text == "cba"
    assert resumed.completion_tokens == first.completion_tokens  # the bandit sees the same cost after resume
    assert be.usage.cache_hits == 1 and be.usage.requests == 5 and not unseeded[1].cached
    assert len(ResponseCache(path)) == 2


def test_project_server_speaks_the_protocol(tmp_path):
    with Upstream() as up, LLMServer(OpenAIBackend(up.url, "upstream"), served_name="proxy") as srv:
        client = OpenAIBackend(srv.url, "proxy")
        c = client.chat(_req("xyz", grammar='root ::= "a"'))
        assert c.text == "zyx" and c.prompt_tokens == 1000
        assert up.bodies[0]["guided_grammar"] == 'root ::= "a"'  # passed through to the upstream
        with urllib.request.urlopen(srv.url + "/models") as r:
            assert json.loads(r.read())["data"][0]["id"] == "proxy"
        bad = urllib.request.Request(srv.url + "/chat/completions", data=b'{"messages": []}', method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad)
        assert e.value.code == 400 and "messages" in json.loads(e.value.read())["error"]["message"]
        assert srv.requests == 1
