"""The generalized LMO  min_{x in X} F(z + V (x - y), x)  and its certificate."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fullcomp.errors import OptionError
from fullcomp.sets.atoms import Atom, Entries
from fullcomp.sets.base import Set

#: The tolerance a GLMO aims at when called without ``tol``: this times ``max(1, |value|)``.
DEFAULT_REL_TOL = 1e-6


@dataclass(frozen=True)
class Request:
    """What a GLMO call asks beyond the model z + V (x - y): see :meth:`GLMO.solve`."""

    tol: float | None = None
    max_calls: int | None = None
    entries: Entries | None = None
    start: Atom | None = None
    revision: Any = None
    track: Entries | None = None

    def __iter__(self):
        """The fields in order, as they are (``dataclasses.astuple`` would copy the entries and atoms)."""
        return iter((self.tol, self.max_calls, self.entries, self.start, self.revision, self.track))


class GLMO(ABC):
    """A generalized LMO, ``min_{x in X} F(z + V (x - y), x)``, with a certificate: the protocol of every route.

    ``route`` names it ("affine", "conic", "colgen"); :meth:`solve` is the one call; ``state_dict`` and
    ``load_state_dict`` hold what carries from one call to the next (a warm start, an atom pool), which a
    checkpoint saves.
    """

    route: str

    def solve(
        self,
        z: Any,
        V: Any,
        y: Any,
        tol: float | None = None,
        max_calls: int | None = None,
        entries: Entries | None = None,
        start: Atom | None = None,
        revision: Any = None,
        track: Entries | None = None,
    ) -> GLMOResult:
        """Solve the GLMO for the model z + V (x - y).

        Parameters
        ----------
        z, V, y : arrays or tensors
            The model: z of shape (n,), V of shape (n, d), y of shape (d,) (d: the entries read).
        tol : float, optional
            The gap to certify; default ``DEFAULT_REL_TOL * max(1, |value|)``.  The conic route solves once
            and only reports whether its certificate meets it.
        max_calls : int, optional
            Column generation's budget of pricing LMOs (a fixed budget instead of a certificate).
        entries : Entries, optional
            The model reads x only there: V is (n, len(entries)), y and ``result.x`` hold the values there.
            Sharded entries (a rank's rows) make every sum over entries a sum over the ranks too.
        start : Atom, optional
            y as an atom: seeds column generation's empty pool.
        revision : Revision, optional
            Names V and how it came from an earlier call's V: column generation then carries the pooled
            atoms' images V a_j over.
        track : Entries, optional
            Further entries (not read by the model) where ``result.x`` is wanted too, after those of
            ``entries``.

        Returns
        -------
        GLMOResult
            The point, the model's value there, a certified bound on its gap, and the oracle calls spent.
        """
        check_tol(tol, max_calls)
        return self._solve(z, V, y, Request(tol, max_calls, entries, start, revision, track))

    @abstractmethod
    def _solve(self, z: Any, V: Any, y: Any, request: Request) -> GLMOResult:
        """The route's own solve, on checked tolerances."""

    @abstractmethod
    def state_dict(self) -> dict:
        """What carries from one call to the next, as checkpointable data."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Take back :meth:`state_dict`."""


def pass_hint(previous: Atom | None, current: Atom | None) -> Atom | None:
    """``current``, the atom that starts the next LMO; ``previous``, the one that did, drops the Ritz vectors it
    carried for that start (:func:`fullcomp.sets.balls.warm_block`).  Nothing else reads them, and the pool and
    the iterate's atomic form would keep them to the end of the run: 4 x min(P, Q) numbers an atom, a third of
    a rank-one atom of a 70,000 x 10,700 matrix."""
    if previous is not None and previous is not current and getattr(previous, "ritz", None) is not None:
        previous.ritz = None
    return current


def hint_state(hint: Atom | None) -> dict:
    """A GLMO's hint for its state_dict, with its Ritz vectors as they are now: a later :func:`pass_hint` (the
    closing row's GLMO, after the last save) drops them from the atom itself."""
    return {"hint": hint, "hint_ritz": getattr(hint, "ritz", None)}


def hint_from(state: dict) -> Atom | None:
    """The hint of a state :func:`hint_state` gave, its Ritz vectors back on it."""
    hint = state.get("hint")
    if state.get("hint_ritz") is not None:
        hint.ritz = state["hint_ritz"]
    return hint


def target_gap(tol: float | None, value: float) -> float:
    """The gap a GLMO must certify: ``tol`` when given, else ``DEFAULT_REL_TOL * max(1, |value|)``."""
    return float(tol) if tol is not None else DEFAULT_REL_TOL * max(1.0, abs(value))


@dataclass
class GLMOResult:
    """A GLMO answer: ``x`` in X, the model value at ``x``, a certified bound on
    ``value - min``, and the number of oracle calls spent (pricing LMOs for
    column generation, conic solves for the conic route).  ``x`` is also given
    as the convex combination ``sum(weights[j] * atoms[j])``.  ``heuristic``: atoms
    that column generation found by a cheaper pricing than the LMO (no certificate).

    ``converged`` is True when ``gap_bound <= tol``, the tolerance the call
    asked for.  Without ``tol`` (only ``max_calls``, or neither) the target is
    the default ``DEFAULT_REL_TOL * max(1, |value|)``, so ``converged=False``
    means column generation spent ``max_calls`` before certifying even that.
    The conic route solves once: it is converged when the solver's certificate
    (or, for an F that reads x, the solver's own accuracy, about 1e-8) is
    within the target, so a ``tol`` below the solver's accuracy reports False.
    """

    x: np.ndarray | torch.Tensor  # a tensor of V's dtype and device where the dual route was given a tensor V
    value: float
    gap_bound: float
    calls: int
    atoms: list[Atom] = field(default_factory=list)
    weights: np.ndarray = field(default_factory=lambda: np.ones(0))
    converged: bool = field(kw_only=True)  # required: every route must say whether it met tol
    heuristic: int = field(default=0, kw_only=True)  # atoms from a heuristic pricing (not counted in calls)
    #: The total slack the elastic program gave the problem's constraints (0: the linearized constraints held);
    #: ``value`` then includes penalty * slack, and the gap bounds the elastic program's.
    slack: float = field(default=0.0, kw_only=True)
    #: The model's inner value z + V (x - y) at x in float64, where the route has it (the dual route, from the
    #: Gram matrices): a Frank-Wolfe step's V (y_next - y) is gamma (inner - z) without a pass over V.
    inner: np.ndarray | None = field(default=None, kw_only=True)


def as_numpy(a: Any) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        if a.dtype == torch.float64 and a.device.type == "cpu":
            return a.detach().numpy()  # a view: at 20,000 entries a third of the generic path's 8 us
        return a.detach().cpu().numpy().astype(np.float64, copy=False)
    return np.asarray(a, dtype=np.float64)


def check_finite(z: np.ndarray, V: np.ndarray, y: np.ndarray) -> None:
    """Refuse NaN or Inf in the GLMO's inputs, naming the first input that holds one."""
    # The sum of all three is finite exactly when every entry is (or it overflowed: then the elementwise checks
    # decide): one reduction each, no mask of V's size.
    with np.errstate(over="ignore", invalid="ignore"):  # the sums of non-finite inputs are what is checked
        total = z.sum() + y.sum() + V.sum()
    if not (math.isfinite(total) or all(np.isfinite(a).all() for a in (z, V, y))):
        name = next(k for k, a in (("z", z), ("V", V), ("y", y)) if not np.isfinite(a).all())
        raise OptionError(f"GLMO input {name} has NaN or Inf entries")


def model_inputs(z: Any, V: Any, y: Any, n: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z, V, y) as float64 arrays of shapes (n,), (n, d) and (d,), or an error naming the shapes."""
    z, V, y = as_numpy(z).reshape(-1), as_numpy(V), as_numpy(y).reshape(-1)
    if z.shape != (n,) or y.shape != (d,) or V.size != n * d:
        raise OptionError(
            f"GLMO inputs must be z of size {n}, V of size {n}x{d}, y of size {d}; "
            f"got z {z.shape}, V {V.shape}, y {y.shape}"
        )
    return z, V.reshape(n, d), y


def affine_model(
    z: Any,
    V: Any,
    y: Any,
    n: int,
    d: int,
    total: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(c, V) with c = z - V y, V as an (n, d) array: the model is c + V x.

    ``total`` completes V y over the ranks when V and y live on a rank's share of the entries."""
    z, V, y = model_inputs(z, V, y, n, d)
    check_finite(z, V, y)
    return z - (V @ y if total is None else total(V @ y)), V


def linear_certificate(g: np.ndarray, x: np.ndarray, domain: Set, entries: Entries) -> float:
    """<g, x - s> with s = lmo(g), for a direction g supported on ``entries`` (x, g given there).

    When g = V^T q and q is a subgradient of F at c + V x, convexity of F gives
    F(c + V x') >= F(c + V x) - <g, x - s> for every x' in X, so this bounds
    the GLMO suboptimality of x.
    """
    atom = domain.lmo_atom(g, entries)
    return max(float(g @ (x - atom.at(entries))), 0.0)


def check_tol(tol: float | None, max_calls: int | None) -> None:
    if tol is not None and not (isinstance(tol, (int, float, np.number)) and math.isfinite(tol) and tol > 0):
        raise OptionError(f"tol must be a positive number, got {tol}")
    if max_calls is not None and (not isinstance(max_calls, (int, np.integer)) or max_calls < 1):
        raise OptionError(f"max_calls must be a positive int, got {max_calls}")
