"""The common interface of feasible sets: an LMO, a projection, CVXPY constraints."""

from __future__ import annotations

import functools
import inspect
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import cvxpy as cp
import numpy as np
import torch

from fullcomp.errors import DomainError
from fullcomp.sets.atoms import Atom, DenseAtom, Entries, MixtureAtom
from fullcomp.sets.lmo_projection import project_by_lmo
from fullcomp.sets.segments import Segments

if TYPE_CHECKING:
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


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_dense(domain: Set, what: str) -> None:
    """A DomainError naming the size when one float64 array of ``domain``'s shape would take more than half of
    this machine's memory: a dense start or iterate of that size cannot be used (a method keeps several), and
    numpy's allocation failure would not say which set asked for it."""
    need, memory = 8 * domain.size, physical_memory()
    if memory is not None and need > memory // 2:
        raise DomainError(
            f"{domain!r} needs {need / 2**30:.1f} GiB for {what} of shape {domain.shape}, more than half of this "
            f"machine's {memory / 2**30:.1f} GiB of memory, and fullcomp's dense methods keep several such "
            "arrays: use a smaller set (e.g. a lower-dimensional parametrization), or run on a machine with more "
            "memory"
        )


#: The methods :class:`Set` adapts in every subclass that defines them (see :meth:`Set.__init_subclass__`).
ADAPTED = ("lmo", "project")


_FLOAT64 = np.dtype(np.float64)


def _result_dtype(point: Any) -> Any:
    """The dtype a result comes back in: the input's when it is floating point, float64 otherwise (an int array)."""
    if isinstance(point, torch.Tensor):
        return point.dtype if point.is_floating_point() else torch.float64
    dtype = getattr(point, "dtype", None)
    return dtype if dtype is not None and np.issubdtype(dtype, np.floating) else _FLOAT64


#: The argument of each adapted method, as errors name it.
ARGUMENT = {"lmo": "direction", "project": "point", "contains": "point"}


def _complex_message(owner: Set, name: str, kind: str) -> str:
    argument = ARGUMENT.get(name, "input")
    return (
        f"{type(owner).__name__}.{name}() received a complex {kind} as its {argument}; sets are real, and dropping "
        f"the imaginary part would silently answer another question: pass real numbers (e.g. the real part, "
        f"{argument}.real, if that is what you mean)"
    )


def _refuse_complex(owner: Set, point: Any) -> None:
    """A DomainError when ``contains`` is given complex numbers (a cast would drop their imaginary parts)."""
    if point.is_complex() if isinstance(point, torch.Tensor) else np.iscomplexobj(point):
        raise DomainError(_complex_message(owner, "contains", "array"))


def _real_array(owner: Set, point: Any, name: str) -> np.ndarray:
    """``point`` (an array, a list, a number) as a float64 array; a DomainError for complex or non-numeric entries."""
    array = np.asarray(point)
    if array.dtype.kind == "c" or (array.dtype == object and any(isinstance(v, complex) for v in array.flat)):
        raise DomainError(_complex_message(owner, name, "array"))
    try:
        return array.astype(np.float64)
    except (TypeError, ValueError):
        raise DomainError(
            f"{type(owner).__name__}.{name}() needs an array of real numbers as its {ARGUMENT.get(name, 'input')}, "
            f"got entries of type {array.dtype}"
        ) from None


def adapt(fn: Callable[..., Any]) -> Callable[..., Array]:
    """``fn`` (a set's ``lmo`` or ``project``, written for one float64 numpy array of the set's shape) as a method
    that takes numpy arrays, lists and torch tensors of any float dtype and on any device, and returns the
    result in the input's type, dtype and device.

    The input's shape and finiteness are checked once here, so ``fn`` never sees a malformed array; the
    result's shape is checked too, since a wrong one would otherwise surface far away, inside a solver.
    A set whose class sets ``takes_tensors = True`` gets tensors as they are (its own device and dtype) and only
    its result is put back in the input's dtype and device.  ``adapt(fn).unchecked`` is ``fn`` itself, for
    internal callers that already hold a checked float64 array (:meth:`Set.lmo_unchecked`).
    """
    name = fn.__name__

    @functools.wraps(fn)
    def method(self: Set, point: Array, *args: Any, **kwargs: Any) -> Array:
        if type(point) is np.ndarray and point.dtype is _FLOAT64:  # the solvers' own calls: no conversion
            out = fn(self, self._check(point), *args, **kwargs)
            if type(out) is not np.ndarray or out.dtype is not _FLOAT64:
                out = np.asarray(out, dtype=_FLOAT64)
        elif isinstance(point, torch.Tensor):
            if point.is_complex():
                raise DomainError(_complex_message(self, name, "tensor"))
            if self.takes_tensors:
                self._check_shape(tuple(point.shape), "an input")
                if not bool(torch.isfinite(point).all()):
                    raise DomainError(f"{type(self).__name__} received non-finite entries")
                out = fn(self, point, *args, **kwargs)
            else:
                # astype copies even a CPU float64 tensor's memory: fn may write into its input.
                out = fn(self, self._check(point.detach().cpu().numpy().astype(np.float64)), *args, **kwargs)
            out = torch.as_tensor(out, dtype=_result_dtype(point), device=point.device)
        else:
            out = fn(self, self._check(_real_array(self, point, name)), *args, **kwargs)
            out = np.asarray(out, dtype=_result_dtype(point))
        if out.shape != self.shape:
            self._check_shape(tuple(out.shape), f"{name}()'s result")
        return out

    method.unchecked = fn  # type: ignore[attr-defined]
    method.__fullcomp_adapted__ = True  # type: ignore[attr-defined]
    return method


def adapt_contains(fn: Callable[..., bool]) -> Callable[..., bool]:
    """A set's ``contains(point, tol)`` that also takes a torch tensor (on any device) and returns a bool."""

    @functools.wraps(fn)
    def contains(self: Set, point: Array, *args: Any, **kwargs: Any) -> bool:
        _refuse_complex(self, point)
        if isinstance(point, torch.Tensor) and not self.takes_tensors:
            point = point.detach().cpu().numpy()
        return bool(fn(self, point, *args, **kwargs))

    contains.__fullcomp_adapted__ = True  # type: ignore[attr-defined]
    return contains


class Set(ABC):
    """A compact convex set X in R^shape.

    ``lmo(d)`` returns a minimizer of <d, x> over X, ``project(p)`` the
    Euclidean projection, ``cvxpy_constraints(var)`` the constraints that
    define X for a CVXPY variable of ``shape``.  A subclass must give ``shape``,
    ``diameter`` and ``lmo``; ``project``, ``contains`` and ``cvxpy_constraints``
    are optional.  Without ``project``, the projection is computed from the LMO
    (:mod:`fullcomp.sets.lmo_projection`: within ``projection_tol`` times the
    diameter); without ``contains`` and ``cvxpy_constraints``, the methods that
    need them raise a DomainError saying so.

    A subclass writes ``lmo`` and ``project`` for one float64 numpy array of
    ``shape``: every subclass's own ``lmo`` and ``project`` are wrapped when the
    class is created (:func:`adapt`), so they accept numpy arrays and torch
    tensors of any float dtype and device, refuse a wrong shape or a non-finite
    entry with a DomainError, and return the result in the input's type, dtype
    and device.  A set whose methods work on tensors themselves (on a GPU, say)
    sets ``takes_tensors = True``: it then gets tensors as they are.
    :func:`fullcomp.testing.check_set` checks a subclass against this contract.
    """

    shape: tuple[int, ...]
    #: True when ``lmo`` and ``project`` take torch tensors as they are (and numpy arrays); False (the default)
    #: when they are written for float64 numpy arrays and tensors are converted for them.
    takes_tensors: ClassVar[bool] = False
    #: True when ``lmo`` is a closed form or a cheap factorization, so column
    #: generation can call it many times per GLMO.
    cheap_lmo: bool = True
    #: True when X is a polytope whose ``lmo`` returns one of its finitely many vertices: the away and
    #: pairwise steps of ``fw`` then keep the iterate as a combination of vertices.
    polytope: bool = False
    #: A set without its own ``project`` projects by Frank-Wolfe on its LMO to within ``projection_tol`` times
    #: its diameter of the exact projection, in at most ``projection_iters`` steps (it warns when they run out).
    projection_tol: ClassVar[float] = 1e-6
    projection_iters: ClassVar[int] = 10_000
    _variable: cp.Variable | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Wrap only what this class defines: an inherited method is wrapped already, and a wrapped one assigned
        # again (lmo = Other.lmo) must not be converted twice.
        super().__init_subclass__(**kwargs)
        for name in (*ADAPTED, "contains"):
            fn = cls.__dict__.get(name)
            if inspect.isfunction(fn) and not getattr(fn, "__fullcomp_adapted__", False):
                setattr(cls, name, adapt_contains(fn) if name == "contains" else adapt(fn))

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))  # numpy's prod costs 2.5 us a call, read many times an update

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

    @adapt
    def project(self, point: Array) -> Array:
        """The Euclidean projection of ``point`` onto X.

        Optional: for a set known by its LMO alone this default computes it from the LMO, within
        ``projection_tol`` times the diameter (:mod:`fullcomp.sets.lmo_projection`), with a
        :class:`~fullcomp.errors.ProjectionWarning` when ``projection_iters`` steps do not reach that.  A set
        with an exact projection defines its own: exact, and mostly much cheaper than the Frank-Wolfe steps.
        """
        return project_by_lmo(self, point, self.projection_tol, self.projection_iters)

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
        """Whether the set defines its own :meth:`project`, taken as exact.  Otherwise ``project`` is the
        approximate one computed from the LMO, which is not precise enough to decide membership (``contains``)."""
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
        ranges, :mod:`fullcomp.sets.segments`) without a's values there, or None when the set has no such way:
        the caller then evaluates a and multiplies.  ``direction``: the one a was priced for, which may carry
        V's factors (:class:`~fullcomp.sets.atoms.ScaledRows`)."""
        return None

    def subspace(self, entries: Entries, device: torch.device | None = None) -> RitzSubspace | None:
        """A heuristic pricer for directions on ``entries`` in a run on ``device`` (see
        :mod:`fullcomp.sets.subspace`), or None: column generation then prices with :meth:`lmo_bounded` alone."""
        return None

    def contains(self, point: Array, tol: float = 1e-9) -> bool:
        _refuse_complex(self, point)
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
        check_dense(self, "its default start (a dense point)")
        zero = np.zeros(self.shape)
        if self.has_project:
            return zero if self.contains(zero) else np.asarray(self.project(zero))
        if self._defines("contains") and self.contains(zero):
            return zero
        point = np.asarray(self.lmo(np.ones(self.shape)), dtype=np.float64)
        self._lmo_point = point
        return point

    def _check_shape(self, shape: tuple[int, ...], what: str) -> None:
        if shape != self.shape:
            raise DomainError(f"{type(self).__name__} has shape {self.shape}, got {what} of shape {shape}")

    def _check(self, a: np.ndarray) -> np.ndarray:
        self._check_shape(a.shape, "an array")
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
