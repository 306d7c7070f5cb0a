#!/usr/bin/env bash
# On the H200 (no network): the GPU checks of the workload plug-ins, at most ~6 minutes (steps cut at 70 + 240 + 55 s;
# the KDA table's 12 shapes x 3 kernels + fla, with fla's Triton compiles, do not fit the 55 s it had on 2026-12-01).
# The chunked KDA pipeline (stage 2) has its own command: scripts/kda_chunk_h200.sh.
#   1. pytest -m gpu: the softmax example on the GPU evaluator, the shared front half (pool vs static on broken
#      kernels), the KDA seeds against the float64 reference (o and the final state) and fla against it;
#   2. experiments/kda_h200.py: KDA seeds + one template variant checked directly and timed against fla's
#      fused_recurrent_kda at the 12 benchmark shapes;
#   3. a short KDA search on the GPU evaluator (needs the gate to handle the inout state buffer).
# Prepare where pip works: bash scripts/fetch_device_wheels.sh (carries fla-core and einops in .whl/).
# Usage: OUT=/some/dir bash scripts/plugins_h200.sh      (logs and tables under $OUT)
#        DRY_RUN=1 bash scripts/plugins_h200.sh           (a CPU: the GPU tests skip, kda_h200.py --dry-run, the
#                                                         search on the static evaluator)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/ptxforge-plugins-out}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD WANDB_MODE=offline
. scripts/device_env.sh
export JAX_PLATFORMS=cpu
rc=0
timeout -k 5 "${TESTS_S:-70}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_gpu_softmax.py \
  tests/gpu/test_gpu_pipeline.py tests/gpu/test_gpu_kda.py 2>&1 | tee "$out/pytest_plugins_gpu.log"
rc=$((rc | ${PIPESTATUS[0]}))
dry=(); evaluator=gpu
if [ -n "${DRY_RUN:-}" ]; then dry=(--dry-run); evaluator=static; fi
timeout -k 5 "${KDA_S:-240}" python3 experiments/kda_h200.py --out "$out" --repeats "${REPEATS:-5}" \
  --variants "${VARIANTS:-cols=8,warps=2}" "${dry[@]}" 2>&1 | tee "$out/kda_h200.log"
rc=$((rc | ${PIPESTATUS[0]}))
if grep -q inout evaluators/gpu/gate.py || [ -n "${DRY_RUN:-}" ]; then
  timeout -k 5 "${SEARCH_S:-55}" python3 -m evolve workload=kda_recurrent evaluator=$evaluator mutator=rules \
    budget.evaluations=null budget.seconds="${SEARCH_BUDGET_S:-25}" logger=none knowledge=none engine.progress=false \
    hydra.run.dir="$out/kda_search" 2>&1 | tail -40 | tee "$out/kda_search.log"
  rc=$((rc | ${PIPESTATUS[0]}))
else
  echo "skipped the KDA search: evaluators/gpu/gate.py does not handle inout buffers yet" | tee "$out/kda_search.log"
fi
exit $rc
