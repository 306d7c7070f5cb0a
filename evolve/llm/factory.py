"""Build LLM backends from configuration mappings (``conf/llm/*.yaml``), loading each model once per process.

A backend config is a mapping with ``backend: transformers | openai`` plus that backend's keyword arguments
(``evolve.llm.transformers_backend.TransformersBackend``, ``evolve.llm.openai_backend.OpenAIBackend``), and
optionally ``cache: PATH`` (a SQLite response cache, ``evolve.llm.cache``). A backend of one's own is
``_target_: my_pkg.MyBackend`` (an ``evolve.llm.base.LLMBackend``) plus its keyword arguments, instead of
``backend``. Keys used by the operator rather
than the backend (sampling and decoding settings, see ``SAMPLING_KEYS``) are ignored here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from evolve.llm.base import LLMBackend, LLMError
from evolve.llm.cache import CachedBackend, ResponseCache

SAMPLING_KEYS = ("max_new_tokens", "temperature", "top_p", "constrained")
_TRANSFORMERS_KEYS = ("model", "gguf_file", "device", "dtype", "threads", "grammar_cache", "max_time_s")
_OPENAI_KEYS = ("base_url", "model", "api_key_env", "timeout_s", "max_retries", "backoff_s", "guided",
                "usd_per_mtok_prompt", "usd_per_mtok_completion")

_loaded: dict[str, LLMBackend] = {}
_lock = threading.Lock()


def plain_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A plain dict from a mapping or an OmegaConf ``DictConfig`` (interpolations resolved)."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return dict(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    except ImportError:
        pass
    return dict(cfg)


def build_backend(cfg: Mapping[str, Any], *, key: str = "llm") -> LLMBackend:
    """A backend for ``cfg``; the same config (by value) returns the same loaded instance.

    ``key`` names the config node in error messages. Raises LLMError for an unknown ``backend`` or key,
    naming ``key.<field>`` and the allowed values."""
    d = plain_config(cfg)
    kind = d.pop("backend", None)
    cache_path = d.pop("cache", None)
    for k in SAMPLING_KEYS:
        d.pop(k, None)
    if "_target_" in d:
        return _build_target(d, cache_path, key)
    allowed = {"transformers": _TRANSFORMERS_KEYS, "openai": _OPENAI_KEYS}
    if kind not in allowed:
        raise LLMError(f"{key}.backend: {kind!r} is not one of {sorted(allowed)}")
    unknown = sorted(set(d) - set(allowed[kind]))
    if unknown:
        raise LLMError(f"{key}: unknown field(s) {unknown} for backend {kind}; allowed: "
                       f"{sorted((*allowed[kind], 'backend', 'cache', *SAMPLING_KEYS))}")
    ident = json.dumps([kind, d, cache_path], sort_keys=True, default=str)
    with _lock:
        if ident in _loaded:
            return _loaded[ident]
        if kind == "transformers":
            from evolve.llm.transformers_backend import TransformersBackend

            backend: LLMBackend = TransformersBackend(**d)
        else:
            from evolve.llm.openai_backend import OpenAIBackend

            if "base_url" not in d or "model" not in d:
                raise LLMError(f"{key}: backend openai needs base_url and model")
            backend = OpenAIBackend(**d)
        if cache_path:
            backend = CachedBackend(backend, ResponseCache(cache_path))
        _loaded[ident] = backend
        return backend


def _build_target(d: dict[str, Any], cache_path: str | None, key: str) -> LLMBackend:
    """A backend from ``_target_`` + keyword arguments (``hydra.utils.instantiate``), cached by value like the
    built-in ones. LLMError naming ``key._target_`` when it cannot be built."""
    from hydra.utils import instantiate

    ident = json.dumps(["_target_", d, cache_path], sort_keys=True, default=str)
    with _lock:
        if ident in _loaded:
            return _loaded[ident]
        try:
            backend: LLMBackend = instantiate(d, _convert_="all")
        except Exception as e:
            raise LLMError(f"{key}._target_: cannot build {d['_target_']!r}: {e.__cause__ or e}") from None
        if cache_path:
            backend = CachedBackend(backend, ResponseCache(cache_path))
        _loaded[ident] = backend
        return backend
