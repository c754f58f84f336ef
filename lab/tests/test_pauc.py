"""pAUC-fairness: metrics against scikit-learn and hand counts, loaders on tiny files, methods, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from fullcomp.algorithms.minimax import epoch_gda, sgda, sopa
from fullcomp.errors import DataError, ModelError, OptionError
from fullcomp.model.dmax import DMaxProblem
from fullcomp_lab import pauc
from fullcomp_lab.cli import main
from fullcomp_lab.datasets.celeba import CelebA
from fullcomp_lab.datasets.tabular import Split, TabularData, adult, german_credit
from fullcomp_lab.metrics import (
    average_precision,
    demographic_parity_difference,
    equal_opportunity_difference,
    equalized_odds_difference,
    fairness_report,
    partial_auc,
)

torch.set_num_threads(1)

# ------------------------------------------------------------------------------------------ pAUC


def brute_force(y, s, k):
    """(1/(n+ k)) sum over positives and the k highest-scored negatives of 1[s_i > s_j] + 1/2 1[s_i = s_j]."""
    pos, neg = s[y == 1], np.sort(s[y == 0])[::-1][:k]
    total = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return total / (pos.size * k)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("rho", [0.3, 0.05, 0.5, 1.0])
def test_mcclish_matches_sklearn(seed, rho):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 57)
    y[:2] = [0, 1]
    s = np.round(rng.normal(size=57) + 0.8 * y, 1)  # rounding makes ties, also across classes
    expected = roc_auc_score(y, s, max_fpr=rho) if rho < 1 else roc_auc_score(y, s)
    assert partial_auc(y, s, rho, "mcclish") == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_raw_and_normalized_match_pair_counts(seed):
    rng = np.random.default_rng(seed)
    n_neg, n_pos = 20, 13  # 0.3 * 20 = 6 negatives: raw / rho is the pair count
    y = np.r_[np.zeros(n_neg, int), np.ones(n_pos, int)]
    neg = rng.permutation(40)[:n_neg] / 10.0  # distinct negatives
    pos = rng.integers(0, 40, n_pos) / 10.0  # some positives tie negatives: they count 1/2
    s = np.r_[neg, pos]
    count = brute_force(y, s, 6)
    assert partial_auc(y, s, 0.3, "raw") == pytest.approx(0.3 * count, abs=1e-12)
    assert partial_auc(y, s, 0.3, "normalized") == pytest.approx(count, abs=1e-12)
    # 0.25 * 20 = 5 but 0.33 * 20 = 6.6: normalized takes ceil(rho n-) = 7 negatives
    assert partial_auc(y, s, 0.33, "normalized") == pytest.approx(brute_force(y, s, 7), abs=1e-12)
    assert partial_auc(y, s, 0.25, "normalized") == pytest.approx(brute_force(y, s, 5), abs=1e-12)


def test_pauc_extremes_and_errors():
    y = np.array([0, 0, 0, 1, 1])
    assert partial_auc(y, [0, 1, 2, 3, 4], 0.3, "normalized") == 1.0
    assert partial_auc(y, [0, 1, 2, 3, 4], 0.3, "mcclish") == pytest.approx(1.0)
    assert partial_auc(y, [4, 3, 2, 1, 0], 0.3, "raw") == 0.0
    assert partial_auc(y, [0, 1, 2, 3, 4], 1.0, "raw") == 1.0
    with pytest.raises(OptionError, match="both classes"):
        partial_auc([1, 1], [0.1, 0.2])
    with pytest.raises(OptionError, match="max_fpr"):
        partial_auc(y, y, 0.0)
    with pytest.raises(OptionError, match="kind"):
        partial_auc(y, y, 0.3, "standardized")
    with pytest.raises(OptionError, match="same length"):
        partial_auc(y, [1, 2])


# -------------------------------------------------------------------------------------- fairness


def test_fairness_gaps_by_hand():
    # group 0: rows 0-4, group 1: rows 5-9
    y = np.array([1, 1, 1, 0, 0, 1, 1, 0, 0, 0])
    p = np.array([1, 1, 0, 1, 0, 1, 0, 0, 0, 0])
    a = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    # PR: 3/5 vs 1/5; TPR: 2/3 vs 1/2; FPR: 1/2 vs 0/3
    assert demographic_parity_difference(p, a) == pytest.approx(0.4)
    assert equal_opportunity_difference(y, p, a) == pytest.approx(1 / 6)
    assert equalized_odds_difference(y, p, a) == pytest.approx(0.5)
    report = fairness_report(y, np.where(p == 1, 0.7, 0.2), a, threshold=0.5)
    assert report["dp"] == pytest.approx(0.4) and report["eod"] == pytest.approx(0.5)
    assert report["positive_rate"] == pytest.approx(0.4)
    # a group without positives counts as TPR 0 (fairlearn's convention; tests/test_fairness_metrics.py)
    assert equal_opportunity_difference([0, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0, 0]) == 0.5
    with pytest.raises(OptionError, match="0/1"):
        demographic_parity_difference([0.2, 0.7], [0, 1])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: demographic_parity_difference([0, 1, 1], [0, 1]), "y_pred and group must have the same length"),
        (lambda: equalized_odds_difference([0, 1], [0, 1, 1], [0, 1, 1]), "y_true and group must have the same"),
        (lambda: equalized_odds_difference([0, 2, 1], [0, 1, 1], [0, 1, 1]), "y_true must hold 0/1"),
        (lambda: equal_opportunity_difference([0, 1], [0, -1], ["a", "b"]), r"y_pred must hold 0/1.*\[-1\]"),
        (lambda: demographic_parity_difference([0, 1], [0, 1], sample_weight=[1, -2]), "sample_weight must be non-neg"),
        (lambda: demographic_parity_difference([0, 1], [0, 1], sample_weight=[1]), "sample_weight must hold one"),
        (lambda: demographic_parity_difference([0, 1], [0, 1], sample_weight=[1, np.nan]), "sample_weight has non-f"),
        (lambda: demographic_parity_difference([0, 1, 1], ["a", "a", "a"]), r"group must hold at least 2.*\['a'\]"),
        (lambda: demographic_parity_difference([0, 1], [0, 1], sample_weight=[0, 1]), "group must hold at least 2"),
        (lambda: demographic_parity_difference([0, 1], ["a", None]), "group labels must be all numbers or all"),
        (lambda: demographic_parity_difference([0, 1, 0, 1], np.zeros((2, 2))), "group must be 1-D"),
        (lambda: average_precision([0, 1], [0.1, 0.2], sample_weight=[1, -1]), "sample_weight must be non-negative"),
        (lambda: average_precision([0, 1, 2], [0.1, 0.2, 0.3]), "y must hold binary labels"),
        (lambda: average_precision([0, 1], [0.1]), "y and score must have the same length"),
        (lambda: average_precision([0, 0], [0.1, 0.2]), "at least one positive"),
        (lambda: average_precision([0, 1], [0.1, 0.2], sample_weight=[1, 0]), "at least one positive"),
    ],
)
def test_fairness_and_ap_input_errors(call, match):
    with pytest.raises(OptionError, match=match) as info:
        call()
    assert isinstance(info.value, ValueError)


# ----------------------------------------------------------------------------------- average precision


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("seed", range(5))
def test_average_precision_matches_sklearn(seed, weighted):
    rng = np.random.default_rng(seed)
    n = 80
    y = (rng.random(n) < 0.3).astype(int)
    y[:2] = [0, 1]
    s = np.round(rng.normal(size=n) + y, 1)  # rounding makes ties, also across classes
    w = None
    if weighted:
        w = rng.uniform(0, 2, n)
        w[rng.random(n) < 0.15] = 0.0  # zero weights add no threshold
        w[:2] = 1.0
    expected = average_precision_score(y, s, sample_weight=w)
    assert average_precision(y, s, sample_weight=w) == pytest.approx(expected, abs=1e-12)
    # every score tied: one threshold, precision = the positive rate
    assert average_precision(y, np.zeros(n)) == pytest.approx(average_precision_score(y, np.zeros(n)), abs=1e-12)


def test_average_precision_by_hand():
    assert average_precision([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert average_precision([1, 1, 1], [0.3, 0.1, 0.2]) == 1.0
    # descending: 0.9 (neg) 0.8 (pos: P 1/2, R 1/2) 0.4 (pos, tied with a neg: P 2/4, R 1)
    assert average_precision([0, 1, 1, 0], [0.9, 0.8, 0.4, 0.4]) == pytest.approx(0.5)
    assert average_precision([0, 1, 1, 0], [0.9, 0.8, 0.4, 0.4], sample_weight=[1, 1, 1, 3]) == pytest.approx(
        0.5 * 0.5 + 0.5 * 2 / 6
    )


# --------------------------------------------------------------------------------------- loaders

ADULT_ROWS = [
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, "
    "United-States, {label}",
    "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, "
    "13, United-States, {label}",
    "38, Private, 215646, HS-grad, 9, Divorced, ?, Not-in-family, Black, Female, 0, 0, 40, ?, {label}",
]


def write_adult(folder, n=36, bad_line=None):
    folder.mkdir(parents=True, exist_ok=True)
    lines = [ADULT_ROWS[i % 3].format(label=">50K" if i % 4 == 0 else "<=50K") for i in range(n)]
    test = [ADULT_ROWS[i % 3].format(label=">50K." if i % 2 else "<=50K.") for i in range(8)]
    if bad_line is not None:
        lines[bad_line] = "39, State-gov, 77516, Bachelors"
    (folder / "adult.data").write_text("\n".join(lines) + "\n\n")
    (folder / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(test) + "\n\n")
    return folder


def test_adult_loader(tmp_path):
    data = adult(write_adult(tmp_path / "adult"))
    assert (len(data.train), len(data.val), len(data.test)) == (32, 4, 8)
    assert data.test.y.tolist() == [0, 1] * 4  # trailing periods stripped, header line skipped
    assert set(data.train.a.tolist()) == {0, 1} and data.test.a.tolist()[:3] == [1, 1, 0]
    assert "sex=Female" in data.features and "occupation=?" in data.features
    age = data.features.index("age")
    assert abs(data.train.X[:, age].mean()) < 1e-6  # standardized with training statistics
    assert data.dim == data.test.X.shape[1]


def test_adult_rejects_malformed_rows(tmp_path):
    with pytest.raises(DataError, match=r"adult\.data, line 6: expected 15"):
        adult(write_adult(tmp_path / "a", bad_line=5))
    folder = write_adult(tmp_path / "b")
    (folder / "adult.test").write_text("|1x3 Cross validator\n" + ADULT_ROWS[0].format(label="rich") + "\n")
    with pytest.raises(DataError, match=r"adult\.test, line 2: the label"):
        adult(folder)
    (folder / "adult.test").unlink()
    with pytest.raises(DataError, match="adult.test not found"):
        adult(folder)


def german_line(i, status="A93", label=None):
    label = label or ("1" if i % 3 else "2")
    return (
        f"A11 {6 + i} A34 A43 {1000 + 37 * i} A65 A75 4 {status} A101 4 A121 {20 + i} A143 A152 2 A173 1 "
        f"A192 A201 {label}"
    )


def test_german_loader(tmp_path):
    lines = [german_line(i, "A92" if i % 2 else "A93") for i in range(40)]
    (tmp_path / "german.data").write_text("\n".join(lines) + "\n")
    data = german_credit(tmp_path)
    assert (len(data.train), len(data.val), len(data.test)) == (32, 4, 4)
    all_y = np.r_[data.train.y, data.val.y, data.test.y]
    assert all_y.sum() == sum(1 for i in range(40) if i % 3)  # class 1 (good) is the positive label
    assert set(np.r_[data.train.a, data.val.a, data.test.a].tolist()) == {0, 1}
    assert "attr9=A92" in data.features and "attr2" in data.features
    lines[7] = german_line(7, status="A99")
    (tmp_path / "german.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"german\.data, line 8: attribute 9"):
        german_credit(tmp_path)
    lines[7] = "A11 6 A34"
    (tmp_path / "german.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"line 8: expected 21"):
        german_credit(tmp_path / "german.data")


def write_celeba(root, n=10, partition=True):
    from PIL import Image

    (root / "img_align_celeba").mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        name = f"{i + 1:06d}.jpg"
        Image.fromarray(rng.integers(0, 255, (6, 5, 3), dtype=np.uint8)).save(root / "img_align_celeba" / name)
        values = [1 if i % 2 else -1, 1 if i % 3 else -1, -1]
        rows.append(name + "  " + " ".join(f"{v:2d}" for v in values))
    (root / "list_attr_celeba.txt").write_text(f"{n}\nAttractive Male Big_Nose \n" + "\n".join(rows) + "\n")
    if partition:
        parts = [0] * (n - 4) + [1, 1, 2, 2]
        (root / "list_eval_partition.txt").write_text("\n".join(f"{i + 1:06d}.jpg {p}" for i, p in enumerate(parts)))
    return root


def test_celeba_loader_and_any_encoder(tmp_path):
    root = write_celeba(tmp_path / "celeba")
    train = CelebA(root, target="Attractive", sensitive="Male", split="train")
    assert len(train) == 6 and len(CelebA(root, split="test")) == 2
    image, y, a = train[1]
    assert image.shape == (3, 6, 5) and 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    assert (int(y), int(a)) == (1, 1)
    images, labels, groups = train.arrays()
    assert images.shape == (6, 3, 6, 5) and labels.tolist() == [0, 1, 0, 1, 0, 1]
    # any torch encoder of the images (no torchvision): a tiny convolutional one, two SGDA steps
    encoder = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(48, 8))
    declared = pauc.pauc_problem(
        images, labels, groups, alpha=0.5, encoder=encoder, rep_dim=8, batch_pos=2, batch_neg=2
    )
    result = sgda(declared.problem, eta_x=0.1, eta_y=0.1, iters=2, progress=False)
    assert len(pauc.scores(result.x, images)) == 6
    # without the partition file: the paper's random 80/10/10 split
    (root / "list_eval_partition.txt").unlink()
    sizes = [len(CelebA(root, split=s)) for s in ("train", "val", "test")]
    assert sizes == [8, 1, 1]


def test_celeba_rejects_malformed_files(tmp_path):
    root = write_celeba(tmp_path / "c")
    attr = root / "list_attr_celeba.txt"
    text = attr.read_text().splitlines()
    attr.write_text("\n".join(text[:-1]) + "\n")  # one row fewer than announced
    with pytest.raises(DataError, match="announces 10 images but 9"):
        CelebA(root)
    text[4] = text[4].replace("-1", "0", 1)
    attr.write_text("\n".join(text) + "\n")
    with pytest.raises(DataError, match="line 5: attribute values must be 1 or -1"):
        CelebA(root)
    with pytest.raises(OptionError, match="not in list_attr_celeba"):
        CelebA(write_celeba(tmp_path / "d"), target="Smiling")


# --------------------------------------------------------------------------------------- methods


def tiny_data(seed=0, n=96):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 5)) + 0.8 * a[:, None] * np.array([1.0, 0, 0, 0, 0])
    y = (X[:, 1] + 0.5 * X[:, 0] + 0.5 * rng.normal(size=n) > 0.3).astype(int)
    return X.astype(np.float32), y, a


SETTINGS = {
    "sopa": {"eta": 0.3, "eta_s": 0.1},
    "smag-star": {"gamma": 0.4, "eta0": 0.2, "eta1": 0.2},
    "sgda": {"alpha": 0.5, "eta_x": 0.3, "eta_y": 0.3},
    "epoch-gda": {"alpha": 0.5, "eta_x": 0.3, "eta_y": 0.3, "gamma": 0.1, "epoch_iters": 5},
    "smag": {"alpha": 0.5, "gamma": 0.4, "eta0": 0.2, "eta1": 0.2},
}


@pytest.mark.parametrize("method", list(pauc.METHODS))
def test_every_method_lowers_its_objective(method):
    X, y, a = tiny_data()
    spec = pauc.METHODS[method]
    settings = pauc.check_settings(method, SETTINGS[method])
    alpha = settings.get("alpha", 0.0)
    declared = pauc.pauc_problem(X, y, a, alpha=alpha, hidden=(16, 8), batch_pos=16, batch_neg=16)
    before = pauc.primal_objective(declared.model, X, y, a, alpha=alpha)
    result = spec.run(declared.problem, settings, iters=150, seed=3, progress=False)
    after = pauc.primal_objective(result.x, X, y, a, alpha=alpha)
    assert after < before - 0.05, (method, before, after)
    assert len(result.history) == 151 and math.isfinite(result.history[-1]["phi_value"])


def test_sopa_threshold_step_is_libauc_update():
    X, y, a = tiny_data(1)
    declared = pauc.pauc_problem(X, y, a, hidden=(8,), batch_pos=4, batch_neg=6)
    batch = declared.problem.sampler(torch.Generator().manual_seed(5))
    result = sopa(declared.problem, eta=1e-9, eta_s=0.1, s_key="u", iters=1, seed=5, progress=False)
    with torch.no_grad():
        h = torch.sigmoid(declared.model(batch[0])[0])
    loss = (1.0 - (h[:4, None] - h[None, 4:])) ** 2
    p = (loss > 0).float()  # s = 0 at the start
    expected = torch.zeros_like(declared.model.u)
    expected.index_add_(0, batch[1], -0.1 * (1 - p.sum(1) / (0.3 * 6)))
    moved = declared.threshold_scale * (result.x.u.detach() - declared.model.u.detach())
    assert torch.allclose(moved, expected, atol=1e-6)


def test_minimax_rejects_bad_input():
    X, y, a = tiny_data()
    declared = pauc.pauc_problem(X, y, a, hidden=(4,))
    with pytest.raises(OptionError, match="eta_x"):
        sgda(declared.problem, eta_x=0.0, eta_y=0.1, iters=1)
    with pytest.raises(OptionError, match="growth"):
        epoch_gda(declared.problem, eta_x=0.1, eta_y=0.1, gamma=0.1, growth="cubic", iters=1)
    with pytest.raises(OptionError, match="no entry named 's'"):
        sopa(declared.problem, eta=0.1, eta_s=0.1, iters=1)
    dwc = DMaxProblem(lambda x, b: x.sum() ** 2, psi=lambda x, b: x.abs().sum(), x0=torch.ones(2))
    with pytest.raises(ModelError, match="use fc.smag"):
        sgda(dwc, eta_x=0.1, eta_y=0.1, iters=1)
    with pytest.raises(OptionError, match="settings of smag must hold exactly"):
        pauc.check_settings("smag", {"alpha": 0.1})


# ------------------------------------------------------------------------------------ protocol, CLI


def tiny_tabular(seed=0):
    splits = []
    for k, n in enumerate((96, 40, 40)):
        X, y, a = tiny_data(seed + k, n)
        splits.append(Split(X, y, a))
    return TabularData("german-credit", *splits, features=[f"f{i}" for i in range(5)])


def test_selection_uses_validation_only(tmp_path):
    data = tiny_tabular()
    data.test = Split(data.test.X, np.ones_like(data.test.y), data.test.a)  # scoring test would raise
    grids = {
        "sopa": {"eta": [0.3, 0.03], "eta_s": [0.1]},
        "smag": {"alpha": [0.5], "eta1": [0.2], "eta1_over_gamma": [0.5], "eta0_over_gamma": [0.5]},
    }
    cfg = pauc.select_settings(
        data,
        "sopa,smag",
        grids=grids,
        workload=pauc.Workload(20, 8, 8),
        config_path=tmp_path / "c.json",
        base_config={"settings": {}},
    )
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["settings"]["german-credit"]["smag"] == {"alpha": 0.5, "gamma": 0.4, "eta0": 0.2, "eta1": 0.2}
    assert saved["settings"]["german-credit"]["sopa"]["eta"] in (0.3, 0.03)
    assert len(cfg.meta["selection"]["german-credit"]["methods"]["sopa"]["candidates"]) == 2


def test_bench_then_report(tmp_path, capsys):
    lines = [german_line(i, "A92" if i % 2 else "A93") for i in range(60)]
    data_dir = tmp_path / "german"
    data_dir.mkdir()
    (data_dir / "german.data").write_text("\n".join(lines) + "\n")
    config = {"settings": {"german-credit": {m: SETTINGS[m] for m in pauc.METHODS}}}
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    out = tmp_path / "runs"
    argv = [
        "bench",
        "pauc-fairness",
        "--data",
        str(data_dir),
        "--out",
        str(out),
        "--config",
        str(tmp_path / "cfg.json"),
    ]
    assert main(argv + ["--seeds", "1,2", "--iters", "12", "--eval-every", "6", "--no-progress"]) == 0
    assert (out / "german-credit" / "smag" / "seed2" / "summary.json").is_file()
    (out / "tables.md").unlink()
    assert main(["report", str(out)]) == 0
    text = (out / "tables.md").read_text()
    for label in ("SOPA", "SMAG*", "SGDA", "EGDA", "SMAG"):
        assert f"| {label} | 2 |" in text
    rows = pauc.tables(out).rows
    assert sorted(r["rank_pauc"] for r in rows) == [1, 2, 3, 4, 5]
    assert (out / "german-credit" / "pauc_fairness.png").is_file()
    summary = json.loads((out / "german-credit" / "sopa" / "seed1" / "summary.json").read_text())
    assert summary["protocol"] == pauc.PROTOCOL and 0 <= summary["metrics"]["test_pauc"] <= 1
