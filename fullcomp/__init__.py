"""fullcomp: stochastic solvers for non-smooth structured objectives.

Declare the outer function F in CVXPY, the inner map f in torch and the domain
X as a fullcomp set; ``fc.hmsfw`` solves min_{x in X} F(f(x), x).
"""

from fullcomp import errors
from fullcomp.algorithms import hmsfw
from fullcomp.glmo import GLMOResult, build_glmo
from fullcomp.model import CompositeProblem, chi2_dro, cvar, inner_value
from fullcomp.run import Checkpoint, History, Result
from fullcomp.schedules import Schedule
from fullcomp.sets import Box, ConvexSet, L1Ball, L2Ball, NuclearBall, Set, Simplex

__version__ = "0.1.0"

__all__ = [
    "errors",
    "inner_value",
    "cvar",
    "chi2_dro",
    "CompositeProblem",
    "Set",
    "Box",
    "Simplex",
    "L1Ball",
    "L2Ball",
    "NuclearBall",
    "ConvexSet",
    "build_glmo",
    "hmsfw",
    "Schedule",
    "Checkpoint",
    "History",
    "Result",
    "GLMOResult",
]
