"""The MovieLens protocol of the HMSFW paper (Section 6 and Appendix A) as reusable functions.

Modules: :mod:`.config` (methods, constants, frozen configuration), :mod:`.runs` (one run, the bench),
:mod:`.tables` (tables and figures), :mod:`.tuning` (radius and settings), :mod:`.cli` (the command).

* :data:`METHODS` maps the nine compared methods (HMSFW I/II, their fixed-budget
  versions, Vanilla and Clipped SCFW, PSG, prox-linear, LiNASA+ICG) to their
  :class:`~fullcomp_lab.harness.ProtocolMethod` specs, run as
  ``spec.run(problem, settings, seed=..., seconds=..., callback=...)``.
* :func:`bench_movielens` runs every (method, seed) under one optimizer-time
  budget and saves each run as ``out_dir/<objective>/<method>/seed<k>/``.
* :func:`tables` and :func:`plots` turn those folders into the paper's
  Tables 3-6 (CSV and Markdown) and its loss-versus-time figures (PNG).
* :func:`choose_radius_scale` selects the nuclear radius on validation and
  :func:`tune_movielens` the method settings on the tuning seeds, writing the
  frozen configuration (``configs/movielens.json``) that the benchmark reads.

Protocol (Appendix A.1-A.4): zero start, 1,024 sampled training ratings per
group and update, the saved 80/10/10 split, optimizer time only in the budget
(evaluation runs in the callback, outside it), and scoring of the last update
completed within the budget.
"""

from fullcomp_lab.movielens.cli import add_arguments, run_from_args
from fullcomp_lab.movielens.config import METHODS, PROTOCOL, SCHEMA, check_settings, load_config, load_data
from fullcomp_lab.movielens.runs import bench_movielens, run_method
from fullcomp_lab.movielens.tables import COLUMNS, ProtocolRun, common_curve, plots, summarize, tables
from fullcomp_lab.movielens.tuning import DEFAULT_GRIDS, choose_radius_scale, reference_scales, tune_movielens

__all__ = [
    "COLUMNS",
    "DEFAULT_GRIDS",
    "METHODS",
    "PROTOCOL",
    "ProtocolRun",
    "SCHEMA",
    "add_arguments",
    "bench_movielens",
    "check_settings",
    "choose_radius_scale",
    "common_curve",
    "load_config",
    "load_data",
    "plots",
    "reference_scales",
    "run_from_args",
    "run_method",
    "summarize",
    "tables",
    "tune_movielens",
]
