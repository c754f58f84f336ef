"""Domains for a network's parameters: one set per parameter, sized from the layer's initialization.

In the style of ZIB-IOL's StochasticFrankWolfe (Pokutta, Spiegel and Zimmer, "Deep Neural Network Training
with Frank-Wolfe", 2020): every parameter gets its own ball, whose radius is a factor times the expected
norm of that parameter under PyTorch's default initialization of its layer, converted so that each kind of
ball has the l2 diameter ``2 * factor * E||p_init||_2``.  The result is a named :class:`~fullcomp.Product`
over the flat vector of the parameters, the domain a ``CompositeProblem(x0=module)`` expects.
"""

from __future__ import annotations

import contextlib
import copy
import math
import numbers
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from fullcomp.errors import DomainError, ModelError
from fullcomp.model.params import Params
from fullcomp.sets.balls import L1Ball, L2Ball
from fullcomp.sets.base import Set, check_radius
from fullcomp.sets.norms import KSparsePolytope
from fullcomp.sets.polytopes import Box
from fullcomp.sets.product import Product

#: The kinds of per-parameter sets :func:`layer_domains` builds.
KINDS = ("l2", "l1", "linf", "k-sparse")
#: Fresh initializations averaged for the expected norm (StochasticFrankWolfe's ``repetitions``).
DRAWS = 100


def _owners(module: torch.nn.Module) -> dict[str, tuple[torch.nn.Module, str]]:
    """Parameter name (as ``named_parameters`` gives it) -> (the submodule holding it, its attribute name)."""
    holder: dict[int, tuple[torch.nn.Module, str]] = {}
    for _, sub in module.named_modules():
        for attr, p in sub.named_parameters(recurse=False):
            holder.setdefault(id(p), (sub, attr))
    return {name: holder[id(p)] for name, p in module.named_parameters()}


@torch.no_grad()
def init_norms(module: torch.nn.Module, draws: int = DRAWS, seed: int = 0) -> dict[str, float | None]:
    """The expected l2 norm of each parameter under its layer's default initialization.

    StochasticFrankWolfe's ``get_avg_init_norm``: the mean of ``||p||_2`` over ``draws`` calls of the
    layer's ``reset_parameters()``, here on a copy of the layer on the CPU and under a fixed seed, so the
    module, its values and the global random states (torch's, numpy's and Python's, which a layer's
    ``reset_parameters`` may draw from) are left as they are and the result is the same on every call.

    Parameters
    ----------
    module : torch.nn.Module
        The network; every parameter of ``module.named_parameters()`` is
        measured.
    draws : int, default 100
        Fresh initializations averaged.
    seed : int, default 0
        The seed of the draws.

    Returns
    -------
    dict of str to float or None
        The expected norm by parameter name; None for a parameter whose
        layer has no ``reset_parameters()`` (its initialization is not
        known).
    """
    if not isinstance(module, torch.nn.Module):
        raise DomainError(f"init_norms needs a torch.nn.Module, got {type(module).__name__}")
    check_initialized(module, "init_norms")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise DomainError(f"draws must be a positive int, got {draws!r}")
    owners = _owners(module)
    layers: dict[int, tuple[torch.nn.Module, list[tuple[str, str]]]] = {}
    for name, (sub, attr) in owners.items():
        layers.setdefault(id(sub), (sub, []))[1].append((name, attr))
    out: dict[str, float | None] = dict.fromkeys(owners)
    for sub, members in layers.values():
        if not callable(getattr(sub, "reset_parameters", None)):
            continue
        layer = copy.deepcopy(sub).to("cpu")
        totals = dict.fromkeys((name for name, _ in members), 0.0)
        with torch.random.fork_rng(devices=[]), _global_random_kept():  # the copy is on the CPU: its generator
            torch.random.default_generator.manual_seed(seed)
            for _ in range(draws):
                layer.reset_parameters()
                for name, attr in members:
                    totals[name] += float(torch.linalg.vector_norm(getattr(layer, attr).double()))
        out.update({name: total / draws for name, total in totals.items()})
    return out


@contextlib.contextmanager
def _global_random_kept() -> Iterator[None]:
    """numpy's and Python's global random states, restored on exit: a layer's reset_parameters() may draw from
    them (np.random.rand, random.random) as well as from torch's generator."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def check_initialized(module: torch.nn.Module, caller: str) -> None:
    """A ModelError naming the layer when ``module`` holds a lazy layer's parameter not yet materialized."""
    for layer_name, layer in module.named_modules():
        for attr, p in layer.named_parameters(recurse=False):
            if isinstance(p, torch.nn.parameter.UninitializedParameter):
                where = f"layer {layer_name!r} ({type(layer).__name__})" if layer_name else type(layer).__name__
                raise ModelError(
                    f"{caller}: parameter {attr!r} of {where} is not initialized yet (a lazy layer learns its "
                    "shape from its first input); run one forward pass first, module(batch), then call "
                    f"{caller} again"
                )


def _positive(value: Any, name: str) -> float:
    """A positive finite real given as a Python or numpy number or a 0-d real tensor, as a float."""
    if isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_complex() and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise DomainError(f"{name} must be a positive number, got {value!r}; pass e.g. {name}=10.0")
    return float(value)


def _count(k: int | float, size: int, name: str) -> int:
    """k entries of ``size``: an int (at most ``size``) or a fraction in (0, 1] of them (at least one)."""
    if isinstance(k, bool) or not isinstance(k, (int, float, np.integer, np.floating)):
        raise DomainError(f"k must be an int >= 1 or a fraction in (0, 1], got {k!r}")
    if isinstance(k, (int, np.integer)):
        if k < 1:
            raise DomainError(f"k must be an int >= 1 or a fraction in (0, 1], got {k}")
        return min(int(k), size)
    if not 0 < k <= 1:
        raise DomainError(f"k={k} for parameter {name!r}: a float k is a fraction of the entries, in (0, 1]")
    return max(1, min(size, int(k * size)))


def layer_domains(
    module: torch.nn.Module,
    kind: str = "l2",
    radius: float | Mapping[str, float] | None = None,
    factor: float | np.floating | torch.Tensor = 10.0,
    k: int | float | None = None,
    draws: int = DRAWS,
) -> Product:
    """One set per parameter of ``module``, as a named ``fc.Product`` over the flat vector of its parameters.

    The domain of ``fc.CompositeProblem(..., x0=module)``: its blocks are
    named and ordered as ``module.named_parameters()``, each in its
    parameter's shape.  A block's radius is ``radius`` when given, else
    StochasticFrankWolfe's rule: the set whose l2 diameter is ``2 * factor *
    a``, where ``a`` is the expected l2 norm of the parameter under its
    layer's default initialization (:func:`init_norms`; 1 where that is 0):
    radius ``factor * a`` for ``"l2"`` and ``"l1"``, ``factor * a /
    sqrt(size)`` for ``"linf"`` and ``factor * a / sqrt(k)`` for
    ``"k-sparse"``.  The radius is the only regularizer and has no natural
    scale: try a few factors (the "Training a network" guide).

    Parameters
    ----------
    module : torch.nn.Module
        The network whose parameters are the variable.
    kind : {"l2", "l1", "linf", "k-sparse"}, default "l2"
        The set of each block: ``fc.L2Ball``, ``fc.L1Ball``, ``fc.Box(-r,
        r)`` or ``fc.KSparsePolytope(k, r)``.
    radius : float or dict of str to float, optional
        The radius of every block, or by parameter name (the others then
        follow ``factor``).  None: every block follows ``factor``.
    factor : float, default 10.0
        The multiple of the expected initialization norm, for the blocks
        without a given radius: any positive real (a numpy scalar or a 0-d
        tensor too).
    k : int or float, optional
        For ``"k-sparse"`` only, required there: the number of nonzero
        entries of a vertex, an int (at most the block's size) or a fraction
        in (0, 1] of the block's entries (at least one).
    draws : int, default 100
        Fresh initializations averaged for the expected norm.

    Returns
    -------
    Product
        The named product of the blocks.

    Raises
    ------
    DomainError
        An unknown kind, a bad radius, factor or k, or a parameter whose
        layer has no ``reset_parameters()`` and no radius given (pass
        ``radius={name: r}``).
    ModelError
        A lazy layer (``torch.nn.LazyLinear``) whose parameters are not
        materialized yet: run one forward pass first.
    """

    if not isinstance(module, torch.nn.Module):
        raise DomainError(f"layer_domains needs a torch.nn.Module, got {type(module).__name__}")
    check_initialized(module, "layer_domains")
    params = Params(module, "module")
    if kind not in KINDS:
        raise DomainError(f"kind must be one of {KINDS}, got {kind!r}")
    if (k is None) == (kind == "k-sparse"):
        raise DomainError(
            "k-sparse blocks need k= (an int, or a fraction of each block's entries)"
            if k is None
            else f"k= applies to kind='k-sparse' only, not {kind!r}"
        )
    factor = _positive(factor, "factor")
    given: Mapping[str, float] = {}
    if isinstance(radius, Mapping):
        unknown = [n for n in radius if n not in params.names]
        if unknown:
            raise DomainError(f"radius names {unknown} that are not parameters of the module ({params.describe()})")
        given = radius
    elif radius is not None:
        given = dict.fromkeys(params.names, radius)
    norms = init_norms(module, draws) if any(n not in given for n in params.names) else {}
    blocks: dict[str, Set] = {}
    for name, shape, size in zip(params.names, params.shapes, params.numels):
        shape = shape or (1,)  # a 0-d parameter is a block of one entry
        count = None if k is None else _count(k, size, name)
        if name in given:
            r = given[name]
        else:
            a = norms[name]
            if a is None:
                raise DomainError(
                    f"parameter {name!r} belongs to a layer without reset_parameters(), so its initialization "
                    f"norm is not known; pass radius={{{name!r}: r}} (or a radius for every block)"
                )
            a = a or 1.0  # a zero initialization (a bias, a norm layer's shift): StochasticFrankWolfe's 1
            r = factor * a / {"l2": 1.0, "l1": 1.0, "linf": math.sqrt(size), "k-sparse": math.sqrt(count or 1)}[kind]
        blocks[name] = _block(kind, shape, r, count, name)
    return Product(blocks)


def _block(kind: str, shape: tuple[int, ...], r: Any, count: int | None, name: str) -> Set:
    r = check_radius(r, f"radius[{name!r}]")  # as the radius= dict names it
    if kind == "l2":
        return L2Ball(shape, r)
    if kind == "l1":
        return L1Ball(shape, r)
    if kind == "linf":
        return Box(-r, r, shape=shape)
    return KSparsePolytope(shape, count, r)


def _gauge(block: Set, p: np.ndarray) -> float:
    """The smallest t >= 0 with p in t X (X containing the origin): a closed form for the balls, else bisection."""
    a = np.abs(p)
    if isinstance(block, L2Ball):
        return _ratio(float(np.linalg.norm(p)), block.radius)
    if isinstance(block, L1Ball):
        return _ratio(float(a.sum()), block.radius)
    if isinstance(block, KSparsePolytope):
        return max(_ratio(float(a.max()), block.radius), _ratio(float(a.sum()), block.k * block.radius))
    with np.errstate(divide="ignore", invalid="ignore"):
        if isinstance(block, Box):
            ratios = np.where(p > 0, p / block.upper, np.where(p < 0, -p / np.abs(block.lower), 0.0))
            return float(np.nan_to_num(ratios, nan=math.inf).max())
    if block.contains(p):
        return 1.0
    lo, hi = 1.0, 2.0
    while not block.contains(p / hi):
        lo, hi = hi, 2 * hi
        if hi > 1e300:
            return math.inf
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if block.contains(p / mid) else (mid, hi)
    return hi


def _ratio(norm: float, radius: float) -> float:
    """norm / radius, with 0 / 0 = 0 (the origin lies in a ball of radius 0)."""
    if norm == 0:
        return 0.0
    return norm / radius if radius > 0 else math.inf


def _fit(block: Set, p: np.ndarray, method: str, name: str) -> np.ndarray:
    if block.contains(p, tol=1e-12):
        return p  # inside already (up to rounding): left exactly as it is
    if method == "project":
        return np.asarray(block.project(p), dtype=np.float64)
    if not block.contains_origin:
        raise DomainError(f"the block of {name!r} does not contain the origin, so rescaling cannot reach it")
    t = _gauge(block, p)
    if t <= 1:
        return p
    return np.zeros_like(p) if not math.isfinite(t) else p / t


@torch.no_grad()
def make_feasible(module: torch.nn.Module, domain: Set, method: str = "project") -> torch.nn.Module:
    """Move ``module``'s parameters into ``domain`` in place, so that the module is a feasible ``x0``.

    Parameters
    ----------
    module : torch.nn.Module
        The network; its parameters are overwritten (each keeps its dtype
        and device).
    domain : fullcomp set
        A named ``fc.Product`` with one block per parameter (as
        :func:`layer_domains` builds), moved into block by block, or any set
        of shape ``(size,)`` over the flat vector of the parameters.
    method : {"project", "rescale"}, default "project"
        ``"project"``: the Euclidean projection (a parameter already inside
        is left as it is).  ``"rescale"``: shrink each block's parameter
        towards 0 until it lies in the block (StochasticFrankWolfe's
        ``shift_inside``); for an l2 ball both agree, for the l1, l-infinity
        and k-sparse sets rescaling keeps the initialization's pattern of
        entries instead of zeroing or clipping some of them.  Rescaling
        needs blocks that contain the origin.

    Returns
    -------
    torch.nn.Module
        ``module``, with its parameters in ``domain``.

    Raises
    ------
    DomainError
        The domain does not fit the module's parameters (its blocks' names,
        order or sizes), a block that cannot tell a point inside (neither
        contains nor project of its own), or an unknown method.
    """

    if not isinstance(module, torch.nn.Module):
        raise DomainError(f"make_feasible needs a torch.nn.Module, got {type(module).__name__}")
    check_initialized(module, "make_feasible")
    if not isinstance(domain, Set):
        raise DomainError(f"domain must be a fullcomp set, got {type(domain).__name__}")
    if method not in ("project", "rescale"):
        raise DomainError(f"method must be 'project' or 'rescale', got {method!r}")
    params = Params(module, "module")
    params.check_domain(domain)
    flat = params.flat(torch.float64, "cpu").numpy()
    if isinstance(domain, Product):
        names = domain.names or [f"block {i}" for i in range(len(domain.blocks))]
        parts = [_fit(b, part, method, name) for b, part, name in zip(domain.blocks, domain.parts(flat), names)]
        moved = np.concatenate([part.ravel() for part in parts])
    else:
        moved = _fit(domain, flat, method, "the parameters")
    return params.load_into(module, torch.from_numpy(moved))


__all__ = ["layer_domains", "make_feasible", "init_norms"]
