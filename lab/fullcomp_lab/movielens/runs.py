"""Runs of the MovieLens protocol: one method and seed, and the whole bench with resume."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from fullcomp.errors import OptionError
from fullcomp.run import Result, write_atomic
from fullcomp.run import clock as budget_clock
from fullcomp_lab.completion import Completion, base_radius, completion_problem
from fullcomp_lab.harness import ProtocolConfig, check_seeds, emit
from fullcomp_lab.movielens.config import (
    BATCH,
    CLOCK,
    FINAL_SEEDS,
    METHODS,
    PROTOCOL,
    check_settings,
    load_config,
    load_data,
    method_names,
    objective_names,
)

# ------------------------------------------------------------------------------------------------- runs


def run_method(
    method: str,
    completion: Completion,
    settings: dict[str, Any],
    seed: int,
    seconds: float | None,
    *,
    iters: int | None = None,
    eval_every: int | None = 5,
    progress: bool = False,
    clock: str = CLOCK,
) -> Result:
    """One protocol run: ``method`` on ``completion.problem`` with ``completion.evaluate`` as the callback.

    The evaluation (train/val/test group losses and the training objective) is
    recorded every ``eval_every`` updates and at the final state, outside
    optimizer time.  The run is single-threaded (torch and BLAS) and, with
    ``clock="cpu"`` (the default), optimizer seconds are this process's CPU
    seconds, so budgets mean the same on a busy shared machine as on an idle
    one; ``clock="wall"`` measures elapsed time instead.  ``result.info`` gains
    the protocol fields that :func:`tables` reads (objective, settings, radius,
    data, accepted updates, seconds per accepted update).
    """
    if seconds is None and iters is None:
        raise OptionError("give a budget: seconds (optimizer seconds) and/or iters (an update cap)")
    settings = check_settings(method, settings)
    spec = METHODS[method]
    wall = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with budget_clock(clock):
            result = spec.run(
                completion.problem,
                settings,
                seed=seed,
                seconds=seconds,
                callback=completion.evaluate,
                iters=iters,
                eval_every=eval_every,
                progress=progress,
            )
    finally:
        torch.set_num_threads(threads)
    wall = time.perf_counter() - wall
    data = completion.data
    updates = int(result.info["iterations"])
    # The final row's time is the optimizer time of the last accepted state: an update that crossed the
    # budget was discarded, and its time is in info["optimizer_seconds"] but not in this figure.
    accepted = float(result.history[-1]["time"]) if len(result.history) else math.nan
    result.info.update(
        spec.run_fields(PROTOCOL, seed, settings),
        objective=completion.objective,
        radius=completion.radius,
        radius_scale=completion.radius / base_radius(data),
        data=data.label,
        data_source=data.source,
        split_seed=data.split_seed,
        shape=list(data.shape),
        budget_seconds=seconds,
        budget_iters=iters,
        eval_every=eval_every,
        accepted_updates=updates,
        accepted_seconds=accepted,
        seconds_per_update=accepted / updates if updates else math.nan,
        wall_seconds=wall,
        torch_threads=1,
    )
    return result


def save_run(result: Result, folder: str | os.PathLike, save_x: bool = True) -> Path:
    """``Result.save(folder)``; with ``save_x=False`` only history.csv and summary.json (no dense x.npy)."""
    if save_x and result.x is not None:
        return result.save(folder)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    result.history.to_csv(folder / "history.csv")
    write_atomic(folder / "summary.json", json.dumps(result.summary(), indent=1, default=str))
    return folder


def _check_budget(seconds: float | None, iters: int | None) -> None:
    if seconds is None and iters is None:
        raise OptionError("give a budget: budget_seconds (optimizer seconds) and/or iters (an update cap)")
    if seconds is not None and (isinstance(seconds, bool) or not (math.isfinite(seconds) and seconds > 0)):
        raise OptionError(f"budget_seconds must be a positive number of optimizer seconds, got {seconds!r}")


def bench_movielens(
    data_dir: str | os.PathLike | None,
    objective: str | Sequence[str] = "max",
    budget_seconds: float | None = 120.0,
    seeds: Iterable[int] | str = FINAL_SEEDS,
    methods: str | Iterable[str] | None = None,
    out_dir: str | os.PathLike = "runs/movielens",
    radius_scale: float | None = None,
    eval_every: int = 5,
    *,
    config: str | os.PathLike | dict | ProtocolConfig | None = None,
    iters: int | None = None,
    batch: int = BATCH,
    synthetic: dict[str, Any] | None = None,
    cache: bool | str | os.PathLike = True,
    save_x: bool = True,
    clock: str = CLOCK,
    resume: bool = True,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Run every (method, seed) of the MovieLens protocol and save each run folder.

    Parameters
    ----------
    data_dir
        MovieLens folder (100K or 1M layout) or None for synthetic data (``synthetic``).
    objective
        "max", "cvar", "both" or a list of them.
    budget_seconds
        Optimizer-time budget per run (Appendix A.2: 120 for 100K, 1200 for 1M).
    seeds
        Stochastic seeds (the paper's final seeds 2000-2004), or a string such as "2000-2004".
    methods
        Names from :data:`METHODS` (default all nine), a list or a comma-separated string.
    out_dir
        Runs go to ``out_dir/<objective>/<method>/seed<k>/`` (history.csv, summary.json, x.npy).
    radius_scale
        Multiple of ``base_radius(data)``; default the configuration's validated scale.
    eval_every
        Updates between evaluations (the final state is always evaluated).
    config
        Frozen settings (path, dict or :class:`ProtocolConfig`; default the committed
        ``configs/movielens.json``).
    iters
        Optional cap on updates (tests, smoke runs); the time budget still applies.
    batch
        Sampled training ratings per group and update (1,024 in the paper).
    synthetic
        ``synthetic_ratings`` options when ``data_dir`` is None (default: MovieLens-100K's size).
    cache
        Where the MovieLens split is saved (see :func:`fullcomp_lab.datasets.movielens`).
    save_x
        Write the dense final iterate x.npy (P Q floats per run: 13 MB for 100K, 180 MB for 1M).
    clock
        "cpu" (default: optimizer seconds are the single-threaded run's CPU seconds, unaffected by
        other work on the machine) or "wall" (elapsed seconds, as the paper measured on a dedicated GPU).
    resume
        Keep run folders already finished with the same options instead of running them again.
    progress, log
        ``progress`` shows tqdm bars per run; ``log(line)`` receives one line per finished run.

    Returns
    -------
    list[Path]
        The run folders, in run order.

    Notes
    -----
    The data is loaded once; the problem is
    declared once per (objective, method), structured (Jacobians on the training
    entries) for every method, and every run starts from zero.
    """
    _check_budget(budget_seconds, iters)
    objectives, names, seed_list = objective_names(objective), method_names(methods), check_seeds(seeds)
    cfg = load_config(config)
    if radius_scale is not None and not (math.isfinite(radius_scale) and radius_scale > 0):
        raise OptionError(f"radius_scale must be a positive number, got {radius_scale!r}")
    data = load_data(data_dir, synthetic, cache)
    tuned_on = cfg.meta.get("data")
    if tuned_on and tuned_on != data.label:
        emit(log, f"note: settings in the configuration were chosen for {tuned_on}, running on {data.label}")
    out = Path(out_dir)
    folders = []
    for obj in objectives:
        scale = cfg.fields["radius_scale"][obj] if radius_scale is None else float(radius_scale)
        for name in names:
            settings = cfg.settings_for(obj, name)
            completion = completion_problem(data, obj, scale, batch=batch, structured=True)
            for seed in seed_list:
                folder = out / obj / name / f"seed{seed}"
                wanted = {
                    "budget_seconds": budget_seconds,
                    "budget_iters": iters,
                    "settings": settings,
                    "radius_scale": scale,
                    "data": data.label,
                    "clock": clock,
                    "eval_every": eval_every,
                }
                if resume and _finished(folder, wanted):
                    # Interrupted protocols resume: a run saved with the same options is not repeated.
                    emit(log, f"{obj}/{name}/seed{seed}: kept the finished run in {folder}")
                    folders.append(folder)
                    continue
                result = run_method(
                    name,
                    completion,
                    settings,
                    seed,
                    budget_seconds,
                    iters=iters,
                    eval_every=eval_every,
                    progress=progress,
                    clock=clock,
                )
                folder = save_run(result, folder, save_x)
                folders.append(folder)
                last = result.history[-1]
                emit(
                    log,
                    f"{obj}/{name}/seed{seed}: {result.info['accepted_updates']} updates, "
                    f"{result.info['seconds_per_update']:.4g} s/update, train objective "
                    f"{last.get('train_objective', math.nan):.4f}, test worst {last.get('test_worst', math.nan):.4f}",
                )
    return folders


def _finished(folder: Path, wanted: dict[str, Any]) -> bool:
    """Whether ``folder`` holds a complete run made with the ``wanted`` summary fields."""
    path = folder / "summary.json"
    if not (path.is_file() and (folder / "history.csv").is_file()):
        return False
    try:
        info = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    for key, value in wanted.items():
        saved = info.get(key)
        if isinstance(value, float) and isinstance(saved, (int, float)):
            if not math.isclose(value, saved, rel_tol=1e-12):
                return False
        elif json.loads(json.dumps(value, default=str)) != saved:
            return False
    return True
