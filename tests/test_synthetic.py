"""The library's synthetic rating generator: MovieLens-like structure, reproducible, checked options, any size."""

from __future__ import annotations

import numpy as np
import pytest

import fullcomp.datasets as ds
from fullcomp.errors import OptionError


def test_synthetic_structure():
    data = ds.synthetic_ratings((300, 200), 6000, rank=3, seed=1)
    assert data.shape == (300, 200) and data.n_ratings == 6000 and data.layout == "synthetic"
    assert (len(data.train), len(data.val), len(data.test)) == (4800, 600, 600)
    flat = np.concatenate([data.flat_index(s) for s in ("train", "val", "test")])
    assert np.unique(flat).size == 6000 and flat.min() >= 0 and flat.max() < 300 * 200
    stars = np.concatenate([data.original_ratings(s) for s in ("train", "val", "test")])
    assert set(np.unique(stars)) <= {1.0, 2.0, 3.0, 4.0, 5.0} and len(np.unique(stars)) >= 4
    assert data.mean == pytest.approx(data.original_ratings("train").mean())
    users = np.bincount(data.user_groups, minlength=7)
    assert users.sum() == 300 and users.min() >= 1 and len(set(users.tolist())) > 3  # seven unequal groups
    # default proportions are MovieLens-100K's user age distribution
    assert np.allclose(users / 300, np.array(ds.synthetic.ML100K_GROUP_USERS) / 943, atol=0.01)
    assert np.bincount(ds.synthetic_ratings((943, 10), 100).user_groups).tolist() == [36, 198, 310, 194, 80, 73, 52]
    for split in ("train", "val", "test"):
        s = data.split(split)
        assert np.array_equal(s.groups, data.user_groups[s.rows])
        assert np.all(np.diff(s.groups) >= 0)


def test_synthetic_is_reproducible_by_seed():
    a = ds.synthetic_ratings((80, 50), 900, seed=4)
    b = ds.synthetic_ratings((80, 50), 900, seed=4)
    c = ds.synthetic_ratings((80, 50), 900, seed=5)
    for s in ("train", "val", "test"):
        assert np.array_equal(a.flat_index(s), b.flat_index(s))
        assert np.array_equal(a.split(s).ratings, b.split(s).ratings)
    assert not np.array_equal(a.flat_index("train"), c.flat_index("train"))


def test_synthetic_options():
    data = ds.synthetic_ratings((10, 10), 100, group_sizes=[5, 3, 2])  # a full matrix, three exact groups
    assert np.bincount(data.user_groups).tolist() == [5, 3, 2]
    assert data.group_names == ("group 0", "group 1", "group 2")
    assert np.unique(np.concatenate([data.flat_index(s) for s in ("train", "val", "test")])).size == 100
    assert np.bincount(ds.synthetic_ratings((100, 10), 50, group_sizes=[0.5, 0.3, 0.2]).user_groups).tolist() == [
        50,
        30,
        20,
    ]
    for kwargs, pattern in [
        ({"shape": (0, 5)}, "shape"),
        ({"shape": (5, 5), "n_ratings": 26}, "n_ratings"),
        ({"shape": (5, 5), "n_ratings": 1}, "n_ratings"),
        ({"rank": 0}, "rank"),
        ({"noise": -1.0}, "noise"),
        ({"group_sizes": [1, 0, 2]}, "group_sizes"),
        ({"shape": (5, 50), "n_ratings": 100}, "7 groups need at least 7 users"),
    ]:
        with pytest.raises(OptionError, match=pattern):
            ds.synthetic_ratings(**kwargs)


def test_synthetic_medium_scale():
    # Its speed is benchmarks/scale_completion.py's to measure: tests never time a shared machine.
    data = ds.synthetic_ratings((6040, 3706), 1_000_000, seed=0)
    assert data.n_ratings == 1_000_000 and len(data.train) == 800_000
    assert np.unique(data.flat_index("train")).size == 800_000
