"""Every method's trajectory on the contract, structured and touched problems, against the pinned reference.

The reference (tests/data/pinned_iterates.npz, written by ``python tests/pinned.py --write``) holds the iterate
each update gave and the history's numeric columns; a rewrite of a method's plumbing must give the same
numbers.  On the machine that wrote it the comparison is exact (``python tests/pinned.py`` prints 0).  On
another CPU the last bits of sums move, and a GLMO answer moves within what it certifies, so the bounds are
those of tests/test_distributed.py: without a GLMO, 1e-9 of the numbers' scale; with one, a hundredth of the
largest certified gap in the history's estimates and the gap itself in the iterates, above Clarabel's 1e-8.
tests/test_structured.py measured that kind of drift on its structured problem: two product routes 8 updates
apart by 2e-9 of the iterate's scale on one CPU and 2e-5 on another, their estimates within a thousandth of
gaps of about 3e-3.  Pricing calls may differ by a tenth.
"""

from __future__ import annotations

import pytest
from pinned import CASE_NAMES, differences


def allowance(key: str, scale: float, gap: float) -> float:
    """How far an array of the case may move on another CPU, for a run whose GLMOs certified up to ``gap``."""
    scale = max(1.0, scale)
    if key == "history.pricing_calls":
        return 0.1 * scale
    if gap == 0.0:
        return 1e-9 * scale
    if key in ("x", "final"):
        return (1e-8 + gap) * scale
    return (1e-8 + 0.01 * gap) * scale


@pytest.mark.parametrize("case", CASE_NAMES)
def test_the_trajectory_is_the_pinned_one(case: str) -> None:
    found, gap = differences(case)
    for key, (difference, scale) in found.items():
        assert difference <= allowance(key, scale, gap), (key, difference, allowance(key, scale, gap))
