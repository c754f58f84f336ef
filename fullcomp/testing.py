"""The method contract as a test a user can run on a method of their own: ``check_method(name)``.

Like scikit-learn's ``check_estimator``, :func:`check_method` runs the guarantees every built-in method
keeps on a registered method: bad hyperparameters generated from its declared constraints are refused
naming the option, seeds reproduce, the result has the common schema and survives save and load, an
interrupted run resumes exactly from its checkpoint and a foreign checkpoint is refused, every iterate
lies in the domain, a step never changes its state in place, a map that turns NaN stops the run with
status "error", x follows the problem's dtype and device, and :class:`fullcomp.Stepper` takes the
iterates of :func:`fullcomp.solve`.  It raises ``AssertionError`` naming the guarantee that failed.

The small problems it runs on are public too (:func:`composite_problem`, :func:`dc_problem`,
:func:`minimax_problem`); the project's own tests use the same ones.

:func:`check_risk` does the same for an outer function, a user's :func:`fullcomp.risk` included: it is
convex, and the value and weights it declares are CVXPY's.  :func:`parametrize_risk_checks` turns it into
one pytest case per check.
"""

from __future__ import annotations

import contextlib
import functools
import math
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import cvxpy as cp
import numpy as np
import torch

import fullcomp as fc
from fullcomp.errors import CheckpointError, DomainError, FullcompError, OptionError
from fullcomp.sets.base import Set


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

    Besides what the module says, it checks what ``fc.solve`` promises of every method: the iterate stays in
    the problem's domain, a step never changes its state in place, a map that turns NaN stops the run with a
    fullcomp error whose result has status ``"error"`` and finite rows, and x follows the problem's dtype
    and device.  An error the method raises during a check is reported as that check's AssertionError.

    Parameters
    ----------
    name : str
        A registered method (``fc.register`` adds one).
    problem : callable, optional
        ``problem(dtype=torch.float64)`` returns a fresh problem of the method's kind with a sampler and a
        ``full_batch`` (and, for the NaN check, takes ``nan_after=``: the map returns NaN after that many
        calls).  Default: :func:`composite_problem` for a composite method, :func:`minimax_problem` for a
        DMax one.
    **required
        The hyperparameters the method needs to run (its required ones, or values that suit the problem).
    """
    spec = fc.algorithms.method.get(name)
    make = problem or (composite_problem if issubclass(spec.problem, fc.CompositeProblem) else minimax_problem)

    def run(**options: Any) -> fc.Result:
        fresh = options.pop("problem", None) or make()
        return fc.solve(fresh, name, **{**required, "progress": False, **options})

    with _guarantee(name, "bad hyperparameters are refused naming the option"):
        _check_options(spec, run)
    with _guarantee(name, "the same seed reproduces the run, and the result survives save and load"):
        base = _check_schema(name, make, run)
    with _guarantee(name, "every iterate lies in the problem's domain"):
        again, points = make(), []
        run(iters=5, seed=3, problem=again, callback=lambda it: points.append((it.k, _dense(again, it.x))))
        _check_inside(name, again, points)
    with _guarantee(name, "an interrupted run resumes exactly, and a foreign checkpoint is refused"):
        _check_resume(name, run)
    with _guarantee(name, "a step never changes its state in place"):
        _check_not_in_place(name, make, required)
    with _guarantee(name, "a map that returns NaN stops the run with status 'error' and finite rows"):
        _check_nan_stops(name, make, run)
    with _guarantee(name, "x follows the problem's dtype and device"):
        single = run(iters=3, problem=make(dtype=torch.float32))
        x = _flat(single.x)
        assert x.dtype == torch.float32, f"{name}: float32 data gave {x.dtype}"
        assert x.device == _flat(base.x).device == torch.device("cpu"), f"{name}: x on {x.device}, not the cpu"
    with _guarantee(name, "fc.Stepper takes the iterates of fc.solve"):
        stepper = fc.Stepper(make(), name, seed=3, iters=5, **required)
        for _ in range(5):
            stepper.step()
        assert torch.equal(_flat(stepper.x), _flat(base.x)), f"{name}: fc.Stepper's iterates differ from fc.solve's"


@contextlib.contextmanager
def _guarantee(name: str, what: str) -> Iterator[None]:
    """An AssertionError naming the guarantee for any error the method raises while it is checked."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc} (the guarantee: {what})") from exc
    except Exception as exc:  # noqa: BLE001 - whatever the method raised, the check failed
        raise AssertionError(f"{name}: {what}: the run raised {type(exc).__name__}: {exc}") from exc


def _check_options(spec: Any, run: Callable[..., fc.Result]) -> None:
    """Every value a declared constraint rejects is refused naming the option; a typo gets a suggestion."""
    name = spec.name
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


def _check_schema(name: str, make: Callable[..., Any], run: Callable[..., fc.Result]) -> fc.Result:
    """Seeds reproduce, and the result has the common schema and survives save and load; the run of seed 3."""
    base = run(iters=5, seed=3)
    _same_rows(run(iters=5, seed=3).history, base.history, f"{name}: the same seed")
    assert base.status == "iterations" and base.info["method"] == name, f"{name}: status {base.status!r}"
    rows = base.history.rows
    assert [r["k"] for r in rows] == list(range(6)), f"{name}: rows {[r['k'] for r in rows]}, not 0..5"
    for row in rows:  # every update's row; the closing row (the final state's) has what the readout's observe gives
        needed = {"k", "time"} if row is rows[-1] else {"k", "time", "objective_estimate"}
        missing = needed - set(row)
        assert not missing, f"{name}: row {row['k']} lacks {sorted(missing)}"
        if "objective_estimate" in row:
            assert math.isfinite(row["objective_estimate"]), f"{name}: objective_estimate of row {row['k']}"
    with tempfile.TemporaryDirectory() as folder:
        loaded = fc.Result.load(base.save(Path(folder) / "run"))
        assert loaded.history.columns == base.history.columns, f"{name}: columns change in save and load"
        assert torch.equal(_flat(loaded.x).to(_flat(base.x).dtype), _flat(base.x).detach().cpu()), f"{name}: x"
    return base


def _dense(problem: Any, x: Any) -> Any:
    """A copy of the iterate as a flat tensor (a module's or a dict's parameters flattened)."""
    params = getattr(problem, "params", None)
    if params is not None and not isinstance(x, torch.Tensor):
        x = params.flatten(x, "x")
    return x.detach().clone() if isinstance(x, torch.Tensor) else None


def _check_inside(name: str, problem: Any, points: list[tuple[int, Any]]) -> None:
    """Every iterate a callback saw lies in a composite problem's domain (a dense iterate of its size)."""
    domain = getattr(problem, "domain", None)
    for k, x in points:
        if domain is None or x is None or x.numel() != domain.size:
            return
        try:
            inside = domain.contains(x.double().cpu().numpy().reshape(domain.shape), tol=1e-6)
        except DomainError:  # a set known by its LMO alone cannot tell
            return
        assert inside, f"{name}: the iterate of iteration {k} is outside the domain ({type(domain).__name__})"


def _check_resume(name: str, run: Callable[..., fc.Result]) -> None:
    """An interrupted run resumes exactly from its checkpoint; a checkpoint of another seed is refused."""
    with tempfile.TemporaryDirectory() as folder:
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


def _check_not_in_place(name: str, make: Callable[..., Any], required: dict) -> None:
    """Each step leaves the state it started from as it was: the loop keeps it, to discard an update that
    crosses the time budget and to checkpoint the last complete state."""
    stepper = fc.Stepper(make(), name, seed=3, iters=4, **required)
    for k in range(4):
        start = stepper.state
        before = _arrays(start, "state")
        stepper.step()
        after = _arrays(start, "state")
        assert [p for p, _ in after] == [p for p, _ in before], f"{name}: step {k} changed the fields of its state"
        for (path, old), (_, new) in zip(before, after):
            assert _same(old, new), f"{name}: step {k} changed {path} in place"


def _arrays(value: Any, where: str, seen: set[int] | None = None) -> list[tuple[str, Any]]:
    """(path, copy) of every tensor and array in a state (containers, dataclasses and objects' fields)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return [(where, value.detach().clone())]
    if isinstance(value, np.ndarray):
        return [(where, torch.as_tensor(value.copy()))]
    if isinstance(value, dict):
        parts = [(f"{where}[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        parts = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    elif hasattr(value, "__dict__") and not callable(value):
        parts = [(f"{where}.{k}", v) for k, v in vars(value).items()]
    else:
        return []
    return [found for path, part in parts for found in _arrays(part, path, seen)]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and entries, NaN equal to NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))


def _check_nan_stops(name: str, make: Callable[..., Any], run: Callable[..., fc.Result]) -> None:
    """A map that turns NaN mid-run: a fullcomp error whose result has status "error" and finite rows, or
    a run that kept every row and x finite."""
    try:
        failing = make(nan_after=6)
    except TypeError:  # a factory without nan_after: the check needs it
        return
    try:
        result = run(iters=12, seed=0, problem=failing)
    except FullcompError as exc:
        result = getattr(exc, "result", None)
        assert result is not None and result.status == "error", f"{name}: {type(exc).__name__} without its result"
    else:
        assert torch.isfinite(_flat(result.x)).all(), f"{name}: the run ended {result.status!r} with a NaN x"
    for row in result.history:
        bad = [k for k, v in row.items() if isinstance(v, float) and math.isnan(v)]
        assert not bad, f"{name}: row {row['k']} of a failing map holds NaN in {bad}"


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
        from fullcomp.model.calculus import NamedRisk

        if self.solves:
            return self.dual(u)[0]
        self.holder.value = u
        # A named risk's .value is its declared value: the reference is CVXPY's, atom by atom.
        value = self.expr.atom_value if isinstance(self.expr, NamedRisk) else self.expr.value
        return float(np.asarray(value).reshape(()))

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


# --- Sets: check_set and parametrize_set_checks ---------------------------------------------------------------
#
# A set's guarantees, checked against answers that do not come from the set's own code where one exists: CVXPY
# over constraints (the set's cvxpy_constraints, and any the caller writes independently), and the set's other
# oracles (an LMO cross-checks a projection's variational inequality, projections give feasible points an LMO
# must not beat).  Each check is a function of (domain, options); check_set runs them all.


def set_directions(shape: tuple[int, ...], seed: int | np.random.Generator = 0) -> list[np.ndarray]:
    """The directions :func:`check_set` tries an LMO on: three random ones, then the degenerate ones where LMOs
    have failed: zero, constant of both signs, all positive, all negative, ties everywhere, repeated maxima and
    minima, a one-hot, alternating signs."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    ties = rng.integers(-2, 3, size).astype(float)
    top = rng.standard_normal(size)
    top[: min(3, size)] = top.max() + 1.0
    top[-min(2, size) :] = top.min() - 1.0
    one_hot = np.zeros(size)
    one_hot[size // 2] = -1.0
    cases = [rng.standard_normal(size) for _ in range(3)]
    cases += [np.zeros(size), np.ones(size), -np.ones(size), 2.5 * np.ones(size)]
    cases += [np.abs(rng.standard_normal(size)) + 0.1, -np.abs(rng.standard_normal(size)) - 0.1, ties, top, -top]
    cases += [one_hot, np.where(np.arange(size) % 2 == 0, 1.0, -1.0)]
    return [c.reshape(shape) for c in cases]


#: Compiled CVXPY programs by set, kept across the checks of one set (parametrize_set_checks runs each check on
#: its own): compiling costs ten to a hundred times a solve.
_SET_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@functools.cache
def _solver() -> str | None:
    return "CLARABEL" if "CLARABEL" in cp.installed_solvers() else None


class _SetProbe:
    """The set under test, its test directions and points, and the CVXPY programs over its constraints (built once)."""

    def __init__(
        self,
        domain: Set,
        constraints: Callable[[cp.Variable], list] | None,
        directions: Iterable[Any] | None,
        points: Iterable[Any] | None,
        tol: float,
        seed: int,
    ):
        if not isinstance(domain, Set):
            raise DomainError(f"check_set's domain must be a fullcomp set (a subclass of fc.Set), got {domain!r}")
        if constraints is not None and not callable(constraints):
            raise DomainError("constraints must be a callable constraints(var) -> list of CVXPY constraints, or None")
        if not (isinstance(tol, (int, float)) and 0 < tol < 1):
            raise DomainError(f"tol must be a number in (0, 1), got {tol!r}; the default 1e-6 suits CVXPY's accuracy")
        self.domain, self.tol, self.name = domain, float(tol), type(domain).__name__
        self.shape = tuple(domain.shape)
        self.rng = np.random.default_rng(seed)
        self.scale = max(1.0, float(domain.diameter))
        self.directions = (
            self._arrays(directions, "directions") if directions is not None else set_directions(self.shape, self.rng)
        )
        self.points = self._arrays(points, "points") if points is not None else self._points()
        self.sources: dict[str, Callable[[cp.Variable], list]] = {}
        if domain._defines("cvxpy_constraints"):
            self.sources["its cvxpy_constraints"] = domain.cvxpy_constraints
        if constraints is not None:
            self.sources["the constraints given to check_set"] = constraints
        self.given = constraints
        self.knows_membership = domain.has_project or domain._defines("contains")
        try:
            self._programs = _SET_PROGRAMS.setdefault(domain, {})
        except TypeError:  # a set that cannot be weakly referenced or hashed compiles its own
            self._programs = {}
        self._atoms: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._projections: list[tuple[np.ndarray, np.ndarray]] | None = None

    def _arrays(self, given: Iterable[Any], what: str) -> list[np.ndarray]:
        out = [np.asarray(a, dtype=np.float64) for a in given]
        for a in out:
            if a.shape != self.shape or not np.all(np.isfinite(a)):
                raise DomainError(f"check_set's {what} must be finite arrays of the set's shape {self.shape}")
        return out

    def _points(self) -> list[np.ndarray]:
        """Points to project: far and near (at the set's scale), the origin, a constant, integer-valued."""
        rng, r = self.rng, self.scale
        return [
            3.0 * r * rng.standard_normal(self.shape),
            0.4 * r * rng.standard_normal(self.shape),
            np.zeros(self.shape),
            2.0 * np.ones(self.shape),
            rng.integers(-2, 3, self.shape).astype(float),
        ]

    def atoms(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(g, lmo(g)) for every direction, each result checked for its type, shape and finiteness."""
        if self._atoms is None:
            self._atoms = []
            for g in self.directions:
                s = self.domain.lmo(g.copy())
                assert isinstance(s, np.ndarray), f"{self.name}.lmo(numpy array) returned {type(s).__name__}"
                assert s.shape == self.shape, f"{self.name}.lmo returned shape {s.shape}, not {self.shape}"
                assert np.all(np.isfinite(s)), f"{self.name}.lmo({_show(g)}) has non-finite entries"
                self._atoms.append((g, np.asarray(s, dtype=np.float64)))
        return self._atoms

    def projections(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(p, project(p)) for the test points and the midpoints of LMO points (points of the set), each result
        checked for its type, shape and finiteness, and to be in the set by what knows it apart from project:
        the set's contains, else CVXPY.  A set without project of its own is checked on the one computed from its
        LMO (:mod:`fullcomp.sets.lmo_projection`)."""
        if self._projections is None:
            self._projections = []
            atoms = [s for _, s in self.atoms()][:4]
            for p in self.points + [0.5 * (a + b) for a, b in zip(atoms, atoms[1:])]:
                q = self.domain.project(p.copy())
                assert isinstance(q, np.ndarray), f"{self.name}.project(numpy array) returned {type(q).__name__}"
                assert q.shape == self.shape, f"{self.name}.project returned shape {q.shape}, not {self.shape}"
                assert np.all(np.isfinite(q)), f"{self.name}.project({_show(p)}) has non-finite entries"
                # the default contains asks project itself, so it cannot judge project's points
                self.assert_in_set(q, f"project({_show(p)}) = {_show(q)}", by_projection=False)
                self._projections.append((p, np.asarray(q, dtype=np.float64)))
        return self._projections

    def slack(self, g: np.ndarray) -> float:
        """The tolerance on <g, x> over the set: tol relative to the largest it can vary, ||g|| diameter."""
        return self.tol * max(1.0, float(np.linalg.norm(g)) * float(self.domain.diameter))

    def program(self, source: str, kind: str) -> tuple[cp.Problem, cp.Variable, cp.Parameter]:
        """A parametrized (DPP) program over one source of constraints: the LMO's linear objective, the
        projection's least squares, or the distance (max norm) from a point."""
        key = (source, kind, self.given if source.startswith("the constraints given") else None)
        if key not in self._programs:
            v, par = cp.Variable(self.shape), cp.Parameter(self.shape)
            cons = list(self.sources[source](v))
            if kind == "lmo":
                problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(par, v))), cons)
            elif kind == "projection":
                problem = cp.Problem(cp.Minimize(cp.sum_squares(v - par)), cons)
            else:
                t = cp.Variable()
                problem = cp.Problem(cp.Minimize(t), [*cons, cp.abs(v - par) <= t])
            self._programs[key] = (problem, v, par)
        return self._programs[key]

    def solve(self, source: str, kind: str, value: np.ndarray) -> float:
        problem, _, par = self.program(source, kind)
        par.value = value
        try:
            problem.solve(solver=_solver())
        except cp.SolverError as exc:
            raise AssertionError(f"{self.name}: CVXPY could not solve the {kind} program over {source}: {exc}") from exc
        assert problem.status == cp.OPTIMAL, (
            f"{self.name}: the {kind} program over {source} ended {problem.status!r}: they should describe a "
            "nonempty compact set"
        )
        return float(problem.value)

    def assert_in_set(self, x: np.ndarray, what: str, by_projection: bool = True) -> None:
        """x is in the set: by the set's own contains and by CVXPY's distance to the set each source of
        constraints describes; by the default contains (which projects) where neither exists and
        ``by_projection``.  Unchecked for a set known by its LMO alone."""
        if self.domain._defines("contains"):
            assert self.domain.contains(x, tol=self.tol), f"{self.name}: {what} is not in the set (contains is False)"
        for source in self.sources:
            distance = self.solve(source, "distance", x)
            assert distance <= self.tol * self.scale, (
                f"{self.name}: {what} is not in the set: it is {distance:.3g} (max norm) from the set {source} describe"
            )
        if by_projection and self.domain.has_project and not (self.sources or self.domain._defines("contains")):
            assert self.domain.contains(x, tol=self.tol), f"{self.name}: {what} is not in the set (contains is False)"


def _show(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a).ravel()[:6], precision=3) + (" ..." if np.size(a) > 6 else "")


def _interface(probe: _SetProbe) -> None:
    """shape is a tuple of positive ints, diameter a finite number >= 0, the default start (what a run starts
    from when given no x0) a point of the set; the optional methods a set lacks raise a DomainError saying so."""
    X, name = probe.domain, probe.name
    assert isinstance(X.shape, tuple) and all(isinstance(s, int) and s > 0 for s in X.shape), (
        f"{name}.shape must be a tuple of positive ints, got {X.shape!r}"
    )
    assert math.isfinite(float(X.diameter)) and float(X.diameter) >= 0, f"{name}.diameter is {X.diameter!r}"
    start = np.asarray(X.default_point(), dtype=np.float64)
    assert start.shape == probe.shape, f"{name}.default_point() has shape {start.shape}, not {probe.shape}"
    probe.assert_in_set(start, f"the default start {_show(start)}")
    zero = np.zeros(X.shape)
    for method, call in (("project", lambda: X.project(zero)), ("contains", lambda: X.contains(zero))):
        try:
            call()
        except DomainError:
            assert not X._defines(method), f"{name} defines {method} but it raises a DomainError on the origin"


def _lmo_feasible(probe: _SetProbe) -> None:
    """lmo(g) is a point of the set for every test direction."""
    for g, s in probe.atoms():
        probe.assert_in_set(s, f"lmo({_show(g)}) = {_show(s)}")


def _lmo_optimal(probe: _SetProbe) -> None:
    """<g, lmo(g)> is the minimum of <g, x> over the set: equal to CVXPY's over each source of constraints, and
    no larger than at the set's other points (its other LMO points, their midpoints, projections)."""
    atoms = probe.atoms()
    others = [s for _, s in atoms] + [0.5 * (a + b) for (_, a), (_, b) in zip(atoms, atoms[1:])]
    others += [q for _, q in probe.projections()]
    for g, s in atoms:
        value, slack = float(np.sum(g * s)), probe.slack(g)
        for source in probe.sources:
            ref = probe.solve(source, "lmo", g)
            assert value >= ref - slack, (
                f"{probe.name}: <g, lmo(g)> = {value:.9g} is below the minimum {ref:.9g} over the set {source} "
                f"describe, so lmo(g) is outside it (g = {_show(g)})"
            )
            assert value <= ref + slack, (
                f"{probe.name}: lmo(g) is not a minimizer: <g, lmo(g)> = {value:.9g}, but the minimum over the set "
                f"{source} describe is {ref:.9g} (g = {_show(g)})"
            )
        best = min(float(np.sum(g * p)) for p in others)
        assert value <= best + slack, (
            f"{probe.name}: lmo(g) is not a minimizer: <g, lmo(g)> = {value:.9g}, but another point of the set "
            f"(an LMO point, a midpoint or a projection) gives {best:.9g} (g = {_show(g)})"
        )


def _projection(probe: _SetProbe) -> None:
    """project(p) is in the set, a point of the set is its own projection, and project(p) is the nearest point:
    <p - project(p), s - project(p)> <= 0 for the LMO's s that maximizes it, and CVXPY finds none nearer."""
    X, name = probe.domain, probe.name
    for p, q in probe.projections():
        again = np.asarray(X.project(q.copy()), dtype=np.float64)
        # to sqrt(tol) only: an interior-point solver (ConvexSet's) projects a boundary point to about the square
        # root of its tolerance; the inequality and CVXPY's distance below judge the projection at tol
        assert np.linalg.norm(again - q) <= math.sqrt(probe.tol) * probe.scale, (
            f"{name}: project is not idempotent: a projected point moves by {np.linalg.norm(again - q):.3g}"
        )
        r = p - q
        if np.linalg.norm(r) > 0:
            s = np.asarray(X.lmo(-r), dtype=np.float64)  # maximizes <r, s> over the set
            excess = float(np.sum(r * (s - q)))
            assert excess <= probe.slack(r), (
                f"{name}: project({_show(p)}) is not the nearest point: the LMO point {_show(s)} makes "
                f"<p - project(p), s - project(p)> = {excess:.3g} > 0"
            )
        mine = float(np.sum(r * r))
        for source in probe.sources:
            ref = probe.solve(source, "projection", p)
            assert mine <= ref + probe.tol * max(1.0, ref), (
                f"{name}: project({_show(p)}) is at squared distance {mine:.9g}, but CVXPY finds {ref:.9g} over the "
                f"set {source} describe"
            )


def _diameter(probe: _SetProbe) -> None:
    """No two of the set's points (its LMO points and projections) are farther apart than its diameter."""
    X = probe.domain
    pts = [s for _, s in probe.atoms()] + [q for _, q in probe.projections()]
    flat = np.array([p.ravel() for p in pts])
    gram = flat @ flat.T
    far = math.sqrt(max(float((np.diag(gram)[:, None] + np.diag(gram)[None, :] - 2 * gram).max()), 0.0))
    assert far <= float(X.diameter) * (1 + probe.tol) + probe.tol, (
        f"{probe.name}: two of its points are {far:.9g} apart, more than its diameter {float(X.diameter):.9g}"
    )


def _array_types(probe: _SetProbe) -> None:
    """numpy float32/float64 and torch float32/float64 inputs (and CUDA ones where there is a GPU) come back in
    the input's type, dtype, device and shape, with the float64 numpy answer for the same rounded input."""
    X, name = probe.domain, probe.name
    g, p = probe.directions[0], probe.points[0]
    kinds: list[tuple[str, Callable[[np.ndarray], Any]]] = [
        ("numpy float64", lambda a: a.astype(np.float64)),
        ("numpy float32", lambda a: a.astype(np.float32)),
        ("torch float64", lambda a: torch.tensor(a, dtype=torch.float64)),
        ("torch float32", lambda a: torch.tensor(a, dtype=torch.float32)),
    ]
    if torch.cuda.is_available():
        kinds.append(("torch float32 on CUDA", lambda a: torch.tensor(a, dtype=torch.float32, device="cuda")))
    methods = [("lmo", X.lmo, g), ("project", X.project, p)]
    for method, call, x in methods:
        for kind, make in kinds:
            given = make(x)
            out = call(given)
            same_type = isinstance(out, type(given)) and out.dtype == given.dtype
            assert same_type, f"{name}.{method}({kind}) returned {type(out).__name__} of {getattr(out, 'dtype', None)}"
            if isinstance(given, torch.Tensor):
                assert out.device == given.device, f"{name}.{method}({kind}) returned a tensor on {out.device}"
                rounded, got = given.double().cpu().numpy(), out.double().cpu().numpy()
            else:
                rounded, got = given.astype(np.float64), out.astype(np.float64)
            assert got.shape == probe.shape, f"{name}.{method}({kind}) returned shape {got.shape}"
            expect = np.asarray(call(rounded), dtype=np.float64)
            digits = 1e-5 if "32" in kind else probe.tol
            if method == "lmo":  # ties may pick another minimizer: compare the values
                gap = abs(float(np.sum(rounded * got)) - float(np.sum(rounded * expect)))
                limit = digits * max(1.0, float(np.linalg.norm(rounded)) * float(X.diameter))
            else:
                gap, limit = float(np.linalg.norm(got - expect)), digits * probe.scale
            assert gap <= limit, f"{name}.{method}({kind}) differs from the float64 answer by {gap:.3g}"
        if X._defines("contains") or X.has_project:
            point = np.asarray(X.lmo(g), dtype=np.float64) if method == "lmo" else np.asarray(X.project(p))
            assert X.contains(torch.tensor(point), tol=probe.tol), f"{name}.contains(a torch tensor) is False"


def _input_checks(probe: _SetProbe) -> None:
    """A direction or point of another shape, or with a non-finite entry, is refused with a DomainError."""
    X, name = probe.domain, probe.name
    methods = [("lmo", X.lmo), ("project", X.project)]
    bad = np.ones(probe.shape)
    bad.flat[0] = np.nan
    for method, call in methods:
        for what, x in (("another shape", np.ones(int(np.prod(probe.shape)) + 1)), ("a NaN entry", bad)):
            try:
                call(x)
            except DomainError:
                continue
            except Exception as exc:  # noqa: BLE001 - any other error is the failure reported
                raise AssertionError(
                    f"{name}.{method} of {what} raised {type(exc).__name__}, not a DomainError"
                ) from exc
            raise AssertionError(f"{name}.{method} accepted an input of {what}")


def _membership(probe: _SetProbe) -> None:
    """contains is True at the LMO's points and False a step outside the supporting hyperplane there; a set with
    neither contains nor project raises a DomainError saying so."""
    X, name = probe.domain, probe.name
    if not probe.knows_membership:
        try:
            X.contains(probe.directions[0] * 0 + 1e3)
        except DomainError:
            return
        raise AssertionError(f"{name} has neither contains nor project but its contains answered")
    for g, s in probe.atoms():
        assert X.contains(s, tol=probe.tol), f"{name}.contains(lmo({_show(g)})) is False"
        norm = float(np.linalg.norm(g))
        if norm > 0:
            outside = s - 1e-2 * probe.scale * g / norm  # below the minimum of <g, x> over the set
            assert not X.contains(outside, tol=probe.tol), f"{name}.contains is True at {_show(outside)}, outside"


#: check name -> check: what :func:`check_set` runs, in this order.
SET_CHECKS: dict[str, Callable[[_SetProbe], None]] = {
    "interface": _interface,
    "lmo_feasible": _lmo_feasible,
    "lmo_optimal": _lmo_optimal,
    "projection": _projection,
    "diameter": _diameter,
    "membership": _membership,
    "array_types": _array_types,
    "input_checks": _input_checks,
}


def check_set(
    domain: Set,
    constraints: Callable[[cp.Variable], list] | None = None,
    *,
    checks: Iterable[str] | None = None,
    directions: Iterable[Any] | None = None,
    points: Iterable[Any] | None = None,
    tol: float = 1e-6,
    seed: int = 0,
) -> None:
    """Check a set against the guarantees every method relies on; AssertionError names the one broken.

    What a set without ``project``, ``contains`` and ``cvxpy_constraints`` can be checked on is its LMO
    against itself (no point it returns for one direction may beat the one for another), its diameter, and
    the projection computed from its LMO against the LMO (no LMO point may lie nearer to p across the
    supporting hyperplane at project(p)).

    Parameters
    ----------
    domain : fc.Set
        The set, built.
    constraints : callable, optional
        ``constraints(var) -> list`` of CVXPY constraints describing the set independently of its code (a
        lifted form, another formulation); the LMO and the projection are compared with CVXPY's answers over
        them, as over the set's own ``cvxpy_constraints`` when it has them.
    checks : iterable of str, optional
        Names from :data:`SET_CHECKS` to run; default all: ``interface`` (shape, diameter, optional methods
        raise DomainError), ``lmo_feasible``, ``lmo_optimal``, ``projection`` (its own ``project``, or the one
        computed from its LMO), ``diameter``, ``membership``, ``array_types`` (numpy and torch, float32 and
        float64, CUDA where present), ``input_checks`` (a wrong shape or a NaN is a DomainError).
    directions, points : iterables of arrays, optional
        The directions the LMO is checked on (default: three random ones and eleven degenerate ones: zero,
        constant, ties, repeated extremes) and the points projected (default: far, near, zero, constant).
    tol : float
        Relative tolerance: on <g, x> relative to ||g|| times the diameter, on distances relative to the
        diameter.  CVXPY's solvers are accurate to about 1e-8, so 1e-6 leaves them room.
    seed : int
        Seed of the random directions and points.
    """
    probe = _SetProbe(domain, constraints, directions, points, tol, seed)
    names = list(SET_CHECKS) if checks is None else list(checks)
    unknown = [n for n in names if n not in SET_CHECKS]
    if unknown:
        raise DomainError(f"check_set's checks has unknown names {unknown}; the checks are {', '.join(SET_CHECKS)}")
    for name in names:
        SET_CHECKS[name](probe)


class SetCheck:
    """One check of :func:`check_set` with its options, called on a set: what :func:`parametrize_set_checks`
    hands each test."""

    def __init__(self, name: str, **options: Any):
        if name not in SET_CHECKS:
            raise DomainError(f"unknown set check {name!r}; the checks are {', '.join(SET_CHECKS)}")
        self.name, self.options = name, options

    def __call__(self, domain: Set) -> None:
        check_set(domain, checks=[self.name], **self.options)

    def __repr__(self) -> str:
        return self.name


def parametrize_set_checks(sets: Mapping[str, Any] | Iterable[Any]) -> Any:
    """A ``pytest.mark.parametrize`` over (set, check): one test per set and check of :func:`check_set`.

    ``sets`` is a list of sets, or a mapping of test ids to sets; a set may come as ``(set, options)``, the
    options being :func:`check_set`'s keyword arguments (``constraints``, ``tol``, ``checks``, ...)::

        @parametrize_set_checks({"ball": fc.L2Ball(3), "cross": (Cross(4), {"tol": 1e-8})})
        def test_sets(domain, check):
            check(domain)
    """
    import pytest  # only the tests that use it need pytest

    items = list(sets.items()) if isinstance(sets, Mapping) else [(None, entry) for entry in sets]
    params = []
    for key, entry in items:
        domain, options = entry if isinstance(entry, tuple) else (entry, {})
        if not isinstance(domain, Set):
            raise DomainError(f"parametrize_set_checks takes fullcomp sets (fc.Set), got {domain!r}")
        options = dict(options)
        wanted = options.pop("checks", None)
        for name in SET_CHECKS if wanted is None else wanted:
            params.append(pytest.param(domain, SetCheck(name, **options), id=f"{key or repr(domain)}-{name}"))
    return pytest.mark.parametrize(("domain", "check"), params)


__all__ += ["check_set", "parametrize_set_checks", "set_directions", "SET_CHECKS", "SetCheck"]

__all__ += ["check_risk", "parametrize_risk_checks", "risk_points", "RISK_CHECKS", "RISK_RTOL"]
