"""Declaration layer: placeholders, outer-function helpers, problems."""

from fullcomp.model.calculus import risk, risk_weights
from fullcomp.model.composite import CompositeProblem, Outer
from fullcomp.model.dmax import DMaxProblem
from fullcomp.model.layers import init_norms, layer_domains, make_feasible
from fullcomp.model.outer import (
    chi2_dro,
    cvar,
    entropic_risk,
    group_dro,
    kl_dro,
    smooth_max,
    top_k_mean,
    tpauc_cvar,
    tpauc_kl,
    tv_dro,
    wasserstein_dro,
)
from fullcomp.model.placeholder import inner_value

__all__ = ["CompositeProblem", "DMaxProblem", "Outer", "inner_value", "cvar", "chi2_dro"]
__all__ += ["top_k_mean", "entropic_risk", "kl_dro", "smooth_max", "group_dro", "tpauc_cvar", "tpauc_kl"]
__all__ += ["tv_dro", "wasserstein_dro"]
__all__ += ["risk", "risk_weights", "layer_domains", "make_feasible", "init_norms"]
