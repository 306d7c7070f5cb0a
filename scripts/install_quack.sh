#!/usr/bin/env bash
# Unpack the QuACK stack fetched by scripts/fetch_quack_wheels.sh into one site dir (default /tmp/quack-site),
# from whichever parts this checkout carries (.whl-quack/big/*.tar.xz, .whl-quack/small/*.whl); parts already
# unpacked there are kept, so the big part can come in one transfer and the rest in a later one while the machine
# stays up. Every wheel is unzipped into the same dir (`nvidia_cutlass_dsl/` spans four wheels; `pip install
# --target` refuses to merge them), and the wheels' .pth entry is replaced by PYTHONPATH: use
#   export PYTHONPATH=SITE:SITE/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
# (printed at the end; scripts/power_search.sh does it). Exit status 0 when `import quack` works afterwards,
# 3 when parts are still missing (the search then runs without the QuACK baselines and says so).
set -uo pipefail
cd "$(dirname "$0")/.."
site=${1:-/tmp/quack-site}
mkdir -p "$site/.parts"
for t in .whl-quack/big/*.tar.xz; do
  [ -e "$t" ] || continue
  stamp="$site/.parts/$(basename "$t").done"
  [ -e "$stamp" ] && continue
  tar -xJf "$t" -C "$site" && touch "$stamp" && echo "unpacked $(basename "$t")"
done
for w in .whl-quack/small/*.whl; do
  [ -e "$w" ] || continue
  stamp="$site/.parts/$(basename "$w").done"
  [ -e "$stamp" ] && continue
  python3 -m zipfile -e "$w" "$site" && touch "$stamp" && echo "unpacked $(basename "$w")"
done
pp="$site:$site/nvidia_cutlass_dsl/dsl_packages"
echo "QUACK_PYTHONPATH=$pp"
if PYTHONPATH="$pp${PYTHONPATH:+:$PYTHONPATH}" python3 -c "import quack, cutlass; print('quack', quack.__version__)" 2>&1; then
  exit 0
fi
echo "QuACK not importable yet from $site (parts present: $(ls "$site/.parts" | tr '\n' ' '))"
exit 3
