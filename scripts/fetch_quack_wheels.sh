#!/usr/bin/env bash
# Download the QuACK stack for the GPU machine (Python 3.12, manylinux x86_64) and pack it for transfer:
#   .whl-quack/quack-stack.tar.xz.partNN   every wheel of the stack unzipped into one tree (the `cutlass` package
#                                          spans four wheels), re-packed as one tar.xz (69 MB, 2026-12-08) and split
#                                          into parts of PART_MIB (default 36) MiB, so that each part fits into one
#                                          transfer beside the tracked tree (12.5 MB since the recorded stores are
#                                          xz) and .whl/ without wandb and plotly (6.4 MB): the device tool carries
#                                          64 MiB in all, so two commands carry the stack
#   .whl-quack/MANIFEST                    part names, byte counts and sha256 (carried with every part)
# Wheels: quack-kernels 0.6.5, nvidia-cutlass-dsl 4.8.1 with -libs-base, -libs-core, -libs-cu13 (92 MB alone),
# apache-tvm-ffi, torch-c-dlpack-ext, einops.
# On the GPU machine, scripts/install_quack.sh SITE stashes whichever parts a command carried and unpacks the stack
# once all of them have arrived (carry one part per command while the machine stays up).
# Usage: bash scripts/fetch_quack_wheels.sh        (needs pip with network access; xz)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl-quack
PART_MIB=${PART_MIB:-36}
mkdir -p "$dest"
CUTLASS=4.8.1
wheels=(quack-kernels==0.6.5 "nvidia-cutlass-dsl==$CUTLASS" "nvidia-cutlass-dsl-libs-base==$CUTLASS"
        "nvidia-cutlass-dsl-libs-core==$CUTLASS" "nvidia-cutlass-dsl-libs-cu13==$CUTLASS"
        "apache-tvm-ffi>=0.1.6,<0.2" torch-c-dlpack-ext einops)
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
if [ -f "$dest/MANIFEST" ] && (cd "$dest" && sha256sum --quiet -c <(awk '{print $3"  "$1}' MANIFEST)); then
  echo "$dest already holds a complete, verified stack:"; cat "$dest/MANIFEST"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/w" "$tmp/x"
for w in "${wheels[@]}"; do  # one wheel each, no dependencies, for the device's Python
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d "$tmp/w" "$w"
done
for w in "$tmp"/w/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
rm -f "$dest"/quack-stack.tar.xz.part* "$dest/MANIFEST"
XZ_OPT="-9e -T0" tar -cJf - -C "$tmp/x" . | split -b "${PART_MIB}M" -d -a 2 - "$dest/quack-stack.tar.xz.part"
(cd "$dest" && for p in quack-stack.tar.xz.part*; do
   echo "$p $(stat -c %s "$p") $(sha256sum "$p" | cut -d' ' -f1)"; done) > "$dest/MANIFEST.part"
mv "$dest/MANIFEST.part" "$dest/MANIFEST"
cat "$dest/MANIFEST"
n=$(wc -l < "$dest/MANIFEST")
echo "carry one part per GPU command, each with .whl-quack/MANIFEST (e.g. carry .whl-quack/MANIFEST" \
     ".whl-quack/quack-stack.tar.xz.part00), $n commands in all; install_quack.sh unpacks after the last"
