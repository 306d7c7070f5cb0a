"""The language-model backend contract: a chat request in, one completion with its cost out.

Every backend (local transformers, OpenAI-compatible HTTP, the response cache wrapped around either) takes a
``ChatRequest`` and returns a ``Completion``. Model text is data: nothing here executes it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class LLMError(RuntimeError):
    """A backend could not produce a completion (bad configuration, HTTP failure after retries, model load)."""


class LLMTimeout(LLMError):
    """A request ran past its deadline (``ChatRequest.timeout_s``, or the backend's per-request timeout)."""


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn. ``role`` is ``"system" | "user" | "assistant"``; ``content`` plain text."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant"):
            raise ValueError(f"ChatMessage.role must be system, user or assistant, got {self.role!r}")


@dataclass(frozen=True)
class ChatRequest:
    """What a backend is asked to do.

    messages: the conversation, oldest first.
    max_new_tokens: upper bound on generated tokens.
    temperature: sampling temperature (0 = greedy); top_p: nucleus mass in (0, 1].
    seed: sampling seed (local backends seed torch with it; HTTP backends send it as ``seed``).
    grammar: an EBNF grammar (xgrammar / GBNF dialect, start symbol ``root``) every completion must match,
        or None for free text. Local backends enforce it with a logits processor; HTTP backends send it as
        the ``guided_grammar`` extension field when the server offers guided decoding.
    stop: strings at which generation stops (not included in the text).
    timeout_s: wall seconds this request may take in all, retries included (None: the backend's own default).
        An HTTP backend stops retrying and raises LLMTimeout at the deadline; a local backend stops generating
        (transformers ``max_time``) and returns what it has with ``finish_reason="time"``. Not part of the
        cache key (it does not change what a finished generation says).
    """

    messages: tuple[ChatMessage, ...]
    max_new_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int | None = None
    grammar: str | None = None
    stop: tuple[str, ...] = ()
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError("ChatRequest.messages is empty")
        if self.max_new_tokens < 1:
            raise ValueError(f"ChatRequest.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"ChatRequest.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"ChatRequest.top_p must be in (0, 1], got {self.top_p}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"ChatRequest.timeout_s must be > 0, got {self.timeout_s}")

    def key(self, model: str) -> str:
        """Hex SHA-256 over the model id and every field that changes the output (the cache key)."""
        payload = {"model": model, **asdict(self)}
        payload.pop("timeout_s", None)
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Completion:
    """One generated answer and what it cost.

    text: the generated text (stop strings and end-of-turn tokens removed).
    prompt_tokens / completion_tokens: token counts as the backend's tokenizer sees them.
    seconds: wall-clock seconds the generation took (a cache hit keeps the original call's value).
    cost_usd: price in US dollars from the backend's configured per-token prices (0 for local models).
    finish_reason: ``"stop"`` (end of turn or grammar complete) or ``"length"`` (hit max_new_tokens).
    cached: True when the cache answered without calling the model.
    """

    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0
    finish_reason: str = "stop"
    cached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. grammar_terminated (local constrained decoding)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Completion:
        return cls(**d)


@dataclass
class Usage:
    """Running totals a backend keeps: requests, tokens, seconds, USD, cache hits."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0
    cache_hits: int = 0

    def add(self, c: Completion) -> None:
        self.requests += 1
        if c.cached:
            self.cache_hits += 1
            return
        self.prompt_tokens += c.prompt_tokens
        self.completion_tokens += c.completion_tokens
        self.seconds += c.seconds
        self.cost_usd += c.cost_usd


class LLMBackend(Protocol):
    """A chat model. ``model`` names it (hub id, path or served name); ``usage`` accumulates costs."""

    model: str
    usage: Usage

    def chat(self, request: ChatRequest) -> Completion:
        """Generate one completion; raises LLMError when the backend fails."""
        ...
