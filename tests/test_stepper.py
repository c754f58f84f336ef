"""fc.Stepper: every registered method one update at a time, with the iterates of fc.solve."""

from __future__ import annotations

import io

import pytest
import torch
from contract_cases import CASES, composite, minimax

import fullcomp as fc
from fullcomp.errors import CheckpointError, OptionError

METHODS = sorted(CASES)


def flat(x) -> torch.Tensor:
    if isinstance(x, dict):
        return torch.cat([v.reshape(-1) for v in x.values()])
    return x.reshape(-1)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_steps_through_the_iterates_of_solve(method):
    factory, required = CASES[method]
    solved = fc.solve(factory(), method, iters=6, seed=3, progress=False, **required)
    stepper = fc.Stepper(factory(), method, seed=3, iters=6, **required)
    rows = [stepper.step() for _ in range(6)]
    assert torch.equal(flat(stepper.x), flat(solved.x))
    assert [r["objective_estimate"] for r in rows] == [r["objective_estimate"] for r in solved.history.rows[:6]]
    assert stepper.result().info["iterations"] == 6


@pytest.mark.parametrize("method", ["hmsfw", "psg", "linasa-icg", "smag", "sgd"])
def test_a_state_dict_saved_and_loaded_resumes_exactly(method):
    factory, required = CASES[method]
    straight = fc.Stepper(factory(), method, seed=1, iters=8, **required)
    for _ in range(8):
        straight.step()
    first = fc.Stepper(factory(), method, seed=1, iters=8, **required)
    for _ in range(3):
        first.step()
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = fc.Stepper(factory(), method, seed=1, iters=8, **required)
    second.load_state_dict(torch.load(buffer, weights_only=True))
    for _ in range(5):
        second.step()
    assert second.k == 8 and torch.equal(flat(second.x), flat(straight.x))


def test_a_state_dict_of_another_run_is_refused():
    one = fc.Stepper(composite(), "hmsfw", seed=1)
    one.step()
    with pytest.raises(CheckpointError, match="method"):
        fc.Stepper(composite(), "psg").load_state_dict(one.state_dict())
    with pytest.raises(CheckpointError, match="hyperparameters"):
        fc.Stepper(composite(), "hmsfw", variant="polyak").load_state_dict(one.state_dict())
    with pytest.raises(CheckpointError, match="format"):
        fc.Stepper(composite(), "hmsfw").load_state_dict({"k": 1})


def test_batches_given_to_step_replace_the_samplers_draws():
    # hmsfw draws nothing but the sampler's batches from its generator: feeding the same batches reproduces it.
    problem = composite()
    solved = fc.solve(problem, "hmsfw", iters=5, seed=7, progress=False)
    fed = fc.Stepper(composite(), "hmsfw", seed=7)
    generator = torch.Generator()
    generator.set_state(fed.run.generator.get_state())  # where the set-up's own first draw left the run's
    for _ in range(5):
        fed.step(problem.sampler(generator))
    assert torch.equal(fed.x, solved.x)
    moved = fc.Stepper(composite(), "hmsfw", seed=7)
    for _ in range(5):
        moved.step(torch.ones(4, dtype=torch.float64))  # another batch: another trajectory
    assert not torch.equal(moved.x, solved.x)


def test_dmax_batches_and_options_a_stepper_refuses():
    stepper = fc.Stepper(minimax(), "smag", gamma=0.5, eta0=0.1, eta1=0.1)
    row = stepper.step(torch.ones(3, dtype=torch.float64))
    assert row["k"] == 0 and set(stepper.x) == {"w", "s"}
    with pytest.raises(OptionError, match="checkpoint"):
        fc.Stepper(composite(), "hmsfw", checkpoint="run.ckpt")
    with pytest.raises(OptionError, match="psi_batch"):
        fc.Stepper(composite(), "hmsfw").step(torch.zeros(4), psi_batch=torch.zeros(4))
    with pytest.raises(OptionError, match="iters"):
        fc.Stepper(composite(), "hmsfw", schedule="theorem1").step()


def test_the_smag_steppers_state_dict_holds_its_hyperparameters():
    one = fc.Stepper(minimax(), "smag", gamma=0.5, eta0=0.1, eta1=0.1, seed=2)
    one.step()
    one.adjust(eta0=0.05)  # changed between steps, as a schedule of the user's would
    assert one.adjustable == ("eta0", "eta1")
    with pytest.raises(OptionError, match="eta0"):
        one.adjust(eta0=-1.0)
    with pytest.raises(OptionError, match="gamma"):
        one.adjust(gamma=0.1)
    saved = one.state_dict()
    held = saved["hyperparameters"]
    assert (held["gamma"], held["eta0"], held["eta1"]) == (0.5, 0.05, 0.1)
    two = fc.Stepper(minimax(), "smag", gamma=0.5, eta0=0.1, eta1=0.1, seed=2)
    two.load_state_dict(saved)
    assert two.hyperparameters["eta0"] == 0.05 and two.k == 1
    one.step()
    two.step()
    assert torch.equal(flat(one.x), flat(two.x))
    with pytest.raises(CheckpointError, match="gamma"):
        fc.Stepper(minimax(), "smag", gamma=0.7, eta0=0.1, eta1=0.1).load_state_dict(saved)
