"""Where a run's batches come from: the problem's sampler, or the batch a stepper was given for one update."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class Feed:
    """The run's draws: ``problem.sample(generator)`` with the run's generator, except inside :meth:`given`,
    where every draw is the given batch.

    ``fc.solve`` never gives one; ``fc.Stepper.step(batch)`` gives its batch for that update, so that a method
    drawing several times in one update (the Hessian tracker's second batch, LiNASA's value and Jacobian
    batches) sees it at every draw.  Only the run's own draws go through the feed: a draw with a generator of
    its own (a fixed reference batch, a fingerprint's probe) calls the sampler, which no given batch replaces.

    :meth:`draw` takes the problem because the run's options are resolved before the problem a method runs on
    (``x0=`` gives a copy of the user's with that start).
    """

    def __init__(self, generator: torch.Generator):
        self.generator = generator
        self._batch: Any = None

    def draw(self, problem: Any) -> Any:
        """This draw's batch: the one given for the update in progress, else ``problem.sample`` with the run's
        generator."""
        return problem.sample(self.generator) if self._batch is None else self._batch

    @contextlib.contextmanager
    def given(self, batch: Any) -> Iterator[None]:
        """Every draw inside is ``batch`` (None: the sampler's); after it the draws are as before, also when the
        update inside raised."""
        previous, self._batch = self._batch, batch
        try:
            yield
        finally:
            self._batch = previous
