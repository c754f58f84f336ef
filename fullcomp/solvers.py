"""Solving compiled CVXPY programs: Clarabel first, SCS as the fallback."""

from __future__ import annotations

import warnings

import cvxpy as cp

from fullcomp.errors import SolverError

SOLVED = (cp.OPTIMAL,)
# Clarabel stops at these tolerances; a program solved to OPTIMAL is certified
# to within them, which is the gap we report for the conic route.
ABS_TOL = 1e-8
REL_TOL = 1e-8
#: Solvers tried in order, and the options each is called with.
SOLVERS: tuple[str, ...] = ("CLARABEL", "SCS")
SOLVER_OPTIONS: dict[str, dict] = {"CLARABEL": {}, "SCS": {"eps": 1e-9, "max_iters": 100_000}}


def solve(problem: cp.Problem, what: str, *, solvers: tuple[str, ...] | None = None, advice: str | None = None) -> str:
    """Solve ``problem`` with the first solver that reaches OPTIMAL; return its name.

    Raises :class:`SolverError` naming ``what`` and every status seen.  An
    infeasible or unbounded status is returned to the caller untouched through
    the error's message so the caller can translate it (an empty set, an
    unbounded set).  ``advice`` replaces the error's closing advice (about the set) where the program's
    failure is not the set's.
    """
    statuses = []
    for name in SOLVERS if solvers is None else solvers:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # warm_start=False: a re-used Clarabel object rounds differently from a fresh one, and
                # a resumed checkpoint must reproduce the uninterrupted trajectory exactly.
                problem.solve(solver=name, warm_start=False, **SOLVER_OPTIONS.get(name, {}))
        except cp.error.SolverError as exc:
            statuses.append(f"{name}: {exc}".splitlines()[0])
            continue
        statuses.append(f"{name}: {problem.status}")
        if problem.status in SOLVED:
            return name
        if problem.status in (cp.INFEASIBLE, cp.UNBOUNDED):
            break
    raise SolverError(
        f"{what} could not be solved ({'; '.join(statuses)}). "
        + (advice or "Check that the set is non-empty and bounded and that the data are finite.")
    )
