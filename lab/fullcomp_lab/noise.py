"""Oracle noise with chosen moment orders, for synthetic studies of the rates.

The HMSFW theorems assume bounded moments of orders r_f (values) and r_g
(Jacobians) in (1, 2].  :func:`with_noise` wraps any inner map and sampler so
that each sample adds independent noise to the value and to the Jacobian:

    f~(x; (xi, e, G)) = inner(x, xi) + e + G (x - c)

with e in R^n drawn from ``value_noise`` and G in R^{n x d} from
``jacobian_noise``.  The Jacobian noise is G, additive and independent of x;
the value noise at x is e + G (x - c), whose moments of order r exist when
they exist for both laws (so give the Jacobian the larger order, or center c
where the values matter).  All draws come from the run's ``torch.Generator``,
so seeds reproduce and checkpoints resume.

Which moments are finite:

- :class:`Gaussian`: all orders.
- :class:`StudentT` with ``df``: orders < df.  ``StudentT.of_order(r)`` takes
  df = r + margin, so the r-th moment is finite and the (r + margin)-th is not;
  df <= 2 is infinite variance.
- :class:`Pareto` (symmetrized, tail index ``tail``): P(|X| > t) = (scale/t)^tail
  for t >= scale, a random sign; orders < tail.  ``Pareto.of_order(r)`` likewise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fullcomp.errors import OptionError

__all__ = ["Gaussian", "StudentT", "Pareto", "with_noise", "noiseless"]


def _uniform(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Uniforms in the open interval (0, 1) from the run's generator (no 0 for the inverse CDFs)."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device)
    return u + 2.0**-54  # torch.rand is a multiple of 2^-53 in [0, 1): shift by half a step


def _positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise OptionError(f"{name} must be a positive number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise OptionError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Gaussian:
    """N(0, scale^2) entries; every moment is finite."""

    scale: float = 1.0

    def __post_init__(self) -> None:
        _positive(self.scale, "Gaussian scale")

    @property
    def finite_below(self) -> float:
        """Moments of order < this are finite."""
        return math.inf

    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        return self.scale * torch.randn(shape, generator=generator, dtype=torch.float64, device=generator.device)


@dataclass(frozen=True)
class StudentT:
    """Student-t entries with ``df`` degrees of freedom times ``scale``: finite moments of order < df."""

    df: float
    scale: float = 1.0

    def __post_init__(self) -> None:
        _positive(self.df, "StudentT df")
        _positive(self.scale, "StudentT scale")
        if self.df <= 1:
            raise OptionError(f"StudentT df = {self.df} has no mean; the oracles must be unbiased, so take df > 1")

    @classmethod
    def of_order(cls, r: float, scale: float = 1.0, margin: float = 0.1) -> StudentT:
        """A Student-t whose r-th moment is finite and whose (r + margin)-th is not: df = r + margin."""
        return cls(df=_positive(r, "r") + _positive(margin, "margin"), scale=scale)

    @property
    def finite_below(self) -> float:
        return float(self.df)

    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        from scipy.stats import t as t_law

        # Inversion of one uniform per entry: torch has no Student-t sampler that takes a generator.
        u = _uniform(shape, generator)
        values = t_law.ppf(u.cpu().numpy(), self.df)
        return self.scale * torch.as_tensor(values, dtype=torch.float64, device=generator.device)


@dataclass(frozen=True)
class Pareto:
    """Symmetrized Pareto entries: sign * scale * U^(-1/tail); finite moments of order < tail."""

    tail: float
    scale: float = 1.0

    def __post_init__(self) -> None:
        _positive(self.tail, "Pareto tail")
        _positive(self.scale, "Pareto scale")
        if self.tail <= 1:
            raise OptionError(f"Pareto tail = {self.tail} has no mean; the oracles must be unbiased, so take tail > 1")

    @classmethod
    def of_order(cls, r: float, scale: float = 1.0, margin: float = 0.1) -> Pareto:
        """A Pareto whose r-th moment is finite and whose (r + margin)-th is not: tail = r + margin."""
        return cls(tail=_positive(r, "r") + _positive(margin, "margin"), scale=scale)

    @property
    def finite_below(self) -> float:
        return float(self.tail)

    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        magnitude = self.scale * _uniform(shape, generator) ** (-1.0 / self.tail)
        # A random sign makes the law symmetric, hence mean zero.
        sign = torch.where(_uniform(shape, generator) < 0.5, -1.0, 1.0)
        return sign * magnitude


Noise = Gaussian | StudentT | Pareto


@dataclass(frozen=True)
class NoisyBatch:
    """A sample of the wrapped oracle: the original batch and the noise added to value and Jacobian."""

    batch: Any
    value: torch.Tensor | None
    jacobian: torch.Tensor | None


def noiseless(batch: Any = None) -> NoisyBatch:
    """The batch without added noise, e.g. ``full_batch=noise.noiseless(full)`` for the exact f."""
    return NoisyBatch(batch, None, None)


def with_noise(
    inner: Callable[[torch.Tensor, Any], torch.Tensor],
    sampler: Callable[[torch.Generator], Any] | None,
    *,
    n: int,
    d: int,
    value_noise: Noise | None = None,
    jacobian_noise: Noise | None = None,
    center: Any = None,
) -> tuple[Callable[[torch.Tensor, Any], torch.Tensor], Callable[[torch.Generator], NoisyBatch]]:
    """Wrap ``(inner, sampler)`` so every sample adds value noise e and Jacobian noise G.

    Returns ``(noisy_inner, noisy_sampler)`` for :class:`fullcomp.CompositeProblem`:
    ``noisy_inner(x, b) = inner(x, b.batch) + b.value + b.jacobian @ (x.flatten() - center)``.
    ``n`` is the number of outputs and ``d`` the number of entries x has (for a
    problem declaring ``reads=``, the number of entries read).  ``sampler`` may
    be None (a deterministic map).  ``center`` (default 0) is where the Jacobian
    noise adds nothing to the value.  Use :func:`noiseless` for ``full_batch``.
    """
    for name, law in (("value_noise", value_noise), ("jacobian_noise", jacobian_noise)):
        if law is not None and not isinstance(law, (Gaussian, StudentT, Pareto)):
            raise OptionError(f"{name} must be noise.Gaussian, StudentT, Pareto or None, got {type(law).__name__}")
    if sampler is not None and not callable(sampler):
        raise OptionError("sampler must be a callable sampler(generator) -> batch, or None")
    c = None if center is None else torch.as_tensor(np.asarray(center, dtype=float).reshape(-1))
    if c is not None and c.numel() != d:
        raise OptionError(f"center has {c.numel()} entries but x has d = {d}")

    def noisy_sampler(generator: torch.Generator) -> NoisyBatch:
        batch = None if sampler is None else sampler(generator)
        e = None if value_noise is None else value_noise.sample((n,), generator)
        G = None if jacobian_noise is None else jacobian_noise.sample((n, d), generator)
        return NoisyBatch(batch, e, G)

    def noisy_inner(x: torch.Tensor, b: NoisyBatch) -> torch.Tensor:
        out = inner(x, b.batch)
        if b.value is not None:
            out = out + b.value.to(out)
        if b.jacobian is not None:
            flat = x.reshape(-1)
            # G (x - c): its Jacobian is G whatever x is, so the Jacobian noise is exactly G.
            out = out + b.jacobian.to(flat) @ (flat if c is None else flat - c.to(flat))
        return out

    return noisy_inner, noisy_sampler
