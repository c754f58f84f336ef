"""SMAG: Stochastic Moreau envelope Approximate Gradient method (Algorithms 1, 2 and 3 of the SMAG paper).

The target is F_gamma(x) = Phi_gamma(x) - Psi_gamma(x), the difference of the
Moreau envelopes of Phi(x) = max_y phi(x, y) and Psi(x) = max_z psi(x, z).
Its gradient (eq. (5)) is (prox_{gamma Psi}(x) - prox_{gamma Phi}(x)) / gamma;
SMAG tracks both proximal points (and the maximizers y, z at them) with one
stochastic step each per iteration instead of solving them, and moves x along
the resulting estimate G.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.func import grad_and_value

from fullcomp.algorithms.tracked import positive
from fullcomp.errors import ModelError, OptionError, OracleError
from fullcomp.model.dmax import DMaxProblem, Params, to_run
from fullcomp.run import Budget, Loop, Result, drive
from fullcomp.sets.base import Set

OUTPUTS = ("last", "random")


def run_dtype(dtype: Any) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise OptionError(f"dtype must be a floating torch dtype such as torch.float32 or torch.float64, got {dtype!r}")
    return dtype


def run_device(device: Any) -> torch.device:
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise OptionError(f"device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None


class SMAGStepper:
    """SMAG one iteration at a time, for people who own their training loop.

    ``opt.step(batch)`` performs lines 4-9 of Algorithm 1 on ``batch`` (drawn
    from the problem's sampler when omitted) and returns the history row.
    The iterates are ``opt.x``, ``opt.x_phi``, ``opt.x_psi``, ``opt.y``,
    ``opt.z`` in the containers the problem was declared with.

    ``fc.smag`` runs exactly these updates inside the shared loop, so a
    stepper fed the same batches follows the same trajectory.
    """

    def __init__(
        self,
        problem: DMaxProblem,
        *,
        gamma: float,
        eta0: float,
        eta1: float,
        seed: int = 0,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        _stacklevel: int = 2,
    ):
        if not isinstance(problem, DMaxProblem):
            raise ModelError(f"SMAG needs a fc.DMaxProblem, got {type(problem).__name__}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise OptionError(f"seed must be an int, got {seed!r}")
        self.problem = problem
        self.gamma = positive(gamma, "gamma", "the Moreau envelope parameter, below 1/(weak-convexity modulus)")
        self.eta0 = positive(eta0, "eta0", "the step size of x along the gradient estimate G")
        self.eta1 = positive(eta1, "eta1", "the step size of the proximal and dual estimates")
        if self.eta1 > self.gamma / 2:
            # Lemma 4.4 needs eta1 <= gamma^2 (1/gamma - delta) / 2, which is at most gamma/2 (delta = 0).
            warnings.warn(
                f"eta1={self.eta1:g} > gamma/2={self.gamma / 2:g}: the step-size condition "
                "eta1 <= gamma^2 (1/gamma - delta)/2 of the SMAG analysis fails for every delta >= 0, so x_phi and "
                "x_psi may not track the proximal points; lower eta1 or raise gamma",
                UserWarning,
                stacklevel=_stacklevel,  # the user's line: SMAGStepper(...) or fc.smag(...)
            )
        self.device, self.dtype = run_device(device), run_dtype(dtype)
        try:
            self.generator = torch.Generator(device=self.device).manual_seed(int(seed))
        except RuntimeError as exc:
            raise OptionError(f"device {device!r} is not usable here ({exc}); pass device='cpu'") from None
        self._grads = self._gradients()
        self.state = self.initial_state()
        self.k = 0  # iterations done by step()
        self._at = 0  # the iteration being computed, for error messages

    # -- the stochastic (sub)gradients, from torch.func -----------------------

    def _scalar(self, out: Any, name: str) -> torch.Tensor:
        if not isinstance(out, torch.Tensor) or out.numel() != 1:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise OracleError(
                f"{name} returned {shape} at iteration {self._at}; it must return a scalar (use .mean() or .sum())"
            )
        return out if out.dim() == 0 else out.reshape(())

    def _gradients(self) -> Callable:
        """The stochastic (sub)gradients of lines 4-7 at (x_phi, y) and (x_psi, z), from one torch.func call.

        phi(x_phi, y) + psi(x_psi, z) separates across the blocks, so its gradient with
        respect to each block is exactly the partial gradient the algorithm needs, and
        one transform and backward pass cost less than two.
        """
        p = self.problem

        def total(blocks: dict, batch: Any, psi_batch: Any) -> tuple[torch.Tensor, tuple]:
            phi = self._scalar(p.phi_value(p.x.view(blocks["x_phi"]), view(p.y, blocks.get("y")), batch), "phi")
            if p.psi is None:
                return phi, (phi, torch.zeros_like(phi))
            psi = self._scalar(p.psi_value(p.x.view(blocks["x_psi"]), view(p.z, blocks.get("z")), psi_batch), "psi")
            return phi + psi, (phi, psi)

        return grad_and_value(total, has_aux=True)

    def initial_state(self) -> dict:
        """x_0 = x_phi^0 = x_psi^0 from x0; y_0, z_0 from y0, z0 projected onto Y, Z."""
        p = self.problem
        x = p.x.flat(self.dtype, self.device)
        state = {"x": x, "x_phi": x, "x_psi": x, "G": torch.zeros_like(x), "y": None, "z": None}
        if p.y is not None:
            state["y"] = self._project(p.Y, p.y.flat(self.dtype, self.device))
        if p.z is not None:
            state["z"] = self._project(p.Z, p.z.flat(self.dtype, self.device))
        return state

    @staticmethod
    def _project(domain: Set | None, v: torch.Tensor) -> torch.Tensor:
        return v if domain is None else domain.project(v.view(domain.shape)).reshape(-1)

    # -- Algorithm 1 (2 and 3 are its reductions) ------------------------------

    def update(self, state: dict, batch: Any, psi_batch: Any, k: int) -> tuple[dict, dict]:
        """One iteration t = k of Algorithm 1 on the given batches; returns (next state, history row)."""
        p, gamma, eta0, eta1 = self.problem, self.gamma, self.eta0, self.eta1
        self._at = k
        shared = psi_batch is batch
        batch = to_run(batch, self.dtype, self.device)
        psi_batch = batch if shared else to_run(psi_batch, self.dtype, self.device)
        x, x_phi, y, x_psi, z = (state[key] for key in ("x", "x_phi", "y", "x_psi", "z"))
        blocks = {"x_phi": x_phi, "y": y} if p.psi is None else {"x_phi": x_phi, "y": y, "x_psi": x_psi, "z": z}
        grads, (_, (phi_value, psi_value)) = self._grads(
            {key: v for key, v in blocks.items() if v is not None}, batch, psi_batch
        )

        # Lines 4-5: one stochastic step on min_x' phi(x', y) + ||x' - x_t||^2 / (2 gamma), one ascent step on y.
        x_phi = proximal_step(x_phi, x, grads["x_phi"], eta1, gamma)
        y_ascent = None if y is None else torch.add(y, grads["y"], alpha=eta1)

        # Lines 6-7: the same for psi.  Without psi (Algorithm 3) Psi = 0, whose proximal point is x_t itself.
        if p.psi is None:
            x_psi, z_ascent = x, None
        else:
            x_psi = proximal_step(x_psi, x, grads["x_psi"], eta1, gamma)
            z_ascent = None if z is None else torch.add(z, grads["z"], alpha=eta1)

        # Line 8: G = (x_t - x_phi)/gamma - (x_t - x_psi)/gamma estimates grad F_gamma(x_t) (eq. (5)).
        G = (x_psi - x_phi) / gamma
        # Line 9.
        x_next = torch.add(x, G, alpha=-eta0)

        # One synchronisation checks every value and update: a non-finite one stops the run before it spreads.
        stats = [phi_value, psi_value, torch.linalg.vector_norm(G)]
        stats += [v.sum() for v in (y_ascent, z_ascent) if v is not None]
        values = torch.stack(stats).tolist()
        self._check_finite(values, y_ascent is not None, k)

        y_next = None if y_ascent is None else self._project(p.Y, y_ascent)
        z_next = None if z_ascent is None else self._project(p.Z, z_ascent)
        new = {"x": x_next, "x_phi": x_phi, "x_psi": x_psi, "G": G, "y": y_next, "z": z_next}
        row = {"phi_value": values[0], "psi_value": values[1], "grad_estimate_norm": values[2]}
        return new, row

    def _check_finite(self, values: list[float], has_y: bool, k: int) -> None:
        if all(math.isfinite(v) for v in values):
            return
        phi, psi, g, *duals = values
        if not math.isfinite(phi):
            what = f"phi returned a non-finite value ({phi})"
        elif not math.isfinite(psi):
            what = f"psi returned a non-finite value ({psi})"
        elif not math.isfinite(g):
            what = "the x-gradient of phi or psi is non-finite"
        else:
            names = (["the y-gradient of phi"] if has_y else []) + ["the z-gradient of psi"]
            what = " and ".join(n for n, v in zip(names, duals) if not math.isfinite(v)) + " is non-finite"
        raise OracleError(
            f"{what} at iteration {k}; the run stopped and exc.result holds the last finite state. "
            "Lower eta0/eta1 or check phi and psi for overflow (log of 0, division by 0, sqrt at 0)"
        )

    # -- the step-by-step interface --------------------------------------------

    def step(self, batch: Any = None, psi_batch: Any = None) -> dict:
        """One SMAG iteration; ``batch`` defaults to a draw from the problem's sampler (``full_batch`` without one).

        ``psi_batch`` defaults to ``batch`` (one shared batch), or to a draw from
        ``psi_sampler`` when the problem has one.
        """
        p = self.problem
        if batch is None:
            batch, drawn_psi = p.sample(self.generator)
            psi_batch = drawn_psi if psi_batch is None else psi_batch
        if psi_batch is None:
            psi_batch = p.psi_sampler(self.generator) if p.separate_samplers else batch
        k = self.k
        self.state, row = self.update(self.state, batch, psi_batch, k)
        self.k = k + 1
        return {"k": k, **row}

    def _get(self, key: str, params: Params | None) -> Any:
        value = self.state[key]
        return None if value is None or params is None else params.build(value)

    @property
    def x(self) -> Any:
        """The iterate x_t (in x0's container)."""
        return self._get("x", self.problem.x)

    @property
    def x_phi(self) -> Any:
        """x_phi^t, the estimate of prox_{gamma Phi}(x_{t-1})."""
        return self._get("x_phi", self.problem.x)

    @property
    def x_psi(self) -> Any:
        """x_psi^t, the estimate of prox_{gamma Psi}(x_{t-1}); None in the min-max case."""
        return None if self.problem.psi is None else self._get("x_psi", self.problem.x)

    @property
    def y(self) -> Any:
        return self._get("y", self.problem.y)

    @property
    def z(self) -> Any:
        return self._get("z", self.problem.z)

    def copy_to(self, module: torch.nn.Module, which: str = "x") -> None:
        """Write ``x`` (or ``x_phi``, ``x_psi``) into ``module``'s parameters in place."""
        params = self.problem.x
        if params.kind != "module":
            raise OptionError("copy_to needs a problem whose x0 is an nn.Module")
        if which not in ("x", "x_phi", "x_psi"):
            raise OptionError(f"which must be 'x', 'x_phi' or 'x_psi', got {which!r}")
        values = params.split(self.state[which].detach())
        with torch.no_grad():
            for key, p in module.named_parameters():
                if key not in values:
                    raise ModelError(f"module has a parameter {key!r} that x0 does not have")
                p.copy_(values[key])

    def state_dict(self) -> dict:
        return {"state": self.state, "k": self.k, "generator": self.generator.get_state()}

    def load_state_dict(self, saved: dict) -> None:
        self.state, self.k = saved["state"], saved["k"]
        self.generator.set_state(saved["generator"])


def proximal_step(v: torch.Tensor, x: torch.Tensor, g: torch.Tensor, eta1: float, gamma: float) -> torch.Tensor:
    """v - eta1 (g + (v - x)/gamma), as a move toward x and a step along g: two operations instead of five."""
    return torch.lerp(v, x, eta1 / gamma).add_(g, alpha=-eta1)


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


def smag(
    problem: DMaxProblem,
    *,
    gamma: float,
    eta0: float,
    eta1: float,
    iters: int | None = None,
    seconds: float | None = None,
    output: str = "last",
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
) -> Result:
    """Minimize F(x) = max_y phi(x, y) - max_z psi(x, z) with SMAG (Algorithm 1; 2 and 3 as special cases).

    Each iteration draws one batch (shared by phi and psi unless the problem
    has ``psi_sampler``) and performs

        x_phi <- x_phi - eta1 (d_x phi(x_phi, y) + (x_phi - x)/gamma);  y <- P_Y(y + eta1 d_y phi(x_phi, y))
        x_psi <- x_psi - eta1 (d_x psi(x_psi, z) + (x_psi - x)/gamma);  z <- P_Z(z + eta1 d_z psi(x_psi, z))
        G <- (x_psi - x_phi)/gamma;  x <- x - eta0 G

    Parameters
    ----------
    gamma : Moreau envelope parameter, below 1/delta for delta-weakly convex phi, psi.
    eta0, eta1 : step sizes of x and of (x_phi, y, x_psi, z); the analysis takes
        eta1 <= gamma^2 (1/gamma - delta)/2 (a warning fires when eta1 > gamma/2)
        and eta0 proportional to eta1.
    iters, seconds : budget in iterations and/or optimizer seconds (evaluation excluded).
    output : "last" returns the final iterates; "random" returns x_phi, x_psi, y, z
        of iteration t-bar uniform on {1..T} and x = x_{t-bar - 1}, as in Theorem 4.5.
    seed : seeds the ``torch.Generator`` handed to the sampler.
    device, dtype : where and in which precision the iterates live; floating
        tensors in each batch are moved there.
    callback : ``callback(iterate) -> dict | None | False`` every ``eval_every``
        iterations, outside optimizer time (``iterate.x`` is x in x0's container,
        ``iterate.state`` the flat vectors).
    checkpoint : path or :class:`~fullcomp.run.Checkpoint`; an existing one is resumed.

    Returns
    -------
    Result with ``x``, ``x_phi``, ``x_psi`` (in x0's container), ``y``, ``z``
    (None where absent), ``G`` and ``history`` rows ``k``, ``time``, ``phi_value``,
    ``psi_value`` (sampled values at x_phi, x_psi) and ``grad_estimate_norm`` =
    ||G_{k+1}||; the last row describes the final state, with exact values when
    the problem has ``full_batch`` or no sampler.
    """
    if not isinstance(problem, DMaxProblem):
        raise ModelError(f"smag needs a fc.DMaxProblem, got {type(problem).__name__}")
    if output not in OUTPUTS:
        raise OptionError(
            f"output must be 'last' (final iterate) or 'random' (t-bar uniform, as in the theorems), got {output!r}"
        )
    loop = Loop(Budget(iters, seconds), callback, eval_every, progress, checkpoint, "grad_estimate_norm", "smag")
    stepper = SMAGStepper(
        problem, gamma=gamma, eta0=eta0, eta1=eta1, seed=seed, device=device, dtype=dtype, _stacklevel=3
    )
    rule = OutputRule(seed)
    generator = stepper.generator

    def step(state: dict, k: int) -> tuple[dict, dict]:
        batch, psi_batch = problem.sample(generator)
        new, row = stepper.update(state, batch, psi_batch, k)
        if output == "random":
            # Snapshot t-bar = k+1: x_{t-bar-1} with the estimates x_phi, x_psi, y, z it produced.
            pick = {**new, "x": state["x"], "t": k + 1}
            new["pick"] = pick if rule.keep(k) else state.get("pick")
        return new, row

    def observe(state: dict, k: int) -> dict:
        """The final row, at the final state: exact values on the full batches, else on one fresh draw."""
        batch, psi_batch = problem.full_batch, problem.psi_full_batch
        if psi_batch is None and not problem.separate_samplers:
            psi_batch = batch
        if problem.stochastic and (batch is None or psi_batch is None):
            # A generator of its own, so the run's stream (and a resumed run) stays untouched.
            drawn = problem.sample(torch.Generator(device=stepper.device).manual_seed(int(seed) + 2_000_003))
            batch = drawn[0] if batch is None else batch
            psi_batch = drawn[1] if psi_batch is None else psi_batch
        x, run = problem.x, lambda b: to_run(b, stepper.dtype, stepper.device)  # noqa: E731
        with torch.no_grad():
            phi = problem.phi_value(x.view(state["x_phi"]), view(problem.y, state["y"]), run(batch))
            psi = 0.0
            if problem.psi is not None:
                psi = problem.psi_value(x.view(state["x_psi"]), view(problem.z, state["z"]), run(psi_batch))
        return {"phi_value": float(phi), "psi_value": float(psi), "grad_estimate_norm": float(state["G"].norm())}

    def finish(state: dict, history, info: dict) -> Result:
        chosen = state.get("pick") if output == "random" else None
        if chosen is None:
            chosen = state
        info["output_index"] = chosen.get("t", info.get("iterations"))
        x = problem.x
        return Result(
            x.build(chosen["x"]),
            history,
            info,
            x_phi=x.build(chosen["x_phi"]),
            x_psi=None if problem.psi is None else x.build(chosen["x_psi"]),
            y=None if problem.y is None else problem.y.build(chosen["y"]),
            z=None if problem.z is None else problem.z.build(chosen["z"]),
            G=chosen["G"].detach().clone(),
        )

    state = stepper.state
    if output == "random":
        state = {**state, "pick": None}
    info = {
        "method": "smag",
        "algorithm": problem.algorithm,
        "gamma": stepper.gamma,
        "eta0": stepper.eta0,
        "eta1": stepper.eta1,
        "output": output,
        "seed": seed,
        "device": str(stepper.device),
        "dtype": str(stepper.dtype),
    }
    return drive(
        step,
        state,
        loop,
        generator=generator,
        iterate=lambda s: problem.x.build(s["x"]),
        finish=finish,
        observe=observe,
        components={"output": rule},
        info=info,
    )


def view(params: Params | None, flat: torch.Tensor | None) -> Any:
    return None if params is None else params.view(flat)


__all__ = ["smag", "SMAGStepper"]
