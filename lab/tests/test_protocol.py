"""The MovieLens protocol on tiny synthetic data: every method, the budget, tables, plots, config, tuning, CLI."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import pytest

import fullcomp_lab as ex
from fullcomp.datasets import synthetic_ratings
from fullcomp.errors import OptionError
from fullcomp.run import History
from fullcomp_lab import movielens as protocol
from fullcomp_lab.completion import Completion, completion_problem
from fullcomp_lab.harness import parse_seeds
from fullcomp_lab.movielens import runs as movielens_runs

SYNTHETIC = {"shape": (40, 30), "n_ratings": 900, "seed": 3}
BATCH = 64


def tiny_config() -> dict:
    """Settings for the tiny data: the committed ones, with the step parameters scaled to its reference scales."""
    cfg = protocol.load_config().to_dict()
    # A quarter of sqrt(P Q): at larger radii the first Frank-Wolfe steps (gamma_0 = 1) overshoot on data this
    # small, and eight updates are too few to come back below the start.
    cfg["radius_scale"] = {"max": 0.25, "cvar": 0.25}
    data = synthetic_ratings(**SYNTHETIC)
    for objective in ("max", "cvar"):
        refs = protocol.reference_scales(completion_problem(data, objective, 0.25, batch=BATCH))
        s = cfg["settings"][objective]
        s["clipped-scfw"]["clip"] = 0.3 * refs["jacobian_norm"]
        s["psg"]["eta"] = 0.01 * refs["step_reference"]
        s["prox-linear"]["M"] = 30.0 * refs["curvature_reference"]
        s["linasa-icg"]["beta"] = 10.0 * refs["curvature_reference"]
    return cfg


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """All nine methods on Max (seed 0), PSG again with seed 1, and the CVaR code paths of four methods."""
    out = tmp_path_factory.mktemp("bench")
    config = tiny_config()
    common = dict(eval_every=2, iters=6, batch=BATCH, synthetic=SYNTHETIC, config=config, save_x=True)
    ex.bench_movielens(None, "max", None, [0], None, out, **common)
    ex.bench_movielens(None, "max", None, [1], ["psg"], out, **common)
    ex.bench_movielens(None, "cvar", None, [0], "hmsfw-ii-fb,psg,prox-linear,linasa-icg", out, **common)
    return out, config


def history(folder: Path) -> History:
    return History.read_csv(folder / "history.csv")


def test_every_method_runs_and_lowers_the_training_objective(runs):
    out, _ = runs
    done = [("max", m) for m in protocol.METHODS] + [("cvar", m) for m in ("hmsfw-ii-fb", "psg", "prox-linear")]
    done.append(("cvar", "linasa-icg"))
    for objective, method in done:
        folder = out / objective / method / "seed0"
        assert {p.name for p in folder.iterdir()} >= {"history.csv", "summary.json", "x.npy"}
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["method"] == method and summary["objective"] == objective and summary["protocol"] == "movielens"
        assert summary["accepted_updates"] == 6 and summary["stopped"] == "iterations"
        assert summary["settings"] == protocol.check_settings(method, summary["settings"])
        h = history(folder)
        first, last = h[0], h[-1]
        assert first["k"] == 0
        assert last["train_objective"] < first["train_objective"], (objective, method)
        assert np.isfinite([last["test_worst"], last["val_worst"], last["test_average"]]).all()
        # Evaluations every 2 updates and at the final state only.
        evaluated = [r["k"] for r in h if "train_objective" in r]
        assert evaluated == [0, 2, 4, 6]
    # Zero start: every method's first evaluated state has the same training objective.
    starts = {history(out / "max" / m / "seed0")[0]["train_objective"] for m in protocol.METHODS}
    assert len(starts) == 1


@pytest.mark.parametrize("clock_name", ["cpu", "wall"])
def test_budget_excludes_evaluation(monkeypatch, tmp_path, clock_name):
    import fullcomp.run.budget as budget

    clock = {"now": 0.0}

    def fake_perf_counter() -> float:
        clock["now"] += 0.001  # every reading advances the clock a little
        return clock["now"]

    evaluate = Completion.evaluate

    def slow_evaluate(self, it):
        clock["now"] += 100.0  # an evaluation that would exhaust the budget if it were counted
        return evaluate(self, it)

    monkeypatch.setattr(budget.time, budget.CLOCKS[clock_name], fake_perf_counter)
    monkeypatch.setattr(Completion, "evaluate", slow_evaluate)
    ex.bench_movielens(
        None, "max", 0.02, [0], ["psg", "hmsfw-ii-fb"], tmp_path, eval_every=1, batch=BATCH, synthetic=SYNTHETIC,
        config=tiny_config(), iters=200, save_x=False, clock=clock_name,
    )  # fmt: skip
    for method in ("psg", "hmsfw-ii-fb"):
        folder = tmp_path / "max" / method / "seed0"
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["stopped"] == "seconds" and summary["clock"] == clock_name
        assert summary["accepted_updates"] >= 2
        assert summary["seconds_per_update"] <= 0.02
        times = history(folder).column("time")
        assert (times <= 0.02).all()  # the scored state lies within the budget
        assert not (folder / "x.npy").exists()
        # Every recorded state was evaluated, each evaluation costing 100 fake seconds outside the budget.
        assert np.isfinite(history(folder).column("test_worst")).all()


def test_bench_resumes_finished_runs_and_reruns_changed_ones(tmp_path, monkeypatch):
    common = dict(iters=2, batch=BATCH, synthetic=SYNTHETIC, config=tiny_config(), save_x=False)
    ex.bench_movielens(None, "max", None, [0], ["psg"], tmp_path, **common)
    calls = []
    real = protocol.run_method
    monkeypatch.setattr(movielens_runs, "run_method", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    lines = []
    ex.bench_movielens(None, "max", None, [0, 1], ["psg"], tmp_path, log=lines.append, **common)
    assert calls == ["psg"] and any("kept the finished run" in line for line in lines)  # only seed 1 ran
    ex.bench_movielens(None, "max", None, [0], ["psg"], tmp_path, **{**common, "iters": 3})
    assert calls == ["psg", "psg"]  # a different budget is not the same run
    assert json.loads((tmp_path / "max" / "psg" / "seed0" / "summary.json").read_text())["accepted_updates"] == 3
    ex.bench_movielens(None, "max", None, [0], ["psg"], tmp_path, resume=False, **{**common, "iters": 3})
    assert calls == ["psg", "psg", "psg"]


def test_tables_have_the_papers_columns(runs):
    out, _ = runs
    files = ex.tables(out)
    with open(files.csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    columns = [c for key, _, _ in protocol.COLUMNS for c in (f"{key}_mean", f"{key}_sd")]
    assert set(columns) <= set(rows[0])
    assert [r["method"] for r in rows if r["objective"] == "max"] == list(protocol.METHODS)
    assert [r["method"] for r in rows if r["objective"] == "cvar"] == [
        "hmsfw-ii-fb",
        "psg",
        "prox-linear",
        "linasa-icg",
    ]
    # PSG on Max has two seeds: mean and sample SD (ddof 1) of the final states.
    psg = next(r for r in rows if r["objective"] == "max" and r["method"] == "psg")
    finals = [history(out / "max" / "psg" / f"seed{s}")[-1]["test_worst"] for s in (0, 1)]
    assert psg["n_seeds"] == "2"
    assert float(psg["test_worst_mean"]) == pytest.approx(np.mean(finals))
    assert float(psg["test_worst_sd"]) == pytest.approx(np.std(finals, ddof=1))
    assert float(psg["updates_mean"]) == 6.0
    single = next(r for r in rows if r["method"] == "hmsfw-i")
    assert single["test_worst_sd"] == "nan"  # one seed: no sample SD
    text = files.markdown.read_text()
    for _, title, _ in protocol.COLUMNS:
        assert title in text
    assert "## Max: final test losses" in text and "## CVaR0.3: supporting results" in text
    assert "| HMSFW II FB |" in text and "| LiNASA+ICG |" in text and "**" in text


def test_plots_are_pngs_per_objective(runs):
    out, _ = runs
    paths = ex.plots(out)
    assert [p.relative_to(out).as_posix() for p in paths] == ["max/curves.png", "cvar/curves.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_common_support_curve_ends_at_the_shortest_seed():
    def run(times, values):
        rows = [{"k": i, "time": t, "test_worst": v} for i, (t, v) in enumerate(zip(times, values))]
        return protocol.ProtocolRun(Path("."), {}, History(rows))

    a = run([0.0, 1.0, 2.0, 3.0], [4.0, 3.0, 2.0, 1.0])
    b = run([0.0, 0.5, 1.5], [4.0, 3.0, 2.0])
    grid, mean, sd = protocol.common_curve([a, b], "test_worst", points=4)
    assert grid[0] == 0.0 and grid[-1] == 1.5  # no extrapolation past the shorter seed
    assert mean[-1] == pytest.approx((2.5 + 2.0) / 2) and sd[-1] == pytest.approx(np.std([2.5, 2.0], ddof=1))


def test_config_round_trips(tmp_path):
    committed = protocol.load_config()
    assert set(committed.settings) == {"max", "cvar"}
    assert set(committed.settings["max"]) == set(protocol.METHODS)
    path = committed.save(tmp_path / "c.json")
    again = protocol.load_config(path)
    assert again.to_dict() == committed.to_dict()
    assert protocol.load_config(json.loads(path.read_text())).to_dict() == committed.to_dict()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["settings"]["max"]["psg"].update(step=1.0), "unknown step"),
        (lambda c: c["settings"]["cvar"]["prox-linear"].pop("M"), "missing M"),
        (lambda c: c["settings"]["max"].update(sgd={}), "unknown method"),
        (lambda c: c["radius_scale"].update(max=-1.0), "radius_scale"),
        (lambda c: c.pop("settings"), "settings"),
    ],
)
def test_bad_config_is_an_option_error(change, message):
    cfg = protocol.load_config().to_dict()
    change(cfg)
    with pytest.raises(OptionError, match=message):
        protocol.load_config(cfg)


def test_bad_options(tmp_path):
    with pytest.raises(OptionError, match="unknown method"):
        ex.bench_movielens(None, "max", 1.0, [0], ["sgd"], tmp_path)
    with pytest.raises(OptionError, match="objective"):
        ex.bench_movielens(None, "mean", 1.0, [0], None, tmp_path)
    with pytest.raises(OptionError, match="budget"):
        ex.bench_movielens(None, "max", None, [0], None, tmp_path)
    with pytest.raises(OptionError, match="seeds"):
        parse_seeds("2004-2000")
    with pytest.raises(OptionError, match="no movielens runs"):
        ex.tables(tmp_path)
    assert parse_seeds("2000-2002,2007") == [2000, 2001, 2002, 2007]


def test_tuning_writes_the_config_that_bench_reads(tmp_path):
    grids = {"psg": {"eta": [0.003, 0.03]}, "hmsfw-ii-fb": {"max_pricing": [1, 2], "pool": [5]}}
    path = tmp_path / "tuned.json"
    cfg = ex.tune_movielens(
        None, "max", None, [1000, 1001], ["psg", "hmsfw-ii-fb"], grids=grids, config_path=path, iters=4,
        batch=BATCH, synthetic=SYNTHETIC, select_radius=True, radius_scales=(0.5, 1.0), radius_method="psg",
        base_config=tiny_config(),
    )  # fmt: skip
    saved = protocol.load_config(path)
    assert saved.to_dict() == cfg.to_dict()
    record = saved.meta["tuning"]["max"]
    assert set(record["radius"]["mean_val_worst"]) == {"0.5", "1"}
    assert saved.fields["radius_scale"]["max"] in (0.5, 1.0)
    assert saved.meta["data"].startswith("synthetic") and saved.meta["tuning_seeds"] == [1000, 1001]
    for method in ("psg", "hmsfw-ii-fb"):
        tried = record["methods"][method]["candidates"]
        best = min(tried, key=lambda t: t["mean"])
        assert saved.settings["max"][method] == best["settings"]
        assert all(len(t["train_objective"]) == 2 for t in tried)
        chosen = record["methods"][method]["chosen"]
        assert record["methods"][method]["at_grid_edge"] == [k for k in chosen if len(grids[method][k]) > 1]
    refs = record["references"]
    etas = [t["settings"]["eta"] for t in record["methods"]["psg"]["candidates"]]
    assert etas == pytest.approx([0.003 * refs["step_reference"], 0.03 * refs["step_reference"]])
    assert saved.settings["cvar"] == protocol.load_config(tiny_config()).settings["cvar"]  # untouched objective


def test_cli_helpers_run_tables_and_plots(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="fullcomp-lab bench movielens")
    protocol.add_arguments(parser)
    config = tmp_path / "tiny.json"
    protocol.load_config(tiny_config()).save(config)
    args = parser.parse_args(
        ["--objective", "cvar", "--seeds", "5,6", "--methods", "psg", "--budget", "30", "--iters", "3",
         "--out", str(tmp_path / "out"), "--config", str(config), "--batch", str(BATCH), "--synthetic-shape", "40x30",
         "--synthetic-ratings", "900", "--synthetic-seed", "3", "--no-progress", "--no-save-x"]
    )  # fmt: skip
    assert args.seeds == [5, 6] and args.methods == ["psg"] and args.synthetic_shape == (40, 30)
    assert protocol.run_from_args(args) == 0
    text = capsys.readouterr().out
    assert "cvar/psg/seed5: 3 updates" in text and "tables.md" in text and "curves.png" in text
    assert (tmp_path / "out" / "cvar" / "curves.png").is_file()
    defaults = parser.parse_args([])
    assert defaults.seeds == [2000, 2001, 2002, 2003, 2004] and defaults.budget == 120.0 and defaults.methods is None
    for bad in (["--seeds", "x"], ["--methods", "sgd"], ["--budget", "0"], ["--synthetic-shape", "12"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
