#!/usr/bin/env bash
# Unpack the QuACK stack packed by scripts/fetch_quack_wheels.sh into one site dir (default /tmp/quack-site).
# Each GPU command may carry some of the parts (.whl-quack/quack-stack.tar.xz.partNN with .whl-quack/MANIFEST);
# every part that arrives is checked against the MANIFEST's sha256 and stashed in SITE/.parts, which stays while
# the machine is up, and once every part is there the stack is unpacked (once). The wheels' .pth entry is replaced
# by PYTHONPATH:
#   export PYTHONPATH=SITE:SITE/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
# (printed at the end; scripts/power_search.sh does it). Exit status 0 when `import quack` works afterwards,
# 3 when parts are still missing (the search then runs without the QuACK baselines and says so), 1 when a
# carried part does not match the MANIFEST.
set -uo pipefail
cd "$(dirname "$0")/.."
site=${1:-/tmp/quack-site}
parts="$site/.parts"
mkdir -p "$parts"
[ -f .whl-quack/MANIFEST ] && cp .whl-quack/MANIFEST "$parts/MANIFEST"
if [ ! -f "$site/.unpacked" ] && [ -f "$parts/MANIFEST" ]; then
  while read -r name size sum; do
    [ -f "$parts/$name" ] && continue
    [ -f ".whl-quack/$name" ] || continue
    if [ "$(sha256sum ".whl-quack/$name" | cut -d' ' -f1)" != "$sum" ]; then
      echo "error: .whl-quack/$name does not match .whl-quack/MANIFEST (sha256; $size bytes expected)" >&2
      exit 1
    fi
    cp ".whl-quack/$name" "$parts/$name" && echo "stashed $name"
  done < "$parts/MANIFEST"
  missing=$(while read -r name _ _; do [ -f "$parts/$name" ] || echo "$name"; done < "$parts/MANIFEST")
  if [ -z "$missing" ]; then
    cat $(awk -v d="$parts" '{print d"/"$1}' "$parts/MANIFEST") | tar -xJf - -C "$site" \
      && touch "$site/.unpacked" && rm -f "$parts"/quack-stack.tar.xz.part* && echo "unpacked the QuACK stack"
  else
    echo "QuACK parts still missing: $(echo $missing)"
  fi
fi
pp="$site:$site/nvidia_cutlass_dsl/dsl_packages"
echo "QUACK_PYTHONPATH=$pp"
if [ -f "$site/.unpacked" ] && PYTHONPATH="$pp${PYTHONPATH:+:$PYTHONPATH}" \
    python3 -c "import quack, cutlass; print('quack', quack.__version__)" 2>&1; then
  exit 0
fi
echo "QuACK not importable yet from $site"
exit 3
