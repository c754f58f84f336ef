"""Cartesian products of sets over one flat vector."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import cvxpy as cp
import numpy as np

from fullcomp.errors import DomainError
from fullcomp.sets.base import Set


class Product(Set):
    """X_1 x ... x X_m over a flat vector: x = (vec x_1, ..., vec x_m), each block row-major in its own shape.

    ``Product(A, B)`` for positional blocks, ``Product({"w": A, "X": B})`` for named ones. A linear function
    splits over the blocks, so the LMO is the concatenation of the blocks' LMOs, and so are the projection and
    the constraints; the diameter is sqrt(sum of the blocks' squared diameters). ``split(x)`` gives the blocks
    of a point (a list, or a dict for named blocks), ``join(parts)`` the flat point.
    """

    def __init__(self, *blocks: Set | Mapping[str, Set]):
        names: tuple[str, ...] | None = None
        if len(blocks) == 1 and isinstance(blocks[0], Mapping):
            named = dict(blocks[0])
            if not all(isinstance(k, str) for k in named):
                raise DomainError(f"Product's block names must be strings, got {list(named)!r}")
            names, blocks = tuple(named), tuple(named.values())
        if not blocks:
            raise DomainError("Product needs at least one block, e.g. fc.Product(fc.Simplex(3), fc.L2Ball(2))")
        for i, block in enumerate(blocks):
            if not isinstance(block, Set):
                label = names[i] if names else i
                raise DomainError(
                    f"Product block {label!r} must be a fullcomp set (fc.Set), got {type(block).__name__}; "
                    "wrap constraints in fc.ConvexSet(shape, constraints)"
                )
        self.blocks: tuple[Set, ...] = tuple(blocks)
        self.names = names
        bounds = np.cumsum([0] + [b.size for b in self.blocks])
        self.slices = tuple(slice(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]))
        self.shape = (int(bounds[-1]),)
        # Column generation calls the LMO many times per GLMO: fine when every block's LMO is cheap.
        self.cheap_lmo = all(b.cheap_lmo for b in self.blocks)
        self.polytope = all(b.polytope for b in self.blocks)  # its LMO returns vertices when every block's does

    def parts(self, x: np.ndarray) -> list[np.ndarray]:
        """The blocks of a flat point, each in its block's shape."""
        return [x[s].reshape(b.shape) for s, b in zip(self.slices, self.blocks)]

    def split(self, x: Any) -> list[Any] | dict[str, Any]:
        """The blocks of a flat point (numpy or torch), as a list or, for named blocks, a dict."""
        if tuple(x.shape) != self.shape:
            raise DomainError(f"Product has shape {self.shape}, got a point of shape {tuple(x.shape)}")
        parts = [x[s].reshape(b.shape) for s, b in zip(self.slices, self.blocks)]
        return dict(zip(self.names, parts)) if self.names else parts

    def join(self, parts: list[Any] | Mapping[str, Any]) -> np.ndarray:
        """The flat point of given blocks (a list in block order, or a dict by name)."""
        if isinstance(parts, Mapping):
            if self.names is None or set(parts) != set(self.names):
                raise DomainError(f"join needs the blocks {list(self.names or [])!r} by name, got {list(parts)!r}")
            parts = [parts[n] for n in self.names]
        if len(parts) != len(self.blocks):
            raise DomainError(f"join needs {len(self.blocks)} blocks, got {len(parts)}")
        flat = []
        for part, block in zip(parts, self.blocks):
            part = np.asarray(part.detach().cpu() if hasattr(part, "detach") else part, dtype=np.float64)
            if part.size != block.size:
                raise DomainError(f"a block of shape {block.shape} got a part of shape {part.shape}")
            flat.append(part.ravel())
        return np.concatenate(flat)

    @property
    def has_project(self) -> bool:
        return all(b.has_project for b in self.blocks)

    @property
    def diameter(self) -> float:
        return math.sqrt(sum(float(b.diameter) ** 2 for b in self.blocks))

    def lmo(self, d: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [np.asarray(b.lmo_unchecked(part), dtype=np.float64).ravel() for b, part in zip(self.blocks, self.parts(d))]
        )

    def project(self, p: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [np.asarray(b.project(part), dtype=np.float64).ravel() for b, part in zip(self.blocks, self.parts(p))]
        )

    def contains(self, point, tol: float = 1e-9) -> bool:
        p = np.asarray(point, dtype=float)  # a tensor comes as numpy (adapt_contains)
        if p.shape != self.shape:
            return False
        return all(b.contains(part, tol) for b, part in zip(self.blocks, self.parts(p)))

    @property
    def contains_origin(self) -> bool:
        return all(b.contains_origin for b in self.blocks)

    def default_point(self) -> np.ndarray:
        return np.concatenate([np.asarray(b.default_point(), dtype=np.float64).ravel() for b in self.blocks])

    def cvxpy_constraints(self, var):
        cons: list[cp.Constraint] = []
        for s, block in zip(self.slices, self.blocks):
            part = var[s]
            if len(block.shape) != 1:
                part = cp.reshape(part, block.shape, order="C")
            cons += list(block.cvxpy_constraints(part))
        return cons

    def __repr__(self) -> str:
        if self.names:
            return "Product({" + ", ".join(f"{n!r}: {b!r}" for n, b in zip(self.names, self.blocks)) + "})"
        return "Product(" + ", ".join(repr(b) for b in self.blocks) + ")"


__all__ = ["Product"]
