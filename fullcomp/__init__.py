"""fullcomp: stochastic solvers for non-smooth structured objectives.

Declare the outer function F in CVXPY, the inner map f in torch and the domain
X as a fullcomp set; ``fc.hmsfw`` solves min_{x in X} F(f(x), x), and
``fc.solve(problem, method=...)`` runs any registered method (``fc.methods()``,
``fc.describe(name)``).
"""

from fullcomp import datasets, distributed, errors, optim
from fullcomp.algorithms import hmsfw, scfw
from fullcomp.algorithms.dc import dc_sgd, sbcd, sdca, ssdc_adagrad, ssdc_spg
from fullcomp.algorithms.fw import fw
from fullcomp.algorithms.linasa import linasa_icg
from fullcomp.algorithms.method import Method, Plan, Readout, describe, methods, register, solve
from fullcomp.algorithms.minimax import epoch_gda, sgda, sopa
from fullcomp.algorithms.oce import oce
from fullcomp.algorithms.prox_linear import prox_linear
from fullcomp.algorithms.psg import psg
from fullcomp.algorithms.smag import smag
from fullcomp.algorithms.stepper import Stepper
from fullcomp.algorithms.tracked import TrackedReadout
from fullcomp.glmo import GLMOResult, build_glmo
from fullcomp.grouped import Grouped
from fullcomp.loaders import LoaderSampler
from fullcomp.model import (
    CompositeProblem,
    chi2_dro,
    cvar,
    entropic_risk,
    group_dro,
    init_norms,
    inner_value,
    kl_dro,
    layer_domains,
    make_feasible,
    risk,
    risk_weights,
    smooth_max,
    top_k_mean,
    tpauc_cvar,
    tpauc_kl,
    tv_dro,
    wasserstein_dro,
)
from fullcomp.model.constraints import Constraints, ConstraintValue, constraint_report
from fullcomp.model.dmax import DMaxProblem
from fullcomp.oracles.tracked import Tracked, TrackedModel
from fullcomp.persample import PerSample
from fullcomp.run import Checkpoint, History, Result
from fullcomp.run.allocator import tune as tune_allocator
from fullcomp.schedules import Schedule
from fullcomp.sets import (
    Birkhoff,
    Box,
    CappedSimplex,
    ConvexSet,
    Hypersimplex,
    KNormBall,
    KSparsePolytope,
    L1Ball,
    L2Ball,
    LpBall,
    NuclearBall,
    Permutahedron,
    Product,
    Set,
    Simplex,
    Spectraplex,
    UnitSpectrahedron,
)
from fullcomp.stationarity import Stationarity, stationarity
from fullcomp.steps import StepDecay

__version__ = "0.1.0"

__all__ = [
    "errors",
    "datasets",
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
    "scfw",
    "Schedule",
    "Checkpoint",
    "History",
    "Result",
    "GLMOResult",
    "DMaxProblem",
    "smag",
    "Stepper",
    "stationarity",
    "Stationarity",
]
__all__ += [
    "fw",
    "psg",
    "prox_linear",
    "linasa_icg",
    "solve",
    "methods",
    "describe",
    "Method",
    "register",
    "Plan",
    "Readout",
]
__all__ += ["distributed", "tune_allocator", "optim"]
__all__ += ["top_k_mean", "entropic_risk", "kl_dro", "smooth_max", "group_dro", "tpauc_cvar", "tpauc_kl"]
__all__ += ["tv_dro", "wasserstein_dro"]
__all__ += ["risk", "risk_weights", "Tracked", "TrackedModel", "TrackedReadout"]
__all__ += ["dc_sgd", "sdca", "ssdc_spg", "ssdc_adagrad", "sbcd", "StepDecay", "sgda", "epoch_gda", "sopa"]
__all__ += ["CappedSimplex", "Hypersimplex", "KSparsePolytope", "KNormBall", "LpBall", "Spectraplex"]
__all__ += ["UnitSpectrahedron", "Birkhoff", "Permutahedron", "Product"]
__all__ += ["LoaderSampler"]
__all__ += ["layer_domains", "make_feasible", "init_norms"]
__all__ += ["Grouped", "PerSample"]
__all__ += ["Constraints", "ConstraintValue", "constraint_report"]
__all__ += ["oce"]

#: Modules of the papers' protocols, which the fullcomp-lab package of this repository holds (``lab/``).
_LAB_MODULES = {"noise": "fullcomp_lab.noise", "metrics": "fullcomp_lab.metrics", "experiments": "fullcomp_lab"}


def __getattr__(name: str):
    # A protocol module asked of the library gets an error that names where it is, not a bare "no attribute".
    if name in _LAB_MODULES:
        raise AttributeError(
            f"fullcomp.{name} is not part of the library: import {_LAB_MODULES[name]} from the fullcomp-lab package "
            "(pip install -e ./lab from a clone of the repository)"
        )
    raise AttributeError(f"module 'fullcomp' has no attribute {name!r}")
