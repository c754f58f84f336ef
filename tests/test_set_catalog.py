"""The set catalog (capped simplex, K-sparse, l_p, K-norm, spectraplex, Birkhoff, permutahedron, product)
against independent answers.

Every reference is written here from the set's definition, never through the set's code: an LP/SDP over
constraints written independently (a lifted description where the set's own is a norm atom), the best
vertex of an explicit vertex enumeration, and CVXPY's least-squares program for the projection. Directions
include ties and degenerate cases (zero, all-equal, all-positive, all-negative, repeated extremes), where
peers' simplex and l1 LMOs have failed.
"""

from __future__ import annotations

import itertools
import math

import cvxpy as cp
import numpy as np
import pytest
import scipy.linalg
import torch

import fullcomp as fc
from fullcomp.errors import DomainError
from fullcomp.sets import spectral
from fullcomp.testing import parametrize_set_checks, set_directions

W_PERM = np.array([3.0, 1.0, -2.0, 0.5, 0.5])  # a repeated entry: fewer distinct permutations


def lifted_knorm(v, k: int, radius: float) -> list:
    """conv(B_1(radius) U B_inf(radius / k)) by its definition: v = y + z, ||y||_1 <= lam radius,
    ||z||_inf <= (1 - lam) radius / k, 0 <= lam <= 1."""
    y, z, lam = cp.Variable(v.shape), cp.Variable(v.shape), cp.Variable()
    return [v == y + z, cp.norm(y, 1) <= lam * radius, cp.abs(z) <= (1 - lam) * radius / k, lam >= 0, lam <= 1]


def lifted_ksparse(v, k: int, radius: float) -> list:
    """{|v_i| <= radius, sum |v_i| <= k radius} with the absolute values split into two nonnegative parts."""
    plus, minus = cp.Variable(v.shape, nonneg=True), cp.Variable(v.shape, nonneg=True)
    return [v == plus - minus, plus + minus <= radius, cp.sum(plus + minus) <= k * radius]


def mixture_of_permutations(v, w: np.ndarray) -> list:
    """The permutahedron as {P w : P doubly stochastic} (Rado / Hardy-Littlewood-Polya)."""
    P = cp.Variable((w.size, w.size), nonneg=True)
    return [cp.sum(P, axis=1) == 1, cp.sum(P, axis=0) == 1, v == P @ w]


# name -> (factory, independent constraints on a CVXPY expression of the set's shape)
CASES = {
    "capped": (lambda: fc.CappedSimplex(7, 2.5, cap=0.6), lambda v: [v >= 0, v <= 0.6, cp.sum(v) == 2.5]),
    "capped_le": (
        lambda: fc.CappedSimplex(7, 2.5, cap=0.6, equality=False),
        lambda v: [v >= 0, v <= 0.6, cp.sum(v) <= 2.5],
    ),
    "capped_matrix": (lambda: fc.CappedSimplex((2, 3), 1.0, cap=0.3), lambda v: [v >= 0, v <= 0.3, cp.sum(v) == 1]),
    "hypersimplex": (lambda: fc.Hypersimplex(6, 2), lambda v: [v >= 0, v <= 1, cp.sum(v) == 2]),
    "ksparse": (lambda: fc.KSparsePolytope(7, 3, 1.5), lambda v: lifted_ksparse(v, 3, 1.5)),
    "ksparse_matrix": (
        lambda: fc.KSparsePolytope((2, 3), 2, 0.5),
        lambda v: lifted_ksparse(cp.vec(v, order="C"), 2, 0.5),
    ),
    "knorm": (lambda: fc.KNormBall(7, 3, 1.5), lambda v: lifted_knorm(v, 3, 1.5)),
    "knorm_k1": (lambda: fc.KNormBall(5, 1, 0.8), lambda v: lifted_knorm(v, 1, 0.8)),  # k = 1: the l_inf ball
    "lp_1.5": (lambda: fc.LpBall(6, 1.5, 2.0), lambda v: [cp.sum(cp.power(cp.abs(v), 1.5)) <= 2.0**1.5]),
    "lp_3": (lambda: fc.LpBall(6, 3.0), lambda v: [cp.sum(cp.power(cp.abs(v), 3)) <= 1.0]),
    "lp_4_matrix": (lambda: fc.LpBall((2, 3), 4.0, 0.5), lambda v: [cp.sum(cp.power(cp.abs(v), 4)) <= 0.5**4]),
    "lp_inf": (lambda: fc.LpBall(5, np.inf, 0.7), lambda v: [v <= 0.7, v >= -0.7]),
    "spectraplex": (lambda: fc.Spectraplex(4, 2.0), lambda v: [v == v.T, v >> 0, cp.trace(v) == 2.0]),
    "spectrahedron": (lambda: fc.UnitSpectrahedron(4, 2.0), lambda v: [v == v.T, v >> 0, cp.trace(v) <= 2.0]),
    "birkhoff": (lambda: fc.Birkhoff(4), lambda v: [v >= 0, cp.sum(v, axis=0) == 1, cp.sum(v, axis=1) == 1]),
    "permutahedron": (lambda: fc.Permutahedron(W_PERM), lambda v: mixture_of_permutations(v, W_PERM)),
    "product": (
        lambda: fc.Product(fc.Simplex(3), fc.Spectraplex(2), fc.KNormBall(4, 2)),
        lambda v: [
            v[:3] >= 0,
            cp.sum(v[:3]) == 1,
            cp.reshape(v[3:7], (2, 2), order="C") == cp.reshape(v[3:7], (2, 2), order="C").T,
            cp.reshape(v[3:7], (2, 2), order="C") >> 0,
            v[3] + v[6] == 1,
            *lifted_knorm(v[7:], 2, 1.0),
        ],
    ),
    "product_named": (
        lambda: fc.Product({"w": fc.CappedSimplex(4, 1.0, cap=0.5), "X": fc.NuclearBall((2, 3), 1.5)}),
        lambda v: [
            v[:4] >= 0,
            v[:4] <= 0.5,
            cp.sum(v[:4]) == 1,
            cp.normNuc(cp.reshape(v[4:], (2, 3), order="C")) <= 1.5,
        ],
    ),
}
NAMES = list(CASES)
_BUILT: dict[str, fc.Set] = {}


def get(name: str) -> fc.Set:
    if name not in _BUILT:
        _BUILT[name] = CASES[name][0]()
    return _BUILT[name]


# The set contract (fullcomp.testing.check_set) on every set of the catalog: the LMO against CVXPY over the
# constraints above and the set's own on random and degenerate directions (zero, constant, ties, repeated
# extremes), the projection against CVXPY and its variational inequality, membership, the diameter against the
# set's points, numpy/torch float32/float64 (and CUDA) types, and the refusal of a wrong shape or a NaN.
@parametrize_set_checks({name: (get(name), {"constraints": constraints}) for name, (_, constraints) in CASES.items()})
def test_catalog_set_keeps_the_set_contract(domain, check):
    check(domain)


def directions(name: str, seed: int) -> list[np.ndarray]:
    return set_directions(get(name).shape, seed)


def capped_vertices(n: int, total: float, cap: float, equality: bool) -> list[np.ndarray]:
    """Vertices of {0 <= x <= cap, sum x = total (<= total)}: n active bounds, or n - 1 and the sum."""
    out = []
    for mask in itertools.product([0.0, 1.0], repeat=n):
        base = cap * np.array(mask)
        rest = total - base.sum()
        if abs(rest) <= 1e-12 or (not equality and rest > 0):
            out.append(base)
        if 1e-12 < rest < cap - 1e-12:
            for i in np.flatnonzero(base == 0):
                x = base.copy()
                x[i] = rest
                out.append(x)
    return out


def ksparse_vertices(n: int, k: int, radius: float) -> list[np.ndarray]:
    out = []
    for support in itertools.combinations(range(n), k):
        for signs in itertools.product([-1.0, 1.0], repeat=k):
            x = np.zeros(n)
            x[list(support)] = radius * np.array(signs)
            out.append(x)
    return out


def knorm_vertices(n: int, k: int, radius: float) -> list[np.ndarray]:
    ones = [radius * s * np.eye(n)[i] for i in range(n) for s in (-1.0, 1.0)]
    return ones + [radius / k * np.array(s) for s in itertools.product([-1.0, 1.0], repeat=n)]


VERTICES = {
    "capped": lambda: capped_vertices(7, 2.5, 0.6, True),
    "capped_le": lambda: capped_vertices(7, 2.5, 0.6, False),
    "capped_matrix": lambda: [v.reshape(2, 3) for v in capped_vertices(6, 1.0, 0.3, True)],
    "hypersimplex": lambda: capped_vertices(6, 2.0, 1.0, True),
    "ksparse": lambda: ksparse_vertices(7, 3, 1.5),
    "ksparse_matrix": lambda: [v.reshape(2, 3) for v in ksparse_vertices(6, 2, 0.5)],
    "knorm": lambda: knorm_vertices(7, 3, 1.5),
    "knorm_k1": lambda: knorm_vertices(5, 1, 0.8),
    "lp_inf": lambda: [0.7 * np.array(s) for s in itertools.product([-1.0, 1.0], repeat=5)],
    "birkhoff": lambda: [np.eye(4)[list(p)] for p in itertools.permutations(range(4))],
    "permutahedron": lambda: [W_PERM[list(p)] for p in itertools.permutations(range(5))],
}


@pytest.mark.parametrize("name", list(VERTICES))
def test_lmo_is_the_best_vertex_and_diameter_the_farthest_pair(name):
    X, vertices = get(name), np.array(VERTICES[name]())
    flat = vertices.reshape(len(vertices), -1)
    for d in directions(name, 50 + NAMES.index(name)):
        value = float(np.sum(d * X.lmo(d)))
        assert value == pytest.approx(float(np.min(flat @ d.ravel())), abs=1e-12)
    gram = flat @ flat.T
    sq = np.diag(gram)[:, None] + np.diag(gram)[None, :] - 2 * gram
    assert X.diameter == pytest.approx(math.sqrt(max(sq.max(), 0.0)), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("equality", [True, False])
def test_capped_simplex_diameter_on_many_sizes_against_its_vertices(equality):
    for n, total, cap in [
        (1, 0.5, 1.0),
        (2, 1.0, 1.0),
        (3, 1.0, 0.4),
        (4, 0.0, 1.0),
        (4, 4.0, 1.0),
        (5, 1.7, 0.5),
        (5, 3.2, 1.0),
        (6, 0.3, 0.25),
        (6, 2.0, 0.45),
        (6, 5.5, 1.0),
        (7, 1.0, 1 / 3),
    ]:
        X = fc.CappedSimplex(n, total, cap=cap, equality=equality)
        flat = np.array(capped_vertices(n, total, cap, equality))
        gram = flat @ flat.T
        sq = np.diag(gram)[:, None] + np.diag(gram)[None, :] - 2 * gram
        assert X.diameter == pytest.approx(math.sqrt(max(sq.max(), 0.0)), rel=1e-9, abs=1e-12), (n, total, cap)


def test_knorm_ball_is_the_top_k_norm_ball_and_the_ksparse_polytope_its_polar():
    # FrankWolfe.jl: KNormBallLMO is conv(B_1(tau) U B_inf(tau / K)), the ball of the sum of the K largest |x_i|;
    # the intersection of B_inf(tau) and B_1(K tau) is KSparseLMO's polytope, the polar (dual norm) ball.
    rng = np.random.default_rng(11)
    for _ in range(5):
        d = rng.standard_normal(8)
        a = np.sort(np.abs(d))[::-1]
        knorm, ksparse = fc.KNormBall(8, 3, 2.0), fc.KSparsePolytope(8, 3, 2.0)
        assert np.sum(d * knorm.lmo(d)) == pytest.approx(-2.0 * max(a[0], a.sum() / 3), rel=1e-12)
        assert np.sum(d * ksparse.lmo(d)) == pytest.approx(-2.0 * a[:3].sum(), rel=1e-12)
        x = knorm.project(3.0 * d)
        assert np.sort(np.abs(x))[::-1][:3].sum() == pytest.approx(2.0, rel=1e-9)


def test_cvar_weights_are_a_capped_simplex():
    rng = np.random.default_rng(12)
    u_values = rng.standard_normal(10)
    u = fc.inner_value(10)
    u.value = u_values
    for alpha in (0.05, 0.25, 0.3, 0.5, 1.0):
        weights = fc.CappedSimplex(10, 1.0, cap=1.0 / (alpha * 10))
        # CVaR_alpha(u) = max over the weight set of <w, u> = -min <-u, w>
        assert float(u_values @ weights.lmo(-u_values)) == pytest.approx(fc.cvar(u, alpha).value, rel=1e-12)


def test_lp_ball_lmo_is_hoelders_equality_case_and_diameter_attained():
    rng = np.random.default_rng(13)
    for p in (1.01, 1.5, 2.0, 3.0, 10.0, 60.0):
        X = fc.LpBall(9, p, 1.3)
        q = p / (p - 1)
        for d in (rng.standard_normal(9), 1e-200 * rng.standard_normal(9), 1e200 * rng.standard_normal(9)):
            s = X.lmo(d)
            top = np.abs(d).max()  # norms of d / top: |d|^q of d ~ 1e200 overflows
            assert np.linalg.norm(s, p) == pytest.approx(1.3, rel=1e-9)
            assert np.sum(d / top * s) == pytest.approx(-1.3 * np.linalg.norm(d / top, q), rel=1e-9)
        far = np.ones(9) if p >= 2 else np.eye(9)[0]
        assert np.linalg.norm(X.lmo(-far) - X.lmo(far)) == pytest.approx(X.diameter, rel=1e-12)


def test_spectral_sets_take_the_lanczos_route_when_large(monkeypatch):
    monkeypatch.setattr(spectral, "DENSE_ORDER", 8)
    rng = np.random.default_rng(14)
    n = 40
    d = rng.standard_normal((n, n))
    sym = 0.5 * (d + d.T)
    smallest = scipy.linalg.eigvalsh(sym)[0]
    for X in (fc.Spectraplex(n, 3.0), fc.UnitSpectrahedron(n, 3.0)):
        s = X.lmo(d)
        assert np.sum(d * s) == pytest.approx(3.0 * smallest, rel=1e-9)
        assert X.contains(s)
        again = X.lmo(d + 1e-3 * rng.standard_normal((n, n)))  # warm-started from the last eigenvector
        assert X.contains(again)
    # the spectrahedron's LMO is the origin when the direction's symmetric part is PSD
    assert not np.any(fc.UnitSpectrahedron(n, 3.0).lmo(sym @ sym))


def test_spectral_diameters_are_attained():
    for X in (fc.Spectraplex(3, 2.0), fc.UnitSpectrahedron(3, 2.0)):
        e = np.diag([1.0, -1.0, 0.0])
        assert np.linalg.norm(X.lmo(e) - X.lmo(-e)) == pytest.approx(X.diameter, rel=1e-12)
    assert fc.Spectraplex(1, 2.0).diameter == 0.0 and fc.UnitSpectrahedron(1, 2.0).diameter == 2.0


def test_birkhoff_projection_of_hard_inputs_is_doubly_stochastic():
    rng = np.random.default_rng(15)
    for v in (1e4 * rng.standard_normal((12, 12)), np.eye(6)[::-1] * 5.0, np.full((5, 5), -3.0), np.zeros((1, 1))):
        x = fc.Birkhoff(v.shape[0]).project(v)
        scale = max(1.0, np.abs(v).max())
        assert x.min() >= 0
        assert np.abs(x.sum(axis=0) - 1).max() <= 1e-12 * scale * v.shape[0]
        assert np.abs(x.sum(axis=1) - 1).max() <= 1e-12 * scale * v.shape[0]


def test_product_blocks_split_join_and_diameter():
    X = get("product_named")
    rng = np.random.default_rng(16)
    d = rng.standard_normal(X.shape)
    s = X.lmo(d)
    parts = X.split(s)
    assert set(parts) == {"w", "X"} and parts["X"].shape == (2, 3)
    blocks = dict(zip(X.names, X.blocks))
    np.testing.assert_allclose(parts["w"], blocks["w"].lmo(d[:4]))
    np.testing.assert_allclose(parts["X"], blocks["X"].lmo(d[4:].reshape(2, 3)))
    np.testing.assert_array_equal(X.join(parts), s)
    assert X.diameter == pytest.approx(math.hypot(blocks["w"].diameter, blocks["X"].diameter))
    torch_parts = X.split(torch.tensor(s))
    assert isinstance(torch_parts["X"], torch.Tensor)
    P = get("product")
    assert not P.contains_origin and P.contains(P.default_point())
    with pytest.raises(DomainError, match="join"):
        X.join([s[:4]])


class Corners(fc.Set):
    """conv{+-e_i} known by its LMO alone (and its diameter)."""

    def __init__(self, n: int):
        self.shape = (n,)

    diameter = 2.0

    def lmo(self, d):
        d = np.asarray(d, dtype=float)
        out = np.zeros_like(d)
        i = int(np.argmax(np.abs(d)))
        out[i] = -1.0 if d[i] >= 0 else 1.0
        return out


def test_a_set_needs_only_an_lmo_and_says_what_is_missing():
    X = Corners(4)
    assert not X.has_project and not X.contains_origin
    # its projection comes from the LMO (Corners is the l1 ball)
    np.testing.assert_allclose(X.project(np.array([2.0, 0.5, 0.0, -0.5])), [1.0, 0.0, 0.0, 0.0], atol=1e-6)
    with pytest.raises(DomainError, match=r"Corners has no cvxpy_constraints\(\)"):
        X.cvxpy_constraints(cp.Variable(4))
    with pytest.raises(DomainError, match=r"contains\(point, tol\)"):
        X.contains(np.zeros(4))
    start = X.default_point()
    assert X.contains(start) and np.abs(start).sum() == 1.0  # an LMO point
    B = torch.tensor([[1.0, 2.0, 0.0, -1.0], [0.5, 0.0, 1.0, 1.0]], dtype=torch.float64)
    problem = fc.CompositeProblem(cp.max(fc.inner_value(2)), lambda x, batch: torch.sin(B @ x) - 0.3, X)
    res = fc.psg(problem, iters=2, progress=False)
    assert np.abs(res.x.numpy()).sum() <= 1 + 1e-9
    # in a product, each block projects its own way: Corners by its LMO, the simplex exactly
    P = fc.Product(Corners(2), fc.Simplex(2))
    assert not P.has_project
    np.testing.assert_array_equal(P.lmo(np.array([1.0, -2.0, 3.0, 1.0])), [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(P.project(np.array([0.0, 3.0, 2.0, 0.0])), [0.0, 1.0, 1.0, 0.0], atol=1e-6)
    with pytest.raises(DomainError, match="Corners has neither contains"):
        P.contains(np.zeros(4))
    assert P.contains(P.default_point())


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: fc.CappedSimplex(5, -1.0), "total"),
        (lambda: fc.CappedSimplex(5, 3.0, cap=0.5), "total=3.0 exceeds"),
        (lambda: fc.CappedSimplex(5, 1.0, cap=-0.1), "cap"),
        (lambda: fc.CappedSimplex(5, 1.0, equality="yes"), "equality"),
        (lambda: fc.CappedSimplex((0, 3), 1.0), "shape"),
        (lambda: fc.Hypersimplex(5, 6), "k must be an integer in \\[0, 5\\]"),
        (lambda: fc.Hypersimplex(5, 1.5), "k must be an integer"),
        (lambda: fc.KSparsePolytope(5, 6), "k must be an integer in \\[1, 5\\]"),
        (lambda: fc.KSparsePolytope(5, 0), "k must be"),
        (lambda: fc.KSparsePolytope(5, 2, radius=-1.0), "radius"),
        (lambda: fc.KNormBall(5, 7), "k must be"),
        (lambda: fc.KNormBall(5, 2, radius=float("nan")), "radius"),
        (lambda: fc.LpBall(5, 1.0), "p must be in \\(1, inf\\]"),
        (lambda: fc.LpBall(5, 0.5), "p must be"),
        (lambda: fc.LpBall(5, float("nan")), "p must be"),
        (lambda: fc.LpBall(5, "two"), "p must be a number"),
        (lambda: fc.LpBall(5, 2.0, radius=-2.0), "radius"),
        (lambda: fc.Spectraplex((2, 3)), "n must be"),
        (lambda: fc.Spectraplex(3, trace=-1.0), "trace"),
        (lambda: fc.UnitSpectrahedron(0), "n must have positive sizes"),
        (lambda: fc.Birkhoff((3, 4)), "n must be"),
        (lambda: fc.Permutahedron(2.0), "w must be an array"),
        (lambda: fc.Permutahedron([1.0, np.inf]), "w must be finite"),
        (lambda: fc.Permutahedron(["a", "b"]), "w must be an array of numbers"),
        (lambda: fc.Product(), "at least one block"),
        (lambda: fc.Product(fc.Simplex(2), np.ones(3)), "block 1 .*fc.Set"),
    ],
)
def test_bad_inputs_raise_domain_errors_naming_the_argument(make, match):
    with pytest.raises(DomainError, match=match):
        make()


def test_solvers_run_on_a_product_domain_by_both_glmo_routes_and_by_projection():
    X = fc.Product(fc.CappedSimplex(3, 1.0, cap=0.5), fc.KNormBall(4, 2))
    B = torch.tensor(np.random.default_rng(17).standard_normal((2, 7)))

    def inner(x, batch):
        return torch.sin(B @ x) - 0.3

    problem = fc.CompositeProblem(cp.max(fc.inner_value(2)), inner, X)
    start = problem.objective(problem.x0)
    res = fc.hmsfw(problem, iters=15, progress=False)
    assert res.info["glmo_route"] == "colgen"  # priced by the product's LMO
    assert X.contains(np.asarray(res.x), tol=1e-7) and problem.objective(res.x) < start - 0.5
    # an outer function reading x goes through the product's cvxpy_constraints
    reads_x = fc.CompositeProblem(cp.norm(fc.inner_value(2), 2) + 0.1 * cp.norm(X.variable, 1), inner, X)
    assert fc.hmsfw(reads_x, iters=5, progress=False).info["glmo_route"] == "conic"
    projected = fc.psg(problem, iters=10, progress=False)
    assert X.contains(np.asarray(projected.x), tol=1e-7) and problem.objective(projected.x) < start


@pytest.mark.parametrize("p", [1.0001, 1.01, 1.5, 2.0 + 1e-6, 3.0, 7.0, 100.0])
def test_lp_projection_meets_its_optimality_conditions_on_hard_scales(p):
    # Independent of the code: y = P(v) on the ball of radius r iff ||y||_p <= r and <v - y, y> is the support
    # function of the ball at v - y, r ||v - y||_q (Hoelder); tiny balls and huge p once overflowed the search.
    q = p / (p - 1.0)
    rng = np.random.default_rng(int(p * 1000))
    for n, scale, radius in itertools.product((2, 7, 400), (1e-3, 1.0, 1e3), (1e-6, 0.7)):
        v = scale * rng.standard_normal(n)
        v[0] = 0.0
        ball = fc.LpBall(n, p, radius)
        y = ball.project(v)
        g = v - y
        assert np.linalg.norm(y, p) <= radius * (1 + 1e-9) and np.isfinite(y).all()
        support = radius * np.linalg.norm(g / max(np.abs(g).max(), 1e-300), q) * max(np.abs(g).max(), 1e-300)
        assert g @ y >= support - 1e-9 * max(1.0, np.linalg.norm(v)) * radius


@pytest.mark.parametrize("p", [1.01, 1.5, 3.0, 7.0])
def test_lp_projection_matches_cvxpy(p):
    rng = np.random.default_rng(3)
    for n in (1, 5, 12):
        v = 2.0 * rng.standard_normal(n)
        z = cp.Variable(n)
        cp.Problem(cp.Minimize(cp.sum_squares(z - v)), [cp.pnorm(z, p, approx=False) <= 0.7]).solve(solver="CLARABEL")
        assert np.allclose(fc.LpBall(n, p, 0.7).project(v), z.value, atol=1e-4)


@pytest.mark.parametrize("p", [1.0001, 1.3333333, 1.5, 3.0])
def test_lp_ball_constraints_are_dcp_and_exact_for_any_p(p):
    # CVXPY rounds p to a fraction of denominator <= 1024 in its cone form: 1.0001 became 1 and was nonconvex.
    ball = fc.LpBall(5, p, 0.7)
    (constraint,) = ball.cvxpy_constraints(ball.variable)
    assert constraint.is_dcp() and constraint.is_dpp()
    v = np.array([2.0, -1.0, 0.5, 0.0, 3.0])
    z = cp.Variable(5)
    cp.Problem(cp.Minimize(cp.sum_squares(z - v)), ball.cvxpy_constraints(z)).solve(solver="CLARABEL")
    assert np.allclose(z.value, ball.project(v), atol=1e-5)


def test_an_outer_function_reading_x_runs_on_an_lp_ball_with_p_near_one():
    ball = fc.LpBall(5, 1.0001)
    A = torch.linspace(-1.0, 1.0, 10, dtype=torch.float64).reshape(2, 5)
    outer = cp.max(fc.inner_value(2)) + 0.1 * cp.norm(ball.variable, 2)
    result = fc.hmsfw(fc.CompositeProblem(outer, lambda x, b: torch.sin(A @ x), ball), iters=2, progress=False)
    assert ball.contains(result.x.numpy(), tol=1e-6)


def test_a_dense_start_too_large_for_memory_names_its_size(monkeypatch):
    from fullcomp.sets import base

    monkeypatch.setattr(base, "physical_memory", lambda: 16 * 2**30)
    said = r"Spectraplex\(n=100000.* needs 74\.5 GiB .* shape \(100000, 100000\).*16\.0 GiB"
    with pytest.raises(DomainError, match=said):
        fc.CompositeProblem(
            cp.max(fc.inner_value(2)), lambda X, b: torch.stack([X[0, 0], X[1, 1]]), fc.Spectraplex(10**5)
        )
    with pytest.raises(DomainError, match=r"LpBall.* needs 16\.0 GiB"):
        fc.LpBall(2**31, 3.0).default_point()


@pytest.mark.parametrize("equality", [True, False])
def test_the_spectraplex_start_is_the_projection_of_the_origin(equality):
    domain = fc.Spectraplex(5, 2.0, equality=equality)
    assert np.allclose(domain.default_point(), domain.project(np.zeros((5, 5))), atol=1e-12)
