"""The column-generation master min_{w in simplex} F(c + A w), compiled once and solved by Clarabel directly.

CVXPY's DPP re-solve of the master costs 5-25 ms per pricing call, almost all
of it in canonicalization; the program itself has a few dozen variables.  Here
F's conic form ``min c_F'v  s.t.  A_F v + s = b_F, s in K`` is taken from CVXPY
once, and each solve only stacks the new atom images around it:

    variables (w, v);   u(v) - A w = c   (zero cone, dual = -q)
                        1'w = 1          (zero cone)
                        w >= 0           (nonnegative cone)
                        A_F v + s = b_F  (F's cones)

The dual of the first block is minus the multiplier q in dF(c + A w*) that
prices the next atom.
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from fullcomp import solvers
from fullcomp.model.composite import Outer


@dataclass
class MasterSolution:
    weights: np.ndarray  # one per column of A, zero on masked columns
    q: np.ndarray  # a subgradient of F at c + A w, the pricing multiplier


class ConicMaster:
    """Master programs of one outer function F over varying atom images."""

    def __init__(self, outer: Outer):
        import clarabel
        from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import dims_to_solver_cones

        data, _, _ = cp.Problem(cp.Minimize(outer.expr)).get_problem_data(cp.CLARABEL)
        self.n = outer.n
        self.A_F = sp.csc_matrix(data["A"]).toarray()
        self.b_F = np.asarray(data["b"], dtype=np.float64)
        self.c_F = np.asarray(data["c"], dtype=np.float64)
        self.P_F = sp.csc_matrix(data["P"]).toarray() if "P" in data else None
        start = data[cp.settings.PARAM_PROB].var_id_to_col[outer.u.id]
        self.nv = self.A_F.shape[1]
        self.select_u = np.zeros((self.n, self.nv))
        self.select_u[np.arange(self.n), start + np.arange(self.n)] = 1.0
        self.cones_F = dims_to_solver_cones(data["dims"])
        self._clarabel = clarabel

    def solve(self, c: np.ndarray, images: np.ndarray) -> MasterSolution | None:
        """Weights on the columns of ``images`` (n, k) minimizing F(c + images @ w) over the simplex.

        Returns None when Clarabel does not report a solution, so the caller can fall back
        to its CVXPY program (which also tries SCS).
        """
        clarabel = self._clarabel
        n, k = images.shape
        m_F = self.A_F.shape[0]
        # Rows: link (n), simplex (1), w >= 0 (k), F's (m_F); columns: w (k), v (nv).  The program is
        # tiny, so one dense assembly is cheaper than sparse block stacking.
        A = np.zeros((n + 1 + k + m_F, k + self.nv))
        A[:n, :k] = -images
        A[:n, k:] = self.select_u
        A[n, :k] = 1.0
        A[n + 1 : n + 1 + k, :k] = -np.eye(k)
        A[n + 1 + k :, k:] = self.A_F
        b = np.concatenate([c, [1.0], np.zeros(k), self.b_F])
        q = np.concatenate([np.zeros(k), self.c_F])
        P = np.zeros((k + self.nv, k + self.nv))
        if self.P_F is not None:
            P[k:, k:] = self.P_F
        cones = [clarabel.ZeroConeT(n + 1), clarabel.NonnegativeConeT(k), *self.cones_F]
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        # The same Clarabel options as every CVXPY solve (fullcomp.solvers), read at call time.
        for name, value in solvers.SOLVER_OPTIONS.get("CLARABEL", {}).items():
            setattr(settings, name, value)
        solution = clarabel.DefaultSolver(sp.csc_matrix(np.triu(P)), q, sp.csc_matrix(A), b, cones, settings).solve()
        if str(solution.status) != "Solved":
            return None
        x, z = np.asarray(solution.x), np.asarray(solution.z)
        return MasterSolution(weights=x[:k], q=-z[:n])
