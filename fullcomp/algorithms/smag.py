"""SMAG: Stochastic Moreau envelope Approximate Gradient method (Algorithms 1, 2 and 3 of the SMAG paper).

The target is F_gamma(x) = Phi_gamma(x) - Psi_gamma(x), the difference of the
Moreau envelopes of Phi(x) = max_y phi(x, y) and Psi(x) = max_z psi(x, z).
Its gradient (eq. (5)) is (prox_{gamma Psi}(x) - prox_{gamma Phi}(x)) / gamma;
SMAG tracks both proximal points (and the maximizers y, z at them) with one
stochastic step each per iteration instead of solving them, and moves x along
the resulting estimate G.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, replace
from typing import Any

import torch

from fullcomp.algorithms.method import Method, Plan, register, solve
from fullcomp.model.dmax import DMaxProblem, Params
from fullcomp.oracles.dmax import DMaxOracle
from fullcomp.run import Readout, Result, RunOptions
from fullcomp.serial import encodable
from fullcomp.steps import DECAY, multiplier
from fullcomp.validation import REQUIRED, Options, Param, positive

STEPS = (
    Param("gamma", (positive(),), REQUIRED, "the Moreau envelope parameter, below 1/delta for delta-weakly convex phi"),
    Param("eta0", (positive(),), REQUIRED, "the step size of x along the gradient estimate G"),
    Param("eta1", (positive(),), REQUIRED, "the step size of the proximal and dual estimates"),
)

PARAMS = (
    *STEPS,
    Param(
        "output",
        (Options(("last", "random")),),
        "last",
        "'last': the final iterates; 'random': those of iteration t-bar uniform on 1..T, as in the theorems",
    ),
    DECAY,
)

HINT = "Lower eta0/eta1 or check phi and psi for overflow (log of 0, division by 0, sqrt at 0)"


def proximal_step(v: torch.Tensor, x: torch.Tensor, g: torch.Tensor, eta1: float, gamma: float) -> torch.Tensor:
    """v - eta1 (g + (v - x)/gamma), as a move toward x and a step along g: two operations instead of five."""
    return torch.lerp(v, x, eta1 / gamma).add_(g, alpha=-eta1)


def user_stacklevel() -> int:
    """The stacklevel that points a warning raised by this function's caller at the first line outside fullcomp."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root + os.sep):
        frame, level = frame.f_back, level + 1
    return level


@encodable
@dataclass
class SMAGState:
    """x_t, the proximal estimates x_phi and x_psi, the gradient estimate G and the dual estimates y and z (None
    where the problem has none); with ``output="random"``, ``pick`` is the snapshot of iteration ``t``."""

    x: torch.Tensor
    x_phi: torch.Tensor
    x_psi: torch.Tensor
    G: torch.Tensor
    y: torch.Tensor | None
    z: torch.Tensor | None
    pick: SMAGState | None = None
    t: int | None = None


class Algorithm1:
    """Lines 4-9 of Algorithm 1 (2 and 3 are its reductions): the update of ``fc.smag`` and of
    ``fc.Stepper(problem, "smag", ...)``."""

    def __init__(self, problem: DMaxProblem, hp: dict, run: RunOptions, method: str):
        self.problem, self.gamma = problem, hp["gamma"]
        self.oracle = DMaxOracle(problem, run, method)
        if hp["eta1"] > self.gamma / 2:
            # Lemma 4.4 needs eta1 <= gamma^2 (1/gamma - delta) / 2, which is at most gamma/2 (delta = 0).
            warnings.warn(
                f"eta1={hp['eta1']:g} > gamma/2={self.gamma / 2:g}: the step-size condition "
                "eta1 <= gamma^2 (1/gamma - delta)/2 of the SMAG analysis fails for every delta >= 0, so x_phi and "
                "x_psi may not track the proximal points; lower eta1 or raise gamma",
                UserWarning,
                stacklevel=user_stacklevel(),  # the user's line: fc.Stepper(...) or fc.smag(...)
            )

    def start(self) -> SMAGState:
        """x_0 = x_phi^0 = x_psi^0 from x0; y_0, z_0 from y0, z0 projected onto Y, Z."""
        s = self.oracle.start()
        x = s["x"]
        return SMAGState(x, x, x, torch.zeros_like(x), s["y"], s["z"])

    def __call__(self, state: SMAGState, batches: tuple, k: int, eta0: float, eta1: float) -> tuple[SMAGState, dict]:
        """Iteration t = k on (batch, psi_batch), already on the run's device; returns (next state, row)."""
        o, gamma, has_psi = self.oracle, self.gamma, self.problem.psi is not None
        x, x_phi, y, x_psi, z = state.x, state.x_phi, state.y, state.x_psi, state.z
        g = o.gradients(k, *batches, phi_at=(x_phi, y), psi_at=(x_psi, z) if has_psi else None)

        # Lines 4-5: one stochastic step on min_x' phi(x', y) + ||x' - x_t||^2 / (2 gamma), one ascent step on y.
        x_phi = proximal_step(x_phi, x, g.phi_x, eta1, gamma)
        y_up = None if y is None else torch.add(y, g.phi_y, alpha=eta1)
        # Lines 6-7: the same for psi.  Without psi (Algorithm 3) Psi = 0, whose proximal point is x_t itself.
        x_psi = proximal_step(x_psi, x, g.psi_x, eta1, gamma) if has_psi else x
        z_up = None if z is None else torch.add(z, g.psi_z, alpha=eta1)
        # Line 8: G = (x_t - x_phi)/gamma - (x_t - x_psi)/gamma estimates grad F_gamma(x_t) (eq. (5)).
        G = (x_psi - x_phi) / gamma
        # Line 9.
        x_next = torch.add(x, G, alpha=-eta0)

        # One synchronisation checks every value and update: a non-finite one stops the run before it spreads.
        phi, psi, g_norm, _, _ = o.check(
            k,
            {
                "phi": g.phi,
                "psi": g.psi,
                "the x-gradient of phi or psi": torch.linalg.vector_norm(G),
                "the y-gradient of phi": None if y_up is None else y_up.sum(),
                "the z-gradient of psi": None if z_up is None else z_up.sum(),
            },
            HINT,
        )
        new = SMAGState(x_next, x_phi, x_psi, G, o.project_y(y_up), o.project_z(z_up))
        row = {"objective_estimate": phi - psi, "phi_value": phi, "psi_value": psi, "grad_estimate_norm": g_norm}
        return new, {**row, "lr": eta1}

    def values(self, state: SMAGState, batches: tuple) -> tuple[float, float]:
        """phi(x_phi, y) and psi(x_psi, z) on the given batches (psi = 0 without psi), without gradients."""
        has_psi = self.problem.psi is not None
        return self.oracle.values(
            *batches,
            phi_at=(state.x_phi, state.y),
            psi_at=(state.x_psi, state.z) if has_psi else None,
            where="at the final state",
        )


class OutputRule:
    """The paper's random output: t-bar uniform on {1, ..., T}, drawn by reservoir sampling.

    T is unknown under a time budget, so iteration t+1 replaces the kept
    snapshot with probability 1/(t+1); the draws use their own generator so
    the sampler's stream (and the trajectory) does not depend on ``output``.
    """

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(int(seed) + 1_000_003)

    def keep(self, k: int) -> bool:
        return bool(torch.rand((), generator=self.generator) * (k + 1) < 1.0)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, saved: dict) -> None:
        self.generator.set_state(saved["generator"])


class SMAGReadout(Readout):
    """SMAG's states reported: exact (or fixed-draw) values at the final state, the true objective, and the
    proximal, dual and gradient estimates as outputs (of the random output's snapshot, when it is one)."""

    outputs = {
        "x_phi": "the estimate of prox_{gamma Phi}(x)",
        "x_psi": "the estimate of prox_{gamma Psi}(x) (None without psi)",
        "y": "the maximizer y of phi (None without y)",
        "z": "the maximizer z of psi (None without z)",
        "G": "the gradient estimate",
    }
    gap = progress = "grad_estimate_norm"

    def __init__(self, problem: DMaxProblem, update: Algorithm1):
        self.problem, self.update, self.oracle = problem, update, update.oracle

    def iterate(self, state: SMAGState) -> Any:
        return self.problem.x.build(state.x)

    def observe(self, state: SMAGState, k: int) -> dict:
        """The final state's row: exact values on the full batches, else on one fixed fresh draw."""
        phi, psi = self.update.values(state, self.oracle.reference_batches())
        g_norm = float(state.G.norm())
        return {"objective_estimate": phi - psi, "phi_value": phi, "psi_value": psi, "grad_estimate_norm": g_norm}

    def objective(self, state: SMAGState) -> float | None:
        """Phi(x) - Psi(x) at the result's x for a DC problem; else phi(x_phi, y) - psi(x_psi, z), exact batches."""
        if not self.oracle.exact:
            return None
        s, oracle = chosen(state), self.oracle
        if self.problem.algorithm == 2:
            phi, psi = oracle.values(*oracle.exact_batches(), phi_at=s.x, psi_at=s.x, where="at x")
        else:
            phi, psi = self.update.values(s, oracle.exact_batches())
        return phi - psi

    def returned(self, state: SMAGState) -> dict:
        x, problem = self.problem.x, self.problem
        return {
            "x_phi": x.build(state.x_phi),
            "x_psi": None if problem.psi is None else x.build(state.x_psi),
            "y": _build(problem.y, state.y),
            "z": _build(problem.z, state.z),
            "G": state.G.detach().clone(),
        }

    def finish(self, state: SMAGState, history: Any, info: dict) -> Result:
        s = chosen(state)
        info["output_index"] = s.t if s.t is not None else info.get("iterations")
        return Result(self.problem.x.build(s.x), history, info, **self.returned(s))


def chosen(state: SMAGState) -> SMAGState:
    """The iterates the result holds: the final ones, or the random output's snapshot."""
    return state.pick or state


def setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    """SMAG: Algorithm 1's update at eta0 decay(k), eta1 decay(k), with the random output's reservoir draw."""
    smag_update = Algorithm1(problem, hp, run, "smag")
    oracle, output, rule = smag_update.oracle, hp["output"], OutputRule(run.seed)
    decay = hp["decay"]

    def step(state: SMAGState, k: int) -> tuple[SMAGState, dict]:
        # eta0 and eta1 are read at each step: a stepper's may change between steps, as torch.optim's lr does.
        scale = multiplier(decay, k)
        new, row = smag_update(state, oracle.draw(), k, hp["eta0"] * scale, hp["eta1"] * scale)
        if output == "random":
            # Snapshot t-bar = k+1: x_{t-bar-1} with the estimates x_phi, x_psi, y, z it produced.
            pick = replace(new, x=state.x, t=k + 1)
            new.pick = pick if rule.keep(k) else state.pick
        return new, row

    info = {"algorithm": problem.algorithm, "gamma": hp["gamma"], "eta0": hp["eta0"], "eta1": hp["eta1"]}
    return Plan(
        step,
        smag_update.start(),
        SMAGReadout(problem, smag_update),
        components={"output": rule},
        info={**info, "output": output, "decay": None if decay is None else repr(decay)},
    )


SMAG = register(
    Method(
        "smag",
        DMaxProblem,
        PARAMS,
        setup,
        "stochastic Moreau envelope approximate gradient on max phi - max psi (SMAG paper, Algorithms 1-3)",
        adjustable=("eta0", "eta1"),
    )
)


def smag(problem: DMaxProblem, **options: Any) -> Result:
    """Minimize F(x) = max_y phi(x, y) - max_z psi(x, z) with SMAG (Algorithm 1; 2 and 3 as special cases).

    Each iteration draws one batch (shared by phi and psi unless the problem
    has ``psi_sampler``) and performs, with eta0_k = eta0 decay(k) and eta1_k = eta1 decay(k),

        x_phi <- x_phi - eta1_k (d_x phi(x_phi, y) + (x_phi - x)/gamma);  y <- P_Y(y + eta1_k d_y phi(x_phi, y))
        x_psi <- x_psi - eta1_k (d_x psi(x_psi, z) + (x_psi - x)/gamma);  z <- P_Z(z + eta1_k d_z psi(x_psi, z))
        G <- (x_psi - x_phi)/gamma;  x <- x - eta0_k G

    Hyperparameters
    ---------------
    gamma : Moreau envelope parameter, below 1/delta for delta-weakly convex phi, psi.
    eta0, eta1 : step sizes of x and of (x_phi, y, x_psi, z); the analysis takes
        eta1 <= gamma^2 (1/gamma - delta)/2 (a warning fires when eta1 > gamma/2)
        and eta0 proportional to eta1.
    output : "last" (default) returns the final iterates; "random" returns x_phi, x_psi, y, z
        of iteration t-bar uniform on {1..T} and x = x_{t-bar - 1}, as in Theorem 4.5.
    decay : multiplier decay(k) of both step sizes (e.g. ``fc.StepDecay((600, 1200))``); None: constant.

    Shared options (``fc.describe("smag")`` lists them): iters, seconds, seed
    (of the ``torch.Generator`` handed to the sampler), device, dtype (default:
    the problem's, from x0; floating tensors in each batch are moved there),
    callback (``iterate.x`` is x in x0's container, ``iterate.state`` the
    :class:`SMAGState` of flat vectors), eval_every, progress, checkpoint.

    Returns a Result with ``x``, ``x_phi``, ``x_psi`` (in x0's container), ``y``, ``z``
    (None where absent), ``G`` and ``history`` rows ``k``, ``time``, ``phi_value``,
    ``psi_value`` (sampled values at x_phi, x_psi), ``objective_estimate`` (their
    difference), ``grad_estimate_norm`` = ||G_{k+1}|| and ``lr`` = eta1_k; the last row
    describes the final state, with exact values when the problem has ``full_batch``
    or no sampler, when ``objective`` (Phi - Psi at x for a DC problem, else
    phi(x_phi, y) - psi(x_psi, z) on the full batches) is recorded too.
    """
    return solve(problem, "smag", **options)


def _build(params: Params | None, flat: torch.Tensor | None) -> Any:
    return None if params is None or flat is None else params.build(flat)


__all__ = ["smag"]
