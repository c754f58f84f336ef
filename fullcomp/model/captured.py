"""What a problem's callables read besides their arguments, and the tensors and arrays in it.

The dtype and device of a problem's data, and the data a checkpoint's fingerprint hashes, are read
from the same places: closure cells, referenced module globals, ``functools.partial`` arguments,
bound objects and callable objects' attributes, then containers, dataclasses and modules inside them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch


def floating_dtypes(value: Any, depth: int = 4) -> dict[torch.dtype, bool]:
    """Floating dtypes of the tensors in ``value`` (a tensor, a module, containers and dataclasses of them).

    Each maps to whether a tensor with at least one dimension has it: as in torch's type promotion,
    a 0-d tensor (a flag, a temperature) does not decide the dtype of a result when others have dims.
    """
    found: dict[torch.dtype, bool] = {}

    def note(t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            found[t.dtype] = found.get(t.dtype, False) or t.dim() > 0

    collect(value, note, depth)
    return found


def data_device(values: Iterable[Any], depth: int = 4) -> torch.device:
    """Where the floating tensors in ``values`` live: the first device other than the CPU, else the CPU."""
    devices: list[torch.device] = []

    def note(t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.device.type != "cpu":
            devices.append(t.device)

    for value in values:
        collect(value, note, depth)
        if devices:
            return devices[0]
    return torch.device("cpu")


def collect(value: Any, note: Callable[[Any], None], depth: int = 4) -> None:
    """Call ``note`` on every tensor and numpy array inside ``value`` (containers, dataclasses, modules)."""
    _collect(value, note, depth, set(), [10_000])


def _collect(value: Any, note: Callable, depth: int, seen: set[int], budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        return  # a huge nested container: what was seen so far decides
    if isinstance(value, (torch.Tensor, np.ndarray)):
        note(value)
        return
    if isinstance(value, torch.nn.Module):
        for t in itertools.chain(value.parameters(), value.buffers()):
            note(t)
        return
    if depth <= 0 or id(value) in seen or isinstance(value, (str, bytes, int, float, type)):
        return
    seen.add(id(value))
    items: Iterable[Any]
    if isinstance(value, Mapping):
        items = value.values()
    elif isinstance(value, (tuple, list, set, frozenset)):
        items = value
    elif dataclasses.is_dataclass(value):
        # Fields left out of equality (compare=False) are caches and work arrays, not the data.
        items = (getattr(value, f.name, None) for f in dataclasses.fields(value) if f.compare)
    else:
        return
    for item in itertools.islice(items, 1000):
        _collect(item, note, depth - 1, seen, budget)


def captured(fn: Any, depth: int = 2) -> list[Any]:
    """What a callable reads besides its arguments, one level deep.

    The closure cells and referenced module globals of a function, the arguments of a
    ``functools.partial``, the ``__self__`` of a bound method (and its attributes), the attributes
    of a callable object; a function found there is opened in turn while ``depth`` lasts.
    """
    out: list[Any] = []
    _captured(fn, depth, out, set())
    return out


def _attributes(obj: Any) -> list[Any]:
    if isinstance(obj, (torch.nn.Module, torch.Tensor)):
        return [obj]
    if isinstance(obj, (types.ModuleType, type)) or not hasattr(obj, "__dict__"):
        return []
    try:
        return list(vars(obj).values())
    except TypeError:
        return []


def _global_names(code: types.CodeType) -> list[str]:
    """Names a code object reads as globals or attributes, with those of nested code (comprehensions, lambdas)."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return names


def _captured(fn: Any, depth: int, out: list[Any], seen: set[int]) -> None:
    if depth <= 0 or id(fn) in seen:
        return
    seen.add(id(fn))
    if isinstance(fn, functools.partial):
        out.extend(fn.args)
        out.extend(fn.keywords.values())
        _captured(fn.func, depth, out, seen)
        return
    owner = getattr(fn, "__self__", None)
    if owner is not None and isinstance(fn, (types.MethodType, types.BuiltinMethodType)):
        out.extend(_attributes(owner))  # a bound method: its object's tensors (or the tensor, for A.matmul)
    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if isinstance(func, types.FunctionType):
        inner_values = []
        for cell in func.__closure__ or ():
            try:
                inner_values.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        names = func.__globals__
        inner_values += [names[n] for n in _global_names(func.__code__) if n in names]
        for v in inner_values:
            if isinstance(v, (types.FunctionType, types.MethodType, functools.partial)):
                _captured(v, depth - 1, out, seen)
            elif not isinstance(v, (types.ModuleType, type)):
                out.append(v)
    elif callable(fn) and not isinstance(fn, (types.BuiltinFunctionType, types.ModuleType, type)):
        out.extend(_attributes(fn))  # a callable object (an nn.Module counts as its tensors)


def stateful_samplers(problem: Any) -> dict[str, Any]:
    """The problem's samplers that keep a state of their own (a data loader's position in its epoch): those with
    ``reset``, ``state_dict`` and ``load_state_dict``."""
    found = {}
    for name in ("sampler", "psi_sampler"):
        sampler = getattr(problem, name, None)
        if all(callable(getattr(sampler, m, None)) for m in ("reset", "state_dict", "load_state_dict")):
            found[name] = sampler
    return found
