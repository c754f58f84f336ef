"""``python -m fullcomp_lab bench ...``: the ``fullcomp-lab`` command without its console script."""

import sys

from fullcomp_lab.cli import main

sys.exit(main())
