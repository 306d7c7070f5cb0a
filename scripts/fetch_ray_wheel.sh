#!/usr/bin/env bash
# Ray for the GPU machine (Python 3.12, manylinux x86_64, no network there), in two transfers.
#
# The ray 2.60.0 wheel (79 MB) is more than one transfer to that machine carries; unzipped and re-packed as
# tar.xz it is about 60 MB and goes alone (the QuACK route, ../shared/DESIGN.md facts of 2026-12-01). Ray's small
# dependencies the image lacks go as wheels with the project in the next transfer.
#
#   bash scripts/fetch_ray_wheel.sh            # here (network): writes .ray/ray-2.60.0-cp312.tar.xz and .whl/ray-deps/
#   # transfer 1 carries only .ray/ (git-ignored): unpack it outside the project tree, where it stays between transfers
#   bash scripts/fetch_ray_wheel.sh unpack     # there: .ray/*.tar.xz -> /tmp/ray-site (RAY_SITE), then removes .ray/
#   # transfer 2 carries the project with .whl/ray-deps/; scripts/gpu_tests.sh installs .whl/ and puts RAY_SITE
#   # (/tmp/ray-site) on PYTHONPATH when it exists: `python3 -c "import ray"` works.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${RAY_VERSION:-2.60.0}
site=${RAY_SITE:-/tmp/ray-site}
pack=.ray/ray-$version-cp312.tar.xz

if [ "${1:-fetch}" = unpack ]; then
  mkdir -p "$site"
  tar -xJf "$pack" -C "$site"
  rm -rf .ray   # out of the project tree before the next transfer
  python3 - "$site" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import ray
print("ray", ray.__version__, "unpacked in", sys.argv[1])
PY
  exit 0
fi

plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
  -d "$tmp" "ray==$version"
mkdir -p "$tmp/site" .ray
# Unzip keeping each member's mode (Ray starts its gcs_server and raylet binaries: they must stay executable).
python3 - "$tmp"/ray-"$version"-*.whl "$tmp/site" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        path = z.extract(info, sys.argv[2])
        mode = info.external_attr >> 16
        if mode and not info.is_dir():
            os.chmod(path, mode & 0o777)
PY
XZ_OPT=-9e tar -cJf "$pack" -C "$tmp/site" .
ls -l "$pack"
size=$(stat -c %s "$pack")
[ "$size" -le $((60 * 1024 * 1024)) ] || echo "warning: $pack is $((size / 1024 / 1024)) MiB, over the 60 MiB of one transfer"

# Core Ray's requirements (click, filelock, jsonschema, msgpack, packaging, protobuf, pyyaml, requests) that the
# GPU image lacks, with jsonschema's own closure, and aiohttp's (Ray's runtime-environment agent imports it when
# a job ships a working_dir): small wheels for the project's transfer.
deps=(msgpack jsonschema jsonschema-specifications referencing rpds-py attrs
      aiohttp aiohappyeyeballs aiosignal frozenlist multidict propcache yarl)
mkdir -p .whl/ray-deps
for w in "${deps[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d .whl/ray-deps "$w"
done
du -ch .whl/ray-deps/*.whl | tail -1
