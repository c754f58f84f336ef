"""OCE: quasi-Newton steps on a named risk of per-sample losses, over growing samples of the rows.

CVaR, the chi-square and KL balls and the entropic risk are (generalized) optimized certainty equivalents:
F(u) = min over eta (and a multiplier lam >= 0 for the balls) of lam * r + eta + mean_i phi(u_i - eta, lam),
an expectation over rows (:func:`oce_objective` writes it; :func:`oce_dual` finds its minimizer).  With
u_i = l_i(x) the losses of ``fc.PerSample`` rows, F(l(x)) on any set of rows has its value and subgradient
J^T q from the risk's closed-form weights q (no solver), so this method takes L-BFGS steps on x over a random
sample of the rows, the sample growing by ``growth`` each time its objective stops decreasing, until it
holds every row: the first steps cost a sample's pass whatever n is, the last ones an exact pass.

Its certificate, computed at each evaluation outside optimizer time, is the exact objective F(l(x)) over
every row and the Frank-Wolfe gap max_{s in X} <J(x)^T q(x), x - s> of the exact objective; for per-sample
losses convex in x (F is convex and nondecreasing, so F o l is convex) the gap bounds F(l(x)) - min_X F o l.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from scipy.optimize import brentq, minimize, minimize_scalar, nnls
from scipy.special import expit, logsumexp

from fullcomp.algorithms.method import Method, Plan, Readout, register, solve
from fullcomp.errors import ModelError, OracleError
from fullcomp.model.calculus import capped_weights, chi2_weights, kl_weights, named_risk, softmax_weights
from fullcomp.model.composite import CompositeProblem
from fullcomp.run import Result, RunOptions
from fullcomp.serial import encodable
from fullcomp.validation import NONE, Interval, Param, positive

#: The named risks that are optimized certainty equivalents, with the parameter that sizes them.
OCE_RISKS = {"cvar": "alpha", "chi2_dro": "kappa", "kl_dro": "rho", "entropic_risk": "lam"}

PARAMS = (
    Param("memory", (positive(int),), 10, "the number of (step, gradient change) pairs L-BFGS keeps"),
    Param(
        "first_rows",
        (positive(int), NONE),
        65536,
        "rows in the first sample (at most n); None: every row from the start (deterministic L-BFGS)",
    ),
    Param("growth", (Interval(float, 1, None, "neither"),), 4.0, "the factor by which a sample grows"),
    Param(
        "stage_tol",
        (positive(),),
        1e-6,
        "a sample grows once a step decreases its objective by less than this fraction of it",
    ),
    Param("stage_steps", (positive(int),), 10, "the most steps taken on one sample before it grows"),
    Param(
        "chunk",
        (positive(int),),
        65536,
        "rows per chunk of a pass (a pass keeps its chunks' autograd graphs until its backward pass)",
    ),
)


class Risk:
    """A named OCE risk's value and weights in closed form on any number of rows; for CVaR with ``mu``, its
    softplus smoothing eta + mean(mu softplus((u - eta) / mu)) / alpha minimized over eta, which exceeds
    CVaR by at most mu log(2) / alpha and has no kinks (the oce method starts CVaR from it)."""

    def __init__(self, name: str, params: dict, mu: float | None = None):
        self.name, self.params, self.mu = name, dict(params), mu

    def evaluate(self, u: np.ndarray) -> tuple[float, np.ndarray]:
        """(F(u), its weights q): the attained sup form q.u, the entropic risk's log-mean-exp, or the
        smoothed CVaR's value at its eta."""
        p = self.params
        if self.name == "cvar" and self.mu is not None:
            mu, alpha = self.mu, p["alpha"]
            # eta solves mean(sigmoid((u - eta) / mu)) = alpha, whose left side decreases in eta.
            eta = brentq(lambda e: float(np.mean(expit((u - e) / mu))) - alpha, u.min() - 50 * mu, u.max() + 50 * mu)
            q = expit((u - eta) / mu) / (alpha * u.size)
            return float(eta + mu * np.mean(np.logaddexp(0.0, (u - eta) / mu)) / alpha), q
        if self.name == "entropic_risk":
            lam = p["lam"]
            return float(lam * (logsumexp(u / lam) - math.log(u.size))), softmax_weights(u, lam)
        if self.name == "cvar":
            q = capped_weights(u, max(1.0, p["alpha"] * u.size))
        elif self.name == "chi2_dro":
            q = chi2_weights(u, p["kappa"])
        else:
            q = kl_weights(u, p["rho"])
        return float(q @ u), q


def oce_risk(problem: Any) -> Risk:
    """The problem's risk as a :class:`Risk`, or a ModelError saying what the oce method needs."""
    if not isinstance(problem, CompositeProblem) or getattr(problem, "per_sample", None) is None:
        raise ModelError(
            "oce needs a fc.CompositeProblem whose inner map is fc.PerSample(loss, data) (one loss per row); "
            "declare inner=fc.PerSample(loss, data), or use another method (fc.methods(problem))"
        )
    named = named_risk(problem.outer.expr)
    if named is None or named[0] not in OCE_RISKS or problem.outer.depends_on_x:
        raise ModelError(
            "oce needs F to be one of fc.cvar(u, alpha), fc.chi2_dro(u, kappa), fc.kl_dro(u, rho) or "
            "fc.entropic_risk(u, lam) of the placeholder u alone; for any other F use another method "
            "(fc.methods(problem))"
        )
    return Risk(*named)


def oce_objective(name: str, params: dict, u: np.ndarray, eta: float, lam: float | None = None) -> float:
    """lam * r + eta + mean(phi(u - eta, lam)): the risk's OCE form at (eta, lam), which F(u) minimizes.

    cvar: eta + mean((u - eta)_+) / alpha; entropic_risk (lam its temperature): eta + lam mean(exp((u -
    eta) / lam) - 1); kl_dro: lam rho + the entropic form at lam; chi2_dro: lam kappa + eta + (lam / 2)
    mean((1 + (u - eta) / lam)_+^2 - 1), the dual of max q.u over the simplex with (n/2) ||q - 1/n||^2 <=
    kappa (lam > 0).
    """
    t = np.asarray(u, dtype=np.float64) - eta
    if name == "cvar":
        return float(eta + np.mean(np.maximum(t, 0.0)) / params["alpha"])
    if name == "entropic_risk":
        lam = params["lam"]
    extra = 0.0 if name == "entropic_risk" else lam * params["rho" if name == "kl_dro" else "kappa"]
    if name == "chi2_dro":
        return float(extra + eta + 0.5 * lam * np.mean(np.maximum(1.0 + t / lam, 0.0) ** 2 - 1.0))
    return float(extra + eta + lam * np.mean(np.expm1(t / lam)))


def oce_dual(name: str, params: dict, u: np.ndarray) -> dict:
    """The minimizing ``eta`` (and ``lam``) of :func:`oce_objective` at the losses u, in closed form for
    cvar (the (1 - alpha)-quantile) and the entropic risk, by a 1-D (KL) or 2-D (chi-square) convex search
    for the balls."""
    u = np.asarray(u, dtype=np.float64)
    if name == "cvar":
        return {"eta": float(np.quantile(u, 1.0 - params["alpha"], method="inverted_cdf"))}
    if name == "entropic_risk":
        lam = params["lam"]
        return {"eta": float(lam * (logsumexp(u / lam) - math.log(u.size)))}
    fitted = dual_from_weights(name, params, u)
    if fitted is not None:
        return fitted
    spread = max(float(u.max() - u.min()), 1e-12)
    if name == "kl_dro":

        def kl(s: float) -> float:
            lam = spread * math.exp(s)
            return lam * params["rho"] + lam * (logsumexp(u / lam) - math.log(u.size))

        s = minimize_scalar(kl, bounds=(-30.0, 30.0), method="bounded", options={"xatol": 1e-12}).x
        lam = spread * math.exp(s)
        return {"eta": float(lam * (logsumexp(u / lam) - math.log(u.size))), "lam": lam}

    def chi2(z: np.ndarray) -> float:
        return oce_objective(name, params, u, z[0], spread * math.exp(z[1]))

    z = minimize(chi2, np.array([float(u.mean()), 0.0]), method="Nelder-Mead", options={"xatol": 1e-12, "fatol": 1e-15})
    return {"eta": float(z.x[0]), "lam": spread * math.exp(float(z.x[1]))}


def dual_from_weights(name: str, params: dict, u: np.ndarray) -> dict | None:
    """The balls' (eta, lam) read off their closed-form weights q, or None where they do not determine them.

    At the optimum, p = n q is (1 + (u - eta) / lam)_+ (chi-square) or exp((u - eta) / lam) (KL), so u is
    affine in n q - 1 (or log(n q)) on the rows q weighs: a least-squares line gives eta and lam, kept when the
    OCE form there equals q.u to 1e-9 (uniform or top-only weights leave the line undetermined).
    """
    q = chi2_weights(u, params["kappa"]) if name == "chi2_dro" else kl_weights(u, params["rho"])
    used = q > 1e-12 / u.size
    z = u.size * q[used] - 1.0 if name == "chi2_dro" else np.log(u.size * q[used])
    if np.ptp(z) <= 1e-9 * max(1.0, float(np.abs(z).max())):
        return None
    lam, eta = np.polyfit(z, u[used], 1)
    value = float(q @ u)
    if lam <= 0 or abs(oce_objective(name, params, u, eta, lam) - value) > 1e-9 * max(1.0, abs(value)):
        return None
    return {"eta": float(eta), "lam": float(lam)}


class Pass:
    """F(l(x)) on a set of rows with its gradient J^T q: one chunked pass of the losses, kept with their
    autograd graph, and one backward pass of the weighted sum q.l(x) (whose gradient is J^T q)."""

    def __init__(self, problem: CompositeProblem, risk: Risk, chunk: int):
        self.rows, self.risk, self.chunk, self.shape = problem.per_sample, risk, chunk, problem.domain.shape

    def parts(self, index: torch.Tensor | None) -> list[torch.Tensor]:
        n = self.rows.n if index is None else len(index)
        spans = [torch.arange(i, min(i + self.chunk, n)) for i in range(0, n, self.chunk)]
        return spans if index is None else [index[s] for s in spans]

    def value(self, x: torch.Tensor, index: torch.Tensor | None, grad: bool, mu: float | None = None) -> tuple:
        """(F at x on the rows, a callable giving the gradient at x, or None when ``grad`` is False); with
        ``mu``, CVaR's smoothing."""
        point = x.detach().reshape(self.shape).requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            losses = [self.rows.values(point, part) for part in self.parts(index)]
        u = torch.cat(losses).detach().cpu().double().numpy()
        if not np.all(np.isfinite(u)):
            raise OracleError("oce: the per-sample loss returned a non-finite value; check the loss and the data")
        risk = self.risk if mu is None else Risk(self.risk.name, self.risk.params, mu)
        value, q = risk.evaluate(u)
        if not grad:
            return value, None

        def gradient() -> torch.Tensor:
            weights = torch.as_tensor(q, dtype=losses[0].dtype, device=losses[0].device)
            total = sum(part @ weights[i : i + len(part)] for i, part in zip(offsets(losses), losses))
            return torch.autograd.grad(total, point)[0].reshape(-1).detach()

        return value, gradient


def offsets(parts: list[torch.Tensor]) -> list[int]:
    return [0, *np.cumsum([len(p) for p in parts[:-1]]).tolist()]


@encodable
@dataclass
class OCEState:
    """x, the sample's objective at x and its gradient, the sample (None: every row), L-BFGS's pairs."""

    x: torch.Tensor
    value: float
    grad: torch.Tensor
    index: torch.Tensor | None
    pairs: tuple
    stage: int = 0
    steps: int = 0  # taken on this sample
    mu: float | None = None  # CVaR's smoothing, None once exact
    solved: bool = False  # no step decreases the objective over every row any more


def direction(grad: torch.Tensor, pairs: tuple) -> torch.Tensor:
    """-H grad by L-BFGS's two loops over the (s, y) pairs, oldest first."""
    q, alphas = grad.clone(), []
    for s, y in reversed(pairs):
        a = float(s @ q) / float(y @ s)
        q -= a * y
        alphas.append(a)
    if pairs:
        s, y = pairs[-1]
        q *= float(s @ y) / float(y @ y)
    for (s, y), a in zip(pairs, reversed(alphas)):
        q += (a - float(y @ q) / float(y @ s)) * s
    return -q


class OCEReadout(Readout):
    """The exact objective over every row and its Frank-Wolfe gap at each evaluation (outside optimizer
    time), the sample's objective in every row, and the risk's OCE minimizers at the final x."""

    outputs = {"dual": "the minimizing eta (and lam) of the risk's OCE form over every row at the final x"}
    gap = "fw_gap"

    def __init__(self, problem: CompositeProblem, evaluator: Pass):
        self.domain, self.evaluator = problem.domain, evaluator
        self.seen: tuple[OCEState, float, torch.Tensor] | None = None  # (state, F, J^T q) last computed

    def iterate(self, state: OCEState) -> torch.Tensor:
        return state.x.reshape(self.domain.shape)

    def observe(self, state: OCEState, k: int) -> dict:
        return {"objective_estimate": state.value, "rows": self.rows(state)}

    def rows(self, state: OCEState) -> int:
        return self.evaluator.rows.n if state.index is None else len(state.index)

    def exact(self, state: OCEState) -> tuple[float, torch.Tensor]:
        if self.seen is None or self.seen[0] is not state:
            value, gradient = self.evaluator.value(state.x, None, grad=True)
            self.seen = (state, value, gradient())
        return self.seen[1], self.seen[2]

    def objective(self, state: OCEState) -> float:
        return self.exact(state)[0]

    def evaluate(self, state: OCEState, k: int) -> dict:
        g = self.exact(state)[1].cpu().numpy()
        s = np.asarray(self.domain.lmo(g.reshape(self.domain.shape)), dtype=np.float64).reshape(-1)
        return {"fw_gap": float(g @ (state.x.detach().cpu().double().numpy() - s))}

    def returned(self, state: OCEState) -> dict:
        with torch.no_grad():
            u = self.evaluator.rows.all_values(state.x.reshape(self.domain.shape), self.evaluator.chunk)
        risk = self.evaluator.risk
        return {"dual": oce_dual(risk.name, risk.params, u.detach().cpu().double().numpy())}


def setup(problem: CompositeProblem, hp: dict, run: RunOptions) -> Plan:
    evaluator = Pass(problem, oce_risk(problem), hp["chunk"])
    domain, n, memory = problem.domain, problem.per_sample.n, hp["memory"]

    project = projector(domain, run)

    def sample(m: int) -> torch.Tensor | None:
        """m distinct rows drawn from the run's generator, sorted (None: every row)."""
        if m >= n:
            return None
        drawn = torch.randperm(n, generator=run.generator, device=run.generator.device)[:m]
        return torch.sort(drawn.cpu()).values

    def at(x: torch.Tensor, index: torch.Tensor | None, pairs: tuple, stage: int, mu: float | None) -> OCEState:
        value, gradient = evaluator.value(x, index, True, mu)
        return OCEState(x, value, gradient(), index, pairs, stage, 0, mu)

    def next_stage(state: OCEState, x: torch.Tensor, pairs: tuple) -> OCEState | None:
        """CVaR's smoothing sharpened tenfold (exact once its error mu log 2 / alpha is below 1e-6 of F), else
        the sample grown; None when the sample is every row and F is exact."""
        if state.mu is not None:
            mu = state.mu / 10.0
            exact = mu * math.log(2.0) <= 1e-6 * abs(state.value) * evaluator.risk.params["alpha"]
            return at(x, state.index, (), state.stage + 1, None if exact else mu)
        if state.index is None:
            return None
        return at(x, sample(grown(state)), pairs, state.stage + 1, None)

    def oce_step(state: OCEState, k: int) -> tuple[OCEState, dict]:
        row = {"objective_estimate": state.value, "rows": n if state.index is None else len(state.index)}
        moved = None if state.solved else search(evaluator, state, project, noise)
        if moved is None:  # no decrease along the direction nor the gradient: this stage is solved
            nxt = next_stage(state, state.x, state.pairs)
            return (replace(state, solved=True) if nxt is None else nxt), {**row, "step": 0.0}
        t, x, value, gradient = moved
        g = gradient()
        s, y = x - state.x, g - state.grad
        pairs = state.pairs
        if float(s @ y) > 1e-10 * float(s.norm() * y.norm()):
            pairs = (*pairs, (s, y))[-memory:]
        nxt = OCEState(x, value, g, state.index, pairs, state.stage, state.steps + 1, state.mu)
        if state.value - value <= hp["stage_tol"] * abs(state.value) or state.steps + 1 >= hp["stage_steps"]:
            nxt = next_stage(state, x, pairs) or nxt
        return nxt, {**row, "step": t}

    def grown(state: OCEState) -> int:
        return min(n, math.ceil(len(state.index) * hp["growth"]))

    first = n if hp["first_rows"] is None else min(n, hp["first_rows"])
    x0 = project(torch.as_tensor(problem.x0, dtype=run.dtype, device=run.device).reshape(-1))
    noise = ball_noise(x0.numel(), run)
    index = sample(first)
    mu = None
    if evaluator.risk.name == "cvar":  # start from the smoothing: at the origin of a linear model all losses tie
        mu = 0.1 * evaluator.risk.params["alpha"] * max(abs(evaluator.value(x0, index, False)[0]), 1e-12)
    state = at(x0, index, (), 0, mu)  # set-up (the first passes), not optimizer time
    info = {"risk": evaluator.risk.name, "first_rows": first, "rows": n}
    return Plan(oce_step, state, OCEReadout(problem, evaluator), info=info)


def projector(domain: Any, run: RunOptions) -> Any:
    """The domain's Euclidean projection of a flat tensor, as a flat tensor of the run's dtype and device."""

    def project(v: torch.Tensor) -> torch.Tensor:
        p = np.asarray(domain.project(v.detach().cpu().numpy().reshape(domain.shape)), dtype=np.float64)
        return torch.as_tensor(p.reshape(-1), dtype=run.dtype, device=run.device)

    return project


def ball_noise(dim: int, run: RunOptions) -> Any:
    """Points drawn uniformly from the unit ball of dimension ``dim``, from the run's generator."""

    def noise() -> torch.Tensor:
        v = torch.randn(dim, generator=run.generator, device=run.generator.device, dtype=run.dtype)
        r = torch.rand((), generator=run.generator, device=run.generator.device, dtype=run.dtype)
        return (v / v.norm() * r ** (1.0 / dim)).to(run.device)

    return noise


def search(evaluator: Pass, state: OCEState, project: Any, noise: Any) -> tuple | None:
    """(step, x, value, gradient callable) of the first point that decreases the sample's objective enough
    along the projected L-BFGS direction, then the projected gradient, then gradient-sampling directions,
    or None when none does.

    A nonsmooth F (CVaR) can stop L-BFGS at a kink, where neither direction descends (at the origin every
    loss ties); the minimum-norm convex combination of gradients sampled around x does (gradient sampling,
    Burke, Lewis and Overton 2005), on balls of radius 1e-2 down to 1e-7 times max(1, ||x||).
    """
    for d in (direction(state.grad, state.pairs), -state.grad)[: 2 if state.pairs else 1]:
        found = backtrack(evaluator, state, project, d, None)
        if found is not None:
            return found
    if evaluator.risk.name != "cvar" or state.mu is not None:  # smooth: no descent along -grad is stationary
        return None
    scale = max(1.0, float(state.x.norm()))
    for radius in (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7):
        grads = [state.grad]
        for _ in range(min(4 * (state.x.numel() + 1), 100)):
            _, gradient = evaluator.value(state.x + radius * scale * noise(), state.index, True, state.mu)
            grads.append(gradient())
        d = -min_norm(torch.stack(grads))
        found = backtrack(evaluator, state, project, d, float(d @ d))
        if found is not None:
            return found
    return None


def backtrack(evaluator: Pass, state: OCEState, project: Any, d: torch.Tensor, decrease: float | None) -> Any:
    """Halve the step along d until the projected point decreases the objective by 1e-4 of the step's
    predicted drop (``decrease`` * step when given, else the gradient's slope); None after 30 halvings."""
    t, size = 1.0, float(d.norm())
    for _ in range(30):
        if t * size <= 1e-10 * (1.0 + float(state.x.norm())):  # a step below rounding: stop paying passes
            return None
        x = project(state.x + t * d)
        slope = float(state.grad @ (x - state.x)) if decrease is None else -decrease * t
        value, gradient = evaluator.value(x, state.index, True, state.mu)
        if value < state.value + 1e-4 * min(slope, 0.0):
            return t, x, value, gradient
        t *= 0.5
    return None


def min_norm(G: torch.Tensor) -> torch.Tensor:
    """The point of minimum norm in the convex hull of the rows of G (non-negative least squares with the
    weights' sum held at 1 by a heavy row)."""
    rows = G.detach().cpu().double().numpy()
    heavy = 1e3 * max(1.0, float(np.abs(rows).max()))
    system = np.vstack([rows.T, np.full((1, len(rows)), heavy)])
    target = np.zeros(system.shape[0])
    target[-1] = heavy
    weights = nnls(system, target)[0]
    weights /= max(weights.sum(), 1e-300)
    return torch.as_tensor(rows.T @ weights, dtype=G.dtype, device=G.device)


OCE = register(
    Method(
        "oce",
        CompositeProblem,
        PARAMS,
        setup,
        "L-BFGS on a named OCE risk of fc.PerSample losses (CVaR, chi2/KL balls, entropic) over growing row "
        "samples, with closed-form weights and an exact certificate",
        per_sample=True,
    )
)


def oce(problem: CompositeProblem, **options: Any) -> Result:
    """Minimize F(l_1(x), ..., l_n(x)) over X, F a named OCE risk of ``fc.PerSample`` losses.

    F is ``fc.cvar``, ``fc.chi2_dro``, ``fc.kl_dro`` or ``fc.entropic_risk`` of the placeholder.  Each step
    is an L-BFGS step (projected onto X, with a backtracking search) on F(l(x)) over a random sample of the
    rows, whose value and gradient J^T q come from the risk's closed-form weights q; the sample starts at
    ``first_rows`` rows and grows by ``growth`` when a step decreases its objective by less than
    ``stage_tol`` of it or after ``stage_steps`` steps, until it holds every row (then the steps are exact).
    Where CVaR's kinks stop both directions, gradients sampled around x give one that descends (gradient
    sampling); a point with many tied losses (the origin of a linear model, where all tie) can still stop
    it short of the optimum, which ``fw_gap`` then shows.

    Every evaluation (``eval_every``, and the last row) records, outside optimizer time, the exact objective
    over every row and ``fw_gap`` = max_{s in X} <J(x)^T q(x), x - s>: for losses convex in x it bounds
    F(l(x)) - min_X F(l(.)), so ``gap_tol`` stops a run with a certified accuracy.  Rows also hold
    ``objective_estimate`` (the sample's objective), ``rows`` (the sample's size) and ``step``.
    ``result.dual`` holds the minimizing ``eta`` (and ``lam``) of the risk's OCE form at the final x.
    Hyperparameters: ``memory``, ``first_rows``, ``growth``, ``stage_tol``, ``stage_steps``, ``chunk``
    (``fc.describe("oce")``).
    """
    return solve(problem, "oce", **options)


__all__ = ["oce", "oce_objective", "oce_dual", "OCE_RISKS"]
