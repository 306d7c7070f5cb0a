"""The LLM mutation operator: language models read a kernel, its measurements and the archive's lessons, and
write edit scripts (``population.edits``) in three roles.

- optimizer (``propose``): a faster variant of the parent.
- repairer (``repair``): given a child that failed ptxas or the gate and the message, a fix (an edit script
  against the child). ``propose`` also calls it inline when its own child fails the verify compile
  (``inline_repairs`` times), and returns the composed parent -> repaired-child script.
- critic (``reflect``): after an evaluation, one line for the lessons memory.

Pipeline of one proposal: pick a role x model arm (UCB1 bandit, ``evolve.selection.OperatorSelector``) ->
prompt (role instructions; the parent's canonical listing with line numbers, or its focus region: the
innermost loop with global loads, a basic block, or the whole entry; the parent's measurements; one or two
inspirations as edit scripts; lessons; the output format) -> generation, constrained by the focused edit
grammar (``evolve.llm.constrained``) for local models and for HTTP servers with guided decoding, otherwise
parse-and-reject -> ``parse_edit_script`` -> ``apply_script`` (registers introduced are auto-declared) ->
``compile_ptx(verify_only=True)``. A proposal that fails every attempt raises ``NoProposal`` with the stage
and message of the last failure. Model text is data: it is parsed, never executed, and sanitised
(``evolve.llm.prompts.sanitize``) before it reaches another prompt.

Bandit reward, in [0, 1], for an arm's proposal: ``value / max(1, cost / cost_ref)`` where value is
``reward_validity`` for a child that evaluated ok plus ``reward_improvement * min(1, gain / gain_scale)``,
gain = child objective / parent objective - 1 (>= 0), and cost is the arm's tokens (``cost_unit="tokens"``)
or generation seconds (``"seconds"``) spent on that proposal; so a cheaper arm with the same gains earns more.
A repair arm earns ``value = 1`` for a fix that compiles (and evaluates ok when the engine reports it).

Bounds and failures. One proposal (all its generations, inline repairs and HTTP retries) ends within
``proposal_timeout_s`` (default 120 s): each generation gets the time left as its request deadline
(``ChatRequest.timeout_s``; HTTP backends also cap each request at their own ``timeout_s``, local ones at
``max_time_s``). A backend failure (HTTP error after retries, timeout, a generation cut by its time limit) is an
*LLM failure*: the proposal ends at once with ``LLMFailure`` (a NoProposal with status ``llm_error`` that the
engine writes to the store at once and never turns into a lesson), the live progress line shows the count, and
after ``failure_budget`` failures in a run (default 5), or ``duplicate_budget`` proposals in a row that repeat
an already evaluated kernel (default 10), the operator switches itself off (``disabled`` says why; the engine
stops selecting it and the run goes on with the other operators). The counts and the switch are part of
``state_dict``, so a resumed run continues with the same state.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evolve.llm.base import ChatMessage, ChatRequest, Completion, LLMBackend, LLMError, LLMTimeout
from evolve.llm.constrained import (
    EDIT_KINDS,
    GrammarSpec,
    compatible_types,
    focused_edit_grammar,
    kernel_vocabulary,
    register_types,
)
from evolve.llm.factory import plain_config
from evolve.llm.prompts import (
    FORMAT_HELP,
    ROLE_INSTRUCTIONS,
    assemble,
    failure_section,
    inspirations_section,
    lessons_section,
    listing_section,
    measurements_section,
    one_line,
    sanitize,
    script_from_diff,
)
from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import cached_listing
from evolve.progress import activity, note
from evolve.selection import OperatorSelector
from population.ast import Function, Instruction, Label
from population.kernel import Kernel

log = logging.getLogger(__name__)


class LLMFailure(NoProposal):
    """The language model could not answer (HTTP error, timeout, or the operator is switched off): a row with
    status ``llm_error``, never a lesson (it says nothing about the edit)."""

    status = "llm_error"
    lesson = False


SYSTEM_PROMPT = ("You are an expert NVIDIA GPU performance engineer who edits PTX (ISA 9.0, sm_90) kernels. "
                 "You answer only with edit scripts in the requested format.")
ROLE_KINDS = ("optimizer", "repairer", "critic")
FOCUS_MODES = ("loop", "block", "entry")
CRITIC_GRAMMAR = 'root ::= [A-Z] [^\\n]{15,150} "\\n"\n'


@dataclass
class Role:
    """One arm of the bandit: a role kind with its instructions, a model and decoding settings.

    name: arm name (unique); kind: optimizer | repairer | critic; model: key of the operator's models;
    instructions: overrides ``ROLE_INSTRUCTIONS[kind]``; focus: loop | block | entry; show: focus | full
    (print only the focus region and declarations, or the whole listing); kinds: edit keywords the grammar
    allows; max_edits, max_block_lines: grammar bounds; max_new_tokens, temperature, top_p: sampling;
    max_focus_lines: a longer focus region is cut to a window of this many lines (keeps prompts short);
    edit_window: for a repair whose failure names a line, edits may touch that line +- this many lines.
    """

    name: str
    kind: str = "optimizer"
    model: str = "default"
    instructions: str | None = None
    focus: str = "loop"
    show: str = "focus"
    kinds: tuple[str, ...] = EDIT_KINDS
    max_edits: int = 2
    max_block_lines: int = 4
    max_new_tokens: int = 160
    temperature: float = 0.8
    top_p: float = 0.95
    max_focus_lines: int = 48
    edit_window: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ROLE_KINDS:
            raise ValueError(f"llm role {self.name!r}: kind {self.kind!r} is not one of {list(ROLE_KINDS)}")
        if self.focus not in FOCUS_MODES:
            raise ValueError(f"llm role {self.name!r}: focus {self.focus!r} is not one of {list(FOCUS_MODES)}")
        if self.show not in ("focus", "full"):
            raise ValueError(f"llm role {self.name!r}: show {self.show!r} is not one of ['focus', 'full']")
        bad = [k for k in self.kinds if k not in EDIT_KINDS]
        if bad:
            raise ValueError(f"llm role {self.name!r}: kinds {bad} not in {list(EDIT_KINDS)}")
        self.kinds = tuple(self.kinds)


DEFAULT_ROLES = (
    {"name": "optimizer", "kind": "optimizer"},
    {"name": "repairer", "kind": "repairer", "focus": "entry", "temperature": 0.5,
     "kinds": ("REPLACE", "INSERT", "DELETE", "MODIFIER")},
    {"name": "critic", "kind": "critic", "max_new_tokens": 48, "temperature": 0.3},
)


@dataclass
class _Attempt:
    """What one generation gave: the stage it reached and why it stopped."""

    stage: str  # "generate" | "parse" | "apply" | "compile" | "ok"
    reason: str = ""
    text: str = ""
    script: Any = None
    child: Kernel | None = None
    cost: float = 0.0


@dataclass
class ProposalStats:
    """Counters over every generation the operator made (for experiments and the lessons memory)."""

    generations: int = 0
    parsed: int = 0
    applied: int = 0
    compiled: int = 0
    proposals: int = 0
    no_proposal: int = 0
    repairs_tried: int = 0
    repairs_ok: int = 0
    tokens: int = 0
    seconds: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)


def _line_of(reason: str) -> int | None:
    m = re.search(r"\bline (\d+)", reason)
    return int(m.group(1)) if m else None


def truncate_to_complete(text: str) -> str:
    """``text`` cut after its last complete edit (a single-line edit, or a REPLACE/INSERT block closed by END);
    a generation stopped by max_new_tokens then still yields the edits it finished."""
    keep = 0
    in_block = False
    lines = text.split("\n")
    for i, raw in enumerate(lines):
        ln = raw.strip()
        if in_block:
            if ln == "END":
                in_block = False
                keep = i + 1
            continue
        if ln.startswith(("REPLACE", "INSERT")):
            in_block = True
        elif ln.startswith(("DELETE", "MODIFIER", "LAUNCH", "DIRECTIVE", "KNOBS")) and (
                i + 1 < len(lines) or text.endswith("\n")):
            keep = i + 1
    return "".join(ln + "\n" for ln in lines[:keep])


class LLMOperator:
    """Language-model mutation operator (module docstring). Implements ``evolve.operators.base.Operator``
    plus ``repair`` and ``reflect``; its bandit and pending rewards checkpoint via ``state_dict``/``load_state``.

    workload: the Workload (knob space for KNOBS, ``instantiate`` for template edits).
    llm: one backend config (``conf/llm/*.yaml``: ``backend``, model settings, sampling keys
        ``max_new_tokens/temperature/top_p/constrained``) or ``{"models": {name: config, ...}}``.
    backends: already-built backends by model name (overrides ``llm``; tests and experiments use it).
    roles: role specs (``Role`` fields); default: one optimizer, one repairer, one critic on model "default".
    arch: ptxas target of the verify compile (None: the PTX's own .target); compile_check: run it; attempts: generations per proposal;
    inline_repairs: repair rounds inside ``propose`` for a child that fails the verify compile;
    inspirations / lessons: how many to show; critic_every: run the critic on every n-th reflect (0 = never);
    cost_unit: "tokens" | "seconds"; cost_ref: tokens (or seconds) of one "unit" proposal; gain_scale: the
    relative gain that earns the full improvement reward; ucb_c, reward_validity, reward_improvement: bandit;
    gpu: ``targets.spec`` name whose achievable copy bandwidth is the prompt's roofline when a result
    carries no measured fraction (None: leave it out).
    proposal_timeout_s: wall seconds one proposal (or repair) may take in all; failure_budget: LLM failures
    per run after which the operator switches off (0 = never); duplicate_budget: proposals in a row repeating
    an evaluated kernel after which it switches off (0 = never). See the module docstring.
    Raises ValueError on a bad setting, naming it.
    """

    def __init__(self, workload: Any = None, *, name: str = "llm", llm: Mapping[str, Any] | None = None,
                 backends: Mapping[str, LLMBackend] | None = None, roles: Sequence[Mapping[str, Any]] | None = None,
                 arch: str | None = None, compile_check: bool = True, attempts: int = 2, inline_repairs: int = 1,
                 inspirations: int = 2, lessons: int = 8, critic_every: int = 1, cost_unit: str = "tokens",
                 cost_ref: float = 2000.0, gain_scale: float = 0.1, ucb_c: float = 1.0,
                 reward_validity: float = 0.2, reward_improvement: float = 0.8, constrained: bool | None = None,
                 gpu: str | None = "h200", weight: float | None = None, proposal_timeout_s: float = 120.0,
                 failure_budget: int = 5, duplicate_budget: int = 10, **unknown: Any) -> None:
        if unknown:
            raise ValueError(f"llm operator: unknown parameter(s) {sorted(unknown)}")
        if proposal_timeout_s <= 0 or failure_budget < 0 or duplicate_budget < 0:
            raise ValueError(f"llm operator: need proposal_timeout_s > 0, failure_budget >= 0, duplicate_budget >= 0;"
                             f" got {proposal_timeout_s}, {failure_budget}, {duplicate_budget}")
        self.proposal_timeout_s = float(proposal_timeout_s)
        self.failure_budget = int(failure_budget)
        self.duplicate_budget = int(duplicate_budget)
        self.failures = 0  # LLM failures this run
        self.duplicates_in_row = 0
        self.disabled: str | None = None  # why the operator switched itself off
        self.last_model: str | None = None
        if cost_unit not in ("tokens", "seconds"):
            raise ValueError(f"llm operator cost_unit: {cost_unit!r} is not one of ['tokens', 'seconds']")
        if attempts < 1 or inline_repairs < 0 or critic_every < 0 or cost_ref <= 0 or gain_scale <= 0:
            raise ValueError("llm operator: need attempts >= 1, inline_repairs >= 0, critic_every >= 0, "
                             "cost_ref > 0, gain_scale > 0")
        self.name = name
        self.workload = workload
        self.gpu = gpu
        self.arch = arch
        self.compile_check = compile_check
        self.attempts = attempts
        self.inline_repairs = inline_repairs
        self.n_inspirations = inspirations
        self.n_lessons = lessons
        self.critic_every = critic_every
        self.cost_unit = cost_unit
        self.cost_ref = cost_ref
        self.gain_scale = gain_scale
        self.reward_validity = reward_validity
        self.reward_improvement = reward_improvement
        cfgs = _model_configs(llm)
        for mname, mcfg in cfgs.items():  # a bad endpoint is a configuration error, not a run of LLM failures
            url = mcfg.get("base_url")
            if mcfg.get("backend") == "openai" and not str(url or "").startswith(("http://", "https://")):
                where = "llm.base_url" if len(cfgs) == 1 and mname == "default" else f"llm.models.{mname}.base_url"
                raise ValueError(f"{where}: {url!r} is not an http:// or https:// URL")
        self._model_cfgs = cfgs
        self._backends: dict[str, LLMBackend] = dict(backends or {})
        defaults = next(iter(cfgs.values()), {}) if cfgs else {}
        self.constrained = bool(defaults.get("constrained", True)) if constrained is None else constrained
        sampling = {k: defaults[k] for k in ("max_new_tokens", "temperature", "top_p") if k in defaults}
        specs = [plain_config(r) for r in (roles if roles is not None else DEFAULT_ROLES)]
        self.roles: dict[str, Role] = {}
        for spec in specs:
            merged = {**sampling, **spec}
            if "kinds" in merged:
                merged["kinds"] = tuple(merged["kinds"])
            role = Role(**merged)
            if role.name in self.roles:
                raise ValueError(f"llm operator: role name {role.name!r} given twice")
            known = set(self._backends) | set(cfgs)
            if role.model not in known:
                raise ValueError(f"llm role {role.name!r}: model {role.model!r} is not one of {sorted(known)}")
            self.roles[role.name] = role
        self.selectors: dict[str, OperatorSelector] = {}
        for kind in ROLE_KINDS:
            arms = [r.name for r in self.roles.values() if r.kind == kind]
            if arms:
                self.selectors[kind] = OperatorSelector(arms=arms, kind="ucb", c=ucb_c)
        if "optimizer" not in self.selectors:
            raise ValueError("llm operator needs at least one role of kind 'optimizer'")
        self.stats = ProposalStats()
        # child identity -> (arm, cost, parent objective at propose time), settled by reflect()
        self.pending: OrderedDict[str, tuple[str, float, float | None]] = OrderedDict()
        self._reflects = 0
        self.last_reason = ""

    # ---------------------------------------------------------------------------------------- backends

    def backend(self, model: str) -> LLMBackend:
        """The backend for model key ``model`` (built from its config on first use)."""
        if model not in self._backends:
            from evolve.llm.factory import build_backend

            self._backends[model] = build_backend(self._model_cfgs[model], key=f"llm.models.{model}")
        return self._backends[model]

    def _generate(self, role: Role, messages: list[ChatMessage], grammar: str | None,
                  rng: np.random.Generator, deadline: float | None = None) -> Completion:
        """One generation, ending by ``deadline`` (``time.monotonic()`` seconds). LLMError from the backend;
        LLMTimeout when the deadline has passed or the generation was cut by its time limit."""
        seed = int(rng.integers(2**31 - 1))
        left = None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LLMTimeout(f"the proposal's {self.proposal_timeout_s:g} s were spent")
        req = ChatRequest(messages=tuple(messages), max_new_tokens=role.max_new_tokens,
                          temperature=role.temperature, top_p=role.top_p, seed=seed,
                          grammar=grammar if self.constrained else None, timeout_s=left)
        backend = self.backend(role.model)
        with activity(f"LLM generating ({role.name})"):
            c = backend.chat(req)
        self.last_model = str(getattr(backend, "model", role.model))  # provenance of a critic's lesson
        if c.finish_reason == "time":
            raise LLMTimeout(f"generation stopped at its time limit after {c.seconds:.0f} s "
                             f"({c.completion_tokens} tokens)")
        self.stats.generations += 1
        self.stats.tokens += c.total_tokens
        self.stats.seconds += c.seconds
        return c

    def _cost(self, c: Completion) -> float:
        return float(c.total_tokens) if self.cost_unit == "tokens" else float(c.seconds)

    # ------------------------------------------------------------------------------------ focus + grammar

    def focus_region(self, kernel: Kernel, lst: Any, mode: str, rng: np.random.Generator,
                     around: int | None = None, max_lines: int | None = None) -> tuple[tuple[int, int], str]:
        """(inclusive line range, description) of the region to edit in ``kernel``'s canonical listing.

        ``around``: a line to centre a 5-line window on (a ptxas error); otherwise ``mode``:
        loop = an innermost loop with a global load, picked by ``rng`` when several (else an innermost loop,
        else the entry), block = a random basic
        block with at least 3 instructions, entry = the whole entry body. A region longer than ``max_lines``
        is cut to a window of that many lines at a random (``rng``) offset."""
        (a, b), what = self._region(kernel, lst, mode, rng, around)
        if max_lines is not None and b - a + 1 > max_lines:
            a += int(rng.integers(0, b - a + 2 - max_lines))
            return (a, a + max_lines - 1), f"lines {a}-{a + max_lines - 1} of {what}"
        return (a, b), what

    def _region(self, kernel: Kernel, lst: Any, mode: str, rng: np.random.Generator,
                around: int | None) -> tuple[tuple[int, int], str]:
        fn = kernel.module.function(kernel.entry)
        where = {id(i.node): i.lineno for i in lst.lines if i.node is not None and i.function == kernel.entry}
        body_lines = sorted(where.values())
        if not body_lines:
            raise NoProposal(f"{self.name}: entry {kernel.entry} has no body to edit")
        entry_range = (body_lines[0], body_lines[-1])
        if around is not None:
            return (max(entry_range[0], around - 2), min(entry_range[1], around + 2)), f"around line {around}"
        if mode == "entry":
            return entry_range, "the whole entry"
        from population.cfg import basic_blocks, loops

        blocks = basic_blocks(fn)

        def span(instrs: list[Instruction]) -> tuple[int, int] | None:
            ls = [where[id(s)] for s in instrs if id(s) in where]
            return (min(ls), max(ls)) if ls else None

        if mode == "loop":
            lps = loops(fn)
            with_loads = [lp for lp in lps if any(
                i.opcode == "ld" and "global" in i.modifiers for b in lp.blocks for i in blocks[b].instructions)]
            pool = with_loads or lps
            deepest = [lp for lp in pool if lp.depth == max(lp2.depth for lp2 in pool)] if pool else []
            # Several innermost loops (e.g. the two passes over a row): any of them, by rng.
            pick = deepest[int(rng.integers(len(deepest)))] if deepest else None
            if pick is not None:
                instrs = [i for b in sorted(pick.blocks) for i in blocks[b].instructions]
                rng_ = span(instrs)
                if rng_ is not None:
                    start = rng_[0]
                    if start > 1 and isinstance(lst.line(start - 1).node, Label):
                        start -= 1
                    what = "the innermost loop with global loads" if with_loads else "the innermost loop"
                    return (start, rng_[1]), what
            return entry_range, "the whole entry (no loop)"
        big = [b for b in blocks if len(b.instructions) >= 3] or blocks
        b = big[int(rng.integers(len(big)))]
        rng_ = span(b.instructions)
        return (rng_ or entry_range), f"basic block {b.id}"

    def grammar_for(self, kernel: Kernel, lst: Any, focus: tuple[int, int], role: Role) -> str:
        """The focused EBNF grammar for ``kernel`` with edits limited to ``focus``."""
        fn: Function = kernel.module.function(kernel.entry)
        stems, opcodes, mods, syms = kernel_vocabulary(fn)
        reg_types = register_types(fn)
        lines = [i for i in lst.lines if focus[0] <= i.lineno <= focus[1] and i.function == kernel.entry]
        from evolve.llm.constrained import COMMON_MODIFIERS, COMMON_OPCODES

        knob_space = dict(getattr(self.workload, "knob_space", {}) or {}) if self.workload is not None else {}
        spec = GrammarSpec(
            lines=tuple(i.lineno for i in lines if i.node is not None),
            instruction_lines=tuple(i.lineno for i in lines if isinstance(i.node, Instruction)),
            line_modifiers={i.lineno: tuple(i.node.modifiers) for i in lines if isinstance(i.node, Instruction)},
            line_types={i.lineno: t for i in lines if isinstance(i.node, Instruction)
                        and (t := compatible_types(i.node, reg_types)) is not None},
            entries=(kernel.entry,),
            knob_space={k: tuple(int(v) for v in vs) for k, vs in knob_space.items()},
            register_prefixes=tuple(sorted(set(stems) | {"%p"})) or ("%r", "%rd", "%f", "%p"),
            opcodes=tuple(sorted(set(opcodes) | set(COMMON_OPCODES))),
            modifiers=tuple(sorted(set(mods) | set(COMMON_MODIFIERS))),
            symbols=syms,
            kinds=role.kinds,
            max_edits=role.max_edits,
            max_block_lines=role.max_block_lines,
        )
        return focused_edit_grammar(spec)

    # ------------------------------------------------------------------------------------------ checking

    def check(self, parent: Kernel, text: str) -> _Attempt:
        """Parse ``text`` as an edit script, apply it to ``parent`` and verify-compile the child.
        Returns the stage reached (``ok`` on success) with the reason of a failure."""
        from population.edits import EditApplyError, EditSyntaxError, apply_script, parse_edit_script

        text = sanitize(text, 20000)
        try:
            script = parse_edit_script(text)
        except EditSyntaxError as e:
            cut = truncate_to_complete(text)
            try:
                script = parse_edit_script(cut) if cut else None
            except EditSyntaxError:
                script = None
            if script is None:
                return _Attempt("parse", f"parse: {e}", text)
            text = cut
        if len(script) == 0:
            return _Attempt("parse", "parse: empty edit script", text)
        self.stats.parsed += 1
        instantiate = getattr(self.workload, "instantiate", None) if self.workload is not None else None
        try:
            child = apply_script(parent, script, operator=self.name, instantiate=instantiate)
        except (EditApplyError, ValueError, KeyError) as e:
            return _Attempt("apply", f"apply: {e}", text, script)
        self.stats.applied += 1
        if self.compile_check:
            from evaluators.toolchain import compile_ptx
            from evaluators.types import CompileError

            try:
                compile_ptx(child, self.arch, verify_only=True)
            except CompileError as e:
                return _Attempt("compile", f"compile: {e}", text, script, child)
            self.stats.compiled += 1
        return _Attempt("ok", "", text, script, child)

    def _llm_failure(self, where: str, e: BaseException) -> LLMFailure:
        """Count an LLM failure, switch the operator off when the budget is spent, show it; returns the
        LLMFailure to raise."""
        self.failures += 1
        reason = f"{where}: {type(e).__name__}: {e}"[:500]
        self._fail(f"generate: {e}")
        budget = f"/{self.failure_budget}" if self.failure_budget else ""
        if self.failure_budget and self.failures >= self.failure_budget and not self.disabled:
            self.disabled = f"{self.failures} LLM failures (failure_budget {self.failure_budget}); last: {reason}"
            note(self.name, f"{self.name}: switched off after {self.failures} LLM failures; the run goes on with "
                            f"the other operators (last: {reason[:200]})")
        else:
            note(self.name, f"{self.name}: LLM failure {self.failures}{budget}: {reason[:200]}")
        return LLMFailure(f"{self.name}: LLM failure {self.failures}{budget} in {reason}")

    def duplicate(self, child: Kernel) -> None:
        """The engine found ``child`` already evaluated: a wasted answer. ``duplicate_budget`` of them in a row
        switch the operator off."""
        entry = self.pending.pop(child.identity, None)
        if entry is None:
            return
        self.selectors["optimizer"].update(entry[0], 0.0)
        self.duplicates_in_row += 1
        if self.duplicate_budget and self.duplicates_in_row >= self.duplicate_budget and not self.disabled:
            self.disabled = (f"{self.duplicates_in_row} proposals in a row repeated an evaluated kernel "
                             f"(duplicate_budget {self.duplicate_budget})")
            note(self.name, f"{self.name}: switched off: {self.disabled}; the run goes on with the other operators")

    def _fail(self, stage_reason: str) -> None:
        stage = stage_reason.split(":", 1)[0]
        self.stats.failures[stage] = self.stats.failures.get(stage, 0) + 1
        self.last_reason = stage_reason

    # ------------------------------------------------------------------------------------------- prompts

    def _listing(self, module: Any) -> Any:
        return cached_listing(module)  # one listing per parent: prompt, grammar and inline repair share it

    def optimizer_messages(self, parent: Kernel, ctx: OperatorContext, role: Role, lst: Any,
                           focus: tuple[int, int], focus_what: str) -> list[ChatMessage]:
        """System + user messages of the optimizer role for ``parent``."""
        gpu_gbps = None
        if self.gpu:
            from targets.spec import get_gpu

            gpu_gbps = get_gpu(self.gpu).copy_gbps  # roofline when the evaluator gives no measured copy rate
        user = assemble(
            listing_section(lst, focus, show=role.show, reason=focus_what),
            measurements_section(ctx.parent_result, ctx.workload, gpu_gbps),
            inspirations_section(parent, lst, ctx.inspirations, self._listing, self.n_inspirations),
            lessons_section(ctx.lessons, self.n_lessons),
            "## Task\n" + (role.instructions or ROLE_INSTRUCTIONS["optimizer"]),
            FORMAT_HELP + f"\nEdit only lines {focus[0]}-{focus[1]}.",
        )
        return [ChatMessage("system", SYSTEM_PROMPT), ChatMessage("user", user)]

    def repair_messages(self, child: Kernel, status: str, reason: str, role: Role, lst: Any,
                        focus: tuple[int, int], focus_what: str,
                        edit_range: tuple[int, int] | None = None) -> list[ChatMessage]:
        """System + user messages of the repairer role for a failed ``child`` (edits asked within
        ``edit_range``, default the focus)."""
        er = edit_range or focus
        where = f"line {er[0]}" if er[0] == er[1] else f"lines {er[0]}-{er[1]}"
        line = _line_of(reason)
        text = next((i.text for i in lst.lines if i.lineno == line), None) if line else None
        user = assemble(
            listing_section(lst, focus, show=role.show, reason=focus_what),
            "## The edit that produced this kernel\n" + sanitize(child.edit_text, 1200) if child.edit_text else "",
            failure_section(status, reason, line, text),
            "## Task\n" + (role.instructions or ROLE_INSTRUCTIONS["repairer"]),
            FORMAT_HELP + f"\nEdit only {where}.",
        )
        return [ChatMessage("system", SYSTEM_PROMPT), ChatMessage("user", user)]

    # -------------------------------------------------------------------------------------------- roles

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> Any:
        """An EditScript for ``parent`` that parses, applies and passes the verify compile.

        Raises NoProposal naming the role, the stage (parse, apply, compile) and the message of the last failed
        attempt; LLMFailure when the model could not answer (module docstring: bounds and failures)."""
        if self.disabled:
            raise LLMFailure(f"{self.name}: switched off: {self.disabled}")
        deadline = time.monotonic() + self.proposal_timeout_s
        arm = self.selectors["optimizer"].select(rng)
        role = self.roles[arm]
        lst = self._listing(parent.module)
        focus, what = self.focus_region(parent, lst, role.focus, rng, max_lines=role.max_focus_lines)
        grammar = self.grammar_for(parent, lst, focus, role)
        messages = self.optimizer_messages(parent, ctx, role, lst, focus, what)
        cost = 0.0
        last = ""
        for _ in range(self.attempts):
            try:
                c = self._generate(role, messages, grammar, rng, deadline)
            except LLMError as e:
                self.selectors["optimizer"].update(arm, 0.0)
                raise self._llm_failure(f"{arm} generate", e) from None
            cost += self._cost(c)
            att = self.check(parent, c.text)
            if att.stage == "compile" and att.child is not None and self.inline_repairs:
                att, rcost = self._repair_inline(parent, att, ctx, rng, deadline)
                cost += rcost
            if att.stage == "ok":
                self.stats.proposals += 1
                self._remember(att.child, arm, cost, getattr(ctx.parent_result, "objective", None))
                return att.script
            self._fail(att.reason)
            last = att.reason
        self.stats.no_proposal += 1
        self.selectors["optimizer"].update(arm, 0.0)
        raise NoProposal(f"{self.name}/{arm}: no usable edit in {self.attempts} generation(s); last {last}")

    def _repair_inline(self, parent: Kernel, att: _Attempt, ctx: OperatorContext,
                       rng: np.random.Generator, deadline: float | None = None) -> tuple[_Attempt, float]:
        """Repair a child that failed the verify compile, then express parent -> repaired child as one script
        (a diff of canonical listings). Returns the final attempt and the tokens/seconds spent."""
        from population.edits import parse_edit_script

        child = att.child
        assert child is not None
        cost = 0.0
        reason = att.reason
        for _ in range(self.inline_repairs):
            fixed, spent, reason = self._repair_once(child, "compile_error", reason, rng, deadline)
            cost += spent
            if fixed is None:
                continue
            plines = [i.text for i in self._listing(parent.module).lines]
            flines = [i.text for i in self._listing(fixed.module).lines]
            diff = script_from_diff(plines, flines, max_lines=400)
            if diff is None:
                break
            if fixed.launch.block != parent.launch.block:
                b = fixed.launch.block
                diff += f"\nLAUNCH block={b[0]},{b[1]},{b[2]}"
            composed = self.check(parent, diff + "\n")
            if composed.stage == "ok" and composed.child is not None:
                script = parse_edit_script(diff)
                return _Attempt("ok", "", diff, script, composed.child), cost
            reason = composed.reason
        return _Attempt("compile", f"{att.reason} (inline repair failed: {reason})", att.text, att.script,
                        att.child), cost

    def _repair_once(self, child: Kernel, status: str, reason: str, rng: np.random.Generator,
                     deadline: float | None = None) -> tuple[Kernel | None, float, str]:
        """One repairer generation for ``child``: (fixed kernel or None, cost, why not). LLMFailure when the
        model could not answer."""
        if "repairer" not in self.selectors:
            return None, 0.0, "no repairer role configured"
        arm = self.selectors["repairer"].select(rng)
        role = self.roles[arm]
        lst = self._listing(child.module)
        line = _line_of(reason)
        focus, what = self.focus_region(child, lst, role.focus, rng, around=line,
                                         max_lines=role.max_focus_lines)
        # ptxas names the failing line: edits may touch only that line (+- edit_window); the prompt shows more.
        edit_range = focus if line is None else (max(focus[0], line - role.edit_window),
                                                 min(focus[1], line + role.edit_window))
        grammar = self.grammar_for(child, lst, edit_range, role)
        messages = self.repair_messages(child, status, reason, role, lst, focus, what, edit_range)
        self.stats.repairs_tried += 1
        try:
            c = self._generate(role, messages, grammar, rng, deadline)
        except LLMError as e:
            self.selectors["repairer"].update(arm, 0.0)
            raise self._llm_failure(f"{arm} generate", e) from None
        cost = self._cost(c)
        att = self.check(child, c.text)
        ok = att.stage == "ok"
        self.selectors["repairer"].update(arm, self._reward(1.0 if ok else 0.0, cost))
        if ok:
            self.stats.repairs_ok += 1
            return att.child, cost, ""
        self._fail("repair " + att.reason)
        return None, cost, att.reason

    def repair(self, child: Kernel, result: Any, ctx: OperatorContext, rng: np.random.Generator) -> Any:
        """An EditScript against ``child`` (which failed with ``result.status``/``result.reason``) that parses,
        applies and compiles, or None when the repairer's attempts all failed (``last_reason`` says why) or the
        operator is switched off. LLMFailure when the model could not answer."""
        if self.disabled:
            return None
        status = str(getattr(result, "status", "compile_error"))
        reason = str(getattr(result, "reason", "") or "")
        deadline = time.monotonic() + self.proposal_timeout_s
        for _ in range(self.attempts):
            fixed, _cost, why = self._repair_once(child, status, reason, rng, deadline)
            if fixed is not None:
                from population.edits import parse_edit_script

                return parse_edit_script(fixed.edit_text)  # the repair script, as apply_script recorded it
            self.last_reason = why
        return None

    def reflect(self, child: Kernel, result: Any, ctx: OperatorContext) -> str | None:
        """Reward the arm that proposed ``child`` (if this operator did) and, on every ``critic_every``-th
        call, ask the critic for a one-line lesson (sanitised; None when no critic runs, it says nothing, or
        the line is degenerate: fewer than 40% distinct words)."""
        pending = self.pending.get(child.identity)
        self._settle(child, result, ctx)
        self._reflects += 1
        if self.disabled or "critic" not in self.selectors or not self.critic_every or \
                self._reflects % self.critic_every:
            return None
        rng = np.random.default_rng(int(child.identity[:8], 16))  # deterministic per child: same on resume
        arm = self.selectors["critic"].select(rng)
        role = self.roles[arm]
        # The parent's objective as recorded at propose time (ctx may describe the child itself).
        parent_obj = pending[2] if pending is not None and pending[2] is not None else getattr(
            ctx.parent_result, "objective", None)
        obj = getattr(result, "objective", None)
        outcome = f"status {getattr(result, 'status', '?')}"
        if obj is not None and parent_obj:
            outcome += f", objective {obj:.3f} vs parent {parent_obj:.3f} ({100 * (obj / parent_obj - 1):+.1f}%)"
        reason = sanitize(str(getattr(result, "reason", "") or ""), 300)
        user = assemble(
            "## Edit\n" + (sanitize(child.edit_text, 1200) or "(none)"),
            f"## Operator\n{child.operator}",
            "## Outcome\n" + outcome + (f"\n{reason}" if reason else ""),
            "## Task\n" + (role.instructions or ROLE_INSTRUCTIONS["critic"]),
        )
        try:
            c = self._generate(role, [ChatMessage("system", SYSTEM_PROMPT), ChatMessage("user", user)],
                               CRITIC_GRAMMAR, rng, time.monotonic() + self.proposal_timeout_s)
        except LLMError as e:
            self._llm_failure(f"{arm} critic", e)
            return None
        line = one_line(c.text, 160)
        words = line.lower().split() if line else []
        if words and len(set(words)) < 0.4 * len(words):  # degenerate repetition: not a lesson
            self._fail(f"critic: repetitive line dropped: {line[:60]}")
            line = None
        self.selectors["critic"].update(arm, self._reward(1.0 if line else 0.0, self._cost(c)))
        return line

    # ------------------------------------------------------------------------------------------- bandit

    def _reward(self, value: float, cost: float) -> float:
        return float(min(1.0, max(0.0, value / max(1.0, cost / self.cost_ref))))

    def _remember(self, child: Kernel | None, arm: str, cost: float, parent_objective: float | None) -> None:
        if child is None:
            return
        self.pending[child.identity] = (arm, cost, parent_objective)
        while len(self.pending) > 512:
            self.pending.popitem(last=False)

    def _settle(self, child: Kernel, result: Any, ctx: OperatorContext) -> None:
        entry = self.pending.pop(child.identity, None)
        if entry is None:
            return
        arm, cost, pobj = entry
        self.duplicates_in_row = 0
        if pobj is None:
            pobj = getattr(ctx.parent_result, "objective", None)
        ok = bool(getattr(result, "ok", False))
        value = 0.0
        if ok:
            value = self.reward_validity
            obj = getattr(result, "objective", None)
            if obj is not None and pobj:
                gain = max(0.0, obj / pobj - 1.0)
                value += self.reward_improvement * min(1.0, gain / self.gain_scale)
        self.selectors["optimizer"].update(arm, self._reward(value, cost))

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: bandit counts/sums per role kind, pending rewards, counters, LLM failures, the
        duplicate run and the switched-off reason."""
        return {"selectors": {k: s.state_dict() for k, s in self.selectors.items()},
                "pending": [[k, a, c, p] for k, (a, c, p) in self.pending.items()],
                "reflects": self._reflects, "stats": self.stats.__dict__.copy(),
                "failures": self.failures, "duplicates_in_row": self.duplicates_in_row, "disabled": self.disabled}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned (unknown role kinds are ignored)."""
        for k, s in state.get("selectors", {}).items():
            if k in self.selectors:
                self.selectors[k].load_state(s)
        self.pending = OrderedDict((k, (a, float(c), None if p is None else float(p)))
                                   for k, a, c, p in state.get("pending", []))
        self._reflects = int(state.get("reflects", 0))
        self.failures = int(state.get("failures", 0))
        self.duplicates_in_row = int(state.get("duplicates_in_row", 0))
        self.disabled = state.get("disabled")
        if "stats" in state:
            self.stats = ProposalStats(**{**state["stats"], "failures": dict(state["stats"].get("failures", {}))})


def _model_configs(llm: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{model name: backend config} from one backend config or ``{"models": {...}}``."""
    if llm is None:
        return {}
    d = plain_config(llm)
    if "models" in d:
        models = d["models"]
        if not isinstance(models, Mapping) or not models:
            raise ValueError("llm.models must be a non-empty mapping of name -> backend config")
        return {str(k): dict(v) for k, v in models.items()}
    return {"default": d}
