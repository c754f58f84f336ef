"""Stochastic baselines for difference-of-convex problems min_x Phi(x) - Psi(x) (SMAG paper, Section 5.1).

The five baselines SMAG is compared with on PU learning, as specified in
``baselines.md`` (A1-A5), for any :class:`~fullcomp.DMaxProblem` of Algorithm 2's
form (``phi(x, batch)``, ``psi(x, batch)``, no maximization):

* :func:`dc_sgd` - SGD on Phi - Psi (A1);
* :func:`sdca` - stochastic DC algorithm, Nitanda & Suzuki 2017 (A2);
* :func:`ssdc_spg` - SSDC with proximal stochastic subgradient stages, Xu et al. 2019 (A3);
* :func:`ssdc_adagrad` - SSDC with AdaGrad stages (A4);
* :func:`sbcd` - Moreau-envelope gradient steps with inner proximal stochastic subgradient loops,
  the DC reading of Yao et al. 2022 (A5).

One driver iteration of every method draws exactly one batch from the problem's
sampler and makes one inner update, so equal ``iters`` means equal data for all
of them (SDCA additionally draws ``inner_iters`` batches for its Psi-gradient
estimate at the start of each stage).  Double-loop methods close a stage when
its inner count is reached.  ``decay(k)`` multiplies every learning rate, inner
and outer, at iteration k (the paper divides them by 10 at epochs 12 and 24:
:class:`StepDecay`); proximal weights (gamma, mu) are not learning rates and stay.

Every result's ``x`` is the method's output point (noted per method); its
history rows hold ``phi_value``/``psi_value`` (the sampled values where the
subgradients were taken), their difference ``objective_estimate`` and ``lr``,
and the final row the exact ``objective`` Phi - Psi at the output (on ``full_batch``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import grad_and_value

from fullcomp.algorithms.smag import run_device, run_dtype
from fullcomp.algorithms.tracked import positive, positive_int
from fullcomp.errors import ModelError, OptionError, OracleError
from fullcomp.model.dmax import DMaxProblem, to_run
from fullcomp.run import Budget, Loop, Result, drive

Decay = Callable[[int], float]


@dataclass(frozen=True)
class StepDecay:
    """Learning-rate multiplier ``factor ** (number of milestones <= k)`` at iteration k.

    ``StepDecay((12 * n, 24 * n))`` with n batches per epoch is the paper's division
    by 10 at epochs 12 and 24.  Default: no milestones (constant rates).
    """

    milestones: tuple[int, ...] = ()
    factor: float = 0.1

    def __call__(self, k: int) -> float:
        return self.factor ** sum(k >= m for m in self.milestones)


class Oracle:
    """Sampled subgradients of phi at one point and psi at another, from one torch.func call.

    phi(a) + psi(b) separates in (a, b), so its gradient is (d phi(a), d psi(b)):
    one backward pass serves SGD (a = b), SSDC (b is the stage's anchor) and SBCD.
    """

    def __init__(self, problem: DMaxProblem, method: str, dtype: torch.dtype, device: torch.device):
        if not isinstance(problem, DMaxProblem):
            raise ModelError(f"{method} needs a fc.DMaxProblem, got {type(problem).__name__}")
        if problem.algorithm != 2:
            raise ModelError(
                f"{method} solves min phi(x) - psi(x) (SMAG's Algorithm 2): declare the problem with psi and "
                "without y0/z0 (no inner maximization)"
            )
        self.problem, self.dtype, self.device = problem, dtype, device
        self.method = method
        p = problem

        def total(a: torch.Tensor, b: torch.Tensor, batch: Any) -> tuple[torch.Tensor, tuple]:
            phi, psi = p.phi(p.x.view(a), batch), p.psi(p.x.view(b), batch)
            return phi + psi, (phi, psi)

        self._both = grad_and_value(total, argnums=(0, 1), has_aux=True)
        self._phi = grad_and_value(lambda a, batch: p.phi(p.x.view(a), batch))
        self._psi = grad_and_value(lambda b, batch: p.psi(p.x.view(b), batch))

    def start(self) -> torch.Tensor:
        return self.problem.x.flat(self.dtype, self.device)

    def draw(self, generator: torch.Generator) -> Any:
        batch, psi_batch = self.problem.sample(generator)
        if psi_batch is not batch:
            raise ModelError(f"{self.method} draws one batch per step: give the problem one sampler (no psi_sampler)")
        return to_run(batch, self.dtype, self.device)

    def both(self, a: torch.Tensor, b: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        """(d phi(a), d psi(b), (phi(a), psi(b)))."""
        (ga, gb), (_, values) = self._both(a, b, batch)
        return ga, gb, values

    def psi_value(self, b: torch.Tensor, batch: Any) -> torch.Tensor:
        """psi(b) on the batch, without a gradient (a logged estimate, not an update)."""
        with torch.no_grad():
            return self.problem.psi(self.problem.x.view(b), batch)

    def phi(self, a: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(d phi(a), phi(a))."""
        return self._phi(a, batch)

    def psi(self, b: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(d psi(b), psi(b))."""
        return self._psi(b, batch)

    def check(self, phi: torch.Tensor, psi: torch.Tensor, moved: torch.Tensor, k: int) -> tuple[float, float]:
        """The sampled values as floats; an OracleError when they or the new point are not finite."""
        values = torch.stack([phi.detach().reshape(()), psi.detach().reshape(()), moved.sum()]).tolist()
        if not all(math.isfinite(v) for v in values):
            raise OracleError(
                f"{self.method}: a non-finite value or update at iteration {k} (phi {values[0]}, psi {values[1]}); "
                "the run stopped and exc.result holds the last finite state. Lower the learning rate"
            )
        return values[0], values[1]

    def objective(self, x: torch.Tensor) -> float:
        """Phi(x) - Psi(x) on ``full_batch`` (NaN for a problem without one)."""
        p = self.problem
        if p.full_batch is None:
            return math.nan
        batch = to_run(p.full_batch, self.dtype, self.device)
        with torch.no_grad():
            return float(p.phi(p.x.view(x), batch) - p.psi(p.x.view(x), batch))


def _decay(decay: Decay | None) -> Decay:
    if decay is None:
        return StepDecay()
    if not callable(decay):
        raise OptionError("decay must be a callable decay(k) -> learning-rate multiplier, e.g. fc.StepDecay((600,))")
    return decay


def _seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise OptionError(f"seed must be an int, got {seed!r}")
    return int(seed)


def _run(
    method: str,
    oracle: Oracle,
    step: Callable[[dict, int], tuple[dict, dict]],
    state: dict,
    output: str,
    generator: torch.Generator,
    budget: tuple[int | None, float | None],
    loop_options: dict,
    info: dict,
) -> Result:
    """Drive ``step`` under the budget; the result's x is ``state[output]`` (the method's output point)."""
    loop = Loop(Budget(*budget), progress_key="phi_value", desc=method, **loop_options)
    problem = oracle.problem

    def observe(s: dict, k: int) -> dict:
        exact = oracle.objective(s[output])
        return {"objective_estimate": exact, "objective": exact}

    def finish(s: dict, history, run_info: dict) -> Result:
        # Every point the method keeps (anchor, inner iterates) besides the output, in x0's container.
        extras = {
            key: problem.x.build(v)
            for key, v in s.items()
            if key != "x" and isinstance(v, torch.Tensor) and v.shape == s[output].shape
        }
        return Result(problem.x.build(s[output]), history, run_info, **extras)

    info = {"method": method, "output": output, **info, "device": str(oracle.device), "dtype": str(oracle.dtype)}
    return drive(
        step,
        state,
        loop,
        generator=generator,
        iterate=lambda s: problem.x.build(s[output]),
        finish=finish,
        observe=observe,
        info=info,
    )


def _setup(problem: DMaxProblem, method: str, seed: Any, device: Any, dtype: Any):
    device, dtype = run_device(device), run_dtype(dtype)
    oracle = Oracle(problem, method, dtype, device)
    try:
        generator = torch.Generator(device=device).manual_seed(_seed(seed))
    except RuntimeError as exc:
        raise OptionError(f"device {device!r} is not usable here ({exc}); pass device='cpu'") from None
    return oracle, generator


def dc_sgd(
    problem: DMaxProblem,
    *,
    eta: float,
    iters: int | None = None,
    seconds: float | None = None,
    decay: Decay | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """SGD on Phi - Psi (baselines.md A1): x <- x - eta_k (g_phi(x) - g_psi(x)), both on one batch.

    No convergence guarantee for DC problems; included as the paper's reference.

    Parameters
    ----------
    eta : learning rate; eta_k = eta * decay(k).
    iters, seconds : budget in iterations (one batch each) and/or optimizer seconds.
    decay : learning-rate multiplier decay(k) (default None: constant).
    seed : seeds the ``torch.Generator`` handed to the sampler.
    callback, eval_every, progress, checkpoint : as for :func:`fullcomp.smag`.

    Returns a Result whose ``x`` is the last iterate.
    """
    eta = positive(eta, "eta", "the SGD learning rate")
    decay = _decay(decay)
    oracle, generator = _setup(problem, "sgd", seed, device, dtype)

    def step(state: dict, k: int) -> tuple[dict, dict]:
        x = state["x"]
        g_phi, g_psi, (phi, psi) = oracle.both(x, x, oracle.draw(generator))
        lr = eta * decay(k)
        x_next = x - lr * (g_phi - g_psi)
        phi_v, psi_v = oracle.check(phi, psi, x_next, k)
        return {"x": x_next}, {"objective_estimate": phi_v - psi_v, "phi_value": phi_v, "psi_value": psi_v, "lr": lr}

    options = dict(callback=callback, eval_every=eval_every, progress=progress, checkpoint=checkpoint)
    info = {"eta": eta, "seed": seed}
    return _run("sgd", oracle, step, {"x": oracle.start()}, "x", generator, (iters, seconds), options, info)


def sdca(
    problem: DMaxProblem,
    *,
    eta: float,
    outer: float,
    inner_iters: int,
    gamma: float = 0.0,
    psi_batches: int | None = None,
    iters: int | None = None,
    seconds: float | None = None,
    decay: Decay | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """Stochastic DC algorithm (Nitanda & Suzuki 2017; baselines.md A2) with SGD stages.

    Stage with anchor x:

        v = mean of g_psi(x) over psi_batches batches           (Psi linearized once per stage)
        z = x;  repeat inner_iters times:  z <- z - eta_k (g_phi(z) - v + gamma (z - x))
        x <- (1 - outer_k) x + outer_k * mean(z)                  (outer_k = outer * decay(k), the outer rate)

    Parameters
    ----------
    eta : inner learning rate (eta_k = eta * decay(k)).
    outer : outer learning rate in (0, 1]: how far x moves to the stage's averaged solution.
    inner_iters : SGD steps per stage (one batch each).
    gamma : proximal weight of the stage problem (default 0, plain stochastic DCA; phi's own
        strong convexity, e.g. a ridge, makes the stage problem strongly convex).
    psi_batches : batches averaged for v (default ``inner_iters``: as many samples as the stage's phi steps).
    iters, seconds, decay, seed, callback, eval_every, progress, checkpoint : as for :func:`dc_sgd`.

    Returns a Result whose ``x`` is the current anchor x.
    """
    eta = positive(eta, "eta", "the inner SGD learning rate")
    outer = positive(outer, "outer", "the outer learning rate, in (0, 1]")
    if outer > 1:
        raise OptionError(f"outer must be in (0, 1] (an interpolation toward the stage's solution), got {outer!r}")
    inner_iters = positive_int(inner_iters, "inner_iters", "SGD steps per stage")
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not (math.isfinite(gamma) and gamma >= 0):
        raise OptionError(f"gamma must be a number >= 0 (the stage's proximal weight), got {gamma!r}")
    psi_batches = inner_iters if psi_batches is None else positive_int(psi_batches, "psi_batches", "batches for v")
    decay = _decay(decay)
    oracle, generator = _setup(problem, "sdca", seed, device, dtype)
    x0 = oracle.start()

    def step(state: dict, k: int) -> tuple[dict, dict]:
        x, z, v, z_sum, t = state["x"], state["z"], state["v"], state["z_sum"], state["t"]
        if t == 0:  # a new stage: linearize Psi at the anchor with one large batch
            v = sum(oracle.psi(x, oracle.draw(generator))[0] for _ in range(psi_batches)) / psi_batches
            z, z_sum = x, torch.zeros_like(x)
        batch = oracle.draw(generator)
        g_phi, phi = oracle.phi(z, batch)
        lr = eta * decay(k)
        z = z - lr * (g_phi - v + gamma * (z - x))
        z_sum, t = z_sum + z, t + 1
        if t == inner_iters:
            x, t = torch.lerp(x, z_sum / inner_iters, outer * decay(k)), 0
        phi_v, psi_v = oracle.check(phi, oracle.psi_value(z, batch), z, k)
        new = {"x": x, "z": z, "v": v, "z_sum": z_sum, "t": t}
        return new, {"objective_estimate": phi_v - psi_v, "phi_value": phi_v, "psi_value": psi_v, "lr": lr}

    state = {"x": x0, "z": x0, "v": torch.zeros_like(x0), "z_sum": torch.zeros_like(x0), "t": 0}
    options = dict(callback=callback, eval_every=eval_every, progress=progress, checkpoint=checkpoint)
    info = {"eta": eta, "outer": outer, "inner_iters": inner_iters, "gamma": gamma, "psi_batches": psi_batches}
    return _run("sdca", oracle, step, state, "x", generator, (iters, seconds), options, {**info, "seed": seed})


def _ssdc_checks(eta: float, gamma: float, inner_iters: int) -> tuple[float, float, int]:
    return (
        positive(eta, "eta", "the stage learning rate eta_0"),
        positive(gamma, "gamma", "the proximal weight of the stage problem (the paper tunes 1/gamma)"),
        positive_int(inner_iters, "inner_iters", "T_0: stage k runs T_0 * k inner steps"),
    )


def ssdc_spg(
    problem: DMaxProblem,
    *,
    eta: float,
    gamma: float,
    inner_iters: int,
    iters: int | None = None,
    seconds: float | None = None,
    decay: Decay | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """SSDC-SPG (Xu, Qi, Lin, Jin, Yang 2019; baselines.md A3), as in the reference code ``SSDC_SGD_pu.m``.

    Stage k (k = 1, 2, ...) with anchor x_k solves min g(z) - <d psi(x_k), z> + gamma/2 ||z - x_k||^2 by
    T_k = inner_iters * k proximal steps, t = 1..T_k, with eta_t = eta/(t + 1):

        d_t = g_phi(z_t) - g_psi(x_k)          (psi's subgradient re-sampled at the anchor every step)
        z_{t+1} = (z_t + gamma eta_t x_k - eta_t d_t) / (1 + gamma eta_t)
        x_{k+1} = sum_t (t + 1) z_{t+1} / sum_t (t + 1)

    Parameters
    ----------
    eta : eta_0 (times decay(k)).  gamma : proximal weight.  inner_iters : T_0.
    Others as for :func:`dc_sgd`.  Returns a Result whose ``x`` is the current anchor x_k.
    """
    eta, gamma, inner_iters = _ssdc_checks(eta, gamma, inner_iters)
    decay = _decay(decay)
    oracle, generator = _setup(problem, "ssdc-spg", seed, device, dtype)
    x0 = oracle.start()

    def step(state: dict, k: int) -> tuple[dict, dict]:
        x, z, stage, t = state["x"], state["z"], state["stage"], state["t"] + 1
        g_phi, g_psi, (phi, psi) = oracle.both(z, x, oracle.draw(generator))
        lr = eta * decay(k) / (t + 1)
        z = (z + (gamma * lr) * x - lr * (g_phi - g_psi)) / (1 + gamma * lr)
        z_sum, weight = state["z_sum"] + (t + 1) * z, state["weight"] + (t + 1)
        if t == inner_iters * stage:  # stage over: the weighted average is the next anchor
            x = z_sum / weight
            z, z_sum, weight, stage, t = x, torch.zeros_like(x), 0.0, stage + 1, 0
        phi_v, psi_v = oracle.check(phi, psi, z, k)
        new = {"x": x, "z": z, "z_sum": z_sum, "weight": weight, "stage": stage, "t": t}
        return new, {
            "objective_estimate": phi_v - psi_v,
            "phi_value": phi_v,
            "psi_value": psi_v,
            "lr": lr,
            "stage": state["stage"],
        }

    state = {"x": x0, "z": x0, "z_sum": torch.zeros_like(x0), "weight": 0.0, "stage": 1, "t": 0}
    options = dict(callback=callback, eval_every=eval_every, progress=progress, checkpoint=checkpoint)
    info = {"eta": eta, "gamma": gamma, "inner_iters": inner_iters, "seed": seed}
    return _run("ssdc-spg", oracle, step, state, "x", generator, (iters, seconds), options, info)


def ssdc_adagrad(
    problem: DMaxProblem,
    *,
    eta: float,
    gamma: float,
    inner_iters: int,
    G: float = 1e-8,
    iters: int | None = None,
    seconds: float | None = None,
    decay: Decay | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """SSDC-AdaGrad (baselines.md A4), as in the reference code ``SSDC_AdaGrad_pu.m``.

    Stage k with anchor x_k and eta_k = eta / sqrt(k), for t = 1..T_0 k (z starts at x_k):

        d_t = g_phi(z) - g_psi(x_k);  c_t = sum d_s;  S_t = sum d_s * d_s;  H_t = 2 G + sqrt(S_t)
        z = x_k - eta_k c_t / (gamma eta_k t + H_t)       (elementwise: the exact dual-averaging step)
        x_{k+1} = mean of the z's

    Parameters
    ----------
    eta : eta_0 (times decay(k)).  gamma : proximal weight.  inner_iters : T_0.
    G : AdaGrad's offset (default 1e-8; the reference code's bound on subgradients).
    Others as for :func:`dc_sgd`.  Returns a Result whose ``x`` is the current anchor x_k.
    """
    eta, gamma, inner_iters = _ssdc_checks(eta, gamma, inner_iters)
    G = float(G)
    if not (math.isfinite(G) and G >= 0):
        raise OptionError(f"G must be a number >= 0 (AdaGrad's offset 2G in H_t), got {G!r}")
    decay = _decay(decay)
    oracle, generator = _setup(problem, "ssdc-adagrad", seed, device, dtype)
    x0 = oracle.start()

    def step(state: dict, k: int) -> tuple[dict, dict]:
        x, z, stage, t = state["x"], state["z"], state["stage"], state["t"] + 1
        g_phi, g_psi, (phi, psi) = oracle.both(z, x, oracle.draw(generator))
        d = g_phi - g_psi
        c, S = state["c"] + d, state["S"] + d * d
        lr = eta * decay(k) / math.sqrt(stage)
        z = x - lr * c / (gamma * lr * t + 2 * G + S.sqrt())
        z_sum = state["z_sum"] + z
        if t >= inner_iters * stage:  # stage over: the uniform average is the next anchor
            x = z_sum / t
            z, c, S, z_sum, stage, t = x, torch.zeros_like(x), torch.zeros_like(x), torch.zeros_like(x), stage + 1, 0
        phi_v, psi_v = oracle.check(phi, psi, z, k)
        new = {"x": x, "z": z, "c": c, "S": S, "z_sum": z_sum, "stage": stage, "t": t}
        return new, {
            "objective_estimate": phi_v - psi_v,
            "phi_value": phi_v,
            "psi_value": psi_v,
            "lr": lr,
            "stage": state["stage"],
        }

    zero = torch.zeros_like(x0)
    state = {"x": x0, "z": x0, "c": zero, "S": zero, "z_sum": zero, "stage": 1, "t": 0}
    options = dict(callback=callback, eval_every=eval_every, progress=progress, checkpoint=checkpoint)
    info = {"eta": eta, "gamma": gamma, "inner_iters": inner_iters, "G": G, "seed": seed}
    return _run("ssdc-adagrad", oracle, step, state, "x", generator, (iters, seconds), options, info)


def sbcd(
    problem: DMaxProblem,
    *,
    eta: float,
    mu: float,
    inner_iters: int,
    outer: float = 1.0,
    iters: int | None = None,
    seconds: float | None = None,
    decay: Decay | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """SBCD for DC problems (Yao, Lin, Yang 2022, reduced to Phi - Psi as in baselines.md A5).

    Gradient steps on the Moreau envelopes' difference, grad = (prox_{mu Psi}(w) - prox_{mu Phi}(w)) / mu,
    each proximal point estimated by inner_iters proximal stochastic subgradient steps from v = w:

        v_phi <- v_phi - eta_k (g_phi(v_phi) + (v_phi - w)/mu);  v_psi likewise with g_psi   (one batch)
        w <- w - outer_k (mean v_psi - mean v_phi)    (outer_k = outer * decay(k); outer = gamma/mu of AGD-SBCD)

    ``eta`` is the paper's inner learning rate mu eta_t / (mu + eta_t).  A constant inner_iters
    replaces the theory's T_k = Theta(k^2), as the paper's tuning over {2, 5, 10} does.

    Parameters
    ----------
    eta : inner learning rate (times decay(k)).  mu : Moreau parameter.  inner_iters : T.
    outer : step of w in units of mu (default 1: w moves to w + mean v_phi - mean v_psi).
    Others as for :func:`dc_sgd`.  Returns a Result whose ``x`` is the mean v_phi of the last
    finished stage (the algorithm's output, the estimate of prox_{mu Phi}(w)); ``w`` is the anchor.
    """
    eta = positive(eta, "eta", "the inner learning rate mu eta_t/(mu + eta_t)")
    mu = positive(mu, "mu", "the Moreau parameter")
    inner_iters = positive_int(inner_iters, "inner_iters", "inner steps per outer step")
    outer = positive(outer, "outer", "the outer step in units of mu")
    decay = _decay(decay)
    oracle, generator = _setup(problem, "sbcd", seed, device, dtype)
    x0 = oracle.start()

    def step(state: dict, k: int) -> tuple[dict, dict]:
        w, v_phi, v_psi, t = state["w"], state["v_phi"], state["v_psi"], state["t"] + 1
        g_phi, g_psi, (phi, psi) = oracle.both(v_phi, v_psi, oracle.draw(generator))
        lr = eta * decay(k)
        v_phi = v_phi - lr * (g_phi + (v_phi - w) / mu)
        v_psi = v_psi - lr * (g_psi + (v_psi - w) / mu)
        s_phi, s_psi, out = state["s_phi"] + v_phi, state["s_psi"] + v_psi, state["out"]
        if t == inner_iters:
            out = s_phi / t
            w = w - outer * decay(k) * (s_psi / t - out)
            v_phi, v_psi, s_phi, s_psi, t = w, w, torch.zeros_like(w), torch.zeros_like(w), 0
        phi_v, psi_v = oracle.check(phi, psi, v_phi + v_psi, k)
        new = {"w": w, "v_phi": v_phi, "v_psi": v_psi, "s_phi": s_phi, "s_psi": s_psi, "out": out, "t": t}
        return new, {"objective_estimate": phi_v - psi_v, "phi_value": phi_v, "psi_value": psi_v, "lr": lr}

    zero = torch.zeros_like(x0)
    state = {"w": x0, "v_phi": x0, "v_psi": x0, "s_phi": zero, "s_psi": zero, "out": x0, "t": 0}
    options = dict(callback=callback, eval_every=eval_every, progress=progress, checkpoint=checkpoint)
    info = {"eta": eta, "mu": mu, "inner_iters": inner_iters, "outer": outer, "seed": seed}
    return _run("sbcd", oracle, step, state, "out", generator, (iters, seconds), options, info)


__all__ = ["dc_sgd", "sdca", "ssdc_spg", "ssdc_adagrad", "sbcd", "StepDecay"]
