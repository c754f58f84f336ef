"""Column-generation GLMO route: a warm atom pool, a restricted master, LMO pricing."""

from __future__ import annotations

import itertools
from typing import Any

import cvxpy as cp
import numpy as np
import torch

from fullcomp import solvers
from fullcomp.errors import ModelError, OptionError
from fullcomp.glmo.base import (
    GLMO,
    GLMOResult,
    Request,
    affine_model,
    as_numpy,
    hint_from,
    hint_state,
    pass_hint,
    target_gap,
)
from fullcomp.glmo.closed import ClosedMaster
from fullcomp.glmo.master import ConicMaster, MasterSolution
from fullcomp.model.composite import Outer
from fullcomp.sets.atoms import Atom, DenseAtom, Entries, MixtureAtom, ScaledRows
from fullcomp.sets.base import Set
from fullcomp.sets.segments import Segments
from fullcomp.sets.subspace import RitzSubspace
from fullcomp.trackers import Revision

DEFAULT_MAX_CALLS = 500
CHUNK = 1 << 16  # columns of the value cache read at a time
#: From this many entries a priced atom's image comes from the domain (:meth:`Set.image`) and its values are
#: left for x to sum with the other lazy atoms' (:meth:`Set.combination_at`).
LAZY_ENTRIES = 500_000
ZERO_WEIGHT = 1e-8  # interior-point masters leave ~1e-9 on atoms that carry no weight
#: An iterative LMO may stop once its value is known to this fraction of itself (for Lanczos, a residual of
#: about 1e-2 sigma^2) and its atom improves the master by more than the target; certificates need its
#: bound at the LMO's own tolerance.
DECIDE = 0.005
#: The weight of the best bound's dual in a pricing direction (Wentges' smoothing); 0 prices at the master's.
SMOOTHING = 0.5
#: Tags of the V's whose directions are priced as row scalings (:class:`~fullcomp.sets.atoms.ScaledRows`).
TAGS = itertools.count()


class ColumnGenerationGLMO(GLMO):
    """Solve min_{x in X} F(c + V x) over the convex hull of pooled atoms, adding
    the atom ``domain.lmo(V^T q)`` priced at a dual q until the certified gap
    (the master's value less the best sure lower bound the pricing calls gave)
    is below ``tol`` or ``max_calls`` pricing calls are spent.  q is the
    master's dual, smoothed towards the dual of the best bound so far (see
    :meth:`solve`).

    The pool (``pool`` atoms plus the newest priced one) persists across calls: consecutive
    Frank-Wolfe iterations have similar models, so old atoms warm-start the
    master.  Zero-weight atoms are pruned first; when all carry weight, the
    two lightest are merged into their weighted mean, which keeps the master's
    point representable.

    Each pricing call asks the set for an atom and a lower bound on the LMO
    value (:meth:`~fullcomp.sets.base.Set.lmo_bounded`).  An iterative LMO may
    stop as soon as its atom is known to improve the master by more than the
    target; only a bound at the LMO's own tolerance certifies.  For the nuclear
    ball the bound assumes, as any Lanczos answer does, that the iteration
    found the top of the spectrum: stopped after a few steps, it often had not.

    A certified call first asks the domain's heuristic pricer, when it has one (:meth:`Set.subspace`: the
    nuclear ball on large sparse entries), for an atom; one that improves the master by more than the target
    joins the pool without an LMO call, its values computed only if x needs them.  It certifies nothing.
    ``device``, the run's, is passed to the set's LMO: on a GPU the nuclear ball multiplies there.
    """

    route = "colgen"

    def __init__(self, outer: Outer, domain: Set, pool: int = 30, device: torch.device | str | None = None):
        if outer.depends_on_x:
            raise ModelError("column generation needs F to depend on the placeholder only; use route='conic'")
        if not isinstance(pool, (int, np.integer)) or pool < 1:
            raise OptionError(f"pool must be a positive int (atoms kept between calls), got {pool}")
        self.outer, self.domain, self.pool = outer, domain, int(pool)
        n, slots = outer.n, self.pool + 1  # one slot for the newly priced atom
        # A named risk's master comes from its closed forms; the conic master (F's conic form compiled once) is
        # built where it is not one, or on the first master its closed forms leave unsolved.
        self.closed = ClosedMaster.for_column_generation(outer)
        self._master_built = self.closed is None
        self.master = ConicMaster.build(outer) if self.closed is None else None
        self.atoms: list[Atom | None] = [None] * slots
        self.active = np.zeros(slots, dtype=bool)
        self.lazy = np.zeros(slots, dtype=bool)  # slots whose values are not cached yet (heuristic atoms)
        self.q = np.full(n, 1.0 / n)  # last dual, the first pricing direction of the next call
        self.hint: Atom | None = None  # last priced atom: warm-starts iterative LMOs
        self._entries: Entries | None = None
        self._track: Entries | None = None
        self.values = np.zeros((slots, 0))  # pooled atoms' values at the entries the model reads, then at track
        self._work = np.empty((2, 0))  # the direction and a priced atom's values, reused across calls
        self._collapsed = np.empty(0)  # V's one nonzero per column, reused across calls
        self._rows: tuple[np.ndarray, np.ndarray, int] | None = None  # this call's row scaling, see _row_scaling
        self._owners: tuple[tuple, np.ndarray | None] | None = None  # (segments and entries, their owners)
        self._spare = np.empty(0)  # a row of the value cache's width, for merges
        self._all: Entries | None = None  # every entry of x, built on first dense use (P Q indices at scale)
        self._images: tuple[int, np.ndarray] | None = None  # (tag, the pool's images) for the last call's V
        self._segments: tuple[int | None, Segments | None] = (None, None)  # (tag, V's segments), this call's
        self.device = None if device is None else torch.device(device)  # where the LMO's products may run
        self._ritz: RitzSubspace | None = None  # the domain's heuristic pricer, when it has one
        self._ritz_state: dict | None = None  # a loaded pricer's state, until its entries are known

    def _solve(self, z: Any, V: Any, y: Any, request: Request) -> GLMOResult:
        """Column generation: the master over the pool, priced until its gap is certified (or the budget spent).

        On sharded entries the master is solved identically on every rank from the same all-reduced images,
        so it needs no broadcast; at ``track`` the pool keeps its atoms' values, so x there costs one product
        instead of an evaluation of every atom it combines.
        """
        tol, max_calls, entries, start, revision, track = request
        max_calls = DEFAULT_MAX_CALLS if max_calls is None else int(max_calls)
        if entries is None:
            self._all = self._all or Entries.all(self.domain.shape)
            entries = self._all
        c, Vm = affine_model(z, V, y, self.outer.n, len(entries), entries.total)
        self._cache_values(entries, track)
        self._follow_segments(Vm, entries, revision)
        self._rows = self._row_scaling(Vm, entries)
        images = self._pool_images(Vm, entries, revision)
        ritz = None if tol is None else self._subspace(entries)  # a fixed pricing budget stays an LMO budget
        if ritz is not None:
            ritz.follow(Vm, revision, self._segments[1])
        calls = heuristic = 0
        if not self.active.any():
            # Seed an empty pool with the current point (it costs no pricing call, so max_calls holds
            # from the first call): given as ``start``, or y projected in case it is not quite feasible.
            if start is None:
                if entries is not self._all:
                    raise OptionError("a GLMO on entries needs start= (the current point as an atom) on its first call")
                point = as_numpy(y).reshape(self.domain.shape)
                start = DenseAtom(as_numpy(self.domain.project(point)) if self.domain.has_project else point)
            values = start.at(entries)
            self._add(start, values, entries.total(self._matmul(Vm, values)), images, track=track)
        # Every master dual q, a subgradient of F at u = c + V x_master, gives the minorant
        # F(w) >= <q, w> + F(u) - <q, u>, and pricing its direction bounds the optimum from below.  The best
        # sure bound certifies every later master, and the best bound's minorant is the centre towards which
        # the next direction leans (Wentges' smoothing): column generation's duals oscillate, and a direction
        # between the centre and the master's dual finds atoms that tail off less.  An atom that does not
        # improve the master's point along its own dual by more than the target (a mispricing) sends the next
        # call to that dual.  A heuristic pricing (the domain's subspace) is tried first: its atom, when it
        # improves the model along q by more than the target, spares an LMO call; it certifies nothing.
        certified, best, centre, smoothing = -np.inf, -np.inf, None, SMOOTHING
        while True:
            lam = self._master(c, images)
            model_x = images @ lam  # V x for the master's point x = sum lam_j atom_j
            value = self.outer.value(c + model_x)
            target = target_gap(tol, value)
            if calls and value - certified <= target:  # an earlier pricing call's bound certifies this master
                break
            q, intercept = self.q, value - float(self.q @ (c + model_x))
            if centre is not None and smoothing > 0:
                q = smoothing * centre[0] + (1 - smoothing) * q
                intercept = smoothing * centre[1] + (1 - smoothing) * intercept
            offset, last, base = intercept + float(q @ c), calls + 1 >= max_calls, float(model_x @ q)
            guess = ritz.price(q) if ritz is not None and heuristic < max_calls else None
            if guess is not None and base - guess[1] > target:
                (atom, _, image), values = guess, None  # its values wait until x needs them
                heuristic += 1
                self.hint = pass_hint(self.hint, atom)
            else:
                if guess is not None:  # not good enough, but a start for the LMO made for this direction
                    self.hint = pass_hint(self.hint, guess[0])
                atom, values, image, lower, sure = self._price(Vm, entries, q, offset, base, target, last)
                calls += 1
                if ritz is not None:
                    ritz.add(atom)
                if sure:
                    certified = max(certified, lower)
                if lower > best:
                    best, centre = lower, (q, intercept)
                if value - certified <= target:
                    break
            smoothing = SMOOTHING if self.q @ image < self.q @ model_x - target else 0.0
            self._add(atom, values, image, images, lam, track)
            if calls >= max_calls:
                break
        gap = max(value - certified, 0.0)
        self._images = None if revision is None else (revision.tag, images.copy())
        used = np.flatnonzero(lam > 0)
        x = self._point(lam, used, entries, track)
        if entries is self._all:
            x = x.reshape(self.domain.shape)
        atoms = [self.atoms[j] for j in used]
        converged = bool(gap <= target)
        return GLMOResult(x, value, gap, calls, atoms, lam[used], converged=converged, heuristic=heuristic)

    def _subspace(self, entries: Entries) -> RitzSubspace | None:
        if self._ritz is None or self._ritz.entries is not entries:
            self._ritz = self.domain.subspace(entries, self.device)
            if self._ritz is not None and self._ritz_state is not None:
                self._ritz.load_state_dict(self._ritz_state)
            self._ritz_state = None
        return self._ritz

    def _price(
        self, Vm: np.ndarray, entries: Entries, q: np.ndarray, offset: float, base: float, target: float, last: bool
    ) -> tuple[Atom, np.ndarray | None, np.ndarray, float, bool]:
        """An atom s for the direction V^T q, its values (None: left lazy) and image V s, the lower bound
        offset + min_X <V^T q, .> on the optimum that the minorant <q, .> + offset - <q, c> of F gives, and
        whether the bound is sure.

        The LMO may stop as soon as it knows that s improves the master's linear model <q, V .>, at ``base``
        for the master's point, by more than the target (never on the ``last`` call).  Its bound is then
        rough and certifies nothing: a Lanczos iteration stopped after a few steps can miss the top of the
        spectrum (about 1 in 30 random directions at 0.5% slack); one run to its tolerance is sure, as sure as
        any Lanczos answer.
        """
        stopped = []

        def enough(found: float, lower: float) -> bool:
            stop = not last and found - lower <= DECIDE * abs(found) and base - found > target
            stopped.append(stop)
            return stop

        # Work arrays of len(entries) are reused across calls: fresh ones page-fault at 10^7 entries.  The
        # values go straight into the slot the atom will take when one is free (not merely idle), sparing
        # a copy of them into the cache (3.5 ms at 800,000 entries).
        if self._rows is None:
            direction = self._rmatvec(q, Vm, self._work[0])
        else:
            owner, collapsed, tag = self._rows
            direction = ScaledRows(collapsed, owner, q, tag, out=self._work[0])
        slot = self._free_slot()
        values = self._work[1] if slot is None else self.values[slot, : len(entries)]
        atom, lower = self.domain.lmo_bounded(direction, entries, hint=self.hint, enough=enough, device=self.device)
        self.hint = pass_hint(self.hint, atom)
        lazy = len(entries) >= LAZY_ENTRIES
        image = self.domain.image(atom, Vm, entries, self._segments[1], direction) if lazy else None
        if image is not None:  # the atom's values wait until x needs them, as a heuristic atom's
            return atom, None, image, offset + lower, not any(stopped)
        values = atom.at(entries, out=values)
        return atom, values, entries.total(self._matmul(Vm, values)), offset + lower, not any(stopped)

    def _pool_images(self, Vm: np.ndarray, entries: Entries, revision: Revision | None) -> np.ndarray:
        """V a_j for every pooled atom (zero on idle slots), an (n, slots) array.

        Carried over when ``revision`` relates V to the V of the last call: keep V_since a_j + weight J a_j,
        with J on its few columns; otherwise one product over every entry (2 GB of values at 10^7 entries).
        """
        carried, self._images = self._images, None  # until this call ends: a call that raises changed the pool
        if revision is not None and carried is not None and carried[0] in (revision.tag, revision.since):
            images = carried[1].copy()
            if carried[0] == revision.since:
                images *= revision.keep
                J = revision.jacobian
                if J is not None:
                    columns, values = J.columns.cpu().numpy(), as_numpy(J.values)
                    images += revision.weight * entries.total(values @ self._values_at(entries, columns).T)
        else:
            self._materialize(np.flatnonzero(self.active))
            # One product over all slots (boolean-indexing the cache would copy it).
            images = entries.total(self._matmul(Vm, self.values[:, : len(entries)]))
        return np.where(self.active, images, 0.0)

    def _follow_segments(self, Vm: np.ndarray, entries: Entries, revision: Revision | None) -> None:
        """Find V's segments, or carry them over a tracker step when ``revision`` relates V to the last call's
        (checking the step's sampled columns only).  Only on entries: a V on every entry of x is a dense
        Jacobian's."""
        tag, segments = self._segments
        if entries is self._all:
            segments = None
        elif revision is None or tag is None or tag not in (revision.tag, revision.since):
            segments = Segments.find(Vm)
        elif tag == revision.since and segments is not None and revision.jacobian is not None:
            J = revision.jacobian
            segments = segments.follow(J.columns.cpu().numpy(), as_numpy(J.values))
            segments = Segments.find(Vm) if segments is None else segments
        self._segments = (None if revision is None else revision.tag, segments)

    def _row_scaling(self, Vm: np.ndarray, entries: Entries) -> tuple[np.ndarray, np.ndarray, int] | None:
        """(the row of V owning each row of the matrix, V's one nonzero per column, a fresh tag) when the domain
        prices :class:`ScaledRows` directions on the entries and V's segments own whole rows of the matrix; None
        otherwise."""
        segments = self._segments[1]
        if segments is None or not self.domain.takes_scaled_rows(entries, self.device):
            return None
        key = (entries, segments.rows, segments.lo, segments.hi)
        held = self._owners
        if held is None or held[0][0] is not entries or not all(map(np.array_equal, held[0][1:], key[1:])):
            self._owners = held = (key, segments.owners(entries.rows, self.domain.shape[0], len(Vm)))
        if held[1] is None:
            return None
        if self._collapsed.size != len(entries):
            self._collapsed = np.empty(len(entries))
        return held[1], segments.collapse(Vm, self._collapsed), next(TAGS)

    def _rmatvec(self, q: np.ndarray, Vm: np.ndarray, out: np.ndarray) -> np.ndarray:
        """V^T q into ``out``."""
        segments = self._segments[1]
        return np.dot(q, Vm, out=out) if segments is None else segments.rmatvec(q, Vm, out)

    def _matmul(self, Vm: np.ndarray, a: np.ndarray) -> np.ndarray:
        """V a for a vector, or (n, m) for m stacked rows."""
        segments = self._segments[1]
        if segments is not None:
            return segments.matmul(Vm, a)
        return Vm @ a if a.ndim == 1 else (a @ Vm.T).T

    def _master(self, c: np.ndarray, images: np.ndarray) -> np.ndarray:
        """Solve the restricted master; set ``self.q`` and return the weights (zero on idle slots)."""
        active = np.flatnonzero(self.active)
        solution = None if self.closed is None else self.closed.solve(c, images[:, active])
        if solution is None and not self._master_built:
            self._master_built, self.master = True, ConicMaster.build(self.outer)
        if solution is None and self.master is not None:
            solution = self.master.solve(c, images[:, active])
        if solution is None:
            # Clarabel called directly did not converge, or this CVXPY's data could not be compiled for it: the
            # CVXPY program over the active images, which also tries SCS.  Its images are constants (as
            # parameters, CVXPY's DPP tensor of images @ w holds n^2 k entries: 47.8 GiB at n = 10,000).
            solution = self._cvxpy_master(c, images[:, active])
        lam = np.zeros(self.active.size)
        lam[active], self.q = solution.weights, solution.q
        lam = np.clip(lam, 0.0, None)
        return lam / lam.sum()

    def _cvxpy_master(self, c: np.ndarray, images: np.ndarray) -> MasterSolution:
        w = cp.Variable(images.shape[1], nonneg=True, name="weights")
        link = self.outer.u == c + images @ w
        problem = cp.Problem(cp.Minimize(self.outer.expr), [link, cp.sum(w) == 1])
        u = c + images @ np.full(images.shape[1], 1.0 / images.shape[1])
        advice = (
            f"The master is a convex combination of {images.shape[1]} atoms, never empty or unbounded: the outer "
            f"function's own conic program failed near u in [{u.min():.4g}, {u.max():.4g}] (a risk parameter far "
            "from the losses' scale, such as a temperature many orders above or below their spread, strains a "
            "conic solver); a named risk of the placeholder alone solves its master in closed form"
        )
        solvers.solve(problem, "column-generation master", advice=advice)
        return MasterSolution(np.asarray(w.value, dtype=np.float64), -np.asarray(link.dual_value, dtype=np.float64))

    def _cache_values(self, entries: Entries, track: Entries | None) -> None:
        """Keep every pooled atom's values at ``entries`` and ``track``: atoms persist across calls, entries
        do not change."""
        if self._entries is not entries or self._track is not track:
            fresh = self._entries is not None  # other entries than the images were for (not a resume)
            self._entries, self._track = entries, track
            width = len(entries) + (0 if track is None else len(track))
            self.values, self._work = np.zeros((self.active.size, width)), np.empty((2, len(entries)))
            if fresh:
                self._images = None
            for j in np.flatnonzero(self.active & ~self.lazy):  # lazy ones stay so: x sums them apart
                self._write(j, self.atoms[j], None, track)

    def _write(self, slot: int, atom: Atom, values: np.ndarray | None, track: Entries | None) -> None:
        """An atom's values into the cache: ``values`` at the entries read (None: evaluated there), evaluated
        at ``track``."""
        n = len(self._entries)
        if values is None:
            atom.at(self._entries, out=self.values[slot, :n])
        elif values.ctypes.data != self.values[slot].ctypes.data:  # not priced into its slot already
            self.values[slot, :n] = values
        if track is not None and len(track):
            atom.at(track, out=self.values[slot, n:])
        self.lazy[slot] = False

    def _materialize(self, slots: np.ndarray) -> None:
        for j in slots:
            if self.lazy[j]:
                self._write(j, self.atoms[j], None, self._track)

    def _point(self, lam: np.ndarray, used: np.ndarray, entries: Entries, track: Entries | None) -> np.ndarray:
        """x = sum_j lam_j a_j at the entries read, then at ``track``: the cached values by one product, the
        lazy atoms' by the domain in one go (evaluating them one by one into the cache cost 0.85 s a call at
        10^7 entries, where the pool of 31 took in 33 new atoms a call)."""
        lazy, cached = used[self.lazy[used]], used[~self.lazy[used]]
        x = np.zeros(self.values.shape[1])
        if 2 * cached.size >= self.values.shape[0]:
            # Most rows weigh in: one product over the whole cache reads less than copying the weighted rows out
            # (MovieLens-100K, 27 of 31 rows of 100,000 entries: 2.2 against 6.4 ms).
            lam_cached = np.zeros(self.values.shape[0])
            lam_cached[cached] = lam[cached]
            np.dot(lam_cached, self.values, out=x)
        else:
            # Only the cached rows with weight, a slice of columns at a time (the whole cache is 2.5 GB at 10^7
            # entries, and its product with a weight vector mostly zero took 0.36 s).
            for lo in range(0, x.size, CHUNK):
                x[lo : lo + CHUNK] = lam[cached] @ self.values[cached, lo : lo + CHUNK]
        if lazy.size:
            atoms, weights, n = [self.atoms[j] for j in lazy], lam[lazy], len(entries)
            self.domain.combination_at(atoms, weights, entries, add_to=x[:n])
            if track is not None and len(track):
                self.domain.combination_at(atoms, weights, track, add_to=x[n:])
        return x

    def _values_at(self, entries: Entries, columns: np.ndarray) -> np.ndarray:
        """Every slot's values at ``columns`` (positions among ``entries``), lazy slots evaluated there."""
        values = self.values[:, columns]
        lazy = np.flatnonzero(self.lazy & self.active)
        if lazy.size:
            some = Entries(entries.flat[columns], entries.shape, entries.rows[columns], entries.cols[columns])
            for j in lazy:
                values[j] = self.atoms[j].at(some)
        return values

    def _add(
        self,
        atom: Atom,
        values: np.ndarray | None,
        image: np.ndarray,
        images: np.ndarray,
        lam: np.ndarray | None = None,
        track: Entries | None = None,
    ) -> None:
        """Pool an atom with its values at the entries read (None: not evaluated until needed) and image."""
        slot = self._free_slot()
        if slot is None:  # pool atoms plus the slot for the new one are all taken
            self._make_room(images, lam)
            slot = self._free_slot()
        if values is None:
            self.lazy[slot] = True
        else:
            self._write(slot, atom, values, track)
        self.atoms[slot], images[:, slot], self.active[slot] = atom, image, True

    def _free_slot(self) -> int | None:
        """The slot a new atom takes without making room, if any."""
        return None if self.active.all() else int(np.argmin(self.active))

    def _make_room(self, images: np.ndarray, lam: np.ndarray | None) -> None:
        weights = np.where(self.active, lam if lam is not None else 1.0, np.inf)
        idle = self.active & (weights <= ZERO_WEIGHT)
        if idle.any():
            self.active[idle] = False
            return
        i, j = np.argsort(weights)[:2]
        wi, wj = weights[i] / (weights[i] + weights[j]), weights[j] / (weights[i] + weights[j])
        self.atoms[i] = MixtureAtom([self.atoms[i], self.atoms[j]], np.array([wi, wj]))
        if self.lazy[i] or self.lazy[j]:  # evaluated as the mixture if x needs it (evaluating both now was slower)
            self.lazy[i] = True
        else:
            # wi v_i + wj v_j in place: a fresh row of the cache's width page-faults at 10^7 entries.
            if self._spare.shape != self.values[i].shape:
                self._spare = np.empty_like(self.values[i])
            np.multiply(self.values[i], wi, out=self.values[i])
            self.values[i] += np.multiply(self.values[j], wj, out=self._spare)
        images[:, i] = wi * images[:, i] + wj * images[:, j]
        self.active[j] = False

    def state_dict(self) -> dict:
        state = {"atoms": list(self.atoms), "active": self.active.copy(), "q": self.q.copy(), **hint_state(self.hint)}
        state["lazy"] = self.lazy.copy()
        # The carried images round differently from recomputed ones: a resume exact to the bit needs them.
        state["images"] = None if self._images is None else (self._images[0], self._images[1].copy())
        state["ritz"] = self._ritz.state_dict() if self._ritz is not None else self._ritz_state
        # Carried segments may be wider than found ones (a sampled value back to zero), and their sums differ.
        tag, segments = self._segments
        state["segments"] = (tag, None if segments is None else (segments.rows, segments.lo, segments.hi))
        return state

    def load_state_dict(self, state: dict) -> None:
        self.atoms, self.active, self.q = list(state["atoms"]), np.array(state["active"]), np.array(state["q"])
        self.lazy = np.array(state.get("lazy", np.zeros_like(self.active)))
        self.hint = hint_from(state)
        self._entries = None  # the value cache is rebuilt from the atoms
        images = state.get("images")
        self._images = None if images is None else (int(images[0]), np.array(images[1]))
        self._ritz, self._ritz_state = None, state.get("ritz")
        tag, segments = state.get("segments", (None, None))
        self._segments = (tag, None if segments is None else Segments(*map(np.array, segments)))
