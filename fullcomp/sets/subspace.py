"""Heuristic pricing for the nuclear ball: Rayleigh-Ritz on a span of past singular vectors.

Column generation prices directions d(q) = sum_g q_g V_g, the rows of a tracker V
that lives on fixed entries and moves little between calls.  For an orthonormal
basis W (l x k) of past singular vectors of the longer side, and the products
B_g = L_g^T W (s x k; L_g is V_g as a longer-side-first matrix), the best atom
whose longer-side vector lies in span(W) comes from the top eigenpair of the
k x k matrix M^T M, M = sum_g q_g B_g, and its images <V_g, atom> come from B:
no pass over the entries.  Such an atom carries no bound on the LMO value, so
it certifies nothing; it spares a Lanczos run whenever it improves the master
(a heuristic pricing before the exact one, as column-generation codes do).

The basis sits on the longer side so that B (n x s x k, s = min(P, Q)) stays
small.  B follows V across calls through the tracker's revisions
(V = keep V_since + weight J, J on a few columns), as the pool's images do.
On sharded entries (a rank's rows or columns) the basis and B are the same
on every rank: a new vector's products are summed over the ranks (n x s
numbers), and the ranks' sampled Jacobians are gathered so that each applies
all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from fullcomp import distributed
from fullcomp.sets.atoms import Entries, RankOneAtom
from fullcomp.sets.lanczos import BLOCK, SparsePattern

if TYPE_CHECKING:
    from fullcomp.sets.segments import Segments
    from fullcomp.trackers import Revision

#: Past singular vectors kept; the oldest leaves first.
BASIS = 40
#: A new vector whose part outside the basis is below this (relative) adds nothing.
INDEPENDENT = 1e-6


class RitzSubspace:
    """Rayleigh-Ritz pricing of q^T V for a nuclear ball of ``radius`` on the sparse ``entries``.

    Row j of ``basis`` is a unit vector w_j of the longer side and ``products[g, j]`` is L_g^T w_j; the
    first ``count`` rows are in use (the others are zero), and once all ``size`` are, a new vector replaces
    the oldest.
    """

    def __init__(self, radius: float, entries: Entries, pattern: SparsePattern, size: int | None = None):
        P, Q = entries.shape
        self.radius, self.entries, self.pattern = radius, entries, pattern
        self.size = BASIS if size is None else size
        self.rows_long = P >= Q
        self.long_at, self.short_at = (entries.rows, entries.cols) if self.rows_long else (entries.cols, entries.rows)
        self.long, self.short = (P, Q) if self.rows_long else (Q, P)
        self.basis = np.zeros((self.size, self.long))
        self.products = np.zeros((0, self.size, self.short))
        self.count = self.oldest = 0
        self.tag: int | None = None  # the revision of V that the products are for
        self.V: np.ndarray | None = None
        self.segments: Segments | None = None

    def follow(self, V: np.ndarray, revision: Revision | None, segments: Segments | None = None) -> None:
        """Make the products those with this call's V: carried over when ``revision`` relates V to the last
        call's, else the basis starts empty (recomputing it would cost n products per vector).  ``segments``:
        V's, when known (:mod:`fullcomp.sets.segments`); a new vector's products then read each segment's
        row on the segment alone, one pass over the entries instead of n."""
        n = V.shape[0]
        carried = revision is not None and self.tag is not None and self.tag in (revision.tag, revision.since)
        carried = carried and len(self.products) == n
        if carried and self.tag != revision.tag:
            self.products *= revision.keep
            J = revision.jacobian
            if J is not None and self.count:
                columns, values = J.columns.cpu().numpy(), J.values.detach().cpu().numpy().astype(np.float64)
                sample = (self.long_at[columns], self.short_at[columns], values)
                for long, short, values in distributed.gather(sample) if self.entries.sharded else [sample]:
                    self._add_sample(long, short, values, revision.weight)
        elif not carried:
            self.basis, self.products = np.zeros_like(self.basis), np.zeros((n, self.size, self.short))
            self.count = self.oldest = 0
        self.tag = None if revision is None else revision.tag
        self.V, self.segments = V, segments if self.pattern._perm is None else None

    def _add_sample(self, long: np.ndarray, short: np.ndarray, values: np.ndarray, weight: float) -> None:
        """products += weight * J_g^T w_j for J with ``values`` (n, t) at the (long, short) indices."""
        k, t = self.count, len(long)
        gathered = np.ascontiguousarray(self.basis[:k, long].T)  # (t, k)
        # One sparse (s, t) matrix per row of J sums its entries into their short-side indices.
        scatter = sp.csr_matrix((np.ones(t), (short, np.arange(t))), shape=(self.short, t))
        for g, row in enumerate(values):
            scatter.data = row[scatter.indices]
            self.products[g, :k] += weight * (scatter @ gathered).T

    def add(self, atom: RankOneAtom) -> None:
        """Add the longer-side vector of a priced atom to the basis (n sparse products with this call's V)."""
        vector = atom.u if self.rows_long else atom.v
        norm = np.linalg.norm(vector)
        if norm == 0 or self.V is None:
            return
        slot = self.count if self.count < self.size else self.oldest
        # The vector it replaces, if any, leaves the basis: zero rows keep every product over all rows right.
        self.basis[slot], self.products[:, slot] = 0.0, 0.0
        w = vector / norm
        for _ in range(2):  # twice is enough (Kahan)
            w = w - (self.basis @ w) @ self.basis
        norm = np.linalg.norm(w)
        if norm <= INDEPENDENT:
            return
        self.basis[slot] = w / norm
        column = np.zeros((len(self.V), self.short))  # rows of V outside every segment stay zero
        # The pattern's matrix may have its rows relabelled (SparsePattern.to_rows).
        vector = self.pattern.to_rows(self.basis[slot]) if self.rows_long else self.basis[slot]
        if self.segments is None:
            for g, row in enumerate(self.V):
                matrix, transpose = self.pattern.fill(row)
                column[g] += transpose @ vector if self.rows_long else matrix @ vector
        else:
            for g, lo, hi in zip(self.segments.rows, self.segments.lo, self.segments.hi):
                column[g] += self.pattern.part_product(self.V[g, lo:hi], lo, hi, vector, self.rows_long)
        if not self.rows_long:
            column = self.pattern.from_rows(column.T).T
        self.products[:, slot] = self.entries.total(column)
        if self.count < self.size:
            self.count += 1
        else:
            self.oldest = (self.oldest + 1) % self.size

    def price(self, q: np.ndarray) -> tuple[RankOneAtom, float, np.ndarray] | None:
        """The best atom for the direction q^T V with its longer side in the basis, its value <q^T V, atom>
        and its images <V_g, atom>; None while the basis is empty."""
        n, k = len(self.products), self.count
        if not k:
            return None
        # Products over all rows (unused ones are zero) keep every operand contiguous.
        M = (q @ self.products.reshape(n, -1)).reshape(self.size, self.short)[:k]  # row j: d(q)^T w_j
        _, vectors = np.linalg.eigh(M @ M.T)
        a = vectors[:, -1]
        image_short = a @ M
        sigma = float(np.linalg.norm(image_short))
        if sigma == 0:
            return None
        r, long, short = self.radius, a @ self.basis[:k], image_short / sigma
        # The top Ritz vectors' images on the shorter side start the LMO when this atom is not good enough: at
        # 10^7 entries its block Lanczos then took 29% fewer products than from the last priced atom's vectors.
        top = vectors[:, ::-1][:, : min(BLOCK, k)].T @ M
        norms = np.linalg.norm(top, axis=1)
        ritz = ("v" if self.rows_long else "u", top[norms > 0] / norms[norms > 0, None])
        atom = RankOneAtom(-r * long, short, ritz) if self.rows_long else RankOneAtom(-r * short, long, ritz)
        images = -r * ((self.products.reshape(-1, self.short) @ short).reshape(n, self.size)[:, :k] @ a)
        return atom, -r * sigma, images

    def state_dict(self) -> dict:
        k = self.count
        return {
            "basis": self.basis[:k].copy(),
            "products": self.products[:, :k].copy(),
            "oldest": self.oldest,
            "tag": self.tag,
        }

    def load_state_dict(self, state: dict) -> None:
        basis, products = np.array(state["basis"]), np.array(state["products"])
        k = self.count = len(basis)
        self.basis, self.products = np.zeros((self.size, self.long)), np.zeros((len(products), self.size, self.short))
        self.basis[:k], self.products[:, :k] = basis, products
        self.oldest, self.tag = int(state["oldest"]), None if state["tag"] is None else int(state["tag"])
