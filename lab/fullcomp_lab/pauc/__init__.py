"""Partial AUC with an adversarial fairness regularizer (SMAG paper, Section 5.2) as a reusable protocol.

Problem (9), with the sign that makes it strongly concave in the adversary:

    min_{w, s} max_{w_a}  F_pauc(w, s) + alpha F_fair(w, w_a) - lambda0/2 ||w_a||^2

* F_pauc is the CVaR form (8) of the one-way partial AUC with FPR <= rho
  (default 0.3): (1/n_+) sum_i [s_i + (1/(rho n_-)) sum_j (L_ij - s_i)_+], with
  the squared-hinge surrogate L_ij = (c - (h_i - h_j))_+^2, margin c = 1 and
  scores h = sigmoid(logit) (LibAUC's convention, which makes the 0.5
  threshold of the fairness metrics meaningful).
* F_fair is the log-likelihood of an adversary (a linear head ``w_a`` on the
  encoder's representation) predicting the sensitive attribute.  The paper
  writes ``+ lambda0/2 ||w_a||^2``, which would make the max unbounded; the
  ridge enters with a minus sign (spec section 0).
* The model is any encoder (an MLP for tabular data) with a linear
  classification head; x = (encoder, head, s) is one ``nn.Module``
  (:class:`PAUCModel`), y = the adversary head.  The thresholds are stored as
  ``s = sqrt(B_+) u`` so that a gradient step of size eta on u moves each
  sampled s_i by eta (1 - sum_j p_ij/(rho B_-)), SOPA's threshold update: without
  it a threshold, sampled once per epoch with weight 1/B_+, would hardly move
  under SGDA, Epoch-GDA or SMAG.

Methods (:data:`METHODS`): SOPA and SMAG* solve (8) (alpha = 0); SGDA,
Epoch-GDA and SMAG solve (9).  Every run draws B_+ positives and B_- negatives
per iteration, the adversary sees both, and all methods have the same number
of iterations (one stochastic gradient each).  Settings are chosen on the
validation split by :func:`select_settings` (never on test) and frozen in
``configs/pauc.json``; :func:`bench_pauc` runs the seeds and saves
``out/<dataset>/<method>/seed<k>/``; :func:`tables` and :func:`plots` aggregate.
"""

from fullcomp_lab.pauc.cli import add_arguments, run_from_args
from fullcomp_lab.pauc.config import METHODS, PROTOCOL, SCHEMA, Workload, check_settings, load, load_config
from fullcomp_lab.pauc.losses import (
    LibAUCStepper,
    PairModel,
    PairProblem,
    pair_objective,
    pauc_dro_problem,
    tpauc_cvar_problem,
    tpauc_kl_problem,
)
from fullcomp_lab.pauc.problem import PAUCProblem, pauc_problem, primal_objective, scores
from fullcomp_lab.pauc.runs import bench_pauc, evaluate, run_method, select_settings
from fullcomp_lab.pauc.tables import COLUMNS, PAUCRun, plots, summarize, tables

__all__ = [
    "COLUMNS",
    "LibAUCStepper",
    "METHODS",
    "PAUCProblem",
    "PAUCRun",
    "PairModel",
    "PairProblem",
    "PROTOCOL",
    "SCHEMA",
    "Workload",
    "add_arguments",
    "bench_pauc",
    "check_settings",
    "evaluate",
    "load",
    "load_config",
    "pair_objective",
    "pauc_dro_problem",
    "pauc_problem",
    "plots",
    "primal_objective",
    "run_from_args",
    "run_method",
    "scores",
    "select_settings",
    "summarize",
    "tables",
    "tpauc_cvar_problem",
    "tpauc_kl_problem",
]
