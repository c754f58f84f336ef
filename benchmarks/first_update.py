"""Seconds from building a problem to the end of its first update, each in a fresh process.

The README's map (group losses of a point on the simplex, a CVaR of them) with 1, 5, 50 and 500 outputs:
each figure is taken in a new Python process, after ``import fullcomp`` (and torch, cvxpy), from
``fc.inner_value(m)`` through ``fc.CompositeProblem(...)`` (its checks included) to the return of
``fc.hmsfw(problem, iters=1)``.  Against the target of 0.3 s (issue: a first update of the 5-output
example took 1.8-2.7 s, 2 s of it torch's lazy import of ``torch._dynamo``).  A process per figure
because a first call's one-off costs (lazy imports, kernels' first use) are paid once per process, which
``benchmarks/overhead.py``, timing its problems one after another in one process, cannot see.
Medians over ``--rounds`` processes; whether the process imported ``torch._dynamo`` is printed too.

``--routes`` adds, in this process, the seconds per Jacobian of each route a map of m outputs could take
(after every import has been paid): one backward pass per output in a loop, fullcomp's batched passes
(``torch.func.vmap`` over the autograd engine's vector-Jacobian product) and ``torch.func.jacrev``, on the
README's map (which broadcasts x against each group's data, the least favourable to batching) and on group
least squares.

    python benchmarks/first_update.py               # 5 processes per map
    python benchmarks/first_update.py --routes      # and the Jacobian routes, per call

Nothing is written to disk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TARGET = 0.3  # seconds, building the problem to the end of the first update
OUTPUTS = (1, 5, 50, 500)
DIM = 20  # the README's


def child(m: int, n: int, threads: int) -> None:
    """Run in a fresh process: import, then time building the problem and its first update (printed as JSON)."""
    import cvxpy as cp
    import torch

    import fullcomp as fc

    torch.set_num_threads(threads)
    W = torch.rand(m, n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def group_losses(x, noise):
        return ((x - W) ** 2).sum(dim=1) + noise @ x

    def sampler(gen):
        return 0.1 * torch.randn(m, n, generator=gen, dtype=torch.float64)

    start = time.perf_counter()
    u = fc.inner_value(m)
    outer = fc.cvar(u, 0.4) if m > 1 else cp.sum(u)
    problem = fc.CompositeProblem(outer=outer, inner=group_losses, domain=fc.Simplex(n), sampler=sampler)
    built = time.perf_counter()
    fc.hmsfw(problem, iters=1, seed=0, progress=False)
    end = time.perf_counter()
    print(json.dumps({"build": built - start, "first": end - built, "dynamo": "torch._dynamo" in sys.modules}))


def fresh(m: int, n: int, threads: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(m), str(n), "--threads", str(threads)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_updates(rounds: int, threads: int) -> None:
    print(f"README map with m outputs, n = {DIM}, cvar(u, 0.4) (sum for m = 1), {threads} torch thread(s);")
    print(f"median of {rounds} fresh processes, import fullcomp excluded; target {TARGET} s")
    header = f"{'outputs':>8} {'build ms':>9} {'first update ms':>16} {'total ms':>9} {'/ target':>9}"
    print(f"{header}  torch._dynamo imported")
    runs = {m: [] for m in OUTPUTS}
    for _ in range(rounds):  # rounds alternate, so load on a shared machine hits every map alike
        for m in OUTPUTS:
            runs[m].append(fresh(m, DIM, threads))
    for m, rows in runs.items():
        build = statistics.median(r["build"] for r in rows)
        first = statistics.median(r["first"] for r in rows)
        total = statistics.median(r["build"] + r["first"] for r in rows)
        dynamo = sorted({r["dynamo"] for r in rows})
        print(
            f"{m:>8} {build * 1e3:>9.1f} {first * 1e3:>16.1f} {total * 1e3:>9.1f} {total / TARGET:>9.2f}  "
            f"{' / '.join(map(str, dynamo))}"
        )


def routes(threads: int) -> None:
    """Seconds per Jacobian of the README map by each route, after imports (jacrev's included)."""
    import torch
    from torch.func import jacrev

    from fullcomp.autodiff import ROWS_BY_BACKWARD, jacobian

    torch.set_num_threads(threads)

    def per_call(fn, *args, **kwargs) -> float:
        fn(*args, **kwargs)
        t = time.perf_counter()
        fn(*args, **kwargs)
        reps = max(1, int(0.2 / max(time.perf_counter() - t, 1e-6)))
        best = []
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(reps):
                fn(*args, **kwargs)
            best.append((time.perf_counter() - t) / reps)
        return min(best)

    print(f"\nms per Jacobian, {threads} torch thread(s); fullcomp batches above {ROWS_BY_BACKWARD} outputs")
    print(f"{'map':>10} {'outputs':>8} {'inputs':>7} {'loop':>10} {'batched':>10} {'jacrev':>10}  batched == jacrev")
    gen = torch.Generator().manual_seed(0)
    for m in (5, 50, 500):
        for n in (20, 2000, 20000):
            if m * m * n > 2e7:  # a batched backward of either map holds m x m x n values (and a loop is slow)
                continue
            W = torch.rand(m, n, dtype=torch.float64, generator=gen)
            noise = torch.rand(m, n, dtype=torch.float64, generator=gen)
            A = torch.randn(32 * m, n, dtype=torch.float64, generator=gen)
            x = torch.rand(n, dtype=torch.float64, generator=gen)

            def readme(v, W=W, noise=noise):  # the README's: x broadcast against each group's row
                return ((v - W) ** 2).sum(dim=1) + noise @ v

            def least_squares(v, A=A, m=m):  # group least squares: 32 rows of A per group
                return ((A @ v - 1) ** 2).reshape(m, 32).mean(1)

            for name, f in (("README", readme), ("groups LS", least_squares)):
                reverse = jacrev(f)
                loop = per_call(jacobian, f, x, batched=False)
                batched = per_call(jacobian, f, x, batched=True)
                transform = per_call(reverse, x)
                same = torch.equal(jacobian(f, x)[1], reverse(x))
                print(
                    f"{name:>10} {m:>8} {n:>7} {loop * 1e3:>10.3f} {batched * 1e3:>10.3f} {transform * 1e3:>10.3f}  "
                    f"{same}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per map (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the other benchmarks)")
    parser.add_argument("--routes", action="store_true", help="also time each Jacobian route per call")
    parser.add_argument("--child", nargs=2, type=int, metavar=("M", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.threads)
        return
    first_updates(args.rounds, args.threads)
    if args.routes:
        routes(args.threads)


if __name__ == "__main__":
    main()
