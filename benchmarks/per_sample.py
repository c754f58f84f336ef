"""Robust logistic regression on ``fc.PerSample``: where one HMSFW update's time goes, by number of rows.

CVaR_0.1 of n logistic losses, d = 21 (20 features and an intercept), an l2 ball, batch 256, float64, one
thread, the default GLMO route.  For each n, on the run's own objects (the tracked model and the GLMO that
``fc.hmsfw`` builds), timed separately:

* ``rows``: the Jacobian rows of a sampled batch (per-sample gradients, 256 x 21);
* ``advance``: a whole stochastic update of the tracked model (the rows, then the row updates of V and z and
  Taylor's prediction of every z_i); ``polyak``: the same with the Polyak value tracker (no n x d product);
* ``pass``: every row's value and gradient (the exact method's sample, in chunks);
* ``stoch``, ``exact``: the median optimizer time of an update of ``fc.hmsfw`` and of ``hmsfw-exact`` over
  ``--iters`` updates (the first, whose GLMO starts with an empty atom pool, is printed apart), with their mean
  pricing calls per GLMO; the GLMO's share is what ``advance`` or ``pass`` leave of it (above ``--runs-max``
  rows, one GLMO call stopped after its first pricing call instead);
* ``dense``: the Jacobian of the same map declared with n outputs (vmapped backward passes over the n x n
  identity), up to ``--dense-max`` rows.

Every measure is on the same problem and machine, in one run.

    python benchmarks/per_sample.py --sizes 1000 10000          # about a minute on 2 cores
    python benchmarks/per_sample.py --sizes 1000 10000 100000   # the 100,000-row GLMO takes minutes
"""

from __future__ import annotations

import argparse
import time

import torch

import fullcomp as fc
from fullcomp.glmo import build_glmo
from fullcomp.oracles.jacobian import InnerOracle
from fullcomp.oracles.tracked import TrackedModel
from fullcomp.persample import ALL_ROWS

D, BATCH = 21, 256


def logistic(x: torch.Tensor, rows: tuple[torch.Tensor, ...]) -> torch.Tensor:
    A, b = rows
    return torch.nn.functional.softplus(-b * (A @ x))


def data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    A = torch.randn(n, D, generator=g, dtype=torch.float64)
    A[:, -1] = 1.0
    w = torch.randn(D, generator=g, dtype=torch.float64)
    b = torch.where(A @ w + 0.3 * torch.randn(n, generator=g, dtype=torch.float64) > 0, 1.0, -1.0).double()
    return A, b


def best(fn, repeats: int) -> float:
    """The fastest of ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(n: int, repeats: int, dense_max: int, iters: int, runs_max: int) -> dict:
    A, b = data(n)
    problem = fc.CompositeProblem(
        fc.cvar(fc.inner_value(n), 0.1), fc.PerSample(logistic, (A, b), batch_size=BATCH), fc.L2Ball(D, 5.0)
    )
    model = TrackedModel(problem, "cpu", torch.float64, torch.Generator().manual_seed(0))
    y0 = torch.zeros(D, dtype=torch.float64)
    state = model.start(y0)
    y1 = torch.full((D,), 0.05, dtype=torch.float64)
    out = {"n": n}
    out["rows"] = best(lambda: model.sample_rows(y1, 1), repeats)
    out["advance"] = best(lambda: model.advance(state, y1, 0.5, 0.5, 1), repeats)
    polyak = TrackedModel(problem, "cpu", torch.float64, torch.Generator().manual_seed(0), variant="polyak")
    first = polyak.advance(polyak.start(y0), y1, 0.5, 0.5, 1)  # the first two updates copy the n rows once
    second = polyak.advance(first, y0, 0.5, 0.5, 2)
    out["polyak"] = best(lambda: polyak.advance(second, y1, 0.5, 0.5, 3), repeats)
    out["pass"] = best(lambda: model.sample(y1, 1, ALL_ROWS), max(1, repeats // 3))
    if n <= dense_max:
        oracle = InnerOracle(lambda x, batch: logistic(x, (A, b)), n, (D,), "cpu", torch.float64)
        out["dense"] = best(lambda: oracle(y1, None, 1), 1)
    if n > runs_max:  # one GLMO call stopped after its first pricing call: the cost of one master solve
        solver = build_glmo(problem.outer, problem.domain)
        z, V, y = (t.numpy() for t in (state.z, state.V, state.y))
        out["one_pricing"] = best(lambda: solver.solve(z, V, y, None, 1), 1)
        return out
    for name, method in (("stochastic", "hmsfw"), ("exact", "hmsfw-exact")):
        run = fc.solve(problem, method, iters=iters, seed=0, progress=False, eval_every=iters)
        times = [row["time"] for row in run.history.rows]
        steps = sorted(b - a for a, b in zip(times, times[1:]))
        calls = [row["pricing_calls"] for row in run.history.rows[1:]]
        out[name], out[name + "_first"] = steps[len(steps) // 2], times[1] - times[0]
        out[name + "_pricing"], out["route"] = sum(calls) / len(calls), run.info["glmo_route"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=6, help="HMSFW updates timed per n and method")
    parser.add_argument("--runs-max", type=int, default=10000, help="largest n for the timed HMSFW runs")
    parser.add_argument("--dense-max", type=int, default=10000, help="largest n for the dense-map Jacobian")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'n':>8} {'rows ms':>8} {'advance ms':>10} {'polyak ms':>9} {'pass ms':>8} {'dense ms':>9}")
    for n in args.sizes:
        r = measure(n, args.repeats, args.dense_max, args.iters, args.runs_max)
        dense = f"{1e3 * r['dense']:9.1f}" if "dense" in r else f"{'-':>9}"
        times = f"{1e3 * r['rows']:8.2f} {1e3 * r['advance']:10.2f} {1e3 * r['polyak']:9.2f} {1e3 * r['pass']:8.1f}"
        print(f"{n:>8} {times} {dense}", flush=True)
        if "dense" in r:
            print(f"{'':>8} the dense map's Jacobian takes {r['dense'] / r['rows']:.0f}x the sampled rows")
        if "one_pricing" in r:
            print(f"{'':>8} one GLMO call stopped after one pricing call: {r['one_pricing']:.2f} s", flush=True)
            continue
        print(
            f"{'':>8} median update: stochastic {r['stochastic']:.3f} s ({r['stochastic_pricing']:.1f} pricing calls "
            f"a GLMO, the GLMO {1 - r['advance'] / r['stochastic']:.1%} of it), exact {r['exact']:.3f} s "
            f"({r['exact_pricing']:.1f} calls, the GLMO {1 - r['pass'] / r['exact']:.1%}); first updates "
            f"{r['stochastic_first']:.2f} s and {r['exact_first']:.2f} s; route {r['route']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
