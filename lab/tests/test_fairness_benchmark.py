"""benchmarks/fairness.py on a slice of UCI Adult: the constrained logistic regression narrows the DP gap.

Reads ``shared/data/adult`` next to the repository and skips when it is absent.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT.parent / "shared" / "data" / "adult"
needs_adult = pytest.mark.skipif(not (ADULT / "adult.data").is_file(), reason="no shared/data/adult")


def benchmark():
    spec = importlib.util.spec_from_file_location("fairness_benchmark", ROOT / "benchmarks" / "fairness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_adult
def test_the_constrained_model_narrows_the_gap_on_a_slice_of_adult():
    fairness = benchmark()
    train, test = fairness.split(ADULT, seed=0, rows=1500)
    assert train[0].shape == (1500, test[0].shape[1]) and np.all(train[0][:, -1] == 1.0)  # the bias column
    free = fairness.fit_fullcomp(train, iters=60, radius=8.0, constrained=False)
    kept = fairness.fit_fullcomp(train, iters=60, radius=8.0, constrained=True)
    gaps = {}
    for name, w in (("free", free), ("kept", kept)):
        p, _ = fairness.scores("fullcomp", w, train[0], 0)
        gaps[name] = fairness.gap(p, train[2])
    # Men's mean probability exceeds women's by far more than 0.05 without the constraint.
    assert gaps["free"] > 0.1
    assert gaps["kept"] < gaps["free"] / 2
