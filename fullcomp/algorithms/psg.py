"""PSG: projected subgradient steps on HMSFW's tracked model (baseline C1 of the HMSFW comparisons)."""

from __future__ import annotations

from typing import Any

import torch

from fullcomp.algorithms.method import Method, Plan, register, solve
from fullcomp.algorithms.tracked import TRACKING, dense_plan, numpy, project, schedule_of, tracked_model, warm_factor
from fullcomp.model.calculus import OuterCalculus
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles.tracked import Tracked
from fullcomp.run import Result, RunOptions
from fullcomp.steps import rule
from fullcomp.validation import NONE, Options, Param, positive

PARAMS = (
    Param(
        "eta",
        (positive(), NONE),
        None,
        "the step; None: D_X / ||V_0^T g_0 + g_x,0|| (halved by a line search from a warm start), decaying 1/sqrt(k+1)",
    ),
    Param(
        "step_size",
        (Options(("constant", "sqrt")), NONE),
        None,
        "eta_k = eta ('constant') or eta / sqrt(k+1) ('sqrt'); None: 'sqrt' for the default eta, else 'constant'",
    ),
    *TRACKING,
)


def setup(problem: CompositeProblem, hp: dict, run: RunOptions) -> Plan:
    domain, outer = problem.domain, problem.outer
    calculus = OuterCalculus(outer)
    model, sched = tracked_model(problem, hp, run), schedule_of(hp, run)
    eta, kind = hp["eta"], hp["step_size"] or ("sqrt" if hp["eta"] is None else "constant")

    def point(state: Tracked) -> tuple:
        """(z_k, x_k) as numpy, x_k only when F reads it (a dense copy of x is not free)."""
        return numpy(state.z), (numpy(state.y).reshape(domain.shape) if outer.depends_on_x else None)

    # Set-up (the first sample and the default step), not optimizer time, as for hmsfw.
    state = model.start(torch.as_tensor(problem.x0, dtype=run.dtype, device=run.device).reshape(-1))
    if eta is None:
        d0 = model.entries.chain_rule(state.V, calculus.subgradient(*point(state)))
        first = float(torch.linalg.vector_norm(d0))
        eta = domain.diameter / first if first > 0 and domain.diameter > 0 else 1.0
        eta *= warm_factor(problem, model, state.y, d0)
    step_size = rule(kind, eta)

    def psg_step(state: Tracked, k: int) -> tuple[Tracked, dict]:
        z, x = point(state)
        d = model.entries.chain_rule(state.V, calculus.subgradient(z, x))  # V_k^T g_u + g_x
        eta_k = step_size.step_size(k)
        x_next = project(domain, state.y - eta_k * d)
        row = {"objective_estimate": outer.value(z, x), "step": eta_k, "direction_norm": float(d.norm())}
        _, beta, rho = sched.at(k)
        return model.advance(state, x_next, beta, rho, k + 1), row

    info = {"eta": eta, "step_size": kind, "schedule": sched.name, "tracker": hp["tracker"]}
    return dense_plan(problem, model, psg_step, state, info)


PSG = register(
    Method(
        "psg",
        CompositeProblem,
        PARAMS,
        setup,
        "projected subgradient steps on the tracked model (HMSFW paper, baseline C1)",
        renamed={"step": "step_size"},  # Plan.step is the method's update
        per_sample=True,
    )
)


def psg(problem: CompositeProblem, **options: Any) -> Result:
    """Minimize F(f(x), x) over X by projected subgradient steps on the tracked model.

    Each iteration k: (g_u, g_x) in dF(z_k, x_k);
    x_{k+1} = P_X(x_k - eta_k (V_k^T g_u + g_x)); one sample at x_{k+1};
    V_{k+1} by the Jacobian ``tracker`` (beta), z_{k+1} by Taylor (rho), as in HMSFW.

    x is kept dense (a projection needs the whole point); a problem declaring
    ``reads=`` gets its Jacobians, and the model products, on those entries only.
    On sharded reads every rank keeps the whole dense x and its Jacobians on its own entries, and each step
    gathers the direction's values at the ranks' reads (as many numbers as they read): the data is sharded,
    the iterate is not.
    Hyperparameters: ``eta``, ``step_size`` ("constant" or "sqrt"), ``schedule``
    (tracker weights; only beta and rho are used), ``tracker`` and ``hessian_point`` (as for
    :func:`fullcomp.hmsfw`); shared options as for every method (``fc.describe("psg")`` lists both).

    History rows: ``objective_estimate`` = F(z_k, x_k), ``step`` = eta_k,
    ``direction_norm`` = ||V_k^T g_u + g_x||; the result also holds the trackers ``V`` and ``z``.
    """
    return solve(problem, "psg", **options)


__all__ = ["psg"]
