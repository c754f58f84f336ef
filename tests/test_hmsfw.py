"""HMSFW against independent answers: CVXPY on the deterministic problem."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.errors import FullcompError, OptionError, OracleError

N, D = 4, 10
RNG = np.random.default_rng(1)
A = RNG.standard_normal((N, D))
B = RNG.standard_normal(N)
AT, BT = torch.tensor(A), torch.tensor(B)


def noise(scale: float):
    return lambda g: scale * torch.randn(N, generator=g, dtype=torch.float64)


def softplus_problem(outer_of, domain, scale=0.3, additive=True):
    """f_i(x) = softplus(a_i^T x - b_i) (+ noise): convex f, so a nondecreasing F makes phi convex."""
    u = fc.inner_value(N)
    if additive:
        inner = lambda x, e: torch.nn.functional.softplus(AT @ x - BT) + e  # noqa: E731
    else:  # noise inside the nonlinearity: a biased plug-in, as in real minibatch losses
        inner = lambda x, e: torch.nn.functional.softplus(AT @ x - BT + e)  # noqa: E731
    return fc.CompositeProblem(
        outer_of(u), inner, domain, sampler=noise(scale), full_batch=torch.zeros(N, dtype=torch.float64)
    )


def reference(outer_of_expr, domain) -> float:
    x = cp.Variable(domain.shape)
    prob = cp.Problem(cp.Minimize(outer_of_expr(cp.logistic(A @ x - B))), domain.cvxpy_constraints(x))
    prob.solve(solver="CLARABEL")
    return prob.value


def affine_problem(outer_of, domain):
    u = fc.inner_value(N)
    return fc.CompositeProblem(outer_of(u), lambda x, batch: AT @ x - BT, domain)


@pytest.mark.parametrize(
    "outer_of, domain",
    [
        (cp.max, fc.Simplex(D)),
        (lambda u: fc.cvar(u, 0.6), fc.L1Ball(D, 2.0)),
        (lambda u: cp.norm(u, 1), fc.Box(-np.ones(D), np.ones(D))),
    ],
)
def test_exact_affine_reaches_cvxpy_optimum(outer_of, domain):
    problem = affine_problem(outer_of, domain)
    res = fc.hmsfw(problem, iters=20, exact=True, progress=False)
    x = cp.Variable(domain.shape)
    ref = cp.Problem(cp.Minimize(outer_of(A @ x - B)), domain.cvxpy_constraints(x))
    ref.solve(solver="CLARABEL")
    assert problem.objective(res.x) == pytest.approx(ref.value, rel=1e-3, abs=1e-6)


@pytest.mark.parametrize(
    "outer_of, domain",
    [(cp.max, fc.L1Ball(D, 2.0)), (lambda u: fc.cvar(u, 0.5), fc.Simplex(D)), (lambda u: cp.sum(u), fc.L2Ball(D, 1.0))],
)
def test_exact_convex_inner_reaches_cvxpy_optimum(outer_of, domain):
    problem = softplus_problem(outer_of, domain)
    res = fc.hmsfw(problem, iters=150, exact=True, progress=False)
    ref = reference(outer_of, domain)
    assert problem.objective(res.x) == pytest.approx(ref, rel=1e-3)
    # Exact trackers: gap estimate + GLMO certificate bound the generalized FW gap, hence the primal error.
    last = res.history[-1]
    assert last["gap_estimate"] + last["glmo_gap"] >= problem.objective(res.x) - ref - 1e-7


def test_x_dependent_outer_uses_conic_route_and_reaches_optimum():
    X = fc.L2Ball(D, 2.0)
    u = fc.inner_value(N)
    outer = cp.max(u) + 0.5 * cp.sum_squares(X.variable)
    problem = fc.CompositeProblem(outer, lambda x, batch: AT @ x - BT, X)
    res = fc.hmsfw(problem, iters=200, exact=True, progress=False)
    assert res.info["glmo_route"] == "conic"
    x = cp.Variable(D)
    ref = cp.Problem(cp.Minimize(cp.max(A @ x - B) + 0.5 * cp.sum_squares(x)), X.cvxpy_constraints(x))
    ref.solve(solver="CLARABEL")
    assert problem.objective(res.x) == pytest.approx(ref.value, rel=1e-3)


def test_stochastic_gets_close_and_keeps_improving():
    problem = softplus_problem(cp.max, fc.L1Ball(D, 2.0))
    ref = reference(cp.max, fc.L1Ball(D, 2.0))
    errors = []
    for iters in (30, 400):
        values = [problem.objective(fc.hmsfw(problem, iters=iters, seed=s, progress=False).x) for s in range(3)]
        errors.append(np.mean(values) - ref)
    assert errors[1] < errors[0]
    assert errors[1] < 0.03 * abs(ref)


def test_taylor_not_worse_than_polyak_on_curved_map():
    # A steep map (large Lipschitz constant G) is where the Taylor correction pays: Polyak's value
    # tracker lags by O(G gamma / rho) while Taylor's lags by a quadratic remainder.
    steep = torch.tensor(3 * A)
    u, X = fc.inner_value(N), fc.L1Ball(D, 2.0)
    problem = fc.CompositeProblem(
        cp.max(u), lambda x, e: torch.nn.functional.softplus(steep @ x - BT) + e, X, sampler=noise(0.1)
    )
    x = cp.Variable(D)
    ref = cp.Problem(cp.Minimize(cp.max(cp.logistic(3 * A @ x - B))), X.cvxpy_constraints(x))
    ref.solve(solver="CLARABEL")

    def true_objective(res):
        return float(torch.max(torch.nn.functional.softplus(steep @ res.x - BT)))

    final = {}
    for variant in ("taylor", "polyak"):
        runs = [fc.hmsfw(problem, iters=100, variant=variant, seed=s, progress=False) for s in range(4)]
        final[variant] = np.mean([true_objective(r) for r in runs]) - ref.value
    assert final["taylor"] <= final["polyak"]


def _strip_time(history):
    return [{k: v for k, v in row.items() if k != "time"} for row in history]


def test_same_seed_same_history_other_seed_differs():
    problem = softplus_problem(cp.max, fc.Simplex(D))
    a = fc.hmsfw(problem, iters=15, seed=3, progress=False)
    b = fc.hmsfw(problem, iters=15, seed=3, progress=False)
    c = fc.hmsfw(problem, iters=15, seed=4, progress=False)
    assert _strip_time(a.history) == _strip_time(b.history)
    assert torch.equal(a.x, b.x)
    assert not torch.equal(a.x, c.x)


def test_history_columns_and_csv(tmp_path):
    problem = softplus_problem(cp.max, fc.Simplex(D))
    res = fc.hmsfw(problem, iters=5, progress=False)
    assert len(res.history) == 6  # rows for y_0 .. y_5
    for col in ("k", "time", "objective_estimate", "gap_estimate", "glmo_gap", "pricing_calls"):
        assert col in res.history.columns
    res.to_csv(tmp_path / "h.csv")
    back = fc.History.read_csv(tmp_path / "h.csv")
    assert back.column("k").tolist() == list(range(6))
    assert np.allclose(back.column("gap_estimate"), res.history.column("gap_estimate"))
    assert res.x.shape == (D,)


def test_fixed_pricing_budget_is_respected():
    problem = softplus_problem(cp.max, fc.L2Ball(D, 1.0))
    res = fc.hmsfw(problem, iters=10, max_pricing=2, pool=5, progress=False)
    assert max(res.history.column("pricing_calls")) <= 2


def test_constant_and_custom_schedules():
    problem = softplus_problem(cp.max, fc.Simplex(D))
    res = fc.hmsfw(problem, iters=20, schedule="constant", progress=False)
    assert res.info["schedule"] == "constant"
    seen = []

    def sched(k):
        seen.append(k)
        return 1.0 / (k + 1), 0.5, 0.5

    fc.hmsfw(problem, iters=5, schedule=sched, progress=False)
    assert seen[:3] == [0, 1, 1]  # gamma_0, then beta_1 and rho_1: trackers move at y_1
    with pytest.raises(OptionError, match="iters"):
        fc.hmsfw(problem, seconds=1.0, schedule="constant", progress=False)
    with pytest.raises(OptionError, match="gamma"):
        fc.hmsfw(problem, iters=3, schedule=lambda k: (1.5, 0.5, 0.5), progress=False)


def test_checkpoint_resume_gives_same_trajectory(tmp_path):
    problem = softplus_problem(cp.max, fc.L1Ball(D, 2.0))
    full = fc.hmsfw(problem, iters=30, seed=7, progress=False)
    ckpt = fc.Checkpoint(tmp_path / "run.pt", every=10)

    def interrupt(it):
        if it.k == 25:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fc.hmsfw(problem, iters=30, seed=7, progress=False, checkpoint=ckpt, callback=interrupt)
    resumed = fc.hmsfw(problem, iters=30, seed=7, progress=False, checkpoint=ckpt)
    assert resumed.info["resumed_from"] == 26  # the interrupted step is committed, then saved
    assert torch.equal(resumed.x, full.x)
    assert _strip_time(resumed.history) == _strip_time(full.history)


def test_a_history_saves_its_new_rows_only_and_reads_them_back_exactly():
    """A checkpoint keeps the history in chunks, each holding the rows since the last save, so a save costs the
    new rows; they read back as they were (NaN, infinities, ints, bools, None, strings), and rows JSON cannot
    hold exactly (an array, a tuple, a key that is not a string) are kept as rows."""
    from fullcomp.run import History

    history = History()
    rows = [
        {"k": 0, "value": 0.1, "gap": float("nan"), "calls": 3, "ok": True, "note": None},
        {"k": 1, "value": float("inf"), "gap": -float("inf"), "calls": 0, "ok": False, "note": "x"},
    ]
    for row in rows:
        history.append(row)
    first = history.saved()
    history.append({"k": 2, "value": 1 / 3, "extra": np.arange(3.0)})
    history.append({"k": 3, "pair": (1, 2)})
    second = history.saved()
    assert len(first) == 1 and second[0] is first[0] and len(second) == 2
    assert history.saved() == second  # nothing new, nothing written
    history.append({"k": 4, 7: "an int key"})
    third = history.saved()
    assert isinstance(first[0], torch.Tensor) and isinstance(third[1], list) and isinstance(third[2], list)
    back = History.from_saved(third)
    assert len(back) == 5
    for got, want in zip(back.rows, history.rows):
        assert got.keys() == want.keys()
        for key in want:
            a, b = got[key], want[key]
            if isinstance(b, np.ndarray):
                assert np.array_equal(a, b)
            else:
                assert type(a) is type(b) and (a == b or (a != a and b != b)), (key, a, b)
    plain = [history.rows[1], history.rows[3]]  # (no NaN, which equals itself only as the same object)
    assert History.from_saved(plain).rows == plain  # a checkpoint written before chunks held the rows
    with pytest.raises(ValueError, match="not a record"):
        History.from_saved([torch.frombuffer(bytearray(b"[1, 2]"), dtype=torch.uint8)])


def test_a_checkpoint_whose_history_is_not_rows_is_refused(tmp_path):
    from fullcomp.errors import CheckpointError

    problem = softplus_problem(cp.max, fc.L1Ball(D, 2.0))
    path = tmp_path / "run.pt"
    fc.hmsfw(problem, iters=4, seed=7, progress=False, checkpoint=fc.Checkpoint(path, every=2))
    payload = torch.load(path, weights_only=True)
    payload["run"]["history"] = [torch.frombuffer(bytearray(b'{"k": 1}'), dtype=torch.uint8)]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="damaged"):
        fc.hmsfw(problem, iters=6, seed=7, progress=False, checkpoint=fc.Checkpoint(path, every=2))


def test_callback_merges_rows_stops_and_is_not_optimizer_time(monkeypatch):
    import fullcomp.run.budget as budget

    clock = {"now": 0.0}

    def fake_perf_counter():
        clock["now"] += 0.001  # every reading advances the clock a little
        return clock["now"]

    monkeypatch.setattr(budget.time, "perf_counter", fake_perf_counter)
    problem = softplus_problem(cp.max, fc.Simplex(D))

    def evaluate(it):
        clock["now"] += 100.0  # a slow evaluation must not count as optimizer time
        if it.k == 6:
            return False
        return {"true_objective": problem.objective(it.x)}

    res = fc.hmsfw(problem, iters=50, eval_every=2, callback=evaluate, progress=False)
    assert res.info["stopped"] == "callback"
    assert res.info["iterations"] == 7
    assert res.info["optimizer_seconds"] < 1.0
    assert "true_objective" in res.history[2] and "true_objective" not in res.history[1]


def test_seconds_budget_scores_last_in_budget_state():
    problem = softplus_problem(cp.max, fc.Simplex(D))
    res = fc.hmsfw(problem, seconds=0.3, progress=False)
    assert res.info["stopped"] == "seconds"
    assert res.info["iterations"] >= 1
    assert all(t <= 0.3 for t in res.history.column("time"))


@pytest.mark.parametrize("kwargs", [{}, {"iters": 0}, {"seconds": 0.0}, {"iters": -3}, {"iters": 2.5}])
def test_bad_budget(kwargs):
    problem = softplus_problem(cp.max, fc.Simplex(D))
    with pytest.raises(OptionError, match="iters|seconds|budget"):
        fc.hmsfw(problem, progress=False, **kwargs)


def test_bad_variant_and_exact_without_full_batch():
    problem = softplus_problem(cp.max, fc.Simplex(D))
    with pytest.raises(OptionError, match="variant"):
        fc.hmsfw(problem, iters=3, variant="nesterov", progress=False)
    u = fc.inner_value(N)
    no_full = fc.CompositeProblem(cp.max(u), lambda x, e: AT @ x + e, fc.Simplex(D), sampler=noise(0.1))
    with pytest.raises(OptionError, match="full_batch"):
        fc.hmsfw(no_full, iters=3, exact=True, progress=False)


def _poisoned(kind: str, at_call: int):
    """An inner map that misbehaves from its ``at_call``-th sample on."""
    calls = {"n": 0}

    def sampler(g):
        calls["n"] += 1
        return torch.tensor(float(calls["n"] >= at_call))

    def inner(x, flag):
        out = AT @ x - BT
        if flag > 0:
            if kind == "nan":
                return out * float("nan")
            if kind == "inf":
                return out + float("inf")
            if kind == "shape":
                return torch.cat([out, out])
        return out

    u = fc.inner_value(N)
    return fc.CompositeProblem(cp.max(u), inner, fc.Simplex(D), sampler=sampler)


@pytest.mark.parametrize("kind", ["nan", "inf", "shape"])
def test_bad_inner_output_mid_run_names_iteration_and_keeps_state(kind):
    # Sample 1 is the construction check, sample 2 initializes y_0, samples 3.. feed y_1, y_2, ...
    problem = _poisoned(kind, at_call=7)
    with pytest.raises(OracleError, match="iteration 5") as err:
        fc.hmsfw(problem, iters=20, progress=False)
    partial = err.value.result
    assert partial is not None and torch.isfinite(partial.x).all()
    assert partial.info["iterations"] == 4 and partial.status == "error"
    assert [r["k"] for r in partial.history] == [0, 1, 2, 3, 4]  # four updates and the finite state y_4's row
    assert isinstance(err.value, FullcompError)
