"""A fingerprint of a run's problem: shapes, dtype, outer function and a hash of the data the callables close over.

A checkpoint stores it so that a resume with another problem is caught.  The
data hash covers the tensors and arrays reachable from the problem's batches,
start point and what its callables read (the places dtype inference looks:
:mod:`fullcomp.model.captured`); data read from elsewhere at call time cannot
be seen and is not covered.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from fullcomp.model.captured import captured, collect


def data_hash(*objects: Any) -> str:
    """A short hash of every tensor and array reachable from ``objects`` (shapes, dtypes and values);
    a callable stands for what it reads (:func:`fullcomp.model.captured.captured`)."""
    h, seen = hashlib.blake2b(digest_size=12), set()

    def note(a: Any) -> None:
        array = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a
        if id(a) in seen or array.dtype == object:
            return
        seen.add(id(a))
        h.update(f"{array.dtype}{array.shape}".encode())
        h.update(np.ascontiguousarray(array).tobytes())

    for obj in objects:
        collect(captured(obj) if callable(obj) and not isinstance(obj, torch.nn.Module) else obj, note)
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
            "sharded": problem.sharded,
            "data": data_hash(*problem.maps, problem.sampler, problem.full_batch, problem._x0, problem.reads),
        }
    blocks = {name: getattr(problem, name) for name in ("x", "y", "z")}
    return {
        "kind": type(problem).__name__,
        "shapes": {k: None if p is None else [list(s) for s in p.shapes] for k, p in blocks.items()},
        "data": data_hash(
            problem.phi, problem.psi, problem.sampler, problem.full_batch, *(p.initial for p in blocks.values() if p)
        ),
    }
