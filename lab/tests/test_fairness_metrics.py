"""Group fairness metrics of fullcomp_lab.metrics against fairlearn itself: 2, 3 and 5 groups, string labels,
sample weights, the ratios, and the groups without positives or negatives."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from fullcomp_lab.metrics import (
    demographic_parity_difference,
    demographic_parity_ratio,
    equal_opportunity_difference,
    equal_opportunity_ratio,
    equalized_odds_difference,
    equalized_odds_ratio,
    group_rates,
)

flm = pytest.importorskip("fairlearn.metrics")

NAMES = np.array(["asian", "black", "hispanic", "other", "white"])


def ours(y, p, a, w=None):
    return {
        "dp": demographic_parity_difference(p, a, sample_weight=w),
        "dp_ratio": demographic_parity_ratio(p, a, sample_weight=w),
        "eop": equal_opportunity_difference(y, p, a, sample_weight=w),
        "eop_ratio": equal_opportunity_ratio(y, p, a, sample_weight=w),
        "eod": equalized_odds_difference(y, p, a, sample_weight=w),
        "eod_ratio": equalized_odds_ratio(y, p, a, sample_weight=w),
    }


def theirs(y, p, a, w=None):
    kw = {"sensitive_features": a, "sample_weight": w}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas and scikit-learn warnings from inside fairlearn
        return {
            "dp": flm.demographic_parity_difference(y, p, **kw),
            "dp_ratio": flm.demographic_parity_ratio(y, p, **kw),
            "eop": flm.equal_opportunity_difference(y, p, **kw),
            "eop_ratio": flm.equal_opportunity_ratio(y, p, **kw),
            "eod": flm.equalized_odds_difference(y, p, **kw),
            "eod_ratio": flm.equalized_odds_ratio(y, p, **kw),
        }


def assert_same(got, expected):
    assert got.keys() == expected.keys()
    for key in got:
        assert got[key] == pytest.approx(float(expected[key]), abs=1e-12, nan_ok=True), key


def sample(seed, n_groups, n=240, labels="int", weighted=False):
    """Unequal group sizes, group-dependent base and positive rates, predictions correlated with labels."""
    rng = np.random.default_rng(seed)
    sizes = rng.dirichlet(np.full(n_groups, 3.0))
    a = rng.choice(n_groups, size=n, p=sizes)
    a[:n_groups] = np.arange(n_groups)  # every group present
    base = rng.uniform(0.2, 0.7, n_groups)
    y = (rng.random(n) < base[a]).astype(int)
    y[: 2 * n_groups] = np.r_[np.zeros(n_groups, int), np.ones(n_groups, int)]  # each group has both classes
    a[n_groups : 2 * n_groups] = np.arange(n_groups)
    bias = rng.normal(0, 0.6, n_groups)
    p = (rng.normal(size=n) + 1.2 * y + bias[a] > 0.6).astype(int)
    w = None
    if weighted:
        w = rng.uniform(0.0, 3.0, n)
        w[rng.random(n) < 0.1] = 0.0  # exact zeros: such samples must simply not count
        w[: 2 * n_groups] = 1.0
    if labels == "str":
        a = NAMES[:n_groups][a]
    elif labels == "sparse":
        a = np.array([-7, 3, 50, 1_000_000, 12])[:n_groups][a]  # a range too wide for one bin per value
    return y, p, a, w


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("labels", ["int", "str", "sparse"])
@pytest.mark.parametrize("n_groups", [2, 3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_matches_fairlearn_on_random_data(seed, n_groups, labels, weighted):
    y, p, a, w = sample(seed, n_groups, labels=labels, weighted=weighted)
    assert_same(ours(y, p, a, w), theirs(y, p, a, w))


@pytest.mark.parametrize("n_groups", [2, 3, 5])
def test_group_rates_match_metric_frame(n_groups):
    y, p, a, w = sample(11, n_groups, labels="str", weighted=True)
    frame = flm.MetricFrame(
        metrics={"selection_rate": flm.selection_rate, "tpr": flm.true_positive_rate, "fpr": flm.false_positive_rate},
        y_true=y,
        y_pred=p,
        sensitive_features=a,
        sample_params={key: {"sample_weight": w} for key in ("selection_rate", "tpr", "fpr")},
    )
    rates = group_rates(y, p, a, sample_weight=w)
    assert rates["group"].tolist() == sorted(NAMES[:n_groups].tolist()) == frame.by_group.index.tolist()
    for key in ("selection_rate", "tpr", "fpr"):
        np.testing.assert_allclose(rates[key], frame.by_group[key].to_numpy(dtype=float), atol=1e-12)
    np.testing.assert_allclose(rates["weight"], [w[a == g].sum() for g in rates["group"]])
    np.testing.assert_allclose(rates["positives"], [w[(a == g) & (y == 1)].sum() for g in rates["group"]])


def test_two_groups_are_the_plain_gaps_and_positional_calls_still_work():
    y, p, a, _ = sample(5, 2)
    tpr = [p[(a == g) & (y == 1)].mean() for g in (0, 1)]
    fpr = [p[(a == g) & (y == 0)].mean() for g in (0, 1)]
    pr = [p[a == g].mean() for g in (0, 1)]
    assert demographic_parity_difference(p, a) == pytest.approx(abs(pr[0] - pr[1]), abs=1e-12)
    assert equal_opportunity_difference(y, p, a) == pytest.approx(abs(tpr[0] - tpr[1]), abs=1e-12)
    assert equalized_odds_difference(y, p, a) == pytest.approx(
        max(abs(tpr[0] - tpr[1]), abs(fpr[0] - fpr[1])), abs=1e-12
    )
    assert demographic_parity_ratio(p, a) == pytest.approx(min(pr) / max(pr), abs=1e-12)
    # Boolean predictions and groups, as the experiments pass them, give the same numbers.
    assert equalized_odds_difference(y == 1, p == 1, a == 1) == equalized_odds_difference(y, p, a)


# ------------------------------------------------------------------------------ no positives / negatives


def test_group_without_positives_counts_as_tpr_zero_as_fairlearn():
    # The case: group 1 has no positives (fullcomp used to say NaN), group 0 no negatives.
    y, p, a = [0, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0, 0]
    assert equal_opportunity_difference(y, p, a) == 0.5
    assert equalized_odds_difference(y, p, a) == 0.5
    assert_same(ours(y, p, a), theirs(y, p, a))
    rates = group_rates(y, p, a)
    assert rates["positives"].tolist() == [2, 0] and rates["tpr"].tolist() == [0.5, 0.0]
    assert rates["negatives"].tolist() == [0, 2] and rates["fpr"].tolist() == [0.0, 0.5]


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("n_groups", [3, 5])
def test_groups_without_positives_or_negatives_on_random_data(n_groups, weighted):
    y, p, a, w = sample(7, n_groups, labels="str", weighted=weighted)
    y[a == NAMES[1]] = 0  # a group without positives
    y[a == NAMES[2]] = 1  # and one without negatives
    assert equalized_odds_difference(y, p, a, sample_weight=w) >= 0
    assert_same(ours(y, p, a, w), theirs(y, p, a, w))
    if weighted:
        # Positives of weight 0 are no positives either.
        w = w.copy()
        w[(a == NAMES[0]) & (y == 1)] = 0.0
        assert_same(ours(y, p, a, w), theirs(y, p, a, w))


# ------------------------------------------------------------------------------------------------ ratios


def test_ratios_by_hand_and_against_fairlearn():
    # Groups "a", "b", "c": selection 2/4, 1/4, 3/4; TPR 1/2, 1/2, 1; FPR 1/2, 0, 1/2.
    a = np.array(list("aaaabbbbcccc"))
    y = np.array([1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0])
    p = np.array([1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 0])
    assert demographic_parity_ratio(p, a) == pytest.approx(1 / 3)
    assert equal_opportunity_ratio(y, p, a) == pytest.approx(1 / 2)
    assert equalized_odds_ratio(y, p, a) == 0.0  # FPR ratio 0 / (1/2)
    assert demographic_parity_difference(p, a) == pytest.approx(1 / 2)
    assert_same(ours(y, p, a), theirs(y, p, a))


def test_ratio_of_all_zero_rates_is_nan_as_fairlearn():
    y, p, a = [0, 1, 0, 1], [0, 0, 0, 0], [0, 0, 1, 1]
    assert math.isnan(demographic_parity_ratio(p, a))
    assert math.isnan(equalized_odds_ratio(y, p, a))
    assert demographic_parity_difference(p, a) == 0.0 and equalized_odds_difference(y, p, a) == 0.0
    assert_same(ours(y, p, a), theirs(y, p, a))
    # TPRs all 0 with defined FPRs: NaN from both.
    y, p = [0, 1, 0, 1], [1, 0, 0, 0]
    assert math.isnan(equalized_odds_ratio(y, p, a))
    assert math.isnan(flm.equalized_odds_ratio(y, p, sensitive_features=a))


def test_equalized_odds_ratio_is_nan_when_only_the_fpr_ratio_is():
    # No false positives in any group: the FPR ratio is 0/0.  fairlearn's built-in min() then returns the
    # TPR ratio; fullcomp returns NaN whichever of the two is undefined (documented in the docstring).
    y, p, a = [0, 1, 0, 1, 1], [0, 1, 0, 0, 1], [0, 0, 1, 1, 1]
    assert equal_opportunity_ratio(y, p, a) == 0.5
    assert math.isnan(equalized_odds_ratio(y, p, a))


# -------------------------------------------------------------------------------------- weights, labels


def test_integer_weights_are_repetitions():
    y, p, a, _ = sample(3, 3, n=90, labels="str")
    reps = np.random.default_rng(0).integers(0, 4, y.size)
    reps[:6] = 1
    weighted = ours(y, p, a, reps.astype(float))
    repeated = ours(np.repeat(y, reps), np.repeat(p, reps), np.repeat(a, reps))
    for key in weighted:
        assert weighted[key] == pytest.approx(repeated[key], abs=1e-12, nan_ok=True), key


def test_a_group_of_zero_total_weight_is_left_out():
    y, p, a, w = sample(4, 3, weighted=True)
    w[a == 2] = 0.0
    keep = a != 2
    # fairlearn leaves the group's undefined (0/0) selection rate out of demographic parity ...
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = flm.demographic_parity_difference(y, p, sensitive_features=a, sample_weight=w)
    assert demographic_parity_difference(p, a, sample_weight=w) == pytest.approx(expected, abs=1e-12)
    # ... (and scikit-learn rejects its all-zero weights for the TPR): the group is simply absent.
    assert_same(ours(y, p, a, w), theirs(y[keep], p[keep], a[keep], w[keep]))
    assert group_rates(y, p, a, sample_weight=w)["group"].tolist() == [0, 1]


def test_label_types():
    y, p, a, _ = sample(8, 3, labels="str")
    expected = ours(y, p, a)
    assert ours(y, p, a.tolist()) == expected  # a list of str
    assert ours(y, p, a.astype(object)) == expected
    codes = np.searchsorted(np.unique(a), a)
    assert ours(y, p, codes) == expected
    assert ours(y, p, codes.astype(float)) == expected
    assert ours(y, p, codes.astype(np.int8) - 100) == expected
    assert ours(y, p.astype(float), codes.astype(np.uint16)) == expected
    assert ours(y.reshape(-1, 1), p.reshape(1, -1), codes.reshape(-1, 1)) == expected  # column and row vectors
