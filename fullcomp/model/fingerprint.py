"""A fingerprint of a run's problem: its structure, its data, and what its callables do.

A checkpoint stores it so that a resume with another problem is caught.  The
structure is the shapes, the outer expression, every CVXPY parameter's value (keyed by its name or its
position, never its id, so a rebuilt identical problem matches) and
every set's defining numbers; the data hash covers the tensors and arrays
reachable from the problem's batches, start point and what its callables read
(the places dtype inference looks: :mod:`fullcomp.model.captured`).  A closure can
hide a number that no walk finds (``lambda x, b: A @ x - t``), so the problem's
behaviour is fingerprinted too: the maps' values and gradients at the start point,
in the run's dtype and device, on a probe batch the sampler draws from a generator
of its own.  The same script gives the same bits, so a resume is still accepted.
A sampler with a ``fingerprint()`` of its own (``fc.LoaderSampler``: the dataset's lengths,
``Subset`` indices, batching and a hash of a sample of its rows) adds it under ``loaders``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np
import torch

from fullcomp.model.captured import captured, collect, stateful_samplers

#: The probe batch's seed: fixed, and apart from any run's (a run's generator is never touched).
PROBE_SEED = 0x5EED


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


def set_numbers(domain: Any) -> str | None:
    """The kind and defining numbers of a set (radius, bounds, shape, ...) as a short text, or None."""
    if domain is None:
        return None
    h = hashlib.blake2b(digest_size=8)
    for name, value in sorted(vars(domain).items()):
        if name.startswith("_"):  # caches and work arrays, not the set
            continue
        if isinstance(value, (bool, int, float, str, tuple)) or value is None:
            h.update(f"{name}={value!r};".encode())
        elif isinstance(value, (np.ndarray, torch.Tensor)):
            h.update(name.encode() + data_hash(value).encode())
        elif hasattr(value, "parameters") and hasattr(value, "is_dcp"):  # a CVXPY expression or constraint
            h.update(f"{name}={expression_text([value])}{parameter_values([value])};".encode())
        elif isinstance(value, list):
            h.update(f"{name}={expression_text(value)}{parameter_values(value)};".encode())
    return f"{type(domain).__name__}:{h.hexdigest()}"


def leaf_names(expressions: list[Any]) -> dict[str, str]:
    """CVXPY's text names of the unnamed parameters and variables in ``expressions``, each mapped to its kind and
    position (``param[0]``, ``var[1]``).

    CVXPY names an unnamed leaf after its id (``param66``), which a rebuilt problem changes: a notebook that
    re-runs its cell makes a new ``cp.Parameter`` of the same value.  Positions in the expressions do not
    change, and a name the user gave is kept as it is.
    """
    names: dict[str, str] = {}
    for kind, walk in (("param", "parameters"), ("var", "variables")):
        count = 0
        for expr in expressions:
            for leaf in getattr(expr, walk, lambda: [])():
                own = leaf.name()
                if own not in names and own == f"{kind}{leaf.id}":
                    names[own], count = f"{kind}[{count}]", count + 1
    return names


def expression_text(expressions: list[Any]) -> str:
    """The expressions' text with unnamed leaves named by position (:func:`leaf_names`)."""
    names = leaf_names(expressions)
    text = "".join(str(e) for e in expressions)
    return re.sub(r"\b(?:param|var)\d+\b", lambda m: names.get(m.group(0), m.group(0)), text)


def parameter_values(expressions: list[Any]) -> dict[str, list]:
    """Every CVXPY parameter's value in ``expressions``, in the order the expressions hold them, keyed by its
    name when given and by its position otherwise (:func:`leaf_names`), never by its id."""
    names, found = leaf_names(expressions), {}
    for expr in expressions:
        for p in getattr(expr, "parameters", lambda: [])():
            key = names.get(p.name(), p.name())
            while key in found and found[key][0] is not p:  # two parameters given one name
                key += "'"
            found[key] = (p, None if p.value is None else np.asarray(p.value, dtype=float).tolist())
    return {key: value for key, (_, value) in found.items()}


def _values_hash(*tensors: torch.Tensor | None) -> str:
    h = hashlib.blake2b(digest_size=12)
    for t in tensors:
        if t is not None:
            h.update(np.ascontiguousarray(t.detach().cpu().double().numpy()).tobytes())
    return h.hexdigest()


def _value_and_gradient(fn: Any, point: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fn(point) and the gradient of a fixed weighting of its outputs (one backward pass, no compiler)."""
    x = point.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = fn(x)
        weights = torch.linspace(1.0, 2.0, out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape)
        try:
            (grad,) = torch.autograd.grad((out * weights).sum(), x, allow_unused=True)
        except RuntimeError:  # a map without a gradient there: its values still say what it does
            grad = None
    return out.detach(), grad


def behaviour(problem: Any, dtype: torch.dtype, device: torch.device) -> str:
    """A hash of what the problem's callables return at its start point on a probe batch (and of the batch)."""
    generator = torch.Generator(device=device).manual_seed(PROBE_SEED)
    samplers = stateful_samplers(problem)
    saved = {name: sampler.state_dict() for name, sampler in samplers.items()}
    try:
        for sampler in samplers.values():  # the probe draws what a fresh run would, wherever the sampler stands
            sampler.reset()
        return _probe(problem, dtype, device, generator)
    finally:  # ... and leaves it where it was
        for name, sampler in samplers.items():
            sampler.load_state_dict(saved[name])


def _probe(problem: Any, dtype: torch.dtype, device: torch.device, generator: torch.Generator) -> str:
    from fullcomp.model.composite import CompositeProblem

    if isinstance(problem, CompositeProblem):
        batch = problem.sample(generator)
        point = problem.x0 if problem.reads is None else problem.x0_at(problem.reads)
        start = torch.as_tensor(point, dtype=dtype, device=device)
        value, grad = _value_and_gradient(lambda v: problem.inner(v, batch), start)
        return _values_hash(value, grad) + data_hash(batch)
    from fullcomp.model.dmax import to_run

    batch, psi_batch = problem.sample(generator)
    batch, psi_batch = to_run(batch, dtype, device), to_run(psi_batch, dtype, device)
    x = problem.x.flat(dtype, device)
    duals = {name: (getattr(problem, name).flat(dtype, device) if getattr(problem, name) else None) for name in "yz"}
    parts = []
    for fn, dual, data in ((problem.phi_value, "y", batch), (problem.psi_value, "z", psi_batch)):
        if fn == problem.psi_value and problem.psi is None:
            continue
        block = getattr(problem, dual)
        other = None if duals[dual] is None else block.view(duals[dual])
        parts += _value_and_gradient(lambda v, fn=fn, other=other, data=data: fn(problem.x.view(v), other, data), x)
    return _values_hash(*parts) + data_hash(batch, psi_batch)


def loaders(problem: Any) -> dict:
    """The fingerprints of the problem's samplers that give one (``fc.LoaderSampler``), by attribute name;
    empty when none does."""
    found = {}
    for name, sampler in stateful_samplers(problem).items():
        if callable(getattr(sampler, "fingerprint", None)):
            found[name] = sampler.fingerprint()
    return {"loaders": found} if found else {}


def constraint_numbers(problem: Any) -> dict:
    """The constraints' text, penalty and parameters, for a problem that has any (others' fingerprints are
    left as they were)."""
    found = problem.constraints
    if found is None:
        return {}
    texts = [f"{name}: {item}" for name, item in zip(found.names, found.items)]
    return {"constraints": texts, "penalty": found.penalty, "constraint_parameters": parameter_values(found.items)}


def problem_fingerprint(problem: Any, dtype: torch.dtype | None = None, device: Any = "cpu") -> dict:
    """Kind, shapes, outer expression and its parameters, sets, data hash, loaders and behaviour of a problem.

    ``dtype`` and ``device`` are the run's: the behaviour is probed as the run would call the maps
    (None leaves the behaviour out).
    """
    from fullcomp.model.composite import CompositeProblem

    probe = {} if dtype is None else {"behaviour": behaviour(problem, dtype, torch.device(device))}
    probe.update(loaders(problem))
    if isinstance(problem, CompositeProblem):
        return {
            "kind": "CompositeProblem",
            "shape": list(problem.domain.shape),
            "domain": set_numbers(problem.domain),
            "n": problem.n,
            "outer": expression_text([problem.outer.expr]),
            "parameters": parameter_values([problem.outer.expr]),
            "reads": None if problem.reads is None else int(len(problem.reads)),
            "sharded": problem.sharded,
            "data": data_hash(*problem.maps, problem.sampler, problem.full_batch, problem._x0, problem.reads),
            **constraint_numbers(problem),
            **probe,
        }
    blocks = {name: getattr(problem, name) for name in ("x", "y", "z")}
    return {
        "kind": type(problem).__name__,
        "shapes": {k: None if p is None else [list(s) for s in p.shapes] for k, p in blocks.items()},
        "domain": {"Y": set_numbers(problem.Y), "Z": set_numbers(problem.Z)},
        "data": data_hash(
            problem.phi, problem.psi, problem.sampler, problem.full_batch, *(p.initial for p in blocks.values() if p)
        ),
        **probe,
    }
