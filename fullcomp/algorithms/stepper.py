"""Any registered method one update at a time, for people who own their loop.

``fc.Stepper(problem, method, **options)`` builds the same plan :func:`fc.solve <fullcomp.solve>` drives, and
``step()`` runs its update once: drawn from the problem's sampler with the run's generator, or on the batch
given.  Fed the sampler's draws, a stepper follows ``fc.solve``'s iterates exactly.  Like
``torch.optim.Optimizer.state_dict``, :meth:`Stepper.state_dict` holds the state, the hyperparameters and
the generator, so that :meth:`Stepper.load_state_dict` can check that it resumes the same run.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from fullcomp.algorithms.method import _plain, planned, validated
from fullcomp.autodiff import LazyJacobian
from fullcomp.errors import CheckpointError, ModelError, OptionError
from fullcomp.model.fingerprint import set_numbers
from fullcomp.run.history import History
from fullcomp.run.options import RunOptions
from fullcomp.run.result import Result
from fullcomp.serial import decode, encode, missing_fields
from fullcomp.validation import check_params

FORMAT = "fullcomp-stepper-1"

#: The shared options of a stepper: a loop of the user's own has no budget, callback or progress bar of ours.
STEPPER_OPTIONS = ("seed", "device", "dtype", "x0", "iters")


class Stepper:
    """One update of ``method`` on ``problem`` per :meth:`step`.

    The method's ``adjustable`` hyperparameters (SMAG's ``eta0`` and ``eta1``, HMSFW's and SCFW's
    ``step_scale``) may change between steps, as ``torch.optim``'s learning rate: :meth:`adjust` sets them, and
    :meth:`load_state_dict` takes them from the saved state (validated as :meth:`adjust` validates them)
    instead of refusing them.  A state saved on another problem (its domain, its shapes, an iterate outside
    the set) is refused.  ``outputs`` are the method's declared outputs at the current
    state (SMAG's ``x_phi``, HMSFW's trackers ``V`` and ``z``, ...).

    Parameters
    ----------
    problem : CompositeProblem or DMaxProblem
        The problem, of the kind the method accepts.
    method : str
        A registered method (``fc.methods()``), built-in or the user's own.
    **options
        The method's hyperparameters, and the shared options ``seed``, ``device``, ``dtype`` and ``x0``.
        ``iters`` is the horizon of the parameters that depend on the budget (a theorem's schedule,
        LiNASA+ICG's tau); the stepper itself never stops.
    in_place : bool
        Whether the loop reads no state once its successor exists (``stepper.state`` before a step is then not
        kept as it was): the trackers may update the state's arrays in place.  fc.optim's loop does this; a
        network's tracked Jacobian is then blended with one pass less.  Default False: a step leaves the state
        it started from as it was, as fc.solve's loop needs.
    """

    def __init__(self, problem: Any, method: str, /, *, in_place: bool = False, **options: Any):
        spec, hp, problem, shared = validated(problem, method, options)
        refused = sorted(set(shared) - set(STEPPER_OPTIONS))
        if refused:
            raise OptionError(
                f"Stepper takes the shared options {', '.join(STEPPER_OPTIONS)}; {', '.join(refused)} belong to "
                "fc.solve's loop (a stepper's loop is yours: save state_dict() to checkpoint it)"
            )
        horizon = shared.get("iters")
        run = RunOptions.resolve(problem, spec.name, {**shared, "iters": horizon or 1})
        run.resume_horizon(horizon)  # None: a schedule that needs the horizon asks for iters=
        if not isinstance(in_place, bool):
            raise OptionError(f"in_place must be True or False, got {in_place!r}")
        run.in_place = in_place
        if run.x0 is not None:
            problem = problem.with_start(run.x0)
        self.spec, self.hyperparameters, self.run, self.problem = spec, hp, run, problem
        self.plan = planned(spec, problem, hp, run)
        self.state = self.plan.state
        self.k = 0
        self.rows: list[dict] = []
        self.seconds = 0.0

    def _given(self, batch: Any, psi_batch: Any) -> Any:
        """What the run's feed gives the update: the batch, or (batch, psi_batch) as a DMax problem draws them."""
        problem = self.problem
        if not hasattr(problem, "psi_sampler"):  # a composite problem: one batch
            if psi_batch is not None:
                raise OptionError("psi_batch is for a DMaxProblem's psi; a composite problem takes one batch")
            return batch
        if psi_batch is None:
            separate = problem.separate_samplers
            psi_batch = problem.psi_sampler(self.run.generator) if separate else batch
        return batch, psi_batch

    def step(self, batch: Any = None, psi_batch: Any = None) -> dict:
        """One update; returns its history row.

        ``batch`` replaces the sampler's draw for this update (every draw the update makes, when it makes
        several: the run's :class:`~fullcomp.run.Feed` gives it); ``None`` draws from the sampler with the
        run's generator.  ``psi_batch`` is psi's batch of a DMax problem (default: ``batch``, or a draw from
        ``psi_sampler`` when the problem has one).
        """
        given = None if batch is None else self._given(batch, psi_batch)
        started = time.perf_counter()
        with self.run.feed.given(given):
            self.state, row = self.plan.step(self.state, self.k)
        row = {"k": self.k, "time": self.seconds, **row}
        self.seconds += time.perf_counter() - started
        self.rows.append(row)
        self.k += 1
        return row

    @property
    def x(self) -> Any:
        """The current iterate, as the problem declared it (a tensor, a dict of tensors, a module)."""
        return self.plan.readout.iterate(self.state)

    @property
    def outputs(self) -> dict[str, Any]:
        """The method's declared outputs at the current state, by name (None where this run has none)."""
        readout = self.plan.readout
        returned = readout.returned(self.state)
        return {name: returned.get(name) for name in readout.outputs}

    @property
    def adjustable(self) -> tuple[str, ...]:
        """The hyperparameters :meth:`adjust` may change between steps."""
        return self.spec.adjustable

    def adjust(self, **values: Any) -> None:
        """Change adjustable hyperparameters for the next steps (``stepper.adjust(eta0=0.01)``), validated as
        at construction; ``stepper.hyperparameters`` holds the values in force."""
        fixed = sorted(set(values) - set(self.spec.adjustable))
        if fixed:
            adjustable = ", ".join(self.spec.adjustable) or "none"
            raise OptionError(
                f"{self.spec.name} cannot change {', '.join(fixed)} between steps (adjustable: {adjustable}); "
                "build a new stepper for other values"
            )
        checked = check_params(self.spec.params, {**self.hyperparameters, **values}, self.spec.name)
        self.hyperparameters.update({name: checked[name] for name in values})

    def copy_to(self, module: torch.nn.Module, which: str = "x") -> None:
        """Write the iterate ``x`` (or a declared output, SMAG's ``x_phi``) into ``module``'s parameters in place,
        for a problem whose x is a module or a dict of parameters."""
        if which != "x" and which not in self.plan.readout.outputs:
            outputs = ", ".join(self.plan.readout.outputs) or "none"
            raise OptionError(f"which must be 'x' or one of {self.spec.name}'s outputs ({outputs}), got {which!r}")
        value = self.x if which == "x" else self.outputs[which]
        if isinstance(value, torch.nn.Module):
            value = dict(value.named_parameters())
        if not isinstance(value, dict):
            raise OptionError("copy_to needs a problem whose x0 is an nn.Module or a dict of parameters")
        with torch.no_grad():
            for key, p in module.named_parameters():
                if key not in value:
                    raise ModelError(f"module has a parameter {key!r} that x0 does not have")
                p.copy_(value[key])

    def result(self) -> Result:
        """A Result of the updates so far, as ``fc.solve`` would return after as many iterations."""
        info = {
            **self.plan.info,
            "iterations": self.k,
            "optimizer_seconds": self.seconds,
            "clock": "wall",
            "stopped": "callback",
        }
        return self.plan.readout.result(self.state, History(self.rows), info)

    def state_dict(self) -> dict:
        """The state, hyperparameters, generator and step count as tensors and plain data (``torch.save`` it)."""
        return {
            "format": FORMAT,
            "method": self.spec.name,
            "hyperparameters": {k: _plain(v) for k, v in sorted(self.hyperparameters.items())},
            "seed": self.run.seed,
            "dtype": str(self.run.dtype),
            "horizon": self.run.resolved_horizon,
            "k": self.k,
            "seconds": self.seconds,
            "state": encode(self.state),
            "generator": self.run.generator.get_state(),
            "components": encode({name: obj.state_dict() for name, obj in self.plan.components.items()}),
            "rows": [dict(r) for r in self.rows],
            "domain": _domain_of(self.problem),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Resume from :meth:`state_dict`; a CheckpointError names what differs from this stepper's run."""
        if not isinstance(state_dict, dict) or state_dict.get("format") != FORMAT:
            raise CheckpointError(f"not a fullcomp stepper state (no {FORMAT!r} format); pass Stepper.state_dict()")

        def fixed(saved: dict) -> dict:  # what must agree: all but the adjustable hyperparameters
            hp = saved.get("hyperparameters")
            return {**saved, "hyperparameters": {k: v for k, v in (hp or {}).items() if k not in self.adjustable}}

        theirs, mine = fixed(state_dict), fixed(self.state_dict())
        # "domain": a state saved on another set would put the iterate outside this one (older states lack it).
        for key in ("method", "hyperparameters", "dtype", "horizon", "domain"):
            if key == "domain" and key not in state_dict:
                continue
            if theirs.get(key) != mine[key]:
                raise CheckpointError(
                    f"the state_dict's {key} is {theirs.get(key)!r} but this stepper's is {mine[key]!r}; "
                    "build the stepper with the same method, options and problem"
                )
        missing = [key for key in ("k", "state", "generator", "components") if key not in state_dict]
        if missing:
            raise CheckpointError(f"the state_dict has no {', '.join(map(repr, missing))}; pass Stepper.state_dict()")
        k = state_dict["k"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise CheckpointError(f"the state_dict's k must be a step count (an int >= 0), got {k!r}")
        # Everything is checked before anything is set, so that a refused state leaves the stepper as it was.
        saved_hp = state_dict.get("hyperparameters") or {}
        adjusted = {name: saved_hp[name] for name in self.adjustable if name in saved_hp}
        try:
            check_params(self.spec.params, {**self.hyperparameters, **adjusted}, self.spec.name)
        except OptionError as exc:
            raise CheckpointError(f"the state_dict's hyperparameters are refused: {exc}") from None
        generator = state_dict["generator"]
        probe = torch.Generator(device=self.run.generator.device)
        try:
            probe.set_state(generator)
        except (RuntimeError, TypeError) as exc:
            raise CheckpointError(
                f"the state_dict's generator is not a generator state of this stepper's device: {exc}"
            ) from None
        state = decode(state_dict["state"])
        lacking = missing_fields(self.plan.state, state)
        if lacking:
            raise CheckpointError(f"the state_dict's state has no {', '.join(lacking)}; pass Stepper.state_dict()")
        _check_shapes(self.plan.state, state)
        self._check_inside(state)
        components = decode(state_dict["components"])
        absent = sorted(set(self.plan.components) - set(components if isinstance(components, dict) else ()))
        if absent:
            raise CheckpointError(
                f"the state_dict's components have no {', '.join(map(repr, absent))}; it was saved by another run"
            )
        self.run.generator.set_state(generator)
        for name, obj in self.plan.components.items():
            obj.load_state_dict(components[name])
        self.state, self.k = state, k
        self.hyperparameters.update(adjusted)
        self.seconds = float(state_dict.get("seconds", 0.0))
        self.rows = [dict(r) for r in state_dict.get("rows", [])]

    def _check_inside(self, state: Any) -> None:
        """A CheckpointError when the state's iterate lies outside the problem's domain (a tampered state)."""
        domain = getattr(self.problem, "domain", None)
        if domain is None:
            return
        x = self.plan.readout.iterate(state)
        params = getattr(self.problem, "params", None)
        if params is not None and not isinstance(x, torch.Tensor):
            x = params.flatten(x, "x")
        if not isinstance(x, torch.Tensor) or x.numel() != domain.size:
            return  # a structured iterate (the entries it reads) is not a dense point of the set
        point = x.detach().double().cpu().numpy().reshape(domain.shape)
        if not domain.contains(point, tol=1e-6):
            raise CheckpointError(
                f"the state_dict's iterate is not in this problem's domain ({type(domain).__name__}); it was "
                "saved on another problem or edited"
            )


def _domain_of(problem: Any) -> str | None:
    """The domain's kind and numbers, what a state must have been saved on."""
    domain = getattr(problem, "domain", None)
    return None if domain is None else f"{set_numbers(domain)} shape {tuple(domain.shape)}"


def _check_shapes(template: Any, state: Any, where: str = "state") -> None:
    """A CheckpointError naming the first tensor of ``state`` whose shape differs from this run's."""
    if isinstance(template, torch.Tensor):
        sized = isinstance(state, (torch.Tensor, LazyJacobian))  # a Jacobian sample kept whole, as its factors
        if not sized or tuple(state.shape) != tuple(template.shape):
            got = tuple(state.shape) if sized else type(state).__name__
            raise CheckpointError(
                f"the state_dict's {where} has shape {got}, this problem's {tuple(template.shape)}; it was saved "
                "on another problem"
            )
        return
    if isinstance(template, dict) and isinstance(state, dict):
        for key in template:
            if key in state:
                _check_shapes(template[key], state[key], f"{where}.{key}")
        return
    if hasattr(template, "__dataclass_fields__") and type(state) is type(template):
        for key in template.__dataclass_fields__:
            _check_shapes(getattr(template, key), getattr(state, key), f"{where}.{key}")
