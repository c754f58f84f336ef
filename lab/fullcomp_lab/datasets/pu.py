"""Positive-unlabeled data and the unbiased PU risk of the SMAG paper (problem (7), Section 5.1).

Labels: the first ``negatives`` classes are negative (five for MNIST, Fashion-MNIST,
CIFAR-10 and digits, four for FER2013), the others positive.  The training set
is cut in two halves at random (seed ``split_seed``): the positives of the first
half are the labeled set S_+, the whole second half, labels hidden, is the
unlabeled set S_u (a sample of the marginal).  A bias feature of ones is appended.

The risk, with the hinge loss l(t) = (1 - t)_+ of the linear score t = w^T x:

    R(w) = pi_p/n_+ sum_{S_+} [l(w^T x) - l(-w^T x)] + 1/n_u sum_{S_u} l(-w^T x)  (+ ridge/2 ||w||^2)
         = phi(w) - psi(w),
    phi(w) = pi_p mean_{S_+} l(w^T x) + mean_{S_u} l(-w^T x) + ridge/2 ||w||^2,   psi(w) = pi_p mean_{S_+} l(-w^T x),

both convex.  On a finite sample the hinge PU risk is unbounded below (it falls
linearly along directions that score S_+ above S_u), so ``ridge`` > 0 keeps a
minimizer; the SSDC reference code adds the same lambda w.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fullcomp import DMaxProblem
from fullcomp.errors import OptionError
from fullcomp_lab.datasets.images import ImageData

#: Number of negative classes (the first ones) per data set name; every other set uses five.
NEGATIVE_CLASSES = {"FER2013": 4}
PRIOR = 0.5
RIDGE = 0.01
BATCH = 64


@dataclass(frozen=True)
class PUData:
    """S_+ (labeled positives) and S_u (unlabeled) for training, with +-1 labels of the full train and test sets.

    Feature rows carry a trailing 1 (the bias).  ``train_X``/``train_y`` is the whole
    training set (S_u's true labels included) for accuracy, never for training.
    """

    name: str
    positive: torch.Tensor
    unlabeled: torch.Tensor
    train_X: torch.Tensor
    train_y: torch.Tensor
    test_X: torch.Tensor
    test_y: torch.Tensor
    negatives: int

    @property
    def n_features(self) -> int:
        return int(self.positive.shape[1])

    def __repr__(self) -> str:
        return (
            f"PUData({self.name!r}: {len(self.positive)} labeled positives, {len(self.unlabeled)} unlabeled, "
            f"{len(self.test_y)} test, {self.n_features} features incl. bias)"
        )


def binary_labels(labels: np.ndarray, negatives: int) -> np.ndarray:
    """-1 for the first ``negatives`` classes (labels below ``negatives``), +1 for the others."""
    return np.where(np.asarray(labels) >= negatives, 1.0, -1.0)


def pu_split(data: ImageData, negatives: int | None = None, split_seed: int = 0) -> PUData:
    """Positive-unlabeled training sets from a labeled :class:`ImageData` (see the module docstring).

    ``negatives`` defaults to :data:`NEGATIVE_CLASSES` for the data set's name (else 5);
    ``split_seed`` fixes the halving, so every trial of an experiment optimizes the same risk.
    """
    if negatives is None:
        negatives = NEGATIVE_CLASSES.get(data.name, 5)
    y_tr, y_te = binary_labels(data.y_train, negatives), binary_labels(data.y_test, negatives)
    if not ((y_tr > 0).any() and (y_tr < 0).any()):
        raise OptionError(
            f"negatives={negatives} leaves {data.name}'s training set with one class only; choose a number of "
            "negative classes below the number of classes"
        )
    ones = np.ones((len(data.X_train), 1), dtype=np.float32)
    X_tr = np.hstack([data.X_train.astype(np.float32), ones])
    X_te = np.hstack([data.X_test.astype(np.float32), np.ones((len(data.X_test), 1), dtype=np.float32)])
    order = np.random.default_rng(split_seed).permutation(len(X_tr))
    first, second = order[: len(order) // 2], order[len(order) // 2 :]
    first = first[y_tr[first] > 0]
    if first.size == 0 or second.size == 0:
        raise OptionError(f"{data.name}'s training set is too small for a positive half and an unlabeled half")
    t = torch.from_numpy
    return PUData(
        data.name,
        t(X_tr[np.sort(first)]),
        t(X_tr[np.sort(second)]),
        t(X_tr),
        t(y_tr.astype(np.float32)),
        t(X_te),
        t(y_te.astype(np.float32)),
        negatives,
    )


def hinge(margin: torch.Tensor) -> torch.Tensor:
    """(1 - margin)_+ elementwise."""
    return torch.clamp(1.0 - margin, min=0.0)


def pu_problem(data: PUData, prior: float = PRIOR, batch: int = BATCH, ridge: float = RIDGE) -> DMaxProblem:
    """The PU risk (7) as the DWC problem phi - psi (module docstring), for SMAG and the DC baselines.

    Each sampled batch is ``(B positives, B unlabeled)`` drawn with replacement
    (``batch`` = B, default 64 as in the paper); ``full_batch`` is the whole of
    S_+ and S_u, so ``phi(w, full_batch) - psi(w, full_batch)`` is the exact
    training objective.  Defaults: ``prior`` pi_p = 0.5, ``ridge`` = 0.01.
    """
    if not 0 < prior < 1:
        raise OptionError(f"prior must be in (0, 1) (pi_p, the positive class probability), got {prior!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise OptionError(f"batch must be a positive int (points of each of S_+ and S_u per draw), got {batch!r}")
    if not ridge >= 0:
        raise OptionError("ridge must be >= 0 (lambda of lambda/2 ||w||^2; 0 leaves the risk unbounded below)")
    positive, unlabeled = data.positive, data.unlabeled

    def phi(w: torch.Tensor, batch_: tuple) -> torch.Tensor:
        xp, xu = batch_
        return prior * hinge(xp @ w).mean() + hinge(-(xu @ w)).mean() + ridge / 2 * (w @ w)

    def psi(w: torch.Tensor, batch_: tuple) -> torch.Tensor:
        xp, _ = batch_
        return prior * hinge(-(xp @ w)).mean()

    def sampler(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        ip = torch.randint(len(positive), (batch,), generator=generator)
        iu = torch.randint(len(unlabeled), (batch,), generator=generator)
        return positive.index_select(0, ip), unlabeled.index_select(0, iu)

    w0 = torch.zeros(data.n_features)
    return DMaxProblem(phi, psi, x0=w0, sampler=sampler, full_batch=(positive, unlabeled))


def pu_risk(data: PUData, w: torch.Tensor | np.ndarray, prior: float = PRIOR, ridge: float = 0.0) -> float:
    """R(w) of problem (7) on the whole training S_+ and S_u, plus ridge/2 ||w||^2 (default 0: the plain risk)."""
    w = torch.as_tensor(np.asarray(w, dtype=np.float32) if not isinstance(w, torch.Tensor) else w).reshape(-1)
    w = w.to(data.positive.dtype)
    with torch.no_grad():
        sp, su = data.positive @ w, data.unlabeled @ w
        risk = prior * (hinge(sp) - hinge(-sp)).mean() + hinge(-su).mean() + ridge / 2 * (w @ w)
    return float(risk)


def accuracy(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of sign(w^T x) equal to the +-1 label (a zero score counts as wrong)."""
    with torch.no_grad():
        return float((torch.sign(X @ w.reshape(-1).to(X.dtype)) == y).float().mean())


__all__ = ["PUData", "pu_split", "pu_problem", "pu_risk", "accuracy", "binary_labels", "hinge", "NEGATIVE_CLASSES"]
