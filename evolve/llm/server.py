"""A small OpenAI-compatible HTTP server that serves any backend (by default the local transformers model).

Endpoints (the subset of the OpenAI API the project uses):
- ``POST /v1/chat/completions``: body ``{model, messages, max_tokens, temperature, top_p, seed, stop,
  guided_grammar | grammar}``; answers ``{id, object: "chat.completion", created, model,
  choices: [{index, message: {role, content}, finish_reason}], usage: {prompt_tokens, completion_tokens,
  total_tokens}}``. ``guided_grammar`` (vLLM's extension field) or ``grammar`` carries an EBNF grammar that the
  local backend enforces with xgrammar.
- ``GET /v1/models``: ``{object: "list", data: [{id, object: "model"}]}``.
- ``GET /health``: ``{"status": "ok"}``.
Bad requests get HTTP 400 with ``{"error": {"message", "type"}}`` naming the offending field.

Binds 127.0.0.1 by default; port 0 picks a free ephemeral port. Requests are served one at a time by the
backend (a ThreadingHTTPServer accepts concurrently; the backend serialises generation).

Run: ``python -m evolve.llm.server --model smollm2 --port 8000``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from evolve.llm.base import ChatMessage, ChatRequest, LLMBackend, LLMError


class _BadRequest(ValueError):
    pass


def _request_from_body(body: Any) -> ChatRequest:
    """Validate an OpenAI chat-completions body into a ChatRequest; _BadRequest names the bad field."""
    if not isinstance(body, dict):
        raise _BadRequest("request body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _BadRequest("'messages' must be a non-empty list")
    messages = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            raise _BadRequest(f"messages[{i}] must be an object with string 'role' and 'content'")
        try:
            messages.append(ChatMessage(str(m.get("role")), m["content"]))
        except ValueError as e:
            raise _BadRequest(f"messages[{i}]: {e}") from None
    grammar = body.get("guided_grammar", body.get("grammar"))
    if grammar is not None and not isinstance(grammar, str):
        raise _BadRequest("'guided_grammar' must be a string (EBNF)")
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    try:
        return ChatRequest(
            messages=tuple(messages),
            max_new_tokens=int(body.get("max_tokens", body.get("max_completion_tokens", 256))),
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            seed=None if body.get("seed") is None else int(body["seed"]),
            grammar=grammar,
            stop=tuple(str(s) for s in stop),
        )
    except (TypeError, ValueError) as e:
        raise _BadRequest(str(e)) from None


class LLMServer:
    """Serves ``backend`` over the OpenAI chat-completions protocol on ``host:port`` (port 0: ephemeral).

    ``start()`` returns at once (a daemon thread serves); ``url`` is the ``/v1`` base URL; ``stop()`` shuts
    down and closes the socket. Usable as a context manager."""

    def __init__(self, backend: LLMBackend, host: str = "127.0.0.1", port: int = 0,
                 served_name: str | None = None) -> None:
        self.backend = backend
        self.served_name = served_name or backend.model
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet: tests and runs own stdout
                return

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, code: int, message: str, kind: str) -> None:
                self._send(code, {"error": {"message": message, "type": kind}})

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.served_name, "object": "model"}]})
                elif self.path.rstrip("/") == "/health":
                    self._send(200, {"status": "ok"})
                else:
                    self._error(404, f"no route GET {self.path}", "not_found")

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._error(404, f"no route POST {self.path}", "not_found")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length).decode() or "null")
                    req = _request_from_body(body)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    self._error(400, f"body is not JSON: {e}", "invalid_request_error")
                    return
                except _BadRequest as e:
                    self._error(400, str(e), "invalid_request_error")
                    return
                try:
                    c = server.backend.chat(req)
                except LLMError as e:
                    self._error(400 if "grammar" in str(e) else 500, str(e), "backend_error")
                    return
                server.requests += 1
                self._send(200, {
                    "id": "chatcmpl-" + uuid.uuid4().hex[:24],
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": server.served_name,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text},
                                 "finish_reason": c.finish_reason}],
                    "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                              "total_tokens": c.total_tokens},
                })

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients, e.g. ``http://127.0.0.1:41235/v1``."""
        return f"http://{self._httpd.server_address[0]}:{self.port}/v1"

    def start(self) -> LLMServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="llm-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Command line: serve a transformers model until interrupted."""
    p = argparse.ArgumentParser(prog="python -m evolve.llm.server", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="hub id, local path, or 'smollm2' (embedded)")
    p.add_argument("--gguf-file", default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args(argv)
    from evolve.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend(args.model, gguf_file=args.gguf_file, device=args.device)
    srv = LLMServer(backend, args.host, args.port).start()
    print(f"serving {args.model} at {srv.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
