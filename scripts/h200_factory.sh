#!/usr/bin/env bash
# The RMSNorm factory run on one H200, end to end, inside one time budget (issue 6):
#   1. install the carried wheels (.whl/, from scripts/fetch_device_wheels.sh) into /tmp/site;
#   2. python -m evolve experiment=rmsnorm_h200 hydra.run.dir=$RUN budget.seconds=$SEARCH_S  (capped so that
#      VERIFY_MIN_S stay for step 3; SIGINT at the cap lets the run close its store and W&B run);
#   3. experiments/rmsnorm_h200_verify.py: full matrix with interleaved baselines, held-out gate,
#      compute-sanitizer, ncu, each phase cut when the budget runs out, verify.json rewritten after each phase;
#   4. the report (experiments/rmsnorm_h200_report.py) as report.tar.gz;
#   5. pack into $OUT (<= 8 files, each < 16 MiB): run.tar.gz (store.sqlite, best/, metrics.jsonl,
#      summary.json, evolve.log, wandb/; when too large: wandb.tar.gz apart and store.sqlite.xz[.partN]),
#      verify.json, factory.log.
# Every phase line carries a UTC timestamp and the seconds since the start.
# Environment: SEARCH_S (330), TOTAL_S (560: the whole script), VERIFY_MIN_S (150), EVALUATOR (gpu | static: a
# dry run on a machine without a GPU, estimates only), RUN (run dir), OUT (output folder), EVOLVE_ARGS (extra
# Hydra overrides), REPEATS (20).
# The report can be re-created anywhere: python experiments/rmsnorm_h200_report.py --run <unpacked run dir>
#   --verify verify.json --out experiments/results/rmsnorm_h200_<date>/
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
TOTAL_S=${TOTAL_S:-560}
SEARCH_S=${SEARCH_S:-330}
VERIFY_MIN_S=${VERIFY_MIN_S:-150}
EVALUATOR=${EVALUATOR:-gpu}
REPEATS=${REPEATS:-20}
MAX_FILE=${MAX_FILE:-$((15 * 1024 * 1024 + 512 * 1024))}   # stay under the 16 MiB a returned file may have
out=${OUT:-/tmp/ptxforge-factory-out}
mkdir -p "$out"
RUN=${RUN:-/tmp/ptxforge-factory/run-$(date -u +%Y%m%d-%H%M%S)}
LOG=$out/factory.log
exec > >(tee -a "$LOG") 2>&1
tee_pid=$!

phase() { echo "[$(date -u +%Y-%m-%dT%H:%M:%SZ)] +$(( $(date +%s) - T0 ))s $*"; }
left() { echo $(( TOTAL_S - ($(date +%s) - T0) )); }
case $EVALUATOR in gpu|static) ;; *) echo "EVALUATOR must be gpu or static, got '$EVALUATOR'"; exit 2 ;; esac
phase "start: SEARCH_S=$SEARCH_S TOTAL_S=$TOTAL_S VERIFY_MIN_S=$VERIFY_MIN_S EVALUATOR=$EVALUATOR RUN=$RUN OUT=$out"

# ---- 1. wheels and environment
if [ "$EVALUATOR" = gpu ] && ls .whl/*.whl >/dev/null 2>&1; then   # the wheels are for the GPU machine (py3.12)
  phase "install wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { phase "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export WANDB_MODE=${WANDB_MODE:-offline}
. scripts/device_env.sh
if [ "$EVALUATOR" = gpu ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  (nvcc --version | tail -1; ptxas --version | tail -1; compute-sanitizer --version | tail -1; ncu --version | tail -1) 2>&1
else
  echo "DRY RUN: static evaluator, no GPU; every number is an ESTIMATE; sanitizer and ncu are skipped"
fi

# ---- 2. the search
cap=$(( $(left) - VERIFY_MIN_S ))
[ "$cap" -lt 30 ] && { phase "only $(left) s left; no time for a search"; exit 1; }
evolve_args=(experiment=rmsnorm_h200 "hydra.run.dir=$RUN" "budget.seconds=$SEARCH_S")
[ "$EVALUATOR" = static ] && evolve_args+=(evaluator=static)
# shellcheck disable=SC2206  # EVOLVE_ARGS is a space-separated list of Hydra overrides
[ -n "${EVOLVE_ARGS:-}" ] && evolve_args+=($EVOLVE_ARGS)
phase "search: python3 -m evolve ${evolve_args[*]} (capped at $cap s)"
t_evolve=$(date +%s.%N)
timeout -s INT -k 20 "$cap" python3 -m evolve "${evolve_args[@]}"
rc_evolve=$?
t_evolve_end=$(date +%s.%N)
phase "search ended rc=$rc_evolve ($([ $rc_evolve -eq 124 ] && echo "cut at the cap" || echo "own end"))"
# A search that died early (e.g. the W&B run could not start) is retried once without W&B, in a fresh run dir.
ran=$(( ${t_evolve_end%.*} - ${t_evolve%.*} ))
cap=$(( $(left) - VERIFY_MIN_S ))
if { [ $rc_evolve -eq 1 ] || [ $rc_evolve -eq 2 ]; } && [ $ran -lt 150 ] && [ $cap -ge 90 ]; then
  RUN=$RUN-retry
  phase "search failed after $ran s: retry with logger=none in $RUN (capped at $cap s)"
  t_evolve=$(date +%s.%N)
  timeout -s INT -k 20 "$cap" python3 -m evolve "${evolve_args[@]/hydra.run.dir=*/hydra.run.dir=$RUN}" logger=none
  rc_evolve=$?
  t_evolve_end=$(date +%s.%N)
  phase "retried search ended rc=$rc_evolve"
fi

# ---- 3. re-verification of the finalists
rc_verify=99
if [ -f "$RUN/store.sqlite" ]; then
  budget=$(( $(left) - 30 ))   # leaves time to pack
  phase "verify (deadline $budget s)"
  timeout -s INT -k 10 $((budget + 10)) python3 experiments/rmsnorm_h200_verify.py --run "$RUN" \
    --out "$out/verify.json" --deadline-s "$budget" --evaluator "$EVALUATOR" --repeats "$REPEATS" \
    --evolve-started "$t_evolve" --evolve-ended "$t_evolve_end"
  rc_verify=$?
  phase "verify ended rc=$rc_verify"
else
  phase "no store at $RUN/store.sqlite: nothing to verify"
fi

# ---- 4. the report (matplotlib is on the GPU image); the same command re-creates it anywhere from the outputs
if [ -f "$out/verify.json" ]; then
  rep=$(dirname "$RUN")/report-$(basename "$RUN")
  phase "report -> report.tar.gz"
  if timeout 60 python3 experiments/rmsnorm_h200_report.py --run "$RUN" --verify "$out/verify.json" --out "$rep"; then
    tar -czf "$out/report.tar.gz" -C "$(dirname "$rep")" "$(basename "$rep")"
  else
    phase "report failed (verify.json and the run are still packed)"
  fi
fi

# ---- 5. pack: run.tar.gz when it fits; else wandb/ apart and the store (cubins dropped: ptxas rebuilds them from
# the stored PTX) as store.sqlite.xz, split into parts of 15 MiB when needed (cat parts | gunzip > store.sqlite)
phase "pack"
parent=$(dirname "$RUN"); name=$(basename "$RUN")
size() { stat -c %s "$1" 2>/dev/null || echo 0; }
tar -czf "$out/run.tar.gz" -C "$parent" "$name" 2>/dev/null
if [ "$(size "$out/run.tar.gz")" -gt "$MAX_FILE" ]; then
  phase "run.tar.gz is $(size "$out/run.tar.gz") bytes: wandb/ and the store packed apart"
  tar -czf "$out/wandb.tar.gz" -C "$parent" "$name/wandb" 2>/dev/null
  tar -czf "$out/run.tar.gz" -C "$parent" --exclude="$name/wandb" --exclude="$name/store.sqlite*" "$name" 2>/dev/null
  python3 - "$RUN/store.sqlite" "$parent/store_slim.sqlite" <<'PY'
import sqlite3, sys
src = sqlite3.connect(sys.argv[1])
dst = sqlite3.connect(sys.argv[2])
src.backup(dst)  # a consistent copy, WAL included
dst.execute("UPDATE candidates SET cubin = NULL")
dst.commit()
dst.execute("VACUUM")
dst.close()
PY
  gzip -c "$parent/store_slim.sqlite" > "$out/store.sqlite.xz"
  if [ "$(size "$out/store.sqlite.xz")" -gt "$MAX_FILE" ]; then
    (cd "$out" && split -b "$MAX_FILE" -d -a 1 store.sqlite.xz store.sqlite.xz.part && rm store.sqlite.xz)
    for f in "$out"/store.sqlite.xz.part[3-9]; do [ -e "$f" ] && { phase "dropped $f (over 8 files)"; rm -f "$f"; }; done
  fi
  for f in run.tar.gz wandb.tar.gz; do
    [ "$(size "$out/$f")" -gt "$MAX_FILE" ] && { phase "$f still over the limit: dropped"; rm -f "$out/$f"; }
  done
fi
ls -l "$out"
phase "done: search rc=$rc_evolve verify rc=$rc_verify, $(( $(date +%s) - T0 )) s in all"
exec 1>&- 2>&-
wait "$tee_pid" 2>/dev/null   # the log is complete before the command returns
exit $(( rc_verify == 0 ? 0 : 1 ))
