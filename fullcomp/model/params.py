"""Variables given as a tensor, a dict of named tensors or a ``torch.nn.Module``, over one flat vector.

Algorithms work on one flat vector per block of variables; a :class:`Params` turns that vector back into
what the user's function expects (a reshaped tensor, a dict of views, or the module called through
``torch.func.functional_call``, so that gradients reach the vector) and into what a result returns (a
tensor, a dict, a copy of the module, or the values written into a module in place).  ``DMaxProblem``
uses it for x, y and z; ``CompositeProblem`` for an ``x0`` that is a module or a dict.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.func import functional_call

from fullcomp.errors import CheckpointError, DomainError, ModelError
from fullcomp.sets.base import Set
from fullcomp.sets.product import Product


class Bound:
    """A module whose parameters are the current iterate: call it like the module itself.

    ``phi(x, y, batch)`` (or a composite problem's ``inner(net, batch)``) receives one of these when
    ``x0`` is an ``nn.Module``; ``x(inputs)`` runs the module through ``torch.func.functional_call`` so
    gradients flow to the iterate.  ``x.params`` is the dict of parameter tensors (and buffers),
    ``x.module`` the module.
    """

    __slots__ = ("module", "params")

    def __init__(self, module: torch.nn.Module, params: dict[str, torch.Tensor]):
        self.module, self.params = module, params

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return functional_call(self.module, self.params, args, kwargs)

    def __repr__(self) -> str:
        return f"Bound({type(self.module).__name__}, {len(self.params)} tensors)"


class Params:
    """How one block of variables (x, y or z) maps to a flat vector and back."""

    def __init__(self, value: Any, name: str):
        self.name = name
        if isinstance(value, torch.nn.Module):
            self.kind = "module"
            self.module = value
            named = dict(value.named_parameters())
            for key, p in named.items():
                if not p.is_floating_point():
                    raise ModelError(
                        f"{name} is a module whose parameter {key!r} has dtype {p.dtype}; the variables must be "
                        f"floating-point: convert the module with {name}.float() or .double()"
                    )
                if not p.requires_grad:
                    # Refused rather than silently trained: the variable is every parameter of the module.
                    raise ModelError(
                        f"{name} is a module whose parameter {key!r} has requires_grad=False, but a module variable "
                        "is all its parameters and fullcomp would train it: call requires_grad_(True) on it, or "
                        f"pass {name} as a dict of the tensors to train and hold the frozen ones in the map"
                    )
                if not bool(torch.isfinite(p).all()):
                    raise ModelError(f"{name} has non-finite entries in parameter {key!r}; start from finite values")
            self.buffers = dict(value.named_buffers())
            self._cast_buffers: dict[tuple, dict[str, torch.Tensor]] = {}
            warn_random_layers(value, name)
        elif isinstance(value, Mapping):
            self.kind = "dict"
            named = {}
            for key, v in value.items():
                if not isinstance(key, str):
                    raise ModelError(f"{name} is a dict whose keys must be strings, got key {key!r}")
                named[key] = as_float_tensor(v, f"{name}[{key!r}]")
        else:
            self.kind = "tensor"
            named = {"": as_float_tensor(value, name)}
        if not named or sum(t.numel() for t in named.values()) == 0:
            raise ModelError(f"{name} has no entries to optimize; pass a non-empty tensor, dict of tensors or module")
        self.names = list(named)
        self.shapes = [tuple(t.shape) for t in named.values()]
        self.numels = [t.numel() for t in named.values()]
        self.size = sum(self.numels)
        self.initial = named

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first tensor, the first a check at the start point tries."""
        return next(iter(self.initial.values())).dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape, or ``(size,)`` for a dict or a module."""
        return self.shapes[0] if self.kind == "tensor" else (self.size,)

    def flat(self, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
        """The initial values as one flat vector (a fresh tensor, detached from the user's)."""
        parts = [t.detach().reshape(-1).to(device=device, dtype=dtype) for t in self.initial.values()]
        return torch.cat(parts).clone()

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: part.view(s) for n, part, s in zip(self.names, flat.split(self.numels), self.shapes)}

    def view(self, flat: torch.Tensor) -> Any:
        """What the user's function receives: views into ``flat``, so gradients reach it."""
        if self.kind == "tensor":
            return flat if flat.shape == self.shapes[0] else flat.view(self.shapes[0])
        params = self.split(flat)
        if self.kind == "dict":
            return params
        key = (flat.dtype, flat.device)
        if key not in self._cast_buffers:
            self._cast_buffers[key] = {k: cast_like(b, flat) for k, b in self.buffers.items()}
        return Bound(self.module, {**self._cast_buffers[key], **params})

    def build(self, flat: torch.Tensor) -> Any:
        """What a result holds: a tensor, a dict of tensors or a copy of the module with these values."""
        flat = flat.detach()
        if self.kind == "tensor":
            return flat.clone().view(self.shapes[0])
        params = {k: v.clone() for k, v in self.split(flat).items()}
        if self.kind == "dict":
            return params
        module = copy.deepcopy(self.module)
        module.to(device=flat.device, dtype=flat.dtype)
        with torch.no_grad():
            for key, p in module.named_parameters():
                p.copy_(params[key])
        return module

    def coerce(self, value: Any, dtype: torch.dtype, device: str | torch.device, what: str) -> torch.Tensor:
        """A user-given point of this block (same container, or a flat vector) as a flat vector."""
        if isinstance(value, Bound):
            value = value.params
        if isinstance(value, torch.nn.Module):
            value = dict(value.named_parameters())
        if isinstance(value, Mapping):
            missing = [n for n in self.names if n not in value]
            if missing:
                raise ModelError(f"{what} lacks the entries {missing} of {self.name}")
            return torch.cat([as_float_tensor(value[n], what).reshape(-1) for n in self.names]).to(device, dtype)
        t = as_float_tensor(value, what).reshape(-1).to(device, dtype)
        if t.numel() != self.size:
            raise ModelError(f"{what} has {t.numel()} entries but {self.name} has {self.size}")
        return t

    # -- a module or dict as one flat variable (CompositeProblem) ---------------------------------------

    def describe(self, limit: int = 4) -> str:
        """The named tensors and their shapes, e.g. ``0.weight (4, 3), 0.bias (4,), ...``."""
        parts = [f"{n} {s}" for n, s in zip(self.names[:limit], self.shapes[:limit])]
        more = len(self.names) - limit
        return ", ".join(parts) + (f" and {more} more" if more > 0 else "")

    def check_domain(self, domain: Set, set_name: str = "domain") -> None:
        """DomainError unless ``domain`` is a set over the flat vector; a named ``fc.Product``'s blocks must be
        the tensors, in order, each with the tensor's number of entries."""
        hint = "build it with fc.layer_domains(module, ...) or fc.Product({name: set, ...}) in the order of the names"
        if isinstance(domain, Product) and domain.names is not None:
            names = list(domain.names)
            for name in self.names:
                if name not in names:
                    raise DomainError(
                        f"{set_name} has no block for parameter {name!r} of {self.name} (its blocks: "
                        f"{names[:6]}{' ...' if len(names) > 6 else ''}); {hint}"
                    )
            for block in names:
                if block not in self.names:
                    raise DomainError(
                        f"{set_name} has a block {block!r} but {self.name} has no parameter of that name "
                        f"({self.describe()}); {hint}"
                    )
            for name, block in zip(self.names, names):
                if name != block:
                    raise DomainError(
                        f"{set_name}'s blocks are not in the order of {self.name}'s parameters: parameter "
                        f"{name!r} comes where {set_name} has block {block!r}; {hint}"
                    )
            for name, shape, numel, block in zip(self.names, self.shapes, self.numels, domain.blocks):
                if block.size != numel:
                    raise DomainError(
                        f"{set_name}'s block {name!r} has shape {block.shape} ({block.size} entries) but "
                        f"parameter {name!r} of {self.name} has shape {shape} ({numel} entries)"
                    )
            return
        if tuple(domain.shape) != (self.size,):
            raise DomainError(
                f"{self.name} has {self.size} entries ({self.describe()}) but {set_name} has shape "
                f"{tuple(domain.shape)}: the variable is the flat vector of the parameters, so {set_name} must "
                f"have shape ({self.size},); {hint}"
            )

    def flatten(self, value: Any, what: str) -> torch.Tensor:
        """A point given as a module, a ``Bound``, a dict by name or a flat vector, as a flat float64 tensor
        on the CPU; ModelError naming the parameter whose name or shape does not match."""
        if isinstance(value, Bound):
            value = value.params
        if isinstance(value, torch.nn.Module):
            value = dict(value.named_parameters())
        if isinstance(value, Mapping):
            parts = []
            for name, shape in zip(self.names, self.shapes):
                if name not in value:
                    raise ModelError(f"{what} has no parameter {name!r} of {self.name} ({self.describe()})")
                t = as_float_tensor(value[name], f"{what}[{name!r}]")
                if tuple(t.shape) != shape:
                    raise ModelError(
                        f"{what}'s parameter {name!r} has shape {tuple(t.shape)} but {self.name}'s has {shape}"
                    )
                parts.append(t.reshape(-1).to("cpu", torch.float64))
            return torch.cat(parts)
        t = as_float_tensor(value, what)
        if tuple(t.shape) != (self.size,):
            raise ModelError(
                f"{what} has shape {tuple(t.shape)}; pass the flat vector of shape ({self.size},) (a result's x), "
                f"a module or a dict of tensors ({self.describe()})"
            )
        return t.to("cpu", torch.float64)

    def load_into(self, module: torch.nn.Module, flat: Any) -> torch.nn.Module:
        """Write a flat point into ``module``'s parameters in place (each keeps its dtype and device)."""
        if not isinstance(module, torch.nn.Module):
            raise ModelError(f"load_into needs a torch.nn.Module to write into, got {type(module).__name__}")
        values = self.split(self.flatten(flat, "x"))
        targets = dict(module.named_parameters())
        for name, shape in zip(self.names, self.shapes):
            target = targets.get(name)
            if target is None:
                raise ModelError(f"the module has no parameter {name!r} of {self.name}; pass a module of that form")
            if tuple(target.shape) != shape:
                raise ModelError(f"the module's parameter {name!r} has shape {tuple(target.shape)}, not {shape}")
        extra = [name for name in targets if name not in values]
        if extra:
            raise ModelError(
                f"the module has parameters {extra[:4]} that {self.name} has not; pass a module of its form"
            )
        with torch.no_grad():
            for name, value in values.items():
                targets[name].copy_(value)
        return module


def as_float_tensor(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        t = value.detach()
    else:
        try:
            t = torch.as_tensor(np.asarray(value, dtype=np.float64))
        except (TypeError, ValueError):
            raise ModelError(
                f"{name} must be a tensor, a dict of tensors or a torch.nn.Module, got {type(value).__name__}"
            ) from None
    if t.is_complex():
        raise ModelError(f"{name} is complex; fullcomp works with real floating-point tensors")
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    if not bool(torch.isfinite(t).all()):
        raise ModelError(f"{name} has non-finite entries; start from finite values")
    return t


#: Layers that draw from torch's global generator in training mode.
RANDOM_LAYERS = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)


def warn_random_layers(module: torch.nn.Module, name: str) -> None:
    """A warning naming the module's dropout layers that draw in training mode: their masks come from torch's
    global generator, not from the run's seed, so a run does not repeat and a resume is not exact."""
    drawing = [
        f"{key or type(sub).__name__} (p={sub.p})"
        for key, sub in module.named_modules()
        if isinstance(sub, RANDOM_LAYERS) and sub.training and sub.p > 0
    ]
    if drawing:
        warnings.warn(
            f"{name} has dropout in training mode: {', '.join(drawing)}. Its masks are drawn from torch's global "
            "generator, not from the run's seed=, so the same seed gives different runs and a resume from a "
            f"checkpoint is not exact; call {name}.eval() for a repeatable run, or torch.manual_seed(...) before "
            "each run",
            UserWarning,
            stacklevel=4,
        )


class ModuleBuffers:
    """A module variable's buffers (BatchNorm's running statistics, ...) as a run's component: evaluations in
    training mode update them, so a checkpoint (and a Stepper's state_dict) holds them and a resume restores
    them."""

    def __init__(self, params: Params):
        self.params = params

    def _live(self) -> list[dict[str, torch.Tensor]]:
        """The buffers the evaluations update: the module's, and the cast copies the map reads at another dtype."""
        return [self.params.buffers, *self.params._cast_buffers.values()]

    def state_dict(self) -> dict:
        cast = list(self.params._cast_buffers.values())
        live = cast[-1] if cast else self.params.buffers
        return {key: b.detach().cpu().clone() for key, b in live.items()}

    def load_state_dict(self, state: dict) -> None:
        missing = sorted(set(self.params.buffers) - set(state or {}))
        if missing:
            raise CheckpointError(
                f"the saved state has no buffer {', '.join(map(repr, missing))} of {self.params.name}'s module; it "
                "was saved for another module"
            )
        for key, b in self.params.buffers.items():  # all checked before any is set
            if not isinstance(state[key], torch.Tensor) or tuple(state[key].shape) != tuple(b.shape):
                raise CheckpointError(
                    f"the saved buffer {key!r} of {self.params.name}'s module does not have the module's shape "
                    f"{tuple(b.shape)}; it was saved for another module"
                )
        with torch.no_grad():
            for buffers in self._live():
                for key, b in buffers.items():
                    b.copy_(state[key].to(device=b.device, dtype=b.dtype))


def cast_like(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        return t.to(device=like.device, dtype=like.dtype)
    return t.to(device=like.device)


__all__ = ["Bound", "ModuleBuffers", "Params", "as_float_tensor", "cast_like", "warn_random_layers"]
