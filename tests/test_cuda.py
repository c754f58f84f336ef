"""The GPU path: runs only where CUDA is present (CI has none; see docs/performance.md for what was measured)."""

from __future__ import annotations

import pytest
import torch
from contract_cases import composite, minimax, run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_the_deterministic_method_on_cuda_matches_the_cpu_run():
    # full_batch only, no sampling: the GPU run follows the CPU run up to floating-point sums.
    cpu = run("hmsfw-exact", iters=10)
    gpu = run("hmsfw-exact", iters=10, problem=composite(device="cuda"))  # the data's device is the default
    assert gpu.info["device"].startswith("cuda")
    assert torch.allclose(gpu.x.cpu(), cpu.x, rtol=0, atol=1e-8)


def test_stochastic_composite_methods_on_cuda():
    for method in ("hmsfw", "psg"):
        gpu = run(method, iters=10, seed=4, problem=composite(device="cuda"))
        assert gpu.status == "iterations" and gpu.x.is_cuda


def test_dmax_methods_on_cuda():
    result = run("smag", iters=10, seed=4, device="cuda", problem=minimax())  # batches and x0 move to the run
    assert result.info["device"].startswith("cuda") and result.status == "iterations"
