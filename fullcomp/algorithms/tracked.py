"""What the methods on the tracked model share: their options, the model built from them, warm starts, the
true objective, and the plan of a method that moves a dense point (PSG, prox-linear).

The model itself (samples, trackers, buffers) is :class:`fullcomp.oracles.tracked.TrackedModel`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles.tracked import HESSIAN_POINTS, JACOBIAN_TRACKERS, Tracked, TrackedModel
from fullcomp.run import Plan, Result, RunOptions
from fullcomp.schedules import HORIZON_SCHEDULES, THEORY, Schedule, resolve
from fullcomp.sets.base import Set
from fullcomp.steps import Halving, Line
from fullcomp.validation import CALLABLE, NONE, Instance, Interval, Options, Pair, Param

#: The tracker-weight option shared by every composite method.
SCHEDULE = Param(
    "schedule",
    (Instance((Schedule,), "a fc.Schedule"), Options(("paper", "exact", "vanilla", *THEORY)), CALLABLE, NONE),
    None,
    "step and tracker weights: None (the paper's), 'exact', 'vanilla', a theory schedule, a fc.Schedule or "
    "k -> (gamma, beta, rho)",
)
#: The Jacobian tracker's options, shared by every method on the tracked model.
TRACKING = (
    SCHEDULE,
    Param("tracker", (Options(JACOBIAN_TRACKERS),), "polyak", "Jacobian tracker: 'polyak', 'storm' or 'hessian'"),
    Param(
        "hessian_point",
        (Options(tuple(HESSIAN_POINTS)), Pair(Interval(float, 0, 1, "right"))),
        "uniform",
        "law of the Hessian tracker's point: 'uniform', 'beta' or a Beta shape (a, b), 0 < a, b <= 1",
    ),
)


def schedule_of(hp: dict, run: RunOptions, **theory: Any) -> Schedule:
    """The run's step and tracker weights from the ``schedule`` option (``theory``: what the theory
    schedules read, as :func:`fullcomp.schedules.resolve` takes it)."""
    schedule = hp["schedule"]
    iters = run.horizon if schedule in HORIZON_SCHEDULES else None
    return resolve(schedule, iters=iters, **{"exact": False, "tracker": hp["tracker"], **theory})


def tracked_model(problem: CompositeProblem, hp: dict, run: RunOptions, **options: Any) -> TrackedModel:
    """The tracked model a method's options ask for; ``options`` go to :class:`TrackedModel`."""
    point = HESSIAN_POINTS.get(hp["hessian_point"], hp["hessian_point"])
    return TrackedModel(
        problem, run.device, run.dtype, run.generator, jacobian=hp["tracker"], hessian_point=point, **options
    )


def numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64, copy=False)


def project(domain: Set, x: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of a flat iterate onto the domain, flat again."""
    return domain.project(x.reshape(domain.shape)).reshape(-1)


def true_objective(
    problem: CompositeProblem,
    model: TrackedModel,
    values: Callable[[Any], torch.Tensor],
    point: Callable[[Any], np.ndarray | None],
    known: Callable[[Any], torch.Tensor | None] | None = None,
) -> Callable | None:
    """phi at a state on ``full_batch`` (or the deterministic map); None when the problem cannot compute it.

    ``values(state)`` is the point the map reads (in the model's layout) and ``point(state)`` the dense point
    as numpy, read only when F depends on x.  ``known(state)``, when it returns a tensor, is f there on
    ``full_batch`` already (a tracker of weight 1 on the exact map): the map is then not evaluated again.
    """
    if problem.stochastic and problem.full_batch is None:
        return None
    outer = problem.outer

    def objective(state: Any) -> float:
        u = None if known is None else known(state)
        if u is None:
            u = model.value_at(values(state), problem.full_batch, "evaluating the objective")
        return outer.value(numpy(u), point(state) if outer.depends_on_x else None)

    return objective


def line_search(problem: CompositeProblem, model: TrackedModel, point_at: Callable[[float], torch.Tensor]) -> float:
    """The step of a warm start's first move (:class:`fullcomp.steps.Halving`) for phi(point_at(t)) on one batch
    (``full_batch`` when there is one); ``point_at(t)`` is in the model's layout."""
    exact = problem.full_batch is not None or not problem.stochastic
    batch = problem.full_batch if exact else problem.sample(model.generator)
    outer, shape = problem.outer, problem.domain.shape

    def phi(t: float) -> float:
        point = point_at(t)
        u = model.value_at(point, batch, "in the warm start's line search")
        return outer.value(numpy(u), numpy(point).reshape(shape) if outer.depends_on_x else None)

    return Halving().step_size(0, Line(phi, value=phi(0.0)))


def warm_factor(problem: CompositeProblem, model: TrackedModel, x: torch.Tensor, d: torch.Tensor) -> float:
    """t scaling a first move of one diameter along -d: 1 from the default start, the :func:`line_search`
    step for P_X(x - t D d / ||d||) from a warm start."""
    domain = problem.domain
    norm = float(torch.linalg.vector_norm(d))
    if not problem.warm_start or norm == 0 or domain.diameter == 0:
        return 1.0
    return line_search(problem, model, lambda t: project(domain, x - (t * domain.diameter / norm) * d))


def dense_plan(
    problem: CompositeProblem, model: TrackedModel, step: Callable, state: Tracked, info: dict, gap: str | None = None
) -> Plan:
    """The driver's plan for a method that moves a dense point on the tracked model: its result holds x, V, z."""
    outer, shape = problem.outer, problem.domain.shape

    def x_of(state: Tracked) -> np.ndarray | None:
        return numpy(state.y).reshape(shape) if outer.depends_on_x else None

    def finish(state: Tracked, history: Any, info: dict) -> Result:
        return Result(state.y.reshape(shape), history, info, V=state.V, z=state.z)

    return Plan(
        step,
        state,
        iterate=lambda s: s.y.reshape(shape),
        finish=finish,
        observe=lambda s, k: {"objective_estimate": outer.value(numpy(s.z), x_of(s))},
        objective=true_objective(problem, model, lambda s: s.y, x_of),
        info=info,
        gap=gap,
        sharded=problem.sharded,  # each rank's V is its own: every rank checkpoints
    )


__all__ = [
    "SCHEDULE",
    "TRACKING",
    "schedule_of",
    "tracked_model",
    "true_objective",
    "line_search",
    "warm_factor",
    "dense_plan",
    "numpy",
    "project",
]
