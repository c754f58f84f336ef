"""Inner values declared by their groups: :class:`Grouped`.

A map (an ``fc.optim`` closure, or the inner map of a :class:`fullcomp.CompositeProblem`) may return
``fc.Grouped(...)`` instead of the tensor of its m values.  The values are then the groups' mean losses, and
the Jacobian oracle knows which rows each value reads, so it takes the m gradients the cheap way the form
allows (:func:`fullcomp.autodiff.grouped_jacobian`):

* **one loss tensor per group**, ``fc.Grouped([loss_0, ..., loss_{m-1}])``, each computed by its own forward
  pass on its group's sub-batch: u_g is the mean of ``loss_g``, and its gradient is one backward pass over
  that group's graph alone, so the m passes cost about one backward pass of the whole batch;
* **per-row losses with their group index**, ``fc.Grouped(losses, groups, m)``, from one forward pass over the
  batch (a network whose rows interact, batch normalization in training mode): u_g is the mean of
  ``losses[i]`` over the rows i with ``groups[i] == g``.  Every value then depends on the whole batch's
  graph, so each gradient is a backward pass over all of it, as for a plain tensor of m values.

This module only validates and evaluates; it imports nothing of fullcomp but its errors, so that
:mod:`fullcomp.autodiff` can differentiate it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fullcomp.errors import ModelError, OracleError


class Grouped:
    """The m inner values as group means of losses, with the groups declared so that their gradients are cheap.

    The values are u_g = the mean of group g's losses: ``losses[g].mean()``, or the mean of ``losses[i]``
    over the rows with ``groups[i] == g``.  A group without rows in the batch has no mean: that raises
    :class:`fullcomp.errors.OracleError` naming it (draw batches that hold every group).  Malformed
    arguments raise :class:`fullcomp.errors.ModelError` naming the argument.

    Parameters
    ----------
    losses : sequence of m tensors, or a 1-D tensor
        Either one floating tensor per group, ``losses[g]`` the losses of group g's own sub-batch (any shape,
        at least one entry), each from its own forward pass; or, with ``groups``, the 1-D tensor of the
        batch's per-row losses.
    groups : 1-D integer tensor, optional
        With per-row losses: the group of each row, in ``0 .. m-1``, on the losses' device.
    m : int, optional
        The number of groups (the length of u); needed with ``groups``, and equal to ``len(losses)`` if given
        with one tensor per group.
    """

    __slots__ = ("losses", "groups", "m", "parts", "counts", "_weights")

    def __init__(
        self, losses: torch.Tensor | Sequence[torch.Tensor], groups: torch.Tensor | None = None, m: int | None = None
    ):
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ModelError(f"fc.Grouped: m must be a positive int (the number of groups), got {m!r}")
        self.parts: tuple[torch.Tensor, ...] | None = None
        self.counts: torch.Tensor | None = None  # with groups: each group's number of rows
        self._weights: torch.Tensor | None = None
        if groups is None:
            self._init_parts(losses, m)
        else:
            self._init_rows(losses, groups, m)

    def _init_parts(self, losses: object, m: int | None) -> None:
        if isinstance(losses, torch.Tensor) or not isinstance(losses, Sequence) or not losses:
            got = f"a tensor of shape {tuple(losses.shape)}" if isinstance(losses, torch.Tensor) else repr(losses)
            raise ModelError(
                "fc.Grouped: losses must be a non-empty list of one loss tensor per group (each on its group's "
                f"sub-batch), or the 1-D tensor of per-row losses with groups= and m=; got {got}"
            )
        for g, part in enumerate(losses):
            if not isinstance(part, torch.Tensor) or not part.is_floating_point():
                kind = part.dtype if isinstance(part, torch.Tensor) else type(part).__name__
                raise ModelError(f"fc.Grouped: losses[{g}] must be a floating torch.Tensor, got {kind}")
            if part.numel() == 0:
                raise OracleError(
                    f"fc.Grouped: losses[{g}] is empty: group {g} has no rows in this batch, so its mean loss is "
                    "undefined; draw batches that hold every group"
                )
        if m is not None and m != len(losses):
            raise ModelError(f"fc.Grouped: m={m} but losses holds {len(losses)} tensors, one per group")
        devices = {part.device for part in losses}
        if len(devices) > 1:
            raise ModelError(f"fc.Grouped: the losses are on several devices ({sorted(map(str, devices))})")
        self.parts, self.m = tuple(losses), len(losses)
        self.losses, self.groups = None, None

    def _init_rows(self, losses: object, groups: object, m: int | None) -> None:
        if not isinstance(losses, torch.Tensor) or not losses.is_floating_point() or losses.dim() != 1:
            got = (
                f"{losses.dtype} of shape {tuple(losses.shape)}"
                if isinstance(losses, torch.Tensor)
                else type(losses).__name__
            )
            raise ModelError(
                f"fc.Grouped: with groups=, losses must be the 1-D floating tensor of per-row losses; got {got}"
            )
        if not isinstance(groups, torch.Tensor) or groups.dtype.is_floating_point or groups.dtype.is_complex:
            kind = groups.dtype if isinstance(groups, torch.Tensor) else type(groups).__name__
            raise ModelError(f"fc.Grouped: groups must be an integer tensor of the rows' group indices, got {kind}")
        if groups.dtype == torch.bool:
            raise ModelError("fc.Grouped: groups must be an integer tensor of group indices, got torch.bool")
        if groups.shape != losses.shape:
            raise ModelError(
                f"fc.Grouped: groups has shape {tuple(groups.shape)} but losses has {tuple(losses.shape)}: one "
                "group index per row"
            )
        if groups.device != losses.device:
            raise ModelError(f"fc.Grouped: groups is on {groups.device}, losses on {losses.device}")
        if m is None:
            raise ModelError("fc.Grouped: with groups=, give m= (the number of groups, the length of u)")
        groups = groups.long()
        # Rows below 0, in each group and above m - 1, counted by one bincount and read by one synchronisation.
        tally = torch.bincount(groups.clamp(-1, m) + 1, minlength=m + 2)
        below, *each, above = tally.tolist()
        if below or above:
            bad = groups[(groups < 0) | (groups >= m)][0]
            raise ModelError(f"fc.Grouped: groups holds {int(bad)}, outside 0..{m - 1} (m={m})")
        counts = tally[1:-1]
        if 0 in each:
            empty = [g for g, count in enumerate(each) if count == 0]
            raise OracleError(
                f"fc.Grouped: group(s) {empty} have no rows in this batch, so their mean loss is undefined; draw "
                "batches that hold every group"
            )
        # u = W @ losses with W[g, i] = [groups_i = g] / n_g: a deterministic reduction (index_add_ is not, on
        # CUDA), and W's rows are the seeds of the groups' backward passes.
        rows = torch.arange(groups.numel(), device=groups.device)
        weights = losses.new_zeros(m, groups.numel())
        weights[groups, rows] = 1.0
        self._weights = weights.div_(counts.to(losses.dtype)[:, None])
        self.losses, self.groups, self.m, self.counts = losses, groups, m, counts

    @property
    def by_sub_batch(self) -> bool:
        """Whether each group's losses come from its own sub-batch (one tensor per group)."""
        return self.parts is not None

    def values(self) -> torch.Tensor:
        """The (m,) tensor of the group means, differentiable: what a map returning a tensor would return."""
        if self.parts is not None:
            return torch.stack([part.mean() for part in self.parts])
        return self._weights @ self.losses

    def __repr__(self) -> str:
        form = "one sub-batch per group" if self.parts is not None else f"{self.losses.numel()} rows"
        return f"fc.Grouped(m={self.m}, {form})"


def values_of(out: object) -> object:
    """A map's output as the tensor of its values: a :class:`Grouped`'s group means, anything else unchanged."""
    return out.values() if isinstance(out, Grouped) else out


__all__ = ["Grouped", "values_of"]
