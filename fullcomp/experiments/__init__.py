"""The papers' experiments as reusable protocols."""

from fullcomp.experiments.completion import Completion, completion_problem

__all__ = ["Completion", "completion_problem"]

from fullcomp.experiments.protocol import bench_movielens, plots, tables, tune_movielens  # noqa: E402

__all__ += ["bench_movielens", "tables", "plots", "tune_movielens"]
