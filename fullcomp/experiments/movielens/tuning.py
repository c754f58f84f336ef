"""Validation choice of the nuclear radius and grid tuning of every method's settings (Appendix A.4)."""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from fullcomp.datasets.ratings import RatingData
from fullcomp.errors import FullcompError, OptionError
from fullcomp.experiments.completion import Completion, completion_problem
from fullcomp.experiments.harness import ProtocolConfig, Search, check_seeds, emit, grid_edges, resolve_search
from fullcomp.experiments.movielens import config as protocol
from fullcomp.experiments.movielens.runs import _check_budget, run_method
from fullcomp.model.calculus import OuterCalculus
from fullcomp.oracles import dense
from fullcomp.oracles.tracked import TrackedModel

# ---------------------------------------------------------------------------------- radius and tuning


def reference_scales(completion: Completion, seeds: Iterable[int] = protocol.TUNING_SEEDS) -> dict[str, float]:
    """Scale-free units for the tuned step parameters, from minibatches at the zero start.

    ``jacobian_norm``: mean Frobenius norm of the stacked sampled Jacobian (clipping
    thresholds are multiples of it); ``direction_norm``: mean norm of J~^T g with g a
    subgradient of F at the sampled losses; ``step_reference`` = diameter / direction_norm
    (a PSG step of that size travels one diameter); ``curvature_reference`` =
    direction_norm / diameter (the prox-linear M and LiNASA beta that do the same).
    """
    problem = completion.problem
    model = TrackedModel(problem, "cpu", torch.float64, torch.Generator())
    calculus = OuterCalculus(problem.outer)
    x0 = torch.zeros(problem.domain.size, dtype=torch.float64)
    jac_norms, dir_norms = [], []
    for seed in seeds:
        generator = torch.Generator().manual_seed(int(seed))
        value, jac = model.sample(x0, 0, problem.sample(generator))
        jac = dense(jac)
        g = calculus.subgradient(value.numpy(), None)
        jac_norms.append(float(torch.linalg.norm(jac)))
        dir_norms.append(float(torch.linalg.vector_norm(model.entries.chain_rule(jac, g))))
    diameter = float(problem.domain.diameter)
    direction = float(np.mean(dir_norms))
    return {
        "jacobian_norm": float(np.mean(jac_norms)),
        "direction_norm": direction,
        "diameter": diameter,
        "step_reference": diameter / direction,
        "curvature_reference": direction / diameter,
    }


#: Which reference scale a relative grid value multiplies (see :func:`reference_scales`).
RELATIVE = {"clip": "jacobian_norm", "eta": "step_reference", "M": "curvature_reference", "beta": "curvature_reference"}

#: Searched settings (Appendix A.4).  Values of clip, eta, M and beta are factors of the reference in
#: RELATIVE; the others are absolute.  The outer HMSFW/SCFW schedules and pools of certified runs are not tuned.
DEFAULT_GRIDS: dict[str, dict[str, list]] = {
    "hmsfw-i-fb": {"max_pricing": [1, 2, 4, 8], "pool": [5, 10, 30]},
    "hmsfw-ii-fb": {"max_pricing": [1, 2, 4, 8], "pool": [5, 10, 30]},
    "clipped-scfw": {"clip": [0.01, 0.03, 0.1, 0.3, 1.0]},
    "psg": {"eta": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]},
    "prox-linear": {"M": [3.0, 10.0, 30.0, 100.0], "inner_iters": [1, 2, 5]},
    "linasa-icg": {"mu": [1e-3, 3e-3, 1e-2], "beta": [3.0, 10.0, 30.0], "horizon": [30, 100, 300]},
}


def absolute_settings(point: dict[str, Any], refs: dict[str, float]) -> dict[str, Any]:
    """A grid point's settings, relative parameters (:data:`RELATIVE`) scaled by their reference in ``refs``."""
    return {k: (float(v) * refs[RELATIVE[k]] if k in RELATIVE else v) for k, v in point.items()}


def _final(
    method: str,
    completion: Completion,
    settings: dict[str, Any],
    seeds: Sequence[int],
    budget_seconds: float | None,
    iters: int | None,
    key: str,
    progress: bool,
) -> list[float]:
    """The final ``key`` metric of each seed's run (inf for a run that fails or ends non-finite)."""
    scores = []
    for seed in seeds:
        try:
            # Evaluate at the start and the end only: tuning needs the final state.
            result = run_method(
                method, completion, settings, seed, budget_seconds, iters=iters, eval_every=10**9, progress=progress
            )
            value = float(result.history[-1].get(key, math.nan))
        except FullcompError:
            value = math.inf
        scores.append(value if math.isfinite(value) else math.inf)
    return scores


def choose_radius_scale(
    data: RatingData,
    objective: str = "max",
    scales: Sequence[float] = protocol.RADIUS_SCALES,
    *,
    method: str = "hmsfw-ii",
    settings: dict[str, Any] | None = None,
    budget_seconds: float | None = 120.0,
    seeds: Iterable[int] = protocol.TUNING_SEEDS,
    iters: int | None = None,
    batch: int = protocol.BATCH,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> tuple[float, dict[float, float]]:
    """The radius scale (a multiple of ``base_radius(data)`` = sqrt(P Q)) with the lowest mean final
    worst-group *validation* loss of ``method`` over the tuning seeds; returns (scale, {scale: mean})."""
    _check_budget(budget_seconds, iters)
    seed_list = check_seeds(seeds)
    settings = protocol.check_settings(
        method, settings if settings is not None else protocol.load_config().settings_for(objective, method)
    )
    means = {}
    for scale in scales:
        completion = completion_problem(data, objective, float(scale), batch=batch, structured=True)
        vals = _final(method, completion, settings, seed_list, budget_seconds, iters, "val_worst", progress)
        means[float(scale)] = float(np.mean(vals))
        emit(log, f"radius {objective} scale {scale:g}: mean worst-group validation {means[float(scale)]:.5f}")
    best = min(means, key=lambda s: (means[s], s))
    return best, means


def tune_movielens(
    data_dir: str | os.PathLike | None,
    objective: str | Sequence[str] = "both",
    budget_seconds: float | None = 120.0,
    seeds: Iterable[int] | str = protocol.TUNING_SEEDS,
    methods: str | Iterable[str] | None = None,
    *,
    grids: dict[str, dict[str, list]] | None = None,
    search: str | Search = "grid",
    config_path: str | os.PathLike | None = protocol.DEFAULT_CONFIG,
    base_config: str | os.PathLike | dict | ProtocolConfig | None = None,
    radius_scale: float | None = None,
    select_radius: bool = False,
    radius_scales: Sequence[float] = protocol.RADIUS_SCALES,
    radius_method: str = "hmsfw-ii",
    radius_budget_seconds: float | None = None,
    iters: int | None = None,
    batch: int = protocol.BATCH,
    synthetic: dict[str, Any] | None = None,
    cache: bool | str | os.PathLike = True,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> ProtocolConfig:
    """Choose the method settings on the tuning seeds by mean final training objective, and freeze them.

    For each objective: optionally select the radius scale on validation
    (:func:`choose_radius_scale`, ``select_radius=True``), else use
    ``radius_scale`` or the base configuration's; then, for every method with a
    grid (default :data:`DEFAULT_GRIDS`; relative parameters scaled by
    :func:`reference_scales`), run each candidate on every tuning seed and keep
    the one with the lowest mean final training objective.  ``search`` picks the points tried
    (:func:`~fullcomp.experiments.harness.resolve_search`: "grid", the whole product, by default).  Methods without a
    grid keep the base configuration's settings.  Test data is never read.

    ``radius_budget_seconds`` is the budget of the radius-selection runs (default
    ``budget_seconds``).  Writes the configuration to ``config_path`` (None: write nothing) with the
    scores of every candidate, and returns it.  Cost: candidates x seeds x
    budget optimizer seconds plus evaluation (73 candidates x 2 seeds with the
    default grids and all methods).
    """
    _check_budget(budget_seconds, iters)
    objectives, names, seed_list = (
        protocol.objective_names(objective),
        protocol.method_names(methods),
        check_seeds(seeds),
    )
    grids = copy.deepcopy(DEFAULT_GRIDS if grids is None else grids)
    for name, grid in grids.items():
        if name not in protocol.METHODS:
            raise OptionError(f"grids has an unknown method {name!r}; choose from {', '.join(protocol.METHODS)}")
        bad = [k for k in grid if k not in protocol.METHODS[name].keys]
        if bad or any(not isinstance(v, list) or not v for v in grid.values()):
            raise OptionError(f"grid of {name} must map its settings {protocol.METHODS[name].keys} to non-empty lists")
    base = protocol.load_config(base_config)
    cfg = protocol.load_config({"settings": base.settings, "radius_scale": base.fields["radius_scale"]})
    data = protocol.load_data(data_dir, synthetic, cache)
    record: dict[str, Any] = {}
    for obj in objectives:
        entry: dict[str, Any] = {}
        if select_radius:
            radius_settings = cfg.settings_for(obj, radius_method)
            scale, means = choose_radius_scale(
                data,
                obj,
                radius_scales,
                method=radius_method,
                settings=radius_settings,
                budget_seconds=budget_seconds if radius_budget_seconds is None else radius_budget_seconds,
                seeds=seed_list,
                iters=iters,
                batch=batch,
                progress=progress,
                log=log,
            )
            entry["radius"] = {"method": radius_method, "criterion": "mean final worst-group validation loss"}
            entry["radius"]["budget_seconds"] = (
                budget_seconds if radius_budget_seconds is None else radius_budget_seconds
            )
            entry["radius"]["mean_val_worst"] = {f"{s:g}": v for s, v in means.items()}
            cfg.set_field("radius_scale", obj, scale)
        elif radius_scale is not None:
            cfg.set_field("radius_scale", obj, radius_scale)
        completion = completion_problem(data, obj, cfg.fields["radius_scale"][obj], batch=batch, structured=True)
        refs = reference_scales(completion, seed_list)
        entry["references"] = refs
        entry["methods"] = {}
        for name in names:
            if name not in grids:
                continue
            tried: list[dict[str, Any]] = []

            def score(
                point: dict,
                name: str = name,
                tried: list = tried,
                obj: str = obj,
                refs: dict = refs,
                completion=completion,
            ) -> float:
                for entry in tried:  # a search may revisit a point
                    if entry["grid"] == point:
                        return entry["mean"]
                settings = {**cfg.settings_for(obj, name), **absolute_settings(point, refs)}
                scores = _final(
                    name, completion, settings, seed_list, budget_seconds, iters, "train_objective", progress
                )
                tried.append(
                    {"grid": point, "settings": settings, "train_objective": scores, "mean": float(np.mean(scores))}
                )
                emit(log, f"tune {obj}/{name} {point}: mean final training objective {tried[-1]['mean']:.5f}")
                return tried[-1]["mean"]

            resolve_search(search)(grids[name], score)
            best = min(tried, key=lambda t: t["mean"])  # first of equals: the search's order breaks ties
            cfg.set(obj, name, best["settings"])
            # A choice at the end of its grid suggests extending the grid (the paper did so for several methods).
            edge = grid_edges(grids[name], best["grid"])
            entry["methods"][name] = {"chosen": best["grid"], "at_grid_edge": edge, "candidates": tried}
            if edge:
                emit(log, f"tune {obj}/{name}: chosen {', '.join(edge)} at the edge of the grid; consider extending it")
        record[obj] = entry
    cfg.meta = {
        "about": "Frozen MovieLens protocol settings (fullcomp.experiments.movielens); written by tune_movielens.",
        "source": f"tune_movielens on {data.label}",
        "data": data.label,
        "base_radius": "sqrt(P Q) (fullcomp.experiments.completion.base_radius)",
        "criterion": "mean final training objective over the tuning seeds (radius: worst-group validation)",
        "tuning_seeds": seed_list,
        "budget_seconds": budget_seconds,
        "budget_iters": iters,
        "batch": batch,
        "grids": grids,
        "relative": RELATIVE,
        "tuning": record,
        "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if config_path is not None:
        cfg.save(config_path)
    return cfg
