"""fc.PerSample: the declaration of one loss per sample, its rows and per-sample gradients."""

import pytest
import torch

import fullcomp as fc
from fullcomp.errors import ModelError, OracleError


def logistic(x, rows):
    X, y = rows
    return torch.nn.functional.softplus(-y * (X @ x))


def data(n=40, d=3):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    signal = X @ torch.linspace(1.0, -2.0, d, dtype=torch.float64) + torch.randn(n, generator=g, dtype=torch.float64)
    return X, torch.where(signal < 0, -1.0, 1.0).double()  # labels a linear model explains, with noise


def test_per_sample_gradients_match_the_closed_form():
    X, y = data()
    ps = fc.PerSample(logistic, (X, y), batch_size=7)
    x = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    idx = ps.draw(torch.Generator().manual_seed(1))
    assert len(set(idx.tolist())) == 7
    values, J = ps.gradients(x, idx)
    closed = (-y[idx] * torch.sigmoid(-y[idx] * (X[idx] @ x)))[:, None] * X[idx]
    torch.testing.assert_close(J, closed, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(values, logistic(x, (X[idx], y[idx])))
    torch.testing.assert_close(ps.all_values(x, chunk=9), logistic(x, (X, y)))


def test_bad_declarations_name_the_argument():
    X, y = data()
    with pytest.raises(ModelError, match="same number"):
        fc.PerSample(logistic, (X, y[:5]))
    with pytest.raises(ModelError, match="batch_size"):
        fc.PerSample(logistic, (X, y), batch_size=41)
    with pytest.raises(ModelError, match="loss must be"):
        fc.PerSample("loss", (X, y))
    ps = fc.PerSample(lambda x, rows: (rows[0] @ x).sum(), (X, y))
    with pytest.raises(OracleError, match="one loss per row"):
        ps.values(torch.zeros(3, dtype=torch.float64), torch.arange(4))


def robust(n=40, d=3, alpha=0.25, **kwargs):
    X, y = data(n, d)
    ps = fc.PerSample(logistic, (X, y), batch_size=kwargs.pop("batch_size", 8))
    u = fc.inner_value(n)
    return fc.CompositeProblem(outer=fc.cvar(u, alpha), inner=ps, domain=fc.L2Ball(d, 2.0), **kwargs), ps


def test_composite_problem_accepts_a_per_sample_declaration():
    problem, ps = robust()
    assert problem.per_sample is ps and problem.n == ps.n == 40 and problem.stochastic
    assert problem.dtype == torch.float64
    batch = problem.sample(torch.Generator().manual_seed(3))
    assert batch.shape == (8,) and not batch.dtype.is_floating_point
    x = torch.tensor([0.5, -0.2, 0.1], dtype=torch.float64)
    torch.testing.assert_close(problem.inner(x, batch), logistic(x, ps.rows(batch)))
    X, y = ps.data
    losses = logistic(x, (X, y)).numpy()
    top = sorted(losses, reverse=True)[:10]
    exact = sum(top) / 10  # CVaR_0.25 of 40 equally likely losses: the mean of the 10 largest
    assert abs(problem.objective(x.numpy()) - exact) < 1e-9
    plain = fc.CompositeProblem(
        outer=fc.cvar(fc.inner_value(40), 0.25), inner=lambda x, b: logistic(x, ps.data), domain=fc.L2Ball(3, 2.0)
    )
    assert plain.per_sample is None


def test_per_sample_problems_refuse_what_does_not_fit():
    X, y = data()
    ps = fc.PerSample(logistic, (X, y))
    with pytest.raises(ModelError, match=r"fc.inner_value\(40\)"):
        fc.CompositeProblem(outer=fc.cvar(fc.inner_value(39), 0.25), inner=ps, domain=fc.L2Ball(3, 2.0))
    with pytest.raises(ModelError, match="full_batch"):
        fc.CompositeProblem(
            outer=fc.cvar(fc.inner_value(40), 0.25), inner=ps, domain=fc.L2Ball(3, 2.0), full_batch=(X, y)
        )
    with pytest.raises(ModelError, match="row indices"):
        fc.CompositeProblem(
            outer=fc.cvar(fc.inner_value(40), 0.25),
            inner=ps,
            domain=fc.L2Ball(3, 2.0),
            sampler=lambda g: torch.rand(4, generator=g),
        )
    with pytest.raises(ModelError, match="outside 0..39"):
        fc.CompositeProblem(
            outer=fc.cvar(fc.inner_value(40), 0.25),
            inner=ps,
            domain=fc.L2Ball(3, 2.0),
            sampler=lambda g: torch.arange(38, 42),
        )


def test_construction_probes_one_batch_of_rows_only():
    seen = []

    def loss(x, rows):
        seen.append(rows[0].shape[0])
        return logistic(x, rows)

    X, y = data(n=5000)
    ps = fc.PerSample(loss, (X, y), batch_size=16)
    fc.CompositeProblem(outer=fc.cvar(fc.inner_value(5000), 0.1), inner=ps, domain=fc.L2Ball(3, 2.0))
    assert seen and max(seen) == 16


def test_exact_jacobian_is_every_row_in_chunks_and_matches_the_dense_map():
    from fullcomp.oracles.jacobian import InnerOracle
    from fullcomp.oracles.rows import RowsOracle
    from fullcomp.persample import ALL_ROWS

    problem, ps = robust(n=23)
    X, y = ps.data
    x = torch.tensor([0.4, -0.7, 1.1], dtype=torch.float64)
    values, J, index = RowsOracle(ps, (3,), torch.float64, chunk=5)(x, ALL_ROWS, 0)
    assert index is None and J.shape == (23, 3)
    closed = (-y * torch.sigmoid(-y * (X @ x)))[:, None] * X
    torch.testing.assert_close(J, closed, rtol=1e-12, atol=1e-14)
    dense_value, dense_J = InnerOracle(lambda x, batch: logistic(x, (X, y)), 23, (3,), "cpu", torch.float64)(x, None, 0)
    torch.testing.assert_close(values, dense_value, rtol=1e-14, atol=1e-15)  # a dot per row, or one matvec
    torch.testing.assert_close(J, dense_J, rtol=1e-14, atol=1e-15)
    batch = torch.tensor([4, 17, 0])
    values, J, index = RowsOracle(ps, (3,), torch.float64)(x, batch, 1)
    assert torch.equal(index, batch)
    torch.testing.assert_close(J, closed[batch], rtol=1e-12, atol=1e-14)


def model(problem, variant="polyak", tracker="polyak", seed=0):
    from fullcomp.oracles.tracked import TrackedModel

    g = torch.Generator().manual_seed(seed)
    return TrackedModel(problem, "cpu", torch.float64, g, variant=variant, tracker=tracker)


@pytest.mark.parametrize("variant", ["polyak", "taylor"])
def test_tracked_rows_change_only_at_the_drawn_rows(variant):
    problem, ps = robust(n=30, batch_size=4)
    X, y = ps.data
    m = model(problem, variant)
    y0 = torch.zeros(3, dtype=torch.float64)
    state = m.start(y0)
    torch.testing.assert_close(state.z, logistic(y0, (X, y)))  # the first sample is every row
    points = [torch.tensor([0.1 * k, -0.05 * k, 0.02 * k], dtype=torch.float64) for k in range(1, 5)]
    replay = torch.Generator().manual_seed(0)
    for k, point in enumerate(points):
        kept = (state.y.clone(), state.V.clone(), state.z.clone(), state.sample.clone())
        new = m.advance(state, point, 0.3, 0.6, k + 1)
        drawn = ps.draw(replay)  # the model draws from its generator: the same rows
        for before, field in zip(kept, (state.y, state.V, state.z, state.sample)):
            assert torch.equal(before, field)  # the step left its input state intact
        other = torch.ones(30, dtype=torch.bool)
        other[drawn] = False
        assert torch.equal(new.V[other], state.V[other])
        grads = (-y * torch.sigmoid(-y * (X @ point)))[:, None] * X
        torch.testing.assert_close(new.V[drawn], 0.7 * state.V[drawn] + 0.3 * grads[drawn], rtol=1e-13, atol=1e-15)
        losses = logistic(point, (X, y))
        base = state.z if variant == "polyak" else state.z + new.V @ (point - state.y)
        assert torch.equal(new.z[other], base[other])
        torch.testing.assert_close(new.z[drawn], 0.4 * base[drawn] + 0.6 * losses[drawn], rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(new.sample[drawn], losses[drawn])
        assert torch.equal(new.sample[other], state.sample[other])
        state = new


def test_storm_on_rows_and_the_refused_tracker():
    from fullcomp.errors import OptionError

    problem, ps = robust(n=30, batch_size=5)
    X, y = ps.data
    m = model(problem, tracker="storm")
    state = m.start(torch.zeros(3, dtype=torch.float64))
    point = torch.tensor([0.2, 0.1, -0.3], dtype=torch.float64)
    new = m.advance(state, point, 0.25, 1.0, 1)
    drawn = ps.draw(torch.Generator().manual_seed(0))

    def grads(x):
        return ((-y * torch.sigmoid(-y * (X @ x)))[:, None] * X)[drawn]

    expected = grads(point) + 0.75 * (state.V[drawn] - grads(state.y))
    torch.testing.assert_close(new.V[drawn], expected, rtol=1e-13, atol=1e-15)
    with pytest.raises(OptionError, match="tracker='hessian'"):
        model(problem, tracker="hessian")
    with pytest.raises(ModelError, match="fc.PerSample.*methods for it: hmsfw"):
        fc.solve(problem, "fw", iters=2)
    assert "fw" not in [m.name for m in fc.methods(problem)]


@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("hmsfw", {}),
        ("hmsfw-i", {"glmo": "colgen"}),
        ("hmsfw-exact", {}),
        ("scfw", {}),
        ("psg", {}),
        ("prox-linear", {}),
    ],
)
def test_methods_on_rows_equal_the_methods_on_the_dense_map(method, options):
    # Every update draws all n rows (batch_size = n), so the index-based trackers change every row as the
    # dense ones do, whatever order the rows come in: the runs agree to rounding (a dot per row or a matvec).
    n = 20
    problem, ps = robust(n=n, batch_size=n)
    X, y = ps.data
    dense = fc.CompositeProblem(
        outer=fc.cvar(fc.inner_value(n), 0.25),
        inner=lambda x, batch: logistic(x, (X, y)),
        domain=fc.L2Ball(3, 2.0),
        sampler=lambda g: torch.randperm(n, generator=g),
        full_batch="all",
    )
    runs = [fc.solve(p, method, iters=6, seed=3, progress=False, **options) for p in (problem, dense)]
    rows, dense_rows = (r.history.rows for r in runs)
    assert len(rows) == len(dense_rows) and runs[0].info.get("glmo_route") == runs[1].info.get("glmo_route")
    for a, b in zip(rows, dense_rows):
        assert a["objective_estimate"] == pytest.approx(b["objective_estimate"], rel=1e-10, abs=1e-12)
    torch.testing.assert_close(torch.as_tensor(runs[0].x), torch.as_tensor(runs[1].x), rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(runs[0].V, runs[1].V, rtol=1e-8, atol=1e-10)
    assert float(torch.linalg.vector_norm(torch.as_tensor(runs[0].x))) > 0.5  # the runs moved
    assert runs[0].history.rows[-1]["objective"] == pytest.approx(problem.objective(runs[0].x), rel=1e-12)


def test_draws_are_uniform_subsets_of_distinct_rows():
    ps = fc.PerSample(logistic, data(n=12), batch_size=3)  # 4 b <= n: the stream of draws, not a permutation
    g = torch.Generator().manual_seed(5)
    counts = torch.zeros(12)
    for _ in range(4000):
        index = ps.draw(g)
        assert index.shape == (3,) and len(set(index.tolist())) == 3
        counts[index] += 1
    # Each row is drawn with probability 1/4: 1000 expected, standard deviation 27.
    assert float((counts - 1000).abs().max()) < 6 * 27.4


BIG = r"""
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import cvxpy as cp
import torch
import fullcomp as fc

torch.set_num_threads(1)
n, d = 1_000_000, 21
g = torch.Generator().manual_seed(0)
X = torch.randn(n, d, generator=g, dtype=torch.float64)
X[:, -1] = 1.0  # the intercept's column
y = torch.where(X @ torch.randn(d, generator=g, dtype=torch.float64) < 0, -1.0, 1.0).double()
del g


def loss(x, rows):
    A, b = rows
    return torch.nn.functional.softplus(-b * (A @ x))


def jacobian(x, rows):
    A, b = rows
    return (-b * torch.sigmoid(-b * (A @ x)))[:, None] * A


ps = fc.PerSample(loss, (X, y), batch_size=256, jacobian=jacobian)
problem = fc.CompositeProblem(outer=cp.max(fc.inner_value(n)), inner=ps, domain=fc.L2Ball(d, 1.0))
result = fc.solve(problem, "psg", iters=3, seed=0, progress=False, eval_every=3)
assert result.V.shape == (n, d) and result.z.shape == (n,)
assert len(result.history.rows) == 4 and torch.isfinite(torch.as_tensor(result.x)).all()
peak = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmPeak")]
print("VmPeak_kB", peak[0] if peak else "unknown")
"""


def test_a_million_rows_take_updates_without_an_n_by_n_array(tmp_path):
    # 1,000,000 rows x 21 features in a subprocess limited to 4 GiB of address space: the data are 168 MB
    # and each n x d tracker as much, while one n x n array would be 8 TB. Importing torch and fullcomp
    # reserves about 0.9 GiB of address space and the run peaks at 1.7 GiB (VmPeak), so the limit leaves
    # 2.3 GiB of margin. The GLMO routes of today solve a conic master over all n values (1.5 s a
    # solve at n = 10,000 for a CVaR), so the updates are projected subgradient steps on the tracked rows
    # with F = max, whose subgradient is closed-form.
    import subprocess
    import sys

    script = tmp_path / "million.py"
    script.write_text(BIG)
    done = subprocess.run([sys.executable, str(script), str(4 * 2**30)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "VmPeak_kB" in done.stdout


def test_a_wrong_closed_form_jacobian_is_caught_at_construction():
    X, y = data()

    def right(x, rows):
        A, b = rows
        return (-b * torch.sigmoid(-b * (A @ x)))[:, None] * A

    def wrong(x, rows):
        return 2 * right(x, rows)

    u = fc.inner_value(40)
    problem = fc.CompositeProblem(fc.cvar(u, 0.25), fc.PerSample(logistic, (X, y), jacobian=right), fc.L2Ball(3, 2.0))
    assert problem.per_sample.jacobian is right
    with pytest.raises(ModelError, match="jacobian= disagrees with central differences"):
        fc.CompositeProblem(fc.cvar(u, 0.25), fc.PerSample(logistic, (X, y), jacobian=wrong), fc.L2Ball(3, 2.0))
    fc.CompositeProblem(
        fc.cvar(u, 0.25), fc.PerSample(logistic, (X, y), jacobian=wrong), fc.L2Ball(3, 2.0), check_gradient=False
    )


def test_a_resumed_run_on_rows_continues_as_the_uninterrupted_one(tmp_path):
    problem, _ = robust(n=30, batch_size=5)
    options = {"seed": 1, "progress": False, "variant": "polyak"}
    full = fc.hmsfw(problem, iters=6, **options)
    fc.hmsfw(problem, iters=3, checkpoint=str(tmp_path / "run.pt"), **options)
    resumed = fc.hmsfw(problem, iters=6, checkpoint=str(tmp_path / "run.pt"), **options)
    assert torch.equal(torch.as_tensor(full.x), torch.as_tensor(resumed.x))
    assert torch.equal(full.z, resumed.z) and torch.equal(full.V, resumed.V)
