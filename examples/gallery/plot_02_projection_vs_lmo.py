"""Projection against linear minimization on a nuclear-norm ball.

Projected methods must solve min ||X - M||_F over {||X||_* <= r} at every step: all singular values of
M are needed (a full eigendecomposition, O(n^3) flops for an n x n matrix). Frank-Wolfe methods only
call the linear minimization oracle argmin <M, X> = -r u v^T, which needs the top singular pair alone (a
few Lanczos matrix-vector products, O(n^2) each). The log-log plot times both on the same matrices, a
rank-3 signal plus noise like a gradient of matrix completion, for n = 50 ... 800: look at the fitted
slopes in the legend (below the asymptotic 3 and 2 at these sizes, where fixed overheads and BLAS
efficiency still matter) and at how the gap between the two lines widens with n. Each time is the
best of five calls, so other jobs on the machine disturb it less; Lanczos also needs a gap between the
top two singular values, which this signal has (on a pure-noise matrix the LMO is a few times slower).
"""

import os

# One BLAS thread: the times then measure one core's work, and other jobs on a shared machine cannot stall
# a second thread (set before numpy loads OpenBLAS). OMP_NUM_THREADS for a BLAS built on OpenMP.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import time
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

import fullcomp as fc

matplotlib.use("Agg")  # headless: figures are only written to PNG files
SIZES = (50, 100, 200, 400, 800)


def best_time(f, M, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f(M)
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/gallery")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    times = {"project": [], "lmo": []}
    for n in SIZES:
        ball = fc.NuclearBall((n, n), radius=1.0)
        U, V = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
        M = (U * [3.0, 2.0, 1.0]) @ V.T / np.sqrt(n) + rng.standard_normal((n, n)) / np.sqrt(n)
        ball.lmo(M)  # warm up (first-call overheads)
        times["project"].append(best_time(ball.project, M))
        times["lmo"].append(best_time(ball.lmo, M))
        print(f"n = {n:4d}: project {times['project'][-1] * 1e3:8.2f} ms, lmo {times['lmo'][-1] * 1e3:7.2f} ms")

    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for name, label in [("project", "projection (all singular values)"), ("lmo", "LMO (top singular pair)")]:
        t = np.array(times[name])
        slope = np.polyfit(np.log(SIZES), np.log(t), 1)[0]
        ax.loglog(SIZES, t, marker="o", label=f"{label}: slope {slope:.2f}")
        print(f"{name}: fitted log-log slope {slope:.2f}")
    print(f"ratio project / lmo at n = {SIZES[-1]}: {times['project'][-1] / times['lmo'][-1]:.0f}x")
    ax.set_xlabel("matrix size n (n x n)")
    ax.set_ylabel("seconds per call (best of 5)")
    ax.set_title("nuclear-norm ball: projection vs linear minimization")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.savefig(out / f"{Path(__file__).stem}.png", dpi=120)
    print(f"saved {out / (Path(__file__).stem + '.png')}")


if __name__ == "__main__":
    main()
