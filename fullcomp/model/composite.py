"""The declared problem min_{x in X} F(f(x), x), validated once at construction."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any

import cvxpy as cp
import numpy as np
import torch
from cvxpy.transforms.partial_optimize import PartialProblem

from fullcomp.autodiff import call_checked, check_directional_derivative, check_inner_output, check_touched
from fullcomp.errors import DomainError, ModelError, OptionError, OracleError
from fullcomp.grouped import values_of
from fullcomp.model.calculus import solved_value
from fullcomp.model.captured import captured, data_device, floating_dtypes
from fullcomp.model.constraints import declared
from fullcomp.model.params import Params
from fullcomp.model.placeholder import is_placeholder
from fullcomp.persample import ALL_ROWS, PerSample
from fullcomp.sets.atoms import Atom, DenseAtom, Entries, ZeroAtom
from fullcomp.sets.balls import NuclearBall
from fullcomp.sets.base import Set
from fullcomp.sets.product import Product

Sampler = Callable[[torch.Generator], Any]
InnerMap = Callable[[torch.Tensor, Any], torch.Tensor]

INNER_SIGNATURE = "inner(x, batch) -> Tensor of shape (n,)"
#: The signature of a map declared on a module (or a dict of tensors): it receives the network, not a vector.
MODULE_SIGNATURE = "inner(net, batch) -> Tensor of shape (n,)"
SAMPLER_SIGNATURE = "sampler(generator) -> batch"


# ---- the data's dtype -----------------------------------------------------------------------------


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


def _verb(source: str) -> str:
    return "are" if source.endswith("data") else "is"


class Outer:
    """The outer function F(u, x): the user's CVXPY expression plus its placeholder.

    ``value(u, x)`` evaluates F numerically (a risk's declared value where CVXPY would evaluate F by a
    solve, see :mod:`fullcomp.model.calculus`); ``depends_on_x`` tells whether F reads the domain variable
    (then only the conic GLMO route applies).
    """

    #: The problem's constraints on u (and x), which the GLMO keeps (:mod:`fullcomp.model.constraints`).
    constraints: Any = None

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
        self._solved_value = solved_value(expr)

    @functools.cached_property
    def linear(self) -> tuple[np.ndarray, float] | None:
        """(a, b) with F(u) = a @ u + b when F is affine in the placeholder alone, else None.

        Read off F at 0 and at the unit vectors: CVXPY certifies affinity, and the GLMO of an affine F
        is a single LMO.
        """
        if self.depends_on_x or not self.expr.is_affine():
            return None
        base = self._evaluate(np.zeros(self.n))
        a = np.array([self._evaluate(np.eye(1, self.n, i)[0]) - base for i in range(self.n)])
        return a, base

    def value(self, u: np.ndarray, x: np.ndarray | None = None) -> float:
        linear = self.linear
        if linear is not None:
            return float(linear[0] @ np.asarray(u, dtype=float).reshape(-1) + linear[1])
        return self._evaluate(u, x)

    def _evaluate(self, u: np.ndarray, x: np.ndarray | None = None) -> float:
        u = np.asarray(u, dtype=float)
        if u.shape != (self.n,):
            raise ModelError(f"F's placeholder holds {self.n} values, got an array of shape {u.shape}")
        if self._solved_value is not None:
            return self._solved_value(u)
        # CVXPY's value setter validates (130 of 150 us for cp.max of 7 values, in every master iteration);
        # the placeholder has no attributes to check, so the value is stored as solvers store theirs.
        self.u.save_value(u)
        if self.depends_on_x:
            self.domain.variable.value = np.asarray(x, dtype=float).reshape(self.domain.shape)
        out = self.expr.value
        return float(np.asarray(out).reshape(()))


def on_reads(inner: InnerMap, touches: Callable[[Any], torch.Tensor]) -> InnerMap:
    """The map on all the entries read that a map on the entries a batch touches defines."""

    def inner_on_reads(values: torch.Tensor, batch: Any) -> torch.Tensor:
        return inner(values.index_select(0, touches(batch).to(values.device)), batch)

    return inner_on_reads


def on_params(inner: Callable[[Any, Any], torch.Tensor], params: Params) -> InnerMap:
    """The map on the flat vector that a map on a module (called through ``functional_call``) or on a dict of
    named tensors defines: ``inner(params.view(v), batch)``, the parameters views into v."""

    def inner_on_params(v: torch.Tensor, batch: Any) -> torch.Tensor:
        return inner(params.view(v), batch)

    return inner_on_params


def as_values(inner: InnerMap) -> InnerMap:
    """The map giving the tensor of its values where the declared one returns ``fc.Grouped`` (the group
    means); a tensor passes through as it is."""

    @functools.wraps(inner)
    def inner_values(x: Any, batch: Any) -> torch.Tensor:
        return values_of(inner(x, batch))

    return inner_values


def checked_domain(domain: Any) -> Set:
    if not isinstance(domain, Set):
        raise DomainError(
            f"domain must be a fullcomp set (fc.Simplex, fc.L1Ball, fc.NuclearBall, ...), got {type(domain).__name__}"
        )
    return domain


def per_sample_parts(
    rows: Any, n: int, sampler: Sampler | None, full_batch: Any, x0: Any, reads: Any
) -> tuple[Any, Sampler | None, Any]:
    """The map, sampler and full batch of a problem on ``fc.PerSample``: the losses of a batch's rows, the
    declaration's draw of row indices unless the user gives a sampler, and every row (:data:`ALL_ROWS`).
    Any other ``inner`` comes back with the sampler and full batch as they were."""
    if not isinstance(rows, PerSample):
        return rows, sampler, full_batch
    if n != rows.n:
        raise ModelError(
            f"outer is written in fc.inner_value({n}) but the fc.PerSample has {rows.n} rows (one value per "
            f"row): declare u = fc.inner_value({rows.n})"
        )
    if full_batch is not None:
        raise ModelError("full_batch is every row of a fc.PerSample (fullcomp evaluates them in chunks); leave it out")
    if reads is not None or isinstance(x0, (torch.nn.Module, Mapping)):
        raise ModelError(
            "fc.PerSample takes a tensor variable x (its loss receives x and the rows); reads=, touches= and a "
            "module or dict x0 do not apply"
        )
    return rows.batch_values, rows.draw if sampler is None else sampler, ALL_ROWS


class CompositeProblem:
    """min over x in ``domain`` of F(f(x), x), with f(x) = E[inner(x, batch)].

    Parameters
    ----------
    outer : cvxpy.Expression
        Convex, scalar, written in ``fc.inner_value(n)`` and optionally in
        ``domain.variable``.
    inner : callable
        ``inner(x, batch) -> Tensor of shape (n,)``, differentiable in ``x``
        by torch autograd.  ``x`` has the domain's shape.  With ``x0`` an
        ``nn.Module``, ``inner(net, batch)`` receives the module with the
        iterate as its parameters (call ``net(inputs)``); with ``x0`` a dict of
        tensors, a dict of views into the iterate.  Or a ``fc.PerSample``
        (one loss per row of a data set, n = its number of rows): the sampler
        then draws row indices, a batch's map gives its rows' losses, the full
        batch is every row, and the Jacobian's rows are per-sample gradients
        (``problem.per_sample`` holds the declaration, None otherwise).
    domain : fullcomp set
        A compact convex set (``fc.Simplex``, ``fc.NuclearBall``, ...).
    sampler : callable, optional
        ``sampler(generator) -> batch``; ``None`` for a deterministic map
        (``batch`` is then ``None``).
    x0 : array, tensor, torch.nn.Module or dict of tensors, optional
        Start point in ``domain``; default the origin, or its projection.  A
        module (or a dict of named tensors) makes the variable x the flat
        vector of its parameters, in ``named_parameters()`` order:
        ``domain`` is then a set of that shape, e.g. a named ``fc.Product``
        with one block per parameter (``fc.layer_domains``); the map is
        called through ``torch.func.functional_call``, buffers (batch-norm
        running statistics) passed through; :meth:`parameters` and
        :meth:`load_into` give a flat point (``result.x``) back by name.
        See the "Training a network" guide.
    full_batch : batch, optional
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
    touches : callable, optional
        ``touches(batch) -> 1-D integer tensor`` of positions into ``reads``
        (repeats allowed): the entries a batch reads.  ``inner`` is then
        written on those values only, ``inner(values, batch)`` with ``values
        = x.reshape(-1)[reads][touches(batch)]``, so a sampled Jacobian has
        one column per touched entry instead of ``len(reads)`` (a batch of
        7 x 1024 ratings touches 7,168 of 8,000,000), and trackers and the
        GLMO update on those columns.  Only with ``reads``.
    sharded : bool, default False
        In a distributed job, ``reads`` are this rank's own entries: whole
        rows of a matrix (or whole columns), disjoint from the other ranks',
        and the sampler draws batches that read only them; ``inner`` returns
        this rank's share of f, so that the mean over the ranks is f.
        Trackers, directions and the iterate then stay on the rank's entries;
        only n-vectors, the column-generation master's images and Lanczos Q-
        (or P-) vectors cross ranks (see docs/distributed.md).  Needs
        ``reads`` and a ``fc.NuclearBall`` domain.
    dtype : torch floating dtype, optional
        The dtype of the problem's data, and so of the point the inner map
        receives.  Default: inferred from the floating tensors in ``x0`` (when
        a tensor), the sampled batch, ``full_batch`` and the tensors ``inner``
        and ``sampler`` capture (closure cells, globals, ``functools.partial``
        arguments, attributes of a callable object or bound method's owner);
        ``torch.float64`` when there are none.  Two different floating dtypes
        found are an error (convert the data, or pass ``dtype=``).
    check_gradient : bool, default True
        Compare, once at construction, the inner map's autodiff directional
        derivative near ``x0`` with central differences, so a map that breaks
        the autodiff graph (``.item()``, numpy, ``.detach()``) fails here.
        ``False`` skips it (an expensive map, or one deliberately
        non-differentiable there).
    constraints : list, dict or fc.Constraints, optional
        DCP constraints (``<=``, ``>=``, ``==``) in the placeholder of
        ``outer`` and optionally ``domain.variable``, kept by the GLMO of the
        Frank-Wolfe methods on the linearized u; see the "Constraints" guide
        and :func:`fullcomp.constraint_report`.
    """

    def __init__(
        self,
        outer: cp.Expression,
        inner: InnerMap | PerSample,
        domain: Set,
        sampler: Sampler | None = None,
        x0: Any = None,
        full_batch: Any = None,
        reads: Any = None,
        track: Any = None,
        touches: Callable[[Any], torch.Tensor] | None = None,
        sharded: bool = False,
        dtype: torch.dtype | None = None,
        check_gradient: bool = True,
        constraints: Any = None,
    ):
        self.domain = checked_domain(domain)
        self.outer = Outer(outer, domain)
        self.outer.constraints = declared(constraints, self.outer.u, domain.variable)
        #: The declaration of one loss per sample when ``inner`` is a ``fc.PerSample``, else None.
        self.per_sample = inner if isinstance(inner, PerSample) else None
        inner, sampler, full_batch = per_sample_parts(inner, self.outer.n, sampler, full_batch, x0, reads)
        if not callable(inner):
            raise ModelError(f"inner must be a callable inner(x, batch) -> Tensor, got {type(inner).__name__}")
        #: The variable's named tensors when x0 is a module or a dict of tensors (x is their flat vector), else None.
        self.params: Params | None = None
        if isinstance(x0, (torch.nn.Module, Mapping)):
            if reads is not None or touches is not None or sharded is True:
                raise ModelError(
                    "reads=, touches= and sharded= apply to a tensor variable; with x0 a module or a dict of "
                    "tensors, the variable is the flat vector of all the parameters"
                )
            self.params = Params(x0, "x0")
            self.params.check_domain(domain)
        if sampler is not None and not callable(sampler):
            raise ModelError("sampler must be a callable sampler(generator) -> batch, or None")
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ModelError(
                f"dtype must be a torch floating dtype (torch.float32 or torch.float64) or None, got {dtype!r}"
            )
        if not isinstance(check_gradient, bool):
            raise ModelError(f"check_gradient must be True or False, got {check_gradient!r}")
        if touches is not None and not callable(touches):
            raise ModelError(
                f"touches must be a callable touches(batch) -> positions into reads, got {type(touches).__name__}"
            )
        if touches is not None and reads is None:
            raise ModelError("touches= needs reads=: it gives the positions, among the entries read, a batch touches")
        #: The callables the user declared: what the data's dtype, device and hash are read from.
        self.maps = (inner,) if touches is None else (inner, touches)
        self.touches, self.inner_on_touched = touches, None if touches is None else inner
        #: The map on all of x's values at ``reads`` (or on x): what every method that needs no sparse
        #: Jacobian evaluates and differentiates.
        self.inner = inner if touches is None else on_reads(inner, touches)
        if self.params is not None:  # the map on the module (or dict) as a map on the flat vector
            self.inner = on_params(inner, self.params)
        #: The map as declared, on the flat point: it may return ``fc.Grouped``, which the Jacobian oracle
        #: differentiates group by group; ``inner`` gives the tensor of its values to everything else.
        self.inner_declared = self.inner
        self.inner = as_values(self.inner)
        self.sampler = sampler
        self.full_batch = full_batch
        given_x0 = x0
        #: Whether the user chose the start: methods that would discard x0 (gamma_0 = 1) keep it then.
        self.warm_start = x0 is not None
        if x0 is None and domain.contains_origin:
            # The origin, kept implicit: a structured problem at MovieLens scale never needs a dense start.
            self._x0 = None
        else:
            self._x0 = self._start_point(domain.default_point() if x0 is None else x0)
        if not isinstance(sharded, bool):
            raise ModelError(f"sharded must be True or False, got {sharded!r}")
        if sharded and (reads is None or not isinstance(domain, NuclearBall)):
            raise ModelError(
                "sharded=True needs reads= (this rank's entries) and an fc.NuclearBall domain; other sets' LMOs "
                "are not split over ranks"
            )
        self.sharded = sharded
        self.reads = None if reads is None else self._entries(reads, "reads")
        if track is not None and self.reads is None:
            raise ModelError("track= needs reads=: it lists extra entries kept by the structured path")
        extra = np.zeros(0, dtype=np.int64) if track is None else self._entries(track, "track").flat
        self.kept_entries = (
            None
            if self.reads is None
            else Entries(np.concatenate([self.reads.flat, extra]), domain.shape, sharded=sharded)
        )
        # The data's device: the probe runs there, with a generator there for the sampler (a map over CUDA
        # tensors is checked on the GPU).
        captures = [*map(captured, self.maps), full_batch] + ([captured(sampler)] if sampler is not None else [])
        if self.params is not None:
            captures.append(given_x0)  # a module's parameters and buffers, or the dict's tensors
        self.device = data_device(captures)
        generator = torch.Generator(device=self.device).manual_seed(0)
        batch = None if sampler is None else call_checked(sampler, (generator,), "sampler", SAMPLER_SIGNATURE)
        self._dtype, self._dtype_source = self._infer_dtype(dtype, given_x0, None if self.per_sample else batch)
        self._check_inner(batch, check_gradient)

    def _start_point(self, x0: Any) -> np.ndarray:
        if self.params is not None:  # a module, a dict by name or a flat vector
            x0 = self.params.flatten(x0, "x0").numpy()
        x0 = x0.detach().cpu().numpy() if isinstance(x0, torch.Tensor) else np.asarray(x0, dtype=float)
        if x0.shape != self.domain.shape:
            raise DomainError(f"x0 has shape {x0.shape} but the domain has shape {self.domain.shape}")
        if not self.domain.contains(x0, tol=1e-6):
            if self.params is not None:
                raise DomainError(
                    "x0's parameters are not in the domain; fc.make_feasible(module, domain) projects them "
                    f"into it in place{self._outside(x0)}"
                )
            raise DomainError("x0 is not in the domain; pass a feasible start or domain.project(x0)")
        return x0.astype(np.float64, copy=False)

    def _outside(self, x0: np.ndarray) -> str:
        """Which parameter of a start point lies outside its block of a named product, as ' (parameter ...)'."""
        if not isinstance(self.domain, Product) or self.domain.names is None:
            return ""
        for name, block, part in zip(self.domain.names, self.domain.blocks, self.domain.parts(x0)):
            if not block.contains(part, tol=1e-6):
                return f" (parameter {name!r} is outside its {type(block).__name__})"
        return ""

    def with_start(self, x0: Any) -> CompositeProblem:
        """The same problem started at ``x0`` (checked like the constructor's x0; the map is not re-checked)."""
        other = copy.copy(self)
        other._x0, other.warm_start = self._start_point(x0), True
        return other

    def _infer_dtype(self, dtype: torch.dtype | None, x0: Any, batch: Any) -> tuple[torch.dtype, str | None]:
        """The data's dtype and where it was seen (None: nothing floating was found, float64 by default)."""
        if dtype is not None:
            return dtype, f"declared by CompositeProblem(dtype={dtype})"
        sources = [("the inner map's data", [captured(f) for f in self.maps])]
        if self.sampler is not None:
            sources.append(("the sampler's data", captured(self.sampler)))
        sources += [("the sampled batch", batch), ("full_batch", self.full_batch)]
        if isinstance(x0, torch.Tensor):
            sources.append(("x0", x0))
        elif self.params is not None:
            sources.append(("the module's parameters" if self.params.kind == "module" else "x0's tensors", x0))
        dims: dict[torch.dtype, str] = {}  # dtype -> where a tensor with dims has it
        scalars: dict[torch.dtype, str] = {}  # ... a 0-d tensor
        for label, value in sources:
            for found, dimensioned in floating_dtypes(value).items():
                (dims if dimensioned else scalars).setdefault(found, label)
            if len(dims) > 1:
                break
        seen = dims or scalars
        if not seen:
            return torch.float64, None
        if len(seen) > 1:
            (first, where), (second, other) = list(seen.items())[:2]
            if where == other:
                clash = f"{where} mix {first} and {second}"
            else:
                clash = f"{where} {_verb(where)} {first} but {other} {_verb(other)} {second}"
            raise ModelError(
                f"{clash}; convert them to one dtype (e.g. tensor.to({first})) or pass "
                "CompositeProblem(dtype=...) if the inner map converts its data itself"
            )
        found, where = next(iter(seen.items()))
        return found, f"inferred from {where}"

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the problem's data (read-only): the point the inner map receives has it."""
        return self._dtype

    def check_run_dtype(self, dtype: Any) -> torch.dtype:
        """``dtype`` if a run may use it (None: the problem's dtype); OptionError naming the fix otherwise.

        A run must use the dtype of the data the problem was built on; a problem where no floating
        tensor was seen (nor ``dtype=`` declared) accepts any floating dtype.
        """
        if dtype is None:
            return self._dtype
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise OptionError(f"dtype must be a torch floating dtype (torch.float32 or torch.float64), got {dtype!r}")
        if self._dtype_source is not None and dtype != self._dtype:
            raise OptionError(
                f"dtype={dtype} but the problem's data are {self._dtype}: pass dtype={self._dtype} or build the "
                f"data in {str(dtype).removeprefix('torch.')} (the problem's dtype was {self._dtype_source})"
            )
        return dtype

    def _entries(self, index: Any, name: str) -> Entries:
        flat = np.asarray(index.flat if isinstance(index, Entries) else index)
        if flat.ndim != 1 or flat.size == 0 or not np.issubdtype(flat.dtype, np.integer):
            raise ModelError(f"{name} must be a non-empty 1-D integer array of flat (row-major) indices into x")
        if flat.min() < 0 or flat.max() >= self.domain.size:
            raise ModelError(f"{name} has indices outside 0..{self.domain.size - 1} (x has shape {self.domain.shape})")
        return Entries(flat, self.domain.shape, sharded=self.sharded)

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
    def constraints(self) -> Any:
        """The declared constraints (a :class:`~fullcomp.model.constraints.Constraints`), or None."""
        return self.outer.constraints

    @property
    def n(self) -> int:
        return self.outer.n

    @property
    def stochastic(self) -> bool:
        return self.sampler is not None

    def sample(self, generator: torch.Generator) -> Any:
        return None if self.sampler is None else self.sampler(generator)

    def _check_inner(self, batch: Any, check_gradient: bool) -> None:
        point = self.x0 if self.reads is None else self.x0_at(self.reads)
        start = torch.as_tensor(point, dtype=self._dtype, device=self.device)
        size = self.n if self.per_sample is None else self._probe_rows(batch)
        if self.touches is not None:
            index = call_checked(self.touches, (batch,), "touches", "touches(batch) -> positions into reads")
            try:
                check_touched(index, len(self.reads), "on the sampler's first batch")
            except OracleError as exc:
                raise ModelError(str(exc)) from None
        with torch.no_grad():
            try:
                if self.params is None:
                    out = call_checked(self.inner_declared, (start.clone(), batch), "inner", INNER_SIGNATURE)
                else:  # the user's map, so that a wrong signature is reported as such
                    view = self.params.view(start.clone())
                    out = call_checked(self.maps[0], (view, batch), "inner", MODULE_SIGNATURE)
            except RuntimeError as exc:
                if "dtype" not in str(exc):
                    raise
                # The variable is cast to the problem's dtype; data of another dtype fail inside torch.
                raise ModelError(
                    f"inner(x, batch) failed at x0 while building the problem: {exc}. The variable is "
                    f"{self._dtype} ({self._dtype_source or 'the default'}); build the map's data (and the "
                    "module) in that dtype, or pass dtype= to match them"
                ) from exc
        try:
            check_inner_output(values_of(out), size, where="at x0 while building the problem")
        except OracleError as exc:  # a malformed declaration, not a failure during a run
            raise ModelError(str(exc)) from None
        if check_gradient:
            check_directional_derivative(lambda v: self.inner(v, batch), start, self._entry_scale(start))
            if self.per_sample is not None:  # a closed-form jacobian= against the loss, on the probed rows
                self.per_sample.check_jacobian(start, batch, self._entry_scale(start))

    def _probe_rows(self, batch: Any) -> int:
        """The number of rows of the sampler's first draw, checked to be row indices: a per-sample map is
        probed on that batch only, so the check costs O(batch x d) whatever n."""
        try:
            return len(self.per_sample.index(batch, " on its first draw, while building the problem"))
        except OracleError as exc:
            raise ModelError(str(exc)) from None

    def _entry_scale(self, start: torch.Tensor) -> float:
        """A typical entry size near x0 (its rms, or the domain's when x0 is the origin) for the gradient check."""
        rms = float(start.double().pow(2).mean().sqrt()) if start.numel() else 0.0
        if rms > 0 and np.isfinite(rms):
            return rms
        diameter = float(self.domain.diameter)
        return diameter / (2 * np.sqrt(self.domain.size)) if np.isfinite(diameter) and diameter > 0 else 1.0

    def objective(self, x: Any, batch: Any = None) -> float:
        """phi(x) = F(f(x), x) with f from ``batch`` (default ``full_batch``); x is a dense point (or, when x0
        is a module or a dict of tensors, a module or a dict of its form)."""
        if batch is None:
            batch = self.full_batch
        if batch is None and self.stochastic:
            raise ModelError("objective of a stochastic problem needs a batch or CompositeProblem(full_batch=...)")
        if self.params is not None:  # a module, a dict by name or a flat vector
            x = self.params.flatten(x, "x")
        xt = torch.as_tensor(np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x), dtype=self._dtype)
        with torch.no_grad():
            u = self.inner(self.read(xt.to(self.device)), batch).detach().cpu().double().numpy()
        return self.outer.value(u, xt.double().numpy())

    # -- a module or a dict of tensors as the variable ----------------------------------------------------

    def _named(self, what: str) -> Params:
        if self.params is None:
            raise ModelError(
                f"{what} needs a problem declared on a module or a dict of tensors (x0=module); this problem's "
                f"variable is a tensor of shape {self.domain.shape}"
            )
        return self.params

    def parameters(self, x: Any = None) -> dict[str, torch.Tensor]:
        """The named tensors of a flat point, for a problem declared with ``x0`` a module or a dict of tensors.

        Parameters
        ----------
        x : tensor or array, optional
            A flat point of shape ``(size,)`` (``result.x``, or the iterate a
            callback sees); a module or a dict of the same form also goes.
            None: the start point.

        Returns
        -------
        dict of str to torch.Tensor
            One fresh tensor per parameter, by name and in its shape, in the
            dtype and on the device of ``x`` (the problem's dtype on the CPU
            otherwise).

        Raises
        ------
        ModelError
            The problem's variable is a tensor, or ``x`` has another shape
            (or other names).
        """
        params = self._named("parameters()")
        if x is None:
            x = self.x0
        dtype, device = (x.dtype, x.device) if isinstance(x, torch.Tensor) else (self._dtype, torch.device("cpu"))
        flat = params.flatten(x, "x").to(device=device, dtype=dtype)
        return {name: value.clone() for name, value in params.split(flat).items()}

    def load_into(self, module: torch.nn.Module, x: Any = None) -> torch.nn.Module:
        """Write a flat point into ``module``'s parameters in place, e.g. ``problem.load_into(model, result.x)``.

        Parameters
        ----------
        module : torch.nn.Module
            A module of the form of the problem's ``x0`` (the same parameter
            names and shapes): ``x0`` itself, or a copy of it.  Each
            parameter keeps its dtype and device; buffers are left as they are.
        x : tensor or array, optional
            A flat point of shape ``(size,)``, e.g. ``result.x``.  None: the
            start point.

        Returns
        -------
        torch.nn.Module
            ``module``, with its parameters overwritten.

        Raises
        ------
        ModelError
            The problem's variable is a tensor, ``x`` has another shape, or
            the module's parameters differ in names or shapes.
        """
        params = self._named("load_into()")
        return params.load_into(module, self.x0 if x is None else x)
