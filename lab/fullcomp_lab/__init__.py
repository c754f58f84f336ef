"""The papers' experiments as reusable protocols."""

from fullcomp_lab.completion import Completion, completion_problem, sharded_completion_problem

__all__ = ["Completion", "completion_problem", "sharded_completion_problem"]

from fullcomp_lab.movielens import bench_movielens, plots, tables, tune_movielens  # noqa: E402

__all__ += ["bench_movielens", "tables", "plots", "tune_movielens"]

from fullcomp_lab.pauc import bench_pauc, select_settings  # noqa: E402
from fullcomp_lab.pu import bench_pu, gamma_ablation, tune_pu  # noqa: E402

__all__ += ["bench_pu", "tune_pu", "gamma_ablation", "bench_pauc", "select_settings"]
