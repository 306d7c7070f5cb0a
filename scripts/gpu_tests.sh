#!/usr/bin/env bash
# On the GPU machine (no network): install the carried wheels, print versions, run the gpu tests and the GPU
# experiments, and keep logs/tables under $OUT when set.
#   bash scripts/gpu_tests.sh [tests] [baselines] [throughput] [cost] [ray] [stability] [loop]   (no argument: the first three)
# tests: every gpu test (about 9 min on an H200 as of 2026-12-01: more than one 600 s device command takes), or
# the same set in two halves, one command each: gate_tests (tests/gpu/test_gate*.py), other_tests (the rest);
# pytest: the gpu tests named by PYTEST_ARGS (paths or ids); sanitizer_report: experiments/sanitizer_report.py
# with REPORT_ARGS (compute-sanitizer's own report per replay layout, cut at REPORT_S).
# Each step is cut at its own limit (seconds): TESTS_S (540), BASELINES_S (540), THROUGHPUT_S (300), COST_S (300),
# STABILITY_S (560: experiments/gate_stability.py, seeds + TUNED_KNOBS + template variants, 6 repeats each).
# loop: the whole search loop's evaluations/s, `python -m evolve experiment=rmsnorm_h200 budget.seconds=$LOOP_S
# logger=none` once per mode of LOOP_MODES ("v1 v2"): v2 is the gate as configured (rotating schedule, checked
# timed launches, fault check, sanitizer verdicts); v1 gives gate v1's share of the work (runs 1-2 of the small
# checks, every large check, plain timed launches on one input set, a full-output audit at one shape, no fault
# check, no sanitizer verdicts). Each run starts a worker (startup not counted in eval/s); summary.json's
# evaluations, seconds and evals_per_s go to $OUT/loop.txt. LOOP_S (100) seconds of search per mode, each mode
# cut at LOOP_S + 300 s (the engine waits up to VERDICT_WAIT_S (240) s for pending sanitizer verdicts before it
# reports; the rest stay pending in the checkpoint): one mode per
# device command (LOOP_MODES=v1, then LOOP_MODES=v2), whose own limit must exceed LOOP_S + 360 s (worker start).
# v2ahead: v2 with engine.ahead=8 (template instantiations off the engine thread); v2race: v2ahead with racecheck
# alone at the sanitizer replay's timed shape (evaluator.options.sanitizer_timed_tools); store and summary under
# /tmp/ptxforge-loop-<mode>; v1ahead: v1 with engine.ahead=8 (LOOP_ARGS: more overrides, e.g. seed=3); v2free: v2ahead without the sanitizer's duty bound (sanitizer_duty=1.0); v2proc: v2ahead with the front half in processes (front_half=process). The loop's store is kept as a recording when KEEP_STORE=1 ($OUT/loop_<mode>.sqlite.xz).
# long_rows: experiments/rmsnorm_baselines.py --long-rows (TUNED_KNOBS vs the shared-memory staging candidates at
# N = 16384-262144, or the comma-separated LONG_ROWS_N; LONG_ROWS_REPEATS (10) repeats), cut at LONG_ROWS_S (240).
# ncu: experiments/ncu_profile.py (TUNED_KNOBS and LONG_ROW_CANDIDATES at NCU_N (65536) under Nsight Compute), cut at
# NCU_S (240).
# sequence_ab: experiments/gate_sequence_ab.py on SEQ_STORE's first SEQ_N candidates (300), cut at SEQ_S (540).
# Every default limit fits one 600 s device command; steps whose limits add up past it need one command each.
# Prepare on a machine with network: bash scripts/fetch_device_wheels.sh (fills .whl/, carried along).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/ptxforge-gpu-out}
mkdir -p "$out"
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(tests baselines throughput)

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
# Ray (evaluator.backend=ray), unpacked by `bash scripts/fetch_ray_wheel.sh unpack` from a transfer of its own.
if [ -d "${RAY_SITE:-/tmp/ray-site}/ray" ] && ls .whl/ray-deps/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/ray-deps/*.whl
fi
export PYTHONPATH=/tmp/site:${RAY_SITE:-/tmp/ray-site}:$PWD WANDB_MODE=offline
. scripts/device_env.sh

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  python3 - <<'PY'
import importlib
for m in ("torch", "cupy", "numpy", "ml_dtypes", "lark", "triton", "hydra", "wandb", "plotly", "ray"):
    try:
        print(f"{m} {importlib.import_module(m).__version__}")
    except Exception as e:
        print(f"{m} absent ({type(e).__name__}: {e})")
try:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # noqa: F401
    print("liger_kernel importable")
except Exception as e:
    print(f"liger_kernel absent ({type(e).__name__}: {e})")
PY
  (nvcc --version | tail -1; ptxas --version | tail -1) 2>&1
} | tee "$out/versions.txt"

rc=0
# pytest -m gpu on the given paths/options, cut at TESTS_S; the whole log to $out/<log>, its verdict lines to stdout.
# -v: a run cut by its limit still shows in the log which tests passed.
gpu_pytest() {
  local log=$1; shift
  timeout -k 10 "${TESTS_S:-540}" python3 -m pytest -m gpu -v -rfEx -p no:cacheprovider "$@" 2>&1 \
    | tee "$out/$log" | grep -E "FAILED|ERROR|XFAIL|XPASS|passed|failed" | tail -40
  rc=$((rc | ${PIPESTATUS[0]}))
}
for step in "${steps[@]}"; do
  case $step in
    tests) gpu_pytest pytest_gpu.log tests ;;
    gate_tests) gpu_pytest pytest_gpu_gate.log tests/gpu/test_gate*.py ;;
    other_tests) gpu_pytest pytest_gpu_other.log tests --ignore-glob='tests/gpu/test_gate*.py' ;;
    pytest) gpu_pytest pytest_gpu_some.log ${PYTEST_ARGS:?set PYTEST_ARGS to the test paths or ids} ;;
    sanitizer_report) timeout -k 10 "${REPORT_S:-240}" python3 experiments/sanitizer_report.py ${REPORT_ARGS:-} 2>&1 \
                        | tee "$out/sanitizer_report.log"; rc=$((rc | ${PIPESTATUS[0]})) ;;
    baselines) timeout -k 10 "${BASELINES_S:-540}" python3 experiments/rmsnorm_baselines.py --out "$out" 2>&1 | tee "$out/rmsnorm_baselines.log"
               rc=$((rc | ${PIPESTATUS[0]})) ;;
    long_rows) timeout -k 10 "${LONG_ROWS_S:-240}" python3 experiments/rmsnorm_baselines.py --long-rows ${LONG_ROWS_N:-} \
                 --repeats "${LONG_ROWS_REPEATS:-10}" --out "$out" 2>&1 | tee "$out/rmsnorm_long_rows.log"
               rc=$((rc | ${PIPESTATUS[0]})) ;;
    ncu) timeout -k 10 "${NCU_S:-240}" python3 experiments/ncu_profile.py --long-rows "${NCU_N:-65536}" --out "$out" 2>&1 \
           | tee "$out/ncu_profile.log"
         rc=$((rc | ${PIPESTATUS[0]})) ;;
    throughput) timeout -k 10 "${THROUGHPUT_S:-300}" python3 experiments/gpu_throughput.py --out "$out" 2>&1 \
                  | tee "$out/gpu_throughput.log"
                rc=$((rc | ${PIPESTATUS[0]})) ;;
    cost) timeout -k 10 "${COST_S:-300}" python3 experiments/gate_cost.py --out "$out" 2>&1 | tee "$out/gate_cost.log"
          rc=$((rc | ${PIPESTATUS[0]})) ;;
    stability) timeout -k 10 "${STABILITY_S:-560}" python3 experiments/gate_stability.py --out "$out" 2>&1 \
                 | tee "$out/gate_stability.log"
               rc=$((rc | ${PIPESTATUS[0]})) ;;
    ray) # the Ray backend: its gpu tests, then 1 vs 2 GPU actors (needs `bash scripts/fetch_ray_wheel.sh unpack` first)
         timeout -k 10 "${RAY_TESTS_S:-240}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_ray_gpu.py 2>&1 \
           | tee "$out/pytest_ray_gpu.log"; rc=$((rc | ${PIPESTATUS[0]}))
         timeout -k 10 "${RAY_SCALING_S:-420}" python3 experiments/ray_scaling.py --out "$out" 2>&1 | tee "$out/ray_scaling.log"
         rc=$((rc | ${PIPESTATUS[0]})) ;;
    loop) for mode in ${LOOP_MODES:-v1 v2}; do
            extra=()
            [ "$mode" = v1 ] || [ "$mode" = v1ahead ] && extra=(+evaluator.options.gate_schedule=v1
              +evaluator.options.timed_checks=false +evaluator.options.fault_check=false
              +evaluator.options.sanitize_elites=false)
            # v1ahead: v1 with engine.ahead=8, the like-for-like partner of v2ahead
            [ "$mode" = v1ahead ] && extra+=(engine.ahead=8)
            # v2ahead: v2 with the next 8 proposals' template instantiations (nvcc) on the compile executor
            [ "$mode" = v2ahead ] && extra=(engine.ahead=8)
            # v2race: v2ahead with racecheck alone in the sanitizer replay's timed-shape phase (its ~5 s per kernel and
            # tool hold the timing lock; the kinds that phase exists for are races)
            [ "$mode" = v2race ] && extra=(engine.ahead=8 "+evaluator.options.sanitizer_timed_tools=[racecheck]")
            # v2free: v2ahead with no bound on the verdicts' share of the timing lock (evaluators/gpu/duty_cycle.py)
            [ "$mode" = v2free ] && extra=(engine.ahead=8 +evaluator.options.sanitizer_duty=1.0)
            # v2proc: v2ahead with the front half (prepare: ptxas and the static analyses) in worker processes
            [ "$mode" = v2proc ] && extra=(engine.ahead=8 +evaluator.options.front_half=process)
            # each mode starts from a cold kernel cache of its own: a mode run after another of the same seed would
            # otherwise find that one's instantiations and cubins cached and look faster than it is
            dir=/tmp/ptxforge-loop-$mode; rm -rf "$dir" "$dir-cache"
            PTXFORGE_CACHE=$dir-cache timeout -s INT -k 20 $(( ${LOOP_S:-100} + 300 )) python3 -m evolve experiment=rmsnorm_h200 \
              "budget.seconds=${LOOP_S:-100}" logger=none "hydra.run.dir=$dir" "engine.verdict_wait_s=${VERDICT_WAIT_S:-240}" \
              "${extra[@]}" ${LOOP_ARGS:-} > "$out/loop_$mode.log" 2>&1
            rc=$((rc | $?)); tail -5 "$out/loop_$mode.log"
            python3 - "$dir/summary.json" "$mode" <<'PY' | tee -a "$out/loop.txt"
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except OSError as e:
    print(f"{sys.argv[2]}: no summary ({e})"); sys.exit(0)
print(f"{sys.argv[2]}: {s.get('evaluations')} evaluations in {s.get('seconds')} s: {s.get('evals_per_s')} eval/s, "
      f"valid {s.get('valid_rate')}, best {s.get('best_objective')}; engine thread s: "
      + ", ".join(f"{k[5:-2]} {v:.1f}" for k, v in s.items() if k.startswith("host/"))
      + f"; sanitizer lock {s.get('sanitizer_lock')}; verdicts: "
      + ", ".join(f"{k[9:]} {v}" for k, v in s.items() if k.startswith("verdicts/")) + "; statuses: "
      + ", ".join(f"{k[9:]} {v}" for k, v in s.items() if k.startswith("failures/")))
PY
            if [ "${KEEP_STORE:-0}" = 1 ] && [ -f "$dir/store.sqlite" ]; then
              python3 scripts/pack_store.py "$dir/store.sqlite" "$out/loop_$mode.sqlite.xz"
            fi
          done ;;
    sequence_ab) # gate v2 against v1's share on one recorded candidate sequence (experiments/gate_sequence_ab.py)
         timeout -k 10 "${SEQ_S:-540}" python3 experiments/gate_sequence_ab.py \
           "${SEQ_STORE:-experiments/data/rmsnorm_gate14_map_elites_s4.sqlite.xz}" --n "${SEQ_N:-300}" 2>&1 \
           | tee "$out/gate_sequence_ab.log"; rc=$((rc | ${PIPESTATUS[0]})) ;;
    *) echo "unknown step $step (tests | gate_tests | other_tests | pytest | sanitizer_report | baselines | long_rows | throughput | cost | stability | ray | loop | sequence_ab)"; rc=2 ;;
  esac
done
exit $rc
