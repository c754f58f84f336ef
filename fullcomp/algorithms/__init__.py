"""Algorithms: each one function that reads like its pseudocode."""

from fullcomp.algorithms.hmsfw import hmsfw, scfw
from fullcomp.algorithms.linasa import linasa_icg
from fullcomp.algorithms.prox_linear import prox_linear
from fullcomp.algorithms.psg import psg
from fullcomp.algorithms.smag import SMAGStepper, smag

__all__ = ["hmsfw", "scfw", "smag", "SMAGStepper", "psg", "prox_linear", "linasa_icg"]
