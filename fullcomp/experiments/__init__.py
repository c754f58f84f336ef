"""The papers' experiments as reusable protocols."""

from fullcomp.experiments.completion import Completion, completion_problem

__all__ = ["Completion", "completion_problem"]
