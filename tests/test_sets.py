"""Sets: LMO, projection, membership, types and diameters against independent answers.

Every reference is written here from the set's definition (its own CVXPY
constraints, a closed form, or a full SVD), never through the set's code.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse.linalg
import torch

import fullcomp as fc
from fullcomp.errors import DomainError
from fullcomp.sets import lanczos
from fullcomp.testing import parametrize_set_checks

BOX_LO = np.array([-1.0, -0.2, 0.3, -2.0, 0.0])
BOX_HI = np.array([0.5, 0.9, 0.3, -1.0, 2.0])  # one degenerate coordinate (lower == upper)
POLY_A = np.vstack([np.eye(4), -np.eye(4), np.array([[1.0, 1.0, 1.0, 1.0], [1.0, -2.0, 0.5, 1.0]])])
POLY_B = np.array([1.0, 2.0, 0.5, 1.0, 1.0, 0.3, 1.5, 1.0, 1.2, 0.8])


# name -> (factory, reference constraints on a CVXPY variable)
SETS = {
    "l1": (lambda: fc.L1Ball(6, 1.3), lambda v: [cp.sum(cp.abs(v)) <= 1.3]),
    "l1_matrix": (lambda: fc.L1Ball((2, 3), 0.7), lambda v: [cp.sum(cp.abs(v)) <= 0.7]),
    "l2": (lambda: fc.L2Ball(5, 2.0), lambda v: [cp.sum_squares(v) <= 4.0]),
    "l2_matrix": (lambda: fc.L2Ball((3, 2), 0.5), lambda v: [cp.sum_squares(v) <= 0.25]),
    "nuclear": (lambda: fc.NuclearBall((3, 4), 1.5), lambda v: nuclear_sdp(v, 1.5)),
    "nuclear_tall": (lambda: fc.NuclearBall((5, 2), 0.8), lambda v: nuclear_sdp(v, 0.8)),
    "box": (lambda: fc.Box(BOX_LO, BOX_HI), lambda v: [v >= BOX_LO, v <= BOX_HI]),
    "box_matrix": (
        lambda: fc.Box(-1.0, np.array([0.5, 1.0, 2.0]), shape=(2, 3)),
        lambda v: [v >= -1.0, v <= np.tile([0.5, 1.0, 2.0], (2, 1))],
    ),
    "simplex": (lambda: fc.Simplex(6), lambda v: [v >= 0, cp.sum(v) == 1]),
    "simplex_matrix": (lambda: fc.Simplex((2, 3), total=2.0), lambda v: [v >= 0, cp.sum(v) == 2]),
    "convex_l1_cut": (
        lambda: fc.ConvexSet(5, lambda v: [cp.norm(v, 1) <= 1, v >= -0.3]),
        lambda v: [cp.sum(cp.abs(v)) <= 1, v >= -0.3],
    ),
    "convex_polytope": (
        lambda: fc.ConvexSet(4, lambda v: [POLY_A @ v <= POLY_B]),
        lambda v: [POLY_A @ v <= POLY_B],
    ),
}
NAMES = list(SETS)

_BUILT: dict[str, fc.Set] = {}


def nuclear_sdp(v, radius: float) -> list:
    """||v||_* <= radius as the semidefinite program of Fazel et al.: [[W1, v], [v^T, W2]] PSD with
    (tr W1 + tr W2) / 2 <= radius."""
    p, q = v.shape
    W1, W2 = cp.Variable((p, p), symmetric=True), cp.Variable((q, q), symmetric=True)
    return [cp.bmat([[W1, v], [v.T, W2]]) >> 0, (cp.trace(W1) + cp.trace(W2)) / 2 <= radius]


def get(name: str) -> fc.Set:
    """Sets are immutable; ConvexSet construction solves 2 d programs, so build each once."""
    if name not in _BUILT:
        _BUILT[name] = SETS[name][0]()
    return _BUILT[name]


# The set contract (fullcomp.testing.check_set): LMO and projection against CVXPY over the constraints above and
# over the set's own, membership, diameter, numpy/torch types and input checks, on random and degenerate inputs.
@parametrize_set_checks({name: (get(name), {"constraints": constraints}) for name, (_, constraints) in SETS.items()})
def test_set_keeps_the_set_contract(domain, check):
    check(domain)


def test_a_point_of_a_convex_set_is_its_own_projection():
    rng = np.random.default_rng(101)
    for name in ("convex_l1_cut", "convex_polytope"):
        X = get(name)
        # its LMO points come from a solver, feasible only to ~1e-9; 0 is interior here
        inside = 0.25 * X.lmo(rng.standard_normal(X.shape)) + 0.25 * X.lmo(rng.standard_normal(X.shape))
        np.testing.assert_allclose(X.project(inside), inside, atol=1e-9)


CLOSED_DIAMETERS = {
    "l1": 2 * 1.3,
    "l1_matrix": 2 * 0.7,
    "l2": 2 * 2.0,
    "l2_matrix": 2 * 0.5,
    "nuclear": 2 * 1.5,
    "nuclear_tall": 2 * 0.8,
    "box": float(np.linalg.norm(BOX_HI - BOX_LO)),
    "box_matrix": float(np.linalg.norm(np.tile([1.5, 2.0, 3.0], (2, 1)))),
    "simplex": np.sqrt(2.0),
    "simplex_matrix": 2.0 * np.sqrt(2.0),
}


def lmo_spread(X: fc.Set, rng: np.random.Generator, tries: int) -> float:
    """A lower bound on the diameter: the largest distance between LMO points of opposite directions."""
    best = 0.0
    for _ in range(tries):
        d = rng.standard_normal(X.shape)
        best = max(best, float(np.linalg.norm(X.lmo(d) - X.lmo(-d))))
    return best


@pytest.mark.parametrize("name", list(CLOSED_DIAMETERS))
def test_diameter_closed_form(name):
    X = get(name)
    assert X.diameter == pytest.approx(CLOSED_DIAMETERS[name], rel=1e-12)
    assert lmo_spread(X, np.random.default_rng(3), 20) <= X.diameter + 1e-9


def test_diameter_attained():
    # the closed forms are attained, not merely upper bounds
    assert np.linalg.norm(get("l1").lmo(np.eye(6)[0]) - get("l1").lmo(-np.eye(6)[0])) == pytest.approx(2.6)
    assert np.linalg.norm(get("simplex").lmo(np.eye(6)[0]) - get("simplex").lmo(-np.eye(6)[0])) == pytest.approx(
        np.sqrt(2)
    )
    box = get("box")
    assert np.linalg.norm(box.lmo(np.ones(5)) - box.lmo(-np.ones(5))) == pytest.approx(box.diameter)
    assert fc.Simplex(1).diameter == 0.0


@pytest.mark.parametrize("name", ["convex_l1_cut", "convex_polytope"])
def test_convexset_diameter_is_an_upper_bound(name):
    X = get(name)
    # independent bounding box of the set, one pair of LPs per coordinate
    v = cp.Variable(X.size)
    lo, hi = np.empty(X.size), np.empty(X.size)
    for i in range(X.size):
        for sign, out in ((1.0, lo), (-1.0, hi)):
            prob = cp.Problem(cp.Minimize(sign * v[i]), SETS[name][1](v))
            prob.solve(solver="CLARABEL")
            out[i] = v.value[i]
    assert X.diameter == pytest.approx(float(np.linalg.norm(hi - lo)), rel=1e-6)
    assert lmo_spread(X, np.random.default_rng(5), 25) <= X.diameter + 1e-6


# ---- nuclear norm LMO: top singular pair only --------------------------------------------------


@pytest.fixture
def no_full_svd(monkeypatch):
    """Make every full SVD fail and record the ARPACK fallback calls of the LMO."""
    calls = []
    real_svds = lanczos.spla.svds

    def forbidden(*args, **kwargs):
        raise AssertionError("NuclearBall.lmo computed a full SVD")

    def spy(a, k=6, *args, **kwargs):
        calls.append(k)
        return real_svds(a, k, *args, **kwargs)

    monkeypatch.setattr(np.linalg, "svd", forbidden)
    monkeypatch.setattr(scipy.linalg, "svd", forbidden)
    monkeypatch.setattr(lanczos.spla, "svds", spy)
    return calls


def _directions():
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((6, 2)), rng.standard_normal((2, 9))
    return {
        "wide": rng.standard_normal((4, 9)),
        "tall": rng.standard_normal((9, 4)),
        "rank1": np.outer(rng.standard_normal(7), rng.standard_normal(5)),
        "rank2": a @ b,
        "tied_top": np.diag([2.0, 2.0, 1.0])[:, [0, 1, 2, 2]] * np.array([1, 1, 1, 0]),
        "row": rng.standard_normal((1, 6)),
        "column": rng.standard_normal((5, 1)),
    }


DIRECTIONS = _directions()
TOP_SIGMA = {k: float(np.linalg.svd(d, compute_uv=False)[0]) for k, d in DIRECTIONS.items()}


@pytest.mark.parametrize("kind", list(DIRECTIONS))
def test_nuclear_lmo_uses_top_pair_only(kind, no_full_svd):
    d = DIRECTIONS[kind]
    X = fc.NuclearBall(d.shape, 2.5)
    s = X.lmo(d)
    assert s.shape == d.shape
    # optimal: <d, s> = -radius * sigma_max(d), and s is a rank-one matrix of nuclear norm = radius
    assert float(np.sum(d * s)) == pytest.approx(-2.5 * TOP_SIGMA[kind], rel=1e-8)
    assert np.linalg.norm(s) == pytest.approx(2.5, rel=1e-8)  # rank one: Frobenius = nuclear norm
    assert no_full_svd == []  # Lanczos converged without the ARPACK fallback


@pytest.mark.parametrize("shape", [(30, 50), (50, 30)])
def test_lanczos_top_pair_matches_dense_svd_on_sparse_patterns(shape, monkeypatch):
    monkeypatch.setattr(fc.sets.balls, "DENSE_SIDE", 0)  # Lanczos even on these small matrices
    rng = np.random.default_rng(3)
    rows, cols = np.nonzero(rng.random(shape) < 0.2)
    pattern = lanczos.SparsePattern(rows, cols, shape)
    start = None
    for _ in range(3):
        values = rng.standard_normal(rows.size)
        d, d_t = pattern.fill(values)
        dense = np.zeros(shape)
        dense[rows, cols] = values
        assert np.array_equal(d.toarray(), dense) and np.array_equal(d_t.toarray(), dense.T)
        u, sigma, v, upper = fc.NuclearBall(shape).top_singular_pair(d, start, d_t)
        assert sigma == pytest.approx(np.linalg.svd(dense, compute_uv=False)[0], rel=1e-9)
        assert sigma <= upper <= sigma * (1 + 1e-6)
        np.testing.assert_allclose(dense @ v, sigma * u, atol=1e-4 * sigma)  # vectors to ~tol, values to ~tol^2
        start = u if shape[0] <= shape[1] else v  # warm start the next, different direction


def test_lanczos_zero_matrix_and_start_outside_the_range():
    u, sigma, v, _ = lanczos.top_singular_pair(np.zeros((4, 6)))
    assert sigma == 0.0 and not np.any(v)
    d = np.zeros((4, 6))
    d[0, 0], d[1, 2] = 3.0, 1.0
    # the start spans only rows d does not touch: d^T start = 0
    u, sigma, _, _ = lanczos.top_singular_pair(d, start=np.array([0.0, 0.0, 1.0, 1.0]))
    assert sigma == pytest.approx(3.0, rel=1e-12)


def test_nuclear_lmo_zero_direction_and_torch(no_full_svd):
    X = fc.NuclearBall((4, 6), 1.0)
    assert np.array_equal(X.lmo(np.zeros((4, 6))), np.zeros((4, 6)))
    out = X.lmo(torch.tensor(DIRECTIONS["wide"][:, :6], dtype=torch.float32))
    assert out.dtype == torch.float32 and tuple(out.shape) == (4, 6)


def test_nuclear_lmo_is_deterministic():
    X = fc.NuclearBall((9, 4), 1.0)
    d = DIRECTIONS["tall"]
    np.testing.assert_array_equal(X.lmo(d), X.lmo(d.copy()))


def test_nuclear_lmo_stopped_early_is_feasible_and_bounds_the_optimum(monkeypatch):
    """Stopped at any check, the atom is feasible and no better than the optimum, and the bound is below it."""
    monkeypatch.setattr(fc.sets.balls, "DENSE_SIDE", 0)  # Lanczos even on this small matrix
    rng = np.random.default_rng(11)
    shape = (40, 60)
    rows, cols = np.nonzero(rng.random(shape) < 0.3)
    entries = fc.sets.atoms.Entries(rows * shape[1] + cols, shape)
    direction = rng.standard_normal(rows.size)
    dense = np.zeros(shape)
    dense[rows, cols] = direction
    optimum = -2.0 * np.linalg.svd(dense, compute_uv=False)[0]
    X = fc.NuclearBall(shape, 2.0)
    for checks in (1, 2, 3, None):
        seen = []

        def enough(value, lower, seen=seen, checks=checks):
            seen.append((value, lower))
            return checks is not None and len(seen) >= checks

        atom, lower = X.lmo_bounded(direction, entries, enough=enough)
        s = atom.dense()
        assert np.linalg.norm(s, "nuc") == pytest.approx(2.0, rel=1e-9)  # feasible, on the boundary
        value = float(np.sum(dense * s))
        assert value >= optimum * (1 + 1e-12)  # never better than the optimum
        assert lower <= optimum * (1 - 1e-12)  # a lower bound on it
        assert all(lo <= v for v, lo in seen)
        if checks is None:  # run to the Lanczos tolerance: value and bound both exact to ~1e-12
            assert value == pytest.approx(optimum, rel=1e-12) and lower == pytest.approx(optimum, rel=1e-6)


@pytest.mark.parametrize("shape", [(7, 40), (40, 7), (64, 64)])
def test_small_nuclear_lmo_takes_the_dense_route_and_matches_a_full_svd(shape, monkeypatch):
    calls = []
    monkeypatch.setattr(lanczos, "top_singular_pair", lambda *a, **k: calls.append(1))
    d = np.random.default_rng(5).standard_normal(shape)
    u, sigma, v, upper = fc.NuclearBall(shape).top_singular_pair(d)
    U, S, Vt = np.linalg.svd(d)
    assert not calls and sigma == pytest.approx(S[0], rel=1e-12) and upper >= sigma
    assert upper == pytest.approx(S[0], rel=1e-12)
    np.testing.assert_allclose(np.abs(u), np.abs(U[:, 0]), atol=1e-9)
    np.testing.assert_allclose(d @ v, sigma * u, atol=1e-10 * S[0])


def test_sparse_pattern_in_row_order_fills_without_a_permutation_and_every_atom_fills_a_buffer():
    rng = np.random.default_rng(8)
    shape = (12, 9)
    flat = np.sort(rng.choice(shape[0] * shape[1], size=40, replace=False))
    entries = fc.sets.atoms.Entries(flat, shape)
    pattern = lanczos.SparsePattern(entries.rows, entries.cols, shape)
    values = rng.standard_normal(flat.size)
    d, d_t = pattern.fill(values)
    dense = np.zeros(shape)
    dense.reshape(-1)[flat] = values
    assert pattern._perm is None and d.data is values  # row order: the values are the CSR data as given
    assert np.array_equal(d.toarray(), dense) and np.array_equal(d_t.toarray(), dense.T)
    atoms = fc.sets.atoms
    rank_one = atoms.RankOneAtom(rng.standard_normal(shape[0]), rng.standard_normal(shape[1]))
    dense_atom = atoms.DenseAtom(rng.standard_normal(shape))
    mixture = atoms.MixtureAtom([rank_one, dense_atom], np.array([0.3, 0.7]))
    kinds = [rank_one, dense_atom, mixture, atoms.ZeroAtom(shape)]
    for atom in kinds:
        out = np.full(flat.size, np.nan)
        assert atom.at(entries, out=out) is out, type(atom).__name__
        np.testing.assert_allclose(out, atom.dense().reshape(-1)[flat], rtol=1e-15, atol=1e-15)
        np.testing.assert_array_equal(out, atom.at(entries))


def test_exact_lmos_bound_with_their_own_value():
    X = fc.L1Ball((3, 4), 2.0)
    entries = fc.sets.atoms.Entries(np.arange(12), (3, 4))
    direction = np.random.default_rng(9).standard_normal(12)
    atom, lower = X.lmo_bounded(direction, entries)
    assert lower == pytest.approx(-2.0 * np.abs(direction).max(), rel=1e-15)
    assert lower == pytest.approx(float(direction @ atom.at(entries)), rel=1e-15)


@pytest.mark.parametrize("by_blocks", [False, True])
@pytest.mark.parametrize("shape", [(300, 200), (200, 300)])
@pytest.mark.parametrize("row_order", [True, False])
def test_sparse_products_on_a_torch_device_match_scipy(shape, row_order, by_blocks, monkeypatch):
    """The GPU route (torch CSR products from host Lanczos vectors), exercised on the CPU; ``by_blocks``: the
    block iteration, whose products take blocks of vectors there."""
    if by_blocks:
        monkeypatch.setattr(fc.sets.balls, "BLOCK_ENTRIES", 0)
    rng = np.random.default_rng(11)
    flat = rng.choice(shape[0] * shape[1], size=3000, replace=False)
    flat = np.sort(flat) if row_order else flat
    entries = fc.sets.atoms.Entries(flat, shape)
    direction = rng.standard_normal(flat.size)
    dense = np.zeros(shape)
    dense.reshape(-1)[flat] = direction
    device = lanczos.SparsePattern(entries.rows, entries.cols, shape).on("cpu")
    d, d_t = device.fill(direction)
    x, y = rng.standard_normal(shape[1]), rng.standard_normal(shape[0])
    np.testing.assert_allclose(d @ x, dense @ x, rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(d_t @ y, dense.T @ y, rtol=1e-13, atol=1e-12)
    X = fc.NuclearBall(shape, 2.0)
    start = X.lmo_bounded(rng.standard_normal(flat.size), entries)[0]  # a warm start, as in column generation
    host, host_lower = X.lmo_bounded(direction, entries, hint=start)
    monkeypatch.setattr(lanczos, "PRODUCT_DEVICES", ("cuda", "cpu"))
    products = []
    monkeypatch.setattr(lanczos.DeviceMatrix, "__matmul__", spy(lanczos.DeviceMatrix.__matmul__, products))
    on_device, lower = X.lmo_bounded(direction, entries, hint=start, device=torch.device("cpu"))
    assert products and X._on_device[2].device == torch.device("cpu")
    assert (on_device.ritz is not None) == by_blocks
    sigma = np.linalg.svd(dense, compute_uv=False)[0]
    # Another product order can end the iteration at another check: the bounds agree to the Lanczos tolerance.
    assert lower == pytest.approx(host_lower, rel=1e-7) and lower <= -2.0 * sigma * (1 - 1e-12)
    np.testing.assert_allclose(on_device.dense(), host.dense(), atol=1e-7)


def spy(method, calls):
    def counted(self, x):
        calls.append(1)
        return method(self, x)

    return counted


def test_the_split_lanczos_multiplies_on_a_torch_device_too(monkeypatch):
    """Sharded entries (one rank here) take the column-side Lanczos; its products go through torch as well."""
    shape = (200, 300)
    rng = np.random.default_rng(12)
    flat = np.sort(rng.choice(shape[0] * shape[1], size=3000, replace=False))
    entries = fc.sets.atoms.Entries(flat, shape, sharded=True)
    direction = rng.standard_normal(flat.size)
    X = fc.NuclearBall(shape, 2.0)
    host, host_lower = X.lmo_bounded(direction, entries)
    monkeypatch.setattr(lanczos, "PRODUCT_DEVICES", ("cpu",))
    products = []
    monkeypatch.setattr(lanczos.DeviceMatrix, "__matmul__", spy(lanczos.DeviceMatrix.__matmul__, products))
    on_device, lower = X.lmo_bounded(direction, entries, device="cpu")
    assert products and lower == pytest.approx(host_lower, rel=1e-7)  # to the Lanczos tolerance
    np.testing.assert_allclose(on_device.dense(), host.dense(), atol=1e-7)


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("shape", [(30, 50), (50, 30)])
def test_ritz_subspace_atoms_are_the_best_in_the_basis_and_their_images_exact(shape, grouped, monkeypatch):
    """Heuristic pricing (fullcomp.sets.subspace) against a dense Rayleigh-Ritz of q^T V on the same basis,
    and its images against V times the atom's values, before and after a tracker revision and a state
    round trip; on entries in row-major order, and group by group (the pattern's rows relabelled)."""
    from fullcomp.oracles import BatchJacobian
    from fullcomp.sets.atoms import Entries
    from fullcomp.sets.subspace import RitzSubspace
    from fullcomp.trackers import Revision

    monkeypatch.setattr(fc.sets.balls, "DENSE_SIDE", 0)
    monkeypatch.setattr(fc.sets.balls, "SUBSPACE_ENTRIES", 0)
    rng = np.random.default_rng(1)
    X, n, m = fc.NuclearBall(shape, 2.0), 4, 400
    flat = np.sort(rng.choice(X.size, m, replace=False))
    if grouped:
        flat = flat[np.lexsort((flat, rng.integers(0, 3, shape[0])[flat // shape[1]]))]
    entries = Entries(flat, shape)
    V = rng.standard_normal((n, m))
    ritz = X.subspace(entries)
    assert (ritz.pattern.row_order is not None) == grouped
    assert X.subspace(entries, torch.device("cuda")) is None  # on a GPU run the LMO multiplies there instead
    ritz.follow(V, Revision(0))
    for _ in range(6):
        ritz.add(X.lmo_bounded(rng.standard_normal(m), entries)[0])
    cols = np.sort(rng.choice(m, 25, replace=False))
    J = BatchJacobian(torch.from_numpy(cols), torch.from_numpy(rng.standard_normal((n, 25))), m)
    V_next = 0.6 * V + 0.4 * J.dense().numpy()

    def check(ritz, V, q):
        atom, value, images = ritz.price(q)
        direct = V @ atom.at(entries)
        np.testing.assert_allclose(images, direct, rtol=0, atol=1e-12)
        assert value == pytest.approx(q @ direct, abs=1e-12)
        D = np.zeros(X.size)
        D[entries.flat] = q @ V
        D = D.reshape(shape) if ritz.rows_long else D.reshape(shape).T  # the longer side first
        best = np.linalg.svd(ritz.basis[: ritz.count] @ D, compute_uv=False)[0]
        assert -value == pytest.approx(X.radius * best, rel=1e-12)
        assert np.linalg.norm(atom.u) * np.linalg.norm(atom.v) == pytest.approx(X.radius, rel=1e-12)
        return atom

    q = rng.random(n)
    check(ritz, V, q)
    ritz.follow(V_next, Revision(1, since=0, keep=0.6, weight=0.4, jacobian=J))
    atom = check(ritz, V_next, q)
    copy = RitzSubspace(X.radius, entries, ritz.pattern)
    copy.load_state_dict(ritz.state_dict())
    assert np.array_equal(copy.price(q)[0].u, atom.u) and np.array_equal(copy.price(q)[2], ritz.price(q)[2])
    # A V it cannot relate to the last one empties the basis rather than pricing with stale products: one of
    # another lineage, or any V after one that came without a revision.
    ritz.follow(V, Revision(7, since=3))
    assert ritz.count == 0 and ritz.price(q) is None
    ritz.follow(V, None)
    ritz.add(atom)
    ritz.follow(V_next, Revision(8))
    assert ritz.count == 0


def test_ritz_subspace_replaces_its_oldest_vector_when_full(monkeypatch):
    from fullcomp.sets.atoms import Entries
    from fullcomp.sets.subspace import RitzSubspace
    from fullcomp.trackers import Revision

    monkeypatch.setattr(fc.sets.balls, "DENSE_SIDE", 0)
    rng = np.random.default_rng(2)
    X = fc.NuclearBall((40, 60), 1.0)
    entries = Entries(np.sort(rng.choice(X.size, 500, replace=False)), X.shape)
    V = rng.standard_normal((3, 500))
    ritz = RitzSubspace(X.radius, entries, fc.sets.lanczos.SparsePattern(entries.rows, entries.cols, X.shape), 3)
    ritz.follow(V, Revision(0))
    for _ in range(5):
        ritz.add(X.lmo_bounded(rng.standard_normal(500), entries)[0])
    basis = ritz.basis[: ritz.count]
    assert ritz.count == 3 and ritz.oldest == 2
    np.testing.assert_allclose(basis @ basis.T, np.eye(3), atol=1e-12)
    q = rng.random(3)
    atom, _, images = ritz.price(q)
    np.testing.assert_allclose(images, V @ atom.at(entries), rtol=0, atol=1e-12)


def test_sharded_entries_find_their_blocks_and_refuse_an_empty_shard():
    from fullcomp.errors import OptionError
    from fullcomp.sets.atoms import Entries

    # One process holds one block: both splits hold, and the side with the shorter all-reduced vector wins.
    assert Entries(np.arange(12), (3, 4), sharded=True).check_blocks() == "cols"  # P-vectors (3) beat Q (4)
    assert Entries(np.arange(12), (4, 3), sharded=True).check_blocks() == "rows"
    with pytest.raises(OptionError, match="rank 0 holds no entries"):
        Entries(np.zeros(0, dtype=np.int64), (4, 3), sharded=True).check_blocks()


def sparse_direction(shape, density, seed, grouped=False):
    """(entries, values, dense) of a random sparse direction; ``grouped``: each row's entries together, the
    rows in a shuffled order (so the pattern relabels its rows)."""
    from fullcomp.sets.atoms import Entries

    rng = np.random.default_rng(seed)
    flat = np.flatnonzero(rng.random(shape[0] * shape[1]) < density)
    if grouped:
        rank = np.argsort(rng.permutation(shape[0]))
        flat = flat[np.lexsort((flat % shape[1], rank[flat // shape[1]]))]
    values = rng.standard_normal(flat.size)
    dense = np.zeros(shape)
    dense.reshape(-1)[flat] = values
    return Entries(flat, shape), values, dense


@pytest.mark.parametrize("shape", [(60, 90), (90, 60)])
def test_block_lanczos_matches_a_dense_svd_and_restarts_from_its_ritz_vectors(shape):
    _, values, dense = sparse_direction(shape, 0.2, 21)
    d = dense if shape[0] <= shape[1] else dense.T
    sigmas = np.linalg.svd(d, compute_uv=False)
    top = np.linalg.svd(d)[0][:, : lanczos.BLOCK]
    pair, ritz = lanczos.top_singular_block(d)
    assert pair.sigma == pytest.approx(sigmas[0], rel=1e-12) and sigmas[0] <= pair.upper <= sigmas[0] * (1 + 1e-6)
    np.testing.assert_allclose(d.T @ pair.u, pair.sigma * pair.v, atol=1e-12 * pair.sigma)
    np.testing.assert_allclose(d @ pair.v, pair.sigma * pair.u, atol=1e-3 * pair.sigma)  # vectors to ~sqrt(tol)
    assert ritz.shape == (lanczos.BLOCK, d.shape[0])
    assert abs(ritz[0] @ top[:, 0]) == pytest.approx(1.0, abs=1e-6)  # best first
    # A nearby direction from the Ritz vectors: the same answer as from a cold start.
    near = d + 0.01 * np.random.default_rng(2).standard_normal(d.shape)
    warm, _ = lanczos.top_singular_block(near, start=ritz)
    assert warm.sigma == pytest.approx(np.linalg.svd(near, compute_uv=False)[0], rel=1e-12)


def test_block_lanczos_of_a_low_rank_matrix_hands_over_to_the_single_vector_iteration():
    rng = np.random.default_rng(4)
    d = rng.standard_normal((40, 2)) @ rng.standard_normal((2, 50))  # rank 2 < one block of 4
    pair, ritz = lanczos.top_singular_block(d)
    assert ritz is None and pair.sigma == pytest.approx(np.linalg.svd(d, compute_uv=False)[0], rel=1e-12)
    zero, ritz = lanczos.top_singular_block(np.zeros((40, 50)))
    assert zero.sigma == 0.0 and ritz is None


@pytest.mark.parametrize("shape", [(60, 90), (90, 60)])
def test_the_lmo_by_blocks_on_relabelled_rows_is_the_lmo_in_row_major_order(shape, monkeypatch):
    """At scale the sparse LMO runs block Lanczos (through torch's CSR products), warm-started from the hint's
    Ritz vectors; rows given group by group are relabelled, and the iteration is the row-major one."""
    monkeypatch.setattr(fc.sets.balls, "BLOCK_ENTRIES", 0)
    row_major, values, dense = sparse_direction(shape, 0.2, 8)
    grouped, _, _ = sparse_direction(shape, 0.2, 8, grouped=True)
    at = {int(f): i for i, f in enumerate(grouped.flat)}
    order = np.array([at[int(f)] for f in row_major.flat])  # grouped position of each row-major entry
    nearby = values + 0.05 * np.random.default_rng(1).standard_normal(values.size)
    hints = {}
    for name, entries in (("row-major", row_major), ("grouped", grouped)):
        direction, second = values.copy(), nearby.copy()
        if name == "grouped":
            direction[order], second[order] = values, nearby
        X = fc.NuclearBall(shape, 2.0)
        first, _ = X.lmo_bounded(direction, entries)
        hint = hints["row-major"][3] if hints else first  # atoms are layout-free: start both from the same
        checks = []
        atom, lower = X.lmo_bounded(
            second, entries, hint=hint, enough=lambda *bounds, checks=checks: checks.append(bounds)
        )
        assert X._pattern[2] and (X._pattern[1].row_order is not None) == (name == "grouped")
        assert first.ritz is not None and first.ritz[0] == ("u" if shape[0] <= shape[1] else "v")
        hints[name] = (atom, lower, checks[0], first)
    (a, lower_a, check_a, _), (b, lower_b, check_b, _) = hints["row-major"], hints["grouped"]
    np.testing.assert_allclose(check_b, check_a, rtol=1e-12)  # the same start, so the same first check
    # Relabelled rows permute the iteration's vectors, so its inner products round differently: the two runs
    # agree to the Lanczos tolerance, not to the bit.
    assert lower_b == pytest.approx(lower_a, rel=fc.sets.balls.LANCZOS_TOL)
    np.testing.assert_allclose(b.dense(), a.dense(), atol=1e-6)
    near = np.zeros(shape)
    near.reshape(-1)[row_major.flat] = nearby
    sigma = np.linalg.svd(near, compute_uv=False)[0]
    assert float(np.sum(near * a.dense())) == pytest.approx(-2.0 * sigma, rel=1e-12)
    assert lower_a <= -2.0 * sigma * (1 - 1e-12)


@pytest.mark.parametrize("shape", [(60, 90), (90, 60)])
@pytest.mark.parametrize("grouped", [False, True])
def test_a_row_scaled_direction_is_priced_by_its_factors_in_float32_then_float64(shape, grouped, monkeypatch):
    """A direction diag(s) G (ScaledRows) on the LMO's block path: the iteration multiplies G and its transpose,
    built once per tag, in float32 until it is near and then in float64, so that a converged pair is the dense
    SVD's to the Lanczos tolerance and its bound holds; an early answer stays in float32 and is feasible."""
    from fullcomp.sets.atoms import ScaledRows

    monkeypatch.setattr(fc.sets.balls, "BLOCK_ENTRIES", 0)
    phases, real = [], lanczos.block_iteration

    def spy(d, *args, **kwargs):
        phases.append(getattr(getattr(d, "matrix", None), "dtype", None))  # a torch matrix's
        return real(d, *args, **kwargs)

    monkeypatch.setattr(lanczos, "block_iteration", spy)
    entries, values, _ = sparse_direction(shape, 0.2, 41, grouped=grouped)
    rng = np.random.default_rng(42)
    X, wide = fc.NuclearBall(shape, 2.0), shape[0] <= shape[1]
    for tag, scale, G in ((0, rng.random(shape[0]), values), (0, rng.random(shape[0]), values), (1, None, -values)):
        scale = rng.random(shape[0]) if scale is None else scale
        dense = np.zeros(shape)
        dense.reshape(-1)[entries.flat] = G * scale[entries.rows]
        u, s, vt = np.linalg.svd(dense)
        phases.clear()
        atom, lower = X.lmo_bounded(ScaledRows(G, np.arange(shape[0]), scale, tag), entries)
        assert phases == [torch.float32, torch.float64]
        value = float(np.sum(dense * atom.dense()))
        assert value == pytest.approx(-2.0 * s[0], rel=1e-12)
        assert -2.0 * s[0] * (1 + 1e-6) <= lower <= -2.0 * s[0] * (1 - 1e-12)
        y = -atom.u / 2.0 if wide else atom.v  # the side the iteration ran on
        gram = dense @ dense.T if wide else dense.T @ dense
        assert np.linalg.norm(gram @ y - s[0] ** 2 * y) <= 1.001 * fc.sets.balls.LANCZOS_TOL * s[0] ** 2
        plain, plain_lower = fc.NuclearBall(shape, 2.0).lmo_bounded(G * scale[entries.rows], entries)
        assert lower == pytest.approx(plain_lower, rel=fc.sets.balls.LANCZOS_TOL)
        np.testing.assert_allclose(atom.dense(), plain.dense(), atol=1e-6)
    phases.clear()
    early, _ = X.lmo_bounded(ScaledRows(G, np.arange(shape[0]), scale, 1), entries, enough=lambda value, lower: True)
    assert phases == [torch.float32] and float(np.sum(dense * early.dense())) >= -2.0 * s[0] * (1 + 1e-12)
    assert np.linalg.norm(early.dense(), "nuc") == pytest.approx(2.0, rel=1e-9)


@pytest.mark.parametrize("sharded", [False, True])
def test_the_lmo_by_blocks_stopped_early_is_feasible_and_bounds_the_optimum(sharded, monkeypatch):
    monkeypatch.setattr(fc.sets.balls, "BLOCK_ENTRIES", 0)
    entries, direction, dense = sparse_direction((50, 70), 0.3, 11)
    if sharded:  # one rank holding every row: the split iteration, on the column side
        entries = fc.sets.atoms.Entries(entries.flat, entries.shape, sharded=True)
    optimum = -2.0 * np.linalg.svd(dense, compute_uv=False)[0]
    X = fc.NuclearBall((50, 70), 2.0)
    for checks in (1, 2, None):
        seen = []

        def enough(value, lower, seen=seen, checks=checks):
            seen.append((value, lower))
            return checks is not None and len(seen) >= checks

        atom, lower = X.lmo_bounded(direction, entries, enough=enough)
        value = float(np.sum(dense * atom.dense()))
        assert np.linalg.norm(atom.dense(), "nuc") == pytest.approx(2.0, rel=1e-9)
        assert value >= optimum * (1 + 1e-12) and lower <= optimum * (1 - 1e-12)
        assert all(lo <= v for v, lo in seen) and atom.ritz is not None
        if checks is None:
            assert value == pytest.approx(optimum, rel=1e-12) and lower == pytest.approx(optimum, rel=1e-6)


@pytest.mark.parametrize("by_blocks", [False, True])
def test_a_sharded_row_block_with_relabelled_rows_prices_the_whole_matrix_atom(by_blocks, monkeypatch):
    """A rank holding whole rows, read group by group, relabels them; the split Lanczos (one rank here) runs on
    the columns and maps the row side back before summing it over the ranks: the atom is the plain LMO's."""
    if by_blocks:
        monkeypatch.setattr(fc.sets.balls, "BLOCK_ENTRIES", 0)
    shape = (90, 60)
    entries, values, dense = sparse_direction(shape, 0.2, 31, grouped=True)
    sharded = fc.sets.atoms.Entries(entries.flat, shape, sharded=True)
    X = fc.NuclearBall(shape, 2.0)
    atom, lower = X.lmo_bounded(values, sharded)
    assert X._pattern[1].row_order is not None
    u, s, vt = np.linalg.svd(dense)
    sign = np.sign(atom.u @ u[:, 0]) * -1.0
    np.testing.assert_allclose(-atom.u / 2.0 * sign, u[:, 0], atol=1e-6)
    np.testing.assert_allclose(atom.v * sign, vt[0], atol=1e-6)
    assert -2.0 * s[0] * (1 + 1e-7) <= lower <= -2.0 * s[0] * (1 - 1e-12)
    again, _ = X.lmo_bounded(values + 0.01, sharded, hint=atom)  # warm: the hint's vectors in d's coordinates
    assert float(np.sum(dense * again.dense())) <= -2.0 * s[0] * (1 - 1e-3)


@pytest.mark.parametrize("n", [1, 2, 7, 40])
def test_top_ritz_pair_is_the_tridiagonal_matrix_top_eigenpair(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        alpha, beta = rng.standard_normal(n), rng.standard_normal(n - 1)
        theta, vec = lanczos.top_ritz(alpha, beta)
        values, vectors = np.linalg.eigh(np.diag(alpha) + np.diag(beta, 1) + np.diag(beta, -1))
        assert theta == pytest.approx(values[-1], abs=1e-12)
        assert np.abs(np.abs(vec @ vectors[:, -1]) - 1.0) < 1e-12 and np.linalg.norm(vec) == pytest.approx(1.0)
        if n > 1:  # scipy's own route, the same LAPACK calls: the same bits
            w, v = scipy.linalg.eigh_tridiagonal(alpha, beta, select="i", select_range=(n - 1, n - 1))
            assert theta == w[0] and np.array_equal(vec, v[:, 0])


def test_vector_product_is_scipy_product_bit_for_bit():
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    csr = sp.random(30, 40, density=0.2, format="csr", random_state=4)
    wide = sp.csr_matrix((csr.data, csr.indices.astype(np.int64), csr.indptr.astype(np.int64)), shape=csr.shape)
    for matrix in (csr, csr.T, wide, wide.T, csr.toarray()):
        x = rng.standard_normal(matrix.shape[1])
        product = lanczos.vector_product(matrix)
        assert np.array_equal(product(x), matrix @ x)
        strided = np.repeat(x, 2)[::2]  # not contiguous: the generic product
        assert np.array_equal(product(strided), matrix @ x)
    product = lanczos.vector_product(csr)
    csr.data = csr.data * 2.0  # a refill: the product reads the new values
    assert np.array_equal(product(x := rng.standard_normal(40)), csr @ x)


def test_project_simplex_takes_any_shape_and_total():
    from fullcomp.sets.balls import project_simplex

    rng = np.random.default_rng(21)
    v = rng.standard_normal((3, 4))
    flat = project_simplex(v.ravel(), 2.5)
    np.testing.assert_array_equal(project_simplex(v, 2.5), flat.reshape(3, 4))
    w = cp.Variable(12)
    cp.Problem(cp.Minimize(cp.sum_squares(w - v.ravel())), [w >= 0, cp.sum(w) == 2.5]).solve(solver="CLARABEL")
    np.testing.assert_allclose(flat, w.value, atol=1e-6)
    assert flat.min() >= 0 and flat.sum() == pytest.approx(2.5, rel=1e-12)
    np.testing.assert_array_equal(project_simplex([0.2, 0.5, 0.3]), [0.2, 0.5, 0.3])  # the default total is 1
    assert not project_simplex(v, 0.0).any()


@pytest.mark.parametrize("name", NAMES)
def test_a_complex_direction_or_point_is_refused_by_name(name):
    domain = get(name)
    real = np.linspace(-1.0, 1.0, domain.size).reshape(domain.shape)
    for value in (real + 5j, (real + 0.5j).tolist(), torch.as_tensor(real) * (1 + 1j)):
        with pytest.raises(DomainError, match=rf"{type(domain).__name__}\.lmo\(\) received a complex .* direction"):
            domain.lmo(value)
        with pytest.raises(DomainError, match=rf"{type(domain).__name__}\.project\(\) received a complex .* point"):
            domain.project(value)
    with pytest.raises(DomainError, match=r"contains\(\) received a complex"):
        domain.contains(real + 1j)
    with pytest.raises(DomainError, match=r"needs an array of real numbers as its direction"):
        domain.lmo(np.full(domain.shape, "a"))
    assert np.allclose(domain.lmo(real.tolist()), domain.lmo(real))  # real input as before
