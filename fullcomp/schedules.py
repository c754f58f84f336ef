"""Step and momentum schedules (gamma_k, beta_k, rho_k) of HMSFW."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fullcomp.errors import OptionError


@dataclass(frozen=True)
class Schedule:
    """Frank-Wolfe step gamma(k), Jacobian momentum beta(k) and value momentum rho(k).

    Iteration k moves y_{k+1} = y_k + gamma(k) (x_k - y_k) and then updates
    the trackers at y_{k+1} with beta(k + 1) and rho(k + 1).
    """

    gamma: Callable[[int], float]
    beta: Callable[[int], float]
    rho: Callable[[int], float]
    name: str = "custom"

    @classmethod
    def paper(cls) -> Schedule:
        """gamma = 2/(k+2), beta = (k+21)^(-2/3), rho = 2/(k+2): the HMSFW experiments'
        schedule (Theorem 2 at r_f = r_g = 2, k_g = 21), last-iterate rate K^(-1/3) in the convex case."""
        return cls(lambda k: 2.0 / (k + 2), lambda k: (k + 21.0) ** (-2.0 / 3.0), lambda k: 2.0 / (k + 2), "paper")

    @classmethod
    def constant(cls, iters: int | None, r: float = 2.0) -> Schedule:
        """Constant parameters of the non-convex analysis (Appendix I.4, equal moment orders r):
        gamma = K^(-(2r-1)/(3r-2)), beta = rho = K^(-r/(3r-2)); gap rate K^(-(r-1)/(3r-2)), K^(-1/4) at r = 2."""
        if iters is None:
            raise OptionError("schedule='constant' needs the horizon: pass iters=K")
        if not 1 < r <= 2:
            raise OptionError(f"the moment order r must lie in (1, 2], got {r}")
        gamma = iters ** (-(2 * r - 1) / (3 * r - 2))
        momentum = iters ** (-r / (3 * r - 2))
        return cls(lambda k: gamma, lambda k: momentum, lambda k: momentum, "constant")

    @classmethod
    def exact(cls) -> Schedule:
        """gamma = 2/(k+2), beta = rho = 1: the deterministic Basic method (Corollary 1), O(1/K) convex."""
        return cls(lambda k: 2.0 / (k + 2), lambda k: 1.0, lambda k: 1.0, "exact")

    @classmethod
    def vanilla(cls) -> Schedule:
        """gamma = 2/(k+2) with fresh minibatch estimates (beta = rho = 1): Vanilla SCFW, no tracking."""
        return cls(lambda k: 2.0 / (k + 2), lambda k: 1.0, lambda k: 1.0, "vanilla")

    def at(self, k: int) -> tuple[float, float, float]:
        """(gamma_k, beta_{k+1}, rho_{k+1}), checked to lie in (0, 1]."""
        values = (float(self.gamma(k)), float(self.beta(k + 1)), float(self.rho(k + 1)))
        for name, v in zip(("gamma", "beta", "rho"), values):
            if not (np.isfinite(v) and 0 < v <= 1):
                raise OptionError(f"schedule {self.name!r} gives {name} = {v} at k = {k}; it must lie in (0, 1]")
        return values


def resolve(schedule: Any, *, iters: int | None, exact: bool) -> Schedule:
    """Turn the ``schedule`` option into a :class:`Schedule`."""
    if schedule is None:
        return Schedule.exact() if exact else Schedule.paper()
    if isinstance(schedule, Schedule):
        return schedule
    if schedule == "paper":
        return Schedule.paper()
    if schedule == "constant":
        return Schedule.constant(iters)
    if schedule == "exact":
        return Schedule.exact()
    if callable(schedule):
        # A function k -> (gamma, beta, rho).
        return Schedule(lambda k: schedule(k)[0], lambda k: schedule(k)[1], lambda k: schedule(k)[2])
    raise OptionError(
        f"schedule must be None, 'paper', 'constant', 'exact', a fc.Schedule or a function k -> (gamma, beta, rho); "
        f"got {schedule!r}"
    )
