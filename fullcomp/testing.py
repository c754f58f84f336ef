"""The method contract as a test a user can run on a method of their own: ``check_method(name)``.

Like scikit-learn's ``check_estimator``, :func:`check_method` runs the guarantees every built-in method
keeps on a registered method: bad hyperparameters generated from its declared constraints are refused
naming the option, seeds reproduce, the result has the common schema and survives save and load, an
interrupted run resumes exactly from its checkpoint and a foreign checkpoint is refused, float32 data
run in float32, and :class:`fullcomp.Stepper` takes the iterates of :func:`fullcomp.solve`.  It raises
``AssertionError`` naming the guarantee that failed.

The small problems it runs on are public too (:func:`composite_problem`, :func:`dc_problem`,
:func:`minimax_problem`); the project's own tests use the same ones.

:func:`check_risk` does the same for an outer function, a user's :func:`fullcomp.risk` included: it is
convex, and the value and weights it declares are CVXPY's.  :func:`parametrize_risk_checks` turns it into
one pytest case per check.
"""

from __future__ import annotations

import functools
import math
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import cvxpy as cp
import numpy as np
import torch

import fullcomp as fc
from fullcomp.errors import CheckpointError, OptionError


def composite_problem(
    dtype: torch.dtype = torch.float64, scale: float = 1.0, nan_after: int | None = None, device: Any = "cpu"
) -> fc.CompositeProblem:
    """max of four softplus group losses over an l1 ball of radius 2; noisy samples, an exact ``full_batch``.

    ``nan_after`` makes the map return NaN after that many calls of a run (the construction's calls are not
    counted), to test what a failing oracle keeps.
    """
    A = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    A = A.to(device=device, dtype=dtype) * scale
    calls = [0]

    def inner(x, noise):
        calls[0] += 1
        out = torch.nn.functional.softplus(A @ x - 0.5) + noise
        return out * float("nan") if nan_after is not None and calls[0] > nan_after else out

    def sampler(gen):
        return 0.05 * torch.randn(4, generator=gen, dtype=torch.float64, device=gen.device).to(dtype)

    exact = torch.zeros(4, dtype=dtype, device=device)
    problem = fc.CompositeProblem(
        outer=cp.max(fc.inner_value(4)), inner=inner, domain=fc.L1Ball(10, 2.0), sampler=sampler, full_batch=exact
    )
    calls[0] = 0  # count the run's calls only
    return problem


def _noisy_target(shift: float, dtype: torch.dtype, nan_after: int | None) -> Callable:
    calls = [0]

    def sampler(gen):
        calls[0] += 1
        b = shift + 0.1 * torch.randn(3, generator=gen, dtype=torch.float64).to(dtype)
        return b * float("nan") if nan_after is not None and calls[0] > nan_after else b

    return sampler


def dc_problem(dtype: torch.dtype = torch.float64, shift: float = 1.0, nan_after: int | None = None) -> fc.DMaxProblem:
    """phi - psi = sum (x - b)^2 - |x|_1 with noisy b around ``shift`` (a difference of convex functions)."""
    return fc.DMaxProblem(
        lambda x, b: ((x - b) ** 2).sum(),
        lambda x, b: x.abs().sum(),
        x0=torch.zeros(3, dtype=dtype),
        sampler=_noisy_target(shift, dtype, nan_after),
        full_batch=torch.full((3,), shift, dtype=dtype),
    )


def minimax_problem(
    dtype: torch.dtype = torch.float64, shift: float = 1.0, nan_after: int | None = None
) -> fc.DMaxProblem:
    """min over x = {w, s} of max over y in a ball of (w - b)^2 + s^2 + y.w - |y|^2 / 2."""

    def phi(x, y, b):
        return ((x["w"] - b) ** 2).sum() + (x["s"] ** 2).sum() + y @ x["w"] - 0.5 * (y @ y)

    x0 = {"w": torch.zeros(3, dtype=dtype), "s": torch.ones(2, dtype=dtype)}
    return fc.DMaxProblem(
        phi,
        x0=x0,
        y0=torch.zeros(3, dtype=dtype),
        Y=fc.L2Ball(3, 5.0),
        sampler=_noisy_target(shift, dtype, nan_after),
        full_batch=torch.full((3,), shift, dtype=dtype),
    )


def _flat(x: Any) -> torch.Tensor:
    if isinstance(x, dict):
        return torch.cat([v.reshape(-1) for v in x.values()])
    return x.reshape(-1)


def _same_rows(a: fc.History, b: fc.History, what: str) -> None:
    assert len(a) == len(b), f"{what}: {len(a)} rows against {len(b)}"
    for ra, rb in zip(a, b):
        ra, rb = ({k: v for k, v in r.items() if k != "time"} for r in (ra, rb))
        assert ra == rb, f"{what}: row {ra.get('k')} differs: {ra} against {rb}"


def check_method(name: str, problem: Callable[..., Any] | None = None, **required: Any) -> None:
    """Run the method contract on the registered method ``name``; AssertionError names what failed.

    Parameters
    ----------
    name : str
        A registered method (``fc.register`` adds one).
    problem : callable, optional
        ``problem(dtype=torch.float64)`` returns a fresh problem of the method's kind with a sampler and a
        ``full_batch``.  Default: :func:`composite_problem` for a composite method, :func:`minimax_problem`
        for a DMax one.
    **required
        The hyperparameters the method needs to run (its required ones, or values that suit the problem).
    """
    spec = fc.algorithms.method.get(name)
    make = problem or (composite_problem if issubclass(spec.problem, fc.CompositeProblem) else minimax_problem)

    def run(**options: Any) -> fc.Result:
        fresh = options.pop("problem", None) or make()
        return fc.solve(fresh, name, **{**required, "progress": False, **options})

    # Hyperparameters: every value a declared constraint rejects is refused, naming the option.
    for param in spec.options:
        for bad in param.bad_values():
            try:
                run(iters=2, **{param.name: bad})
            except OptionError as exc:
                assert param.name in str(exc), f"{name}: the error for {param.name}={bad!r} does not name it: {exc}"
            else:
                raise AssertionError(f"{name}: {param.name}={bad!r} breaks its constraint but was accepted")
    if spec.options:
        try:
            run(iters=2, **{spec.options[0].name + "x": 1})
        except OptionError as exc:
            assert "did you mean" in str(exc), f"{name}: a mistyped option gets no suggestion: {exc}"
        else:
            raise AssertionError(f"{name}: a mistyped option was accepted")

    # Seeds reproduce; the result has the common schema and survives save and load.
    base = run(iters=5, seed=3)
    _same_rows(run(iters=5, seed=3).history, base.history, f"{name}: the same seed")
    assert base.status == "iterations" and base.info["method"] == name, f"{name}: status {base.status!r}"
    rows = base.history.rows
    assert [r["k"] for r in rows] == list(range(6)), f"{name}: rows {[r['k'] for r in rows]}, not 0..5"
    for row in rows:  # every update's row; the closing row (the final state's) has what plan.observe gives
        needed = {"k", "time"} if row is rows[-1] else {"k", "time", "objective_estimate"}
        missing = needed - set(row)
        assert not missing, f"{name}: row {row['k']} lacks {sorted(missing)}"
        if "objective_estimate" in row:
            assert math.isfinite(row["objective_estimate"]), f"{name}: objective_estimate of row {row['k']}"
    with tempfile.TemporaryDirectory() as folder:
        loaded = fc.Result.load(base.save(Path(folder) / "run"))
        assert loaded.history.columns == base.history.columns, f"{name}: columns change in save and load"
        assert torch.equal(_flat(loaded.x).to(_flat(base.x).dtype), _flat(base.x).detach().cpu()), f"{name}: x"

        # An interrupted run resumes exactly; a checkpoint of another run is refused.
        full = run(iters=8, seed=5)
        ckpt = fc.Checkpoint(Path(folder) / "run.ckpt", every=2)

        def interrupt(it: Any) -> None:
            if it.k == 4:
                raise KeyboardInterrupt

        try:
            run(iters=8, seed=5, checkpoint=ckpt, callback=interrupt)
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError(f"{name}: a KeyboardInterrupt in the callback did not stop the run")
        resumed = run(iters=8, seed=5, checkpoint=ckpt)
        assert resumed.info.get("resumed_from") == 5, f"{name}: resumed from {resumed.info.get('resumed_from')}"
        _same_rows(resumed.history, full.history, f"{name}: the resumed run")
        assert torch.equal(_flat(resumed.x), _flat(full.x)), f"{name}: the resumed run's x"
        try:
            run(iters=8, seed=6, checkpoint=ckpt)
        except CheckpointError as exc:
            assert "seed" in str(exc), f"{name}: the refusal does not name the seed: {exc}"
        else:
            raise AssertionError(f"{name}: a checkpoint of another seed was resumed")

    # float32 data run in float32.
    single = run(iters=3, problem=make(dtype=torch.float32))
    assert _flat(single.x).dtype == torch.float32, f"{name}: float32 data gave {_flat(single.x).dtype}"

    # The stepper takes the iterates of solve.
    stepper = fc.Stepper(make(), name, seed=3, iters=5, **required)
    for _ in range(5):
        stepper.step()
    assert torch.equal(_flat(stepper.x), _flat(base.x)), f"{name}: fc.Stepper's iterates differ from fc.solve's"


# ---- the risk contract: check_risk --------------------------------------------------------------------

#: The relative tolerance of check_risk's comparisons with CVXPY: Clarabel at its tightest settings meets
#: 1e-7 on the exponential and second-order cones of the named risks' programs.
RISK_RTOL = 1e-6
_TIGHT = {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "tol_ktratio": 1e-10, "max_iter": 500}


class _RiskProbe:
    """CVXPY's own answers about a risk at loss vectors: its value and the dual of u' == u in min F(u')."""

    def __init__(self, expr: cp.Expression):
        from fullcomp.model.calculus import closed_form, has_partial_minimization
        from fullcomp.model.composite import free_variables

        _risk_is_convex(expr)  # the other checks read the placeholder off a well-formed risk
        self.expr = expr
        self.holder = free_variables(expr)[0]
        self.n = int(self.holder.shape[0])
        self.closed = closed_form(expr)
        self.solves = has_partial_minimization(expr)
        self.program: tuple | None = None

    def value(self, u: np.ndarray) -> float:
        """F(u): CVXPY's atom-by-atom evaluation, or a tight solve where that evaluation is itself a solve."""
        if self.solves:
            return self.dual(u)[0]
        self.holder.value = u
        return float(np.asarray(self.expr.value).reshape(()))

    def dual(self, u: np.ndarray) -> tuple[float, np.ndarray]:
        from fullcomp import solvers

        if self.program is None:
            point = cp.Parameter(self.n)
            link = self.holder == point
            self.program = (cp.Problem(cp.Minimize(self.expr), [link]), point, link)
        problem, point, link = self.program
        point.value = u
        solved = True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "solution may be inaccurate": the tolerances of the checks judge it
            try:
                problem.solve(solver=cp.CLARABEL, **_TIGHT)
            except cp.error.SolverError:
                solved = False
        if not solved or problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            solvers.solve(problem, "check_risk's program min F(u') s.t. u' == u")
        return float(problem.value), -np.asarray(link.dual_value, dtype=np.float64).reshape(-1)

    def declared(self, kind: str, u: np.ndarray) -> Any:
        from fullcomp.errors import FullcompError

        try:
            return self.closed.value_at(u) if kind == "value" else self.closed.weights_at(u)
        except FullcompError as exc:
            raise AssertionError(
                f"check_risk: the declared {kind}= returns an answer of the right kind: {exc}"
            ) from exc


def risk_points(n: int, seed: int = 0) -> dict[str, list[np.ndarray]]:
    """The loss vectors check_risk uses: random (distinct entries), tied (a shared maximum and repeated
    entries) and degenerate (constant, zero, a single outlier, ties split by 1e-9)."""
    rng = np.random.default_rng(seed)
    random = [rng.standard_normal(n), 2.0 * rng.uniform(size=n), 1.0 + 0.5 * rng.standard_normal(n)]
    tied = []
    for _ in range(2):
        t = rng.integers(0, 3, n) / 2.0
        t[rng.choice(n, min(n, 2), replace=False)] = 1.0
        tied.append(t)
    outlier = np.zeros(n)
    outlier[-1] = 3.0
    nearly = tied[0] + 1e-9 * rng.standard_normal(n)
    return {"random": random, "tied": tied, "degenerate": [np.full(n, 0.7), np.zeros(n), outlier, nearly]}


def _at(u: np.ndarray, kind: str) -> str:
    return f"at the {kind} loss vector u = {np.array2string(u, precision=4)}"


def _keeps_the_placeholder(check: Callable[[Any, int], None]) -> Callable[..., None]:
    """``check`` restoring the value of the risk's placeholder, which evaluating F at loss vectors sets."""
    from fullcomp.model.placeholder import is_placeholder

    @functools.wraps(check)
    def restoring(expr: Any, seed: int = 0) -> None:
        holders = [v for v in expr.variables() if is_placeholder(v)] if isinstance(expr, cp.Expression) else []
        saved = [holder.value for holder in holders]
        try:
            check(expr, seed)
        finally:
            for holder, value in zip(holders, saved):
                holder.value = value

    return restoring


def _risk_is_convex(expr: Any, seed: int = 0) -> None:
    """The risk is a convex scalar DCP expression of one fc.inner_value placeholder alone."""
    from fullcomp.model.composite import free_variables
    from fullcomp.model.placeholder import is_placeholder

    guarantee = "check_risk: the risk is a convex scalar DCP expression of one fc.inner_value placeholder alone"
    assert isinstance(expr, cp.Expression), f"{guarantee}; got {type(expr).__name__}"
    assert expr.size == 1, f"{guarantee}; it has shape {expr.shape}"
    assert expr.is_dcp() and expr.is_convex(), f"{guarantee}; expr.is_convex() is False under the DCP rules"
    variables = free_variables(expr)
    names = ", ".join(v.name() for v in variables) or "no variable"
    assert len(variables) == 1 and is_placeholder(variables[0]), f"{guarantee}; it reads {names}"
    assert variables[0].ndim == 1, f"{guarantee}; the placeholder has shape {variables[0].shape}"


def _risk_value(expr: Any, seed: int = 0) -> None:
    """The declared value is CVXPY's value of the expression, on random, tied and degenerate loss vectors."""
    probe = _RiskProbe(expr)
    if probe.closed is None or probe.closed.value is None:
        return
    for kind, points in risk_points(probe.n, seed).items():
        for u in points:
            declared, reference = probe.declared("value", u), probe.value(u)
            assert abs(declared - reference) <= RISK_RTOL * max(1.0, abs(reference)), (
                f"check_risk: the declared value is CVXPY's value of the expression; {_at(u, kind)} value= gives "
                f"{declared!r} and CVXPY {reference!r}"
            )


def _risk_weights_are_subgradients(expr: Any, seed: int = 0) -> None:
    """The weights (declared, else CVXPY's dual) are a subgradient: F(v) >= F(u) + q.(v - u) for the v
    checked, steps from u along the all-ones vector, coordinates and random directions."""
    from fullcomp.model.calculus import risk_weights

    probe = _RiskProbe(expr)
    rng = np.random.default_rng(seed + 1)
    declared = probe.closed is not None and probe.closed.weights is not None
    source = "the declared weights are" if declared else "CVXPY's dual (fc.risk_weights) is"
    for kind, points in risk_points(probe.n, seed).items():
        for u in points:
            q = probe.declared("weights", u) if declared else risk_weights(expr, u)
            at_u = probe.value(u)
            directions = [np.ones(probe.n), -np.ones(probe.n)]
            for i in rng.choice(probe.n, min(probe.n, 3), replace=False):
                directions += [np.eye(probe.n)[i], -np.eye(probe.n)[i]]
            directions += [rng.standard_normal(probe.n) for _ in range(3)]
            scale = 1.0 + float(u.max() - u.min())
            for d in directions:
                for step in (1e-2 * scale, scale):
                    v = u + step * d / np.abs(d).max()
                    at_v, linear = probe.value(v), float(q @ (v - u))
                    slack = RISK_RTOL * (1.0 + abs(at_u) + abs(at_v) + float(np.abs(q).sum()) * step)
                    assert at_v >= at_u + linear - slack, (
                        f"check_risk: {source} a subgradient of F, F(v) >= F(u) + q.(v - u); {_at(u, kind)}, "
                        f"q = {np.array2string(q, precision=4)}, v = {np.array2string(v, precision=4)}: "
                        f"F(v) = {at_v!r} < {at_u + linear!r}"
                    )


def _risk_weights_are_the_dual(expr: Any, seed: int = 0) -> None:
    """The declared weights are CVXPY's dual of u' == u in min F(u') at random loss vectors, where the
    subgradient is unique (a convex function is differentiable almost everywhere)."""
    probe = _RiskProbe(expr)
    if probe.closed is None or probe.closed.weights is None:
        return
    for u in risk_points(probe.n, seed)["random"]:
        q, (_, dual) = probe.declared("weights", u), probe.dual(u)
        error = float(np.abs(q - dual).max())
        assert error <= RISK_RTOL * max(1.0, float(np.abs(dual).max())), (
            f"check_risk: the declared weights are CVXPY's dual where the subgradient is unique; {_at(u, 'random')} "
            f"weights= gives {np.array2string(q, precision=6)} and CVXPY {np.array2string(dual, precision=6)}"
        )


#: check_risk's checks by name, in the order it runs them; each takes (expr, seed=0).
RISK_CHECKS: dict[str, Callable[..., None]] = {
    "convex": _risk_is_convex,
    "value": _keeps_the_placeholder(_risk_value),
    "subgradient": _keeps_the_placeholder(_risk_weights_are_subgradients),
    "dual": _keeps_the_placeholder(_risk_weights_are_the_dual),
}


def check_risk(expr: cp.Expression, *, seed: int = 0) -> None:
    """Check an outer function of the placeholder, and the closed forms it declares, against CVXPY.

    ``expr`` is a risk of one ``fc.inner_value(n)`` placeholder alone: a named one (``fc.cvar(u, 0.1)``), a
    user's :func:`fullcomp.risk`, or any convex CVXPY expression in u.  The guarantees, each on random, tied
    and degenerate loss vectors (:func:`risk_points`, drawn from ``seed``), at a relative tolerance of
    ``RISK_RTOL`` = 1e-6:

    * the expression is a convex scalar DCP expression of the placeholder alone;
    * the declared value is CVXPY's value of the expression;
    * the weights (the declared ones, else CVXPY's dual that :func:`fullcomp.risk_weights` reads) are a
      subgradient: F(v) >= F(u) + q.(v - u) for steps v from u along the all-ones vector, coordinate
      vectors and random directions;
    * the declared weights are CVXPY's dual at the random loss vectors, where the subgradient is unique.

    It raises ``AssertionError`` naming the guarantee that failed and the loss vector.  The placeholder's
    value is restored afterwards.
    """
    for check in RISK_CHECKS.values():
        check(expr, seed)


def parametrize_risk_checks(risks: Mapping[str, cp.Expression] | Sequence[cp.Expression], *, seed: int = 0):
    """A ``pytest.mark.parametrize`` over every (risk, check) pair of :func:`check_risk`, one test each.

    ``risks`` maps names (the test ids) to risks, or lists them (named ``risk0``, ``risk1``, ...)::

        @parametrize_risk_checks({"my risk": my_risk})
        def test_my_risk(risk, check):
            check(risk)
    """
    import pytest

    named = risks.items() if isinstance(risks, Mapping) else ((f"risk{i}", r) for i, r in enumerate(risks))
    cases, ids = [], []
    for name, expr in named:
        for check_name, check in RISK_CHECKS.items():
            cases.append((expr, functools.partial(check, seed=seed)))
            ids.append(f"{name}-{check_name}")
    return pytest.mark.parametrize(("risk", "check"), cases, ids=ids)


__all__ = ["check_method", "composite_problem", "dc_problem", "minimax_problem"]
__all__ += ["check_risk", "parametrize_risk_checks", "risk_points", "RISK_CHECKS", "RISK_RTOL"]
