"""Generalized linear minimization oracles built from the declared F and X."""

from __future__ import annotations

from typing import Any

from fullcomp.errors import ModelError, OptionError
from fullcomp.glmo.affine import AffineGLMO
from fullcomp.glmo.base import GLMO, GLMOResult
from fullcomp.glmo.colgen import ColumnGenerationGLMO
from fullcomp.glmo.conic import ConicGLMO
from fullcomp.glmo.dual import AUTO_OUTPUTS, DualBallGLMO, ball_blocks
from fullcomp.model.composite import Outer
from fullcomp.sets.base import Set

ROUTES = ("auto", "affine", "conic", "colgen", "dual")


def build_glmo(outer: Any, domain: Set, route: str = "auto", pool: int = 30, device: Any = None) -> GLMO:
    """Build the GLMO ``min_{x in X} F(z + V (x - y), x)`` for an outer function and a set.

    ``route="auto"`` takes one LMO when F is affine in the placeholder alone; the dual route
    (:class:`~fullcomp.glmo.dual.DualBallGLMO`) when F reads only the placeholder, has at most
    ``dual.AUTO_OUTPUTS`` (32) values, and the set is an l2 ball or a product of l2 balls; column generation
    when F reads only the placeholder and the set has a cheap LMO; and the conic program otherwise.
    ``outer`` is a CVXPY expression in ``fc.inner_value(n)`` (or an already
    validated :class:`~fullcomp.model.Outer`).  An outer function with constraints
    (``CompositeProblem(constraints=...)``) takes the conic route, which keeps them.  ``device``: the run's
    torch device, where column generation's LMO does its sparse products when it is a GPU (the rest of every
    route runs on the host).
    """
    if route not in ROUTES:
        raise OptionError(f"route must be one of {ROUTES}, got {route!r}")
    if not isinstance(outer, Outer):
        outer = Outer(outer, domain)
    if outer.constraints is not None:
        return constrained_glmo(outer, domain, route)
    if route == "affine" and outer.linear is None:
        raise ModelError("route='affine' needs an outer function affine in the placeholder alone; use 'auto'")
    if route == "affine" or (route == "auto" and outer.linear is not None):
        return AffineGLMO(outer, domain)
    if route == "dual":
        return DualBallGLMO(outer, domain, pool=pool, device=device)
    if route == "auto" and not outer.depends_on_x and outer.n <= AUTO_OUTPUTS and ball_blocks(domain) is not None:
        try:
            return DualBallGLMO(outer, domain, pool=pool, device=device)
        except ModelError:  # F's conic form is not readable from this CVXPY: column generation solves through it
            pass
    colgen_ok = not outer.depends_on_x and domain.cheap_lmo
    if route == "colgen" and outer.depends_on_x:
        raise ModelError("route='colgen' needs an outer function of the placeholder only; use 'conic' or 'auto'")
    if route == "colgen" or (route == "auto" and colgen_ok):
        return ColumnGenerationGLMO(outer, domain, pool=pool, device=device)
    return ConicGLMO(outer, domain)


def constrained_glmo(outer: Outer, domain: Set, route: str) -> GLMO:
    """The conic route, the one that keeps constraints on u: column generation's master and pricing, the dual
    and the affine routes know F alone (their certificates would not bound the constrained GLMO)."""
    if route not in ("auto", "conic"):
        raise ModelError(
            f"route={route!r} does not keep the problem's constraints; use route='conic' or 'auto' (which takes it)"
        )
    return ConicGLMO(outer, domain)


__all__ = ["build_glmo", "GLMO", "GLMOResult", "AffineGLMO", "ConicGLMO", "ColumnGenerationGLMO", "DualBallGLMO"]
