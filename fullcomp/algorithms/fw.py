"""Deterministic Frank-Wolfe with away and (blended) pairwise steps (Lacoste-Julien and Jaggi 2015; Tsuji,
Tanaka and Pokutta 2022) for phi(x) = F(f(x), x) over a polytope.

Vanilla Frank-Wolfe zig-zags when the optimum lies on a face of a polytope: every step moves towards a
vertex, so the weight of a vertex off the optimal face only shrinks by a factor 1 - gamma_k per step, the
steps alternate between the face's vertices, and the error decays like O(1/k).  Keeping the iterate as a
convex combination of vertices (the active set S, weights w_a) allows moving away from the worst of them,
and on a strongly convex phi the error then decays linearly.  With the gradient
g = grad phi(x_k) = J(x_k)^T grad_u F(f(x_k), x_k) + grad_x F, one step is

    v = LMO(g)                          Frank-Wolfe vertex;  gap = <g, x - v>
    a = argmax_{a in S} <g, a>          away vertex
    corrective:
    vanilla           d = v - x,  gamma_max = 1
    away              d = v - x,  gamma_max = 1                  if gap >= <g, a - x>   (a Frank-Wolfe step)
                      d = x - a,  gamma_max = w_a / (1 - w_a)    otherwise              (an away step)
    pairwise          d = v - a,  gamma_max = w_a
    blended-pairwise  d = s - a,  gamma_max = w_a, s = argmin_{s in S} <g, s>  if <g, a - s> >= gap  (local)
                      d = v - x,  gamma_max = 1                                 otherwise
    x_{k+1} = x_k + gamma d,  gamma in [0, gamma_max] by the line search;  the weights follow, and a vertex
    whose weight reaches 0 leaves S (a drop step: gamma = gamma_max)

FrankWolfe.jl calls the away and pairwise steps corrective, hence the option's name.  The active set is a
:class:`~fullcomp.sets.atoms.AtomicForm`, the line search a rule of :mod:`fullcomp.steps`.

F must be differentiable (its CVXPY atoms smooth, :func:`kink` says which one is not), for the gradient and
the away vertex.  For a non-smooth F (``cp.max``, ``fc.cvar``) only ``corrective="vanilla"`` runs: the Frank-Wolfe
point is then the GLMO's, the minimizer of the linearized model F(f(x_k) + J (x - x_k), x) over X, as in
``hmsfw(exact=True)``, and the step's decrease is phi(x_k) minus the model's value there.  Away and pairwise
steps need a polytope (a set with ``polytope = True``), whose LMO returns one of finitely many vertices.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from fullcomp.algorithms.method import Method, Plan, register, solve
from fullcomp.algorithms.tracked import numpy
from fullcomp.errors import OptionError, OracleError
from fullcomp.glmo import build_glmo
from fullcomp.model.calculus import kink, outer_gradient
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles import InnerOracle
from fullcomp.oracles.entries import EntryMap
from fullcomp.run import Readout, Result, RunOptions
from fullcomp.serial import encodable
from fullcomp.sets.atoms import AtomicForm
from fullcomp.steps import Adaptive, Line, ShortStep
from fullcomp.validation import NONE, Options, Param, positive

CORRECTIVE = ("vanilla", "away", "pairwise", "blended-pairwise")
PARAMS = (
    Param(
        "corrective",
        (Options(CORRECTIVE),),
        "away",
        "'vanilla', 'away' (Lacoste-Julien and Jaggi 2015, Algorithm 1), 'pairwise' (Algorithm 2) or "
        "'blended-pairwise' (Tsuji, Tanaka and Pokutta 2022); all but 'vanilla' need a smooth F and a polytope",
    ),
    Param(
        "line_search",
        (Options(("adaptive", "short")),),
        "adaptive",
        "'adaptive' (fullcomp.steps.Adaptive): the short step for an estimate of L, raised until phi decreases as "
        "an L-smooth function would; 'short' (fullcomp.steps.ShortStep): min(gamma_max, <-g, d> / (L ||d||^2)) for "
        "the given L",
    ),
    Param(
        "L",
        (positive(), NONE),
        None,
        "smoothness constant of phi along the steps; needed by line_search='short', the first estimate of 'adaptive' "
        "(None: the one whose short step is the whole first step)",
    ),
)


@encodable
@dataclass
class FWState:
    """x, the line search's smoothness estimate L, and on a polytope the active set (None where none is kept)."""

    x: torch.Tensor
    L: float | None
    active: AtomicForm | None = None


def refuse(problem: CompositeProblem, hp: dict) -> bool:
    """Whether F is smooth, after refusing what fw cannot run, each refusal naming its fix."""
    corrective, domain = hp["corrective"], problem.domain
    if problem.stochastic and problem.full_batch is None:
        raise OptionError(
            "fw is deterministic: a stochastic problem needs CompositeProblem(full_batch=...) for the exact f "
            "(or a stochastic method such as hmsfw)"
        )
    if problem.sharded:
        raise OptionError("fw keeps the whole iterate on every process; a sharded problem needs hmsfw")
    if hp["line_search"] == "short" and hp["L"] is None:
        raise OptionError("fw: line_search='short' needs L=, the smoothness constant of phi along the steps")
    rough = kink(problem.outer.expr)
    if corrective != "vanilla" and rough is not None:
        raise OptionError(
            f"fw: corrective={corrective!r} needs a differentiable F, and F has the kink {type(rough).__name__} in "
            f"`{str(rough)[:60]}`; use corrective='vanilla' (the GLMO's Frank-Wolfe point) or a smooth F "
            "(cp.sum_squares, cp.log_sum_exp, ...)"
        )
    if corrective != "vanilla" and not domain.polytope:
        raise OptionError(
            f"fw: corrective={corrective!r} needs a polytope (a set with polytope = True: fc.Simplex, fc.L1Ball, "
            f"fc.Box, fc.CappedSimplex, fc.Birkhoff, ...), whose LMO returns one of finitely many vertices; "
            f"{type(domain).__name__} is not one: use corrective='vanilla'"
        )
    return rough is None


class FrankWolfe:
    """The steps of fw on one problem: phi and its gradient on the exact map, the LMO (or for a non-smooth F
    the GLMO on the linearized model), and the step size from the line search's rule."""

    def __init__(self, problem: CompositeProblem, hp: dict, run: RunOptions, smooth: bool):
        self.problem, self.outer, self.domain, self.shape = problem, problem.outer, problem.domain, problem.domain.shape
        self.corrective, self.batch = hp["corrective"], problem.full_batch
        self.device, self.dtype = run.device, run.dtype
        self.entries = EntryMap(problem, run.device)
        self.rule = ShortStep(hp["L"]) if hp["line_search"] == "short" else Adaptive(torch.finfo(run.dtype).eps)
        self.solver = self.oracle = None
        self.scale = 1.0  # the GLMO's tolerance is relative to |phi(x0)|, as hmsfw's
        if not smooth:
            self.solver = build_glmo(self.outer, self.domain, device=run.device)
            self.oracle = InnerOracle(self.declared, self.outer.n, (self.domain.size,), run.device, run.dtype)
            x0 = np.asarray(problem.x0, dtype=np.float64).reshape(-1)
            self.scale = abs(self.phi(self.tensor(x0), "at x0")) or 1.0

    def inner(self, x: torch.Tensor, batch: Any) -> torch.Tensor:
        """f~ at a flat point, given the values it reads in the shape it reads them."""
        return self.problem.inner(self.entries.read(x).reshape(self.entries.shape), batch)

    def declared(self, x: torch.Tensor, batch: Any) -> Any:
        """The map as declared at a flat point (the GLMO's oracle's map): an ``fc.Grouped`` stays one, for the
        oracle to take its gradients by its groups."""
        return self.problem.inner_declared(self.entries.read(x).reshape(self.entries.shape), batch)

    def tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=self.dtype, device=self.device)

    def dense(self, x: torch.Tensor) -> np.ndarray | None:
        """x as F reads it, None when F does not."""
        return numpy(x).reshape(self.shape) if self.outer.depends_on_x else None

    def phi(self, x: torch.Tensor, where: str) -> float:
        """phi(x) = F(f(x), x) on the exact map."""
        u = self.entries.call(self.entries.read(x), self.batch, self.dtype, where)
        return self.outer.value(numpy(u), self.dense(x))

    def first_order(self, x: torch.Tensor, k: int) -> tuple[float, np.ndarray]:
        """phi(x) and its gradient J^T grad_u F + grad_x F, by one backward pass of the map."""
        u, pullback = self.entries.pullback(x, self.batch, self.dtype, f"at iteration {k}")
        g_u, g_x = outer_gradient(self.outer, numpy(u), self.dense(x))
        g = numpy(pullback(g_u)) + (0.0 if g_x is None else g_x)
        if not np.isfinite(g).all():
            raise OracleError(f"the gradient of phi has NaN or Inf entries at iteration {k}")
        return self.outer.value(numpy(u), self.dense(x)), g

    def lmo(self, g: np.ndarray) -> np.ndarray:
        return np.asarray(self.domain.lmo_unchecked(g.reshape(self.shape)), dtype=np.float64).reshape(-1)

    def step_size(
        self, state: FWState, phi_x: float, d: np.ndarray, decrease: float, gamma_max: float, k: int
    ) -> tuple[float, float | None]:
        """(gamma, L): the rule's step along d in [0, gamma_max] and the smoothness estimate it leaves."""
        x, move = state.x, self.tensor(d)
        phi = lambda gamma: self.phi(x + gamma * move, f"in the line search at iteration {k}")  # noqa: E731
        line = Line(phi, phi_x, decrease, float(d @ d), gamma_max, state.L)
        return self.rule.step_size(k, line), line.L

    def direction(self, S: AtomicForm, x: np.ndarray, v: np.ndarray, g: np.ndarray) -> tuple:
        """(kind, d, gamma_max, a, s, gap): the step's direction by the docstring's box, with the away atom a, the
        local Frank-Wolfe atom s and the Frank-Wolfe gap."""
        a, s, scores = S.extremes(g)  # <g, a> largest and smallest over the active set
        gap, away_gap = float(g @ x - g @ v), float(scores[a] - g @ x)
        w_a, rows = S.weights()[a], S.rows()
        if self.corrective == "away" and away_gap > gap and w_a < 1:
            return "away", x - rows[a], w_a / (1 - w_a), a, s, gap
        if self.corrective == "pairwise":
            return "pairwise", v - rows[a], w_a, a, s, gap
        if self.corrective == "blended-pairwise" and scores[a] - scores[s] >= gap:
            return "local", rows[s] - rows[a], w_a, a, s, gap
        return "fw", v - x, 1.0, a, s, gap

    def corrective_step(self, state: FWState, k: int) -> tuple[FWState, dict]:
        """The box of the module's docstring: Lacoste-Julien and Jaggi (2015), Algorithms 1 and 2, and BPCG."""
        S, x = state.active, numpy(state.x)
        phi_x, g = self.first_order(state.x, k)
        v = self.lmo(g)  # Frank-Wolfe vertex
        kind, d, gamma_max, a, s, gap = self.direction(S, x, v, g)
        gamma, L = self.step_size(state, phi_x, d, float(-(g @ d)), gamma_max, k)
        if kind == "fw":  # (1 - gamma) x + gamma v
            moved = S.toward(v, gamma)
        elif kind == "away":  # (1 + gamma) x - gamma a
            moved = S.away(a, gamma)
        else:  # x + gamma (v - a): weight gamma moves from a to v (to s, already active, for a local step)
            moved = S.shift(a, S.rows()[s] if kind == "local" else v, gamma)
        active = moved.drop(a) if gamma == gamma_max and kind != "fw" else moved.pruned()
        row = {"objective_estimate": phi_x, "gap": gap, "gamma": gamma, "away_step": int(kind != "fw")}
        row.update(drop=int(len(active) < len(moved)), atoms=len(S))
        return FWState(self.tensor(active.point()), L, active), row

    def gradient_step(self, state: FWState, k: int) -> tuple[FWState, dict]:
        """Vanilla Frank-Wolfe on a set with infinitely many extreme points: no active set is kept."""
        x = state.x
        phi_x, g = self.first_order(x, k)
        d = self.lmo(g) - numpy(x)
        gap = float(-(g @ d))
        gamma, L = self.step_size(state, phi_x, d, gap, 1.0, k)
        row = {"objective_estimate": phi_x, "gap": gap, "gamma": gamma}
        return replace(state, x=x + gamma * self.tensor(d), L=L), row

    def linear_model(self, state: FWState, k: int) -> tuple[dict, Any, float]:
        """One GLMO on the linearization F(f(x_k) + J (x - x_k), x); the row describing x_k."""
        x = state.x
        value, jac = self.oracle(x, self.batch, k)
        res = self.solver.solve(numpy(value), numpy(jac), numpy(x), tol=0.01 * self.scale / (k + 2))
        phi_x = self.outer.value(numpy(value), self.dense(x))
        row = {"objective_estimate": phi_x, "gap": phi_x - res.value, "glmo_gap": res.gap_bound}
        row["pricing_calls"] = res.calls
        return row, res, phi_x

    def glmo_step(self, state: FWState, k: int) -> tuple[FWState, dict]:
        """Vanilla Frank-Wolfe for a non-smooth F: towards the GLMO's point, by the model's decrease."""
        row, res, phi_x = self.linear_model(state, k)
        x = state.x
        d = np.asarray(res.x, dtype=np.float64).reshape(-1) - numpy(x)
        gamma, L = self.step_size(state, phi_x, d, row["gap"], 1.0, k)
        row["gamma"] = gamma
        return replace(state, x=x + gamma * self.tensor(d), L=L), row

    def observe(self, state: FWState, k: int) -> dict:
        if self.solver is not None:
            return self.linear_model(state, k)[0]
        phi_x, g = self.first_order(state.x, k)
        row = {"objective_estimate": phi_x, "gap": float(g @ (numpy(state.x) - self.lmo(g)))}
        if state.active is not None:
            row["atoms"] = len(state.active)
        return row


def setup(problem: CompositeProblem, hp: dict, run: RunOptions) -> Plan:
    smooth = refuse(problem, hp)
    fw = FrankWolfe(problem, hp, run, smooth)
    x0 = np.asarray(problem.x0, dtype=np.float64).reshape(-1)
    # On a polytope the active set starts as x0, an atom of its own.
    state = FWState(fw.tensor(x0), hp["L"], AtomicForm.vertex(x0) if smooth and problem.domain.polytope else None)
    step = fw.glmo_step if not smooth else fw.corrective_step if state.active is not None else fw.gradient_step
    direction = "gradient" if smooth else "glmo"
    info = {"corrective": hp["corrective"], "line_search": hp["line_search"], "direction": direction}
    if fw.solver is not None:
        info["glmo_route"] = fw.solver.route
    return Plan(step, state, FWReadout(fw), components={} if fw.solver is None else {"glmo": fw.solver}, info=info)


class FWReadout(Readout):
    """fw's states reported: the exact phi, the final state's gap, the active set and L as outputs."""

    outputs = {
        "atoms": "the active set [(vertex, weight)] (on a polytope with a smooth F)",
        "L": "the line search's last estimate of the smoothness constant",
    }
    gap = progress = "gap"

    def __init__(self, fw: FrankWolfe):
        self.fw, self.shape = fw, fw.shape

    def iterate(self, state: FWState) -> torch.Tensor:
        return state.x.reshape(self.shape)

    def observe(self, state: FWState, k: int) -> dict:
        return self.fw.observe(state, k)

    def objective(self, state: FWState) -> float:
        return self.fw.phi(state.x, "evaluating the objective")

    def returned(self, state: FWState) -> dict:
        if state.active is None:
            return {"L": state.L}
        return {"L": state.L, "atoms": [(a.dense().reshape(self.shape), w) for a, w in state.active.pairs()]}


FW = register(
    Method(
        "fw",
        CompositeProblem,
        PARAMS,
        setup,
        "deterministic Frank-Wolfe with away or (blended) pairwise steps (Lacoste-Julien and Jaggi 2015)",
        renamed={"step": "corrective"},  # Plan.step is the method's update
    )
)


def fw(problem: CompositeProblem, **options: Any) -> Result:
    """Minimize phi(x) = F(f(x), x) over X by deterministic Frank-Wolfe steps, with away or pairwise steps.

    The module's docstring gives the step.  Hyperparameters (``fc.describe("fw")`` lists them): ``corrective``
    ("vanilla", "away" (default), "pairwise", "blended-pairwise"), ``line_search`` ("adaptive", "short"),
    ``L``; the shared ``gap_tol`` stops at a Frank-Wolfe gap below it; shared options as for every method.
    The map is ``problem.full_batch`` (or the deterministic map).  All but "vanilla" need a differentiable F
    and a polytope X (``fc.Simplex``, ``fc.L1Ball``, ``fc.Box``, the other sets with ``polytope = True``);
    on a strongly convex phi they converge linearly where vanilla Frank-Wolfe's error decays like O(1/k)
    (its zig-zag when the optimum lies on a face).

    History rows: ``objective_estimate`` = phi(x_k) (exact), ``gap`` = <g, x_k - v>, the Frank-Wolfe gap
    (for a non-smooth F, phi(x_k) minus the GLMO's model value, with ``glmo_gap`` and ``pricing_calls``),
    ``gamma``, and on a polytope ``away_step`` (1 for an away, pairwise or local step), ``drop`` (1 when a
    vertex left the active set) and ``atoms`` (its size).  The result holds ``atoms``, the active set as
    [(vertex, weight)] (on a polytope with a smooth F), and ``L``, the line search's last estimate.
    """
    return solve(problem, "fw", **options)


__all__ = ["fw", "kink", "CORRECTIVE"]
