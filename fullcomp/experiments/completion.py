"""Group-robust matrix completion (HMSFW paper, Section 6): min_{||X||_* <= tau} F(f_1(X), ..., f_7(X)).

f_g(X) is the mean Huber loss (delta 1) of group g's training ratings; a
sample draws ``batch`` ratings per group with replacement.  The problem is
declared with ``reads`` = the training entries, so Jacobians, trackers and
LMO directions live on observed ratings only, and ``track`` = validation and
test entries, so evaluation reads the iterate there without a dense matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import torch

from fullcomp.datasets.losses import average_group, group_losses, huber
from fullcomp.datasets.ratings import RatingData
from fullcomp.errors import OptionError
from fullcomp.model import CompositeProblem, cvar, inner_value
from fullcomp.run.driver import Iterate
from fullcomp.sets import NuclearBall

OBJECTIVES = ("max", "cvar")
CVAR_ALPHA = 0.3


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
    unsort: np.ndarray  # position of each training rating (data order) among the row-ordered reads

    def split_values(self, entries: torch.Tensor) -> dict[str, np.ndarray]:
        """Cut the kept-entry vector (train in row-major order, then val, then test) into the three
        splits, each in the data's order."""
        sizes = [len(self.data.train), len(self.data.val), len(self.data.test)]
        values = entries.detach().cpu().numpy()
        train, val, test = np.split(values, np.cumsum(sizes)[:2])
        return {"train": train[self.unsort], "val": val, "test": test}

    def outer_value(self, losses: np.ndarray) -> float:
        return self.problem.outer.value(np.asarray(losses, dtype=float))

    def evaluate(self, it: Iterate) -> dict[str, float]:
        """Training objective and worst/average group losses on every split (a callback, outside optimizer time)."""
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
    # The map reads the training entries in row-major order, so the LMO's sparse direction fills its
    # CSR matrix without a permutation; the sampler draws the data's group positions and maps them there.
    train_flat = data.flat_index("train")
    order = np.argsort(train_flat, kind="stable")
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

    def group_loss(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        target = ratings.to(values.dtype)
        # index_select, not values[positions]: advanced indexing's backward is far slower on CPU.
        flat = positions.reshape(-1)
        residual = values.index_select(0, flat) - target.index_select(0, flat)
        return huber(residual).reshape(positions.shape).mean(dim=1)

    if structured:
        track = np.concatenate([data.flat_index("val"), data.flat_index("test")])
        problem = CompositeProblem(outer, group_loss, domain, sampler=sampler, reads=reads, track=track)
    else:

        def dense_loss(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return group_loss(x.reshape(-1).index_select(0, reads_t), positions)

        problem = CompositeProblem(outer, dense_loss, domain, sampler=sampler)
    return Completion(data, problem, objective, radius, unsort)
