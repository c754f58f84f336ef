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
    ReferenceGroupDRO,
    balanced_sampler,
    group_adjustments,
    group_dro_update,
    group_losses_map,
    group_metrics,
    make_network,
    n_weights,
    outer_function,
    shuffled_sampler,
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


#: An update: ``update(generator) -> loss estimate`` on a batch it draws, and ``weights() -> q or None``.
_Update = tuple[Callable[[torch.Generator], float], Callable[[], Any]]


def _torch_update(run: _Training, adjustment: float) -> _Update:
    """ERM (Adam, plain or balanced batches), Group DRO with Adam on balanced batches, or the reference Group
    DRO (:class:`ReferenceGroupDRO`: SGD with momentum and weight decay on shuffled uniform batches, or on
    balanced ones as its ``--reweight_groups`` draws them in expectation)."""
    data, settings, net, spec = run.data, run.settings, run.net, run.spec
    G, per_group = data.n_groups, run.workload.per_group
    adjust = group_adjustments(data.train.counts(G), adjustment) if "eta_q" in settings and adjustment > 0 else None
    if spec.optimizer == "sgd":
        reference = ReferenceGroupDRO(net, settings["lr"], settings["weight_decay"], settings["eta_q"], G, adjust)
        if spec.sampling == "balanced":  # --reweight_groups: the same expected number of rows of every group
            draw, rows_g = balanced_sampler(data.train, per_group, G), torch.arange(G).repeat_interleave(per_group)
            sampler = lambda generator: (*draw(generator), rows_g)  # noqa: E731
        else:
            sampler = shuffled_sampler(data.train, G * per_group)
        return (lambda generator: float(reference.step(*sampler(generator)))), (lambda: reference.q.numpy().copy())
    plain = spec.sampling == "plain"
    sampler = uniform_sampler(data.train, G * per_group) if plain else balanced_sampler(data.train, per_group, G)
    inner, optimizer = group_losses_map(G), torch.optim.Adam(net.parameters(), lr=settings["lr"])
    state = {"q": torch.full((G,), 1.0 / G, dtype=torch.float64) if "eta_q" in settings else None}

    def update(generator: torch.Generator) -> float:
        X, y = sampler(generator)
        if plain:
            loss = nn.functional.binary_cross_entropy_with_logits(net(X).reshape(-1), y)
        elif state["q"] is not None:
            loss, state["q"] = group_dro_update(state["q"], inner(net, (X, y)), settings["eta_q"], adjust)
        else:
            loss = inner(net, (X, y)).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return update, lambda: None if state["q"] is None else state["q"].numpy().copy()


def _fullcomp_update(run: _Training) -> _Update:
    """HMSFW, SCFW or PSG through ``fc.optim`` with one l2 ball per parameter tensor (a param group each);
    the closure returns ``fc.Grouped`` of the four groups' sub-batches of a balanced batch (one forward and
    backward pass per group, not four over the whole batch)."""
    spec, net, per_group, G = run.spec, run.net, run.workload.per_group, run.data.n_groups
    domain = fc.layer_domains(net, "l2", factor=run.settings["factor"])
    fc.make_feasible(net, domain)
    groups = [{"params": [p], "domain": block} for p, block in zip(net.parameters(), domain.blocks)]
    options = {**spec.fixed, **{k: run.settings[k] for k in spec.keys if k != "factor"}}
    optimizer = getattr(fc.optim, spec.solver.upper())(groups, outer_function(spec.outer, G), seed=run.seed, **options)
    sampler = balanced_sampler(run.data.train, per_group, G)

    def closure(X: torch.Tensor, y: torch.Tensor) -> fc.Grouped:
        parts = [slice(k * per_group, (k + 1) * per_group) for k in range(G)]
        bce = nn.functional.binary_cross_entropy_with_logits
        return fc.Grouped([bce(net(X[s]).reshape(-1), y[s], reduction="none") for s in parts])

    def update(generator: torch.Generator) -> float:
        X, y = sampler(generator)
        return float(optimizer.step(lambda: closure(X, y))["objective_estimate"])

    return update, lambda: optimizer.weights


def _q_columns(q: Any) -> dict[str, float]:
    return {} if q is None else {f"q[{i}]": float(v) for i, v in enumerate(np.asarray(q).reshape(-1))}


def _train(run: _Training, update: Callable[[torch.Generator], float], weights: Callable[[], Any]) -> tuple:
    """The protocol's loop around one method's update: batches from a generator seeded by the run's seed,
    optimizer time (batch draws included, evaluation excluded), a row per epoch with the metrics and the
    adversary's weights, and a weights-only row every :func:`weights_every` iterations in between."""
    ipe, every = run.ipe, weights_every(run.ipe)
    generator = torch.Generator().manual_seed(run.seed)
    rows = [{"k": 0, "time": 0.0, "epoch": 0, **run.evaluate(run.net), **_q_columns(weights())}]
    seconds, stopped = 0.0, "iterations"
    for epoch in range(1, run.workload.epochs + 1):
        total = 0.0
        for i in range(1, ipe + 1):
            start = time.perf_counter()
            total += update(generator)
            seconds += time.perf_counter() - start
            q = weights() if i % every == 0 and i < ipe else None
            if q is not None:
                rows.append({"k": (epoch - 1) * ipe + i, "time": seconds, **_q_columns(q)})
        estimate = total / ipe
        row = {"k": epoch * ipe, "time": seconds, "objective_estimate": estimate, "epoch": epoch}
        rows.append({**row, **_q_columns(weights()), **run.evaluate(run.net)})
        if not math.isfinite(estimate):
            stopped = "error"
            break
    rows[0]["objective_estimate"] = next((r["objective_estimate"] for r in rows if "objective_estimate" in r), math.nan)
    flat = nn.utils.parameters_to_vector(run.net.parameters()).detach().clone()
    iterations = rows[-1]["k"]
    info = {"iterations": iterations, "optimizer_seconds": seconds, "stopped": stopped}
    info["ms_per_update"] = 1000.0 * seconds / max(iterations, 1)
    return flat, rows, info, weights()


def run_method(
    method: str,
    data: GroupData,
    settings: dict[str, Any],
    seed: int,
    workload: Workload,
    *,
    splits: Sequence[str] = ("val", "test"),
    adjustment: float = 0.0,
) -> fc.Result:
    """One protocol run of ``method`` on ``data`` with network weights and batches drawn under ``seed``.

    Every method trains the same network (:func:`make_network`, ``workload.width``) for
    ``workload.epochs`` epochs of batches of 4 x ``workload.per_group`` rows; the metrics of ``splits``
    are recorded at the start and after every epoch, outside the optimizer time.  ``adjustment`` is
    Group DRO's C of C / sqrt(n_g) (0: none).  ``result.info`` gains the protocol fields the tables read:
    ``selected`` (the epoch of best validation worst-group accuracy) and ``last_epoch``, each with its
    metrics, ``seconds_per_epoch`` (optimizer seconds per epoch, evaluation excluded) and
    ``ms_per_update`` (optimizer milliseconds per update, the batch's draw included).
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
    update = _torch_update(training, adjustment) if spec.kind == "torch" else _fullcomp_update(training)
    x, rows, info, q = _train(training, *update)
    info.update(method=method, metrics=[k for k in rows[-1] if k.startswith(("val_", "test_"))])
    result = fc.Result(x, fc.History(rows), info)
    if q is not None:
        result.weights = np.asarray(q)
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
                    result = run_method(name, data, settings, seed, workload, splits=("val",))
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
            result = run_method(name, data, settings, seed, workload, adjustment=adjustment)
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
