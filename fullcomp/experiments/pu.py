"""The PU-learning protocol of the SMAG paper (Section 5.1, Figures 1 and 2) as reusable functions.

* :data:`METHODS`: SGD, SDCA, SSDC-SPG, SSDC-Adagrad, SBCD (``fullcomp.algorithms.dc``) and SMAG
  (Algorithm 2), each run from w = 0 on the same :func:`~fullcomp.datasets.pu.pu_problem`.
* :func:`bench_pu` runs every (method, seed) and saves ``out/<dataset>/<method>/seed<k>/``;
  :func:`gamma_ablation` runs SMAG for several gamma (Figure 2) into ``out/<dataset>/smag-gamma/``.
* :func:`tables` and :func:`plots` turn the run folders into a table of final training objective,
  PU risk and test accuracy (mean and sample SD over seeds, rank of each method) and training curves
  with SD bands (PNG).
* :func:`tune_pu` selects each method's settings from the grids of Section 5.1 by mean final training
  objective and writes the frozen configuration ``configs/pu.json`` that the benchmark reads.

Protocol: batch 64 positives + 64 unlabeled per iteration, pi_p = 0.5, hinge loss, linear model with
a bias, ridge 0.01 (the hinge PU risk is unbounded below without it), 40 epochs of ceil(n_u / 64)
iterations, every learning rate (inner and outer; eta0 and eta1 for SMAG) divided by 10 at epochs
12 and 24 (30% and 60% of the epochs), the training objective and test accuracy evaluated at the
method's output point after every epoch, outside optimizer time.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fullcomp.algorithms.dc import StepDecay, dc_sgd, sbcd, sdca, ssdc_adagrad, ssdc_spg
from fullcomp.algorithms.smag import smag
from fullcomp.datasets import images
from fullcomp.datasets.images import ImageData
from fullcomp.datasets.pu import PRIOR, RIDGE, PUData, accuracy, pu_problem, pu_risk, pu_split
from fullcomp.errors import DataError, FullcompError, OptionError, OracleError
from fullcomp.experiments.harness import (
    TableFiles,
    add_config,
    add_methods,
    add_no_progress,
    add_seeds,
    add_typed,
    argparse_type,
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
from fullcomp.model.dmax import DMaxProblem
from fullcomp.report import protocol_runs
from fullcomp.run import History, Result, write_atomic

#: Tag written into every run's summary.json, so tables() reads only this protocol's folders.
PROTOCOL = "pu"
DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "pu.json"
FINAL_SEEDS = (0, 1, 2, 3)
TUNING_SEEDS = (100,)
EPOCHS = 40
DECAY_AT = (0.3, 0.6)  # fractions of the epochs: 12 and 24 of 40
BATCH = 64
#: The configuration's settings for a data set it was not tuned on.
FALLBACK_DATASET = "mnist5k"

# ------------------------------------------------------------------------------------------------ data


@dataclass(frozen=True)
class Dataset:
    """A data set of the protocol: its label and loader (``loader(path)``; digits ignores the path)."""

    key: str
    label: str
    loader: Callable[[Any], ImageData]
    needs_path: bool = True


DATASETS: dict[str, Dataset] = {
    d.key: d
    for d in (
        Dataset("digits", "digits (sklearn)", lambda path: images.digits(), needs_path=False),
        Dataset("mnist5k", "MNIST-5k", images.mnist5k),
        Dataset("mnist", "MNIST", images.mnist),
        Dataset("fashion-mnist", "Fashion-MNIST", images.fashion_mnist),
        Dataset("cifar10", "CIFAR-10", images.cifar10),
        Dataset("fer2013", "FER2013", images.fer2013),
    )
}


def detect_dataset(path: str | os.PathLike | None) -> str:
    """The data set a path holds, from its file names (IDX files count as MNIST unless 'fashion' is in the path)."""
    if path is None:
        return "digits"
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p} does not exist; pass a data folder or file, or omit --data for sklearn's digits")
    names = {f.name for f in p.iterdir()} if p.is_dir() else {p.name}
    if any(n.startswith("mnist_5k") for n in names):
        return "mnist5k"
    if any(n.startswith("train-images") for n in names):
        return "fashion-mnist" if "fashion" in str(p).lower() else "mnist"
    if "test_batch" in names or "cifar-10-batches-py" in names:
        return "cifar10"
    if any(n.lower().startswith("fer2013") for n in names):
        return "fer2013"
    raise DataError(
        f"cannot tell which data set {p} holds; pass --dataset ({', '.join(DATASETS)}) or a folder with "
        "mnist_5k.csv.gz, the MNIST IDX files, the CIFAR-10 python batches or fer2013.csv"
    )


def load_pu(dataset: str | None, path: str | os.PathLike | None) -> tuple[str, PUData]:
    """(data set key, PU data) for a key (None: detected from ``path``) and a path (None for digits)."""
    key = detect_dataset(path) if dataset in (None, "auto") else dataset
    if key not in DATASETS:
        raise OptionError(f"unknown data set {key!r}; choose from {', '.join(DATASETS)}")
    spec = DATASETS[key]
    if spec.needs_path and path is None:
        raise OptionError(f"{spec.label} is read from files: pass its folder as --data / path")
    return key, pu_split(spec.loader(path))


def batches_per_epoch(data: PUData, batch: int = BATCH) -> int:
    """Iterations per epoch: one pass over the unlabeled set S_u (the larger of S_+ and S_u)."""
    return math.ceil(len(data.unlabeled) / batch)


# --------------------------------------------------------------------------------------------- methods


def smag_run(
    problem: DMaxProblem,
    *,
    gamma: float,
    eta0: float,
    eta1: float,
    iters: int,
    decay: Callable[[int], float] | None = None,
    seed: int = 0,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = False,
) -> Result:
    """SMAG (Algorithm 2) with the protocol's learning-rate decay: ``fc.smag(..., decay=decay)``.

    The updates are exactly ``fc.smag``'s, with eta0 and eta1 both multiplied by ``decay(k)``.
    The output (``x``) is x_phi, as Algorithm 2 returns; ``x_t`` is the outer iterate.
    """
    with warnings.catch_warnings():
        # The grid includes eta1 > gamma/2, outside the analysis; the tuning decides, not a warning per run.
        warnings.simplefilter("ignore", UserWarning)
        # Both rates decay: the analysis takes eta0 proportional to eta1, and decaying eta1 alone lets x run
        # ahead of the slowed proximal estimates (measured on digits: x_t's objective then grows).
        res = smag(
            problem,
            gamma=gamma,
            eta0=eta0,
            eta1=eta1,
            decay=decay,
            iters=iters,
            seed=seed,
            callback=callback,
            eval_every=eval_every,
            progress=progress,
        )
    return Result(res.x_phi, res.history, {**res.info, "output": "x_phi"}, x_t=res.x, x_psi=res.x_psi)


@dataclass(frozen=True)
class Method:
    """A compared method: protocol name, the paper's label, the solver and the settings keys it reads."""

    name: str
    label: str
    solver: Callable[..., Result]
    keys: tuple[str, ...]

    def run(self, problem: DMaxProblem, settings: dict[str, Any], **options: Any) -> Result:
        return self.solver(problem, **{k: settings[k] for k in self.keys}, **options)


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("sgd", "SGD", dc_sgd, ("eta",)),
        Method("sdca", "SDCA", sdca, ("eta", "outer", "inner_iters")),
        Method("ssdc-spg", "SSDC-SPG", ssdc_spg, ("eta", "gamma", "inner_iters")),
        Method("ssdc-adagrad", "SSDC-Adagrad", ssdc_adagrad, ("eta", "gamma", "inner_iters")),
        Method("sbcd", "SBCD", sbcd, ("eta", "mu", "inner_iters", "outer")),
        Method("smag", "SMAG", smag_run, ("eta1", "eta0", "gamma")),
    )
}

#: Section 5.1's grids.  "eta" (eta1 for SMAG) is the learning rate of every method; "outer" of SDCA and
#: "eta0" of SMAG the outer rates; "inner_iters" the inner loops; mu of SBCD and gamma of SMAG from PROX,
#: and 1/gamma of SSDC from PROX (so gamma = 1/value).  SBCD's outer step (gamma/mu of AGD-SBCD) is not in
#: the paper's list: it is searched over AGD-SBCD's own {0.1, 1, 2}.
LR = [10.0, 1.0, 0.2, 0.1, 0.01, 0.001]
OUTER = [0.1, 0.5, 0.9]
INNER = [2, 5, 10]
PROX = [0.05, 0.1, 0.2, 0.5, 1.0, 2.0]
DEFAULT_GRIDS: dict[str, dict[str, list]] = {
    "sgd": {"eta": LR},
    "sdca": {"eta": LR, "outer": OUTER, "inner_iters": INNER},
    "ssdc-spg": {"eta": LR, "gamma": [1 / v for v in PROX], "inner_iters": INNER},
    "ssdc-adagrad": {"eta": LR, "gamma": [1 / v for v in PROX], "inner_iters": INNER},
    "sbcd": {"eta": LR, "mu": PROX, "inner_iters": INNER, "outer": [0.1, 1.0, 2.0]},
    "smag": {"eta1": LR, "eta0": OUTER, "gamma": PROX},
}


def method_names(methods: str | Iterable[str] | None) -> list[str]:
    """Validated method names in the paper's order (None: all six); a comma-separated string is accepted."""
    return select_methods(methods, METHODS)


def check_settings(method: str, settings: Any) -> dict[str, Any]:
    return {k: settings[k] for k in check_keys(method, settings, METHODS)}


# ----------------------------------------------------------------------------------------------- config


def load_config(config: str | os.PathLike | dict | None = None) -> dict[str, Any]:
    """The frozen settings: a path to JSON, a dict, or None (the committed ``configs/pu.json``)."""
    data, origin = read_config(config, DEFAULT_CONFIG, "pass the JSON written by tune_pu")
    return check_dataset_settings(data, origin, check_settings)


def settings_for(config: dict[str, Any], dataset: str, method: str) -> tuple[dict[str, Any], str]:
    """(settings, data set they were tuned on): the data set's own, else :data:`FALLBACK_DATASET`'s."""
    for key in (dataset, FALLBACK_DATASET):
        if method in config["settings"].get(key, {}):
            return dict(config["settings"][key][method]), key
    raise OptionError(f"the configuration has no settings for {method} (on {dataset} or {FALLBACK_DATASET})")


# ------------------------------------------------------------------------------------------------- runs


def evaluator(data: PUData, prior: float, ridge: float, per_epoch: int) -> Callable:
    """The per-epoch callback: training objective (risk + ridge), PU risk (7), train/test accuracy."""

    def evaluate(iterate: Any) -> dict[str, float]:
        w = iterate.x.reshape(-1)
        row = {
            "epoch": iterate.k / per_epoch,
            "train_objective": pu_risk(data, w, prior, ridge),
            "train_risk": pu_risk(data, w, prior, 0.0),
            "train_accuracy": accuracy(w, data.train_X, data.train_y),
            "test_accuracy": accuracy(w, data.test_X, data.test_y),
        }
        if "x_phi" in iterate.state:  # SMAG: also the outer iterate x_t
            row["train_objective_x"] = pu_risk(data, iterate.state["x"], prior, ridge)
        return row

    return evaluate


def run_method(
    method: str,
    data: PUData,
    settings: dict[str, Any],
    seed: int,
    *,
    epochs: int = EPOCHS,
    iters: int | None = None,
    batch: int = BATCH,
    prior: float = PRIOR,
    ridge: float = RIDGE,
    evaluate: bool = True,
    progress: bool = False,
) -> Result:
    """One protocol run of ``method`` from w = 0; ``iters`` caps the ``epochs`` budget (tests, smoke runs).

    With ``evaluate`` the objective, risk and accuracies are recorded after every epoch (else only at the
    start and the end).  ``result.info`` gains the fields :func:`tables` reads.
    """
    settings = check_settings(method, settings)
    problem = pu_problem(data, prior, batch, ridge)
    per_epoch = batches_per_epoch(data, batch)
    total = epochs * per_epoch if iters is None else min(iters, epochs * per_epoch)
    decay = StepDecay(tuple(round(f * epochs * per_epoch) for f in DECAY_AT))
    wall = time.perf_counter()
    try:
        result = METHODS[method].run(
            problem,
            settings,
            iters=total,
            decay=decay,
            seed=seed,
            callback=evaluator(data, prior, ridge, per_epoch),
            eval_every=per_epoch if evaluate else 10**9,
            progress=progress,
        )
    except OracleError as exc:
        if exc.result is None:
            raise
        # A diverged run is a result of the protocol (a setting too aggressive), not a failure of the bench:
        # keep its history and end it with an infinite objective, so tables rank it last and say so.
        result = exc.result
        k = int(result.info["iterations"])
        diverged = {"k": k, "epoch": k / per_epoch, "train_objective": math.inf, "train_risk": math.inf}
        result.history.append({**diverged, "train_accuracy": math.nan, "test_accuracy": math.nan})
        result.info["diverged_at"] = k
    result.info.update(
        protocol=PROTOCOL,
        method=method,
        label=METHODS[method].label,
        data=data.name,
        seed=seed,
        settings=settings,
        epochs=epochs,
        batches_per_epoch=per_epoch,
        budget_iters=total,
        decay_at=list(decay.milestones),
        batch=batch,
        prior=prior,
        ridge=ridge,
        n_positive=len(data.positive),
        n_unlabeled=len(data.unlabeled),
        wall_seconds=time.perf_counter() - wall,
        torch_threads=torch.get_num_threads(),
    )
    return result


def _line(folder: Path, result: Result) -> str:
    last, info = result.history[-1], result.info
    objective, test = last.get("train_objective", math.nan), last.get("test_accuracy", math.nan)
    return (
        f"{folder}: {info['iterations']} iterations in {info['wall_seconds']:.1f} s, "
        f"training objective {objective:.4f}, test accuracy {test:.3f}"
    )


def bench_pu(
    data_dir: str | os.PathLike | None = None,
    dataset: str | None = None,
    seeds: Iterable[int] | str = FINAL_SEEDS,
    methods: str | Iterable[str] | None = None,
    out_dir: str | os.PathLike = "runs/pu",
    *,
    config: str | os.PathLike | dict | None = None,
    epochs: int = EPOCHS,
    iters: int | None = None,
    batch: int = BATCH,
    prior: float = PRIOR,
    ridge: float = RIDGE,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Run every (method, seed) of the PU protocol; save ``out_dir/<dataset>/<method>/seed<k>/``.

    Parameters
    ----------
    data_dir : the data set's folder or file (None: scikit-learn's digits).
    dataset : a key of :data:`DATASETS` (default None: detected from the files).
    seeds : trial seeds (default 0-3, the paper's 4 trials), a list or a string like "0-3".
    methods : names from :data:`METHODS` (default all six), a list or a comma-separated string.
    config : frozen settings (default the committed ``configs/pu.json``); a data set it was not
        tuned on gets the MNIST-5k settings.
    epochs : passes over S_u (default 40); iters : optional cap on iterations per run.
    batch, prior, ridge : 64 points of S_+ and of S_u per draw, pi_p = 0.5, lambda = 0.01.

    Returns the run folders in run order.  Every run folder holds history.csv (one row per epoch),
    summary.json and x.npy (the output w).
    """
    key, data = load_pu(dataset, data_dir)
    names, seed_list, cfg = method_names(methods), check_seeds(seeds), load_config(config)
    folders = []
    for name in names:
        settings, tuned_on = settings_for(cfg, key, name)
        if tuned_on != key:
            emit(log, f"note: {name} uses the settings tuned on {tuned_on}")
        for seed in seed_list:
            result = run_method(
                name, data, settings, seed, epochs=epochs, iters=iters, batch=batch, prior=prior, ridge=ridge,
                progress=progress,
            )  # fmt: skip
            result.info.update(dataset=key, tuned_on=tuned_on)
            folder = result.save(Path(out_dir) / key / name / f"seed{seed}")
            folders.append(folder)
            emit(log, _line(folder, result))
    return folders


def gamma_ablation(
    data_dir: str | os.PathLike | None = None,
    dataset: str | None = None,
    gammas: Sequence[float] = tuple(PROX),
    seeds: Iterable[int] | str = FINAL_SEEDS,
    out_dir: str | os.PathLike = "runs/pu",
    *,
    config: str | os.PathLike | dict | None = None,
    epochs: int = EPOCHS,
    iters: int | None = None,
    batch: int = BATCH,
    prior: float = PRIOR,
    ridge: float = RIDGE,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Figure 2: SMAG with each gamma (default Section 5.1's grid), eta0 and eta1 as configured.

    Runs go to ``out_dir/<dataset>/smag-gamma/gamma<g>/seed<k>/``.
    """
    key, data = load_pu(dataset, data_dir)
    base, tuned_on = settings_for(load_config(config), key, "smag")
    folders = []
    for gamma in gammas:
        gamma = float(gamma)
        if not (math.isfinite(gamma) and gamma > 0):
            raise OptionError(f"gammas must be positive numbers, got {gamma!r}")
        for seed in check_seeds(seeds):
            settings = {**base, "gamma": gamma}
            result = run_method(
                "smag", data, settings, seed, epochs=epochs, iters=iters, batch=batch, prior=prior, ridge=ridge
            )
            result.info.update(dataset=key, tuned_on=tuned_on, ablation="gamma")
            folder = result.save(Path(out_dir) / key / "smag-gamma" / f"gamma{gamma:g}" / f"seed{seed}")
            folders.append(folder)
            emit(log, _line(folder, result))
    return folders


# ----------------------------------------------------------------------------------------------- tuning


def candidate_points(grid: dict[str, list], search: str, score: Callable[[dict], float], sweeps: int = 2) -> None:
    """Call ``score(settings)`` on the points of ``grid`` that ``search`` visits.

    ``"grid"``: the whole product.  ``"coordinate"``: start at every axis's middle value and, ``sweeps``
    times, scan one axis at a time over all its values with the others at the best point so far (each
    axis is searched in full, the product is not).  ``score`` caches, so a revisited point costs nothing.
    """
    if search == "grid":
        for values in itertools.product(*grid.values()):
            score(dict(zip(grid, values)))
        return
    if search != "coordinate":
        raise OptionError(f"search must be 'grid' (the full product) or 'coordinate' (axis by axis), got {search!r}")
    best = {k: v[len(v) // 2] for k, v in grid.items()}
    for _ in range(sweeps):
        for axis, values in grid.items():
            points = [{**best, axis: v} for v in values]
            scores = [score(p) for p in points]
            best = points[int(np.argmin(scores))]


def tune_pu(
    data_dir: str | os.PathLike | None = None,
    dataset: str | None = None,
    methods: str | Iterable[str] | None = None,
    seeds: Iterable[int] | str = TUNING_SEEDS,
    *,
    grids: dict[str, dict[str, list]] | None = None,
    search: str = "grid",
    sweeps: int = 2,
    config_path: str | os.PathLike | None = DEFAULT_CONFIG,
    epochs: int = EPOCHS,
    iters: int | None = None,
    batch: int = BATCH,
    prior: float = PRIOR,
    ridge: float = RIDGE,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Select each method's settings on ``dataset`` by mean final training objective over the tuning seeds.

    The points of each method's grid (default :data:`DEFAULT_GRIDS`, Section 5.1) that ``search``
    visits (default "grid": all of them; "coordinate": ``sweeps`` axis-by-axis sweeps, see
    :func:`candidate_points`) run the full protocol on each seed (default 100, none of the final
    trial seeds); a run that diverges scores +inf; ties go to the first point tried.  The selection
    is merged into ``config_path`` (the other data sets' settings are kept) together with every
    candidate's scores, and returned.
    """
    key, data = load_pu(dataset, data_dir)
    names, seed_list = method_names(methods), check_seeds(seeds)
    grids = copy.deepcopy(DEFAULT_GRIDS if grids is None else grids)
    existing: dict[str, Any] = {"settings": {}}
    if config_path is not None and Path(config_path).is_file():
        existing = load_config(config_path)
    chosen, record = {}, {}
    for name in names:
        grid = grids.get(name)
        if grid is None:  # a method without a grid keeps the configuration's settings
            continue
        tried: list[dict[str, Any]] = []
        started = time.perf_counter()

        def score(settings: dict[str, Any], name: str = name, tried: list = tried) -> float:
            for entry in tried:
                if entry["settings"] == settings:
                    return entry["mean"]
            scores = []
            for seed in seed_list:
                try:
                    result = run_method(
                        name, data, settings, seed, epochs=epochs, iters=iters, batch=batch, prior=prior,
                        ridge=ridge, evaluate=False,
                    )  # fmt: skip
                    value = float(result.history[-1]["train_objective"])
                except FullcompError:
                    value = math.inf
                scores.append(value if math.isfinite(value) else math.inf)
            tried.append({"settings": settings, "train_objective": scores, "mean": float(np.mean(scores))})
            return tried[-1]["mean"]

        candidate_points(grid, search, score, sweeps)
        best = min(tried, key=lambda t: t["mean"])
        edge = [k for k, v in best["settings"].items() if len(grid[k]) > 1 and v in (grid[k][0], grid[k][-1])]
        chosen[name] = best["settings"]
        record[name] = {"chosen": best["settings"], "at_grid_edge": edge, "candidates": tried}
        emit(
            log,
            f"tune {key}/{name}: {best['settings']} mean final training objective {best['mean']:.5f} "
            f"({len(tried)} candidates, {time.perf_counter() - started:.0f} s)",
        )
    out = copy.deepcopy(existing)
    out["settings"].setdefault(key, {}).update(chosen)
    out.setdefault("tuning", {})[key] = {
        "data": data.name,
        "criterion": "mean final training objective (PU risk (7) + ridge) over the tuning seeds",
        "tuning_seeds": seed_list,
        "epochs": epochs,
        "budget_iters": iters,
        "batch": batch,
        "prior": prior,
        "ridge": ridge,
        "grids": grids,
        "search": search,
        "sweeps": sweeps if search == "coordinate" else None,
        "methods": record,
        "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    out["about"] = "Frozen PU protocol settings (fullcomp.experiments.pu); written by tune_pu."
    if config_path is not None:
        write_atomic(config_path, json.dumps(out, indent=1) + "\n")
    return out


# ------------------------------------------------------------------------------------------ tables, plots


@dataclass
class PURun:
    """A run folder of this protocol: its summary and history."""

    path: Path
    summary: dict
    history: History

    @property
    def dataset(self) -> str:
        return str(self.summary.get("dataset", self.summary.get("data", "")))

    @property
    def method(self) -> str:
        return str(self.summary["method"])

    @property
    def ablation(self) -> bool:
        return self.summary.get("ablation") == "gamma"

    @property
    def gamma(self) -> float:
        return float(self.summary["settings"]["gamma"])

    def last(self, column: str) -> float:
        """The final value of a column: that of the last evaluation, the divergence row for a diverged run."""
        if column not in self.history.columns:
            return math.nan
        if "diverged_at" in self.summary:
            return float(self.history[-1].get(column, math.nan))
        values = self.history.column(column)
        finite = values[np.isfinite(values)]
        return float(finite[-1]) if finite.size else math.nan


def find_runs(out_dir: str | os.PathLike) -> list[PURun]:
    """Every run folder of this protocol under ``out_dir`` (summary.json with protocol "pu" + history.csv)."""
    return [PURun(*run) for run in protocol_runs(out_dir, PROTOCOL, "fullcomp bench pu")]


def _mean_sd(values: list[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return math.nan, math.nan
    if np.isinf(a).any():
        return math.inf, math.nan
    # A diverged seed makes the mean non-finite on purpose: it must not vanish from the table.
    return float(a.mean()), (float(a.std(ddof=1)) if a.size > 1 else math.nan)


COLUMNS = (
    ("train_objective", "Training objective", 4),
    ("train_risk", "PU risk (7)", 4),
    ("test_accuracy", "Test accuracy", 3),
    ("wall_seconds", "Seconds/run", 1),
)


def _groups(runs: list[PURun], ablation: bool) -> dict[tuple, list[PURun]]:
    groups: dict[tuple, list[PURun]] = {}
    for run in runs:
        if run.ablation != ablation:
            continue
        key = (run.dataset, run.gamma) if ablation else (run.dataset, run.method)
        groups.setdefault(key, []).append(run)
    order = {m: i for i, m in enumerate(METHODS)}
    keys = sorted(groups, key=lambda k: (k[0], k[1] if ablation else order.get(k[1], 99)))
    return {k: by_seed(groups[k]) for k in keys}


def _row(dataset: str, runs: list[PURun]) -> dict[str, Any]:
    first = runs[0].summary
    row: dict[str, Any] = {
        "dataset": dataset,
        "data": first.get("data", ""),
        **seed_columns(runs),
        "epochs": first.get("epochs"),
        "iterations": first.get("iterations"),
    }
    for key, _, _ in COLUMNS:
        values = [float(r.summary.get(key, math.nan)) if key == "wall_seconds" else r.last(key) for r in runs]
        row[f"{key}_mean"], row[f"{key}_sd"] = _mean_sd(values)
    return row


def summarize(out_dir: str | os.PathLike) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(method rows, gamma-ablation rows): mean and sample SD over seeds of the final values, and the rank
    of each method's mean final training objective within its data set (1 = lowest)."""
    runs = find_runs(out_dir)
    rows = []
    for (dataset, method), group in _groups(runs, False).items():
        label = METHODS[method].label if method in METHODS else method
        rows.append({"method": method, "label": label, **_row(dataset, group)})
    for dataset in {r["dataset"] for r in rows}:
        block = [r for r in rows if r["dataset"] == dataset]
        ordered = sorted(block, key=lambda r: (not math.isfinite(r["train_objective_mean"]), r["train_objective_mean"]))
        for rank, r in enumerate(ordered, start=1):
            r["rank"] = rank
    ablation = [{"gamma": g, **_row(dataset, group)} for (dataset, g), group in _groups(runs, True).items()]
    return rows, ablation


def _markdown(rows: list[dict[str, Any]], ablation: list[dict[str, Any]]) -> str:
    lines = [
        "# PU learning protocol tables",
        "",
        "Final values after the last epoch, mean ± sample SD over seeds. Training objective = PU risk (7) "
        "+ ridge/2 ||w||^2, the function every method minimizes; rank 1 = lowest mean training objective. "
        "Bold: best mean per column (no significance claim).",
    ]
    for dataset in sorted({r["dataset"] for r in rows}):
        block = [r for r in rows if r["dataset"] == dataset]
        lines += ["", f"## {block[0]['data']} ({block[0]['epochs']} epochs, {block[0]['iterations']} iterations)", ""]
        lines.append("| Method | Seeds | Rank | " + " | ".join(title for _, title, _ in COLUMNS) + " |")
        lines.append("|---|---:|---:|" + "---:|" * len(COLUMNS))
        best = {key: best_mean(block, key, key == "test_accuracy") for key, _, _ in COLUMNS}
        for r in sorted(block, key=lambda r: list(METHODS).index(r["method"]) if r["method"] in METHODS else 99):
            cells = [cell(r[f"{k}_mean"], r[f"{k}_sd"], d, r[f"{k}_mean"] == best[k]) for k, _, d in COLUMNS]
            lines.append(f"| {r['label']} | {r['n_seeds']} | {r['rank']} | " + " | ".join(cells) + " |")
    for dataset in sorted({r["dataset"] for r in ablation}):
        block = [r for r in ablation if r["dataset"] == dataset]
        lines += ["", f"## {block[0]['data']}: SMAG gamma ablation (Figure 2)", ""]
        lines.append("| gamma | Seeds | " + " | ".join(title for _, title, _ in COLUMNS) + " |")
        lines.append("|---:|---:|" + "---:|" * len(COLUMNS))
        for r in block:
            cells = [cell(r[f"{k}_mean"], r[f"{k}_sd"], d) for k, _, d in COLUMNS]
            lines.append(f"| {r['gamma']:g} | {r['n_seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def tables(out_dir: str | os.PathLike) -> TableFiles:
    """Write ``out_dir/pu-tables.csv`` (one row per data set and method, ablation rows with their gamma)
    and ``out_dir/pu-tables.md``; returns their paths and the method rows."""
    rows, ablation = summarize(out_dir)
    return write_tables(out_dir, "pu-tables", rows + ablation, _markdown(rows, ablation), rows)


def epoch_curve(runs: list[PURun], column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(epochs, mean, sample SD) of ``column`` over the seeds, on the epochs every seed recorded."""
    curves = []
    for run in runs:
        if column not in run.history.columns or "epoch" not in run.history.columns:
            return None
        e, v = run.history.column("epoch"), run.history.column(column)
        keep = np.isfinite(e) & np.isfinite(v)
        curves.append(dict(zip(np.round(e[keep], 6), v[keep])))
    common = sorted(set.intersection(*(set(c) for c in curves)))
    if len(common) < 2:
        return None
    values = np.array([[c[e] for e in common] for c in curves])
    sd = values.std(axis=0, ddof=1) if len(curves) > 1 else np.full(len(common), np.nan)
    return np.array(common), values.mean(axis=0), sd


#: A curve whose mean rises above this multiple of its start value has blown up: drawn, but left out of the
#: axis limits (one diverging setting would otherwise flatten every other curve) and labelled so.
BLOWN_UP = 5.0


def _panel(
    ax: Any, series: list[tuple[str, list[PURun], str]], column: str, ylabel: str, from_epoch: float = 0.0
) -> None:
    """Mean curves with sample-SD bands from ``from_epoch`` on; y-limits fit the curves that did not blow up."""
    low, high = math.inf, -math.inf
    for label, runs, color in series:
        curve = epoch_curve(runs, column)
        if curve is None:
            ax.plot([], [], color=color, label=f"{label}: diverged")
            continue
        epochs, mean, sd = curve
        blown = bool(mean.max() > BLOWN_UP * max(abs(mean[0]), 1e-12)) or any("diverged_at" in r.summary for r in runs)
        keep = epochs >= from_epoch
        epochs, mean, sd = epochs[keep], mean[keep], sd[keep]
        text = f"{label} ({len(runs)} seeds{', blew up' if blown else ''})"
        ax.plot(epochs, mean, color=color, label=text, linewidth=1.4)
        if np.isfinite(sd).any():
            ax.fill_between(epochs, mean - sd, mean + sd, color=color, alpha=0.2, linewidth=0)
        if not blown and mean.size:
            band = np.where(np.isfinite(sd), sd, 0.0)
            low, high = min(low, float((mean - band).min())), max(high, float((mean + band).max()))
    if math.isfinite(low) and high > low:
        pad = 0.05 * (high - low)
        ax.set_ylim(low - pad, high + pad)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def plots(out_dir: str | os.PathLike) -> list[Path]:
    """Save ``out_dir/<dataset>/curves.png`` and, where ablation runs exist, ``gamma-ablation.png``.

    Three panels, one curve per method (per gamma), mean ± sample SD band over the seeds: the training
    objective over all epochs, the same over the last 60% of the epochs (the differences at the end are
    small next to the first epochs' drop), and the test accuracy.
    """
    from matplotlib.figure import Figure

    runs = find_runs(out_dir)
    saved = []
    for ablation, name in ((False, "curves.png"), (True, "gamma-ablation.png")):
        groups = _groups(runs, ablation)
        for dataset in sorted({k[0] for k in groups}):
            keys = [k for k in groups if k[0] == dataset]
            if ablation:
                series = [(f"gamma={k[1]:g}", groups[k], f"C{i}") for i, k in enumerate(keys)]
            else:
                colors = {m: f"C{i}" for i, m in enumerate(METHODS)}
                series = [(METHODS[k[1]].label, groups[k], colors[k[1]]) for k in keys if k[1] in METHODS]
            epochs = float(groups[keys[0]][0].summary.get("epochs") or 0)
            fig = Figure(figsize=(13, 3.9), layout="constrained")
            full, zoom, accuracy_ax = fig.subplots(1, 3)
            _panel(full, series, "train_objective", "training objective (PU risk + ridge)")
            _panel(zoom, series, "train_objective", "training objective, last 60% of epochs", 0.4 * epochs)
            _panel(accuracy_ax, series, "test_accuracy", "test accuracy")
            if full.get_legend_handles_labels()[0]:
                full.legend(fontsize="small")
            data = groups[keys[0]][0].summary.get("data", dataset)
            what = "SMAG gamma ablation" if ablation else "PU learning"
            fig.suptitle(f"{data}: {what} (mean ± sample SD over seeds)")
            path = Path(out_dir) / dataset / name
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=80)
            saved.append(path)
    return saved


# ------------------------------------------------------------------------------------------------- CLI


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise OptionError(f"expected a positive integer, got {text}")
    return value


def _floats(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or any(not (math.isfinite(v) and v > 0) for v in values):
        raise OptionError(f"expected comma-separated positive numbers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fullcomp bench pu`` (see :func:`run_from_args`)."""
    parser.add_argument("--data", help="data folder or file (mnist_5k.csv.gz, MNIST/Fashion-MNIST IDX files, "
                        "CIFAR-10 python batches, fer2013.csv); omit for scikit-learn's digits")  # fmt: skip
    parser.add_argument("--dataset", choices=("auto", *DATASETS), default="auto", help="default: from the files")
    parser.add_argument("--out", default="runs/pu", help="output folder (default runs/pu)")
    add_seeds(parser, FINAL_SEEDS, "default 0-3 (4 trials)")
    add_methods(parser, method_names, f"subset of {','.join(METHODS)} (default all)")
    add_typed(parser, "--epochs", _positive_int, EPOCHS, "passes over S_u (default 40)")
    add_typed(parser, "--iters", _positive_int, None, "optional cap on iterations per run")
    add_typed(parser, "--batch", _positive_int, BATCH, "points of S_+ and S_u per draw (64)")
    parser.add_argument("--ridge", type=float, default=RIDGE, help="lambda of lambda/2 ||w||^2 (default 0.01)")
    add_config(parser, DEFAULT_CONFIG)
    parser.add_argument(
        "--gamma-ablation",
        type=argparse_type(_floats),
        default=None,
        metavar="GAMMAS",
        help="instead of the methods, run SMAG for each gamma, e.g. 0.05,0.1,0.2,0.5,1,2 (Figure 2)",
    )
    parser.add_argument(
        "--tune", action="store_true", help="select the settings on --seeds over Section 5.1's grids, write --config"
    )
    parser.add_argument(
        "--search",
        choices=("grid", "coordinate"),
        default="grid",
        help="with --tune: the full grids (default) or two axis-by-axis sweeps over them",
    )
    add_typed(parser, "--threads", _positive_int, 1, "torch threads (default 1: the batches are small)")
    add_no_progress(parser)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the benchmark (or the gamma ablation, or the tuning) from parsed options, then write the
    tables and plots of ``--out``; prints one line per run, the wall time and the files written."""
    log = lambda line: print(line, flush=True)  # noqa: E731
    torch.set_num_threads(args.threads)
    common = dict(epochs=args.epochs, iters=args.iters, batch=args.batch, ridge=args.ridge)
    started = time.perf_counter()
    if args.tune:
        path = args.config or DEFAULT_CONFIG
        tune_pu(args.data, args.dataset, args.methods, args.seeds, search=args.search, config_path=path, log=log,
                **common)  # fmt: skip
        print(f"wrote {path} in {time.perf_counter() - started:.0f} s")
        return 0
    if args.gamma_ablation is not None:
        gamma_ablation(args.data, args.dataset, args.gamma_ablation, args.seeds, args.out, config=args.config,
                       log=log, **common)  # fmt: skip
    else:
        bench_pu(args.data, args.dataset, args.seeds, args.methods, args.out, config=args.config,
                 progress=not args.no_progress, log=log, **common)  # fmt: skip
    print(f"wall time {time.perf_counter() - started:.1f} s")
    write_report(args.out, tables, plots)
    return 0


__all__ = [
    "PROTOCOL",
    "METHODS",
    "DATASETS",
    "DEFAULT_GRIDS",
    "DEFAULT_CONFIG",
    "bench_pu",
    "gamma_ablation",
    "tune_pu",
    "run_method",
    "smag_run",
    "load_pu",
    "detect_dataset",
    "summarize",
    "tables",
    "plots",
    "add_arguments",
    "run_from_args",
]
