#!/usr/bin/env bash
# Download into .whl/ (git-ignored) the wheels the GPU machine lacks, for its Python 3.12 on manylinux x86_64.
# The GPU image already has torch, cupy-cuda13x, numpy, ml-dtypes, networkx, rich, pyyaml, jax, transformers,
# accelerate, pytest, pytest-timeout, tqdm, requests, protobuf, click, psutil, anyio, httpx, xxhash, narwhals
# (/work/.library/device/KINDS.md). Each wheel is fetched with --no-deps; the list below is the closure of
# what our code imports there, read off each wheel's METADATA (Requires-Dist). Usage:
#   bash scripts/fetch_device_wheels.sh        # then carry .whl to the GPU machine; scripts/gpu_tests.sh installs it
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl
mkdir -p "$dest"
wheels=(
  # PTX parser
  lark==1.3.1
  # Hydra config
  hydra-core==1.3.8 omegaconf==2.3.0
  # W&B (offline runs) and what wandb 0.31 requires beyond the image
  wandb==0.31.0 cwevals==0.0.1b1 distro sniffio
  opentelemetry-api==1.38.0 opentelemetry-sdk==1.38.0 opentelemetry-semantic-conventions==0.59b0
  opentelemetry-exporter-otlp-proto-http==1.38.0 opentelemetry-exporter-otlp-proto-common==1.38.0
  opentelemetry-proto==1.38.0 googleapis-common-protos importlib-metadata==8.7.0
  pydantic==2.12.5 pydantic-core==2.41.5 annotated-types==0.7.0 typing-inspection==0.4.2 platformdirs
  # figures
  plotly==6.5.0
  # RMSNorm baseline (pure Python + Triton, which the image has)
  liger-kernel
  # KDA baseline: fla's fused_recurrent_kda (pure Python + Triton, which the image has); fla-core 0.6.0 requires
  # einops (torch >= 2.7 and triton >= 3.3 for CUDA are on the image); fla.layers/models are optional imports
  fla-core==0.6.0 einops==0.8.2
  # CMA-ES emitter over the template knobs (pure Python)
  cma==4.5.0
)
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for w in "${wheels[@]}"; do
  name=${w%%==*}
  if ls "$dest"/"$(echo "$name" | tr - _)"-*.whl >/dev/null 2>&1; then continue; fi
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d "$dest" "$w"
done
# antlr4-python3-runtime 4.9.3 (what omegaconf 2.3 needs) is published as an sdist only: build its pure-Python wheel.
if ! ls "$dest"/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1; then
  python3 -m pip wheel -q --no-deps -w "$dest" antlr4-python3-runtime==4.9.3
fi
du -ch "$dest"/*.whl | tail -1
