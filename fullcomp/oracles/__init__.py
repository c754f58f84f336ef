"""Oracles: values and Jacobians of the inner map."""

from fullcomp.autodiff import (
    BatchJacobian,
    call_checked,
    check_directional_derivative,
    check_inner_output,
    check_touched,
    dense,
)
from fullcomp.oracles.jacobian import InnerOracle

__all__ = [
    "BatchJacobian",
    "InnerOracle",
    "call_checked",
    "check_directional_derivative",
    "check_inner_output",
    "check_touched",
    "dense",
]
