"""Pieces shared by the projection-based and smoothed baselines (PSG, prox-linear, LiNASA+ICG).

The tracked model is HMSFW's: a Polyak Jacobian tracker V_k ~ J(x_k) and a
Taylor value tracker z_k ~ f(x_k), updated by one sample at each new iterate,
so that the baselines differ from HMSFW only in how they move x.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from fullcomp.errors import ModelError, OptionError
from fullcomp.glmo.subgradient import OuterGradient
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles import InnerOracle, check_inner_output
from fullcomp.schedules import Schedule, resolve
from fullcomp.sets.base import Set
from fullcomp.trackers import polyak, taylor


def positive(value: Any, name: str, meaning: str) -> float:
    """``value`` as a float, or an OptionError naming the option when it is not a positive finite number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (math.isfinite(value) and value > 0):
        raise OptionError(f"{name} must be a positive number ({meaning}), got {value!r}")
    return float(value)


def positive_int(value: Any, name: str, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise OptionError(f"{name} must be a positive int ({meaning}), got {value!r}")
    return int(value)


def check_problem(problem: Any, method: str) -> CompositeProblem:
    if not isinstance(problem, CompositeProblem):
        raise ModelError(f"{method} needs a fc.CompositeProblem, got {type(problem).__name__}")
    return problem


def numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64, copy=False)


def project(domain: Set, x: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of a flat iterate onto the domain, flat again."""
    return domain.project(x.reshape(domain.shape)).reshape(-1)


class InnerMap:
    """The sampled inner map as a dense-iterate method sees it: samples at x, and the chain rule back to x.

    A problem declaring ``reads=`` is called on x's values at those entries, so
    its Jacobian is n x |reads| instead of n x d and the model products
    V (x - x_k) read only those entries; the iterate itself stays dense,
    because a projection or a Frank-Wolfe step over X needs the whole point.
    """

    def __init__(self, problem: CompositeProblem, device: str | torch.device, dtype: torch.dtype):
        self.problem, self.dtype = problem, dtype
        domain = problem.domain
        self.size = domain.size
        if problem.reads is None:
            self.index = None
            self.oracle = InnerOracle(problem.inner, problem.n, domain.shape, device, dtype)
        else:
            self.index = torch.as_tensor(problem.reads.flat, device=device)
            self.oracle = InnerOracle(problem.inner, problem.n, (len(problem.reads),), device, dtype)

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """The entries of a flat point (or step) that the map reads: all of it, or those at ``reads``."""
        return x if self.index is None else x[self.index]

    def spread(self, v: torch.Tensor) -> torch.Tensor:
        """The adjoint of :meth:`read`: a vector on the read entries as a dense flat vector."""
        if self.index is None:
            return v
        return torch.zeros(self.size, dtype=v.dtype, device=v.device).index_add(0, self.index, v)

    def sample(self, x: torch.Tensor, batch: Any, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """f~(x) and its Jacobian (n x read entries) on one batch."""
        return self.oracle(self.read(x), batch, k)

    def value(self, x: torch.Tensor, batch: Any, k: int) -> torch.Tensor:
        """f~(x) alone, without the Jacobian pass."""
        x_in = self.read(x) if self.index is not None else x.reshape(self.problem.domain.shape)
        with torch.no_grad():
            out = self.problem.inner(x_in, batch)
        return check_inner_output(out, self.problem.n, f"at iteration {k}").detach().to(self.dtype)

    def chain_rule(self, V: torch.Tensor, g: OuterGradient) -> torch.Tensor:
        """V^T g_u + g_x as a dense flat vector: the (sub)gradient of x -> F(z + V (x - y), x) at x = y."""
        d = self.spread(V.T @ torch.as_tensor(g.u, dtype=V.dtype, device=V.device))
        if g.x is not None:
            d = d + torch.as_tensor(g.x, dtype=V.dtype, device=V.device)
        return d


class TrackedModel:
    """HMSFW's trackers on a sampled inner map: the affine model z_k + V_k (x - x_k) of f around x_k.

    ``schedule`` gives the tracker weights exactly as for :func:`fullcomp.hmsfw`
    (its Frank-Wolfe step gamma is not used): None is the paper's
    beta_k = (k+21)^(-2/3), rho_k = 2/(k+2); "exact" (beta = rho = 1) keeps
    only the newest sample.
    """

    def __init__(
        self,
        problem: CompositeProblem,
        schedule: Any,
        iters: int | None,
        device: str | torch.device,
        dtype: torch.dtype,
        generator: torch.Generator,
    ):
        self.problem, self.device, self.dtype, self.generator = problem, device, dtype, generator
        self.schedule: Schedule = resolve(schedule, iters=iters, exact=False)
        self.inner = InnerMap(problem, device, dtype)

    def start(self) -> dict:
        """Sample at x_0: {"x", "x_prev", "V", "z"} with V_0, z_0 the first sample."""
        x0 = torch.as_tensor(self.problem.x0, dtype=self.dtype, device=self.device).reshape(-1)
        value, jac = self.inner.sample(x0, self.problem.sample(self.generator), 0)
        return {"x": x0, "x_prev": x0, "V": jac, "z": value}

    def advance(self, state: dict, x_next: torch.Tensor, k: int) -> dict:
        """Move to x_{k+1}: one sample there, V by Polyak (beta), z by Taylor (rho)."""
        _, beta, rho = self.schedule.at(k)
        value, jac = self.inner.sample(x_next, self.problem.sample(self.generator), k + 1)
        V = polyak(state["V"], jac, beta)
        z = taylor(state["z"], V, self.inner.read(x_next), self.inner.read(state["x"]), value, rho)
        return {**state, "x": x_next, "x_prev": state["x"], "V": V, "z": z}


__all__ = ["TrackedModel", "InnerMap", "positive", "positive_int", "check_problem", "numpy", "project"]
