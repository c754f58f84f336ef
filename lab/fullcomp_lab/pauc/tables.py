"""The pAUC-fairness protocol's mean/SD tables and curves."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp_lab import harness
from fullcomp_lab.harness import mean_sd, protocol_runs
from fullcomp_lab.pauc.config import METHODS, PROTOCOL

# ---------------------------------------------------------------------------------------------- tables

#: (key, title, higher is better) of the table columns; pAUC is the normalized one (FPR <= 0.3).
COLUMNS = (
    ("test_pauc", "pAUC", True),
    ("test_eod", "EOD", False),
    ("test_eop", "EOP", False),
    ("test_dp", "DP", False),
    ("test_pauc_mcclish", "pAUC (McClish)", True),
    ("test_auc", "AUC", True),
    ("val_pauc", "val pAUC", True),
    ("val_eod", "val EOD", False),
    ("wall_seconds", "wall s/run", None),
)


class PAUCRun(harness.RunFolder):
    """A run folder of ``fullcomp-lab bench pauc-fairness``; ``metric(key)`` is its value of a table column."""

    def metric(self, key: str) -> float:
        if key == "wall_seconds":
            return self.number(key)
        return float(self.summary.get("metrics", {}).get(key, math.nan))


def find_protocol_runs(out_dir: str | os.PathLike) -> list[PAUCRun]:
    """Every run folder under ``out_dir`` written by :func:`bench_pauc`."""
    return [PAUCRun(*run) for run in protocol_runs(out_dir, PROTOCOL, "fullcomp-lab bench pauc-fairness")]


def summarize(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """One row per (dataset, method): seeds, mean and sample SD of every column, and ``rank_pauc``
    (1 = highest mean test pAUC among the methods of that data set)."""
    rows = []
    for dataset, method, runs in harness.group_runs(find_protocol_runs(out_dir), METHODS):
        row: dict[str, Any] = {
            "dataset": dataset,
            "method": method,
            "label": METHODS[method].label if method in METHODS else method,
            **harness.seed_columns(runs),
            "iters": runs[0].summary.get("iters"),
        }
        for key, _, _ in COLUMNS:
            row[f"{key}_mean"], row[f"{key}_sd"] = mean_sd([r.metric(key) for r in runs])
        rows.append(row)
    harness.rank_rows(rows, "test_pauc", "rank_pauc", -math.inf)
    return rows


#: What the Markdown tables show, above them.
ABOUT = (
    "Mean ± sample SD over seeds of the final model on the test split. pAUC: one-way partial AUC with "
    "FPR <= 0.3, normalized to [0, 1] (pair count over the ceil(0.3 n-) highest-scored negatives); McClish: "
    "scikit-learn's roc_auc_score(max_fpr=0.3). EOD = max(|ΔTPR|, |ΔFPR|), EOP = |ΔTPR|, DP = |ΔPR| between "
    "the sensitive groups at threshold 0.5 on sigmoid scores (lower is better). Bold: best mean per column "
    "(no significance claim)."
)


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["# pAUC-fairness protocol tables", "", ABOUT]
    for dataset, block in harness.grouped(rows, "dataset"):
        lines += ["", f"## {dataset} ({block[0]['iters']} iterations per run)", ""]
        digits = {key: 1 if key == "wall_seconds" else 4 for key, _, _ in COLUMNS}
        best = {key: harness.best_mean(block, key, higher) for key, _, higher in COLUMNS}
        header = ["Method", "Seeds", *(title for _, title, _ in COLUMNS), "pAUC rank"]
        body = ([r["label"], r["n_seeds"], *harness.mean_cells(r, digits, best), r["rank_pauc"]] for r in block)
        lines += harness.markdown_table(header, body)
    return "\n".join(lines) + "\n"


def tables(out_dir: str | os.PathLike) -> harness.TableFiles:
    """Write ``out_dir/tables.csv`` and ``out_dir/tables.md`` (Table 3's columns per data set) and return them."""
    rows = summarize(out_dir)
    return harness.write_tables(out_dir, "tables", rows, _markdown(rows))


def plots(out_dir: str | os.PathLike) -> list[Path]:
    """Save ``out_dir/<dataset>/pauc_fairness.png``: test pAUC against test EOD and DP (mean ± SD per method),
    and validation pAUC against iterations after the first evaluation (mean over seeds)."""
    from matplotlib.figure import Figure

    saved = []
    grouped = harness.group_runs(find_protocol_runs(out_dir), METHODS)
    for dataset in sorted({d for d, _, _ in grouped}):
        block = [(m, runs) for d, m, runs in grouped if d == dataset]
        fig = Figure(figsize=(14, 4.2), layout="constrained")
        axes = fig.subplots(1, 3)
        for i, (method, runs) in enumerate(block):
            label = METHODS[method].label if method in METHODS else method
            color = f"C{list(METHODS).index(method) if method in METHODS else i}"
            pauc = [r.metric("test_pauc") for r in runs]
            for ax, key in zip(axes[:2], ("test_eod", "test_dp")):
                values = [r.metric(key) for r in runs]
                ax.errorbar(
                    np.mean(values),
                    np.mean(pauc),
                    xerr=np.std(values, ddof=1) if len(runs) > 1 else None,
                    yerr=np.std(pauc, ddof=1) if len(runs) > 1 else None,
                    fmt="o",
                    color=color,
                    label=label,
                    capsize=3,
                )
            curves = []
            for r in runs:
                if "val_pauc" not in r.history.columns:
                    continue
                k, v = r.history.column("k"), r.history.column("val_pauc")
                keep = np.isfinite(v) & (k > 0)  # the untrained start would flatten the scale
                curves.append((k[keep], v[keep]))
            if curves and all(c[0].size == curves[0][0].size for c in curves):
                axes[2].plot(curves[0][0], np.mean([c[1] for c in curves], axis=0), color=color, label=label)
        for ax, title in zip(axes[:2], ("EOD", "DP")):
            ax.set_xlabel(f"test {title} (lower is better)")
            ax.set_ylabel("test pAUC (FPR <= 0.3, normalized)")
            ax.grid(alpha=0.3)
        axes[2].set_xlabel("iteration")
        axes[2].set_ylabel("validation pAUC")
        axes[2].grid(alpha=0.3)
        axes[0].legend(fontsize="small")
        fig.suptitle(f"{dataset}: partial AUC vs disparity (mean ± sample SD over seeds)")
        saved.append(harness.save_figure(fig, Path(out_dir) / dataset / "pauc_fairness.png", dpi=110))
    return saved
