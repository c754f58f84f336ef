"""The method contract as a test a user can run on a method of their own: ``check_method(name)``.

Like scikit-learn's ``check_estimator``, :func:`check_method` runs the guarantees every built-in method
keeps on a registered method: bad hyperparameters generated from its declared constraints are refused
naming the option, seeds reproduce, the result has the common schema and survives save and load, an
interrupted run resumes exactly from its checkpoint and a foreign checkpoint is refused, float32 data
run in float32, and :class:`fullcomp.Stepper` takes the iterates of :func:`fullcomp.solve`.  It raises
``AssertionError`` naming the guarantee that failed.

The small problems it runs on are public too (:func:`composite_problem`, :func:`dc_problem`,
:func:`minimax_problem`); the project's own tests use the same ones.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cvxpy as cp
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


__all__ = ["check_method", "composite_problem", "dc_problem", "minimax_problem"]
