"""Value and Jacobian of a torch inner map in one pass (``torch.func``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.func import jacrev

from fullcomp.errors import OracleError


def check_inner_output(out: Any, n: int, where: str) -> torch.Tensor:
    """Reject anything but a finite tensor of shape (n,), saying where it happened."""
    if not isinstance(out, torch.Tensor):
        raise OracleError(f"inner(x, batch) must return a torch.Tensor; it returned {type(out).__name__} {where}")
    if tuple(out.shape) != (n,):
        raise OracleError(
            f"inner(x, batch) returned shape {tuple(out.shape)} {where}, but the placeholder "
            f"fc.inner_value({n}) has shape ({n},); make them agree"
        )
    if not torch.isfinite(out).all():
        raise OracleError(f"inner(x, batch) returned NaN or Inf {where}")
    return out


class InnerOracle:
    """Evaluates ``inner(x, batch)`` and its Jacobian at x in ``dtype`` on ``device``.

    ``__call__`` returns ``(value, jacobian)`` with ``value`` of shape (n,) and
    ``jacobian`` of shape (n, d), d the number of entries of x (row-major), so
    trackers and GLMOs work on flat vectors whatever the shape of x.
    """

    def __init__(self, inner: Callable, n: int, shape: tuple[int, ...], device: Any, dtype: torch.dtype):
        self.inner, self.n, self.shape = inner, n, shape
        self.device, self.dtype = torch.device(device), dtype

        self._k = 0

        def both(x_flat: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
            out = inner(x_flat.reshape(shape), batch)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (n,):
                check_inner_output(out, n, f"at iteration {self._k}")
            return out, out

        self._jac = jacrev(both, has_aux=True)

    def __call__(self, x_flat: torch.Tensor, batch: Any, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        self._k = k
        try:
            jac, value = self._jac(x_flat, batch)
        except OracleError:
            raise
        except (RuntimeError, TypeError, ValueError, AttributeError) as exc:
            raise OracleError(
                f"inner(x, batch) failed under torch.func at iteration {k}: {exc}. The map must be a torch "
                "function of x returning a tensor of shape (n,) (no .item(), numpy or in-place ops on x)"
            ) from exc
        where = f"at iteration {k}"
        check_inner_output(value, self.n, where)
        if not torch.isfinite(jac).all():
            raise OracleError(f"the Jacobian of inner(x, batch) has NaN or Inf entries {where}")
        return value.detach().to(self.dtype), jac.detach().to(self.dtype).reshape(self.n, -1)
