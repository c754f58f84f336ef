"""The GPU path: runs only where CUDA is present (CI has none; see docs/performance.md for what was measured)."""

from __future__ import annotations

import pytest
import torch
from contract_cases import composite, minimax, run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_composite_methods_on_cuda_match_the_cpu_run():
    for method in ("hmsfw", "psg"):
        cpu = run(method, iters=10, seed=4)
        gpu = run(method, iters=10, seed=4, problem=composite(device="cuda"))  # the data's device is the default
        assert gpu.info["device"].startswith("cuda")
        # The samplers draw from a CUDA generator on the GPU, so the streams differ: compare the objective.
        assert abs(gpu.history[-1]["objective"] - cpu.history[-1]["objective"]) < 0.5


def test_dmax_methods_on_cuda():
    result = run("smag", iters=10, seed=4, device="cuda", problem=minimax())  # batches and x0 move to the run
    assert result.info["device"].startswith("cuda") and result.status == "iterations"
