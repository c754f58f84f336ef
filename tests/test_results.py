"""Results in a CVXPY user's words: the value at the returned point, and reports that do not assume HMSFW."""

from __future__ import annotations

import pytest
import torch
from contract_cases import composite

import fullcomp as fc
from fullcomp import report


@pytest.mark.parametrize("method", ["hmsfw", "psg", "fw"])
def test_value_is_the_true_objective_at_the_returned_point(method):
    problem = composite()
    options = {"corrective": "vanilla"} if method == "fw" else {}
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
    [("hmsfw-exact", {}, "gap_estimate"), ("prox-linear", {}, "move"), ("fw", {"corrective": "vanilla"}, "gap")],
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


# ---- the adversary's weights -------------------------------------------------------------------------------


def deterministic(outer_of):
    import cvxpy as cp
    import torch

    A = torch.randn(5, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    u = fc.inner_value(5)
    return fc.CompositeProblem(outer_of(u, cp), lambda x, _: torch.nn.functional.softplus(A @ x - 0.3), fc.Simplex(8))


def cvar_weights_by_cvxpy(value, alpha):
    """The dual of u == value in the Rockafellar-Uryasev program min_t t + sum(max(u - t, 0)) / (alpha n)."""
    import cvxpy as cp

    n = len(value)
    u, t = cp.Variable(n), cp.Variable()
    link = u == value
    cp.Problem(cp.Minimize(t + cp.sum(cp.pos(u - t)) / (alpha * n)), [link]).solve(solver="CLARABEL")
    return -link.dual_value


@pytest.mark.parametrize("method", ["hmsfw-exact", "psg", "prox-linear"])
def test_the_weights_of_a_cvar_are_cvxpys_dual_at_the_tracked_value(method):
    import numpy as np

    problem = deterministic(lambda u, cp: fc.cvar(u, 0.4))
    result = fc.solve(problem, method, iters=6, eval_every=2, progress=False)
    z = result.z.detach().cpu().numpy()
    np.testing.assert_allclose(result.weights, cvar_weights_by_cvxpy(z, 0.4), atol=1e-6)
    assert result.weights.sum() == pytest.approx(1.0) and (result.weights >= -1e-12).all()
    rows = [r for r in result.history.rows if "q[0]" in r]
    assert [r["k"] for r in rows] == [0, 2, 4, 6]  # where the run evaluates: the first row, every eval_every, last
    assert [rows[-1][f"q[{i}]"] for i in range(5)] == list(result.weights)


def test_the_weights_of_any_f_are_a_subgradient_matching_the_closed_form():
    import numpy as np
    from scipy.special import softmax

    # F(u) = log sum exp(u) has gradient softmax(u): no closed form is attached, so CVXPY's dual answers.
    problem = deterministic(lambda u, cp: cp.log_sum_exp(u))
    result = fc.solve(problem, "hmsfw-exact", iters=4, progress=False)
    # The exponential cone's duals are as accurate as the interior-point solver (about 1e-5 here).
    np.testing.assert_allclose(result.weights, softmax(result.z.numpy()), atol=1e-4)


def test_the_weights_are_saved_loaded_and_plotted(tmp_path):
    problem = deterministic(lambda u, cp: cp.max(u))
    result = fc.solve(problem, "hmsfw-exact", iters=4, progress=False)
    loaded = fc.Result.load(result.save(tmp_path / "run"))
    assert list(loaded.weights) == list(result.weights)
    (run,) = report.find_runs(tmp_path)
    assert run.metrics() == [] and report.weight_columns(run) == [f"q[{i}]" for i in range(5)]
    paths = report.plot([run], tmp_path)
    assert tmp_path / "weights.png" in paths and (tmp_path / "weights.png").stat().st_size > 0


def test_a_results_outputs_are_the_ones_its_method_declares():
    """Each method's result holds the outputs its readout declares (None where the run has none); a name it
    does not declare is refused by the readout and by the result, and the DC methods' other points are in
    ``points``."""
    from contract_cases import run

    expected = {
        "hmsfw": {"V", "z", "x_entries", "atoms", "x_start_weight"},
        "psg": {"V", "z"},
        "linasa-icg": {"w", "d"},
        "smag": {"x_phi", "y", "G"},  # no psi, so no x_psi and no z
        "sopa": {"y"},
        "fw": {"L"},
        "sdca": set(),
    }
    for method, outputs in expected.items():
        result = run(method, iters=2)
        assert {name for name, value in result.outputs.items() if value is not None} == outputs, method
        assert all(getattr(result, name) is value for name, value in result.outputs.items())
    sbcd = run("sbcd", iters=2)
    assert sbcd.points.keys() >= {"w", "v_phi", "v_psi"} and sbcd.outputs == {}
    with pytest.raises(AttributeError, match="no output 'V'.*points"):
        getattr(sbcd, "V")  # noqa: B009 - the attribute access is what is tested

    class Stray(fc.Readout):
        outputs = {"V": "a tracker"}

        def iterate(self, state):
            return state

        def returned(self, state):
            return {"anchor": state}

    with pytest.raises(TypeError, match="'anchor'.*points="):
        Stray().result(torch.zeros(2), fc.History([]), {})


def test_a_run_without_a_dense_iterate_saves_the_output_standing_in_for_it(tmp_path):
    kept = torch.arange(4, dtype=torch.float64)
    result = fc.Result(None, fc.History([{"k": 0}]), {"method": "hmsfw"}, stand_in="x_entries", x_entries=kept)
    loaded = fc.Result.load(result.save(tmp_path / "run"))
    assert sorted(p.name for p in (tmp_path / "run").glob("*.npy")) == ["x_entries.npy"]
    assert loaded.x is None and loaded.stand_in == "x_entries" and torch.equal(loaded.x_entries, kept)
