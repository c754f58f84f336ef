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

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fullcomp.algorithms.minimax import epoch_gda, sgda, sopa
from fullcomp.algorithms.smag import smag
from fullcomp.datasets.tabular import TabularData, adult, german_credit
from fullcomp.errors import DataError, FullcompError, OptionError
from fullcomp.experiments.harness import (
    TableFiles,
    add_config,
    add_methods,
    add_no_progress,
    add_positive,
    add_seeds,
    best_mean,
    by_seed,
    cell,
    check_dataset_settings,
    check_keys,
    check_seeds,
    emit,
    read_config,
    seed_columns,
    select_methods,
    write_report,
    write_tables,
)
from fullcomp.metrics import fairness_report
from fullcomp.model.dmax import DMaxProblem
from fullcomp.report import mean_sd, protocol_runs
from fullcomp.run import History, Result, write_atomic

#: Tag written into every run's summary.json, so tables() never mixes in other run folders.
PROTOCOL = "pauc-fairness"
DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "pauc.json"
FINAL_SEEDS = (2000, 2001, 2002)
TUNING_SEEDS = (1000,)
RHO = 0.3
MARGIN = 1.0
LAMBDA0 = 1e-3
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

    def sampler(generator: torch.Generator) -> tuple:
        i = torch.randint(pos.numel(), (batch_pos,), generator=generator)
        j = neg[torch.randint(neg.numel(), (batch_neg,), generator=generator)]
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


# ---------------------------------------------------------------------------------------------- methods


@dataclass(frozen=True)
class Method:
    """One compared method: protocol name, the paper's label, whether it uses the adversary, the
    settings keys it reads, and how they map to the solver."""

    name: str
    label: str
    fair: bool
    keys: tuple[str, ...]
    run: Callable[..., Result]


def _sopa(problem: DMaxProblem, s: dict, **kw: Any) -> Result:
    return sopa(problem, eta=s["eta"], eta_s=s["eta_s"], s_key="u", **kw)


def _smag(problem: DMaxProblem, s: dict, **kw: Any) -> Result:
    return smag(problem, gamma=s["gamma"], eta0=s["eta0"], eta1=s["eta1"], **kw)


def _sgda(problem: DMaxProblem, s: dict, **kw: Any) -> Result:
    return sgda(problem, eta_x=s["eta_x"], eta_y=s["eta_y"], **kw)


def _epoch_gda(problem: DMaxProblem, s: dict, **kw: Any) -> Result:
    return epoch_gda(
        problem, eta_x=s["eta_x"], eta_y=s["eta_y"], gamma=s["gamma"], epoch_iters=int(s["epoch_iters"]), **kw
    )


#: The five methods in the paper's table order (Table 3).
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("sopa", "SOPA", False, ("eta", "eta_s"), _sopa),
        Method("smag-star", "SMAG*", False, ("gamma", "eta0", "eta1"), _smag),
        Method("sgda", "SGDA", True, ("alpha", "eta_x", "eta_y"), _sgda),
        Method("epoch-gda", "EGDA", True, ("alpha", "eta_x", "eta_y", "gamma", "epoch_iters"), _epoch_gda),
        Method("smag", "SMAG", True, ("alpha", "gamma", "eta0", "eta1"), _smag),
    )
}

#: Searched settings: the paper's Section 5.2 grids (alpha in {0.1, 0.2, 0.5}, adversary steps in
#: {0.1, 0.01, 0.001}, Epoch-GDA's gamma and inner loop), with step sizes moved up to {1, 0.3, 0.1}: this
#: small MLP trains for 3 epochs and a first selection chose the largest steps of {0.3, 0.1, 0.03}.
#: SMAG's gamma and eta0 are searched as eta1 / gamma (how far x_phi is pulled toward x per step) and
#: eta0 / gamma (how far x moves toward x_phi), so that eta1 <= gamma / 2 (SMAG's step condition) holds;
#: eta0 / gamma = 1 would be SGDA.  SMAG's adversary steps with eta1 (Algorithm 3 has one step size).
DEFAULT_GRIDS: dict[str, dict[str, list]] = {
    "sopa": {"eta": [1.0, 0.3, 0.1, 0.03], "eta_s": [1.0, 0.1, 0.01]},
    "smag-star": {"eta1": [1.0, 0.3, 0.1], "eta1_over_gamma": [0.5, 0.1, 0.02], "eta0_over_gamma": [0.5, 0.1]},
    "sgda": {"alpha": [0.1, 0.2, 0.5], "eta_x": [1.0, 0.3, 0.1], "eta_y": [0.1, 0.01, 0.001]},
    "epoch-gda": {
        "alpha": [0.1, 0.2, 0.5],
        "eta_x": [1.0, 0.3],
        "eta_y": [0.1, 0.01],
        "gamma": [0.1, 0.01],
        "epoch_iters": [5, 15],
    },
    "smag": {
        "alpha": [0.1, 0.2, 0.5],
        "eta1": [1.0, 0.3, 0.1],
        "eta1_over_gamma": [0.5, 0.1, 0.02],
        "eta0_over_gamma": [0.5, 0.1],
    },
}


def grid_settings(method: str, point: dict[str, Any]) -> dict[str, Any]:
    """Absolute settings of ``method`` from a grid point (SMAG's ratios turned into gamma and eta0)."""
    point = dict(point)
    if "eta1_over_gamma" in point:
        # 12 significant digits: 0.3 / 0.1 is 2.9999999999999996 in binary floating point
        gamma = float(f"{point['eta1'] / point.pop('eta1_over_gamma'):.12g}")
        point["gamma"] = gamma
        point["eta0"] = float(f"{point.pop('eta0_over_gamma') * gamma:.12g}")
    return check_settings(method, point)


def method_names(methods: str | Iterable[str] | None) -> list[str]:
    """Validated method names in the paper's order (None: all five); a comma-separated string is accepted."""
    return select_methods(methods, METHODS)


def check_settings(method: str, settings: Any) -> dict[str, Any]:
    """The settings of ``method`` holding exactly the keys it reads, as numbers."""
    keys = check_keys(method, settings, METHODS)
    out = {}
    for k in keys:
        v = settings[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise OptionError(f"setting {k} of {method} must be a positive number, got {v!r}")
        out[k] = int(v) if k == "epoch_iters" else float(v)
    return out


# ------------------------------------------------------------------------------------------------- data

DATASETS = {"adult": adult, "german-credit": german_credit}


def dataset_name(data_dir: str | os.PathLike) -> str:
    """``"adult"`` or ``"german-credit"`` from the files in ``data_dir``."""
    folder = Path(data_dir)
    if (folder / "adult.data").is_file():
        return "adult"
    if (folder / "german.data").is_file() or (folder.is_file() and folder.name == "german.data"):
        return "german-credit"
    raise DataError(
        f"{folder} holds neither adult.data/adult.test (UCI Adult) nor german.data (German credit); "
        "pass one of those folders"
    )


def load(data_dir: str | os.PathLike) -> TabularData:
    """The data set in ``data_dir`` (see :func:`dataset_name`)."""
    return DATASETS[dataset_name(data_dir)](data_dir)


# ------------------------------------------------------------------------------------------------- runs


@dataclass
class Workload:
    """Iterations per run and the mini-batch sizes (the same for every method); not a time budget."""

    iters: int
    batch_pos: int = 64
    batch_neg: int = 64

    def __post_init__(self) -> None:
        for name in ("iters", "batch_pos", "batch_neg"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise OptionError(f"{name} must be a positive int, got {v!r}")


#: Iterations and batch sizes per data set: Adult about 3 epochs of 128-row batches (the paper's 3 epochs),
#: German credit (800 training rows) about 20 epochs of 64-row batches.
DEFAULT_BUDGETS = {"adult": Workload(700), "german-credit": Workload(250, 32, 32)}


def evaluate(model: nn.Module, data: TabularData, splits: Sequence[str] = ("val", "test")) -> dict[str, float]:
    """Metrics of :func:`fullcomp.metrics.fairness_report` on each split, keys prefixed ``val_``, ``test_``."""
    out = {}
    for name in splits:
        split = data.splits()[name]
        report = fairness_report(split.y, scores(model, split.X), split.a, max_fpr=RHO, threshold=THRESHOLD)
        out.update({f"{name}_{k}": v for k, v in report.items()})
    return out


def run_method(
    method: str,
    data: TabularData,
    settings: dict[str, Any],
    seed: int,
    budget: Workload,
    *,
    eval_every: int | None = 50,
    splits: Sequence[str] = ("val", "test"),
    progress: bool = False,
) -> Result:
    """One protocol run of ``method`` from the same initial weights (``init_seed`` 0) with sampler seed ``seed``.

    The validation (and test) metrics are recorded every ``eval_every``
    iterations and at the end, outside optimizer time; ``result.info`` gains
    the protocol fields that :func:`tables` reads.
    """
    spec = METHODS[method]
    settings = check_settings(method, settings)
    alpha = settings.get("alpha", 0.0) if spec.fair else 0.0
    declared = pauc_problem(
        data.train.X, data.train.y, data.train.a, alpha=alpha, batch_pos=budget.batch_pos, batch_neg=budget.batch_neg
    )

    def callback(iterate: Any) -> dict:
        return evaluate(iterate.x, data, splits)

    wall = time.perf_counter()
    result = spec.run(
        declared.problem,
        settings,
        iters=budget.iters,
        seed=seed,
        callback=callback,
        eval_every=eval_every or 10**9,
        progress=progress,
    )
    wall = time.perf_counter() - wall
    for row in result.history.rows:  # `fullcomp report` reads objective_estimate as every run's objective
        row.setdefault("objective_estimate", row.get("phi_value", math.nan))
    final = result.history[-1]
    result.info.update(
        protocol=PROTOCOL,
        method=method,
        label=spec.label,
        dataset=data.name,
        seed=seed,
        settings=settings,
        alpha=alpha,
        rho=RHO,
        margin=MARGIN,
        lambda0=LAMBDA0,
        threshold=THRESHOLD,
        iters=budget.iters,
        batch_pos=budget.batch_pos,
        batch_neg=budget.batch_neg,
        wall_seconds=wall,
        metrics={k: final[k] for k in final if k.startswith(("val_", "test_"))},
        torch_threads=torch.get_num_threads(),
    )
    return result


# ----------------------------------------------------------------------------------------------- config


def load_config(config: str | os.PathLike | dict | None = None) -> dict[str, Any]:
    """The frozen settings: a JSON path, a dict, or None (the committed ``configs/pauc.json``).

    Layout: ``{"settings": {dataset: {method: {...}}}, "budgets": {dataset: {...}}, ...provenance}``.
    """
    data, origin = read_config(config, DEFAULT_CONFIG, "write one with select_settings (--select)")
    return check_dataset_settings(data, origin, check_settings)


def select_settings(
    data: TabularData,
    methods: str | Iterable[str] | None = None,
    *,
    grids: dict[str, dict[str, list]] | None = None,
    seeds: Iterable[int] | str = TUNING_SEEDS,
    budget: Workload | None = None,
    config_path: str | os.PathLike | None = None,
    base_config: str | os.PathLike | dict | None = None,
    pauc_tolerance: float = 0.01,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Choose each method's settings on the *validation* split and freeze them (test data is never scored).

    Every point of ``grids[method]`` (default :data:`DEFAULT_GRIDS`) runs on each
    tuning seed (default 1000) with the protocol budget and is scored by its
    mean validation pAUC and EOD.  The paper's goal is the highest pAUC with the
    lowest disparities, so pAUC comes first: among the candidates whose
    validation pAUC is within ``pauc_tolerance`` (default 0.01) of the method's
    best, the lowest validation EOD wins (grid order breaks ties).  A plain
    difference pAUC - EOD would reward degenerate models that predict one class
    for everybody (EOD 0 at the 0.5 threshold).  A run that fails scores pAUC
    -inf.  The result updates ``base_config`` (None: the committed one when it
    exists) for this data set and is written to ``config_path`` (None: not written).
    """
    names, seed_list = method_names(methods), check_seeds(seeds)
    grids = copy.deepcopy(DEFAULT_GRIDS if grids is None else grids)
    budget = budget or DEFAULT_BUDGETS.get(data.name, Workload(500))
    try:
        cfg = load_config(base_config)
    except OptionError:
        if base_config is not None:
            raise
        cfg = {"settings": {}}
    cfg.setdefault("settings", {}).setdefault(data.name, {})
    record: dict[str, Any] = {}
    started = time.perf_counter()
    for name in names:
        if name not in grids:
            raise OptionError(f"no grid for {name}; give grids[{name!r}] = {{setting: [values]}}")
        keys = list(grids[name])
        tried = []
        for values in itertools.product(*(grids[name][k] for k in keys)):
            point = dict(zip(keys, values))
            settings = grid_settings(name, point)
            paucs, eods = [], []
            for seed in seed_list:
                try:
                    result = run_method(name, data, settings, seed, budget, eval_every=None, splits=("val",))
                    last = result.history[-1]
                    pauc, eod = float(last["val_pauc"]), float(last["val_eod"])
                except (FullcompError, KeyError):
                    pauc, eod = -math.inf, math.inf
                paucs.append(pauc if math.isfinite(pauc) else -math.inf)
                eods.append(eod if math.isfinite(eod) else math.inf)
            entry = {"grid": point, "settings": settings, "val_pauc": float(np.mean(paucs))}
            entry["val_eod"] = float(np.mean(eods))
            tried.append(entry)
            emit(
                log, f"select {data.name}/{name} {point}: val pAUC {entry['val_pauc']:.4f}, EOD {entry['val_eod']:.4f}"
            )
        top = max(t["val_pauc"] for t in tried)
        near = [t for t in tried if t["val_pauc"] >= top - pauc_tolerance]
        best = min(near, key=lambda t: t["val_eod"])  # first of equals: grid order breaks ties
        cfg["settings"][data.name][name] = best["settings"]
        edge = [
            k
            for k, v in best["grid"].items()
            if len(grids[name][k]) > 1 and v in (grids[name][k][0], grids[name][k][-1])
        ]
        record[name] = {"chosen": best["grid"], "at_grid_edge": edge, "candidates": tried}
    cfg.setdefault("budgets", {})[data.name] = {
        "iters": budget.iters,
        "batch_pos": budget.batch_pos,
        "batch_neg": budget.batch_neg,
    }
    cfg.setdefault("selection", {})[data.name] = {
        "criterion": "lowest mean validation EOD among the candidates whose mean validation pAUC (normalized, "
        f"FPR <= 0.3) is within {pauc_tolerance} of the method's best",
        "pauc_tolerance": pauc_tolerance,
        "tuning_seeds": seed_list,
        "grids": {n: grids[n] for n in names},
        "methods": record,
        "seconds": time.perf_counter() - started,
        "selected_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    cfg["about"] = "Frozen pAUC-fairness settings (fullcomp.experiments.pauc), chosen on validation by select_settings."
    if config_path is not None:
        write_atomic(config_path, json.dumps(cfg, indent=2) + "\n")
    return cfg


def bench_pauc(
    data_dir: str | os.PathLike,
    seeds: Iterable[int] | str = FINAL_SEEDS,
    methods: str | Iterable[str] | None = None,
    out_dir: str | os.PathLike = "runs/pauc",
    *,
    config: str | os.PathLike | dict | None = None,
    iters: int | None = None,
    eval_every: int = 50,
    data: TabularData | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Run every (method, seed) with the frozen settings and save ``out_dir/<dataset>/<method>/seed<k>/``.

    ``iters`` overrides the configuration's iterations per run (smoke tests);
    ``eval_every`` (default 50) is the iterations between validation/test
    evaluations (outside optimizer time).  Returns the run folders.
    """
    data = data if data is not None else load(data_dir)
    names, seed_list = method_names(methods), check_seeds(seeds)
    cfg = load_config(config)
    if data.name not in cfg["settings"]:
        raise OptionError(f"the configuration has no settings for {data.name}; run the selection first (--select)")
    b = cfg.get("budgets", {}).get(data.name)
    budget = Workload(**b) if b else DEFAULT_BUDGETS.get(data.name, Workload(500))
    if iters is not None:
        budget = Workload(int(iters), budget.batch_pos, budget.batch_neg)
    folders = []
    for name in names:
        if name not in cfg["settings"][data.name]:
            raise OptionError(f"the configuration has no settings for {name} on {data.name}; run the selection")
        for seed in seed_list:
            result = run_method(
                name, data, cfg["settings"][data.name][name], seed, budget, eval_every=eval_every, progress=progress
            )
            folder = Path(out_dir) / data.name / name / f"seed{seed}"
            result.save(folder)
            folders.append(folder)
            m = result.info["metrics"]
            emit(
                log,
                f"{data.name}/{name}/seed{seed}: {budget.iters} iterations, {result.info['wall_seconds']:.1f} s wall, "
                f"test pAUC {m['test_pauc']:.4f} EOD {m['test_eod']:.4f} EOP {m['test_eop']:.4f} DP {m['test_dp']:.4f}",
            )
    return folders


# ---------------------------------------------------------------------------------------------- tables

#: (key, title, higher is better) of the table columns; pAUC is the normalized one (FPR <= 0.3).
COLUMNS = (
    ("test_pauc", "pAUC", True),
    ("test_eod", "EOD", False),
    ("test_eop", "EOP", False),
    ("test_dp", "DP", False),
    ("test_pauc_mcclish", "pAUC (McClish)", True),
    ("test_auc", "AUC", True),
    ("val_pauc", "val pAUC", True),
    ("val_eod", "val EOD", False),
    ("wall_seconds", "wall s/run", None),
)


@dataclass
class PAUCRun:
    path: Path
    summary: dict
    history: History = field(repr=False)

    def metric(self, key: str) -> float:
        if key == "wall_seconds":
            return float(self.summary.get("wall_seconds", math.nan))
        return float(self.summary.get("metrics", {}).get(key, math.nan))


def find_protocol_runs(out_dir: str | os.PathLike) -> list[PAUCRun]:
    """Every run folder under ``out_dir`` written by :func:`bench_pauc`."""
    return [PAUCRun(*run) for run in protocol_runs(out_dir, PROTOCOL, "fullcomp bench pauc-fairness")]


def _grouped(runs: list[PAUCRun]) -> list[tuple[str, str, list[PAUCRun]]]:
    groups: dict[tuple[str, str], list[PAUCRun]] = {}
    for run in runs:
        groups.setdefault((str(run.summary["dataset"]), str(run.summary["method"])), []).append(run)
    rank = {m: i for i, m in enumerate(METHODS)}
    keys = sorted(groups, key=lambda k: (k[0], rank.get(k[1], 99)))
    return [(d, m, by_seed(groups[(d, m)])) for d, m in keys]


def summarize(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """One row per (dataset, method): seeds, mean and sample SD of every column, and ``rank_pauc``
    (1 = highest mean test pAUC among the methods of that data set)."""
    rows = []
    for dataset, method, runs in _grouped(find_protocol_runs(out_dir)):
        row: dict[str, Any] = {
            "dataset": dataset,
            "method": method,
            "label": METHODS[method].label if method in METHODS else method,
            **seed_columns(runs),
            "iters": runs[0].summary.get("iters"),
        }
        for key, _, _ in COLUMNS:
            row[f"{key}_mean"], row[f"{key}_sd"] = mean_sd([r.metric(key) for r in runs])
        rows.append(row)
    for dataset in {r["dataset"] for r in rows}:
        block = [r for r in rows if r["dataset"] == dataset]
        order = sorted(block, key=lambda r: -r["test_pauc_mean"] if math.isfinite(r["test_pauc_mean"]) else math.inf)
        for position, r in enumerate(order, 1):
            r["rank_pauc"] = position
    return rows


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# pAUC-fairness protocol tables",
        "",
        "Mean ± sample SD over seeds of the final model on the test split. pAUC: one-way partial AUC with "
        "FPR <= 0.3, normalized to [0, 1] (pair count over the ceil(0.3 n-) highest-scored negatives); McClish: "
        "scikit-learn's roc_auc_score(max_fpr=0.3). EOD = max(|ΔTPR|, |ΔFPR|), EOP = |ΔTPR|, DP = |ΔPR| between "
        "the sensitive groups at threshold 0.5 on sigmoid scores (lower is better). Bold: best mean per column "
        "(no significance claim).",
    ]
    for dataset in sorted({r["dataset"] for r in rows}):
        block = [r for r in rows if r["dataset"] == dataset]
        lines += ["", f"## {dataset} ({block[0]['iters']} iterations per run)", ""]
        lines.append("| Method | Seeds | " + " | ".join(t for _, t, _ in COLUMNS) + " | pAUC rank |")
        lines.append("|---|---:|" + "---:|" * (len(COLUMNS) + 1))
        best = {key: best_mean(block, key, higher) for key, _, higher in COLUMNS}
        for r in block:
            cells = [
                cell(r[f"{k}_mean"], r[f"{k}_sd"], 1 if k == "wall_seconds" else 4, r[f"{k}_mean"] == best[k])
                for k, _, _ in COLUMNS
            ]
            lines.append(f"| {r['label']} | {r['n_seeds']} | " + " | ".join(cells) + f" | {r['rank_pauc']} |")
    return "\n".join(lines) + "\n"


def tables(out_dir: str | os.PathLike) -> TableFiles:
    """Write ``out_dir/tables.csv`` and ``out_dir/tables.md`` (Table 3's columns per data set) and return them."""
    rows = summarize(out_dir)
    return write_tables(out_dir, "tables", rows, _markdown(rows))


def plots(out_dir: str | os.PathLike) -> list[Path]:
    """Save ``out_dir/<dataset>/pauc_fairness.png``: test pAUC against test EOD and DP (mean ± SD per method),
    and validation pAUC against iterations after the first evaluation (mean over seeds)."""
    from matplotlib.figure import Figure

    saved = []
    grouped = _grouped(find_protocol_runs(out_dir))
    for dataset in sorted({d for d, _, _ in grouped}):
        block = [(m, runs) for d, m, runs in grouped if d == dataset]
        fig = Figure(figsize=(14, 4.2), layout="constrained")
        axes = fig.subplots(1, 3)
        for i, (method, runs) in enumerate(block):
            label = METHODS[method].label if method in METHODS else method
            color = f"C{list(METHODS).index(method) if method in METHODS else i}"
            pauc = [r.metric("test_pauc") for r in runs]
            for ax, key in zip(axes[:2], ("test_eod", "test_dp")):
                values = [r.metric(key) for r in runs]
                ax.errorbar(
                    np.mean(values),
                    np.mean(pauc),
                    xerr=np.std(values, ddof=1) if len(runs) > 1 else None,
                    yerr=np.std(pauc, ddof=1) if len(runs) > 1 else None,
                    fmt="o",
                    color=color,
                    label=label,
                    capsize=3,
                )
            curves = []
            for r in runs:
                if "val_pauc" not in r.history.columns:
                    continue
                k, v = r.history.column("k"), r.history.column("val_pauc")
                keep = np.isfinite(v) & (k > 0)  # the untrained start would flatten the scale
                curves.append((k[keep], v[keep]))
            if curves and all(c[0].size == curves[0][0].size for c in curves):
                axes[2].plot(curves[0][0], np.mean([c[1] for c in curves], axis=0), color=color, label=label)
        for ax, title in zip(axes[:2], ("EOD", "DP")):
            ax.set_xlabel(f"test {title} (lower is better)")
            ax.set_ylabel("test pAUC (FPR <= 0.3, normalized)")
            ax.grid(alpha=0.3)
        axes[2].set_xlabel("iteration")
        axes[2].set_ylabel("validation pAUC")
        axes[2].grid(alpha=0.3)
        axes[0].legend(fontsize="small")
        fig.suptitle(f"{dataset}: partial AUC vs disparity (mean ± sample SD over seeds)")
        path = Path(out_dir) / dataset / "pauc_fairness.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        saved.append(path)
    return saved


# ---------------------------------------------------------------------------------------------- CLI glue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fullcomp bench pauc-fairness`` (see :func:`run_from_args`)."""
    parser.add_argument("--data", required=True, help="folder with adult.data + adult.test, or with german.data")
    parser.add_argument("--out", default="runs/pauc", help="output folder (default runs/pauc)")
    add_seeds(parser, FINAL_SEEDS, "e.g. 2000-2002 (default) or 1,2")
    add_methods(parser, method_names, f"comma-separated subset of {','.join(METHODS)}")
    add_positive(parser, "--iters", int, None, "iterations per run (default: the configuration's)")
    add_positive(parser, "--eval-every", int, 50, "iterations between evaluations (default 50)")
    add_config(parser, DEFAULT_CONFIG)
    parser.add_argument(
        "--select",
        action="store_true",
        help="first choose the settings on the validation split (DEFAULT_GRIDS, tuning seed 1000) and write "
        "them to --config (default OUT/pauc-config.json), then run the seeds with them",
    )
    tuning_help = "seeds of the --select runs (default 1000), distinct from the reported --seeds"
    add_seeds(parser, TUNING_SEEDS, tuning_help, flag="--tuning-seeds")
    add_no_progress(parser)


def run_from_args(args: argparse.Namespace) -> int:
    """Optionally select settings, run :func:`bench_pauc`, then write the tables and plots; prints wall times."""
    torch.set_num_threads(1)  # small models: threads only contend on a shared machine
    log = lambda line: print(line, flush=True)  # noqa: E731
    started = time.perf_counter()
    data = load(args.data)
    config = args.config
    if args.select:
        config = config or str(Path(args.out) / "pauc-config.json")
        budget = None
        if args.iters is not None:
            base = DEFAULT_BUDGETS.get(data.name, Workload(500))
            budget = Workload(args.iters, base.batch_pos, base.batch_neg)
        select_settings(
            data,
            args.methods,
            seeds=args.tuning_seeds,
            budget=budget,
            config_path=config,
            base_config=args.config if args.config and Path(args.config).is_file() else None,
            log=log,
        )
        log(f"selection on {data.name}: {time.perf_counter() - started:.1f} s wall; settings in {config}")
    bench_started = time.perf_counter()
    bench_pauc(
        args.data,
        args.seeds,
        args.methods,
        args.out,
        config=config,
        iters=args.iters,
        eval_every=args.eval_every,
        data=data,
        progress=not args.no_progress,
        log=log,
    )
    log(f"runs on {data.name}: {time.perf_counter() - bench_started:.1f} s wall")
    write_report(args.out, tables, plots)
    log(f"total: {time.perf_counter() - started:.1f} s wall")
    return 0


__all__ = [
    "PROTOCOL",
    "METHODS",
    "DEFAULT_GRIDS",
    "DEFAULT_BUDGETS",
    "PAUCModel",
    "PAUCProblem",
    "mlp_encoder",
    "pauc_problem",
    "primal_objective",
    "scores",
    "evaluate",
    "run_method",
    "select_settings",
    "bench_pauc",
    "tables",
    "plots",
    "load_config",
    "add_arguments",
    "run_from_args",
]
