"""LibAUC's pairwise partial-AUC losses as DMax problems, and LibAUC's own updates for them.

Each loss is built from the pair losses L_ij = ell(margin, h_i - h_j) of positives i and
negatives j, with scores h = sigmoid(logit) (LibAUC's usage) and a LibAUC surrogate ell
(default the squared hinge (margin - t)_+^2).  With g_i = (1/n_-) sum_j exp(L_ij / lam):

=====================  =====================================  ==========================================
builder                LibAUC (loss + optimizer)              objective F(w)
=====================  =====================================  ==========================================
``pauc_problem``       ``pAUC_CVaR_Loss`` + ``SOPA``          one-way CVaR (problem.py; ``fc.sopa``)
``pauc_dro_problem``   ``pAUC_DRO_Loss`` + ``SOPAs``          (1/n_+) sum_i lam log g_i
``tpauc_kl_problem``   ``tpAUC_KL_Loss`` + ``SOTAs``          tau log (1/n_+) sum_i g_i^(lam/tau)
``tpauc_cvar_problem`` ``tpAUC_CVaR_loss`` + ``STACO``        CVaR_theta0 over i of CVaR_theta1 over j of L_ij
=====================  =====================================  ==========================================

A log or a power of a mean is not an expectation, so a mini-batch estimate of it is biased.  The
DMax forms make every term linear in the batch means, so that phi(x, y; batch) is unbiased and any
DMax method (``fc.smag``, ``fc.sgda``, ``fc.epoch_gda``, ``fc.sopa`` as plain SGD) runs them:

* one-way KL: lam log g = min_v lam (v + e^{-v} g - 1), so
  F = min_{w, v} (1/n_+) sum_i lam (v_i + mean_j exp(L_ij/lam - v_i) - 1) (v_i = log g_i at the min);
* two-way KL, r = lam/tau: the outer log the same way with v0, and g^r the minimum (r < 1: concave) or the
  maximum (r > 1: convex) of its tangents (1 - r) u^r + r u^(r-1) g over u = e^{v_i}, so
  F = min_{w, v0} [min or max]_v tau (v0 - 1 + (1/n_+) sum_i ((1 - r) e^{r v_i - v0}
  + r mean_j exp((r - 1) v_i + L_ij/lam - v0))).  For r <= 1 all is a minimum over x; for r > 1
  the v_i are y, the maximum of phi: unimodal in each v_i, with maximum at log g_i, strongly concave near it;
  at r = 1 (LibAUC's default lam = tau = 1) there are no v_i;
* two-way CVaR, as LibAUC writes it: [t]_+ = max_{y in [0, 1]} t y gives
  F = min_{w, s, s'} max_{y in [0,1]^{n_+}} s' + (1/n_+) sum_i y_i (g_i(w, s_i) - s')/theta0 with
  g_i = s_i + (1/n_-) sum_j (L_ij - s_i)_+ / theta1 (linear in y, so not strongly concave).

x is a :class:`PairModel`: the scorer and the auxiliary entries.  As in ``pauc_problem``, an entry
sampled once per batch with weight 1/B_+ is stored divided by sqrt(B_+) (v_i = sqrt(B_+) x.v[i];
likewise s_i, and y_i = sqrt(B_+) y[i], so Y is the box [0, 1/sqrt(B_+)]), so that a gradient step of
size eta moves it by eta times its own bracket: LibAUC's steps on them.

:class:`LibAUCStepper` performs LibAUC's updates for the last three, which are not gradient steps on
x: SOPA-s and SOTA-s keep moving averages of g_i (and of the outer mean) and step w at those, STACO
steps y first and then x at the new y.  Its step on w is ``fc.sopa``'s (Adam, momentum, clipping,
weight and epoch decay).  Fed the same batches it follows LibAUC step for step (see
lab/tests/test_libauc_parity.py), up to the differences its docstring lists.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from fullcomp import Box, DMaxProblem
from fullcomp.algorithms.minimax import WEIGHT_OPTIONS, WeightStep
from fullcomp.errors import DataError, OptionError, OracleError
from fullcomp.oracles import DMaxOracle
from fullcomp.run import RunOptions
from fullcomp.validation import REQUIRED, Interval, Pair, Param, check_params, positive
from fullcomp_lab.pauc.problem import mlp_encoder

# ------------------------------------------------------------------------------------------ surrogates


def _squared_hinge(margin: float, t: torch.Tensor) -> torch.Tensor:
    return torch.relu(margin - t) ** 2


def _hinge(margin: float, t: torch.Tensor) -> torch.Tensor:
    return torch.relu(margin - t)


def _squared(margin: float, t: torch.Tensor) -> torch.Tensor:
    return (margin - t) ** 2


def _logistic(scale: float, t: torch.Tensor) -> torch.Tensor:
    return nn.functional.softplus(-scale * t)  # LibAUC's log(1 + exp(-scale t)), without its overflow


#: LibAUC's surrogate losses ell(margin, t) of the score difference t = h_i - h_j (``get_surrogate_loss``).
SURROGATES: dict[str, Callable[[float, torch.Tensor], torch.Tensor]] = {
    "squared_hinge": _squared_hinge,
    "hinge": _hinge,
    "squared": _squared,
    "logistic": _logistic,
}

#: The losses these builders declare, and the LibAUC update :class:`LibAUCStepper` runs on each.
LOSSES = {"kl": "SOPA-s", "two-way-kl": "SOTA-s", "two-way-cvar": "STACO"}


# ------------------------------------------------------------------------------------------------ model


class PairModel(nn.Module):
    """x of a pairwise pAUC problem: a scorer (inputs -> one logit per row) and the loss's auxiliary entries.

    ``forward(inputs)`` returns the scores h: sigmoid(logit), or the logit itself when built with
    ``sigmoid=False``.  The auxiliary entries are parameters named by the loss (``v``, ``v0``, ``s``,
    ``s2``), all zero at the start.
    """

    def __init__(self, scorer: nn.Module, aux: dict[str, int], sigmoid: bool = True):
        super().__init__()
        self.scorer, self.sigmoid = scorer, sigmoid
        for name, size in aux.items():
            self.register_parameter(name, nn.Parameter(torch.zeros(size)))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        logit = self.scorer(inputs).reshape(-1)
        return torch.sigmoid(logit) if self.sigmoid else logit


@dataclass
class PairProblem:
    """A declared pairwise pAUC loss: the DMax problem, its start model, data and options.

    ``pair_losses(x, batch)`` is (L, i): the (B_+, B_-) pair losses of a batch at x (a module or the
    Bound phi receives) and the positives' indices i (0..n_+ - 1).
    """

    problem: DMaxProblem
    model: PairModel
    loss: str
    options: dict
    batch_pos: int
    batch_neg: int
    scale: float
    X: torch.Tensor
    y: np.ndarray
    pair_losses: Callable[[Any, tuple], tuple[torch.Tensor, torch.Tensor]] = field(repr=False)

    @property
    def aux(self) -> tuple[str, ...]:
        """The names of the auxiliary entries of x (the rest is the scorer)."""
        return tuple(n for n, _ in self.model.named_parameters() if not n.startswith("scorer."))


@dataclass
class _Parts:
    """What every builder shares: the start model, the sampler, the pair losses, the data and the options."""

    model: PairModel
    sampler: Callable
    pair_losses: Callable[[Any, tuple], tuple[torch.Tensor, torch.Tensor]]
    X: torch.Tensor
    y: np.ndarray
    info: dict
    batch_pos: int
    batch_neg: int

    @property
    def scale(self) -> float:
        """sqrt(B_+), by which the entries sampled once per batch are stored divided."""
        return math.sqrt(self.batch_pos)

    @property
    def n_pos(self) -> int:
        """The number of positives n_+."""
        return int((self.y == 1).sum())

    def declare(self, problem: DMaxProblem, loss: str) -> PairProblem:
        """The declared ``loss``: ``problem`` with these parts."""
        return PairProblem(
            problem, self.model, loss, self.info, self.batch_pos, self.batch_neg, self.scale, self.X, self.y,
            self.pair_losses,
        )  # fmt: skip


def _declare(
    X: Any,
    y: Any,
    *,
    scorer: nn.Module | None,
    hidden: Sequence[int],
    sigmoid: bool,
    surrogate: str,
    margin: float,
    batch_pos: int,
    batch_neg: int,
    replace: bool,
    init_seed: int,
    aux: Callable[[int], dict[str, int]],
    options: dict,
) -> _Parts:
    """The :class:`_Parts` of a builder: data, model, sampler and the pair losses."""
    X = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X).float()
    y = np.asarray(y).astype(np.int64).reshape(-1)
    if len(X) != y.size:
        raise DataError(f"X and y must have the same number of rows, got {len(X)} and {y.size}")
    if set(np.unique(y).tolist()) != {0, 1}:
        raise DataError("y must hold both labels 0 and 1: the partial AUC needs positives and negatives")
    if surrogate not in SURROGATES:
        raise OptionError(f"surrogate must be one of {', '.join(SURROGATES)}, got {surrogate!r}")
    for name, value in (("batch_pos", batch_pos), ("batch_neg", batch_neg)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionError(f"{name} must be a positive int, got {value!r}")
    if not (isinstance(margin, (int, float)) and math.isfinite(margin)):
        raise OptionError(f"margin must be a finite number, got {margin!r}")
    pos = torch.as_tensor(np.nonzero(y == 1)[0])
    neg = torch.as_tensor(np.nonzero(y == 0)[0])
    n_pos, n_neg = int(pos.numel()), int(neg.numel())
    if not replace and (batch_pos > n_pos or batch_neg > n_neg):
        raise OptionError(
            f"replace=False draws distinct rows: batch_pos={batch_pos} and batch_neg={batch_neg} must not exceed "
            f"the {n_pos} positives and {n_neg} negatives"
        )
    with torch.random.fork_rng():  # the same initial weights for every method, global RNG untouched
        torch.manual_seed(init_seed)
        if scorer is None:
            dim = int(np.prod(X.shape[1:]))
            scorer = nn.Sequential(mlp_encoder(dim, hidden), nn.Linear(hidden[-1] if hidden else dim, 1))
        model = PairModel(scorer, aux(n_pos), sigmoid)
    ell = SURROGATES[surrogate]

    def draw(n: int, size: int, generator: torch.Generator) -> torch.Tensor:
        if replace:
            return torch.randint(n, (size,), generator=generator)
        return torch.randperm(n, generator=generator)[:size]

    def sampler(generator: torch.Generator) -> tuple:
        i = draw(n_pos, batch_pos, generator)
        j = neg[draw(n_neg, batch_neg, generator)]
        return X[torch.cat([pos[i], j])], i

    def pair_losses(x: Any, batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, i = batch
        h = x(inputs)
        return ell(margin, h[:batch_pos, None] - h[None, batch_pos:]), i

    info = {**options, "surrogate": surrogate, "margin": margin, "sigmoid": sigmoid, "replace": replace}
    return _Parts(model, sampler, pair_losses, X, y, info, batch_pos, batch_neg)


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise OptionError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise OptionError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


# ---------------------------------------------------------------------------------------------- builders

_SHARED_DOC = """
    ``X`` (n, ...) holds the training rows, ``y`` their 0/1 labels.  ``scorer`` is any torch module
    mapping a batch of rows to one logit per row (default an MLP with ``hidden`` widths, default
    (64, 32), and a linear head; ``hidden=()`` is a linear model); scores are sigmoid(logit) unless
    ``sigmoid=False``.  ``surrogate`` is one of :data:`SURROGATES` with its ``margin``.  Each
    iteration draws ``batch_pos`` positives and ``batch_neg`` negatives (default 64 each), with
    replacement, or distinct ones with ``replace=False`` (as LibAUC's samplers within an epoch).
    ``init_seed`` (default 0) seeds the initial weights.
"""


def pauc_dro_problem(
    X: Any,
    y: Any,
    *,
    Lambda: float = 1.0,
    scorer: nn.Module | None = None,
    hidden: Sequence[int] = (64, 32),
    sigmoid: bool = True,
    surrogate: str = "squared_hinge",
    margin: float = 1.0,
    batch_pos: int = 64,
    batch_neg: int = 64,
    replace: bool = True,
    init_seed: int = 0,
) -> PairProblem:
    """One-way partial AUC by KL-DRO (LibAUC's ``pAUC_DRO_Loss``): (1/n_+) sum_i Lambda log g_i.

    g_i = (1/n_-) sum_j exp(L_ij / Lambda).  Declared as min over x = (scorer, v) of
    phi = (1/B_+) sum_i Lambda (v_i + mean_j exp(L_ij/Lambda - v_i) - 1), with v_i = sqrt(B_+) x.v[i]
    (minimized at v_i = log g_i, where phi is the objective).  ``Lambda`` (default 1) is the KL weight:
    small values weigh the hardest negatives most (the loss tends to the max, one-way pAUC at small FPR).
    """
    lam = _positive("Lambda", Lambda)
    parts = _declare(
        X, y, scorer=scorer, hidden=hidden, sigmoid=sigmoid, surrogate=surrogate, margin=margin,
        batch_pos=batch_pos, batch_neg=batch_neg, replace=replace, init_seed=init_seed,
        aux=lambda n: {"v": n}, options={"Lambda": lam},
    )  # fmt: skip
    pair_losses, scale = parts.pair_losses, parts.scale

    def phi(x: Any, batch: tuple) -> torch.Tensor:
        L, i = pair_losses(x, batch)
        v = scale * x.params["v"][i]
        return lam * (v + torch.exp(L / lam - v[:, None]).mean(dim=1) - 1).mean()

    return parts.declare(DMaxProblem(phi, x0=parts.model, sampler=parts.sampler), "kl")


pauc_dro_problem.__doc__ += _SHARED_DOC


def tpauc_kl_problem(
    X: Any,
    y: Any,
    *,
    Lambda: float = 1.0,
    tau: float = 1.0,
    scorer: nn.Module | None = None,
    hidden: Sequence[int] = (64, 32),
    sigmoid: bool = True,
    surrogate: str = "squared_hinge",
    margin: float = 1.0,
    batch_pos: int = 64,
    batch_neg: int = 64,
    replace: bool = True,
    init_seed: int = 0,
) -> PairProblem:
    """Two-way partial AUC by KL-DRO on both sides (LibAUC's ``tpAUC_KL_Loss``): tau log (1/n_+) sum_i g_i^r.

    g_i = (1/n_-) sum_j exp(L_ij / Lambda) and r = Lambda / tau: ``Lambda`` weighs the KL term over the
    negatives, ``tau`` the one over the positives (LibAUC's names; both default 1).  Declared with
    v0 = x.v0 (minimized at log (1/n_+) sum_i g_i^r) and, unless r = 1, v_i = sqrt(B_+) v[i] (at log g_i):
    phi = tau (v0 - 1 + (1/B_+) sum_i ((1 - r) e^{r v_i - v0} + r mean_j exp((r - 1) v_i + L_ij/Lambda - v0))),
    where v = x.v (a minimum) for r < 1 and v = y (a maximum; ``phi(x, y, batch)``) for r > 1.
    """
    lam, tau = _positive("Lambda", Lambda), _positive("tau", tau)
    r = lam / tau
    parts = _declare(
        X, y, scorer=scorer, hidden=hidden, sigmoid=sigmoid, surrogate=surrogate, margin=margin,
        batch_pos=batch_pos, batch_neg=batch_neg, replace=replace, init_seed=init_seed,
        aux=lambda n: {"v0": 1, **({"v": n} if r < 1 else {})}, options={"Lambda": lam, "tau": tau},
    )  # fmt: skip
    pair_losses, scale = parts.pair_losses, parts.scale

    def value(x: Any, v_all: torch.Tensor | None, batch: tuple) -> torch.Tensor:
        L, i = pair_losses(x, batch)
        v0 = x.params["v0"][0]
        e = L / lam - v0
        if v_all is None:
            inner = torch.exp(e).mean(dim=1)
        else:
            v = scale * v_all[i]
            inner = (1 - r) * torch.exp(r * v - v0) + r * torch.exp((r - 1) * v[:, None] + e).mean(dim=1)
        return tau * (v0 - 1 + inner.mean())

    if r > 1:

        def phi(x: Any, v: torch.Tensor, batch: tuple) -> torch.Tensor:
            return value(x, v, batch)

        problem = DMaxProblem(phi, x0=parts.model, y0=torch.zeros(parts.n_pos), sampler=parts.sampler)
    else:

        def phi(x: Any, batch: tuple) -> torch.Tensor:  # type: ignore[misc]
            return value(x, x.params["v"] if r < 1 else None, batch)

        problem = DMaxProblem(phi, x0=parts.model, sampler=parts.sampler)
    return parts.declare(problem, "two-way-kl")


tpauc_kl_problem.__doc__ += _SHARED_DOC


def tpauc_cvar_problem(
    X: Any,
    y: Any,
    *,
    theta0: float = 0.5,
    theta1: float = 0.5,
    scorer: nn.Module | None = None,
    hidden: Sequence[int] = (64, 32),
    sigmoid: bool = True,
    surrogate: str = "squared_hinge",
    margin: float = 0.5,
    batch_pos: int = 64,
    batch_neg: int = 64,
    replace: bool = True,
    init_seed: int = 0,
) -> PairProblem:
    """Two-way partial AUC by CVaR on both sides (LibAUC's ``tpAUC_CVaR_loss``, Zhou et al. 2025).

    F(w) = CVaR_theta0 over the positives of CVaR_theta1 over the negatives of L_ij: the mean over
    the theta0 fraction of positives with the largest inner values of the mean of their theta1 fraction
    of largest pair losses (``theta0`` ~ 1 - min TPR, ``theta1`` ~ max FPR; both default 0.5, the margin
    0.5, as LibAUC's).  Declared as LibAUC writes it,
    min over x = (scorer, s, s2) max over y in Y of phi = s' + (1/B_+) sum_i y_i (g_i - s')/theta0,
    g_i = s_i + mean_j (L_ij - s_i)_+ / theta1, with s_i = sqrt(B_+) x.s[i], s' = x.s2 and
    y_i = sqrt(B_+) y[i], Y = [0, 1/sqrt(B_+)]^{n_+}, y0 at its top (y_i = 1, LibAUC's start).
    phi is linear in y: methods whose analysis needs strong concavity in y get none here.
    """
    th0, th1 = _rate("theta0", theta0), _rate("theta1", theta1)
    parts = _declare(
        X, y, scorer=scorer, hidden=hidden, sigmoid=sigmoid, surrogate=surrogate, margin=margin,
        batch_pos=batch_pos, batch_neg=batch_neg, replace=replace, init_seed=init_seed,
        aux=lambda n: {"s": n, "s2": 1}, options={"theta0": th0, "theta1": th1},
    )  # fmt: skip
    pair_losses, scale, n_pos = parts.pair_losses, parts.scale, parts.n_pos

    def phi(x: Any, y_hat: torch.Tensor, batch: tuple) -> torch.Tensor:
        L, i = pair_losses(x, batch)
        s, s2 = scale * x.params["s"][i], x.params["s2"][0]
        g = s + torch.relu(L - s[:, None]).mean(dim=1) / th1  # relu: p_ij = 1[L_ij > s_i], strictly
        return s2 + (scale * y_hat[i] * (g - s2)).mean() / th0

    Y = Box(0.0, 1 / scale, shape=(n_pos,))
    problem = DMaxProblem(phi, x0=parts.model, y0=torch.full((n_pos,), 1 / scale), Y=Y, sampler=parts.sampler)
    return parts.declare(problem, "two-way-cvar")


tpauc_cvar_problem.__doc__ += _SHARED_DOC


# ------------------------------------------------------------------------------------------- objectives


def cvar(values: torch.Tensor, theta: float, dim: int = -1) -> torch.Tensor:
    """min_s s + mean (values - s)_+ / theta along ``dim``: the mean of the top theta fraction (the boundary
    value counted fractionally)."""
    top, _ = torch.sort(values, dim=dim, descending=True)
    n = top.shape[dim]
    m = theta * n
    full = min(int(math.floor(m + 1e-9)), n)
    total = top.narrow(dim, 0, full).sum(dim=dim)
    if full < n and m - full > 1e-9:
        total = total + (m - full) * top.select(dim, full)
    return total / m


def pair_objective(declared: PairProblem, model: nn.Module | None = None) -> float:
    """The loss F(w) of ``model`` (default the declared start) on the whole training set, all pairs formed.

    The value each DMax form's phi reaches at its optimal auxiliary entries (and y), in float64:
    keep the data small.
    """
    model = declared.model if model is None else model
    y = declared.y
    pos, neg = np.nonzero(y == 1)[0], np.nonzero(y == 0)[0]
    with torch.no_grad():
        h = copy.deepcopy(model).double()(declared.X.double())
    ell, o = SURROGATES[declared.options["surrogate"]], declared.options
    L = ell(o["margin"], h[pos, None] - h[None, neg])
    if declared.loss == "two-way-cvar":
        return float(cvar(cvar(L, o["theta1"], dim=1), o["theta0"], dim=0))
    lam = o["Lambda"]
    log_g = torch.logsumexp(L / lam, dim=1) - math.log(neg.size)
    if declared.loss == "kl":
        return float(lam * log_g.mean())
    tau = o["tau"]
    return float(tau * (torch.logsumexp(lam / tau * log_g, dim=0) - math.log(pos.size)))


# ------------------------------------------------------------------------------------------- LibAUC steps

ETA = Param("eta", (positive(),), REQUIRED, "the step size of the model weights, LibAUC's lr")
STEPPER_PARAMS: dict[str, tuple[Param, ...]] = {
    "kl": (
        ETA,
        Param("gamma", (Interval(float, 0, 1, "right"),), 0.9, "weight of the new estimate in the moving average"),
        *WEIGHT_OPTIONS,
    ),
    "two-way-kl": (
        ETA,
        Param("gammas", (Pair(Interval(float, 0, 1, "right")),), (0.9, 0.9), "the moving averages' weights"),
        *WEIGHT_OPTIONS,
    ),
    "two-way-cvar": (
        ETA,
        Param("alpha", (positive(),), 0.1, "the step size of y, LibAUC's alpha"),
        Param("beta_0", (positive(),), 0.1, "the step size of the inner thresholds s, LibAUC's beta_0"),
        Param("beta_1", (positive(),), 0.1, "the step size of the outer threshold s', LibAUC's beta_1"),
        *WEIGHT_OPTIONS,
    ),
}


class LibAUCStepper:
    """LibAUC's update for a :class:`PairProblem`, one batch at a time: SOPA-s, SOTA-s or STACO.

    ``LibAUCStepper(declared, eta=..., **options)``; ``step(batch=None)`` draws from the problem's
    sampler (seeded by ``seed``) when no batch is given and returns a row (``k``, ``phi_value``,
    ``grad_norm``).  ``x``, ``y`` are the iterates in the declared containers (``x`` a trained copy of
    the :class:`PairModel`), ``u`` the moving averages of g_i; ``eta`` may be changed between steps.
    The options are those of :data:`STEPPER_PARAMS` for the loss; the step on w has ``fc.sopa``'s
    (``mode``, ``betas``, ``momentum``, ``dampening``, ``nesterov``, ``clip_value``,
    ``weight_decay``, ``epoch_decay``, ``epoch_iters``), default the plain SGD step.

    * ``"kl"`` (SOPA-s, ``pAUC_DRO_Loss`` + ``SOPAs``): u_i <- (1 - gamma) u_i + gamma ghat_i for the
      batch's positives (u starts at 0, as LibAUC's), then the step on w along d_w phi at v_i = log u_i,
      which is LibAUC's (1/(B_+ B_-)) sum p_ij grad L_ij with p_ij = exp(L_ij/Lambda)/u_i.
    * ``"two-way-kl"`` (SOTA-s, ``tpAUC_KL_Loss`` + ``SOTAs``): the same u_i with gammas[0], then
      W <- (1 - gammas[1]) W + gammas[1] mean_i u_i^r (W starts at 0), the step on w along d_w phi at
      v0 = log W, v_i = log u_i: LibAUC's p_ij = u_i^(r-1) exp(L_ij/Lambda)/W.
    * ``"two-way-cvar"`` (STACO, ``tpAUC_CVaR_loss`` + ``STACO``): y <- P_Y(y + alpha d_y phi), then at
      the new y the step on w along d_w phi, s <- s - beta_0 d_s phi, s' <- s' - beta_1 d_s' phi (the
      scaling of s and y makes these LibAUC's steps).

    Where it differs from LibAUC: the anchor of ``epoch_decay`` starts at x0 (LibAUC draws it at
    random); STACO's steps on y and s add up over a positive drawn twice in one batch, where LibAUC's
    indexed assignment moves it once (the moving averages of SOPA-s and SOTA-s are assigned as LibAUC
    does, so they match with repeats too); and the auxiliary entries of ``x`` hold log u only for the
    positives drawn so far (the others keep their start).
    """

    def __init__(
        self,
        declared: PairProblem,
        *,
        seed: Any = 0,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        **options: Any,
    ):
        if not isinstance(declared, PairProblem):
            raise OptionError(
                f"LibAUCStepper needs a PairProblem (pauc_dro_problem, tpauc_kl_problem, tpauc_cvar_problem), got "
                f"{type(declared).__name__}; the one-way CVaR problem runs with fc.sopa"
            )
        name = f"LibAUCStepper ({LOSSES[declared.loss]})"
        self.declared, self.loss, self.name = declared, declared.loss, name
        hp = check_params(STEPPER_PARAMS[declared.loss], options, name)
        problem = declared.problem
        run = RunOptions.resolve(problem, name, {"seed": seed, "device": device, "dtype": dtype, "iters": 1})
        self.oracle, self.generator = DMaxOracle(problem, run, name), run.generator
        start = self.oracle.start()
        self._x, self._y = start["x"], start["y"]
        # Boolean masks over the flat x: each auxiliary entry's, and the scorer's weights (all the rest).
        names, sizes = problem.x.names, problem.x.numels
        self._aux = {
            a: torch.cat([torch.full((k,), n == a) for n, k in zip(names, sizes)]).to(run.device) for a in declared.aux
        }
        weights = ~torch.stack(list(self._aux.values())).any(dim=0)
        self.weights = WeightStep(hp, weights, name)
        self.opt = self.weights.start(self._x)
        self.hp, self.eta = hp, hp["eta"]
        n_pos = int((declared.y == 1).sum())
        self.u = torch.zeros(n_pos, dtype=run.dtype, device=run.device)
        self.W = torch.zeros((), dtype=run.dtype, device=run.device)
        self.k = 0

    # -- the update ------------------------------------------------------------------------------------

    def _gradients(self, batch: Any, y: torch.Tensor | None, hold_y: bool) -> tuple:
        held = ("phi_y",) if hold_y and y is not None else ()
        s = self.oracle.gradients(self.k, batch, phi_at=(self._x, y), held=held)
        phi, norm, _ = self.oracle.check(
            self.k,
            {
                "phi": s.phi,
                "the x-gradient of phi": torch.linalg.vector_norm(s.phi_x),
                "the y-gradient of phi": None if s.phi_y is None else torch.linalg.vector_norm(s.phi_y),
            },
            "Lower the step sizes or check phi for overflow",
        )
        return s.phi_x, s.phi_y, {"phi_value": phi, "grad_norm": norm}

    def _averages(self, batch: Any, gamma: float) -> torch.Tensor:
        """u_i <- (1 - gamma) u_i + gamma ghat_i for the batch's positives, by LibAUC's indexed assignment."""
        d = self.declared
        with torch.no_grad():
            L, i = d.pair_losses(d.problem.x.view(self._x), batch)
            g_hat = torch.exp(L / d.options["Lambda"]).mean(dim=1)
            u = self.u.clone()
            u[i] = (1 - gamma) * u[i] + gamma * g_hat
        if not bool(torch.isfinite(u[i]).all()) or bool((u[i] <= 0).any()):
            raise OracleError(
                f"{self.name}: the moving average of exp(L/Lambda) is not a positive finite number at iteration "
                f"{self.k}; raise Lambda"
            )
        self.u = u
        return i

    def _set(self, name: str, index: torch.Tensor | None, values: torch.Tensor) -> None:
        """x's auxiliary entry ``name`` (at ``index``) set to ``values``, in a fresh vector."""
        x = self._x.clone()
        entry = self.declared.problem.x.split(x)[name]
        entry[slice(None) if index is None else index] = values
        self._x = x

    def step(self, batch: Any = None) -> dict:
        """One LibAUC iteration on ``batch`` (default a draw from the problem's sampler); returns the row."""
        d = self.declared
        if batch is None:
            batch = d.problem.sampler(self.generator)
        batch = self.oracle.to_run(batch)[0]
        k, y, scale = self.k, self._y, d.scale
        x_steps = None
        if self.loss == "kl":
            i = self._averages(batch, self.hp["gamma"])
            self._set("v", i, torch.log(self.u[i]) / scale)
        elif self.loss == "two-way-kl":
            gamma0, gamma1 = self.hp["gammas"]
            i = self._averages(batch, gamma0)
            r = d.options["Lambda"] / d.options["tau"]
            self.W = (1 - gamma1) * self.W + gamma1 * (self.u[i] ** r).mean()
            self._set("v0", None, torch.log(self.W))
            if r < 1:
                self._set("v", i, torch.log(self.u[i]) / scale)
            elif r > 1:  # v is y, the maximum of phi
                y = self._y = y.clone()
                y[i] = torch.log(self.u[i]) / scale
        else:  # STACO: y first, at the current x
            _, gy, _ = self._gradients(batch, y, hold_y=False)
            y = self._y = self.oracle.project_y(y + self.hp["alpha"] * gy)
            x_steps = (("s", self.hp["beta_0"]), ("s2", self.hp["beta_1"]))
        gx, _, row = self._gradients(batch, y, hold_y=True)
        opt = self.weights(self.opt, self._x, gx, k, self.eta)
        x_next = opt.x
        for name, rate in x_steps or ():
            x_next = x_next - torch.where(self._aux[name], gx, 0.0) * rate
        self.opt = self.weights.after(replace(opt, x=x_next))
        self._x, self.k = x_next, k + 1
        return {"k": k, **row}

    # -- the iterates ----------------------------------------------------------------------------------

    @property
    def x(self) -> PairModel:
        """The iterate x: a copy of the declared :class:`PairModel` with the current values."""
        return self.declared.problem.x.build(self._x)

    @property
    def y(self) -> torch.Tensor | None:
        """The iterate y (STACO's scaled y, SOTA-s's v for r > 1), None where the problem has none."""
        p = self.declared.problem
        return None if p.y is None else p.y.build(self._y)


__all__ = [
    "LOSSES",
    "SURROGATES",
    "STEPPER_PARAMS",
    "LibAUCStepper",
    "PairModel",
    "PairProblem",
    "cvar",
    "pair_objective",
    "pauc_dro_problem",
    "tpauc_cvar_problem",
    "tpauc_kl_problem",
]
