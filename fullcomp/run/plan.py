"""What a method hands the shared loop: a :class:`Plan` (its state and its step) and a :class:`Readout` (how
its states are reported).

The plan's ``step(state, k) -> (next_state, row)`` is the paper's box.  Everything about reporting a state
(the point a callback sees, the final row, the true objective, more columns, the outputs of the result and
the column that measures the gap) is the readout's, declared by the method: the loop asks it and knows no
method's names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fullcomp.errors import CallbackError, OptionError
from fullcomp.run.history import History
from fullcomp.run.result import Result

Step = Callable[[Any, int], "tuple[Any, dict]"]


class RowView(Mapping):
    """A read-only view of the row being recorded: the run's record, which a callback reads but cannot change
    (it returns its own columns instead); a write raises a CallbackError naming the key."""

    def __init__(self, row: dict):
        self._row = row

    def __getitem__(self, key: str) -> Any:
        return self._row[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)

    def __repr__(self) -> str:
        return f"RowView({self._row!r})"

    def _refuse(self, key: Any = None, *args: Any, **kwargs: Any) -> None:
        what = "the row" if key is None or isinstance(key, Mapping) else f"it.row[{key!r}]"
        raise CallbackError(
            f"the callback changed {what}: the row is the run's record and is read-only; return a dict of your "
            "own columns instead (e.g. return {'my_metric': value}), or copy it with dict(it.row)"
        )

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse


@dataclass
class Iterate:
    """What a callback sees: the iteration, the iterate x and the row being recorded.

    ``row`` is a read-only :class:`RowView` of the run's record.  ``state`` is the method's; later steps may
    reuse its buffers (and on the structured path, ``reads=``, the buffer of ``x``), so copy what you keep.
    """

    k: int
    x: Any
    row: Mapping
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


#: What a plan's fields must be: (check, what the field must be).
_PLAN_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "step": (callable, "a callable step(state, k) -> (new_state, row)"),
    "readout": (lambda v: isinstance(v, Readout), "an instance of a fc.Readout subclass (it defines iterate(state))"),
    "components": (
        lambda v: (
            isinstance(v, dict) and all(hasattr(c, "state_dict") and hasattr(c, "load_state_dict") for c in v.values())
        ),
        "a dict of objects with state_dict() and load_state_dict()",
    ),
    "info": (lambda v: isinstance(v, dict), "a dict"),
    "sharded": (lambda v: isinstance(v, bool), "True or False"),
}


@dataclass(init=False)
class Plan:
    """What a method's set-up hands the loop: its update ``step`` from ``state``, and its ``readout``.

    ``components`` have ``state_dict``/``load_state_dict`` and are checkpointed with the state (a GLMO's warm
    start, a sampler's position); ``info`` goes into the result's info.  ``sharded``: each rank's state is
    its own share of the problem (sharded entries), so every rank checkpoints it.  Each field is checked here,
    so that a malformed plan is refused by name at set-up, not deep in the loop.
    """

    step: Step
    state: Any
    readout: Readout
    components: dict[str, Any]
    info: dict
    sharded: bool

    def __init__(
        self,
        step: Step,
        state: Any,
        readout: Readout | None = None,
        components: dict[str, Any] | None = None,
        info: dict | None = None,
        sharded: bool = False,
        **unknown: Any,
    ):
        if unknown:  # e.g. iterate= and finish=, which a readout holds
            raise OptionError(
                f"fc.Plan has no field {', '.join(map(repr, unknown))}; its fields are step, state, readout, "
                "components, info and sharded: how a state is reported (iterate, finish, ...) is the readout's, "
                "an fc.Readout subclass (docs/extending.md)"
            )
        self.step, self.state, self.readout, self.sharded = step, state, readout, sharded
        self.components = {} if components is None else components
        self.info = {} if info is None else info
        for name, (valid, needed) in _PLAN_FIELDS.items():
            value = getattr(self, name)
            if not valid(value):
                raise OptionError(f"fc.Plan({name}={_short(value)}): {name} must be {needed}; see docs/extending.md")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"<a {type(value).__name__}>"


__all__ = ["Iterate", "Plan", "Readout", "RowView", "Step"]
