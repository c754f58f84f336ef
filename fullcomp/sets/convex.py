"""A compact convex set given by CVXPY constraints."""

from __future__ import annotations

from collections.abc import Callable

import cvxpy as cp
import numpy as np

from fullcomp import solvers
from fullcomp.errors import DomainError, SolverError
from fullcomp.sets.base import Set, as_shape

# Above this many coordinates the 2 d bounding-box programs that prove
# boundedness are deferred to the first use of ``diameter``.
EAGER_BOUND_CHECK = 200
# A point whose constraint residuals are below this is its own projection.
FEASIBLE_TOL = 1e-12


class ConvexSet(Set):
    """X = {x : constraints(x)} for a function returning CVXPY constraints.

    The LMO (a linear objective) and the projection (a least-squares
    objective) are each one DPP program, compiled on the first call and
    re-solved with new parameter values afterwards.  Construction proves the
    set non-empty and bounded by solving for its bounding box; ``diameter`` is
    that box's diagonal, an upper bound on the true diameter.
    """

    cheap_lmo = False

    def __init__(self, shape, constraints: Callable[[cp.Variable], list]):
        self.shape = as_shape(shape)
        if not callable(constraints):
            raise DomainError("constraints must be a function var -> list of CVXPY constraints")
        self._constraint_fn = constraints
        made = constraints(self.variable)
        if isinstance(made, cp.Constraint):
            made = [made]
        made = list(made) if isinstance(made, (list, tuple)) else []
        if not made or not all(isinstance(c, cp.Constraint) for c in made):
            raise DomainError(
                "constraints(var) must return a non-empty list of CVXPY constraints, e.g. [cp.norm(var, 1) <= 1]"
            )
        for c in made:
            if not c.is_dcp():
                raise DomainError(f"constraint {c} is not DCP (convex): it cannot define a convex set")
        self._constraints = made
        # Constraints with auxiliary variables (a lifted description) have no residual at x alone.
        self._lifted = any(v is not self.variable for c in made for v in c.variables())
        self._direction = cp.Parameter(self.shape)
        self._point = cp.Parameter(self.shape)
        self._lmo_problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(self._direction, self.variable))), made)
        self._proj_problem = cp.Problem(cp.Minimize(cp.sum_squares(self.variable - self._point)), made)
        self._diameter: float | None = None
        if self.size <= EAGER_BOUND_CHECK:
            self._bounding_box()

    def _solve_lmo(self, d: np.ndarray) -> np.ndarray:
        self._direction.value = d
        try:
            solvers.solve(self._lmo_problem, "ConvexSet LMO")
        except SolverError:
            status = self._lmo_problem.status
            if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
                raise DomainError("ConvexSet is empty: its constraints are infeasible") from None
            if status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
                raise DomainError(
                    "ConvexSet is unbounded: add bounds (e.g. cp.norm(var, 'inf') <= R) so it is compact"
                ) from None
            raise
        return np.asarray(self.variable.value, dtype=float).reshape(self.shape)

    def _bounding_box(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.empty(self.size), np.empty(self.size)
        for i in range(self.size):
            e = np.zeros(self.size)
            e[i] = 1.0
            lo[i] = self._solve_lmo(e.reshape(self.shape)).flat[i]
            hi[i] = self._solve_lmo(-e.reshape(self.shape)).flat[i]
        self._diameter = float(np.linalg.norm(hi - lo))
        return lo, hi

    @property
    def diameter(self) -> float:
        if self._diameter is None:
            self._bounding_box()
        return self._diameter

    def lmo(self, d: np.ndarray) -> np.ndarray:
        return self._solve_lmo(d)

    def _violation(self, p: np.ndarray) -> float:
        """Largest constraint residual at ``p`` (0 inside the set; inf when it needs a solve)."""
        if self._lifted:
            return np.inf
        self.variable.value = p
        return max(float(np.max(c.violation(), initial=0.0)) for c in self._constraints)

    def contains(self, point, tol: float = 1e-9) -> bool:
        # By the constraint residuals: an interior-point projection of a boundary
        # point is only accurate to ~sqrt(solver tolerance), too coarse for a test.
        if self._lifted:
            return super().contains(point, tol)
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        return bool(p.shape == self.shape and self._violation(p) <= tol * max(1.0, self.diameter))

    def project(self, p: np.ndarray) -> np.ndarray:
        if self._violation(p) <= FEASIBLE_TOL:
            return p.copy()  # exact, where the least-squares program would move p by ~1e-5
        self._point.value = p
        solvers.solve(self._proj_problem, "ConvexSet projection")
        return np.asarray(self.variable.value, dtype=float).reshape(self.shape)

    def cvxpy_constraints(self, var):
        if var is self.variable:
            return list(self._constraints)
        made = self._constraint_fn(var)
        return [made] if isinstance(made, cp.Constraint) else list(made)
