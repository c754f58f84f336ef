"""The declared problem min_{x in X} F(f(x), x), validated once at construction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cvxpy as cp
import numpy as np
import torch
from cvxpy.transforms.partial_optimize import PartialProblem

from fullcomp.errors import DomainError, ModelError, OracleError
from fullcomp.model.placeholder import is_placeholder
from fullcomp.sets.atoms import Atom, DenseAtom, Entries, ZeroAtom
from fullcomp.sets.base import Set

Sampler = Callable[[torch.Generator], Any]
InnerMap = Callable[[torch.Tensor, Any], torch.Tensor]


def free_variables(expr: cp.Expression) -> list[cp.Variable]:
    """Variables of ``expr``, leaving out those a partial minimization optimizes away."""
    if isinstance(expr, PartialProblem):
        return list(expr.dont_opt_vars)
    if isinstance(expr, cp.Variable):
        return [expr]
    seen: dict[int, cp.Variable] = {}
    for arg in getattr(expr, "args", []):
        for v in free_variables(arg):
            seen[v.id] = v
    return list(seen.values())


def non_dcp_atom(expr: cp.Expression) -> cp.Expression:
    """The deepest sub-expression that breaks the DCP rules (or the root if it is concave)."""
    for arg in getattr(expr, "args", []):
        if isinstance(arg, cp.Expression) and not arg.is_dcp():
            return non_dcp_atom(arg)
    return expr


def describe_atom(expr: cp.Expression) -> str:
    text = str(expr)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"atom {type(expr).__name__} in `{text}`"


class Outer:
    """The outer function F(u, x): the user's CVXPY expression plus its placeholder.

    ``value(u, x)`` evaluates F numerically; ``depends_on_x`` tells whether F
    reads the domain variable (then only the conic GLMO route applies).
    """

    def __init__(self, expr: Any, domain: Set):
        if not isinstance(expr, cp.Expression):
            raise ModelError(
                f"outer must be a CVXPY expression in fc.inner_value(n), e.g. cp.max(u); got {type(expr).__name__}"
            )
        if expr.size != 1:
            raise ModelError(f"outer must be scalar; it has shape {expr.shape} (wrap it in cp.max, cp.sum, ...)")
        if not expr.is_convex():
            if expr.is_concave():
                raise ModelError(f"outer is concave, not convex ({describe_atom(expr)}); fullcomp minimizes a convex F")
            raise ModelError(
                f"outer is not convex under the DCP rules: {describe_atom(non_dcp_atom(expr))} "
                "receives an argument of the wrong curvature. Rewrite F with DCP atoms."
            )
        variables = free_variables(expr)
        holders = [v for v in variables if is_placeholder(v)]
        if not holders:
            raise ModelError("outer does not use the placeholder: write F in u = fc.inner_value(n), e.g. cp.max(u)")
        if len(holders) > 1:
            raise ModelError("outer uses more than one fc.inner_value placeholder; use a single one of size n")
        others = [v for v in variables if not is_placeholder(v) and v is not domain.variable]
        if others:
            raise ModelError(
                f"outer uses variable {others[0].name()} which is neither the placeholder nor domain.variable; "
                "write x-dependent terms in domain.variable"
            )
        for p in expr.parameters():
            if p.value is None:
                raise ModelError(f"outer uses parameter {p.name()} with no value; set it before building the problem")
        self.expr = expr
        self.u: cp.Variable = holders[0]
        self.n = int(self.u.shape[0])
        self.domain = domain
        self.depends_on_x = any(v is domain.variable for v in variables)

    def value(self, u: np.ndarray, x: np.ndarray | None = None) -> float:
        self.u.value = np.asarray(u, dtype=float)
        if self.depends_on_x:
            self.domain.variable.value = np.asarray(x, dtype=float).reshape(self.domain.shape)
        out = self.expr.value
        return float(np.asarray(out).reshape(()))


class CompositeProblem:
    """min over x in ``domain`` of F(f(x), x), with f(x) = E[inner(x, batch)].

    Parameters
    ----------
    outer : cvxpy.Expression
        Convex, scalar, written in ``fc.inner_value(n)`` and optionally in
        ``domain.variable``.
    inner : callable
        ``inner(x, batch) -> Tensor of shape (n,)``, differentiable in ``x``
        with ``torch.func``.  ``x`` has the domain's shape.
    domain : fullcomp set
        A compact convex set (``fc.Simplex``, ``fc.NuclearBall``, ...).
    sampler : callable, optional
        ``sampler(generator) -> batch``; ``None`` for a deterministic map
        (``batch`` is then ``None``).
    x0 : array or tensor, optional
        Start point in ``domain``; default the origin, or its projection.
    full_batch : optional
        A batch for which ``inner`` returns the exact f(x) (the whole data
        set); used by ``hmsfw(..., exact=True)`` and by :meth:`objective`.
    reads : int array, optional
        Declares that the inner map reads x only at these flat (row-major)
        entries; it is then called as ``inner(values, batch)`` with
        ``values = x.reshape(-1)[reads]``.  Jacobians, trackers and GLMO
        directions then live on these entries only (matrix completion reads
        only observed ratings), and the nuclear-ball LMO becomes a sparse
        singular-pair computation.
    track : int array, optional
        Further entries whose values the solver keeps (e.g. validation and
        test ratings for evaluation callbacks); only with ``reads``.
    """

    def __init__(
        self,
        outer: cp.Expression,
        inner: InnerMap,
        domain: Set,
        sampler: Sampler | None = None,
        x0: Any = None,
        full_batch: Any = None,
        reads: Any = None,
        track: Any = None,
    ):
        if not isinstance(domain, Set):
            raise DomainError(
                "domain must be a fullcomp set (fc.Simplex, fc.L1Ball, fc.NuclearBall, ...), "
                f"got {type(domain).__name__}"
            )
        self.domain = domain
        self.outer = Outer(outer, domain)
        if not callable(inner):
            raise ModelError(f"inner must be a callable inner(x, batch) -> Tensor, got {type(inner).__name__}")
        if sampler is not None and not callable(sampler):
            raise ModelError("sampler must be a callable sampler(generator) -> batch, or None")
        self.inner = inner
        self.sampler = sampler
        self.full_batch = full_batch
        if x0 is None and domain.contains_origin:
            # The origin, kept implicit: a structured problem at MovieLens scale never needs a dense start.
            self._x0 = None
        else:
            x0 = domain.default_point() if x0 is None else x0
            x0 = x0.detach().cpu().numpy() if isinstance(x0, torch.Tensor) else np.asarray(x0, dtype=float)
            if x0.shape != domain.shape:
                raise DomainError(f"x0 has shape {x0.shape} but the domain has shape {domain.shape}")
            if not domain.contains(x0, tol=1e-6):
                raise DomainError("x0 is not in the domain; pass a feasible start or domain.project(x0)")
            self._x0 = x0
        self.reads = None if reads is None else self._entries(reads, "reads")
        if track is not None and self.reads is None:
            raise ModelError("track= needs reads=: it lists extra entries kept by the structured path")
        extra = np.zeros(0, dtype=np.int64) if track is None else self._entries(track, "track").flat
        self.kept_entries = (
            None if self.reads is None else Entries(np.concatenate([self.reads.flat, extra]), domain.shape)
        )
        self._check_inner()

    def _entries(self, index: Any, name: str) -> Entries:
        flat = np.asarray(index.flat if isinstance(index, Entries) else index)
        if flat.ndim != 1 or flat.size == 0 or not np.issubdtype(flat.dtype, np.integer):
            raise ModelError(f"{name} must be a non-empty 1-D integer array of flat (row-major) indices into x")
        if flat.min() < 0 or flat.max() >= self.domain.size:
            raise ModelError(f"{name} has indices outside 0..{self.domain.size - 1} (x has shape {self.domain.shape})")
        return Entries(flat, self.domain.shape)

    def read(self, x: np.ndarray | torch.Tensor) -> Any:
        """What the inner map receives for a dense point x: x itself, or its values at ``reads``."""
        if self.reads is None:
            return x
        return x.reshape(-1)[torch.as_tensor(self.reads.flat) if isinstance(x, torch.Tensor) else self.reads.flat]

    @property
    def x0(self) -> np.ndarray:
        """The start point as a dense array (built on first use when it is the implicit origin)."""
        if self._x0 is None:
            self._x0 = np.zeros(self.domain.shape)
        return self._x0

    def x0_at(self, entries: Entries) -> np.ndarray:
        """The start point's values at ``entries``, without a dense array when it is the origin."""
        return np.zeros(len(entries)) if self._x0 is None else self._x0.reshape(-1)[entries.flat]

    def start_atom(self) -> Atom:
        """The start point as an atom (seeds column generation on the structured path)."""
        return ZeroAtom(self.domain.shape) if self._x0 is None else DenseAtom(self._x0)

    @property
    def n(self) -> int:
        return self.outer.n

    @property
    def stochastic(self) -> bool:
        return self.sampler is not None

    def sample(self, generator: torch.Generator) -> Any:
        return None if self.sampler is None else self.sampler(generator)

    def _check_inner(self) -> None:
        from fullcomp.oracles import check_inner_output

        batch = self.sample(torch.Generator().manual_seed(0))
        with torch.no_grad():
            if self.reads is None:
                start = torch.as_tensor(self.x0, dtype=torch.float64)
            else:
                start = torch.as_tensor(self.x0_at(self.reads), dtype=torch.float64)
            out = self.inner(start, batch)
        try:
            check_inner_output(out, self.n, where="at x0 while building the problem")
        except OracleError as exc:  # a malformed declaration, not a failure during a run
            raise ModelError(str(exc)) from None

    def objective(self, x: Any, batch: Any = None) -> float:
        """phi(x) = F(f(x), x) with f from ``batch`` (default ``full_batch``); x is a dense point."""
        if batch is None:
            batch = self.full_batch
        if batch is None and self.stochastic:
            raise ModelError("objective of a stochastic problem needs a batch or CompositeProblem(full_batch=...)")
        xt = torch.as_tensor(np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x), dtype=torch.float64)
        with torch.no_grad():
            u = self.inner(self.read(xt), batch).detach().cpu().numpy()
        return self.outer.value(u, xt.numpy())
