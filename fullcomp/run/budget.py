"""Budgets in iterations or optimizer seconds, and the clock that measures the latter."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
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
        if self.seconds is not None and (
            isinstance(self.seconds, bool)
            or not isinstance(self.seconds, (int, float, np.integer, np.floating))
            or not (np.isfinite(self.seconds) and self.seconds > 0)
        ):
            raise OptionError(f"seconds must be a positive number of optimizer seconds, got {self.seconds!r}")

    def iterations_left(self, k: int) -> bool:
        return self.iters is None or k < self.iters

    def over_time(self, elapsed: float) -> bool:
        return self.seconds is not None and elapsed > self.seconds


#: clock name -> function of the time module; "wall" is elapsed time, "cpu" this process's CPU time (all threads).
CLOCKS = {"wall": "perf_counter", "cpu": "process_time"}
_default_clock = "wall"


@contextlib.contextmanager
def clock(name: str) -> Iterator[None]:
    """Measure optimizer seconds with clock ``name`` inside the block: ``"wall"`` (the default) or ``"cpu"``.

    CPU time makes a seconds budget independent of other work on a shared machine, as long as the run
    is single-threaded (``torch.set_num_threads(1)``); with several threads it counts each thread's time.
    """
    global _default_clock
    if name not in CLOCKS:
        raise OptionError(f"clock must be one of {tuple(CLOCKS)}, got {name!r}")
    previous, _default_clock = _default_clock, name
    try:
        yield
    finally:
        _default_clock = previous


class Stopwatch:
    """Accumulates optimizer time only: run the update inside ``with watch:``."""

    def __init__(self, elapsed: float = 0.0, clock: str | None = None):
        self.elapsed = elapsed
        self.clock = clock or _default_clock
        self._now = getattr(time, CLOCKS[self.clock])
        self._start: float | None = None

    def __enter__(self) -> Stopwatch:
        self._start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed += self._now() - self._start
        self._start = None
