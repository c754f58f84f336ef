"""Group-robust training of a network (issue 41, item 7) as a reusable protocol: ``fullcomp-lab bench group-dro``.

Data (:mod:`.data`), four groups each:

* Colored MNIST from the 5,000-image MNIST subset: label ``digit < 5`` with 25% label noise, a color
  (which of two channels holds the digit) equal to the label with probability 0.9 and 0.8 in two
  training environments and 0.1 at test; groups label x color; 3,000 / 1,000 / 1,000 rows; a CNN of
  2,689 weights.
* UCI Adult: groups race (white / non-white) x sex; an MLP of 3,521 weights.

Methods (:data:`METHODS`), all on the same network, data and batch size, all but the first on
group-balanced batches (the same number of rows from each group):

* ``erm``: Adam on the mean loss of plain (uniform) batches; ``erm-balanced``: the same on balanced
  batches, the control that separates the sampling from the objective.
* ``group-dro-ref``: Sagawa et al. 2020's online Group DRO as kohpangwei/group_DRO runs it
  (:class:`~.problem.ReferenceGroupDRO`): uniform batches of a shuffled epoch, q <- q exp(eta_q l_g),
  normalized, then SGD with momentum 0.9 and weight decay on sum_g q_g l_g; ``group-dro-ref-rw`` the same
  on balanced batches (its ``--reweight_groups``); ``group-dro`` the same q step with Adam on balanced
  batches (:func:`~.problem.group_dro_update`).
* ``hmsfw-max``, ``hmsfw-cvar``: ``fc.optim.HMSFW`` in the protocol's own loop with F = max and F = CVaR
  0.5 of the four group losses, a param group per parameter tensor, each with its l2 ball of radius
  factor x the layer's expected initial norm (``fc.layer_domains``), and a closure returning
  ``fc.Grouped`` of the four groups' sub-batches; ``scfw-max`` and ``psg-max`` (``fc.optim.SCFW``,
  ``fc.optim.PSG``) the same way.

:func:`~.runs.tune` chooses each method's settings on the validation split (small grids,
:data:`DEFAULT_GRIDS`; score: the best validation worst-group accuracy over the epochs, mean over the
tuning seeds; the bench reads the settings committed in ``configs/group-dro.json`` unless told to
``--retune``); :func:`~.runs.bench_group_dro` runs the reported seeds and saves
``out/<dataset>/<method>/seed<k>/``; :func:`~.tables.tables` and :func:`~.tables.plots` report the test
worst-group and average accuracy and worst-group loss at the epoch of best validation worst-group
accuracy and at the last epoch, the optimizer seconds per epoch, worst-group accuracy against time and
the adversary's weights over training.
"""

from fullcomp_lab.groupdro.cli import add_arguments, run_from_args
from fullcomp_lab.groupdro.config import (
    DEFAULT_GRIDS,
    DEFAULT_WORKLOADS,
    METHODS,
    PROTOCOL,
    SCHEMA,
    GroupMethod,
    Workload,
    load_config,
)
from fullcomp_lab.groupdro.data import (
    GroupData,
    GroupSplit,
    adult_groups,
    colored_mnist,
    colored_mnist_from_arrays,
    find_mnist5k,
    load_dataset,
    subsample,
)
from fullcomp_lab.groupdro.problem import (
    ReferenceGroupDRO,
    adult_mlp,
    balanced_sampler,
    batch_group_losses,
    cmnist_cnn,
    group_adjustments,
    group_dro_update,
    group_losses_map,
    group_metrics,
    make_network,
    outer_function,
    shuffled_sampler,
    uniform_sampler,
)
from fullcomp_lab.groupdro.runs import bench_group_dro, run_method, select_epoch, tune
from fullcomp_lab.groupdro.tables import COLUMNS, GroupRun, plots, summarize, tables

__all__ = [
    "COLUMNS",
    "DEFAULT_GRIDS",
    "DEFAULT_WORKLOADS",
    "GroupData",
    "GroupMethod",
    "GroupRun",
    "GroupSplit",
    "METHODS",
    "PROTOCOL",
    "ReferenceGroupDRO",
    "SCHEMA",
    "Workload",
    "add_arguments",
    "adult_groups",
    "adult_mlp",
    "balanced_sampler",
    "batch_group_losses",
    "bench_group_dro",
    "cmnist_cnn",
    "colored_mnist",
    "colored_mnist_from_arrays",
    "find_mnist5k",
    "group_adjustments",
    "group_dro_update",
    "group_losses_map",
    "group_metrics",
    "load_config",
    "load_dataset",
    "make_network",
    "outer_function",
    "plots",
    "run_from_args",
    "run_method",
    "select_epoch",
    "shuffled_sampler",
    "subsample",
    "summarize",
    "tables",
    "tune",
    "uniform_sampler",
]
