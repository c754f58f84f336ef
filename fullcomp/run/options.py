"""The options every method shares, resolved and validated once for all of them."""

from __future__ import annotations

import math
import numbers
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from fullcomp import distributed
from fullcomp.errors import OptionError
from fullcomp.run.budget import Budget
from fullcomp.run.checkpoint import Checkpoint
from fullcomp.run.feed import Feed

#: name -> meaning; the one table of shared options (docs/algorithm.md shows it, every method accepts it).
SHARED = {
    "iters": "budget in iterations (a positive int)",
    "seconds": "budget in optimizer seconds, evaluation and logging excluded (a positive number)",
    "seed": "an int from 0 to 2**64 - 1 of any integer type seeding the run's torch.Generator, a torch.Generator "
    "used as it is, or None for a fresh random seed (recorded in result.info['seed']); default 0",
    "device": "torch device of the iterates and oracles, e.g. 'cpu' or 'cuda:0'; default None: where the "
    "problem's data are (the CPU unless its tensors live on a GPU)",
    "dtype": "floating torch dtype of the run; default None: the problem's dtype, inferred from x0 and its data",
    "x0": "start point for this run instead of the problem's (same shape or container as the problem's x0)",
    "callback": "callback(iterate) -> dict | None | False every eval_every iterations and at the end, outside "
    "optimizer time; a dict adds its columns to the history row (a column the run records itself is refused), "
    "False stops the run",
    "eval_every": "iterations between callback calls and evaluations of the true objective (default: every "
    "iteration for the callback; the objective at the first and last rows only)",
    "gap_tol": "stop with status 'converged' once the method's gap or stationarity measure "
    "(result.info['gap_measure']: a Frank-Wolfe gap, a gradient norm, a proximal step's move) is at most this "
    "positive number; default None",
    "progress": "show a tqdm progress bar with the live estimate (default True)",
    "checkpoint": "a path or fc.Checkpoint(path, every=N, on_mismatch='error'|'restart'); an existing one with "
    "the same fingerprint is resumed",
}


@dataclass
class RunOptions:
    """The shared options of one run, validated: budget, generator, device, dtype, start, loop settings, and
    the :class:`Feed` every method draws its batches through (``run.feed.draw(problem)``)."""

    budget: Budget
    seed: int
    generator: torch.Generator
    device: torch.device
    dtype: torch.dtype
    x0: Any
    callback: Callable | None
    eval_every: int | None
    progress: bool
    checkpoint: Checkpoint | None
    world: distributed.World = distributed.World()
    gap_tol: float | None = None
    #: The horizon K that budget-dependent defaults are resolved with (see :attr:`horizon`).
    resolved_horizon: int | None = None
    #: Whether the method read :attr:`horizon`, so that its trajectory depends on it.
    horizon_used: bool = field(default=False, compare=False)
    #: Whether no one reads a state once its successor exists (fc.optim's loop; fc.solve's reads the last one
    #: after each update), so that a tracker may update the state's arrays in place.
    in_place: bool = field(default=False, compare=False)
    #: The run's draws, with :attr:`generator`: the sampler's, or the batch a stepper gives one update.
    feed: Feed = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.resolved_horizon is None:
            self.resolved_horizon = self.budget.iters
        self.feed = Feed(self.generator)

    @property
    def horizon(self) -> int | None:
        """The horizon K of the parameters that depend on the budget (a theorem's schedule, LiNASA's tau).

        The budget's iterations, except in a resumed run: there, the horizon the checkpointed run was
        resolved with, so that a longer budget continues that run instead of starting another one.
        """
        self.horizon_used = True
        return self.resolved_horizon

    def resume_horizon(self, horizon: int | None) -> None:
        """Take back the horizon of the run a checkpoint resumes."""
        self.resolved_horizon = horizon

    @classmethod
    def resolve(cls, problem: Any, method: str, options: dict) -> RunOptions:
        unknown = set(options) - set(SHARED)
        if unknown:
            raise OptionError(f"{method}: unknown shared option(s) {sorted(unknown)}")
        given = options.get("device")
        device = check_device(problem.device if given is None else given, method)
        here = distributed.world()
        seed, generator = check_seed(options.get("seed", 0), device, method, here)
        dtype = options.get("dtype")
        if dtype is None:
            dtype = problem.dtype
        elif not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise OptionError(f"{method}: dtype must be a floating torch dtype such as torch.float64, got {dtype!r}")
        if dtype not in RUN_DTYPES:
            source = "the problem's data are" if options.get("dtype") is None else "dtype is"
            raise OptionError(
                f"{method}: {source} {dtype}; runs are in torch.float32 or torch.float64, since the trackers' "
                "differences of successive values lose every digit in half precision: pass dtype=torch.float32 "
                "(and build the data in float32)"
            )
        if options.get("dtype") is not None:
            problem.check_run_dtype(dtype)
        callback = options.get("callback")
        if callback is not None and not callable(callback):
            raise OptionError(f"{method}: callback must be a callable callback(iterate) -> dict | None | False")
        eval_every = options.get("eval_every")
        if eval_every is not None and (
            isinstance(eval_every, bool) or not isinstance(eval_every, numbers.Integral) or eval_every < 1
        ):
            raise OptionError(f"{method}: eval_every must be a positive int, got {eval_every!r}")
        progress = options.get("progress", True)
        if not isinstance(progress, bool):
            raise OptionError(f"{method}: progress must be True or False, got {progress!r}")
        return cls(
            budget=Budget(options.get("iters"), options.get("seconds")),
            seed=seed,
            generator=generator,
            device=device,
            dtype=dtype,
            x0=options.get("x0"),
            callback=callback,
            eval_every=None if eval_every is None else int(eval_every),
            progress=progress and here.writes,
            checkpoint=Checkpoint.coerce(options.get("checkpoint")),
            world=here,
            gap_tol=check_gap_tol(options.get("gap_tol"), method),
        )


#: The dtypes a run computes in.
RUN_DTYPES = (torch.float32, torch.float64)

#: The largest seed torch.Generator.manual_seed takes (64 bits).
MAX_SEED = 2**64 - 1


def check_gap_tol(value: Any, method: str) -> float | None:
    """None, or a positive finite number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise OptionError(f"{method}: gap_tol must be a positive number or None, got {value!r}")
    return float(value)


def check_device(value: Any, method: str) -> torch.device:
    """A torch device that exists on this machine, or an OptionError that says which ones do."""
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise OptionError(f"{method}: device must be a torch device such as 'cpu' or 'cuda:0', got {value!r}") from None
    if device.type == "meta":
        raise OptionError(
            f"{method}: device {value!r} holds shapes but no values, so nothing can be computed there; "
            "pass device='cpu' or 'cuda'"
        )
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise OptionError(f"{method}: device {value!r}: CUDA is not available on this machine; pass device='cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise OptionError(
                f"{method}: device {value!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        raise OptionError(f"{method}: device {value!r} is not usable here ({exc}); pass device='cpu'") from None
    return device


def check_seed(
    value: Any, device: torch.device, method: str, here: distributed.World | None = None
) -> tuple[int, torch.Generator]:
    """(seed, generator) from an int of any integer type, a torch.Generator or None (a fresh random seed).

    In a distributed job each rank's generator is seeded by ``distributed.rank_seed(seed, rank)``; a seed
    of None is drawn once, on rank 0, and shared.
    """
    here = here or distributed.World()
    if isinstance(value, torch.Generator):
        if here.parallel:
            raise OptionError(f"{method}: in a distributed job pass seed= an int; each rank derives its own generator")
        if value.device.type != device.type:
            raise OptionError(
                f"{method}: seed is a torch.Generator on {value.device}, but the run is on {device}; "
                f"pass torch.Generator(device={str(device)!r})"
            )
        return int(value.initial_seed()), value
    if value is None:
        value = int(distributed.agree(secrets.randbits(52), "max")) if here.parallel else secrets.randbits(62)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= MAX_SEED:
        raise OptionError(
            f"{method}: seed must be an int from 0 to 2**64 - 1 (numpy integers too), a torch.Generator or None, "
            f"got {value!r}"
        )
    return int(value), torch.Generator(device=device).manual_seed(distributed.rank_seed(int(value), here.rank))
