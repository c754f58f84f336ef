"""The MovieLens protocol of the HMSFW paper (Section 6 and Appendix A) as reusable functions.

* :data:`METHODS` maps the nine compared methods (HMSFW I/II, their fixed-budget
  versions, Vanilla and Clipped SCFW, PSG, prox-linear, LiNASA+ICG) to runners
  ``run(problem, settings, seed, seconds, callback) -> Result``.
* :func:`bench_movielens` runs every (method, seed) under one optimizer-time
  budget and saves each run as ``out_dir/<objective>/<method>/seed<k>/``.
* :func:`tables` and :func:`plots` turn those folders into the paper's
  Tables 3-6 (CSV and Markdown) and its loss-versus-time figures (PNG).
* :func:`choose_radius_scale` selects the nuclear radius on validation and
  :func:`tune_movielens` the method settings on the tuning seeds, writing the
  frozen configuration (``configs/movielens.json``) that the benchmark reads.

Protocol (Appendix A.1-A.4): zero start, 1,024 sampled training ratings per
group and update, the saved 80/10/10 split, optimizer time only in the budget
(evaluation runs in the callback, outside it), and scoring of the last update
completed within the budget.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fullcomp.algorithms.hmsfw import hmsfw, scfw
from fullcomp.algorithms.linasa import linasa_icg
from fullcomp.algorithms.prox_linear import prox_linear
from fullcomp.algorithms.psg import psg
from fullcomp.algorithms.tracked import InnerMap
from fullcomp.datasets import movielens, synthetic_ratings
from fullcomp.datasets.ratings import RatingData
from fullcomp.errors import FullcompError, OptionError
from fullcomp.experiments.completion import OBJECTIVES, Completion, base_radius, completion_problem
from fullcomp.experiments.harness import (
    TableFiles,
    add_config,
    add_methods,
    add_no_progress,
    add_positive,
    add_seeds,
    add_typed,
    best_mean,
    by_seed,
    cell,
    emit,
    parse_seeds,
    seed_columns,
    write_report,
    write_tables,
)
from fullcomp.glmo.subgradient import OuterCalculus
from fullcomp.model.composite import CompositeProblem
from fullcomp.report import mean_sd, protocol_runs
from fullcomp.run import History, Result, write_atomic
from fullcomp.run.budget import clock as budget_clock

#: The committed, frozen method settings and radius scales.
DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "movielens.json"
FINAL_SEEDS = (2000, 2001, 2002, 2003, 2004)
TUNING_SEEDS = (1000, 1001)
RADIUS_SCALES = (0.5, 1.0, 2.0, 4.0)
BATCH = 1024
CLOCK = "cpu"  # optimizer seconds = CPU seconds of the single-threaded run (see run_method)
OBJECTIVE_LABELS = {"max": "Max", "cvar": "CVaR0.3"}
#: Tag written into every run's summary.json, so tables() never mixes in other run folders.
PROTOCOL = "movielens"

# ---------------------------------------------------------------------------------------------- methods


@dataclass(frozen=True)
class Method:
    """One compared method: its protocol name, the paper's label, the solver, the options it fixes and the
    settings keys it reads from the configuration (passed to the solver under the same names)."""

    name: str
    label: str
    solver: Callable[..., Result]
    fixed: dict[str, Any]
    keys: tuple[str, ...]
    fixed_budget: bool = False

    def run(
        self,
        problem: CompositeProblem,
        settings: dict[str, Any],
        seed: int,
        seconds: float | None,
        callback: Callable | None,
        *,
        iters: int | None = None,
        eval_every: int | None = None,
        progress: bool = False,
    ) -> Result:
        """Run the solver with the fixed options and the settings it reads, under the protocol's budget."""
        options = {**self.fixed, **{key: settings[key] for key in self.keys}}
        return self.solver(
            problem,
            iters=iters,
            seconds=seconds,
            seed=seed,
            callback=callback,
            eval_every=eval_every,
            progress=progress,
            **options,
        )


# Fixed-budget HMSFW: glmo_tol=None with max_pricing set, so only the cap on pricing calls stops the GLMO.
_FB = {"glmo_tol": None}

#: The nine methods in the paper's table order.
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("hmsfw-i", "HMSFW I", hmsfw, {"variant": "polyak"}, ("pool",)),
        Method(
            "hmsfw-i-fb",
            "HMSFW I FB",
            hmsfw,
            {"variant": "polyak", **_FB},
            ("max_pricing", "pool"),
            True,
        ),
        Method("hmsfw-ii", "HMSFW II", hmsfw, {"variant": "taylor"}, ("pool",)),
        Method(
            "hmsfw-ii-fb",
            "HMSFW II FB",
            hmsfw,
            {"variant": "taylor", **_FB},
            ("max_pricing", "pool"),
            True,
        ),
        Method("scfw", "Vanilla SCFW", scfw, {}, ("pool",)),
        Method("clipped-scfw", "Clipped SCFW", scfw, {}, ("clip", "pool")),
        Method("psg", "PSG", psg, {"step": "constant"}, ("eta",)),
        Method("prox-linear", "Prox-linear", prox_linear, {}, ("M", "inner_iters")),
        Method(
            "linasa-icg", "LiNASA+ICG", linasa_icg, {}, ("mu", "beta", "horizon", "delta", "smoothing", "icg_steps")
        ),
    )
}


def select_methods(methods: str | Iterable[str] | None, registry: Iterable[str]) -> list[str]:
    """Validated names from ``registry`` in its order (None: all); a comma-separated string is accepted."""
    order = list(registry)
    if methods is None:
        return order
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    names = list(methods)
    unknown = [m for m in names if m not in order]
    if unknown or not names:
        raise OptionError(f"unknown method(s) {unknown or names}; choose from {', '.join(order)}")
    return [m for m in order if m in names]


def check_keys(method: str, settings: Any, registry: dict[str, Any]) -> tuple[str, ...]:
    """The keys of ``registry[method]``, after refusing an unknown method or settings without exactly those keys."""
    if method not in registry:
        raise OptionError(f"unknown method {method!r}; choose from {', '.join(registry)}")
    if not isinstance(settings, dict):
        raise OptionError(f"settings of {method} must be a dict, got {type(settings).__name__}")
    keys = registry[method].keys
    missing = [k for k in keys if k not in settings]
    extra = [k for k in settings if k not in keys]
    if missing or extra:
        raise OptionError(
            f"settings of {method} must hold exactly {', '.join(keys)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(extra)}" if extra else "")
        )
    return keys


def read_config(config: str | os.PathLike | dict | None, default: Path, hint: str) -> tuple[Any, str]:
    """A configuration given as a dict (copied) or a JSON file (None: ``default``), and its name for messages.

    ``hint`` tells a user without the file how to write one.
    """
    if isinstance(config, dict):
        return copy.deepcopy(config), "configuration"
    path = Path(default if config is None else config)
    if not path.is_file():
        raise OptionError(f"configuration file {path} not found; {hint}")
    try:
        return json.loads(path.read_text()), str(path)
    except json.JSONDecodeError as exc:
        raise OptionError(f"configuration file {path} is not valid JSON: {exc}") from None


def check_dataset_settings(data: Any, origin: str, check: Callable[[str, Any], dict]) -> dict[str, Any]:
    """Validate ``{"settings": {dataset: {method: settings}}}`` in place with ``check(method, settings)``."""
    if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
        raise OptionError(f"{origin} must be a JSON object with 'settings': {{dataset: {{method: settings}}}}")
    for dataset, block in data["settings"].items():
        for method, settings in block.items():
            try:
                block[method] = check(method, settings)
            except OptionError as exc:
                raise OptionError(f"{origin}, {dataset}: {exc}") from None
    return data


def method_names(methods: str | Iterable[str] | None) -> list[str]:
    """Validated method names in the paper's order (None: all nine); a comma-separated string is accepted."""
    return select_methods(methods, METHODS)


def objective_names(objective: str | Iterable[str]) -> list[str]:
    """``"max"``, ``"cvar"``, ``"both"`` or a sequence of them, validated."""
    if isinstance(objective, str):
        objective = list(OBJECTIVES) if objective == "both" else [objective]
    names = list(objective)
    bad = [o for o in names if o not in OBJECTIVES]
    if bad or not names:
        raise OptionError(f"objective must be 'max', 'cvar' or 'both', got {bad or names}")
    return [o for o in OBJECTIVES if o in names]


def check_settings(method: str, settings: Any) -> dict[str, Any]:
    """The settings of ``method`` as a dict holding exactly the keys its runner reads."""
    keys = check_keys(method, settings, METHODS)
    return {k: settings[k] for k in keys}


# ----------------------------------------------------------------------------------------------- config


@dataclass
class ProtocolConfig:
    """Frozen method settings and radius scales per objective, plus free-form provenance.

    ``settings[objective][method]`` is the dict a runner reads; ``radius_scale[objective]``
    multiplies :func:`~fullcomp.experiments.completion.base_radius`; ``meta`` records
    where the values come from (source, data, tuning grids and scores).
    """

    settings: dict[str, dict[str, dict[str, Any]]]
    radius_scale: dict[str, float]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for objective in OBJECTIVES:
            if objective not in self.settings or objective not in self.radius_scale:
                raise OptionError(f"the configuration needs settings and a radius_scale for objective {objective!r}")
            scale = self.radius_scale[objective]
            if (
                isinstance(scale, bool)
                or not isinstance(scale, (int, float))
                or not (math.isfinite(scale) and scale > 0)
            ):
                raise OptionError(f"radius_scale[{objective!r}] must be a positive number, got {scale!r}")
            for method, settings in self.settings[objective].items():
                self.settings[objective][method] = check_settings(method, settings)

    def settings_for(self, objective: str, method: str) -> dict[str, Any]:
        try:
            return dict(self.settings[objective][method])
        except KeyError:
            raise OptionError(f"the configuration has no settings for {method} with objective {objective}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"radius_scale": dict(self.radius_scale), "settings": copy.deepcopy(self.settings), **self.meta}

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "configuration") -> ProtocolConfig:
        if not isinstance(data, dict) or "settings" not in data or "radius_scale" not in data:
            raise OptionError(f"{origin} must be a JSON object with 'settings' and 'radius_scale'")
        meta = {k: v for k, v in data.items() if k not in ("settings", "radius_scale")}
        try:
            return cls(copy.deepcopy(data["settings"]), dict(data["radius_scale"]), copy.deepcopy(meta))
        except OptionError as exc:
            raise OptionError(f"{origin}: {exc}") from None

    def save(self, path: str | os.PathLike) -> Path:
        # Full precision: json writes floats with repr, which round-trips exactly.
        write_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return Path(path)


def load_config(config: str | os.PathLike | dict | ProtocolConfig | None = None) -> ProtocolConfig:
    """The protocol configuration: a path to JSON, a dict, a :class:`ProtocolConfig` or None (the committed one)."""
    if isinstance(config, ProtocolConfig):
        return config
    data, origin = read_config(config, DEFAULT_CONFIG, "pass the JSON written by tune_movielens")
    return ProtocolConfig.from_dict(data, origin=origin)


# ------------------------------------------------------------------------------------------------ data


def load_data(
    data_dir: str | os.PathLike | None, synthetic: dict[str, Any] | None = None, cache: bool | str | os.PathLike = True
) -> RatingData:
    """MovieLens from ``data_dir`` (split saved and reused), or ``synthetic_ratings(**synthetic)`` when None."""
    if data_dir is not None:
        if synthetic:
            raise OptionError("give either data_dir (MovieLens files) or synthetic options, not both")
        return movielens(data_dir, cache=cache)
    return synthetic_ratings(**(synthetic or {}))


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
                seed,
                seconds,
                completion.evaluate,
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
        protocol=PROTOCOL,
        method=method,
        label=spec.label,
        objective=completion.objective,
        seed=seed,
        settings=settings,
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


def check_seeds(seeds: int | Iterable[int] | str) -> list[int]:
    """Seeds as a list of ints: one int, a list of ints, or a string like "2000-2004" or "1,2"."""
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        return [int(seeds)]
    out = list(seeds)
    if not out or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s in out):
        raise OptionError(f"seeds must be a non-empty list of ints, got {seeds!r}")
    return [int(s) for s in out]


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
    data_dir : MovieLens folder (100K or 1M layout) or None for synthetic data (``synthetic``).
    objective : "max", "cvar", "both" or a list of them.
    budget_seconds : optimizer-time budget per run (Appendix A.2: 120 for 100K, 1200 for 1M).
    seeds : stochastic seeds (the paper's final seeds 2000-2004), or a string such as "2000-2004".
    methods : names from :data:`METHODS` (default all nine), a list or a comma-separated string.
    out_dir : runs go to ``out_dir/<objective>/<method>/seed<k>/`` (history.csv, summary.json, x.npy).
    radius_scale : multiple of ``base_radius(data)``; default the configuration's validated scale.
    eval_every : updates between evaluations (the final state is always evaluated).
    config : frozen settings (path, dict or :class:`ProtocolConfig`; default the committed
        ``configs/movielens.json``).
    iters : optional cap on updates (tests, smoke runs); the time budget still applies.
    batch : sampled training ratings per group and update (1,024 in the paper).
    synthetic : ``synthetic_ratings`` options when ``data_dir`` is None (default: MovieLens-100K's size).
    cache : where the MovieLens split is saved (see :func:`fullcomp.datasets.movielens`).
    save_x : write the dense final iterate x.npy (P Q floats per run: 13 MB for 100K, 180 MB for 1M).
    clock : "cpu" (default: optimizer seconds are the single-threaded run's CPU seconds, unaffected by
        other work on the machine) or "wall" (elapsed seconds, as the paper measured on a dedicated GPU).
    resume : keep run folders already finished with the same options instead of running them again.
    progress, log : tqdm bars per run; ``log(line)`` receives one line per finished run.

    Returns the run folders, in run order.  The data is loaded once; the problem is
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
        scale = cfg.radius_scale[obj] if radius_scale is None else float(radius_scale)
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


# ---------------------------------------------------------------------------------------------- tables

#: (key, column title, what it is): the columns of the paper's Tables 3/4 and then 5/6.
COLUMNS = (
    ("test_worst", "Worst-group test", "final worst-group test Huber loss"),
    ("test_average", "Average-group test", "final test loss, groups weighted equally"),
    ("seconds_per_update", "Seconds/update", "optimizer seconds per accepted update"),
    ("train_objective", "Training objective", "final training objective (Max or CVaR0.3)"),
    ("val_worst", "Validation loss", "final worst-group validation Huber loss"),
    ("updates", "Completed updates", "updates completed within the budget"),
)
MAIN_COLUMNS, SUPPORT_COLUMNS = COLUMNS[:3], COLUMNS[3:]


@dataclass
class ProtocolRun:
    """A protocol run folder: summary, history and the final metrics."""

    path: Path
    summary: dict
    history: History

    @property
    def objective(self) -> str:
        return str(self.summary["objective"])

    @property
    def method(self) -> str:
        return str(self.summary["method"])

    def last(self, column: str) -> float:
        """Last finite value of a column (the final state is always evaluated)."""
        if column not in self.history.columns:
            return math.nan
        values = self.history.column(column)
        finite = values[np.isfinite(values)]
        return float(finite[-1]) if finite.size else math.nan

    def metrics(self) -> dict[str, float]:
        updates = int(self.summary.get("accepted_updates", self.summary.get("iterations", 0)))
        accepted = float(self.history[-1]["time"]) if len(self.history) else math.nan
        return {
            "test_worst": self.last("test_worst"),
            "test_average": self.last("test_average"),
            "seconds_per_update": accepted / updates if updates else math.nan,
            "train_objective": self.last("train_objective"),
            "val_worst": self.last("val_worst"),
            "updates": float(updates),
        }


def find_protocol_runs(out_dir: str | os.PathLike) -> list[ProtocolRun]:
    """Every run folder under ``out_dir`` written by :func:`bench_movielens` (summary.json + history.csv)."""
    return [ProtocolRun(*run) for run in protocol_runs(out_dir, PROTOCOL, "fullcomp bench movielens")]


def _order(runs: list[ProtocolRun]) -> list[tuple[str, str, list[ProtocolRun]]]:
    """(objective, method, runs sorted by seed) in the paper's order."""
    groups: dict[tuple[str, str], list[ProtocolRun]] = {}
    for run in runs:
        groups.setdefault((run.objective, run.method), []).append(run)
    rank = {m: i for i, m in enumerate(METHODS)}
    keys = sorted(groups, key=lambda k: (OBJECTIVES.index(k[0]) if k[0] in OBJECTIVES else 9, rank.get(k[1], 99)))
    return [(o, m, by_seed(groups[(o, m)])) for o, m in keys]


def summarize(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """One row per (objective, method): seeds, then mean and sample SD of every table column."""
    rows = []
    for objective, method, runs in _order(find_protocol_runs(out_dir)):
        metrics = [r.metrics() for r in runs]
        row: dict[str, Any] = {
            "objective": objective,
            "method": method,
            "label": METHODS[method].label if method in METHODS else method,
            "data": runs[0].summary.get("data", ""),
            "budget_seconds": runs[0].summary.get("budget_seconds"),
            **seed_columns(runs),
        }
        for key, _, _ in COLUMNS:
            row[f"{key}_mean"], row[f"{key}_sd"] = mean_sd([m[key] for m in metrics])
        rows.append(row)
    return rows


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# MovieLens protocol tables",
        "",
        "Mean ± sample SD over seeds of the last state completed within the optimizer-time budget. "
        "Bold: lowest observed mean per objective and column (no significance claim). "
        "Average-group loss weights the groups equally. FB: fixed budget of pricing calls per update.",
    ]
    for objective in OBJECTIVES:
        block = [r for r in rows if r["objective"] == objective]
        if not block:
            continue
        data = ", ".join(sorted({str(r["data"]) for r in block}))
        budgets = ", ".join(sorted({f"{r['budget_seconds']:g} s" for r in block if r["budget_seconds"]}))
        for part, columns in (("final test losses and cost", MAIN_COLUMNS), ("supporting results", SUPPORT_COLUMNS)):
            lines += ["", f"## {OBJECTIVE_LABELS[objective]}: {part} ({data}; budget {budgets or 'iterations'})", ""]
            lines.append("| Method | Seeds | " + " | ".join(title for _, title, _ in columns) + " |")
            lines.append("|---|---:|" + "---:|" * len(columns))
            # Lowest is best for losses, objective and cost; completed updates are not ranked.
            best = {key: best_mean(block, key, None if key == "updates" else False) for key, _, _ in columns}
            for r in block:
                cells = [
                    cell(
                        r[f"{k}_mean"],
                        r[f"{k}_sd"],
                        1 if k == "updates" else 4,
                        best[k] is not None and r[f"{k}_mean"] == best[k],
                    )
                    for k, _, _ in columns
                ]
                lines.append(f"| {r['label']} | {r['n_seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def tables(out_dir: str | os.PathLike) -> TableFiles:
    """Aggregate the runs under ``out_dir`` into the paper's Tables 3-6 columns.

    Writes ``out_dir/tables.csv`` (one row per objective and method: seeds, and
    mean and sample SD of worst-group test, average-group test, seconds per
    update, training objective, worst-group validation and completed updates)
    and ``out_dir/tables.md`` (per objective, the Table 3/4 and Table 5/6 columns).
    """
    rows = summarize(out_dir)
    return write_tables(out_dir, "tables", rows, _markdown(rows))


# ----------------------------------------------------------------------------------------------- plots


def common_curve(runs: list[ProtocolRun], column: str, points: int = 200) -> tuple[np.ndarray, ...] | None:
    """(time grid, mean, sample SD) of ``column`` against optimizer time over the seeds of one method.

    Each seed's evaluated values are linearly interpolated onto a grid from the
    latest first evaluation to the earliest last one (the common support of all
    seeds): no extrapolation, no smoothing.  None when no seed has two points.
    """
    curves = []
    for run in runs:
        if column not in run.history.columns:
            return None
        t, v = run.history.column("time"), run.history.column(column)
        keep = np.isfinite(t) & np.isfinite(v)
        if keep.sum() < 2:
            return None
        curves.append((t[keep], v[keep]))
    start, stop = max(c[0][0] for c in curves), min(c[0][-1] for c in curves)
    if not stop > start:
        return None
    grid = np.linspace(start, stop, points)
    values = np.array([np.interp(grid, t, v) for t, v in curves])
    sd = values.std(axis=0, ddof=1) if len(curves) > 1 else np.full(points, np.nan)
    return grid, values.mean(axis=0), sd


def plots(out_dir: str | os.PathLike) -> list[Path]:
    """Save ``out_dir/<objective>/curves.png``: worst-group training (left) and test (right) Huber loss
    against optimizer time, one curve per method (mean over seeds, sample-SD band), each ending at the
    common support of its seeds; dashed curves are the fixed-budget HMSFW variants."""
    # A Figure without pyplot: no global backend state, works headless.
    from matplotlib.figure import Figure

    saved = []
    grouped = _order(find_protocol_runs(out_dir))
    for objective in OBJECTIVES:
        block = [(m, runs) for o, m, runs in grouped if o == objective]
        if not block:
            continue
        fig = Figure(figsize=(11, 4.2), layout="constrained")
        axes = fig.subplots(1, 2)
        colors = {m: f"C{i}" for i, m in enumerate(METHODS)}
        for ax, column, title in zip(axes, ("train_worst", "test_worst"), ("training", "test")):
            for method, runs in block:
                curve = common_curve(runs, column)
                if curve is None:
                    continue
                grid, mean, sd = curve
                spec = METHODS.get(method)
                label = f"{spec.label if spec else method} ({len(runs)} seeds)"
                style = "--" if spec is not None and spec.fixed_budget else "-"
                ax.plot(grid, mean, style, color=colors.get(method), label=label, linewidth=1.4)
                if np.isfinite(sd).any():
                    ax.fill_between(grid, mean - sd, mean + sd, color=colors.get(method), alpha=0.18, linewidth=0)
            ax.set_xlabel("optimizer seconds")
            ax.set_ylabel(f"worst-group {title} Huber loss")
            ax.set_title(f"{title.capitalize()}, {OBJECTIVE_LABELS[objective]}")
            ax.grid(alpha=0.3)
        if axes[1].get_legend_handles_labels()[0]:  # runs with a single evaluation draw no curve
            axes[1].legend(fontsize="small")
        data = block[0][1][0].summary.get("data", "")
        fig.suptitle(f"{data}: worst-group loss vs optimizer time (mean ± sample SD over seeds)")
        path = Path(out_dir) / objective / "curves.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        saved.append(path)
    return saved


# ---------------------------------------------------------------------------------- radius and tuning


def reference_scales(completion: Completion, seeds: Iterable[int] = TUNING_SEEDS) -> dict[str, float]:
    """Scale-free units for the tuned step parameters, from minibatches at the zero start.

    ``jacobian_norm``: mean Frobenius norm of the stacked sampled Jacobian (clipping
    thresholds are multiples of it); ``direction_norm``: mean norm of J~^T g with g a
    subgradient of F at the sampled losses; ``step_reference`` = diameter / direction_norm
    (a PSG step of that size travels one diameter); ``curvature_reference`` =
    direction_norm / diameter (the prox-linear M and LiNASA beta that do the same).
    """
    problem = completion.problem
    inner = InnerMap(problem, "cpu", torch.float64)
    calculus = OuterCalculus(problem.outer)
    x0 = torch.zeros(problem.domain.size, dtype=torch.float64)
    jac_norms, dir_norms = [], []
    for seed in seeds:
        generator = torch.Generator().manual_seed(int(seed))
        value, jac = inner.sample(x0, problem.sample(generator), 0)
        g = calculus.subgradient(value.numpy(), None)
        jac_norms.append(float(torch.linalg.norm(jac)))
        dir_norms.append(float(torch.linalg.vector_norm(inner.chain_rule(jac, g))))
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


def candidates(grid: dict[str, list], refs: dict[str, float]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(absolute settings, grid values) for every point of a grid, relative parameters scaled by ``refs``."""
    keys = list(grid)
    out = []
    for values in itertools.product(*(grid[k] for k in keys)):
        point = dict(zip(keys, values))
        absolute = {k: (float(v) * refs[RELATIVE[k]] if k in RELATIVE else v) for k, v in point.items()}
        out.append((absolute, point))
    return out


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
    scales: Sequence[float] = RADIUS_SCALES,
    *,
    method: str = "hmsfw-ii",
    settings: dict[str, Any] | None = None,
    budget_seconds: float | None = 120.0,
    seeds: Iterable[int] = TUNING_SEEDS,
    iters: int | None = None,
    batch: int = BATCH,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> tuple[float, dict[float, float]]:
    """The radius scale (a multiple of ``base_radius(data)`` = sqrt(P Q)) with the lowest mean final
    worst-group *validation* loss of ``method`` over the tuning seeds; returns (scale, {scale: mean})."""
    _check_budget(budget_seconds, iters)
    seed_list = check_seeds(seeds)
    settings = check_settings(
        method, settings if settings is not None else load_config().settings_for(objective, method)
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
    seeds: Iterable[int] | str = TUNING_SEEDS,
    methods: str | Iterable[str] | None = None,
    *,
    grids: dict[str, dict[str, list]] | None = None,
    config_path: str | os.PathLike | None = DEFAULT_CONFIG,
    base_config: str | os.PathLike | dict | ProtocolConfig | None = None,
    radius_scale: float | None = None,
    select_radius: bool = False,
    radius_scales: Sequence[float] = RADIUS_SCALES,
    radius_method: str = "hmsfw-ii",
    radius_budget_seconds: float | None = None,
    iters: int | None = None,
    batch: int = BATCH,
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
    the one with the lowest mean final training objective.  Methods without a
    grid keep the base configuration's settings.  Test data is never read.

    ``radius_budget_seconds`` is the budget of the radius-selection runs (default
    ``budget_seconds``).  Writes the configuration to ``config_path`` (None: write nothing) with the
    scores of every candidate, and returns it.  Cost: candidates x seeds x
    budget optimizer seconds plus evaluation (73 candidates x 2 seeds with the
    default grids and all methods).
    """
    _check_budget(budget_seconds, iters)
    objectives, names, seed_list = objective_names(objective), method_names(methods), check_seeds(seeds)
    grids = copy.deepcopy(DEFAULT_GRIDS if grids is None else grids)
    for name, grid in grids.items():
        if name not in METHODS:
            raise OptionError(f"grids has an unknown method {name!r}; choose from {', '.join(METHODS)}")
        bad = [k for k in grid if k not in METHODS[name].keys]
        if bad or any(not isinstance(v, list) or not v for v in grid.values()):
            raise OptionError(f"grid of {name} must map its settings {METHODS[name].keys} to non-empty lists")
    base = load_config(base_config)
    cfg = ProtocolConfig(copy.deepcopy(base.settings), dict(base.radius_scale), {})
    data = load_data(data_dir, synthetic, cache)
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
            cfg.radius_scale[obj] = scale
        elif radius_scale is not None:
            cfg.radius_scale[obj] = float(radius_scale)
        completion = completion_problem(data, obj, cfg.radius_scale[obj], batch=batch, structured=True)
        refs = reference_scales(completion, seed_list)
        entry["references"] = refs
        entry["methods"] = {}
        for name in names:
            if name not in grids:
                continue
            tried = []
            for absolute, point in candidates(grids[name], refs):
                settings = {**cfg.settings_for(obj, name), **absolute}
                scores = _final(
                    name, completion, settings, seed_list, budget_seconds, iters, "train_objective", progress
                )
                tried.append(
                    {"grid": point, "settings": settings, "train_objective": scores, "mean": float(np.mean(scores))}
                )
                emit(log, f"tune {obj}/{name} {point}: mean final training objective {tried[-1]['mean']:.5f}")
            best = min(tried, key=lambda t: t["mean"])  # first of equals: the grid's order breaks ties
            cfg.settings[obj][name] = check_settings(name, best["settings"])
            # A choice at the end of its grid suggests extending the grid (the paper did so for several methods).
            edge = [
                k
                for k, v in best["grid"].items()
                if len(grids[name][k]) > 1 and v in (grids[name][k][0], grids[name][k][-1])
            ]
            entry["methods"][name] = {"chosen": best["grid"], "at_grid_edge": edge, "candidates": tried}
            if edge:
                emit(log, f"tune {obj}/{name}: chosen {', '.join(edge)} at the edge of the grid; consider extending it")
        record[obj] = entry
    cfg.meta = {
        "about": "Frozen MovieLens protocol settings (fullcomp.experiments.protocol); written by tune_movielens.",
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


# ---------------------------------------------------------------------------------------------- CLI glue


def _shape(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*", text)
    if not match:
        raise OptionError(f"shape must look like 943x1682, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fullcomp bench movielens`` (see :func:`run_from_args`)."""
    parser.add_argument(
        "--data",
        help="MovieLens folder (u.data + u.user, or ratings.dat + users.dat); "
        "omit for synthetic data of the --synthetic-* size",
    )
    parser.add_argument("--objective", choices=(*OBJECTIVES, "both"), default="max", help="default max")
    add_positive(
        parser,
        "--budget",
        float,
        120.0,
        "optimizer seconds per run (default 120; the paper used 1200 for MovieLens-1M)",
    )
    add_seeds(parser, FINAL_SEEDS, "e.g. 2000-2004 (default) or 1000,1001")
    add_methods(parser, method_names, f"comma-separated subset of {','.join(METHODS)} (default all)")
    parser.add_argument("--out", default="runs/movielens", help="output folder (default runs/movielens)")
    add_positive(
        parser, "--radius-scale", float, None, "multiple of sqrt(P Q); default the configuration's validated scale"
    )
    add_positive(parser, "--eval-every", int, 5, "updates between evaluations (default 5; outside optimizer time)")
    add_config(parser, DEFAULT_CONFIG)
    add_positive(parser, "--iters", int, None, "optional cap on updates per run")
    add_positive(parser, "--batch", int, BATCH, "ratings per group (default 1024)")
    add_typed(parser, "--synthetic-shape", _shape, (943, 1682), "default 943x1682")
    add_positive(parser, "--synthetic-ratings", int, 100_000, "default 100000")
    parser.add_argument("--synthetic-seed", type=int, default=0, help="default 0")
    parser.add_argument("--no-save-x", action="store_true", help="do not write the dense final iterate x.npy")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default=CLOCK,
        help="optimizer seconds as CPU seconds of the single-threaded run (default) or elapsed seconds",
    )
    parser.add_argument("--fresh", action="store_true", help="rerun runs already finished in --out")
    add_no_progress(parser)


def run_from_args(args: argparse.Namespace) -> int:
    """Run :func:`bench_movielens` from parsed :func:`add_arguments` options, then write the
    tables and plots; prints one line per run and the files written.  Returns the exit code (0)."""
    synthetic = None
    if args.data is None:
        synthetic = {"shape": args.synthetic_shape, "n_ratings": args.synthetic_ratings, "seed": args.synthetic_seed}
    bench_movielens(
        args.data,
        args.objective,
        args.budget,
        args.seeds,
        args.methods,
        args.out,
        args.radius_scale,
        args.eval_every,
        config=args.config,
        iters=args.iters,
        batch=args.batch,
        synthetic=synthetic,
        save_x=not args.no_save_x,
        clock=args.clock,
        resume=not args.fresh,
        progress=not args.no_progress,
        log=lambda line: print(line, flush=True),
    )
    write_report(args.out, tables, plots)
    return 0


__all__ = [
    "METHODS",
    "Method",
    "ProtocolConfig",
    "DEFAULT_CONFIG",
    "DEFAULT_GRIDS",
    "bench_movielens",
    "tables",
    "plots",
    "tune_movielens",
    "choose_radius_scale",
    "reference_scales",
    "load_config",
    "run_method",
    "summarize",
    "add_arguments",
    "run_from_args",
    "parse_seeds",
]
