"""Running: budgets, histories, results, checkpoints and the shared loop."""

from fullcomp.run.budget import Budget, Stopwatch, clock
from fullcomp.run.checkpoint import Checkpoint
from fullcomp.run.driver import Loop, drive
from fullcomp.run.feed import Feed
from fullcomp.run.history import History, write_atomic
from fullcomp.run.options import SHARED, RunOptions
from fullcomp.run.plan import Iterate, Plan, Readout
from fullcomp.run.result import Result

__all__ = [
    "Budget",
    "Stopwatch",
    "clock",
    "Checkpoint",
    "Feed",
    "Iterate",
    "Plan",
    "Readout",
    "Loop",
    "RunOptions",
    "SHARED",
    "drive",
    "History",
    "Result",
    "write_atomic",
]
