"""The PU-learning protocol of the SMAG paper (Section 5.1, Figures 1 and 2) as reusable functions.

* :data:`METHODS`: SGD, SDCA, SSDC-SPG, SSDC-Adagrad, SBCD (``fullcomp.algorithms.dc``) and SMAG
  (Algorithm 2), each run from w = 0 on the same :func:`~fullcomp_lab.datasets.pu.pu_problem`.
* :func:`bench_pu` runs every (method, seed) and saves ``out/<dataset>/<method>/seed<k>/``;
  :func:`gamma_ablation` runs SMAG for several gamma (Figure 2) into ``out/<dataset>/smag-gamma/``.
* :func:`tables` and :func:`plots` turn the run folders into a table of final training objective,
  PU risk and test accuracy (mean and sample SD over seeds, rank of each method) and training curves
  with SD bands (PNG).
* :func:`tune_pu` selects each method's settings from the grids of Section 5.1 by mean final training
  objective and writes the frozen configuration ``configs/pu.json`` that the benchmark reads.

Protocol: batch 64 positives + 64 unlabeled per iteration, pi_p = 0.5, hinge loss, linear model with
a bias, ridge 0.01 (the hinge PU risk is unbounded below without it), 40 epochs of ceil(n_u / 64)
iterations, every learning rate (inner and outer; eta0 and eta1 for SMAG) divided by 10 at epochs
12 and 24 (30% and 60% of the epochs), the training objective and test accuracy evaluated at the
method's output point after every epoch, outside optimizer time.
"""

from fullcomp_lab.pu.cli import add_arguments, run_from_args
from fullcomp_lab.pu.config import METHODS, PROTOCOL, SCHEMA, Workload, detect_dataset, load_config, load_pu
from fullcomp_lab.pu.runs import bench_pu, gamma_ablation, run_method
from fullcomp_lab.pu.tables import COLUMNS, PURun, plots, summarize, tables
from fullcomp_lab.pu.tuning import DEFAULT_GRIDS, tune_pu

__all__ = [
    "COLUMNS",
    "DEFAULT_GRIDS",
    "METHODS",
    "PROTOCOL",
    "PURun",
    "SCHEMA",
    "Workload",
    "add_arguments",
    "bench_pu",
    "detect_dataset",
    "gamma_ablation",
    "load_config",
    "load_pu",
    "plots",
    "run_from_args",
    "run_method",
    "summarize",
    "tables",
    "tune_pu",
]
