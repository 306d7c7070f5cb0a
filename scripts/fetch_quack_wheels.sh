#!/usr/bin/env bash
# Download the QuACK stack for the GPU machine (Python 3.12, manylinux x86_64) into .whl-quack/ (git-ignored):
#   .whl-quack/big/nvidia_cutlass_dsl_libs_cu13-4.8.1.tar.xz   the 92 MB -libs-cu13 wheel unzipped and re-packed
#                                                               as tar.xz (<= 63.5 MB: one transfer of its own)
#   .whl-quack/small/*.whl                                      quack-kernels 0.6.5, nvidia-cutlass-dsl 4.8.1,
#                                                               -libs-base, -libs-core, apache-tvm-ffi,
#                                                               torch-c-dlpack-ext, einops (about 9 MB)
# On the GPU machine, scripts/install_quack.sh SITE unpacks whatever of the two parts was carried into one site
# dir (the `cutlass` package spans several wheels, which `pip install --target` will not merge).
# Usage: bash scripts/fetch_quack_wheels.sh        (needs pip with network access; xz for the re-pack)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl-quack
mkdir -p "$dest/big" "$dest/small"
CUTLASS=4.8.1
small=(quack-kernels==0.6.5 "nvidia-cutlass-dsl==$CUTLASS" "nvidia-cutlass-dsl-libs-base==$CUTLASS"
       "nvidia-cutlass-dsl-libs-core==$CUTLASS" "apache-tvm-ffi>=0.1.6,<0.2" torch-c-dlpack-ext einops)
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
get() {  # get DIR SPEC: one wheel, no dependencies, for the device's Python
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d "$1" "$2"
}
for w in "${small[@]}"; do
  name=$(echo "${w%%[=<>]*}" | tr - _)
  ls "$dest/small/$name"-*.whl >/dev/null 2>&1 || get "$dest/small" "$w"
done
big="$dest/big/nvidia_cutlass_dsl_libs_cu13-$CUTLASS.tar.xz"
if [ ! -f "$big" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  get "$tmp" "nvidia-cutlass-dsl-libs-cu13==$CUTLASS"
  mkdir "$tmp/x"
  python3 -m zipfile -e "$tmp"/nvidia_cutlass_dsl_libs_cu13-*.whl "$tmp/x"
  XZ_OPT="-9e -T0" tar -cJf "$big.part" -C "$tmp/x" .
  mv "$big.part" "$big"
fi
limit=$((63 * 1024 * 1024 + 512 * 1024))
size=$(stat -c %s "$big")
if [ "$size" -gt "$limit" ]; then
  echo "error: $big is $size bytes, over the $limit a transfer carries alone" >&2
  exit 1
fi
ls -l "$dest/big" "$dest/small"
echo "carry .whl-quack/big alone first (bash scripts/install_quack.sh /tmp/quack-site), then .whl-quack/small"
