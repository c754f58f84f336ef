"""`fullcomp run` and `fullcomp report`: run folders, tables, plots and every error path."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fullcomp.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.py"

# A deterministic problem whose size comes from a script option, to check options reach build(args).
SIZED_SCRIPT = """
import argparse
import cvxpy as cp, torch, fullcomp as fc

def build(args):
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=3)
    size = parser.parse_args(args).size
    u = fc.inner_value(2)
    inner = lambda x, batch: torch.stack([(x[0] - 1) ** 2, x.sum() ** 2])
    return fc.CompositeProblem(cp.max(u), inner, fc.Simplex(size))
"""

MODULE_PROBLEM_SCRIPT = """
import cvxpy as cp, torch, fullcomp as fc
u = fc.inner_value(2)
problem = fc.CompositeProblem(cp.max(u), lambda x, batch: torch.stack([x[0] ** 2, (x[1] - 1) ** 2]), fc.L2Ball(2, 1.0))
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def read_history(folder: Path) -> list[dict]:
    with open(folder / "history.csv", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two quickstart runs (Variant II seed 0, Variant I seed 3) under one folder, shared by the report tests."""
    root = tmp_path_factory.mktemp("runs")
    common = ["--iters", "4", "--no-progress"]
    assert main(["run", str(QUICKSTART), *common, "--out", str(root / "ii")]) == 0
    assert main(["run", str(QUICKSTART), *common, "--method", "hmsfw-i", "--seed", "3", "--out", str(root / "i")]) == 0
    return root


def test_run_writes_history_summary_and_iterate(runs: Path) -> None:
    folder = runs / "ii"
    rows = read_history(folder)
    assert [int(r["k"]) for r in rows] == [0, 1, 2, 3, 4]
    assert {"time", "objective_estimate", "gap_estimate", "glmo_gap", "pricing_calls"} <= set(rows[0])
    # A row's time is the optimizer time before its update: 0 first, then strictly growing, within the total.
    times = [float(r["time"]) for r in rows]
    assert times[0] == 0 and all(b > a for a, b in zip(times, times[1:]))
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["method"] == "hmsfw-ii" and summary["variant"] == "taylor"
    assert summary["iterations"] == 4 and summary["seed"] == 0 and summary["budget_iters"] == 4
    assert summary["optimizer_seconds"] >= times[-1]
    assert summary["script"].endswith("quickstart.py")
    x = np.load(folder / "x.npy")
    assert x.shape == (10,) and np.all(x >= -1e-12) and abs(x.sum() - 1) < 1e-9  # on the simplex


def test_method_and_seed_reach_the_solver(runs: Path) -> None:
    summary = json.loads((runs / "i" / "summary.json").read_text())
    assert (summary["method"], summary["variant"], summary["seed"]) == ("hmsfw-i", "polyak", 3)
    first_ii = read_history(runs / "ii")[1]["objective_estimate"]
    assert read_history(runs / "i")[1]["objective_estimate"] != first_ii


def test_run_prints_a_summary(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", str(QUICKSTART), "--iters", "2", "--no-progress", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "hmsfw-ii: 2 iterations" in out and "final objective estimate" in out and str(tmp_path / "r") in out


def test_report_table(runs: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(runs)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    header = lines[0].split()
    assert header[:8] == ["run", "method", "seed", "iterations", "optimizer_s", "objective_est", "objective", "gap_est"]
    body = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(body) == {"i", "ii"}
    assert body["i"][1:4] == ["hmsfw-i", "3", "4"] and body["ii"][1:4] == ["hmsfw-ii", "0", "4"]
    final = read_history(runs / "ii")[-1]
    assert float(body["ii"][5]) == pytest.approx(float(final["objective_estimate"]), rel=1e-5)
    assert float(body["ii"][7]) == pytest.approx(float(final["gap_estimate"]), rel=1e-5)


def test_report_plot_writes_pngs(runs: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(runs), "--plot"]) == 0
    for name in ("objective.png", "gap.png"):
        data = (runs / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert "saved" in capsys.readouterr().out


def test_report_on_one_run_folder(runs: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(runs / "i")]) == 0
    assert "hmsfw-i" in capsys.readouterr().out


def test_script_options_reach_build(tmp_path: Path) -> None:
    script = write(tmp_path, "sized.py", SIZED_SCRIPT)
    base = ["run", str(script), "--iters", "2", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "a"), "--", "--size", "5"]) == 0  # everything after -- is the script's
    assert np.load(tmp_path / "a" / "x.npy").shape == (5,)
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["script_args"] == ["--size", "5"]
    with pytest.raises(SystemExit) as exc:  # a script option before -- is an unknown fullcomp option
        main([*base, "--size", "4", "--out", str(tmp_path / "b")])
    assert exc.value.code == 2 and not (tmp_path / "b").exists()


def test_module_level_problem(tmp_path: Path) -> None:
    script = write(tmp_path, "fixed.py", MODULE_PROBLEM_SCRIPT)
    assert main(["run", str(script), "--iters", "3", "--no-progress", "--out", str(tmp_path / "out")]) == 0
    assert np.load(tmp_path / "out" / "x.npy").shape == (2,)


def test_default_out_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = write(tmp_path, "fixed.py", MODULE_PROBLEM_SCRIPT)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(script), "--iters", "1", "--no-progress", "--seed", "2"]) == 0
    assert (tmp_path / "runs" / "fixed-hmsfw-ii-seed2" / "summary.json").is_file()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "no/such/script.py", "--iters", "3"], "script no/such/script.py not found"),
        (["run", str(QUICKSTART)], "give a budget: --iters N"),
        (["run", str(QUICKSTART), "--iters", "3", "--seconds", "1"], "not allowed with argument"),
        (["run", str(QUICKSTART), "--iters", "0"], "--iters: expected a positive integer, got 0"),
        (["run", str(QUICKSTART), "--seconds", "-1"], "--seconds: expected a positive"),
        (["run", str(QUICKSTART), "--iters", "3", "--method", "newton"], "--method: unknown method 'newton'"),
        (["run", str(QUICKSTART), "--iters", "3", "--device", "gpu!"], "--device 'gpu!' is not a torch device"),
        (["report"], "the following arguments are required: folder"),
        (["report", ".", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_option_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "script, extra, message",
    [
        ("x = 1\n", [], "defines neither build(args) nor a module-level problem"),
        ("def build(args):\n    return 42\n", [], "returned an object of type int; it must be a fc.CompositeProblem"),
        (MODULE_PROBLEM_SCRIPT, ["--", "--size", "3"], "takes no options; unrecognized: --size 3"),
        (
            SIZED_SCRIPT.replace("fc.Simplex(size))", "fc.Simplex(size)), lambda x: {'loss': 'low'}"),
            [],
            "evaluate(x) in",
        ),
    ],
)
def test_script_errors(tmp_path: Path, script: str, extra: list[str], message: str, capsys) -> None:
    path = write(tmp_path, "bad.py", script)
    code = main(["run", str(path), "--iters", "2", "--no-progress", "--out", str(tmp_path / "o"), *extra])
    assert code == 1
    err = capsys.readouterr().err
    assert "fullcomp run: error:" in err and message in err
    # A run that failed in its callback keeps what it computed; a script that failed to build leaves nothing.
    assert (tmp_path / "o").exists() == ("saved the run up to the failure" in err)


NAN_SCRIPT = """
import cvxpy as cp, torch, fullcomp as fc

calls = [0]

def sampler(gen):  # the 5th batch (iteration 3) is poisoned
    calls[0] += 1
    return torch.tensor(float("nan") if calls[0] >= 5 else 0.0, dtype=torch.float64)

def build(args):
    inner = lambda x, b: torch.stack([x[0] ** 2 + b, (x[1] - 1) ** 2])
    return fc.CompositeProblem(cp.max(fc.inner_value(2)), inner, fc.Simplex(2), sampler=sampler)
"""


def test_nan_keeps_the_run_so_far(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    script = write(tmp_path, "nan.py", NAN_SCRIPT)
    out = tmp_path / "o"
    assert main(["run", str(script), "--iters", "10", "--no-progress", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "NaN" in err and "iteration 3" in err and "saved the run up to the failure" in err
    rows = read_history(out)
    # Step 2 drew the NaN sample at the new point y_3: rows 0 and 1, and the closing row of the finite state y_2.
    assert [int(r["k"]) for r in rows] == [0, 1, 2]
    assert np.all(np.isfinite(np.load(out / "x.npy")))


def test_exact_needs_a_full_batch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # The quickstart is stochastic and has no full_batch: the library's OptionError becomes one error line.
    code = main(["run", str(QUICKSTART), "--iters", "2", "--method", "hmsfw-exact", "--out", str(tmp_path / "o")])
    assert code == 1 and "full_batch" in capsys.readouterr().err


def test_report_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(tmp_path / "missing")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 1
    assert "no run folders under" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "summary.json").write_text("{not json")
    (tmp_path / "broken" / "history.csv").write_text("k,time,objective_estimate,gap_estimate\n0,0,1,1\n")
    assert main(["report", str(tmp_path)]) == 1  # the only run folder is corrupt: skipped, nothing left
    err = capsys.readouterr().err
    assert "skipping" in err and "summary.json is not readable JSON" in err and "no readable run folders" in err


def test_console_script(tmp_path: Path) -> None:
    """The installed `fullcomp` entry point (pyproject [project.scripts]) runs a script end to end."""
    exe = Path(sys.executable).parent / ("fullcomp.exe" if os.name == "nt" else "fullcomp")
    assert exe.is_file(), "console script missing: reinstall with `pip install -e .[test]`"
    script = write(tmp_path, "fixed.py", MODULE_PROBLEM_SCRIPT)
    out = tmp_path / "run"
    proc = subprocess.run(
        [str(exe), "run", str(script), "--iters", "2", "--no-progress", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 iterations" in proc.stdout and (out / "history.csv").is_file()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_device_without_cuda(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["run", str(QUICKSTART), "--iters", "3", "--device", "cuda"])
    assert "CUDA is not available on this machine" in capsys.readouterr().err
