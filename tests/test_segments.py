"""Column segments of V (fullcomp.sets.segments) and the relabelled sparse pattern, against dense products."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.sets import lanczos
from fullcomp.sets.atoms import Entries
from fullcomp.sets.segments import Segments


def segmented(rng: np.random.Generator, rows: list[int], sizes: list[int], zeros: float = 0.3) -> np.ndarray:
    """An (n, sum(sizes)) V whose k-th range of columns is nonzero in row ``rows[k]`` only, some columns zero."""
    V = np.zeros((max(rows) + 2, sum(sizes)))
    start = 0
    for r, size in zip(rows, sizes):
        V[r, start : start + size] = rng.standard_normal(size) * (rng.random(size) > zeros)
        start += size
    return V


def grouped(rng: np.random.Generator, shape: tuple[int, int], size: int, groups: int):
    """``size`` sorted flat entries of a matrix whose rows fall into ``groups`` groups, each entry's group, and
    the order that reads them group by group (each group's rows in row-major order)."""
    flat = np.sort(rng.choice(shape[0] * shape[1], size=size, replace=False))
    group = rng.integers(0, groups, shape[0])[flat // shape[1]]
    return flat, group, np.lexsort((flat, group))


def test_segments_are_found_and_their_products_are_the_dense_ones():
    rng = np.random.default_rng(0)
    V = segmented(rng, [2, 0, 3, 0], [7, 5, 9, 4])
    segments = Segments.find(V)
    assert segments is not None and list(segments.rows) == [2, 0, 3, 0]
    nonzero = np.flatnonzero(np.any(V != 0, axis=0))
    covered = np.concatenate([np.arange(a, b) for a, b in zip(segments.lo, segments.hi)])
    assert set(nonzero) <= set(covered) and np.all(segments.hi[:-1] <= segments.lo[1:])
    q, a, A = rng.standard_normal(V.shape[0]), rng.standard_normal(V.shape[1]), rng.standard_normal((3, V.shape[1]))
    out = np.full(V.shape[1], np.nan)
    assert segments.rmatvec(q, V, out) is out
    np.testing.assert_array_equal(out, q @ V)  # one nonzero term per column: the same bits
    np.testing.assert_allclose(segments.matmul(V, a), V @ a, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(segments.matmul(V, A), V @ A.T, rtol=1e-14, atol=1e-14)


def test_a_v_without_segments_has_none():
    rng = np.random.default_rng(1)
    assert Segments.find(rng.standard_normal((3, 50))) is None  # dense
    V = segmented(rng, [0, 1], [20, 20], zeros=0.0)
    V[1, 5] = 1.0  # a column read by two rows
    assert Segments.find(V) is None
    alternating = np.zeros((2, 2 * 300))
    alternating[0, ::2], alternating[1, 1::2] = 1.0, 1.0
    assert Segments.find(alternating) is None  # more segments than MAX_SEGMENTS
    assert Segments.find(np.zeros((3, 10))) is None


def test_segments_follow_a_tracker_step_and_refuse_a_step_that_breaks_them():
    rng = np.random.default_rng(2)
    V = segmented(rng, [1, 0, 2], [10, 10, 10], zeros=0.0)
    V[:, 8:12] = 0.0  # columns no sample has touched yet, between the first two segments
    segments = Segments.find(V)
    assert (list(segments.lo), list(segments.hi)) == ([0, 12, 20], [8, 20, 30])

    def step(columns, rows):
        values = np.zeros((V.shape[0], len(columns)))
        values[rows, np.arange(len(columns))] = rng.standard_normal(len(columns))
        return np.array(columns), values

    columns, values = step([3, 9, 11, 25], [1, 1, 0, 2])  # 9 joins the first segment, 11 the second
    followed = segments.follow(columns, values)
    J = np.zeros_like(V)
    J[:, columns] = values
    V_next = 0.6 * V + 0.4 * J
    assert (list(followed.lo), list(followed.hi)) == ([0, 11, 20], [10, 20, 30])
    q, a = rng.standard_normal(V.shape[0]), rng.standard_normal(V.shape[1])
    np.testing.assert_array_equal(followed.rmatvec(q, V_next, np.empty(V.shape[1])), q @ V_next)
    np.testing.assert_allclose(followed.matmul(V_next, a), V_next @ a, rtol=1e-14, atol=1e-14)
    assert segments.follow(*step([4], [0])) is None  # inside the first segment, in another row
    assert segments.follow(*step([9], [2])) is None  # between two segments, in neither's row
    assert segments.follow(*step([9, 10], [0, 1])) is None  # the two segments would overlap
    two = np.zeros((V.shape[0], 1))
    two[[0, 1], 0] = 1.0
    assert segments.follow(np.array([9]), two) is None  # a column read by two rows


@pytest.mark.parametrize("shape", [(40, 30), (30, 40)])
def test_a_pattern_of_grouped_rows_is_relabelled_and_prices_the_top_pair(shape, monkeypatch):
    monkeypatch.setattr(fc.sets.balls, "DENSE_SIDE", 0)  # Lanczos at this size
    rng = np.random.default_rng(3)
    flat, _, order = grouped(rng, shape, 500, 4)
    entries, by_rows = Entries(flat[order], shape), Entries(flat, shape)
    pattern = lanczos.SparsePattern(entries.rows, entries.cols, shape)
    assert pattern.row_order is not None and pattern._perm is None  # no permutation of the values per fill
    assert lanczos.SparsePattern(by_rows.rows, by_rows.cols, shape).row_order is None
    values = rng.standard_normal(flat.size)
    dense = np.zeros(shape)
    dense.reshape(-1)[flat[order]] = values
    d, d_t = pattern.fill(values)
    np.testing.assert_array_equal(d.toarray(), dense[pattern.row_order])
    np.testing.assert_array_equal(pattern.from_rows(pattern.to_rows(np.arange(shape[0]))), np.arange(shape[0]))
    X = fc.NuclearBall(shape, 2.0)
    atom, lower = X.lmo_bounded(values, entries)
    U, S, Vt = np.linalg.svd(dense)
    assert lower == pytest.approx(-2.0 * S[0], rel=1e-7)
    np.testing.assert_allclose(np.outer(atom.u, atom.v), -2.0 * np.outer(U[:, 0], Vt[0]), atol=1e-6)


@pytest.mark.parametrize("shape", [(40, 30), (30, 40)])
def test_a_start_on_relabelled_rows_is_the_same_iteration(shape, monkeypatch):
    """The start vectors are relabelled with the rows, so the iteration is the row-major pattern's."""
    monkeypatch.setattr(fc.sets.balls, "DENSE_SIDE", 0)
    rng = np.random.default_rng(4)
    flat, _, order = grouped(rng, shape, 400, 3)
    values = rng.standard_normal(flat.size)
    X = fc.NuclearBall(shape, 1.0)
    warm = fc.sets.atoms.RankOneAtom(rng.standard_normal(shape[0]), rng.standard_normal(shape[1]))
    for hint in (None, warm):
        found = []
        for entries, direction in ((Entries(flat[order], shape), values[order]), (Entries(flat, shape), values)):
            bounds = []  # the first check's (value, lower bound), after CHECK_EVERY steps: far from converged
            X.lmo_bounded(direction, entries, hint=hint, enough=lambda v, lower, b=bounds: b.append((v, lower)) or True)
            found.append(bounds)
        assert found[0][0][0] - found[0][0][1] > 1e-3  # not converged, so another start would show
        np.testing.assert_allclose(found[0], found[1], rtol=1e-12)


@pytest.mark.parametrize("mode", ["values", "lazy", "factored"])
def test_column_generation_on_segments_certifies_against_cvxpy(mode, monkeypatch):
    """A group-by-group V: the GLMO finds its segments, and its answer is the CVXPY optimum to its gap.  ``lazy``:
    as at scale, a priced atom's image comes from the segments and its values wait for x, summed with the other
    lazy atoms' by one sampled product.  ``factored``: as at scale, block Lanczos prices each direction as a
    row scaling of V's one nonzero per column (float32 products first, float64 for the certificate), and the lazy
    atoms' images come from those factors."""
    from fullcomp.glmo import ColumnGenerationGLMO, colgen
    from fullcomp.model.composite import Outer

    lazy, factored = mode != "values", mode == "factored"
    if lazy:
        monkeypatch.setattr(colgen, "LAZY_ENTRIES", 0)
        monkeypatch.setattr(fc.sets.balls, "SAMPLED_FACTORS", 2)
    phases, images = [], []
    if factored:
        monkeypatch.setattr(fc.sets.balls, "BLOCK_ENTRIES", 0)
        monkeypatch.setattr(lanczos, "BLOCK", 2)  # blocks from 16 rows: a small CVXPY reference
        real, owned = lanczos.block_iteration, lanczos.SparsePattern.owned_products
        monkeypatch.setattr(
            lanczos, "block_iteration", lambda d, *a, **k: phases.append(d.matrix.dtype) or real(d, *a, **k)
        )
        monkeypatch.setattr(lanczos.SparsePattern, "owned_products", lambda *a: images.append(owned(*a)) or images[-1])
    rng = np.random.default_rng(5)
    shape, n = ((16, 20), 3) if factored else ((12, 10), 3)
    flat, group, order = grouped(rng, shape, 150 if factored else 60, n)
    entries = Entries(flat[order], shape)
    V = np.zeros((n, flat.size))
    V[group[order], np.arange(flat.size)] = rng.standard_normal(flat.size)
    z = rng.standard_normal(n)
    X = fc.NuclearBall(shape, 2.0)
    glmo = ColumnGenerationGLMO(Outer(cp.max(fc.inner_value(n)), X), X)
    start = fc.sets.atoms.ZeroAtom(shape)
    res = glmo.solve(z, V, np.zeros(flat.size), tol=1e-6, entries=entries, start=start)
    assert glmo._segments[1] is not None and len(glmo._segments[1].rows) == n
    assert (glmo.lazy[glmo.active].sum() >= 2) == lazy  # priced atoms kept lazy, or evaluated
    assert (glmo._rows is not None) == factored
    assert (torch.float32 in phases and torch.float64 in phases) == factored
    assert (len(images) > 0 and all(image is not None for image in images)) == factored  # each atom's image
    W = cp.Variable(shape)
    read = cp.hstack([W[i, j] for i, j in zip(entries.rows, entries.cols)])
    reference = cp.Problem(cp.Minimize(cp.max(z + V @ read)), [cp.normNuc(W) <= 2.0])
    reference.solve(solver="CLARABEL")
    assert res.gap_bound <= 1e-6 and reference.value - 1e-6 <= res.value <= reference.value + 1e-6 + 1e-7
    assert res.value == pytest.approx(float(np.max(z + V @ res.x)), abs=1e-10)  # x is the master's point
    rebuilt = sum(w * a.at(entries) for a, w in zip(res.atoms, res.weights))
    np.testing.assert_allclose(res.x, rebuilt, rtol=1e-12, atol=1e-12)


def test_segments_owning_whole_rows_make_the_direction_a_row_scaling():
    """q^T V = diag(s) G when every row of the matrix is read by one row of V alone: G is V's one nonzero per
    column, s q at each row's owner (0 on rows without entries), and the direction's values are the same bits."""
    from fullcomp.sets.atoms import ScaledRows

    rng = np.random.default_rng(3)
    shape, n = (30, 4), 3
    flat, group, order = grouped(rng, shape, 40, n)  # some rows without entries
    entries = Entries(flat[order], shape)
    V = np.zeros((n, flat.size))
    V[group[order], np.arange(flat.size)] = rng.standard_normal(flat.size)
    segments = Segments.find(V)
    owner = segments.owners(entries.rows, shape[0], n)
    unread = np.setdiff1d(np.arange(shape[0]), entries.rows)
    assert unread.size and np.all(owner[unread] == n)
    np.testing.assert_array_equal(owner[entries.rows], group[order])
    q = rng.standard_normal(n)
    direction = ScaledRows(segments.collapse(V, np.full(flat.size, np.nan)), owner, q, 0)
    np.testing.assert_array_equal(direction.at(entries), q @ V)
    # One entry of a row given to another group's row of V: that matrix row is read by two rows of V.
    e = next(lo for lo in segments.lo if entries.rows[lo] == entries.rows[lo + 1])
    other = (np.flatnonzero(V[:, e])[0] + 1) % n
    V[:, e], V[other, e] = 0.0, 1.0
    assert Segments.find(V).owners(entries.rows, shape[0], n) is None


def segments_seen(monkeypatch) -> list:
    """The segments of V each column-generation GLMO of the test found, appended as the calls return."""
    from fullcomp.glmo import ColumnGenerationGLMO

    found, real = [], ColumnGenerationGLMO.solve

    def solve(self, *args, **kwargs):
        res = real(self, *args, **kwargs)
        found.append(self._segments[1])
        return res

    monkeypatch.setattr(ColumnGenerationGLMO, "solve", solve)
    return found


def test_the_completion_experiment_takes_the_segmented_path(monkeypatch):
    """Its reads come group by group, so the pattern needs no permutation and V has one segment per group."""
    from fullcomp_lab import completion_problem

    found = segments_seen(monkeypatch)
    data = fc.datasets.synthetic_ratings(shape=(60, 40), n_ratings=900, seed=0)
    problem = completion_problem(data, "max", batch=16).problem
    fc.hmsfw(problem, iters=3, seed=0, progress=False)
    pattern = problem.domain._pattern[1]
    assert pattern.row_order is not None and pattern._perm is None
    assert len(found) == 4 and all(b is not None and len(b.rows) == data.n_groups for b in found)


@pytest.mark.parametrize("shape", [(50, 30), (30, 50)])
def test_the_heuristic_pricer_reads_each_segment_of_v_alone_and_gets_the_same_products(shape, monkeypatch):
    from fullcomp.sets.subspace import RitzSubspace
    from fullcomp.trackers import Revision

    monkeypatch.setattr(fc.sets.balls, "DENSE_SIDE", 0)
    rng = np.random.default_rng(6)
    flat, group, order = grouped(rng, shape, 600, 3)
    entries = Entries(flat[order], shape)
    V = np.zeros((4, flat.size))  # row 3 reads nothing
    V[group[order], np.arange(flat.size)] = rng.standard_normal(flat.size) * (rng.random(flat.size) > 0.2)
    segments = Segments.find(V)
    X = fc.NuclearBall(shape, 1.0)
    pricers = []
    for known in (None, segments):
        ritz = RitzSubspace(X.radius, entries, lanczos.SparsePattern(entries.rows, entries.cols, shape), 5)
        ritz.follow(V, Revision(0), known)
        for seed in range(4):
            ritz.add(X.lmo_bounded(np.random.default_rng(seed).standard_normal(flat.size), entries)[0])
        pricers.append(ritz)
    assert pricers[1].segments is segments and pricers[0].count == pricers[1].count == 4
    np.testing.assert_allclose(pricers[1].products, pricers[0].products, rtol=1e-14, atol=1e-14)
    atom, _, images = pricers[1].price(rng.random(4))
    np.testing.assert_allclose(images, V @ atom.at(entries), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(40, 30), (30, 40)])
def test_a_rank_one_image_from_the_segments_is_the_image_of_its_values(shape):
    """V a by one sparse product per segment, without a's values (what column generation does at scale)."""
    rng = np.random.default_rng(12)
    flat, group, order = grouped(rng, shape, 500, 3)
    entries = Entries(flat[order], shape)
    V = np.zeros((4, flat.size))  # row 3 reads nothing
    V[group[order], np.arange(flat.size)] = rng.standard_normal(flat.size)
    X = fc.NuclearBall(shape, 2.0)
    atom, _ = X.lmo_bounded(rng.standard_normal(flat.size), entries)  # builds the pattern, relabelled rows
    assert X._pattern[1].row_order is not None
    image = X.image(atom, V, entries, Segments.find(V))
    np.testing.assert_allclose(image, V @ atom.at(entries), rtol=1e-13, atol=1e-14)
    assert X.image(atom, V, entries, None) is None  # no segments: the caller evaluates
    assert X.image(atom, V, Entries(flat, shape), Segments.find(V)) is None  # not the LMO's entries


def test_a_part_of_the_pattern_multiplies_by_scipys_kernel_on_its_rows_with_the_same_bits():
    """The heuristic pricer's and the images' per-segment products skip building the part (a copy of its slice
    of the pattern): the same numbers to the bit, for slots that start and end inside rows, on both sides."""
    from fullcomp.sets.lanczos import SparsePattern

    rng = np.random.default_rng(21)
    P, Q = 50, 40
    flat = np.sort(rng.choice(P * Q, 600, replace=False))
    pattern, values = SparsePattern(flat // Q, flat % Q, (P, Q)), rng.standard_normal(600)
    for lo, hi in [(0, 600), (37, 211), (100, 101), (5, 5), (599, 600)]:
        matrix, transpose = pattern.part(values[lo:hi], lo, hi)
        for side, x in ((True, rng.standard_normal(P)), (False, rng.standard_normal(Q))):
            found = pattern.part_product(values[lo:hi], lo, hi, x, transpose=side)
            np.testing.assert_array_equal(found, (transpose if side else matrix) @ x)


def spy(method, calls):
    def counted(*args, **kwargs):
        calls.append(1)
        return method(*args, **kwargs)

    return counted


@pytest.mark.parametrize("factors", [3, 12])
def test_a_combination_of_atoms_by_one_sampled_product_is_the_sum_of_their_values(factors, monkeypatch):
    """Mixtures are flattened and other atoms added apart; from SAMPLED_FACTORS rank-one terms one sampled
    product (torch's sampled_addmm) gives them all, at relabelled rows and at entries in any order."""
    from fullcomp.sets.atoms import DenseAtom, MixtureAtom, RankOneAtom

    rng = np.random.default_rng(13)
    shape = (30, 40)
    flat, _, order = grouped(rng, shape, 400, 3)
    X = fc.NuclearBall(shape, 2.0)
    ones = [RankOneAtom(rng.standard_normal(shape[0]), rng.standard_normal(shape[1])) for _ in range(factors)]
    atoms = [MixtureAtom(ones[:2], np.array([0.3, 0.7])), *ones[2:], DenseAtom(rng.standard_normal(shape))]
    weights = rng.random(len(atoms))
    dense = sum(w * a.dense() for w, a in zip(weights, atoms))
    lmo, other = Entries(flat[order], shape), Entries(rng.permutation(flat), shape)
    X._pattern_for(lmo)  # the LMO's entries (rows relabelled); the others get a pattern of their own
    sampled = []
    monkeypatch.setattr(lanczos.SparsePattern, "sample", spy(lanczos.SparsePattern.sample, sampled))
    for entries in (lmo, other):
        found = X.combination_at(atoms, weights, entries)
        np.testing.assert_allclose(found, dense.reshape(-1)[entries.flat], rtol=1e-12, atol=1e-12)
        # Added into a caller's array (column generation's x): in place, the same bits as adding the result.
        base = rng.standard_normal(len(entries))
        into = base.copy()
        assert X.combination_at(atoms, weights, entries, add_to=into) is into
        np.testing.assert_array_equal(into, base + found)
    assert len(sampled) == (4 if factors >= fc.sets.balls.SAMPLED_FACTORS else 0)
    assert X._pattern[1].row_order is not None and (not sampled or X._other[1]._perm is not None)


def test_a_sharded_row_block_is_read_group_by_group_and_takes_the_segmented_path(monkeypatch):
    """A rank's block of rows comes group by group, as the whole problem does: its pattern relabels its rows
    (the split Lanczos runs on the columns, which keep d's coordinates) and V has one segment per group."""
    from fullcomp_lab import sharded_completion_problem

    found = segments_seen(monkeypatch)
    data = fc.datasets.synthetic_ratings(shape=(60, 40), n_ratings=900, seed=0)
    problem = sharded_completion_problem(data, "max", batch=16, rank=1, size=2)
    fc.hmsfw(problem, iters=3, seed=0, progress=False)
    pattern = problem.domain._pattern[1]
    assert pattern.row_order is not None and pattern._perm is None
    assert all(b is not None and len(b.rows) <= data.n_groups for b in found)
    columns = sharded_completion_problem(data, "max", batch=16, rank=1, size=2, blocks="cols")
    assert np.all(np.diff(columns.reads.flat) > 0)  # a column block stays row-major: its rows are shared
