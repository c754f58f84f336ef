"""Problems sharded over ranks, and their single-process twins whose sampler draws the union of the ranks' batches.

Used by tests/test_distributed.py in its worker processes (``python distributed_cases.py CASE ...``) and in
the test process itself.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import sys
import time

import cvxpy as cp
import numpy as np
import torch

import fullcomp as fc
from fullcomp.distributed import rank_seed

SEED, WORLD, ROWS, BATCH = 5, 2, 64, 8
X = torch.randn(ROWS, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
TARGET = (X[:, 0] - X[:, 1] > 0).double()
A = torch.randn(3, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)


def shard_rows(rank: int) -> torch.Tensor:
    return torch.arange(ROWS)[fc.distributed.shard(ROWS, rank, WORLD)]


def sampler_for(rank: int | None):
    """rank r: BATCH rows of its shard from the run's generator; None: the union of every rank's draw."""
    if rank is not None:
        rows = shard_rows(rank)
        return lambda gen: rows[torch.randint(rows.numel(), (BATCH,), generator=gen)]
    others: dict = {}

    def union(gen):
        # The run's generator is rank 0's stream; ranks 1.. get the streams they would have in a job.
        if gen.initial_seed() == SEED and not others:
            others.update({r: torch.Generator().manual_seed(rank_seed(SEED, r)) for r in range(1, WORLD)})
        streams = [gen] + [others.get(r, torch.Generator().manual_seed(0)) for r in range(1, WORLD)]
        return torch.cat([sampler_for(r)(g) for r, g in enumerate(streams)])

    return union


def composite(rank: int | None) -> fc.CompositeProblem:
    def inner(x, rows):
        return torch.nn.functional.softplus((X[rows] * x).sum(1, keepdim=True) * A.sum(1) - A @ x).mean(0)

    exact = torch.arange(ROWS) if rank is None else shard_rows(rank)  # each rank's full batch is its shard
    return fc.CompositeProblem(
        cp.max(fc.inner_value(3)), inner, fc.L1Ball(6, 2.0), sampler=sampler_for(rank), full_batch=exact
    )


def dmax(rank: int | None) -> fc.DMaxProblem:
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    torch.manual_seed(3)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)

    def phi(net, y, rows):
        margin = net(X[rows]).squeeze(-1) * (2 * TARGET[rows] - 1)
        return torch.nn.functional.softplus(-margin).mean() + y @ net.params["0.bias"] - 0.5 * (y @ y)

    exact = torch.arange(ROWS) if rank is None else shard_rows(rank)  # each rank's full batch is its shard
    y0 = torch.zeros(4, dtype=torch.float64)
    return fc.DMaxProblem(phi, x0=model, y0=y0, Y=fc.L2Ball(4, 1.0), sampler=sampler_for(rank), full_batch=exact)


OBSERVED = torch.randperm(10 * 12, generator=torch.Generator().manual_seed(4))[:ROWS].numpy()
RATINGS = torch.randn(ROWS, generator=torch.Generator().manual_seed(5), dtype=torch.float64)


def completion(rank: int | None) -> fc.CompositeProblem:
    """Every rank reads all observed entries and samples the ratings of its own shard (reads= path)."""

    def inner(values, picks):
        err = values[picks] - RATINGS[picks]
        return torch.stack([(err**2).mean(), err.abs().mean()])

    exact = torch.arange(ROWS) if rank is None else shard_rows(rank)
    return fc.CompositeProblem(
        cp.max(fc.inner_value(2)),
        inner,
        fc.NuclearBall((10, 12), 3.0),
        sampler=sampler_for(rank),
        full_batch=exact,
        reads=OBSERVED,
    )


SHARDED_DATA = fc.datasets.synthetic_ratings(shape=(30, 20), n_ratings=400, seed=6)


def lanczos_case(rank: int, blocks: str, kind: str) -> dict:
    """Rank ``rank``'s block of rows (or of columns) of a random sparse 120 x 50 direction, priced by the
    nuclear LMO: by single-vector Lanczos, by block Lanczos (as on many entries), or by block Lanczos on the
    direction's factors (``kind`` "factored": diag(s) G with each row scaled by one of three groups' weights,
    in float32 first)."""
    from fullcomp.sets.atoms import ScaledRows
    from fullcomp.sets.lanczos import SparsePattern

    fc.sets.balls.BLOCK_ENTRIES = 500_000 if kind == "single" else 0
    gen = torch.Generator().manual_seed(7)
    flat = torch.randperm(120 * 50, generator=gen)[:1500].sort().values.numpy()
    values = torch.randn(flat.size, generator=gen, dtype=torch.float64).numpy()
    # rows 0-59 (or columns 0-24) on rank 0, the others on rank 1
    mine = (flat // 50 >= 60) == bool(rank) if blocks == "rows" else (flat % 50 >= 25) == bool(rank)
    entries = fc.sets.atoms.Entries(flat[mine], (120, 50), sharded=True)
    side = entries.check_blocks()
    X, direction, built = fc.NuclearBall((120, 50), 2.0), values[mine], []
    if kind == "factored":
        owner, q = np.arange(120) % 3, np.array([0.7, -1.3, 0.4])
        direction = ScaledRows(values[mine], owner, q, tag=0)
        values = values * q[owner[flat // 50]]  # the direction's values, for the SVD of the whole
        real = SparsePattern.scaled_operators
        SparsePattern.scaled_operators = lambda self, d: built.append(d.tag) or real(self, d)
    sums, collective = [], fc.distributed._collective  # (dtype, size) of each all-reduce, in order

    def recorded(call, t, **kwargs):
        sums.append((str(t.dtype), t.numel()))
        return collective(call, t, **kwargs)

    fc.distributed._collective = recorded
    try:
        atom, lower = X.lmo_bounded(direction, entries)
    finally:
        fc.distributed._collective = collective
        if kind == "factored":
            SparsePattern.scaled_operators = real
    found = {"u": atom.u, "v": atom.v, "flat": flat, "values": values}
    return {
        "lower": lower,
        "side": side,
        "ritz": atom.ritz is not None,
        "factored": bool(built),
        "sums": sums,
        **{k: v.tolist() for k, v in found.items()},
    }


def sums_case(rank: int) -> dict:
    """fullcomp's sum over the ranks against gloo's all-reduce, on tensors of each rank's own: whether the bits
    agree, each sum's bytes (the test compares the ranks'), and whether the sums ran with ``all_reduce``
    unavailable (two gloo ranks exchange their tensors instead)."""
    dist, found = torch.distributed, {"equal": [], "bytes": []}
    gen = torch.Generator().manual_seed(100 + rank)
    tensors = [
        torch.randn(shape, generator=gen, dtype=dtype)
        for shape in ((1,), (1000,), (4, 2675))
        for dtype in (torch.float32, torch.float64)
    ]
    real, ours = dist.all_reduce, [t.clone() for t in tensors]

    def refused(*args, **kwargs):
        raise AssertionError("all_reduce")

    dist.all_reduce = refused
    try:
        for t in ours:
            fc.distributed.summed(t)
    except AssertionError:  # on both ranks alike
        return {"without_all_reduce": False}
    finally:
        dist.all_reduce = real
    found["without_all_reduce"] = True
    for mine, t in zip(ours, tensors):
        theirs = t.clone()
        dist.all_reduce(theirs)
        found["equal"].append(torch.equal(mine, theirs))
        found["bytes"].append(mine.numpy().tobytes().hex())
    found["bytes"] = fc.distributed.gather(found["bytes"])
    return found


def subspace_case(rank: int | None) -> dict:
    """Heuristic pricing on rank ``rank``'s row block, then column block, of random 120 x 50 and 50 x 120
    patterns (None: on all of it; the basis lies on the rows, then on the columns): a basis of five atoms, a
    tracker revision by a sampled Jacobian on some entries of each block, then one price."""
    from fullcomp.oracles import BatchJacobian
    from fullcomp.sets.atoms import Entries, RankOneAtom
    from fullcomp.sets.lanczos import SparsePattern
    from fullcomp.sets.subspace import RitzSubspace
    from fullcomp.trackers import Revision

    found = {}
    for (P, Q), blocks in itertools.product(((120, 50), (50, 120)), ("rows", "cols")):
        gen = torch.Generator().manual_seed(8)
        flat = torch.randperm(P * Q, generator=gen)[:1500].sort().values.numpy()
        V = torch.randn(3, flat.size, generator=gen, dtype=torch.float64).numpy()
        sampled = torch.randn(3, flat.size, generator=gen, dtype=torch.float64).numpy()
        draw = [torch.randn(m, generator=gen, dtype=torch.float64).numpy() for m in (P, Q) * 5]
        atoms = [RankOneAtom(u, v) for u, v in zip(draw[::2], draw[1::2])]
        half = flat // Q >= P // 2 if blocks == "rows" else flat % Q >= Q // 2
        mine = np.ones(flat.size, bool) if rank is None else half == bool(rank)
        entries = Entries(flat[mine], (P, Q), sharded=rank is not None)
        ritz = RitzSubspace(2.0, entries, SparsePattern(entries.rows, entries.cols, (P, Q)))
        ritz.follow(V[:, mine], Revision(0))
        for atom in atoms:
            ritz.add(atom)
        touched = torch.from_numpy(np.flatnonzero(np.flatnonzero(mine) % 7 == 0))  # every 7th entry of the whole
        J = BatchJacobian(touched, torch.from_numpy(sampled[:, mine][:, touched.numpy()]), len(entries))
        V_next = 0.75 * V[:, mine] + 0.25 * J.dense().numpy()
        ritz.follow(V_next, Revision(1, since=0, keep=0.75, weight=0.25, jacobian=J))
        atom, value, images = ritz.price(np.array([0.2, 0.5, 0.3]))
        found[f"{P}x{Q} {blocks}"] = {
            "u": atom.u.tolist(),
            "v": atom.v.tolist(),
            "value": value,
            "images": images.tolist(),
        }
    return found


#: Large enough on both sides for block Lanczos (fullcomp.sets.balls: 8 blocks of vectors on the shorter side).
BLOCKED_DATA = fc.datasets.synthetic_ratings(shape=(48, 40), n_ratings=800, seed=6)

#: A wide problem (P < Q), whose ranks hold blocks of columns.
WIDE_DATA = fc.datasets.synthetic_ratings(shape=(20, 30), n_ratings=400, seed=6)


def sharded(rank: int | None, data=SHARDED_DATA, blocks: str = "rows") -> fc.CompositeProblem:
    """Rank ``rank``'s row (or column) block of a small completion problem; None: one process holding both
    blocks, its inner map the mean of the two ranks' and its sampler the union of their draws."""
    from fullcomp_lab import sharded_completion_problem

    if rank is not None:
        return sharded_completion_problem(data, batch=8, rank=rank, size=WORLD, blocks=blocks)
    parts = [sharded_completion_problem(data, batch=8, rank=r, size=WORLD, blocks=blocks) for r in range(WORLD)]
    cut = len(parts[0].reads)
    streams: dict = {}

    def union(gen):
        if gen.initial_seed() == SEED and not streams:
            streams.update({r: torch.Generator().manual_seed(rank_seed(SEED, r)) for r in range(1, WORLD)})
        return [parts[0].sampler(gen)] + [parts[r].sampler(streams.get(r, gen)) for r in range(1, WORLD)]

    def inner(values, batches):
        return (parts[0].inner(values[:cut], batches[0]) + parts[1].inner(values[cut:], batches[1])) / WORLD

    reads = torch.cat([torch.from_numpy(p.reads.flat) for p in parts]).numpy()
    outer = cp.max(fc.inner_value(data.n_groups))
    return fc.CompositeProblem(outer, inner, parts[0].domain, sampler=union, reads=reads, sharded=True)


def sharded_columns(rank: int | None) -> fc.CompositeProblem:
    return sharded(rank, WIDE_DATA, "cols")


def sharded_mean(rank: int | None) -> fc.CompositeProblem:
    """:func:`sharded` with the mean over the groups, affine in u: each GLMO is one LMO on sharded entries."""
    p = sharded(rank)
    u = fc.inner_value(SHARDED_DATA.n_groups)
    return fc.CompositeProblem(
        cp.sum(u) / u.size, p.inner, p.domain, sampler=p.sampler, reads=p.reads.flat, sharded=True
    )


def network(rank: int | None) -> fc.CompositeProblem:
    """A network as the variable, one l2 ball per layer: the group losses of an MLP on the rank's rows."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double()

    def inner(net, rows):
        return torch.nn.functional.softplus(net(X[rows]) * (2 * TARGET[rows, None] - 1)).mean(0)

    domain = fc.layer_domains(model, "l2", factor=3.0)
    exact = torch.arange(ROWS) if rank is None else shard_rows(rank)
    return fc.CompositeProblem(
        cp.max(fc.inner_value(3)), inner, domain, sampler=sampler_for(rank), x0=model, full_batch=exact
    )


RUNS = {  # name: (problem builder, method, options)
    "hmsfw": (composite, "hmsfw", {}),
    "hmsfw-network": (network, "hmsfw", {}),
    "hmsfw-structured": (completion, "hmsfw", {"max_pricing": 3}),
    "psg": (composite, "psg", {"eta": 0.1}),
    "smag": (dmax, "smag", {"gamma": 0.5, "eta0": 0.2, "eta1": 0.1}),
    "hmsfw-sharded": (sharded, "hmsfw", {"max_pricing": 4}),
    "hmsfw-sharded-cols": (sharded_columns, "hmsfw", {"max_pricing": 4}),
    "hmsfw-sharded-mean": (sharded_mean, "hmsfw", {}),
    "clipped-scfw-sharded": (sharded, "clipped-scfw", {"max_pricing": 4, "clip": 0.05}),
    "psg-sharded": (sharded, "psg", {"eta": 0.5}),
    "prox-linear-sharded": (sharded, "prox-linear", {}),
    "prox-linear-subgradient-sharded": (sharded, "prox-linear", {"subproblem": "subgradient"}),
    "linasa-icg-sharded": (sharded, "linasa-icg", {"icg_steps": "sqrt"}),
}


def flat(x) -> list[float]:
    if x is None:
        return []
    if isinstance(x, torch.nn.Module):
        x = dict(x.named_parameters())
    if isinstance(x, dict):
        x = torch.cat([v.detach().reshape(-1) for v in x.values()])
    return x.detach().reshape(-1).tolist()


def record(result) -> dict:
    rows = [{k: v for k, v in r.items() if k != "time"} for r in result.history]
    return {"x": flat(result.x), "rows": rows, "route": result.info.get("glmo_route")}


def on_cuda(rank: int) -> fc.CompositeProblem:
    """The composite case with its data on this rank's GPU (NCCL reduces CUDA tensors only)."""
    device = torch.device("cuda", torch.cuda.current_device())
    Xd, Ad, rows = X.to(device), A.to(device), shard_rows(rank).to(device)

    def inner(x, picks):
        return torch.nn.functional.softplus((Xd[picks] * x).sum(1, keepdim=True) * Ad.sum(1) - Ad @ x).mean(0)

    def sampler(gen):
        return rows[torch.randint(rows.numel(), (BATCH,), generator=gen, device=device)]

    return fc.CompositeProblem(cp.max(fc.inner_value(3)), inner, fc.L1Ball(6, 2.0), sampler=sampler)


def touched_union(data=SHARDED_DATA, blocks: str = "rows") -> fc.CompositeProblem:
    """The one-process twin of :func:`sharded` declared, as each rank's part is, on the entries its batches
    touch: its tracker then moves by sparse revisions, as the ranks' do."""
    from fullcomp_lab import sharded_completion_problem

    parts = [sharded_completion_problem(data, batch=8, rank=r, size=WORLD, blocks=blocks) for r in range(WORLD)]
    union, starts = sharded(None, data, blocks), [0, len(parts[0].reads)]

    def touches(batches):
        return torch.cat([p.touches(b) + s for p, b, s in zip(parts, batches, starts)])

    def inner(values, batches):
        pieces = values.split([p.touches(b).numel() for p, b in zip(parts, batches)])
        return sum(p.inner_on_touched(v, b) for p, v, b in zip(parts, pieces, batches)) / WORLD

    outer = cp.max(fc.inner_value(data.n_groups))
    return fc.CompositeProblem(
        outer, inner, parts[0].domain, sampler=union.sampler, reads=union.reads.flat, touches=touches, sharded=True
    )


def subspace_run(rank: int | None, blocked: bool = False, blocks: str = "rows") -> dict:
    """Certified HMSFW on the sharded problem with heuristic pricing on (its thresholds lowered to this size),
    how many heuristic atoms its GLMOs used and how many GLMO calls priced on the direction's factors; None: on
    :func:`touched_union`.  ``blocked``: block Lanczos too, which prices row-scaled directions by their factors."""
    from fullcomp.glmo import ColumnGenerationGLMO
    from fullcomp.sets.lanczos import SparsePattern

    balls, colgen = fc.sets.balls, importlib.import_module("fullcomp.glmo.colgen")
    thresholds = balls.DENSE_SIDE, balls.SUBSPACE_ENTRIES, balls.BLOCK_ENTRIES, colgen.LAZY_ENTRIES
    balls.DENSE_SIDE, balls.SUBSPACE_ENTRIES = 0, 0
    if blocked:  # lazy atoms too: their images come from the factors
        balls.BLOCK_ENTRIES = colgen.LAZY_ENTRIES = 0
    real, used, factored = (ColumnGenerationGLMO.solve, SparsePattern.scaled_operators), [], []

    def counted(self, *args, **kwargs):
        res = real[0](self, *args, **kwargs)
        used.append(res.heuristic)
        return res

    ColumnGenerationGLMO.solve = counted
    SparsePattern.scaled_operators = lambda self, d: factored.append(d.tag) or real[1](self, d)
    try:
        data = BLOCKED_DATA if blocked else SHARDED_DATA
        problem = touched_union(data, blocks) if rank is None else sharded(rank, data, blocks)
        result = fc.solve(problem, "hmsfw", iters=10, seed=SEED, progress=False)
    finally:
        ColumnGenerationGLMO.solve, SparsePattern.scaled_operators = real
        balls.DENSE_SIDE, balls.SUBSPACE_ENTRIES, balls.BLOCK_ENTRIES, colgen.LAZY_ENTRIES = thresholds
    return {**record(result), "heuristic": sum(used), "factored": len(set(factored))}


#: The "hang" case: its collectives' timeout, and how long rank 1 stays silent (well past the timeout and the
#: others' wait for a reply).
HANG_TIMEOUT, HANG_SLEEP = 4.0, 16.0


def worker(case: str, out: str, extra: str) -> None:
    """One rank of a 2-process job on 127.0.0.1 (the test sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""
    timeout = {"nccl": 60.0, "hang": HANG_TIMEOUT, "disagree": HANG_TIMEOUT}.get(case, 15.0)
    here = fc.distributed.init(backend="nccl" if case == "nccl" else "gloo", timeout=timeout)
    found: dict = {}
    if case == "equivalence":
        collective, biggest = fc.distributed._collective, [0]

        def recorded(call, *args, **kwargs):  # the largest sum over the ranks of a run
            if call is fc.distributed.summed:
                biggest[0] = max(biggest[0], args[0].numel())
            return collective(call, *args, **kwargs)

        fc.distributed._collective = recorded
        for name, (build, method, options) in RUNS.items():
            before, biggest[0] = dict(fc.distributed.traffic), 0
            found[name] = record(fc.solve(build(here.rank), method, iters=20, seed=SEED, progress=False, **options))
            found[name]["bytes"] = fc.distributed.traffic["bytes"] - before["bytes"]
            found[name]["biggest"] = biggest[0]
        fc.distributed._collective = collective
    elif case == "checkpoint":
        build, _, options = RUNS["hmsfw"]
        path = os.path.join(extra, "run.ckpt")
        fc.solve(build(here.rank), "hmsfw", iters=8, seed=SEED, progress=False, checkpoint=fc.Checkpoint(path, every=4))
        resumed = fc.solve(
            build(here.rank), "hmsfw", iters=16, seed=SEED, progress=False, checkpoint=fc.Checkpoint(path, every=4)
        )
        whole = fc.solve(build(here.rank), "hmsfw", iters=16, seed=SEED, progress=False)
        found = {"resumed_from": resumed.info["resumed_from"], "resumed": record(resumed), "whole": record(whole)}
    elif case == "nccl":
        result = fc.solve(on_cuda(here.rank), "hmsfw", iters=10, seed=SEED, progress=False)
        found = {"x": fc.distributed.gather(flat(result.x.cpu())), "device": result.info["device"]}
    elif case == "overlap":
        try:  # both ranks declare rank 0's block of rows
            fc.solve(sharded(0), "hmsfw", iters=2, seed=SEED, progress=False)
        except fc.errors.OptionError as exc:
            found = {"error": str(exc)}
    elif case == "lanczos":
        found = {
            f"{blocks}-{kind}": lanczos_case(here.rank, blocks, kind)
            for blocks, kind in itertools.product(("rows", "cols"), ("single", "block", "factored"))
        }
        found["sums"] = sums_case(here.rank)
    elif case == "subspace":
        found = subspace_case(here.rank)
    elif case == "subspace-run":
        found = subspace_run(here.rank)
    elif case == "factored-run":
        found = {blocks: subspace_run(here.rank, blocked=True, blocks=blocks) for blocks in ("rows", "cols")}
    elif case == "sharded-checkpoint":
        path = os.path.join(extra, "sharded.ckpt")
        run = dict(seed=SEED, progress=False, max_pricing=4)
        fc.solve(sharded(here.rank), "hmsfw", iters=6, checkpoint=fc.Checkpoint(path, every=3), **run)
        resumed = fc.solve(sharded(here.rank), "hmsfw", iters=12, checkpoint=fc.Checkpoint(path, every=3), **run)
        whole = fc.solve(sharded(here.rank), "hmsfw", iters=12, **run)
        found = {"resumed_from": resumed.info["resumed_from"], "resumed": record(resumed), "whole": record(whole)}
        path = os.path.join(extra, "psg.ckpt")
        run = dict(seed=SEED, progress=False, eta=0.5)
        fc.solve(sharded(here.rank), "psg", iters=6, checkpoint=fc.Checkpoint(path, every=3), **run)
        resumed = fc.solve(sharded(here.rank), "psg", iters=12, checkpoint=fc.Checkpoint(path, every=3), **run)
        whole = fc.solve(sharded(here.rank), "psg", iters=12, **run)
        found["psg"] = {"resumed_from": resumed.info["resumed_from"], "same": record(resumed) == record(whole)}
    elif case == "disagree":  # rank 0 averages while rank 1 waits at the closing barrier: both time out
        started = time.monotonic()
        try:
            fc.distributed.mean(torch.ones(3)) if here.rank == 0 else fc.distributed.leave()
        except fc.errors.DistributedError as exc:
            found = {"error": str(exc), "seconds": time.monotonic() - started}
        with open(os.path.join(extra, f"rank{here.rank}.json"), "w") as fh:
            json.dump(found, fh)
        if here.rank == 0:  # at once, with the store it hosts: the other rank must have read the marks by then
            with open(out, "w") as fh:
                json.dump(found, fh)
            os._exit(0)
    elif case in ("kill", "hang", "kill-host"):
        lost = 0 if case == "kill-host" else 1  # rank 0 hosts the job's store

        def die(it):
            if here.rank == lost and it.k == 5:
                if case == "hang":  # alive, but silent past the timeout; it leaves once the test is done with it
                    time.sleep(HANG_SLEEP)
                os._exit(3)  # a rank lost mid-run, with no goodbye

        started = time.monotonic()
        try:
            fc.solve(composite(here.rank), "hmsfw", iters=10_000, seed=SEED, progress=False, callback=die)
        except fc.errors.DistributedError as exc:
            found = {"error": str(exc), "seconds": time.monotonic() - started}
    if here.rank == (1 if case == "kill-host" else 0):
        with open(out, "w") as fh:
            json.dump(found, fh)
    if case not in ("kill", "hang", "kill-host", "disagree"):
        fc.distributed.leave()


if __name__ == "__main__":
    worker(*sys.argv[1:4])
