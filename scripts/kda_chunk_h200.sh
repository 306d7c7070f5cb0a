#!/usr/bin/env bash
# On the H200 (no network): the KDA chunked prefill pipeline (workloads/kda/chunk.py, issue 15 stage 2) end to end
# in one device command, at most ~9.5 minutes (steps cut at TESTS_S 200 + REPORT_S 250 + SEARCH_S 90 seconds, plus
# 5 s of kill grace each and the wheel install: under a 600 s device command):
#   1. pytest -m gpu tests/gpu/test_gpu_kda_chunk.py: the pipeline with each seed against the float64 reference,
#      the GPU gate (seeds pass, three broken state passes fail), the float64 chunked reference on the GPU against
#      the JAX recurrence, the pool end to end (gate, fault check, timed state pass with checked outputs,
#      baselines), fla's chunk_kda and its inter-chunk kernel against the reference;
#   2. experiments/kda_chunk_h200.py: correctness rows, then the table against fla chunk_kda (FLA_FLASH_KDA=0) and
#      fla's chunk_gated_delta_rule_fwd_h at the six scenarios (kda_chunk_h200.{json,md} under $OUT);
#   3. a short search on the GPU evaluator (python -m evolve workload=kda_chunk evaluator=gpu); SEARCH_S=0 skips it.
# Prepare where pip works: bash scripts/fetch_device_wheels.sh (carries fla-core 0.6.0 and einops in .whl/).
# Usage: OUT=/some/dir bash scripts/kda_chunk_h200.sh   |   DRY_RUN=1 bash scripts/kda_chunk_h200.sh (a CPU: the
#        GPU tests skip, the report's --dry-run, the search on the static evaluator)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/ptxforge-kda-chunk-out}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD WANDB_MODE=offline
. scripts/device_env.sh
export JAX_PLATFORMS=cpu FLA_FLASH_KDA=0
rc=0
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  python3 -c "import fla, triton, torch; print('fla', fla.__version__, 'triton', triton.__version__, 'torch', torch.__version__)" 2>&1
} | tee "$out/versions.txt"
if [ "${TESTS_S:-200}" -gt 0 ]; then  # 0 skips the step (timeout 0 would mean no limit)
  timeout -k 5 "${TESTS_S:-200}" python3 -m pytest -m gpu -v -p no:cacheprovider -rs tests/gpu/test_gpu_kda_chunk.py \
    2>&1 | tee "$out/pytest_kda_chunk_gpu.log"
  rc=$((rc | ${PIPESTATUS[0]}))
fi
dry=(); evaluator=gpu
if [ -n "${DRY_RUN:-}" ]; then dry=(--dry-run); evaluator=static; fi
# SKIP_CHECKS=1: the timing table only (the correctness rows took most of a 210 s limit on 2026-12-02; the table
# is written after each scenario, so a cut run keeps the rows it timed)
checks=(); [ -n "${SKIP_CHECKS:-}" ] && checks=(--skip-checks)
timeout -k 5 "${REPORT_S:-250}" python3 experiments/kda_chunk_h200.py --out "$out" --repeats "${REPEATS:-10}" \
  --variants "${VARIANTS:-bv=64;bv=128}" "${dry[@]}" "${checks[@]}" 2>&1 | tee "$out/kda_chunk_h200.log"
rc=$((rc | ${PIPESTATUS[0]}))
if [ "${SEARCH_S:-90}" -gt 0 ]; then
  # SIGINT first: the engine checkpoints and the store (with its WAL) stays whole; packed for the record after
  timeout -s INT -k 20 "${SEARCH_S:-90}" python3 -m evolve workload=kda_chunk evaluator=$evaluator mutator=rules \
    budget.evaluations=null budget.seconds="${SEARCH_BUDGET_S:-45}" logger=none knowledge=none engine.progress=false \
    hydra.run.dir="$out/kda_chunk_search" 2>&1 | tail -40 | tee "$out/kda_chunk_search.log"
  rc=$((rc | ${PIPESTATUS[0]}))
  [ -f "$out/kda_chunk_search/store.sqlite" ] && python3 scripts/pack_store.py "$out/kda_chunk_search/store.sqlite" \
    "$out/kda_chunk_search.sqlite.xz"
fi
exit $rc
