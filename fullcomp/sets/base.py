"""The common interface of feasible sets: an LMO, a projection, CVXPY constraints."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cvxpy as cp
import numpy as np
import torch

from fullcomp.errors import DomainError
from fullcomp.sets.atoms import Atom, DenseAtom, Entries, MixtureAtom

if TYPE_CHECKING:
    from fullcomp.glmo.segments import Segments
    from fullcomp.sets.subspace import RitzSubspace

Array = Any  # numpy array or torch tensor; results come back in the type given


def as_shape(shape: Any, name: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise DomainError(f"{name} must be an int or a tuple of ints, got {shape!r}") from None
    if not shape or any(s <= 0 for s in shape):
        raise DomainError(f"{name} must have positive sizes, got {shape!r}")
    return shape


def check_radius(radius: float, name: str = "radius") -> float:
    try:
        radius = float(radius)
    except (TypeError, ValueError):
        raise DomainError(f"{name} must be a finite number >= 0, got {radius!r}; pass e.g. {name}=1.0") from None
    if not np.isfinite(radius) or radius < 0:
        raise DomainError(f"{name} must be a finite number >= 0, got {radius}; pass e.g. {name}=1.0")
    return radius


def numeric(fn: Callable[..., np.ndarray]) -> Callable[..., Array]:
    """Run a numpy implementation on numpy or torch input, returning the input's type."""

    def wrapper(self: Set, point: Array, *args: Any, **kwargs: Any) -> Array:
        if isinstance(point, torch.Tensor):
            out = fn(self, self._check(point.detach().cpu().numpy().astype(np.float64)), *args, **kwargs)
            return torch.as_tensor(out, dtype=point.dtype, device=point.device)
        return fn(self, self._check(np.asarray(point, dtype=np.float64)), *args, **kwargs)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    wrapper.unchecked = fn
    return wrapper


class Set(ABC):
    """A compact convex set X in R^shape.

    ``lmo(d)`` returns a minimizer of <d, x> over X, ``project(p)`` the
    Euclidean projection, ``cvxpy_constraints(var)`` the constraints that
    define X for a CVXPY variable of ``shape``.  A subclass must give ``shape``,
    ``diameter`` and ``lmo``; ``project`` and ``cvxpy_constraints`` are optional
    (the methods that need them raise a DomainError saying so).
    """

    shape: tuple[int, ...]
    #: True when ``lmo`` is a closed form or a cheap factorization, so column
    #: generation can call it many times per GLMO.
    cheap_lmo: bool = True
    #: True when X is a polytope whose ``lmo`` returns one of its finitely many vertices: the away and
    #: pairwise steps of ``fw`` then keep the iterate as a combination of vertices.
    polytope: bool = False
    _variable: cp.Variable | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def variable(self) -> cp.Variable:
        """The CVXPY variable that stands for x in an outer function depending on x."""
        if self._variable is None:
            self._variable = cp.Variable(self.shape, name="x")
        return self._variable

    @property
    @abstractmethod
    def diameter(self) -> float:
        """Largest Euclidean (Frobenius) distance between two points of X (an upper bound for ConvexSet)."""

    @abstractmethod
    def lmo(self, direction: Array) -> Array:
        """A point of X minimizing <direction, x>."""

    def project(self, point: Array) -> Array:
        """The Euclidean projection of ``point`` onto X.

        Optional: a set known by its LMO alone leaves it out; the methods that project then say so, and
        the Frank-Wolfe methods (hmsfw, scfw) never call it.
        """
        raise DomainError(
            f"{type(self).__name__} has no project(); PSG and prox-linear (and LiNASA+ICG from a given x0) need "
            "it: define project(point), or use a projection-free method such as hmsfw"
        )

    def cvxpy_constraints(self, var: cp.Expression) -> list[cp.Constraint]:
        """CVXPY constraints stating ``var`` in X.

        Optional: only the conic GLMO route (an outer function that reads x, or route='conic') and
        reference solves need them.
        """
        raise DomainError(
            f"{type(self).__name__} has no cvxpy_constraints(); the conic GLMO route (an outer function that "
            "reads x, or route='conic') needs them: define cvxpy_constraints(var), or keep F a function of u "
            "alone so that hmsfw prices atoms with the LMO (column generation)"
        )

    def _defines(self, method: str) -> bool:
        """Whether this set's class overrides ``method`` of :class:`Set` (project, contains: both optional)."""
        return getattr(type(self), method) is not getattr(Set, method)

    @property
    def has_project(self) -> bool:
        """Whether :meth:`project` is available (a set known by its LMO alone has none)."""
        return self._defines("project")

    def lmo_unchecked(self, d: np.ndarray) -> np.ndarray:
        """``lmo(d)`` for a finite float64 array of the set's shape, which internal callers hold: on small
        problems the input checks of :meth:`lmo` cost a third of the LMO."""
        raw = getattr(type(self).lmo, "unchecked", None)
        return self.lmo(d) if raw is None else raw(self, d)

    def lmo_atom(self, direction: np.ndarray, entries: Entries, hint: Atom | None = None) -> Atom:
        """The LMO for a direction given by its values at ``entries`` (zero elsewhere), as an atom.

        The default scatters into a dense direction; sets with a structured
        LMO (the nuclear ball: a sparse top singular pair) override it and may
        warm-start from ``hint``, a previous atom.
        """
        dense = np.zeros(self.size)
        dense[entries.flat] = direction
        return DenseAtom(np.asarray(self.lmo(dense.reshape(self.shape)), dtype=np.float64))

    def lmo_bounded(
        self,
        direction: np.ndarray,
        entries: Entries,
        hint: Atom | None = None,
        enough: Callable[[float, float], bool] | None = None,
        device: torch.device | None = None,
    ) -> tuple[Atom, float]:
        """An atom s of the LMO for ``direction`` (as in :meth:`lmo_atom`) and a lower bound on
        min_{x in X} <direction, x>.

        An iterative LMO may return as soon as ``enough(value, lower)`` holds, with value =
        <direction, s> for its current s: column generation only needs to know whether some
        atom improves its master by more than a target.  An exact LMO returns lower = value.
        ``device``: the run's device, where a set may do its heavy work (the nuclear ball's sparse products).
        """
        atom = self.lmo_atom(direction, entries, hint)
        return atom, float(direction @ atom.at(entries))

    def takes_scaled_rows(self, entries: Entries, device: torch.device | None = None) -> bool:
        """Whether :meth:`lmo_bounded` on ``entries`` in a run on ``device`` makes use of a direction given as a
        :class:`~fullcomp.sets.atoms.ScaledRows` (its factors); column generation gives it the values otherwise."""
        return False

    def combination_at(
        self, atoms: list[Atom], weights: np.ndarray, entries: Entries, add_to: np.ndarray | None = None
    ) -> np.ndarray:
        """sum_j weights_j atoms_j at the entries (at least one atom), or ``add_to`` plus that sum, written into
        ``add_to`` (float64, one value per entry)."""
        values = MixtureAtom(atoms, weights).at(entries)
        if add_to is None:
            return values
        add_to += values
        return add_to

    def image(
        self, atom: Atom, V: np.ndarray, entries: Entries, segments: Segments | None, direction: Any = None
    ) -> np.ndarray | None:
        """V a for an atom a of this set on ``entries`` (V is (n, len(entries)), ``segments`` its one-row column
        ranges, :mod:`fullcomp.glmo.segments`) without a's values there, or None when the set has no such way:
        the caller then evaluates a and multiplies.  ``direction``: the one a was priced for, which may carry
        V's factors (:class:`~fullcomp.sets.atoms.ScaledRows`)."""
        return None

    def subspace(self, entries: Entries, device: torch.device | None = None) -> RitzSubspace | None:
        """A heuristic pricer for directions on ``entries`` in a run on ``device`` (see
        :mod:`fullcomp.sets.subspace`), or None: column generation then prices with :meth:`lmo_bounded` alone."""
        return None

    def contains(self, point: Array, tol: float = 1e-9) -> bool:
        p = point.detach().cpu().numpy() if isinstance(point, torch.Tensor) else np.asarray(point, float)
        if not self.has_project:
            # A set known by its LMO alone: the one point it is sure of is its own default start (an LMO
            # point), which CompositeProblem checks when the user gives no x0.
            known = self.__dict__.get("_lmo_point")
            if known is not None and p.shape == known.shape and np.array_equal(p, known):
                return True
            raise DomainError(
                f"{type(self).__name__} has neither contains() nor project(), so membership of a point (a given "
                "x0) cannot be checked: define contains(point, tol) or project(point)"
            )
        return bool(np.linalg.norm(p - np.asarray(self.project(p))) <= tol * max(1.0, self.diameter))

    @property
    def contains_origin(self) -> bool:
        if not (self.has_project or self._defines("contains")):
            return False  # unknown for a set given by its LMO alone: its default start is then an LMO point
        return self.contains(np.zeros(self.shape))

    def default_point(self) -> np.ndarray:
        """The start used when the user gives none: the origin, or its projection; for a set with neither
        ``project`` nor ``contains``, the LMO's point for the all-ones direction (a point of X by definition)."""
        zero = np.zeros(self.shape)
        if self.has_project:
            return zero if self.contains(zero) else np.asarray(self.project(zero))
        if self._defines("contains") and self.contains(zero):
            return zero
        point = np.asarray(self.lmo(np.ones(self.shape)), dtype=np.float64)
        self._lmo_point = point
        return point

    def _check(self, a: np.ndarray) -> np.ndarray:
        if a.shape != self.shape:
            raise DomainError(f"{type(self).__name__} has shape {self.shape}, got an array of shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise DomainError(f"{type(self).__name__} received non-finite entries")
        return a

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.shape})"


class Ball(Set):
    """A ball {x : ||x|| <= radius} of some norm, centred at the origin: the shape and the radius, checked."""

    contains_origin = True

    def __init__(self, shape: Any, radius: float = 1.0):
        self.shape = as_shape(shape)
        self.radius = check_radius(radius)

    @property
    def diameter(self) -> float:
        return 2.0 * self.radius
