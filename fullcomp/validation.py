"""Hyperparameters declared as data and checked at the boundary, in the spirit of scikit-learn's constraints.

A method lists its hyperparameters as :class:`Param` records; each carries the
constraints a value must meet (any one of them suffices), a default and a
one-line meaning.  :func:`check_params` is the only place where options are
checked, and :meth:`Param.bad_values` lets one generated test feed every
method values each constraint must reject.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fullcomp.errors import OptionError

#: Marks a hyperparameter without a default: the caller must give it.
REQUIRED = object()


class Constraint:
    """One admissible form of a value: ``accept(value)`` returns the normalized value or raises ValueError."""

    def accept(self, value: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def bad_values(self) -> list[Any]:
        """Values this constraint rejects (a generated test checks that every method rejects them)."""
        return []


@dataclass(frozen=True)
class Interval(Constraint):
    """A real (``kind=float``) or integer (``kind=int``) number in an interval; None bounds are infinite."""

    kind: type
    low: float | None = None
    high: float | None = None
    closed: str = "both"  # "both", "left", "right" or "neither"

    def accept(self, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError
        if self.kind is int:
            if not isinstance(value, numbers.Integral):
                raise ValueError
            value = int(value)
        else:
            if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
                raise ValueError
            value = float(value)
        left_open, right_open = self.closed in ("right", "neither"), self.closed in ("left", "neither")
        if self.low is not None and (value < self.low or (left_open and value == self.low)):
            raise ValueError
        if self.high is not None and (value > self.high or (right_open and value == self.high)):
            raise ValueError
        return value

    def describe(self) -> str:
        name = "an int" if self.kind is int else "a number"
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        left = "[" if self.closed in ("both", "left") and self.low is not None else "("
        right = "]" if self.closed in ("both", "right") and self.high is not None else ")"
        return f"{name} in {left}{lo}, {hi}{right}"

    def bad_values(self) -> list[Any]:
        bad: list[Any] = ["1", True, float("nan")]
        if self.kind is int:
            bad.append(1.5)
        if self.low is not None:
            bad.append(self.low - 1 if self.closed in ("both", "left") else self.low)
        if self.high is not None:
            bad.append(self.high + 1 if self.closed in ("both", "right") else self.high)
        return bad


@dataclass(frozen=True)
class Options(Constraint):
    """One of a fixed set of strings (matched case-insensitively, returned as declared)."""

    values: tuple[str, ...]

    def accept(self, value: Any) -> Any:
        if isinstance(value, str):
            for v in self.values:
                if value.lower() == v.lower():
                    return v
        raise ValueError

    def describe(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)

    def bad_values(self) -> list[Any]:
        return ["no-such-option"]


@dataclass(frozen=True)
class Instance(Constraint):
    """An instance of one of ``types`` (``name`` is how the message spells it)."""

    types: tuple[type, ...]
    name: str

    def accept(self, value: Any) -> Any:
        if not isinstance(value, self.types):
            raise ValueError
        return value

    def describe(self) -> str:
        return self.name


class _Callable(Constraint):
    def accept(self, value: Any) -> Any:
        if not callable(value):
            raise ValueError
        return value

    def describe(self) -> str:
        return "a callable"


class _NoneValue(Constraint):
    def accept(self, value: Any) -> Any:
        if value is not None:
            raise ValueError
        return None

    def describe(self) -> str:
        return "None"


class _Bool(Constraint):
    def accept(self, value: Any) -> Any:
        if not isinstance(value, bool):
            raise ValueError
        return value

    def describe(self) -> str:
        return "True or False"

    def bad_values(self) -> list[Any]:
        return ["yes", 2]


@dataclass(frozen=True)
class Pair(Constraint):
    """A pair of values, each meeting ``item``."""

    item: Constraint

    def accept(self, value: Any) -> Any:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise ValueError
        return tuple(self.item.accept(v) for v in value)

    def describe(self) -> str:
        return f"a pair (a, b), each {self.item.describe()}"

    def bad_values(self) -> list[Any]:
        return [(1,), "ab"]


CALLABLE, NONE, BOOL = _Callable(), _NoneValue(), _Bool()


def positive(kind: type = float) -> Interval:
    """A positive number (``float``) or a positive int (``int``)."""
    return Interval(float, 0, None, "neither") if kind is float else Interval(int, 1)


@dataclass(frozen=True)
class Param:
    """A hyperparameter: its name, the constraints a value must meet (any one), its default and meaning."""

    name: str
    accepts: tuple[Constraint, ...]
    default: Any = REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        forms = [c.describe() for c in self.accepts]
        return forms[0] if len(forms) == 1 else ", ".join(forms[:-1]) + " or " + forms[-1]

    def _accept(self, value: Any) -> tuple[bool, Any]:
        """(True, the normalized value) under the first constraint that takes it, else (False, value)."""
        for constraint in self.accepts:
            try:
                return True, constraint.accept(value)
            except (ValueError, TypeError):
                continue
        return False, value

    def resolve(self, value: Any, method: str) -> Any:
        """The normalized value, or an OptionError naming the method, the option and what it accepts."""
        ok, value = self._accept(value)
        if not ok:
            meaning = f" ({self.doc})" if self.doc else ""
            raise OptionError(f"{method}: {self.name} must be {self.describe()}{meaning}; got {value!r}")
        return value

    def bad_values(self) -> list[Any]:
        """Values every constraint of this parameter rejects (a generated test feeds them to every method)."""
        candidates = [object(), *(v for c in self.accepts for v in c.bad_values())]
        return [v for v in candidates if not self._accept(v)[0]]


def check_params(params: Iterable[Param], given: Mapping[str, Any], method: str) -> dict[str, Any]:
    """Every declared hyperparameter resolved from ``given`` (defaults filled in); unknown names are errors."""
    params = list(params)
    names = {p.name for p in params}
    unknown = [k for k in given if k not in names]
    if unknown:
        import difflib

        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, sorted(names), n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise OptionError(
            f"{method} has no option {', '.join(hints)}; its options are {', '.join(sorted(names))} "
            f"(fc.describe({method!r}) lists them with their meaning)"
        )
    resolved = {}
    for p in params:
        if p.name in given:
            resolved[p.name] = p.resolve(given[p.name], method)
        elif p.required:
            raise OptionError(f"{method} needs {p.name}: {p.describe()} ({p.doc})")
        else:
            resolved[p.name] = p.default
    return resolved


__all__ = [
    "REQUIRED",
    "Constraint",
    "Interval",
    "Options",
    "Instance",
    "Pair",
    "CALLABLE",
    "NONE",
    "BOOL",
    "positive",
    "Param",
    "check_params",
]
