"""Declaration layer: placeholders, outer-function helpers, problems."""

from fullcomp.model.composite import CompositeProblem, Outer
from fullcomp.model.dmax import DMaxProblem
from fullcomp.model.outer import chi2_dro, cvar
from fullcomp.model.placeholder import inner_value

__all__ = ["CompositeProblem", "DMaxProblem", "Outer", "inner_value", "cvar", "chi2_dro"]
