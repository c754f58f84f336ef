"""Stochastic baselines for difference-of-convex problems min_x Phi(x) - Psi(x) (SMAG paper, Section 5.1).

The five baselines SMAG is compared with on PU learning, as specified in
``baselines.md`` (A1-A5), for any :class:`~fullcomp.DMaxProblem` of Algorithm 2's
form (``phi(x, batch)``, ``psi(x, batch)``, no maximization):

* :func:`dc_sgd` - SGD on Phi - Psi (A1), registered as ``"sgd"``;
* :func:`sdca` - stochastic DC algorithm, Nitanda & Suzuki 2017 (A2);
* :func:`ssdc_spg` - SSDC with proximal stochastic subgradient stages, Xu et al. 2019 (A3);
* :func:`ssdc_adagrad` - SSDC with AdaGrad stages (A4);
* :func:`sbcd` - Moreau-envelope gradient steps with inner proximal stochastic subgradient loops,
  the DC reading of Yao et al. 2022 (A5).

One driver iteration of every method draws exactly one batch from the problem's
sampler and makes one inner update, so equal ``iters`` means equal data for all
of them (SDCA additionally draws ``psi_batches`` batches for its Psi-gradient
estimate at the start of each stage).  Double-loop methods close a stage when
its inner count is reached.  The ``decay`` rule's multiplier at iteration k
(:func:`fullcomp.steps.multiplier`) multiplies every learning rate, of the inner
iterate and of the anchor (the paper divides them by 10 at epochs 12 and 24:
:class:`~fullcomp.steps.StepDecay`); proximal weights (gamma, mu) are not learning
rates and stay.

Every result's ``x`` is the method's output point (noted per method); its
history rows hold ``phi_value``/``psi_value`` (the sampled values where the
subgradients were taken), their difference ``objective_estimate`` and ``lr``;
the driver adds the exact ``objective`` Phi - Psi at the output (on ``full_batch``)
at the first and last rows and every ``eval_every`` iterations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fullcomp.algorithms.method import Method, Plan, register, solve
from fullcomp.errors import ModelError
from fullcomp.model.dmax import DMaxProblem
from fullcomp.oracles.dmax import DMaxOracle
from fullcomp.run import Readout, Result, RunOptions
from fullcomp.serial import encodable
from fullcomp.steps import DECAY, StepSize, multiplier
from fullcomp.validation import NONE, REQUIRED, Interval, Param, positive

Decay = StepSize | Callable[[int], float]


HINT = "Lower the learning rate"


class DC:
    """What the five baselines share: the DMax oracle on min Phi - Psi, one batch per step, rows and the plan."""

    def __init__(self, problem: DMaxProblem, run: RunOptions, method: str):
        if problem.algorithm != 2:
            raise ModelError(
                f"{method} solves min phi(x) - psi(x) (SMAG's Algorithm 2): declare the problem with psi and "
                "without y0/z0 (no inner maximization)"
            )
        if problem.separate_samplers:
            raise ModelError(f"{method} draws one batch per step: give the problem one sampler (no psi_sampler)")
        self.problem, self.method = problem, method
        self.oracle = DMaxOracle(problem, run, method)
        self.x0 = self.oracle.start()["x"]

    def draw(self) -> Any:
        return self.oracle.draw()[0]

    def row(self, k: int, phi: torch.Tensor, psi: torch.Tensor, moved: torch.Tensor, **columns: Any) -> dict:
        """The row of a step (sampled values, their difference, ``columns``), checked finite with ``moved``."""
        phi, psi, _ = self.oracle.check(k, {"phi": phi, "psi": psi, "the update": moved.sum()}, HINT)
        return {"objective_estimate": phi - psi, "phi_value": phi, "psi_value": psi, **columns}

    def plan(self, step: Callable, state: Any, output: str, info: dict, decay: Decay | None) -> Plan:
        """The driver's plan; the result's x is the state's field ``output``, the method's output point."""
        info = {"output": output, **info, "decay": None if decay is None else repr(decay)}
        return Plan(step, state, DCReadout(self.problem, self.oracle, output), info=info)


class DCReadout(Readout):
    """The DC baselines' states reported at the output point (the state's field ``output``); every other
    point the method keeps (anchor, inner iterates) is in the result's ``points``."""

    def __init__(self, problem: DMaxProblem, oracle: DMaxOracle, output: str):
        self.problem, self.oracle, self.output = problem, oracle, output

    def values(self, s: Any, batches: tuple) -> tuple[float, float]:
        point = getattr(s, self.output)
        return self.oracle.values(*batches, phi_at=point, psi_at=point, where=f"at the output {self.output}")

    def iterate(self, s: Any) -> Any:
        return self.problem.x.build(getattr(s, self.output))

    def observe(self, s: Any, k: int) -> dict:
        phi, psi = self.values(s, self.oracle.reference_batches())
        return {"objective_estimate": phi - psi, "phi_value": phi, "psi_value": psi}

    def objective(self, s: Any) -> float | None:
        if not self.oracle.exact:
            return None
        phi, psi = self.values(s, self.oracle.exact_batches())
        return phi - psi

    def finish(self, s: Any, history: Any, info: dict) -> Result:
        point = getattr(s, self.output)
        points = {
            key: self.problem.x.build(v)
            for key, v in vars(s).items()
            if key != "x" and isinstance(v, torch.Tensor) and v.shape == point.shape
        }
        return Result(self.problem.x.build(point), history, info, points=points)


def _eta(doc: str) -> Param:
    return Param("eta", (positive(),), REQUIRED, doc)


def _inner(doc: str) -> Param:
    return Param("inner_iters", (positive(int),), REQUIRED, doc)


# ------------------------------------------------------------------------------------------------ SGD (A1)


@encodable
@dataclass
class SGDState:
    x: torch.Tensor


@encodable
@dataclass
class SDCAState:
    """The anchor x, the inner iterate z, psi's linearization v at x, the inner sum of z and the inner count."""

    x: torch.Tensor
    z: torch.Tensor
    v: torch.Tensor
    z_sum: torch.Tensor
    t: int


@encodable
@dataclass
class SPGState:
    """The anchor x, the inner iterate z, the weighted sum of z and its weight, the stage and its step count."""

    x: torch.Tensor
    z: torch.Tensor
    z_sum: torch.Tensor
    weight: float
    stage: int
    t: int


@encodable
@dataclass
class AdaGradState:
    """As :class:`SPGState`, with AdaGrad's sums of the directions c and of their squares S, and a plain sum."""

    x: torch.Tensor
    z: torch.Tensor
    c: torch.Tensor
    S: torch.Tensor
    z_sum: torch.Tensor
    stage: int
    t: int


@encodable
@dataclass
class SBCDState:
    """The iterate w, the two proximal estimates, their inner sums, the output point and the inner count."""

    w: torch.Tensor
    v_phi: torch.Tensor
    v_psi: torch.Tensor
    s_phi: torch.Tensor
    s_psi: torch.Tensor
    out: torch.Tensor
    t: int


def sgd_setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    dc, eta, decay = DC(problem, run, "sgd"), hp["eta"], hp["decay"]

    def step(state: SGDState, k: int) -> tuple[SGDState, dict]:
        x, lr = state.x, eta * multiplier(decay, k)
        phi, psi, grad = dc.oracle.difference(k, dc.draw(), x)
        x_next = x - lr * grad
        return SGDState(x_next), dc.row(k, phi, psi, x_next, lr=lr)

    return dc.plan(step, SGDState(dc.x0), "x", {"eta": eta}, decay)


register(
    Method(
        "sgd",
        DMaxProblem,
        (_eta("the SGD learning rate, times decay(k)"), DECAY),
        sgd_setup,
        "SGD on Phi - Psi (SMAG paper's DC baseline A1)",
    )
)


def dc_sgd(problem: DMaxProblem, **options: Any) -> Result:
    """SGD on Phi - Psi (baselines.md A1): x <- x - eta_k (g_phi(x) - g_psi(x)), both on one batch.

    No convergence guarantee for DC problems; included as the paper's reference.

    Hyperparameters: ``eta`` (learning rate; eta_k = eta * decay(k)) and ``decay``
    (learning-rate multiplier decay(k), a rule such as :class:`~fullcomp.steps.StepDecay`
    or a function k -> multiplier; None: constant).
    Shared options as for every method (``fc.describe("sgd")``).

    Returns a Result whose ``x`` is the last iterate.
    """
    return solve(problem, "sgd", **options)


# ----------------------------------------------------------------------------------------------- SDCA (A2)


def sdca_setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    dc, decay = DC(problem, run, "sdca"), hp["decay"]
    eta, anchor_step, inner, gamma = hp["eta"], hp["anchor_step"], hp["inner_iters"], hp["gamma"]
    psi_batches = hp["psi_batches"] or inner

    def step(state: SDCAState, k: int) -> tuple[SDCAState, dict]:
        x, z, v, z_sum, t = state.x, state.z, state.v, state.z_sum, state.t
        if t == 0:  # a new stage: linearize Psi at the anchor with psi_batches batches
            v = sum(dc.oracle.gradients(k, dc.draw(), psi_at=x).psi_x for _ in range(psi_batches)) / psi_batches
            z, z_sum = x, torch.zeros_like(x)
        batch, lr = dc.draw(), eta * multiplier(decay, k)
        s = dc.oracle.gradients(k, batch, phi_at=z)
        z = z - lr * (s.phi_x - v + gamma * (z - x))
        z_sum, t = z_sum + z, t + 1
        if t == inner:
            x, t = torch.lerp(x, z_sum / inner, anchor_step * multiplier(decay, k)), 0
        _, psi = dc.oracle.evaluate(batch, psi_at=z, where=k)  # psi at z on the batch: a logged estimate, not an update
        return SDCAState(x, z, v, z_sum, t), dc.row(k, s.phi, psi, z, lr=lr)

    x0 = dc.x0
    state = SDCAState(x0, x0, torch.zeros_like(x0), torch.zeros_like(x0), 0)
    info = {"eta": eta, "anchor_step": anchor_step, "inner_iters": inner, "gamma": gamma, "psi_batches": psi_batches}
    return dc.plan(step, state, "x", info, decay)


register(
    Method(
        "sdca",
        DMaxProblem,
        (
            _eta("the inner SGD learning rate, times decay(k)"),
            Param(
                "anchor_step",
                (Interval(float, 0, 1, "right"),),
                REQUIRED,
                "how far the anchor x moves to the stage's average, times decay(k)",
            ),
            _inner("SGD steps per stage, one batch each"),
            Param("gamma", (Interval(float, 0, None),), 0.0, "proximal weight of the stage problem; 0: plain DCA"),
            Param("psi_batches", (positive(int), NONE), None, "batches averaged for v; None: inner_iters"),
            DECAY,
        ),
        sdca_setup,
        "stochastic DC algorithm with SGD stages, Nitanda & Suzuki 2017 (SMAG paper's baseline A2)",
        renamed={"outer": "anchor_step"},  # F is the problem's outer function
    )
)


def sdca(problem: DMaxProblem, **options: Any) -> Result:
    """Stochastic DC algorithm (Nitanda & Suzuki 2017; baselines.md A2) with SGD stages.

    Stage with anchor x:

        v = mean of g_psi(x) over psi_batches batches           (Psi linearized once per stage)
        z = x;  repeat inner_iters times:  z <- z - eta_k (g_phi(z) - v + gamma (z - x))
        x <- (1 - a_k) x + a_k * mean(z)                  (a_k = anchor_step * decay(k), the anchor's rate)

    Hyperparameters
    ---------------
    eta : inner learning rate (eta_k = eta * decay(k)).
    anchor_step : the anchor's learning rate in (0, 1]: how far x moves to the stage's averaged solution.
    inner_iters : SGD steps per stage (one batch each).
    gamma : proximal weight of the stage problem (default 0, plain stochastic DCA; phi's own
        strong convexity, e.g. a ridge, makes the stage problem strongly convex).
    psi_batches : batches averaged for v (default ``inner_iters``: as many samples as the stage's phi steps).
    decay : as for :func:`dc_sgd`.

    Returns a Result whose ``x`` is the current anchor x.
    """
    return solve(problem, "sdca", **options)


# ------------------------------------------------------------------------------------------ SSDC (A3, A4)

SSDC = (
    _eta("the stage learning rate eta_0, times decay(k)"),
    Param("gamma", (positive(),), REQUIRED, "the proximal weight of the stage problem; the paper tunes 1/gamma"),
    _inner("T_0: stage k runs T_0 * k inner steps"),
)


def ssdc_spg_setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    dc, decay = DC(problem, run, "ssdc-spg"), hp["decay"]
    eta, gamma, inner = hp["eta"], hp["gamma"], hp["inner_iters"]

    def step(state: SPGState, k: int) -> tuple[SPGState, dict]:
        x, z, stage, t = state.x, state.z, state.stage, state.t + 1
        s = dc.oracle.gradients(k, dc.draw(), phi_at=z, psi_at=x)
        lr = eta * multiplier(decay, k) / (t + 1)
        z = (z + (gamma * lr) * x - lr * (s.phi_x - s.psi_x)) / (1 + gamma * lr)
        z_sum, weight = state.z_sum + (t + 1) * z, state.weight + (t + 1)
        if t == inner * stage:  # stage over: the weighted average is the next anchor
            x = z_sum / weight
            z, z_sum, weight, stage, t = x, torch.zeros_like(x), 0.0, stage + 1, 0
        return SPGState(x, z, z_sum, weight, stage, t), dc.row(k, s.phi, s.psi, z, lr=lr, stage=state.stage)

    state = SPGState(dc.x0, dc.x0, torch.zeros_like(dc.x0), 0.0, 1, 0)
    return dc.plan(step, state, "x", {"eta": eta, "gamma": gamma, "inner_iters": inner}, decay)


register(
    Method(
        "ssdc-spg",
        DMaxProblem,
        (*SSDC, DECAY),
        ssdc_spg_setup,
        "SSDC with proximal stochastic subgradient stages, Xu et al. 2019 (SMAG paper's baseline A3)",
    )
)


def ssdc_spg(problem: DMaxProblem, **options: Any) -> Result:
    """SSDC-SPG (Xu, Qi, Lin, Jin, Yang 2019; baselines.md A3), as in the reference code ``SSDC_SGD_pu.m``.

    Stage k (k = 1, 2, ...) with anchor x_k solves min g(z) - <d psi(x_k), z> + gamma/2 ||z - x_k||^2 by
    T_k = inner_iters * k proximal steps, t = 1..T_k, with eta_t = eta/(t + 1):

        d_t = g_phi(z_t) - g_psi(x_k)          (psi's subgradient re-sampled at the anchor every step)
        z_{t+1} = (z_t + gamma eta_t x_k - eta_t d_t) / (1 + gamma eta_t)
        x_{k+1} = sum_t (t + 1) z_{t+1} / sum_t (t + 1)

    Hyperparameters: ``eta`` (eta_0, times decay(k)), ``gamma`` (proximal weight),
    ``inner_iters`` (T_0), ``decay`` as for :func:`dc_sgd`.  Returns a Result whose
    ``x`` is the current anchor x_k; rows also carry ``stage``.
    """
    return solve(problem, "ssdc-spg", **options)


def ssdc_adagrad_setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    dc, decay = DC(problem, run, "ssdc-adagrad"), hp["decay"]
    eta, gamma, inner, G = hp["eta"], hp["gamma"], hp["inner_iters"], hp["G"]

    def step(state: AdaGradState, k: int) -> tuple[AdaGradState, dict]:
        x, z, stage, t = state.x, state.z, state.stage, state.t + 1
        s = dc.oracle.gradients(k, dc.draw(), phi_at=z, psi_at=x)
        d = s.phi_x - s.psi_x
        c, S = state.c + d, state.S + d * d
        lr = eta * multiplier(decay, k) / math.sqrt(stage)
        z = x - lr * c / (gamma * lr * t + 2 * G + S.sqrt())
        z_sum = state.z_sum + z
        if t >= inner * stage:  # stage over: the uniform average is the next anchor
            x = z_sum / t
            z, c, S, z_sum, stage, t = x, torch.zeros_like(x), torch.zeros_like(x), torch.zeros_like(x), stage + 1, 0
        return AdaGradState(x, z, c, S, z_sum, stage, t), dc.row(k, s.phi, s.psi, z, lr=lr, stage=state.stage)

    zero = torch.zeros_like(dc.x0)
    state = AdaGradState(dc.x0, dc.x0, zero, zero, zero, 1, 0)
    return dc.plan(step, state, "x", {"eta": eta, "gamma": gamma, "inner_iters": inner, "G": G}, decay)


register(
    Method(
        "ssdc-adagrad",
        DMaxProblem,
        (*SSDC, Param("G", (Interval(float, 0, None),), 1e-8, "AdaGrad's offset 2G in H_t"), DECAY),
        ssdc_adagrad_setup,
        "SSDC with AdaGrad stages (SMAG paper's baseline A4)",
    )
)


def ssdc_adagrad(problem: DMaxProblem, **options: Any) -> Result:
    """SSDC-AdaGrad (baselines.md A4), as in the reference code ``SSDC_AdaGrad_pu.m``.

    Stage k with anchor x_k and eta_k = eta / sqrt(k), for t = 1..T_0 k (z starts at x_k):

        d_t = g_phi(z) - g_psi(x_k);  c_t = sum d_s;  S_t = sum d_s * d_s;  H_t = 2 G + sqrt(S_t)
        z = x_k - eta_k c_t / (gamma eta_k t + H_t)       (elementwise: the exact dual-averaging step)
        x_{k+1} = mean of the z's

    Hyperparameters: ``eta`` (eta_0, times decay(k)), ``gamma`` (proximal weight),
    ``inner_iters`` (T_0), ``G`` (AdaGrad's offset, default 1e-8; the reference
    code's bound on subgradients), ``decay`` as for :func:`dc_sgd`.  Returns a
    Result whose ``x`` is the current anchor x_k; rows also carry ``stage``.
    """
    return solve(problem, "ssdc-adagrad", **options)


# ----------------------------------------------------------------------------------------------- SBCD (A5)


def sbcd_setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    dc, decay = DC(problem, run, "sbcd"), hp["decay"]
    eta, mu, inner, envelope_step = hp["eta"], hp["mu"], hp["inner_iters"], hp["envelope_step"]

    def step(state: SBCDState, k: int) -> tuple[SBCDState, dict]:
        w, v_phi, v_psi, t = state.w, state.v_phi, state.v_psi, state.t + 1
        s = dc.oracle.gradients(k, dc.draw(), phi_at=v_phi, psi_at=v_psi)
        lr = eta * multiplier(decay, k)
        v_phi = v_phi - lr * (s.phi_x + (v_phi - w) / mu)
        v_psi = v_psi - lr * (s.psi_x + (v_psi - w) / mu)
        s_phi, s_psi, out = state.s_phi + v_phi, state.s_psi + v_psi, state.out
        if t == inner:
            out = s_phi / t
            w = w - envelope_step * multiplier(decay, k) * (s_psi / t - out)
            v_phi, v_psi, s_phi, s_psi, t = w, w, torch.zeros_like(w), torch.zeros_like(w), 0
        return SBCDState(w, v_phi, v_psi, s_phi, s_psi, out, t), dc.row(k, s.phi, s.psi, v_phi + v_psi, lr=lr)

    x0, zero = dc.x0, torch.zeros_like(dc.x0)
    state = SBCDState(x0, x0, x0, zero, zero, x0, 0)
    return dc.plan(
        step, state, "out", {"eta": eta, "mu": mu, "inner_iters": inner, "envelope_step": envelope_step}, decay
    )


register(
    Method(
        "sbcd",
        DMaxProblem,
        (
            _eta("the inner learning rate mu eta_t/(mu + eta_t), times decay(k)"),
            Param("mu", (positive(),), REQUIRED, "the Moreau parameter"),
            _inner("inner steps per step of w"),
            Param(
                "envelope_step",
                (positive(),),
                1.0,
                "the step of w along the Moreau envelopes' gradient, in units of mu, times decay(k)",
            ),
            DECAY,
        ),
        sbcd_setup,
        "Moreau-envelope gradient steps with inner proximal subgradient loops, Yao et al. 2022 (baseline A5)",
        renamed={"outer": "envelope_step"},  # F is the problem's outer function
    )
)


def sbcd(problem: DMaxProblem, **options: Any) -> Result:
    """SBCD for DC problems (Yao, Lin, Yang 2022, reduced to Phi - Psi as in baselines.md A5).

    Gradient steps on the Moreau envelopes' difference, grad = (prox_{mu Psi}(w) - prox_{mu Phi}(w)) / mu,
    each proximal point estimated by inner_iters proximal stochastic subgradient steps from v = w:

        v_phi <- v_phi - eta_k (g_phi(v_phi) + (v_phi - w)/mu);  v_psi likewise with g_psi   (one batch)
        w <- w - e_k (mean v_psi - mean v_phi)    (e_k = envelope_step * decay(k); envelope_step: AGD-SBCD's gamma/mu)

    ``eta`` is the paper's inner learning rate mu eta_t / (mu + eta_t).  A constant inner_iters
    replaces the theory's T_k = Theta(k^2), as the paper's tuning over {2, 5, 10} does.

    Hyperparameters: ``eta`` (inner learning rate, times decay(k)), ``mu`` (Moreau
    parameter), ``inner_iters`` (T), ``envelope_step`` (step of w in units of mu, default 1:
    w moves to w + mean v_phi - mean v_psi), ``decay`` as for :func:`dc_sgd`.
    Returns a Result whose ``x`` is the mean v_phi of the last finished stage (the
    algorithm's output, the estimate of prox_{mu Phi}(w)); ``w`` is the anchor.
    """
    return solve(problem, "sbcd", **options)


__all__ = ["dc_sgd", "sdca", "ssdc_spg", "ssdc_adagrad", "sbcd"]
