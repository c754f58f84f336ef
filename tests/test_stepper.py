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


def _recording(poison: float | None = None):
    """A composite problem whose map records every batch it is called on (``poison``: it raises on a batch
    holding that value), and its sampler."""
    import cvxpy as cp

    A = torch.randn(4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    seen: list[torch.Tensor] = []

    def inner(x, noise):
        seen.append(noise)
        if poison is not None and bool((noise == poison).any()):
            raise ValueError("a poisoned batch")
        return torch.nn.functional.softplus(A @ x - 0.5) + noise

    def sampler(gen):
        return 0.05 * torch.randn(4, generator=gen, dtype=torch.float64)

    problem = fc.CompositeProblem(cp.max(fc.inner_value(4)), inner, fc.L1Ball(10, 2.0), sampler=sampler)
    return problem, sampler, seen


def test_the_stepper_runs_on_the_users_problem_itself():
    problem = composite()
    assert fc.Stepper(problem, "hmsfw").problem is problem
    dmax = minimax()
    stepper = fc.Stepper(dmax, "smag", gamma=0.5, eta0=0.1, eta1=0.1)
    assert stepper.problem is dmax


@pytest.mark.parametrize(
    "method, options",
    [
        ("hmsfw", {"tracker": "storm"}),  # one draw, two Jacobians on it
        ("hmsfw", {"tracker": "hessian"}),  # two draws: the sample's and the Hessian's
        ("linasa-icg", {"icg_steps": 3}),  # two draws: the value's and the Jacobian's
        ("psg", {}),
    ],
)
def test_a_batch_given_to_step_is_every_draw_of_that_update(method, options):
    problem, _, seen = _recording()
    stepper = fc.Stepper(problem, method, seed=0, iters=4, **options)
    stepper.step()
    given = torch.full((4,), 0.125, dtype=torch.float64)
    seen.clear()
    stepper.step(given)
    assert seen and all(torch.equal(batch, given) for batch in seen)
    seen.clear()
    stepper.step()  # the sampler's draws again
    assert seen and not any(torch.equal(batch, given) for batch in seen)


def test_a_dmax_batch_given_to_step_is_what_phi_sees():
    seen = []

    def phi(x, y, b):
        seen.append(b)
        return ((x - b) ** 2).sum() + y @ x - 0.5 * (y @ y)

    problem = fc.DMaxProblem(
        phi,
        x0=torch.zeros(3, dtype=torch.float64),
        y0=torch.zeros(3, dtype=torch.float64),
        Y=fc.L2Ball(3, 5.0),
        sampler=lambda g: 1.0 + 0.1 * torch.randn(3, generator=g, dtype=torch.float64),
    )
    stepper = fc.Stepper(problem, "smag", gamma=0.5, eta0=0.1, eta1=0.1)
    given = torch.full((3,), 2.0, dtype=torch.float64)
    seen.clear()
    stepper.step(given)
    assert seen and all(torch.equal(b, given) for b in seen)


def test_after_an_update_that_raised_the_next_step_draws_from_the_sampler():
    problem, sampler, seen = _recording(poison=99.0)
    stepper = fc.Stepper(problem, "hmsfw", seed=4)
    with pytest.raises(Exception, match="poisoned"):
        stepper.step(torch.full((4,), 99.0, dtype=torch.float64))
    replay = torch.Generator()
    replay.set_state(stepper.run.generator.get_state())
    seen.clear()
    stepper.step()
    assert len(seen) == 1 and torch.equal(seen[0], sampler(replay))


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
    with pytest.raises(OptionError, match="in_place must be True or False"):
        fc.Stepper(composite(), "hmsfw", in_place="yes")


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


def _drift_problem(radius: float = 2.0, size: int = 10):
    import cvxpy as cp

    A = torch.randn(4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))[:, :size]

    def noise(g):
        return 0.05 * torch.randn(4, generator=g, dtype=torch.float64)

    return fc.CompositeProblem(
        cp.max(fc.inner_value(4)), lambda x, n: (A @ x - 0.5) ** 2 + n, fc.L1Ball(size, radius), sampler=noise
    )


def _stepped(problem, steps: int = 3) -> dict:
    s = fc.Stepper(problem, "hmsfw")
    for _ in range(steps):
        s.step()
    return s.state_dict()


def test_a_state_saved_on_another_domain_is_refused():  # ST2: the iterate would sit outside the new ball
    t = fc.Stepper(_drift_problem(radius=0.1), "hmsfw")
    with pytest.raises(CheckpointError, match="domain"):
        t.load_state_dict(_stepped(_drift_problem()))
    assert t.k == 0


def test_a_state_of_another_size_is_refused_by_its_field():  # ST3b: was a GLMO shape error at the next step
    t = fc.Stepper(_drift_problem(size=9), "hmsfw")
    saved = _stepped(_drift_problem())
    saved.pop("domain")  # a state from before states recorded their domain: the shapes still tell
    with pytest.raises(CheckpointError, match="state.y"):
        t.load_state_dict(saved)


def test_a_tampered_iterate_is_refused():  # O21a: the iterate is never left outside the domain
    saved = _stepped(_drift_problem())
    state = saved["state"]
    assert isinstance(state, dict)
    from fullcomp.serial import decode, encode

    decoded = decode(state)
    decoded.y = decoded.y * 100.0
    t = fc.Stepper(_drift_problem(), "hmsfw")
    with pytest.raises(CheckpointError, match="not in this problem's domain"):
        t.load_state_dict({**saved, "state": encode(decoded)})


@pytest.mark.parametrize(
    "field, value, match",
    [("k", -5, "k must be"), ("generator", torch.zeros(3, dtype=torch.uint8), "generator")],
)
def test_a_malformed_field_is_a_checkpoint_error(field, value, match):  # O21b, ST6: were raw errors
    saved = _stepped(_drift_problem(), 1)
    t = fc.Stepper(_drift_problem(), "hmsfw")
    with pytest.raises(CheckpointError, match=match):
        t.load_state_dict({**saved, field: value})
    assert t.k == 0


def test_adjustable_values_of_a_state_are_validated():  # ST8: eta0 = 1e6 was taken without its checks
    x0 = {"w": torch.zeros(3, dtype=torch.float64)}
    problem = fc.DMaxProblem(
        lambda x, y, b: ((x["w"] - b) ** 2).sum() + y @ x["w"] - 0.5 * (y @ y),
        x0=x0,
        y0=torch.zeros(3, dtype=torch.float64),
        Y=fc.L2Ball(3, 5.0),
        sampler=lambda g: 1 + 0.1 * torch.randn(3, generator=g, dtype=torch.float64),
    )
    s = fc.Stepper(problem, "smag", gamma=0.5, eta0=0.1, eta1=0.1)
    s.step()
    for value in (-0.1, 0.0, float("nan")):  # the declared constraint: a positive number
        saved = s.state_dict()
        saved["hyperparameters"]["eta0"] = value
        t = fc.Stepper(problem, "smag", gamma=0.5, eta0=0.1, eta1=0.1)
        with pytest.raises(CheckpointError, match="eta0"):
            t.load_state_dict(saved)
        assert t.hyperparameters["eta0"] == 0.1


def test_a_horizon_missing_from_a_stepper_names_iters():  # ST5b: the message spoke of a budget in seconds
    with pytest.raises(OptionError, match="iters="):
        fc.Stepper(_drift_problem(), "linasa-icg")
