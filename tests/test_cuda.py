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


@pytest.mark.parametrize("by_blocks", [False, True])
def test_the_nuclear_lmo_multiplies_on_the_gpu_of_a_cuda_run(by_blocks, monkeypatch):
    """Sparse Lanczos products through torch on the GPU: the same atom as scipy's, and used by a CUDA run
    (``by_blocks``: the block iteration of large patterns, its products on blocks of vectors)."""
    import cvxpy as cp
    import numpy as np

    import fullcomp as fc
    from fullcomp.sets import lanczos

    if by_blocks:
        monkeypatch.setattr(fc.sets.balls, "BLOCK_ENTRIES", 0)

    shape, groups, n = (120, 90), 3, 2000
    rng = np.random.default_rng(2)
    flat = np.sort(rng.choice(shape[0] * shape[1], n, replace=False))
    entries = fc.sets.atoms.Entries(flat, shape)
    direction = rng.standard_normal(n)
    X = fc.NuclearBall(shape, 2.0)
    start = X.lmo_bounded(rng.standard_normal(n), entries)[0]
    host, host_lower = X.lmo_bounded(direction, entries, hint=start)
    gpu, lower = X.lmo_bounded(direction, entries, hint=start, device=torch.device("cuda"))
    assert X._on_device[1].type == "cuda" and abs(lower - host_lower) <= 1e-7 * abs(host_lower)
    np.testing.assert_allclose(gpu.dense(), host.dense(), atol=1e-7)

    products = []
    real = lanczos.DeviceMatrix.__matmul__
    monkeypatch.setattr(lanczos.DeviceMatrix, "__matmul__", lambda self, x: products.append(1) or real(self, x))
    ratings = torch.tensor(rng.standard_normal(n), device="cuda")
    members = [torch.tensor(np.flatnonzero(np.arange(n) % groups == g), device="cuda") for g in range(groups)]

    def sampler(gen):
        return torch.stack([m[torch.randint(len(m), (16,), generator=gen, device="cuda")] for m in members])

    def loss(values, batch):
        return ((values - ratings[batch.reshape(-1)]) ** 2).reshape(batch.shape).mean(dim=1)

    problem = fc.CompositeProblem(
        cp.max(fc.inner_value(groups)), loss, X, sampler=sampler, reads=flat, touches=lambda b: b.reshape(-1)
    )
    res = fc.hmsfw(problem, iters=5, seed=1, progress=False)
    assert products and res.x_entries.is_cuda
    assert np.linalg.svd(res.x.cpu().numpy(), compute_uv=False).sum() <= 2.0 + 1e-8
