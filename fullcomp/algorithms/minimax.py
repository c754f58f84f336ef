"""Baselines for weakly-convex-strongly-concave min-max problems min_x max_{y in Y} phi(x, y) (SMAG, Section 5.2).

Each takes the :class:`~fullcomp.model.dmax.DMaxProblem` that ``fc.smag``
takes (min-max form: ``phi(x, y, batch)``, no psi) and runs in the shared loop:

* :func:`sgda`: stochastic gradient descent-ascent (Lin, Jin and Jordan, 2020;
  spec B2), simultaneous steps on one mini-batch.
* :func:`epoch_gda`: Epoch-GDA for weakly convex x (Yan et al., 2020; spec B3):
  epochs of SGDA on phi(x, y) + gamma/2 ||x - x_hat||^2, restarted at the epoch
  averages.
* :func:`sopa`: SOPA (Zhu et al., 2022; spec B1), the pAUC method for
  min_{w, s} F_pauc(w, s): stochastic (sub)gradient steps on the model weights
  (SGD or Adam) and on the CVaR thresholds s with their own step.  y is not
  updated: SOPA solves problem (8), so the problem is built with alpha = 0.

Every method returns the last iterate (the practice of the papers' code, spec
B2) as a :class:`~fullcomp.run.Result` with ``x`` and ``y`` in the problem's
containers and ``history`` rows ``k``, ``time``, ``phi_value`` (the sampled
phi at the point the gradient was taken) and ``grad_norm`` (of the x-gradient).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch.func import grad_and_value

from fullcomp.algorithms.tracked import positive, positive_int
from fullcomp.errors import ModelError, OptionError, OracleError
from fullcomp.model.dmax import DMaxProblem, Params, to_run
from fullcomp.run import Budget, Loop, Result, drive


class MinimaxOracle:
    """Stochastic gradients of phi in x and y at one point and batch, from one ``torch.func`` call."""

    def __init__(self, problem: DMaxProblem, method: str, seed: int, device: Any, dtype: torch.dtype):
        if not isinstance(problem, DMaxProblem):
            raise ModelError(f"{method} needs a fc.DMaxProblem, got {type(problem).__name__}")
        if problem.psi is not None:
            raise ModelError(
                f"{method} solves min_x max_y phi(x, y); this problem has psi (a difference of maxima): use fc.smag"
            )
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise OptionError(f"seed must be an int, got {seed!r}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise OptionError(f"dtype must be a floating torch dtype such as torch.float32, got {dtype!r}")
        try:
            self.device = torch.device(device)
            self.generator = torch.Generator(device=self.device).manual_seed(int(seed))
        except (RuntimeError, TypeError) as exc:
            raise OptionError(f"device {device!r} is not usable here ({exc}); pass device='cpu'") from None
        self.problem, self.method, self.dtype = problem, method, dtype
        p = problem

        def value(blocks: dict, batch: Any) -> torch.Tensor:
            out = p.phi_value(p.x.view(blocks["x"]), _view(p.y, blocks.get("y")), batch)
            if not isinstance(out, torch.Tensor) or out.numel() != 1:
                raise OracleError(f"phi must return a scalar tensor; use .mean() or .sum() ({method})")
            return out.reshape(())

        self._grad = grad_and_value(value)

    def start(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x0 and y0 (projected onto Y) as flat vectors of the run's dtype and device."""
        p = self.problem
        x = p.x.flat(self.dtype, self.device)
        y = None if p.y is None else self.project(p.y.flat(self.dtype, self.device))
        return x, y

    def project(self, y: torch.Tensor) -> torch.Tensor:
        Y = self.problem.Y
        return y if Y is None else Y.project(y.view(Y.shape)).reshape(-1)

    def sample(self) -> Any:
        batch, _ = self.problem.sample(self.generator)
        return to_run(batch, self.dtype, self.device)

    def __call__(self, x: torch.Tensor, y: torch.Tensor | None, batch: Any, k: int) -> tuple:
        """(g_x, g_y or None, phi value as a float); non-finite values stop the run with an OracleError."""
        blocks = {"x": x} if y is None else {"x": x, "y": y}
        grads, phi = self._grad(blocks, batch)
        gx, gy = grads["x"], grads.get("y")
        stats = torch.stack([phi.detach(), gx.norm()] + ([gy.norm()] if gy is not None else [])).tolist()
        if not all(math.isfinite(v) for v in stats):
            raise OracleError(
                f"{self.method}: phi or its gradient is non-finite at iteration {k}; the run stopped and "
                "exc.result holds the last finite state. Lower the step sizes or check phi for overflow"
            )
        return gx, gy, stats[0], stats[1]

    def finish(self, x: torch.Tensor, y: torch.Tensor | None, history, info: dict, **extras: Any) -> Result:
        p = self.problem
        return Result(p.x.build(x), history, info, y=None if p.y is None else p.y.build(y), **extras)

    def observe(self, x: torch.Tensor, y: torch.Tensor | None) -> dict:
        """phi at the final point on the full batch when the problem has one, else on a fixed fresh draw."""
        p = self.problem
        batch = p.full_batch
        if batch is None and p.stochastic:
            batch, _ = p.sample(torch.Generator(device=self.device).manual_seed(2_000_003))
        with torch.no_grad():
            value = p.phi_value(p.x.view(x), _view(p.y, y), to_run(batch, self.dtype, self.device))
        return {"phi_value": float(value)}


def _view(params: Params | None, flat: torch.Tensor | None) -> Any:
    return None if params is None else params.view(flat)


def _loop(budget: tuple, callback: Callable | None, eval_every: int | None, progress: bool, checkpoint: Any, desc: str):
    return Loop(Budget(*budget), callback, eval_every, progress, checkpoint, "phi_value", desc)


# ------------------------------------------------------------------------------------------------ SGDA


def sgda(
    problem: DMaxProblem,
    *,
    eta_x: float,
    eta_y: float,
    iters: int | None = None,
    seconds: float | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """Stochastic gradient descent-ascent on min_x max_{y in Y} phi(x, y) (spec B2).

    Each iteration draws one batch and takes simultaneous steps

        x <- x - eta_x g_x(x, y);   y <- P_Y(y + eta_y g_y(x, y))

    Parameters
    ----------
    eta_x, eta_y : step sizes of x and y (the theory takes eta_x of order eta_y / kappa^2).
    iters, seconds : budget in iterations and/or optimizer seconds (evaluation excluded).
    seed : seeds the ``torch.Generator`` handed to the sampler.
    device, dtype : where and in which precision the iterates live (default cpu, float32).
    callback, eval_every, progress, checkpoint : as for :func:`fullcomp.smag`.

    Returns the last iterate (``x``, ``y``) and the history.
    """
    eta_x = positive(eta_x, "eta_x", "the step size of x")
    eta_y = positive(eta_y, "eta_y", "the step size of y")
    oracle = MinimaxOracle(problem, "sgda", seed, device, dtype)
    loop = _loop((iters, seconds), callback, eval_every, progress, checkpoint, "sgda")
    x0, y0 = oracle.start()

    def step(state: dict, k: int) -> tuple[dict, dict]:
        x, y = state["x"], state["y"]
        gx, gy, phi, gnorm = oracle(x, y, oracle.sample(), k)
        x_next = torch.add(x, gx, alpha=-eta_x)
        y_next = None if y is None else oracle.project(torch.add(y, gy, alpha=eta_y))
        return {"x": x_next, "y": y_next}, {"phi_value": phi, "grad_norm": gnorm}

    info = {"method": "sgda", "eta_x": eta_x, "eta_y": eta_y, "seed": seed, "dtype": str(dtype)}
    return drive(
        step,
        {"x": x0, "y": y0},
        loop,
        generator=oracle.generator,
        iterate=lambda s: problem.x.build(s["x"]),
        finish=lambda s, history, info: oracle.finish(s["x"], s["y"], history, info),
        observe=lambda s, k: oracle.observe(s["x"], s["y"]),
        info=info,
    )


# ------------------------------------------------------------------------------------------- Epoch-GDA

GROWTHS = ("constant", "linear")


def epoch_gda(
    problem: DMaxProblem,
    *,
    eta_x: float,
    eta_y: float,
    gamma: float,
    epoch_iters: int = 10,
    growth: str = "constant",
    iters: int | None = None,
    seconds: float | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """Epoch-GDA for phi weakly convex in x and strongly concave in y (spec B3).

    Epoch k, anchored at x_hat: T_k SGDA steps on phi(x, y) + gamma/2 ||x - x_hat||^2 from (x_hat, y_hat),

        x <- x - eta_x^k (g_x + gamma (x - x_hat));   y <- P_Y(y + eta_y^k g_y)

    then (x_hat, y_hat) <- the averages of the epoch's iterates, where the next epoch starts.

    Parameters
    ----------
    eta_x, eta_y : step sizes of the first epoch.
    gamma : weight of the proximal anchor term (above the weak-convexity modulus; the
        Yang lab's ``epoch_decay``).
    epoch_iters : T_1, the steps of the first epoch (default 10).
    growth : ``"constant"`` (default: T_k = epoch_iters and constant steps, the practical form) or
        ``"linear"`` (the analysis: T_k = k epoch_iters, steps eta / k).
    iters, seconds, seed, device, dtype, callback, eval_every, progress, checkpoint : as for :func:`sgda`.

    Returns the last anchor (x_hat, y_hat), the epoch output of the analysis
    (the starting point while no epoch has completed), and the history (rows
    also carry ``epoch``).
    """
    eta_x = positive(eta_x, "eta_x", "the step size of x")
    eta_y = positive(eta_y, "eta_y", "the step size of y")
    gamma = positive(gamma, "gamma", "the weight of the proximal anchor term")
    epoch_iters = positive_int(epoch_iters, "epoch_iters", "SGDA steps per epoch")
    if growth not in GROWTHS:
        raise OptionError(f"growth must be 'constant' or 'linear' (T_k = k epoch_iters, steps / k), got {growth!r}")
    oracle = MinimaxOracle(problem, "epoch-gda", seed, device, dtype)
    loop = _loop((iters, seconds), callback, eval_every, progress, checkpoint, "epoch-gda")
    x0, y0 = oracle.start()

    def step(state: dict, k: int) -> tuple[dict, dict]:
        x, y, x_hat, epoch = state["x"], state["y"], state["x_hat"], state["epoch"]
        scale = 1.0 if growth == "constant" else 1.0 / epoch
        length = epoch_iters if growth == "constant" else epoch_iters * epoch
        gx, gy, phi, gnorm = oracle(x, y, oracle.sample(), k)
        x_next = x - eta_x * scale * (gx + gamma * (x - x_hat))
        y_next = None if y is None else oracle.project(torch.add(y, gy, alpha=eta_y * scale))
        sum_x = state["sum_x"] + x_next
        sum_y = None if y is None else state["sum_y"] + y_next
        t = state["t"] + 1
        new = {**state, "x": x_next, "y": y_next, "sum_x": sum_x, "sum_y": sum_y, "t": t}
        if t == length:  # the epoch ends: restart from the averages, the new anchor
            x_hat = sum_x / t
            y_hat = None if y is None else sum_y / t
            new = {
                "x": x_hat,
                "y": y_hat,
                "x_hat": x_hat,
                "y_hat": y_hat,
                "sum_x": torch.zeros_like(x_hat),
                "sum_y": None if y is None else torch.zeros_like(y_hat),
                "t": 0,
                "epoch": epoch + 1,
            }
        return new, {"phi_value": phi, "grad_norm": gnorm, "epoch": epoch}

    state = {
        "x": x0,
        "y": y0,
        "x_hat": x0,
        "y_hat": y0,
        "sum_x": torch.zeros_like(x0),
        "sum_y": None if y0 is None else torch.zeros_like(y0),
        "t": 0,
        "epoch": 1,
    }
    info = {
        "method": "epoch-gda",
        "eta_x": eta_x,
        "eta_y": eta_y,
        "gamma": gamma,
        "epoch_iters": epoch_iters,
        "growth": growth,
        "seed": seed,
        "dtype": str(dtype),
    }
    return drive(
        step,
        state,
        loop,
        generator=oracle.generator,
        iterate=lambda s: problem.x.build(s["x_hat"]),
        finish=lambda s, history, info: oracle.finish(
            s["x_hat"], s["y_hat"], history, {**info, "epochs": s["epoch"] - 1}
        ),
        observe=lambda s, k: oracle.observe(s["x_hat"], s["y_hat"]),
        info=info,
    )


# ------------------------------------------------------------------------------------------------ SOPA

MODES = ("sgd", "adam")


def threshold_mask(params: Params, key: str) -> torch.Tensor:
    """A boolean mask over the flat x marking the CVaR thresholds: the entry named ``key`` (or ``*.key``)."""
    if params.kind == "tensor":
        raise OptionError("sopa needs x0 as a dict of tensors or a module with an entry holding the thresholds s")
    hits = [n == key or n.endswith("." + key) for n in params.names]
    if not any(hits):
        raise OptionError(
            f"sopa: x0 has no entry named {key!r} (the CVaR thresholds); pass s_key= one of {params.names}"
        )
    return torch.cat([torch.full((n,), h) for n, h in zip(params.numels, hits)])


def sopa(
    problem: DMaxProblem,
    *,
    eta: float,
    eta_s: float,
    s_key: str = "s",
    mode: str = "sgd",
    betas: tuple[float, float] = (0.9, 0.999),
    iters: int | None = None,
    seconds: float | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """SOPA for one-way partial AUC in the CVaR form (8) (spec B1; LibAUC ``pAUC_CVaR_Loss`` + ``SOPA``).

    x holds the model weights w and the thresholds s (the entry ``s_key`` of x0).
    Each iteration draws positive and negative mini-batches (the problem's
    sampler) and, with p_ij = 1[L(w; x_i, x_j) > s_i] as autograd finds it,

        s_i <- s_i - eta_s d_{s_i} phi       (the LibAUC step eta_s (1 - sum_j p_ij / (rho |B-|)) when
                                             phi scales s so that d_{s_i} phi is that bracket)
        w   <- w - eta d_w phi               (mode "sgd"), or an Adam step of size eta (mode "adam")

    y (an adversary) is left at y0: SOPA minimizes phi(x, y0), which is problem (8) when phi was
    built with alpha = 0.

    Parameters
    ----------
    eta : step size of w (LibAUC's lr).
    eta_s : step size of the thresholds (LibAUC's eta).
    s_key : name of the thresholds' entry in x0 (default ``"s"``).
    mode : ``"sgd"`` (default) or ``"adam"`` (LibAUC's default, with ``betas``).
    iters, seconds, seed, device, dtype, callback, eval_every, progress, checkpoint : as for :func:`sgda`.
    """
    eta = positive(eta, "eta", "the step size of the model weights")
    eta_s = positive(eta_s, "eta_s", "the step size of the CVaR thresholds")
    if mode not in MODES:
        raise OptionError(f"mode must be 'sgd' or 'adam', got {mode!r}")
    oracle = MinimaxOracle(problem, "sopa", seed, device, dtype)
    mask = threshold_mask(problem.x, s_key).to(oracle.device)
    loop = _loop((iters, seconds), callback, eval_every, progress, checkpoint, "sopa")
    x0, y0 = oracle.start()
    b1, b2 = betas

    def step(state: dict, k: int) -> tuple[dict, dict]:
        x = state["x"]
        gx, _, phi, gnorm = oracle(x, y0, oracle.sample(), k)
        g_w = torch.where(mask, 0.0, gx)
        s_step = torch.where(mask, gx, 0.0) * eta_s
        new = dict(state)
        if mode == "sgd":
            w_step = eta * g_w
        else:
            m = b1 * state["m"] + (1 - b1) * g_w
            v = b2 * state["v"] + (1 - b2) * g_w * g_w
            m_hat, v_hat = m / (1 - b1 ** (k + 1)), v / (1 - b2 ** (k + 1))
            w_step = eta * m_hat / (v_hat.sqrt() + 1e-8)
            new.update(m=m, v=v)
        new["x"] = x - w_step - s_step
        return new, {"phi_value": phi, "grad_norm": gnorm}

    state = {"x": x0}
    if mode == "adam":
        state.update(m=torch.zeros_like(x0), v=torch.zeros_like(x0))
    info = {"method": "sopa", "eta": eta, "eta_s": eta_s, "mode": mode, "seed": seed, "dtype": str(dtype)}
    return drive(
        step,
        state,
        loop,
        generator=oracle.generator,
        iterate=lambda s: problem.x.build(s["x"]),
        finish=lambda s, history, info: oracle.finish(s["x"], y0, history, info),
        observe=lambda s, k: oracle.observe(s["x"], y0),
        info=info,
    )


__all__ = ["sgda", "epoch_gda", "sopa", "MinimaxOracle"]
