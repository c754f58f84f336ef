"""The inner map's value and Jacobian during a run, averaged over the ranks of a data-parallel job.

The derivatives themselves are :mod:`fullcomp.autodiff`'s; here they are taken at the run's point, on the
run's device and dtype, on the entries a batch touches, and averaged over the ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fullcomp import distributed
from fullcomp.autodiff import (
    OUT_OF_MEMORY,
    ROWS_BY_BACKWARD,
    BatchJacobian,
    LazyJacobian,
    all_finite,
    check_inner_output,
    check_touched,
    jacobian,
)
from fullcomp.errors import FullcompError, OracleError
from fullcomp.grouped import Grouped

#: How the ranks' Jacobians are averaged: "all" by one dense all-reduce; "touched" by sending only the columns
#: some rank's batch touched (a map reading many entries); "own" not at all, since on sharded entries the other
#: ranks' Jacobians vanish on this rank's columns and the mean is this rank's own divided by their number.
COLUMNS = ("all", "touched", "own")


class InnerOracle:
    """Evaluates ``inner(x, batch)`` and its Jacobian at x in ``dtype`` on ``device``.

    ``__call__`` returns ``(value, jacobian)`` with ``value`` of shape (n,) and
    ``jacobian`` of shape (n, d), d the number of entries of x (row-major), so
    trackers and GLMOs work on flat vectors whatever the shape of x.

    With ``touches`` (a map declared on the entries its batch touches), ``inner(x[touches(batch)], batch)``
    is differentiated in those values only and the Jacobian is a :class:`BatchJacobian` on them; in a
    distributed job that is not sharded it is made dense and averaged like any other.
    """

    def __init__(
        self,
        inner: Callable,
        n: int,
        shape: tuple[int, ...],
        device: Any,
        dtype: torch.dtype,
        columns: str = "all",
        touches: Callable[[Any], torch.Tensor] | None = None,
    ):
        if columns not in COLUMNS:
            raise ValueError(f"columns must be one of {COLUMNS}, got {columns!r}")
        self.inner, self.n, self.shape, self.touches = inner, n, shape, touches
        self.columns = columns
        self.device, self.dtype = torch.device(device), dtype

        self._k = 0

        flat_is_shape = touches is not None or len(shape) == 1  # the point needs no reshape

        def both(x_flat: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
            out = inner(x_flat if flat_is_shape else x_flat.reshape(shape), batch)
            if isinstance(out, Grouped):  # differentiated by its groups (autodiff.grouped_jacobian)
                if out.m != n:
                    check_inner_output(out.values(), n, f"at iteration {self._k}")
            elif not isinstance(out, torch.Tensor) or out.shape != (n,):
                check_inner_output(out, n, f"at iteration {self._k}")
            return out, out

        self._both = both
        #: Whether the rows are batched (more than ROWS_BY_BACKWARD outputs, until a map's backward pass turns
        #: out not to run under vmap; then one backward pass per row for the rest of the run).
        self._batched = n > ROWS_BY_BACKWARD
        self._parallel = distributed.world().parallel  # the job is joined before any run starts

    def _too_large(self, x_flat: torch.Tensor, k: int) -> str:
        """What to say when the Jacobian does not fit: its size, and the three ways to shrink it."""
        width = x_flat.numel()
        size = self.n * width * torch.finfo(self.dtype).bits // 8
        return (
            f"the Jacobian of inner(x, batch) at iteration {k} is a {self.n} x {width} array ({size / 2**20:.1f} "
            f"MiB in {self.dtype}, with the map's own intermediates per output), and memory ran out. Shrink it: "
            "declare reads= (the entries of x the map reads) or touches= (those one batch touches), draw a "
            "smaller batch, or run in float32"
        )

    def __call__(self, x_flat: torch.Tensor, batch: Any, k: int) -> tuple[torch.Tensor, Any]:
        self._k = k
        if self.touches is not None:
            try:
                index = self.touches(batch)
            except Exception as exc:
                raise OracleError(f"touches(batch) raised {type(exc).__name__} at iteration {k}: {exc}") from exc
            index = check_touched(index, x_flat.numel(), f"at iteration {k}").to(x_flat.device)
            columns, inverse = torch.unique(index, sorted=True, return_inverse=True)
            x_flat = x_flat.index_select(0, index)
        try:
            value, jac, self._batched = jacobian(lambda x: self._both(x, batch)[0], x_flat, self._batched)
        except FullcompError:  # already named by fullcomp (fc.optim's closure checks): not an autodiff failure
            raise
        except (RuntimeError, MemoryError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and OUT_OF_MEMORY.search(str(exc))):
                raise OracleError(self._too_large(x_flat, k)) from exc
            raise OracleError(
                f"inner(x, batch) failed under torch autodiff at iteration {k}: {exc}. The map must be a torch "
                "function of x returning a tensor of shape (n,) (no .item(), numpy or in-place ops on x)"
            ) from exc
        # The detailed checks run only when something is off.
        lazy = isinstance(jac, LazyJacobian)  # fc.optim's layer-by-layer Jacobian, in its factors
        finite = (all_finite(value) and jac.finite()) if lazy else all_finite(value, jac)
        if not (value.shape == (self.n,) and finite):
            where = f"at iteration {k}"
            check_inner_output(value, self.n, where)
            raise OracleError(f"the Jacobian of inner(x, batch) has NaN or Inf entries {where}")
        if value.dtype != self.dtype or jac.dtype != self.dtype:
            value, jac = value.to(self.dtype), jac.to(self.dtype)
        if isinstance(jac, LazyJacobian):
            if not self._parallel:
                return value, jac
            jac = jac.dense()
        jac = jac.reshape(self.n, -1)
        if self.touches is not None:  # repeated positions add up in their column
            sums = jac.new_zeros(self.n, columns.numel()).index_add_(1, inverse, jac)
            jac = BatchJacobian(columns, sums, int(self.shape[0]))
            if not self._parallel:
                return value, jac
            if self.columns == "own":
                share = BatchJacobian(columns, sums.div_(distributed.world().size), jac.width)
                return distributed.mean(value)[0], share
            jac = jac.dense()
        if not self._parallel:
            return value, jac
        if self.columns == "own":  # in place: a fresh (n, |reads|) array would page-fault its way in
            return distributed.mean(value)[0], jac.div_(distributed.world().size)
        if self.columns == "touched":
            return distributed.mean(value)[0], distributed.mean_columns(jac)
        return distributed.mean(value, jac)
