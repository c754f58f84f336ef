"""Algorithms: each one function that reads like its pseudocode."""

from fullcomp.algorithms.dc import StepDecay, dc_sgd, sbcd, sdca, ssdc_adagrad, ssdc_spg
from fullcomp.algorithms.hmsfw import hmsfw, scfw
from fullcomp.algorithms.linasa import linasa_icg
from fullcomp.algorithms.minimax import epoch_gda, sgda, sopa
from fullcomp.algorithms.prox_linear import prox_linear
from fullcomp.algorithms.psg import psg
from fullcomp.algorithms.smag import SMAGStepper, smag

__all__ = ["hmsfw", "scfw", "smag", "SMAGStepper", "psg", "prox_linear", "linasa_icg"]
__all__ += ["dc_sgd", "sdca", "ssdc_spg", "ssdc_adagrad", "sbcd", "StepDecay", "sgda", "epoch_gda", "sopa"]
