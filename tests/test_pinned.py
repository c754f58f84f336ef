"""Every method's trajectory on the contract, structured and touched problems, against the pinned reference.

The reference (tests/data/pinned_iterates.npz, written by ``python tests/pinned.py --write``) holds the iterate
each update gave and the history's numeric columns; a rewrite of a method's plumbing must give the same
numbers.  On the machine that wrote it the comparison is exact (``python tests/pinned.py`` prints 0 for every
case); 1e-9 leaves room for another CPU's BLAS, far below what a changed update moves.
"""

from __future__ import annotations

import pytest
from pinned import CASE_NAMES, compare


@pytest.mark.parametrize("case", CASE_NAMES)
def test_the_trajectory_is_the_pinned_one(case: str) -> None:
    assert compare(case) <= 1e-9
