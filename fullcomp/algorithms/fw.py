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
    vanilla           d = v - x,  gamma_max = 1
    away              d = v - x,  gamma_max = 1                  if gap >= <g, a - x>   (a Frank-Wolfe step)
                      d = x - a,  gamma_max = w_a / (1 - w_a)    otherwise              (an away step)
    pairwise          d = v - a,  gamma_max = w_a
    blended-pairwise  d = s - a,  gamma_max = w_a, s = argmin_{s in S} <g, s>  if <g, a - s> >= gap  (local)
                      d = v - x,  gamma_max = 1                                 otherwise
    x_{k+1} = x_k + gamma d,  gamma in [0, gamma_max] by the line search;  the weights follow, and a vertex
    whose weight reaches 0 leaves S (a drop step: gamma = gamma_max)

F must be differentiable (its CVXPY atoms smooth, :func:`kink` says which one is not), for the gradient and
the away vertex.  For a non-smooth F (``cp.max``, ``fc.cvar``) only ``step="vanilla"`` runs: the Frank-Wolfe
point is then the GLMO's, the minimizer of the linearized model F(f(x_k) + J (x - x_k), x) over X, as in
``hmsfw(exact=True)``, and the step's decrease is phi(x_k) minus the model's value there.  Away and pairwise
steps need a polytope (a set with ``polytope = True``), whose LMO returns one of finitely many vertices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import cvxpy as cp
import numpy as np
import torch
from cvxpy.transforms.partial_optimize import PartialProblem

from fullcomp.algorithms.method import Method, Plan, register, solve
from fullcomp.algorithms.tracked import numpy
from fullcomp.autodiff import check_inner_output, gradient
from fullcomp.errors import OptionError, OracleError
from fullcomp.glmo import build_glmo
from fullcomp.model.composite import CompositeProblem, Outer
from fullcomp.oracles import InnerOracle
from fullcomp.oracles.entries import EntryMap
from fullcomp.run import Readout, Result, RunOptions
from fullcomp.serial import encodable
from fullcomp.sets.base import Set
from fullcomp.validation import NONE, Options, Param, positive

STEPS = ("vanilla", "away", "pairwise", "blended-pairwise")
#: Non-affine CVXPY atoms differentiable on the interior of their domain, by class name (a subclass, such as
#: CVXPY's PowerApprox of Power, counts as its base).
SMOOTH_ATOMS = frozenset(
    ("Power", "power", "quad_over_lin", "QuadForm", "SymbolicQuadForm", "log_sum_exp", "exp", "logistic", "huber")
    + ("log", "log1p", "entr", "kl_div", "rel_entr", "xexp")
)
#: The adaptive step (Pedregosa, Negiar, Askari and Jaggi 2020): each step first tries DECREASE * L, and
#: multiplies L by INCREASE until the step decreases phi as an L-smooth function would, at most BACKTRACKS times.
DECREASE, INCREASE, BACKTRACKS = 0.9, 2.0, 60

PARAMS = (
    Param(
        "step",
        (Options(STEPS),),
        "away",
        "'vanilla', 'away' (Lacoste-Julien and Jaggi 2015, Algorithm 1), 'pairwise' (Algorithm 2) or "
        "'blended-pairwise' (Tsuji, Tanaka and Pokutta 2022); all but 'vanilla' need a smooth F and a polytope",
    ),
    Param(
        "line_search",
        (Options(("adaptive", "short")),),
        "adaptive",
        "'adaptive': the short step for an estimate of L, raised until phi decreases as an L-smooth function would; "
        "'short': the short step min(gamma_max, <-g, d> / (L ||d||^2)) for the given L",
    ),
    Param(
        "L",
        (positive(), NONE),
        None,
        "smoothness constant of phi along the steps; needed by line_search='short', the first estimate of 'adaptive' "
        "(None: the one whose short step is the whole first step)",
    ),
)


def kink(expr: cp.Expression) -> cp.Expression | None:
    """The first sub-expression of F that is not differentiable (neither affine nor a smooth atom), or None."""
    if isinstance(expr, PartialProblem):
        return expr
    if isinstance(expr, cp.atoms.atom.Atom) and not expr.is_atom_affine():
        if not any(cls.__name__ in SMOOTH_ATOMS for cls in type(expr).__mro__):
            return expr
    for arg in getattr(expr, "args", []):
        found = kink(arg)
        if found is not None:
            return found
    return None


def is_polytope(domain: Set) -> bool:
    return domain.polytope


def outer_gradient(outer: Outer, u: np.ndarray, x: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(grad_u F, grad_x F flat or None) at (u, x), from CVXPY's gradients of F's atoms."""
    if outer.linear is not None:
        return outer.linear[0], None
    outer.u.save_value(np.asarray(u, dtype=np.float64))
    if outer.depends_on_x:
        outer.domain.variable.value = x
    grads = outer.expr.grad

    def dense(var: cp.Variable) -> np.ndarray:
        g = grads.get(var)
        if g is None:
            return np.zeros(var.size)
        g = np.asarray(g.todense() if hasattr(g, "todense") else g, dtype=np.float64)
        return g.reshape(var.shape, order="F").reshape(-1)  # CVXPY stacks a variable's entries column by column

    if grads is None or any(g is None for g in grads.values()):
        raise OracleError(f"F has no gradient at u = {np.array2string(u, precision=4)}: outside its domain")
    return dense(outer.u), dense(outer.domain.variable) if outer.depends_on_x else None


@encodable
@dataclass
class FWState:
    """x, the line search's smoothness estimate L, and on a polytope the active set: its vertices as rows and
    their weights (None where no active set is kept)."""

    x: torch.Tensor
    L: float
    vertices: np.ndarray | None = None
    weights: np.ndarray | None = None


def setup(problem: CompositeProblem, hp: dict, run: RunOptions) -> Plan:
    step_kind, line_search = hp["step"], hp["line_search"]
    domain, outer, device, dtype = problem.domain, problem.outer, run.device, run.dtype
    if problem.stochastic and problem.full_batch is None:
        raise OptionError(
            "fw is deterministic: a stochastic problem needs CompositeProblem(full_batch=...) for the exact f "
            "(or a stochastic method such as hmsfw)"
        )
    if problem.sharded:
        raise OptionError("fw keeps the whole iterate on every process; a sharded problem needs hmsfw")
    if line_search == "short" and hp["L"] is None:
        raise OptionError("fw: line_search='short' needs L=, the smoothness constant of phi along the steps")
    rough = kink(outer.expr)
    smooth, polytope = rough is None, is_polytope(domain)
    if step_kind != "vanilla" and not smooth:
        raise OptionError(
            f"fw: step={step_kind!r} needs a differentiable F, and F has the kink {type(rough).__name__} in "
            f"`{str(rough)[:60]}`; use step='vanilla' (the GLMO's Frank-Wolfe point) or a smooth F "
            "(cp.sum_squares, cp.log_sum_exp, ...)"
        )
    if step_kind != "vanilla" and not polytope:
        raise OptionError(
            f"fw: step={step_kind!r} needs a polytope (a set with polytope = True: fc.Simplex, fc.L1Ball, fc.Box, "
            f"fc.CappedSimplex, fc.Birkhoff, ...), whose LMO returns one of finitely many vertices; "
            f"{type(domain).__name__} is not one: use step='vanilla'"
        )
    batch, entries = problem.full_batch, EntryMap(problem, device)
    n, shape = outer.n, domain.shape

    def at(x: torch.Tensor) -> torch.Tensor:
        """What the map reads of a flat point, in the shape it reads it."""
        return entries.read(x).reshape(entries.shape)

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=dtype, device=device)

    def dense(x: torch.Tensor) -> np.ndarray | None:
        return numpy(x).reshape(shape) if outer.depends_on_x else None

    def call(x: torch.Tensor, where: str) -> torch.Tensor:
        try:
            out = problem.inner(at(x), batch)
        except (RuntimeError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise OracleError(f"inner(x, batch) raised {type(exc).__name__} {where}: {exc}") from exc
        return check_inner_output(out, n, where)

    def phi(x: torch.Tensor, where: str) -> float:
        """phi(x) = F(f(x), x) on the exact map."""
        with torch.no_grad():
            u = entries.mean(call(x, where).detach().to(dtype))
        return outer.value(numpy(u), dense(x))

    def first_order(x: torch.Tensor, k: int) -> tuple[float, np.ndarray]:
        """phi(x) and its gradient J^T grad_u F + grad_x F, by one backward pass of the map."""
        point = x.detach().requires_grad_(True)
        with torch.enable_grad():
            out = call(point, f"at iteration {k}")
            u = entries.mean(out.detach().to(dtype))
            g_u, g_x = outer_gradient(outer, numpy(u), dense(x))
            grad = None
            if out.requires_grad:  # a map constant in x (or one that detached it) has a zero gradient
                weights = torch.as_tensor(g_u, dtype=out.dtype, device=out.device)
                (grad,) = gradient((out * weights).sum(), (point,))
            grad = torch.zeros_like(point) if grad is None else grad
        grad = entries.mean(grad.detach().to(dtype))
        g = numpy(grad) + (0.0 if g_x is None else g_x)
        if not np.isfinite(g).all():
            raise OracleError(f"the gradient of phi has NaN or Inf entries at iteration {k}")
        return outer.value(numpy(u), dense(x)), g

    def step_size(x: torch.Tensor, phi_x: float, d: np.ndarray, decrease: float, gamma_max: float, L, k: int):
        """(gamma, L): the short step min(gamma_max, decrease / (L ||d||^2)), L raised until
        phi(x + gamma d) <= phi(x) - gamma decrease + L gamma^2 ||d||^2 / 2 (adaptive), and the L it used."""
        dd = float(d @ d)
        if decrease <= 0 or dd == 0 or gamma_max <= 0:
            return 0.0, L
        L = decrease / dd if L is None else L  # first estimate: the whole first step
        if line_search == "short":
            return min(gamma_max, decrease / (L * dd)), L
        L, move, slack = DECREASE * L, tensor(d), 4 * torch.finfo(dtype).eps * abs(phi_x)
        for _ in range(BACKTRACKS):
            gamma = min(gamma_max, decrease / (L * dd))
            bound = phi_x - gamma * decrease + 0.5 * L * gamma**2 * dd + slack
            if phi(x + gamma * move, f"in the line search at iteration {k}") <= bound:
                return gamma, L
            L *= INCREASE
        return 0.0, L  # no step decreases phi: its differences are below the rounding of its values

    # The active set: vertices as the rows of an array, with their weights; x0 enters as an atom of its own.
    x0 = np.asarray(problem.x0, dtype=np.float64).reshape(-1)
    state = FWState(tensor(x0), hp["L"])
    if smooth and polytope:
        state = FWState(state.x, state.L, x0[None, :].copy(), np.ones(1))

    def lmo(g: np.ndarray) -> np.ndarray:
        return np.asarray(domain.lmo_unchecked(g.reshape(shape)), dtype=np.float64).reshape(-1)

    def add(vertices: np.ndarray, weights: np.ndarray, v: np.ndarray, gamma: float):
        """The active set with gamma added to the weight of v (a new row when v is not in it)."""
        same = np.flatnonzero((vertices == v).all(axis=1))
        if same.size:
            weights[same[0]] += gamma
            return vertices, weights
        return np.vstack([vertices, v]), np.append(weights, gamma)

    def frank_wolfe_step(state: FWState, k: int) -> tuple[FWState, dict]:
        """The box of the module's docstring: Lacoste-Julien and Jaggi (2015), Algorithms 1 and 2, and BPCG."""
        x, S, w = state.x, state.vertices, state.weights.copy()
        phi_x, g = first_order(x, k)
        x_np, scores = numpy(x), S @ g  # scores: <g, a> for the active vertices
        v = lmo(g)  # Frank-Wolfe vertex
        a, s = int(np.argmax(scores)), int(np.argmin(scores))  # away vertex, local Frank-Wolfe vertex
        gap, away_gap = float(g @ x_np - g @ v), float(scores[a] - g @ x_np)
        if step_kind == "away" and away_gap > gap and w[a] < 1:
            kind, d, gamma_max = "away", x_np - S[a], w[a] / (1 - w[a])
        elif step_kind == "pairwise":
            kind, d, gamma_max = "pairwise", v - S[a], w[a]
        elif step_kind == "blended-pairwise" and scores[a] - scores[s] >= gap:
            kind, d, gamma_max = "local", S[s] - S[a], w[a]
        else:
            kind, d, gamma_max = "fw", v - x_np, 1.0
        gamma, L = step_size(x, phi_x, d, float(-(g @ d)), gamma_max, state.L, k)
        if kind == "fw":  # (1 - gamma) x + gamma v
            S, w = add(S, (1 - gamma) * w, v, gamma)
        elif kind == "away":  # (1 + gamma) x - gamma a
            w = (1 + gamma) * w
            w[a] -= gamma
        else:  # x + gamma (v - a): weight gamma moves from a to v (to s, already active, for a local step)
            w[a] -= gamma
            S, w = add(S, w, S[s] if kind == "local" else v, gamma)
        drop = gamma == gamma_max and kind != "fw"
        if drop:
            w[a] = 0.0
        keep = w > 0
        S, w = S[keep], w[keep]
        row = {"objective_estimate": phi_x, "gap": gap, "gamma": gamma, "away_step": int(kind != "fw")}
        row.update(drop=int(drop or not keep.all()), atoms=len(state.weights))
        return FWState(tensor(w @ S), L, S, w), row

    def gradient_step(state: FWState, k: int) -> tuple[FWState, dict]:
        """Vanilla Frank-Wolfe on a set with infinitely many extreme points: no active set is kept."""
        x = state.x
        phi_x, g = first_order(x, k)
        d = lmo(g) - numpy(x)
        gap = float(-(g @ d))
        gamma, L = step_size(x, phi_x, d, gap, 1.0, state.L, k)
        row = {"objective_estimate": phi_x, "gap": gap, "gamma": gamma}
        return replace(state, x=x + gamma * tensor(d), L=L), row

    solver = None if smooth else build_glmo(outer, domain, device=device)
    oracle = None if smooth else InnerOracle(lambda x, b: problem.inner(at(x), b), n, (domain.size,), device, dtype)
    scale = 1.0 if solver is None else abs(phi(state.x, "at x0")) or 1.0  # the GLMO's tolerance, as hmsfw's

    def linear_model(state: FWState, k: int) -> tuple[dict, Any, float]:
        """One GLMO on the linearization F(f(x_k) + J (x - x_k), x); the row describing x_k."""
        x = state.x
        value, jac = oracle(x, batch, k)
        res = solver.solve(numpy(value), numpy(jac), numpy(x), tol=0.01 * scale / (k + 2))
        phi_x = outer.value(numpy(value), dense(x))
        row = {"objective_estimate": phi_x, "gap": phi_x - res.value, "glmo_gap": res.gap_bound}
        row["pricing_calls"] = res.calls
        return row, res, phi_x

    def glmo_step(state: FWState, k: int) -> tuple[FWState, dict]:
        """Vanilla Frank-Wolfe for a non-smooth F: towards the GLMO's point, by the model's decrease."""
        row, res, phi_x = linear_model(state, k)
        x = state.x
        d = np.asarray(res.x, dtype=np.float64).reshape(-1) - numpy(x)
        gamma, L = step_size(x, phi_x, d, row["gap"], 1.0, state.L, k)
        row["gamma"] = gamma
        return replace(state, x=x + gamma * tensor(d), L=L), row

    def observe(state: FWState, k: int) -> dict:
        if solver is not None:
            return linear_model(state, k)[0]
        phi_x, g = first_order(state.x, k)
        row = {"objective_estimate": phi_x, "gap": float(g @ (numpy(state.x) - lmo(g)))}
        if state.weights is not None:
            row["atoms"] = len(state.weights)
        return row

    step = glmo_step if solver is not None else frank_wolfe_step if state.weights is not None else gradient_step
    info = {"step": step_kind, "line_search": line_search, "direction": "gradient" if smooth else "glmo"}
    if solver is not None:
        info["glmo_route"] = solver.route
    readout = FWReadout(shape, observe, phi)
    return Plan(step, state, readout, components={} if solver is None else {"glmo": solver}, info=info)


class FWReadout(Readout):
    """fw's states reported: the exact phi, the final state's gap, the active set and L as outputs."""

    outputs = {
        "atoms": "the active set [(vertex, weight)] (on a polytope with a smooth F)",
        "L": "the line search's last estimate of the smoothness constant",
    }
    gap = progress = "gap"

    def __init__(self, shape: tuple, observe: Callable[[FWState, int], dict], phi: Callable[[Any, str], float]):
        self.shape, self.observe, self.phi = shape, observe, phi

    def iterate(self, state: FWState) -> torch.Tensor:
        return state.x.reshape(self.shape)

    def objective(self, state: FWState) -> float:
        return self.phi(state.x, "evaluating the objective")

    def returned(self, state: FWState) -> dict:
        if state.weights is None:
            return {"L": state.L}
        return {
            "L": state.L,
            "atoms": [(a.reshape(self.shape), float(w)) for a, w in zip(state.vertices, state.weights)],
        }


FW = register(
    Method(
        "fw",
        CompositeProblem,
        PARAMS,
        setup,
        "deterministic Frank-Wolfe with away or (blended) pairwise steps (Lacoste-Julien and Jaggi 2015)",
    )
)


def fw(problem: CompositeProblem, **options: Any) -> Result:
    """Minimize phi(x) = F(f(x), x) over X by deterministic Frank-Wolfe steps, with away or pairwise steps.

    The module's docstring gives the step.  Hyperparameters (``fc.describe("fw")`` lists them): ``step``
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


__all__ = ["fw", "kink", "STEPS"]
