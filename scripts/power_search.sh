#!/usr/bin/env bash
# Per-shape specialisation on one H200, end to end inside one time budget:
#   1. install the carried wheels (.whl/ -> /tmp/site) and the QuACK stack (scripts/install_quack.sh: whatever of
#      .whl-quack/ was carried, unpacked into $QUACK_SITE, kept there between commands);
#   2. python -m evolve experiment=rmsnorm_h200_tasks hydra.run.dir=$RUN budget.seconds=$SEARCH_S (a RUN that
#      already holds a store is resumed: SEARCH_S is the total over sessions), cut with SIGINT at the cap so that
#      VERIFY_MIN_S stay;
#   3. experiments/dispatch_verify.py: every benchmark and held-out shape with its bucket's kernel, the libraries
#      re-timed round-robin in one worker (QUACK_TUNED=1 adds QuACK's autotuned path), outputs re-checked;
#   4. experiments/dispatch_report.py -> report.md;
#   5. pack into $OUT: run.tar.gz (store, best/, metrics, summary, W&B; the store without cubins when too large),
#      verify_dispatch.json, report.tar.gz, power.log.
# Environment: SEARCH_S (420), TOTAL_S (570), VERIFY_MIN_S (120), EVALUATOR (gpu | static: the CPU dry run,
# estimates only), RUN (/tmp/ptxforge-power/run), OUT, QUACK_SITE (/tmp/quack-site), QUACK_TUNED (0), REPEATS (20),
# EVOLVE_ARGS (extra Hydra overrides), SKIP_SEARCH (1: verify and report an existing RUN only), SKIP_VERIFY (1: search
# and pack only; verify in a later command with SKIP_SEARCH=1), RUN_TAR (a run.tar.gz of an earlier command, unpacked
# into RUN's folder when RUN does not exist: resume or verify on a fresh machine).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
TOTAL_S=${TOTAL_S:-570}
SEARCH_S=${SEARCH_S:-420}
VERIFY_MIN_S=${VERIFY_MIN_S:-120}
EVALUATOR=${EVALUATOR:-gpu}
REPEATS=${REPEATS:-20}
QUACK_SITE=${QUACK_SITE:-/tmp/quack-site}
MAX_FILE=$((15 * 1024 * 1024 + 512 * 1024))
out=${OUT:-/tmp/ptxforge-power-out}
mkdir -p "$out"
RUN=${RUN:-/tmp/ptxforge-power/run}
mkdir -p "$(dirname "$RUN")"
exec > >(tee -a "$out/power.log") 2>&1
tee_pid=$!
phase() { echo "[$(date -u +%Y-%m-%dT%H:%M:%SZ)] +$(( $(date +%s) - T0 ))s $*"; }
left() { echo $(( TOTAL_S - ($(date +%s) - T0) )); }
case $EVALUATOR in gpu|static) ;; *) echo "EVALUATOR must be gpu or static, got '$EVALUATOR'"; exit 2 ;; esac
phase "start: SEARCH_S=$SEARCH_S TOTAL_S=$TOTAL_S EVALUATOR=$EVALUATOR RUN=$RUN OUT=$out"

# ---- 1. wheels, QuACK, environment
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ "$EVALUATOR" = gpu ] && ls .whl/*.whl >/dev/null 2>&1; then
  phase "install wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { phase "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
if [ "$EVALUATOR" = gpu ]; then
  phase "QuACK"
  if bash scripts/install_quack.sh "$QUACK_SITE"; then
    export PYTHONPATH=$QUACK_SITE:$QUACK_SITE/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
  else
    phase "QuACK not available: its baselines are reported missing"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
else
  echo "DRY RUN: static evaluator, no GPU; every number is an ESTIMATE"
fi
export WANDB_MODE=${WANDB_MODE:-offline}
. scripts/device_env.sh

if [ ! -d "$RUN" ] && [ -n "${RUN_TAR:-}" ] && [ -f "$RUN_TAR" ]; then
  phase "unpacking $RUN_TAR into $(dirname "$RUN")"
  tar -xzf "$RUN_TAR" -C "$(dirname "$RUN")" || phase "could not unpack $RUN_TAR"
fi

# ---- 2. the search (resumed when RUN already holds a store)
rc_evolve=0
if [ "${SKIP_SEARCH:-0}" != 1 ]; then
  cap=$(( $(left) - VERIFY_MIN_S ))
  [ "$cap" -lt 30 ] && { phase "only $(left) s left; no time for a search"; exit 1; }
  args=(experiment=rmsnorm_h200_tasks "hydra.run.dir=$RUN" "budget.seconds=$SEARCH_S")
  [ "$EVALUATOR" = static ] && args+=(evaluator=static)
  # shellcheck disable=SC2206
  [ -n "${EVOLVE_ARGS:-}" ] && args+=($EVOLVE_ARGS)
  [ -f "$RUN/store.sqlite" ] && phase "resuming the run in $RUN"
  phase "search: python3 -m evolve ${args[*]} (capped at $cap s)"
  timeout -s INT -k 30 "$cap" python3 -m evolve "${args[@]}"
  rc_evolve=$?
  phase "search ended rc=$rc_evolve"
fi

# ---- 3. verify the dispatch, 4. the report
rc_verify=99
if [ "${SKIP_VERIFY:-0}" = 1 ]; then
  rc_verify=0
  phase "verification skipped (SKIP_VERIFY=1)"
elif [ -f "$RUN/store.sqlite" ]; then
  budget=$(( $(left) - 25 ))
  vargs=(--run "$RUN" --out "$out/verify_dispatch.json" --deadline-s "$budget" --evaluator "$EVALUATOR" --repeats "$REPEATS")
  [ "${QUACK_TUNED:-0}" = 1 ] && vargs+=(--quack-tuned)
  phase "verify (deadline $budget s)"
  timeout -s INT -k 10 $((budget + 10)) python3 experiments/dispatch_verify.py "${vargs[@]}"
  rc_verify=$?
  phase "verify ended rc=$rc_verify"
  if [ -f "$out/verify_dispatch.json" ]; then
    rep=$(dirname "$RUN")/report-$(basename "$RUN")
    timeout 60 python3 experiments/dispatch_report.py --run "$RUN" --verify "$out/verify_dispatch.json" --out "$rep" \
      && tar -czf "$out/report.tar.gz" -C "$(dirname "$rep")" "$(basename "$rep")"
  fi
fi

# ---- 5. pack
phase "pack"
parent=$(dirname "$RUN"); name=$(basename "$RUN")
size() { stat -c %s "$1" 2>/dev/null || echo 0; }
tar -czf "$out/run.tar.gz" -C "$parent" "$name" 2>/dev/null
if [ "$(size "$out/run.tar.gz")" -gt "$MAX_FILE" ]; then
  python3 - "$RUN/store.sqlite" "$parent/store_slim.sqlite" <<'PY'
import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.execute("UPDATE candidates SET cubin = NULL")
dst.commit()
dst.execute("VACUUM")
dst.close()
PY
  tar -czf "$out/run.tar.gz" -C "$parent" --exclude="$name/store.sqlite*" --exclude="$name/wandb" "$name" 2>/dev/null
  gzip -c "$parent/store_slim.sqlite" > "$out/store.sqlite.xz"
  [ "$(size "$out/store.sqlite.xz")" -gt "$MAX_FILE" ] && { phase "store.sqlite.xz over the limit: dropped"; rm -f "$out/store.sqlite.xz"; }
fi
ls -l "$out"
phase "done: search rc=$rc_evolve verify rc=$rc_verify, $(( $(date +%s) - T0 )) s"
exec 1>&- 2>&-
wait "$tee_pid" 2>/dev/null
exit $(( rc_verify == 0 ? 0 : 1 ))
