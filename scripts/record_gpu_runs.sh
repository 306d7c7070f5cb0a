#!/usr/bin/env bash
# Record GPU factory runs for the CPU models (static calibration, replay evaluator): on the H200, run
# `python -m evolve experiment=rmsnorm_h200` once per (algorithm, seed) given, each for SEARCH_S seconds, and
# pack each run's store with the cubins dropped (ptxas rebuilds them from the stored PTX) as
# $OUT/<name>.sqlite.xz, plus record.log (GPU, driver, versions, settings, UTC times).
#   RUNS="map_elites:0 random:1" SEARCH_S=220 bash scripts/record_gpu_runs.sh
# Environment: RUNS (space-separated algorithm:seed pairs), SEARCH_S (search seconds per run), VERDICT_WAIT_S
# (end-of-run wait for sanitizer verdicts, 45 s), EVOLVE_ARGS
# (extra Hydra overrides), OUT (output folder). Carry .whl/ (scripts/fetch_device_wheels.sh) to the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/ptxforge-record}
mkdir -p "$out"
RUNS=${RUNS:-"map_elites:0 random:1"}
SEARCH_S=${SEARCH_S:-220}
exec > >(tee -a "$out/record.log") 2>&1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD WANDB_MODE=offline
. scripts/device_env.sh
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__)"
ptxas --version | tail -1
git log -1 --format='commit %H %s' 2>/dev/null || true
for r in $RUNS; do
  alg=${r%%:*}; seed=${r##*:}; name="rmsnorm_${alg}_s${seed}"; dir=/tmp/ptxforge-record-runs/$name
  echo "[$(date -u +%H:%M:%S)] $name: algorithm=$alg seed=$seed budget.seconds=$SEARCH_S ${EVOLVE_ARGS:-}"
  # shellcheck disable=SC2086
  # engine.verdict_wait_s: the end-of-run wait for sanitizer verdicts fits the limit, so the run closes itself
  # (summary.json written; the verdicts still out stay pending in the store's checkpoint)
  timeout -s INT -k 20 $((SEARCH_S + 120)) python3 -m evolve experiment=rmsnorm_h200 "hydra.run.dir=$dir" \
    "algorithm=$alg" "seed=$seed" "budget.seconds=$SEARCH_S" logger=none "engine.verdict_wait_s=${VERDICT_WAIT_S:-45}" \
    ${EVOLVE_ARGS:-} 2>&1 | tail -5
  [ -f "$dir/summary.json" ] && cp "$dir/summary.json" "$out/$name.summary.json"
  [ -f "$dir/store.sqlite" ] || { echo "no store for $name"; continue; }
  python3 scripts/pack_store.py "$dir/store.sqlite" "$out/$name.sqlite.xz"
done
date -u
