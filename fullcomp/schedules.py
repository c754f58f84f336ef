"""Step and momentum schedules (gamma_k, beta_k, rho_k) of HMSFW.

Besides the experiments' schedule, this module gives the parameter choices of
the HMSFW paper's theorems as functions of the horizon K and of the moment
orders r_f (values) and r_g (Jacobians) of the oracle noise, r in (1, 2]
(r = 2 is finite variance).  The exponents are built from four functions of
an order r (Theorem 1, Lemma 12):

    s(r) = (r - 1) / r           a Polyak average with weight beta of r-th-moment noise is O(beta^s)
    a(r) = s / (1 + s) = (r - 1) / (2r - 1)   tracking error with beta = gamma^(1/(1+s)) is O(gamma^a)
    b(r) = r / (2r - 1)          decreasing momentum (k + k_*)^(-b) of Theorem 2
    q(r) = b (r - 1)             Lemma 11's exponent, q / r = a

Each factory records in ``rate`` the exponent theta of the bound K^(-theta)
it targets and in ``target`` the quantity it bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fullcomp.errors import OptionError

#: Value-tracker names as ``hmsfw`` spells them: Variant II is the Taylor tracker, Variant I the Polyak one.
TAYLOR, POLYAK = "taylor", "polyak"
VARIANTS = {"taylor": TAYLOR, "ii": TAYLOR, "polyak": POLYAK, "i": POLYAK}
#: What the non-convex theorems bound: E[gap(y_R)] for R uniform on 0..K-1.
GAP = "generalized FW gap at a uniform iterate"


def check_order(value: Any, name: str) -> float:
    """A moment order in (1, 2], or an OptionError naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise OptionError(f"{name} must be a number in (1, 2] (a bounded {name}-th moment of the noise), got {value!r}")
    value = float(value)
    if not 1.0 < value <= 2.0:
        raise OptionError(
            f"{name} = {value} is outside (1, 2]: the theorems assume a bounded {name}-th noise moment with "
            f"1 < {name} <= 2 (use {name}=2 for finite variance)"
        )
    return value


#: The schedules whose parameters depend on the horizon K (the budget in iterations).
HORIZON_SCHEDULES = ("constant", "theorem1", "theorem3")


def check_horizon(iters: Any, schedule: str) -> int:
    """The horizon K of a schedule whose parameters depend on it."""
    if iters is None:
        raise OptionError(f"schedule={schedule!r} needs the horizon: pass iters=K (or use schedule='doubling')")
    if isinstance(iters, bool) or not isinstance(iters, (int, np.integer)) or iters < 1:
        raise OptionError(f"schedule={schedule!r} needs a positive integer horizon K, got {iters!r}")
    return int(iters)


def variant_key(variant: Any) -> str:
    key = str(variant).lower()
    if key not in VARIANTS:
        raise OptionError(f"variant must be 'taylor' (Variant II) or 'polyak' (Variant I), got {variant!r}")
    return VARIANTS[key]


def s_exp(r: float) -> float:
    """s(r) = (r - 1)/r: the noise left after averaging with weight beta is O(beta^s)."""
    return (r - 1.0) / r


def a_exp(r: float) -> float:
    """a(r) = s/(1 + s) = (r - 1)/(2r - 1): the tracking-error exponent in gamma."""
    return (r - 1.0) / (2.0 * r - 1.0)


def b_exp(r: float) -> float:
    """b(r) = r/(2r - 1): the momentum exponent of Theorem 2, beta_k = (k + k_*)^(-b)."""
    return r / (2.0 * r - 1.0)


def q_exp(r: float) -> float:
    """q(r) = b(r)(r - 1): Lemma 11's decay exponent of the r-th moment of the tracking error."""
    return b_exp(r) * (r - 1.0)


def k_offset(r: float) -> int:
    """Smallest integer k_* >= 2 with 2 q k_*^(b - 1) <= 1/2, the condition of Lemma 11.

    19 at r = 2; the paper's experiments use k_g = 21, which also satisfies it.
    """
    b, q = b_exp(r), q_exp(r)
    k = max(2, math.ceil((4.0 * q) ** (1.0 / (1.0 - b)) - 1e-9))
    while 2.0 * q * k ** (b - 1.0) > 0.5:  # guard the rounding of the closed form
        k += 1
    return k


def theta_taylor(r_f: float, r_g: float, jacobian_exponent: float) -> float:
    """The Variant II exponent (equation 9) for a Jacobian tracking error O(gamma^e).

    min{e/(1+e), (1+e) a_f / (1 + (1+e) a_f), s_f}: balance Phi_0/(K gamma) with
    the tracking error gamma^e, the Taylor coupling (gamma/rho) gamma^e with the
    value noise rho^(s_f), and keep rho >= 1/K.  With e = a_g this is
    min{(r_g-1)/(3r_g-2), (r_f-1)(3r_g-2)/(7 r_f r_g - 4 r_f - 5 r_g + 3), (r_f-1)/r_f}
    (Theorem 1); with e = s_g (STORM or Hessian correction) it is Theorem 3's theta_acc.
    """
    e, a_f, s_f = jacobian_exponent, a_exp(r_f), s_exp(r_f)
    return min(e / (1.0 + e), (1.0 + e) * a_f / (1.0 + (1.0 + e) * a_f), s_f)


@dataclass(frozen=True)
class _Constant:
    """A constant weight as a function of k (a dataclass, so a schedule built from numbers compares equal)."""

    value: float

    def __call__(self, k: float) -> float:
        return self.value


@dataclass(frozen=True)
class Schedule:
    """Frank-Wolfe step gamma(k), Jacobian momentum beta(k) and value momentum rho(k).

    Iteration k moves y_{k+1} = y_k + gamma(k) (x_k - y_k) and then updates
    the trackers at y_{k+1} with beta(k + 1) and rho(k + 1).  ``rate`` is the
    exponent theta of the bound K^(-theta) the schedule targets (None when no
    theorem covers it) and ``target`` the quantity bounded.
    """

    gamma: Callable[[int], float]
    beta: Callable[[int], float]
    rho: Callable[[int], float]
    name: str = "custom"
    rate: float | None = None
    target: str = ""

    @classmethod
    def paper(cls) -> Schedule:
        """gamma = 2/(k+2), beta = (k+21)^(-2/3), rho = 2/(k+2): the HMSFW experiments'
        schedule (Theorem 2 at r_f = r_g = 2, k_g = 21), last-iterate rate K^(-1/3) in the convex case."""
        return cls(
            lambda k: 2.0 / (k + 2),
            lambda k: (k + 21.0) ** (-2.0 / 3.0),
            lambda k: 2.0 / (k + 2),
            "paper",
            1.0 / 3.0,
            "last-iterate primal error (convex, Variant II)",
        )

    @classmethod
    def constant(
        cls,
        iters: int | None,
        r: float = 2.0,
        *,
        r_f: float | None = None,
        r_g: float | None = None,
        variant: str = TAYLOR,
    ) -> Schedule:
        """Constant parameters of the non-convex analysis (Appendix I.4); gap at a uniformly selected iterate.

        Equal orders r_f = r_g = r (both variants): gamma = K^(-(2r-1)/(3r-2)),
        beta = rho = K^(-r/(3r-2)); rate K^(-(r-1)/(3r-2)), K^(-1/4) at r = 2.
        Separate orders, Variant II: theta_0 = min{(r_g-1)/(3r_g-2), a(r_f)},
        gamma = rho = K^(-(1-theta_0)), beta = gamma^(1/(1+s_g)).  Separate orders,
        Variant I (not stated in I.4): the equal-order rule at min(r_f, r_g), which
        has Theorem 1's Variant I exponent.
        """
        K = check_horizon(iters, "constant")
        r_f = check_order(r if r_f is None else r_f, "r_f" if r_f is not None else "r")
        r_g = check_order(r if r_g is None else r_g, "r_g" if r_g is not None else "r")
        variant = variant_key(variant)
        if r_f != r_g and variant == TAYLOR:
            theta = min((r_g - 1) / (3 * r_g - 2), a_exp(r_f))
            gamma = K ** (-(1 - theta))
            beta, rho = gamma ** (1 / (1 + s_exp(r_g))), gamma
        else:
            r_min = min(r_f, r_g)
            theta = (r_min - 1) / (3 * r_min - 2)
            gamma = K ** (-(2 * r_min - 1) / (3 * r_min - 2))
            beta = rho = K ** (-r_min / (3 * r_min - 2))
        return cls(lambda k: gamma, lambda k: beta, lambda k: rho, "constant", theta, GAP)

    @classmethod
    def theorem1(cls, iters: int | None, *, r_f: float = 2.0, r_g: float = 2.0, variant: str = TAYLOR) -> Schedule:
        """Theorem 1 (non-convex, heavy tails): constant parameters for horizon K; gap at a uniform iterate.

        Variant II: theta_II = equation 9 (see :func:`theta_taylor` with e = a_g),
        gamma = K^(-(1-theta_II)), beta = gamma^(1/(1+s_g)) and
        rho = max(gamma^((1+a_g)/(1+s_f)), 1/K), the rho that balances the Taylor
        coupling against the value noise.  theta_II = (r_g-1)/(3r_g-2) whenever
        r_f >= 2 - 1/r_g: K^(-1/4) at r_g = 2 already with r_f = 3/2.
        Variant I: q = min(a_g, a_f), theta_I = q/(1+q) = min over the two orders of
        (r-1)/(3r-2), gamma = K^(-1/(1+q)), beta = gamma^(1/(1+s_g)), rho = gamma^(1/(1+s_f)).
        """
        K = check_horizon(iters, "theorem1")
        r_f, r_g, variant = check_order(r_f, "r_f"), check_order(r_g, "r_g"), variant_key(variant)
        s_f, s_g, a_f, a_g = s_exp(r_f), s_exp(r_g), a_exp(r_f), a_exp(r_g)
        if variant == TAYLOR:
            theta = theta_taylor(r_f, r_g, a_g)
            gamma = K ** (-(1 - theta))
            rho = max(gamma ** ((1 + a_g) / (1 + s_f)), 1.0 / K)
        else:
            q = min(a_g, a_f)
            theta = q / (1 + q)
            gamma = K ** (-1 / (1 + q))
            rho = gamma ** (1 / (1 + s_f))
        beta = gamma ** (1 / (1 + s_g))
        name = f"theorem1-{'ii' if variant == TAYLOR else 'i'}"
        return cls(lambda k: gamma, lambda k: beta, lambda k: rho, name, theta, GAP)

    @classmethod
    def theorem2(
        cls,
        *,
        r_f: float = 2.0,
        r_g: float = 2.0,
        variant: str = TAYLOR,
        k_g: int | None = None,
        k_f: int | None = None,
    ) -> Schedule:
        """Theorem 2 (convex: the model minorizes phi): an anytime, decreasing schedule; last-iterate primal error.

        gamma_k = 2/(k+2), beta_k = (k + k_g)^(-b_g) with b_g = r_g/(2r_g-1) and
        k_g from Lemma 11 (:func:`k_offset`; override with ``k_g``).  Variant II:
        rho_k = 2/(k+2), rate p = min(a_g, s_f), 1/3 at r_f = r_g = 2 and still
        1/3 at r_f = 3/2.  Variant I: rho_k = (k + k_f)^(-b_f), p = min(a_g, a_f).
        ``Schedule.theorem2(k_g=21)`` is :meth:`paper`.
        """
        r_f, r_g, variant = check_order(r_f, "r_f"), check_order(r_g, "r_g"), variant_key(variant)
        k_g = k_offset(r_g) if k_g is None else _offset(k_g, "k_g")
        b_g = b_exp(r_g)
        if variant == TAYLOR:
            p = min(a_exp(r_g), s_exp(r_f))

            def rho(k: int) -> float:
                return 2.0 / (k + 2)
        else:
            p = min(a_exp(r_g), a_exp(r_f))
            kf = k_offset(r_f) if k_f is None else _offset(k_f, "k_f")
            b_f = b_exp(r_f)

            def rho(k: int) -> float:
                return (k + kf) ** (-b_f)

        name = f"theorem2-{'ii' if variant == TAYLOR else 'i'}"
        return cls(
            lambda k: 2.0 / (k + 2), lambda k: (k + k_g) ** (-b_g), rho, name, p, "last-iterate primal error (convex)"
        )

    @classmethod
    def theorem3(cls, iters: int | None, *, r_f: float = 2.0, r_g: float = 2.0) -> Schedule:
        """Theorem 3 (STORM, and Appendix N's Hessian correction) with the Variant II value tracker.

        The corrected Jacobian tracker removes the drift L_J D gamma/beta of the
        Polyak tracker, so beta = gamma balances the noise beta^(s_g) against the
        correction's own noise gamma beta^(-1/r_g), and the tracking error is
        O(gamma^(s_g)).  theta_acc is equation 9 with a_g replaced by s_g, which
        is (r-1)/(2r-1) at r_f = r_g = r: K^(-1/3) at r = 2.  gamma = K^(-(1-theta_acc)),
        beta = gamma, rho = max(gamma^((1+s_g)/(1+s_f)), 1/K).
        """
        K = check_horizon(iters, "theorem3")
        r_f, r_g = check_order(r_f, "r_f"), check_order(r_g, "r_g")
        s_g = s_exp(r_g)
        theta = theta_taylor(r_f, r_g, s_g)
        gamma = K ** (-(1 - theta))
        rho = max(gamma ** ((1 + s_g) / (1 + s_exp(r_f))), 1.0 / K)
        return cls(lambda k: gamma, lambda k: gamma, lambda k: rho, "theorem3", theta, GAP)

    @classmethod
    def doubling(
        cls,
        *,
        base: str = "theorem1",
        r_f: float = 2.0,
        r_g: float = 2.0,
        variant: str = TAYLOR,
    ) -> Schedule:
        """Unknown horizon (Appendix I.5): epoch j runs iterations 2^j - 1, ..., 2^(j+1) - 2 with the
        constant parameters of ``base`` ("theorem1", "theorem3" or "constant") for horizon K_j = 2^j.

        The iterate and trackers carry over between epochs.  After T iterations
        the last completed epoch J has K_J >= (T+1)/4, so a uniformly selected
        iterate of that epoch has E gap <= M K_J^(-theta) <= 4^theta M (T+1)^(-theta):
        the base rate at any stopping time, up to the factor 4^theta.
        """
        r_f, r_g, variant = check_order(r_f, "r_f"), check_order(r_g, "r_g"), variant_key(variant)
        builders: dict[str, Callable[[int], Schedule]] = {
            "theorem1": lambda K: cls.theorem1(K, r_f=r_f, r_g=r_g, variant=variant),
            "theorem3": lambda K: cls.theorem3(K, r_f=r_f, r_g=r_g),
            "constant": lambda K: cls.constant(K, r_f=r_f, r_g=r_g, variant=variant),
        }
        if base not in builders:
            raise OptionError(f"doubling base must be one of {sorted(builders)}, got {base!r}")
        epochs: dict[int, Schedule] = {}

        def at_epoch(k: int) -> tuple[Schedule, int]:
            j = (k + 1).bit_length() - 1  # k + 1 in [2^j, 2^(j+1))
            if j not in epochs:
                epochs[j] = builders[base](2**j)
            return epochs[j], k - (2**j - 1)

        def part(field: str) -> Callable[[int], float]:
            def value(k: int) -> float:
                sched, local = at_epoch(k)
                return getattr(sched, field)(local)

            return value

        rate = builders[base](2).rate
        return cls(part("gamma"), part("beta"), part("rho"), f"doubling-{base}", rate, GAP + " of the last epoch")

    @classmethod
    def exact(cls) -> Schedule:
        """gamma = 2/(k+2), beta = rho = 1: the deterministic Basic method (Corollary 1), O(1/K) convex."""
        return cls(lambda k: 2.0 / (k + 2), lambda k: 1.0, lambda k: 1.0, "exact", 1.0, "primal error (exact oracle)")

    @classmethod
    def vanilla(cls) -> Schedule:
        """gamma = 2/(k+2) with fresh minibatch estimates (beta = rho = 1): Vanilla SCFW, no tracking."""
        return cls(lambda k: 2.0 / (k + 2), lambda k: 1.0, lambda k: 1.0, "vanilla")

    def __post_init__(self) -> None:
        # A number is a constant weight: Schedule(gamma=0.1, beta=0.5, rho=0.5).
        for name in ("gamma", "beta", "rho"):
            value = getattr(self, name)
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                if not (np.isfinite(value) and 0 < value <= 1):
                    raise OptionError(f"Schedule {name} must lie in (0, 1] (or be a function of k), got {value!r}")
                object.__setattr__(self, name, _Constant(float(value)))
            elif not callable(value):
                raise OptionError(
                    f"Schedule {name} must be a number in (0, 1] or a function k -> weight, got {value!r}"
                )

    def step_size(self, k: Any, line: Any = None) -> float:
        """gamma_k: the schedule as a step-size rule (:mod:`fullcomp.steps`)."""
        return self.at(k)[0]

    def at(self, k: int) -> tuple[float, float, float]:
        """(gamma_k, beta_{k+1}, rho_{k+1}), checked to lie in (0, 1]."""
        gamma, beta, rho = values = (float(self.gamma(k)), float(self.beta(k + 1)), float(self.rho(k + 1)))
        if 0 < gamma <= 1 and 0 < beta <= 1 and 0 < rho <= 1:  # NaN and Inf fail these comparisons
            return values
        name, v = next((name, v) for name, v in zip(("gamma", "beta", "rho"), values) if not 0 < v <= 1)
        raise OptionError(f"schedule {self.name!r} gives {name} = {v} at k = {k}; it must lie in (0, 1]")


def _offset(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 2:
        raise OptionError(f"{name} must be an integer >= 2 (the offset of the decreasing momentum), got {value!r}")
    return int(value)


#: Schedules selectable by name that take the moment orders r_f, r_g.
THEORY = ("constant", "theorem1", "theorem2", "theorem3", "doubling")


def resolve(
    schedule: Any,
    *,
    iters: int | None,
    exact: bool,
    variant: str = TAYLOR,
    tracker: str = "polyak",
    r_f: float | None = None,
    r_g: float | None = None,
) -> Schedule:
    """Turn the ``schedule`` option into a :class:`Schedule`.

    The theory schedules ("constant", "theorem1", "theorem2", "theorem3",
    "doubling") read the moment orders ``r_f``, ``r_g`` (default 2, finite
    variance) and the value ``variant``; "doubling" runs the constant schedule
    of Theorem 3 for the corrected trackers ("storm", "hessian") and of
    Theorem 1 otherwise.
    """
    if schedule not in THEORY and (r_f is not None or r_g is not None):
        raise OptionError(
            f"r_f/r_g set the theory schedules {THEORY}; schedule={schedule!r} does not use them"
            if not isinstance(schedule, Schedule)
            else "r_f/r_g set the theory schedules; pass them to the Schedule factory instead"
        )
    orders = {"r_f": 2.0 if r_f is None else r_f, "r_g": 2.0 if r_g is None else r_g}
    if schedule is None:
        return Schedule.exact() if exact else Schedule.paper()
    if isinstance(schedule, Schedule):
        return schedule
    if schedule == "paper":
        return Schedule.paper()
    if schedule == "exact":
        return Schedule.exact()
    if schedule == "vanilla":
        return Schedule.vanilla()
    if schedule == "constant":
        return Schedule.constant(iters, variant=variant, **orders)
    if schedule == "theorem1":
        return Schedule.theorem1(iters, variant=variant, **orders)
    if schedule == "theorem2":
        return Schedule.theorem2(variant=variant, **orders)
    if schedule == "theorem3":
        return Schedule.theorem3(iters, **orders)
    if schedule == "doubling":
        base = "theorem3" if tracker in ("storm", "hessian") else "theorem1"
        return Schedule.doubling(base=base, variant=variant, **orders)
    if callable(schedule):
        # A function k -> (gamma, beta, rho).
        return Schedule(lambda k: schedule(k)[0], lambda k: schedule(k)[1], lambda k: schedule(k)[2])
    raise OptionError(
        f"schedule must be None, 'paper', 'exact', 'vanilla', one of {THEORY}, a fc.Schedule or a function "
        f"k -> (gamma, beta, rho); got {schedule!r}"
    )
