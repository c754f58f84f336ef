"""fullcomp-lab: the papers' experiments as reusable protocols, on the fullcomp library's public names.

The protocols (:mod:`fullcomp_lab.movielens`, :mod:`fullcomp_lab.pu`, :mod:`fullcomp_lab.pauc`,
:mod:`fullcomp_lab.groupdro`) share one harness (:mod:`fullcomp_lab.harness`) and their tuned settings
(``configs/*.json``); :mod:`fullcomp_lab.datasets` reads the papers' data, :mod:`fullcomp_lab.metrics`
holds the pAUC-fairness metrics and :mod:`fullcomp_lab.noise` the heavy-tailed oracle noise of the theory
checks.  ``fullcomp-lab bench EXPERIMENT`` (or ``python -m fullcomp_lab bench EXPERIMENT``) runs a protocol.
This package lives in ``lab/`` of the fullcomp repository and is not part of the ``fullcomp`` wheel.
"""

from fullcomp_lab.completion import Completion, completion_problem, sharded_completion_problem

__all__ = ["Completion", "completion_problem", "sharded_completion_problem"]

from fullcomp_lab.movielens import bench_movielens, plots, tables, tune_movielens  # noqa: E402

__all__ += ["bench_movielens", "tables", "plots", "tune_movielens"]

from fullcomp_lab.pauc import bench_pauc, select_settings  # noqa: E402
from fullcomp_lab.pu import bench_pu, gamma_ablation, tune_pu  # noqa: E402

__all__ += ["bench_pu", "tune_pu", "gamma_ablation", "bench_pauc", "select_settings"]
