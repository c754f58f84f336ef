"""A fingerprint of a run's problem: shapes, dtype, outer function and a hash of the data the callables close over.

A checkpoint stores it so that a resume with another problem is caught.  The
data hash covers the tensors and arrays reachable from the problem's batches,
start point and the closures of its callables (one level of closure cells,
``functools.partial`` arguments, bound objects, module parameters and buffers);
data read from elsewhere at call time cannot be seen and is not covered.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch


def reachable_arrays(obj: Any, depth: int = 2, seen: set[int] | None = None) -> Iterator[Any]:
    """Tensors and numpy arrays inside ``obj``: containers, closures, partials, bound objects, modules."""
    seen = set() if seen is None else seen
    if id(obj) in seen or obj is None:
        return
    seen.add(id(obj))
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        yield obj
        return
    if depth < 0 or isinstance(obj, (str, bytes, int, float, bool, type)):
        return
    if isinstance(obj, torch.nn.Module):
        yield from obj.parameters()
        yield from obj.buffers()
        return
    if isinstance(obj, Mapping):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = list(obj)
    elif isinstance(obj, functools.partial):
        children = [obj.func, *obj.args, *obj.keywords.values()]
    elif callable(obj):
        closure = getattr(obj, "__closure__", None) or ()
        children = [cell.cell_contents for cell in closure if _filled(cell)]
        children += [getattr(obj, "__self__", None)]
        if not hasattr(obj, "__code__") and hasattr(obj, "__dict__"):  # a callable object: its attributes
            children += list(vars(obj).values())
    else:
        children = list(getattr(obj, "__dict__", {}).values())
    for child in children:
        yield from reachable_arrays(child, depth - 1, seen)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises ValueError
    except ValueError:
        return False
    return True


def data_hash(*objects: Any) -> str:
    """A short hash of every array reachable from ``objects`` (shapes, dtypes and values)."""
    h = hashlib.blake2b(digest_size=12)
    seen: set[int] = set()
    for obj in objects:
        for a in reachable_arrays(obj, seen=seen):
            array = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a
            if array.dtype == object:
                continue
            h.update(f"{array.dtype}{array.shape}".encode())
            h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def problem_fingerprint(problem: Any) -> dict:
    """Kind, shapes, dtype, outer expression and data hash of a CompositeProblem or DMaxProblem."""
    from fullcomp.model.composite import CompositeProblem

    if isinstance(problem, CompositeProblem):
        return {
            "kind": "CompositeProblem",
            "shape": list(problem.domain.shape),
            "domain": type(problem.domain).__name__ + repr(getattr(problem.domain, "radius", "")),
            "n": problem.n,
            "outer": str(problem.outer.expr),
            "reads": None if problem.reads is None else int(len(problem.reads)),
            "data": data_hash(problem.inner, problem.sampler, problem.full_batch, problem._x0, problem.reads),
        }
    blocks = {name: getattr(problem, name) for name in ("x", "y", "z")}
    return {
        "kind": type(problem).__name__,
        "shapes": {k: None if p is None else [list(s) for s in p.shapes] for k, p in blocks.items()},
        "data": data_hash(
            problem.phi, problem.psi, problem.sampler, problem.full_batch, *(p.initial for p in blocks.values() if p)
        ),
    }
