"""Third red-team round, the dynamic side of the gate: cheats emulated as numpy launchers through the real timed
launches (``timed_checks.timed_call``, driven as ``benchmark.time_interleaved`` drives them), their checks
(``verify_checked``) and the worker's full-output audit (``worker.audit_output``). The CUDA kernels are in
tests/gpu/kernels/redteam (README: third round); their GPU tests in tests/gpu/test_gate_redteam_dynamic.py.

- rt_kda_state_skip: a KDA kernel that leaves the final state (an inout buffer) unwritten at the benchmark's
  batches. Was: the checked timed launches and the audit compared the outputs only.
- rt_kda_memo: a kernel that memoises its outputs under a hash of its whole input: right on every launch, and
  fast where a timed launch repeats an earlier one's inputs. Was: half the timed launches ran on an input set
  as made, so the median of 20 was half the honest time.
- fixed row sample: the checked launches of a shape compared the same rows, so a kernel wrong at a fixed set of
  rows escaped with (1 - f)^1026 per shape, not the (1 - f)^4104 GATE.md claimed.
- rt_sanitizer_dodge RT_SENSE=2: the barrier kept under a launch counter in module memory (race lint rule 5);
  RT_SENSE=3: at the gate's and the replay's fixed shapes only (was a known gap; since gate rules version 7 the
  replay runs the smallest timed shape too).
"""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evaluators.gpu.timed_checks import InputSets, flat_rows, set_count, timed_call, verify_checked
from evaluators.gpu.worker import audit_output
from tests.timed_launches import drive, rms_honest
from workloads.dtypes import from_float, storage_dtype
from workloads.kda import KDARecurrent
from workloads.rmsnorm import RMSNorm

DECODE = (2, *(1,) * 8)  # 2 heads, a batch of 8 one-token sequences: a decode shape with N >= 8
RMS = (3000, 64)


def make_sets(wl: Any, shape: tuple[int, ...], seed: int = 100) -> tuple[InputSets, dict[str, Any]]:
    nbytes = sum(int(v.nbytes) for v in wl.make_inputs(shape, 0).values())
    sets = InputSets.make(wl, shape, [seed + i for i in range(set_count(wl, nbytes))], np)
    out = {s.name: np.empty(s.shape, dtype=storage_dtype(s.dtype, np)) for s in wl.outputs(shape)}
    return sets, out


# ------------------------------------------------------------------------------- the final value of an inout
class KDAKernel:
    """A KDA recurrent launch (o and the final state from the float64 reference, rounded as a kernel stores
    them); ``skip_state_from_n``: rt_kda_state_skip's trick, the final state left unwritten when the batch has at
    least that many sequences."""

    def __init__(self, skip_state_from_n: int | None = None) -> None:
        self.wl, self.skip = KDARecurrent(), skip_state_from_n
        self.timed = -1

    def __call__(self, inputs, outputs, shape, params=None):
        ref = self.wl.reference(inputs)
        outputs["o"][...] = from_float(ref["o"], "bf16", np)
        if self.skip is None or len(shape) - 1 < self.skip:
            inputs["state"][...] = ref["state"].astype(np.float32)


@pytest.fixture(scope="module")
def kda_sets():
    return make_sets(KDARecurrent(), DECODE)


def test_an_unwritten_final_state_is_caught_by_the_checked_timed_launches(kda_sets):
    """rt_kda_state_skip: gate v3 compared only o after a checked timed launch, so a state left at its initial
    value at the benchmark's batches (N >= 8; every gate shape has at most 4 sequences) was never seen."""
    wl = KDARecurrent()
    sets, out = kda_sets
    for kernel, bad in ((KDAKernel(), False), (KDAKernel(skip_state_from_n=8), True)):
        call, checked = timed_call(wl, kernel, sets, out, DECODE, np.random.default_rng(7), repeats=8)
        drive(call, 8)
        # each checked launch gathered a sample of the final state's N H K = 2048 rows (1024 drawn, the first and
        # the last) right after its launch, before the next launch reset it
        assert all(c.got["state"].shape[1] == 128 and 1024 <= c.got["state"].shape[0] <= 1026 for c in checked)
        why = verify_checked(wl, sets, checked, DECODE)
        if bad:
            assert why is not None and "final value of inout buffer state" in why, why
        else:
            assert why is None, why


def test_the_full_audit_judges_the_final_state_too(kda_sets):
    """worker.audit_output (final verification's check_output "all") compared o only; now also the whole final
    value of every inout buffer. Runs with numpy standing in for CuPy."""
    wl = KDARecurrent()
    sets, _ = kda_sets
    inputs = {k: v.copy() for k, v in sets.sets[1].items()}
    assert audit_output(wl, np, KDAKernel(), dict(inputs), DECODE) is None
    why = audit_output(wl, np, KDAKernel(skip_state_from_n=8), dict(inputs), DECODE)
    assert why is not None and "final value of inout buffer state" in why, why


def test_flat_rows_sample_a_state_whatever_its_leading_dimension():
    state = np.zeros((256, 96, 128, 128), dtype=np.float32)  # decode B = 256, H = 96: 1.5 GiB on a GPU
    assert flat_rows(state).shape == (256 * 96 * 128, 128) and flat_rows(np.zeros(5)).shape == (1, 5)


# ------------------------------------------------------------------------------------- exact repeats (memo)
def _digest(inputs: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for k in sorted(inputs):
        h.update(k.encode() + np.ascontiguousarray(inputs[k]).view(np.uint8).tobytes())
    return h.hexdigest()


class Memo:
    """rt_kda_memo's trick on any workload: outputs memoised under a hash of the whole input (and the scalars),
    right on every launch; ``times``: the emulated duration of each timed launch (a hit costs 5% of a miss: a
    streaming read and a copy instead of the token recurrence)."""

    def __init__(self, honest: Any) -> None:
        self.honest, self.table, self.timed = honest, {}, -1
        self.times: list[float] = []

    def __call__(self, inputs, outputs, shape, params=None):
        key = (_digest(inputs), tuple(sorted((params or {}).items())), tuple(shape))
        hit = key in self.table
        if hit:
            for k, v in self.table[key].items():
                (outputs[k] if k in outputs else inputs[k])[...] = v
        else:
            self.honest(inputs, outputs, shape, params)
            self.table[key] = {**{k: v.copy() for k, v in outputs.items()},
                               **{k: inputs[k].copy() for k in ("state",) if k in inputs}}
        if self.timed >= 0:
            self.times.append(0.05 if hit else 1.0)


@pytest.mark.parametrize("which", ["rmsnorm", "kda_decode", "kda_prefill"])
def test_no_timed_launch_repeats_the_inputs_of_an_earlier_launch(which):
    """rt_kda_memo: with half the timed launches on a set as made, every one of them repeated a warm-up launch's
    inputs exactly and the memo served it (median of 20 with 10 hits: about half the honest time). Now every timed
    launch changes the set's activations in part (and half of them the parameters: RMSNorm's w, KDA's A_log and
    dt_bias), so no memo hits and the median is the honest time."""
    wl, shape = {"rmsnorm": (RMSNorm("bf16"), RMS), "kda_decode": (KDARecurrent(), DECODE),
                 "kda_prefill": (KDARecurrent(), (2, 100, 50))}[which]
    sets, out = make_sets(wl, shape)
    seen: list[str] = []

    def record(inputs, outputs, shape, params=None):
        seen.append(_digest({k: v for k, v in inputs.items() if k not in sets.inout}))

    call, checked = timed_call(wl, record, sets, out, shape, np.random.default_rng(3), repeats=20)
    drive(call, 20)
    warm, timed = seen[:3], seen[3:]
    assert len(timed) == 20 and len(set(timed)) == 20 and not set(timed) & set(warm)
    # the parameters stay as made at about half the launches (real use: new activations, the same weights)
    params = [k for k, v in sets.sets[0].items() if v.ndim == 1 and v.dtype.kind == "f"]
    assert any(not set(params) & set(c.perturbation.parts) for c in checked)
    assert any(set(params) <= set(c.perturbation.parts) for c in checked)


@pytest.mark.parametrize("which", ["kda_decode", "rmsnorm"])
def test_a_whole_input_memo_gains_nothing_and_stays_right(which, kda_sets):
    """Gate v3 on KDA's 3 input sets: the 3 warm-up launches filled the memo with each set as made, the 10 timed
    launches on a set as made all hit, and the median of the 20 emulated durations was 0.525 (a 1.9x "speedup");
    RMSNorm's 5 sets left fewer hits than half. Now no timed launch hits."""
    if which == "rmsnorm":
        wl, shape, (sets, out), memo = RMSNorm("bf16"), RMS, make_sets(RMSNorm("bf16"), RMS), Memo(rms_honest)
    else:
        wl, shape, (sets, out), memo = KDARecurrent(), DECODE, kda_sets, Memo(KDAKernel())
    call, checked = timed_call(wl, memo, sets, out, shape, np.random.default_rng(11), repeats=20)
    drive(call, 20, kernel=memo)
    assert verify_checked(wl, sets, checked, shape) is None  # right on every launch: no status can catch it
    assert len(memo.times) == 20 and statistics.median(memo.times) == 1.0 and min(memo.times) == 1.0  # no hit


# ------------------------------------------------------------------------------------------ row samples
def test_each_checked_launch_samples_rows_of_its_own():
    """With one sample per shape, a kernel wrong at a fixed set of rows that the sample (and the few rows the
    perturbations changed) happened to miss passed every checked launch: probability about (1 - f)^1026 for a
    fraction f, 36% at f = 0.1%, where GATE.md claimed (1 - f)^4104. This kernel knows the first checked launch's
    sample and every perturbation's rows, standing for such a lucky set; now the other launches sample other rows."""
    wl = RMSNorm("bf16")
    sets, out = make_sets(wl, RMS)
    _, first = timed_call(wl, lambda *a: None, sets, out, RMS, np.random.default_rng(5), repeats=20)
    changed = [c.perturbation.rows(RMS[0]) for c in first if c.perturbation is not None]
    known = np.union1d(first[0].rows, np.concatenate(changed)) if changed else np.asarray(first[0].rows)

    def sample_only(inputs, outputs, shape, params=None):
        rms_honest(inputs, outputs, shape, params)
        wrong = np.setdiff1d(np.arange(shape[0]), known)
        outputs["y"][wrong] = from_float(np.full((len(wrong), shape[1]), 3.0, dtype=np.float32), "bf16")

    call, checked = timed_call(wl, sample_only, sets, out, RMS, np.random.default_rng(5), repeats=20)
    assert np.array_equal(checked[0].rows, first[0].rows)  # the same draws: the kernel knows them
    drive(call, 20)
    assert all(len(np.setdiff1d(c.rows, known)) > 500 for c in checked[1:])  # a fresh third of 3000 rows
    why = verify_checked(wl, sets, checked, RMS)
    assert why is not None and f"timed launch {checked[0].repeat} " not in why, why


# ------------------------------------------------------------------------------------ sanitizer dodges
def _sanitizer_dodge(sense: int):
    from population.kernel import Kernel, LaunchConfig
    from population.parser import parse_module
    from workloads.cuda_build import build_ptx

    src = Path(__file__).parent / "gpu" / "kernels" / "redteam" / "rt_sanitizer_dodge.cu"
    return Kernel(parse_module(build_ptx(src, {"RT_SENSE": sense})), "rmsnorm",
                  LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1), ("row_iters", 4))))


def test_a_sanitizer_dodge_counting_its_launches_in_module_memory_is_rejected_before_any_gpu_time():
    """RT_SENSE 2 keeps its barrier while fewer than 16 launches ran since the module was loaded (the sanitizer
    replay, a fresh process, launches 3; the worker ~150 before timing): its counter is a .global variable,
    which race lint rule 5 rejects for a workload without atomics."""
    from evaluators.pipeline import Rejected, prepare
    from evaluators.types import Status
    from targets.spec import get_gpu

    wl = RMSNorm("bf16")
    with pytest.raises(Rejected) as e:
        prepare(_sanitizer_dodge(2), wl, get_gpu("h200"), wl.search_shapes[:1])
    assert (e.value.status, e.value.step) == (Status.NONDETERMINISTIC, "race_lint")
    assert "outlives the launch" in str(e.value)


def test_a_sanitizer_dodge_keyed_on_the_shape_passes_every_static_check_and_meets_the_replay_at_a_timed_shape():
    """RT_SENSE 3 keeps its barrier at every gate shape and the replay's fixed shapes; no static rule reads that
    (it passes ``prepare``). Was: a known gap, a strict xfail here. Since gate rules version 7 the sanitizer
    replay also runs the pool's smallest timed shape (32768 x 512 for the search shapes), where it drops its
    barrier: racecheck sees the race (tests/gpu/test_gate_redteam_dynamic.py; the replay's shapes:
    tests/test_sanitizer_replay.py)."""
    from evaluators.gpu.sanitizer import replay_plan
    from evaluators.pipeline import prepare
    from targets.spec import get_gpu

    wl = RMSNorm("bf16")
    prepare(_sanitizer_dodge(3), wl, get_gpu("h200"), wl.search_shapes[:1])  # not rejected
    assert [32768, 512] in replay_plan(wl.search_shapes)["edge_shapes"]


# ------------------------------------------------------------------ the worker's path on the CPU stand-in
def _kda_twin(skip_state_from_n: int | None):
    """An emulated KDA launch from its argument tuple (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, o,
    N, H, T, scale) on the stand-in's device memory."""
    from tests import cupy_standin as sd

    wl = KDARecurrent()

    def twin(grid, block, args):
        n, h, t = int(args[10]), int(args[11]), int(args[12])
        host = {"q": (t, h, 128), "k": (t, h, 128), "v": (t, h, 128), "g": (t, h, 128), "beta": (t, h)}
        inputs = {k: sd.host_view(int(args[i]), s, np.uint16) for i, (k, s) in enumerate(host.items())}
        inputs["A_log"] = sd.host_view(int(args[5]), (h,), np.float32)
        inputs["dt_bias"] = sd.host_view(int(args[6]), (h * 128,), np.float32)
        inputs["cu_seqlens"] = sd.host_view(int(args[7]), (n + 1,), np.int32)
        state = sd.host_view(int(args[8]), (n, h, 128, 128), np.float32)
        inputs["state"] = state.copy()
        ref = wl.reference(inputs)
        sd.host_view(int(args[9]), (t, h, 128), np.uint16)[...] = from_float(ref["o"], "bf16", np).view(np.uint16)
        if skip_state_from_n is None or n < skip_state_from_n:
            state[...] = ref["state"].astype(np.float32)
    return twin


@pytest.mark.parametrize("skip", [None, 8])
def test_worker_judges_the_final_state_at_checked_timed_launches(monkeypatch, skip):
    """GPUWorker.evaluate on the CuPy stand-in (input sets in VMM mappings, the state read-write): the honest
    kernel is ok, rt_kda_state_skip's trick is wrong_result at a timed launch of the decode batch."""
    from evaluators.gpu.args import param_types
    from evaluators.gpu.gate_schedule import GateSchedule
    from tests import cupy_standin as sd
    from tests.test_standin_dryrun import worker_state

    cp = sd.install(monkeypatch)
    name = f"kda_{skip}"
    sd.KERNELS[name] = _kda_twin(skip)
    st = worker_state(cp)
    st.workload = KDARecurrent()
    seed = st.workload.seeds()[0]
    req = {"op": "evaluate", "cubin": name.encode(), "entry": seed.entry, "param_types": param_types(seed),
           "launch": seed.launch.to_json(), "gate": True, "gate_seed": 5, "gate_shapes": [(1, 17), (3, 1, 6, 2)],
           "bench_shapes": [list(DECODE)], "warmup": 2, "repeats": 8, "baselines": "none", "check_output": "one",
           "gate_schedule": GateSchedule("rotating", 0, 1).to_json(), "fault_check": False}
    reply, fatal = st.evaluate(req)
    assert not fatal
    if skip is None:
        assert reply["status"] == "ok", reply["reason"]
    else:
        assert reply["status"] == "wrong_result", reply
        assert "timed launch" in reply["reason"] and "final value of inout buffer state" in reply["reason"]
