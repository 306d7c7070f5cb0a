"""``python -m evolve``: compose the Hydra config (``conf/``) and run the search (``evolve.app.run``).

Examples::

    python -m evolve                                    # MAP-Elites on RMSNorm, static evaluator without a GPU
    python -m evolve algorithm=islands budget.evaluations=500
    python -m evolve -m algorithm=map_elites,random,hill_climb seed=0,1,2   # a comparison sweep
    python -m evolve experiment=rmsnorm_h200            # the GPU run
    python -m evolve hydra.run.dir=outputs/2026-11-30/01-02-03-123-abcd   # resume that run

A configuration error exits with status 2 and a message naming the key and the allowed values.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from evolve.config import ConfigError, register

register()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    """Hydra entry point (never call it from tests: use the compose API or a subprocess)."""
    from evolve.app import run

    try:
        run(cfg)
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
