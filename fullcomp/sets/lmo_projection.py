"""The Euclidean projection of a set known by its LMO alone: pairwise Frank-Wolfe on 0.5 ||x - p||^2.

A set that defines no ``project`` of its own still projects (PSG, prox-linear and the min-max methods need it):
:meth:`fullcomp.Set.project` then minimizes f(x) = 0.5 ||x - p||^2 over the set with the LMO as its only
access, by Frank-Wolfe with pairwise steps (Lacoste-Julien and Jaggi 2015) on an
:class:`~fullcomp.sets.atoms.AtomicForm` and the exact line search of a quadratic.  Pairwise steps move weight
off the worst atom of the active set, so on a polytope the iterate reaches the optimal face and converges
linearly instead of zig-zagging towards it.

Stopping rule.  The Frank-Wolfe gap G(x) = <x - p, x - s>, s = lmo(x - p), bounds f(x) - f(P(p)) from above,
and f is 1-strongly convex, so 0.5 ||x - P(p)||^2 <= f(x) - f(P(p)) <= G(x).  The iteration stops when
G(x) <= 0.5 (tol D)^2, D the set's diameter, which guarantees ||x - P(p)|| <= tol D (and squared distance
||x - p||^2 within (tol D)^2 of the least).  With ``Set.projection_tol = 1e-6`` that is what
:func:`fullcomp.testing.check_set`'s projection checks ask at their default tol=1e-6 for a diameter up to about
1000.  x is a convex combination of LMO points, so it lies in the set (up to rounding) whenever it stops.
After ``Set.projection_iters`` steps, or when a step no longer moves x (rounding), it stops anyway and warns
with a :class:`~fullcomp.errors.ProjectionWarning` giving the gap reached.

Cost.  A step calls the LMO once and costs O(m n) for m active atoms in R^n.  On the l1 ball of n entries
(measured, 50 <= n <= 1000) a point outside took up to 4 n steps (fewer the farther out), a point inside about
20 n, since its projection, itself, mixes all n vertices; an exact ``project`` is far cheaper wherever there is one.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fullcomp.errors import ProjectionWarning
from fullcomp.sets.atoms import AtomicForm

if TYPE_CHECKING:
    from fullcomp.sets.base import Set


def _flat_lmo(domain: Set, g: np.ndarray) -> np.ndarray:
    """lmo(g) for a flat float64 g, flat and float64 (a set that takes tensors may answer with one)."""
    s = domain.lmo_unchecked(g.reshape(domain.shape))
    if isinstance(s, torch.Tensor):
        s = s.detach().cpu().numpy()
    return np.asarray(s, dtype=np.float64).reshape(-1)


def project_by_lmo(domain: Set, point: Any, tol: float, max_iter: int) -> np.ndarray:
    """The Euclidean projection of ``point`` onto ``domain`` within ``tol`` times its diameter, computed from its
    LMO alone (the module's docstring gives the method and the guarantee); float64 numpy of the set's shape."""
    if isinstance(point, torch.Tensor):  # a set that takes tensors gets them as they are from the adapter
        point = point.detach().cpu().numpy()
    p = np.asarray(point, dtype=np.float64).reshape(-1)
    target = 0.5 * (tol * float(domain.diameter)) ** 2
    # The LMO point that maximizes <p, x>: p itself when p is a vertex that exposes itself (of an l1 ball, a box).
    active = AtomicForm.vertex(_flat_lmo(domain, -p))
    x = active.point()
    for k in range(max_iter + 1):
        g = x - p  # the gradient of f at x
        v = _flat_lmo(domain, g)
        gap = float(g @ (x - v))
        if gap <= target:
            return x.reshape(domain.shape)
        if k == max_iter:
            break
        a = active.extremes(g)[0]  # the away atom: <g, a> largest over the active set
        w_a = float(active.weights()[a])
        d = v - active.rows()[a]
        # -<g, d> = gap + away gap >= gap > 0, so d is a descent direction; the exact line search of the
        # quadratic along d, capped by the weight that a can give.  Only rounding can make d flat.
        decrease, length = float(-(g @ d)), float(d @ d)
        if decrease <= 0 or length == 0:
            break
        gamma = min(decrease / length, w_a)
        # A step that leaves a rounding's worth of a's weight drops a: the residue would come back as the away
        # atom, whose step cannot move x.
        drop = gamma >= w_a * (1 - 1e-9)
        moved = active.shift(a, v, w_a if drop else gamma)
        active = moved.drop(a) if drop else moved.pruned()
        x_next = active.point()
        if not drop and np.array_equal(x_next, x):  # rounding: no step moves x any more
            break
        x = x_next
    name = type(domain).__name__
    warnings.warn(
        f"{name}.project: Frank-Wolfe on its LMO stopped after {k} steps with the gap {gap:.3g} above "
        f"{target:.3g}, so the point returned may be up to {math.sqrt(2 * gap):.3g} from the exact projection; "
        f"define project(point) on {name} for an exact projection, or raise {name}.projection_iters "
        f"(now {max_iter})",
        ProjectionWarning,
        stacklevel=4,  # the caller of project, past Set.project and the adapter
    )
    return x.reshape(domain.shape)


__all__ = ["project_by_lmo"]
