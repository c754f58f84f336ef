"""HMSFW: Hybrid Momentum Stochastic Frank-Wolfe (Algorithm 1 of the HMSFW paper)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fullcomp.errors import ModelError, OptionError
from fullcomp.glmo import build_glmo
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles import InnerOracle
from fullcomp.run import Budget, Loop, Result, drive
from fullcomp.schedules import Schedule, resolve
from fullcomp.trackers import polyak, taylor

VARIANTS = {"taylor": "taylor", "ii": "taylor", "polyak": "polyak", "i": "polyak"}


def hmsfw(
    problem: CompositeProblem,
    *,
    iters: int | None = None,
    seconds: float | None = None,
    variant: str = "taylor",
    exact: bool = False,
    glmo: str = "auto",
    glmo_tol: float | Callable[[int], float] | None = None,
    max_pricing: int | None = None,
    pool: int = 30,
    schedule: Schedule | str | Callable | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """Minimize F(f(x), x) over X with tracked values and Jacobians and a GLMO step.

    Each iteration k: x_k = GLMO(z_k, V_k, y_k); y_{k+1} = y_k + gamma_k (x_k - y_k);
    one sample at y_{k+1}; V_{k+1} = Polyak(V_k, Jacobian, beta); z_{k+1} by the
    Taylor (Variant II, ``variant="taylor"``) or Polyak (Variant I, ``"polyak"``)
    value tracker.

    Parameters
    ----------
    iters, seconds : budget in iterations and/or optimizer seconds (evaluation excluded).
    variant : "taylor" (Variant II, default) or "polyak" (Variant I).
    exact : use ``problem.full_batch`` (or the deterministic map) with beta = rho = 1:
        the deterministic Basic method.
    glmo : "auto", "conic" or "colgen" (see :func:`fullcomp.build_glmo`).
    glmo_tol : certified GLMO tolerance, a number or a function of k.  Default
        0.01 |phi(y_0)| (k+2)^(-1/3), and 0.01 |phi(y_0)| / (k+2) when ``exact``.
    max_pricing : cap on pricing calls per GLMO (the fixed-budget mode); with
        ``glmo_tol`` unset and ``max_pricing`` set, only the cap stops pricing.
    pool : atoms kept warm between column-generation calls.
    schedule : None (the paper's), "constant" (needs ``iters``), "exact", a
        :class:`~fullcomp.schedules.Schedule` or a function k -> (gamma, beta, rho).
    seed : seeds the ``torch.Generator`` handed to the sampler.
    callback : ``callback(iterate) -> dict | None | False`` every ``eval_every``
        iterations, outside optimizer time; a dict is merged into the history row.
    checkpoint : path or :class:`~fullcomp.run.Checkpoint`; an existing one is resumed.

    Returns
    -------
    Result with ``x`` (shape of the domain), ``history`` rows (``k``, ``time``,
    ``objective_estimate``, ``gap_estimate``, ``glmo_gap``, ``pricing_calls``),
    and the trackers ``V`` and ``z``.
    """
    if not isinstance(problem, CompositeProblem):
        raise ModelError(f"hmsfw needs a fc.CompositeProblem, got {type(problem).__name__}")
    key = str(variant).lower()
    if key not in VARIANTS:
        raise OptionError(f"variant must be 'taylor' (Variant II) or 'polyak' (Variant I), got {variant!r}")
    value_tracker = VARIANTS[key]
    loop = Loop(
        Budget(iters, seconds), callback, eval_every, progress, checkpoint, "gap_estimate", f"hmsfw-{value_tracker}"
    )
    sched = resolve(schedule, iters=iters, exact=exact)
    if exact and problem.stochastic and problem.full_batch is None:
        raise OptionError("exact=True on a stochastic problem needs CompositeProblem(full_batch=...) for the exact f")
    if exact and schedule is None:
        sched = Schedule.exact()

    domain, outer = problem.domain, problem.outer
    oracle = InnerOracle(problem.inner, outer.n, domain.shape, device, dtype)
    solver = build_glmo(outer, domain, route=glmo, pool=pool)
    generator = torch.Generator(device=device).manual_seed(seed)

    def batch() -> Any:
        return problem.full_batch if exact else problem.sample(generator)

    def numpy(t: torch.Tensor) -> np.ndarray:
        return t.detach().cpu().numpy().astype(np.float64, copy=False)

    # Initialization (the first sample at y_0) is set-up, not optimizer time, as in the paper's protocol.
    y0 = torch.as_tensor(problem.x0, dtype=dtype, device=device).reshape(-1)
    value, jac = oracle(y0, batch(), 0)
    state = {"y": y0, "y_prev": y0, "V": jac, "z": value}

    scale = abs(outer.value(numpy(value), problem.x0)) or 1.0
    if glmo_tol is None and max_pricing is None:
        decay = 1.0 if exact else 1.0 / 3.0
        tolerance = lambda k: 0.01 * scale * (k + 2) ** (-decay)  # noqa: E731
    elif callable(glmo_tol):
        tolerance = glmo_tol
    else:
        tolerance = lambda k: glmo_tol  # noqa: E731

    def linear_model(state: dict, k: int) -> tuple[dict, np.ndarray]:
        """One GLMO on the tracked model z + V (x - y); the row describing y_k."""
        y, z = numpy(state["y"]), numpy(state["z"])
        res = solver.solve(z, numpy(state["V"]), y, tol=tolerance(k), max_calls=max_pricing)
        objective = outer.value(z, y)
        row = {
            "objective_estimate": objective,
            "gap_estimate": objective - res.value,
            "glmo_gap": res.gap_bound,
            "pricing_calls": res.calls,
        }
        return row, res.x.reshape(-1)

    def step(state: dict, k: int) -> tuple[dict, dict]:
        row, x = linear_model(state, k)
        gamma, beta, rho = sched.at(k)
        y = state["y"]
        y_next = y + gamma * (torch.as_tensor(x, dtype=dtype, device=device) - y)
        value, jac = oracle(y_next, batch(), k + 1)
        V = polyak(state["V"], jac, beta)
        if value_tracker == "taylor":
            z = taylor(state["z"], V, y_next, y, value, rho)
        else:
            z = polyak(state["z"], value, rho)
        return {"y": y_next, "y_prev": y, "V": V, "z": z}, row

    def finish(state: dict, history, info: dict) -> Result:
        return Result(state["y"].reshape(domain.shape), history, info, V=state["V"], z=state["z"])

    info = {
        "method": "hmsfw-exact" if exact else f"hmsfw-{'ii' if value_tracker == 'taylor' else 'i'}",
        "variant": value_tracker,
        "glmo_route": solver.route,
        "schedule": sched.name,
        "seed": seed,
        "device": str(device),
        "dtype": str(dtype),
    }
    return drive(
        step,
        state,
        loop,
        generator=generator,
        iterate=lambda s: s["y"].reshape(domain.shape),
        finish=finish,
        observe=lambda s, k: linear_model(s, k)[0],
        components={"glmo": solver},
        info=info,
    )
