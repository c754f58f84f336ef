"""Data layer of the matrix-completion experiments: MovieLens loaders, saved split, losses.

MovieLens files may not be redistributed, so every loader test writes a tiny fake data set into tmp_path;
the real-data tests read ``shared/data`` next to the repository and skip when it is absent.
"""

from __future__ import annotations

import gzip
import importlib
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import fullcomp.datasets as fc_ds
import fullcomp_lab.datasets as ds
from fullcomp.errors import DataError, FullcompError, OptionError

# The package exports the function ``movielens``, which hides the submodule of the same name.
ml_module = importlib.import_module("fullcomp_lab.datasets.movielens")
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"

# (user, age in years, expected group): every boundary of the seven groups, plus an unrated user (99).
AGES_100K = [
    (1, 7, 0),
    (2, 17, 0),
    (3, 18, 1),
    (4, 24, 1),
    (5, 25, 2),
    (6, 34, 2),
    (7, 35, 3),
    (8, 44, 3),
    (9, 45, 4),
    (10, 49, 4),
    (11, 50, 5),
    (12, 55, 5),
    (13, 56, 6),
    (14, 73, 6),
]
UNRATED_USER = 99
# MovieLens-1M age codes and the group each one is.
CODES_1M = [(1, 1, 0), (2, 18, 1), (3, 25, 2), (4, 35, 3), (5, 45, 4), (6, 50, 5), (7, 56, 6), (8, 25, 2)]


def fake_ratings(users: list[int], seed: int = 0, per_user: int = 30) -> list[tuple[int, int, int, int]]:
    """(user, item, rating, timestamp) rows: distinct items per user, odd item IDs only (gaps in the IDs)."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in users:
        items = rng.choice(np.arange(1, 120, 2), size=per_user, replace=False)
        for i in items:
            rows.append((u, int(i), int(rng.integers(1, 6)), 880000000 + int(rng.integers(0, 10**6))))
    order = rng.permutation(len(rows))  # MovieLens files are not sorted; the loader must not care
    return [rows[k] for k in order]


def write_100k(folder: Path, ratings=None, users=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    ratings = fake_ratings([u for u, _, _ in AGES_100K]) if ratings is None else ratings
    users = AGES_100K + [(UNRATED_USER, 30, 2)] if users is None else users
    (folder / "u.data").write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in ratings))
    (folder / "u.user").write_text("".join(f"{u}|{a}|M|other|12345\n" for u, a, _ in users))
    return folder


def write_1m(folder: Path, ratings=None, gz: bool = False, users_dir: Path | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    ratings = fake_ratings([u for u, _, _ in CODES_1M], seed=1) if ratings is None else ratings
    text = "".join(f"{u}::{i}::{r}::{t}\n" for u, i, r, t in ratings)
    if gz:
        with gzip.open(folder / "ratings.dat.gz", "wt", encoding="latin-1") as fh:
            fh.write(text)
    else:
        (folder / "ratings.dat").write_text(text)
    udir = folder if users_dir is None else users_dir
    udir.mkdir(parents=True, exist_ok=True)
    # latin-1 bytes in a zip code field, as real users.dat may hold; byte 0x85 must not split a line
    (udir / "users.dat").write_bytes("".join(f"{u}::F::{c}::10::4806\x85\n" for u, c, _ in CODES_1M).encode("latin-1"))
    return folder


def entries(data: fc_ds.RatingData, split: str) -> dict[tuple[int, int], float]:
    s = data.split(split)
    r = data.original_ratings(split)
    return {(int(data.user_ids[a]), int(data.item_ids[b])): float(v) for a, b, v in zip(s.rows, s.cols, r)}


# ---- parsing -----------------------------------------------------------------------------------------


def test_100k_layout_is_parsed(tmp_path):
    folder = write_100k(tmp_path / "ml")
    data = ds.movielens(folder, cache=False)
    expected = {(u, i): float(r) for u, i, r, _ in fake_ratings([u for u, _, _ in AGES_100K])}
    got = {**entries(data, "train"), **entries(data, "val"), **entries(data, "test")}
    assert got == expected  # every rating once, on the original scale, in the right cell
    assert data.layout == "ml-100k"
    assert data.label.startswith("ml-100k-layout (420 ratings, users 1-14, 60 items; not MovieLens-100K)")
    # rows are the rated users only (99 has no rating), columns the rated items only (odd IDs)
    assert data.user_ids.tolist() == list(range(1, 15)) and UNRATED_USER not in data.user_ids
    assert data.item_ids.tolist() == sorted({i for _, i in expected}) and all(data.item_ids % 2 == 1)
    assert data.shape == (14, len(data.item_ids))
    assert data.group_names == fc_ds.AGE_GROUP_NAMES and data.n_groups == 7
    assert data.user_groups.tolist() == [g for _, _, g in AGES_100K]
    for split in ("train", "val", "test"):
        s = data.split(split)
        assert s.rows.dtype == s.cols.dtype == s.groups.dtype == np.int64 and s.ratings.dtype == np.float64
        assert np.array_equal(s.groups, data.user_groups[s.rows])


@pytest.mark.parametrize("gz", [False, True])
def test_1m_layout_is_parsed_with_age_codes(tmp_path, gz):
    folder = write_1m(tmp_path / "ml1m", gz=gz)
    data = ds.movielens(folder, cache=False)
    expected = {(u, i): float(r) for u, i, r, _ in fake_ratings([u for u, _, _ in CODES_1M], seed=1)}
    assert {**entries(data, "train"), **entries(data, "val"), **entries(data, "test")} == expected
    assert data.layout == "ml-1m"
    assert data.user_groups.tolist() == [g for _, _, g in CODES_1M]
    # a file that is not the published data set is never called MovieLens-1M
    assert data.label == "ml-1m-partial (users 1-8; not MovieLens-1M)"


def test_partial_1m_with_users_elsewhere(tmp_path):
    folder = write_1m(tmp_path / "partial", gz=True, users_dir=tmp_path / "meta")
    with pytest.raises(DataError, match=r"users file .*users\.dat is missing.*pass users="):
        ds.movielens(folder, cache=False)
    by_file = ds.movielens(folder, users=tmp_path / "meta" / "users.dat", cache=False)
    by_dir = ds.movielens(folder / "ratings.dat.gz", users=tmp_path / "meta", cache=False)
    assert np.array_equal(by_file.train.ratings, by_dir.train.ratings)
    assert "not MovieLens-1M" in by_file.label


def test_label_names_the_published_set_only_when_counts_match(tmp_path, monkeypatch):
    data = ds.movielens(write_1m(tmp_path / "a"), cache=False)
    monkeypatch.setattr(ml_module, "ML1M_COUNTS", (data.n_ratings, *data.shape))
    assert ds.movielens(tmp_path / "a", cache=False).label == "ml-1m"
    data = ds.movielens(write_100k(tmp_path / "b"), cache=False)
    monkeypatch.setattr(ml_module, "ML100K_COUNTS", (data.n_ratings, *data.shape))
    assert ds.movielens(tmp_path / "b", cache=False).label == "ml-100k"


def test_blank_lines_and_line_order_do_not_change_the_data(tmp_path):
    clean = ds.movielens(write_100k(tmp_path / "clean"), cache=False)
    rows = fake_ratings([u for u, _, _ in AGES_100K])
    messy = tmp_path / "messy"
    write_100k(messy, ratings=rows[::-1])
    text = (messy / "u.data").read_text().split("\n")
    text.insert(5, "   ")  # a whitespace-only line sends the file through the line-by-line parser
    text.insert(2, "")
    (messy / "u.data").write_text("\n".join(text) + "\n\n")
    other = ds.movielens(messy, cache=False)
    for split in ("train", "val", "test"):
        a, b = clean.split(split), other.split(split)
        assert np.array_equal(a.rows, b.rows) and np.array_equal(a.cols, b.cols)
        assert np.array_equal(a.ratings, b.ratings)


# ---- split, centering, groups -------------------------------------------------------------------------


def test_split_is_80_10_10_and_a_partition(tmp_path):
    data = ds.movielens(write_100k(tmp_path / "ml"), cache=False)
    n = data.n_ratings
    assert (len(data.train), len(data.val), len(data.test)) == (n * 8 // 10, n // 10, n - n * 8 // 10 - n // 10)
    flats = [data.flat_index(s) for s in ("train", "val", "test")]
    everything = np.concatenate(flats)
    assert np.unique(everything).size == n  # disjoint and covering
    s = data.train
    assert np.array_equal(flats[0], s.rows * data.shape[1] + s.cols)


def test_split_is_reproducible_and_depends_on_seed(tmp_path):
    folder = write_100k(tmp_path / "ml")
    a = ds.movielens(folder, cache=tmp_path / "c1")
    b = ds.movielens(folder, cache=tmp_path / "c2")
    c = ds.movielens(folder, cache=False)
    d = ds.movielens(folder, cache=False, split_seed=1)
    assert np.array_equal(a.flat_index("test"), b.flat_index("test"))
    assert np.array_equal(a.flat_index("test"), c.flat_index("test"))
    assert not np.array_equal(np.sort(a.flat_index("test")), np.sort(d.flat_index("test")))
    labels = fc_ds.split_assignment(1000, 7)
    assert np.array_equal(labels, fc_ds.split_assignment(1000, 7))
    assert np.bincount(labels).tolist() == [800, 100, 100]


def test_split_is_saved_reused_and_invalidated(tmp_path):
    folder = write_100k(tmp_path / "ml")
    cache = tmp_path / "cache"
    first = ds.movielens(folder, cache=cache)
    assert first.split_status == "created"
    saved = cache / "split_ml-100k-layout_seed20260927.npz"
    assert first.split_file == saved and saved.is_file()

    second = ds.movielens(folder, cache=cache)
    assert second.split_status == "reused" and second.split_file == saved
    assert np.array_equal(first.flat_index("val"), second.flat_index("val"))

    # The saved file is what the loader uses: swap in another valid 80/10/10 split of the same data.
    with np.load(saved) as z:
        fields = {k: z[k] for k in z.files}
    fields["labels"] = fc_ds.split_assignment(first.n_ratings, seed=5)
    np.savez(saved, **fields)
    third = ds.movielens(folder, cache=cache)
    assert third.split_status == "reused"
    assert not np.array_equal(np.sort(third.flat_index("val")), np.sort(first.flat_index("val")))

    # Changing one rating changes the checksum: the split is recomputed from the seed and saved again.
    rows = fake_ratings([u for u, _, _ in AGES_100K])
    u, i, r, t = rows[0]
    rows[0] = (u, i, 1 if r != 1 else 2, t)
    write_100k(folder, ratings=rows)
    fourth = ds.movielens(folder, cache=cache)
    assert fourth.split_status.startswith("recomputed") and "checksum" in fourth.split_status
    assert np.array_equal(np.sort(fourth.flat_index("val")), np.sort(first.flat_index("val")))
    assert ds.movielens(folder, cache=cache).split_status == "reused"

    # Dropping a rating changes the count.
    write_100k(folder, ratings=rows[1:])
    fifth = ds.movielens(folder, cache=cache)
    assert "is for 420 ratings, the data has 419" in fifth.split_status

    saved.write_bytes(b"not an npz file")
    assert "unreadable" in ds.movielens(folder, cache=cache).split_status


def test_default_cache_uses_a_writable_data_folder_else_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    writable = write_100k(tmp_path / "rw")
    data = ds.movielens(writable)
    assert data.split_file == writable / "split_ml-100k-layout_seed20260927.npz" and data.split_file.is_file()

    readonly = write_100k(tmp_path / "ro")
    os.chmod(readonly, 0o555)  # read-only by its permissions; the loader honours them even for root
    try:
        data = ds.movielens(readonly)
        assert sorted(p.name for p in readonly.iterdir()) == ["u.data", "u.user"]
        assert data.split_file is not None and (tmp_path / "xdg" / "fullcomp" / "splits") in data.split_file.parents
        assert ds.movielens(readonly).split_status == "reused"
    finally:
        os.chmod(readonly, 0o755)


def test_centering_uses_the_training_mean_only(tmp_path):
    folder = write_100k(tmp_path / "ml")
    data = ds.movielens(folder, cache=False)
    train = data.original_ratings("train")
    assert data.mean == pytest.approx(train.mean(), abs=1e-12)
    assert data.train.ratings.mean() == pytest.approx(0.0, abs=1e-12)
    everything = np.concatenate([data.original_ratings(s) for s in ("train", "val", "test")])
    assert data.mean != pytest.approx(everything.mean(), abs=1e-9)  # held-out ratings did not enter
    for s in ("val", "test"):
        assert np.allclose(data.split(s).ratings + data.mean, data.original_ratings(s))
        assert set(np.unique(data.original_ratings(s))) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    # Raising every held-out rating leaves the mean unchanged.
    held = set(entries(data, "val")) | set(entries(data, "test"))
    rows = [(u, i, 5 if (u, i) in held else r, t) for u, i, r, t in fake_ratings([u for u, _, _ in AGES_100K])]
    write_100k(folder, ratings=rows)
    assert ds.movielens(folder, cache=False).mean == data.mean


def test_group_slices_indices_counts_and_sampling(tmp_path):
    data = ds.movielens(write_100k(tmp_path / "ml"), cache=False)
    for split in ("train", "val", "test"):
        s = data.split(split)
        counts = data.group_counts(split)
        assert counts.sum() == len(s) and counts.dtype == np.int64
        for g, (sl, idx) in enumerate(zip(data.group_slices(split), data.group_indices(split))):
            assert np.all(s.groups[sl] == g) and sl.stop - sl.start == counts[g]
            assert np.array_equal(idx, np.arange(sl.start, sl.stop))
    batch = data.sample_groups(64, np.random.default_rng(0))
    assert batch.shape == (7, 64)
    assert all(np.all(data.train.groups[batch[g]] == g) for g in range(7))
    assert np.array_equal(batch, data.sample_groups(64, np.random.default_rng(0)))
    text = data.summary()
    assert "under 18" in text and "56+" in text and "training mean" in text
    with pytest.raises(OptionError, match="unknown split"):
        data.split("validation")


# ---- malformed files ----------------------------------------------------------------------------------


def replace_line(file: Path, lineno: int, new: str) -> None:
    lines = file.read_text(encoding="latin-1").split("\n")
    lines[lineno - 1] = new
    file.write_text("\n".join(lines), encoding="latin-1")


MALFORMED = {
    # name: (layout, file, line, replacement, message pattern)
    "100k field count": ("100k", "u.data", 3, "1\t5\t3", r"u\.data, line 3: expected 4 tab-separated fields"),
    "100k rating text": ("100k", "u.data", 7, "1\t3\t4stars\t881250949", r"u\.data, line 7: rating '4stars' is not"),
    "100k rating high": ("100k", "u.data", 8, "1\t3\t6\t881250949", r"u\.data, line 8: rating 6 is outside .* 1-5"),
    "100k rating zero": ("100k", "u.data", 2, "1\t3\t0\t881250949", r"u\.data, line 2: rating 0 is outside"),
    "100k rating nan": ("100k", "u.data", 4, "1\t3\tnan\t881250949", r"u\.data, line 4: rating nan is outside"),
    "100k user text": ("100k", "u.data", 5, "x\t3\t4\t881250949", r"u\.data, line 5: user ID 'x' is not an integer"),
    "100k unknown user": ("100k", "u.data", 6, "500\t3\t4\t881250949", r"u\.data, line 6: user 500 is not in"),
    "100k timestamp": ("100k", "u.data", 9, "1\t3\t4\tyesterday", r"u\.data, line 9: timestamp 'yesterday'"),
    "u.user fields": ("100k", "u.user", 4, "4|24|M|other", r"u\.user, line 4: expected 5 '\|'-separated fields"),
    "u.user age": ("100k", "u.user", 2, "2|old|M|other|1", r"u\.user, line 2: age 'old' is not an integer"),
    "u.user repeat": ("100k", "u.user", 5, "1|30|M|other|1", r"u\.user, line 5: user 1 is listed again .*line 1"),
    "1m field count": ("1m", "ratings.dat", 3, "1::5::3", r"ratings\.dat, line 3: expected 4 '::'-separated"),
    "1m tab": ("1m", "ratings.dat", 2, "1\t5::3::978300760", r"ratings\.dat, line 2: expected 4 '::'"),
    "1m rating": ("1m", "ratings.dat", 10, "1::5::five::978300760", r"ratings\.dat, line 10: rating 'five'"),
    "1m age code": ("1m", "users.dat", 3, "3::M::20::15::55117", r"users\.dat, line 3: age code 20 is not"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_file_names_file_and_line(tmp_path, case):
    layout, name, line, new, pattern = MALFORMED[case]
    folder = write_100k(tmp_path / "ml") if layout == "100k" else write_1m(tmp_path / "ml")
    replace_line(folder / name, line, new)
    with pytest.raises(DataError, match=pattern) as info:
        ds.movielens(folder, cache=False)
    assert isinstance(info.value, FullcompError) and isinstance(info.value, ValueError)
    assert str(folder / name) in str(info.value)


def test_line_numbers_count_blank_lines(tmp_path):
    folder = write_100k(tmp_path / "ml")
    lines = (folder / "u.data").read_text().split("\n")
    lines[9] = "1\t3\t9\t881250949"
    lines[2:2] = ["", ""]  # the bad line moves from 10 to 12
    (folder / "u.data").write_text("\n".join(lines))
    with pytest.raises(DataError, match=r"line 12: rating 9"):
        ds.movielens(folder, cache=False)


def test_duplicate_rating_names_both_lines(tmp_path):
    rows = fake_ratings([u for u, _, _ in AGES_100K])
    rows.insert(20, rows[4])  # same user and item again on line 21; the original is line 5
    folder = write_100k(tmp_path / "ml", ratings=rows)
    with pytest.raises(DataError, match=rf"lines 5 and 21: user {rows[4][0]} rates item {rows[4][1]} twice"):
        ds.movielens(folder, cache=False)


def test_unknown_user_found_by_fast_parser_names_the_line(tmp_path):
    rows = fake_ratings([u for u, _, _ in AGES_100K])
    rows[30] = (77, 3, 4, 881250949)  # a well-formed line, so the C parser accepts the file
    with pytest.raises(DataError, match=r"u\.data, line 31: user 77 is not in the users file"):
        ds.movielens(write_100k(tmp_path / "ml", ratings=rows), cache=False)


def test_missing_files_name_what_is_missing_and_the_layouts(tmp_path):
    with pytest.raises(DataError, match=r"does not exist.*MovieLens-100K.*u\.data.*MovieLens-1M.*ratings\.dat"):
        ds.movielens(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README").write_text("x")
    with pytest.raises(DataError, match=r"no ratings file in .*empty \(it holds README\).*u\.data.*ratings\.dat"):
        ds.movielens(tmp_path / "empty")
    folder = write_100k(tmp_path / "ml")
    (folder / "u.user").unlink()
    with pytest.raises(DataError, match=r"users file .*u\.user is missing: u\.data needs u\.user"):
        ds.movielens(folder)
    folder = write_1m(tmp_path / "both")
    write_1m(folder, gz=True)
    with pytest.raises(DataError, match="several ratings files"):
        ds.movielens(folder)
    (tmp_path / "empty" / "ratings.dat").write_text("\n\n")
    (tmp_path / "empty" / "users.dat").write_text("1::F::1::10::48067\n")
    with pytest.raises(DataError, match="holds no ratings"):
        ds.movielens(tmp_path / "empty", cache=False)
    (tmp_path / "bad.gz").mkdir()
    (tmp_path / "bad.gz" / "ratings.dat.gz").write_bytes(b"not gzip at all")
    (tmp_path / "bad.gz" / "users.dat").write_text("1::F::1::10::48067\n")
    with pytest.raises(DataError, match=r"cannot read .*ratings\.dat\.gz"):
        ds.movielens(tmp_path / "bad.gz", cache=False)


# ---- losses -------------------------------------------------------------------------------------------


def test_huber_torch_and_numpy_agree_with_the_definition():
    r = np.array([-3.0, -1.0, -0.4, 0.0, 0.7, 1.0, 2.5])
    expected = np.where(np.abs(r) <= 1, 0.5 * r**2, np.abs(r) - 0.5)
    assert np.allclose(ds.huber_np(r), expected)
    t = torch.tensor(r, requires_grad=True)
    loss = ds.huber(t)
    assert np.allclose(loss.detach().numpy(), expected)
    loss.sum().backward()
    assert np.allclose(t.grad.numpy(), np.clip(r, -1, 1))  # the derivative of Huber is the clipped residual
    assert np.allclose(ds.huber_np(r, delta=0.5), np.where(np.abs(r) <= 0.5, 0.5 * r**2, 0.5 * (np.abs(r) - 0.25)))
    with pytest.raises(OptionError, match="delta"):
        ds.huber_np(r, delta=0.0)


def test_group_losses_numpy_torch_and_dense():
    data = fc_ds.synthetic_ratings((60, 40), 1500, seed=3)
    rng = np.random.default_rng(0)
    X = rng.normal(size=data.shape)
    pred = data.values_at(X, "val")
    losses = ds.group_losses(data, "val", pred)
    s = data.val
    manual = [ds.huber_np(pred[s.groups == g] - s.ratings[s.groups == g]).mean() for g in range(7)]
    assert losses.shape == (7,) and np.allclose(losses, manual)
    assert np.allclose(ds.group_losses(data, "val", X), losses)  # a dense P x Q matrix works too
    assert ds.worst_group(losses) == pytest.approx(max(manual))
    assert ds.average_group(losses) == pytest.approx(np.mean(manual))  # equal group weights
    Xt = torch.tensor(X, requires_grad=True)
    tl = ds.group_losses(data, "val", Xt)
    assert np.allclose(tl.detach().numpy(), losses)
    tl.max().backward()
    assert Xt.grad is not None and torch.count_nonzero(Xt.grad) > 0
    with pytest.raises(OptionError, match="shape"):
        ds.group_losses(data, "val", pred[:-1])


def test_empty_group_loss_is_nan_and_ignored():
    data = fc_ds.synthetic_ratings((20, 30), 10, seed=0)  # 1 validation rating: most groups are empty there
    losses = ds.group_losses(data, "val", np.zeros(len(data.val)))
    assert np.isnan(losses).sum() == 6
    assert ds.worst_group(losses) == np.nanmax(losses)
    with pytest.raises(OptionError, match="no ratings"):
        data.sample_groups(4, np.random.default_rng(0), split="val")


# ---- real data (read from shared/data; skipped when absent) ---------------------------------------------


@pytest.mark.skipif(not (SHARED / "ml-100k" / "u.data").is_file(), reason="shared/data/ml-100k is absent")
def test_real_movielens_100k(tmp_path):
    before = sorted(p.name for p in (SHARED / "ml-100k").iterdir())
    data = ds.movielens(SHARED / "ml-100k", cache=tmp_path)
    assert data.label == "ml-100k" and data.n_ratings == 100_000 and data.shape == (943, 1682)
    assert (len(data.train), len(data.val), len(data.test)) == (80_000, 10_000, 10_000)
    assert data.n_groups == 7 and np.bincount(data.user_groups).tolist() == [36, 198, 310, 194, 80, 73, 52]
    assert all(data.group_counts(s).min() > 0 for s in ("train", "val", "test"))
    assert data.split_file is not None and data.split_file.parent == tmp_path
    assert ds.movielens(SHARED / "ml-100k", cache=tmp_path).split_status == "reused"
    assert sorted(p.name for p in (SHARED / "ml-100k").iterdir()) == before  # nothing written into shared/


@pytest.mark.skipif(
    not (SHARED / "ml-1m-ratings-partial" / "ratings.dat.gz").is_file() or not (SHARED / "ml-1m").is_dir(),
    reason="shared/data/ml-1m-ratings-partial or ml-1m is absent",
)
def test_real_partial_1m_is_not_called_movielens_1m(tmp_path):
    data = ds.movielens(SHARED / "ml-1m-ratings-partial", users=SHARED / "ml-1m" / "users.dat", cache=tmp_path)
    assert data.label == "ml-1m-partial (users 1-2999; not MovieLens-1M)"
    assert data.n_ratings == 487_650 and data.shape[0] == 2999
    assert data.split_file is not None and data.split_file.name == "split_ml-1m-partial_seed20260927.npz"
