"""Tables and curves from run folders (``summary.json`` + ``history.csv``, as written by ``Result.save``).

``find_runs(folder)`` collects every run folder at or below ``folder``
(leaving out, with a warning, any whose files cannot be read);
``table(runs)`` formats one line per run; ``plot(runs, folder)`` saves the
objective and gap estimates (and every evaluated metric) against optimizer
time as PNG files.
"""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.errors import DataError, OptionError
from fullcomp.run.history import History
from fullcomp.run.saved import check_regular

#: history columns of HMSFW's runs: what a summary that does not record its callback's columns is read with
STANDARD = (
    "k",
    "time",
    "objective_estimate",
    "objective",
    "gap_estimate",
    "glmo_gap",
    "pricing_calls",
    "glmo_converged",
    "gamma",
)


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
        """The evaluated metrics (e.g. ``test_worst`` from evaluate): the columns the run's callback added, as
        its summary records them; for a summary without that record, the numeric columns beyond HMSFW's."""
        recorded = self.summary.get("metrics")
        out = []
        for column in self.history.columns:
            if (column not in recorded) if isinstance(recorded, list) else (column in STANDARD or column[:2] == "q["):
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


class CorruptRunWarning(UserWarning):
    """A run folder that could not be read was left out of a report."""


class CorruptRun(OptionError):
    """A run folder whose summary.json or history.csv cannot be read; the message says which and why."""


#: ``on_skip(folder, reason)``: told about every run folder left out because it cannot be read
SkipHandler = Callable[[Path, str], None]


def warn_skipped(folder: Path, reason: str) -> None:
    """The default ``on_skip``: a :class:`CorruptRunWarning` naming the folder and the reason."""
    warnings.warn(f"skipping run folder {folder}: {reason}", CorruptRunWarning, stacklevel=3)


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def read_summary(path: Path) -> dict:
    """A run's summary.json as a dict, or :class:`CorruptRun` saying why it cannot be read."""
    try:
        check_regular(path)  # a FIFO would block the report: refused unopened
        summary = json.loads(path.read_text())
    except DataError as exc:
        raise CorruptRun(_short(exc)) from None
    except RecursionError:
        raise CorruptRun(f"{path.name} nests too deeply to parse (a run's summary is a few levels deep)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRun(f"{path.name} is not readable JSON ({_short(exc)})") from None
    if not isinstance(summary, dict):
        raise CorruptRun(f"{path.name} holds a JSON {type(summary).__name__}, not an object of run fields")
    return summary


def read_history(path: Path, required: tuple[str, ...] = (), numeric: tuple[str, ...] = ()) -> History:
    """A run's history.csv with the ``required`` columns, those and the ``numeric`` ones (where present)
    holding numbers; :class:`CorruptRun` saying why not."""
    try:
        check_regular(path)
        history = History.read_csv(path)
    except DataError as exc:
        raise CorruptRun(_short(exc)) from None
    except (OSError, UnicodeDecodeError, csv.Error, ValueError, TypeError) as exc:
        # TypeError: a row with fewer fields than the header (csv fills them with None)
        raise CorruptRun(f"{path.name} is not a readable CSV history ({_short(exc)})") from None
    if any(None in row for row in history):
        raise CorruptRun(f"{path.name} has a row with more fields than its header")
    for column in required:
        if column not in history.columns:
            raise CorruptRun(f"{path.name} has no {column!r} column; it is not a fullcomp run history")
    for column in (*required, *(c for c in numeric if c in history.columns)):
        try:
            history.column(column)
        except (TypeError, ValueError):
            raise CorruptRun(f"{path.name} has non-numeric values in its {column!r} column") from None
    return history


def missing_folder(path: Path) -> str:
    """Why ``path`` is not a folder to report on: a file (say which), or nothing there."""
    if path.is_file():
        return f"is a file ({path.name}), not a run folder: pass the folder that holds it"
    return "does not exist"


def find_runs(folder: str | os.PathLike, on_skip: SkipHandler | None = None) -> list[Run]:
    """Every folder at or below ``folder`` holding both ``summary.json`` and ``history.csv``.

    A folder whose files cannot be read (not JSON, garbage CSV, no ``time`` or
    ``objective_estimate`` column) is left out and reported to
    ``on_skip(folder, reason)`` (default: a :class:`CorruptRunWarning`), so
    one damaged run does not hide the others.
    """
    on_skip = warn_skipped if on_skip is None else on_skip
    root = Path(folder)
    if not root.is_dir():
        raise OptionError(
            f"report folder {root}: {missing_folder(root)}; pass the --out folder of `fullcomp run` or its parent"
        )
    runs, skipped = [], 0
    for summary_path in sorted(root.rglob("summary.json")):
        history_path = summary_path.with_name("history.csv")
        if not history_path.is_file():
            continue
        try:
            summary = read_summary(summary_path)
            # projection baselines have no gap estimate: it is checked only where present
            history = read_history(history_path, required=("time", "objective_estimate"), numeric=("gap_estimate",))
            if "optimizer_seconds" in summary:  # the table prints it as a number
                try:
                    float(summary["optimizer_seconds"])
                except (TypeError, ValueError):
                    seconds = summary["optimizer_seconds"]
                    raise CorruptRun(f"summary.json has a non-numeric 'optimizer_seconds': {seconds!r}") from None
        except CorruptRun as exc:
            on_skip(summary_path.parent, str(exc))
            skipped += 1
            continue
        name = str(summary_path.parent.relative_to(root)) if summary_path.parent != root else root.name
        runs.append(Run(name, summary_path.parent, summary, history))
    if not runs and skipped:
        raise OptionError(
            f"no readable run folders under {root}: skipped {skipped} corrupt folder(s) (see the warnings "
            "above); rerun those runs or delete their folders"
        )
    if not runs:
        raise OptionError(
            f"no run folders under {root}: a run folder holds summary.json and history.csv "
            "(written by `fullcomp run ... --out DIR` or Result.save(DIR))"
        )
    return runs


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def table(runs: list[Run]) -> str:
    """One aligned text line per run: method, seed, iterations, optimizer seconds, final estimates, metrics."""
    metrics: list[str] = []
    for run in runs:
        metrics += [m for m in run.metrics() if m not in metrics]
    header = ["run", "method", "seed", "iterations", "optimizer_s", "objective_est", "objective", "gap_est", *metrics]
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
                run.last("objective"),
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
    """Save ``objective.png``, ``gap.png`` (log scale), one ``<metric>.png`` per evaluated metric, and the
    adversary's weights of each run that recorded them (:func:`plot_weights`) into ``folder``; every curve is
    against optimizer seconds."""
    # Figure without pyplot: no global backend state, works headless.
    from matplotlib.figure import Figure

    folder = Path(folder)
    metrics: list[str] = []
    for run in runs:
        metrics += [m for m in run.metrics() if m not in metrics]
    panels = [("objective_estimate", "objective estimate F(z_k, y_k)", "objective.png", False)]
    if any("objective" in run.history.columns for run in runs):  # the true phi, where the problem could compute it
        panels.append(("objective", "objective phi (exact, at eval_every)", "true_objective.png", False))
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
    saved += [plot_weights(run, folder, len(runs) > 1) for run in runs if weight_columns(run)]
    return saved


def weight_columns(run: Run) -> list[str]:
    """The history's columns of the weights F puts on each inner value: q[0], q[1], ..."""
    return [c for c in run.history.columns if c.startswith("q[") and c.endswith("]")]


def plot_weights(run: Run, folder: Path, named: bool) -> Path:
    """``weights.png`` (``weights-<run>.png`` among several runs): the adversary's weight on each inner value
    (each group's loss) against optimizer seconds, at the rows where the run evaluated them."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    t = run.history.column("time")
    for column in weight_columns(run):
        v = run.history.column(column)
        keep = np.isfinite(t) & np.isfinite(v)
        ax.plot(t[keep], v[keep], label=column, marker="." if keep.sum() < 30 else None)
    ax.set_xlabel("optimizer seconds")
    ax.set_ylabel("weight on the inner value")
    ax.set_title(f"{run.name} ({run.method})" if named else f"the adversary's weights ({run.method})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", ncol=2 if len(weight_columns(run)) > 8 else 1)
    path = folder / (f"weights-{run.name.replace('/', '-')}.png" if named else "weights.png")
    fig.savefig(path, dpi=120)
    return path
