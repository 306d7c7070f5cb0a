"""Launch exported cubins on a few shapes, standalone, for compute-sanitizer: the command-line form of
``evaluators.gpu.sanitize_replay`` (spec format, output lines and exit codes are documented there). Usage::

    compute-sanitizer --tool memcheck python3 experiments/sanitize_replay.py --spec spec.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.gpu.sanitize_replay import (
    KERNEL_KEYS,
    SPEC_KEYS,
    build_spec,
    kernel_entry,
    kernels_of,
    load_spec,
    main,
    replay,
)

__all__ = ["KERNEL_KEYS", "SPEC_KEYS", "build_spec", "kernel_entry", "kernels_of", "load_spec", "main", "replay"]

if __name__ == "__main__":
    sys.exit(main())
