"""Runs of the pAUC-fairness protocol: one method and seed, settings selection, and the bench."""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fullcomp.errors import FullcompError
from fullcomp.run import Result
from fullcomp_lab.datasets.tabular import TabularData
from fullcomp_lab.harness import ProtocolConfig, Search, check_seeds, emit, grid_edges, search_points
from fullcomp_lab.metrics import fairness_report
from fullcomp_lab.pauc.config import (
    DEFAULT_BUDGETS,
    DEFAULT_CONFIG,
    DEFAULT_GRIDS,
    FINAL_SEEDS,
    LAMBDA0,
    METHODS,
    PROTOCOL,
    SCHEMA,
    TUNING_SEEDS,
    Workload,
    check_settings,
    configured_workload,
    grid_settings,
    load,
    load_config,
    method_names,
)
from fullcomp_lab.pauc.problem import MARGIN, RHO, THRESHOLD, pauc_problem, scores


def evaluate(model: nn.Module, data: TabularData, splits: Sequence[str] = ("val", "test")) -> dict[str, float]:
    """Metrics of :func:`fullcomp_lab.metrics.fairness_report` on each split, keys prefixed ``val_``, ``test_``."""
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
    workload: Workload,
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
    alpha = settings["alpha"] if "alpha" in spec.protocol_keys else 0.0
    declared = pauc_problem(
        data.train.X,
        data.train.y,
        data.train.a,
        alpha=alpha,
        batch_pos=workload.batch_pos,
        batch_neg=workload.batch_neg,
    )

    def callback(iterate: Any) -> dict:
        return evaluate(iterate.x, data, splits)

    wall = time.perf_counter()
    result = spec.run(
        declared.problem,
        settings,
        iters=workload.iters,
        seed=seed,
        callback=callback,
        eval_every=eval_every or 10**9,
        progress=progress,
    )
    wall = time.perf_counter() - wall
    for row in result.history.rows:  # `fullcomp-lab report` reads objective_estimate as every run's objective
        row.setdefault("objective_estimate", row.get("phi_value", math.nan))
    final = result.history[-1]
    result.info.update(
        spec.run_fields(PROTOCOL, seed, settings),
        dataset=data.name,
        alpha=alpha,
        **{"rho": RHO, "margin": MARGIN, "lambda0": LAMBDA0, "threshold": THRESHOLD, **vars(workload)},
        wall_seconds=wall,
        metrics={k: final[k] for k in final if k.startswith(("val_", "test_"))},
        torch_threads=torch.get_num_threads(),
    )
    return result


def select_settings(
    data: TabularData,
    methods: str | Iterable[str] | None = None,
    *,
    grids: dict[str, dict[str, list]] | None = None,
    search: str | Search = "grid",
    seeds: Iterable[int] | str = TUNING_SEEDS,
    workload: Workload | None = None,
    config_path: str | os.PathLike | None = None,
    base_config: str | os.PathLike | dict | ProtocolConfig | None = None,
    pauc_tolerance: float = 0.01,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> ProtocolConfig:
    """Choose each method's settings on the *validation* split and freeze them (test data is never scored).

    Every point of ``grids[method]`` (default :data:`DEFAULT_GRIDS`) that ``search`` visits
    (:func:`~fullcomp_lab.harness.resolve_search`; "grid", all of them, by default) runs on each
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
    workload = workload or DEFAULT_BUDGETS.get(data.name, Workload(500))
    has_default = base_config is not None or DEFAULT_CONFIG.is_file()
    cfg = load_config(base_config) if has_default else SCHEMA.empty()
    record: dict[str, Any] = {}
    started = time.perf_counter()
    for name in names:

        def measure(point: dict, name: str = name) -> dict[str, Any]:
            settings = grid_settings(name, point)
            paucs, eods = [], []
            for seed in seed_list:
                try:
                    result = run_method(name, data, settings, seed, workload, eval_every=None, splits=("val",))
                    last = result.history[-1]
                    pauc, eod = float(last["val_pauc"]), float(last["val_eod"])
                except (FullcompError, KeyError):
                    pauc, eod = -math.inf, math.inf
                paucs.append(pauc if math.isfinite(pauc) else -math.inf)
                eods.append(eod if math.isfinite(eod) else math.inf)
            entry = {"grid": point, "settings": settings, "val_pauc": float(np.mean(paucs))}
            entry["val_eod"] = float(np.mean(eods))
            emit(
                log, f"select {data.name}/{name} {point}: val pAUC {entry['val_pauc']:.4f}, EOD {entry['val_eod']:.4f}"
            )
            return entry

        # The search is led by pAUC; the choice below also weighs EOD among the points it tried.
        tried = search_points(grids, name, search, measure, "grid", "val_pauc")
        top = max(t["val_pauc"] for t in tried)
        near = [t for t in tried if t["val_pauc"] >= top - pauc_tolerance]
        best = min(near, key=lambda t: t["val_eod"])  # first of equals: grid order breaks ties
        cfg.set(data.name, name, best["settings"])
        edge = grid_edges(grids[name], best["grid"])
        record[name] = {"chosen": best["grid"], "at_grid_edge": edge, "candidates": tried}
    cfg.set_field("budgets", data.name, vars(workload))
    cfg.meta.setdefault("selection", {})[data.name] = {
        "criterion": "lowest mean validation EOD among the candidates whose mean validation pAUC (normalized, "
        f"FPR <= 0.3) is within {pauc_tolerance} of the method's best",
        "pauc_tolerance": pauc_tolerance,
        "tuning_seeds": seed_list,
        "grids": {n: grids[n] for n in names},
        "methods": record,
        "seconds": time.perf_counter() - started,
        "selected_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    cfg.meta["about"] = "Frozen pAUC-fairness settings (fullcomp_lab.pauc), chosen on validation by select_settings."
    if config_path is not None:
        cfg.save(config_path)
    return cfg


def bench_pauc(
    data_dir: str | os.PathLike,
    seeds: Iterable[int] | str = FINAL_SEEDS,
    methods: str | Iterable[str] | None = None,
    out_dir: str | os.PathLike = "runs/pauc",
    *,
    config: str | os.PathLike | dict | ProtocolConfig | None = None,
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
    workload = configured_workload(cfg, data.name)
    if iters is not None:
        workload = Workload(int(iters), workload.batch_pos, workload.batch_neg)
    folders = []
    for name in names:
        settings = cfg.settings_for(data.name, name)
        for seed in seed_list:
            result = run_method(name, data, settings, seed, workload, eval_every=eval_every, progress=progress)
            folder = Path(out_dir) / data.name / name / f"seed{seed}"
            result.save(folder)
            folders.append(folder)
            m = result.info["metrics"]
            emit(
                log,
                f"{data.name}/{name}/seed{seed}: {workload.iters} iterations, "
                f"{result.info['wall_seconds']:.1f} s wall, "
                f"test pAUC {m['test_pauc']:.4f} EOD {m['test_eod']:.4f} EOP {m['test_eop']:.4f} DP {m['test_dp']:.4f}",
            )
    return folders
