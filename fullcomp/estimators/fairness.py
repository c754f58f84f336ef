"""A fairness constraint of an estimator (``constraint=``, ``bound=``, ``fit(..., sensitive_features=)``).

The constraint bounds the gap between two groups of a sensitive feature in the mean of the model's positive
output h (the predicted probability of a logistic regression, the score clipped to [0, 1] of the hinge
(``(1 + s) / 2``), the prediction of a regression): over all rows ("demographic_parity"), or over the rows of
the positive class ("equal_opportunity").  The fit minimizes the mean loss subject to |mean_a h - mean_b h| <=
bound, a problem of three inner values u = (mean loss, mean_a h, mean_b h) whose constraint the GLMO keeps
(``fc.CompositeProblem(constraints=...)``).
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np
import torch

from fullcomp.errors import OptionError
from fullcomp.model.placeholder import inner_value

CONSTRAINTS = ("demographic_parity", "equal_opportunity")


def positive_output(loss: str, s: Any) -> Any:
    """h(s) for a score s (torch or numpy): the probability, the hinge's clipped score, the prediction."""
    lib = torch if isinstance(s, torch.Tensor) else np
    if loss == "logistic":
        return 1.0 / (1.0 + lib.exp(-s))
    if loss == "hinge":
        return lib.clip((1.0 + s) / 2.0, 0.0, 1.0)
    return s


def sides(constraint: str, sensitive: Any, t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The (2, n) matrix whose rows average h over the two groups (with the rows' weights w; for equal
    opportunity, over their positive rows only), from the sensitive feature's two values."""
    labels = np.asarray(sensitive).reshape(-1)
    if labels.shape != t.shape:
        raise OptionError(
            f"sensitive_features must hold one value per row of X ({t.size}), got shape {np.shape(sensitive)}"
        )
    values = np.unique(labels)
    if values.size != 2:
        raise OptionError(
            f"sensitive_features must take exactly two values (the groups whose gap is bounded), got {values.size}"
        )
    keep = t > 0 if constraint == "equal_opportunity" else np.ones(t.size, dtype=bool)
    rows = np.zeros((2, t.size))
    for g, value in enumerate(values):
        member = (labels == value) & keep
        if not member.any():
            raise OptionError(
                f"sensitive group {value!r} has no {'positive ' if constraint == 'equal_opportunity' else ''}rows: "
                f"its mean output is undefined, so the {constraint} constraint cannot be written"
            )
        rows[g, member] = w[member] / w[member].sum()
    return rows


def check(est: Any) -> None:
    """Refuse what the constraint cannot be fitted with: a robust risk, equal opportunity of a regression."""
    if est.constraint == "equal_opportunity" and est._y_numeric:
        raise OptionError(
            "constraint='equal_opportunity' conditions on the positive class, which a regression has not; use "
            "constraint='demographic_parity'"
        )
    if est.risk != "mean":
        raise OptionError(
            f"constraint={est.constraint!r} is fitted with risk='mean' (the mean loss under the constraint); "
            f"risk={est.risk!r} with a constraint is not supported: pass risk='mean'"
        )


def constrained(est: Any, score: Any, losses: Any, S: np.ndarray, w: np.ndarray) -> tuple:
    """(inner map of u = (mean loss, mean_a h, mean_b h), F, constraints) for ``est``'s fairness constraint."""
    mean = torch.as_tensor(w / w.sum())
    sides_t = torch.as_tensor(S)

    def inner(x: torch.Tensor, batch: Any) -> torch.Tensor:
        s = score(x)
        return torch.cat([(mean @ losses(s)).reshape(1), sides_t @ positive_output(est._loss_name, s)])

    u = inner_value(3)
    return inner, u, [cp.abs(u[1] - u[2]) <= est.bound]


def report(est: Any, X: np.ndarray, t: np.ndarray, sensitive: Any, w: np.ndarray | None = None) -> dict:
    """The constraint at the fitted model on (X, t): the two groups' mean outputs, the gap and its violation."""
    S = sides(est.constraint, sensitive, t, np.ones(t.size) if w is None else w)
    a, b = S @ positive_output(est._loss_name, est._scores(X))
    gap = abs(float(a - b))
    return {
        "constraint": est.constraint,
        "groups": (float(a), float(b)),
        "gap": gap,
        "bound": est.bound,
        "violation": max(gap - est.bound, 0.0),
    }
