"""Algorithms: each one function that reads like its pseudocode."""

from fullcomp.algorithms.hmsfw import hmsfw

__all__ = ["hmsfw"]
