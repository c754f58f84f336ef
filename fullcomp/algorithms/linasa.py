"""LiNASA+ICG (Xiao, Balasubramanian and Ghadimi, 2022) on a smoothed outer function (baseline C3)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fullcomp.algorithms.method import Method, Plan, register, solve
from fullcomp.algorithms.tracked import numpy, warm_factor
from fullcomp.errors import OptionError
from fullcomp.model.calculus import OuterCalculus
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles import dense
from fullcomp.oracles.tracked import TrackedModel
from fullcomp.run import Readout, Result, RunOptions
from fullcomp.serial import encodable
from fullcomp.validation import CALLABLE, NONE, Interval, Options, Param, positive

ICG_SCHEDULES = ("linear", "sqrt")


PARAMS = (
    Param("mu", (positive(),), 1e-2, "the smoothing parameter"),
    Param("smoothing", (Options(("auto", "lse", "moreau")),), "auto", "'lse', 'moreau' or 'auto'"),
    Param("beta", (positive(), NONE), None, "the ICG quadratic coefficient; None: ||d_0|| / D_X"),
    Param("horizon", (positive(int), NONE), None, "N in tau = 1/sqrt(N); None: iters"),
    Param("icg_steps", (Options(ICG_SCHEDULES), positive(int), CALLABLE), "linear", "ICG steps t_k per update"),
    Param("delta", (Interval(float, 0, None),), 0.0, "stop ICG once its Frank-Wolfe gap is at most delta"),
)


@encodable
@dataclass
class LinasaState:
    """x_k, the value tracker w_k, the direction d_k and F_mu(w_k, x_k)."""

    x: torch.Tensor
    w: torch.Tensor
    d: torch.Tensor
    smoothed: torch.Tensor


class LiNASA:
    """One update of LiNASA+ICG: ICG on the quadratic model, the averaged step, the linearized tracker w and
    the averaged direction d of the smoothed F_mu."""

    def __init__(self, problem: CompositeProblem, hp: dict, run: RunOptions):
        self.problem, self.domain, self.outer = problem, problem.domain, problem.outer
        self.mu, self.delta, self.work = hp["mu"], hp["delta"], icg_schedule(hp["icg_steps"])
        self.N = hp["horizon"] if hp["horizon"] is not None else run.horizon
        if self.N is None:
            raise OptionError(
                "horizon N (tau = 1/sqrt(N)) is needed and neither horizon= nor iters= gives it (a budget in "
                "seconds, or a Stepper built without iters=): pass horizon=N"
            )
        self.feed = run.feed
        self.calculus = OuterCalculus(self.outer)
        self.kind = self.calculus.smoothing(hp["smoothing"])
        # Its samples only: LiNASA tracks its own way.
        self.model = TrackedModel(problem, run.device, run.dtype, run.generator, feed=run.feed)
        self.entries = self.model.entries
        self.beta = hp["beta"]

    def dense_x(self, x: torch.Tensor) -> Any:
        return numpy(x).reshape(self.domain.shape) if self.outer.depends_on_x else None

    def samples(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """f~(x) and J~(x) from two independent batches (the value needs no Jacobian pass)."""
        value_batch, jacobian_batch = self.feed.draw(self.problem), self.feed.draw(self.problem)
        value = self.model.value_at(x, value_batch, f"at iteration {k}")
        return value, dense(self.model.sample(x, k, jacobian_batch)[1])

    def smoothed_direction(self, w: torch.Tensor, x: torch.Tensor, jac: torch.Tensor) -> tuple[torch.Tensor, float]:
        """J~^T grad_u F_mu(w, x) + grad_x F_mu(w, x), and F_mu(w, x)."""
        g = self.calculus.smoothed(numpy(w), self.dense_x(x), mu=self.mu, kind=self.kind)
        return self.entries.chain_rule(jac, g), g.value

    def start(self, x0: torch.Tensor) -> LinasaState:
        """The state at x_0 from its first samples, and the default beta ||d_0|| / D_X (raised by the warm
        start's line search)."""
        w0, jac0 = self.samples(x0, 0)
        d0, smoothed0 = self.smoothed_direction(w0, x0, jac0)
        if self.beta is None:
            first, diameter = float(torch.linalg.vector_norm(d0)), self.domain.diameter
            self.beta = first / diameter if first > 0 and diameter > 0 else 1.0
            self.beta /= warm_factor(self.problem, self.model, x0, d0)
        return LinasaState(x0, w0, d0, torch.tensor(smoothed0, dtype=torch.float64))

    def icg(self, x: torch.Tensor, d: torch.Tensor, steps: int) -> tuple[torch.Tensor, int, float]:
        """Frank-Wolfe on q(y) = <d, y> + (beta/2)||y - x||^2 from y = x; (y, LMO calls, last FW gap)."""
        y, gap, beta, domain = x, math.inf, self.beta, self.domain
        for s in range(steps):
            grad = d + beta * (y - x)
            v = domain.lmo(grad.reshape(domain.shape)).reshape(-1)
            gap = float(grad @ (y - v))
            if gap <= self.delta:
                return y, s + 1, gap
            y = y + min(1.0, gap / (beta * float((v - y) @ (v - y)))) * (v - y)
        return y, steps, gap

    def __call__(self, state: LinasaState, k: int) -> tuple[LinasaState, dict]:
        x, w, d = state.x, state.w, state.d
        y, calls, gap = self.icg(x, d, self.work(k))
        tau = 1.0 if k == 0 else 1.0 / math.sqrt(self.N)
        x_next = x + tau * (y - x)
        value, jac = self.samples(x_next, k + 1)
        w_next = (1 - tau) * w + tau * value + self.entries.image(jac, x_next - x)
        direction, smoothed = self.smoothed_direction(w_next, x_next, jac)
        d_next = (1 - tau) * d + tau * direction
        row = {
            "objective_estimate": self.outer.value(numpy(w), self.dense_x(x)),
            "smoothed_estimate": float(state.smoothed),
            "tau": tau,
            "icg_steps": calls,
            "icg_gap": gap,
        }
        return LinasaState(x_next, w_next, d_next, torch.tensor(smoothed, dtype=torch.float64)), row


class LinasaReadout(Readout):
    """LiNASA+ICG's states reported: F and F_mu at the tracker w, phi on ``full_batch``, w and d as outputs."""

    outputs = {"w": "the value tracker w_k", "d": "the direction d_k"}

    def __init__(self, box: LiNASA):
        self.box = box

    def iterate(self, state: LinasaState) -> torch.Tensor:
        return state.x.reshape(self.box.domain.shape)

    def observe(self, state: LinasaState, k: int) -> dict:
        estimate = self.box.outer.value(numpy(state.w), self.box.dense_x(state.x))
        return {"objective_estimate": estimate, "smoothed_estimate": float(state.smoothed)}

    def objective(self, state: LinasaState) -> float | None:
        problem = self.box.problem
        if problem.stochastic and problem.full_batch is None:
            return None
        u = self.box.model.value_at(state.x, problem.full_batch, "evaluating the objective")
        return self.box.outer.value(numpy(u), self.box.dense_x(state.x))

    def returned(self, state: LinasaState) -> dict:
        return {"w": state.w, "d": state.d}


def setup(problem: CompositeProblem, hp: dict, run: RunOptions) -> Plan:
    """LiNASA+ICG from x_0's first samples (set-up, not optimizer time, as for hmsfw)."""
    box = LiNASA(problem, hp, run)
    state = box.start(torch.as_tensor(problem.x0, dtype=run.dtype, device=run.device).reshape(-1))
    icg_steps = hp["icg_steps"]
    info = {
        "mu": box.mu,
        "smoothing": box.kind,
        "beta": box.beta,
        "horizon": box.N,
        "icg_steps": icg_steps if isinstance(icg_steps, (str, int)) else "custom",
        "delta": float(box.delta),
    }
    return Plan(box, state, LinasaReadout(box), info=info)


register(
    Method(
        "linasa-icg",
        CompositeProblem,
        PARAMS,
        setup,
        "LiNASA on the smoothed F with ICG inner Frank-Wolfe (HMSFW paper, baseline C3)",
    )
)


def linasa_icg(problem: CompositeProblem, **options: Any) -> Result:
    """Minimize F(f(x), x) over X with LiNASA on the smoothed F_mu and ICG inner Frank-Wolfe.

    Each iteration k (tau_0 = 1, then tau = 1/sqrt(N)):

    1. ICG: Frank-Wolfe on q(y) = <d_k, y> + (beta/2) ||y - x_k||^2 over X from
       y = x_k, with the exact line search min(1, <grad q, y - v> / (beta ||v - y||^2)),
       for t_k steps or until the FW gap of q is at most ``delta``;
    2. x_{k+1} = x_k + tau_k (y - x_k);
    3. two independent samples at x_{k+1}: a value f~ and a Jacobian J~;
       w_{k+1} = (1 - tau_k) w_k + tau_k f~ + J~ (x_{k+1} - x_k);
    4. d_{k+1} = (1 - tau_k) d_k + tau_k (J~^T grad_u F_mu(w_{k+1}, x_{k+1}) + grad_x F_mu).

    x is kept dense (ICG steps over X need the whole point); a problem declaring
    ``reads=`` gets its Jacobians, and the model products, on those entries only.
    On sharded reads every rank keeps the whole dense x, w and d, identical on every rank: each update
    all-reduces J~ (x_{k+1} - x_k) (n numbers) and gathers the direction's values at the ranks' reads.

    Hyperparameters (shared options as for every method; ``fc.describe("linasa-icg")``):
    mu : smoothing parameter (default 1e-2; the paper searched 1e-3 to 1).
    smoothing : "auto" (log-sum-exp for F = cp.max(u), bias at most mu log n;
        the Moreau envelope otherwise), "lse" or "moreau" (the quadratic
        smoothing of the HMSFW paper's runs; closed form for cp.max(u), a
        compiled prox program for any other F).
    beta : the ICG quadratic coefficient beta_L (inverse step).  Default None: the
        scale-free ||d_0|| / D_X (the unconstrained step from x_0 travels one diameter).
    horizon : N in tau = 1/sqrt(N), treated as a step parameter (runs continue
        past N updates and the last iterate is returned).  Default: ``iters``.
    icg_steps : ICG work t_k at iteration k = 0, 1, ...: "linear" (t_k = k + 1,
        the source schedule ceil(k) counted from k = 1; O(K^2) LMOs in all),
        "sqrt" (ceil(sqrt(k + 1))), an int (constant) or a function k -> int.
    delta : stop ICG early once its Frank-Wolfe gap is at most delta (default 0:
        always t_k steps; the paper used 0.01).

    Returns
    -------
    Result
        With ``x``, ``history`` rows (``k``, ``time``, ``objective_estimate`` =
        F(w_k, x_k) (the unsmoothed F), ``smoothed_estimate`` = F_mu(w_k, x_k),
        ``tau``, ``icg_steps`` (LMO calls), ``icg_gap`` (final FW gap of q)), the
        function tracker ``w`` and the direction ``d``.
    """
    return solve(problem, "linasa-icg", **options)


def icg_schedule(icg_steps: str | int | Callable[[int], int]) -> Callable[[int], int]:
    """The ICG work t_k as a function of the iteration k = 0, 1, ..., each value checked positive."""
    if icg_steps == "linear":
        rule = lambda k: k + 1  # noqa: E731
    elif icg_steps == "sqrt":
        rule = lambda k: math.ceil(math.sqrt(k + 1))  # noqa: E731
    elif isinstance(icg_steps, int):
        rule = lambda k: icg_steps  # noqa: E731
    else:
        rule = icg_steps

    def checked(k: int) -> int:
        steps = rule(k)
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
            raise OptionError(f"icg_steps({k}) must be a positive int (ICG steps at iteration {k}), got {steps!r}")
        return int(steps)

    return checked


__all__ = ["linasa_icg"]
