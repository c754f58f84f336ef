"""Evaluation metrics of the pAUC-fairness experiments: one-way partial AUC, average precision and group fairness.

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

Average precision (``average_precision``: the area under the precision-recall
curve as scikit-learn's ``average_precision_score`` computes it, one step per
distinct score and no interpolation) complements them for imbalanced labels.

The fairness metrics compare the groups of a sensitive attribute (two or more,
labelled by integers, booleans or strings) on thresholded predictions
``y_hat = 1[score >= threshold]``, with optional ``sample_weight``, and follow
fairlearn's ``method="between_groups"`` definitions: a difference is the largest
group rate minus the smallest (lower is better), a ratio the smallest over the
largest (higher is better, 1 is parity).  Demographic parity compares selection
rates P(y_hat=1 | A=a), equal opportunity true-positive rates, and equalized odds
both true- and false-positive rates (its difference is the larger of the two
differences, its ratio the smaller of the two ratios).  With two groups the
differences are the plain gaps |PR_0 - PR_1|, |TPR_0 - TPR_1| and
max(|TPR_0 - TPR_1|, |FPR_0 - FPR_1|).

A group without positives has no true-positive rate.  Like fairlearn (and the
scikit-learn ``confusion_matrix(normalize="true")`` beneath it), these functions
count it as 0, and a group without negatives as FPR 0.  The numbers are then the
ones fairlearn users compare against, and a small split gives a finite gap
rather than NaN.  ``group_rates`` shows the per-group counts behind any gap.
Fewer than two groups, mismatched lengths, labels other than 0/1 and negative
weights raise :class:`~fullcomp.errors.OptionError` naming the argument.
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


def average_precision(y: Any, score: Any, sample_weight: Any = None) -> float:
    """Average precision (AUPRC): sum over the distinct scores, from the highest, of (R_k - R_{k-1}) P_k.

    P_k and R_k are the precision and recall of the predictions ``score >= s_k``;
    all samples tied at one score enter together (one step per distinct score, no
    interpolation), which is scikit-learn's ``average_precision_score``.  ``y``
    holds 0/1 labels, ``score`` real scores (higher means positive),
    ``sample_weight`` optional non-negative weights.  A random scorer gets about
    the positive rate, a perfect one 1.  Without a positive (of positive weight)
    the recall is undefined and this raises :class:`~fullcomp.errors.OptionError`,
    where scikit-learn warns and returns 0.
    """
    yb, s = _arrays(y, score)
    w = _weights(sample_weight, yb.size)
    if w is not None:
        # Zero-weight samples are left out, as scikit-learn does: they must not add a threshold.
        keep = w > 0
        yb, s, w = yb[keep], s[keep], w[keep]
    if not yb.any():
        raise OptionError("average precision needs at least one positive (of positive weight) in y")
    order = np.argsort(-s, kind="mergesort")
    s, yb = s[order], yb[order]
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]
    if w is None:
        tps = np.cumsum(yb)[last].astype(float)
        fps = (last + 1) - tps
    else:
        w = w[order]
        tps = np.cumsum(np.where(yb, w, 0.0))[last]
        fps = np.cumsum(np.where(yb, 0.0, w))[last]
    precision = tps / (tps + fps)  # every threshold admits a sample of positive weight: no 0/0
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


# ------------------------------------------------------------------------------------------- fairness


def _vector(x: Any, name: str, dtype: Any = None) -> np.ndarray:
    """``x`` as a 1-D array (a column or row vector is flattened); anything with two real axes names ``name``."""
    try:
        v = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as exc:
        kind = "an array of numbers" if dtype is not None else "an array"
        raise OptionError(f"{name} must be {kind}, got {type(x).__name__}") from exc
    if sum(d != 1 for d in v.shape) > 1:
        raise OptionError(f"{name} must be 1-D (one entry per sample), got shape {v.shape}")
    return v.reshape(-1)


def _binary(v: np.ndarray, name: str, what: str) -> np.ndarray:
    """A 0/1 (or boolean) vector as booleans; other values raise, naming ``name`` and a few of them."""
    if v.dtype == bool:
        return v
    ok = np.asarray((v == 0) | (v == 1), dtype=bool)
    if ok.shape != v.shape or not ok.all():
        bad = list(dict.fromkeys(v[~ok].tolist()))[:5] if ok.shape == v.shape else [v.dtype]
        raise OptionError(f"{name} must hold 0/1 {what}, got {bad}")
    return v.astype(bool)


def _weights(sample_weight: Any, n: int) -> np.ndarray | None:
    if sample_weight is None:
        return None
    w = _vector(sample_weight, "sample_weight", float)
    if w.size != n:
        raise OptionError(f"sample_weight must hold one weight per sample, got {w.size} weights for {n} samples")
    if not np.isfinite(w).all():
        raise OptionError("sample_weight has non-finite values; give finite, non-negative weights")
    if (w < 0).any():
        raise OptionError(f"sample_weight must be non-negative, got {float(w.min())!r}")
    return w


def _encode(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(labels, codes) with ``labels[codes] == a``, labels sorted; small-range integers skip the sort."""
    if a.dtype == bool:
        return np.array([False, True]), a.astype(np.intp)
    if a.dtype.kind in "iu" and a.size:
        lo, hi = int(a.min()), int(a.max())
        if hi - lo <= 2 * a.size + 64 and hi < 2**62:
            # One bincount bin per value in [lo, hi]; bins no sample falls in are dropped later.
            return np.arange(lo, hi + 1), a.astype(np.intp) - lo
    try:
        labels, codes = np.unique(a, return_inverse=True)
    except TypeError as exc:
        kinds = sorted({type(v).__name__ for v in a.tolist()})
        raise OptionError(f"group labels must be all numbers or all strings, got a mix of {kinds}") from exc
    return labels, codes.reshape(-1)


def _group_counts(y_true: Any, y_pred: Any, group: Any, sample_weight: Any) -> tuple[np.ndarray, np.ndarray]:
    """(labels, counts) over the groups of positive total weight: ``counts[g, t, p]`` is the weight of the
    samples of group g with y_true = t and y_pred = p (t = 0 throughout when ``y_true`` is None)."""
    pred = _binary(_vector(y_pred, "y_pred"), "y_pred", "predictions (threshold scores first)")
    a = _vector(group, "group")
    if a.size != pred.size:
        raise OptionError(f"y_pred and group must have the same length, got {pred.size} and {a.size}")
    cell = pred.astype(np.intp)
    if y_true is not None:
        y = _binary(_vector(y_true, "y_true"), "y_true", "labels")
        if y.size != a.size:
            raise OptionError(f"y_true and group must have the same length, got {y.size} and {a.size}")
        cell += 2 * y
    w = _weights(sample_weight, a.size)
    labels, codes = _encode(a)
    # One pass over the samples: a 2 x 2 confusion table per group.
    counts = np.bincount(4 * codes + cell, weights=w, minlength=4 * labels.size).reshape(-1, 2, 2)
    keep = counts.sum(axis=(1, 2)) > 0
    if keep.sum() < 2:
        present = labels[keep].tolist()
        raise OptionError(
            f"group must hold at least 2 distinct groups (of positive total weight) to compare, "
            f"got {len(present)}: {present[:5]}"
        )
    return labels[keep], counts[keep].astype(float)


def _selection(counts: np.ndarray) -> np.ndarray:
    return counts[:, :, 1].sum(axis=1) / counts.sum(axis=(1, 2))


def _positive_rates(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(TPR, FPR) per group; a group without positives (negatives) gets TPR (FPR) 0, as in fairlearn."""
    pos, neg = counts[:, 1].sum(axis=1), counts[:, 0].sum(axis=1)
    tpr = np.divide(counts[:, 1, 1], pos, out=np.zeros_like(pos), where=pos > 0)
    fpr = np.divide(counts[:, 0, 1], neg, out=np.zeros_like(neg), where=neg > 0)
    return tpr, fpr


def _difference(rates: np.ndarray) -> float:
    return float(rates.max() - rates.min())


def _ratio(rates: np.ndarray) -> float:
    # Every group at rate 0 is 0/0: NaN, as fairlearn.
    top = rates.max()
    return float(rates.min() / top) if top > 0 else math.nan


def group_rates(y_true: Any, y_pred: Any, group: Any, *, sample_weight: Any = None) -> dict[str, np.ndarray]:
    """The per-group counts and rates behind every fairness metric (fairlearn's ``MetricFrame.by_group``).

    One entry per group, in sorted label order, under the keys ``group`` (the
    labels), ``weight`` (samples, or their total weight), ``positives`` and
    ``negatives`` (the same for y_true = 1 and 0), ``selection_rate``, ``tpr`` and
    ``fpr``.  A group without positives has ``tpr`` 0 and one without negatives
    ``fpr`` 0 (fairlearn's convention); ``positives`` and ``negatives`` tell those
    apart from a real 0.  A group of total weight 0 carries no data and is left
    out, and fewer than two groups left raise :class:`~fullcomp.errors.OptionError`.
    """
    labels, counts = _group_counts(y_true, y_pred, group, sample_weight)
    tpr, fpr = _positive_rates(counts)
    return {
        "group": labels,
        "weight": counts.sum(axis=(1, 2)),
        "positives": counts[:, 1].sum(axis=1),
        "negatives": counts[:, 0].sum(axis=1),
        "selection_rate": _selection(counts),
        "tpr": tpr,
        "fpr": fpr,
    }


def demographic_parity_difference(y_pred: Any, group: Any, *, sample_weight: Any = None) -> float:
    """Largest minus smallest group selection rate P(y_hat=1 | A=a): |PR_0 - PR_1| for two groups.

    fairlearn's ``demographic_parity_difference`` (``method="between_groups"``),
    without its unused ``y_true``.  ``y_pred`` holds 0/1 predictions, ``group``
    one label per sample (integers, booleans or strings; at least two groups),
    ``sample_weight`` optional non-negative weights.  0 is parity.
    """
    _, counts = _group_counts(None, y_pred, group, sample_weight)
    return _difference(_selection(counts))


def demographic_parity_ratio(y_pred: Any, group: Any, *, sample_weight: Any = None) -> float:
    """Smallest over largest group selection rate, fairlearn's ``demographic_parity_ratio``; 1 is parity.

    Arguments as :func:`demographic_parity_difference`.  NaN when every group
    has selection rate 0 (0/0), as in fairlearn.
    """
    _, counts = _group_counts(None, y_pred, group, sample_weight)
    return _ratio(_selection(counts))


def equal_opportunity_difference(y_true: Any, y_pred: Any, group: Any, *, sample_weight: Any = None) -> float:
    """Largest minus smallest group true-positive rate: |TPR_0 - TPR_1| for two groups.

    fairlearn's ``equal_opportunity_difference``.  ``y_true`` holds 0/1 labels,
    the other arguments are as in :func:`demographic_parity_difference`.

    A group without positives (of positive weight) has no TPR.  It counts as
    TPR 0, as in fairlearn, whose rates come from scikit-learn's
    ``confusion_matrix(normalize="true")`` and its 0/0 = 0.  Earlier fullcomp
    versions returned NaN there.  The fairlearn convention was chosen because
    users check these numbers against fairlearn's, and a finite gap keeps a
    small split from turning a validation-selection criterion into NaN.  The
    price is that such a group can inflate the gap; :func:`group_rates` shows
    its ``positives`` count.
    """
    _, counts = _group_counts(y_true, y_pred, group, sample_weight)
    return _difference(_positive_rates(counts)[0])


def equal_opportunity_ratio(y_true: Any, y_pred: Any, group: Any, *, sample_weight: Any = None) -> float:
    """Smallest over largest group true-positive rate, fairlearn's ``equal_opportunity_ratio``; 1 is parity.

    Arguments and the TPR 0 of a group without positives as in
    :func:`equal_opportunity_difference`; NaN when every group has TPR 0.
    """
    _, counts = _group_counts(y_true, y_pred, group, sample_weight)
    return _ratio(_positive_rates(counts)[0])


def equalized_odds_difference(y_true: Any, y_pred: Any, group: Any, *, sample_weight: Any = None) -> float:
    """The larger of the TPR and FPR differences (largest minus smallest group rate), fairlearn's
    ``equalized_odds_difference``: max(|TPR_0 - TPR_1|, |FPR_0 - FPR_1|) for two groups.

    Arguments as in :func:`equal_opportunity_difference`.  A group without
    positives counts as TPR 0 and one without negatives as FPR 0, as in
    fairlearn (see :func:`equal_opportunity_difference` for why), so the result
    is always finite.
    """
    _, counts = _group_counts(y_true, y_pred, group, sample_weight)
    tpr, fpr = _positive_rates(counts)
    return max(_difference(tpr), _difference(fpr))


def equalized_odds_ratio(y_true: Any, y_pred: Any, group: Any, *, sample_weight: Any = None) -> float:
    """The smaller of the TPR and FPR ratios (smallest over largest group rate), fairlearn's
    ``equalized_odds_ratio``; 1 is parity.

    Arguments and conventions as in :func:`equalized_odds_difference`.  A ratio
    whose rates are all 0 is 0/0, NaN, and then so is the result.  fairlearn
    takes Python's ``min`` of the two, which returns NaN when the TPR ratio is
    NaN but the TPR ratio when only the FPR ratio is NaN (no false positives in
    any group); this function returns NaN in both cases rather than depend on
    the order.
    """
    _, counts = _group_counts(y_true, y_pred, group, sample_weight)
    tpr, fpr = _positive_rates(counts)
    tpr_ratio, fpr_ratio = _ratio(tpr), _ratio(fpr)
    return math.nan if math.isnan(tpr_ratio) or math.isnan(fpr_ratio) else min(tpr_ratio, fpr_ratio)


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
    "average_precision",
    "group_rates",
    "demographic_parity_difference",
    "demographic_parity_ratio",
    "equal_opportunity_difference",
    "equal_opportunity_ratio",
    "equalized_odds_difference",
    "equalized_odds_ratio",
    "fairness_report",
]


# ------------------------------------------------------------------------------------ two-way partial AUC

TWO_WAY_KINDS = ("normalized", "raw", "libauc")


def _pair_count(pos: np.ndarray, neg: np.ndarray) -> float:
    """(1/(|pos| |neg|)) sum over pairs of 1[s_i > s_j] + 1/2 1[s_i = s_j]."""
    neg = np.sort(neg)
    below = np.searchsorted(neg, pos, side="left")
    ties = np.searchsorted(neg, pos, side="right") - below
    return float((below + 0.5 * ties).sum() / (pos.size * neg.size))


def two_way_partial_auc(y: Any, score: Any, max_fpr: float, min_tpr: float, kind: str = "normalized") -> float:
    """Two-way partial AUC: the part of the ROC curve with FPR <= ``max_fpr`` and TPR >= ``min_tpr``.

    The region of Yang et al. (2021, "When all we need is a piece of the pie"), which the two-way
    losses of LibAUC (``tpAUC_KL_Loss``, ``tpAUC_CVaR_loss``) optimize: the hard positives (the
    lowest-scored 1 - min_tpr of them) against the hard negatives (the highest-scored max_fpr).
    ``kind`` (default ``"normalized"``):

    * ``"normalized"``: the pair count over the k_+ = ceil((1 - min_tpr) n_+) lowest-scored positives
      and the k_- = ceil(max_fpr n_-) highest-scored negatives,
      (1/(k_+ k_-)) sum_{i, j} (1[s_i > s_j] + 1/2 1[s_i = s_j]), in [0, 1]; with ``min_tpr = 0`` it is
      ``partial_auc(kind="normalized")``;
    * ``"raw"``: the area of {FPR <= max_fpr, TPR >= min_tpr} under the empirical ROC curve (ties as
      diagonal segments, the curve interpolated at the region's edges), in [0, max_fpr (1 - min_tpr)];
      with ``min_tpr = 0`` it is ``partial_auc(kind="raw")``, and when max_fpr n_- and (1 - min_tpr) n_+
      are integers and no tie straddles an edge, it is the pair count above times k_+ k_- / (n_+ n_-);
    * ``"libauc"``: LibAUC 2.0's ``pauc_roc_score(y, score, max_fpr=..., min_tpr=...)``: the pair count
      with k_+ = round((1 - min_tpr) n_+) and k_- = round(max_fpr n_-) (Python's round, half to even;
      at least 1), and with ``min_tpr = 0`` the McClish one-way value (``partial_auc(kind="mcclish")``).
      LibAUC itself fails (numpy's argpartition) when k_+ = n_+ > 1 or k_- = n_- > 1; this returns the value.

    ``y`` holds 0/1 labels, ``score`` real scores (higher means positive); ``max_fpr`` is in (0, 1],
    ``min_tpr`` in [0, 1).
    """
    beta = _check_rho(max_fpr)
    if isinstance(min_tpr, bool) or not isinstance(min_tpr, (int, float)) or not 0 <= min_tpr < 1:
        raise OptionError(f"min_tpr must be a number in [0, 1), got {min_tpr!r}")
    alpha = float(min_tpr)
    if kind not in TWO_WAY_KINDS:
        raise OptionError(f"kind must be one of {', '.join(TWO_WAY_KINDS)}, got {kind!r}")
    if kind == "raw":
        fpr, tpr = roc_points(y, score)
        stop = np.searchsorted(fpr, beta, side="right")
        f = np.r_[fpr[:stop], beta]
        a = np.r_[tpr[:stop], np.interp(beta, fpr, tpr)] - alpha  # the height above TPR = min_tpr
        width, a0, a1 = np.diff(f), a[:-1], a[1:]
        # On each linear piece (a0 <= a1: the curve rises) the area of max(a, 0): a trapezoid above the
        # line, nothing below it, and the triangle past the crossing for a piece that crosses it.
        crossing = a1 * a1 / (2 * np.where(a1 > a0, a1 - a0, 1.0))
        area = np.where(a0 >= 0, (a0 + a1) / 2, np.where(a1 <= 0, 0.0, crossing))
        return float(np.sum(width * area))
    if kind == "libauc" and alpha == 0:
        return partial_auc(y, score, beta, "mcclish")
    yb, s = _arrays(y, score)
    pos, neg = np.sort(s[yb]), np.sort(s[~yb])[::-1]
    if pos.size == 0 or neg.size == 0:
        raise OptionError(f"partial AUC needs both classes; got {pos.size} positives and {neg.size} negatives")
    if kind == "libauc":  # LibAUC's expressions, rounding included
        k_pos, k_neg = round(pos.size * (1 - alpha)), round(neg.size * beta)
    else:  # tolerance: a product computed in floating point may miss an integer by an ulp
        k_pos, k_neg = math.ceil((1 - alpha) * pos.size - 1e-9), math.ceil(beta * neg.size - 1e-9)
    return _pair_count(pos[: max(1, k_pos)], neg[: max(1, k_neg)])


__all__ += ["TWO_WAY_KINDS", "two_way_partial_auc"]
