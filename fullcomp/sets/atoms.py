"""Extreme points returned by LMOs, kept in compact form.

Column generation and the structured (entry-wise) HMSFW path only ever need
an atom's values at the entries the inner map reads, plus a way to rebuild
the dense point at the end.  A nuclear-ball atom is rank one: storing its two
factors costs P + Q numbers instead of P Q.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fullcomp import distributed
from fullcomp.errors import OptionError
from fullcomp.serial import encodable


@encodable
@dataclass
class Entries:
    """Flat (row-major) indices into a point of ``shape``, with row/column splits cached for matrices.

    ``sharded``: in a distributed job these are this rank's part of the entries, disjoint from the other
    ranks' parts; a sum over entries is then summed over the ranks (:meth:`total`).  ``blocks`` says how
    the parts split the matrix, "rows" or "cols" (whole rows, or whole columns, per rank), which decides the
    side the split Lanczos runs on; :meth:`check_blocks` finds it.
    """

    flat: np.ndarray
    shape: tuple[int, ...]
    rows: np.ndarray | None = field(default=None, repr=False)
    cols: np.ndarray | None = field(default=None, repr=False)
    sharded: bool = False
    blocks: str = "rows"
    _scratch: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.flat = np.asarray(self.flat, dtype=np.int64)
        if len(self.shape) == 2 and self.rows is None:
            self.rows, self.cols = np.divmod(self.flat, self.shape[1])

    @classmethod
    def all(cls, shape: tuple[int, ...]) -> Entries:
        return cls(np.arange(int(np.prod(shape))), shape)

    def __len__(self) -> int:
        return self.flat.size

    def total(self, partial: Any) -> Any:
        """A sum over these entries (numpy array or tensor) completed over the ranks when they are sharded."""
        return distributed.total(partial) if self.sharded else partial

    def check_blocks(self) -> str:
        """Set and return :attr:`blocks`: "rows" when the ranks hold disjoint ranges of rows, "cols" when they
        hold disjoint ranges of columns (both: the side whose all-reduced vector is shorter), else refuse.  A
        collective, so every rank calls it."""
        span = tuple(int(f(a)) for a in (self.rows, self.cols) for f in (np.min, np.max)) if len(self) else None
        spans = distributed.gather(span)  # every rank learns of an empty one, so all of them raise
        if None in spans:
            raise OptionError(
                f"sharded reads: rank {spans.index(None)} holds no entries; give every rank a block of them"
            )
        disjoint = {}
        for side, at in (("rows", 0), ("cols", 2)):
            ordered = sorted(span[at : at + 2] for span in spans)
            disjoint[side] = all(a[1] < b[0] for a, b in zip(ordered, ordered[1:]))
        if not any(disjoint.values()):
            raise OptionError(
                "sharded reads must be disjoint blocks of rows, or of columns, one per rank; the ranks hold rows "
                f"{[s[:2] for s in spans]} and columns {[s[2:] for s in spans]} (first, last): give each rank a "
                "contiguous range of rows (or of columns) and their entries"
            )
        P, Q = self.shape
        # Row blocks all-reduce Q-vectors in the split Lanczos, column blocks P-vectors.
        self.blocks = "rows" if disjoint["rows"] and (Q <= P or not disjoint["cols"]) else "cols"
        return self.blocks

    def scratch(self) -> np.ndarray:
        """A float64 work array of len(self), allocated once."""
        if self._scratch is None:
            self._scratch = np.empty(self.flat.size)
        return self._scratch


@dataclass
class ScaledRows:
    """The direction q^T V on a matrix's entries when each row of the (n, len(entries)) V owns whole rows of the
    matrix (a group's loss reads its own users' ratings): q^T V = diag(s) G, G (``values``) the one nonzero of
    each column of V and s_r = q at ``owner[r]``, the row of V owning matrix row r (n for rows it reads none of).

    G is the same for every pricing call of a GLMO call, while q changes, so an LMO may keep what it built
    from G for as long as ``tag`` is the same.  ``out``: a work array of len(entries) for :meth:`at`.
    """

    values: np.ndarray
    owner: np.ndarray
    q: np.ndarray
    tag: int
    out: np.ndarray | None = field(default=None, repr=False)

    @property
    def scale(self) -> np.ndarray:
        """s, one number per row of the matrix."""
        return np.append(self.q, 0.0)[self.owner]

    def at(self, entries: Entries) -> np.ndarray:
        """The direction's values at the entries (written into ``out``)."""
        return np.multiply(self.values, np.take(self.scale, entries.rows), out=self.out)


class Atom(ABC):
    """A point of the set; ``at(entries)`` gives its values there, ``dense()`` the whole point.

    ``at(entries, out=buffer)`` writes the values into a float64 buffer of len(entries) and
    returns it: column generation prices into one work array instead of a fresh one per call.
    """

    shape: tuple[int, ...]

    @abstractmethod
    def at(self, entries: Entries, out: np.ndarray | None = None) -> np.ndarray: ...

    @abstractmethod
    def dense(self) -> np.ndarray: ...


@encodable
class DenseAtom(Atom):
    def __init__(self, point: np.ndarray):
        self.point = np.asarray(point, dtype=np.float64)
        self.shape = self.point.shape

    def at(self, entries: Entries, out: np.ndarray | None = None) -> np.ndarray:
        return np.take(self.point.reshape(-1), entries.flat, out=out, mode="clip" if out is not None else "raise")

    def dense(self) -> np.ndarray:
        return self.point


@encodable
class RankOneAtom(Atom):
    """The matrix u v^T (the scale is folded into u).

    ``ritz``: ("u" or "v", rows of unit vectors of that side), the Ritz vectors a block Lanczos found with the
    atom, best first; the next LMO starts from them (:func:`fullcomp.sets.lanczos.top_singular_block`)."""

    ritz: tuple[str, np.ndarray] | None = None  # also for atoms read back from checkpoints written before it

    def __init__(self, u: np.ndarray, v: np.ndarray, ritz: tuple[str, np.ndarray] | None = None):
        self.u, self.v = np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64)
        self.shape = (self.u.size, self.v.size)
        if ritz is not None:
            self.ritz = ritz

    def at(self, entries: Entries, out: np.ndarray | None = None) -> np.ndarray:
        """The values u_i v_j at the entries; ``out`` (and a second buffer kept on the entries) spare
        two fresh arrays of len(entries) per call, which at 10^7 entries cost more than the products."""
        if out is None:
            return self.u[entries.rows] * self.v[entries.cols]
        # mode="clip": the default "raise" buffers ``out``, a copy as costly as the gather (indices are valid).
        np.take(self.u, entries.rows, out=out, mode="clip")
        return np.multiply(out, np.take(self.v, entries.cols, out=entries.scratch(), mode="clip"), out=out)

    def dense(self) -> np.ndarray:
        return np.outer(self.u, self.v)


@encodable
class MixtureAtom(Atom):
    """A convex combination of atoms; column generation merges light atoms into one."""

    def __init__(self, atoms: list[Atom], weights: np.ndarray):
        # Flatten nested mixtures so repeated merges stay one level deep.
        flat_atoms, flat_weights = [], []
        for atom, w in zip(atoms, np.asarray(weights, dtype=np.float64)):
            if isinstance(atom, MixtureAtom):
                flat_atoms += atom.atoms
                flat_weights += list(w * atom.weights)
            else:
                flat_atoms.append(atom)
                flat_weights.append(w)
        self.atoms, self.weights = flat_atoms, np.asarray(flat_weights)
        self.shape = self.atoms[0].shape

    def at(self, entries: Entries, out: np.ndarray | None = None) -> np.ndarray:
        """sum_j w_j a_j at the entries, accumulated in place (in that order) through one work array."""
        out = np.empty(len(entries)) if out is None else out
        out.fill(0.0)
        term = np.empty(len(entries))
        for w, a in zip(self.weights, self.atoms):
            out += np.multiply(a.at(entries, out=term), w, out=term)
        return out

    def dense(self) -> np.ndarray:
        return sum(w * a.dense() for w, a in zip(self.weights, self.atoms))


@encodable
class ZeroAtom(Atom):
    """The origin, without storing it."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = tuple(shape)

    def at(self, entries: Entries, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            return np.zeros(len(entries))
        out.fill(0.0)
        return out

    def dense(self) -> np.ndarray:
        return np.zeros(self.shape)


@encodable
class AtomicForm:
    """The iterate of a Frank-Wolfe method as its atoms: sum_j ``scale`` * ``raw[j]`` * ``atoms[j]``.

    A step y + gamma (x - y) scales every weight by 1 - gamma, and one common ``scale`` does that at once.
    The point's atoms are matched by identity with the :data:`RECENT` atoms matched or added last (a GLMO
    combines the atoms of its pool); an older one comes in again as a new entry, which sums the same.  The
    forms of successive steps share one list of atoms, which a blend only appends to (and copies when the
    form it blends is not the newest).  So a step's Python work is in the new point's atoms, and what grows
    with the atoms so far is one copy of the weights: a run of 2,500 steps held 8,000 atoms, and scaling and
    indexing them one by one took 6 ms a step.  A form is not changed by :meth:`blend`.
    """

    #: The atoms' dense points as the rows of one array, built once for a form's active-set operations.
    _rows: np.ndarray | None = None  # also for forms read back from checkpoints written before it

    def __init__(self, atoms: list[Atom] | None = None, raw: np.ndarray | None = None, scale: float = 1.0):
        self._atoms = [] if atoms is None else list(atoms)
        self.count = len(self._atoms)  # this form's atoms are the first ``count`` of the shared list
        self.raw = np.zeros(0) if raw is None else np.asarray(raw, dtype=np.float64)
        self.scale = float(scale)
        self.recent: tuple[int, ...] = tuple(range(max(self.count - RECENT, 0), self.count))

    @property
    def atoms(self) -> list[Atom]:
        return self._atoms[: self.count]

    def __len__(self) -> int:
        return self.count

    def pairs(self) -> list[tuple[Atom, float]]:
        """[(atom, weight)] in the order the atoms came in."""
        return list(zip(self.atoms, (self.scale * self.raw).tolist()))

    def blend(self, atoms: list[Atom], weights: np.ndarray, gamma: float) -> AtomicForm:
        """The form of (1 - gamma) self + gamma sum_i weights_i atoms_i."""
        shared, count, raw, recent = self._atoms, self.count, self.raw, self.recent
        scale = self.scale * (1.0 - gamma)
        if scale == 0:  # every old weight is zero: nothing of them is left to keep
            shared, count, raw, scale, recent = [], 0, np.zeros(0), 1.0, ()
        elif scale < 1e-150:  # fold the scale into the weights before it underflows
            raw, scale = raw * scale, 1.0
        where = {id(shared[j]): j for j in recent}
        added, extra, matched, touched = [], [], [], []
        for atom, w in zip(atoms, np.asarray(weights, dtype=np.float64)):
            j = where.get(id(atom))
            if j is None:
                j = where[id(atom)] = count + len(added)
                added.append(atom)
                extra.append(gamma * w / scale)
            else:
                matched.append((j, gamma * w / scale))
            touched.append(j)
        if added:
            if len(shared) != count:  # a form blended from this one before: its atoms are not this one's
                shared = shared[:count]
            shared.extend(added)
        raw = np.concatenate([raw, extra]) if added or matched else raw
        for j, w in matched:
            raw[j] += w
        form = AtomicForm.__new__(AtomicForm)
        form._atoms, form.count, form.raw, form.scale = shared, count + len(added), raw, scale
        form._rows = None
        latest = dict.fromkeys(touched)
        form.recent = tuple(list(latest) + [j for j in recent if j not in latest])[:RECENT]
        return form

    # The active set of a Frank-Wolfe method with corrective steps (Lacoste-Julien and Jaggi 2015): the atoms
    # are vertices of a polytope, found again by their values (an LMO returns a fresh array for a vertex it
    # returned before), and each operation gives a new form with the weights it computes exactly as written.

    @classmethod
    def vertex(cls, point: np.ndarray) -> AtomicForm:
        """The form of one vertex (or any start point) with weight 1."""
        form = cls([DenseAtom(np.asarray(point, dtype=np.float64).reshape(-1))], np.ones(1))
        form._rows = form.atoms[0].point[None, :].copy()
        return form

    def weights(self) -> np.ndarray:
        """The atoms' weights (a fresh array)."""
        return self.scale * self.raw

    def rows(self) -> np.ndarray:
        """The atoms' flat dense points as the rows of an array."""
        if self._rows is None:
            self._rows = np.stack([np.asarray(a.dense(), dtype=np.float64).reshape(-1) for a in self.atoms])
        return self._rows

    def point(self) -> np.ndarray:
        """sum_j w_j a_j, flat."""
        return self.weights() @ self.rows()

    def scores(self, g: np.ndarray) -> np.ndarray:
        """<g, a_j> for every atom."""
        return self.rows() @ g

    def extremes(self, g: np.ndarray) -> tuple[int, int, np.ndarray]:
        """(argmax, argmin, scores) of <g, a_j>: the away atom and the local Frank-Wolfe atom of the gradient g."""
        scores = self.scores(g)
        return int(np.argmax(scores)), int(np.argmin(scores)), scores

    def toward(self, v: np.ndarray, gamma: float) -> AtomicForm:
        """(1 - gamma) self + gamma v: a Frank-Wolfe step to the vertex v."""
        return self._with((1 - gamma) * self.weights()).add(v, gamma)

    def away(self, j: int, gamma: float) -> AtomicForm:
        """(1 + gamma) self - gamma a_j: an away step from atom j."""
        w = (1 + gamma) * self.weights()
        w[j] -= gamma
        return self._with(w)

    def shift(self, j: int, v: np.ndarray, gamma: float) -> AtomicForm:
        """self + gamma (v - a_j): weight gamma moves from atom j to the vertex v (a pairwise step)."""
        w = self.weights()
        w[j] -= gamma
        return self._with(w).add(v, gamma)

    def add(self, v: np.ndarray, gamma: float) -> AtomicForm:
        """The form with gamma added to the weight of the vertex v (a new atom when v is not one of them)."""
        rows, w = self.rows(), self.weights()
        same = np.flatnonzero((rows == v).all(axis=1))
        if same.size:
            w[same[0]] += gamma
            return self._with(w)
        form = AtomicForm([*self.atoms, DenseAtom(np.array(v, dtype=np.float64))], np.append(w, gamma))
        form._rows = np.vstack([rows, v])
        return form

    def drop(self, j: int) -> AtomicForm:
        """The form without atom j (a drop step: its weight reached 0)."""
        w = self.weights()
        w[j] = 0.0
        return self._with(w).pruned()

    def pruned(self) -> AtomicForm:
        """The form without the atoms whose weight is not positive."""
        w = self.weights()
        keep = w > 0
        if keep.all():
            return self._with(w)
        form = AtomicForm([a for a, kept in zip(self.atoms, keep) if kept], w[keep])
        form._rows = self.rows()[keep]
        return form

    def renormalized(self) -> AtomicForm:
        """The form with its weights divided by their sum (rounding moves the sum off 1 over many steps)."""
        w = self.weights()
        return self._with(w / w.sum())

    def _with(self, weights: np.ndarray) -> AtomicForm:
        """This form's atoms with other weights."""
        form = AtomicForm(self.atoms, weights)
        form._rows = self._rows
        return form


#: Atoms of an :class:`AtomicForm` that a new point's atoms are matched with: twice a default pool's 31.
RECENT = 64


def combine(atoms: list[Atom], weights: list[float], shape: tuple[int, ...]) -> np.ndarray:
    """The dense point sum_j weights[j] atoms[j]; rank-one atoms are stacked into one matrix product."""
    us, vs, point = [], [], np.zeros(shape)
    stack = list(zip(atoms, weights))
    while stack:
        atom, w = stack.pop()
        if isinstance(atom, MixtureAtom):
            stack += [(a, w * v) for a, v in zip(atom.atoms, atom.weights)]
        elif isinstance(atom, RankOneAtom):
            us.append(w * atom.u)
            vs.append(atom.v)
        elif not isinstance(atom, ZeroAtom):
            point += w * atom.dense()
    if us:
        point += np.stack(us, axis=1) @ np.stack(vs, axis=0)
    return point
