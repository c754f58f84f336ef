"""Norm balls centred at the origin: l1, l2 (Frobenius) and nuclear norm."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import cvxpy as cp
import numpy as np
import scipy.linalg as sla
import torch

from fullcomp.errors import DomainError
from fullcomp.sets import lanczos
from fullcomp.sets.atoms import Atom, Entries, MixtureAtom, RankOneAtom, ScaledRows
from fullcomp.sets.base import Ball, Set, as_shape, check_radius
from fullcomp.sets.lanczos import DevicePattern, SingularPair, SparsePattern
from fullcomp.sets.subspace import RitzSubspace

if TYPE_CHECKING:
    from fullcomp.sets.segments import Segments

LANCZOS_TOL = 1e-7
#: Up to this many rows or columns on the shorter side and this many entries, the top pair comes from a dense
#: eigensolve of the Gram matrix: at 40 x 50 it took 0.2 ms against 0.55 ms for warm-started Lanczos; at
#: 100 x 200 Lanczos won, and a long other side makes the Gram product the larger cost.
DENSE_SIDE, DENSE_SIZE = 64, 1 << 16
#: Heuristic pricing (:mod:`fullcomp.sets.subspace`) from this many read entries: measured slower on
#: MovieLens-100K (80,000 entries), no faster at 800,000, faster at 8,000,000 (docs/performance.md).
SUBSPACE_ENTRIES = 2_000_000
#: From this many entries (on sharded entries, all ranks') the sparse LMO runs block Lanczos
#: (:func:`~fullcomp.sets.lanczos.top_singular_block`), warm-started from the hint's Ritz vectors.
BLOCK_ENTRIES = 500_000
#: From this many rank-one terms a combination of atoms is evaluated by one sampled product: at 10^7 entries
#: that took 0.25-0.3 s for 5 to 60 terms, against about 35 ms a term one by one.
SAMPLED_FACTORS = 8


def small_pair(shape: tuple[int, int]) -> bool:
    """Whether the top singular pair of a matrix of ``shape`` is found densely rather than by Lanczos."""
    return min(shape) == 1 or (min(shape) <= DENSE_SIDE and shape[0] * shape[1] <= DENSE_SIZE)


def flatten(atom: Atom) -> list[tuple[float, Atom]]:
    """(weight, atom) of a mixture's members, or (1, the atom)."""
    return list(zip(atom.weights, atom.atoms)) if isinstance(atom, MixtureAtom) else [(1.0, atom)]


def warm_block(hint: Atom | None, side: str) -> np.ndarray | None:
    """The start of a block Lanczos on the ``side`` ("u" or "v") of a rank-one hint: the Ritz vectors found
    with it, or its own vector."""
    if not isinstance(hint, RankOneAtom):
        return None
    if hint.ritz is not None and hint.ritz[0] == side:
        return hint.ritz[1]
    return getattr(hint, side)[None]


def project_l1(v: np.ndarray, radius: float) -> np.ndarray:
    """Projection onto {||v||_1 <= radius} (Duchi et al., 2008), any shape."""
    flat = v.ravel()
    if np.abs(flat).sum() <= radius:
        return v.copy()
    return (np.sign(flat) * project_simplex(np.abs(flat), radius)).reshape(v.shape)


def project_simplex(v: np.ndarray, total: float = 1.0) -> np.ndarray:
    """The Euclidean projection of ``v`` onto {w >= 0, sum w = total} (the probability simplex by default).

    The library's one simplex projection (sort and threshold, Held et al. 1974; Duchi et al. 2008), used by
    :class:`Simplex`, the l1 and nuclear balls, the spectral sets and F's smoothed weights.  ``v`` is a finite
    array of any shape, summed over all its entries; the result has its shape, in float64.  ``total`` >= 0.
    """
    v = np.asarray(v, dtype=np.float64)
    if total == 0:
        return np.zeros_like(v)
    flat = v.ravel()
    mu = np.sort(flat)[::-1]
    cssv = np.cumsum(mu) - total
    ind = np.arange(1, flat.size + 1)
    rho = np.nonzero(mu - cssv / ind > 0)[0][-1]  # never empty for total > 0: index 0 gives total > 0
    theta = cssv[rho] / (rho + 1.0)
    return np.maximum(v - theta, 0.0)


class L1Ball(Ball):
    """{x : sum |x_i| <= radius}, entrywise for any shape."""

    polytope = True

    def lmo(self, d: np.ndarray) -> np.ndarray:
        out = np.zeros_like(d)
        i = np.argmax(np.abs(d))
        if d.flat[i] != 0:
            out.flat[i] = -self.radius * np.sign(d.flat[i])
        return out

    def project(self, p: np.ndarray) -> np.ndarray:
        return project_l1(p, self.radius)

    def cvxpy_constraints(self, var):
        return [cp.sum(cp.abs(var)) <= self.radius]


class L2Ball(Ball):
    """{x : ||x||_2 <= radius}, Frobenius norm for matrices."""

    def lmo(self, d: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # a non-finite d is refused by its callers' checks
            norm = np.linalg.norm(d)
            return np.zeros_like(d) if norm == 0 else -self.radius * d / norm

    def project(self, p: np.ndarray) -> np.ndarray:
        norm = np.linalg.norm(p)
        return p.copy() if norm <= self.radius else p * (self.radius / norm)

    def cvxpy_constraints(self, var):
        return [cp.norm(cp.vec(var, order="C"), 2) <= self.radius]


def dense_top_pair(d: np.ndarray) -> SingularPair:
    """The top singular pair of a small dense matrix from the top eigenpair of its smaller Gram matrix."""
    wide = d.shape[0] <= d.shape[1]
    a = d if wide else d.T
    values, vectors = sla.eigh(a @ a.T, subset_by_index=[a.shape[0] - 1, a.shape[0] - 1])
    left = vectors[:, 0]
    right = a.T @ left
    sigma = float(np.linalg.norm(right))
    right = right / sigma if sigma > 0 else right
    upper = max(sigma, float(np.sqrt(max(values[0], 0.0))))
    return SingularPair(left, sigma, right, upper) if wide else SingularPair(right, sigma, left, upper)


class NuclearBall(Set):
    """{X : ||X||_* <= radius} for a P x Q matrix.

    The LMO is ``-radius u v^T`` for the top singular pair of the direction,
    found by Lanczos iteration (:mod:`fullcomp.sets.lanczos`) so that only one pair is
    computed; the projection needs all singular values and uses a full SVD.
    """

    def __init__(self, shape, radius: float = 1.0):
        self.shape = as_shape(shape)
        if len(self.shape) != 2:
            raise DomainError(f"NuclearBall needs a matrix shape (P, Q), got {self.shape}")
        self.radius = check_radius(radius)
        # Sparse LMO directions' CSR structure, and whether their Lanczos runs by blocks (BLOCK_ENTRIES).
        self._pattern: tuple[Entries, SparsePattern, bool] | None = None
        self._on_device: tuple[Entries, torch.device, DevicePattern] | None = None  # and its copy on a GPU
        self._other: tuple[Entries, SparsePattern] | None = None  # the pattern of other entries sampled at

    @property
    def diameter(self) -> float:
        return 2.0 * self.radius

    contains_origin = True  # a ball centred at the origin

    def top_singular_pair(
        self,
        d,
        start: np.ndarray | None = None,
        d_t=None,
        tol: float = LANCZOS_TOL,
        stop: Callable[[float, float], bool] | None = None,
        draws: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> SingularPair:
        """(u, sigma, v, upper) with d v = sigma u for the largest singular value; d may be sparse.

        ``start`` warm-starts the Lanczos iteration with a previous singular vector of the
        shorter side (u when P <= Q, else v); consecutive LMO directions are close, so it
        cuts iterations.  ``d_t``: d's transpose, when the caller has it.  ``tol``: the
        Lanczos residual tolerance relative to the singular value; ``stop(sigma, upper)``
        may end the iteration earlier (:func:`fullcomp.sets.lanczos.top_singular_pair`); ``draws``: its
        generic start vectors of the row and column sides.
        """
        p, q = d.shape
        if min(p, q) == 1:
            dense = np.asarray(d.todense() if hasattr(d, "todense") else d).reshape(p, q)
            sigma = float(np.linalg.norm(dense))
            if sigma == 0:
                return SingularPair(np.zeros(p), 0.0, np.zeros(q), 0.0)
            if p == 1:
                return SingularPair(np.ones(1), sigma, dense[0] / sigma, sigma)
            return SingularPair(dense[:, 0] / sigma, sigma, np.ones(1), sigma)
        if small_pair(d.shape):
            return dense_top_pair(np.asarray(d.toarray() if hasattr(d, "toarray") else d))
        d_t = d.T if d_t is None else d_t
        # The residual tolerance bounds the singular vectors' error over the spectral gap, the value's by
        # its square: 1e-7 keeps the LMO value (and so the GLMO certificate) exact to ~1e-12 even when
        # the top two singular values are close; 1e-5 was measured to lose 1e-6 on such directions.
        if p <= q:
            return lanczos.top_singular_pair(d, d_t, start, tol=tol, stop=stop, draws=draws)
        v, sigma, u, upper = lanczos.top_singular_pair(d_t, d, start, tol=tol, stop=stop, draws=draws and draws[::-1])
        return SingularPair(u, sigma, v, upper)

    def lmo(self, d: np.ndarray) -> np.ndarray:
        if not np.any(d):
            return np.zeros_like(d)
        u, _, v, _ = self.top_singular_pair(d)
        return -self.radius * np.outer(u, v)

    def lmo_atom(self, direction: np.ndarray, entries: Entries, hint: Atom | None = None) -> Atom:
        return self.lmo_bounded(direction, entries, hint)[0]

    def subspace(self, entries: Entries, device: torch.device | None = None) -> RitzSubspace | None:
        """Rayleigh-Ritz pricing on past singular vectors for sparse entries of at least
        :data:`SUBSPACE_ENTRIES` (on sharded entries, this rank's), where a pricing call's passes over the
        entries cost more than the extra master solves and atom evaluations that the heuristic atoms bring.
        None on a ``device`` that multiplies the LMO's directions (a GPU): the pricer's products run on the
        host, and nothing says they pay there."""
        on_device = device is not None and torch.device(device).type in lanczos.PRODUCT_DEVICES
        if on_device or len(entries) < SUBSPACE_ENTRIES or len(entries) == self.size or small_pair(self.shape):
            return None
        return RitzSubspace(self.radius, entries, self._pattern_for(entries))

    def combination_at(
        self, atoms: list[Atom], weights: np.ndarray, entries: Entries, add_to: np.ndarray | None = None
    ) -> np.ndarray:
        """sum_j weights_j atoms_j at the entries (plus ``add_to``, in place); from :data:`SAMPLED_FACTORS`
        rank-one terms (mixtures flattened) on sparse entries, by one sampled product U W^T of their stacked
        factors."""
        terms = [(w * v, member) for w, atom in zip(weights, atoms) for v, member in flatten(atom)]
        factors = [(w, a) for w, a in terms if isinstance(a, RankOneAtom)]
        if len(factors) < SAMPLED_FACTORS or len(entries) == self.size:
            return super().combination_at([a for _, a in terms], np.array([w for w, _ in terms]), entries, add_to)
        others = [(w, a) for w, a in terms if not isinstance(a, RankOneAtom)]
        left = np.stack([w * a.u for w, a in factors], axis=1)
        right = np.stack([a.v for _, a in factors], axis=1)
        pattern = self._sampling_pattern(entries)
        if not others:
            return pattern.sample(left, right, add_to)
        out = super().combination_at(
            [a for _, a in others], np.array([w for w, _ in others]), entries, pattern.sample(left, right)
        )
        if add_to is None:
            return out
        add_to += out
        return add_to

    def image(
        self,
        atom: Atom,
        V: np.ndarray,
        entries: Entries,
        segments: Segments | None,
        direction: np.ndarray | ScaledRows | None = None,
    ) -> np.ndarray | None:
        """V a for a rank-one atom a = u v^T as u^T V_g v, V_g the matrix of V's row g on its segment: one sparse
        product over the entries, against evaluating a there (0.1 s at 10^7 entries) and multiplying.  For the
        LMO's own entries held in CSR order (each row's entries together) with known segments, or priced for
        a :class:`ScaledRows` direction whose factors the LMO holds: then one product of G with v, summed over
        each row of V's matrix rows."""
        held = self._pattern
        if not isinstance(atom, RankOneAtom) or held is None or held[0] is not entries:
            return None
        pattern = held[1]
        if isinstance(direction, ScaledRows):
            image = pattern.owned_products(direction, atom.u, atom.v)
            if image is not None:
                return entries.total(image)
        if segments is None or pattern._perm is not None:
            return None
        u, out = pattern.to_rows(atom.u), np.zeros(len(V))
        for g, lo, hi in zip(segments.rows, segments.lo, segments.hi):
            out[g] += u @ pattern.part_product(V[g, lo:hi], lo, hi, atom.v, transpose=False)
        return entries.total(out)

    def _sampling_pattern(self, entries: Entries) -> SparsePattern:
        """The LMO's pattern for its entries, another (kept too) for others: a run samples at the entries it
        reads and at those it tracks."""
        if self._pattern is not None and self._pattern[0] is entries:
            return self._pattern[1]
        if self._other is None or self._other[0] is not entries:
            self._other = (entries, SparsePattern(entries.rows, entries.cols, self.shape))
        return self._other[1]

    def _pattern_for(self, entries: Entries) -> SparsePattern:
        if self._pattern is None or self._pattern[0] is not entries:
            # The split Lanczos sums the vectors of its side over the ranks, so that side keeps d's coordinates:
            # a rank's rows may be relabelled only when it holds whole rows (the iteration is on the columns).
            relabel = not entries.sharded or entries.blocks == "rows"
            pattern = SparsePattern(entries.rows, entries.cols, self.shape, relabel=relabel)
            # Decided on every rank's entries together, so that the ranks run the same iteration.
            count = float(entries.total(np.array([len(entries)], dtype=np.float64))[0])
            blocked = count >= BLOCK_ENTRIES and min(self.shape) >= 8 * lanczos.BLOCK
            self._pattern = (entries, pattern, blocked)
        return self._pattern[1]

    def lmo_bounded(
        self,
        direction: np.ndarray | ScaledRows,
        entries: Entries,
        hint: Atom | None = None,
        enough: Callable[[float, float], bool] | None = None,
        device: torch.device | None = None,
    ) -> tuple[Atom, float]:
        """Rank-one atom from the top singular pair of the direction, sparse when it lives on few entries,
        and the lower bound -radius * upper on the LMO value.

        ``hint``, a previous rank-one atom, warm-starts the singular-pair solver.  On a ``device`` of
        :data:`~fullcomp.sets.lanczos.PRODUCT_DEVICES` (a GPU) the sparse products run there, through torch.
        """
        if isinstance(direction, ScaledRows) and not self.takes_scaled_rows(entries, device):
            direction = direction.at(entries)
        pattern, coarse = None, None
        if len(entries) == self.size and not entries.sharded:
            matrix = np.empty(self.size)
            matrix[entries.flat] = direction
            matrix, transpose = matrix.reshape(self.shape), None
        else:
            pattern = self._pattern_for(entries)
            device = None if device is None else torch.device(device)
            if device is not None and device.type in lanczos.PRODUCT_DEVICES and not small_pair(self.shape):
                held = self._on_device
                if held is None or held[0] is not entries or held[1] != device:
                    self._on_device = (entries, device, pattern.on(device))
                matrix, transpose = self._on_device[2].fill(direction)
            elif isinstance(direction, ScaledRows):
                (matrix, transpose), coarse = pattern.scaled_operators(direction)
            elif self._pattern[2]:
                matrix, transpose = pattern.operators(direction)
            else:
                matrix, transpose = pattern.fill(direction)
        r = self.radius
        stop = None if enough is None else (lambda sigma, upper: enough(-r * sigma, -r * upper))
        ritz = None
        if entries.sharded or (pattern is not None and self._pattern[2]):
            # Sharded, this rank holds a block of the direction's rows (columns): Lanczos on the column (row)
            # side, where each product is local and one all-reduce of a Q- (P-) vector completes it (DFW-Trace's
            # distributed power method).  Otherwise on the shorter side, by blocks at scale.  Relabelled rows
            # (never the iteration's side on sharded entries) go back to d's before any sum over the ranks.
            on_rows = entries.blocks == "cols" if entries.sharded else self.shape[0] <= self.shape[1]
            side, other = (matrix, transpose) if on_rows else (transpose, matrix)
            coarse = coarse if coarse is None or on_rows else coarse[::-1]
            name, total = ("u" if on_rows else "v"), (entries.total if entries.sharded else None)
            shared = None if on_rows else pattern.from_rows
            if self._pattern[2]:
                start = warm_block(hint, name)
                start = start if start is None or not on_rows else pattern.to_rows(start.T).T
                draws = pattern.block_draws(on_rows, lanczos.BLOCK)
                (a, sigma, b, upper), found = lanczos.top_singular_block(
                    side,
                    other,
                    start,
                    LANCZOS_TOL,
                    stop=stop,
                    total=total,
                    draws=draws,
                    to_shared=shared,
                    coarse=coarse,
                )
                ritz = None if found is None else (name, found if not on_rows else pattern.from_rows(found.T).T)
            else:
                start = getattr(hint, name) if isinstance(hint, RankOneAtom) else None
                draws = pattern.draws()
                draws = draws if draws is None or on_rows else draws[::-1]
                a, sigma, b, upper = lanczos.top_singular_pair(
                    side, other, start, LANCZOS_TOL, stop=stop, total=total, draws=draws, to_shared=shared
                )
            u, v = (pattern.from_rows(a), b) if on_rows else (b, a)
        else:
            start = None
            if isinstance(hint, RankOneAtom):
                wide = self.shape[0] <= self.shape[1]  # Lanczos runs on the row side
                start = (hint.u if pattern is None else pattern.to_rows(hint.u)) if wide else hint.v
            draws = None if pattern is None else pattern.draws()
            u, sigma, v, upper = self.top_singular_pair(matrix, start, transpose, LANCZOS_TOL, stop, draws)
            u = u if pattern is None else pattern.from_rows(u)
        if sigma == 0:
            return RankOneAtom(np.zeros(self.shape[0]), np.zeros(self.shape[1])), -r * upper
        return RankOneAtom(-r * u, v, ritz), -r * upper

    def takes_scaled_rows(self, entries: Entries, device: torch.device | None = None) -> bool:
        """True where the LMO runs by blocks on this host's entries, through torch's MKL kernel: it then multiplies
        a :class:`ScaledRows` direction by its factors.  Sharded too, on blocks of rows or of columns: each rank
        scales the rows of its own block of G, and the split iteration sums the products as for any direction."""
        if len(entries) == self.size or not torch.backends.mkl.is_available():
            return False
        if device is not None and torch.device(device).type in lanczos.PRODUCT_DEVICES:
            return False
        self._pattern_for(entries)
        return self._pattern[2]

    def project(self, p: np.ndarray) -> np.ndarray:
        """Soft-threshold the singular values onto the l1 ball of ``radius``.

        The singular pairs come from an eigendecomposition of the smaller Gram
        matrix (P x P when P <= Q), several times cheaper than an SVD of p; the
        squared spectrum loses accuracy only on singular values ~1e-8 of the
        largest, which the threshold zeroes anyway unless p is inside the ball.
        """
        wide = p.shape[0] <= p.shape[1]
        a = p if wide else p.T
        eigenvalues, u = np.linalg.eigh(a @ a.T)
        s = np.sqrt(np.clip(eigenvalues, 0.0, None))
        if s.sum() <= self.radius:
            return p.copy()
        shrunk = project_simplex(s, self.radius)
        keep = shrunk > 0
        # a = U diag(s) V^T, so the projection U diag(shrunk) V^T is U diag(shrunk / s) U^T a.
        out = (u[:, keep] * (shrunk[keep] / s[keep])) @ (u[:, keep].T @ a)
        return out if wide else out.T

    def cvxpy_constraints(self, var):
        return [cp.normNuc(var) <= self.radius]
