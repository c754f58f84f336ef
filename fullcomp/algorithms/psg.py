"""PSG: projected subgradient steps on HMSFW's tracked model (baseline C1 of the HMSFW comparisons)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from fullcomp.algorithms.tracked import TrackedModel, check_problem, numpy, positive, project
from fullcomp.errors import OptionError
from fullcomp.glmo.subgradient import OuterCalculus
from fullcomp.model.composite import CompositeProblem
from fullcomp.run import Budget, Loop, Result, drive
from fullcomp.schedules import Schedule

STEPS = ("constant", "sqrt")


def psg(
    problem: CompositeProblem,
    *,
    iters: int | None = None,
    seconds: float | None = None,
    eta: float | None = None,
    step: str | None = None,
    schedule: Schedule | str | Callable | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """Minimize F(f(x), x) over X by projected subgradient steps on the tracked model.

    Each iteration k: (g_u, g_x) in dF(z_k, x_k);
    x_{k+1} = P_X(x_k - eta_k (V_k^T g_u + g_x)); one sample at x_{k+1};
    V_{k+1} by Polyak (beta), z_{k+1} by Taylor (rho), as in HMSFW.

    x is kept dense (a projection needs the whole point); a problem declaring
    ``reads=`` gets its Jacobians, and the model products, on those entries only.

    Parameters
    ----------
    iters, seconds : budget in iterations and/or optimizer seconds (evaluation excluded).
    eta : the step (the paper's tuned constant eta_PSG).  Default None: the
        scale-free eta_0 = D_X / ||V_0^T g_0 + g_x,0|| (one diameter along the
        first direction) with the 1/sqrt(k+1) decay.
    step : "constant" (eta_k = eta) or "sqrt" (eta_k = eta / sqrt(k+1)).  Default
        None: "constant" when ``eta`` is given (the paper's PSG), "sqrt" when not.
    schedule : tracker weights, as for :func:`fullcomp.hmsfw` (only beta and rho
        are used); None is the paper's, "exact" keeps only the newest sample.
    seed : seeds the ``torch.Generator`` handed to the sampler.
    callback : ``callback(iterate) -> dict | None | False`` every ``eval_every``
        iterations, outside optimizer time; a dict is merged into the history row.
    checkpoint : path or :class:`~fullcomp.run.Checkpoint`; an existing one is resumed.

    Returns
    -------
    Result with ``x`` (shape of the domain), ``history`` rows (``k``, ``time``,
    ``objective_estimate`` = F(z_k, x_k), ``step`` = eta_k, ``direction_norm`` =
    ||V_k^T g_u + g_x||), and the trackers ``V`` and ``z``.
    """
    problem = check_problem(problem, "psg")
    if eta is not None:
        eta = positive(eta, "eta", "the PSG step size")
    if step is None:
        step = "sqrt" if eta is None else "constant"
    if step not in STEPS:
        raise OptionError(f"step must be 'constant' (eta_k = eta) or 'sqrt' (eta / sqrt(k+1)), got {step!r}")
    loop = Loop(Budget(iters, seconds), callback, eval_every, progress, checkpoint, "objective_estimate", "psg")
    domain, outer = problem.domain, problem.outer
    calculus = OuterCalculus(outer)
    generator = torch.Generator(device=device).manual_seed(seed)
    model = TrackedModel(problem, schedule, iters, device, dtype, generator)

    def point(state: dict) -> tuple:
        """(z_k, x_k) as numpy, x_k only when F reads it (a dense copy of x is not free)."""
        return numpy(state["z"]), (numpy(state["x"]).reshape(domain.shape) if outer.depends_on_x else None)

    # Set-up (the first sample and the default step), not optimizer time, as for hmsfw.
    state = model.start()
    if eta is None:
        first = float(torch.linalg.vector_norm(model.inner.chain_rule(state["V"], calculus.subgradient(*point(state)))))
        eta = domain.diameter / first if first > 0 and domain.diameter > 0 else 1.0

    def step_size(k: int) -> float:
        return eta if step == "constant" else eta / math.sqrt(k + 1)

    def psg_step(state: dict, k: int) -> tuple[dict, dict]:
        z, x = point(state)
        d = model.inner.chain_rule(state["V"], calculus.subgradient(z, x))  # V_k^T g_u + g_x
        eta_k = step_size(k)
        x_next = project(domain, state["x"] - eta_k * d)
        row = {
            "objective_estimate": outer.value(z, x),
            "step": eta_k,
            "direction_norm": float(torch.linalg.vector_norm(d)),
        }
        return model.advance(state, x_next, k), row

    def observe(state: dict, k: int) -> dict:
        return {"objective_estimate": outer.value(*point(state))}

    def finish(state: dict, history, info: dict) -> Result:
        return Result(state["x"].reshape(domain.shape), history, info, V=state["V"], z=state["z"])

    info = {
        "method": "psg",
        "eta": eta,
        "step": step,
        "schedule": model.schedule.name,
        "seed": seed,
        "device": str(device),
        "dtype": str(dtype),
    }
    return drive(
        psg_step,
        state,
        loop,
        generator=generator,
        iterate=lambda s: s["x"].reshape(domain.shape),
        finish=finish,
        observe=observe,
        info=info,
    )


__all__ = ["psg"]
