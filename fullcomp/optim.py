"""fullcomp's composite methods and SMAG as ``torch.optim`` optimizers, for networks trained in a loop of one's own.

``fc.optim.HMSFW(model.parameters(), outer=fc.cvar(u, 0.2), domain=...)`` (or param groups, each with its own
``domain``) takes one update per ``step(closure)``: the closure returns the ``n`` inner values (the group
losses) on the user's batch, the optimizer takes their Jacobian with one backward pass per value, tracks it,
solves the GLMO and writes the new point into the parameters.  It is the same update as ``fc.solve``'s: a
:class:`fullcomp.Stepper` runs it, on a problem whose inner map is the closure, so fed the same batches it
takes ``fc.solve``'s iterates.  ``state_dict()`` holds the hyperparameters, as ``torch.optim``'s do, and the
stepper's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from fullcomp.algorithms.stepper import Stepper
from fullcomp.algorithms.tracked import TrackedReadout
from fullcomp.autodiff import grouped_jacobian
from fullcomp.errors import ModelError, OptionError
from fullcomp.grouped import Grouped
from fullcomp.model.composite import CompositeProblem
from fullcomp.sets.base import Set
from fullcomp.sets.product import Product


def _write(params: list[torch.Tensor], v: torch.Tensor) -> None:
    """The flat point v into the parameters, in place."""
    with torch.no_grad():
        for p, part in zip(params, v.split([p.numel() for p in params])):
            p.copy_(part.view_as(p).to(p.dtype))


class _ClosureMap(torch.autograd.Function):
    """Values of the closure as a function of the flat point v: the point is written into the parameters, the
    closure run, ``pick`` takes the 1-D tensor of values from its output, and their Jacobian is taken by one
    backward pass per value, for the backward pass to hand on.  A closure returning ``fc.Grouped`` gives the
    group means, their gradients taken by its groups (one pass per group's own sub-batch graph)."""

    @staticmethod
    def forward(ctx: Any, v: torch.Tensor, closure: Callable, params: list[torch.Tensor], pick: Callable) -> Any:
        _write(params, v)
        with torch.enable_grad():
            out = closure()
            if isinstance(out, Grouped) and pick is _inner_values:  # its groups say which rows each value reads
                if not ctx.needs_input_grad[0]:
                    return out.values().detach().to(v.dtype)
                value, jac, _ = grouped_jacobian(out, tuple(params))
                ctx.save_for_backward(jac.to(v.dtype))
                return value.to(v.dtype)
            out = pick(out)
            if ctx.needs_input_grad[0]:
                rows = []
                for i in range(out.numel()):
                    grads = torch.autograd.grad(out[i], params, retain_graph=i + 1 < out.numel(), allow_unused=True)
                    flat = [(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)]
                    rows.append(torch.cat(flat))
                ctx.save_for_backward(torch.stack(rows).to(v.dtype))
        return out.detach().to(v.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple:
        (jac,) = ctx.saved_tensors
        return grad_out @ jac, None, None, None


class _SteppedOptimizer(torch.optim.Optimizer):
    """A registered method behind ``torch.optim``'s interface: a :class:`fullcomp.Stepper` on a problem whose
    batch is the step's closure, built at the first step (whose closure also gives the set-up's sample)."""

    method: str

    def __init__(self, params: Iterable[Any], defaults: dict, seed: int, hyperparameters: dict):
        super().__init__(params, defaults)
        self.seed, self.hyperparameters = seed, hyperparameters
        self.stepper: Stepper | None = None
        self._closure: Callable | None = None
        self._pending: dict | None = None  # a state_dict loaded before the first step

    @property
    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def _problem(self, point: torch.Tensor) -> Any:
        """The problem the method runs on, started at the parameters' flat ``point``."""
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure: Callable[[], Any]) -> dict:  # type: ignore[override]
        """One update on the closure's batch; returns the history row (``objective_estimate``, ...).

        ``closure()`` computes the values from the model's parameters (it is called with gradients enabled,
        as often as the update needs them) and must not call ``backward`` itself.
        """
        if not callable(closure):
            raise OptionError(f"step needs a closure() computing the {self.method} problem's values on your batch")
        self._closure = closure
        try:
            if self.stepper is None:
                point = torch.cat([p.detach().reshape(-1) for p in self._params])
                self.stepper = Stepper(
                    self._problem(point), self.method, seed=self.seed, device=point.device, **self.hyperparameters
                )
                if self._pending is not None:
                    self.stepper.load_state_dict(self._pending)
                    self._pending = None
            row = self.stepper.step(closure)
        finally:
            self._closure = None
        _write(self._params, self.stepper.x.reshape(-1))
        return row

    def state_dict(self) -> dict:
        """The hyperparameters (as torch.optim keeps them in ``param_groups``) and the stepper's state."""
        return {
            "method": self.method,
            "hyperparameters": {k: v for k, v in sorted(self.hyperparameters.items()) if _plain(v)},
            "seed": self.seed,
            "stepper": None if self.stepper is None else self.stepper.state_dict(),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Resume from :meth:`state_dict` (before the first step, the method loads it when the step builds it)."""
        if state_dict.get("method") != self.method:
            raise OptionError(f"the state_dict is {state_dict.get('method')!r}'s, this optimizer runs {self.method!r}")
        saved = state_dict.get("stepper")
        if saved is None:
            return
        if self.stepper is None:
            self._pending = saved
        else:
            self.stepper.load_state_dict(saved)
            _write(self._params, self.stepper.x.reshape(-1))


def _inner_values(out: Any) -> torch.Tensor:
    if not isinstance(out, torch.Tensor) or out.dim() != 1:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelError(
            "the closure must return a 1-D tensor of the inner values (one loss per group), computed from the "
            f"model's parameters; got {got}"
        )
    return out


class CompositeOptimizer(_SteppedOptimizer):
    """A registered composite method (``method``) as a ``torch.optim.Optimizer``.

    Parameters
    ----------
    params : iterable of tensors or of dicts
        ``model.parameters()``, or param groups: dicts with ``"params"`` and, for per-layer domains, a
        ``"domain"`` each (a fullcomp set over the group's parameters flattened in order).
    outer : cvxpy.Expression
        F, written in ``fc.inner_value(n)``; the closure returns the n inner values.
    domain : Set, optional
        The set of all the parameters flattened in order; omit it when every group has its own.
    seed : int
        The seed of the method's generator (what it draws besides the batches: none for HMSFW's default).
    **hyperparameters
        The method's (``fc.describe(method)``), e.g. ``variant``, ``tracker``, ``schedule``; ``iters`` is the
        horizon of a schedule that needs one.
    """

    method = "hmsfw"

    def __init__(
        self,
        params: Iterable[Any],
        outer: Any,
        domain: Set | None = None,
        *,
        seed: int = 0,
        **hyperparameters: Any,
    ):
        super().__init__(params, {"domain": None}, seed, hyperparameters)
        self.outer = outer
        self.domain = self._domain(domain)

    def _domain(self, domain: Set | None) -> Set:
        own = [group.get("domain") for group in self.param_groups]
        size = sum(p.numel() for p in self._params)
        if domain is not None:
            if any(d is not None for d in own):
                raise OptionError("give domain= or a domain per param group, not both")
            found = domain
        elif all(isinstance(d, Set) for d in own):
            found = own[0] if len(own) == 1 else Product(*own)
        else:
            raise OptionError(
                "give domain= (a set of all the parameters, flattened in order) or a 'domain' in every param "
                "group; fc.layer_domains(model) builds one set per layer"
            )
        if not isinstance(found, Set) or found.size != size:
            raise OptionError(
                f"the domain must be a fullcomp set of the {size} parameter entries (flattened in order), got "
                f"{type(found).__name__} of size {getattr(found, 'size', '?')}"
            )
        return found

    def _problem(self, point: torch.Tensor) -> CompositeProblem:
        if not self.domain.contains(point.double().cpu().numpy().reshape(self.domain.shape), tol=1e-6):
            raise OptionError("the parameters are not in the domain; fc.make_feasible(model, domain) puts them there")
        params = self._params
        return CompositeProblem(
            self.outer,
            lambda v, closure: _ClosureMap.apply(v, closure, params, _inner_values),
            self.domain,
            sampler=lambda generator: self._closure,  # the batch of a step is its closure
            x0=point.cpu().double().numpy().reshape(self.domain.shape),
            dtype=point.dtype,
            check_gradient=False,  # the closure is the user's loop: its derivative is autograd's own
        )

    @property
    def weights(self) -> np.ndarray | None:
        """The weights F puts on each inner value at the tracked values (the adversary's q): what to log."""
        readout = None if self.stepper is None else self.stepper.plan.readout
        return readout.weights(self.stepper.state) if isinstance(readout, TrackedReadout) else None


class SMAG(_SteppedOptimizer):
    """SMAG (Algorithm 2 of the SMAG paper: phi - psi, both smooth-weakly convex) as a torch optimizer.

    ``step(closure)``: the closure returns phi on the user's batch (a scalar tensor), or the pair (phi, psi)
    for a difference of two functions, computed from the model's parameters; SMAG's update (the Moreau
    envelopes' proximal estimates, then x along their difference) is ``fc.solve(problem, "smag")``'s, run by
    a :class:`fullcomp.Stepper` on the closure, and the new x is written into the parameters.

    Parameters
    ----------
    params : iterable of tensors
        ``model.parameters()``.
    gamma, eta0, eta1 : float
        SMAG's Moreau parameter and step sizes (``fc.describe("smag")``).
    psi : bool
        Whether the closure returns (phi, psi) (default False: phi alone).
    seed : int
        The seed of the method's generator.
    **hyperparameters
        SMAG's other hyperparameters (``decay``, ``output``).
    """

    method = "smag"

    def __init__(
        self,
        params: Iterable[Any],
        gamma: float,
        eta0: float,
        eta1: float,
        *,
        psi: bool = False,
        seed: int = 0,
        **hyperparameters: Any,
    ):
        super().__init__(params, {}, seed, {"gamma": gamma, "eta0": eta0, "eta1": eta1, **hyperparameters})
        self.psi = psi

    def _problem(self, point: torch.Tensor) -> Any:
        from fullcomp.model.dmax import DMaxProblem

        params = self._params

        def part(which: int) -> Callable:
            def pick(out: Any) -> torch.Tensor:
                values = out if isinstance(out, (tuple, list)) else (out,)
                if which >= len(values) or not isinstance(values[which], torch.Tensor) or values[which].numel() != 1:
                    raise ModelError(
                        "SMAG's closure returns phi (a scalar tensor), or the pair (phi, psi) for a difference of "
                        f"two functions, computed from the model's parameters; got {type(out).__name__}"
                    )
                return values[which].reshape(1)

            return lambda x, closure: _ClosureMap.apply(x, closure, params, pick)[0]

        return DMaxProblem(
            part(0), part(1) if self.psi else None, x0=point.clone(), sampler=lambda generator: self._closure
        )


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, tuple))


class HMSFW(CompositeOptimizer):
    """HMSFW (Algorithm 1 of the HMSFW paper) as a torch optimizer; ``variant``, ``tracker``, ... as ``fc.hmsfw``."""

    method = "hmsfw"


class SCFW(CompositeOptimizer):
    """Stochastic conditional Frank-Wolfe, no tracking (``clip=`` for Clipped SCFW is method ``clipped-scfw``)."""

    method = "scfw"


class PSG(CompositeOptimizer):
    """Projected subgradient steps on the tracked model; needs a domain with ``project``."""

    method = "psg"


__all__ = ["CompositeOptimizer", "HMSFW", "SCFW", "PSG", "SMAG"]
