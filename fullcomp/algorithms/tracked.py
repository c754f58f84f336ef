"""What the methods on the tracked model share: their options, the model built from them, warm starts, the
readout of the composite family (the true objective, the weights F puts on each inner value, the trackers as
outputs) and the plan of a method that moves a dense point (PSG, prox-linear).

The model itself (samples, trackers, buffers) is :class:`fullcomp.oracles.tracked.TrackedModel`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np
import torch

from fullcomp.autodiff import dense
from fullcomp.model.calculus import OuterCalculus
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles.tracked import HESSIAN_POINTS, JACOBIAN_TRACKERS, Tracked, TrackedModel
from fullcomp.run import History, Plan, Readout, Result, RunOptions
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
        problem,
        run.device,
        run.dtype,
        run.generator,
        tracker=hp["tracker"],
        hessian_point=point,
        feed=run.feed,
        in_place=run.in_place,
        **options,
    )


def numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64, copy=False)


def project(domain: Set, x: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of a flat iterate onto the domain, flat again."""
    return domain.project(x.reshape(domain.shape)).reshape(-1)


def line_search(problem: CompositeProblem, model: TrackedModel, point_at: Callable[[float], torch.Tensor]) -> float:
    """The step of a warm start's first move (:class:`fullcomp.steps.Halving`) for phi(point_at(t)) on one batch
    (``full_batch`` when there is one); ``point_at(t)`` is in the model's layout."""
    exact = problem.full_batch is not None or not problem.stochastic
    batch = problem.full_batch if exact else model.feed.draw(problem)
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


#: Up to this many inner values, the history holds the weights F puts on each (columns q[0], q[1], ...).
WEIGHT_COLUMNS = 64


class TrackedReadout(Readout):
    """How a method on the tracked model reports a :class:`Tracked` state: F(z_k, x_k) in the final row,
    phi on ``full_batch`` (or the deterministic map) as the true objective, the weights F puts on each inner
    value at z_k (columns ``q[i]`` up to :data:`WEIGHT_COLUMNS` values, and ``result.weights`` at the final
    state), and the trackers V and z as outputs.

    The methods that move a dense point (PSG, prox-linear, a user's method on ``fc.TrackedModel``) use it as
    it is; HMSFW's readout extends it with its atomic iterate.  ``gap`` names the row's gap column.
    """

    outputs = {
        "V": "the Jacobian tracker V_k, n x the entries read",
        "z": "the value tracker z_k, f(x_k)'s estimate",
    }

    def __init__(self, problem: CompositeProblem, model: TrackedModel, gap: str | None = None):
        self.problem, self.model, self.outer = problem, model, problem.outer
        self.shape = problem.domain.shape
        if gap is not None:
            self.gap = gap
        self.last_weights: tuple[int, np.ndarray] | None = None  # (k, q) of the last evaluated row

    @cached_property
    def calculus(self) -> OuterCalculus:
        return OuterCalculus(self.outer)

    def iterate(self, state: Tracked) -> Any:
        return state.y.reshape(self.shape)

    def dense_x(self, state: Tracked) -> np.ndarray | None:
        """The dense point as numpy when F reads it, else None (a dense copy of x is not free)."""
        return numpy(state.y).reshape(self.shape) if self.outer.depends_on_x else None

    def known(self, state: Tracked) -> torch.Tensor | None:
        """f at the state on ``full_batch`` when the state holds it already (a tracker of weight 1 on the exact
        map), so that the map is not evaluated again; None otherwise."""
        return None

    def observe(self, state: Tracked, k: int) -> dict:
        return {"objective_estimate": self.outer.value(numpy(state.z), self.dense_x(state))}

    def objective(self, state: Tracked) -> float | None:
        """phi at the state on ``full_batch`` (or the deterministic map); None when the problem cannot say."""
        problem = self.problem
        if problem.stochastic and problem.full_batch is None:
            return None
        u = self.known(state)
        if u is None:
            u = self.model.value_at(state.y, problem.full_batch, "evaluating the objective")
        return self.outer.value(numpy(u), self.dense_x(state))

    def weights(self, state: Tracked) -> np.ndarray:
        """The weights F puts on each inner value at the state's z (and its iterate, when F reads x)."""
        z = numpy(state.z)
        if not self.outer.depends_on_x:
            return np.asarray(self.calculus.weights(z), dtype=np.float64)
        x = self.iterate(state)
        x = x.detach().cpu().double().numpy() if hasattr(x, "detach") else x
        return np.asarray(self.calculus.weights(z, x), dtype=np.float64)

    def evaluate(self, state: Tracked, k: int) -> dict:
        q = self.weights(state)
        self.last_weights = (k, q)
        return {f"q[{i}]": float(v) for i, v in enumerate(q)} if q.size <= WEIGHT_COLUMNS else {}

    def returned(self, state: Tracked) -> dict:
        return {"V": dense(state.V), "z": state.z}  # a sample kept as factors, written out

    def result(self, state: Tracked, history: History, info: dict) -> Result:
        """The Result, with ``weights`` when the final state's row evaluated them."""
        result = super().result(state, history, info)
        if self.last_weights is not None and self.last_weights[0] == info.get("iterations"):
            result.weights = self.last_weights[1]
        return result


def dense_plan(
    problem: CompositeProblem, model: TrackedModel, step: Callable, state: Tracked, info: dict, gap: str | None = None
) -> Plan:
    """The plan of a method that moves a dense point on the tracked model: its result holds x, V, z."""
    readout = TrackedReadout(problem, model, gap)
    return Plan(step, state, readout, info=info, sharded=problem.sharded)  # each rank's V is its own


__all__ = [
    "SCHEDULE",
    "TRACKING",
    "schedule_of",
    "tracked_model",
    "TrackedReadout",
    "WEIGHT_COLUMNS",
    "line_search",
    "warm_factor",
    "dense_plan",
    "numpy",
    "project",
]
