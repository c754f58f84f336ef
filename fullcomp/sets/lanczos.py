"""Top singular pair of a (sparse) matrix by Lanczos on its smaller Gram matrix.

The nuclear-ball LMO asks for one singular pair per pricing call, dozens of
times per Frank-Wolfe step, always on matrices with the same sparsity
pattern.  ARPACK (``scipy.sparse.linalg.svds``) spends about half its time
in its reverse-communication loop and linear-operator wrappers; this loop
does the same Krylov iterations with two sparse products each and nothing
else, and ``SparsePattern`` refills a precomputed CSR structure instead of
converting coordinates every call.

Besides the pair, the iteration reports an upper bound on the top singular
value: a Ritz pair (theta, y) of A = d d^T with residual rho = ||A y - theta y||
has an eigenvalue of A within rho of theta, so once the iteration has found
the top one, sigma_1^2 <= theta + rho.  A caller that only needs a good pair
(a column-generation pricing call whose atom improves its master) can stop
as soon as [sqrt(theta), sqrt(theta + rho)] is narrow enough.  The bound is
only as sure as the iteration's answer: stopped at 0.5% a few steps in, it
missed the top in about 1 of 30 random directions (docs/performance.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

if TYPE_CHECKING:
    from fullcomp.sets.atoms import ScaledRows

CHECK_EVERY = 4
#: A caller's early stop is asked this often, from step CHECK_EVERY on.
STOP_EVERY = 2

#: Devices (torch device types) whose runs multiply sparse directions there, through torch; others use scipy.
PRODUCT_DEVICES = ("cuda",)


try:  # scipy's own CSR and CSC kernels, which its ``@`` reaches through a dispatch costing 18% of a product
    from scipy.sparse import _sparsetools
except ImportError:  # pragma: no cover - a scipy that moved them: its ``@`` serves
    _sparsetools = None


def vector_product(matrix: Any) -> Callable[[np.ndarray], np.ndarray]:
    """``matrix @ x`` for a float64 vector x: scipy's kernel called directly for a float64 CSR or CSC matrix
    (on MovieLens-100K's 943 x 1682 pattern its dispatch took 18 of the 100 us a product costs), ``@``
    for anything else (a dense array, a :class:`DeviceMatrix`).  It reads the matrix's arrays at every call,
    so a refilled pattern multiplies its new values."""
    kind = getattr(matrix, "format", None)
    if _sparsetools is None or kind not in ("csr", "csc") or matrix.dtype != np.float64 or matrix.ndim != 2:
        return matrix.__matmul__
    kernel = getattr(_sparsetools, f"{kind}_matvec")
    rows, cols = matrix.shape

    def product(x: np.ndarray) -> np.ndarray:
        if x.dtype != np.float64 or x.shape != (cols,) or not x.flags.c_contiguous:
            return matrix @ x
        out = np.zeros(rows)
        kernel(rows, cols, matrix.indptr, matrix.indices, matrix.data, x, out)
        return out

    return product


def top_ritz(alpha: np.ndarray, beta: np.ndarray) -> tuple[float, np.ndarray]:
    """The largest eigenvalue of the symmetric tridiagonal matrix (diagonal alpha, off-diagonal beta) and its
    unit eigenvector: ``scipy.linalg.eigh_tridiagonal(select="i")``'s two LAPACK calls (bisection, then
    inverse iteration) without its wrapper, the same bits at a fifth to a tenth of its 50-90 us."""
    n = alpha.size
    if n == 1:
        return float(alpha[0]), np.ones(1)
    found, values, block, split, info = sla.lapack.dstebz(alpha, beta, 2, 0.0, 1.0, n, n, 0.0, "B")
    if info == 0 and found == 1:
        vectors, info = sla.lapack.dstein(alpha, beta, values[:1], block, split)
        if info == 0:
            return float(values[0]), vectors[:, 0]
    values, vectors = sla.eigh_tridiagonal(alpha, beta, select="i", select_range=(n - 1, n - 1))  # says why
    return float(values[0]), vectors[:, 0]


class SparsePattern:
    """A CSR matrix of one fixed (rows, cols) pattern, refilled with new values.

    The transpose is the CSC view of the same arrays: its product costs about
    as much as a CSR one (measured within 5% at 800,000 entries), and it needs
    no second permutation per fill.  Entries given in row-major order need no
    permutation at all, and neither do entries that hold each row's entries
    together, columns increasing, rows in any order (a completion problem's
    ratings group by group, groups of users): with ``relabel`` the matrix's rows
    are then the rows in that order, ``matrix`` is P d for a row permutation P,
    and :meth:`to_rows` / :meth:`from_rows` map row-side vectors between the
    two.  Its singular values are d's, and its column-side vectors too.
    """

    def __init__(self, rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], relabel: bool = True):
        self.row_order = grouped_rows(rows, cols, shape[0]) if relabel else None  # matrix row i is row row_order[i]
        if self.row_order is not None:
            label = np.empty(shape[0], dtype=np.int64)
            label[self.row_order] = np.arange(shape[0])
            rows = label[rows]
        order = np.arange(1, rows.size + 1, dtype=np.float64)  # +1: no stored value is zero, so none is pruned
        self.matrix = sp.csr_matrix((order, (rows, cols)), shape=shape)
        perm = self.matrix.data.astype(np.int64) - 1
        self._perm = None if np.array_equal(perm, np.arange(perm.size)) else perm
        self.transpose = self.matrix.T
        self._draws: tuple[np.ndarray, np.ndarray] | None = None
        self._block_draws: dict[tuple[bool, int], np.ndarray] = {}
        self._host: tuple[torch.Tensor, torch.Tensor] | None = None  # the CSR structure as torch tensors
        self._sampler: torch.Tensor | None = None  # the pattern as a torch CSR matrix of zeros, for sample()
        self._flipped: tuple[torch.Tensor, torch.Tensor, np.ndarray] | None = None  # see flipped()
        self._factors: tuple[int, list[torch.Tensor], np.ndarray] | None = None  # see scaled_operators()
        self._factor_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def fill(self, values: np.ndarray) -> tuple[sp.csr_matrix, sp.csc_matrix]:
        """The matrix with ``values`` (in the pattern's order) and its transpose, sharing the arrays.

        The transpose is built once: scipy's constructor copies data that is a view of a larger array
        (a row of V), 64 MB at 8,000,000 entries."""
        data = values if self._perm is None else values[self._perm]
        self.matrix.data = self.transpose.data = data
        return self.matrix, self.transpose

    def operators(self, values: np.ndarray) -> tuple[sp.csr_matrix | DeviceMatrix, sp.csc_matrix]:
        """:meth:`fill`, the matrix multiplying through torch's CSR kernel (MKL's) where torch has it: on a block of
        4 vectors it took 10.5 against scipy's 23.7 ms at 10^7 entries, 0.6 against 2.0 ms at 900,000.  The
        transpose stays scipy's CSC view of the same values: torch multiplies CSR matrices only, and a CSR
        structure of the transpose would permute the values at every fill."""
        matrix, transpose = self.fill(values)
        if not torch.backends.mkl.is_available():
            return matrix, transpose
        return DeviceMatrix(self._torch(torch.from_numpy(matrix.data)), squared_norm(matrix)), transpose

    def scaled_operators(self, direction: ScaledRows) -> tuple[tuple[DeviceMatrix, DeviceMatrix], ...]:
        """:meth:`operators` for a direction diag(s) G (:class:`~fullcomp.sets.atoms.ScaledRows`), and the same
        pair in float32 (the ``coarse`` operators of :func:`top_singular_block`).  G and its transpose are torch
        CSR matrices built once per ``direction.tag``, and s scales the blocks they multiply.  The transpose then
        multiplies through MKL too (at 10^6 entries 1.2 against scipy's CSC 2.8 ms a block, 26 against 46 ms at
        10^7), at one permutation of G's values per tag instead of one per pricing call, and no pricing call
        forms the direction's values."""
        if self._factors is None or self._factors[0] != direction.tag:
            # The arrays are written in place tag after tag: fresh ones (five of nnz entries) page-faulted in at
            # every GLMO call (at 10^7 entries, kernel time here over 7 calls fell from 1.22 to 0.95-1.01 s,
            # most of what is left the first call's).
            nnz = self.matrix.nnz
            if self._factor_arrays is None:
                self._factor_arrays = (np.empty((3, nnz)), np.empty((2, nnz), dtype=np.float32), np.empty(nnz + 1))
            wide, narrow, running = self._factor_arrays
            values = direction.values if self._perm is None else np.take(direction.values, self._perm, out=wide[0])
            crow, col, slots = self.flipped()
            flipped = np.take(values, slots, out=wide[1])
            narrow[0], narrow[1] = values, flipped
            shapes = (self.matrix.shape, self.matrix.shape[::-1])
            structures = (self._torch_structure(), (crow, col))
            matrices = [
                csr_tensor(*structure, torch.from_numpy(v), shape)
                for pair in ((values, flipped), narrow)
                for v, structure, shape in zip(pair, structures, shapes)
            ]
            # Each row's squared norm, from a running sum: it only scales the iteration's breakdown tests.
            running[0] = 0.0
            np.cumsum(np.multiply(values, values, out=wide[2]), out=running[1:])
            norms = running[self.matrix.indptr[1:]] - running[self.matrix.indptr[:-1]]
            self._factors = (direction.tag, matrices, norms)
        _, matrices, norms = self._factors
        scale = self.to_rows(direction.scale)
        squared = float((scale * scale) @ norms)
        pairs = [
            (DeviceMatrix(m, squared, left=scale), DeviceMatrix(m_t, squared, right=scale))
            for m, m_t in (matrices[:2], matrices[2:])
        ]
        return tuple(pairs)

    def owned_products(self, direction: ScaledRows, u: np.ndarray, v: np.ndarray) -> np.ndarray | None:
        """For each row g of V, u^T G_g v with G_g the rows of G that g owns, from the factors of
        :meth:`scaled_operators` (None when they are not ``direction``'s): one product G v."""
        if self._factors is None or self._factors[0] != direction.tag:
            return None
        products = self.to_rows(u) * (DeviceMatrix(self._factors[1][0], 0.0) @ v)
        n = len(direction.q)
        return np.bincount(self.to_rows(direction.owner), weights=products, minlength=n + 1)[:n]

    def flipped(self) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """The transpose's CSR structure (row pointers and columns as torch tensors) and, for each of its slots,
        the matrix's CSR slot of the same entry; made once."""
        if self._flipped is None:
            csr, nnz = self.matrix, self.matrix.nnz
            csc = sp.csr_matrix((np.arange(1.0, nnz + 1), csr.indices, csr.indptr), shape=csr.shape).tocsc()
            slots = (csc.data - 1).astype(np.int32 if nnz < 2**31 else np.int64)
            self._flipped = (torch.from_numpy(csc.indptr), torch.from_numpy(csc.indices), slots)
        return self._flipped

    def _torch(self, values: torch.Tensor) -> torch.Tensor:
        """The pattern as a torch CSR matrix holding ``values``, on the host; its structure shares scipy's."""
        return csr_tensor(*self._torch_structure(), values, self.matrix.shape)

    def _torch_structure(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._host is None:
            self._host = (torch.from_numpy(self.matrix.indptr), torch.from_numpy(self.matrix.indices))
        return self._host

    def sample(self, left: np.ndarray, right: np.ndarray, add_to: np.ndarray | None = None) -> np.ndarray:
        """The values of left @ right.T (P x k and Q x k factors) at the pattern's entries, in their order: one
        sampled product (torch's sampled_addmm).  With ``add_to`` (float64, one value per entry) they are added
        into it; for entries in CSR order the product writes there itself (the same bits as adding): a fresh
        result at 10^7 entries took 17,500 page faults a call."""
        left = torch.from_numpy(np.ascontiguousarray(self.to_rows(left), dtype=np.float64))
        right = torch.from_numpy(np.ascontiguousarray(right.T, dtype=np.float64))
        with warnings.catch_warnings():  # torch says once per process that sparse CSR support is in beta
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
            if add_to is not None and self._perm is None and add_to.dtype == np.float64 and add_to.flags.c_contiguous:
                into = self._torch(torch.from_numpy(add_to))
                torch.sparse.sampled_addmm(into, left, right, beta=1.0, out=into)
                return add_to
            if self._sampler is None:
                self._sampler = self._torch(torch.zeros(self.matrix.nnz, dtype=torch.float64))
            out = torch.sparse.sampled_addmm(self._sampler, left, right, beta=0.0).values().numpy()
        if self._perm is not None:
            values = np.empty_like(out)
            values[self._perm] = out
            out = values
        if add_to is None:
            return out
        add_to += out
        return add_to

    def part(self, values: np.ndarray, lo: int, hi: int) -> tuple[sp.csr_matrix, sp.csc_matrix]:
        """The matrix holding ``values`` at the pattern's entries lo:hi and zero elsewhere, and its transpose,
        for a pattern whose entries need no permutation (they are then its CSR slots lo:hi)."""
        assert self._perm is None, "a part of the pattern needs its entries in CSR order"
        csr = self.matrix
        part = sp.csr_matrix((values, csr.indices[lo:hi], np.clip(csr.indptr, lo, hi) - lo), shape=csr.shape)
        return part, part.T

    def part_product(self, values: np.ndarray, lo: int, hi: int, x: np.ndarray, transpose: bool) -> np.ndarray:
        """``part(values, lo, hi)[0] @ x`` (``transpose``: its transpose's), by scipy's own kernel on the rows that
        hold the slots lo:hi, the same bits: building the part copies its slice of the pattern's columns and
        ``values`` (scipy's constructor prunes views): 616 copies, 0.75 s over 4 updates at 10^7 entries."""
        assert self._perm is None, "a part of the pattern needs its entries in CSR order"
        x = np.ascontiguousarray(x, dtype=np.float64)
        values = np.ascontiguousarray(values, dtype=np.float64)
        if _sparsetools is None:
            matrix, matrix_t = self.part(values, lo, hi)
            return (matrix_t if transpose else matrix) @ x
        P, Q = self.matrix.shape
        indptr = self.matrix.indptr
        first = int(np.searchsorted(indptr, lo, side="right")) - 1
        last = max(int(np.searchsorted(indptr, hi, side="left")), first)
        pointers = np.clip(indptr[first : last + 1], lo, hi) - lo
        columns = self.matrix.indices[lo:hi]
        if transpose:  # the part's transpose is a CSC matrix on the same arrays; its empty columns add nothing
            out = np.zeros(Q)
            _sparsetools.csc_matvec(Q, last - first, pointers, columns, values, x[first:last], out)
            return out
        rows = np.zeros(last - first)
        _sparsetools.csr_matvec(last - first, Q, pointers, columns, values, x, rows)
        out = np.zeros(P)
        out[first:last] = rows
        return out

    def draws(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The Lanczos start vectors (:func:`fixed_draw`) of the matrix's row and column sides, rows relabelled,
        or None when they are not (the defaults then serve); made once."""
        if self.row_order is not None and self._draws is None:
            P, Q = self.matrix.shape
            self._draws = (self.to_rows(fixed_draw(P)), fixed_draw(Q))
        return self._draws

    def block_draws(self, rows: bool, size: int) -> np.ndarray:
        """The (size, n) generic vectors of :func:`top_singular_block` for the matrix (``rows``: the iteration
        runs on the row side, so they are of the column side) or its transpose (of the row side, relabelled)."""
        key = (rows, size)
        if key not in self._block_draws:
            P, Q = self.matrix.shape
            n = Q if rows else P
            draws = fixed_draw(n * size).reshape(size, n)
            self._block_draws[key] = draws if rows else self.to_rows(draws.T).T.copy()
        return self._block_draws[key]

    def to_rows(self, u: np.ndarray) -> np.ndarray:
        """A row-side vector of d (or columns of them) as one of the matrix."""
        return u if self.row_order is None else u[self.row_order]

    def from_rows(self, u: np.ndarray) -> np.ndarray:
        """A row-side vector of the matrix (or columns of them) as one of d."""
        if self.row_order is None:
            return u
        out = np.empty_like(u)
        out[self.row_order] = u
        return out

    def on(self, device: torch.device) -> DevicePattern:
        """The same pattern on a torch ``device``."""
        return DevicePattern(self, device)


def csr_tensor(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """A torch CSR matrix of a known valid structure."""
    with warnings.catch_warnings():  # torch says once per process that sparse CSR support is in beta
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, size=shape, check_invariants=False)


def grouped_rows(rows: np.ndarray, cols: np.ndarray, n_rows: int) -> np.ndarray | None:
    """The rows in the order the entries visit them, when each row's entries are together with increasing
    columns and the rows are not already in increasing order (then the pattern needs no relabelling); rows
    without entries follow.  None otherwise."""
    if rows.size < 2:
        return None
    starts = np.flatnonzero(np.diff(rows)) + 1
    visited = rows[np.concatenate([[0], starts])]
    if np.all(np.diff(visited) > 0) or np.unique(visited).size < visited.size:
        return None
    ends = np.concatenate([starts, [rows.size]])
    step = np.diff(cols)
    step[ends[:-1] - 1] = 1  # no order is asked between one row's last column and the next row's first
    if np.any(step <= 0):
        return None
    missing = np.setdiff1d(np.arange(n_rows), visited, assume_unique=True)
    return np.concatenate([visited, missing])


class DevicePattern:
    """A :class:`SparsePattern` kept on a torch device (a GPU): each fill copies the values there once, and
    the matrix and its transpose multiply host vectors there (:class:`DeviceMatrix`).

    The Lanczos loop stays on the host: a step moves one vector of each side (P + Q numbers) across, while
    the products read every entry; the transpose is a second CSR structure, since torch multiplies CSR
    matrices only.
    """

    def __init__(self, pattern: SparsePattern, device: torch.device):
        self.device, self.shape = torch.device(device), pattern.matrix.shape
        csr = pattern.matrix
        order = np.arange(csr.nnz) if pattern._perm is None else pattern._perm  # CSR slot -> value's position
        slot = sp.csr_matrix((np.arange(1.0, csr.nnz + 1), csr.indices, csr.indptr), shape=self.shape)
        csr_t = slot.T.tocsr()  # the transpose's slots, holding 1 + the CSR slot of the same entry

        def index(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.asarray(a, dtype=np.int64)).to(self.device)

        self._structure = [
            (index(csr.indptr), index(csr.indices), index(order)),
            (index(csr_t.indptr), index(csr_t.indices), index(order[csr_t.data.astype(np.int64) - 1])),
        ]

    def fill(self, values: np.ndarray) -> tuple[DeviceMatrix, DeviceMatrix]:
        """The matrix with ``values`` (in the pattern's order) and its transpose, on the device."""
        flat = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(self.device)
        shapes = (self.shape, self.shape[::-1])
        matrices = [
            csr_tensor(crow, col, flat[perm], shape) for (crow, col, perm), shape in zip(self._structure, shapes)
        ]
        squared = float(values @ values)
        return DeviceMatrix(matrices[0], squared), DeviceMatrix(matrices[1], squared)


class DeviceMatrix:
    """diag(left) M diag(right) for a sparse torch matrix M (either scaling may be absent), multiplying numpy
    arrays there; ``squared`` is its squared Frobenius norm."""

    def __init__(
        self, matrix: torch.Tensor, squared: float, left: np.ndarray | None = None, right: np.ndarray | None = None
    ):
        self.matrix, self.squared, self.shape = matrix, squared, tuple(matrix.shape)
        self.left, self.right = left, right

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        if self.right is not None:
            x = x * (self.right if x.ndim == 1 else self.right[:, None])
        dtype = np.float32 if self.matrix.dtype == torch.float32 else np.float64
        vector = torch.from_numpy(np.ascontiguousarray(x, dtype=dtype)).to(self.matrix.device)
        out = (self.matrix @ vector).cpu().numpy().astype(np.float64, copy=False)
        if self.left is not None:
            out *= self.left if out.ndim == 1 else self.left[:, None]
        return out


def squared_norm(d: np.ndarray | sp.spmatrix | DeviceMatrix) -> float:
    """||d||_F^2."""
    if isinstance(d, DeviceMatrix):
        return d.squared
    flat = d.data if sp.issparse(d) else np.ravel(d)
    return float(flat @ flat)


_DRAWS: dict[int, np.ndarray] = {}


def fixed_draw(size: int) -> np.ndarray:
    """``default_rng(0).standard_normal(size)``, drawn once per size and shared (callers only read it): every
    call starts from the same generic vectors, and drawing them cost more than a Lanczos step on
    MovieLens-100K."""
    if size not in _DRAWS:
        _DRAWS[size] = np.random.default_rng(0).standard_normal(size)
    return _DRAWS[size]


class SingularPair(NamedTuple):
    """d v = sigma u with unit u, v; ``upper`` >= sigma bounds the top singular value (see the module doc)."""

    u: np.ndarray
    sigma: float
    v: np.ndarray
    upper: float


def ritz_pair(
    u: np.ndarray,
    d_t: Any,
    total: Callable[[np.ndarray], np.ndarray],
    to_shared: Callable[[np.ndarray], np.ndarray],
    upper: float,
) -> SingularPair:
    """The singular pair of the Ritz vector ``u`` (normalized here): v = d^T u, mapped ``to_shared`` and summed
    by ``total``, sigma = ||v||, and the bound ``upper`` raised to sigma where it is below."""
    u = u / np.linalg.norm(u)
    v = total(to_shared(d_t @ u))
    sigma = float(np.linalg.norm(v))
    return SingularPair(u, sigma, v / sigma if sigma > 0 else v, max(upper, sigma))


def top_singular_pair(
    d: np.ndarray | sp.spmatrix,
    d_t: np.ndarray | sp.spmatrix | None = None,
    start: np.ndarray | None = None,
    tol: float = 1e-7,
    max_iter: int = 300,
    stop: Callable[[float, float], bool] | None = None,
    total: Callable[[np.ndarray], np.ndarray] | None = None,
    draws: tuple[np.ndarray, np.ndarray] | None = None,
    to_shared: Callable[[np.ndarray], np.ndarray] | None = None,
) -> SingularPair:
    """The top singular pair of d (P x Q, P <= Q) and an upper bound on its value.

    Lanczos with full reorthogonalization on d d^T from ``start`` (a previous u),
    stopped when the top Ritz pair's residual is below ``tol`` times its value,
    ARPACK's criterion with the same ``tol`` as ``svds(tol=tol)``, or earlier
    when ``stop(sigma, upper)`` says the current bounds are enough.  ``d_t`` is
    d's transpose when the caller has one.  Falls back to ARPACK if the
    iteration has not converged after ``max_iter`` steps.

    ``total`` makes it the distributed Lanczos of a matrix split by columns over the ranks (d = sum of the
    ranks' column blocks, as d^T is split by rows on the sharded structured path): each rank multiplies
    its own block and ``total`` sums the p-vector (and ||d||_F^2, and the other side's vector once at the
    end) over the ranks, so every rank runs the same iteration.  It then answers after ``max_iter`` steps
    with the Ritz pair it has, since no rank holds the matrix for ARPACK.

    ``draws``: the generic vectors (of d's two sides) the iteration starts from, :func:`fixed_draw` of each
    size by default; a caller whose d is another matrix with its rows permuted passes them permuted too,
    so that the iteration is that matrix's.  ``to_shared`` maps the other side's vector d^T u back from such
    a permutation (before ``total`` sums it: each rank may permute its own columns of d).
    """
    to_shared = to_shared or (lambda vector: vector)
    split = total is not None
    total = total or (lambda partial: partial)
    p = d.shape[0]
    d_t = d.T if d_t is None else d_t
    steps = min(p, max_iter)
    basis = np.empty((steps + 1, p))
    alpha, beta = np.empty(steps), np.empty(steps)
    draws = (fixed_draw(p), fixed_draw(d.shape[1])) if draws is None else draws
    q = draws[0]
    warm = start is not None and np.any(start)
    # One reduction carries ||d||_F^2 (>= sigma^2) and, from a warm start, a generic vector of d's range.
    generic = d @ draws[1] if warm else np.zeros(0)
    reduced = total(np.concatenate([[squared_norm(d)], generic]))
    scale, mix = float(reduced[0]), reduced[1:]
    if warm:
        # A little of the generic vector keeps the start from being (nearly) an eigenvector of d d^T other
        # than the top one; drawn from all of R^p, its share in the range would shrink with p / rank(d)
        # (at 50 entries of a 10^5 x 10^5 matrix, Lanczos then stopped on the wrong one).
        norm = np.linalg.norm(mix)
        q = start / np.linalg.norm(start) + (0.01 / norm * mix if norm > 0 else 0.0)
    basis[0] = q / np.linalg.norm(q)
    if scale == 0:
        return SingularPair(basis[0], 0.0, np.zeros(d.shape[1]), 0.0)
    theta, vec = 0.0, np.ones(1)
    times, times_t = vector_product(d), vector_product(d_t)
    for j in range(steps):
        w = total(times(times_t(basis[j])))
        alpha[j] = basis[j] @ w
        # Full reorthogonalization (twice is enough, Kahan): the basis is at most a few dozen vectors.
        for _ in range(2):
            w -= basis[: j + 1].T @ (basis[: j + 1] @ w)
        beta[j] = np.linalg.norm(w)
        breakdown = beta[j] <= 1e-14 * scale
        # Convergence is checked every CHECK_EVERY steps: at most CHECK_EVERY - 1 extra steps against fewer
        # tridiagonal solves.  Checking every 2 steps was measured faster at scale but stopped on the second of
        # two singular values 3e-7 apart in tests/test_glmo.py's 10^5 x 10^5 case; a longer first Krylov space
        # gives the top one more room to show up.  A caller's ``stop`` (an early answer, which certifies
        # nothing) is asked every STOP_EVERY steps from the first check on: 9% fewer steps at 1M ratings.
        # Asked after 2 steps, the pair's bound was not yet a bound (tests/test_sets.py), and it steered the
        # smoothed pricing of column generation wrong (tests/test_glmo.py no longer converged).
        checked = not (j + 1) % CHECK_EVERY or breakdown or j + 1 == steps
        if not checked and (stop is None or j + 1 < CHECK_EVERY or (j + 1) % STOP_EVERY):
            basis[j + 1] = w / beta[j]
            continue
        theta, vec = top_ritz(alpha[: j + 1], beta[:j])
        residual = beta[j] * abs(vec[-1])
        upper = float(np.sqrt(max(theta, 0.0) + residual))
        last = split and j + 1 == steps
        if (checked and (residual <= tol * abs(theta) or breakdown or last)) or (
            stop is not None and stop(np.sqrt(max(theta, 0.0)), upper)
        ):
            return ritz_pair(vec @ basis[: j + 1], d_t, total, to_shared, upper)
        if j + 1 < steps:
            basis[j + 1] = w / beta[j]
    if isinstance(d, DeviceMatrix):
        d = spla.LinearOperator(d.shape, matvec=d.__matmul__, rmatvec=d_t.__matmul__, dtype=np.float64)
    u, s, vt = spla.svds(d, k=1, tol=tol)
    return SingularPair(u[:, 0], float(s[0]), to_shared(vt[0]), float(s[0]))


#: Vectors per block of :func:`top_singular_block`.
BLOCK = 4
#: A coarse (float32) block iteration hands over to the exact one once its residual is below this times its
#: value.  On the 10^6- and 10^7-rating completion runs it got there, and the exact iteration then took 4 block
#: steps to 1e-7 (11-18 from 1e-4, 6-8 from 1e-5).
COARSE_TOL = 1e-6


def top_singular_block(
    d: np.ndarray | sp.spmatrix,
    d_t: np.ndarray | sp.spmatrix | None = None,
    start: np.ndarray | None = None,
    tol: float = 1e-7,
    max_iter: int = 300,
    stop: Callable[[float, float], bool] | None = None,
    total: Callable[[np.ndarray], np.ndarray] | None = None,
    draws: np.ndarray | None = None,
    size: int | None = None,
    to_shared: Callable[[np.ndarray], np.ndarray] | None = None,
    coarse: tuple[Any, Any] | None = None,
) -> tuple[SingularPair, np.ndarray | None]:
    """:func:`top_singular_pair` by block Lanczos, and the top ``size`` Ritz vectors (rows, best first) of d d^T
    found with the pair, which warm-start the next call as its ``start``; ``size`` is :data:`BLOCK` by default.

    A block's two products read the matrix once for all its vectors: at 10^7 entries, 4 vectors cost 1.8 times
    one.  And a block converges on a cluster of top singular values, where a single vector crawls: on the
    directions of a 1M-rating completion run, certified calls needed 65 single steps from the last atom's vector
    against 24 block steps from the last call's Ritz vectors.

    ``start``: up to ``size`` unit vectors of R^p as rows; each takes a little of a generic vector of d's range
    (as a single start does), and generic range vectors complete the block.  ``draws``: the (size, q) generic
    vectors of d's column side those come from (rows permuted with d's columns, as for
    :func:`top_singular_pair`), :func:`fixed_draw` by default.  Stopping, ``tol``, ``total`` and ``to_shared``
    as there, but ``stop`` is asked from the second block on: the first block's Rayleigh-Ritz bound was not yet
    a bound in tests/test_sets.py.  A block that loses rank (an invariant subspace, or d of lower rank than the
    space) and a block that has not converged after ``max_iter`` vectors hand over to
    :func:`top_singular_pair` from the best Ritz vector.

    ``coarse``: d and d_t in float32, read in a third less time.  The iteration runs on them until ``stop``
    holds (an early answer, which certifies nothing either way) or its residual is below :data:`COARSE_TOL`,
    and then goes on with d and d_t from the Ritz vectors it found, so that the bound of a converged pair is
    exact as without it.  The pair's v is d_t u in either case.
    """
    split = total is not None
    total = total or (lambda partial: partial)
    shared = to_shared or (lambda vector: vector)
    p, q = d.shape
    d_t = d.T if d_t is None else d_t
    b = BLOCK if size is None else size
    steps = min(p, max_iter) // b
    draws = fixed_draw(q * b).reshape(b, q) if draws is None else draws
    first = d if coarse is None else coarse[0]
    generic = np.asarray(first @ np.ascontiguousarray(draws.T)).T  # (b, p): d's range, wherever its rows are
    reduced = total(np.concatenate([[squared_norm(first)], generic.ravel()]))
    scale, generic = float(reduced[0]), reduced[1:].reshape(b, p)

    def single(u: np.ndarray | None) -> tuple[SingularPair, None]:
        pair_draws = (fixed_draw(p), draws[0])
        return top_singular_pair(d, d_t, u, tol, max_iter, stop, total if split else None, pair_draws, to_shared), None

    norms = np.linalg.norm(generic, axis=1)
    if scale == 0 or steps < 2 or not np.all(norms > 0):
        return single(None if start is None else start[0])
    rows = generic / norms[:, None]
    if start is not None:
        k = min(len(start), b)
        rows[:k] = start[:k] / np.linalg.norm(start[:k], axis=1, keepdims=True) + 0.01 * rows[:k]
    if coarse is not None:
        found = block_iteration(*coarse, d_t, rows, scale, COARSE_TOL, steps, stop, total, shared, narrow=split)
        if found is not None and found[2]:
            return found[0], found[1]
        if found is not None:
            rows = found[1]  # the Ritz vectors, orthonormal: the exact iteration starts from them as they are
    found = block_iteration(d, d_t, d_t, rows, scale, tol, steps, stop, total, shared)
    if found is None:
        return single(None if start is None else start[0])
    return (found[0], found[1]) if found[0] is not None else single(found[1][0])


def block_iteration(
    d: Any,
    d_t: Any,
    final_t: Any,
    rows: np.ndarray,
    scale: float,
    tol: float,
    steps: int,
    stop: Callable[[float, float], bool] | None,
    total: Callable[[np.ndarray], np.ndarray],
    shared: Callable[[np.ndarray], np.ndarray],
    narrow: bool = False,
) -> tuple[SingularPair | None, np.ndarray, bool] | None:
    """The loop of :func:`top_singular_block` from the (b, p) start ``rows``, on d d^T of squared Frobenius norm
    ``scale``: (the pair, its Ritz vectors, whether ``stop`` ended it), the pair's v being ``final_t`` u; (None,
    the Ritz vectors, False) when the block lost rank or ran out of steps; None when the start rows are
    dependent.  ``narrow``: d's products are float32 values, and ``total`` sums them over the ranks as such, in
    half the bytes (the sum rounds to float32 as the products did); ``final_t``'s are summed in float64."""
    b, p = rows.shape
    block, r = np.linalg.qr(rows.T)
    if np.abs(np.diag(r)).min() <= 1e-8:
        return None
    basis = np.empty(((steps + 1) * b, p))
    basis[:b] = block.T
    band = np.zeros((b + 1, (steps + 1) * b))  # T's lower band: band[i - j, j] = T[i, j]
    low, high = np.tril_indices(b), np.triu_indices(b)
    for j in range(steps):
        lo, m = j * b, (j + 1) * b
        w = np.asarray(d @ (d_t @ np.ascontiguousarray(basis[lo:m].T)))
        w = (total(w.astype(np.float32)).astype(np.float64) if narrow else total(w)).T  # (b, p)
        a = basis[lo:m] @ w.T
        band[low[0] - low[1], lo + low[1]] = (a + a.T)[low] / 2
        # Full reorthogonalization, twice (Kahan), removes this block's and the last one's parts too.
        for _ in range(2):
            w -= (w @ basis[:m].T) @ basis[:m]
        block, r = np.linalg.qr(w.T)
        values, vectors = sla.eig_banded(band[:, :m], lower=True, select="i", select_range=(m - 1, m - 1))
        theta, s = values[0], vectors[:, 0]
        residual = float(np.linalg.norm(r @ s[-b:]))  # ||A y - theta y|| for y = basis[:m]^T s
        upper = float(np.sqrt(max(theta, 0.0) + residual))
        stopped = stop is not None and j >= 1 and stop(np.sqrt(max(theta, 0.0)), upper)
        if residual <= tol * abs(theta) or stopped:
            ritz = ritz_vectors(band[:, :m], basis[:m], b)
            return ritz_pair(ritz[0], final_t, total, shared, upper), ritz, stopped
        if np.abs(np.diag(r)).min() <= 1e-14 * scale:
            break
        basis[m : m + b] = block.T
        band[b + high[0] - high[1], lo + high[1]] = r[high]  # T[m + i, lo + c] = r[i, c], upper triangular
    return None, ritz_vectors(band[:, :m], basis[:m], b), False


def ritz_vectors(band: np.ndarray, basis: np.ndarray, b: int) -> np.ndarray:
    """The top b Ritz vectors (rows, best first) of the block tridiagonal matrix in lower ``band`` form on the
    orthonormal ``basis`` rows."""
    m = len(basis)
    _, top = sla.eig_banded(band, lower=True, select="i", select_range=(m - b, m - 1))
    return top[:, ::-1].T @ basis
