"""Top singular pair of a (sparse) matrix by Lanczos on its smaller Gram matrix.

The nuclear-ball LMO asks for one singular pair per pricing call, dozens of
times per Frank-Wolfe step, always on matrices with the same sparsity
pattern.  ARPACK (``scipy.sparse.linalg.svds``) spends about half its time
in its reverse-communication loop and linear-operator wrappers; this loop
does the same Krylov iterations with two sparse products each and nothing
else, and ``SparsePattern`` refills a precomputed CSR structure instead of
converting coordinates every call.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

CHECK_EVERY = 4


class SparsePattern:
    """CSR matrices of one fixed (rows, cols) pattern and of its transpose, refilled with new values."""

    def __init__(self, rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]):
        order = np.arange(1, rows.size + 1, dtype=np.float64)  # +1: no stored value is zero, so none is pruned
        self.matrix = sp.csr_matrix((order, (rows, cols)), shape=shape)
        self.transpose = sp.csr_matrix((order, (cols, rows)), shape=shape[::-1])
        self._perm = self.matrix.data.astype(np.int64) - 1
        self._perm_t = self.transpose.data.astype(np.int64) - 1

    def fill(self, values: np.ndarray) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        """The matrix with ``values`` (in the pattern's order) and its transpose, sharing the index arrays."""
        self.matrix.data = values[self._perm]
        self.transpose.data = values[self._perm_t]
        return self.matrix, self.transpose


def top_singular_pair(
    d: np.ndarray | sp.spmatrix,
    d_t: np.ndarray | sp.spmatrix | None = None,
    start: np.ndarray | None = None,
    tol: float = 1e-7,
    max_iter: int = 300,
) -> tuple[np.ndarray, float, np.ndarray]:
    """(u, sigma, v) with d v = sigma u and sigma the largest singular value of d (P x Q, P <= Q).

    Lanczos with full reorthogonalization on d d^T from ``start`` (a previous u),
    stopped when the top Ritz pair's residual is below ``tol`` times its value,
    ARPACK's criterion with the same ``tol`` as ``svds(tol=tol)``.  ``d_t`` is
    d's transpose in a row-major layout when the caller has one.  Falls back to
    ARPACK if the iteration has not converged after ``max_iter`` steps.
    """
    p = d.shape[0]
    d_t = d.T if d_t is None else d_t
    steps = min(p, max_iter)
    basis = np.empty((steps + 1, p))
    alpha, beta = np.empty(steps), np.empty(steps)
    generic = np.random.default_rng(0).standard_normal(p)
    generic /= np.linalg.norm(generic)
    q = generic
    if start is not None and np.any(start):
        # A little of a generic vector keeps the start from lying in d^T's null space.
        q = start / np.linalg.norm(start) + 0.01 * generic
    basis[0] = q / np.linalg.norm(q)
    scale = float(np.sum(d.data**2) if sp.issparse(d) else np.sum(d**2))  # ||d||_F^2 >= sigma^2
    if scale == 0:
        return basis[0], 0.0, np.zeros(d.shape[1])
    theta, vec = 0.0, np.ones(1)
    for j in range(steps):
        w = d @ (d_t @ basis[j])
        alpha[j] = basis[j] @ w
        # Full reorthogonalization (twice is enough, Kahan): the basis is at most a few dozen vectors.
        for _ in range(2):
            w -= basis[: j + 1].T @ (basis[: j + 1] @ w)
        beta[j] = np.linalg.norm(w)
        breakdown = beta[j] <= 1e-14 * scale
        # The tridiagonal eigensolve costs as much as two sparse products, so convergence is
        # checked every CHECK_EVERY steps: at most CHECK_EVERY - 1 extra steps, several times fewer solves.
        if (j + 1) % CHECK_EVERY and not breakdown and j + 1 < steps:
            basis[j + 1] = w / beta[j]
            continue
        if j == 0:
            theta, vec = alpha[0], np.ones(1)
        else:
            values, vectors = sla.eigh_tridiagonal(alpha[: j + 1], beta[:j], select="i", select_range=(j, j))
            theta, vec = values[0], vectors[:, 0]
        residual = beta[j] * abs(vec[-1])
        if residual <= tol * abs(theta) or breakdown:
            u = vec @ basis[: j + 1]
            u /= np.linalg.norm(u)
            v = d_t @ u
            sigma = float(np.linalg.norm(v))
            return u, sigma, v / sigma if sigma > 0 else v
        if j + 1 < steps:
            basis[j + 1] = w / beta[j]
    u, s, vt = spla.svds(d, k=1, tol=tol)
    return u[:, 0], float(s[0]), vt[0]
