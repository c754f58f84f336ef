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


def solve(problem: cp.Problem, what: str, *, solvers: tuple[str, ...] = ("CLARABEL", "SCS")) -> str:
    """Solve ``problem`` with the first solver that reaches OPTIMAL; return its name.

    Raises :class:`SolverError` naming ``what`` and every status seen.  An
    infeasible or unbounded status is returned to the caller untouched through
    the error's message so the caller can translate it (an empty set, an
    unbounded set).
    """
    statuses = []
    for name in solvers:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kwargs = {"eps": 1e-9, "max_iters": 100_000} if name == "SCS" else {}
                problem.solve(solver=name, **kwargs)
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
        "Check that the set is non-empty and bounded and that the data are finite."
    )


def final_status(problem: cp.Problem) -> str:
    return str(problem.status)
