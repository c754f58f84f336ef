"""Column-generation GLMO route: a warm atom pool, a restricted master, LMO pricing."""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from fullcomp import solvers
from fullcomp.errors import ModelError, OptionError
from fullcomp.glmo.base import GLMOResult, affine_model, check_tol, linear_certificate
from fullcomp.model.composite import Outer
from fullcomp.sets.base import Set

DEFAULT_MAX_CALLS = 500
ZERO_WEIGHT = 1e-10


class ColumnGenerationGLMO:
    """Solve min_{x in X} F(c + V x) over the convex hull of pooled atoms, adding
    the atom ``domain.lmo(V^T q)`` priced at the master's dual q until the
    certified gap ``<V^T q, x_master - atom>`` is below ``tol`` or ``max_calls``
    pricing calls are spent.

    The pool (at most ``pool`` atoms) persists across calls: consecutive
    Frank-Wolfe iterations have similar models, so old atoms warm-start the
    master.  Zero-weight atoms are pruned first; when all carry weight, the
    two lightest are merged into their weighted mean, which keeps the master's
    point representable.
    """

    route = "colgen"

    def __init__(self, outer: Outer, domain: Set, pool: int = 30):
        if outer.depends_on_x:
            raise ModelError("column generation needs F to depend on the placeholder only; use route='conic'")
        if not isinstance(pool, (int, np.integer)) or pool < 1:
            raise OptionError(f"pool must be a positive int (atoms kept between calls), got {pool}")
        self.outer, self.domain, self.pool = outer, domain, int(pool)
        n, slots = outer.n, self.pool + 1  # one slot for the newly priced atom
        self.c = cp.Parameter(n, name="c")
        self.images = cp.Parameter((n, slots), name="V_atoms")
        self.mask = cp.Parameter(slots, nonneg=True, name="active")
        self.lam = cp.Variable(slots, nonneg=True, name="weights")
        self.link = outer.u == self.c + self.images @ self.lam
        self.problem = cp.Problem(cp.Minimize(outer.expr), [self.link, cp.sum(self.lam) == 1, self.lam <= self.mask])
        self.atoms = np.zeros((slots, domain.size))
        self.active = np.zeros(slots, dtype=bool)
        self.q = np.full(n, 1.0 / n)  # last dual, the first pricing direction of the next call

    def solve(self, z: Any, V: Any, y: Any, tol: float | None = None, max_calls: int | None = None) -> GLMOResult:
        check_tol(tol, max_calls)
        max_calls = DEFAULT_MAX_CALLS if max_calls is None else int(max_calls)
        c, Vm = affine_model(z, V, y, self.outer.n, self.domain.size)
        self.c.value = c
        images = np.zeros((self.outer.n, self.active.size))
        images[:, self.active] = Vm @ self.atoms[self.active].T
        calls = 0
        if not self.active.any():
            _, atom = linear_certificate(Vm.T @ self.q, np.zeros(self.domain.size), self.domain)
            calls += 1
            self._add(atom, Vm @ atom, images)
        while True:
            self.images.value, self.mask.value = images, self.active.astype(float)
            solvers.solve(self.problem, "column-generation master")
            lam = np.where(self.active, np.clip(self.lam.value, 0.0, None), 0.0)
            lam /= lam.sum()
            x = lam @ self.atoms
            self.q = -np.asarray(self.link.dual_value, dtype=np.float64)  # CVXPY's sign: u - (...) == 0
            value = self.outer.value(c + Vm @ x)
            gap, atom = linear_certificate(Vm.T @ self.q, x, self.domain)
            calls += 1
            target = tol if tol is not None else 1e-6 * max(1.0, abs(value))
            if gap <= target:
                break
            self._add(atom, Vm @ atom, images, lam)
            if calls >= max_calls:
                break
        return GLMOResult(x.reshape(self.domain.shape), value, gap, calls)

    def _add(self, atom: np.ndarray, image: np.ndarray, images: np.ndarray, lam: np.ndarray | None = None) -> None:
        if self.active.sum() >= self.pool:
            self._make_room(images, lam)
        slot = int(np.argmin(self.active))
        self.atoms[slot], images[:, slot], self.active[slot] = atom, image, True

    def _make_room(self, images: np.ndarray, lam: np.ndarray | None) -> None:
        weights = np.where(self.active, lam if lam is not None else 1.0, np.inf)
        idle = self.active & (weights <= ZERO_WEIGHT)
        if idle.any():
            self.active[idle] = False
            return
        i, j = np.argsort(weights)[:2]
        wi, wj = weights[i], weights[j]
        self.atoms[i] = (wi * self.atoms[i] + wj * self.atoms[j]) / (wi + wj)
        images[:, i] = (wi * images[:, i] + wj * images[:, j]) / (wi + wj)
        self.active[j] = False

    def state_dict(self) -> dict:
        return {"atoms": self.atoms.copy(), "active": self.active.copy(), "q": self.q.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.atoms, self.active, self.q = (np.array(state[k]) for k in ("atoms", "active", "q"))
