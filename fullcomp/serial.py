"""Run state as plain data: what a checkpoint holds, and how it is read back without unpickling objects.

``encode`` turns a run state (dicts, lists, tuples, tensors, numpy arrays and
scalars, and the classes registered with :func:`encodable`: atoms, tracker revisions) into a tree of containers,
tensors and Python scalars only, which ``torch.load(weights_only=True)`` reads
without running code.  Objects are written as tagged dicts of their fields,
and only the classes in :data:`ALLOWED` are rebuilt; an object shared by two
places (an atom in the pool and in the iterate's atomic form) is written once
and comes back shared.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

#: Classes a checkpoint may rebuild, by tag: each registers itself with :func:`encodable`, so this layer knows
#: no domain type.  Their fields must themselves be encodable.
ALLOWED: dict[str, type] = {}


def encodable(cls: type) -> type:
    """Class decorator: a checkpoint may hold instances of ``cls`` (written as their fields, rebuilt without
    ``__init__``); the name must be unique among encodable classes."""
    if ALLOWED.setdefault(cls.__name__, cls) is not cls:
        raise TypeError(f"another encodable class is named {cls.__name__}")
    return cls


_TAG, _REF, _ARRAY, _TUPLE, _NUMPY_SCALAR = "__object__", "__ref__", "__ndarray__", "__tuple__", "__npscalar__"


def missing_fields(template: Any, state: Any) -> list[str]:
    """What a decoded run state lacks that a method's own state has: its keys or dataclass fields, or its type."""
    if isinstance(template, dict) and isinstance(state, dict):
        return [f"state field {key!r}" for key in template if key not in state]
    if type(template) is not type(state):  # e.g. written by another version of the method
        return [f"{type(template).__name__} state (it holds a {type(state).__name__})"]
    if dataclasses.is_dataclass(template):
        return [f"state field {f.name!r}" for f in dataclasses.fields(template) if f.name not in vars(state)]
    return []


def encode(value: Any, memo: dict[int, int] | None = None) -> Any:
    memo = {} if memo is None else memo
    if isinstance(value, np.generic):  # before the Python numbers: np.float64 is a float subclass
        return {_NUMPY_SCALAR: value.item(), "dtype": str(value.dtype)}
    if value is None or isinstance(value, (bool, int, float, str, complex, torch.Tensor, torch.Size)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError("a checkpoint cannot hold numpy object arrays")
        return {_ARRAY: torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, dict):
        return {key: encode(v, memo) for key, v in value.items()}
    if isinstance(value, list):
        return [encode(v, memo) for v in value]
    if isinstance(value, tuple):
        return {_TUPLE: [encode(v, memo) for v in value]}
    name = type(value).__name__
    if ALLOWED.get(name) is type(value):
        if id(value) in memo:
            return {_REF: memo[id(value)]}
        memo[id(value)] = len(memo)
        return {_TAG: name, "ref": memo[id(value)], "fields": encode(vars(value), memo)}
    raise TypeError(f"a checkpoint cannot hold a {name}; keep run state in tensors, arrays, numbers and containers")


def decode(tree: Any, memo: dict[int, Any] | None = None) -> Any:
    memo = {} if memo is None else memo
    if isinstance(tree, list):
        return [decode(v, memo) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if _ARRAY in tree and len(tree) == 1:
        return tree[_ARRAY].numpy()
    if _NUMPY_SCALAR in tree and len(tree) == 2:
        return np.dtype(tree["dtype"]).type(tree[_NUMPY_SCALAR])
    if _TUPLE in tree and len(tree) == 1:
        return tuple(decode(v, memo) for v in tree[_TUPLE])
    if _REF in tree and len(tree) == 1:
        return memo[tree[_REF]]
    if _TAG in tree:
        cls = ALLOWED.get(tree[_TAG])
        if cls is None:
            raise ValueError(f"unknown object type {tree[_TAG]!r}")
        obj = cls.__new__(cls)
        memo[tree["ref"]] = obj
        obj.__dict__.update(decode(tree["fields"], memo))
        return obj
    return {key: decode(v, memo) for key, v in tree.items()}


__all__ = ["encode", "decode", "encodable", "missing_fields", "ALLOWED"]
