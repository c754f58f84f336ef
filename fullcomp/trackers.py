"""Stochastic trackers of the inner map's value and Jacobian, shared by every method.

Each tracker is one update rule on tensors; none modifies its inputs.
"""

from __future__ import annotations

import torch


def polyak(previous: torch.Tensor, sample: torch.Tensor, weight: float) -> torch.Tensor:
    """Polyak momentum (1 - w) previous + w sample.

    The Jacobian tracker V_k of HMSFW (weight beta_k) and the Variant I value
    tracker z_k (weight rho_k).
    """
    return torch.lerp(previous, sample, weight)


def taylor(
    previous: torch.Tensor,
    jacobian: torch.Tensor,
    y: torch.Tensor,
    y_previous: torch.Tensor,
    sample: torch.Tensor,
    weight: float,
) -> torch.Tensor:
    """Variant II value tracker z_k = (1 - rho)(z_{k-1} + V_k (y_k - y_{k-1})) + rho f~(y_k).

    The first-order extrapolation V_k (y_k - y_{k-1}) predicts f(y_k) from the
    previous estimate, replacing the O(G ||y_k - y_{k-1}||) drift of the Polyak
    tracker by a quadratic Taylor remainder.
    """
    predicted = previous + jacobian @ (y - y_previous)
    return torch.lerp(predicted, sample, weight)
