"""The stationarity measure of SMAG: ||grad F_gamma(x)|| from accurately solved proximal subproblems.

By eq. (5), grad F_gamma(x) = (prox_{gamma Psi}(x) - prox_{gamma Phi}(x)) / gamma.
Each proximal point minimizes f(x') = Phi(x') + ||x' - x||^2 / (2 gamma), a
strongly convex, possibly non-smooth function when gamma < 1/delta.  It is
found by a cutting-plane method that keeps the quadratic exact: the model
max_i [Phi(x_i) + <g_i, x' - x_i> - (delta/2)||x' - x_i||^2] + ||x' - x||^2/(2 gamma)
lies below f (valid for delta-weakly convex Phi), its minimum is a certified
lower bound on min f, and the best evaluated point an upper bound, so the
distance to the true proximal point is bounded by sqrt(2 (upper - lower) / sigma)
with sigma = 1/gamma - delta.  Phi(x') = max_y phi(x', y) is evaluated by
projected gradient ascent with backtracking, and its subgradient is
d_x phi(x', y*(x')) (Danskin).

Meant for checking convergence on small problems and reporting it; it costs
many full-batch evaluations.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fullcomp.errors import ModelError, OptionError, SolverError
from fullcomp.model.dmax import DMaxProblem, Params, check_scalar, to_run
from fullcomp.sets.base import Set

DTYPE = torch.float64


class Stationarity(float):
    """||grad F_gamma(x)|| as a float, with what produced it.

    Attributes
    ----------
    prox_phi, prox_psi
        The proximal points of Phi and Psi at x (x0's container; prox_psi = x without psi).
    error_bound
        Certified bound on |returned value - true value| (valid when ``weak_convexity``
        bounds the true modulus and the inner maxima are solved, see ``inner_converged``).
    gap_phi, gap_psi
        Upper minus lower bound on the two proximal objectives.
    iterations
        Cutting-plane iterations of the two subproblems.
    inner_converged
        Whether every inner maximization met its tolerance.
    """

    prox_phi: Any
    prox_psi: Any
    error_bound: float
    gap_phi: float
    gap_psi: float
    iterations: tuple[int, int]
    inner_converged: bool

    def __new__(cls, value: float, **details: Any) -> Stationarity:
        obj = super().__new__(cls, value)
        obj.__dict__.update(details)
        return obj

    def __repr__(self) -> str:
        return f"Stationarity({float(self):.6g}, error_bound={self.error_bound:.2g})"


def stationarity(
    problem: DMaxProblem,
    x: Any,
    gamma: float,
    batch: Any = None,
    *,
    psi_batch: Any = None,
    weak_convexity: float = 0.0,
    tol: float = 1e-12,
    max_iter: int = 400,
) -> Stationarity:
    """Estimate ||grad F_gamma(x)|| (eq. (5)) by solving both proximal subproblems accurately.

    Parameters
    ----------
    problem
        The problem (a ``fc.DMaxProblem``).
    x
        The point, in x0's container (``res.x_phi``) or as a flat vector.
    gamma
        The Moreau parameter (the one SMAG ran with, or another below 1/delta).
    batch
        The data on which phi (and psi) are exact, default ``problem.full_batch``;
        None for a deterministic problem.
    psi_batch
        Likewise for psi when it has its own sampler; default ``problem.psi_full_batch``, else ``batch``.
    weak_convexity
        delta, an upper bound on the weak-convexity moduli of Phi and Psi
        (0 for convex components).  It must be below 1/gamma.
    tol
        Stop a subproblem when upper minus lower bound <= tol * max(1, |objective|); values below
        about 1e-13 sit under the rounding floor of float64 and only use up ``max_iter``.
    max_iter
        Cutting-plane iterations per subproblem.

    Returns
    -------
    Stationarity
        A float with the proximal points and a certified error bound.
    """
    if not isinstance(problem, DMaxProblem):
        raise ModelError(f"stationarity needs a fc.DMaxProblem, got {type(problem).__name__}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not (math.isfinite(gamma) and gamma > 0):
        raise OptionError(f"gamma must be a positive number, got {gamma!r}")
    delta = float(weak_convexity)
    if not (0.0 <= delta < 1.0 / gamma):
        raise OptionError(
            f"weak_convexity must be in [0, 1/gamma) = [0, {1 / gamma:g}), got {weak_convexity!r}; "
            "the proximal subproblem is not strongly convex otherwise: lower gamma"
        )
    if not (tol > 0) or not isinstance(max_iter, int) or max_iter < 1:
        raise OptionError(f"tol must be positive and max_iter a positive int, got tol={tol!r}, max_iter={max_iter!r}")
    batch, psi_batch = (to_run(b, DTYPE, "cpu") for b in problem.exact_batches(batch, psi_batch))
    center = problem.x.coerce(x, DTYPE, "cpu", "x")
    sigma = 1.0 / gamma - delta

    fine = [True]
    phi = MaxOracle(problem.phi_value, problem.x, problem.y, problem.Y, batch, "phi", fine)
    p_phi, gap_phi, it_phi = proximal_point(phi, center, gamma, delta, tol, max_iter)
    if problem.psi is None:
        p_psi, gap_psi, it_psi = center, 0.0, 0
    else:
        psi = MaxOracle(problem.psi_value, problem.x, problem.z, problem.Z, psi_batch, "psi", fine)
        p_psi, gap_psi, it_psi = proximal_point(psi, center, gamma, delta, tol, max_iter)
    value = float(torch.linalg.vector_norm(p_psi - p_phi)) / gamma
    error = (math.sqrt(2 * gap_phi / sigma) + math.sqrt(2 * gap_psi / sigma)) / gamma
    return Stationarity(
        value,
        prox_phi=problem.x.build(p_phi),
        prox_psi=problem.x.build(p_psi),
        error_bound=error,
        gap_phi=gap_phi,
        gap_psi=gap_psi,
        iterations=(it_phi, it_psi),
        inner_converged=fine[0],
    )


class MaxOracle:
    """Phi(x') = max_{y in Y} phi(x', y; batch) and a subgradient, at flat float64 points.

    The maximizer is warm-started from the previous call, since consecutive
    cutting-plane points are close.
    """

    def __init__(
        self,
        fn: Callable,
        xp: Params,
        dual: Params | None,
        domain: Set | None,
        batch: Any,
        name: str,
        fine: list[bool],
    ):
        self.name, self.domain, self.fine = name, domain, fine

        def value(x: torch.Tensor, d: torch.Tensor | None) -> torch.Tensor:
            out = fn(xp.view(x), None if dual is None else dual.view(d), batch)
            return check_scalar(out, name, "while computing stationarity", SolverError)

        self.value = value
        self.grad_x = grad_and_value(value, argnum=0)
        self.grad_d = grad_and_value(value, argnum=1)
        self.d = None
        if dual is not None:
            self.d = self.project(dual.flat(DTYPE, "cpu"))

    def project(self, d: torch.Tensor) -> torch.Tensor:
        return d if self.domain is None else self.domain.project(d.view(self.domain.shape)).reshape(-1)

    def __call__(self, x: torch.Tensor) -> tuple[float, torch.Tensor]:
        if self.d is not None:
            self.d = self.maximize(x, self.d)
        g, v = self.grad_x(x, self.d)
        return float(v), g.detach()

    def maximize(self, x: torch.Tensor, d: torch.Tensor, tol: float = 1e-11, max_iter: int = 20_000) -> torch.Tensor:
        """Projected gradient ascent on the strongly concave d -> phi(x, d), the step from the local curvature.

        The step is accepted when the curvature along it, -<g' - g, d' - d>/||d' - d||^2, is at most
        1/step: a test on gradients, which unlike one on values still decides near the optimum.
        """
        step = 1.0
        g, _ = self.grad_d(x, d)
        for _ in range(max_iter):
            while True:
                trial = self.project(d + step * g)
                diff = trial - d
                g_trial, _ = self.grad_d(x, trial)
                dd, curvature = float(diff @ diff), -float((g_trial - g) @ diff)
                if dd == 0.0 or curvature * step <= dd * (1 + 1e-9):
                    break
                step = min(step / 2, dd / curvature)
                if step < 1e-30:
                    raise SolverError(f"the inner maximization of {self.name} found no ascent step; is it concave?")
            mapping = math.sqrt(dd) / step
            d, g = trial, g_trial
            if not bool(torch.isfinite(d).all()) or not bool(torch.isfinite(g).all()):
                raise SolverError(
                    f"the inner maximization of {self.name} diverged; {self.name} must be strongly concave in its "
                    "second argument (add a ridge term or a bounded set)"
                )
            if mapping <= tol * (1 + float(torch.linalg.vector_norm(d))):
                return d
            # The inverse of the curvature just seen is the exact step for a quadratic.
            step = 2 * step if curvature <= 0 else min(2 * step, dd / curvature)
        self.fine[0] = False
        warnings.warn(
            f"the inner maximization of {self.name} stopped after {max_iter} steps before its tolerance; "
            "the stationarity estimate may be inaccurate",
            RuntimeWarning,
            stacklevel=2,
        )
        return d


def grad_and_value(fn: Callable[..., torch.Tensor], argnum: int) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """``fn``'s gradient in argument ``argnum`` and its value (a 0-d tensor), by one plain backward pass.

    What ``torch.func.grad_and_value`` gives, without its first call's import of ``torch._dynamo`` (1 to 2 s,
    more than the measure of a small problem takes) and its per-call wrapping; the other arguments are
    constants.  A value that does not depend on the argument has gradient zero.
    """

    def both(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        args = list(args)
        leaf = args[argnum] = args[argnum].detach().requires_grad_(True)
        with torch.enable_grad():
            value = fn(*args)
        grad = torch.autograd.grad(value, leaf, allow_unused=True)[0] if value.requires_grad else None
        return (torch.zeros_like(leaf) if grad is None else grad), value.detach()

    return both


def proximal_point(
    oracle: Callable[[torch.Tensor], tuple[float, torch.Tensor]],
    center: torch.Tensor,
    gamma: float,
    delta: float,
    tol: float,
    max_iter: int,
    max_cuts: int = 200,
) -> tuple[torch.Tensor, float, int]:
    """argmin_x' Phi(x') + ||x' - center||^2/(2 gamma) by cutting planes; returns (point, certified gap, iterations).

    In the displacement u = x' - center the cut taken at x_i = center + e_i is
    sigma/2 ||u||^2 + <b_i, u> + c_i with b_i = g_i + delta e_i and
    c_i = Phi_i - <g_i, e_i> - delta/2 ||e_i||^2; the model's minimum is the
    dual max_{lam in simplex} <c, lam> - ||B^T lam||^2/(2 sigma), attained at
    u = -B^T lam / sigma.  Any lam in the simplex gives a valid lower bound.
    """
    sigma = 1.0 / gamma - delta
    x0 = center.numpy()
    B, c = np.empty((0, x0.size)), np.empty(0)
    best, upper, lower = x0.copy(), math.inf, -math.inf
    u = np.zeros_like(x0)
    lam = None
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        value, g = oracle(torch.from_numpy(x0 + u))
        g = g.numpy()
        f = value + float(u @ u) / (2 * gamma)
        if f < upper:
            upper, best = f, x0 + u
        B = np.vstack([B, g + delta * u])
        c = np.append(c, value - float(g @ u) - delta / 2 * float(u @ u))
        Q = B @ B.T / sigma
        lam = simplex_qp(Q, c, None if lam is None else np.append(lam, 0.0))
        lower = max(lower, float(c @ lam) - float(lam @ Q @ lam) / 2)
        if upper - lower <= tol * max(1.0, abs(upper)):
            break
        u = -(B.T @ lam) / sigma
        if len(c) > max_cuts:
            # Keep the active cuts and their aggregate (itself a valid cut), so the model's minimum is unchanged.
            active = lam > 1e-12
            B = np.vstack([B[active], lam @ B])
            c = np.append(c[active], lam @ c)
            lam = np.append(np.zeros(int(active.sum())), 1.0)
    return torch.from_numpy(best), max(upper - lower, 0.0), iterations


def simplex_qp(Q: np.ndarray, c: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """argmax over the simplex of <c, lam> - lam^T Q lam / 2 (Q positive semidefinite), by a primal active set.

    A tiny ridge makes every equality-constrained subproblem uniquely solvable;
    it moves the optimal value by at most its size, and any lam in the simplex
    still gives a valid lower bound, so the certificate is unaffected.
    """
    m = len(c)
    H = Q + 1e-12 * max(1.0, float(np.max(np.diag(Q)))) * np.eye(m)
    if start is None or start.shape != (m,) or not np.all(start >= 0) or start.sum() <= 0:
        start = np.zeros(m)
        start[int(np.argmax(c - np.diag(H) / 2))] = 1.0
    lam = start / start.sum()
    free = lam > 0
    scale = 1e-12 * max(1.0, float(np.abs(c).max()), float(np.max(np.diag(H))))
    for _ in range(20 * m + 50):
        F = np.flatnonzero(free)
        k = len(F)
        kkt = np.zeros((k + 1, k + 1))
        kkt[:k, :k], kkt[:k, k], kkt[k, :k] = H[np.ix_(F, F)], 1.0, 1.0
        rhs = np.append(c[F], 1.0)
        try:
            sol = np.linalg.solve(kkt, rhs)
        except np.linalg.LinAlgError:
            sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
        target, nu = sol[:k], sol[k]
        if np.all(target >= 0):
            lam = np.zeros(m)
            lam[F] = target
            # Optimal when no cut held at zero would raise the objective: c_i - (H lam)_i <= nu.
            slack = c - H @ lam - nu
            slack[F] = -np.inf
            enter = int(np.argmax(slack))
            if slack[enter] <= scale:
                break
            free[enter] = True
        else:
            # Move toward the subproblem's optimum until a weight reaches zero, and drop that cut.
            step = target - lam[F]
            shrinking = step < 0
            ratios = lam[F][shrinking] / -step[shrinking]
            alpha = min(1.0, float(ratios.min()))
            lam[F] = lam[F] + alpha * step
            blocking = F[shrinking][ratios <= alpha + 1e-15]
            lam[blocking] = 0.0
            free = lam > 0
    lam = np.clip(lam, 0, None)
    return lam / lam.sum()
