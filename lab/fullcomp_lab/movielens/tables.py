"""The MovieLens protocol's Tables 3-6 (CSV and Markdown) and loss-versus-time figures."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.run import History
from fullcomp_lab import harness
from fullcomp_lab.completion import OBJECTIVES
from fullcomp_lab.harness import mean_sd, protocol_runs
from fullcomp_lab.movielens.config import METHODS, OBJECTIVE_LABELS, PROTOCOL

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
    return [ProtocolRun(*run) for run in protocol_runs(out_dir, PROTOCOL, "fullcomp-lab bench movielens")]


def _order(runs: list[ProtocolRun]) -> list[tuple[str, str, list[ProtocolRun]]]:
    """(objective, method, runs sorted by seed) in the paper's order."""
    groups: dict[tuple[str, str], list[ProtocolRun]] = {}
    for run in runs:
        groups.setdefault((run.objective, run.method), []).append(run)
    rank = {m: i for i, m in enumerate(METHODS)}
    keys = sorted(groups, key=lambda k: (OBJECTIVES.index(k[0]) if k[0] in OBJECTIVES else 9, rank.get(k[1], 99)))
    return [(o, m, harness.by_seed(groups[(o, m)])) for o, m in keys]


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
            **harness.seed_columns(runs),
        }
        for key, _, _ in COLUMNS:
            row[f"{key}_mean"], row[f"{key}_sd"] = mean_sd([m[key] for m in metrics])
        rows.append(row)
    return rows


#: What the Markdown tables show, above them.
ABOUT = (
    "Mean ± sample SD over seeds of the last state completed within the optimizer-time budget. "
    "Bold: lowest observed mean per objective and column (no significance claim). "
    "Average-group loss weights the groups equally. FB: fixed budget of pricing calls per update."
)


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["# MovieLens protocol tables", "", ABOUT]
    for objective, block in harness.grouped(rows, "objective", OBJECTIVES):
        data = ", ".join(sorted({str(r["data"]) for r in block}))
        budgets = ", ".join(sorted({f"{r['budget_seconds']:g} s" for r in block if r["budget_seconds"]}))
        for part, columns in (("final test losses and cost", MAIN_COLUMNS), ("supporting results", SUPPORT_COLUMNS)):
            lines += ["", f"## {OBJECTIVE_LABELS[objective]}: {part} ({data}; budget {budgets or 'iterations'})", ""]
            digits = {key: 1 if key == "updates" else 4 for key, _, _ in columns}
            # Lowest is best for losses, objective and cost; completed updates are not ranked.
            best = {key: harness.best_mean(block, key, None if key == "updates" else False) for key in digits}
            header = ["Method", "Seeds", *(title for _, title, _ in columns)]
            lines += harness.markdown_table(
                header, ([r["label"], r["n_seeds"], *harness.mean_cells(r, digits, best)] for r in block)
            )
    return "\n".join(lines) + "\n"


def tables(out_dir: str | os.PathLike) -> harness.TableFiles:
    """Aggregate the runs under ``out_dir`` into the paper's Tables 3-6 columns.

    Writes ``out_dir/tables.csv`` (one row per objective and method: seeds, and
    mean and sample SD of worst-group test, average-group test, seconds per
    update, training objective, worst-group validation and completed updates)
    and ``out_dir/tables.md`` (per objective, the Table 3/4 and Table 5/6 columns).
    """
    rows = summarize(out_dir)
    return harness.write_tables(out_dir, "tables", rows, _markdown(rows))


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
                style = "--" if spec is not None and "fixed-budget" in spec.tags else "-"
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
        saved.append(harness.save_figure(fig, Path(out_dir) / objective / "curves.png", dpi=120))
    return saved
