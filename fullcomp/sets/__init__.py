"""Feasible sets: each a small type with ``lmo`` and, where there is one, ``project`` and ``cvxpy_constraints``."""

from fullcomp.sets.balls import L1Ball, L2Ball, NuclearBall
from fullcomp.sets.base import Set
from fullcomp.sets.combinatorial import Birkhoff, CappedSimplex, Hypersimplex, Permutahedron
from fullcomp.sets.convex import ConvexSet
from fullcomp.sets.norms import KNormBall, KSparsePolytope, LpBall
from fullcomp.sets.polytopes import Box, Simplex
from fullcomp.sets.product import Product
from fullcomp.sets.spectral import Spectraplex, UnitSpectrahedron

__all__ = ["Set", "L1Ball", "L2Ball", "NuclearBall", "Box", "Simplex", "ConvexSet"]
__all__ += ["CappedSimplex", "Hypersimplex", "KSparsePolytope", "KNormBall", "LpBall"]
__all__ += ["Spectraplex", "UnitSpectrahedron", "Birkhoff", "Permutahedron", "Product"]
