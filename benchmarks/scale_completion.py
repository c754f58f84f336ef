"""Certified HMSFW II on synthetic MovieLens-shaped completion problems at scale.

Prints optimizer seconds per certified update (CPU seconds of the single-threaded
run, so that other work on the machine does not change them; ``--clock wall`` for
elapsed time) and the process's peak resident memory for each size, measured in
this run, with the update's time split into the minibatch Jacobian, the LMO (pricing calls), the
master and the rest, and the update's time over one Jacobian plus one exact LMO.  Targets (issue
12): 6040 x 3706 with 1,000,000 ratings at most 0.4 s per update and 2 GB; 70,000 x 10,700 with
10,000,000 ratings at most 4 s per update and 8 GB.

    python benchmarks/scale_completion.py                 # both sizes
    python benchmarks/scale_completion.py --sizes small   # 6040 x 3706 only
"""

from __future__ import annotations

import argparse
import gc
import resource
import time

import torch
from time_split import TimeSplit, steady

import fullcomp as fc
from fullcomp_lab import completion_problem

SIZES = {"small": ((6040, 3706), 1_000_000), "large": ((70_000, 10_700), 10_000_000)}


def peak_gb() -> float:
    """The peak resident memory since :func:`reset_peak` (VmHWM on Linux; elsewhere the process's peak)."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM")) / 1024**2
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KiB on Linux, bytes on macOS


def reset_peak() -> None:
    """Start a size's peak afresh: the process's high-water mark would include the sizes run before it."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["small", "large"])
    parser.add_argument("--iters", type=int, default=10, help="certified HMSFW II updates per size")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="optimizer-time clock (default cpu)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.sizes:
        shape, n_ratings = SIZES[name]
        reset_peak()
        t = time.perf_counter()
        data = fc.datasets.synthetic_ratings(shape=shape, n_ratings=n_ratings, seed=0)
        completion = completion_problem(data, "max", radius_scale=1.0)
        setup = time.perf_counter() - t
        with fc.run.clock(args.clock), TimeSplit(completion.problem.domain) as split:
            res = fc.hmsfw(completion.problem, iters=args.iters, seed=0, progress=False)
        updates = res.info["iterations"]
        per_update = res.info["optimizer_seconds"] / updates
        calls = res.history.column("pricing_calls")[:-1].mean()
        print(
            f"{name}: {shape[0]} x {shape[1]}, {n_ratings:,} ratings | set-up {setup:.1f} s | "
            f"{per_update:.3f} optimizer {args.clock} s per certified update ({calls:.1f} pricing calls) | "
            f"peak memory {peak_gb():.2f} GB | final objective estimate {res.history[-1]['objective_estimate']:.4f}"
        )
        # The split counts the closing row's GLMO too, so its parts are per GLMO call (updates + 1).
        print(f"  split per update (cpu s): {split.line(updates + 1, per_update)}")
        print(f"  update / (one Jacobian + one exact LMO): {split.floor_line(completion.problem.reads, per_update)}")
        per, start, calls = steady(res)
        if per is None:
            print("  the pool filled only in the last update: no steady-state figure (run more --iters)")
        else:
            window = f"updates {start}-{updates - 1}, pool full"
            print(f"  steady state ({window}): {per:.3f} s per update ({calls:.1f} calls)")
        del data, completion, split, res  # before the next size's peak starts


if __name__ == "__main__":
    main()
