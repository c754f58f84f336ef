"""What a method hands the shared loop: a :class:`Plan` (its state and its step) and a :class:`Readout` (how
its states are reported).

The plan's ``step(state, k) -> (next_state, row)`` is the paper's box.  Everything about reporting a state
(the point a callback sees, the final row, the true objective, more columns, the outputs of the result and
the column that measures the gap) is the readout's, declared by the method: the loop asks it and knows no
method's names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fullcomp.run.history import History
from fullcomp.run.result import Result

Step = Callable[[Any, int], "tuple[Any, dict]"]


@dataclass
class Iterate:
    """What a callback sees: the iteration, the iterate x and the row being recorded.

    ``state`` is the method's; later steps may reuse its buffers (and on the structured path, ``reads=``,
    the buffer of ``x``), so copy what you keep.
    """

    k: int
    x: Any
    row: dict
    state: Any


class Readout:
    """How a method reports its states; a method subclasses it and declares its outputs.

    Every verb is called outside optimizer time.  A subclass overrides :meth:`iterate` (required) and the
    others it needs; :meth:`finish` builds the :class:`~fullcomp.run.result.Result` from the final state.
    One readout serves one run, so it may keep what it computed for a later verb (the composite methods keep
    the weights of the last evaluated row for ``result.weights``).
    """

    #: The outputs the method's Result holds besides x, by name, with what each holds.  The Result has every
    #: one as an attribute (None where this run has none); an output not declared here is refused.
    outputs: Mapping[str, str] = {}
    #: The row's column that measures the gap or stationarity (a Frank-Wolfe gap, a gradient norm, the move
    #: of a proximal step); the shared ``gap_tol`` stops the run with status "converged" once it is below.
    gap: str | None = None
    #: The row's column the progress bar shows.
    progress: str = "objective_estimate"

    def iterate(self, state: Any) -> Any:
        """The point x of a state as the problem declared it: what a callback and ``Stepper.x`` see."""
        raise NotImplementedError(f"{type(self).__name__} must define iterate(state)")

    def observe(self, state: Any, k: int) -> dict:
        """The columns of the final state's row (a step's row describes the state it started from)."""
        return {}

    def objective(self, state: Any) -> float | None:
        """The true objective at a state, or None when the problem cannot compute it."""
        return None

    def evaluate(self, state: Any, k: int) -> dict:
        """More columns of iteration k's state, recorded with the true objective (every ``eval_every``)."""
        return {}

    def returned(self, state: Any) -> dict:
        """The declared outputs at a state, by name (the ones left out are None)."""
        return {}

    def finish(self, state: Any, history: History, info: dict) -> Result:
        """The Result of a run that ended at ``state``; by default x is :meth:`iterate`'s."""
        return Result(self.iterate(state), history, info, **self.returned(state))

    def result(self, state: Any, history: History, info: dict) -> Result:
        """:meth:`finish`'s Result with every declared output present and no other."""
        result = self.finish(state, history, info)
        stray = sorted(set(result.outputs) - set(self.outputs))
        if stray:
            raise TypeError(
                f"{type(self).__name__} returned the output {', '.join(map(repr, stray))}, which it does not "
                f"declare (its outputs: {', '.join(self.outputs) or 'none'}); declare it in the readout's "
                "outputs, or put the point in points={name: value}"
            )
        result.outputs = {name: result.outputs.get(name) for name in self.outputs}
        return result


@dataclass
class Plan:
    """What a method's set-up hands the loop: its update ``step`` from ``state``, and its ``readout``.

    ``components`` have ``state_dict``/``load_state_dict`` and are checkpointed with the state (a GLMO's warm
    start, a sampler's position); ``info`` goes into the result's info.  ``sharded``: each rank's state is
    its own share of the problem (sharded entries), so every rank checkpoints it.
    """

    step: Step
    state: Any
    readout: Readout
    components: dict[str, Any] = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    sharded: bool = False


__all__ = ["Iterate", "Plan", "Readout", "Step"]
