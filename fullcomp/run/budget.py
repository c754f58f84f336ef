"""Budgets in iterations or optimizer seconds, and the clock that measures the latter."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from fullcomp.errors import OptionError


@dataclass(frozen=True)
class Budget:
    """Stop after ``iters`` iterations or ``seconds`` of optimizer time, whichever comes first."""

    iters: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.iters is None and self.seconds is None:
            raise OptionError("give a budget: iters=N (iterations) or seconds=S (optimizer seconds), or both")
        if self.iters is not None and (
            isinstance(self.iters, bool) or not isinstance(self.iters, (int, np.integer)) or self.iters <= 0
        ):
            raise OptionError(f"iters must be a positive int, got {self.iters!r}")
        if self.seconds is not None and not (np.isfinite(self.seconds) and self.seconds > 0):
            raise OptionError(f"seconds must be a positive number of optimizer seconds, got {self.seconds!r}")

    def iterations_left(self, k: int) -> bool:
        return self.iters is None or k < self.iters

    def over_time(self, elapsed: float) -> bool:
        return self.seconds is not None and elapsed > self.seconds


class Stopwatch:
    """Accumulates optimizer time only: run the update inside ``with watch:``."""

    def __init__(self, elapsed: float = 0.0):
        self.elapsed = elapsed
        self._start: float | None = None

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed += time.perf_counter() - self._start
        self._start = None
