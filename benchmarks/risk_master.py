"""Column generation's master for named risks: closed forms (fullcomp.glmo.closed) against the conic master.

One certified GLMO call (tol 1e-6, route "colgen") on a model c + V x over an l2 ball of d = 21 (atoms of the ball),
per risk and per n, timed with the master from the risk's closed forms and with the conic master (F's conic
form compiled once and solved by Clarabel, the route before closed masters); both in this run, one thread.
Prints seconds per call, the number of pricing calls, the two values and their ratio of times.

    python benchmarks/risk_master.py                      # n = 1,000 and 10,000
    python benchmarks/risk_master.py --n 1000 10000 100000 --conic-max 10000
    python benchmarks/risk_master.py --risks cvar kl_dro

``--conic-max``: the largest n at which the conic master is timed (its program holds n cones and its
canonicalization alone takes seconds to minutes there).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import fullcomp as fc
from fullcomp.glmo.master import ConicMaster

RISKS = {
    "cvar": lambda u: fc.cvar(u, 0.1),
    "tv_dro": lambda u: fc.tv_dro(u, 0.1),
    "chi2_dro": lambda u: fc.chi2_dro(u, 1.0),
    "kl_dro": lambda u: fc.kl_dro(u, 0.1),
    "entropic_risk": lambda u: fc.entropic_risk(u, 0.5),
}


def timed(name: str, n: int, d: int, conic: bool, seed: int = 0) -> tuple[float, int, float]:
    """(seconds, pricing calls, value) of one certified GLMO call; building the GLMO (and compiling the
    conic master) is timed too, as an update's first call pays it."""
    rng = np.random.default_rng(seed)
    z, V = rng.uniform(-3.7, 1.0, n), rng.standard_normal((n, d)) / np.sqrt(d)
    start = time.perf_counter()
    glmo = fc.build_glmo(RISKS[name](fc.inner_value(n)), fc.L2Ball(d, 1.0), route="colgen")
    if conic:  # the route before closed masters: F's conic form, compiled once
        glmo.closed, glmo._master_built, glmo.master = None, True, ConicMaster.build(glmo.outer)
    result = glmo.solve(z, V, np.zeros(d), tol=1e-6)
    assert result.converged, (name, n, conic, result.gap_bound)
    return time.perf_counter() - start, result.calls, result.value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--d", type=int, default=21)
    parser.add_argument("--conic-max", type=int, default=10000)
    parser.add_argument("--risks", nargs="+", default=list(RISKS), choices=list(RISKS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'risk':>14} {'n':>8} {'closed s':>9} {'calls':>5} {'conic s':>9} {'calls':>5} {'ratio':>7}  values")
    for n in args.n:
        for name in args.risks:
            closed = timed(name, n, args.d, conic=False)
            if n <= args.conic_max:
                conic = timed(name, n, args.d, conic=True)
                ratio = f"{conic[0] / closed[0]:7.1f}"
                tail = f"{conic[0]:9.3f} {conic[1]:5d} {ratio}  {closed[2]:.9g} / {conic[2]:.9g}"
            else:
                tail = f"{'-':>9} {'-':>5} {'-':>7}  {closed[2]:.9g}"
            print(f"{name:>14} {n:>8} {closed[0]:9.3f} {closed[1]:5d} {tail}", flush=True)


if __name__ == "__main__":
    main()
