"""One error hierarchy for everything fullcomp rejects.

Every class derives from :class:`FullcompError` and from the matching builtin
(``ValueError``, ``RuntimeError``), so ``except ValueError`` in user code still
works.  Messages name the offending argument and say how to fix it.
"""

from __future__ import annotations

from typing import Any


class FullcompError(Exception):
    """Base class of every error raised by fullcomp."""


class ModelError(FullcompError, ValueError):
    """The declared problem is malformed (outer function, inner map, shapes)."""


class DomainError(FullcompError, ValueError):
    """A feasible set is malformed: negative radius, empty or unbounded set, bad shape."""


class OptionError(FullcompError, ValueError):
    """A solver option is invalid: zero or missing budget, unknown variant, bad schedule."""


class OracleError(FullcompError, RuntimeError):
    """The inner map returned something unusable during a run.

    ``result`` holds the run up to the last finite state, so nothing computed
    before the failure is lost.
    """

    def __init__(self, message: str, result: Any = None):
        super().__init__(message)
        self.result = result


class SolverError(FullcompError, RuntimeError):
    """A convex subproblem could not be solved, even after the fallback solver."""


class DataError(FullcompError, ValueError):
    """A data file is missing or malformed; the message names the file and, where it applies, the line."""


class CheckpointError(FullcompError, ValueError):
    """A checkpoint file is corrupt, foreign, or was written by a different run (the message names what differs)."""


class CallbackError(FullcompError, RuntimeError):
    """A user callback raised during a run; ``result`` holds the run up to that point and the cause is chained."""

    def __init__(self, message: str, result: Any = None):
        super().__init__(message)
        self.result = result


class ScriptError(FullcompError, RuntimeError):
    """A problem script given to ``fullcomp run`` failed while it loaded or built its problem; the message
    names the script and holds the script's own traceback."""


class DistributedError(FullcompError, RuntimeError):
    """A collective failed: another rank died, hung past the timeout, or disagreed; the message names this rank
    and the ranks that did not answer."""


class ProjectionWarning(RuntimeWarning):
    """A set's projection computed from its LMO alone (a set without ``project``) stopped at its iteration cap
    short of its accuracy; the message names the set, the Frank-Wolfe gap reached and how to supply an exact
    ``project``."""
