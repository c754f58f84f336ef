"""``python -m fullcomp``: the ``fullcomp`` command (what ``torchrun -m fullcomp run ...`` starts on each rank)."""

import sys

from fullcomp.cli import main

sys.exit(main())
