"""Oracles: values and Jacobians of the inner map."""

from fullcomp.oracles.jacobian import InnerOracle, call_checked, check_directional_derivative, check_inner_output

__all__ = ["InnerOracle", "call_checked", "check_directional_derivative", "check_inner_output"]
