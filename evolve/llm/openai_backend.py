"""OpenAI-compatible chat completions over HTTP (vLLM, llama.cpp server, hosted APIs, ``evolve.llm.server``).

POST ``{base_url}/chat/completions`` with ``model, messages, max_tokens, temperature, top_p, seed, stop``
(the OpenAI Chat Completions request body). A grammar is sent as an extension field when the server offers
guided decoding: ``guided_grammar`` (vLLM's name; also what ``evolve.llm.server`` reads) or ``grammar``
(llama.cpp server, GBNF). With ``guided="none"`` the grammar is not sent and the caller parses and rejects.

Bounds. Each HTTP request waits at most ``timeout_s`` seconds (default 30) on the socket. Transient failures
(connection errors, timeouts, HTTP 408/409/429/5xx) are retried ``max_retries`` times with exponential backoff
(``backoff_s * 2**attempt`` seconds, honouring a ``Retry-After`` header), never past the request's deadline
(``ChatRequest.timeout_s``): the call as a whole, retries and waits included, ends by then (LLMTimeout). Other
HTTP errors fail at once.
Uses only the standard library (urllib), so no client package is needed.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

from evolve.llm.base import ChatRequest, Completion, LLMError, LLMTimeout, Usage

GUIDED_FIELDS = {"guided_grammar": "guided_grammar", "grammar": "grammar", "none": None}
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class OpenAIBackend:
    """A chat model behind an OpenAI-compatible endpoint.

    base_url: e.g. ``http://127.0.0.1:8000/v1``; model: the served model name.
    api_key_env: name of the environment variable holding the key (None: send no Authorization header).
    timeout_s: per-request socket timeout in seconds (default 30); max_retries: extra attempts after the first;
    backoff_s: first retry delay in seconds (doubles each retry).
    guided: ``"guided_grammar" | "grammar" | "none"``, how a request's grammar reaches the server.
    usd_per_mtok_prompt / usd_per_mtok_completion: prices in USD per million tokens for cost accounting.
    Raises LLMError when ``api_key_env`` names a variable that is not set, or ``guided`` is unknown.
    """

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = None, timeout_s: float = 30.0,
                 max_retries: int = 3, backoff_s: float = 1.0, guided: str = "guided_grammar",
                 usd_per_mtok_prompt: float = 0.0, usd_per_mtok_completion: float = 0.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise LLMError(f"llm.base_url must start with http:// or https://, got {base_url!r}")
        if guided not in GUIDED_FIELDS:
            raise LLMError(f"llm.guided must be one of {sorted(GUIDED_FIELDS)}, got {guided!r}")
        if max_retries < 0 or timeout_s <= 0 or backoff_s < 0:
            raise LLMError(f"llm: need max_retries >= 0, timeout_s > 0, backoff_s >= 0; got {max_retries}, "
                           f"{timeout_s}, {backoff_s}")
        self.api_key: str | None = None
        if api_key_env:
            self.api_key = os.environ.get(api_key_env)
            if not self.api_key:
                raise LLMError(f"llm.api_key_env: environment variable {api_key_env} is not set")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.guided_field = GUIDED_FIELDS[guided]
        self.prices = (usd_per_mtok_prompt, usd_per_mtok_completion)
        self.usage = Usage()
        self.retries = 0
        self.requests = 0  # HTTP requests sent (attempts included)

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "max_tokens": request.max_new_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
        }
        if request.seed is not None:
            body["seed"] = int(request.seed)
        if request.stop:
            body["stop"] = list(request.stop)
        if request.grammar and self.guided_field:
            body[self.guided_field] = request.grammar
        return body

    def _post(self, body: dict[str, Any], deadline_s: float | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/chat/completions"
        last = ""
        end = None if deadline_s is None else time.monotonic() + deadline_s
        for attempt in range(self.max_retries + 1):
            delay = self.backoff_s * 2 ** attempt
            timeout = self.timeout_s
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    raise LLMTimeout(f"{url}: no answer within the request deadline of {deadline_s:.0f} s "
                                     f"({attempt} attempt(s); last: {last or 'none'})")
                timeout = min(timeout, left)
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                self.requests += 1
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as e:
                detail = e.read().decode(errors="replace")[:500]
                last = f"HTTP {e.code} from {url}: {detail}"
                if e.code not in _RETRY_STATUS:
                    raise LLMError(last) from None
                retry_after = e.headers.get("Retry-After") if e.headers else None
                if retry_after and retry_after.replace(".", "", 1).isdigit():
                    delay = max(delay, float(retry_after))
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                last = f"{type(e).__name__} contacting {url}: {getattr(e, 'reason', e)}"
            except json.JSONDecodeError as e:
                raise LLMError(f"response from {url} is not JSON: {e}") from None
            if attempt < self.max_retries:
                if end is not None and time.monotonic() + delay >= end:
                    raise LLMTimeout(f"{last} (stopped retrying: the next attempt would start after the request "
                                     f"deadline of {deadline_s:.0f} s)")
                self.retries += 1
                time.sleep(delay)
        if "timed out" in last or "TimeoutError" in last:
            raise LLMTimeout(f"{last} (gave up after {self.max_retries + 1} attempts of at most {self.timeout_s:g} s)")
        raise LLMError(f"{last} (gave up after {self.max_retries + 1} attempts)")

    def chat(self, request: ChatRequest) -> Completion:
        """POST one chat completion; raises LLMError after the retries are spent or on a malformed answer,
        LLMTimeout when the request's deadline passes."""
        start = time.perf_counter()
        out = self._post(self._body(request), request.timeout_s)
        seconds = time.perf_counter() - start
        try:
            choice = out["choices"][0]
            text = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise LLMError(f"malformed chat completion (no choices[0].message.content): {str(out)[:300]}") from None
        usage = out.get("usage") or {}
        pt, ct = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        cost = (pt * self.prices[0] + ct * self.prices[1]) / 1e6
        c = Completion(text=text, model=self.model, prompt_tokens=pt, completion_tokens=ct, seconds=seconds,
                       cost_usd=cost, finish_reason=str(choice.get("finish_reason") or "stop"),
                       extra={"grammar_sent": bool(request.grammar and self.guided_field)})
        self.usage.add(c)
        return c
