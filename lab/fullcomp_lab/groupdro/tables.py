"""The group-robust training protocol's tables (mean and SD over seeds) and figures."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp_lab import harness
from fullcomp_lab.groupdro.config import DATASETS, METHODS, PROTOCOL
from fullcomp_lab.harness import mean_sd, protocol_runs

#: Epochs at the end of a run whose test worst-group accuracies give its late level and its epoch-to-epoch SD
#: (how much the model moves when training is not stopped early).
LATE = 5
#: (key, title, higher is better, decimals) of the main table, all on the test split at the epoch of best
#: validation worst-group accuracy, then the same at the last epoch, then the cost.
COLUMNS = (
    ("test_worst_acc", "worst-group acc", True, 3),
    ("test_avg_acc", "average acc", True, 3),
    ("test_worst_loss", "worst-group loss", False, 3),
    ("last_test_worst_acc", "worst-group acc, last epoch", True, 3),
    ("last_test_avg_acc", "average acc, last epoch", True, 3),
    ("last_test_worst_loss", "worst-group loss, last epoch", False, 3),
    ("late_test_worst_acc", f"worst-group acc, mean of last {LATE} epochs", True, 3),
    ("late_sd_test_worst_acc", f"epoch-to-epoch SD, last {LATE} epochs", False, 3),
    ("val_worst_acc", "val worst-group acc", True, 3),
    ("epoch", "selected epoch", None, 1),
    ("seconds_per_epoch", "s / epoch", None, 2),
    ("ms_per_update", "ms / update", None, 1),
)
#: Where the tuned settings and the run's provenance are written (read back into the tables).
CONFIG_NAME = "group-dro-config.json"
PROVENANCE_NAME = "protocol.json"


class GroupRun(harness.RunFolder):
    """A run folder of ``fullcomp-lab bench group-dro``; ``metric(key)`` is its value of a table column."""

    def metric(self, key: str) -> float:
        if key in ("seconds_per_epoch", "ms_per_update"):
            return self.number(key)
        if key.startswith("late_"):
            return self.late(key)
        block, name = ("last_epoch", key[5:]) if key.startswith("last_") else ("selected", key)
        value = self.summary.get(block, {}).get(name, math.nan)
        return float(value) if isinstance(value, (int, float)) else math.nan

    def late(self, key: str) -> float:
        """``late_test_worst_acc``: the mean test worst-group accuracy of the last :data:`LATE` evaluated
        epochs; ``late_sd_test_worst_acc``: their sample SD (NaN with fewer than two such epochs)."""
        h = self.history
        if "epoch" not in h.columns or "test_worst_acc" not in h.columns:
            return math.nan
        epoch, value = h.column("epoch"), h.column("test_worst_acc")
        value = value[np.isfinite(epoch) & (epoch >= 1) & np.isfinite(value)][-LATE:]
        if key == "late_test_worst_acc":
            return float(value.mean()) if value.size else math.nan
        return float(value.std(ddof=1)) if value.size > 1 else math.nan


def find_protocol_runs(out_dir: str | os.PathLike) -> list[GroupRun]:
    """Every run folder under ``out_dir`` written by ``fullcomp-lab bench group-dro``."""
    return [GroupRun(*run) for run in protocol_runs(out_dir, PROTOCOL, "fullcomp-lab bench group-dro")]


def _label(method: str) -> str:
    return METHODS[method].label if method in METHODS else method


def summarize(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """One row per (dataset, method): seeds, settings, mean and sample SD of every column, the mean test
    accuracy of every group at the selected epoch, and ``rank_worst_acc`` (1 = highest mean test
    worst-group accuracy at the selected epoch on that data set)."""
    rows = []
    for dataset, method, runs in harness.group_runs(find_protocol_runs(out_dir), METHODS, DATASETS):
        first = runs[0].summary
        row: dict[str, Any] = {
            "dataset": dataset,
            "method": method,
            "label": _label(method),
            **harness.seed_columns(runs),
            "settings": json.dumps(first.get("settings", {}), sort_keys=True),
            "epochs": first.get("epochs"),
            "batch": first.get("batch"),
            "n_weights": first.get("n_weights"),
            "groups": "; ".join(first.get("groups", [])),
        }
        for key, *_ in COLUMNS:
            row[f"{key}_mean"], row[f"{key}_sd"] = mean_sd([r.metric(key) for r in runs])
        for k in range(len(first.get("groups", []))):
            row[f"test_acc_g{k}_mean"], row[f"test_acc_g{k}_sd"] = mean_sd([r.metric(f"test_acc_g{k}") for r in runs])
        rows.append(row)
    harness.rank_rows(rows, "test_worst_acc", "rank_worst_acc", 0.0)
    return rows


ABOUT = (
    "Mean ± sample SD over seeds. Test metrics at the epoch of highest validation worst-group accuracy "
    "(selected epoch), then at the last epoch, then the mean and the sample SD of the test worst-group "
    f"accuracy over the last {LATE} epochs of each run. Worst-group accuracy: the lowest of the four groups' "
    "accuracies; average accuracy: over all test rows; worst-group loss: the highest group mean logistic "
    "loss. s / epoch: optimizer seconds per epoch, evaluation excluded; ms / update: optimizer milliseconds "
    "per update (one batch drawn and one step taken). Bold: best mean per column "
    "(no significance claim)."
)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _markdown(rows: list[dict[str, Any]], out_dir: Path) -> str:
    lines = ["# Group-robust training tables", "", ABOUT]
    provenance = _read_json(out_dir / PROVENANCE_NAME)
    if provenance:
        lines += ["", f"Command: `{provenance.get('command', '?')}`", "", f"Machine: {provenance.get('machine', '?')}."]
        phases = provenance.get("phases", [])
        if phases:
            spent = ", ".join(f"{p['name']} {p['seconds']:.0f} s" for p in phases)
            lines += ["", f"Wall time: {spent}; total {provenance.get('total_seconds', math.nan):.0f} s."]
    for dataset, block in harness.grouped(rows, "dataset", order=dict.fromkeys(r["dataset"] for r in rows)):
        first = block[0]
        epochs = f"{first['epochs']} epoch{'' if first['epochs'] == 1 else 's'}"
        lines += ["", f"## {dataset} ({epochs}, batch {first['batch']}, {first['n_weights']} weights)", ""]
        digits = {key: d for key, _, _, d in COLUMNS}
        best = {key: harness.best_mean(block, key, higher) for key, _, higher, _ in COLUMNS}
        header = ["Method", "Seeds", *(title for _, title, _, _ in COLUMNS)]
        body = ([r["label"], r["n_seeds"], *harness.mean_cells(r, digits, best)] for r in block)
        lines += harness.markdown_table(header, body)
        groups = [k for k in range(8) if f"test_acc_g{k}_mean" in first]
        names = first["groups"].split("; ") if first["groups"] else []
        lines += ["", "Test accuracy per group at the selected epoch:", ""]
        group_digits = {f"test_acc_g{k}": 3 for k in groups}
        group_best = {key: harness.best_mean(block, key, True) for key in group_digits}
        header = ["Method", *(names[k] if k < len(names) else f"group {k}" for k in groups)]
        body = ([r["label"], *harness.mean_cells(r, group_digits, group_best)] for r in block)
        lines += harness.markdown_table(header, body)
        lines += ["", "Settings (chosen on validation unless the run was told otherwise):", ""]
        lines += harness.markdown_table(
            ["Method", "Settings"], ([r["label"], f"`{r['settings']}`"] for r in block), left=2
        )
    return "\n".join(lines) + "\n"


def tables(out_dir: str | os.PathLike) -> harness.TableFiles:
    """Write ``out_dir/tables.csv`` and ``out_dir/tables.md`` and return them."""
    rows = summarize(out_dir)
    return harness.write_tables(out_dir, "tables", rows, _markdown(rows, Path(out_dir)))


# ----------------------------------------------------------------------------------------------- figures


def _evaluated(run: GroupRun, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(optimizer time, ``column``) at the evaluated rows (epochs) of a run."""
    h = run.history
    if column not in h.columns:
        return np.array([]), np.array([])
    t, v = h.column("time"), h.column(column)
    keep = np.isfinite(v)
    return t[keep], v[keep]


def _color(method: str, i: int) -> str:
    return f"C{list(METHODS).index(method) if method in METHODS else i}"


def plots(out_dir: str | os.PathLike) -> list[Path]:
    """Save ``out_dir/worst_group_vs_time.png`` (test worst-group accuracy after every epoch against
    optimizer seconds, mean over seeds with a ± SD band, one panel per data set) and
    ``out_dir/adversary_weights.png`` (the weights q the adversary puts on each group over training: the
    subgradient of F at HMSFW's tracked group losses, columns ``q[i]`` of the history, and Group DRO's
    exponentiated-gradient q; mean over seeds)."""
    from matplotlib.figure import Figure

    grouped = harness.group_runs(find_protocol_runs(out_dir), METHODS, DATASETS)
    datasets = list(dict.fromkeys(d for d, _, _ in grouped))
    saved = []
    fig = Figure(figsize=(6.2 * len(datasets), 4.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(datasets)))
    for ax, dataset in zip(axes, datasets):
        for i, (method, runs) in enumerate((m, r) for d, m, r in grouped if d == dataset):
            curves = [_evaluated(r, "test_worst_acc") for r in runs]
            curves = [c for c in curves if c[0].size]
            if not curves or any(c[0].size != curves[0][0].size for c in curves):
                continue
            t = np.mean([c[0] for c in curves], axis=0)
            v = np.array([c[1] for c in curves])
            mean = v.mean(axis=0)
            ax.plot(t, mean, color=_color(method, i), label=_label(method), marker=".", markersize=3)
            if len(curves) > 1:
                sd = v.std(axis=0, ddof=1)
                ax.fill_between(t, mean - sd, mean + sd, color=_color(method, i), alpha=0.12, linewidth=0)
        ax.set_xlabel("optimizer seconds (mean over seeds)")
        ax.set_ylabel("test worst-group accuracy")
        ax.set_title(dataset)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle("worst-group test accuracy after every epoch (mean ± SD over seeds)")
    saved.append(harness.save_figure(fig, Path(out_dir) / "worst_group_vs_time.png", dpi=110))

    shown = ("hmsfw-max", "hmsfw-cvar", "group-dro-ref", "group-dro")
    adversaries = [m for m in shown if any(mm == m for _, mm, _ in grouped)]
    if adversaries:
        fig = Figure(figsize=(4.6 * len(adversaries), 3.4 * len(datasets)), layout="constrained")
        axes = np.array(fig.subplots(len(datasets), len(adversaries), squeeze=False))
        for row, dataset in enumerate(datasets):
            for col, method in enumerate(adversaries):
                ax = axes[row, col]
                runs = next((r for d, m, r in grouped if d == dataset and m == method), [])
                names = runs[0].summary.get("groups", []) if runs else []
                for g in range(len(names)):
                    curves = []
                    for r in runs:
                        if f"q[{g}]" not in r.history.columns:
                            continue
                        k, q = r.history.column("k"), r.history.column(f"q[{g}]")
                        keep = np.isfinite(q)
                        curves.append((k[keep] / max(r.summary.get("iters_per_epoch", 1), 1), q[keep]))
                    if curves and all(c[0].size == curves[0][0].size for c in curves):
                        ax.plot(curves[0][0], np.mean([c[1] for c in curves], axis=0), label=names[g], color=f"C{g}")
                ax.set_ylim(-0.03, 1.03)
                ax.set_xlabel("epoch")
                ax.set_ylabel("weight q on the group")
                ax.set_title(f"{dataset}: {_label(method)}", fontsize="medium")
                ax.grid(alpha=0.3)
            axes[row, 0].legend(fontsize="small")
        fig.suptitle("the adversary's group weights over training (mean over seeds)")
        saved.append(harness.save_figure(fig, Path(out_dir) / "adversary_weights.png", dpi=110))
    return saved
