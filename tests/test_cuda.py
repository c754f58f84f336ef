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


def test_a_map_on_the_touched_entries_runs_on_cuda():
    """The structured path with sparse sampled Jacobians: trackers on the GPU, the GLMO on the host."""
    import cvxpy as cp
    import numpy as np

    import fullcomp as fc

    P, Q, groups = 6, 8, 3
    rng = np.random.default_rng(5)
    reads = np.sort(rng.choice(P * Q, 30, replace=False))
    ratings = torch.tensor(rng.standard_normal(30), device="cuda")
    members = [torch.tensor(np.flatnonzero(np.arange(30) % groups == g), device="cuda") for g in range(groups)]

    def sampler(gen):
        return torch.stack([m[torch.randint(len(m), (4,), generator=gen, device="cuda")] for m in members])

    def loss(values, batch):
        return ((values - ratings[batch.reshape(-1)]) ** 2).reshape(batch.shape).mean(dim=1)

    problem = fc.CompositeProblem(
        cp.max(fc.inner_value(groups)),
        loss,
        fc.NuclearBall((P, Q), 2.0),
        sampler=sampler,
        reads=reads,
        touches=lambda batch: batch.reshape(-1),
    )
    res = fc.hmsfw(problem, iters=10, seed=1, progress=False)
    assert res.status == "iterations" and res.x_entries.is_cuda and res.V.is_cuda
    assert np.linalg.svd(res.x.cpu().numpy(), compute_uv=False).sum() <= 2.0 + 1e-8
