"""The GPU path: runs only where CUDA is present (CI has none; see docs/performance.md for what was measured)."""

from __future__ import annotations

import pytest
import torch
from contract_cases import composite, run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_the_deterministic_method_on_cuda_matches_the_cpu_run():
    # full_batch only, no sampling: the GPU run follows the CPU run up to floating-point sums.
    cpu = run("hmsfw-exact", iters=10)
    gpu = run("hmsfw-exact", iters=10, problem=composite(device="cuda"))  # the data's device is the default
    assert gpu.info["device"].startswith("cuda")
    assert torch.allclose(gpu.x.cpu(), cpu.x, rtol=0, atol=1e-8)


def replayed(device: str):
    """The contract's composite problem with batches that do not depend on the generator's device: drawn on the
    CPU from a counter, then moved, so a CUDA run sees the CPU run's batches."""
    import cvxpy as cp

    import fullcomp as fc

    A = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(device)
    step = [0]

    def sampler(gen):
        step[0] += 1
        return (0.05 * torch.randn(4, generator=torch.Generator().manual_seed(step[0]), dtype=torch.float64)).to(device)

    def inner(x, noise):
        return torch.nn.functional.softplus(A @ x - 0.5) + noise

    full = torch.zeros(4, dtype=torch.float64, device=device)
    return fc.CompositeProblem(cp.max(fc.inner_value(4)), inner, fc.L1Ball(10, 2.0), sampler=sampler, full_batch=full)


@pytest.mark.parametrize("method", ["hmsfw", "psg", "scfw"])
def test_stochastic_composite_methods_on_cuda_match_the_cpu_run(method):
    cpu = run(method, iters=10, seed=4, problem=replayed("cpu"))
    gpu = run(method, iters=10, seed=4, problem=replayed("cuda"))
    assert gpu.info["device"].startswith("cuda") and gpu.x.is_cuda
    assert torch.allclose(gpu.x.cpu(), cpu.x, rtol=0, atol=1e-8)
    for a, b in zip(gpu.history, cpu.history):
        assert a["objective_estimate"] == pytest.approx(b["objective_estimate"], rel=1e-8, abs=1e-10)


def test_dmax_methods_on_cuda_match_the_cpu_run():
    def problem():
        step = [0]

        def sampler(gen):  # the same batches on both devices; the run moves them to its device
            step[0] += 1
            return 1.0 + 0.1 * torch.randn(3, generator=torch.Generator().manual_seed(step[0]), dtype=torch.float64)

        def phi(x, y, b):
            return ((x["w"] - b) ** 2).sum() + (x["s"] ** 2).sum() + y @ x["w"] - 0.5 * (y @ y)

        import fullcomp as fc

        x0 = {"w": torch.zeros(3, dtype=torch.float64), "s": torch.ones(2, dtype=torch.float64)}
        return fc.DMaxProblem(phi, x0=x0, y0=torch.zeros(3, dtype=torch.float64), Y=fc.L2Ball(3, 5.0), sampler=sampler)

    cpu = run("smag", iters=10, seed=4, problem=problem())
    gpu = run("smag", iters=10, seed=4, device="cuda", problem=problem())  # batches and x0 move to the run
    assert gpu.info["device"].startswith("cuda") and gpu.status == "iterations"
    for key in ("w", "s"):
        assert torch.allclose(gpu.x[key].cpu(), cpu.x[key], rtol=0, atol=1e-8)


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


def _network(device: str):
    import cvxpy as cp

    import fullcomp as fc

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double().to(device)
    X = torch.randn(48, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(device)
    labels = torch.arange(48) % 3
    step = [0]

    def sampler(gen):  # the same rows on both devices: drawn on the CPU from a counter
        step[0] += 1
        return torch.randint(48, (12,), generator=torch.Generator().manual_seed(step[0])).to(device)

    def inner(net, rows):
        loss = torch.nn.functional.cross_entropy(net(X[rows]), labels.to(device)[rows], reduction="none")
        return torch.stack([loss[labels.to(device)[rows] == g].mean() for g in range(3)])

    domain = fc.layer_domains(model, "l2", factor=3.0)
    return fc.CompositeProblem(cp.max(fc.inner_value(3)), inner, domain, sampler=sampler, x0=model), model, inner


def test_a_network_problem_on_cuda_matches_the_cpu_run():
    import fullcomp as fc

    cpu = fc.solve(_network("cpu")[0], "hmsfw", iters=8, seed=1, progress=False)
    gpu = fc.solve(_network("cuda")[0], "hmsfw", iters=8, seed=1, progress=False)
    assert gpu.x.is_cuda and torch.allclose(gpu.x.cpu(), cpu.x, rtol=0, atol=1e-8)


def test_the_torch_optimizer_on_cuda_matches_the_cpu_run():
    import cvxpy as cp

    import fullcomp as fc

    points = {}
    for device in ("cpu", "cuda"):
        problem, model, inner = _network(device)
        opt = fc.optim.HMSFW(model.parameters(), cp.max(fc.inner_value(3)), problem.domain)
        for k in range(6):
            rows = torch.randint(48, (12,), generator=torch.Generator().manual_seed(100 + k)).to(device)
            opt.step(lambda rows=rows, inner=inner, model=model: inner(model, rows))
        points[device] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    assert torch.allclose(points["cuda"], points["cpu"], rtol=0, atol=1e-8)


def test_a_loader_sampler_feeds_a_cuda_run():
    import cvxpy as cp

    import fullcomp as fc

    data = torch.utils.data.TensorDataset(torch.randn(23, 4, dtype=torch.float64))
    xs = {}
    for device in ("cpu", "cuda"):
        loader = torch.utils.data.DataLoader(data, batch_size=5, shuffle=True)
        A = torch.randn(3, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(device)
        problem = fc.CompositeProblem(
            cp.max(fc.inner_value(3)),
            lambda x, batch, A=A, device=device: (batch[0].to(device) @ x[:4].reshape(4, 1)).mean() * A.sum(1),
            fc.L1Ball(4, 1.0),
            sampler=fc.LoaderSampler(loader),
        )
        result = fc.solve(problem, "hmsfw", iters=6, seed=3, device=device, progress=False)
        assert result.status == "iterations" and result.x.device.type == device
        xs[device] = result.x.cpu()
    # The epochs' order is drawn from each run's generator (a CUDA one draws another stream), so only the
    # feasibility of both points is compared.
    assert all(float(x.abs().sum()) <= 1.0 + 1e-9 for x in xs.values())


def test_closed_form_lmos_of_the_catalog_run_on_cuda_tensors():
    import fullcomp as fc

    d = torch.randn(12, dtype=torch.float64, device="cuda")
    for domain in (fc.CappedSimplex(12, 1.0, cap=0.25), fc.KSparsePolytope(12, 3, 1.0), fc.LpBall(12, 3.0, 1.0)):
        on_gpu = domain.lmo(d)
        assert on_gpu.is_cuda and torch.allclose(on_gpu.cpu(), torch.as_tensor(domain.lmo(d.cpu().numpy())))


@pytest.mark.parametrize("kept", ["by-the-glmo", "by-the-tracker"])
def test_layer_wise_group_gradients_and_the_dual_glmo_on_cuda_match_the_cpu_run(kept, monkeypatch):
    """fc.optim.HMSFW with per-row fc.Grouped losses through row-wise layers (the Jacobian of fullcomp.layerwise)
    and one l2 ball per layer (the dual GLMO, on V's device): the CUDA run follows the CPU run.  "by-the-tracker":
    V y kept by the tracker's recursion and the point formed by the step (BlockPoint), as on a large network."""
    import copy

    import cvxpy as cp

    import fullcomp as fc
    from fullcomp.glmo import dual
    from fullcomp.oracles import tracked

    if kept == "by-the-tracker":
        monkeypatch.setattr(tracked, "IMAGE_SIZE", 0)
        monkeypatch.setattr(dual, "NUMPY_SIZE", 0)

    torch.manual_seed(0)
    initial = torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 1)
    ).double()
    domain = fc.layer_domains(initial, "l2", factor=2.0)
    fc.make_feasible(initial, domain)
    X = torch.randn(6, 20, 1, 6, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = (torch.rand(6, 20, generator=torch.Generator().manual_seed(2)) < 0.5).double()
    groups = torch.arange(20) % 3
    points = {}
    for device in ("cpu", "cuda"):
        model = copy.deepcopy(initial).to(device)
        opt = fc.optim.HMSFW(model.parameters(), cp.max(fc.inner_value(3)), domain)
        for k in range(6):
            Xk, yk, gk = X[k].to(device), y[k].to(device), groups.to(device)

            def closure(model=model, Xk=Xk, yk=yk, gk=gk):
                logits = model(Xk).reshape(-1)
                losses = torch.nn.functional.binary_cross_entropy_with_logits(logits, yk, reduction="none")
                return fc.Grouped(losses, gk, 3)

            opt.step(closure)
        assert opt.stepper.plan.components["glmo"].route == "dual"
        assert (opt.stepper.state.revision.image is not None) == (kept == "by-the-tracker")
        points[device] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    assert torch.allclose(points["cuda"], points["cpu"], rtol=0, atol=1e-7)
