"""Runs of the group-robust training protocol: one method and seed, the tuning on validation, and the bench."""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import fullcomp as fc
from fullcomp.errors import FullcompError, OptionError
from fullcomp.run import write_atomic
from fullcomp_lab.groupdro.config import (
    DEFAULT_GRIDS,
    DEFAULT_WORKLOADS,
    FINAL_SEEDS,
    METHODS,
    SCHEMA,
    TUNING_SEEDS,
    GroupMethod,
    Workload,
    check_settings,
    configured_workload,
    load_config,
    method_names,
    middle_settings,
)
from fullcomp_lab.groupdro.data import GroupData
from fullcomp_lab.groupdro.problem import (
    balanced_sampler,
    group_adjustments,
    group_dro_update,
    group_losses_map,
    group_metrics,
    make_network,
    n_weights,
    outer_function,
    uniform_sampler,
)
from fullcomp_lab.harness import ProtocolConfig, check_seeds, emit, grid_edges, search_points

#: The test metrics the tables report at the selected and at the last epoch.
REPORTED = ("test_worst_acc", "test_avg_acc", "test_worst_loss", "val_worst_acc", "val_avg_acc")
#: Evaluations of the adversary's weights q per epoch (HMSFW, SCFW, PSG record them every eval_every).
WEIGHT_ROWS_PER_EPOCH = 4


def iters_per_epoch(n_train: int, batch: int) -> int:
    """Iterations of one epoch: as many rows drawn as the training split holds, ceil(n_train / batch)."""
    return max(1, math.ceil(n_train / batch))


def weights_every(ipe: int) -> int:
    """The largest divisor of ``ipe`` at most ipe / WEIGHT_ROWS_PER_EPOCH (every epoch end is a row)."""
    target = max(1, ipe // WEIGHT_ROWS_PER_EPOCH)
    return max(d for d in range(1, target + 1) if ipe % d == 0)


def evaluator(data: GroupData, splits: Sequence[str]) -> Callable[[Callable], dict]:
    """``evaluate(net) -> dict``: :func:`group_metrics` on each of ``splits``."""
    parts = data.splits()

    def evaluate(net: Callable) -> dict:
        out: dict[str, float] = {}
        for name in splits:
            out.update(group_metrics(net, parts[name], name, data.n_groups))
        return out

    return evaluate


def select_epoch(rows: Iterable[dict]) -> tuple[dict, dict]:
    """(the evaluated row of highest validation worst-group accuracy, the first one on ties; the last
    evaluated row), both after at least one epoch."""
    evaluated = [r for r in rows if r.get("epoch", 0) >= 1 and isinstance(r.get("val_worst_acc"), float)]
    if not evaluated:
        raise OptionError("the run recorded no evaluated epoch; give it at least one epoch")
    scores = [r["val_worst_acc"] if math.isfinite(r["val_worst_acc"]) else -math.inf for r in evaluated]
    return evaluated[int(np.argmax(scores))], evaluated[-1]


def _pick(row: dict) -> dict:
    """The reported metrics of an evaluated row, with the per-group test accuracies and losses."""
    groups = [k for k in row if k.startswith(("test_acc_g", "test_loss_g"))]
    return {"epoch": row["epoch"], **{k: row[k] for k in (*REPORTED, *groups) if k in row}}


# --------------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class _Training:
    """What both trainers of :func:`run_method` read: the method, the data, the checked settings, the network
    (trained in place), the seed, the workload, the evaluation of a network and the iterations per epoch."""

    spec: GroupMethod
    data: GroupData
    settings: dict
    net: nn.Module
    seed: int
    workload: Workload
    evaluate: Callable
    ipe: int


def _train_torch(run: _Training, adjustment: float) -> tuple[torch.Tensor, list[dict], dict]:
    """ERM or Group DRO with Adam; one history row per epoch (and the start)."""
    data, settings, net, evaluate, ipe = run.data, run.settings, run.net, run.evaluate, run.ipe
    G, per_group = data.n_groups, run.workload.per_group
    plain = run.spec.sampling == "plain"
    sampler = uniform_sampler(data.train, G * per_group) if plain else balanced_sampler(data.train, per_group, G)
    inner = group_losses_map(G)
    dro = "eta_q" in settings
    adjust = group_adjustments(data.train.counts(G), adjustment) if dro and adjustment > 0 else None
    q = torch.full((G,), 1.0 / G, dtype=torch.float64)
    generator = torch.Generator().manual_seed(run.seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=settings["lr"])
    rows = [{"k": 0, "time": 0.0, "epoch": 0, **evaluate(net)}]
    if dro:
        rows[0].update({f"q[{i}]": float(v) for i, v in enumerate(q)})
    seconds, stopped = 0.0, "iterations"
    for epoch in range(1, run.workload.epochs + 1):
        total = torch.zeros((), dtype=torch.float64)
        start = time.perf_counter()
        for _ in range(ipe):
            X, y = sampler(generator)
            if plain:
                loss = nn.functional.binary_cross_entropy_with_logits(net(X).reshape(-1), y)
            elif dro:
                loss, q = group_dro_update(q, inner(net, (X, y)), settings["eta_q"], adjust)
            else:
                loss = inner(net, (X, y)).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        seconds += time.perf_counter() - start
        estimate = float(total) / ipe
        row = {"k": epoch * ipe, "time": seconds, "objective_estimate": estimate, "epoch": epoch}
        if dro:
            row.update({f"q[{i}]": float(v) for i, v in enumerate(q)})
        row.update(evaluate(net))
        rows.append(row)
        if not math.isfinite(estimate):
            stopped = "error"
            break
    rows[0]["objective_estimate"] = rows[1]["objective_estimate"] if len(rows) > 1 else math.nan
    flat = nn.utils.parameters_to_vector(net.parameters()).detach().clone()
    info = {"iterations": rows[-1]["k"], "optimizer_seconds": seconds, "stopped": stopped}
    if dro:
        info["weights"] = q.tolist()
    return flat, rows, info


def _train_fullcomp(run: _Training, progress: bool) -> fc.Result:
    """HMSFW, SCFW or PSG through ``fc.solve`` on per-layer l2 balls, with the network as the variable."""
    spec, net, ipe = run.spec, run.net, run.ipe
    G = run.data.n_groups
    domain = fc.layer_domains(net, "l2", factor=run.settings["factor"])
    fc.make_feasible(net, domain)
    problem = fc.CompositeProblem(
        outer_function(spec.outer, G),
        group_losses_map(G),
        domain,
        sampler=balanced_sampler(run.data.train, run.workload.per_group, G),
        x0=net,
    )
    probe = copy.deepcopy(net)

    def callback(iterate: Any) -> dict | None:
        if iterate.k % ipe:
            return None  # a row of the adversary's weights only
        problem.load_into(probe, iterate.x)
        return {"epoch": iterate.k // ipe, **run.evaluate(probe)}

    options = {**spec.fixed, **{k: run.settings[k] for k in spec.keys if k != "factor"}}
    return fc.solve(
        problem,
        spec.solver,
        iters=run.workload.epochs * ipe,
        seed=run.seed,
        eval_every=weights_every(ipe),
        callback=callback,
        progress=progress,
        **options,
    )


def run_method(
    method: str,
    data: GroupData,
    settings: dict[str, Any],
    seed: int,
    workload: Workload,
    *,
    splits: Sequence[str] = ("val", "test"),
    adjustment: float = 0.0,
    progress: bool = False,
) -> fc.Result:
    """One protocol run of ``method`` on ``data`` with network weights and batches drawn under ``seed``.

    Every method trains the same network (:func:`make_network`, ``workload.width``) for
    ``workload.epochs`` epochs of batches of 4 x ``workload.per_group`` rows; the metrics of ``splits``
    are recorded at the start and after every epoch, outside the optimizer time.  ``adjustment`` is
    Group DRO's C of C / sqrt(n_g) (0: none).  ``result.info`` gains the protocol fields the tables read:
    ``selected`` (the epoch of best validation worst-group accuracy) and ``last_epoch``, each with its
    metrics, and ``seconds_per_epoch`` (optimizer seconds per epoch, evaluation excluded).
    """
    spec = METHODS[method]
    settings = check_settings(method, settings)
    net = make_network(data, workload.width, seed)
    weights = n_weights(net)
    evaluate = evaluator(data, splits)
    batch = data.n_groups * workload.per_group
    ipe = iters_per_epoch(len(data.train), batch)
    training = _Training(spec, data, settings, net, seed, workload, evaluate, ipe)
    wall = time.perf_counter()
    if spec.kind == "torch":
        x, rows, info = _train_torch(training, adjustment)
        q = info.pop("weights", None)
        info.update(method=method, metrics=[k for k in rows[-1] if k.startswith(("val_", "test_"))])
        result = fc.Result(x, fc.History(rows), info)
        if q is not None:
            result.weights = np.asarray(q)
    else:
        result = _train_fullcomp(training, progress)
    wall = time.perf_counter() - wall
    selected, last = select_epoch(result.history.rows)
    epochs = last["epoch"]
    result.info.update(
        spec.run_fields(seed, settings),
        dataset=data.name,
        groups=list(data.groups),
        **vars(workload),
        batch=batch,
        iters_per_epoch=ipe,
        n_weights=weights,
        adjustment=adjustment if "eta_q" in settings else None,
        seconds_per_epoch=float(result.info["optimizer_seconds"]) / max(epochs, 1),
        wall_seconds=wall,
        selected=_pick(selected),
        last_epoch=_pick(last),
        torch_threads=torch.get_num_threads(),
    )
    return result


# ------------------------------------------------------------------------------------------------- tuning


def tune(
    data: GroupData,
    methods: str | Iterable[str] | None = None,
    *,
    grids: dict[str, dict[str, list]] | None = None,
    search: str | Callable = "grid",
    seeds: Iterable[int] | str = TUNING_SEEDS,
    workload: Workload | None = None,
    config: ProtocolConfig | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> ProtocolConfig:
    """Choose each method's settings on the *validation* split (the test split is never evaluated).

    Every point of ``grids[method]`` (default :data:`DEFAULT_GRIDS`) runs on each tuning seed (default
    100, not a reported seed) with the protocol's workload; its score is the mean over those seeds of
    the best validation worst-group accuracy over the epochs (the epoch the reported runs select too).
    The highest score wins, the grid order breaking ties; a run that fails scores -inf.  The choice is
    written into ``config`` (default a new one) with the candidates' scores as provenance.
    """
    names, seed_list = method_names(methods), check_seeds(seeds)
    grids = copy.deepcopy(DEFAULT_GRIDS if grids is None else grids)
    workload = workload or DEFAULT_WORKLOADS[data.name]
    cfg = config if config is not None else SCHEMA.empty()
    record: dict[str, Any] = {}
    started = time.perf_counter()
    for name in names:

        def measure(point: dict, name: str = name) -> dict[str, Any]:
            settings = check_settings(name, point)
            values = []
            for seed in seed_list:
                try:
                    result = run_method(name, data, settings, seed, workload, splits=("val",), progress=progress)
                    value = result.info["selected"]["val_worst_acc"]
                except FullcompError as exc:
                    emit(log, f"tune {data.name}/{name} {point}: failed ({exc})")
                    value = -math.inf
                values.append(value if math.isfinite(value) else -math.inf)
            entry = {"settings": settings, "val_worst_acc": float(np.mean(values))}
            emit(log, f"tune {data.name}/{name} {point}: validation worst-group accuracy {entry['val_worst_acc']:.4f}")
            return entry

        tried = search_points(grids, name, search, measure, "settings", "val_worst_acc")
        best = max(tried, key=lambda t: t["val_worst_acc"])  # max keeps the first of equals: grid order
        cfg.set(data.name, name, best["settings"])
        record[name] = {
            "chosen": best["settings"],
            "at_grid_edge": grid_edges(grids[name], best["settings"]),
            "candidates": tried,
        }
    cfg.set_field("workloads", data.name, vars(workload))
    cfg.meta.setdefault("tuning", {})[data.name] = {
        "criterion": "highest mean (over the tuning seeds) of the best validation worst-group accuracy over epochs",
        "tuning_seeds": seed_list,
        "grids": {n: grids[n] for n in names},
        "methods": record,
        "seconds": time.perf_counter() - started,
    }
    cfg.meta["about"] = "Group-robust training settings (fullcomp_lab.groupdro), chosen on validation by tune."
    return cfg


# -------------------------------------------------------------------------------------------------- bench


def bench_group_dro(
    data: GroupData,
    seeds: Iterable[int] | str = FINAL_SEEDS,
    methods: str | Iterable[str] | None = None,
    out_dir: str | os.PathLike = "runs/group-dro",
    *,
    config: str | os.PathLike | dict | ProtocolConfig | None = None,
    workload: Workload | None = None,
    adjustment: float = 0.0,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Run every (method, seed) on ``data`` and save ``out_dir/<dataset>/<method>/seed<k>/``.

    Settings come from ``config`` (a tuned :class:`ProtocolConfig`, a JSON path or dict, or None: each
    grid's middle point, as for a smoke test); the workload from ``workload``, else the configuration's,
    else :data:`DEFAULT_WORKLOADS`.  Returns the run folders.
    """
    names, seed_list = method_names(methods), check_seeds(seeds)
    cfg = load_config(config) if config is not None else None
    if workload is None:
        workload = configured_workload(cfg, data.name)
    folders = []
    for name in names:
        settings = cfg.settings_for(data.name, name) if cfg is not None else middle_settings(name)
        for seed in seed_list:
            result = run_method(name, data, settings, seed, workload, adjustment=adjustment, progress=progress)
            folder = Path(out_dir) / data.name / name / f"seed{seed}"
            result.save(folder)
            folders.append(folder)
            s, last = result.info["selected"], result.info["last_epoch"]
            emit(
                log,
                f"{data.name}/{name}/seed{seed}: {result.info['seconds_per_epoch']:.2f} s/epoch; epoch {s['epoch']} "
                f"(best val worst-group acc {s['val_worst_acc']:.3f}): test worst-group acc {s['test_worst_acc']:.3f}, "
                f"avg acc {s['test_avg_acc']:.3f}; last epoch: worst-group acc {last['test_worst_acc']:.3f}",
            )
    return folders


def machine() -> str:
    """The CPU model, the number of cores this process may use and whether CUDA is visible."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = "a CUDA device visible" if torch.cuda.is_available() else "no GPU"
    return f"{model}, {cores} cores, {gpu}"


def write_provenance(out_dir: str | os.PathLike, record: dict) -> Path:
    """Write ``out_dir/protocol.json`` (the command, the machine, the phases' wall times) for the tables."""
    path = Path(out_dir) / "protocol.json"
    write_atomic(path, json.dumps(record, indent=1, default=str) + "\n")
    return path
