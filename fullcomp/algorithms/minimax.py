"""Baselines for weakly-convex-strongly-concave min-max problems min_x max_{y in Y} phi(x, y) (SMAG, Section 5.2).

Each takes the :class:`~fullcomp.model.dmax.DMaxProblem` that ``fc.smag``
takes (min-max form: ``phi(x, y, batch)``, no psi) and runs in the shared loop:

* :func:`sgda`: stochastic gradient descent-ascent (Lin, Jin and Jordan, 2020;
  spec B2), simultaneous steps on one mini-batch.
* :func:`epoch_gda`: Epoch-GDA for weakly convex x (Yan et al., 2020; spec B3):
  epochs of SGDA on phi(x, y) + gamma/2 ||x - x_hat||^2, restarted at the epoch
  averages.
* :func:`sopa`: SOPA (Zhu et al., 2022; spec B1), the pAUC method for
  min_{w, s} F_pauc(w, s): stochastic (sub)gradient steps on the model weights
  (SGD or Adam) and on the CVaR thresholds s with their own step.  y is not
  updated: SOPA solves problem (8), so the problem is built with alpha = 0.

Every method returns the last iterate (the practice of the papers' code, spec
B2) as a :class:`~fullcomp.run.Result` with ``x`` and ``y`` in the problem's
containers and ``history`` rows ``k``, ``time``, ``phi_value`` (the sampled
phi at the point the gradient was taken, also as ``objective_estimate``) and
``grad_norm`` (of the x-gradient); with ``full_batch`` (or no sampler) the
driver adds ``objective``, phi at the output point on the full batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from fullcomp.algorithms.method import Method, Plan, register, solve
from fullcomp.errors import ModelError, OptionError
from fullcomp.model.dmax import DMaxProblem, Params
from fullcomp.oracles.dmax import DMaxOracle
from fullcomp.run import Readout, Result, RunOptions
from fullcomp.serial import encodable
from fullcomp.validation import BOOL, NONE, REQUIRED, Instance, Interval, Options, Pair, Param, positive

HINT = "Lower the step sizes or check phi for overflow"


class MinMax:
    """What the three baselines share: the DMax oracle on phi alone, one batch per step, rows and the plan."""

    def __init__(self, problem: DMaxProblem, run: RunOptions, method: str):
        if problem.psi is not None:
            raise ModelError(
                f"{method} solves min_x max_y phi(x, y); this problem has psi (a difference of maxima): use fc.smag"
            )
        self.problem = problem
        self.oracle = DMaxOracle(problem, run, method)
        start = self.oracle.start()
        self.x0, self.y0 = start["x"], start["y"]

    def gradients(self, k: int, x: torch.Tensor, y: torch.Tensor | None, hold_y: bool = False) -> tuple:
        """(g_x, g_y or None, row) on one fresh batch; the row holds the sampled phi and ||g_x||, checked finite.

        With ``hold_y``, y is a constant of phi and g_y is None."""
        held = ("phi_y",) if hold_y else ()
        s = self.oracle.gradients(k, self.oracle.draw()[0], phi_at=(x, y), held=held)
        phi, g_norm, _ = self.oracle.check(
            k,
            {
                "phi": s.phi,
                "the x-gradient of phi": torch.linalg.vector_norm(s.phi_x),
                "the y-gradient of phi": None if s.phi_y is None else torch.linalg.vector_norm(s.phi_y),
            },
            HINT,
        )
        return s.phi_x, s.phi_y, {"objective_estimate": phi, "phi_value": phi, "grad_norm": g_norm}

    def plan(
        self, step: Callable, state: Any, point: Callable[[Any], tuple], info: dict, final: Callable | None = None
    ) -> Plan:
        """The driver's plan; ``point(state)`` is the output (x, y), ``final(state)`` more info at the end."""
        return Plan(step, state, MinMaxReadout(self, point, final), info=info)


class MinMaxReadout(Readout):
    """The min-max baselines' states reported: phi at the output (x, y), and the output's y."""

    outputs = {"y": "the maximizer y of phi (None without y)"}
    gap = "grad_norm"

    def __init__(self, minmax: MinMax, point: Callable[[Any], tuple], final: Callable | None):
        self.problem, self.oracle, self.point, self.final = minmax.problem, minmax.oracle, point, final

    def value(self, s: Any, batches: tuple, where: str) -> float:
        return self.oracle.values(*batches, phi_at=self.point(s), where=where)[0]

    def iterate(self, s: Any) -> Any:
        return self.problem.x.build(self.point(s)[0])

    def observe(self, s: Any, k: int) -> dict:
        """phi at the output on the full batch when the problem has one, else on a fixed fresh draw."""
        phi = self.value(s, self.oracle.reference_batches(), "at the final state")
        return {"objective_estimate": phi, "phi_value": phi}

    def objective(self, s: Any) -> float | None:
        return self.value(s, self.oracle.exact_batches(), "at the output") if self.oracle.exact else None

    def finish(self, s: Any, history: Any, info: dict) -> Result:
        x, y = self.point(s)
        info.update(self.final(s) if self.final is not None else {})
        return Result(self.problem.x.build(x), history, info, y=_build(self.problem.y, y))


def _build(params: Params | None, flat: torch.Tensor | None) -> Any:
    return None if params is None or flat is None else params.build(flat)


@encodable
@dataclass
class GDAState:
    x: torch.Tensor
    y: torch.Tensor | None


@encodable
@dataclass
class EpochState:
    """The iterates, the epoch's anchor (x_hat, y_hat), the sums of its iterates, its step count and number."""

    x: torch.Tensor
    y: torch.Tensor | None
    x_hat: torch.Tensor
    y_hat: torch.Tensor | None
    sum_x: torch.Tensor
    sum_y: torch.Tensor | None
    t: int
    epoch: int


@encodable
@dataclass
class SOPAState:
    """x (weights and thresholds) and the weights' optimizer: Adam's moments, the momentum buffer, the anchor of
    epoch_decay, and the sum and count of the iterates since the anchor's last reset (None where unused)."""

    x: torch.Tensor
    m: torch.Tensor | None = None
    v: torch.Tensor | None = None
    buf: torch.Tensor | None = None
    ref: torch.Tensor | None = None
    acc: torch.Tensor | None = None
    t: int = 0


ETA_X = Param("eta_x", (positive(),), REQUIRED, "the step size of x")
ETA_Y = Param("eta_y", (positive(),), REQUIRED, "the step size of y")


# ------------------------------------------------------------------------------------------------ SGDA


def sgda_setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    mm, eta_x, eta_y = MinMax(problem, run, "sgda"), hp["eta_x"], hp["eta_y"]

    def step(state: GDAState, k: int) -> tuple[GDAState, dict]:
        x, y = state.x, state.y
        gx, gy, row = mm.gradients(k, x, y)
        x_next = torch.add(x, gx, alpha=-eta_x)
        y_next = None if y is None else mm.oracle.project_y(torch.add(y, gy, alpha=eta_y))
        return GDAState(x_next, y_next), row

    return mm.plan(step, GDAState(mm.x0, mm.y0), lambda s: (s.x, s.y), {"eta_x": eta_x, "eta_y": eta_y})


register(
    Method(
        "sgda",
        DMaxProblem,
        (ETA_X, ETA_Y),
        sgda_setup,
        "stochastic gradient descent-ascent on min_x max_y phi (SMAG paper's min-max baseline B2)",
    )
)


def sgda(problem: DMaxProblem, **options: Any) -> Result:
    """Stochastic gradient descent-ascent on min_x max_{y in Y} phi(x, y) (spec B2).

    Each iteration draws one batch and takes simultaneous steps

        x <- x - eta_x g_x(x, y);   y <- P_Y(y + eta_y g_y(x, y))

    Hyperparameters: ``eta_x``, ``eta_y``, the step sizes of x and y (the theory
    takes eta_x of order eta_y / kappa^2).  Shared options as for every method
    (``fc.describe("sgda")``); dtype defaults to the problem's.

    Returns the last iterate (``x``, ``y``) and the history.
    """
    return solve(problem, "sgda", **options)


# ------------------------------------------------------------------------------------------- Epoch-GDA


def epoch_gda_setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    mm, eta_x, eta_y, gamma = MinMax(problem, run, "epoch-gda"), hp["eta_x"], hp["eta_y"], hp["gamma"]
    epoch_iters, linear = hp["epoch_iters"], hp["growth"] == "linear"

    def step(state: EpochState, k: int) -> tuple[EpochState, dict]:
        x, y, x_hat, epoch = state.x, state.y, state.x_hat, state.epoch
        scale, length = (1.0 / epoch, epoch_iters * epoch) if linear else (1.0, epoch_iters)
        gx, gy, row = mm.gradients(k, x, y)
        x_next = x - eta_x * scale * (gx + gamma * (x - x_hat))
        y_next = None if y is None else mm.oracle.project_y(torch.add(y, gy, alpha=eta_y * scale))
        sum_x, sum_y = state.sum_x + x_next, None if y is None else state.sum_y + y_next
        t = state.t + 1
        new = replace(state, x=x_next, y=y_next, sum_x=sum_x, sum_y=sum_y, t=t)
        if t == length:  # the epoch ends: restart from the averages, the new anchor
            new = start_epoch(sum_x / t, None if y is None else sum_y / t, epoch + 1)
        return new, {**row, "epoch": epoch}

    def start_epoch(x_hat: torch.Tensor, y_hat: torch.Tensor | None, epoch: int) -> EpochState:
        sum_y = None if y_hat is None else torch.zeros_like(y_hat)
        return EpochState(x_hat, y_hat, x_hat, y_hat, torch.zeros_like(x_hat), sum_y, 0, epoch)

    info = {"eta_x": eta_x, "eta_y": eta_y, "gamma": gamma, "epoch_iters": epoch_iters, "growth": hp["growth"]}
    point = lambda s: (s.x_hat, s.y_hat)  # noqa: E731
    return mm.plan(step, start_epoch(mm.x0, mm.y0, 1), point, info, final=lambda s: {"epochs": s.epoch - 1})


register(
    Method(
        "epoch-gda",
        DMaxProblem,
        (
            ETA_X,
            ETA_Y,
            Param("gamma", (positive(),), REQUIRED, "the weight of the proximal anchor term"),
            Param("epoch_iters", (positive(int),), 10, "T_1, the SGDA steps of the first epoch"),
            Param("growth", (Options(("constant", "linear")),), "constant", "'linear': T_k = k T_1, steps / k"),
        ),
        epoch_gda_setup,
        "Epoch-GDA for weakly-convex-strongly-concave min-max, Yan et al. 2020 (SMAG paper's baseline B3)",
    )
)


def epoch_gda(problem: DMaxProblem, **options: Any) -> Result:
    """Epoch-GDA for phi weakly convex in x and strongly concave in y (spec B3).

    Epoch k, anchored at x_hat: T_k SGDA steps on phi(x, y) + gamma/2 ||x - x_hat||^2 from (x_hat, y_hat),

        x <- x - eta_x^k (g_x + gamma (x - x_hat));   y <- P_Y(y + eta_y^k g_y)

    then (x_hat, y_hat) <- the averages of the epoch's iterates, where the next epoch starts.

    Hyperparameters
    ---------------
    eta_x, eta_y : step sizes of the first epoch.
    gamma : weight of the proximal anchor term (above the weak-convexity modulus; the
        Yang lab's ``epoch_decay``).
    epoch_iters : T_1, the steps of the first epoch (default 10).
    growth : ``"constant"`` (default: T_k = epoch_iters and constant steps, the practical form) or
        ``"linear"`` (the analysis: T_k = k epoch_iters, steps eta / k).

    Returns the last anchor (x_hat, y_hat), the epoch output of the analysis
    (the starting point while no epoch has completed), and the history (rows
    also carry ``epoch``); ``info["epochs"]`` counts the completed epochs.
    """
    return solve(problem, "epoch-gda", **options)


# ------------------------------------------------------------------------------------------------ SOPA


def threshold_mask(params: Params, key: str) -> torch.Tensor:
    """A boolean mask over the flat x marking the CVaR thresholds: the entry named ``key`` (or ``*.key``)."""
    if params.kind == "tensor":
        raise OptionError("sopa needs x0 as a dict of tensors or a module with an entry holding the thresholds s")
    hits = [n == key or n.endswith("." + key) for n in params.names]
    if not any(hits):
        raise OptionError(
            f"sopa: x0 has no entry named {key!r} (the CVaR thresholds); pass s_key= one of {params.names}"
        )
    return torch.cat([torch.full((n,), h) for n, h in zip(params.numels, hits)])


#: The options of LibAUC's step on the model weights (:class:`WeightStep`), shared by ``sopa`` and by any
#: stepper that takes the same step (the LibAUC reference steppers of ``fullcomp-lab``).
WEIGHT_OPTIONS = (
    Param("mode", (Options(("sgd", "adam")),), "sgd", "the steps on w: 'sgd', or 'adam' as LibAUC's default"),
    Param("betas", (Pair(Interval(float, 0, 1, "left")),), (0.9, 0.999), "Adam's moment decays"),
    Param("momentum", (Interval(float, 0, 1, "left"),), 0.0, "momentum of the 'sgd' steps on w (LibAUC's 0.9)"),
    Param("dampening", (Interval(float, 0, 1, "left"),), 0.0, "dampening of the momentum (LibAUC SOPA-s's 0.1)"),
    Param("nesterov", (BOOL,), False, "Nesterov momentum (needs momentum > 0 and no dampening)"),
    Param(
        "clip_value",
        (positive(), NONE),
        None,
        "clamp each entry of w's gradient to [-clip_value, clip_value] (LibAUC's default 1.0); None: no clipping",
    ),
    Param("weight_decay", (Interval(float, 0, None),), 0.0, "L2 penalty weight_decay w added to w's gradient"),
    Param(
        "epoch_decay",
        (Interval(float, 0, None),),
        0.0,
        "weight of the pull epoch_decay (w - w_ref) towards an anchor w_ref, which starts at x0 (LibAUC's name)",
    ),
    Param(
        "epoch_iters",
        (positive(int), NONE),
        None,
        "steps between the anchor's resets to the average of the iterates since the last one (LibAUC's "
        "update_regularizer); None: the anchor stays at x0",
    ),
)


class WeightStep:
    """LibAUC's step on the model weights w (SOPA, SOPA-s, SOTA-s and STACO share it), on flat vectors.

    ``weights`` marks the entries of x that are w; the others (thresholds, moving averages) are left to
    the caller and never move here.  On w's gradient g, as LibAUC's optimizers do:

        d = clamp(g, -clip_value, clip_value) + epoch_decay (w - w_ref) + weight_decay w
        'sgd':  b = d at the first step, b <- momentum b + (1 - dampening) d after; d <- b (or d + momentum b
                with nesterov); w <- w - eta d        (no momentum: w <- w - eta d)
        'adam': Adam on d with ``betas`` and eps 1e-8, bias-corrected, step eta

    The anchor w_ref starts at x0 (LibAUC draws it from N(0, 0.01^2)); every ``epoch_iters`` steps it
    becomes the average of the iterates since its last reset (LibAUC's ``update_regularizer``).  A step
    never modifies its state in place.
    """

    def __init__(self, hp: dict, weights: torch.Tensor, method: str):
        self.weights, self.mode, (self.b1, self.b2) = weights, hp["mode"], hp["betas"]
        self.momentum, self.dampening, self.nesterov = hp["momentum"], hp["dampening"], hp["nesterov"]
        self.clip, self.weight_decay = hp["clip_value"], hp["weight_decay"]
        self.epoch_decay, self.epoch_iters = hp["epoch_decay"], hp["epoch_iters"]
        if self.mode == "adam" and (self.momentum or self.dampening or self.nesterov):
            raise OptionError(f"{method}: momentum, dampening and nesterov are options of mode='sgd'; Adam has betas")
        if self.nesterov and (self.momentum == 0 or self.dampening != 0):
            raise OptionError(f"{method}: nesterov needs momentum > 0 and dampening = 0")
        if self.epoch_iters is not None and self.epoch_decay == 0:
            raise OptionError(f"{method}: epoch_iters resets the anchor of epoch_decay; give epoch_decay > 0")
        self.mask = weights.to(torch.get_default_dtype())

    @property
    def plain(self) -> bool:
        """Whether this is the plain gradient step w - eta g (mode 'sgd', no option set)."""
        return self.mode == "sgd" and not (self.momentum or self.clip or self.weight_decay or self.epoch_decay)

    def start(self, x0: torch.Tensor) -> SOPAState:
        """The state at x0 (the momentum buffer is set by the first step to d, as torch's SGD does)."""
        adam = self.mode == "adam"
        return SOPAState(
            x0,
            m=torch.zeros_like(x0) if adam else None,
            v=torch.zeros_like(x0) if adam else None,
            ref=x0.clone() if self.epoch_decay else None,
            acc=None if self.epoch_iters is None else torch.zeros_like(x0),
        )

    def __call__(self, state: SOPAState, x: torch.Tensor, g: torch.Tensor, k: int, eta: float) -> SOPAState:
        """The state with x's w stepped (every other entry unchanged) and the optimizer's part, at iteration k."""
        mask = self.mask.to(dtype=x.dtype, device=x.device)
        d = torch.where(self.weights, g, 0.0)  # w's gradient, 0 on the other entries
        if self.clip is not None:
            d = d.clamp(-self.clip, self.clip)
        if self.epoch_decay:
            d = d + self.epoch_decay * (x - state.ref) * mask
        if self.weight_decay:
            d = d + self.weight_decay * x * mask
        if self.mode == "adam":
            b1, b2 = self.b1, self.b2
            m = b1 * state.m + (1 - b1) * d
            v = b2 * state.v + (1 - b2) * d * d
            m_hat, v_hat = m / (1 - b1 ** (k + 1)), v / (1 - b2 ** (k + 1))
            return replace(state, x=x - eta * m_hat / (v_hat.sqrt() + 1e-8), m=m, v=v)
        buf = state.buf
        if self.momentum:
            buf = d if buf is None else self.momentum * buf + (1 - self.dampening) * d
            d = d + self.momentum * buf if self.nesterov else buf
        return replace(state, x=x - eta * d, buf=buf)

    def after(self, state: SOPAState) -> SOPAState:
        """The state once the step has landed at its x: the epoch's sum of iterates, the anchor's reset."""
        if self.epoch_iters is None:
            return state
        acc, t = state.acc + state.x, state.t + 1
        if t == self.epoch_iters:
            return replace(state, ref=acc / t, acc=torch.zeros_like(acc), t=0)
        return replace(state, acc=acc, t=t)


def sopa_setup(problem: DMaxProblem, hp: dict, run: RunOptions) -> Plan:
    mm, eta, eta_s = MinMax(problem, run, "sopa"), hp["eta"], hp["eta_s"]
    mask, y0 = threshold_mask(problem.x, hp["s_key"]).to(run.device), mm.y0
    weights = WeightStep(hp, ~mask, "sopa")
    # The thresholds' step eta_s and the weights' eta as one vector: one product per step in SGD mode.
    rates = torch.where(mask, eta_s, eta).to(dtype=mm.x0.dtype)

    def step(state: SOPAState, k: int) -> tuple[SOPAState, dict]:
        x = state.x
        gx, _, row = mm.gradients(k, x, y0, hold_y=True)
        if weights.plain:
            return replace(state, x=x - rates * gx), row
        # LibAUC's step on the weights (Adam, momentum, clipping, decays), the plain step on the thresholds.
        new = weights(state, x, gx, k, eta)
        return weights.after(replace(new, x=new.x - torch.where(mask, gx, 0.0) * eta_s)), row

    state = weights.start(mm.x0)
    names = ("s_key", "mode", "momentum", "dampening", "nesterov", "clip_value", "weight_decay", "epoch_decay")
    info = {"eta": eta, "eta_s": eta_s, **{n: hp[n] for n in names}, "epoch_iters": hp["epoch_iters"]}
    return mm.plan(step, state, lambda s: (s.x, y0), info)


register(
    Method(
        "sopa",
        DMaxProblem,
        (
            Param("eta", (positive(),), REQUIRED, "the step size of the model weights, LibAUC's lr"),
            Param("eta_s", (positive(),), REQUIRED, "the step size of the CVaR thresholds, LibAUC's eta"),
            Param("s_key", (Instance((str,), "a string"),), "s", "the name of the thresholds' entry in x0"),
            *WEIGHT_OPTIONS,
        ),
        sopa_setup,
        "SOPA for one-way partial AUC in CVaR form, Zhu et al. 2022 (SMAG paper's baseline B1)",
    )
)


def sopa(problem: DMaxProblem, **options: Any) -> Result:
    """SOPA for one-way partial AUC in the CVaR form (8) (spec B1; LibAUC ``pAUC_CVaR_Loss`` + ``SOPA``).

    x holds the model weights w and the thresholds s (the entry ``s_key`` of x0).
    Each iteration draws positive and negative mini-batches (the problem's
    sampler) and, with p_ij = 1[L(w; x_i, x_j) > s_i] as autograd finds it,

        s_i <- s_i - eta_s d_{s_i} phi       (the LibAUC step eta_s (1 - sum_j p_ij / (rho |B-|)) when
                                             phi scales s so that d_{s_i} phi is that bracket)
        w   <- w - eta d_w phi               (mode "sgd"), or an Adam step of size eta (mode "adam")

    y (an adversary) is left at y0: SOPA minimizes phi(x, y0), which is problem (8) when phi was
    built with alpha = 0.

    The step on w has LibAUC's options (its ``SOPA`` optimizer's, applied to w only: the thresholds
    always take the plain step): d = clamp(d_w phi, +-clip_value) + epoch_decay (w - w_ref)
    + weight_decay w, then momentum (SGD) or Adam.  The defaults are the plain steps above; LibAUC's
    own defaults are momentum 0.9 and clip_value 1.0.  Fed the same batches (distinct positives in
    each), a run follows LibAUC's ``pAUC_CVaR_Loss`` + ``SOPA`` step for step, except that the anchor
    w_ref starts at x0 where LibAUC draws it at random.

    Hyperparameters
    ---------------
    eta : step size of w (LibAUC's lr).
    eta_s : step size of the thresholds (LibAUC's eta).
    s_key : name of the thresholds' entry in x0 (default ``"s"``).
    mode : ``"sgd"`` (default) or ``"adam"`` (LibAUC's default, with ``betas``, default (0.9, 0.999)).
    momentum, dampening, nesterov : the SGD momentum (default 0: none), as torch's and LibAUC's SGD.
    clip_value : clamp each entry of w's gradient to [-clip_value, clip_value] (default None: no clipping).
    weight_decay : L2 penalty added to w's gradient (default 0).
    epoch_decay : weight of the pull towards the anchor w_ref (default 0: none).
    epoch_iters : steps between the anchor's resets to the average of the iterates since the last one
        (LibAUC's ``update_regularizer``; default None: the anchor stays at x0).
    """
    return solve(problem, "sopa", **options)


__all__ = ["sgda", "epoch_gda", "sopa", "WEIGHT_OPTIONS", "WeightStep"]
