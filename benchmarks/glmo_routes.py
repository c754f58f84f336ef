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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=shape_arg, default=(50, 80), help="matrix shape PxQ (default 50x80)")
    parser.add_argument("--groups", type=int, default=7, help="number of groups n (default 7)")
    parser.add_argument("--radius", type=float, default=1.0, help="nuclear-norm radius tau (default 1)")
    parser.add_argument(
        "--rel-tol", type=float, default=1e-9, help="floor of the common tolerance, relative (default 1e-9)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
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
