"""The networks, batches, group losses, Sagawa et al.'s Group DRO update and the per-group metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cvxpy as cp
import torch
from torch import nn

import fullcomp as fc
from fullcomp.errors import DataError, OptionError
from fullcomp_lab.groupdro.config import CVAR_ALPHA
from fullcomp_lab.groupdro.data import GroupData, GroupSplit

# ---------------------------------------------------------------------------------------------- networks


def cmnist_cnn(width: int = 16) -> nn.Sequential:
    """Two stride-2 3 x 3 convolutions (2 -> width -> width channels, ReLU) on 2 x 14 x 14 images, a 2 x 2
    average pooling and a linear layer to one logit: 2,689 weights at width 16."""
    return nn.Sequential(
        nn.Conv2d(2, width, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(width, width, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(width * 4, 1),
    )


def adult_mlp(dim: int, width: int = 32) -> nn.Sequential:
    """One hidden ReLU layer of ``width`` units and one logit: 3,521 weights on Adult's 108 features at 32."""
    return nn.Sequential(nn.Linear(dim, width), nn.ReLU(), nn.Linear(width, 1))


def make_network(data: GroupData, width: int, seed: int) -> nn.Module:
    """The data set's network with weights drawn under ``seed`` (the global RNG left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if data.name == "cmnist":
            return cmnist_cnn(width)
        return adult_mlp(int(data.train.X.shape[1]), width)


def n_weights(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ----------------------------------------------------------------------------------------------- batches


def group_rows(split: GroupSplit, n_groups: int) -> list[torch.Tensor]:
    """The row indices of every group; DataError naming an empty group (a balanced batch needs them all)."""
    rows = [torch.nonzero(split.g == k).flatten() for k in range(n_groups)]
    empty = [k for k, r in enumerate(rows) if r.numel() == 0]
    if empty:
        raise DataError(f"group(s) {empty} have no training rows; a group-balanced batch needs every group")
    return rows


def balanced_sampler(split: GroupSplit, per_group: int, n_groups: int = 4) -> Callable[[torch.Generator], tuple]:
    """``sampler(generator) -> (X, y)``: ``per_group`` rows of each group drawn uniformly with replacement,
    stacked group by group (rows ``k * per_group`` to ``(k + 1) * per_group - 1`` are group k)."""
    rows = group_rows(split, n_groups)
    X, y = split.X, split.y.to(torch.float32)

    def sampler(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        pick = torch.cat([r[torch.randint(r.numel(), (per_group,), generator=generator)] for r in rows])
        return X[pick], y[pick]

    return sampler


def uniform_sampler(split: GroupSplit, batch: int) -> Callable[[torch.Generator], tuple]:
    """``sampler(generator) -> (X, y)``: ``batch`` rows drawn uniformly with replacement (plain ERM)."""
    X, y = split.X, split.y.to(torch.float32)

    def sampler(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        pick = torch.randint(len(y), (batch,), generator=generator)
        return X[pick], y[pick]

    return sampler


def shuffled_sampler(split: GroupSplit, batch: int) -> Callable[[torch.Generator], tuple]:
    """``sampler(generator) -> (X, y, g)``: consecutive batches of a permutation of the rows, redrawn when it
    runs out, as ``DataLoader(shuffle=True)`` serves kohpangwei/group_DRO (an epoch of ceil(n / batch)
    batches sees every row once; its last batch holds the remainder)."""
    X, y, g = split.X, split.y.to(torch.float32), split.g
    state = {"order": torch.empty(0, dtype=torch.int64), "at": 0}

    def sampler(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if state["at"] >= state["order"].numel():
            state["order"], state["at"] = torch.randperm(len(y), generator=generator), 0
        pick = state["order"][state["at"] : state["at"] + batch]
        state["at"] += batch
        return X[pick], y[pick], g[pick]

    return sampler


def batch_group_losses(losses: torch.Tensor, g: torch.Tensor, n_groups: int = 4) -> torch.Tensor:
    """The mean of ``losses`` over each group's rows of a batch, 0 for a group without rows (the reference's
    ``LossComputer.compute_group_avg``: its weight q then stays where it is, exp(eta_q * 0) = 1)."""
    member = (g == torch.arange(n_groups).unsqueeze(1)).to(losses.dtype)
    count = member.sum(dim=1)
    return member @ losses / (count + (count == 0).to(losses.dtype))


def group_losses_map(n_groups: int = 4) -> Callable[[Any, tuple], torch.Tensor]:
    """``inner(net, batch) -> (n_groups,)``: the mean logistic loss of each group of a balanced batch."""

    def inner(net: Any, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        X, y = batch
        losses = nn.functional.binary_cross_entropy_with_logits(net(X).reshape(-1), y, reduction="none")
        return losses.reshape(n_groups, -1).mean(dim=1)

    return inner


def outer_function(name: str, n_groups: int = 4) -> Any:
    """F of the group losses: ``"max"`` (``cp.max``) or ``"cvar"`` (``fc.cvar(u, 0.5)``, the worst half)."""
    u = fc.inner_value(n_groups)
    if name == "max":
        return cp.max(u)
    if name == "cvar":
        return fc.cvar(u, CVAR_ALPHA)
    raise OptionError(f"unknown outer function {name!r}; choose max or cvar")


# --------------------------------------------------------------------------------------------- Group DRO


def group_adjustments(counts: Any, C: float) -> torch.Tensor:
    """Sagawa et al.'s generalization adjustment C / sqrt(n_g) for the training group sizes n_g."""
    counts = torch.as_tensor(counts, dtype=torch.float64)
    if (counts <= 0).any():
        raise DataError("every group needs training rows for the adjustment C / sqrt(n_g)")
    return C / counts.sqrt()


def group_dro_update(
    q: torch.Tensor, losses: torch.Tensor, eta_q: float, adjustment: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of Sagawa et al. 2020 (Algorithm 1; ``LossComputer.compute_robust_loss`` of
    kohpangwei/group_DRO): ``q <- q * exp(eta_q * l_adj)``, normalized, then the robust loss
    ``l_adj @ q`` with the new q, where ``l_adj = losses + adjustment`` (``adjustment`` C / sqrt(n_g), or
    None).  Returns ``(robust_loss, q)``; the gradient of the loss is ``sum_g q_g grad l_g`` (q is a
    constant, the adjustment does not depend on the weights)."""
    adjusted = losses if adjustment is None else losses + adjustment.to(losses)
    q = q * torch.exp(eta_q * adjusted.detach().to(q.dtype))
    q = q / q.sum()
    return adjusted @ q.to(losses.dtype), q


# ----------------------------------------------------------------------------------------------- metrics


@torch.no_grad()
def group_metrics(net: Callable, split: GroupSplit, prefix: str, n_groups: int = 4, chunk: int = 8192) -> dict:
    """Per-group accuracy and mean logistic loss of ``net`` on ``split`` (threshold: logit 0), with
    ``<prefix>_worst_acc`` (lowest group accuracy), ``<prefix>_avg_acc`` (accuracy over all rows),
    ``<prefix>_worst_loss`` (highest group loss) and ``<prefix>_acc_g<k>``, ``<prefix>_loss_g<k>``."""
    logits = torch.cat([net(split.X[i : i + chunk]).reshape(-1) for i in range(0, len(split), chunk)])
    y = split.y.to(logits.dtype)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none").double()
    correct = ((logits > 0).to(torch.int64) == split.y).double()
    counts = torch.bincount(split.g, minlength=n_groups).double()
    accs = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, split.g, correct) / counts
    losses = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, split.g, loss) / counts
    out = {f"{prefix}_acc_g{k}": float(accs[k]) for k in range(n_groups)}
    out.update({f"{prefix}_loss_g{k}": float(losses[k]) for k in range(n_groups)})
    present = counts > 0
    out[f"{prefix}_worst_acc"] = float(accs[present].min())
    out[f"{prefix}_avg_acc"] = float(correct.mean())
    out[f"{prefix}_worst_loss"] = float(losses[present].max())
    out[f"{prefix}_avg_loss"] = float(loss.mean())
    return out  # an empty group's accuracy and loss are NaN


class ReferenceGroupDRO:
    """Online Group DRO as kohpangwei/group_DRO trains it (``train.py``, ``loss.py``): per batch, the group
    means of the per-row losses (:func:`batch_group_losses`), the exponentiated step on q
    (:func:`group_dro_update`), then ``torch.optim.SGD(momentum=0.9, weight_decay=...)`` on sum_g q_g l_g.

    Parameters
    ----------
    net : torch.nn.Module
        The network, trained in place; it returns one logit per row (logistic loss).
    lr, weight_decay, eta_q : float
        SGD's step and L2 coefficient, and the step on q (``--robust_step_size``).
    n_groups : int
        The number of groups; q starts uniform.
    adjustment : torch.Tensor, optional
        C / sqrt(n_g) (:func:`group_adjustments`), added to the group losses; None: C = 0, the default.
    """

    def __init__(
        self,
        net: nn.Module,
        lr: float,
        weight_decay: float,
        eta_q: float,
        n_groups: int = 4,
        adjustment: torch.Tensor | None = None,
    ):
        self.net, self.eta_q, self.n_groups, self.adjustment = net, eta_q, n_groups, adjustment
        self.optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
        self.q = torch.full((n_groups,), 1.0 / n_groups, dtype=torch.float64)

    def step(self, X: torch.Tensor, y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """One update on the batch ``(X, y, g)``; returns the robust loss sum_g q_g l_g (q after its step)."""
        losses = nn.functional.binary_cross_entropy_with_logits(self.net(X).reshape(-1), y, reduction="none")
        group_losses = batch_group_losses(losses, g, self.n_groups)
        loss, self.q = group_dro_update(self.q, group_losses, self.eta_q, self.adjustment)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.detach()
