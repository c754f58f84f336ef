"""Stochastic trackers of the inner map's value and Jacobian, shared by every method.

Each tracker is one update rule on tensors; none modifies its inputs.  The
Jacobian trackers are Polyak momentum (Algorithm 1), STORM (Theorem 3) and the
Hessian-corrected one (Appendix N), whose correction needs
:func:`hessian_contraction` at a random point of the last step
(:func:`segment_point`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.func import jacrev, jvp

from fullcomp.autodiff import BatchJacobian, LazyJacobian
from fullcomp.serial import encodable


@encodable
@dataclass
class Revision:
    """Names a Jacobian tracker V (``tag``) and, when known, how it came from an earlier one (``since``):
    V = keep V_since + weight J, J a :class:`BatchJacobian` (None: no such term).

    A GLMO that keeps products with V (column generation's pooled atoms' images V a_j) updates them on J's
    few columns instead of recomputing them over every entry.  ``image``, where the tracker knows it, is V y at
    the state's point y in float64 (:meth:`fullcomp.oracles.tracked.TrackedModel.advance`), which the dual GLMO
    then takes instead of a pass over V.
    """

    tag: int
    since: int | None = None
    keep: float = 1.0
    weight: float = 0.0
    jacobian: BatchJacobian | None = None
    image: torch.Tensor | None = None


def polyak(
    previous: torch.Tensor, sample: torch.Tensor | LazyJacobian, weight: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Polyak momentum (1 - w) previous + w sample.

    The Jacobian tracker V_k of HMSFW (weight beta_k) and the Variant I value
    tracker z_k (weight rho_k).  ``out=sample`` overwrites a sample the caller
    owns: at 7 x 800,000 a fresh result cost 8 times the update (page faults).
    A :class:`BatchJacobian` sample needs ``out``, a buffer other than ``previous``
    (work on its columns only, after one scaling pass); any other
    :class:`~fullcomp.autodiff.LazyJacobian` (fc.optim's layer factors) needs ``out``,
    which may be ``previous`` itself.
    Weight 1 (the deterministic and vanilla schedules) returns the sample itself,
    the same bits as the lerp.
    """
    if isinstance(sample, LazyJacobian):
        return sample.blend(previous, weight, out)
    if weight == 1:
        return sample if out is None or out is sample else out.copy_(sample)
    return torch.lerp(previous, sample, weight, out=out)


def taylor(
    previous: torch.Tensor,
    jacobian: torch.Tensor,
    y: torch.Tensor,
    y_previous: torch.Tensor,
    sample: torch.Tensor,
    weight: float,
    total: Callable[[torch.Tensor], torch.Tensor] | None = None,
    work: torch.Tensor | None = None,
) -> torch.Tensor:
    """Variant II value tracker z_k = (1 - rho)(z_{k-1} + V_k (y_k - y_{k-1})) + rho f~(y_k).

    The first-order extrapolation V_k (y_k - y_{k-1}) predicts f(y_k) from the
    previous estimate, replacing the O(G ||y_k - y_{k-1}||) drift of the Polyak
    tracker by a quadratic Taylor remainder.  ``total`` completes the product over
    the ranks when V and y are a rank's share of the entries.  ``work``, a buffer
    of y's shape, holds y_k - y_{k-1}: a fresh one at 10^7 entries page-faults
    its way in (15,600 page faults).
    """
    if weight == 1:  # rho = 1 keeps nothing of the prediction (the lerp gives these bits too)
        return sample
    step = jacobian @ (torch.sub(y, y_previous) if work is None else torch.sub(y, y_previous, out=work))
    predicted = previous + (step if total is None else total(step))
    return torch.lerp(predicted, sample, weight)


def storm(
    previous: torch.Tensor, jacobian: torch.Tensor, jacobian_previous: torch.Tensor, weight: float
) -> torch.Tensor:
    """STORM Jacobian tracker V_k = J~(y_k; xi_k) + (1 - beta)(V_{k-1} - J~(y_{k-1}; xi_k)) (Theorem 3).

    Both Jacobians use the same sample xi_k, so J~(y_k; xi_k) - J~(y_{k-1}; xi_k)
    carries the change of the Jacobian along the step with noise O(||y_k - y_{k-1}||)
    under average smoothness: the Polyak drift L_J D gamma / beta disappears and
    beta can be as small as gamma.
    """
    return jacobian + (1.0 - weight) * (previous - jacobian_previous)


def hessian_corrected(
    previous: torch.Tensor, jacobian: torch.Tensor, correction: torch.Tensor, weight: float
) -> torch.Tensor:
    """Hessian-corrected tracker V_k = (1 - beta) V_{k-1} + beta J~(y_k; xi_k) + (1 - beta) H~_k[d_k] (Appendix N).

    ``correction`` is H~(w_k; xi'_k)[d_k] at a random point w_k of the segment
    [y_{k-1}, y_k], an unbiased estimate of J(y_k) - J(y_{k-1}) (Lemma 18), so it
    moves the stale V_{k-1} to y_k as STORM does, from one extra sample.
    """
    return torch.lerp(previous + correction, jacobian, weight)


def segment_point(
    u: float | np.ndarray, shape: tuple[float, float] = (1.0, 1.0)
) -> tuple[float | np.ndarray, float | np.ndarray]:
    """The position alpha of w_k = y_{k-1} + alpha d_k from a uniform draw u, and its weight 1/p(alpha).

    alpha ~ Beta(a, b) by inversion (Beta(1, 1) is the uniform point).  The
    weight makes E[weight * H(y_{k-1} + alpha d)[d]] = int_0^1 H(y_{k-1} + t d)[d] dt
    = J(y_k) - J(y_{k-1}) for every (a, b), not only for the uniform law; with
    a, b <= 1 the density is bounded below on (0, 1), so the weight is bounded
    and the corrected tracker keeps the moment bound of Lemma 19.  ``u`` may be
    an array of draws.
    """
    a, b = shape
    if a == 1.0 and b == 1.0:
        return (float(u), 1.0) if np.ndim(u) == 0 else (np.asarray(u, dtype=float), np.ones(np.shape(u)))
    from scipy.stats import beta as beta_law

    alpha = beta_law.ppf(u, a, b)
    weight = 1.0 / beta_law.pdf(alpha, a, b)
    return (float(alpha), float(weight)) if np.ndim(alpha) == 0 else (alpha, weight)


def hessian_contraction(
    inner: Callable[[torch.Tensor, Any], torch.Tensor],
    shape: tuple[int, ...],
    w: torch.Tensor,
    d: torch.Tensor,
    batch: Any,
) -> torch.Tensor:
    """H~(w; batch)[d] = d/dt J~(w + t d; batch) at t = 0, an (n, len(w)) matrix.

    Forward-over-reverse: a ``torch.func.jvp`` of the ``jacrev`` Jacobian, so the
    cost is about that of one more Jacobian and no n x d x d Hessian is formed.
    ``w`` and ``d`` are flat; ``inner`` receives points of ``shape``.
    """

    def jacobian(x: torch.Tensor) -> torch.Tensor:
        return jacrev(lambda v: inner(v.reshape(shape), batch))(x)

    _, contraction = jvp(jacobian, (w,), (d,))
    return contraction.reshape(contraction.shape[0], -1)
