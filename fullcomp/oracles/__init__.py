"""Oracles: values and Jacobians of the inner map."""

from fullcomp.oracles.jacobian import InnerOracle, check_inner_output

__all__ = ["InnerOracle", "check_inner_output"]
