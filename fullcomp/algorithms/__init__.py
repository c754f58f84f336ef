"""Algorithms: each one function that reads like its pseudocode."""

# The registry lists methods in import order: the HMSFW paper's, then the SMAG paper's, then deterministic
# Frank-Wolfe with away and pairwise steps.
from fullcomp.algorithms.hmsfw import hmsfw, scfw  # isort: skip
from fullcomp.algorithms.psg import psg  # isort: skip
from fullcomp.algorithms.prox_linear import prox_linear  # isort: skip
from fullcomp.algorithms.linasa import linasa_icg  # isort: skip
from fullcomp.algorithms.smag import smag  # isort: skip
from fullcomp.algorithms.dc import dc_sgd, sbcd, sdca, ssdc_adagrad, ssdc_spg  # isort: skip
from fullcomp.algorithms.minimax import epoch_gda, sgda, sopa  # isort: skip
from fullcomp.algorithms.fw import fw  # isort: skip
from fullcomp.algorithms.oce import oce  # isort: skip

__all__ = ["hmsfw", "scfw", "smag", "psg", "prox_linear", "linasa_icg"]
__all__ += ["fw", "oce"]
__all__ += ["dc_sgd", "sdca", "ssdc_spg", "ssdc_adagrad", "sbcd", "sgda", "epoch_gda", "sopa"]
