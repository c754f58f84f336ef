"""Seconds per update on MovieLens-100K: certified and fixed-budget HMSFW II against PSG, in one run.

Targets (issue 12): certified HMSFW II at most 0.3 times PSG's seconds per update, and at most 4
times one minibatch Jacobian plus one exact LMO
(the paper measured 3.3 times slower on a GPU).  Each method runs the protocol's
problem (Max, 1,024 ratings per group, the configuration's radius) for a few
updates from zero, single-threaded; seconds are CPU seconds of the run (``--clock
wall`` for elapsed time), so the ratio does not depend on other work on the machine.

    python benchmarks/movielens_speed.py --data ../shared/data/ml-100k
"""

from __future__ import annotations

import argparse

import torch
from time_split import TimeSplit

from fullcomp_lab import completion_problem
from fullcomp_lab import movielens as protocol
from fullcomp_lab.datasets import movielens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data/ml-100k", help="MovieLens-100K folder")
    parser.add_argument("--objective", choices=("max", "cvar"), default="max")
    parser.add_argument("--iters", type=int, default=20, help="updates per method (default 20)")
    parser.add_argument("--radius-scale", type=float, default=None, help="default: the configuration's")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="optimizer-time clock (default cpu)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = protocol.load_config()
    data = movielens(args.data)
    scale = config.fields["radius_scale"][args.objective] if args.radius_scale is None else args.radius_scale
    completion = completion_problem(data, args.objective, scale)
    seconds = {}
    for method in ("hmsfw-ii", "hmsfw-ii-fb", "psg"):
        settings = config.settings_for(args.objective, method)
        with TimeSplit(completion.problem.domain) as split:
            res = protocol.run_method(method, completion, settings, 0, None, iters=args.iters, clock=args.clock)
        seconds[method] = res.info["optimizer_seconds"] / res.info["iterations"]
        extra = ""
        if "pricing_calls" in res.history.columns:
            extra = f" ({res.history.column('pricing_calls')[:-1].mean():.1f} pricing calls per update)"
        print(f"{method}: {seconds[method]:.4f} {args.clock} s per update{extra}")
        if method == "hmsfw-ii":
            print(f"  split per update (cpu s): {split.line(res.info['iterations'] + 1, seconds[method])}")
            ratio = split.floor_line(completion.problem.reads, seconds[method])
            print(f"  update / (one Jacobian + one exact LMO): {ratio} (target <= 4)")
    for method in ("hmsfw-ii", "hmsfw-ii-fb"):
        print(f"ratio {method} / psg: {seconds[method] / seconds['psg']:.2f} (target for hmsfw-ii: <= 0.3)")


if __name__ == "__main__":
    main()
