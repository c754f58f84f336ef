"""Oracles: values and Jacobians of the inner map, the entry map, and the tracked model built on them."""

from fullcomp.autodiff import (
    BatchJacobian,
    call_checked,
    check_directional_derivative,
    check_inner_output,
    check_touched,
    dense,
)
from fullcomp.oracles.entries import EntryMap
from fullcomp.oracles.jacobian import InnerOracle
from fullcomp.oracles.tracked import Tracked, TrackedModel

__all__ = [
    "BatchJacobian",
    "EntryMap",
    "InnerOracle",
    "Tracked",
    "TrackedModel",
    "call_checked",
    "check_directional_derivative",
    "check_inner_output",
    "check_touched",
    "dense",
]
