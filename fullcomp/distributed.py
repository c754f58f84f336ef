"""Data parallelism on ``torch.distributed``: each process holds a shard of the data, the oracles average.

fullcomp runs no engine of its own.  Inside a job started by ``torchrun`` (or
any job that called ``torch.distributed.init_process_group``), every method
runs on every process: each rank samples its own shard with its own generator
(:func:`rank_seed`), and the oracle layer averages what the ranks sampled
(values, Jacobians, gradients) with one all-reduce, so every rank takes the
same step and keeps the same iterate.  Only rank 0 writes history files,
checkpoints and the progress bar.

The sampling rule: rank r of W draws its minibatch from its shard with a
generator seeded by ``rank_seed(seed, r)``; the global minibatch is the union
of the W minibatches, and the averaged estimate is that union's when every rank
draws the same number of samples (per group, for group losses).  A
single-process run whose sampler returns the union of the W draws is the same
run, up to the order of floating-point sums.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from fullcomp.errors import DistributedError, OptionError

#: What this process has sent through its sums and gathers (calls and payload bytes), for benchmarks.
traffic = {"calls": 0, "bytes": 0}

#: Seconds a collective may wait for the other ranks before the run stops with a DistributedError.
DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class World:
    """This process's place in the job: ``rank`` of ``size`` (0 of 1 outside a distributed job)."""

    rank: int = 0
    size: int = 1

    @property
    def parallel(self) -> bool:
        return self.size > 1

    @property
    def writes(self) -> bool:
        """Whether this rank writes files and shows progress (rank 0 only)."""
        return self.rank == 0


def world() -> World:
    """The current job's World: from ``torch.distributed`` when a process group is initialized."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return World()


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``'s generator: ``seed`` itself on rank 0, a SeedSequence child elsewhere."""
    if rank == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), int(rank)]).generate_state(1, dtype=np.uint64)[0] >> 2)


def shard(count: int, rank: int | None = None, size: int | None = None) -> slice:
    """The contiguous block of ``range(count)`` that rank ``rank`` of ``size`` holds (the current rank by default)."""
    here = world()
    rank = here.rank if rank is None else rank
    size = here.size if size is None else size
    per = math.ceil(count / size)
    return slice(min(rank * per, count), min((rank + 1) * per, count))


def init(backend: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> World:
    """Join the job torchrun started (its RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT variables).

    ``backend`` defaults to NCCL when CUDA is present and gloo otherwise; a collective waiting longer than
    ``timeout`` seconds for another rank raises, so a dead or hung rank never hangs the others.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        return world()
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise OptionError(
            f"not inside a distributed job: {', '.join(missing)} unset; launch with torchrun --nproc-per-node N "
            "(or fullcomp run --nproc N)"
        )
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    return world()


#: Seconds rank 0, which hosts the job's store, waits for the other ranks' teardowns before its own.
LEAVE_TIMEOUT = 30.0


def leave() -> None:
    """Leave the job together: a barrier, then the process group's teardown, rank 0's last.

    A rank that exits while a peer still holds its connection can abort gloo's teardown (SIGABRT, seen in
    about 1 of 4 two-rank test jobs; after a barrier was added, once more in CI, on rank 1), which torchrun
    reports as a failed job although every result was written.  Rank
    0 hosts the store the ranks rendezvous through, so it waits, up to :data:`LEAVE_TIMEOUT`, until every
    other rank has torn down.  Call it once at the end of a job's work; outside a job it does nothing.
    """
    import time

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    _collective(dist.barrier)
    here, store = world(), dist.distributed_c10d._get_default_store()
    if here.rank != 0:
        dist.destroy_process_group()
        store.add("fullcomp/left", 1)
        return
    deadline = time.monotonic() + LEAVE_TIMEOUT
    while store.add("fullcomp/left", 0) < here.size - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    dist.destroy_process_group()


#: Seconds a rank whose collective failed waits for the other ranks to say the same through the job's store;
#: those that do not are named as dead or hung.
ANSWER_WAIT = 2.0


def _collective(call: Any, *args: Any, **kwargs: Any) -> None:
    try:
        call(*args, **kwargs)
    except Exception as exc:  # gloo and NCCL raise RuntimeError (and subclasses) on a lost or hung peer
        here = world()
        raise DistributedError(
            f"rank {here.rank} of {here.size}: a collective failed ({type(exc).__name__}: {str(exc)[:300]}); "
            f"{_silent_ranks(here)}. The run stops"
        ) from exc


def _silent_ranks(here: World) -> str:
    """Which ranks are lost, as a sentence: every rank whose collective failed marks it in the job's store (on
    rank 0's host), and the ranks with no mark after :data:`ANSWER_WAIT` seconds are dead or hung.  The
    backends' own errors do not say which peer it was (gloo names a socket, or only a timeout)."""
    import time

    import torch.distributed as dist

    def wait(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + ANSWER_WAIT
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)

    def all_marked() -> bool:
        answered.update(r for r in range(here.size) if r not in answered and store.add(f"fullcomp/failed/{r}", 0))
        return len(answered) == here.size

    store = dist.distributed_c10d._get_default_store()
    timeout, answered = store.timeout, {here.rank}
    try:
        store.set_timeout(timedelta(seconds=ANSWER_WAIT))
        store.add(f"fullcomp/failed/{here.rank}", 1)
        wait(all_marked)
        # Rank 0 keeps the store up until the other ranks that answered have read the marks.
        if here.rank:
            store.add("fullcomp/failed/read", 1)
        else:
            wait(lambda: store.add("fullcomp/failed/read", 0) >= len(answered) - 1)
    except Exception:  # the store went with rank 0: lost, or stopped after its own mark
        if 0 not in answered:
            return "rank 0, which hosts the job's store, did not answer (dead or hung)"
    finally:
        store.set_timeout(timeout)
    silent = sorted(set(range(here.size)) - answered)
    if not silent:
        return "every rank's collective failed: the ranks reached different points of the run, or the network failed"
    ranks = f"rank {silent[0]}" if len(silent) == 1 else "ranks " + ", ".join(map(str, silent))
    return f"{ranks} did not answer within {ANSWER_WAIT:g} s (dead or hung)"


def summed(t: torch.Tensor) -> None:
    """Replace ``t`` by its sum over the ranks (an all-reduce).  Two gloo ranks swap their tensors with one
    all-gather and add them: one message each way instead of the ring all-reduce's two rounds (on this
    project's loopback 0.9-1.0 against 1.9-2.0 ms wall for 42,800 float32, at half the CPU), and since
    a + b = b + a the bits are the all-reduce's."""
    import torch.distributed as dist

    if dist.get_world_size() == 2 and dist.get_backend() == "gloo":
        parts = [torch.empty_like(t) for _ in range(2)]
        dist.all_gather(parts, t)
        torch.add(parts[0], parts[1], out=t)
    else:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)


def mean(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The average of each tensor over the ranks (one sum of one flat buffer); the tensors themselves
    when there is one process."""
    here = world()
    if not here.parallel:
        return tensors

    flat = torch.cat([t.reshape(-1) for t in tensors])
    traffic["calls"] += 1
    traffic["bytes"] += flat.numel() * flat.element_size()
    _collective(summed, flat)
    flat = flat / here.size
    out, start = [], 0
    for t in tensors:
        out.append(flat[start : start + t.numel()].view_as(t))
        start += t.numel()
    return tuple(out)


def total(value: Any) -> Any:
    """The sum over the ranks of a numpy array or tensor (one all-reduce), a new array of the same kind;
    ``value`` itself with one process.  A numpy array is summed in float64, or in float32 if it is float32.

    The sharded structured path uses it wherever a sum runs over entries that the ranks split between
    them: the linear forms V x of the model, and the Lanczos products of the nuclear LMO.
    """
    here = world()
    if not here.parallel:
        return value
    import torch.distributed as dist

    is_numpy = isinstance(value, np.ndarray)
    if is_numpy:
        t = torch.tensor(value, dtype=torch.float32 if value.dtype == np.float32 else torch.float64)
    else:
        t = value.detach().clone()
    if dist.get_backend() == "nccl" and not t.is_cuda:
        t = t.cuda()
    traffic["calls"] += 1
    traffic["bytes"] += t.numel() * t.element_size()
    _collective(summed, t)
    return t.cpu().numpy() if is_numpy else t.to(value.device)


#: Above this share of nonzero columns, :func:`mean_columns` all-reduces the dense matrix instead.
DENSE_SHARE = 0.25


def mean_columns(matrix: torch.Tensor) -> torch.Tensor:
    """The average over the ranks of an (n, m) matrix most of whose columns are zero, sending only the
    columns some rank has nonzero, with their indices.

    A minibatch Jacobian of a map that reads many entries (matrix completion: 800,000 ratings, 7,168 of
    them in a batch) is such a matrix: the traffic is O(n * columns touched) instead of O(n m).  When the
    ranks' nonzero columns are more than ``DENSE_SHARE`` of m, one dense all-reduce is cheaper and used.
    The sum runs in rank order, so two ranks give the same bits as an all-reduce.
    """
    here = world()
    if not here.parallel:
        return matrix
    cols = torch.nonzero(matrix.ne(0).any(dim=0)).reshape(-1)
    counts = gather_counts(cols.numel(), matrix.device)
    if sum(counts) > DENSE_SHARE * matrix.shape[1]:
        return mean(matrix)[0]
    out = torch.zeros_like(matrix)
    for idx, vals in zip(gather_parts(cols, counts), gather_parts(matrix[:, cols], counts)):
        out.index_add_(1, idx, vals)
    return out / here.size


def gather_counts(count: int, device: torch.device) -> list[int]:
    """Every rank's ``count``, in rank order (one all-gather)."""
    import torch.distributed as dist

    here = world()
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(here.size)]
    _collective(dist.all_gather, sizes, torch.tensor([count], device=device))
    traffic["calls"] += 1
    traffic["bytes"] += 8 * here.size
    return [int(c.item()) for c in sizes]


def gather_parts(part: torch.Tensor, counts: list[int] | None = None) -> list[torch.Tensor]:
    """Every rank's ``part`` (their last dimensions may differ), in rank order, on every rank: the lengths
    (:func:`gather_counts`) unless ``counts`` gives them, then one all-gather of the parts padded to the
    longest.  With one process, ``[part]``."""
    here = world()
    if not here.parallel:
        return [part]
    import torch.distributed as dist

    counts = gather_counts(part.shape[-1], part.device) if counts is None else counts
    padded = part.new_zeros(*part.shape[:-1], max(counts))
    padded[..., : part.shape[-1]] = part
    parts = [torch.empty_like(padded) for _ in counts]
    _collective(dist.all_gather, parts, padded)
    traffic["calls"] += 1
    traffic["bytes"] += padded.numel() * padded.element_size() * here.size
    return [p[..., :count] for p, count in zip(parts, counts)]


def agree(value: float, op: str = "max") -> float:
    """``value`` reduced over the ranks ("max" or "min"), so decisions such as a time budget are the same
    everywhere; ``value`` itself with one process."""
    here = world()
    if not here.parallel:
        return value
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    _collective(dist.all_reduce, t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN)
    return float(t.item())


def gather(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank (checkpoints keep each rank's generator state)."""
    here = world()
    if not here.parallel:
        return [value]
    import torch.distributed as dist

    out: list[Any] = [None] * here.size
    _collective(dist.all_gather_object, out, value)
    return out


__all__ = [
    "World",
    "world",
    "init",
    "leave",
    "rank_seed",
    "shard",
    "mean",
    "total",
    "summed",
    "gather_parts",
    "agree",
    "gather",
    "DistributedError",
    "DEFAULT_TIMEOUT",
]
