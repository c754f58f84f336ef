"""Evaluation metrics of the pAUC-fairness experiments: one-way partial AUC and group fairness gaps.

Partial AUC with FPR in [0, rho] (``partial_auc``) comes in three conventions
that differ numerically, so tables must say which one they report:

* ``"raw"``: the area under the empirical ROC curve between FPR 0 and rho,
  in [0, rho] (the ROC curve is linearly interpolated at rho, as scikit-learn does);
* ``"normalized"``: the pair count over the k = ceil(rho n_-) highest-scored
  negatives, (1/(n_+ k)) sum_i sum_{j in N_k} (1[s_i > s_j] + 1/2 1[s_i = s_j]),
  in [0, 1]; it equals raw / rho when rho n_- is an integer and is the scale of
  the training objective (the CVaR formulation);
* ``"mcclish"``: the McClish standardisation 1/2 (1 + (raw - rho^2/2)/(rho - rho^2/2))
  that ``sklearn.metrics.roc_auc_score(max_fpr=rho)`` and LibAUC's ``pauc_roc_score``
  return (0.5 for a random scorer, 1 for a perfect one).

The fairness metrics are plain gaps between the two groups of a binary
sensitive attribute (lower is better) of thresholded predictions
``y_hat = 1[score >= threshold]``: demographic parity |PR_0 - PR_1|, equal
opportunity |TPR_0 - TPR_1| and equalized odds max(|TPR_0 - TPR_1|, |FPR_0 - FPR_1|)
(the fairlearn convention).  A rate that is undefined (a group without
positives, say) makes the gap NaN rather than an error, so one small test
split never stops a benchmark.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fullcomp.errors import OptionError

PAUC_KINDS = ("raw", "normalized", "mcclish")


def _arrays(y: Any, score: Any, name: str = "score") -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y).reshape(-1)
    s = np.asarray(score, dtype=float).reshape(-1)
    if y.shape != s.shape:
        raise OptionError(f"y and {name} must have the same length, got {y.size} and {s.size}")
    labels = set(np.unique(y).tolist())
    if not labels <= {0, 1}:
        raise OptionError(f"y must hold binary labels 0/1, got values {sorted(labels)[:5]}")
    if not np.isfinite(s).all():
        raise OptionError(f"{name} has non-finite values; score with a model whose outputs are finite")
    return y.astype(bool), s


def _check_rho(max_fpr: float) -> float:
    if isinstance(max_fpr, bool) or not isinstance(max_fpr, (int, float)) or not 0 < max_fpr <= 1:
        raise OptionError(f"max_fpr must be a number in (0, 1], got {max_fpr!r}")
    return float(max_fpr)


def roc_points(y: Any, score: Any) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of the empirical ROC curve, one point per distinct score, from (0, 0) to (1, 1)."""
    y, s = _arrays(y, score)
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    # One point per distinct threshold: tied scores move the curve diagonally, which is the 1/2 of a tie.
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]
    tps = np.cumsum(y)[last]
    fps = (last + 1) - tps
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise OptionError(f"partial AUC needs both classes; got {n_pos} positives and {n_neg} negatives")
    return np.r_[0.0, fps / n_neg], np.r_[0.0, tps / n_pos]


def partial_auc(y: Any, score: Any, max_fpr: float = 0.3, kind: str = "normalized") -> float:
    """One-way partial AUC with FPR in [0, ``max_fpr``] (default 0.3) in the convention ``kind``.

    ``kind`` (default ``"normalized"``): ``"raw"`` (area in [0, max_fpr]),
    ``"normalized"`` (pair count over the ceil(max_fpr n_-) highest-scored
    negatives, in [0, 1]) or ``"mcclish"`` (scikit-learn's
    ``roc_auc_score(max_fpr=...)``).  ``y`` holds 0/1 labels, ``score`` real
    scores (higher means positive).  With ``max_fpr = 1`` every kind is the AUC.
    """
    rho = _check_rho(max_fpr)
    if kind not in PAUC_KINDS:
        raise OptionError(f"kind must be one of {', '.join(PAUC_KINDS)}, got {kind!r}")
    if kind == "normalized":
        yb, s = _arrays(y, score)
        pos, neg = s[yb], np.sort(s[~yb])[::-1]
        if pos.size == 0 or neg.size == 0:
            raise OptionError(f"partial AUC needs both classes; got {pos.size} positives and {neg.size} negatives")
        # Tolerance: rho n_- computed in floating point may miss an integer by an ulp.
        k = max(1, math.ceil(rho * neg.size - 1e-9))
        top = np.sort(neg[:k])
        # For each positive: negatives of the top k strictly below it, and those tied with it.
        below = np.searchsorted(top, pos, side="left")
        ties = np.searchsorted(top, pos, side="right") - below
        return float((below + 0.5 * ties).sum() / (pos.size * k))
    fpr, tpr = roc_points(y, score)
    # Interpolate the curve at rho, then integrate by trapezoids (ties count 1/2), as scikit-learn does.
    stop = np.searchsorted(fpr, rho, side="right")
    x = np.r_[fpr[:stop], rho]
    t = np.r_[tpr[:stop], np.interp(rho, fpr, tpr)]
    raw = float(np.sum(np.diff(x) * (t[1:] + t[:-1]) / 2))
    if kind == "raw":
        return raw
    low, high = rho**2 / 2, rho
    return 0.5 * (1 + (raw - low) / (high - low))


# ------------------------------------------------------------------------------------------- fairness


def _groups(y_pred: Any, group: Any, y_true: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    pred = np.asarray(y_pred).reshape(-1)
    a = np.asarray(group).reshape(-1)
    if pred.shape != a.shape:
        raise OptionError(f"y_pred and group must have the same length, got {pred.size} and {a.size}")
    for name, v in (("y_pred", pred), ("group", a)):
        bad = set(np.unique(v).tolist()) - {0, 1}
        if bad:
            raise OptionError(f"{name} must hold 0/1 values (threshold scores first), got {sorted(bad)[:5]}")
    y = None
    if y_true is not None:
        y = np.asarray(y_true).reshape(-1)
        if y.shape != a.shape:
            raise OptionError(f"y_true and group must have the same length, got {y.size} and {a.size}")
        if set(np.unique(y).tolist()) - {0, 1}:
            raise OptionError("y_true must hold 0/1 labels")
        y = y.astype(bool)
    return pred.astype(bool), a.astype(bool), y


def _rate(pred: np.ndarray, mask: np.ndarray) -> float:
    return float(pred[mask].mean()) if mask.any() else math.nan


def demographic_parity_difference(y_pred: Any, group: Any) -> float:
    """|P(y_hat=1 | A=0) - P(y_hat=1 | A=1)| for 0/1 predictions and a 0/1 group (NaN if a group is empty)."""
    pred, a, _ = _groups(y_pred, group)
    return abs(_rate(pred, ~a) - _rate(pred, a))


def equal_opportunity_difference(y_true: Any, y_pred: Any, group: Any) -> float:
    """|TPR_0 - TPR_1|, the true-positive-rate gap between the groups (NaN if a group has no positives)."""
    pred, a, y = _groups(y_pred, group, y_true)
    return abs(_rate(pred, ~a & y) - _rate(pred, a & y))


def equalized_odds_difference(y_true: Any, y_pred: Any, group: Any) -> float:
    """max(|TPR_0 - TPR_1|, |FPR_0 - FPR_1|), fairlearn's equalized odds difference (NaN if a rate is undefined)."""
    pred, a, y = _groups(y_pred, group, y_true)
    tpr = abs(_rate(pred, ~a & y) - _rate(pred, a & y))
    fpr = abs(_rate(pred, ~a & ~y) - _rate(pred, a & ~y))
    return max(tpr, fpr) if not (math.isnan(tpr) or math.isnan(fpr)) else math.nan


def fairness_report(
    y_true: Any, score: Any, group: Any, *, max_fpr: float = 0.3, threshold: float = 0.5
) -> dict[str, float]:
    """Every metric of the pAUC-fairness tables for one scored split.

    ``pauc`` (normalized), ``pauc_raw``, ``pauc_mcclish`` and ``auc`` from the
    scores; ``eod``, ``eop``, ``dp`` and ``positive_rate`` from the predictions
    ``score >= threshold`` (default 0.5: the models score with a sigmoid).
    """
    y, s = _arrays(y_true, score)
    pred = s >= threshold
    return {
        "pauc": partial_auc(y, s, max_fpr, "normalized"),
        "pauc_raw": partial_auc(y, s, max_fpr, "raw"),
        "pauc_mcclish": partial_auc(y, s, max_fpr, "mcclish"),
        "auc": partial_auc(y, s, 1.0, "raw"),
        "eod": equalized_odds_difference(y, pred, group),
        "eop": equal_opportunity_difference(y, pred, group),
        "dp": demographic_parity_difference(pred, group),
        "positive_rate": float(pred.mean()),
    }


__all__ = [
    "PAUC_KINDS",
    "partial_auc",
    "roc_points",
    "demographic_parity_difference",
    "equal_opportunity_difference",
    "equalized_odds_difference",
    "fairness_report",
]
