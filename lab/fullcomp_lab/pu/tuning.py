"""Grid tuning of the PU methods' settings on the tuning seeds."""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.errors import FullcompError
from fullcomp_lab.harness import ProtocolConfig, Search, check_seeds, emit, grid_edges, resolve_search
from fullcomp_lab.pu.config import (
    DEFAULT_CONFIG,
    INNER,
    LR,
    OUTER,
    PROX,
    SCHEMA,
    TUNING_SEEDS,
    Workload,
    load_config,
    load_pu,
    method_names,
)
from fullcomp_lab.pu.runs import run_method

DEFAULT_GRIDS: dict[str, dict[str, list]] = {
    "sgd": {"eta": LR},
    "sdca": {"eta": LR, "anchor_step": OUTER, "inner_iters": INNER},
    "ssdc-spg": {"eta": LR, "gamma": [1 / v for v in PROX], "inner_iters": INNER},
    "ssdc-adagrad": {"eta": LR, "gamma": [1 / v for v in PROX], "inner_iters": INNER},
    "sbcd": {"eta": LR, "mu": PROX, "inner_iters": INNER, "envelope_step": [0.1, 1.0, 2.0]},
    "smag": {"eta1": LR, "eta0": OUTER, "gamma": PROX},
}


# ----------------------------------------------------------------------------------------------- tuning


def tune_pu(
    data_dir: str | os.PathLike | None = None,
    dataset: str | None = None,
    methods: str | Iterable[str] | None = None,
    seeds: Iterable[int] | str = TUNING_SEEDS,
    *,
    grids: dict[str, dict[str, list]] | None = None,
    search: str | Search = "grid",
    sweeps: int = 2,
    config_path: str | os.PathLike | None = DEFAULT_CONFIG,
    workload: Workload = Workload(),
    log: Callable[[str], None] | None = None,
) -> ProtocolConfig:
    """Select each method's settings on ``dataset`` by mean final training objective over the tuning seeds.

    The points of each method's grid (default :data:`DEFAULT_GRIDS`, Section 5.1) that ``search``
    visits (default "grid": all of them; "coordinate": ``sweeps`` axis-by-axis sweeps, see
    :func:`~fullcomp_lab.harness.coordinate_search`; or a callable ``search(grid, score)``)
    run the full protocol on each seed (default 100, none of the final trial seeds); a run that
    diverges scores +inf; ties go to the first point tried.  The selection is merged into
    ``config_path`` (the other data sets' settings are kept) together with every
    candidate's scores, and returned.
    """
    key, data = load_pu(dataset, data_dir)
    names, seed_list = method_names(methods), check_seeds(seeds)
    grids = copy.deepcopy(DEFAULT_GRIDS if grids is None else grids)
    has_file = config_path is not None and Path(config_path).is_file()
    cfg = load_config(config_path) if has_file else SCHEMA.empty()
    record = {}
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
                    result = run_method(name, data, settings, seed, workload, evaluate=False)
                    value = float(result.history[-1]["train_objective"])
                except FullcompError:
                    value = math.inf
                scores.append(value if math.isfinite(value) else math.inf)
            tried.append({"settings": settings, "train_objective": scores, "mean": float(np.mean(scores))})
            return tried[-1]["mean"]

        resolve_search(search, sweeps)(grid, score)
        best = min(tried, key=lambda t: t["mean"])
        edge = grid_edges(grid, best["settings"])
        cfg.set(key, name, best["settings"])
        record[name] = {"chosen": best["settings"], "at_grid_edge": edge, "candidates": tried}
        emit(
            log,
            f"tune {key}/{name}: {best['settings']} mean final training objective {best['mean']:.5f} "
            f"({len(tried)} candidates, {time.perf_counter() - started:.0f} s)",
        )
    cfg.meta["about"] = "Frozen PU protocol settings (fullcomp_lab.pu); written by tune_pu."
    cfg.meta.setdefault("tuning", {})[key] = {
        "data": data.name,
        "criterion": "mean final training objective (PU risk (7) + ridge) over the tuning seeds",
        "tuning_seeds": seed_list,
        "workload": vars(workload),
        "grids": grids,
        "search": search if isinstance(search, str) else getattr(search, "__name__", repr(search)),
        "sweeps": sweeps if search == "coordinate" else None,
        "methods": record,
        "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if config_path is not None:
        cfg.save(config_path)
    return cfg
