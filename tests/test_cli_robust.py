"""`fullcomp run` and `fullcomp report` when things go wrong: corrupt run folders, unwritable --out,
mistyped options (script options go after --), and scripts that build a fc.DMaxProblem."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fullcomp import report
from fullcomp.cli import main, problem_from_script
from fullcomp.errors import ModelError
from fullcomp.run.result import Result

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.py"

FIXED_SCRIPT = """
import cvxpy as cp, torch, fullcomp as fc
u = fc.inner_value(2)
problem = fc.CompositeProblem(cp.max(u), lambda x, batch: torch.stack([x[0] ** 2, (x[1] - 1) ** 2]), fc.L2Ball(2, 1.0))
"""

SEEDED_SCRIPT = """
import argparse
import cvxpy as cp, torch, fullcomp as fc

def build(args):
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=3)
    size = parser.parse_args(args).size
    inner = lambda x, batch: torch.stack([(x[0] - 1) ** 2, x.sum() ** 2])
    return fc.CompositeProblem(cp.max(fc.inner_value(2)), inner, fc.Simplex(size))
"""

DMAX_SCRIPT = """
import torch, fullcomp as fc

def build(args):
    return fc.DMaxProblem(lambda x, b: (x ** 2).sum(), psi=lambda x, b: x.abs().sum(), x0=torch.ones(2))
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


# ---- fullcomp report: a corrupt run folder is skipped, the others reported -----------------------


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("good")
    script = write(root, "fixed.py", FIXED_SCRIPT)
    assert main(["run", str(script), "--iters", "2", "--no-progress", "--out", str(root / "run")]) == 0
    return root / "run"


def copy_run(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in ("summary.json", "history.csv"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


CORRUPTIONS = {
    "summary-not-json": ("summary.json", "{not json"),
    "summary-a-list": ("summary.json", "[1, 2, 3]"),
    "history-garbage-text": ("history.csv", "hello world\nthis is not a history\n"),
    "history-binary": ("history.csv", b"\xff\xfe\x00\x81garbage\x00\x00"),
    "history-bad-time": ("history.csv", "k,time,objective_estimate,gap_estimate\n0,soon,1,1\n"),
    "history-ragged": ("history.csv", "k,time,objective_estimate,gap_estimate\n0,0\n1,0.1,1,1,9,9\n"),
    "history-empty": ("history.csv", ""),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_report_skips_a_corrupt_folder(kind: str, good_run: Path, tmp_path: Path, capsys) -> None:
    copy_run(good_run, tmp_path / "a-good")
    copy_run(good_run, tmp_path / "z-good")
    broken = copy_run(good_run, tmp_path / "m-broken")
    name, data = CORRUPTIONS[kind]
    (broken / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    assert main(["report", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    rows = {line.split()[0] for line in captured.out.strip().splitlines()[2:]}
    assert rows == {"a-good", "z-good"}
    warnings = [line for line in captured.err.splitlines() if "m-broken" in line]
    assert len(warnings) == 1, captured.err
    assert warnings[0].startswith("fullcomp report: warning: skipping") and name in warnings[0]


def test_report_plot_skips_a_corrupt_folder(good_run: Path, tmp_path: Path, capsys) -> None:
    copy_run(good_run, tmp_path / "good")
    (copy_run(good_run, tmp_path / "broken") / "history.csv").write_text("k,time\n0,NaN?\n")
    assert main(["report", str(tmp_path), "--plot"]) == 0
    assert (tmp_path / "objective.png").is_file()
    assert "broken" in capsys.readouterr().err


def test_report_with_only_corrupt_folders_fails_clearly(tmp_path: Path, capsys) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "summary.json").write_text("{not json")
    (tmp_path / "broken" / "history.csv").write_text("k,time,objective_estimate,gap_estimate\n0,0,1,1\n")
    assert main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "skipping" in err and "broken" in err
    assert "fullcomp report: error: no readable run folders under" in err and "1 corrupt" in err


def test_find_runs_reports_skips_through_a_callback(good_run: Path, tmp_path: Path) -> None:
    copy_run(good_run, tmp_path / "good")
    (copy_run(good_run, tmp_path / "bad") / "summary.json").write_text("")
    skipped = []
    runs = report.find_runs(tmp_path, on_skip=lambda path, reason: skipped.append((path, reason)))
    assert [r.name for r in runs] == ["good"]
    assert [p.name for p, _ in skipped] == ["bad"] and "summary.json" in skipped[0][1]


@pytest.mark.parametrize("kind", ["summary-fifo", "history-fifo", "summary-deep"])
def test_report_skips_a_fifo_or_a_deep_summary_without_hanging(kind: str, good_run: Path, tmp_path: Path) -> None:
    import threading

    copy_run(good_run, tmp_path / "good")
    bad = copy_run(good_run, tmp_path / "bad")
    name = "summary.json" if kind.startswith("summary") else "history.csv"
    (bad / name).unlink()
    if kind.endswith("fifo"):
        os.mkfifo(bad / name)  # reading it would block until a writer came
    else:
        (bad / name).write_text("[" * 100_000 + "]" * 100_000)
    found: dict = {}

    def scan() -> None:
        found["runs"] = report.find_runs(tmp_path, on_skip=lambda path, reason: found.setdefault("skip", reason))

    worker = threading.Thread(target=scan, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the report hung on the FIFO"
    assert [r.name for r in found["runs"]] == ["good"]
    if kind != "history-fifo":  # a folder whose history is no regular file is no run folder: passed over
        assert name in found["skip"]


# ---- fullcomp run --out in a place that cannot be written ----------------------------------------


@pytest.mark.parametrize("where", ["under-a-file", "is-a-file"])
def test_unwritable_out_fails_before_the_run(where: str, tmp_path: Path, capsys, monkeypatch) -> None:
    afile = tmp_path / "afile"
    afile.write_text("I am a file")
    out = afile / "out" if where == "under-a-file" else afile
    calls = []
    monkeypatch.setattr("fullcomp.hmsfw", lambda *a, **k: calls.append(1))
    code = main(["run", str(QUICKSTART), "--iters", "2", "--no-progress", "--out", str(out)])
    assert code == 1 and calls == []  # nothing ran
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("fullcomp run: error: --out") and str(out) in err[0] and "writable" in err[0]


def test_save_failure_at_the_end_is_one_error_line_and_keeps_the_run(tmp_path: Path, capsys, monkeypatch) -> None:
    script = write(tmp_path, "fixed.py", FIXED_SCRIPT)
    out = tmp_path / "out"
    real_save = Result.save

    def failing_save(self, folder):
        if Path(folder) == out:
            raise PermissionError(13, "Permission denied", str(folder))
        return real_save(self, folder)

    monkeypatch.setattr(Result, "save", failing_save)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    code = main(["run", str(script), "--iters", "2", "--no-progress", "--out", str(out)])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("fullcomp run: error: cannot save the run to --out") and "Permission denied" in err[0]
    rescued = [p for p in (tmp_path / "tmp").iterdir() if (p / "summary.json").is_file()]
    assert len(rescued) == 1 and str(rescued[0]) in err[0]  # the finished run is not lost
    assert np.load(rescued[0] / "x.npy").shape == (2,)


# ---- mistyped options: script options go after -- -----------------------------------------------


@pytest.mark.parametrize(
    "typo, suggestion",
    [(["--sead", "5"], "--seed"), (["--iter", "3"], "--iters"), (["--no-progres"], "--no-progress")],
)
def test_mistyped_option_is_an_error_with_a_suggestion(typo, suggestion, tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as exc:
        main(["run", str(QUICKSTART), *typo, "--iters", "3", "--no-progress", "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {' '.join(typo)}" in err
    assert f"{typo[0].split('=')[0]}: did you mean {suggestion}?" in err
    assert "script options go after --" in err
    assert not out.exists()


def test_unknown_positional_before_dashdash_is_an_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", str(QUICKSTART), "--iters", "3", "extra"])
    assert exc.value.code == 2
    assert "unrecognized arguments: extra" in capsys.readouterr().err


def test_script_options_after_dashdash_reach_build(tmp_path: Path) -> None:
    script = write(tmp_path, "sized.py", SEEDED_SCRIPT)
    out = tmp_path / "a"
    # --seed after -- belongs to the script (which rejects it: argparse exit 2), not to fullcomp.
    assert main(["run", str(script), "--iters", "2", "--no-progress", "--out", str(out), "--", "--size", "5"]) == 0
    assert np.load(out / "x.npy").shape == (5,)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["script_args"] == ["--size", "5"] and summary["seed"] == 0


def test_run_help_explains_dashdash(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "-- [script options]" in out and "after --" in out


# ---- scripts that build a fc.DMaxProblem ---------------------------------------------------------


def test_problem_from_script_accepts_a_dmax_problem(tmp_path: Path) -> None:
    import fullcomp as fc
    from fullcomp.cli import load_script

    namespace = load_script(write(tmp_path, "dmax.py", DMAX_SCRIPT))
    problem, evaluate = problem_from_script(namespace, [], "dmax.py")
    assert isinstance(problem, fc.DMaxProblem) and evaluate is None
    with pytest.raises(ModelError, match="CompositeProblem or a fc.DMaxProblem"):
        problem_from_script({"problem": 42}, [], "bad.py")


def test_run_on_a_dmax_script_runs_smag_or_any_dmax_method(tmp_path: Path, capsys) -> None:
    script = write(tmp_path, "dmax.py", DMAX_SCRIPT)
    out = tmp_path / "o"
    # smag is the default for a DMaxProblem; its required hyperparameters are validated before any work.
    assert main(["run", str(script), "--iters", "2", "--no-progress", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fullcomp run: error:") and "smag needs gamma" in err[0]
    assert not out.exists()
    settings = ["--set", "gamma=0.5", "eta0=0.1", "eta1=0.1"]
    assert main(["run", str(script), "--iters", "5", "--no-progress", "--out", str(out), *settings]) == 0
    assert Result.load(out).info["method"] == "smag"
    sgd = ["--method", "sgd", "--set", "eta=0.1"]
    assert main(["run", str(script), "--iters", "5", "--no-progress", "--out", str(tmp_path / "s"), *sgd]) == 0
    loaded = Result.load(tmp_path / "s")
    assert loaded.info["method"] == "sgd" and len(loaded.history) == 6 and loaded.status == "iterations"


def test_method_settings_are_validated(tmp_path: Path, capsys) -> None:
    script = write(tmp_path, "dmax.py", DMAX_SCRIPT)
    bad = ["--method", "sgd", "--set", "eta=-1"]
    assert main(["run", str(script), "--iters", "2", "--no-progress", "--out", str(tmp_path / "o"), *bad]) == 1
    assert "eta must be a number in (0, inf)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", str(script), "--iters", "2", "--set", "seed=3"])
    assert "use --seed" in capsys.readouterr().err
