"""The ten failures users reported in issue 11, each reproduced as it was seen and now passing."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.cli import main
from fullcomp.errors import CallbackError, CheckpointError, ModelError, OptionError, OracleError

W = torch.rand(5, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def readme_problem(scale: float = 1.0, dim: int = 20, full_batch: bool = False) -> fc.CompositeProblem:
    """The README's CVaR problem; ``scale`` multiplies the targets (another problem of the same shape)."""
    targets = scale * torch.rand(5, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def group_losses(x, noise):
        return ((x - targets) ** 2).sum(dim=1) + noise @ x

    def sampler(gen):
        return 0.1 * torch.randn(5, dim, generator=gen, dtype=torch.float64)

    exact = torch.zeros(5, dim, dtype=torch.float64) if full_batch else None
    u = fc.inner_value(5)
    return fc.CompositeProblem(fc.cvar(u, 0.4), group_losses, fc.Simplex(dim), sampler=sampler, full_batch=exact)


# 1 ------------------------------------------------------------------------------------ stale checkpoints


def test_1_a_checkpoint_of_another_run_is_refused_with_what_differs(tmp_path):
    path = tmp_path / "c.ckpt"
    fc.hmsfw(readme_problem(0.5), iters=30, seed=0, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match=r"problem\."):
        fc.hmsfw(readme_problem(5.0), iters=30, seed=0, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match="seed was 0, now 1"):
        fc.hmsfw(readme_problem(0.5), iters=30, seed=1, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match=r"options\.variant was"):
        fc.hmsfw(readme_problem(0.5), iters=30, seed=0, variant="polyak", checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match=r"problem\."):  # another dimension: no raw RuntimeError
        fc.hmsfw(readme_problem(0.5, dim=5), iters=30, seed=0, checkpoint=path, progress=False)
    dmax = fc.DMaxProblem(lambda x, b: (x**2).sum(), psi=lambda x, b: x.abs().sum(), x0=torch.ones(2))
    with pytest.raises(CheckpointError, match="method was 'hmsfw', now 'smag'"):
        fc.smag(dmax, gamma=0.5, eta0=0.1, eta1=0.1, iters=3, checkpoint=path, progress=False)
    path.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="not a readable fullcomp checkpoint"):
        fc.hmsfw(readme_problem(0.5), iters=30, checkpoint=path, progress=False)
    fresh = fc.hmsfw(
        readme_problem(5.0), iters=3, checkpoint=fc.Checkpoint(path, on_mismatch="restart"), progress=False
    )
    assert "resumed_from" not in fresh.info


# 2 ------------------------------------------------------------------------------- checkpoints never run code


def test_2_loading_a_crafted_checkpoint_runs_no_code(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').close()",))

    path = tmp_path / "c.ckpt"
    torch.save({"format": "fullcomp-checkpoint-1", "fingerprint": {}, "run": Payload()}, path)
    with pytest.raises(CheckpointError):
        fc.Checkpoint(path).read()
    assert not marker.exists()


# 3 ------------------------------------------------------------------------------------------------ dtypes


def test_3_float32_data_need_no_casts_and_the_dtype_never_switches_silently():
    features = torch.randn(40, 6, generator=torch.Generator().manual_seed(1)).float()  # as the tabular loaders give
    labels = (features[:, 0] > 0).float()

    def group_losses(x, batch):
        margin = (2 * labels - 1) * (features @ x)
        return torch.stack(
            [torch.nn.functional.softplus(-margin[:20]).mean(), torch.nn.functional.softplus(-margin[20:]).mean()]
        )

    problem = fc.CompositeProblem(cp.max(fc.inner_value(2)), group_losses, fc.L2Ball(6, 3.0))
    assert problem.dtype == torch.float32
    result = fc.hmsfw(problem, iters=5, progress=False)
    assert result.x.dtype == torch.float32 and result.info["dtype"] == "torch.float32"
    with pytest.raises(OptionError, match="dtype=torch.float32 but the problem's data are torch.float64"):
        fc.hmsfw(readme_problem(), iters=2, dtype=torch.float32, progress=False)
    dmax = fc.DMaxProblem(
        lambda x, b: (x**2).sum(), psi=lambda x, b: x.abs().sum(), x0=torch.ones(2, dtype=torch.float64)
    )
    assert fc.smag(dmax, gamma=0.5, eta0=0.1, eta1=0.1, iters=3, progress=False).x.dtype == torch.float64


# 4 --------------------------------------------------------------------------- .item() breaks the Jacobian


def test_4_a_detached_inner_map_is_caught_at_construction():
    A = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    inner = lambda x, b: (A @ x) * float((x @ x).item()) + (x**2).sum()  # noqa: E731
    with pytest.raises(ModelError, match=r"\.item\(\)"):
        fc.CompositeProblem(cp.max(fc.inner_value(3)), inner, fc.L2Ball(4, 1.0))


# 5 ------------------------------------------------------------------------------ options checked for all


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_5_cuda_without_cuda_is_an_option_error_for_every_method():
    with pytest.raises(OptionError, match="CUDA is not available"):
        fc.hmsfw(readme_problem(), iters=2, device="cuda", progress=False)


def test_5_seeds_budgets_schedules_signatures_and_callbacks():
    problem = readme_problem()
    a = fc.hmsfw(problem, iters=3, seed=np.int64(3), progress=False)
    b = fc.hmsfw(problem, iters=3, seed=torch.Generator().manual_seed(3), progress=False)
    assert torch.equal(a.x, b.x)
    assert isinstance(fc.hmsfw(problem, iters=2, seed=None, progress=False).info["seed"], int)
    with pytest.raises(OptionError, match="seconds"):
        fc.hmsfw(problem, seconds="5", progress=False)
    with pytest.raises(OptionError, match="glmo_tol"):
        fc.hmsfw(problem, iters=2, glmo_tol="x", progress=False)
    constant = fc.Schedule(gamma=0.1, beta=0.5, rho=0.5)
    assert constant.at(7) == (0.1, 0.5, 0.5)
    fc.hmsfw(problem, iters=2, schedule=constant, progress=False)
    with pytest.raises(ModelError, match=r"inner\(x, batch\)"):
        fc.CompositeProblem(cp.max(fc.inner_value(5)), lambda x: x.sum(), fc.Simplex(20))
    with pytest.raises(ModelError, match=r"sampler\(generator\)"):
        fc.CompositeProblem(cp.max(fc.inner_value(5)), lambda x, b: x[:5], fc.Simplex(20), sampler=lambda: 0)

    def failing(it):
        if it.k == 2:
            raise RuntimeError("disk full")

    with pytest.raises(CallbackError) as caught:
        fc.hmsfw(problem, iters=10, callback=failing, progress=False)
    assert [r["k"] for r in caught.value.result.history] == [0, 1, 2] and caught.value.result.status == "error"


# 6 --------------------------------------------------------------------------------- finite rows are kept


def test_6_a_nan_at_iteration_1_keeps_iteration_0():
    calls = [0]

    def sampler(gen):
        calls[0] += 1
        noise = 0.1 * torch.randn(5, 20, generator=gen, dtype=torch.float64)
        return noise * float("nan") if calls[0] == 3 else noise  # construction, y_0, then y_1's sample

    u = fc.inner_value(5)
    problem = fc.CompositeProblem(
        fc.cvar(u, 0.4), lambda x, n: ((x - W) ** 2).sum(dim=1) + n @ x, fc.Simplex(20), sampler=sampler
    )
    calls[0] = 1
    with pytest.raises(OracleError) as caught:
        fc.hmsfw(problem, iters=10, progress=False)
    rows = caught.value.result.history.rows
    assert [r["k"] for r in rows] == [0] and np.isfinite(rows[0]["objective_estimate"])


# 7 ------------------------------------------------------------------------------------------ warm starts


def readme_optimum() -> tuple[np.ndarray, float]:
    x = cp.Variable(20)
    losses = cp.hstack([cp.sum_squares(x - W[i].numpy()) for i in range(5)])
    value = cp.Problem(cp.Minimize(fc.cvar(losses, 0.4)), [x >= 0, cp.sum(x) == 1]).solve(solver="CLARABEL")
    return x.value, value


def test_7_a_warm_start_keeps_its_weight():
    x_star, phi_star = readme_optimum()
    assert phi_star == pytest.approx(5.700387, abs=1e-5)
    problem = readme_problem(full_batch=True)
    x_star = np.clip(x_star, 0, None) / np.clip(x_star, 0, None).sum()
    for iters in (1, 2):  # was 6.1806 and 6.0457
        assert problem.objective(fc.hmsfw(problem, iters=iters, x0=x_star, progress=False).x) < phi_star + 1e-3
    first = fc.hmsfw(problem, iters=50, seed=0, progress=False)
    again = fc.hmsfw(problem, iters=50, seed=2, x0=first.x, progress=False)  # was 5.7019 -> 5.7067
    assert problem.objective(again.x) <= problem.objective(first.x) + 5e-4 * phi_star


# 8 ------------------------------------------------------------------------------- the true objective, status


def test_8_the_history_records_the_true_objective_and_the_result_a_status(tmp_path):
    problem = readme_problem(full_batch=True)
    result = fc.hmsfw(problem, iters=20, eval_every=5, progress=False)
    rows = result.history.rows
    assert [r["k"] for r in rows if "objective" in r] == [0, 5, 10, 15, 20]
    assert rows[-1]["objective"] == pytest.approx(problem.objective(result.x), rel=1e-12)
    assert result.status == "iterations"
    result.save(tmp_path / "run")
    loaded = fc.Result.load(tmp_path / "run")
    assert loaded.status == "iterations" and torch.equal(loaded.x, result.x)


# 9 ------------------------------------------------------------------------------------------------ the CLI

SCRIPT = """
import torch, fullcomp as fc

def build(args):
    return fc.DMaxProblem(lambda x, b: ((x - 1) ** 2).sum(), psi=lambda x, b: x.abs().sum(), x0=torch.zeros(3))
"""


def test_9_fullcomp_run_reaches_every_method_and_rejects_typos(tmp_path, capsys):
    script = tmp_path / "dc.py"
    script.write_text(SCRIPT)
    for method, settings in (
        ("smag", ["gamma=0.5", "eta0=0.1", "eta1=0.1"]),
        ("sdca", ["eta=0.1", "anchor_step=0.5", "inner_iters=2"]),
    ):
        out = tmp_path / method
        argv = ["run", str(script), "--method", method, "--iters", "4", "--no-progress", "--out", str(out)]
        assert main([*argv, "--set", *settings]) == 0
        assert fc.Result.load(out).info["method"] == method
    with pytest.raises(SystemExit) as caught:
        main(["run", str(script), "--sead", "5", "--iters", "3"])
    assert caught.value.code == 2 and "did you mean --seed" in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert (
        main(
            [
                "run",
                str(script),
                "--iters",
                "2",
                "--set",
                "gamma=0.5",
                "eta0=0.1",
                "eta1=0.1",
                "--out",
                str(blocked / "out"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0]


# 10 --------------------------------------------------------------------------------- the GLMO says if tol met


def test_10_a_glmo_says_whether_its_tolerance_was_met():
    rng = np.random.default_rng(0)
    problem = fc.CompositeProblem(
        cp.max(fc.inner_value(4)), lambda x, b: x.reshape(-1)[:4], fc.NuclearBall((6, 5), 1.0)
    )
    glmo = fc.build_glmo(problem.outer, problem.domain, route="colgen")
    z, V, y = rng.normal(size=4), rng.normal(size=(4, 30)), np.zeros(30)
    loose = glmo.solve(z, V, y, tol=1e-3)
    assert loose.converged and loose.gap_bound <= 1e-3
    capped = glmo.solve(z, V, y, tol=1e-14, max_calls=2)
    assert not capped.converged and capped.gap_bound > 1e-14
