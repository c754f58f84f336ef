"""Algorithms: each one function that reads like its pseudocode."""

from fullcomp.algorithms.hmsfw import hmsfw
from fullcomp.algorithms.smag import SMAGStepper, smag

__all__ = ["hmsfw", "smag", "SMAGStepper"]
