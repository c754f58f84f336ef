"""Huber loss and per-group losses of the group-robust matrix-completion experiments.

The paper measures Huber loss (delta = 1) "in the original rating scale after
training-only centering": centering only shifts the ratings, so a residual
``prediction - centred rating`` is already in rating units and needs no rescaling.
A group loss is the mean Huber loss over that group's ratings; the worst-group
loss is their maximum and the average-group loss weights the groups equally
(it is not the mean over all ratings).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fullcomp.datasets import RatingData
from fullcomp.errors import OptionError


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not (np.isfinite(delta) and delta > 0):
        raise OptionError(f"the Huber threshold delta must be a positive finite number, got {delta}")
    return delta


def huber(residual: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Elementwise Huber loss in torch (differentiable): r^2/2 for |r| <= delta, else delta (|r| - delta/2).

    ``delta`` defaults to 1.0, the paper's value.
    """
    delta = _check_delta(delta)
    a = residual.abs()
    # torch.where evaluates both branches; both are finite everywhere, so the gradient is too.
    return torch.where(a <= delta, 0.5 * residual * residual, delta * (a - 0.5 * delta))


def huber_np(residual: np.ndarray, delta: float = 1.0) -> np.ndarray:
    """Elementwise Huber loss in numpy (float64), the same function as :func:`huber`; ``delta`` defaults to 1.0."""
    delta = _check_delta(delta)
    r = np.asarray(residual, dtype=np.float64)
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def group_losses(data: RatingData, split: str, predicted: Any, delta: float = 1.0) -> Any:
    """Mean Huber loss of each group on a split: an (n_groups,) array, NaN for a group with no rating there.

    ``predicted`` holds the model's values on the *centred* scale, either at the split's entries (1-D, in
    the split's order) or as a dense P x Q matrix.  A numpy input gives a float64 numpy result; a torch
    input gives a differentiable torch result on its device and dtype.  ``delta`` defaults to 1.0.
    """
    s = data.split(split)
    if getattr(predicted, "ndim", None) == 2:
        predicted = data.values_at(predicted, split)
    if tuple(predicted.shape) != (len(s),):
        raise OptionError(
            f"predicted values for the {split} split must have shape ({len(s)},) or {data.shape}, "
            f"got {tuple(predicted.shape)}"
        )
    counts = data.group_counts(split)
    if isinstance(predicted, torch.Tensor):
        target = torch.from_numpy(s.ratings).to(device=predicted.device, dtype=predicted.dtype)
        losses = huber(predicted - target, delta)
        index = torch.from_numpy(s.groups).to(predicted.device)
        sums = torch.zeros(data.n_groups, dtype=predicted.dtype, device=predicted.device).index_add(0, index, losses)
        n = torch.from_numpy(counts).to(device=predicted.device, dtype=predicted.dtype)
        return sums / n  # 0/0 gives NaN for an empty group, as in the numpy branch
    losses = huber_np(np.asarray(predicted, dtype=np.float64) - s.ratings, delta)
    sums = np.bincount(s.groups, weights=losses, minlength=data.n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


def worst_group(losses: Any) -> float:
    """Largest group loss, ignoring groups without ratings (NaN)."""
    values = np.asarray(losses.detach().cpu() if isinstance(losses, torch.Tensor) else losses, dtype=np.float64)
    if np.isnan(values).all():
        raise OptionError("no group has a loss: every group is empty on this split")
    return float(np.nanmax(values))


def average_group(losses: Any) -> float:
    """Group losses averaged with equal weights (not the mean over all ratings), ignoring empty groups."""
    values = np.asarray(losses.detach().cpu() if isinstance(losses, torch.Tensor) else losses, dtype=np.float64)
    if np.isnan(values).all():
        raise OptionError("no group has a loss: every group is empty on this split")
    return float(np.nanmean(values))
