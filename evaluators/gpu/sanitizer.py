"""compute-sanitizer verdicts on kernels before they count as archive elites.

A kernel can pass every gate run and still be wrong: a shared-memory race whose window almost never opens,
an out-of-bounds read that arithmetic masks, a barrier in divergent code. compute-sanitizer's memcheck
(out-of-bounds and misaligned accesses), racecheck (shared-memory hazards) and synccheck (illegal barrier use)
see them on every launch. Each tool is one process (``compute-sanitizer --tool T python -m
evaluators.gpu.sanitize_replay --spec S``) that replays a batch of kernels (``replay_plan``): at SANITIZER_SHAPES
twice, with exact-size buffers (memcheck's bounds are the buffers' own) and in the benchmark's layout (inputs in
VMM mappings ending at an unmapped granule, read-only, as ``vmm.place_at_edges`` places the benchmark's), and at
the smallest shape the pool times, in the benchmark's layout: the replay differs from a timed launch in nothing
a kernel can see at that shape (its inputs' placement, alignment and protection, the shape itself), so a kernel
that keeps a barrier only where the replay used to run and drops it where it is timed (``rt_edge_race``: inputs
ending 64 KiB aligned; ``rt_sanitizer_dodge`` RT_SENSE 3: the fixed small shapes) races under the tool. The fixed
shapes run first, the timed shape only for kernels every tool found clean there (``replay_phases``). Every
launch draws its input distribution and its outputs' refill pattern as the timed launches do, from a seed drawn
per call (``sanitize_replay.launch_conditions``, gate rules version 10): a kernel cannot keep a barrier only where
the replay's launches were alike (all-ones outputs, unit-scale rows, the inputs of a fixed seed). A batch
with any error is split and each kernel re-run alone, so a verdict names its own kernel. The replay's own output
check counts too: a kernel whose output is wrong under the sanitizer's scheduling fails.

Costs: about 2-3 s per tool and process on an H200 at the small shapes (start-up of Python, CuPy and the tool
dominates; each extra kernel in a batch adds a fraction of a second); the benchmark layout's launches run once
per drawn scalar setting (``sanitize_replay.scalar_settings``, gate rules version 9: RMSNorm's three eps, so a
barrier kept only at one eps is seen), so the timed shape adds per kernel three instrumented launches over its
elements (RMSNorm: 32768 x 512, 16.8 M elements, 32768 rows; not yet measured on the
H200: ``tests/gpu/test_gate_redteam4.py::test_the_replay_at_a_timed_shape_fits_the_sanitizer_budget`` records
it) and 9 VMM driver calls per input and launch in the benchmark layout. The caller schedules it so it never
overlaps a timed launch on the same GPU (``GPUPool.sanitize`` holds that GPU's worker while it runs).

Cannot catch: races on global memory between CTAs (racecheck covers shared memory), hazards that need other
shapes than the replay's (a kernel that keeps its barrier at the smallest timed shape and drops it only at the
larger timed shapes: racecheck at 32768 x 16384 would cost about 32 times the smallest), reads of initialised but
stale memory.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluators.types import Status
from workloads.rmsnorm import SANITIZER_SHAPES as _RMSNORM_SANITIZER_SHAPES

log = logging.getLogger(__name__)

# Tools whose verdict an elite needs (initcheck is left to final verification: it flags reads of memory the
# replay never wrote, e.g. padding loads that a kernel discards, which are legal).
ELITE_TOOLS = ("memcheck", "racecheck", "synccheck")
# RMSNorm's fixed replay shapes (``workloads.rmsnorm.SANITIZER_SHAPES``), the default of the functions below; a
# pool replays its workload's own (``Workload.sanitizer_shape_list``).
SANITIZER_SHAPES: list[tuple[int, ...]] = list(_RMSNORM_SANITIZER_SHAPES)
# Timed shapes with more elements than this are not replayed (instrumented launches are ~100x slower); the
# smallest timed shape is replayed whatever its size.
REPLAY_TIMED_ELEMENTS = 1 << 25
SUMMARY_RE = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
RACE_RE = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?")


def replay_plan(timed_shapes: Sequence[tuple[int, ...]] = (),
                shapes: Sequence[tuple[int, ...]] = SANITIZER_SHAPES) -> dict[str, list[list[int]]]:
    """The replay spec's shape lists: ``shapes`` (default SANITIZER_SHAPES) in the exact layout and again in the
    benchmark's (``edge_shapes``), plus the smallest of ``timed_shapes`` by elements (the shapes the pool
    benchmarks; ties: the first) in the benchmark's layout, and every other timed shape of at most
    REPLAY_TIMED_ELEMENTS elements. RMSNorm's search shapes give 32768 x 512 alone (the next holds 134 M
    elements)."""
    edge = [list(s) for s in shapes]
    timed = [tuple(int(v) for v in s) for s in timed_shapes]
    if timed:
        # exact integer products: a varlen shape's product overflows int64 (KDA's (64, 1024 x 8) is 2^86), and
        # numpy's wrapped product let such a shape through as "small"
        smallest = min(timed, key=math.prod)
        for s in timed:
            if (s == smallest or math.prod(s) <= REPLAY_TIMED_ELEMENTS) and list(s) not in edge:
                edge.append(list(s))
    return {"shapes": [list(s) for s in shapes], "edge_shapes": edge}


def replay_phases(timed_shapes: Sequence[tuple[int, ...]] = (),
                  shapes: Sequence[tuple[int, ...]] = SANITIZER_SHAPES) -> list[dict[str, list[list[int]]]]:
    """``replay_plan`` split in the order ``sanitize`` runs it: first the fixed ``shapes`` in both layouts (a few
    seconds per tool), then the timed shapes alone in the benchmark's layout (absent when there are none). A
    kernel with an error in the first phase never reaches the second: an instrumented launch over a timed shape of
    a racy kernel is slow (racecheck recording hazards: ~300 s for `rt_smem_war_race` with an honest kernel in
    the batch, H200, 2026-12-01), that of an honest one ~2 s a launch."""
    plan = replay_plan(timed_shapes, shapes)
    fixed = [list(s) for s in shapes]
    phases = [{"shapes": plan["shapes"], "edge_shapes": [s for s in plan["edge_shapes"] if s in fixed]}]
    timed = [s for s in plan["edge_shapes"] if s not in fixed]
    if timed:
        phases.append({"shapes": [], "edge_shapes": timed})
    return phases


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH, under CUDA_HOME or /usr/local/cuda*, or None."""
    hit = shutil.which("compute-sanitizer")
    if hit:
        return hit
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(Path("/usr/local").glob("cuda-*"))]
    for root in roots:
        for sub in ("bin/compute-sanitizer", "compute-sanitizer/compute-sanitizer"):
            p = Path(root) / sub if root else None
            if p is not None and p.is_file():
                return str(p)
    return None


def parse_sanitizer(text: str) -> dict[str, Any]:
    """errors: the sum over every ``ERROR SUMMARY: N errors`` line (a process that launches several times, or a
    tool that reports per context, prints more than one; None when there is none, then the racecheck summary's
    error count is used), and every summary line."""
    m = SUMMARY_RE.findall(text)
    lines = [ln.strip("= ").strip() for ln in text.splitlines() if "SUMMARY" in ln]
    if not m:  # racecheck ends with "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"
        m = RACE_RE.findall(text)
    return {"errors": sum(int(v) for v in m) if m else None, "summary_lines": lines}


@dataclass
class ToolRun:
    """One compute-sanitizer process over a replay spec: ``errors`` (None: the tool gave no verdict),
    ``replay`` (the replay's per-kernel output lines), exit code, wall seconds, the tail of its output;
    ``lock_seconds``: the seconds the replay held the timing lock (its last line; None when it printed none);
    ``credit``: its leased bucket's credit at the end, seconds of lock time (None: it was leased none);
    ``longest``: the launch that held the lock longest ({s, kernel, shape, placement}; None: none reported)."""

    tool: str
    errors: int | None
    replay: list[dict[str, Any]]
    rc: int
    seconds: float
    tail: str
    summary_lines: list[str] = field(default_factory=list)
    lock_seconds: float | None = None
    credit: float | None = None
    longest: dict[str, Any] | None = None

    def clean_for(self, kid: Any) -> bool | None:
        """True when the tool found no error and kernel ``kid``'s outputs were right; False when it found errors
        or the output was wrong; None when the tool gave no verdict."""
        mine = [r for r in self.replay if r.get("kernel") == kid and "ok" in r]
        if mine and not all(r["ok"] for r in mine):
            return False
        if self.errors is None:
            return None
        return self.errors == 0 and bool(mine)


def tool_command(exe: str, tool: str, spec_path: str | Path, print_limit: int = 20) -> list[str]:
    """The command line of one tool over the replay of ``spec_path`` (run from the repository root).

    ``--report-api-errors no``: a verdict is about the kernels' device code, not host API calls. The replay's
    own driver calls produce API errors no kernel causes (cuda-python's ``cuGetProcAddress_v2`` probes while
    ``vmm`` sets up the benchmark layout: 34 "errors" per process on an H200, 2026-12-01, CUDA 13.0), and memcheck
    reports API errors by default (compute-sanitizer docs, "--report-api-errors", default ``explicit``).
    racecheck: every hazard reported (``--racecheck-report all``)."""
    cmd = [exe, "--tool", tool, "--print-limit", str(print_limit), "--report-api-errors", "no"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "all"]
    return [*cmd, sys.executable, "-m", "evaluators.gpu.sanitize_replay", "--spec", str(spec_path)]


class LaunchCapExceeded(Exception):
    """A replay launch held the GPU's timing lock longer than the cap (``run_tool``'s ``launch_cap_s``): the
    process was killed. ``kernel``: the replay's kernel id; ``shape``; ``seconds``: how long it had held it."""

    def __init__(self, kernel: Any, shape: list[int], seconds: float):
        super().__init__(f"a launch of kernel {kernel} at shape {shape} held the timing lock {seconds:.1f} s")
        self.kernel, self.shape, self.seconds = kernel, shape, seconds


def run_tool(tool: str, spec_path: Path, timeout_s: float, exe: str, env: dict[str, str] | None = None,
             launch_cap_s: float | None = None, capped: Any = None) -> ToolRun:
    """Run ``compute-sanitizer --tool <tool>`` over the replay of ``spec_path`` (``tool_command``).

    ``timeout_s`` bounds the process's own run time: the seconds the replay reports waiting for lock credit
    (``{"paced": s}`` lines, ``duty_cycle``) extend its deadline as they arrive. subprocess.TimeoutExpired
    propagates (the process and its children killed: the whole process group). ``launch_cap_s``: the longest one launch may hold the timing lock (its
    ``{"lock": ...}`` / ``{"unlock": s}`` lines) while ``capped()`` is true (None: no cap; ``capped`` None:
    always): past it the process is killed and LaunchCapExceeded raised, so a worker waiting to time a candidate
    never waits longer (racecheck over some honest kernels at 32768 x 512 runs > 60 s a launch, H200
    2026-12-03, R53)."""
    cmd = tool_command(exe, tool, spec_path)
    root = str(Path(__file__).resolve().parents[2])
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = root + os.pathsep + full_env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    # a session of its own: a kill reaches the replay that compute-sanitizer runs as its child, which would
    # otherwise live on, holding the GPU and its timing lock, and keep the output pipes open
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=root,
                            start_new_session=True)
    out: list[str] = []
    err: list[str] = []
    paced = [0.0]
    holding: list[Any] = [None]  # (since, kernel, shape) while a launch holds the lock

    def read_stdout() -> None:
        for ln in proc.stdout:  # type: ignore[union-attr]
            out.append(ln)
            try:
                if ln.startswith('{"paced"'):
                    paced[0] += float(json.loads(ln)["paced"])
                elif ln.startswith('{"lock"'):
                    d = json.loads(ln)["lock"]
                    holding[0] = (time.perf_counter(), d.get("kernel"), d.get("shape"))
                elif ln.startswith('{"unlock"'):
                    holding[0] = None
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                pass

    readers = [threading.Thread(target=read_stdout, daemon=True),
               threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)]  # type: ignore[union-attr]
    for r in readers:
        r.start()
    try:
        while True:
            now = time.perf_counter()
            left = t0 + timeout_s + paced[0] - now
            if left <= 0:
                raise subprocess.TimeoutExpired(cmd, timeout_s)
            held = holding[0]
            if (launch_cap_s is not None and held is not None and now - held[0] > launch_cap_s
                    and (capped is None or capped())):
                raise LaunchCapExceeded(held[1], held[2], now - held[0])
            try:
                proc.wait(timeout=min(left, 0.25 if launch_cap_s is not None else 1.0))
                break
            except subprocess.TimeoutExpired:
                continue
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    finally:
        for r in readers:
            r.join(10.0)
    stdout = "".join(out)
    text = stdout + "".join(err)
    p = parse_sanitizer(text)
    replay, lock_seconds, credit, longest = [], None, None, None
    for ln in stdout.splitlines():
        if ln.startswith("{"):
            try:
                d = json.loads(ln)
            except json.JSONDecodeError:
                continue
            if isinstance(d, dict) and "lock_seconds" in d and set(d) <= {"lock_seconds", "credit", "longest"}:
                lock_seconds = float(d["lock_seconds"])
                credit = float(d["credit"]) if "credit" in d else None
                longest = d.get("longest")
            elif isinstance(d, dict) and len(d) == 1 and next(iter(d)) in ("paced", "lock", "unlock"):
                continue
            else:
                replay.append(d)
    return ToolRun(tool, p["errors"], replay, proc.returncode, time.perf_counter() - t0, text[-2000:],
                   p["summary_lines"], lock_seconds, credit, longest)


@dataclass
class Verdict:
    """The sanitizer verdict on one kernel: status OK, SANITIZER (the reason names the tool and the count) or
    SKIPPED (no verdict: the tool is missing or could not run; the reason says why); ``tools``: per tool, the
    error count (None: no verdict) and whether the replayed output was right."""

    status: Status
    reason: str = ""
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    seed: int | None = None  # the replay's seed (its inputs and drawn conditions: sanitize_replay.launch_conditions)
    # no verdict yet: a launch held the timing lock past the cap while candidates were timed; asked again when
    # nothing is timed (VerdictQueue keeps it for the drain)
    deferred: bool = False


def sanitize(kernels: Sequence[Any], workload: Any, *, arch: str, tools: Sequence[str] = ELITE_TOOLS,
             shapes: Sequence[tuple[int, ...]] | None = None, timeout_s: float = 120.0,
             exe: str | None = None, device: str | None = None, seed: int | None = None,
             timed_shapes: Sequence[tuple[int, ...]] = (),
             timed_tools: Sequence[str] | None = None, duty: Any = None,
             launch_cap_s: float | None = None) -> list[Verdict]:
    """Verdicts for ``kernels`` (``population.kernel.Kernel``), in order: per phase of ``replay_phases`` (the fixed
    shapes, then the timed ones for the kernels still clean), each tool runs once over the whole batch; when a
    batch run is not clean, each kernel of it is re-run alone with that tool (exact attribution).

    shapes: replayed in both layouts (None: ``workload.sanitizer_shape_list()``); timed_shapes: the shapes the benchmark times (``replay_plan`` adds the
    smallest, in the benchmark's layout; empty: none); timed_tools: the tools of the timed-shape phase (None:
    ``tools``; e.g. ``("racecheck",)``: the kinds that phase exists for are races kept only where the replay used
    to run, while memcheck's out-of-bounds reads at a timed shape also meet the fault check's unmapped page at
    every evaluation; each tool there costs ~5 s per kernel, H200 R14). arch: ptxas target; device: the physical GPU id for
    CUDA_VISIBLE_DEVICES (None: inherit). seed: the replay's inputs and drawn launch conditions
    (``sanitize_replay.launch_conditions``: each launch's input distribution and output refill pattern, drawn as
    the timed launches draw theirs; gate rules version 10); None: drawn from the OS, so a kernel cannot know the
    replay's inputs in advance (``rt_replay_seed_dodge``: version 9 always replayed seed 7). Every verdict
    records it (``Verdict.seed``). duty: a ``duty_cycle.DutyCycle`` (None: no bound): each tool process starts
    only when it allows (``wait``), paces each of its launches with the credit it is leased (``lease``; with a
    ``device`` only: the lock is per GPU) and is charged the lock seconds it reports (its wall time when it reports
    none or times out), so the replay's share of the GPU's timing lock stays bounded while a search times
    candidates, launch by launch; the seconds a process waits for credit do not count against ``timeout_s``
    (``run_tool``), so the timeout keeps its meaning. launch_cap_s: the longest one launch may hold the lock
    while ``duty`` is not draining (None: no cap); a kernel whose launch exceeds it gets a ``deferred`` SKIPPED
    verdict (its verdict is asked again when nothing is timed) and the rest of its batch is re-run without it.
    A kernel that no longer compiles
    gets SKIPPED. Never raises for a bad kernel; a timeout counts as an error of that tool. A batch of one kernel
    is never re-run alone."""
    from evaluators.gpu.sanitize_replay import kernel_entry
    from evaluators.toolchain import compile_ptx

    exe = exe or find_sanitizer()
    if shapes is None:
        shapes = workload.sanitizer_shape_list()
    if not kernels:
        return []
    if exe is None:
        return [Verdict(Status.SKIPPED, "compute-sanitizer not found (PATH, CUDA_HOME, /usr/local/cuda)")
                for _ in kernels]
    env = ({"CUDA_VISIBLE_DEVICES": str(device), "PTXFORGE_TIMING_LOCK": str(timing_lock_path(str(device)))}
           if device is not None else None)
    if seed is None:
        seed = secrets.randbits(31)
    verdicts = [Verdict(Status.OK, seed=int(seed)) for _ in kernels]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ptxforge-sanitize-") as tmp:
        entries = []
        for i, k in enumerate(kernels):
            try:
                cubin = compile_ptx(k, arch).cubin
            except Exception as e:
                verdicts[i] = Verdict(Status.SKIPPED, f"sanitizer: kernel does not compile: {e}")
                continue
            path = Path(tmp) / f"k{i}.cubin"
            path.write_bytes(cubin)
            entries.append(kernel_entry(k, path, i))
        base = {"workload": workload.spec(), "seed": int(seed), "draw_conditions": True}

        def spec_file(name: str, phase: dict[str, Any], ks: list[dict[str, Any]]) -> Path:
            p = Path(tmp) / f"{name}.json"
            p.write_text(json.dumps({**base, **phase, "kernels": ks}))
            return p

        def record(i: int, tool: str, run: ToolRun | None, why: str = "") -> None:
            v = verdicts[i]
            clean = None if run is None else run.clean_for(i)
            errors = None if run is None else run.errors
            if tool in v.tools:  # an earlier phase's run of this tool: the counts add up, clean needs both
                before = v.tools[tool]
                errors = None if errors is None or before["errors"] is None else errors + before["errors"]
                clean = clean if before["clean"] else before["clean"]
            v.tools[tool] = {"errors": errors, "clean": clean}
            if v.status != Status.OK:
                return
            if clean is False:
                wrong = [r for r in (run.replay if run else []) if r.get("kernel") == i and not r.get("ok")]
                what = (f"{run.errors} error(s)" if run and run.errors else
                        f"output wrong at {[tuple(r['shape']) for r in wrong][:3]}")
                v.status, v.reason = Status.SANITIZER, f"compute-sanitizer {tool}: {what}"
            elif clean is None:
                v.status = Status.SKIPPED
                v.reason = f"compute-sanitizer {tool} gave no verdict: {why or (run.tail[-300:] if run else '')}"

        def paced(tool: str, spec_path: Path) -> ToolRun | None:
            """One tool process, started when ``duty`` allows, pacing its launches with the credit it is leased
            (``DutyCycle.lease``) and charged to it; None when it timed out."""
            lease = {}
            if duty is not None:
                duty.wait()
                lease = duty.lease() if env is not None else {}
            t_run = time.perf_counter()
            cap = launch_cap_s if env is not None else None  # the lock exists with a device only
            capped = None if duty is None else (lambda: not duty.draining_now)
            try:
                run = run_tool(tool, spec_path, timeout_s, exe, {**env, **lease} if env is not None else None,
                               launch_cap_s=cap, capped=capped)
            except subprocess.TimeoutExpired:
                run = None
            except LaunchCapExceeded as e:
                if duty is not None:
                    duty.charge(time.perf_counter() - t_run)
                log.info("compute-sanitizer %s over %s: %s (cut; the kernel's verdict waits for the drain)",
                         tool, spec_path.stem, e)
                raise
            # one line a process: where a search's GPU time went when a worker waited for the lock
            log.info("compute-sanitizer %s over %s: %s", tool, spec_path.stem,
                     "timed out" if run is None else
                     f"{run.seconds:.1f} s, errors {run.errors}, lock {run.lock_seconds} s, longest launch "
                     f"{run.longest}")
            if duty is not None:
                if lease and run is not None and run.lock_seconds is not None and run.credit is not None:
                    duty.settle(run.lock_seconds, run.credit)  # it paid launch by launch (duty_cycle)
                else:
                    duty.charge(run.lock_seconds if run is not None and run.lock_seconds is not None
                                else time.perf_counter() - t_run)
            return run

        def defer(kid: Any, tool: str, e: LaunchCapExceeded) -> None:
            v = verdicts[kid]
            v.status, v.deferred = Status.SKIPPED, True
            v.reason = (f"compute-sanitizer {tool}: a launch at shape {e.shape} held the GPU's timing lock over "
                        f"{launch_cap_s:g} s while candidates were timed; asked again when nothing is timed")

        def batch_run(tool: str, n: int, phase: dict[str, Any], todo: list[dict[str, Any]]):
            """One process over ``todo``; a kernel whose launch is cut at the cap is deferred and the process
            re-run over the others (None and the kernels left when it timed out)."""
            while todo:
                try:
                    return paced(tool, spec_file(f"{tool}-{n}-batch", phase, todo)), todo
                except LaunchCapExceeded as e:
                    cut = [t for t in todo if t["id"] == e.kernel] or todo  # unnamed: none of them can be told apart
                    for t in cut:
                        defer(t["id"], tool, e)
                    todo = [t for t in todo if t not in cut]
            return None, todo

        for n, phase in enumerate(replay_phases(timed_shapes, shapes)):
            for tool in (tools if n == 0 or timed_tools is None else [t for t in tools if t in timed_tools]):
                todo = [e for e in entries if verdicts[e["id"]].status == Status.OK]
                if not todo:
                    break
                run, todo = batch_run(tool, n, phase, todo)
                if not todo:
                    continue
                if run is not None and all(run.clean_for(e["id"]) for e in todo):
                    for e in todo:
                        record(e["id"], tool, run)
                    continue
                for e in todo:  # split: one process per kernel; a batch of one is its own run already (a re-run
                    # repeats its timeout: a racy kernel at the timed shape, H200 2026-12-01: 2 x 120 s)
                    try:
                        alone = run if len(todo) == 1 else paced(tool, spec_file(f"{tool}-{n}-{e['id']}", phase, [e]))
                    except LaunchCapExceeded as cut:
                        defer(e["id"], tool, cut)
                        continue
                    if alone is None:
                        verdicts[e["id"]].status = Status.SANITIZER
                        verdicts[e["id"]].reason = f"compute-sanitizer {tool}: timed out after {timeout_s:.0f} s"
                    else:
                        record(e["id"], tool, alone)
    for v in verdicts:
        v.seconds = time.perf_counter() - t0
    return verdicts


# ------------------------------------------------------------------------------------------- scheduling
def timing_lock_path(device: str) -> Path:
    """The lock file that serialises timed intervals and sanitizer launches on physical GPU ``device``."""
    return Path(tempfile.gettempdir()) / f"ptxforge-gpu{device}-timing.lock"


class TimingLock:
    """An exclusive ``flock`` on ``timing_lock_path(device)``, held by the worker around its timed launches and
    by the sanitizer replay around each of its launches, so compute-sanitizer never runs a kernel on a GPU while
    a timed interval is open there (processes on other GPUs use other files). Re-entrant per object.
    ``waited_s``: seconds spent waiting for the lock so far (the worker reports them per candidate)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd: int | None = None
        self._depth = 0
        self.waited_s = 0.0

    def __enter__(self) -> TimingLock:
        import fcntl

        if self._depth == 0:
            self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o666)
            t0 = time.perf_counter()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            self.waited_s += time.perf_counter() - t0
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        import fcntl

        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class VerdictQueue:
    """Sanitizer verdicts computed in a background thread, batch by batch, for kernels submitted under a key
    (the engine uses store row ids). ``run(kernels) -> list[Verdict]`` does the work (``sanitize`` bound to a
    workload and GPU). ``collect`` hands back the finished (key, Verdict) pairs; ``pending`` the keys in flight.
    A ``deferred`` verdict (``sanitize``'s launch cap) is not handed back: the kernel is kept and queued again by
    ``collect(wait=True)``, the drain, when nothing is timed and the cap is lifted."""

    def __init__(self, run: Any, max_batch: int = 16):
        self._run, self.max_batch = run, int(max_batch)
        self._todo: list[tuple[Any, Any]] = []
        self._busy: list[Any] = []
        self._done: list[tuple[Any, Verdict]] = []
        self._deferred: list[tuple[Any, Any]] = []
        self.deferrals = 0  # verdicts deferred to the drain so far
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="ptxforge-sanitizer", daemon=True)
        self._thread.start()

    def submit(self, key: Any, kernel: Any) -> None:
        with self._cv:
            self._todo.append((key, kernel))
            self._cv.notify_all()

    def withdraw(self, key: Any) -> bool:
        """Drop ``key``'s verdict if its batch has not started (an elite displaced while it waited: its verdict
        is owed only if it comes back). True when it was dropped; a verdict already being computed still comes."""
        with self._cv:
            n = len(self._todo) + len(self._deferred)
            self._todo = [(k, v) for k, v in self._todo if k != key]
            self._deferred = [(k, v) for k, v in self._deferred if k != key]
            if len(self._todo) + len(self._deferred) != n:
                self._cv.notify_all()
                return True
            return False

    @property
    def pending(self) -> list[Any]:
        with self._cv:
            return [k for k, _ in self._todo] + list(self._busy) + [k for k, _ in self._deferred]

    def collect(self, wait: bool = False, timeout: float | None = None) -> list[tuple[Any, Verdict]]:
        """Finished verdicts since the last call; with ``wait``, first block until nothing is pending (or
        ``timeout`` seconds passed)."""
        with self._cv:
            end = None if timeout is None else time.monotonic() + timeout
            while wait:
                # the drain: nothing is timed, the cap is lifted; a batch cut just before it began defers its
                # kernel after this requeue, so requeue until nothing is left
                self._todo.extend(self._deferred)
                self._deferred = []
                self._cv.notify_all()
                left = None if end is None else max(0.0, end - time.monotonic())
                self._cv.wait_for(lambda: not self._todo and not self._busy, left)
                if not self._deferred or (end is not None and time.monotonic() >= end):
                    break
            out, self._done = self._done, []
            return out

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._todo or self._closed)
                if self._closed and not self._todo:
                    return
                batch, self._todo = self._todo[: self.max_batch], self._todo[self.max_batch:]
                self._busy = [k for k, _ in batch]
            try:
                verdicts = self._run([k for _, k in batch])
            except Exception as e:
                verdicts = [Verdict(Status.SKIPPED, f"sanitizer failed: {type(e).__name__}: {e}") for _ in batch]
            with self._cv:
                for (key, kernel), v in zip(batch, verdicts):
                    if v.deferred:
                        self._deferred.append((key, kernel))
                        self.deferrals += 1
                    else:
                        self._done.append((key, v))
                self._busy = []
                self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._todo.clear()
            self._cv.notify_all()
