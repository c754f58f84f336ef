"""Tables and curves from run folders (``summary.json`` + ``history.csv``, as written by ``Result.save``).

``find_runs(folder)`` collects every run folder at or below ``folder``;
``table(runs)`` formats one line per run; ``plot(runs, folder)`` saves the
objective and gap estimates (and every evaluated metric) against optimizer
time as PNG files.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.errors import OptionError
from fullcomp.run.history import History

#: history columns every HMSFW run has; any other numeric column is an evaluated metric
STANDARD = ("k", "time", "objective_estimate", "gap_estimate", "glmo_gap", "pricing_calls")


@dataclass
class Run:
    """One run folder: its path relative to the searched folder, summary and history."""

    name: str
    path: Path
    summary: dict
    history: History

    @property
    def method(self) -> str:
        return str(self.summary.get("method", "?"))

    @property
    def seed(self) -> Any:
        return self.summary.get("seed", "")

    @property
    def final(self) -> dict:
        """The last history row (the state the run ends in)."""
        return self.history[-1] if len(self.history) else dict(self.summary.get("final", {}))

    def metrics(self) -> list[str]:
        """Numeric history columns beyond the standard ones (e.g. ``test_worst`` from evaluate)."""
        out = []
        for column in self.history.columns:
            if column in STANDARD:
                continue
            try:
                if np.isfinite(self.history.column(column)).any():
                    out.append(column)
            except (TypeError, ValueError):  # a text column (a label a callback added): not plottable
                pass
        return out

    def last(self, column: str) -> float:
        """Last finite value of ``column`` (evaluated metrics are recorded every few rows only)."""
        values = self.history.column(column) if column in self.history.columns else np.array([])
        finite = values[np.isfinite(values)]
        return float(finite[-1]) if finite.size else math.nan


def find_runs(folder: str | os.PathLike) -> list[Run]:
    """Every folder at or below ``folder`` holding both ``summary.json`` and ``history.csv``."""
    root = Path(folder)
    if not root.is_dir():
        raise OptionError(f"report folder {root} does not exist; pass the --out folder of `fullcomp run` or its parent")
    runs = []
    for summary_path in sorted(root.rglob("summary.json")):
        history_path = summary_path.with_name("history.csv")
        if not history_path.is_file():
            continue
        try:
            summary = json.loads(summary_path.read_text())
            history = History.read_csv(history_path)
        except (json.JSONDecodeError, ValueError, KeyError) as exc:
            raise OptionError(f"cannot read run folder {summary_path.parent}: {exc}") from None
        for column in ("time", "objective_estimate"):  # projection baselines have no gap estimate
            if column not in history.columns:
                raise OptionError(f"{history_path} has no {column!r} column; it is not a fullcomp run history")
        name = str(summary_path.parent.relative_to(root)) if summary_path.parent != root else root.name
        runs.append(Run(name, summary_path.parent, summary, history))
    if not runs:
        raise OptionError(
            f"no run folders under {root}: a run folder holds summary.json and history.csv "
            "(written by `fullcomp run ... --out DIR` or Result.save(DIR))"
        )
    return runs


def protocol_runs(folder: str | os.PathLike, protocol: str, writer: str) -> list[tuple[Path, dict, History]]:
    """(folder, summary, history) of every run under ``folder`` whose summary.json says ``"protocol": protocol``.

    ``writer`` names what writes such runs (e.g. ``"fullcomp bench movielens"``), for the error messages.
    """
    root = Path(folder)
    if not root.is_dir():
        raise OptionError(f"{root} does not exist; pass the --out folder of `{writer}`")
    runs = []
    for path in sorted(root.rglob("summary.json")):
        try:
            summary = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise OptionError(f"cannot read {path}: {exc}") from None
        if summary.get("protocol") != protocol or not path.with_name("history.csv").is_file():
            continue
        runs.append((path.parent, summary, History.read_csv(path.with_name("history.csv"))))
    if not runs:
        raise OptionError(f"no {protocol} runs under {root}; `{writer}` writes them")
    return runs


def mean_sd(values: Any) -> tuple[float, float]:
    """Mean and sample SD (ddof 1, as the papers report) of the finite values; SD is NaN for one value."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return math.nan, math.nan
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else math.nan


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def table(runs: list[Run]) -> str:
    """One aligned text line per run: method, seed, iterations, optimizer seconds, final estimates, metrics."""
    metrics: list[str] = []
    for run in runs:
        metrics += [m for m in run.metrics() if m not in metrics]
    header = ["run", "method", "seed", "iterations", "optimizer_s", "objective_est", "gap_est", *metrics]
    rows = [header]
    for run in runs:
        seconds = run.summary.get("optimizer_seconds", run.last("time"))
        iterations = run.summary.get("iterations", run.final.get("k", ""))
        rows.append(
            [
                run.name,
                run.method,
                run.seed,
                iterations,
                f"{float(seconds):.2f}",
                run.last("objective_estimate"),
                run.last("gap_estimate"),
                *(run.last(m) for m in metrics),
            ]
        )
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(runs: list[Run], folder: str | os.PathLike) -> list[Path]:
    """Save ``objective.png``, ``gap.png`` (log scale) and one ``<metric>.png`` per evaluated metric
    into ``folder``; every curve is one run against optimizer seconds."""
    # Figure without pyplot: no global backend state, works headless.
    from matplotlib.figure import Figure

    folder = Path(folder)
    metrics: list[str] = []
    for run in runs:
        metrics += [m for m in run.metrics() if m not in metrics]
    panels = [("objective_estimate", "objective estimate F(z_k, y_k)", "objective.png", False)]
    panels.append(("gap_estimate", "gap estimate (log scale)", "gap.png", True))
    panels += [(m, m, f"{m}.png", False) for m in metrics]
    saved = []
    for column, label, filename, log in panels:
        fig = Figure(figsize=(6.4, 4.2), layout="constrained")
        ax = fig.add_subplot()
        for run in runs:
            if column not in run.history.columns:
                continue
            t, v = run.history.column("time"), run.history.column(column)
            keep = np.isfinite(t) & np.isfinite(v) & ((v > 0) if log else True)
            ax.plot(t[keep], v[keep], label=f"{run.name} ({run.method})", marker="." if keep.sum() < 30 else None)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("optimizer seconds")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a column no run recorded draws no line
            ax.legend(fontsize="small")
        path = folder / filename
        fig.savefig(path, dpi=120)
        saved.append(path)
    return saved
