"""Both examples, briefly: the quickstart against CVXPY, matrix completion on synthetic and MovieLens-format data."""

from __future__ import annotations

import csv
import importlib.util
import re
import runpy
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def quickstart() -> ModuleType:
    return load("quickstart")


@pytest.fixture(scope="module")
def completion() -> ModuleType:
    return load("worst_group_completion")


# ----------------------------------------------------------------- quickstart


def test_quickstart_script_prints_and_approaches_cvxpy() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), "--iters", "60"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    estimate = re.search(r"objective estimate ([\d.]+), gap estimate ([\d.e+-]+)", proc.stdout)
    exact = re.search(r"exact objective at the HMSFW iterate ([\d.]+); CVXPY optimum ([\d.]+)", proc.stdout)
    assert estimate and exact, proc.stdout
    at_iterate, optimum = float(exact[1]), float(exact[2])
    assert optimum - 1e-6 <= at_iterate <= 1.05 * optimum  # feasible, so never below; close after 60 iterations


def test_quickstart_improves_on_the_start(quickstart: ModuleType) -> None:
    problem = quickstart.build()
    exact, x = quickstart.exact_problem()
    optimum = exact.solve()
    x.value = problem.x0
    start = exact.objective.value
    res = fc.hmsfw(problem, iters=40, seed=1, progress=False)
    x.value = res.x.numpy()
    assert optimum - 1e-8 <= exact.objective.value < start
    # The objective estimate tracks the exact value at the iterate.
    assert res.history[-1]["objective_estimate"] == pytest.approx(exact.objective.value, rel=0.2)


# ------------------------------------------------------------ matrix completion


def test_default_data_is_small_movielens_like(completion: ModuleType) -> None:
    data = completion.load(completion.options([]))
    assert data.shape == (60, 80) and data.n_groups == 7
    sizes = data.group_counts("train")
    assert sizes.min() > 0 and len(set(sizes.tolist())) > 3  # seven groups of unequal sizes
    assert set(np.unique(data.original_ratings("train"))) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert abs(data.train.ratings.mean()) < 1e-12  # centred by the training mean
    assert data.n_ratings == int(0.3 * 60 * 80)


def test_group_losses_are_group_means_of_huber(completion: ModuleType) -> None:
    data = fc.datasets.synthetic_ratings(shape=(30, 20), n_ratings=300, seed=1)
    values = torch.randn(len(data.train), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ratings = torch.from_numpy(data.train.ratings)
    losses = completion.group_mean_huber(values, ratings, *completion.whole_split(data, "train")).numpy()
    r = values.numpy() - data.train.ratings
    h = np.where(np.abs(r) <= 1, 0.5 * r**2, np.abs(r) - 0.5)
    assert np.allclose(losses, [h[data.train.groups == g].mean() for g in range(7)])


def test_sampler_draws_each_groups_ratings_reproducibly(completion: ModuleType) -> None:
    data = completion.load(completion.options([]))
    sampler = completion.minibatch_sampler(data, batch=50)
    positions, weights = sampler(torch.Generator().manual_seed(5))
    assert positions.shape == (7, 50) and torch.allclose(weights.sum(1), torch.ones(7, dtype=torch.float64))
    for g, s in enumerate(data.group_slices("train")):
        assert s.start <= int(positions[g].min()) and int(positions[g].max()) < s.stop  # only group g's ratings
    assert torch.equal(positions, sampler(torch.Generator().manual_seed(5))[0])
    many = sampler(torch.Generator().manual_seed(6))[0][0]
    assert len(set(many.tolist())) > 1


def history(folder: Path) -> list[dict]:
    with open(folder / "history.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_completion_run_lowers_the_worst_group_loss(tmp_path: Path) -> None:
    script = str(EXAMPLES / "worst_group_completion.py")
    argv = ["run", script, "--iters", "30", "--set", "max_pricing=4", "--eval-every", "10", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "max")]) == 0
    rows = history(tmp_path / "max")
    evaluated = [r for r in rows if r.get("train_worst")]
    assert [int(r["k"]) for r in evaluated] == [0, 10, 20, 30]
    first, last = float(evaluated[0]["train_worst"]), float(evaluated[-1]["train_worst"])
    assert last < 0.8 * first
    assert float(evaluated[-1]["test_worst"]) < float(evaluated[0]["test_worst"])
    assert max(int(r["pricing_calls"]) for r in rows if r["pricing_calls"]) <= 4  # the fixed pricing budget
    assert np.load(tmp_path / "max" / "x.npy").shape == (60, 80)


def test_completion_cvar_and_exact(completion: ModuleType) -> None:
    problem, evaluate = completion.build(["--objective", "cvar", "--batch", "16"])
    res = fc.hmsfw(problem, iters=3, max_pricing=2, progress=False)
    metrics = evaluate(res.x_entries)
    # CVaR_0.3 of seven losses lies between their mean and their max.
    assert metrics["train_worst"] >= metrics["train_objective"] - 1e-12
    assert res.info["glmo_route"] == "colgen" and res.x.shape == (60, 80)
    # The full batch gives the exact f: phi(x) from the dense iterate matches the evaluated objective.
    assert problem.objective(res.x) == pytest.approx(metrics["train_objective"], rel=1e-9)
    exact = fc.hmsfw(problem, iters=2, exact=True, max_pricing=2, progress=False)
    assert exact.info["method"] == "hmsfw" and exact.info["schedule"] == "exact"


def write_movielens(folder: Path, users: int = 28, items: int = 15, seed: int = 0) -> None:
    """A tiny folder in the MovieLens-100K file formats (made-up numbers, not MovieLens data)."""
    rng = np.random.default_rng(seed)
    ages = [10, 20, 30, 40, 47, 52, 60]  # one user of each age group in turn
    folder.mkdir()
    with open(folder / "u.user", "w") as fh:
        for u in range(1, users + 1):
            fh.write(f"{u}|{ages[u % 7]}|M|other|0000{u}\n")
    with open(folder / "u.data", "w") as fh:
        for u in range(1, users + 1):
            for i in rng.choice(np.arange(101, 101 + items), size=8, replace=False):
                fh.write(f"{u}\t{i}\t{rng.integers(1, 6)}\t88125{u}\n")


def test_movielens_folder(tmp_path: Path, completion: ModuleType) -> None:
    write_movielens(tmp_path / "ml")
    problem, evaluate = completion.build(["--data", str(tmp_path / "ml"), "--batch", "8"])
    assert problem.domain.shape[0] == 28 and problem.domain.shape[1] <= 15
    assert problem.domain.radius == pytest.approx(1.5 * np.sqrt(problem.domain.size))
    res = fc.hmsfw(problem, iters=2, max_pricing=2, progress=False)
    assert np.isfinite(evaluate(res.x_entries)["test_worst"])


def test_movielens_errors(tmp_path: Path, completion: ModuleType) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(fc.errors.FullcompError, match="expected u.data"):
        completion.build(["--data", str(tmp_path / "empty")])


SHARED_ML100K = ROOT.parent / "shared" / "data" / "ml-100k"


@pytest.mark.skipif(not (SHARED_ML100K / "u.data").is_file(), reason="MovieLens-100K not in ../shared/data")
def test_real_movielens_100k(completion: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Read from ../shared/data (never copied); the saved split goes to a temporary cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    problem, evaluate = completion.build(["--data", str(SHARED_ML100K)])
    assert problem.domain.shape == (943, 1682) and len(problem.reads) == 80_000
    res = fc.hmsfw(problem, iters=1, max_pricing=1, progress=False)
    assert 0 < evaluate(res.x_entries)["test_worst"] < 5


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--objective", "median"], "--objective: invalid choice: 'median'"),
        (["--radius-scale", "-2"], "--radius-scale must be a positive number, got -2.0"),
        (["--alpha", "1.5"], "--alpha must lie in (0, 1]"),
        (["--batch", "0"], "--batch must be a positive number"),
        (["--density", "0"], "--density must lie in (0, 1]"),
    ],
)
def test_completion_option_errors(completion: ModuleType, argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit):
        completion.build(argv)
    assert message in capsys.readouterr().err


def test_completion_as_a_script_is_fullcomp_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python examples/worst_group_completion.py OPTIONS` behaves as `fullcomp run` on the file."""
    script = str(EXAMPLES / "worst_group_completion.py")
    out = tmp_path / "direct"
    monkeypatch.setattr(
        sys, "argv", [script, "--iters", "2", "--set", "max_pricing=2", "--no-progress", "--out", str(out)]
    )
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(script, run_name="__main__")
    assert exc.value.code == 0
    assert {p.name for p in out.iterdir()} >= {"history.csv", "summary.json", "x.npy"}
    assert np.load(out / "x.npy").shape == (60, 80)
