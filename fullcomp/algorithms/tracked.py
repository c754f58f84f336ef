"""Pieces shared by the projection-based and smoothed baselines (PSG, prox-linear, LiNASA+ICG).

The tracked model is HMSFW's: a Polyak Jacobian tracker V_k ~ J(x_k) and a
Taylor value tracker z_k ~ f(x_k), updated by one sample at each new iterate,
so that the baselines differ from HMSFW only in how they move x.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fullcomp import distributed
from fullcomp.autodiff import check_inner_output
from fullcomp.glmo.subgradient import OuterGradient
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles import InnerOracle
from fullcomp.run import Plan, Result, RunOptions
from fullcomp.schedules import HORIZON_SCHEDULES, THEORY, Schedule, resolve
from fullcomp.sets.base import Set
from fullcomp.trackers import polyak, taylor
from fullcomp.validation import CALLABLE, NONE, Instance, Options, Param

#: The tracker-weight option shared by every composite method.
SCHEDULE = Param(
    "schedule",
    (Instance((Schedule,), "a fc.Schedule"), Options(("paper", "exact", "vanilla", *THEORY)), CALLABLE, NONE),
    None,
    "step and tracker weights: None (the paper's), 'exact', 'vanilla', a theory schedule, a fc.Schedule or "
    "k -> (gamma, beta, rho)",
)


def true_objective(
    problem: CompositeProblem,
    values: Callable[[dict], torch.Tensor],
    point: Callable,
    known: Callable[[dict], torch.Tensor | None] | None = None,
) -> Callable | None:
    """phi at a state on ``full_batch`` (or the deterministic map); None when the problem cannot compute it.

    ``values(state)`` is what the map reads (the flat point, or its values at ``reads``) and
    ``point(state)`` the dense point as numpy, read only when F depends on x.  ``known(state)``, when it
    returns a tensor, is f there on ``full_batch`` already (a tracker of weight 1 on the exact map): the map
    is then not evaluated again.
    """
    if problem.stochastic and problem.full_batch is None:
        return None
    outer, n, shape = problem.outer, problem.n, problem.domain.shape

    def objective(state: dict) -> float:
        u = None if known is None else known(state)
        if u is None:
            read = values(state)
            with torch.no_grad():
                out = problem.inner(read.reshape(shape) if problem.reads is None else read, problem.full_batch)
            (u,) = distributed.mean(check_inner_output(out, n, "evaluating the objective"))  # each rank's shard
        return outer.value(numpy(u), point(state) if outer.depends_on_x else None)

    return objective


#: Halvings of the first step a warm start's line search tries (HMSFW's gamma_0, the baselines' first move).
WARM_HALVINGS = 10


def line_search(
    problem: CompositeProblem, value: Callable[[torch.Tensor, Any], torch.Tensor], point_at: Callable, generator: Any
) -> float:
    """The step t in {1, 1/2, ..., 2^-10} of a warm start's first move: the best t for phi(point_at(t)) on one
    batch (``full_batch`` when there is one), or the smallest when none beats t = 0, the start itself.

    From a start the user chose, a first step of gamma_0 = 1 (HMSFW) or of one diameter (the scale-free
    defaults of PSG, prox-linear and LiNASA) would throw the start away. ``value(point, batch)`` is f~ there.
    """
    exact = problem.full_batch is not None or not problem.stochastic
    batch = problem.full_batch if exact else problem.sample(generator)
    outer, shape = problem.outer, problem.domain.shape

    def phi(t: float) -> float:
        point = point_at(t)
        return outer.value(numpy(value(point, batch)), numpy(point).reshape(shape) if outer.depends_on_x else None)

    steps = [2.0**-i for i in range(WARM_HALVINGS + 1)]
    values = [phi(t) for t in steps]
    best = int(np.argmin(values))
    return steps[best] if values[best] <= phi(0.0) else steps[-1]


def warm_factor(problem: CompositeProblem, inner: InnerMap, x: torch.Tensor, d: torch.Tensor, generator: Any) -> float:
    """t scaling a first move of one diameter along -d: 1 from the default start, the :func:`line_search`
    step for P_X(x - t D d / ||d||) from a warm start."""
    domain = problem.domain
    norm = float(torch.linalg.vector_norm(d))
    if not problem.warm_start or norm == 0 or domain.diameter == 0:
        return 1.0
    return line_search(
        problem,
        lambda point, batch: inner.value(point, batch, 0),
        lambda t: project(domain, x - (t * domain.diameter / norm) * d),
        generator,
    )


def numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64, copy=False)


def project(domain: Set, x: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of a flat iterate onto the domain, flat again."""
    return domain.project(x.reshape(domain.shape)).reshape(-1)


class InnerMap:
    """The sampled inner map as a dense-iterate method sees it: samples at x, and the chain rule back to x.

    A problem declaring ``reads=`` is called on x's values at those entries, so
    its Jacobian is n x |reads| instead of n x d and the model products
    V (x - x_k) read only those entries; the iterate itself stays dense,
    because a projection or a Frank-Wolfe step over X needs the whole point.
    On sharded reads (a rank's own entries) the Jacobian stays the rank's own, and the chain rule sums the
    ranks' dense parts of V^T g: every rank holds the same dense iterate and projects it identically.
    """

    def __init__(self, problem: CompositeProblem, device: str | torch.device, dtype: torch.dtype):
        self.problem, self.dtype = problem, dtype
        domain = problem.domain
        self.size = domain.size
        if problem.reads is None:
            self.index = None
            self.oracle = InnerOracle(problem.inner, problem.n, domain.shape, device, dtype)
        else:
            self.index = torch.as_tensor(problem.reads.flat, device=device)
            columns = "own" if problem.sharded else "touched"
            self.oracle = InnerOracle(problem.inner, problem.n, (len(problem.reads),), device, dtype, columns=columns)
        # On sharded reads, every rank's read positions (disjoint, gathered once, in rank order) and their
        # counts: where adjoint() puts the ranks' values.
        self._every_read: tuple[torch.Tensor, list[int]] | None = None
        if problem.sharded and self.index is not None:
            every = distributed.gather_parts(self.index)
            self._every_read = (torch.cat(every), [len(i) for i in every])

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """The entries of a flat point (or step) that the map reads: all of it, or those at ``reads``."""
        return x if self.index is None else x[self.index]

    def spread(self, v: torch.Tensor) -> torch.Tensor:
        """The adjoint of :meth:`read`: a vector on the read entries as a dense flat vector."""
        if self.index is None:
            return v
        return torch.zeros(self.size, dtype=v.dtype, device=v.device).index_add(0, self.index, v)

    def sample(self, x: torch.Tensor, batch: Any, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """f~(x) and its Jacobian (n x read entries) on one batch."""
        return self.oracle(self.read(x), batch, k)

    def value(self, x: torch.Tensor, batch: Any, k: int) -> torch.Tensor:
        """f~(x) alone, without the Jacobian pass."""
        x_in = self.read(x) if self.index is not None else x.reshape(self.problem.domain.shape)
        with torch.no_grad():
            out = self.problem.inner(x_in, batch)
        value = check_inner_output(out, self.problem.n, f"at iteration {k}").detach().to(self.dtype)
        return distributed.mean(value)[0]

    def image(self, V: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """V step: the model's change of f along a flat step, over every rank's entries when sharded."""
        change = V @ self.read(step)
        return distributed.total(change) if self.problem.sharded else change

    def adjoint(self, V: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """V^T w as a dense flat vector.  On sharded reads each rank's part lives on its own entries: the
        ranks gather their parts' values (as many numbers as they read, not an all-reduce of P Q: PSG sent
        0.70 against 12.69 MB per update on 943 x 1682 with 100,000 ratings), the same bits as the sum, since
        each entry is one rank's."""
        if self._every_read is None:
            return self.spread(V.T @ w)
        index, counts = self._every_read
        values = torch.cat(distributed.gather_parts(V.T @ w, counts))
        return torch.zeros(self.size, dtype=V.dtype, device=V.device).index_add(0, index, values)

    def gram(self, V: torch.Tensor) -> torch.Tensor:
        """V V^T (n x n), over every rank's entries when sharded."""
        G = V @ V.T
        return distributed.total(G) if self.problem.sharded else G

    def chain_rule(self, V: torch.Tensor, g: OuterGradient) -> torch.Tensor:
        """V^T g_u + g_x as a dense flat vector: the (sub)gradient of x -> F(z + V (x - y), x) at x = y."""
        d = self.adjoint(V, torch.as_tensor(g.u, dtype=V.dtype, device=V.device))
        if g.x is not None:
            d = d + torch.as_tensor(g.x, dtype=V.dtype, device=V.device)
        return d


class TrackedModel:
    """HMSFW's trackers on a sampled inner map: the affine model z_k + V_k (x - x_k) of f around x_k.

    ``schedule`` gives the tracker weights exactly as for :func:`fullcomp.hmsfw`
    (its Frank-Wolfe step gamma is not used): None is the paper's
    beta_k = (k+21)^(-2/3), rho_k = 2/(k+2); "exact" (beta = rho = 1) keeps
    only the newest sample.
    """

    def __init__(self, problem: CompositeProblem, schedule: Any, run: RunOptions):
        self.problem, self.device, self.dtype, self.generator = problem, run.device, run.dtype, run.generator
        self.schedule: Schedule = resolve(
            schedule, iters=run.horizon if schedule in HORIZON_SCHEDULES else None, exact=False
        )
        self.inner = InnerMap(problem, run.device, run.dtype)

    def start(self) -> dict:
        """Sample at x_0: {"x", "x_prev", "V", "z"} with V_0, z_0 the first sample."""
        x0 = torch.as_tensor(self.problem.x0, dtype=self.dtype, device=self.device).reshape(-1)
        value, jac = self.inner.sample(x0, self.problem.sample(self.generator), 0)
        return {"x": x0, "x_prev": x0, "V": jac, "z": value}

    def advance(self, state: dict, x_next: torch.Tensor, k: int) -> dict:
        """Move to x_{k+1}: one sample there, V by Polyak (beta), z by Taylor (rho)."""
        _, beta, rho = self.schedule.at(k)
        value, jac = self.inner.sample(x_next, self.problem.sample(self.generator), k + 1)
        V = polyak(state["V"], jac, beta)
        total = distributed.total if self.problem.sharded else None  # V (x_next - x) over every rank's entries
        z = taylor(state["z"], V, self.inner.read(x_next), self.inner.read(state["x"]), value, rho, total)
        return {**state, "x": x_next, "x_prev": state["x"], "V": V, "z": z}

    def plan(self, step: Callable, state: dict, info: dict, gap: str | None = None) -> Plan:
        """The driver's plan for a method that moves a dense x on this model: its result holds x, V and z."""
        problem, outer, shape = self.problem, self.problem.outer, self.problem.domain.shape

        def estimate(state: dict, k: int) -> dict:
            dense = numpy(state["x"]).reshape(shape) if outer.depends_on_x else None
            return {"objective_estimate": outer.value(numpy(state["z"]), dense)}

        def finish(state: dict, history: Any, info: dict) -> Result:
            return Result(state["x"].reshape(shape), history, info, V=state["V"], z=state["z"])

        return Plan(
            step,
            state,
            iterate=lambda s: s["x"].reshape(shape),
            finish=finish,
            observe=estimate,
            objective=true_objective(
                problem, lambda s: self.inner.read(s["x"]), lambda s: numpy(s["x"]).reshape(shape)
            ),
            info={**info, "schedule": self.schedule.name},
            gap=gap,
            sharded=problem.sharded,  # each rank's V is its own: every rank checkpoints
        )


__all__ = ["TrackedModel", "InnerMap", "SCHEDULE", "true_objective", "numpy", "project"]
