"""The CSV and Markdown tables of a protocol: files, cells, best means and seed columns."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp import report
from fullcomp.errors import OptionError
from fullcomp.run import History, write_atomic


@dataclass
class TableFiles:
    """What a protocol's ``tables`` wrote: the CSV and Markdown paths and the rows themselves."""

    csv: Path
    markdown: Path
    rows: list[dict[str, Any]]


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV (``\\n`` line ends): every key of any row in order of first appearance, blank where a
    row lacks one."""
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in rows for k in r))
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_tables(
    out_dir: str | os.PathLike,
    stem: str,
    csv_rows: Sequence[dict[str, Any]],
    markdown: str,
    rows: list[dict[str, Any]] | None = None,
) -> TableFiles:
    """Write ``out_dir/<stem>.csv`` (``csv_rows``) and ``out_dir/<stem>.md`` (``markdown``) atomically; the
    returned :class:`TableFiles` holds ``rows`` (default the CSV rows)."""
    out = Path(out_dir)
    write_atomic(out / f"{stem}.csv", csv_text(csv_rows))
    write_atomic(out / f"{stem}.md", markdown)
    return TableFiles(out / f"{stem}.csv", out / f"{stem}.md", list(csv_rows) if rows is None else rows)


@dataclass
class RunFolder:
    """One run folder of a protocol: its path, its summary.json and its history.csv."""

    path: Path
    summary: dict
    history: History = field(repr=False)

    def number(self, key: str) -> float:
        """``summary[key]`` as a float, NaN where the summary lacks it."""
        return float(self.summary.get(key, math.nan))


def by_seed(runs: Iterable[Any]) -> list[Any]:
    """Run folders (with a ``summary`` dict) sorted by their seed."""
    return sorted(runs, key=lambda r: int(r.summary.get("seed", 0)))


def group_runs(
    runs: Iterable[RunFolder], methods: Iterable[str], datasets: Sequence[str] = ()
) -> list[tuple[str, str, list[Any]]]:
    """(dataset, method, its runs by seed) for each pair in the runs' summaries: the data sets of ``datasets``
    first, in that order, then the others by name; within one, the methods in the order of ``methods``, then
    the others."""
    groups: dict[tuple[str, str], list[RunFolder]] = {}
    for run in runs:
        groups.setdefault((str(run.summary["dataset"]), str(run.summary["method"])), []).append(run)
    data_rank = {d: i for i, d in enumerate(datasets)}
    rank = {m: i for i, m in enumerate(methods)}
    keys = sorted(groups, key=lambda k: (data_rank.get(k[0], len(data_rank)), k[0], rank.get(k[1], len(rank))))
    return [(d, m, by_seed(groups[(d, m)])) for d, m in keys]


def rank_rows(rows: Sequence[dict[str, Any]], key: str, name: str, missing: float) -> None:
    """Set ``row[name]`` to each row's rank among the rows of its data set by ``<key>_mean``, 1 for the highest;
    a mean that is not finite counts as ``missing``, and equal ones keep the rows' order."""
    for dataset in {r["dataset"] for r in rows}:
        block = [r for r in rows if r["dataset"] == dataset]
        order = sorted(block, key=lambda r: -(r[f"{key}_mean"] if math.isfinite(r[f"{key}_mean"]) else missing))
        for position, r in enumerate(order, 1):
            r[name] = position


def seed_columns(runs: Sequence[Any]) -> dict[str, Any]:
    """The ``seeds`` (space-separated) and ``n_seeds`` columns of a table row over ``runs``."""
    return {"seeds": " ".join(str(r.summary.get("seed", "")) for r in runs), "n_seeds": len(runs)}


def best_mean(rows: Iterable[dict[str, Any]], key: str, higher: bool | None) -> float | None:
    """The best finite ``<key>_mean`` of ``rows`` (the highest if ``higher``, else the lowest); None where
    ``higher`` is None (a column not ranked) or no mean is finite."""
    means = [r[f"{key}_mean"] for r in rows if math.isfinite(r[f"{key}_mean"])]
    if higher is None or not means:
        return None
    return max(means) if higher else min(means)


def grouped(
    rows: Iterable[dict[str, Any]], key: str, order: Iterable[Any] | None = None
) -> list[tuple[Any, list[dict[str, Any]]]]:
    """(value, rows) for each value of ``row[key]``, in ``order`` (default sorted); empty groups are left out."""
    rows = list(rows)
    values = sorted({r[key] for r in rows}) if order is None else list(order)
    return [(v, block) for v in values if (block := [r for r in rows if r[key] == v])]


def mean_cells(
    row: Mapping[str, Any], digits: Mapping[str, int], best: Mapping[str, float | None] | None = None
) -> list[str]:
    """The :func:`cell` of each key of ``digits`` (its decimals) in ``row``, bold where the mean is ``best[key]``."""
    best = best or {}
    return [
        cell(row[f"{k}_mean"], row[f"{k}_sd"], d, best.get(k) is not None and row[f"{k}_mean"] == best[k])
        for k, d in digits.items()
    ]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], left: int = 1) -> list[str]:
    """The lines of a Markdown table; the first ``left`` columns align left, the others right."""
    rule = "|" + "---|" * left + "---:|" * (len(header) - left)
    return ["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(map(str, r)) + " |" for r in rows)]


def save_figure(fig: Any, path: str | os.PathLike, dpi: int) -> Path:
    """Save a matplotlib figure as ``path`` (its folder made as needed) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def cell(mean: float, sd: float, digits: int, bold: bool = False) -> str:
    """A Markdown table cell ``mean ± sd`` (only the mean when SD is NaN), "n/a" for a NaN mean and
    "diverged" for an infinite one."""
    if math.isnan(mean):
        return "n/a"
    if math.isinf(mean):
        return "diverged"
    text = f"{mean:.{digits}f}" if math.isnan(sd) else f"{mean:.{digits}f} ± {sd:.{digits}f}"
    return f"**{text}**" if bold else text


# ---- the run folders of one protocol ----


def protocol_runs(
    folder: str | os.PathLike, protocol: str, writer: str, on_skip: report.SkipHandler | None = None
) -> list[tuple[Path, dict, History]]:
    """(folder, summary, history) of every run under ``folder`` whose summary.json says ``"protocol": protocol``.

    ``writer`` names what writes such runs (e.g. ``"fullcomp-lab bench movielens"``), for the error messages.
    Folders that cannot be read are left out and reported to ``on_skip`` as in :func:`find_runs`.
    """
    on_skip = report.warn_skipped if on_skip is None else on_skip
    root = Path(folder)
    if not root.is_dir():
        raise OptionError(f"{root}: {report.missing_folder(root)}; pass the --out folder of `{writer}`")
    runs = []
    for path in sorted(root.rglob("summary.json")):
        history_path = path.with_name("history.csv")
        try:
            summary = report.read_summary(path)
            if summary.get("protocol") != protocol or not history_path.is_file():
                continue
            history = report.read_history(history_path)
        except report.CorruptRun as exc:
            on_skip(path.parent, str(exc))
            continue
        runs.append((path.parent, summary, history))
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
