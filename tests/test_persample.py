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
    return X, torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()


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
    plain = fc.CompositeProblem(outer=fc.cvar(fc.inner_value(40), 0.25), inner=lambda x, b: logistic(x, ps.data),
                                domain=fc.L2Ball(3, 2.0))
    assert plain.per_sample is None


def test_per_sample_problems_refuse_what_does_not_fit():
    X, y = data()
    ps = fc.PerSample(logistic, (X, y))
    with pytest.raises(ModelError, match=r"fc.inner_value\(40\)"):
        fc.CompositeProblem(outer=fc.cvar(fc.inner_value(39), 0.25), inner=ps, domain=fc.L2Ball(3, 2.0))
    with pytest.raises(ModelError, match="full_batch"):
        fc.CompositeProblem(outer=fc.cvar(fc.inner_value(40), 0.25), inner=ps, domain=fc.L2Ball(3, 2.0),
                            full_batch=(X, y))
    with pytest.raises(ModelError, match="row indices"):
        fc.CompositeProblem(outer=fc.cvar(fc.inner_value(40), 0.25), inner=ps, domain=fc.L2Ball(3, 2.0),
                            sampler=lambda g: torch.rand(4, generator=g))
    with pytest.raises(ModelError, match="outside 0..39"):
        fc.CompositeProblem(outer=fc.cvar(fc.inner_value(40), 0.25), inner=ps, domain=fc.L2Ball(3, 2.0),
                            sampler=lambda g: torch.arange(38, 42))


def test_construction_probes_one_batch_of_rows_only():
    seen = []

    def loss(x, rows):
        seen.append(rows[0].shape[0])
        return logistic(x, rows)

    X, y = data(n=5000)
    ps = fc.PerSample(loss, (X, y), batch_size=16)
    fc.CompositeProblem(outer=fc.cvar(fc.inner_value(5000), 0.1), inner=ps, domain=fc.L2Ball(3, 2.0))
    assert seen and max(seen) == 16
