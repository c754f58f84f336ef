"""The pAUC-fairness problem: the scorer, the adversary and the one-way partial AUC objective."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fullcomp import DMaxProblem
from fullcomp.errors import DataError, OptionError
from fullcomp_lab.pauc.config import LAMBDA0

RHO = 0.3
MARGIN = 1.0
THRESHOLD = 0.5

# ------------------------------------------------------------------------------------------------ model


def mlp_encoder(dim: int, hidden: Sequence[int] = (64, 32)) -> nn.Sequential:
    """Linear-ReLU layers ``dim -> hidden[0] -> ... -> hidden[-1]``; the representation is the last ReLU output."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(dim, width), nn.ReLU()]
        dim = width
    return nn.Sequential(*layers)


class PAUCModel(nn.Module):
    """x of problem (9): an encoder, a linear classification head and the CVaR thresholds ``u`` (s = scale u).

    ``forward(inputs)`` returns ``(logits, representation)``.
    """

    def __init__(self, encoder: nn.Module, rep_dim: int, n_pos: int):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(rep_dim, 1)
        self.u = nn.Parameter(torch.zeros(n_pos))

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rep = self.encoder(inputs)
        return self.head(rep).squeeze(-1), rep


@dataclass
class PAUCProblem:
    """Problem (9) on one training split, declared for the solvers, with its data and options."""

    problem: DMaxProblem
    model: PAUCModel
    adversary: nn.Linear
    alpha: float
    rho: float
    margin: float
    lambda0: float
    batch_pos: int
    batch_neg: int
    threshold_scale: float
    X: torch.Tensor
    y: np.ndarray
    a: np.ndarray


def pauc_problem(
    X: Any,
    y: Any,
    a: Any,
    *,
    alpha: float = 0.0,
    encoder: nn.Module | None = None,
    rep_dim: int | None = None,
    hidden: Sequence[int] = (64, 32),
    rho: float = RHO,
    margin: float = MARGIN,
    lambda0: float = LAMBDA0,
    batch_pos: int = 64,
    batch_neg: int = 64,
    init_seed: int = 0,
    replace: bool = True,
) -> PAUCProblem:
    """Declare problem (9) on training data ``X`` (n, ...) with 0/1 labels ``y`` and sensitive attribute ``a``.

    ``encoder`` is any torch module mapping a batch of ``X`` rows (tabular rows,
    images, ...) to a (batch, rep_dim) representation; default an MLP with
    ``hidden`` widths (default (64, 32)) on flat features.  ``alpha`` (default 0:
    problem (8)) weights the adversary's log-likelihood; ``rho`` (0.3) bounds the
    FPR, ``margin`` (1.0) is the squared hinge's c, ``lambda0`` (1e-3) the
    adversary's ridge; each iteration draws ``batch_pos`` positives and
    ``batch_neg`` negatives (default 64 each, 128 rows as in the paper).
    ``init_seed`` (default 0) seeds the initial weights, the same for every method.
    ``replace`` (default True) draws the batch's rows with replacement; False draws distinct
    positives and distinct negatives, as LibAUC's samplers do within an epoch (then a SOPA run fed
    the same batches follows LibAUC's ``pAUC_CVaR_Loss`` + ``SOPA`` step for step).
    """
    X = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X).float()
    y = np.asarray(y).astype(np.int64).reshape(-1)
    a = np.asarray(a).astype(np.int64).reshape(-1)
    if not (len(X) == y.size == a.size):
        raise DataError(f"X, y and a must have the same number of rows, got {len(X)}, {y.size} and {a.size}")
    if set(np.unique(y).tolist()) != {0, 1}:
        raise DataError("y must hold both labels 0 and 1: the partial AUC needs positives and negatives")
    if set(np.unique(a).tolist()) - {0, 1}:
        raise DataError("a must be a 0/1 sensitive attribute")
    if not (isinstance(alpha, (int, float)) and alpha >= 0 and math.isfinite(alpha)):
        raise OptionError(f"alpha must be a non-negative number (the adversary's weight), got {alpha!r}")
    if not 0 < rho <= 1:
        raise OptionError(f"rho must be in (0, 1] (the FPR bound), got {rho!r}")
    if not (lambda0 > 0):
        raise OptionError(
            f"lambda0 must be positive (it makes the max over the adversary strongly concave), got {lambda0}"
        )
    if encoder is not None and rep_dim is None:
        raise OptionError("rep_dim is required with a custom encoder: the width of its representation")
    pos = torch.as_tensor(np.nonzero(y == 1)[0])
    neg = torch.as_tensor(np.nonzero(y == 0)[0])
    with torch.random.fork_rng():  # the same initial weights for every method, global RNG untouched
        torch.manual_seed(init_seed)
        if encoder is None:
            encoder = mlp_encoder(int(np.prod(X.shape[1:])), hidden)
            rep_dim = hidden[-1]
        model = PAUCModel(encoder, int(rep_dim), int(pos.numel()))
        adversary = nn.Linear(int(rep_dim), 1)
    groups = torch.as_tensor(a, dtype=torch.float32)
    scale = math.sqrt(batch_pos)
    alpha = float(alpha)

    if not replace and (batch_pos > pos.numel() or batch_neg > neg.numel()):
        raise OptionError(
            f"replace=False draws distinct rows: batch_pos={batch_pos} and batch_neg={batch_neg} must not exceed "
            f"the {pos.numel()} positives and {neg.numel()} negatives"
        )

    def draw(n: int, size: int, generator: torch.Generator) -> torch.Tensor:
        if replace:
            return torch.randint(n, (size,), generator=generator)
        return torch.randperm(n, generator=generator)[:size]

    def sampler(generator: torch.Generator) -> tuple:
        i = draw(pos.numel(), batch_pos, generator)
        j = neg[draw(neg.numel(), batch_neg, generator)]
        rows = torch.cat([pos[i], j])
        return X[rows], i, groups[rows]

    def phi(x: Any, w_a: Any, batch: tuple) -> torch.Tensor:
        inputs, i, group = batch
        logits, rep = x(inputs)
        h = torch.sigmoid(logits)
        hp, hn = h[:batch_pos], h[batch_pos:]
        s = scale * x.params["u"][i]
        loss = (margin - (hp[:, None] - hn[None, :])).clamp_min(0) ** 2
        cvar = (s + (loss - s[:, None]).clamp_min(0).mean(dim=1) / rho).mean()
        ridge = 0.5 * lambda0 * sum((p**2).sum() for p in w_a.params.values())
        if alpha == 0.0:
            return cvar - ridge  # problem (8): the adversary is not needed
        loglik = -nn.functional.binary_cross_entropy_with_logits(w_a(rep).squeeze(-1), group)
        return cvar + alpha * loglik - ridge

    problem = DMaxProblem(phi, x0=model, y0=adversary, sampler=sampler)
    return PAUCProblem(problem, model, adversary, alpha, rho, margin, lambda0, batch_pos, batch_neg, scale, X, y, a)


def scores(model: nn.Module, X: Any, chunk: int = 4096) -> np.ndarray:
    """sigmoid(logit) of every row of ``X`` under ``model`` (a :class:`PAUCModel`), without gradients."""
    X = torch.as_tensor(X).float()
    out = []
    with torch.no_grad():
        for start in range(0, len(X), chunk):
            out.append(torch.sigmoid(model(X[start : start + chunk])[0]))
    return torch.cat(out).numpy().astype(np.float64)


def primal_objective(
    model: PAUCModel,
    X: Any,
    y: Any,
    a: Any,
    *,
    alpha: float,
    rho: float = RHO,
    margin: float = MARGIN,
    lambda0: float = LAMBDA0,
    adversary_steps: int = 200,
) -> float:
    """min_s max_{w_a} of the objective (9) on the given (small) data set, a measure every method should lower.

    The min over s is the CVaR in closed form (per positive, the mean of the
    top rho fraction of its pair losses, the boundary pair counted fractionally);
    the max over the adversary is a ridge-regularized logistic regression on
    the frozen representation, solved by L-BFGS.  All pairs are formed, so keep
    the data small.
    """
    X = torch.as_tensor(X).float()
    y = np.asarray(y).reshape(-1)
    with torch.no_grad():
        logits, rep = model(X)
        h = torch.sigmoid(logits).double()
    hp, hn = h[torch.as_tensor(y == 1)], h[torch.as_tensor(y == 0)]
    loss = (margin - (hp[:, None] - hn[None, :])).clamp_min(0) ** 2
    top, _ = torch.sort(loss, dim=1, descending=True)
    m = rho * hn.numel()
    full = int(math.floor(m))
    cvar_rows = top[:, :full].sum(dim=1)
    if full < hn.numel():
        cvar_rows = cvar_rows + (m - full) * top[:, full]
    value = float((cvar_rows / m).mean())
    if alpha == 0:
        return value
    rep = rep.double()
    group = torch.as_tensor(np.asarray(a).reshape(-1), dtype=torch.float64)
    w = torch.zeros(rep.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=adversary_steps, line_search_fn="strong_wolfe")

    def negative() -> torch.Tensor:
        opt.zero_grad()
        logit = rep @ w[:-1] + w[-1]
        out = alpha * nn.functional.binary_cross_entropy_with_logits(logit, group) + 0.5 * lambda0 * (w**2).sum()
        out.backward()
        return out

    opt.step(negative)
    with torch.no_grad():
        logit = rep @ w[:-1] + w[-1]
        best = alpha * nn.functional.binary_cross_entropy_with_logits(logit, group) + 0.5 * lambda0 * (w**2).sum()
    return value - float(best)
