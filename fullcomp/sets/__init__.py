"""Feasible sets: each a small type with ``lmo``, ``project`` and ``cvxpy_constraints``."""

from fullcomp.sets.balls import L1Ball, L2Ball, NuclearBall
from fullcomp.sets.base import Set
from fullcomp.sets.convex import ConvexSet
from fullcomp.sets.polytopes import Box, Simplex

__all__ = ["Set", "L1Ball", "L2Ball", "NuclearBall", "Box", "Simplex", "ConvexSet"]
