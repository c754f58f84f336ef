"""Oracles: values and Jacobians of the inner map."""

from fullcomp.oracles.jacobian import (
    BatchJacobian,
    InnerOracle,
    call_checked,
    check_directional_derivative,
    check_inner_output,
    check_touched,
    dense,
)

__all__ = [
    "BatchJacobian",
    "InnerOracle",
    "call_checked",
    "check_directional_derivative",
    "check_inner_output",
    "check_touched",
    "dense",
]
