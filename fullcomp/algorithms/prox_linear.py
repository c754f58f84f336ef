"""Prox-linear on HMSFW's tracked model (baseline C2 of the HMSFW comparisons, after Zhang and Xiao)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fullcomp.algorithms.tracked import TrackedModel, check_problem, numpy, positive, positive_int, project
from fullcomp.errors import OptionError
from fullcomp.glmo.subgradient import OuterCalculus
from fullcomp.model.composite import CompositeProblem
from fullcomp.run import Budget, Loop, Result, drive
from fullcomp.schedules import Schedule
from fullcomp.sets.balls import project_simplex

INNER = ("auto", "dual", "subgradient")


def prox_linear(
    problem: CompositeProblem,
    *,
    iters: int | None = None,
    seconds: float | None = None,
    M: float | None = None,
    inner_iters: int = 2,
    inner: str = "auto",
    schedule: Schedule | str | Callable | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """Minimize F(f(x), x) over X by prox-linear steps on the tracked model.

    Each iteration k solves, with ``inner_iters`` = J iterations,

        x_{k+1} ~ argmin_{x in X} F(z_k + V_k (x - x_k), x) + (M/2) ||x - x_k||^2

    and moves there (full update weight), then samples at x_{k+1} and updates
    V by Polyak (beta) and z by Taylor (rho), as in HMSFW.

    x is kept dense (a projection needs the whole point); a problem declaring
    ``reads=`` gets its Jacobians, and the model products, on those entries only.

    Inner solvers:

    * "dual" (F = cp.max(u)): projected gradient ascent over the simplex on
      D(lam) = <lam, z> + <V^T lam, x(lam) - x_k> + (M/2) ||x(lam) - x_k||^2,
      x(lam) = P_X(x_k - V^T lam / M), a concave function with
      grad D = z + V (x(lam) - x_k), Lipschitz with ||V||_2^2 / M (the step's
      inverse).  Returns x(lam_J) at the last ascent iterate: projected gradient
      ascent is monotone and its last iterate runs ahead of the running mean
      (duality gap 1.5e-5 against 1.3e-2 after 50 steps on the tests' problem).
      lam is warm-started from the previous update, whose model is close.
      J + 1 projections per update.
    * "subgradient" (any F): projected subgradient steps 2 / (M (t+1)), t = 1..J,
      on the M-strongly convex subproblem, returning sum_t t x^t / sum_t t
      (the weighting of Lacoste-Julien, Schmidt and Bach, 2012).  The first
      step is PSG's with eta = 1/M.  J projections and J subgradients of F.

    Parameters
    ----------
    iters, seconds : budget in iterations and/or optimizer seconds (evaluation excluded).
    M : the quadratic coefficient (the paper's lambda_PL), M >~ L_F L_J.  Default
        None: the scale-free M = ||V_0^T g_0 + g_x,0|| / D_X (the first linearized
        step travels one diameter).
    inner_iters : J, inner iterations per update (default 2, the paper's frozen value).
    inner : "auto" ("dual" for F = cp.max(u), "subgradient" otherwise), "dual" or "subgradient".
    schedule : tracker weights, as for :func:`fullcomp.hmsfw` (only beta and rho
        are used); None is the paper's, "exact" keeps only the newest sample.
    seed, device, dtype, callback, eval_every, progress, checkpoint : as for :func:`fullcomp.hmsfw`.

    Returns
    -------
    Result with ``x``, ``history`` rows (``k``, ``time``, ``objective_estimate`` =
    F(z_k, x_k), ``model_value`` = the subproblem objective at x_{k+1},
    ``move`` = ||x_{k+1} - x_k||, and for the dual solver ``inner_gap`` = the
    subproblem's duality gap at (x_{k+1}, lam_J), which bounds both its
    suboptimality and (M/2) ||x_{k+1} - argmin||^2), and the trackers ``V`` and ``z``.
    """
    problem = check_problem(problem, "prox_linear")
    if M is not None:
        M = positive(M, "M", "the quadratic coefficient of the prox-linear model")
    J = positive_int(inner_iters, "inner_iters", "inner iterations per update")
    if inner not in INNER:
        raise OptionError(f"inner must be one of {INNER}, got {inner!r}")
    loop = Loop(Budget(iters, seconds), callback, eval_every, progress, checkpoint, "objective_estimate", "prox-linear")
    domain, outer = problem.domain, problem.outer
    calculus = OuterCalculus(outer)
    if inner == "dual" and not calculus.plain_max:
        raise OptionError("inner='dual' needs F = cp.max(u) (the simplex dual); use 'subgradient' or 'auto'")
    route = ("dual" if calculus.plain_max else "subgradient") if inner == "auto" else inner
    generator = torch.Generator(device=device).manual_seed(seed)
    model = TrackedModel(problem, schedule, iters, device, dtype, generator)
    read, spread = model.inner.read, model.inner.spread

    def as_numpy_x(x: torch.Tensor) -> Any:
        # A dense copy of x only when F reads it.
        return numpy(x).reshape(domain.shape) if outer.depends_on_x else None

    def model_value(state: dict, x: torch.Tensor) -> float:
        """F(z + V (x - x_k), x) + (M/2) ||x - x_k||^2."""
        step = x - state["x"]
        u = state["z"] + state["V"] @ read(step)
        return outer.value(numpy(u), as_numpy_x(x)) + 0.5 * M * float(step @ step)

    def dual_ascent(state: dict) -> tuple[torch.Tensor, torch.Tensor, dict]:
        x_k, z, V = state["x"], state["z"], state["V"]

        def x_of(lam: torch.Tensor) -> torch.Tensor:
            return project(domain, x_k - spread(V.T @ lam) / M)

        def simplex(v: torch.Tensor) -> torch.Tensor:
            return torch.as_tensor(project_simplex(numpy(v), 1.0), dtype=v.dtype, device=v.device)

        lipschitz = float(torch.linalg.eigvalsh(V @ V.T)[-1]) / M  # ||V||_2^2 / M, from the small n x n Gram
        lam = state["lam"]
        for _ in range(J):
            lam = simplex(lam + (z + V @ read(x_of(lam) - x_k)) / max(lipschitz, 1e-300))
        x_next = x_of(lam)
        step = x_next - x_k
        dual = float(lam @ z + (V.T @ lam) @ read(step)) + 0.5 * M * float(step @ step)
        primal = model_value(state, x_next)
        return x_next, lam, {"model_value": primal, "inner_gap": max(primal - dual, 0.0)}

    def subgradient_steps(state: dict) -> tuple[torch.Tensor, torch.Tensor, dict]:
        x_k, z, V = state["x"], state["z"], state["V"]
        x, weighted = x_k, torch.zeros_like(x_k)
        for t in range(1, J + 1):
            g = calculus.subgradient(numpy(z + V @ read(x - x_k)), as_numpy_x(x))
            x = project(domain, x - 2.0 / (M * (t + 1)) * (model.inner.chain_rule(V, g) + M * (x - x_k)))
            weighted = weighted + t * x
        x_next = weighted / (J * (J + 1) / 2)
        return x_next, state["lam"], {"model_value": model_value(state, x_next)}

    solve = dual_ascent if route == "dual" else subgradient_steps

    # Set-up (the first sample and the default M), not optimizer time, as for hmsfw.
    state = {**model.start(), "lam": torch.full((problem.n,), 1.0 / problem.n, dtype=dtype, device=device)}
    if M is None:
        g0 = calculus.subgradient(numpy(state["z"]), as_numpy_x(state["x"]))
        first = float(torch.linalg.vector_norm(model.inner.chain_rule(state["V"], g0)))
        M = first / domain.diameter if first > 0 and domain.diameter > 0 else 1.0

    def step(state: dict, k: int) -> tuple[dict, dict]:
        x_next, lam, row = solve(state)
        row = {
            "objective_estimate": outer.value(numpy(state["z"]), as_numpy_x(state["x"])),
            **row,
            "move": float(torch.linalg.vector_norm(x_next - state["x"])),
        }
        return {**model.advance(state, x_next, k), "lam": lam}, row

    def observe(state: dict, k: int) -> dict:
        return {"objective_estimate": outer.value(numpy(state["z"]), as_numpy_x(state["x"]))}

    def finish(state: dict, history, info: dict) -> Result:
        return Result(state["x"].reshape(domain.shape), history, info, V=state["V"], z=state["z"])

    info = {
        "method": "prox-linear",
        "M": M,
        "inner_iters": J,
        "inner": route,
        "schedule": model.schedule.name,
        "seed": seed,
        "device": str(device),
        "dtype": str(dtype),
    }
    return drive(
        step,
        state,
        loop,
        generator=generator,
        iterate=lambda s: s["x"].reshape(domain.shape),
        finish=finish,
        observe=observe,
        info=info,
    )


__all__ = ["prox_linear"]
