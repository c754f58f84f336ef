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

import warnings
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
    """Master programs of one outer function F over varying atom images.

    F's conic form is read from CVXPY's problem data through two parts that CVXPY does not document (the
    column of each variable, and the Clarabel interface's cones): :meth:`build` returns None where a CVXPY
    release lays them out otherwise, and the caller solves its CVXPY program instead.
    """

    @classmethod
    def build(cls, outer: Outer) -> ConicMaster | None:
        """The compiled master, or None (with a warning) where this CVXPY's problem data are not readable."""
        try:
            return cls(outer)
        except (ImportError, AttributeError, KeyError, TypeError) as exc:
            warnings.warn(
                f"column generation cannot compile its master from CVXPY {cp.__version__}'s problem data "
                f"({type(exc).__name__}: {exc}); each master is solved through CVXPY instead (5-25 ms a solve)",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

    def __init__(self, outer: Outer):
        import clarabel
        from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import dims_to_solver_cones

        data, _, _ = cp.Problem(cp.Minimize(outer.expr)).get_problem_data(cp.CLARABEL)
        self.n = outer.n
        # F's matrices in canonical CSC form (duplicates summed, zeros dropped, rows sorted): the entries a
        # dense copy converted back would hold, without the dense copy (1,000 x 1,001 for a CVaR of 500).
        A_F = self._A_F = _canonical(data["A"])
        self.m_F = A_F.shape[0]
        self.b_F = np.asarray(data["b"], dtype=np.float64)
        self.c_F = np.asarray(data["c"], dtype=np.float64)
        self.P_F = _canonical(data["P"]) if "P" in data else None
        if self.P_F is not None and self.P_F.nnz == 0:
            self.P_F = None  # a zero P is no P
        start = self.u_start = data[cp.settings.PARAM_PROB].var_id_to_col[outer.u.id]  # u's first column
        self.nv = A_F.shape[1]
        select_u = self._select_u = sp.csc_matrix(
            (np.ones(self.n), (np.arange(self.n), start + np.arange(self.n))), shape=(self.n, self.nv)
        )
        self.cones_F = dims_to_solver_cones(data["dims"])
        self._clarabel = clarabel
        # The columns of v in CSC form, rows of A_F flagged: they sit below the k rows of w >= 0.
        fixed = _canonical(sp.vstack([select_u, sp.csc_matrix((1, self.nv)), A_F], format="csc"))
        self._v_indptr, self._v_data = fixed.indptr, fixed.data
        self._v_rows, self._v_below = fixed.indices, fixed.indices > self.n
        self._P = {}  # k -> the upper triangle of P in CSC form
        self._A: dict[int, sp.csc_matrix] = {}  # k -> A for images without zeros, refilled by each solve

    @property
    def A_F(self) -> np.ndarray:
        """F's constraint matrix, dense (for inspection; the programs are built from the sparse one)."""
        return self._A_F.toarray()

    @property
    def select_u(self) -> np.ndarray:
        """The (n, nv) 0/1 matrix picking u out of F's variables v, dense."""
        return self._select_u.toarray()

    def _matrices(self, images: np.ndarray) -> tuple[sp.csc_matrix, sp.csc_matrix]:
        """P and A of the program with these images, built in CSC form: the same matrices as a dense
        assembly converted (zeros dropped, rows sorted), at a fraction of the cost.

        Images without zeros (the usual case) fill the values of a structure kept for each k: building a
        scipy matrix took 250 of the 1,100 us a MovieLens-100K master costs in a run."""
        n, k = images.shape
        full = bool(images.all())
        held = self._A.get(k) if full else None
        if held is None:
            A = self._assemble(images)
            if full:
                self._A[k] = A
        else:
            A = held
            np.negative(images.T, out=A.data[: k * (n + 2)].reshape(k, n + 2)[:, :n])
        P = self._P.get(k)
        if P is None:  # zero on w: F's P, upper triangle, in the block of v
            size = k + self.nv
            if self.P_F is None:
                P = sp.csc_matrix((size, size))
            else:
                P = _canonical(sp.block_diag([sp.csc_matrix((k, k)), sp.triu(self.P_F)], format="csc"))
            self._P[k] = P
        return P, A

    def _assemble(self, images: np.ndarray) -> sp.csc_matrix:
        """A for these images, zeros dropped."""
        n, k = images.shape
        rows = np.vstack([np.repeat(np.arange(n)[:, None], k, axis=1), np.full((1, k), n), n + 1 + np.arange(k)])
        values = np.vstack([-images, np.ones((1, k)), -np.ones((1, k))])
        keep = (values != 0).T
        w_indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
        indptr = np.concatenate([w_indptr, w_indptr[-1] + self._v_indptr[1:]])
        indices = np.concatenate([rows.T[keep], self._v_rows + k * self._v_below])
        data = np.concatenate([values.T[keep], self._v_data])
        return sp.csc_matrix((data, indices, indptr), shape=(n + 1 + k + self.m_F, k + self.nv))

    def solve(self, c: np.ndarray, images: np.ndarray) -> MasterSolution | None:
        """Weights on the columns of ``images`` (n, k) minimizing F(c + images @ w) over the simplex.

        Returns None when Clarabel does not report a solution, so the caller can fall back
        to its CVXPY program (which also tries SCS).
        """
        clarabel = self._clarabel
        n, k = images.shape
        # Rows: link (n), simplex (1), w >= 0 (k), F's (m_F); columns: w (k), v (nv).
        P, A = self._matrices(images)
        b = np.concatenate([c, [1.0], np.zeros(k), self.b_F])
        q = np.concatenate([np.zeros(k), self.c_F])
        cones = [clarabel.ZeroConeT(n + 1), clarabel.NonnegativeConeT(k), *self.cones_F]
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        # The same Clarabel options as every CVXPY solve (fullcomp.solvers), read at call time.
        for name, value in solvers.SOLVER_OPTIONS.get("CLARABEL", {}).items():
            setattr(settings, name, value)
        solution = clarabel.DefaultSolver(P, q, A, b, cones, settings).solve()
        if str(solution.status) != "Solved":
            return None
        x, z = np.asarray(solution.x), np.asarray(solution.z)
        return MasterSolution(weights=x[:k], q=-z[:n])


def _canonical(matrix) -> sp.csc_matrix:
    """``matrix`` in canonical CSC form, 32-bit indices: what ``sp.csc_matrix(matrix.toarray())`` gives
    (duplicates summed, explicit zeros dropped, rows sorted), without the dense array."""
    out = sp.csc_matrix(matrix, dtype=np.float64, copy=True)
    out.sum_duplicates()
    out.eliminate_zeros()
    out.sort_indices()
    if out.indices.dtype != np.int32 and max(out.shape) < 2**31 and out.nnz < 2**31:
        out.indices, out.indptr = out.indices.astype(np.int32), out.indptr.astype(np.int32)
    return out
