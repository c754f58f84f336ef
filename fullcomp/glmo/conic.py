"""Conic GLMO route: one DPP CVXPY program, compiled once, re-solved per call."""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from fullcomp import solvers
from fullcomp.errors import ModelError
from fullcomp.glmo.base import GLMOResult, affine_model, check_tol, linear_certificate
from fullcomp.model.composite import Outer
from fullcomp.sets.base import Set


class ConicGLMO:
    """min F(u, x) s.t. u = c + V vec(x), x in X, with c and V as parameters.

    ``c = z - V y`` is one parameter because ``V @ (x - y)`` with both V and y
    as parameters is not DPP.  Clarabel solves it, SCS is the fallback.  When
    F reads only u, the answer is certified by one LMO at the dual of the
    equality (see :func:`linear_certificate`); otherwise the gap reported is
    the solver's own optimality tolerance.
    """

    route = "conic"

    def __init__(self, outer: Outer, domain: Set):
        self.outer, self.domain = outer, domain
        n, d = outer.n, domain.size
        self.c = cp.Parameter(n, name="c")
        self.V = cp.Parameter((n, d), name="V")
        x = domain.variable
        self.link = outer.u == self.c + self.V @ cp.vec(x, order="C")
        self.problem = cp.Problem(cp.Minimize(outer.expr), [self.link, *domain.cvxpy_constraints(x)])
        if not self.problem.is_dcp(dpp=True):
            raise ModelError("the GLMO program is not DPP; keep parameters out of products in the outer function")

    def solve(self, z: Any, V: Any, y: Any, tol: float | None = None, max_calls: int | None = None) -> GLMOResult:
        check_tol(tol, max_calls)
        c, Vm = affine_model(z, V, y, self.outer.n, self.domain.size)
        self.c.value, self.V.value = c, Vm
        solvers.solve(self.problem, "conic GLMO")
        x = np.asarray(self.domain.variable.value, dtype=np.float64).reshape(-1)
        q = -np.asarray(self.link.dual_value, dtype=np.float64)  # CVXPY's dual of u - (c + V x) == 0
        value = self.outer.value(c + Vm @ x, x)
        if self.outer.depends_on_x:
            gap = solvers.ABS_TOL + solvers.REL_TOL * abs(value)
        else:
            gap, _ = linear_certificate(Vm.T @ q, x, self.domain)
        return GLMOResult(x.reshape(self.domain.shape), value, gap, 1)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
