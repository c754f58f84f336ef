"""One small problem of each kind and the required hyperparameters of every registered method.

Shared by tests/test_contract.py and the subprocess it kills, so both build identical problems.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

import fullcomp as fc
from fullcomp.testing import composite_problem, dc_problem, minimax_problem

# The problems fullcomp.testing.check_method runs a user's method on: the built-ins are held to the same.
composite, dc, minimax = composite_problem, dc_problem, minimax_problem


def per_sample(
    dtype: torch.dtype = torch.float64, nan_after: int | None = None, shift: float = 0.0
) -> fc.CompositeProblem:
    """CVaR_0.2 of 40 logistic losses (fc.PerSample) over an l2 ball: the case of the oce method.

    ``nan_after`` makes the loss return NaN after that many calls of a run (the construction's are not counted);
    ``shift`` moves the features (another data set).
    """
    g = torch.Generator().manual_seed(0)
    A = torch.randn(40, 5, generator=g, dtype=torch.float64) + shift
    y = torch.sign(A @ torch.randn(5, generator=g, dtype=torch.float64) + 0.3)
    calls = [0]

    def loss(x, rows):
        calls[0] += 1
        a, b = rows
        out = torch.nn.functional.softplus(-b * (a @ x))
        return out * float("nan") if nan_after is not None and calls[0] > nan_after else out

    u = fc.inner_value(40)
    rows = fc.PerSample(loss, (A.to(dtype), y.to(dtype)), batch_size=8)
    problem = fc.CompositeProblem(fc.cvar(u, 0.2), rows, fc.L2Ball(5, 3.0))
    calls[0] = 0
    return problem


#: method -> (problem factory, required hyperparameters)
CASES = {
    "hmsfw": (composite, {}),
    "hmsfw-ii": (composite, {}),
    "hmsfw-i": (composite, {}),
    "hmsfw-exact": (composite, {}),
    "scfw": (composite, {}),
    "clipped-scfw": (composite, {"clip": 5.0}),
    "psg": (composite, {}),
    "prox-linear": (composite, {}),
    "linasa-icg": (composite, {"icg_steps": 3}),
    "smag": (minimax, {"gamma": 0.5, "eta0": 0.1, "eta1": 0.1}),
    "sgd": (dc, {"eta": 0.05}),
    "sdca": (dc, {"eta": 0.05, "anchor_step": 0.9, "inner_iters": 3}),
    "ssdc-spg": (dc, {"eta": 0.2, "gamma": 1.0, "inner_iters": 3}),
    "ssdc-adagrad": (dc, {"eta": 0.2, "gamma": 1.0, "inner_iters": 3}),
    "sbcd": (dc, {"eta": 0.05, "mu": 1.0, "inner_iters": 3}),
    "sgda": (minimax, {"eta_x": 0.05, "eta_y": 0.05}),
    "epoch-gda": (minimax, {"eta_x": 0.05, "eta_y": 0.05, "gamma": 0.1}),
    "sopa": (minimax, {"eta": 0.05, "eta_s": 0.05}),
    # F = cp.max is not differentiable: the vanilla step, towards the GLMO's point (away steps need a smooth F).
    "fw": (composite, {"corrective": "vanilla"}),
    # first_rows below n: the runs go through a sampled stage and CVaR's smoothing.
    "oce": (per_sample, {"first_rows": 16, "stage_steps": 3}),
}


def run(method: str, **options):
    factory, required = CASES[method]
    make = options.pop("problem", None) or factory
    return fc.solve(make() if callable(make) else make, method, **{**required, "progress": False, **options})


def kill_once_started(code: str, marker: Path, seconds: float = 120) -> None:
    """Run ``code`` in a child process, wait (at most ``seconds``) until it creates ``marker``, then SIGKILL it."""
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + seconds
        while not marker.exists():
            assert child.poll() is None, "the child run ended before it could be killed"
            assert time.monotonic() < deadline, "the child run did not reach the marked iteration"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()


def kill_at_update(run_call: str, marker: Path, path: Path, at: int = 9) -> None:
    """SIGKILL a child run once it reaches update ``at``: ``run_call`` is the run, a line of Python that sees
    ``fc``, the tests folder on its path, ``checkpoint`` (every 3 updates to ``path``) and ``callback``, which
    marks the update and stalls there."""
    code = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
import fullcomp as fc

def callback(it):
    if it.k == {at}:
        open({str(marker)!r}, "w").close()
        time.sleep(60)

checkpoint = fc.Checkpoint({str(path)!r}, every=3)
{run_call}
"""
    kill_once_started(code, marker)
