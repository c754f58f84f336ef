"""Results in a CVXPY user's words: the value at the returned point, and reports that do not assume HMSFW."""

from __future__ import annotations

import io
import os
import threading
import zipfile

import numpy as np
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


@pytest.fixture(scope="module")
def saved_run():
    """A short run's result, saved afresh into each test's folder by ``save_into``."""
    return fc.hmsfw(composite(), iters=2, progress=False)


def _crafted(folder, name, text):
    (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    "text, said",
    [
        ("[1]", "JSON list, not an object"),
        ('"a string"', "JSON str, not an object"),
        ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
        ('{"a": ' + "[" * 40 + "]" * 40 + ', "status": "iterations", "final": {}}', "nests deeper than 32"),
        ('{"status": 3, "final": {}}', "'status' is not a string"),
        ('{"status": "iterations", "final": [1]}', "'final' is not an object"),
        ('{"status": "iterations", "final": {}, "weights": ["a"]}', "'weights' is not a list of finite"),
        ("{not json", "not readable JSON"),
    ],
)
def test_a_crafted_summary_is_refused_by_name(saved_run, tmp_path, text, said):
    folder = _crafted(saved_run.save(tmp_path / "run"), "summary.json", text)
    with pytest.raises(fc.errors.DataError, match=rf"summary\.json.*{said}"):
        fc.Result.load(folder)


def _npy_header(shape, dtype="<f8"):
    """The bytes of a .npy header claiming an array of ``shape``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_an_array_header_claiming_more_than_the_file_holds_is_refused_before_allocating(saved_run, tmp_path):
    folder = saved_run.save(tmp_path / "run")
    (folder / "x.npy").write_bytes(_npy_header((10**11,)) + b"\0" * 80)
    with pytest.raises(fc.errors.DataError, match=r"x\.npy claims 100000000000 entries .* holds 80 bytes"):
        fc.Result.load(folder)
    (folder / "x.npy").write_bytes(_npy_header((3,), "|O") + b"\0" * 24)
    with pytest.raises(fc.errors.DataError, match=r"x\.npy holds object entries"):
        fc.Result.load(folder)


def test_an_archive_member_claiming_more_than_it_holds_is_refused(tmp_path):
    result = fc.Result({"w": torch.zeros(3, dtype=torch.float64)}, fc.History([{"k": 0}]), {"method": "m"})
    folder = result.save(tmp_path / "run")
    with zipfile.ZipFile(folder / "x.npz", "w") as archive:
        archive.writestr("w.npy", _npy_header((10**11,)) + b"\0" * 24)
    with pytest.raises(fc.errors.DataError, match=r"x\.npz\[w\.npy\] claims 100000000000 entries"):
        fc.Result.load(folder)
    assert torch.equal(fc.Result.load(result.save(tmp_path / "again")).x["w"], torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize("name", ["history.csv", "summary.json", "x.npy"])
def test_a_fifo_in_a_saved_run_is_refused_without_waiting_on_it(saved_run, tmp_path, name):
    folder = saved_run.save(tmp_path / "run")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    raised = []

    def load():
        try:
            fc.Result.load(folder)
        except Exception as exc:  # noqa: BLE001  (checked below, in the test's thread)
            raised.append(exc)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    loader.join(20)
    if loader.is_alive():  # it waits on the FIFO for a writer: be that writer, so the thread ends
        with open(folder / name, "wb"):
            pass
        loader.join(20)
        pytest.fail(f"Result.load waited on the FIFO {name}")
    assert isinstance(raised[0], fc.errors.DataError)
    assert f"{name} is a FIFO, not a regular file" in str(raised[0])


@pytest.mark.parametrize(
    "text, said",
    [
        ("objective\n0.5\n", "no 'k' column"),
        ("k,objective\n0,nan\n", "line 2 has objective = nan, not a finite number"),
        ("k,objective_estimate\n0,1.0\n1,inf\n", "line 3 has objective_estimate = inf"),
        ("k,objective\n0,1.0\n0,1.0\n", "line 3 has k = 0, not an iteration after 0"),
        ("k,objective\nzero,1.0\n", "k = 'zero'"),
        ("k,objective\n0,1.0,7\n", "not a readable CSV history"),
    ],
)
def test_a_history_without_k_or_with_a_non_finite_objective_is_refused(saved_run, tmp_path, text, said):
    folder = _crafted(saved_run.save(tmp_path / "run"), "history.csv", text)
    with pytest.raises(fc.errors.DataError, match=rf"history\.csv.*{said}"):
        fc.Result.load(folder)


def test_a_saved_run_loads_back_whole(saved_run, tmp_path):
    loaded = fc.Result.load(saved_run.save(tmp_path / "run"))
    assert torch.equal(loaded.x, saved_run.x) and loaded.value == saved_run.value
    assert [row["k"] for row in loaded.history] == [row["k"] for row in saved_run.history]
