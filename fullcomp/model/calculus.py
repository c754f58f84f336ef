"""The calculus of the outer function F, in one place: its value, (sub)gradients, smoothings and weights.

The methods, :func:`risk_weights` and the history's ``q[i]`` columns ask this module about F:

* **closed forms.** :func:`risk` returns a risk that declares its value and its weights q(u) in closed form;
  the named risks (``fc.cvar``, ``fc.kl_dro``, ...) are built with it.  The declared weights are what
  :meth:`OuterCalculus.weights` and :func:`risk_weights` return, with no conic solve; the declared value
  replaces CVXPY's evaluation of F where that evaluation is itself a solve (a partial minimization such
  as ``fc.kl_dro``), and CVXPY's atom-by-atom evaluation is kept everywhere else, where it is already
  exact and cheap.  ``fullcomp.testing.check_risk`` checks declared closed forms against CVXPY;
* **a subgradient** (g_u, g_x) of F at (u, x) is minus the dual of the equalities of the compiled DPP
  program ``min F(u', x') s.t. u' == p_u (, x' == p_x)``.  Its value function is F(p_u, p_x) and CVXPY's
  Lagrangian adds ``+ dual^T (u' - p_u)``, so stationarity in u' reads ``0 in dF + dual``.
  :meth:`OuterCalculus.subgradient` reads this dual even where a risk declares its weights (the methods
  that step along it keep the trajectories the dual gives); :meth:`OuterCalculus.weights` returns those;
* **the gradient** of a differentiable F is CVXPY's gradient of its atoms (:func:`outer_gradient`);
* **the Moreau envelope** F_mu(u, x) = min F(u', x') + (||u' - u||^2 + ||x' - x||^2) / (2 mu) has gradient
  ((u - prox_u) / mu, (x - prox_x) / mu), from one compiled DPP prox program per mu.

``F = cp.max(u)``, recognized structurally, gets closed forms of its own: the uniform weights on the argmax
face as subgradient, log-sum-exp (softmax gradient) or the Moreau envelope (gradient = simplex projection
of u / mu) as smoothing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cvxpy as cp
import numpy as np
from cvxpy.atoms.affine.add_expr import AddExpression
from cvxpy.atoms.max import max as cvxpy_max
from cvxpy.transforms.partial_optimize import PartialProblem
from scipy.optimize import brentq

from fullcomp import solvers
from fullcomp.errors import ModelError, OptionError, OracleError, SolverError
from fullcomp.model.placeholder import is_placeholder
from fullcomp.sets.balls import project_simplex

if TYPE_CHECKING:
    from fullcomp.model.composite import Outer

SMOOTHINGS = ("auto", "lse", "moreau")

#: The attribute under which an expression returned by :func:`risk` keeps its :class:`ClosedForm`.
CLOSED_FORM = "_fullcomp_closed_form"

Value = Callable[[np.ndarray], float]
Weights = Callable[[np.ndarray], np.ndarray]


# ---- closed forms declared by a risk -----------------------------------------------------------------


@dataclass(frozen=True)
class ClosedForm:
    """What a risk declares through :func:`risk`: F(u) and the weights q(u), each a callable or None.

    :meth:`value_at` and :meth:`weights_at` call them on a copy of u (a callable that sorts in place
    must not reorder a method's tracked values) and check what they return.
    """

    value: Value | None
    weights: Weights | None
    n: int
    #: For fullcomp's named risks, (name, parameters), e.g. ("cvar", {"alpha": 0.1}): what a route that
    #: exploits the risk's structure (its conjugate, its certainty-equivalent form) reads; None for fc.risk.
    named: tuple[str, dict] | None = None

    def value_at(self, u: np.ndarray) -> float:
        out = self.value(np.array(u, dtype=np.float64))
        try:
            number = float(np.asarray(out, dtype=np.float64).reshape(()))
        except (TypeError, ValueError):
            raise ModelError(f"fc.risk's value= returned {out!r}; it must return one number, F at u") from None
        if not math.isfinite(number):
            raise ModelError(f"fc.risk's value= returned {number} at a finite u; it must return F(u), a finite number")
        return number

    def weights_at(self, u: np.ndarray) -> np.ndarray:
        out = self.weights(np.array(u, dtype=np.float64))
        try:
            q = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError):
            raise ModelError(f"fc.risk's weights= returned {out!r}; it must return an array of n weights") from None
        if q.shape != (self.n,):
            raise ModelError(
                f"fc.risk's weights= returned shape {q.shape} for u of length {self.n}; it must return one weight "
                "per entry of u (a subgradient of F at u)"
            )
        if not np.all(np.isfinite(q)):
            raise ModelError("fc.risk's weights= returned NaN or Inf at a finite u; it must return a subgradient")
        return q


class NamedRisk(AddExpression):
    """A named risk's expression: a sum of one term, the risk's DCP expression, whose ``.value`` is the declared
    closed form at the placeholder's value (and so is the value of any expression built on it, ``2 * F`` or a
    problem's objective).  CVXPY's atom-by-atom evaluation rounds away the risk's digits at extreme parameters
    (``lam log mean exp(u / lam)`` at lam = 1e16 is off by 90%) and evaluates a partial minimization by a conic
    solve; :attr:`atom_value` is that evaluation.  Every solver sees the one term as it is."""

    @property
    def value(self) -> Any:
        form, holder = getattr(self, CLOSED_FORM, None), getattr(self, HOLDER, None)
        if form is None or holder is None or holder.value is None:
            return super().value  # a copy CVXPY made while canonicalizing: the plain sum
        return np.float64(form.value_at(np.asarray(holder.value, dtype=np.float64).reshape(-1)))

    @property
    def atom_value(self) -> Any:
        """CVXPY's evaluation of the expression, atom by atom (a solve for a partial minimization)."""
        return super().value


#: The attribute under which a :class:`NamedRisk` keeps its placeholder.
HOLDER = "_fullcomp_holder"


def risk(
    expr: cp.Expression, *, value: Value | None = None, weights: Weights | None = None, named: tuple | None = None
) -> cp.Expression:
    """A risk of the placeholder u that declares its value and its weights in closed form.

    Parameters
    ----------
    expr : cvxpy.Expression
        The risk F as a convex scalar DCP expression of one ``fc.inner_value(n)`` placeholder alone (no
        domain variable, no other variable, no parameter: the closed forms see u only).  Every GLMO route
        solves with it as with any other F.
    value : callable, optional
        ``value(u) -> float``: F at the numpy vector u of length n.  It replaces CVXPY's evaluation of F
        where that evaluation is a conic solve (a partial minimization).
    weights : callable, optional
        ``weights(u) -> array of shape (n,)``: a subgradient of F at u, for a risk written as
        max { q.u - penalty(q) : q in Q } the maximizing q.  :func:`risk_weights`, the weights of the
        history's ``q[i]`` columns and :meth:`OuterCalculus.weights` return it instead of solving for
        CVXPY's dual.

    Returns
    -------
    A copy of ``expr`` carrying the closed forms (``expr`` itself is left as it was).  An expression built
    on top of it (``2 * fc.risk(...)``) is a new F without closed forms.  fullcomp's named risks (``named``
    given) return a :class:`NamedRisk`, whose ``.value`` is the declared value.

    ``fullcomp.testing.check_risk`` checks the declared value and weights against CVXPY.
    """
    from fullcomp.model.composite import free_variables

    if not isinstance(expr, cp.Expression):
        raise ModelError(
            f"fc.risk expr must be a CVXPY expression in u = fc.inner_value(n), e.g. cp.max(u); got "
            f"{type(expr).__name__}"
        )
    if expr.size != 1:
        raise ModelError(f"fc.risk expr must be scalar; it has shape {expr.shape} (wrap it in cp.max, cp.sum, ...)")
    if not (expr.is_dcp() and expr.is_convex()):
        raise ModelError(
            "fc.risk expr must be convex under the DCP rules (expr.is_convex() is False); write the risk with "
            "DCP atoms, or as a partial minimization (cvxpy.transforms.partial_optimize) of a convex program"
        )
    variables = free_variables(expr)
    holders = [v for v in variables if is_placeholder(v)]
    if len(holders) != 1 or len(variables) != 1:
        raise ModelError(
            "fc.risk expr must be a function of one fc.inner_value placeholder alone, since its closed forms "
            f"receive u only; it reads {', '.join(v.name() for v in variables) or 'no variable'}. Add x-dependent "
            "terms outside: F = fc.risk(expr, ...) + g(domain.variable)"
        )
    if expr.parameters():
        raise ModelError(
            f"fc.risk expr uses parameter {expr.parameters()[0].name()}, whose changes its closed forms would not "
            "see; write the parameter's number into expr and into value= and weights= as a constant"
        )
    for name, fn in (("value", value), ("weights", weights)):
        if fn is not None and not callable(fn):
            raise ModelError(
                f"fc.risk {name} must be a callable of the numpy vector u (value(u) -> float, weights(u) -> array "
                f"of shape (n,)), got {type(fn).__name__} {fn!r}"
            )
    if value is None and weights is None:
        raise ModelError(
            "fc.risk needs value= or weights= (or both): the closed forms it declares; an expression without "
            "them is an outer function as it is, with no fc.risk"
        )
    tagged = NamedRisk([expr]) if named is not None and value is not None else expr.copy()
    if tagged is expr:  # a leaf copies to itself, and tagging it would tag the placeholder
        raise ModelError("fc.risk expr is the placeholder itself; declare a risk built from atoms of u")
    setattr(tagged, HOLDER, holders[0])
    setattr(tagged, CLOSED_FORM, ClosedForm(value, weights, int(holders[0].shape[0]), named))
    return tagged


def closed_form(expr: Any) -> ClosedForm | None:
    """The closed forms :func:`risk` attached to ``expr``, or None."""
    return getattr(expr, CLOSED_FORM, None)


def named_risk(expr: Any) -> tuple[str, dict] | None:
    """``(name, parameters)`` of a named risk of the placeholder itself (``fc.cvar(u, 0.1)`` gives
    ``("cvar", {"alpha": 0.1})``), or None for any other F."""
    form = closed_form(expr)
    return None if form is None else form.named


def has_partial_minimization(expr: cp.Expression) -> bool:
    if isinstance(expr, PartialProblem):
        return True
    return any(has_partial_minimization(arg) for arg in getattr(expr, "args", []))


def solved_value(expr: cp.Expression) -> Value | None:
    """F's declared value where CVXPY can only evaluate F by a solve (a partial minimization), else None."""
    closed = closed_form(expr)
    if closed is None or closed.value is None or not has_partial_minimization(expr):
        return None
    return closed.value_at


# ---- the named risks' weights in closed form -----------------------------------------------------------


def capped_weights(u: np.ndarray, m: float) -> np.ndarray:
    """argmax { q.u : q in the simplex, q <= 1/m }, for m >= 1: mass 1/m on the largest entries in turn, the
    boundary's share split evenly over entries tied there (so that tied entries get equal weights)."""
    u = np.asarray(u, dtype=np.float64)
    q = np.zeros(u.size)
    order = np.argsort(-u, kind="stable")
    ranked = u[order]
    slots, i = float(m), 0
    while slots > 1e-12 * m and i < u.size:
        j = i + 1
        while j < u.size and ranked[j] == ranked[i]:
            j += 1
        take = min(float(j - i), slots)
        q[order[i:j]] = take / (j - i) / m
        slots -= take
        i = j
    return q


def softmax_weights(u: np.ndarray, lam: float) -> np.ndarray:
    """softmax(u / lam): the weights of the entropic risk and of the smoothed max at temperature lam."""
    u = np.asarray(u, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):  # a gap of -inf temperatures weighs exp(-inf) = 0, exactly
        e = np.exp((u - u.max()) / lam)
    return e / e.sum()


def log_mean_exp(u: np.ndarray, lam: float) -> float:
    """lam log mean exp(u / lam), the entropic risk, to rounding at every temperature lam > 0.

    While the exponents about the mean stay within 1 (lam at least the spread of u) it is
    mean + lam log1p(mean(expm1((u - mean) / lam))): the variance term var / (2 lam) keeps its digits, where
    lam (log_sum_exp(u / lam) - log n) cancels them (90% off at lam = 1e16).  Beyond, the exponents are taken
    about the max, so none overflows (log-sum-exp)."""
    u = np.asarray(u, dtype=np.float64)
    top = float(u.max())
    if top - float(u.min()) <= lam:
        mean = float(u.mean())
        return mean + lam * math.log1p(float(np.mean(np.expm1((u - mean) / lam))))
    with np.errstate(over="ignore", under="ignore"):  # as in softmax_weights
        total = float(np.sum(np.exp((u - top) / lam)))
    return top + lam * (math.log(total) - math.log(u.size))


def argmax_weights(u: np.ndarray) -> np.ndarray:
    """Uniform weights on the largest entries of u (a vertex when the max is unique)."""
    top = u == u.max()
    return top / top.sum()


def _grow(f: Callable[[float], float], target: float) -> float:
    """Some t >= 1 with f(t) >= target, for an increasing f that exceeds target eventually."""
    t = 1.0
    while f(t) < target and t < 1e300:
        t *= 2.0
    return t


def _centred_kl(c: np.ndarray, s: float) -> tuple[float, np.ndarray]:
    """KL(q || 1/n) and q = softmax(s c), for c centred on its mean: s q.c - log mean exp(s c), whose two terms
    are each about s^2 var(c) at a small s, so the log is taken as log1p(mean(expm1(.))) while s c is small."""
    q = softmax_weights(c, 1.0 / s) if s > 0 else np.full(c.size, 1.0 / c.size)
    sc = s * c
    if s * float(np.abs(c).max()) <= 1.0:
        log_mean = math.log1p(float(np.mean(np.expm1(sc))))
    else:
        top = float(sc.max())
        log_mean = top + math.log(float(np.mean(np.exp(sc - top))))
    return max(float(q @ sc) - log_mean, 0.0), q


def kl_weights(u: np.ndarray, rho: float) -> np.ndarray:
    """argmax { q.u : q in the simplex, KL(q || 1/n) <= rho }: softmax(u / lam) with the lam at which the
    KL constraint is tight, or uniform weights on the maximizers when even they are within rho."""
    return kl_tilt(u, rho)[0]


def kl_tilt(u: np.ndarray, rho: float) -> tuple[np.ndarray, float]:
    """(q, beta): :func:`kl_weights` and the inverse temperature 1 / lam* of q = softmax(beta u) (inf where q
    is uniform on the maximizers, 0 where it is uniform).

    beta solves KL(q(beta)) = rho, which is where the dual min_lam lam rho + lam log mean exp(u / lam) has its
    minimum; KL is computed from u centred on its mean, so a small rho (q near uniform, KL about
    beta^2 var / 2) keeps its digits."""
    u = np.asarray(u, dtype=np.float64)
    n, spread = u.size, float(u.max() - u.min())
    top = argmax_weights(u)
    if rho == 0 or spread == 0:
        return np.full(n, 1.0 / n), 0.0
    if rho >= math.log(n / np.count_nonzero(top)):
        return top, math.inf
    c = (u - u.mean()) / spread  # in [-1, 1]: KL(softmax(s c)) increases in s from 0 to log(n / |argmax|)

    def kl(s: float) -> float:
        return _centred_kl(c, s)[0]

    hi = _grow(kl, rho)
    if kl(hi) < rho:  # rho within rounding of log(n / #maximizers)
        return top, math.inf
    s = brentq(lambda t: kl(t) - rho, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
    return _centred_kl(c, s)[1], s / spread


def chi2_weights(u: np.ndarray, kappa: float) -> np.ndarray:
    """argmax { q.u : q in the simplex, (n/2) ||q - 1/n||^2 <= kappa }: the projection of 1/n + t u onto
    the simplex with the t at which the ball constraint is tight (the distance to 1/n grows with t), or
    uniform weights on the maximizers when they lie in the ball."""
    u = np.asarray(u, dtype=np.float64)
    n, spread = u.size, float(u.max() - u.min())
    uniform = np.full(n, 1.0 / n)
    if kappa == 0 or spread == 0:
        return uniform
    top = argmax_weights(u)
    if 0.5 * n * float(np.sum((top - uniform) ** 2)) <= kappa:
        return top
    order = np.argsort(-u, kind="stable")
    below = (u.max() - u[order]) / spread  # >= 0, and exact for entries near the max
    sizes = np.arange(1, n + 1)
    means = np.cumsum(below) / sizes  # over the k largest entries, k = 1..n

    def tilted(t: float) -> np.ndarray:
        # The projection of 1/n + t u / spread onto the simplex: on its support, the k largest entries, it is
        # 1/k + t (mean of the k - below_i), the largest k at which that stays > 0.  Written from the distances
        # to the max, it keeps its digits at the large t that nearly tied maxima need, where projecting the
        # vector 1/n + t u / spread itself cancels digits (its sum then misses 1 by 1e-6).
        k = sizes[1.0 / sizes + t * (means - below) > 0][-1]
        q = np.zeros(n)
        q[order[:k]] = 1.0 / k + t * (means[k - 1] - below[:k])
        return q

    def divergence(t: float) -> float:
        return 0.5 * n * float(np.sum((tilted(t) - uniform) ** 2))

    hi = _grow(divergence, kappa)
    if divergence(hi) < kappa:  # kappa within rounding of the maximizers' divergence
        return top
    t = brentq(lambda s: divergence(s) - kappa, 0.0, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    return tilted(t)


# ---- smoothings of the max -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OuterGradient:
    """F (or its smoothing F_mu) at a point and a (sub)gradient there.

    ``u`` has shape (n,); ``x`` is flat (row-major, like the oracle's Jacobian
    columns), or None when F does not read the domain variable.
    """

    value: float
    u: np.ndarray
    x: np.ndarray | None


def is_plain_max(outer: Outer) -> bool:
    """True when F is exactly ``cp.max(u)`` of the placeholder (no x, no scaling)."""
    expr = outer.expr
    if isinstance(expr, NamedRisk) and len(expr.args) == 1:  # fc.cvar(u, alpha) below one entry is cp.max(u)
        expr = expr.args[0]
    return isinstance(expr, cvxpy_max) and expr.axis is None and expr.args[0] is outer.u and not outer.depends_on_x


def softmax_smoothing(u: np.ndarray, mu: float) -> OuterGradient:
    """F_mu(u) = mu log sum exp(u / mu), within mu log n above max(u); gradient softmax(u / mu)."""
    s = u / mu
    top = s.max()
    e = np.exp(s - top)  # shifted so that no exponent overflows
    total = e.sum()
    return OuterGradient(float(mu * (top + np.log(total))), e / total, None)


def max_moreau(u: np.ndarray, mu: float) -> OuterGradient:
    """Moreau envelope of max = support function of the simplex Delta:
    F_mu(u) = max_{q in Delta} <q, u> - (mu/2) ||q||^2, gradient q* = proj_Delta(u / mu)."""
    q = project_simplex(u / mu, 1.0)
    return OuterGradient(float(q @ u - 0.5 * mu * q @ q), q, None)


# ---- gradients of a differentiable F -------------------------------------------------------------------


#: Non-affine CVXPY atoms differentiable on the interior of their domain, by class name (a subclass, such as
#: CVXPY's PowerApprox of Power, counts as its base).
SMOOTH_ATOMS = frozenset(
    ("Power", "power", "quad_over_lin", "QuadForm", "SymbolicQuadForm", "log_sum_exp", "exp", "logistic", "huber")
    + ("log", "log1p", "entr", "kl_div", "rel_entr", "xexp")
)


def kink(expr: cp.Expression) -> cp.Expression | None:
    """The first sub-expression of F that is not differentiable (neither affine nor a smooth atom), or None."""
    if isinstance(expr, PartialProblem):
        return expr
    if isinstance(expr, cp.atoms.atom.Atom) and not expr.is_atom_affine():
        if not any(cls.__name__ in SMOOTH_ATOMS for cls in type(expr).__mro__):
            return expr
    for arg in getattr(expr, "args", []):
        found = kink(arg)
        if found is not None:
            return found
    return None


def outer_gradient(outer: Outer, u: np.ndarray, x: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(grad_u F, grad_x F flat or None) at (u, x), from CVXPY's gradients of F's atoms (an affine F: its a)."""
    if outer.linear is not None:
        return outer.linear[0], None
    outer.u.save_value(np.asarray(u, dtype=np.float64))
    if outer.depends_on_x:
        outer.domain.variable.value = x
    grads = outer.expr.grad

    def dense(var: cp.Variable) -> np.ndarray:
        g = grads.get(var)
        if g is None:
            return np.zeros(var.size)
        g = np.asarray(g.todense() if hasattr(g, "todense") else g, dtype=np.float64)
        return g.reshape(var.shape, order="F").reshape(-1)  # CVXPY stacks a variable's entries column by column

    if grads is None or any(g is None for g in grads.values()):
        raise OracleError(f"F has no gradient at u = {np.array2string(u, precision=4)}: outside its domain")
    return dense(outer.u), dense(outer.domain.variable) if outer.depends_on_x else None


# ---- one outer function's calculus ---------------------------------------------------------------------


class OuterCalculus:
    """Value, subgradients, gradients, smoothed gradients and weights of one outer function.

    Parameters
    ----------
    outer : the problem's validated :class:`~fullcomp.model.Outer`.
    structural : use the closed forms when F is ``cp.max(u)`` (default True);
        False forces the compiled programs (used to cross-check them).

    The programs are compiled on first use and re-solved with new parameter
    values (Clarabel, SCS as fallback, never warm-started so runs repeat).
    """

    def __init__(self, outer: Outer, *, structural: bool = True):
        self.outer = outer
        self.plain_max = structural and is_plain_max(outer)
        self.closed = closed_form(outer.expr)
        self.fallbacks = 0  # subgradients taken from the risk's closed forms after the conic solvers failed
        self._subgradient_program: tuple | None = None
        self._prox_programs: dict[float, tuple] = {}

    @property
    def depends_on_x(self) -> bool:
        return self.outer.depends_on_x

    def smoothing(self, kind: str) -> str:
        """Resolve ``kind``: "auto" is log-sum-exp for ``cp.max(u)``, the Moreau envelope otherwise."""
        if kind not in SMOOTHINGS:
            raise OptionError(f"smoothing must be one of {SMOOTHINGS}, got {kind!r}")
        if kind == "lse" and not self.plain_max:
            raise OptionError("smoothing='lse' (log-sum-exp) needs F = cp.max(u); use 'moreau' or 'auto'")
        if kind == "auto":
            return "lse" if self.plain_max else "moreau"
        return kind

    def value(self, u: Any, x: Any = None) -> float:
        """F(u, x) (see :meth:`fullcomp.model.Outer.value`); ``x`` is read only if F depends on it."""
        return self.outer.value(self._u(u), self._x(x) if self.depends_on_x else None)

    # -- subgradients and gradients -------------------------------------------

    def subgradient(self, u: Any, x: Any = None) -> OuterGradient:
        """A subgradient (g_u, g_x) of F at (u, x) and F(u, x); ``x`` is read only if F depends on it."""
        u = self._u(u)
        if self.plain_max:
            # The centre of the argmax face, which is what the interior-point dual returns too.
            face = u == u.max()
            return OuterGradient(float(u.max()), face / face.sum(), None)
        problem, p_u, p_x, link_u, link_x = self._subgradient_program or self._compile_subgradient()
        p_u.value = u
        if p_x is not None:
            p_x.value = self._x(x)
        try:
            solvers.solve(problem, "subgradient of the outer function")
        except SolverError as exc:
            closed = self.closed
            if closed is None or closed.weights is None or closed.value is None:
                raise
            # Clarabel and SCS both failed on F's conic program (a named risk at parameters that strain a conic
            # solver): the risk's closed forms are exact, and the run goes on with them, saying so.
            self.fallbacks += 1
            warnings.warn(
                f"the subgradient program of F failed ({exc}); the risk's closed-form value and weights are used "
                f"instead (fallback {self.fallbacks} of this run)",
                RuntimeWarning,
                stacklevel=2,
            )
            return OuterGradient(closed.value_at(u), closed.weights_at(u), None)
        g_x = None if link_x is None else -np.asarray(link_x.dual_value, dtype=np.float64).reshape(-1)
        return OuterGradient(float(problem.value), -np.asarray(link_u.dual_value, dtype=np.float64), g_x)

    def gradient(self, u: Any, x: Any = None) -> OuterGradient:
        """F(u, x) and its gradient, for an F whose atoms are differentiable at (u, x) (:func:`outer_gradient`)."""
        u = self._u(u)
        x = self._x(x) if self.depends_on_x else None
        g_u, g_x = outer_gradient(self.outer, u, x)
        return OuterGradient(self.outer.value(u, x), g_u, g_x)

    def weights(self, u: Any, x: Any = None) -> np.ndarray:
        """The weights F puts on each inner value at (u, x), g_u: the adversary's q for a worst case, a CVaR, a
        DRO risk.  The weights a risk declares (:func:`risk`; every named risk does) where F is one, else the
        subgradient's."""
        if self.closed is not None and self.closed.weights is not None:
            return self.closed.weights_at(self._u(u))
        return self.subgradient(u, x).u

    def _compile_subgradient(self) -> tuple:
        outer = self.outer
        p_u = cp.Parameter(outer.n, name="u_point")
        link_u = outer.u == p_u
        constraints, p_x, link_x = [link_u], None, None
        if outer.depends_on_x:
            p_x = cp.Parameter(outer.domain.shape, name="x_point")
            link_x = outer.domain.variable == p_x
            constraints.append(link_x)
        problem = cp.Problem(cp.Minimize(outer.expr), constraints)
        if not problem.is_dcp(dpp=True):
            raise ModelError(
                "the subgradient program is not DPP; keep parameters out of products in the outer function"
            )
        self._subgradient_program = (problem, p_u, p_x, link_u, link_x)
        return self._subgradient_program

    # -- smoothing ------------------------------------------------------------

    def smoothed(self, u: Any, x: Any = None, *, mu: float, kind: str = "auto") -> OuterGradient:
        """F_mu at (u, x) and its gradient, for the smoothing ``kind`` ("auto", "lse" or "moreau")."""
        kind = self.smoothing(kind)
        if not (np.isfinite(mu) and mu > 0):
            raise OptionError(f"mu must be a positive smoothing parameter, got {mu!r}")
        u = self._u(u)
        if kind == "lse":
            return softmax_smoothing(u, mu)
        if self.plain_max:
            return max_moreau(u, mu)
        problem, p_u, p_x = self._prox_programs.get(mu) or self._compile_prox(mu)
        p_u.value = u
        if p_x is not None:
            p_x.value = self._x(x)
        solvers.solve(problem, "prox of the outer function")
        outer = self.outer
        g_u = (u - np.asarray(outer.u.value, dtype=np.float64)) / mu
        g_x = None
        if p_x is not None:
            g_x = ((p_x.value - np.asarray(outer.domain.variable.value, dtype=np.float64)) / mu).reshape(-1)
        return OuterGradient(float(problem.value), g_u, g_x)

    def _compile_prox(self, mu: float) -> tuple:
        # mu is a constant of the program: a parameter 1/(2 mu) multiplying a parametrized sum of
        # squares would break DPP, and a run uses one mu, so one compiled program per mu.
        outer = self.outer
        p_u = cp.Parameter(outer.n, name="u_point")
        distance = cp.sum_squares(outer.u - p_u)
        p_x = None
        if outer.depends_on_x:
            p_x = cp.Parameter(outer.domain.shape, name="x_point")
            distance = distance + cp.sum_squares(outer.domain.variable - p_x)
        if has_partial_minimization(outer.expr):
            # CVXPY 1.9's QP detection walks into partial minimizations (fc.chi2_dro) and fails on a
            # quadratic objective, so the squared distance goes to an epigraph constraint instead
            # (a second-order cone, solved less accurately than Clarabel's native quadratic objective).
            t = cp.Variable(nonneg=True, name="squared_distance")
            problem = cp.Problem(cp.Minimize(outer.expr + t / (2.0 * mu)), [distance <= t])
        else:
            problem = cp.Problem(cp.Minimize(outer.expr + distance / (2.0 * mu)))
        if not problem.is_dcp(dpp=True):
            raise ModelError("the prox program is not DPP; keep parameters out of products in the outer function")
        self._prox_programs[mu] = (problem, p_u, p_x)
        return self._prox_programs[mu]

    # -- inputs ---------------------------------------------------------------

    def _u(self, u: Any) -> np.ndarray:
        u = np.asarray(u.detach().cpu() if hasattr(u, "detach") else u, dtype=np.float64).reshape(-1)
        if u.shape != (self.outer.n,) or not np.all(np.isfinite(u)):
            raise OptionError(f"u must be a finite vector of length {self.outer.n}, got shape {u.shape}")
        return u

    def _x(self, x: Any) -> np.ndarray:
        if x is None:
            raise OptionError("F depends on x: pass the point x as well as u")
        x = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
        return x.reshape(self.outer.domain.shape)


# ---- weights at a point, for any outer function ----------------------------------------------------------


def risk_weights(outer: Any, u_value: Any) -> np.ndarray:
    """The adversary's weights q at ``u_value``: the maximizer of the risk's sup form, a subgradient of F.

    ``outer`` is an outer function (a CVXPY expression in ``fc.inner_value(n)``), a
    :class:`~fullcomp.model.composite.Outer` or a :class:`~fullcomp.CompositeProblem`.  For a risk that
    declares its weights (:func:`risk`; the named risks ``fc.cvar``, ``fc.chi2_dro``, ``fc.top_k_mean``,
    ``fc.entropic_risk``, ``fc.kl_dro``, ``fc.smooth_max``, ``fc.group_dro``, ``fc.tpauc_cvar``,
    ``fc.tpauc_kl`` do, their docstrings give the closed form) q is the declared closed form; for any other
    F of the placeholder alone it is read off CVXPY's dual of ``u == u_value`` in ``min F(u)`` (a
    subgradient; for a sup-form risk, weights on the simplex), which costs one conic solve.  An expression
    built from a named risk (``2 * fc.cvar(u, a)``) is "any other F".
    """
    from fullcomp.model.composite import CompositeProblem, Outer, free_variables

    expr = outer.outer if isinstance(outer, CompositeProblem) else outer
    expr = expr.expr if isinstance(expr, Outer) else expr
    if not isinstance(expr, cp.Expression):
        raise ModelError(
            f"risk_weights needs an outer function (a CVXPY expression in fc.inner_value(n)), an Outer or a "
            f"CompositeProblem, got {type(outer).__name__}"
        )
    variables = free_variables(expr)
    holders = [v for v in variables if is_placeholder(v)]
    if len(holders) != 1 or len(variables) != 1:
        raise ModelError(
            "risk_weights needs an outer function of one fc.inner_value placeholder alone "
            "(no other variables, no domain variable)"
        )
    n = holders[0].shape[0]
    value = np.asarray(u_value.detach().cpu() if hasattr(u_value, "detach") else u_value, dtype=np.float64)
    value = value.reshape(-1)
    if value.shape != (n,) or not np.all(np.isfinite(value)):
        raise ModelError(f"risk_weights u_value must be a finite vector of length {n}, got shape {value.shape}")
    closed = closed_form(expr)
    if closed is not None and closed.weights is not None:
        return closed.weights_at(value)
    link = holders[0] == value
    solvers.solve(cp.Problem(cp.Minimize(expr), [link]), "risk_weights' subgradient program")
    return -np.asarray(link.dual_value, dtype=np.float64).reshape(-1)


__all__ = [
    "ClosedForm",
    "OuterCalculus",
    "OuterGradient",
    "NamedRisk",
    "SMOOTHINGS",
    "argmax_weights",
    "capped_weights",
    "chi2_weights",
    "closed_form",
    "is_plain_max",
    "kl_tilt",
    "kl_weights",
    "log_mean_exp",
    "max_moreau",
    "outer_gradient",
    "risk",
    "risk_weights",
    "softmax_smoothing",
    "softmax_weights",
    "solved_value",
]
