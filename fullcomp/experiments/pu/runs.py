"""Runs of the PU protocol: one method and seed, the bench with resume, and the gamma ablation."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from fullcomp.datasets.pu import PUData, accuracy, pu_problem, pu_risk
from fullcomp.errors import OptionError, OracleError
from fullcomp.experiments.harness import ProtocolConfig, check_seeds, emit
from fullcomp.experiments.pu.config import (
    DECAY_AT,
    FINAL_SEEDS,
    METHODS,
    PROTOCOL,
    PROX,
    Workload,
    check_settings,
    load_config,
    load_pu,
    method_names,
)
from fullcomp.run import Result
from fullcomp.steps import StepDecay

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
        if hasattr(iterate.state, "x_phi"):  # SMAG: also the outer iterate x_t
            row["train_objective_x"] = pu_risk(data, iterate.state.x, prior, ridge)
        return row

    return evaluate


def run_method(
    method: str,
    data: PUData,
    settings: dict[str, Any],
    seed: int,
    workload: Workload = Workload(),
    *,
    evaluate: bool = True,
    progress: bool = False,
) -> Result:
    """One protocol run of ``method`` from w = 0 under ``workload``.

    With ``evaluate`` the objective, risk and accuracies are recorded after every epoch (else only at the
    start and the end).  ``result.info`` gains the fields :func:`tables` reads.
    """
    spec = METHODS[method]
    settings = check_settings(method, settings)
    w = workload
    problem = pu_problem(data, w.prior, w.batch, w.ridge)
    per_epoch = w.per_epoch(data)
    total = w.epochs * per_epoch if w.iters is None else min(w.iters, w.epochs * per_epoch)
    decay = StepDecay(tuple(round(f * w.epochs * per_epoch) for f in DECAY_AT))
    wall = time.perf_counter()
    try:
        result = spec.run(
            problem,
            settings,
            iters=total,
            decay=decay,
            seed=seed,
            callback=evaluator(data, w.prior, w.ridge, per_epoch),
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
        spec.run_fields(PROTOCOL, seed, settings),
        data=data.name,
        epochs=w.epochs,
        batches_per_epoch=per_epoch,
        budget_iters=total,
        decay_at=list(decay.milestones),
        batch=w.batch,
        prior=w.prior,
        ridge=w.ridge,
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


def _save(result: Result, folder: Path, key: str, tuned_on: str, log: Callable[[str], None] | None) -> Path:
    result.info.update(dataset=key, tuned_on=tuned_on)
    folder = result.save(folder)
    emit(log, _line(folder, result))
    return folder


def bench_pu(
    data_dir: str | os.PathLike | None = None,
    dataset: str | None = None,
    seeds: Iterable[int] | str = FINAL_SEEDS,
    methods: str | Iterable[str] | None = None,
    out_dir: str | os.PathLike = "runs/pu",
    *,
    config: str | os.PathLike | dict | ProtocolConfig | None = None,
    workload: Workload = Workload(),
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Run every (method, seed) of the PU protocol; save ``out_dir/<dataset>/<method>/seed<k>/``.

    Parameters
    ----------
    data_dir
        The data set's folder or file (None: scikit-learn's digits).
    dataset
        A key of :data:`DATASETS` (default None: detected from the files).
    seeds
        Trial seeds (default 0-3, the paper's 4 trials), a list or a string like "0-3".
    methods
        Names from :data:`METHODS` (default all six), a list or a comma-separated string.
    config
        Frozen settings (default the committed ``configs/pu.json``); a data set it was not
        tuned on gets the MNIST-5k settings.
    workload
        Epochs (default 40 passes over S_u), an optional cap on iterations per run, 64 points
        of S_+ and of S_u per draw, pi_p = 0.5 and lambda = 0.01.

    Returns
    -------
    list[Path]
        The run folders in run order.  Every run folder holds history.csv (one row per epoch),
        summary.json and x.npy (the output w).
    """
    key, data = load_pu(dataset, data_dir)
    names, seed_list, cfg = method_names(methods), check_seeds(seeds), load_config(config)
    folders = []
    for name in names:
        tuned_on = cfg.tuned_on(key, name)
        if tuned_on != key:
            emit(log, f"note: {name} uses the settings tuned on {tuned_on}")
        for seed in seed_list:
            result = run_method(name, data, cfg.settings_for(key, name), seed, workload, progress=progress)
            folders.append(_save(result, Path(out_dir) / key / name / f"seed{seed}", key, tuned_on, log))
    return folders


def gamma_ablation(
    data_dir: str | os.PathLike | None = None,
    dataset: str | None = None,
    gammas: Sequence[float] = tuple(PROX),
    seeds: Iterable[int] | str = FINAL_SEEDS,
    out_dir: str | os.PathLike = "runs/pu",
    *,
    config: str | os.PathLike | dict | ProtocolConfig | None = None,
    workload: Workload = Workload(),
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Figure 2: SMAG with each gamma (default Section 5.1's grid), eta0 and eta1 as configured.

    Runs go to ``out_dir/<dataset>/smag-gamma/gamma<g>/seed<k>/``.
    """
    key, data = load_pu(dataset, data_dir)
    cfg = load_config(config)
    tuned_on, base = cfg.tuned_on(key, "smag"), cfg.settings_for(key, "smag")
    folders = []
    for gamma in gammas:
        gamma = float(gamma)
        if not (math.isfinite(gamma) and gamma > 0):
            raise OptionError(f"gammas must be positive numbers, got {gamma!r}")
        for seed in check_seeds(seeds):
            result = run_method("smag", data, {**base, "gamma": gamma}, seed, workload)
            result.info["ablation"] = "gamma"
            folder = Path(out_dir) / key / "smag-gamma" / f"gamma{gamma:g}" / f"seed{seed}"
            folders.append(_save(result, folder, key, tuned_on, log))
    return folders
