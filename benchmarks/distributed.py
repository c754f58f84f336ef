"""Data-parallel fullcomp on 1 and 2 local processes (gloo on 127.0.0.1, one thread each), measured in one run.

- The PU protocol's SMAG (digits, global batch 64 + 64 split evenly over the ranks, each rank sampling its own
  shard of S_+ and S_u): optimizer seconds per epoch (|S_u| / 64 updates) with 1 and with 2 processes.
- HMSFW on a dense composite problem (7 group losses of a d = 2,000 logistic model, global batch 256 rows):
  seconds per update and the bytes each update all-reduces (measured by ``fullcomp.distributed.traffic``).
- A projection to 8 and 64 hosts from these measurements and a network model stated below.

    python benchmarks/distributed.py
    python benchmarks/distributed.py --latency-us 50 --bandwidth-gbs 1.25    # the network model's parameters
    python benchmarks/distributed.py --completion large   # instead: certified HMSFW II at 10M ratings
    python benchmarks/distributed.py --completion large --rounds 3   # 1 and 2 processes alternated 3 times

- With ``--completion small`` (6040 x 3706, 1M ratings) or ``large`` (70,000 x 10,700, 10M ratings), instead of
  the above: certified HMSFW II on synthetic ratings, global batch 1,024 ratings per group; optimizer seconds per
  update, bytes sent per update and peak memory per rank, on 1 process and on 2.  ``--layout sharded`` (default):
  each rank holds a block of rows, its tracker columns and its share of the Lanczos products
  (``sharded_completion_problem``); ``--layout replicated``: every rank reads every rating and repeats the whole
  tracker and GLMO (see docs/distributed.md).  The sharded layout's ranks sample their blocks, not the whole
  matrix, so their run takes another path than the plain 1-process one; the time ratios that compare the same
  work divide by a 1-process run of that path (``union_of_shards``), the memory ratio by the plain run.
- With ``--completion methods``: certified HMSFW, PSG, prox-linear and LiNASA+ICG on a sharded 943 x 1682 synthetic
  completion of 100,000 ratings, 1 process on the 2-rank run's path against 2 processes, seconds and bytes per
  update.  The projection methods keep the dense iterate on every rank.

Not measured here: anything on NCCL or across hosts.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import cvxpy as cp
import numpy as np
import torch
from time_split import SparseProducts, steady

import fullcomp as fc
from fullcomp_lab.datasets import digits, pu_problem, pu_split

ITERS_DENSE = 60
ITERS_COMPLETION = 10
FIXED_CALLS = 8
RANKS = 2
COMPLETION = {"small": ((6040, 3706), 1_000_000), "large": ((70_000, 10_700), 10_000_000)}
#: ``--completion methods``: every composite method with a nuclear-ball iterate, on a MovieLens-100K-sized problem.
METHODS_SHAPE, METHODS_RATINGS, ITERS_METHODS = (943, 1682), 100_000, 10
METHODS = {"hmsfw": {}, "psg": {}, "prox-linear": {}, "linasa-icg": {"icg_steps": "sqrt"}}


def pu_on_shard(world: fc.distributed.World):
    data = pu_split(digits(), split_seed=0)
    part = dataclasses.replace(
        data,
        positive=data.positive[fc.distributed.shard(len(data.positive), world.rank, world.size)],
        unlabeled=data.unlabeled[fc.distributed.shard(len(data.unlabeled), world.rank, world.size)],
    )
    return pu_problem(part, batch=64 // world.size), len(data.unlabeled) // 64


def dense_on_shard(world: fc.distributed.World, rows: int = 4096, d: int = 2000, groups: int = 7):
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(rows, d, generator=gen, dtype=torch.float64) / d**0.5
    y = torch.sign(X[:, 0] + 0.1 * torch.randn(rows, generator=gen, dtype=torch.float64))
    g = torch.arange(rows) % groups
    mine = torch.arange(rows)[fc.distributed.shard(rows, world.rank, world.size)]
    per = 256 // world.size

    def inner(w, idx):
        losses = torch.nn.functional.softplus(-y[idx] * (X[idx] @ w))
        return torch.zeros(groups, dtype=w.dtype).index_add(0, g[idx], losses) / (idx.numel() / groups)

    def sampler(gen):
        return mine[torch.randint(mine.numel(), (per,), generator=gen)]

    return fc.CompositeProblem(cp.max(fc.inner_value(groups)), inner, fc.L1Ball(d, 10.0), sampler=sampler)


def jacobian_seconds(problem: fc.CompositeProblem, repeats: int = 30) -> float:
    """Seconds of one sample and its Jacobian on one process: the part of an update that divides over ranks."""
    from fullcomp.oracles import InnerOracle

    oracle = InnerOracle(problem.inner, problem.n, problem.domain.shape, "cpu", torch.float64)
    gen, y = torch.Generator().manual_seed(1), torch.zeros(problem.domain.size, dtype=torch.float64)
    start = time.perf_counter()
    for k in range(repeats):
        oracle(y, problem.sample(gen), k)
    return (time.perf_counter() - start) / repeats


def completion_case(world: fc.distributed.World, size: str, layout: str) -> dict:
    """Certified HMSFW II on synthetic ratings, 1024 ratings per group in all.

    One process: the plain structured problem, and with ``layout="sharded"`` also the 2-rank run's path
    (:func:`union_of_shards`) for the time ratios.  ``layout="sharded"``: each rank holds a block of rows and
    its share of the ratings (``sharded_completion_problem``); ``"replicated"``: every rank reads every
    rating, draws 1024 / W per group, and keeps the whole tracker and GLMO.
    """
    import gc

    from fullcomp_lab import completion_problem, sharded_completion_problem

    shape, n_ratings = COMPLETION[size]
    data = fc.datasets.synthetic_ratings(shape=shape, n_ratings=n_ratings, seed=0)
    if world.parallel and layout == "sharded":
        problem = sharded_completion_problem(data, "max", batch=1024, rank=world.rank, size=world.size)
    else:
        problem = completion_problem(data, "max", batch=1024 // world.size).problem
    del data
    gc.collect()
    # The run's own peak: every rank here generated the whole synthetic data set first, which a rank
    # reading its own files would not; Linux resets the high-water mark on request.
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    fc.distributed.traffic.update(calls=0, bytes=0)
    with CollectiveStamps() as stamps:
        res = fc.hmsfw(problem, iters=ITERS_COMPLETION, seed=0, progress=False)
    steady_s, steady_from, steady_calls = steady(res)
    found = {
        "steady_s": steady_s,
        "steady_from": steady_from,
        "steady_calls": steady_calls,
        "update_s": res.info["optimizer_seconds"] / ITERS_COMPLETION,
        "bytes_per_update": fc.distributed.traffic["bytes"] / (ITERS_COMPLETION + 1),
        "calls_per_update": fc.distributed.traffic["calls"] / (ITERS_COMPLETION + 1),
        "pricing_calls": float(res.history.column("pricing_calls")[:-1].mean()),
        "peak_gb": peak_rss_gb(),
        "peak_gb_with_data": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
        "reads": len(problem.reads),
        "waits": stamps.split() if world.parallel else None,
        "traffic": stamps.traffic(),
    }
    if not world.parallel and layout == "sharded":
        # The 2-rank run's own path on one process: the figures compare the same work.  Built after the plain
        # run, whose peak memory is the 1-process figure.
        del problem
        gc.collect()
        twin = union_of_shards(fc.datasets.synthetic_ratings(shape=shape, n_ratings=n_ratings, seed=0), RANKS)
        with SparseProducts() as count:
            res = fc.hmsfw(twin, iters=ITERS_COMPLETION, seed=0, progress=False)
        found["twin"] = {
            "update_s": res.info["optimizer_seconds"] / ITERS_COMPLETION,
            "pricing_calls": float(res.history.column("pricing_calls")[:-1].mean()),
            "products": count.products / (ITERS_COMPLETION + 1),
            "objective": float(res.history.column("objective_estimate")[-1]),
        }
        problem = twin
    else:
        found["objective"] = float(res.history.column("objective_estimate")[-1])
    # Fixed budget: the same number of pricing calls in every update on 1 and 2 processes.
    with SparseProducts() as count:
        fixed = fc.hmsfw(
            problem, iters=ITERS_COMPLETION, seed=0, progress=False, glmo_tol=None, max_pricing=FIXED_CALLS
        )
    found["fixed_update_s"] = fixed.info["optimizer_seconds"] / ITERS_COMPLETION
    # The closing row prices too: products per GLMO call.  The budget fixes pricing calls, not Lanczos steps.
    found["fixed_products"] = count.products / (ITERS_COMPLETION + 1)
    found["fixed_steady_s"], found["fixed_steady_from"], _ = steady(fixed)
    return found


class CollectiveStamps:
    """``with CollectiveStamps() as stamps: ...`` times every collective of the run on each rank: when the rank
    called it and when it returned (``time.perf_counter``, one clock for the processes of a host).  Then
    :meth:`split` (a collective itself) divides the ranks' time in them into latency, from the last rank's
    arrival to the first one's departure, and imbalance, the wait for the last arrival.  It also records each
    collective's bytes and whether a Lanczos run made it (:meth:`traffic`, this rank's own)."""

    def __enter__(self) -> CollectiveStamps:
        from fullcomp.sets import lanczos

        self.stamps, self.sizes, self._real = [], [], fc.distributed._collective
        pricers = ("top_singular_pair", "top_singular_block")
        self._pricers = [(lanczos, name, getattr(lanczos, name)) for name in pricers]
        depth = [0]  # > 0 inside a Lanczos run (a block run may hand over to a single-vector one)

        def stamped(call, *args, **kwargs):
            start = time.perf_counter()
            self._real(call, *args, **kwargs)
            self.stamps.append((start, time.perf_counter()))
            sent = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
            self.sizes.append((sent, depth[0] > 0))

        def flagged(real):
            def run(*args, **kwargs):
                depth[0] += 1
                try:
                    return real(*args, **kwargs)
                finally:
                    depth[0] -= 1

            return run

        fc.distributed._collective = stamped
        for module, name, real in self._pricers:
            setattr(module, name, flagged(real))
        return self

    def __exit__(self, *exc) -> None:
        fc.distributed._collective = self._real
        for module, name, real in self._pricers:
            setattr(module, name, real)

    def traffic(self) -> dict:
        """This rank's sums, counted and in bytes: in the Lanczos runs (one to start, one per step, one for the other
        side's vector at the end) and elsewhere, and the Lanczos sums' commonest sizes with their counts."""
        inside = [sent for sent, lanczos in self.sizes if lanczos]
        outside = [sent for sent, lanczos in self.sizes if not lanczos]
        return {
            "lanczos": (len(inside), sum(inside)),
            "other": (len(outside), sum(outside)),
            "sizes": collections.Counter(inside).most_common(3),
        }

    def split(self) -> dict:
        ranks = np.array(fc.distributed.gather(self.stamps))  # (ranks, collectives, 2)
        arrive, leave = ranks[:, :, 0], ranks[:, :, 1]
        latency = leave.min(axis=0) - arrive.max(axis=0)
        return {
            "collectives": ranks.shape[1],
            "latency_median_ms": float(np.median(latency)) * 1e3,
            "latency_s": float(latency.sum()),
            "imbalance_s": float((arrive.max(axis=0) - arrive.min(axis=0)).sum()),
            "waited_s": [float(w) for w in (leave - arrive).sum(axis=1)],
            # Two ranks reach the next collective apart by how far apart they left this one plus how much
            # longer one of them worked in between.
            "departures_apart_s": float((leave.max(axis=0) - leave.min(axis=0)).sum()),
            "work_apart_s": float(np.ptp(arrive[:, 1:] - leave[:, :-1], axis=0).sum()),
        }


def methods_case(world: fc.distributed.World) -> dict:
    """Each of :data:`METHODS` (certified HMSFW and the projection methods PSG, prox-linear, LiNASA+ICG) on the
    sharded synthetic completion problem of :data:`METHODS_SHAPE`: on 2 ranks, each its block of rows; on one
    process, the 2-rank run's path (:func:`union_of_shards`).  Optimizer seconds and bytes sent per update."""
    from fullcomp_lab import sharded_completion_problem

    data = fc.datasets.synthetic_ratings(shape=METHODS_SHAPE, n_ratings=METHODS_RATINGS, seed=0)
    if world.parallel:
        problem = sharded_completion_problem(data, "max", batch=1024, rank=world.rank, size=world.size)
    else:
        problem = union_of_shards(data, RANKS)
    found = {}
    for method, settings in METHODS.items():
        fc.distributed.traffic.update(calls=0, bytes=0)
        res = fc.solve(problem, method, iters=ITERS_METHODS, seed=0, progress=False, **settings)
        found[method] = {
            "update_s": res.info["optimizer_seconds"] / ITERS_METHODS,
            "bytes_per_update": fc.distributed.traffic["bytes"] / (ITERS_METHODS + 1),
            "objective": float(res.history.column("objective_estimate")[-1]),
        }
    return found


def union_of_shards(data: fc.datasets.RatingData, ranks: int) -> fc.CompositeProblem:
    """The ``ranks``-process sharded problem on one process: every rank's row block, the sum of the ranks'
    maps divided by ``ranks`` (the all-reduced mean), and a sampler drawing the union of the ranks' batches,
    rank r's from the stream ``rank_seed(seed, r)`` (docs/distributed.md's sampling rule).  A run takes the
    path of the distributed run to rounding, so its time per update is that run's work on one process.
    """
    from fullcomp_lab import sharded_completion_problem

    parts = [sharded_completion_problem(data, "max", batch=1024, rank=r, size=ranks) for r in range(ranks)]
    starts = np.cumsum([0] + [len(p.reads) for p in parts[:-1]])
    streams: dict = {}

    def sampler(gen: torch.Generator) -> list:
        if streams.get(0) is not gen:  # a new run: rank 0 draws from its generator, fresh streams for the others
            seed = gen.initial_seed()
            streams[0] = gen
            for r in range(1, ranks):
                streams[r] = torch.Generator().manual_seed(fc.distributed.rank_seed(seed, r))
        return [p.sampler(streams[r]) for r, p in enumerate(parts)]

    def touches(batches: list) -> torch.Tensor:
        return torch.cat([p.touches(b) + int(s) for p, b, s in zip(parts, batches, starts)])

    def inner(values: torch.Tensor, batches: list) -> torch.Tensor:
        pieces = values.split([p.touches(b).numel() for p, b in zip(parts, batches)])
        return sum(p.inner_on_touched(v, b) for p, v, b in zip(parts, pieces, batches)) / ranks

    reads = np.concatenate([p.reads.flat for p in parts])
    outer = cp.max(fc.inner_value(data.n_groups))
    return fc.CompositeProblem(
        outer, inner, parts[0].domain, sampler=sampler, reads=reads, touches=touches, sharded=True
    )


def peak_rss_gb() -> float:
    """VmHWM of this process (since the last reset through /proc/self/clear_refs), in GB."""
    with open("/proc/self/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
    return kb / 1024**2


def allreduce_seconds(world: fc.distributed.World, numbers: int = 1000, repeats: int = 200) -> float | None:
    """Wall seconds of one bare all-reduce of ``numbers`` float64 between the ranks (None on one process)."""
    if not world.parallel:
        return None
    t = torch.ones(numbers, dtype=torch.float64)
    for _ in range(20):
        torch.distributed.all_reduce(t)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.distributed.all_reduce(t)
    return (time.perf_counter() - start) / repeats


def measure(world: fc.distributed.World, completion: str = "none", layout: str = "sharded") -> dict:
    torch.set_num_threads(1)
    if completion == "methods":
        return methods_case(world)
    if completion != "none":
        return completion_case(world, completion, layout)
    pu, per_epoch = pu_on_shard(world)
    fc.distributed.traffic.update(calls=0, bytes=0)
    smag = fc.smag(pu, gamma=0.5, eta0=0.2, eta1=0.1, iters=3 * per_epoch, seed=0, progress=False)
    smag_reductions = fc.distributed.traffic["calls"] / (3 * per_epoch)
    fc.distributed.traffic.update(calls=0, bytes=0)
    problem = dense_on_shard(world)
    dense = fc.hmsfw(problem, iters=ITERS_DENSE, seed=0, progress=False, max_pricing=5)
    sent = dict(fc.distributed.traffic)  # the first sample at set-up is one more reduction than the updates
    return {
        "smag_epoch_s": smag.info["optimizer_seconds"] / 3,
        "smag_reductions_per_update": smag_reductions,
        "allreduce_s": allreduce_seconds(world),
        "dense_update_s": dense.info["optimizer_seconds"] / ITERS_DENSE,
        "dense_bytes_per_update": sent["bytes"] / (ITERS_DENSE + 1),
        "dense_reductions_per_update": sent["calls"] / (ITERS_DENSE + 1),
        "jacobian_s": jacobian_seconds(problem),
    }


def worker(out: str, completion: str, layout: str) -> None:
    world = fc.distributed.init(backend="gloo", timeout=600)
    found = measure(world, completion, layout)
    found["peak_gb_ranks"] = fc.distributed.gather(found.get("peak_gb"))
    if world.writes:
        with open(out, "w") as fh:
            json.dump(found, fh)
    fc.distributed.leave()


def two_processes(completion: str = "none", layout: str = "sharded") -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tempfile.mktemp(suffix=".json")
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", out, "--completion", completion, "--layout", layout],
            env={
                **os.environ,
                "RANK": str(r),
                "LOCAL_RANK": str(r),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "OMP_NUM_THREADS": "1",
            },
        )
        for r in range(2)
    ]
    for p in procs:
        p.wait(timeout=1800)
    with open(out) as fh:
        return json.load(fh)


def project_sharded(one: dict, two: dict, alpha: float, beta: float) -> None:
    """Certified updates on W hosts: the 1-process compute divided by W (the master, n x pool, is not, and is
    left in), plus the measured all-reduces per update, each a ring all-reduce of its mean size."""
    calls, size = two["calls_per_update"], two["bytes_per_update"] / max(two["calls_per_update"], 1)
    print(
        f"projection, sharded (ring all-reduce, alpha = {alpha * 1e6:g} us, beta = {beta / 1e9:g} GB/s; "
        f"{calls:.0f} all-reduces of {size / 1e3:.1f} kB mean per update, measured on 2 ranks; compute "
        f"{one['update_s']:.2f} s on 1 process divided by W)"
    )
    for hosts in (8, 64):
        comm = calls * 2 * (hosts - 1) * (alpha + size / hosts / beta)
        t = one["update_s"] / hosts + comm
        print(f"  {hosts:>2} hosts: {t:.3f} s per update ({comm:.3f} s of it communication)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--latency-us", type=float, default=50.0, help="per-message latency alpha (default 50 us)")
    parser.add_argument("--bandwidth-gbs", type=float, default=1.25, help="link bandwidth (default 1.25 GB/s, 10 GbE)")
    parser.add_argument(
        "--completion",
        choices=("none", *COMPLETION, "methods"),
        default="none",
        help="instead: the structured completion case; 'methods': every composite method on a smaller one",
    )
    parser.add_argument(
        "--layout",
        choices=("sharded", "replicated"),
        default="sharded",
        help="with --completion: rows sharded over the ranks (default) or every rank holding every rating",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --completion small or large: 1- and 2-process runs alternated this many times; the figures "
        "are the first round's (later 1-process rounds start with what earlier ones left in this process, which "
        "flatters the memory ratio), and the certified ratio is printed for every round with its median (default 1)",
    )
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.completion, args.layout)
    if args.completion == "methods":
        one, two = measure(fc.distributed.World(), "methods"), two_processes("methods")
        P, Q = METHODS_SHAPE
        print(
            f"composite methods on a sharded synthetic completion ({P} x {Q}, {METHODS_RATINGS:,} ratings, rows "
            f"split over 2 ranks), {ITERS_METHODS} updates; 1 process on the 2-rank run's path"
        )
        for method in METHODS:
            a, b = one[method], two[method]
            print(
                f"  {method:<12} 1 process {a['update_s']:.4f} s   2 processes {b['update_s']:.4f} s per update   "
                f"ratio {b['update_s'] / a['update_s']:.2f}   sent {b['bytes_per_update'] / 1e6:.2f} MB per update "
                f"(rank 0)   final objective estimate {a['objective']:.8f} / {b['objective']:.8f}"
            )
        return
    if args.completion != "none":
        # Alternated, so that the shared machine's load moves both sides of a round's ratio alike.
        rounds = []
        for _ in range(max(args.rounds, 1)):
            alone = measure(fc.distributed.World(), args.completion, args.layout)
            rounds.append((alone, two_processes(args.completion, args.layout)))
        one, two = rounds[0]
        print(
            f"certified HMSFW II, synthetic completion ({args.completion}, {one['reads']:,} read entries; "
            f"2 processes: {args.layout})"
        )
        for name, r in (("1 process", one), ("2 processes", two)):
            peaks = " / ".join(f"{g:.2f}" for g in r.get("peak_gb_ranks") or [r["peak_gb"]])
            print(
                f"  {name}: certified {r['update_s']:.3f} optimizer s per update ({r['pricing_calls']:.1f} pricing "
                f"calls), fixed budget of {FIXED_CALLS} calls{' on the 2-rank path' if 'twin' in r else ''} "
                f"{r['fixed_update_s']:.3f} s per update; "
                f"{r['bytes_per_update'] / 1e6:.2f} MB sent per certified update (rank 0); peak memory of the run "
                f"{peaks} GB per rank ({r['peak_gb_with_data']:.2f} GB with the generated data set)"
            )
            print(
                f"    once the atom pool is full: certified {r['steady_s']:.3f} s per update from update "
                f"{r['steady_from']} ({r['steady_calls']:.1f} calls), fixed budget {r['fixed_steady_s']:.3f} s "
                f"from update {r['fixed_steady_from']}"
            )
            print(
                f"    fixed budget: {r['fixed_products']:.0f} sparse products per update (rank 0; two per Lanczos "
                f"step), {r['fixed_update_s'] / r['fixed_products'] * 1e3:.1f} ms of the update per product"
            )
        waits = two["waits"]
        if waits is not None:
            print(
                f"    in its collectives ({waits['collectives'] / ITERS_COMPLETION:.0f} per update, set-up's too): "
                f"rank 0 waited {waits['waited_s'][0] / ITERS_COMPLETION:.3f} s per update, rank 1 "
                f"{waits['waited_s'][1] / ITERS_COMPLETION:.3f} s; latency (last arrival to first departure) "
                f"{waits['latency_s'] / ITERS_COMPLETION:.3f} s per update, median {waits['latency_median_ms']:.2f} ms "
                f"a collective; ranks' arrivals apart {waits['imbalance_s'] / ITERS_COMPLETION:.3f} s per update "
                f"(their departures from the collective before were "
                f"{waits['departures_apart_s'] / ITERS_COMPLETION:.3f} s apart, and their work in between "
                f"{waits['work_apart_s'] / ITERS_COMPLETION:.3f} s)"
            )
            # Per update as the bytes above: the closing row's GLMO counts as one.
            (inside, in_bytes), (outside, out_bytes) = two["traffic"]["lanczos"], two["traffic"]["other"]
            per = ITERS_COMPLETION + 1
            sizes = ", ".join(f"{n / per:.0f} of {b / 1e3:.1f} kB" for b, n in two["traffic"]["sizes"])
            print(
                f"    sent by rank 0 per update: {in_bytes / per / 1e6:.2f} MB in the Lanczos runs' {inside / per:.0f} "
                f"sums (commonest: {sizes}; a block step sums the block's products on the iteration's side, in "
                f"float32 then float64, and a run ends with one sum of the other side's vector), "
                f"{out_bytes / per / 1e6:.3f} MB in {outside / per:.0f} other sums"
            )
        dense_mb = 8 * 7 * one["reads"] / 1e6
        peak_ratio = max(two["peak_gb_ranks"]) / one["peak_gb"]
        twin = one.get("twin")
        if twin is not None:
            print(
                f"  1 process on the 2-rank run's path (every block, the union of the ranks' batches): certified "
                f"{twin['update_s']:.3f} s per update ({twin['pricing_calls']:.1f} pricing calls, "
                f"{twin['products']:.0f} sparse products per update); final objective estimate "
                f"{twin['objective']:.10f} against {two['objective']:.10f} on 2 processes"
            )
            print(
                f"  ratio 2/1 on the same path: certified time {two['update_s'] / twin['update_s']:.2f} (target <= 0.6)"
            )
            if len(rounds) > 1:
                ratios = [b["update_s"] / a["twin"]["update_s"] for a, b in rounds]
                print(
                    f"  the same ratio in each of {len(rounds)} alternated rounds: "
                    f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}"
                )
        print(
            f"  ratio 2/1: fixed-budget time {two['fixed_update_s'] / one['fixed_update_s']:.2f} (same path "
            f"{'' if twin else 'not '}taken); pool full: fixed budget "
            f"{two['fixed_steady_s'] / one['fixed_steady_s']:.2f}; per sparse product: "
            f"{two['fixed_update_s'] * one['fixed_products'] / (one['fixed_update_s'] * two['fixed_products']):.2f}; "
            f"certified on the plain problem {two['update_s'] / one['update_s']:.2f} (different paths); "
            f"peak memory per rank against the plain problem {peak_ratio:.2f} (target <= 0.6); a dense all-reduce "
            f"of the Jacobian would send {dense_mb:.0f} MB"
        )
        if args.layout == "sharded":
            project_sharded(one, two, args.latency_us * 1e-6, args.bandwidth_gbs * 1e9)
        return
    one, two = measure(fc.distributed.World()), two_processes()
    print("PU protocol, SMAG (digits), optimizer seconds per epoch")
    print(
        f"  1 process {one['smag_epoch_s']:.3f}   2 processes {two['smag_epoch_s']:.3f}   "
        f"ratio {two['smag_epoch_s'] / one['smag_epoch_s']:.2f}"
    )
    print(
        f"  {two['smag_reductions_per_update']:.2f} all-reduces per update on 2 processes; one bare all-reduce of "
        f"1,000 float64 on this loopback takes {two['allreduce_s'] * 1e3:.2f} ms (wall)"
    )
    print("dense composite HMSFW (7 groups, d = 2000, global batch 256), optimizer seconds per update")
    print(
        f"  1 process {one['dense_update_s'] * 1e3:.2f} ms   2 processes {two['dense_update_s'] * 1e3:.2f} ms   "
        f"ratio {two['dense_update_s'] / one['dense_update_s']:.2f}"
    )
    print(
        f"  all-reduced per update: {two['dense_bytes_per_update']:.0f} bytes in "
        f"{two['dense_reductions_per_update']:.1f} all-reduce(s) (the 7 x 2000 Jacobian and 7 values, float64)"
    )
    # Ring all-reduce of m bytes on W hosts: 2 (W - 1) messages of m / W bytes per rank.
    alpha, beta = args.latency_us * 1e-6, args.bandwidth_gbs * 1e9
    m = two["dense_bytes_per_update"] / max(two["dense_reductions_per_update"], 1)
    compute = one["dense_update_s"]
    print(
        f"projection (ring all-reduce, alpha = {args.latency_us:g} us, beta = {args.bandwidth_gbs:g} GB/s; the "
        "per-rank sampling and Jacobian work divides by W; the GLMO, trackers and update run on every rank)"
    )
    sampled = min(one["jacobian_s"], compute)  # measured on one process: sample + Jacobian of the global batch
    print(
        f"  measured on 1 process: {sampled * 1e3:.2f} ms of sampling and Jacobian, "
        f"{(compute - sampled) * 1e3:.2f} ms of GLMO, trackers and update"
    )
    for hosts in (8, 64):
        comm = two["dense_reductions_per_update"] * 2 * (hosts - 1) * (alpha + m / hosts / beta)
        t = sampled / hosts + (compute - sampled) + comm
        print(f"  {hosts:>2} hosts: {t * 1e3:.2f} ms per update ({comm * 1e3:.2f} ms of it communication)")


if __name__ == "__main__":
    main()
