"""Guarantees every registered method keeps, each checked for all of them by one parametrized test."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from contract_cases import CASES, composite, dc, kill_at_update, minimax, run

import fullcomp as fc
from fullcomp.algorithms.method import REGISTRY
from fullcomp.errors import CallbackError, CheckpointError, ModelError, OptionError, OracleError

METHODS = sorted(REGISTRY)
HERE = Path(__file__).parent


def same_rows(a, b) -> None:
    """Histories equal in every column but the optimizer time."""
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert {k: v for k, v in ra.items() if k != "time"} == {k: v for k, v in rb.items() if k != "time"}


def flat(x) -> torch.Tensor:
    if isinstance(x, dict):
        return torch.cat([v.reshape(-1) for v in x.values()])
    return x.reshape(-1)


def test_every_registered_method_has_a_case():
    assert set(CASES) == set(REGISTRY)
    for m in fc.methods():
        assert m.name in fc.describe() and m.summary


@pytest.mark.parametrize("method", METHODS)
def test_bad_hyperparameters_name_the_option(method):
    spec = fc.algorithms.method.get(method)
    _, required = CASES[method]
    checked = 0
    for param in spec.options:
        for bad in param.bad_values():
            with pytest.raises(OptionError, match=param.name):
                run(method, iters=2, **{param.name: bad})
            checked += 1
        if param.required:
            missing = {k: v for k, v in required.items() if k != param.name}
            with pytest.raises(OptionError, match=f"needs {param.name}"):
                fc.solve(CASES[method][0](), method, iters=2, progress=False, **missing)
    assert checked > 0 or not spec.options
    with pytest.raises(OptionError, match="did you mean"):
        run(method, iters=2, **{spec.options[0].name + "x": 1})


BAD_SHARED = [
    {"iters": 0},
    {"iters": 1.5},
    {"seconds": "5"},
    {"seconds": -1.0},
    {"seed": "x"},
    {"seed": -1},
    {"seed": 1.0},
    {"device": "nonsense"},
    {"device": "cuda:7"},
    {"dtype": torch.int64},
    {"dtype": "float32"},
    {"eval_every": 0},
    {"progress": "yes"},
    {"callback": 3},
    {"checkpoint": 3},
]


@pytest.mark.parametrize("method", METHODS)
def test_bad_shared_options_are_option_errors(method):
    for bad in BAD_SHARED:
        name = next(iter(bad))
        options = {"iters": 2, **bad}
        with pytest.raises(OptionError, match=name):
            run(method, **options)
    with pytest.raises(OptionError, match="budget"):
        run(method)


@pytest.mark.parametrize("method", METHODS)
def test_seed_of_any_integer_type_or_a_generator(method):
    base = run(method, iters=4, seed=3)
    assert base.info["seed"] == 3
    same_rows(run(method, iters=4, seed=np.int64(3)).history, base.history)
    same_rows(run(method, iters=4, seed=torch.Generator().manual_seed(3)).history, base.history)
    fresh = run(method, iters=2, seed=None)
    assert isinstance(fresh.info["seed"], int)


@pytest.mark.parametrize("method", METHODS)
def test_one_result_schema_and_round_trip(method, tmp_path):
    result = run(method, iters=5, seed=1)
    assert result.status == "iterations" and result.info["method"] == method
    rows = result.history.rows
    assert len(rows) == 6
    for row in rows:
        assert {"k", "time", "objective_estimate"} <= set(row)
    assert [r["k"] for r in rows] == list(range(6))
    # full_batch is given, so the true objective is in the first and the last rows.
    assert math.isfinite(rows[0]["objective"]) and math.isfinite(rows[-1]["objective"])
    result.save(tmp_path / "run")
    loaded = fc.Result.load(tmp_path / "run")
    assert loaded.status == "iterations" and loaded.info["method"] == method
    assert loaded.history.columns == result.history.columns
    for a, b in zip(loaded.history, result.history):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-12, nan_ok=True)
    assert torch.equal(flat(loaded.x).to(flat(result.x).dtype), flat(result.x).detach().cpu())


@pytest.mark.parametrize("method", METHODS)
def test_interrupted_run_resumes_exactly(method, tmp_path):
    full = run(method, iters=12, seed=5)
    ckpt = fc.Checkpoint(tmp_path / "run.ckpt", every=4)

    def interrupt(it):
        if it.k == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(method, iters=12, seed=5, checkpoint=ckpt, callback=interrupt)
    resumed = run(method, iters=12, seed=5, checkpoint=ckpt)
    assert resumed.info["resumed_from"] == 7
    same_rows(resumed.history, full.history)
    assert torch.equal(flat(resumed.x), flat(full.x))


@pytest.mark.parametrize("method", METHODS)
def test_checkpoint_of_another_run_is_refused(method, tmp_path):
    path = tmp_path / "run.ckpt"
    factory, _ = CASES[method]
    run(method, iters=4, seed=0, checkpoint=path)
    with pytest.raises(CheckpointError, match="seed"):
        run(method, iters=8, seed=1, checkpoint=path)
    with pytest.raises(CheckpointError, match="problem"):
        run(
            method,
            iters=8,
            seed=0,
            checkpoint=path,
            problem=factory(shift=2.0) if factory is not composite else composite(scale=2.0),
        )
    other = "psg" if CASES[method][0] is not composite else "smag"
    with pytest.raises(CheckpointError, match="method"):
        run(other, iters=8, checkpoint=path) if other == "psg" else fc.solve(
            minimax(), "smag", gamma=0.5, eta0=0.1, eta1=0.1, iters=8, progress=False, checkpoint=path
        )
    restarted = run(method, iters=3, seed=1, checkpoint=fc.Checkpoint(path, on_mismatch="restart"))
    assert "resumed_from" not in restarted.info and restarted.info["seed"] == 1


@pytest.mark.parametrize("method", ["hmsfw", "smag", "sgd"])
def test_corrupt_foreign_and_malicious_checkpoints(method, tmp_path):
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"\x00not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable fullcomp checkpoint"):
        run(method, iters=2, checkpoint=corrupt)
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    with pytest.raises(CheckpointError, match="not a fullcomp checkpoint"):
        run(method, iters=2, checkpoint=foreign)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    malicious = tmp_path / "malicious.ckpt"
    torch.save({"format": "fullcomp-checkpoint-1", "run": Exploit()}, malicious)
    with pytest.raises(CheckpointError):
        run(method, iters=2, checkpoint=malicious)
    assert not marker.exists()


@pytest.mark.parametrize("method", ["hmsfw", "smag"])
def test_run_killed_with_sigkill_resumes_bit_identically(method, tmp_path):
    path, marker = tmp_path / "run.ckpt", tmp_path / "started"
    call = f"from contract_cases import run; run({method!r}, iters=16, seed=2, "
    kill_at_update(call + "checkpoint=checkpoint, callback=callback)", marker, path)
    resumed = run(method, iters=16, seed=2, checkpoint=path)
    assert resumed.info["resumed_from"] == 9
    full = run(method, iters=16, seed=2)
    same_rows(resumed.history, full.history)
    assert torch.equal(flat(resumed.x), flat(full.x))


@pytest.mark.parametrize("method", METHODS)
def test_failing_oracle_keeps_every_finite_row(method):
    factory, _ = CASES[method]
    with pytest.raises(OracleError) as caught:
        run(method, iters=40, seed=0, problem=factory(nan_after=12))
    result = caught.value.result
    assert result is not None and result.status == "error" and "error" in result.info
    # Every committed iteration kept its row; the rows are finite and in order.
    ks = [r["k"] for r in result.history]
    assert len(ks) >= 2 and ks[: result.info["iterations"]] == list(range(result.info["iterations"]))
    assert all(math.isfinite(r["objective_estimate"]) for r in result.history)


@pytest.mark.parametrize("method", METHODS)
def test_a_step_keeps_its_state_and_the_iterate_stays_in_the_domain(method):
    # The checks fullcomp.testing.check_method runs on a user's method, held to the built-ins.
    from fullcomp.testing import _check_inside, _check_not_in_place, _dense

    factory, required = CASES[method]
    _check_not_in_place(method, factory, required)
    problem, points = factory(), []
    run(method, iters=5, seed=3, problem=problem, callback=lambda it: points.append((it.k, _dense(problem, it.x))))
    _check_inside(method, problem, points)


@pytest.mark.parametrize("method", METHODS)
def test_failing_callback_keeps_the_run(method):
    def callback(it):
        if it.k == 3:
            raise ValueError("boom")

    with pytest.raises(CallbackError, match="boom") as caught:
        run(method, iters=10, callback=callback)
    assert isinstance(caught.value.__cause__, ValueError)
    result = caught.value.result
    assert result.status == "error" and [r["k"] for r in result.history] == [0, 1, 2, 3]


@pytest.mark.parametrize("method", METHODS)
def test_float32_data_run_in_float32_and_mixed_dtypes_name_the_fix(method):
    factory, _ = CASES[method]
    result = run(method, iters=3, problem=factory(dtype=torch.float32))
    assert flat(result.x).dtype == torch.float32 and result.info["dtype"] == "torch.float32"
    assert flat(run(method, iters=3).x).dtype == torch.float64  # float64 data stay float64
    if factory is composite:
        # A DMax run casts x0 and its batches to the run's dtype; a composite map closes over its data.
        with pytest.raises(OptionError, match="dtype"):
            run(method, iters=3, problem=factory(dtype=torch.float32), dtype=torch.float64)


@pytest.mark.parametrize("method", METHODS)
def test_wrong_problem_kind_is_a_model_error(method):
    factory, required = CASES[method]
    other = dc() if factory is composite else composite()
    with pytest.raises(ModelError, match="needs a fc."):
        fc.solve(other, method, iters=2, progress=False, **required)


@pytest.fixture(scope="module")
def cvxpy_optimum():
    """The composite case's deterministic optimum, from CVXPY: phi(x) = max_i softplus(a_i x - 0.5), |x|_1 <= 2."""
    import cvxpy as cp

    A = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64).numpy()
    x = cp.Variable(10)
    problem = cp.Problem(cp.Minimize(cp.max(cp.logistic(A @ x - 0.5))), [cp.norm1(x) <= 2])
    problem.solve(solver="CLARABEL")
    return torch.as_tensor(x.value), problem.value


COMPOSITE = [m for m in METHODS if CASES[m][0] is composite]
FRANK_WOLFE = [m for m in COMPOSITE if REGISTRY[m].setup is REGISTRY["hmsfw"].setup]


@pytest.mark.parametrize("method", COMPOSITE)
def test_warm_start_at_the_optimum_stays_there(method, cvxpy_optimum):
    x_star, phi_star = cvxpy_optimum
    problem = composite()
    assert problem.objective(x_star) == pytest.approx(phi_star, abs=1e-6)
    # The first step is a line search on one batch over halvings down to 2^-10 of one diameter, so it can raise
    # phi by no more than that batch's noise allows; later Frank-Wolfe steps are shorter still.
    one = run(method, iters=1, x0=x_star)
    assert problem.objective(one.x) <= phi_star + 1e-2 * phi_star
    if method in FRANK_WOLFE:
        assert problem.objective(one.x) <= phi_star + 1e-3 * phi_star
        assert problem.objective(run(method, iters=30, x0=x_star).x) <= phi_star + 5e-3 * phi_star
    # The same start given by the problem itself is a warm start too.
    same = run(method, iters=1, problem=problem.with_start(x_star))
    assert torch.equal(flat(same.x), flat(one.x))


def test_cold_start_keeps_the_papers_first_step():
    result = run("hmsfw", iters=3)
    assert result.history[0]["gamma"] == 1.0


def test_the_method_tables_in_the_docs_are_current():
    from fullcomp.algorithms.method import markdown

    text = (HERE.parent / "docs" / "algorithm.md").read_text()
    begin, end = "<!-- methods:begin -->\n", "\n<!-- methods:end -->"
    # Refresh with: python -c "from fullcomp.algorithms.method import write_tables; write_tables('docs/algorithm.md')"
    assert text[text.index(begin) + len(begin) : text.index(end)] == markdown()
