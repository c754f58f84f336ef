"""An inner map of one loss per sample: :class:`PerSample`.

The most common robust objective is a risk of the per-sample losses of a data set, F(l_1(x), ..., l_n(x)).
Declared as a plain map of n outputs, its Jacobian would be taken through the n x n identity; declared as
``fc.PerSample(loss, data)``, fullcomp knows that value i reads row i only, so it takes the Jacobian's rows
of a batch of sampled rows from per-sample gradients (or the user's closed form), in O(batch x d) memory,
and draws batches of row indices itself.

This module only validates and evaluates; the methods read it through the oracles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from fullcomp.errors import ModelError, OracleError

LOSS_SIGNATURE = "loss(x, rows) -> Tensor of shape (b,), one loss per row of the b rows given"
JACOBIAN_SIGNATURE = "jacobian(x, rows) -> Tensor of shape (b, *x.shape), one gradient per row"
SAMPLER_SIGNATURE = "sampler(generator) -> 1-D integer tensor of row indices in 0..n-1"


class AllRows:
    """The full batch of a per-sample problem: every row, evaluated in chunks (never as one n-row copy)."""

    def __repr__(self) -> str:
        return "ALL_ROWS"


#: The batch ``problem.full_batch`` of a problem on ``fc.PerSample``: all n rows.
ALL_ROWS = AllRows()


class PerSample:
    """The inner map u_i = loss(x, row i), i = 1..n: one loss per sample of a data set.

    Parameters
    ----------
    loss : callable
        ``loss(x, rows)`` returns the b losses of the b rows it is given, a 1-D floating tensor; ``rows`` is
        a tuple holding, for each tensor of ``data``, its b rows (in the order of the sampled indices).  It
        must treat the rows independently (no batch statistics): value i may read row i only.
    data : tensor or sequence of tensors
        The data set: every tensor has the same number n >= 1 of rows along its first dimension.
    batch_size : int, optional
        Rows drawn per stochastic sample (uniformly without replacement); default ``min(n, 256)``.
    jacobian : callable, optional
        ``jacobian(x, rows)`` giving the b per-row gradients in closed form; by default they are per-sample
        gradients of ``loss`` (``torch.func``), one backward pass vmapped over the rows.
    """

    def __init__(
        self,
        loss: Callable[[torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor],
        data: torch.Tensor | Sequence[torch.Tensor],
        batch_size: int | None = None,
        jacobian: Callable[[torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor] | None = None,
    ):
        if not callable(loss):
            raise ModelError(f"fc.PerSample: loss must be a callable {LOSS_SIGNATURE}, got {type(loss).__name__}")
        if jacobian is not None and not callable(jacobian):
            raise ModelError(
                f"fc.PerSample: jacobian must be None or a callable {JACOBIAN_SIGNATURE}, got {type(jacobian).__name__}"
            )
        self.loss, self.jacobian = loss, jacobian
        self.data = _tensors(data)
        self.n = int(self.data[0].shape[0])
        if batch_size is None:
            batch_size = min(self.n, 256)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= self.n:
            raise ModelError(
                f"fc.PerSample: batch_size must be an int in 1..{self.n} (the number of rows), got {batch_size!r}"
            )
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"PerSample(n={self.n}, batch_size={self.batch_size})"

    def draw(self, generator: torch.Generator) -> torch.Tensor:
        """A batch of ``batch_size`` distinct row indices, uniformly at random, on the generator's device.

        The first ``batch_size`` distinct values of a stream of uniform draws (a uniform random subset, in
        random order): O(batch) work, where a permutation of all n rows cost 66 ms at n = 1,000,000.
        """
        n, b, device = self.n, self.batch_size, generator.device
        if 4 * b > n:  # a large share of the rows: the permutation is as cheap and needs no redraws
            return torch.randperm(n, generator=generator, device=device)[:b]
        drawn = torch.empty(0, dtype=torch.int64, device=device)
        while True:
            drawn = torch.cat([drawn, torch.randint(n, (2 * b,), generator=generator, device=device)])
            values, inverse = torch.unique(drawn, return_inverse=True)
            if len(values) >= b:
                break
        positions = torch.arange(len(drawn), device=device)
        first = torch.full((len(values),), len(drawn), device=device).scatter_reduce_(0, inverse, positions, "amin")
        return values[first.argsort()[:b]]

    def rows(self, index: torch.Tensor, device: Any = None) -> tuple[torch.Tensor, ...]:
        """The rows ``index`` of every data tensor, moved to ``device`` when given."""
        picked = tuple(t[index.to(t.device)] for t in self.data)
        return picked if device is None else tuple(t.to(device) for t in picked)

    def values(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """The losses of the rows ``index`` at x, checked to be one finite-shaped value per row."""
        out = self.loss(x, self.rows(index, x.device))
        if not isinstance(out, torch.Tensor) or out.shape != (len(index),):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise OracleError(f"fc.PerSample: loss returned {got} for {len(index)} rows; it must be {LOSS_SIGNATURE}")
        return out

    def gradients(self, x: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The losses of the rows ``index`` and their gradients in x, shape (b, *x.shape)."""
        rows = self.rows(index, x.device)
        if self.jacobian is not None:
            values = self.values(x, index)
            J = self.jacobian(x, rows)
            if not isinstance(J, torch.Tensor) or J.shape != (len(index), *x.shape):
                got = tuple(J.shape) if isinstance(J, torch.Tensor) else type(J).__name__
                raise OracleError(f"fc.PerSample: jacobian returned {got}; it must be {JACOBIAN_SIGNATURE}")
            return values, J

        def one(x: torch.Tensor, *row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            value = self.loss(x, tuple(t.unsqueeze(0) for t in row)).reshape(())
            return value, value

        J, values = torch.func.vmap(torch.func.grad(one, has_aux=True), in_dims=(None, *([0] * len(rows))))(x, *rows)
        return values, J

    def index(self, batch: Any, where: str = "") -> torch.Tensor:
        """``batch`` checked to be a 1-D integer tensor of row indices in 0..n-1 (a sampler's draw)."""
        if (
            not isinstance(batch, torch.Tensor)
            or batch.dim() != 1
            or batch.dtype.is_floating_point
            or batch.dtype.is_complex
            or batch.dtype == torch.bool
        ):
            got = (
                f"{batch.dtype} tensor of shape {tuple(batch.shape)}"
                if isinstance(batch, torch.Tensor)
                else type(batch).__name__
            )
            raise OracleError(f"fc.PerSample: a batch must be {SAMPLER_SIGNATURE}; the sampler gave a {got}{where}")
        if batch.numel() and (int(batch.min()) < 0 or int(batch.max()) >= self.n):
            raise OracleError(
                f"fc.PerSample: the sampler drew row indices outside 0..{self.n - 1}{where}; it must be "
                f"{SAMPLER_SIGNATURE}"
            )
        return batch

    def batch_values(self, x: torch.Tensor, batch: Any) -> torch.Tensor:
        """The map as a problem calls it: the losses of the rows ``batch`` (all n losses on ``ALL_ROWS``)."""
        if isinstance(batch, AllRows):
            return self.all_values(x)
        return self.values(x, self.index(batch))

    def check_jacobian(self, x: torch.Tensor, index: torch.Tensor, scale: float) -> None:
        """Compare the closed-form ``jacobian`` with central differences of ``loss`` on the rows ``index``,
        along one fixed random direction at x (entries of size ``scale``); ModelError when they disagree."""
        if self.jacobian is None:
            return
        double = x.detach().double()
        direction = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        direction = direction / direction.norm()
        with torch.no_grad():
            J = self.gradients(double.to(x.dtype), index)[1].reshape(len(index), -1).double()
            h = (1e-6 if x.dtype == torch.float64 else 1e-2) * max(scale, 1.0)
            ahead, behind = (self.values((double + t * direction).to(x.dtype), index).double() for t in (h, -h))
        differences, derivative = (ahead - behind) / (2 * h), J @ direction.reshape(-1)
        tol = (1e-4 if x.dtype == torch.float64 else 5e-2) * (1.0 + float(differences.abs().max()))
        worst = int((derivative - differences).abs().argmax())
        if float((derivative - differences).abs().max()) > tol:
            raise ModelError(
                f"fc.PerSample: jacobian= disagrees with central differences of loss at row {int(index[worst])}: "
                f"{float(derivative[worst]):.6g} against {float(differences[worst]):.6g} along a random direction. "
                f"It must be {JACOBIAN_SIGNATURE}, the gradient of each row's loss in x (CompositeProblem("
                "check_gradient=False) skips this check)"
            )

    def all_values(self, x: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
        """All n losses at x, computed in chunks of rows so that memory stays O(chunk)."""
        return torch.cat([self.values(x, torch.arange(i, min(i + chunk, self.n))) for i in range(0, self.n, chunk)])


def _tensors(data: Any) -> tuple[torch.Tensor, ...]:
    parts = (data,) if isinstance(data, torch.Tensor) else data
    if not isinstance(parts, Sequence) or not parts or not all(isinstance(t, torch.Tensor) for t in parts):
        raise ModelError(
            "fc.PerSample: data must be a tensor or a non-empty tuple of tensors with one row per sample, "
            f"got {type(data).__name__}"
        )
    sizes = {int(t.shape[0]) if t.dim() else 0 for t in parts}
    if len(sizes) != 1 or 0 in sizes:
        raise ModelError(
            f"fc.PerSample: every data tensor needs the same number n >= 1 of rows (first dimension), got sizes "
            f"{[tuple(t.shape) for t in parts]}"
        )
    return tuple(parts)
