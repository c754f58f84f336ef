"""Results in a CVXPY user's words: the value at the returned point, and reports that do not assume HMSFW."""

from __future__ import annotations

import pytest
from contract_cases import composite

import fullcomp as fc
from fullcomp import report


@pytest.mark.parametrize("method", ["hmsfw", "psg", "fw"])
def test_value_is_the_true_objective_at_the_returned_point(method):
    problem = composite()
    options = {"step": "vanilla"} if method == "fw" else {}
    result = fc.solve(problem, method, iters=5, progress=False, **options)
    assert result.value == pytest.approx(problem.objective(result.x), rel=1e-12)


def test_value_is_none_where_the_objective_cannot_be_computed():
    problem = composite()
    problem.full_batch = None  # a stochastic map with no exact batch: only estimates
    assert fc.solve(problem, "psg", iters=3, progress=False).value is None


def test_report_lists_the_callbacks_metrics_and_not_a_methods_own_columns(tmp_path):
    result = fc.solve(composite(), "psg", iters=4, progress=False, callback=lambda it: {"test_loss": float(it.k)})
    assert result.info["metrics"] == ["test_loss"]
    result.save(tmp_path / "psg")
    (run,) = report.find_runs(tmp_path)
    assert run.metrics() == ["test_loss"]  # PSG's step and direction_norm are its own columns
    assert "test_loss" in report.table([run]) and "direction_norm" not in report.table([run])


@pytest.mark.parametrize(
    "method, options, measure",
    [("hmsfw-exact", {}, "gap_estimate"), ("prox-linear", {}, "move"), ("fw", {"step": "vanilla"}, "gap")],
)
def test_gap_tol_stops_every_method_that_has_a_measure(method, options, measure):
    result = fc.solve(composite(), method, iters=400, gap_tol=1e-2, progress=False, **options)
    assert result.status == "converged" and result.info["gap_measure"] == measure
    stopped = [r for r in result.history.rows if measure in r][-1]
    assert stopped[measure] <= 1e-2 and result.info["iterations"] < 400
    assert all(r[measure] > 1e-2 for r in result.history.rows[:-2] if measure in r)


def test_gap_tol_is_refused_where_there_is_no_measure():
    from contract_cases import dc

    with pytest.raises(fc.errors.OptionError, match="no gap or stationarity measure"):
        fc.solve(dc(), "sgd", eta=0.05, iters=3, gap_tol=1e-3, progress=False)
    with pytest.raises(fc.errors.OptionError, match="gap_tol must be a positive number"):
        fc.solve(composite(), "hmsfw", iters=3, gap_tol=-1.0, progress=False)
