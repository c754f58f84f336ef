"""The CVXPY placeholder that stands for the inner value f(x)."""

from __future__ import annotations

import weakref

import cvxpy as cp

from fullcomp.errors import ModelError

_PLACEHOLDERS: weakref.WeakValueDictionary[int, cp.Variable] = weakref.WeakValueDictionary()


def inner_value(n: int) -> cp.Variable:
    """A CVXPY variable of shape ``(n,)`` standing for f(x) in the outer function.

    Write the outer function F in it with ordinary CVXPY atoms, e.g.
    ``cp.max(inner_value(7))``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ModelError(f"inner_value(n) needs a positive int n (the length of f(x)), got {n!r}")
    u = cp.Variable(n, name="f(x)")
    _PLACEHOLDERS[u.id] = u
    return u


def is_placeholder(var: cp.Variable) -> bool:
    return var.id in _PLACEHOLDERS
