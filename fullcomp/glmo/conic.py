"""Conic GLMO route: one DPP CVXPY program, compiled once, re-solved per call."""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from fullcomp import solvers
from fullcomp.errors import ModelError, OptionError, SolverError
from fullcomp.glmo.base import GLMO, GLMOResult, Request, affine_model, linear_certificate, target_gap
from fullcomp.model.composite import Outer
from fullcomp.sets.atoms import DenseAtom, Entries
from fullcomp.sets.base import Set

#: The statuses of a program that has no feasible point (the elastic program then takes over).
INFEASIBLE = (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)


class ConicGLMO(GLMO):
    """min F(u, x) s.t. u = c + V vec(x), x in X, with c and V as parameters.

    ``c = z - V y`` is one parameter because ``V @ (x - y)`` with both V and y
    as parameters is not DPP.  Clarabel solves it, SCS is the fallback.  When
    F reads only u, the answer is certified by one LMO at the dual of the
    equality (see :func:`linear_certificate`); otherwise the gap reported is
    the solver's own optimality tolerance (also when a constraint of the problem reads x).

    The problem's constraints (``CompositeProblem(constraints=...)``) are kept on u = c + V x; with them on u
    alone, the dual q of the link is a subgradient of F plus the constraints' indicator, so the same LMO
    certifies the constrained GLMO.  A step whose linearized constraints are infeasible solves the elastic
    program (F + penalty * slack) and reports its slack.
    """

    route = "conic"

    def __init__(self, outer: Outer, domain: Set):
        self.outer, self.domain = outer, domain
        self._all = Entries.all(domain.shape)
        self._compiled: tuple[Entries, cp.Problem, cp.Constraint, cp.Parameter, cp.Parameter] | None = None
        self._elastic: tuple[cp.Problem, cp.Constraint, cp.Expression] | None = None
        self._program(self._all)

    def _program(self, entries: Entries) -> tuple[cp.Problem, cp.Constraint, cp.Parameter, cp.Parameter]:
        """The DPP program for a model reading x at ``entries``, compiled once per entry set."""
        if self._compiled is None or self._compiled[0] is not entries:
            c = cp.Parameter(self.outer.n, name="c")
            V = cp.Parameter((self.outer.n, len(entries)), name="V")
            x = self.domain.variable
            read = cp.vec(x, order="C")
            if entries is not self._all:
                read = read[entries.flat]
            link = self.outer.u == c + V @ read
            kept = [] if self.outer.constraints is None else self.outer.constraints.items
            problem = cp.Problem(cp.Minimize(self.outer.expr), [link, *self.domain.cvxpy_constraints(x), *kept])
            if not problem.is_dcp(dpp=True):
                raise ModelError("the GLMO program is not DPP; keep parameters out of products in the outer function")
            self._compiled = (entries, problem, link, c, V)
            self._elastic = None
        return self._compiled[1:]

    def _elastic_program(self) -> tuple[cp.Problem, cp.Constraint, cp.Expression]:
        """The compiled program's elastic twin (same parameters c and V): F + penalty * total slack, each
        constraint relaxed by its slack; built at the first step whose linearized constraints are infeasible."""
        if self._elastic is None:
            _, problem, link, _, _ = self._compiled
            found = self.outer.constraints
            relaxed, slack = found.relaxed()
            kept = problem.constraints[: len(problem.constraints) - len(found)]
            elastic = cp.Problem(cp.Minimize(self.outer.expr + found.penalty * slack), [*kept, *relaxed])
            self._elastic = (elastic, link, slack)
        return self._elastic

    def _solved(self, problem: cp.Problem, link: cp.Constraint) -> tuple[cp.Constraint, float]:
        """Solve the program; where its constraints on u leave it infeasible, the elastic program instead.
        The link constraint whose dual is F's subgradient q, and the slack used."""
        try:
            solvers.solve(problem, "conic GLMO")
            return link, 0.0
        except SolverError:
            if self.outer.constraints is None or problem.status not in INFEASIBLE:
                raise
        elastic, link, slack = self._elastic_program()
        solvers.solve(elastic, "conic GLMO (elastic, the linearized constraints being infeasible)")
        return link, float(slack.value)

    def _solve(self, z: Any, V: Any, y: Any, request: Request) -> GLMOResult:
        """Solve the GLMO for the model z + V (x - y) with one conic solve; ``max_calls``, ``start`` and
        ``revision`` do not apply here, and ``tol`` only decides ``result.converged`` (the solver's accuracy is fixed).

        With ``entries`` the model reads x only there (V is (n, len(entries))); ``result.x`` is x there and
        then at ``track``.
        """
        tol, max_calls, entries, start, revision, track = request
        if entries is not None and entries.sharded:
            raise OptionError("the conic GLMO needs every entry on one rank; a sharded problem takes route='colgen'")
        entries = self._all if entries is None else entries
        problem, link, c_param, V_param = self._program(entries)
        c, Vm = affine_model(z, V, y, self.outer.n, len(entries))
        c_param.value, V_param.value = c, Vm
        link, slack = self._solved(problem, link)
        x = np.asarray(self.domain.variable.value, dtype=np.float64).reshape(self.domain.shape)
        x_read = x.reshape(-1)[entries.flat]
        q = -np.asarray(link.dual_value, dtype=np.float64)  # CVXPY's dual of u - (c + V x) == 0
        value = self.outer.value(c + Vm @ x_read, x)
        if slack:  # the elastic program's value, which its certificate bounds
            value += self.outer.constraints.penalty * slack
        if self.outer.depends_on_x or getattr(self.outer.constraints, "reads_x", False):
            gap = solvers.ABS_TOL + solvers.REL_TOL * abs(value)
        else:
            gap = linear_certificate(q @ Vm, x_read, self.domain, entries)
        converged = bool(gap <= target_gap(tol, value))
        x_out = x if entries is self._all else x_read
        if track is not None and entries is not self._all:
            x_out = np.concatenate([x_read, x.reshape(-1)[track.flat]])
        atoms = [DenseAtom(x)]
        return GLMOResult(x_out, value, gap, 1, atoms, np.ones(1), converged=converged, slack=slack)

    def state_dict(self) -> dict:
        """Nothing to checkpoint: each conic solve starts from scratch."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """The conic route keeps no state between calls."""
