"""Synthetic rating data with the structure of MovieLens: low rank plus noise, seven unequal user groups.

Built for tests, examples and scale benchmarks, so it never forms a dense P x Q
matrix: it samples the observed entries as distinct flat positions, evaluates the
low-rank model only there (in chunks), rounds and clips to the 1-5 star scale,
and applies the same 80/10/10 split and training-mean centering as
:func:`fullcomp_lab.datasets.movielens`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fullcomp.datasets.ratings import AGE_GROUP_NAMES, DEFAULT_SPLIT_SEED, RatingData, assemble, split_assignment
from fullcomp.errors import OptionError

# Users per age group in MovieLens-100K (under 18, 18-24, ..., 56+): the default group proportions.
ML100K_GROUP_USERS = (36, 198, 310, 194, 80, 73, 52)
RATING_CENTRE = 3.5  # about the MovieLens mean (3.53 for 100K, 3.58 for 1M)
_CHUNK = 1 << 20  # entries per chunk when evaluating the low-rank model: bounds temporaries at ~100 MB


def synthetic_ratings(
    shape: tuple[int, int] = (943, 1682),
    n_ratings: int = 100_000,
    *,
    rank: int = 5,
    noise: float = 0.3,
    group_sizes: Sequence[float] | None = None,
    group_effect: float = 0.5,
    seed: int = 0,
    split_seed: int = DEFAULT_SPLIT_SEED,
) -> RatingData:
    """A MovieLens-like :class:`RatingData`: ``n_ratings`` distinct entries of a low-rank-plus-noise matrix.

    Parameters
    ----------
    shape:
        (P, Q) users x items; default (943, 1682), MovieLens-100K's size.
    n_ratings:
        Number of distinct observed entries, drawn uniformly without replacement; default 100,000.
    rank:
        Rank of the underlying matrix; default 5.
    noise:
        Standard deviation of the Gaussian noise added, on the star scale, before rounding; default 0.3.
    group_sizes:
        Users per group: integers summing to P are used as counts, anything else as proportions.  Default
        ``None``: seven groups in MovieLens-100K's age proportions (36, 198, 310, 194, 80, 73, 52 of 943).
        Every group gets at least one user.
    group_effect:
        Spread of the group-mean user factors relative to the individual spread; default 0.5.  Groups then
        rate differently (the model stays rank ``rank``), so small groups are the hard ones, as the
        group-robust objective assumes; 0 makes groups differ only in size.
    seed:
        Seed of the entries, factors and noise; default 0.
    split_seed:
        Seed of the 80/10/10 rating split; default 20260927, as for MovieLens.

    Notes
    -----
    The noiseless value at (i, j) is ``3.5 + <u_i, v_j>`` with factors scaled so that ``<u_i, v_j>`` has unit
    variance; ratings are ``clip(round(value + noise * N(0, 1)), 1, 5)``.  Nothing is saved to disk: the split
    is recomputed from ``split_seed``.
    """
    P, Q = _shape(shape)
    n = _count(n_ratings, P * Q)
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or rank < 1:
        raise OptionError(f"rank must be a positive integer, got {rank!r}")
    for name, value in (("noise", noise), ("group_effect", group_effect)):
        if not (np.isfinite(value) and value >= 0):
            raise OptionError(f"{name} must be a finite non-negative number, got {value!r}")
    counts = _group_counts(P, group_sizes)
    n_groups = len(counts)
    names = AGE_GROUP_NAMES if n_groups == len(AGE_GROUP_NAMES) else tuple(f"group {g}" for g in range(n_groups))

    rng = np.random.default_rng(seed)
    user_groups = rng.permutation(np.repeat(np.arange(n_groups, dtype=np.int64), counts))
    flat = _distinct_positions(P * Q, n, rng)  # sorted, i.e. canonical (row, column) order
    rows, cols = np.divmod(flat, np.int64(Q))
    del flat

    centres = group_effect * rng.standard_normal((n_groups, rank))
    U = centres[user_groups] + rng.standard_normal((P, rank))
    V = rng.standard_normal((Q, rank))
    # Var <u_i, v_j> = rank (1 + group_effect^2); scale it to one star.
    U /= math.sqrt(rank * (1.0 + group_effect**2))
    # One contiguous vector per factor column: gathering from 1-D arrays is about twice as fast as
    # gathering rows of a 2-D array and contracting them.
    Ut, Vt = np.ascontiguousarray(U.T), np.ascontiguousarray(V.T)
    ratings = np.empty(n, dtype=np.float64)
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        r, c = rows[start:stop], cols[start:stop]
        z = noise * rng.standard_normal(stop - start) + RATING_CENTRE
        for k in range(rank):
            z += Ut[k][r] * Vt[k][c]
        ratings[start:stop] = z
    np.clip(np.rint(ratings, out=ratings), 1.0, 5.0, out=ratings)

    labels = split_assignment(n, split_seed)
    return assemble(
        rows,
        cols,
        ratings,
        user_groups,
        labels,
        shape=(P, Q),
        label=f"synthetic {P}x{Q} ({n} ratings, rank {rank}, noise {noise}, seed {seed})",
        layout="synthetic",
        group_names=names,
        user_ids=np.arange(1, P + 1, dtype=np.int64),
        item_ids=np.arange(1, Q + 1, dtype=np.int64),
        split_seed=split_seed,
        source=f"synthetic_ratings(shape=({P}, {Q}), n_ratings={n}, rank={rank}, noise={noise}, seed={seed})",
        split_file=None,
        split_status="not saved (synthetic; recomputed from split_seed)",
    )


def _shape(shape: Sequence[int]) -> tuple[int, int]:
    try:
        P, Q = (int(s) for s in shape)
        ok = all(int(s) == s for s in shape)
    except (TypeError, ValueError):
        ok = False
    if not ok or P < 1 or Q < 1:
        raise OptionError(f"shape must be two positive integers (P, Q), got {shape!r}")
    return P, Q


def _count(n_ratings: int, size: int) -> int:
    if isinstance(n_ratings, bool) or not isinstance(n_ratings, int | np.integer):
        raise OptionError(f"n_ratings must be an integer, got {n_ratings!r}")
    if not 2 <= n_ratings <= size:
        raise OptionError(f"n_ratings must lie in [2, P*Q] = [2, {size}] (distinct entries), got {n_ratings}")
    return int(n_ratings)


def _group_counts(P: int, group_sizes: Sequence[float] | None) -> np.ndarray:
    """Users per group, each at least one, summing to P (largest-remainder rounding of the proportions)."""
    sizes = np.asarray(ML100K_GROUP_USERS if group_sizes is None else group_sizes, dtype=np.float64)
    if sizes.ndim != 1 or sizes.size == 0 or not np.all(np.isfinite(sizes)) or np.any(sizes <= 0):
        raise OptionError(f"group_sizes must be a non-empty list of positive numbers, got {group_sizes!r}")
    K = sizes.size
    if P < K:
        raise OptionError(f"{K} groups need at least {K} users, got P = {P}")
    if np.all(sizes == np.round(sizes)) and sizes.sum() == P:
        return sizes.astype(np.int64)
    # One user per group first, then the other P - K by largest remainder, so no group is empty.
    share = sizes / sizes.sum() * (P - K)
    counts = np.floor(share).astype(np.int64)
    short = (P - K) - int(counts.sum())
    counts[np.argsort(-(share - counts), kind="stable")[:short]] += 1
    return counts + 1


def _distinct_positions(size: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n distinct flat positions in [0, size), uniformly at random, sorted (int64).

    Sparse case: draw a little more than n positions with replacement (enough that the expected number of
    distinct ones exceeds n), deduplicate by sorting, top up if short, then drop a uniform random surplus.
    Given its size, the set of distinct draws is a uniform random subset, so the result is too.  Dense case
    (n above a third of the matrix): a permutation of all positions is cheap enough and exact.
    """
    if 3 * n > size:
        return np.sort(rng.permutation(size)[:n]).astype(np.int64)
    flat = np.empty(0, dtype=np.int64)
    while flat.size < n:
        need = n - flat.size
        filled = flat.size / size
        # Draws k giving `need` new distinct values in expectation, on the unfilled part: k = -M log(1 - need/M).
        free = size * (1.0 - filled)
        k = int(math.ceil(-free * math.log1p(-need / free) * 1.002)) + 64
        flat = _sorted_unique(np.concatenate([flat, rng.integers(0, size, size=k, dtype=np.int64)]))
    surplus = flat.size - n
    if surplus:
        keep = np.ones(flat.size, dtype=bool)
        keep[rng.choice(flat.size, size=surplus, replace=False)] = False
        flat = flat[keep]
    return flat


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an int64 array.

    An in-place sort and a neighbour comparison: numpy 2.x's ``np.unique`` hashes first and sorts after,
    which is several times slower on ten million integers.
    """
    a.sort()
    keep = np.empty(a.size, dtype=bool)
    keep[:1] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]
