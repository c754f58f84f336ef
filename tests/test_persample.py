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
