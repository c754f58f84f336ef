"""The PU protocol's mean/SD tables and its test-accuracy and objective curves."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.run import History
from fullcomp_lab import harness
from fullcomp_lab.harness import protocol_runs
from fullcomp_lab.pu.config import METHODS, PROTOCOL

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
    return [PURun(*run) for run in protocol_runs(out_dir, PROTOCOL, "fullcomp-lab bench pu")]


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
DIGITS = {key: digits for key, _, digits in COLUMNS}
TITLES = [title for _, title, _ in COLUMNS]


def _groups(runs: list[PURun], ablation: bool) -> dict[tuple, list[PURun]]:
    groups: dict[tuple, list[PURun]] = {}
    for run in runs:
        if run.ablation != ablation:
            continue
        key = (run.dataset, run.gamma) if ablation else (run.dataset, run.method)
        groups.setdefault(key, []).append(run)
    order = {m: i for i, m in enumerate(METHODS)}
    keys = sorted(groups, key=lambda k: (k[0], k[1] if ablation else order.get(k[1], 99)))
    return {k: harness.by_seed(groups[k]) for k in keys}


def _row(dataset: str, runs: list[PURun]) -> dict[str, Any]:
    first = runs[0].summary
    row: dict[str, Any] = {
        "dataset": dataset,
        "data": first.get("data", ""),
        **harness.seed_columns(runs),
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


#: What the Markdown tables show, above them.
ABOUT = (
    "Final values after the last epoch, mean ± sample SD over seeds. Training objective = PU risk (7) "
    "+ ridge/2 ||w||^2, the function every method minimizes; rank 1 = lowest mean training objective. "
    "Bold: best mean per column (no significance claim)."
)


def _markdown(rows: list[dict[str, Any]], ablation: list[dict[str, Any]]) -> str:
    lines = ["# PU learning protocol tables", "", ABOUT]
    for _, block in harness.grouped(rows, "dataset"):
        lines += ["", f"## {block[0]['data']} ({block[0]['epochs']} epochs, {block[0]['iterations']} iterations)", ""]
        best = {key: harness.best_mean(block, key, key == "test_accuracy") for key in DIGITS}
        block.sort(key=lambda r: list(METHODS).index(r["method"]) if r["method"] in METHODS else 99)
        body = ([r["label"], r["n_seeds"], r["rank"], *harness.mean_cells(r, DIGITS, best)] for r in block)
        lines += harness.markdown_table(["Method", "Seeds", "Rank", *TITLES], body)
    for _, block in harness.grouped(ablation, "dataset"):
        lines += ["", f"## {block[0]['data']}: SMAG gamma ablation (Figure 2)", ""]
        body = ([f"{r['gamma']:g}", r["n_seeds"], *harness.mean_cells(r, DIGITS)] for r in block)
        lines += harness.markdown_table(["gamma", "Seeds", *TITLES], body, left=0)
    return "\n".join(lines) + "\n"


def tables(out_dir: str | os.PathLike) -> harness.TableFiles:
    """Write ``out_dir/pu-tables.csv`` (one row per data set and method, ablation rows with their gamma)
    and ``out_dir/pu-tables.md``; returns their paths and the method rows."""
    rows, ablation = summarize(out_dir)
    return harness.write_tables(out_dir, "pu-tables", rows + ablation, _markdown(rows, ablation), rows)


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
            saved.append(harness.save_figure(fig, Path(out_dir) / dataset / name, dpi=80))
    return saved
