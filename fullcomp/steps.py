"""Step-size rules: every method takes its step size from a rule of this module, through one verb.

FrankWolfe.jl's ``LineSearchMethod`` is the model: a rule is a small type and ``rule.step_size(k, line)`` is
all a method asks of it.  A rule that needs no function values (a constant, a decreasing sequence, a decay
of the learning rates, HMSFW's :class:`~fullcomp.schedules.Schedule` of gamma_k) ignores ``line``; a line
search reads phi along the step from it.

========================  ===================================================  ================================
rule                      step size at iteration k                             used by
========================  ===================================================  ================================
:class:`Constant`         eta                                                  ``psg(step_size="constant")``
:class:`InverseSqrt`      eta / sqrt(k + 1)                                    ``psg(step_size="sqrt")``
:class:`StepDecay`        factor ** (milestones passed): a learning-rate       ``decay=`` of smag and the DC
                          multiplier                                           baselines
``fc.Schedule``           gamma_k of the HMSFW schedule                        hmsfw and its presets
:class:`ShortStep`        min(gamma_max, <-g, d> / (L ||d||^2)), L known       ``fw(line_search="short")``
:class:`Adaptive`         the short step, L raised until phi decreases as an   ``fw(line_search="adaptive")``
                          L-smooth function would (Pedregosa et al. 2020)
:class:`Halving`          the best of 1, 1/2, ..., 2^-10 for phi               a warm start's first step
========================  ===================================================  ================================

The schedule's gamma_k is read at k + s after a first step gamma_0 other than the schedule's: :func:`shift`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fullcomp.errors import OptionError
from fullcomp.validation import CALLABLE, NONE, Instance, Param


@dataclass
class Line:
    """What a line search reads of the step x + gamma d it sizes.

    ``phi(gamma)`` is phi(x + gamma d), ``value`` phi(x), ``decrease`` the first-order decrease <-g, d> (for
    a GLMO's step, phi(x) minus the model's value at its point), ``norm2`` ||d||^2, ``gamma_max`` the largest
    step that stays feasible.  ``L`` is the smoothness estimate a line search keeps between steps: it reads it
    and leaves there the one it ended with (None before the first estimate).
    """

    phi: Callable[[float], float]
    value: float = 0.0
    decrease: float = 0.0
    norm2: float = 0.0
    gamma_max: float = 1.0
    L: float | None = None

    @property
    def flat(self) -> bool:
        """No step decreases phi to first order (or none is feasible): the step is 0."""
        return self.decrease <= 0 or self.norm2 == 0 or self.gamma_max <= 0


@runtime_checkable
class StepSize(Protocol):
    """A step-size rule.  ``step_size(k, line)`` is the step at iteration k; ``line`` (a :class:`Line`) is
    read only by line searches."""

    def step_size(self, k: Any, line: Line | None = None) -> float: ...


@dataclass(frozen=True)
class Constant:
    """eta at every iteration."""

    eta: float

    def step_size(self, k: Any, line: Line | None = None) -> float:
        return self.eta


@dataclass(frozen=True)
class InverseSqrt:
    """eta / sqrt(k + 1): the subgradient method's decreasing step."""

    eta: float

    def step_size(self, k: Any, line: Line | None = None) -> float:
        return self.eta / math.sqrt(k + 1)


@dataclass(frozen=True)
class StepDecay:
    """The learning-rate multiplier ``factor ** (number of milestones <= k)`` at iteration k.

    ``StepDecay((12 * n, 24 * n))`` with n batches per epoch is the SMAG paper's division by 10 at epochs 12
    and 24.  Default: no milestones (constant rates).
    """

    milestones: tuple[int, ...] = ()
    factor: float = 0.1

    def step_size(self, k: Any, line: Line | None = None) -> float:
        return self.factor ** sum(k >= m for m in self.milestones)


def multiplier(decay: StepSize | Callable[[int], float] | None, k: int) -> float:
    """The ``decay`` option's multiplier of the learning rates at iteration k: a rule's step size, a function's
    value, 1 for None."""
    if decay is None:
        return 1.0
    return decay.step_size(k) if isinstance(decay, StepSize) else decay(k)


#: The learning-rate multiplier option of smag and the DC baselines.
DECAY = Param(
    "decay",
    (Instance((StepSize,), "a step-size rule (fc.StepDecay)"), CALLABLE, NONE),
    None,
    "multiplier of the step sizes at iteration k: a rule such as fc.StepDecay((600,)) or a function k -> "
    "multiplier; None: constant",
)

#: The adaptive step's constants (Pedregosa, Negiar, Askari and Jaggi 2020): each step first tries DECREASE * L
#: and multiplies L by INCREASE until the step decreases phi as an L-smooth function would, at most BACKTRACKS
#: times.
DECREASE, INCREASE, BACKTRACKS = 0.9, 2.0, 60


def _needs_line(rule: object, line: Line | None) -> Line:
    if line is None:
        raise OptionError(f"{type(rule).__name__} is a line search: step_size(k, line) needs the Line of the step")
    return line


@dataclass(frozen=True)
class ShortStep:
    """The short step min(gamma_max, <-g, d> / (L ||d||^2)) for a known smoothness constant L of phi along d:
    the minimizer of the quadratic upper bound."""

    L: float

    def step_size(self, k: Any, line: Line | None = None) -> float:
        line = _needs_line(self, line)
        if line.flat:
            return 0.0
        line.L = self.L
        return min(line.gamma_max, line.decrease / (self.L * line.norm2))


@dataclass(frozen=True)
class Adaptive:
    """The short step for an estimate of L, raised until phi(x + gamma d) <= phi(x) - gamma <-g, d> +
    L gamma^2 ||d||^2 / 2 (Pedregosa, Negiar, Askari and Jaggi 2020).

    Each step starts from DECREASE times the last estimate (``line.L``; None: the L whose short step is the
    whole step).  ``eps``: the machine epsilon of phi's values; 4 eps |phi(x)| of slack keeps a step whose
    decrease is below phi's rounding from backtracking forever.
    """

    eps: float

    def step_size(self, k: Any, line: Line | None = None) -> float:
        line = _needs_line(self, line)
        if line.flat:
            return 0.0
        decrease, dd = line.decrease, line.norm2
        L = decrease / dd if line.L is None else line.L
        L, slack = DECREASE * L, 4 * self.eps * abs(line.value)
        for _ in range(BACKTRACKS):
            gamma = min(line.gamma_max, decrease / (L * dd))
            if line.phi(gamma) <= line.value - gamma * decrease + 0.5 * L * gamma**2 * dd + slack:
                line.L = L
                return gamma
            L *= INCREASE
        line.L = L
        return 0.0  # no step decreases phi: its differences are below the rounding of its values


@dataclass(frozen=True)
class Halving:
    """The best step of 1, 1/2, ..., 2^-halvings for phi, or the smallest when none beats phi(x) (``line.value``).

    A warm start's first move: from a start the user chose, a first step of gamma_0 = 1 (HMSFW) or of one
    diameter (PSG, prox-linear, LiNASA) would throw the start away.
    """

    halvings: int = 10

    def step_size(self, k: Any, line: Line | None = None) -> float:
        line = _needs_line(self, line)
        steps = [2.0**-i for i in range(self.halvings + 1)]
        values = [line.phi(t) for t in steps]
        best = int(np.argmin(values))
        return steps[best] if values[best] <= line.value else steps[-1]


def shift(gamma_0: float) -> float:
    """s with 2 / (s + 2) = gamma_0: reading the schedule at k + s makes its first step gamma_0 and none of the
    later ones longer (the paper's gamma_k = 2/(k+2))."""
    return 2.0 / gamma_0 - 2.0


def rule(kind: str, eta: float) -> StepSize:
    """The rule a method's ``step_size`` option names: "constant" or "sqrt"."""
    return {"constant": Constant, "sqrt": InverseSqrt}[kind](eta)


__all__ = [
    "StepSize",
    "Line",
    "Constant",
    "InverseSqrt",
    "StepDecay",
    "ShortStep",
    "Adaptive",
    "Halving",
    "DECAY",
    "multiplier",
    "shift",
    "rule",
]
