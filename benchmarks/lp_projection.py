"""The l_p ball's projection against its LMO on one large direction, measured in one run (one thread).

The projection solves y_i + c y_i^(p-1) = |v_i| for every entry at once by Newton's method and searches the
multiplier c by Newton's method on log ||y||_p^p; the LMO is Hoelder's closed form, one pass over the entries.
The ratio printed is projection seconds over LMO seconds, each the best of ``--repeats`` calls, in CPU seconds
of this single-threaded process (elapsed time on a shared machine depends on what else runs).

    python benchmarks/lp_projection.py                      # n = 10^7, p = 3
    python benchmarks/lp_projection.py --size 1000000 --p 1.0001
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import fullcomp as fc


def best_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10**7)
    parser.add_argument("--p", type=float, default=3.0)
    parser.add_argument("--radius", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ball = fc.LpBall(args.size, args.p, args.radius)
    v = np.random.default_rng(0).standard_normal(args.size)
    lmo = best_seconds(lambda: ball.lmo(v), args.repeats)
    project = best_seconds(lambda: ball.project(v), args.repeats)
    print(
        f"LpBall({args.size}, p={args.p}, radius={args.radius}): lmo {lmo:.3f} s, project {project:.3f} s (CPU), "
        f"project / lmo = {project / lmo:.1f}"
    )


if __name__ == "__main__":
    main()
