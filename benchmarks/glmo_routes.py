"""Conic (SDP) route versus column generation on one nuclear-ball GLMO.

The GLMO  min_{||X||_* <= tau} max_g (z + V (X - Y))_g  with 7 groups, as in
group-robust matrix completion.  Over a nuclear-norm ball the conic route is a
semidefinite program with a (P+Q) x (P+Q) PSD block; column generation needs
one top singular pair per pricing call.  Both routes are timed from scratch
(building and compiling included, as the first GLMO of a run pays it) and
solved to the same certified tolerance: column generation is asked for the
gap bound the conic route certified (or ``--rel-tol`` times the value,
whichever is larger, since a bound tighter than that is solver noise).

    python benchmarks/glmo_routes.py                 # 50 x 80: the SDP takes minutes
    python benchmarks/glmo_routes.py --shape 12x20   # seconds

``--balls`` times instead the dual route against column generation on the GLMO of a network's update: F =
``cp.max`` of 4 group losses over one l2 ball per layer of the 784-512-512-1 MLP (665,089 weights), V a float32
Jacobian that moves as a tracker's does (V_k = 0.9 V_{k-1} + 0.1 J_k), both routes called in turn on the
same V_k (interleaved) at the tolerance hmsfw asks at update k, column generation from V as hmsfw hands it
(float64), the dual route from the float32 tensor:

    python benchmarks/glmo_routes.py --balls         # seconds
"""

from __future__ import annotations

import argparse
import re
import time

import cvxpy as cp
import numpy as np

import fullcomp as fc


def shape_arg(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*", text)
    if not match or min(int(match[1]), int(match[2])) < 2:
        raise argparse.ArgumentTypeError(f"--shape must look like 50x80 (both sizes >= 2), got {text!r}")
    return int(match[1]), int(match[2])


def instance(shape: tuple[int, int], groups: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tracked values z > 0, a Jacobian V whose rows are supported on ~20% of the entries
    (each group's observed ratings), and the current iterate Y of nuclear norm 1/2."""
    rng = np.random.default_rng(seed)
    p, q = shape
    z = 0.5 + rng.random(groups)
    V = rng.standard_normal((groups, p * q)) * (rng.random((groups, p * q)) < 0.2) / np.sqrt(0.2 * p * q)
    a, b = rng.standard_normal(p), rng.standard_normal(q)
    Y = 0.5 * np.outer(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))
    return z, V, Y


#: The parameters of the 784-512-512-1 MLP, in its layers' order: weight and bias of each linear layer.
MLP_BLOCKS = (784 * 512, 512, 512 * 512, 512, 512, 1)


def balls(steps: int, seed: int) -> None:
    """The dual route against column generation on the MLP's product of l2 balls, interleaved (see the docstring)."""
    import torch

    rng = torch.Generator().manual_seed(seed)
    groups, d = 4, sum(MLP_BLOCKS)
    domain = fc.Product(*(fc.L2Ball(size, 0.5 + 0.5 * j) for j, size in enumerate(MLP_BLOCKS)))
    F = cp.max(fc.inner_value(groups))
    routes = {name: fc.build_glmo(F, domain, route=name) for name in ("dual", "colgen")}
    shared = torch.randn(d, generator=rng) / d**0.5  # the group gradients share a direction, as a network's do
    V = shared + torch.randn(groups, d, generator=rng) / d**0.5
    y = torch.zeros(d)
    z = torch.rand(groups, generator=rng).double() + 0.5
    times: dict[str, list[float]] = {name: [] for name in routes}
    calls, values = [], {name: [] for name in routes}
    for k in range(steps):
        tol = 0.01 * float(z.max()) * (k + 2) ** (-1 / 3)  # hmsfw's default GLMO tolerance
        for name, glmo in routes.items():
            start = time.perf_counter()
            if name == "colgen":  # what hmsfw hands column generation: float64 copies of V and y
                res = glmo.solve(z.numpy(), V.numpy().astype(np.float64), y.numpy().astype(np.float64), tol=tol)
                calls.append(res.calls)
            else:
                res = glmo.solve(z.numpy(), V, y, tol=tol)
            times[name].append(time.perf_counter() - start)
            values[name].append((res.value, res.gap_bound))
        x = torch.as_tensor(res.x, dtype=torch.float32).reshape(-1)
        y = torch.lerp(y, x, 2.0 / (k + 2))
        fresh = shared + torch.randn(groups, d, generator=rng) / d**0.5
        V = 0.9 * V + 0.1 * fresh
        z = 0.9 * z + 0.1 * (torch.rand(groups, generator=rng).double() + 0.5)
    print(f"GLMO: max of {groups} group models over {len(MLP_BLOCKS)} l2 balls, {d:,} float32 weights, {steps} updates")
    ms = {name: 1e3 * float(np.median(t[1:])) for name, t in times.items()}  # the first call compiles
    for name in routes:
        print(f"{name:7s} {ms[name]:8.2f} ms per GLMO (median of updates 1..{steps - 1})")
    print(f"column generation's pricing calls per GLMO: {np.mean(calls[1:]):.1f}")
    worst = max(abs(a[0] - b[0]) - a[1] - b[1] for a, b in zip(values["dual"], values["colgen"]))
    # The dual route rounds its Gram matrices in float32 (about 1e-6 of the value), column generation in float64.
    print(f"values agree within the certified gaps (+1e-6 relative): {worst <= 1e-6 * max(1.0, abs(res.value))}")
    print(f"colgen / dual = {ms['colgen'] / ms['dual']:.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=shape_arg, default=(50, 80), help="matrix shape PxQ (default 50x80)")
    parser.add_argument("--groups", type=int, default=7, help="number of groups n (default 7)")
    parser.add_argument("--radius", type=float, default=1.0, help="nuclear-norm radius tau (default 1)")
    parser.add_argument(
        "--rel-tol", type=float, default=1e-9, help="floor of the common tolerance, relative (default 1e-9)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--balls", action="store_true", help="dual route vs column generation on an MLP's l2 balls")
    parser.add_argument("--steps", type=int, default=12, help="updates timed with --balls (default 12)")
    args = parser.parse_args(argv)
    if args.balls:
        return balls(max(2, args.steps), args.seed)
    if args.groups < 1 or not args.radius > 0 or not args.rel_tol > 0:
        parser.error("--groups must be >= 1 and --radius, --rel-tol > 0")

    z, V, Y = instance(args.shape, args.groups, args.seed)
    domain = fc.NuclearBall(args.shape, radius=args.radius)
    print(
        f"GLMO: max of {args.groups} affine group models over the nuclear ball {args.shape[0]}x{args.shape[1]}, "
        f"radius {args.radius}"
    )

    start = time.perf_counter()
    conic = fc.build_glmo(cp.max(fc.inner_value(args.groups)), domain, route="conic")
    res_conic = conic.solve(z, V, Y)
    t_conic = time.perf_counter() - start
    print(
        f"conic (SDP):       {t_conic:9.3f} s  value {res_conic.value:.10f}  certified gap {res_conic.gap_bound:.2e}"
        f"  (1 Clarabel solve, compile included)"
    )

    tol = max(res_conic.gap_bound, args.rel_tol * abs(res_conic.value))
    start = time.perf_counter()
    colgen = fc.build_glmo(cp.max(fc.inner_value(args.groups)), domain, route="colgen")
    res_cg = colgen.solve(z, V, Y, tol=tol, max_calls=100_000)
    t_cg = time.perf_counter() - start
    print(
        f"column generation: {t_cg:9.3f} s  value {res_cg.value:.10f}  certified gap {res_cg.gap_bound:.2e}"
        f"  ({res_cg.calls} pricing calls, asked for tol {tol:.2e})"
    )

    # Both values lie within their certified gaps of the optimum; the SDP's point satisfies the
    # nuclear-norm constraint only to Clarabel's feasibility tolerance, hence the 1e-8 slack.
    slack = 1e-8 * max(1.0, abs(res_conic.value))
    agree = abs(res_conic.value - res_cg.value) <= res_conic.gap_bound + res_cg.gap_bound + slack
    print(f"values agree within the certified gaps (+{slack:.0e} solver tolerance): {agree}")
    print(f"conic time / column-generation time = {t_conic / t_cg:.1f}")


if __name__ == "__main__":
    main()
