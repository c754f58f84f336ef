"""Group-robust matrix completion (HMSFW paper, Section 6): min_{||X||_* <= tau} F(f_1(X), ..., f_7(X)).

f_g(X) is the mean Huber loss (delta 1) of group g's training ratings; a
sample draws ``batch`` ratings per group with replacement.  The problem is
declared with ``reads`` = the training entries, so Jacobians, trackers and
LMO directions live on observed ratings only, ``touches`` = the ratings a batch
draws, so a sampled Jacobian has a column per drawn rating, and ``track`` =
validation and test entries, so evaluation reads the iterate there without a
dense matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cvxpy as cp
import numpy as np
import torch

from fullcomp import CompositeProblem, NuclearBall, cvar, inner_value
from fullcomp.datasets import RatingData
from fullcomp.errors import OptionError
from fullcomp_lab.datasets.losses import average_group, group_losses, huber

OBJECTIVES = ("max", "cvar")
CVAR_ALPHA = 0.3


def positions_read(positions: torch.Tensor) -> torch.Tensor:
    """The entries a batch of (groups, batch) positions into the training ratings reads, group by group."""
    return positions.reshape(-1)


def base_radius(data: RatingData) -> float:
    """The radius scale 1: sqrt(P Q), the nuclear norm of a P x Q matrix of ones (a rank-one rating offset).

    The paper's text states tau = 0.5 P Q, which for MovieLens-100K (793,000) leaves the
    constraint inactive at any point a Frank-Wolfe step can reach; radii are chosen on
    validation as multiples of this base instead.
    """
    P, Q = data.shape
    return float(np.sqrt(P * Q))


@dataclass
class Completion:
    """A declared completion problem plus the evaluation that the protocol records."""

    data: RatingData
    problem: CompositeProblem
    objective: str
    radius: float
    unsort: np.ndarray  # position of each training rating (data order) among the reads

    def split_values(self, entries: torch.Tensor) -> dict[str, np.ndarray]:
        """Cut the kept-entry vector (train in the order the map reads it, then val, then test) into the three
        splits, each in the data's order."""
        sizes = [len(self.data.train), len(self.data.val), len(self.data.test)]
        values = entries.detach().cpu().numpy()
        train, val, test = np.split(values, np.cumsum(sizes)[:2])
        return {"train": train[self.unsort], "val": val, "test": test}

    def outer_value(self, losses: np.ndarray) -> float:
        return self.problem.outer.value(np.asarray(losses, dtype=float))

    def evaluate(self, it: Any) -> dict[str, float]:
        """Training objective and worst/average group losses on every split (a callback, outside optimizer time).

        ``it`` is the iterate a callback receives; only its ``x`` is read.
        """
        if it.x.ndim == 1:
            values = self.split_values(it.x)
        else:  # a dense iterate (projection-based methods)
            values = {s: self.data.values_at(it.x.detach().cpu().numpy(), s) for s in ("train", "val", "test")}
        row: dict[str, float] = {}
        for split, v in values.items():
            losses = group_losses(self.data, split, v)
            row[f"{split}_worst"] = float(np.max(losses))
            row[f"{split}_average"] = average_group(losses)
            if split == "train":
                row["train_objective"] = self.outer_value(losses)
        return row


def completion_problem(
    data: RatingData,
    objective: str = "max",
    radius_scale: float = 1.0,
    batch: int = 1024,
    structured: bool = True,
) -> Completion:
    """Declare the group-robust completion problem on ``data``.

    ``objective`` is ``"max"`` (worst group) or ``"cvar"`` (CVaR at 0.3 over the
    groups); the radius is ``radius_scale * base_radius(data)``; ``batch`` ratings
    are sampled per group.  ``structured=False`` declares the dense map (the
    Jacobian then has P Q columns): the reference the structured path is tested
    against, and what projection-based baselines may use.
    """
    if objective not in OBJECTIVES:
        raise OptionError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if not (np.isfinite(radius_scale) and radius_scale > 0):
        raise OptionError(f"radius_scale must be a positive number, got {radius_scale}")
    train = data.train
    # The map reads the training entries group by group, each group in row-major order.  Groups of users
    # then give each row's entries together, so the LMO's sparse direction fills its CSR matrix (rows
    # relabelled) without a permutation, and each group's Jacobian row lives on one range of the reads (the
    # GLMO's products run on those ranges only).  The sampler draws the data's group positions and maps them.
    train_flat = data.flat_index("train")
    order = np.lexsort((train_flat, train.groups))
    unsort = np.empty_like(order)
    unsort[order] = np.arange(order.size)
    ratings = torch.from_numpy(train.ratings[order])
    to_read = torch.from_numpy(unsort)
    slices = data.group_slices("train")
    starts = torch.tensor([s.start for s in slices])
    counts = torch.tensor([s.stop - s.start for s in slices])
    if (counts == 0).any():
        raise OptionError("every group needs training ratings for the group-robust objective")
    n = data.n_groups
    u = inner_value(n)
    outer = cp.max(u) if objective == "max" else cvar(u, CVAR_ALPHA)
    radius = radius_scale * base_radius(data)
    domain = NuclearBall(data.shape, radius)
    reads = train_flat[order]
    reads_t = torch.from_numpy(reads)

    def sampler(generator: torch.Generator) -> torch.Tensor:
        # (groups, batch) positions into the training entries, uniform within each group.
        draws = torch.rand(n, batch, generator=generator, dtype=torch.float64)
        return to_read[starts[:, None] + (draws * counts[:, None]).long()]

    def touched_loss(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The group means on the values the batch reads (``touches``: the positions, group by group)."""
        residual = values - ratings.to(values.dtype).index_select(0, positions.reshape(-1))
        return huber(residual).reshape(positions.shape).mean(dim=1)

    if structured:
        track = np.concatenate([data.flat_index("val"), data.flat_index("test")])
        problem = CompositeProblem(
            outer, touched_loss, domain, sampler=sampler, reads=reads, track=track, touches=positions_read
        )
    else:

        def dense_loss(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            # index_select, not x[...]: advanced indexing's backward is far slower on CPU.
            entries = reads_t.index_select(0, positions_read(positions))
            return touched_loss(x.reshape(-1).index_select(0, entries), positions)

        problem = CompositeProblem(outer, dense_loss, domain, sampler=sampler)
    return Completion(data, problem, objective, radius, unsort)


def row_blocks(rows: np.ndarray, n_rows: int, size: int) -> np.ndarray:
    """``size + 1`` row bounds cutting ``range(n_rows)`` into contiguous blocks of about equal entry counts
    (column bounds when given the entries' columns)."""
    cumulative = np.cumsum(np.bincount(rows, minlength=n_rows))
    cuts = np.searchsorted(cumulative, np.arange(1, size) * cumulative[-1] / size, side="right")
    return np.concatenate([[0], cuts, [n_rows]])


def sharded_completion_problem(
    data: RatingData,
    objective: str = "max",
    radius_scale: float = 1.0,
    batch: int = 1024,
    rank: int = 0,
    size: int = 1,
    blocks: str = "rows",
) -> CompositeProblem:
    """Rank ``rank``'s part of the completion problem on ``size`` ranks: a block of rows, or of columns with
    ``blocks="cols"`` (about 1/size of the training ratings), declared with ``sharded=True``.  Row blocks
    suit P >= Q (the split Lanczos then all-reduces Q-vectors), column blocks P < Q.

    The rank draws ``batch // size`` ratings per group from its own block, and weights its group means by
    size N_gr / N_g (N_gr: group g's ratings in the block), so the mean over the ranks estimates each group's
    training loss without bias: the stratified estimator sum_r (N_gr / N_g) mean_gr, with a global batch of
    ``batch`` ratings per group as in :func:`completion_problem`.  No validation or test entries are kept.
    """
    if objective not in OBJECTIVES:
        raise OptionError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if not (isinstance(size, int) and size >= 1 and isinstance(rank, int) and 0 <= rank < size):
        raise OptionError(f"rank must be an int in 0..size-1 and size a positive int, got rank={rank}, size={size}")
    if batch < size:
        raise OptionError(f"batch ({batch} ratings per group) must be at least the number of ranks ({size})")
    if blocks not in ("rows", "cols"):
        raise OptionError(f"blocks must be 'rows' or 'cols', got {blocks!r}")
    train, (p, q) = data.train, data.shape
    index, extent = (train.rows, p) if blocks == "rows" else (train.cols, q)
    bounds = row_blocks(index, extent, size)
    mine = np.flatnonzero((index >= bounds[rank]) & (index < bounds[rank + 1]))
    flat = train.rows[mine] * np.int64(q) + train.cols[mine]
    # A block of rows is read group by group, each group's in row-major order, as completion_problem reads all
    # (each group's row of V on one range of the reads; the rank's pattern relabels its rows).  A block of
    # columns in row-major order: its split Lanczos runs on the rows, which keep d's coordinates.
    order = np.lexsort((flat, train.groups[mine])) if blocks == "rows" else np.argsort(flat, kind="stable")
    mine, flat = mine[order], flat[order]
    groups = train.groups[mine]
    n = data.n_groups
    local, total = np.bincount(groups, minlength=n), data.group_counts("train")
    weights = torch.from_numpy(size * local / total)
    # Positions into this rank's reads, by group; a group absent from the block gets weight 0.
    by_group = [torch.from_numpy(np.flatnonzero(groups == g)) for g in range(n)]
    members = [b if b.numel() else torch.zeros(1, dtype=torch.int64) for b in by_group]
    ratings, per = torch.from_numpy(train.ratings[mine]), batch // size

    def sampler(generator: torch.Generator) -> torch.Tensor:
        draws = torch.rand(n, per, generator=generator, dtype=torch.float64)
        return torch.stack([m[(d * m.numel()).long()] for m, d in zip(members, draws)])

    def touched_loss(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        residual = values - ratings.to(values.dtype).index_select(0, positions.reshape(-1))
        return weights.to(values.dtype) * huber(residual).reshape(positions.shape).mean(dim=1)

    u = inner_value(n)
    outer = cp.max(u) if objective == "max" else cvar(u, CVAR_ALPHA)
    domain = NuclearBall(data.shape, radius_scale * base_radius(data))
    return CompositeProblem(
        outer, touched_loss, domain, sampler=sampler, reads=flat, touches=positions_read, sharded=True
    )
