"""The reduction between a method's point and the values the inner map reads, in the CVXPY sense.

A problem without ``reads=`` is read whole; one with ``reads=`` is called on x's values at those entries, so
its Jacobians are n x |reads| and every model product runs on those entries.  A method keeps its point in one
of two layouts: ``"dense"`` (the whole flat point: a projection or an LMO over X needs it) or ``"kept"`` (the
values at ``reads`` followed by those at ``track``: HMSFW's atomic iterate).  :class:`EntryMap` is the one
place that knows which, and whether the entries are sharded over the ranks of a data-parallel job: methods
read, spread and total through it and never ask how many processes there are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fullcomp import distributed
from fullcomp.autodiff import LazyJacobian, check_inner_output, gradient
from fullcomp.errors import OptionError

LAYOUTS = ("dense", "kept")


class EntryMap:
    """``read`` (apply) takes a point to the values the map reads; ``adjoint`` (invert) takes a vector on those
    values back to a dense flat one; ``total`` completes a sum over the entries across the ranks.

    On sharded reads each rank reads its own entries: a product ``V step`` is a partial sum completed by
    :meth:`total`, and the adjoint gathers the ranks' values at their reads (as many numbers as they read, not
    an all-reduce of the whole point: 0.70 against 12.69 MB per update on 943 x 1682 with 100,000 ratings).
    """

    def __init__(self, problem: Any, device: Any, layout: str = "dense"):
        if layout not in LAYOUTS:
            raise OptionError(f"EntryMap: layout must be one of {LAYOUTS}, got {layout!r}")
        self.problem, self.layout = problem, layout
        self.entries = problem.reads  # None: the map reads the whole point
        self.sharded = bool(problem.sharded)
        self.size = problem.domain.size
        #: How many values the map reads, and the shape it receives them in.
        self.width = self.size if self.entries is None else len(self.entries)
        self.shape = problem.domain.shape if self.entries is None else (self.width,)
        self.index = None
        if self.entries is not None and layout == "dense":
            self.index = torch.as_tensor(self.entries.flat, device=device)
        # Every rank's read positions (disjoint, gathered once, in rank order) and their counts: where
        # adjoint() puts the ranks' values.
        self._every_read: tuple[torch.Tensor, list[int]] | None = None
        if self.sharded and self.index is not None:
            every = distributed.gather_parts(self.index)
            self._every_read = (torch.cat(every), [len(i) for i in every])

    def read(self, point: torch.Tensor) -> torch.Tensor:
        """The values of a flat point (or step) the map reads."""
        if self.entries is None:
            return point
        return point[: self.width] if self.layout == "kept" else point[self.index]

    def total(self, partial: Any) -> Any:
        """A sum over the read entries, completed over the ranks when each holds its own."""
        return distributed.total(partial) if self.sharded else partial

    def image(self, V: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """V step: the model's change of f along a step of the point."""
        return self.total(V @ self.read(step))

    def norm(self, M: torch.Tensor | LazyJacobian) -> torch.Tensor:
        """The Frobenius norm of a matrix on the read entries (a Jacobian), over every rank's entries."""
        norm = M.norm() if isinstance(M, LazyJacobian) else torch.linalg.norm(M)
        return self.total(norm**2).sqrt() if self.sharded else norm

    def gram(self, V: torch.Tensor) -> torch.Tensor:
        """V V^T (n x n) over every rank's entries."""
        return self.total(V @ V.T)

    def spread(self, v: torch.Tensor) -> torch.Tensor:
        """A vector on the read entries as a dense flat vector (zero elsewhere)."""
        if self.index is None:
            return v
        return torch.zeros(self.size, dtype=v.dtype, device=v.device).index_add(0, self.index, v)

    def adjoint(self, V: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """V^T w as a dense flat vector: on sharded reads the ranks gather their parts, the same bits as the
        sum since each entry is one rank's."""
        if self._every_read is None:
            return self.spread(V.T @ w)
        index, counts = self._every_read
        values = torch.cat(distributed.gather_parts(V.T @ w, counts))
        return torch.zeros(self.size, dtype=V.dtype, device=V.device).index_add(0, index, values)

    def chain_rule(self, V: torch.Tensor, g: Any) -> torch.Tensor:
        """V^T g_u + g_x as a dense flat vector: the (sub)gradient of x -> F(z + V (x - y), x) at x = y."""
        d = self.adjoint(V, torch.as_tensor(g.u, dtype=V.dtype, device=V.device))
        if g.x is not None:
            d = d + torch.as_tensor(g.x, dtype=V.dtype, device=V.device)
        return d

    def call(self, values: torch.Tensor, batch: Any, dtype: torch.dtype, where: str) -> torch.Tensor:
        """f~ on one batch at the values the map reads, without a Jacobian, averaged over the ranks."""
        with torch.no_grad():
            out = self.problem.inner(values.reshape(self.shape), batch)
        return self.mean(check_inner_output(out, self.problem.n, where).detach().to(dtype))

    def pullback(
        self, point: torch.Tensor, batch: Any, dtype: torch.dtype, where: str
    ) -> tuple[torch.Tensor, Callable[[Any], torch.Tensor]]:
        """(f~ at a flat point on one batch, w -> J^T w): the value, and the gradient of <w, f~> in the flat
        point by one backward pass through the same call (cheaper than the n rows of J when only one
        combination of them is needed, as for a gradient of F(f(x))); both averaged over the ranks."""
        point = point.detach().requires_grad_(True)
        with torch.enable_grad():
            out = self.problem.inner(self.read(point).reshape(self.shape), batch)
            out = check_inner_output(out, self.problem.n, where)
        value = self.mean(out.detach().to(dtype))

        def vjp(w: Any) -> torch.Tensor:
            grad = None
            if out.requires_grad:  # a map constant in x (or one that detached it) has a zero gradient
                with torch.enable_grad():
                    (grad,) = gradient((out * torch.as_tensor(w, dtype=out.dtype, device=out.device)).sum(), (point,))
            grad = torch.zeros_like(point) if grad is None else grad
            return self.mean(grad.detach().to(dtype))

        return value, vjp

    def mean(self, t: torch.Tensor) -> torch.Tensor:
        """The ranks' mean of a quantity each rank computes on its own batch (itself in one process)."""
        return distributed.mean(t)[0]

    def rank_share(self, t: torch.Tensor) -> torch.Tensor:
        """A rank's contribution to the ranks' mean of a quantity on the read entries: on sharded entries the
        other ranks' vanish here, so it is this rank's own over their number; else the mean itself."""
        if self.sharded:
            return t / distributed.world().size
        return self.mean(t)


__all__ = ["EntryMap", "LAYOUTS"]
