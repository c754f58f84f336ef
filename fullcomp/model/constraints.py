"""Constraints on the inner value u = f(x) (and on x) declared with the problem: min F(f(x), x) s.t. G(f(x), x) <= 0.

A constraint is a DCP CVXPY constraint (``<=``, ``>=`` or ``==``) written in the placeholder
``u = fc.inner_value(n)`` and optionally in ``domain.variable``, e.g. a demographic-parity gap on two group
means that are entries of u: ``cp.abs(u[1] - u[2]) <= 0.05``.  The GLMO keeps each constraint on the
linearized value ``u = z + V (x - y)`` (the conic route); when the linearized constraints admit no point of
the domain at some step, it solves the elastic program instead,

    min  F(u, x) + penalty * sum(s)   s.t.  each constraint relaxed by a slack s >= 0,

and the run's history records the slack it needed (column ``glmo_slack``).  :func:`constraint_report` gives
each constraint's value and violation at a point, on the training data or on a batch the user passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cvxpy as cp
import numpy as np
import torch

from fullcomp.errors import ModelError
from fullcomp.model.placeholder import is_placeholder

#: The elastic program's price of one unit of linearized violation, in units of F (see :class:`Constraints`).
DEFAULT_PENALTY = 100.0
#: The CVXPY constraint classes kept: ``a <= b`` (and ``a >= b``) and ``a == b``.
KINDS = (cp.constraints.Inequality, cp.constraints.Equality)


@dataclass(frozen=True)
class ConstraintValue:
    """One constraint at a point: ``lhs`` and ``rhs`` of ``lhs <= rhs`` (or ``==``), arrays for a vector
    constraint, and ``violation``, the largest amount by which an entry breaks it (0 when it holds)."""

    name: str
    text: str
    lhs: np.ndarray
    rhs: np.ndarray
    violation: float

    @property
    def satisfied(self) -> bool:
        """Whether the constraint holds up to 1e-9."""
        return self.violation <= 1e-9

    def as_dict(self) -> dict:
        plain = [float(v) if np.ndim(v) == 0 else np.asarray(v).tolist() for v in (self.lhs, self.rhs)]
        lhs, rhs = plain
        return {"name": self.name, "constraint": self.text, "lhs": lhs, "rhs": rhs, "violation": self.violation}


class Constraints:
    """The constraints of a problem, with the elastic fallback's penalty.

    ``CompositeProblem(constraints=...)`` takes a list, a dict or this object.

    Parameters
    ----------
    constraints : list or dict of cvxpy constraints
        DCP ``<=``, ``>=`` or ``==`` constraints in the placeholder of F and
        optionally in ``domain.variable``; a dict names them (a list names
        them ``"constraint 0"``, ...).
    penalty : float, default 100
        The elastic program's price per unit of linearized violation (in
        units of F), used only at a step where the linearized constraints
        admit no point of the domain.  Above the constraints' Lagrange
        multipliers it leaves a feasible GLMO's answer unchanged (an exact
        penalty); it must be finite and > 0.
    """

    def __init__(self, constraints: Any, penalty: float = DEFAULT_PENALTY):
        if isinstance(constraints, Constraints):
            constraints, penalty = dict(zip(constraints.names, constraints.items)), constraints.penalty
        if isinstance(constraints, cp.constraints.constraint.Constraint):
            constraints = [constraints]
        if isinstance(constraints, Mapping):
            names, items = [str(k) for k in constraints], list(constraints.values())
        elif isinstance(constraints, Sequence) and not isinstance(constraints, str):
            names, items = [f"constraint {i}" for i in range(len(constraints))], list(constraints)
        else:
            raise ModelError(
                f"constraints must be a list or a dict of CVXPY constraints, got {type(constraints).__name__}"
            )
        try:
            penalty = float(penalty)
        except (TypeError, ValueError):
            raise ModelError(f"constraints' penalty must be a number > 0, got {penalty!r}") from None
        if not (math.isfinite(penalty) and penalty > 0):
            raise ModelError(f"constraints' penalty must be finite and > 0 (the elastic price), got {penalty}")
        self.names, self.items, self.penalty = names, items, penalty
        #: Whether a constraint reads domain.variable (then the GLMO's gap is the solver's accuracy).
        self.reads_x = False

    def bind(self, u: cp.Variable, x: cp.Variable) -> Constraints:
        """Check every constraint against F's placeholder ``u`` and the domain's variable ``x``; self."""
        for name, item in zip(self.names, self.items):
            check_constraint(name, item, u, x)
            self.reads_x |= any(v is x for v in item.variables())
        self.u, self.x = u, x
        return self

    def __len__(self) -> int:
        return len(self.items)

    def relaxed(self) -> tuple[list[cp.Constraint], cp.Expression]:
        """The constraints each relaxed by a slack >= 0 (one per entry), and the slacks' sum."""
        out, total = [], 0
        for item in self.items:
            gap = item.expr  # lhs - rhs for both kinds
            s = cp.Variable(gap.shape, nonneg=True)
            out.append((gap if isinstance(item, cp.constraints.Inequality) else cp.abs(gap)) <= s)
            total = total + cp.sum(s)
        return out, total

    def values(self, u: np.ndarray, x: np.ndarray | None = None) -> list[ConstraintValue]:
        """Each constraint at the inner value ``u`` (and the point ``x`` where a constraint reads it)."""
        self.u.save_value(np.asarray(u, dtype=np.float64).reshape(self.u.shape))
        if self.reads_x:
            if x is None:
                raise ModelError("a constraint reads domain.variable: pass the point x to evaluate it")
            self.x.value = np.asarray(x, dtype=np.float64).reshape(self.x.shape)
        return [_value(name, item) for name, item in zip(self.names, self.items)]


def _value(name: str, item: cp.Constraint) -> ConstraintValue:
    lhs, rhs = (np.asarray(a.value, dtype=np.float64) for a in item.args)
    gap = lhs - rhs
    broken = gap if isinstance(item, cp.constraints.Inequality) else np.abs(gap)
    return ConstraintValue(name, str(item), lhs, rhs, float(max(np.max(broken, initial=0.0), 0.0)))


def check_constraint(name: str, item: Any, u: cp.Variable, x: cp.Variable) -> None:
    """ModelError naming ``name`` unless ``item`` is a DCP ``<=``/``>=``/``==`` constraint in ``u`` and ``x``."""
    if not isinstance(item, KINDS):
        kind = type(item).__name__
        raise ModelError(
            f"{name} must be a CVXPY constraint written with <=, >= or == (e.g. cp.abs(u[1] - u[2]) <= 0.05), "
            f"got {kind}"
        )
    if not item.is_dcp():
        raise ModelError(
            f"{name} ({item}) is not DCP: a <= constraint needs a convex left side and a concave right side, "
            "== needs affine sides; rewrite it with DCP atoms"
        )
    variables = item.variables()
    for v in variables:
        if v is x or v is u:
            continue
        what = "another fc.inner_value placeholder than F's" if is_placeholder(v) else f"variable {v.name()}"
        raise ModelError(
            f"{name} ({item}) uses {what}, which is neither F's placeholder u nor domain.variable; write the "
            "constraint in those two"
        )
    if not variables:
        raise ModelError(f"{name} ({item}) reads neither u nor domain.variable; drop it or write it in them")
    for p in item.parameters():
        if p.value is None:
            raise ModelError(f"{name} uses parameter {p.name()} with no value; set it before building the problem")


def declared(constraints: Any, u: cp.Variable, x: cp.Variable) -> Constraints | None:
    """The problem's constraints checked against F's placeholder and the domain's variable (None: none)."""
    if constraints is None:
        return None
    found = Constraints(constraints).bind(u, x)
    return found if len(found) else None


def constraint_report(problem: Any, x: Any, batch: Any = None) -> list[ConstraintValue]:
    """Each of the problem's constraints at the point ``x``, with u = f(x) on ``batch``.

    Parameters
    ----------
    problem : CompositeProblem
        A problem declared with ``constraints=``.
    x : array, tensor, module or dict of tensors
        A point of the domain (``result.x``), in any form ``problem.objective`` takes.
    batch : batch, optional
        The data to evaluate f on, e.g. a held-out set in the sampler's batch
        format; default the problem's ``full_batch`` (or ``None`` for a
        deterministic map).

    Returns
    -------
    list of ConstraintValue
        In declaration order: name, text, ``lhs`` and ``rhs`` values and the
        violation (0 when the constraint holds).

    Raises
    ------
    ModelError
        The problem has no constraints, or it is stochastic and neither
        ``batch`` nor ``full_batch`` gives the data.
    """
    found = getattr(problem, "constraints", None)
    if found is None:
        raise ModelError("constraint_report needs a problem declared with CompositeProblem(constraints=[...])")
    u, dense = inner_at(problem, x, batch, "constraint_report")
    return found.values(u, dense)


def inner_at(problem: Any, x: Any, batch: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(f(x) on ``batch`` or ``full_batch``, x as a dense float64 array)."""
    if batch is None:
        batch = problem.full_batch
    if batch is None and problem.stochastic:
        raise ModelError(f"{what} of a stochastic problem needs batch= or CompositeProblem(full_batch=...)")
    if problem.params is not None:
        x = problem.params.flatten(x, "x")
    xt = torch.as_tensor(np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x), dtype=problem.dtype)
    with torch.no_grad():
        u = problem.inner(problem.read(xt.to(problem.device)), batch)
    return u.detach().cpu().double().numpy(), xt.double().numpy()


def final_values(problem: Any, x: Any, z: Any) -> list[ConstraintValue] | None:
    """The constraints at a run's final point: on ``full_batch`` (or the deterministic map) when the problem
    has it, else at the run's tracked estimate ``z`` of f(x)."""
    found = getattr(problem, "constraints", None)
    if found is None:
        return None
    if x is not None and (problem.full_batch is not None or not problem.stochastic):
        return constraint_report(problem, x)
    z = z.detach().cpu().double().numpy() if isinstance(z, torch.Tensor) else np.asarray(z, dtype=np.float64)
    return found.values(z, None if x is None else np.asarray(x, dtype=np.float64))


def check_method(method: str, setup_module: str, problem: Any) -> None:
    """ModelError when a problem with constraints goes to a method that would ignore them."""
    if getattr(problem, "constraints", None) is not None and setup_module != "fullcomp.algorithms.hmsfw":
        raise ModelError(
            f"{method} does not keep the problem's constraints; solve it with hmsfw (or scfw, hmsfw-exact), "
            "whose GLMO keeps them, or write them as a penalty in F"
        )
