"""``python -m population inspect FILE.ptx``; see ``population.cli``."""

import sys

from population.cli import main

sys.exit(main())
