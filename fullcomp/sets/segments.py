"""Column segments of a GLMO's V: ranges of its columns where one row alone can be nonzero.

A group-robust model's outputs each read their own entries: a group's loss
does not depend on another group's ratings, so the Jacobian of the map (and
every tracker built from such Jacobians) has one nonzero row per column.  With
the entries read group by group, the columns fall into a few ranges, and the
products a pricing call makes with V (its direction V^T q, the atom's image
V s) need only read each range's row: 1/n of V, where the dense products read
all of it from memory at every call (at 7 x 800,000 entries, 6.2 against 1.6 ms
for V^T q with the cache cold).

Nothing is declared: :meth:`Segments.find` reads the segments off V, and
:meth:`Segments.follow` keeps them through a tracker step V = keep V' +
weight J by checking J's few columns.  Columns that are zero in every row lie
between segments; a sample that makes one nonzero moves the edge of the segment
of its row next to it.  The products are the dense ones' with exact zeros left
out, so they differ from them only in the order of the sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: More segments than this and the per-segment loops cost more than they spare.
MAX_SEGMENTS = 256
#: ``find`` first checks this many columns, so that a V without segments (a dense Jacobian) costs little.
PROBE = 4096


@dataclass
class Segments:
    """Segment b covers columns ``lo[b]:hi[b]`` of an (n, width) V, where only row ``rows[b]`` may be nonzero;
    V is zero on every column outside the segments.  The segments are ordered and do not overlap."""

    rows: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def find(cls, V: np.ndarray) -> Segments | None:
        """V's segments, or None when a column has two nonzero rows or there are more than MAX_SEGMENTS."""
        if V.ndim != 2 or V.shape[0] < 2 or V.shape[1] == 0:
            return None
        if (np.count_nonzero(V[:, :PROBE], axis=0) > 1).any():
            return None
        nonzero = V != 0
        if (nonzero.sum(axis=0) > 1).any():
            return None
        columns = np.flatnonzero(nonzero.any(axis=0))
        if columns.size == 0:
            return None
        owner = nonzero[:, columns].argmax(axis=0)
        first = np.flatnonzero(np.diff(owner, prepend=-1))
        if first.size > MAX_SEGMENTS:
            return None
        last = np.concatenate([first[1:], [columns.size]]) - 1
        return cls(owner[first], columns[first], columns[last] + 1)

    def follow(self, columns: np.ndarray, values: np.ndarray) -> Segments | None:
        """The segments of keep V + weight J for J with ``values`` (n, t) at the sorted, distinct ``columns``;
        None when J breaks them (then :meth:`find` decides)."""
        nonzero = values != 0
        count = nonzero.sum(axis=0)
        if (count > 1).any():
            return None
        hit = count == 1
        at, row = columns[hit], nonzero[:, hit].argmax(axis=0)
        lo, hi = self.lo.copy(), self.hi.copy()
        b = np.searchsorted(lo, at, side="right") - 1  # the last segment starting at or before the column
        inside = (b >= 0) & (at < hi[np.maximum(b, 0)])
        if (self.rows[b[inside]] != row[inside]).any():
            return None
        # A column between segments b and b + 1 extends the one of its row (the left one when both are).
        gap, gap_at, gap_row = b[~inside], at[~inside], row[~inside]
        left = (gap >= 0) & (self.rows[np.maximum(gap, 0)] == gap_row)
        nxt = np.minimum(gap + 1, len(lo) - 1)
        right = ~left & (gap + 1 < len(lo)) & (self.rows[nxt] == gap_row)
        if not (left | right).all():
            return None
        np.maximum.at(hi, gap[left], gap_at[left] + 1)
        np.minimum.at(lo, gap[right] + 1, gap_at[right])
        if (hi[:-1] > lo[1:]).any():
            return None
        return Segments(self.rows, lo, hi)

    def rmatvec(self, q: np.ndarray, V: np.ndarray, out: np.ndarray) -> np.ndarray:
        """V^T q, written into ``out``."""
        edges = np.concatenate([[0], np.column_stack([self.lo, self.hi]).ravel(), [out.size]])
        for start, stop in edges.reshape(-1, 2):  # the columns between segments
            out[start:stop] = 0.0
        for r, start, stop in zip(self.rows, self.lo, self.hi):
            np.multiply(V[r, start:stop], q[r], out=out[start:stop])
        return out

    def matmul(self, V: np.ndarray, a: np.ndarray) -> np.ndarray:
        """V a for a vector a (n,) or a stack of rows a (m, width), giving (n, m)."""
        out = np.zeros(V.shape[:1] + a.shape[:-1])
        for r, start, stop in zip(self.rows, self.lo, self.hi):
            out[r] += a[..., start:stop] @ V[r, start:stop]
        return out

    def owners(self, rows: np.ndarray, n_rows: int, n: int) -> np.ndarray | None:
        """For each of a matrix's ``n_rows`` rows, the row of the (n, width) V owning its entries (``rows``: each
        column's row of the matrix), or n for rows without entries in the segments; None when a row of the
        matrix has entries in the segments of two rows of V (q^T V is then no row scaling of one matrix)."""
        owner = np.full(n_rows, -1, dtype=np.int64)
        for r, start, stop in zip(self.rows, self.lo, self.hi):
            owner[rows[start:stop]] = r
        for r, start, stop in zip(self.rows, self.lo, self.hi):
            if (owner[rows[start:stop]] != r).any():
                return None
        owner[owner < 0] = n
        return owner

    def collapse(self, V: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Each column's one nonzero of V (zero outside the segments), written into ``out``."""
        edges = np.concatenate([[0], np.column_stack([self.lo, self.hi]).ravel(), [out.size]])
        for start, stop in edges.reshape(-1, 2):
            out[start:stop] = 0.0
        for r, start, stop in zip(self.rows, self.lo, self.hi):
            out[start:stop] = V[r, start:stop]
        return out
