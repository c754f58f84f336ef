"""Oracles: values and Jacobians of the inner map, the entry map, the tracked model built on them, and the sampled
(sub)gradients of a DMax problem's phi and psi (:class:`DMaxOracle`)."""

from fullcomp.autodiff import (
    BatchJacobian,
    call_checked,
    check_directional_derivative,
    check_inner_output,
    check_touched,
    dense,
)
from fullcomp.oracles.dmax import DMaxOracle
from fullcomp.oracles.entries import EntryMap
from fullcomp.oracles.jacobian import InnerOracle
from fullcomp.oracles.tracked import Tracked, TrackedModel

__all__ = [
    "BatchJacobian",
    "DMaxOracle",
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
