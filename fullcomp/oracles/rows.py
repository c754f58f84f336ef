"""The rows of a per-sample map's Jacobian, and the tracked model's updates on the sampled rows only.

A problem on ``fc.PerSample`` has u_i = loss(x, row i): row i of the Jacobian is the gradient of one loss.
A sampled batch of b row indices gives b values and a b x d block of rows (per-sample gradients, or the
user's closed form), never an n x d sample, let alone the n x n identity a plain map's Jacobian is taken
through; the full batch gives all n rows, computed ``chunk`` rows at a time.

The trackers then change the sampled rows only (index-based estimators, as LibAUC's SOX):
u_i <- (1 - w) u_i + w l_i(y) and V_i likewise for i in the batch; the other rows keep the values and
gradients of the last time they were drawn (they are not re-estimated), so an update costs O(b x d) besides
the GLMO.  A row drawn long ago describes the loss at an old point: the tracked model lags by about n / b
updates, which is the price of touching b of n rows.
"""

from __future__ import annotations

from typing import Any

import torch

from fullcomp.errors import OracleError
from fullcomp.persample import AllRows, PerSample

#: Rows per chunk of the full batch's pass: its per-sample intermediates are O(chunk x d).
CHUNK = 16384


class RowsOracle:
    """Values and Jacobian rows of a ``fc.PerSample`` map at a flat point.

    ``__call__(x_flat, batch, k)`` returns ``(values, rows, index)``: for a batch of row indices, the b
    values, the b x d rows and the index (b,); for the full batch (:data:`~fullcomp.persample.ALL_ROWS`) all
    n values, the n x d Jacobian (filled ``chunk`` rows at a time) and ``None``.
    """

    def __init__(self, rows: PerSample, shape: tuple[int, ...], dtype: torch.dtype, chunk: int = CHUNK):
        self.rows, self.shape, self.dtype, self.chunk = rows, tuple(shape), dtype, chunk

    def __call__(self, x_flat: torch.Tensor, batch: Any, k: int) -> tuple[torch.Tensor, torch.Tensor, Any]:
        x = x_flat.detach().reshape(self.shape)
        if not isinstance(batch, AllRows):
            index = self.rows.index(batch, f" at iteration {k}").to(x.device)
            values, jac = self._gradients(x, index, k)
            return values, jac, index
        n, width = self.rows.n, x_flat.numel()
        values = torch.empty(n, dtype=self.dtype, device=x.device)
        jac = torch.empty(n, width, dtype=self.dtype, device=x.device)
        for start in range(0, n, self.chunk):
            index = torch.arange(start, min(start + self.chunk, n), device=x.device)
            values[start : start + len(index)], jac[start : start + len(index)] = self._gradients(x, index, k)
        return values, jac, None

    def _gradients(self, x: torch.Tensor, index: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            values, jac = self.rows.gradients(x, index)
        except OracleError:
            raise
        except (RuntimeError, TypeError, ValueError, AttributeError, NotImplementedError) as exc:
            raise OracleError(
                f"fc.PerSample: the per-sample gradients of loss(x, rows) failed at iteration {k}: {exc}. The loss "
                "must be a torch function of x that treats each row alone (torch.func.vmap runs it on one row at "
                "a time: no .item(), numpy or data-dependent Python branches); or pass jacobian= in closed form"
            ) from exc
        values, jac = values.detach().to(self.dtype), jac.detach().reshape(len(index), -1).to(self.dtype)
        if not (torch.isfinite(values).all() and torch.isfinite(jac).all()):
            raise OracleError(
                f"fc.PerSample: a loss or its gradient is NaN or Inf at iteration {k} (rows {_few(index)})"
            )
        return values, jac


def _few(index: torch.Tensor) -> str:
    shown = index[:5].tolist()
    return ", ".join(map(str, shown)) + (", ..." if len(index) > 5 else "")


class RowBuffers:
    """Two buffers taking turns for an n-row tracker (V, n x d, or z, n) that changes on a batch's rows.

    A step must leave its input state intact, so the next tracker goes into the other buffer, which holds
    the state before: it is brought up to date by copying the rows the last update changed (O(b x d)) rather
    than the whole array.  Only buffers allocated here are ever written: a tracker the pair does not hold
    (the first sample, a resumed state, a tensor another field shares) is copied whole into a new one, so
    the first two updates copy n rows and the later ones b.
    """

    def __init__(self) -> None:
        self.pair: list[torch.Tensor] = []
        self.changed: torch.Tensor | None = None  # the rows where the pair's two buffers differ

    def next(self, current: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """A buffer equal to ``current`` except perhaps at ``index`` (which the caller overwrites)."""
        if len(self.pair) == 2 and any(b is current for b in self.pair) and self.changed is not None:
            other = self.pair[1] if self.pair[0] is current else self.pair[0]
            other.index_copy_(0, self.changed, current.index_select(0, self.changed))
        else:
            other = current.clone(memory_format=torch.contiguous_format)
            self.pair = [b for b in self.pair if b is current] + [other]
        self.changed = index
        return other


__all__ = ["RowsOracle", "RowBuffers", "CHUNK"]
