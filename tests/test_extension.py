"""A method written in a user's file, with no fullcomp file touched: the docs' plain stochastic Frank-Wolfe gets
validation, checkpoints, the stepper, `fullcomp run --method` and a passing contract test."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fullcomp as fc
from fullcomp.algorithms import method as method_module
from fullcomp.errors import CheckpointError, OptionError
from fullcomp.testing import check_method, composite_problem
from fullcomp.validation import Param, positive

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"


def method_source() -> str:
    """The page's first code block: the method's whole module."""
    text = PAGE.read_text()
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```", start)]


@pytest.fixture
def user_method(tmp_path, monkeypatch):
    monkeypatch.setattr(method_module, "REGISTRY", dict(method_module.REGISTRY))
    path = tmp_path / "my_method.py"
    path.write_text(method_source())
    spec = importlib.util.spec_from_file_location("my_method", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path


def test_the_users_method_passes_the_contract(user_method):
    check_method("sfw")
    assert "sfw" in fc.describe() and "gamma_k = c / (k + c)" in fc.describe("sfw")


class PointReadout(fc.Readout):
    def iterate(self, state):
        return state["x"]


def test_the_contract_test_fails_a_method_that_keeps_state_outside_its_state(monkeypatch):
    # The step counts its calls in a closure, which no checkpoint sees: a resumed run takes other steps.
    monkeypatch.setattr(method_module, "REGISTRY", dict(method_module.REGISTRY))

    def setup(problem, hp, run):
        calls = [0]
        vertex = torch.zeros(10, dtype=run.dtype)
        vertex[0] = 1.0

        def step(state, k):  # a step towards a vertex of the l1 ball: the iterate stays in the domain
            calls[0] += 1
            x = state["x"] + (vertex - state["x"]) / (calls[0] + 1)
            return {"x": x}, {"objective_estimate": float(x.abs().sum())}

        x0 = torch.as_tensor(problem.x0, dtype=run.dtype)
        return fc.Plan(step, {"x": x0}, PointReadout())

    fc.register(fc.Method("leaky", fc.CompositeProblem, (), setup, "keeps a counter out of its state"))
    with pytest.raises(AssertionError, match="resumed run"):
        check_method("leaky")


def test_the_users_method_is_validated_and_resumed(user_method, tmp_path):
    with pytest.raises(OptionError, match="c must be"):
        fc.solve(composite_problem(), "sfw", iters=2, c=-1.0, progress=False)
    with pytest.raises(OptionError, match="did you mean 'c'"):
        fc.solve(composite_problem(), "sfw", iters=2, cc=1.0, progress=False)
    full = fc.solve(composite_problem(), "sfw", iters=6, seed=2, progress=False)
    fc.solve(
        composite_problem(),
        "sfw",
        iters=6,
        seed=2,
        progress=False,
        checkpoint=tmp_path / "c.ckpt",
        callback=lambda it: it.k < 3,
    )
    resumed = fc.solve(composite_problem(), "sfw", iters=6, seed=2, progress=False, checkpoint=tmp_path / "c.ckpt")
    assert resumed.info["resumed_from"] == 4 and torch.equal(resumed.x, full.x)


SCRIPT = """
import sys
sys.path.insert(0, {folder!r})
import my_method  # registers "sfw"
from fullcomp.testing import composite_problem

problem = composite_problem()
"""


def test_fullcomp_run_takes_the_method_a_script_registers(user_method, tmp_path):
    script = tmp_path / "problem.py"
    script.write_text(SCRIPT.format(folder=str(user_method.parent)))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "fullcomp", "run", str(script), "--iters", "4", "--no-progress", "--out"]
    done = subprocess.run(
        [*command, str(out), "--method", "sfw", "--set", "c=3"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert fc.Result.load(out).info["method"] == "sfw"
    wrong = subprocess.run(
        [*command, str(tmp_path / "o2"), "--method", "sfv"], capture_output=True, text=True, timeout=300
    )
    assert wrong.returncode == 2 and "did you mean 'sfw'" in wrong.stderr


def test_a_renamed_option_is_refused_naming_its_name(monkeypatch):
    monkeypatch.setattr(method_module, "REGISTRY", dict(method_module.REGISTRY))

    def setup(problem, hp, run):
        x0 = torch.as_tensor(problem.x0, dtype=run.dtype)
        step = lambda state, k: (state, {"objective_estimate": 0.0})  # noqa: E731
        return fc.Plan(step, {"x": x0}, PointReadout())

    params = (Param("rate", (positive(),), 1.0, "the step"),)
    spec = fc.register(fc.Method("renaming", fc.CompositeProblem, params, setup, "a rename", renamed={"lr": "rate"}))
    with pytest.raises(OptionError, match="no option 'lr': it is named 'rate' \\(pass rate=0.5\\)"):
        fc.solve(composite_problem(), "renaming", iters=1, lr=0.5, progress=False)
    with pytest.raises(OptionError, match="'rate'"):
        fc.Stepper(composite_problem(), "renaming", lr=0.5)
    assert fc.solve(composite_problem(), "renaming", iters=1, rate=0.5, progress=False).status == "iterations"
    assert method_module.preset(spec, "renaming-fast", "a preset", rate=2.0).renamed == {"lr": "rate"}
    for renamed in ({"rate": "lr"}, {"lr": "speed"}):
        with pytest.raises(ValueError, match="renamed"):
            fc.register(fc.Method("stale", fc.CompositeProblem, params, setup, "a stale rename", renamed=renamed))
    with pytest.raises(ValueError, match="adjustable"):
        fc.register(fc.Method("loose", fc.CompositeProblem, params, setup, "adjusts", adjustable=("eta",)))


# ---------------------------------------------------------------- the extension API refuses malformed methods


def point_setup(step):
    """A set-up whose plan steps with ``step(state, k, problem, run)`` from {"x": x0}."""

    def setup(problem, hp, run):
        x0 = torch.as_tensor(problem.x0, dtype=run.dtype, device=run.device)
        return fc.Plan(lambda state, k: step(state, k, problem, run), {"x": x0}, PointReadout())

    return setup


def still(state, k, problem, run):
    return {"x": state["x"]}, {"objective_estimate": 1.0}


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(method_module, "REGISTRY", dict(method_module.REGISTRY))
    return method_module.REGISTRY


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda: fc.Method("", fc.CompositeProblem, (), point_setup(still), "x"), "method name ''"),
        (lambda: fc.Method("my method!", fc.CompositeProblem, (), point_setup(still), "x"), "'my method!'"),
        (lambda: {"name": "as-dict", "setup": point_setup(still)}, "fc.Method"),
        (lambda: fc.Method("no-setup", fc.CompositeProblem, (), None, "x"), "setup must be a callable"),
        (lambda: fc.Method("no-kind", "composite", (), point_setup(still), "x"), "problem must be a problem class"),
    ],
)
def test_a_malformed_method_is_refused_at_register(registry, make, named):
    before = dict(registry)
    with pytest.raises(OptionError, match=named.replace("(", r"\(").replace("!", "!")):
        fc.register(make())
    assert registry == before


def test_a_name_is_registered_once_unless_replaced_and_a_built_in_never(registry):
    first = fc.register(fc.Method("mine", fc.CompositeProblem, (), point_setup(still), "first"))
    assert fc.register(first) is first  # the same method again: nothing changes
    second = fc.Method("mine", fc.CompositeProblem, (), point_setup(still), "second")  # the cell run again
    with pytest.raises(OptionError, match="replace=True"):
        fc.register(second)
    assert fc.register(second, replace=True) is second and registry["mine"] is second
    for replace in (False, True):
        with pytest.raises(OptionError, match="'hmsfw' is a built-in method"):
            fc.register(fc.Method("hmsfw", fc.CompositeProblem, (), point_setup(still), "mine"), replace=replace)
    assert registry["hmsfw"].summary != "mine"


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"step": None}, "step=None"),
        ({"readout": {"iterate": None}}, "readout="),
        ({"components": {"glmo": object()}}, "components="),
        ({"info": [1]}, "info="),
        ({"readout": None}, "readout=None"),
        ({"iterate": lambda s: s["x"], "finish": None}, "no field 'iterate', 'finish'.*fc.Readout"),
    ],
)
def test_a_plan_checks_its_fields_at_construction(fields, named):
    good = {"step": still, "state": {"x": torch.zeros(2)}, "readout": PointReadout()}
    with pytest.raises(OptionError, match=named):
        fc.Plan(**{**good, **fields})


def test_a_setup_returning_another_thing_is_refused_by_name(registry, tmp_path):
    fc.register(fc.Method("dict-plan", fc.CompositeProblem, (), lambda p, hp, run: {"step": None}, "x"))
    with pytest.raises(OptionError, match="dict-plan: setup returned a dict, not a fc.Plan"):
        fc.solve(composite_problem(), "dict-plan", iters=2, progress=False, checkpoint=tmp_path / "c.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_a_state_a_checkpoint_cannot_hold_is_refused_at_set_up(registry, tmp_path):
    def setup(problem, hp, run):
        x0 = torch.as_tensor(problem.x0, dtype=run.dtype)
        return fc.Plan(lambda s, k: (s, {"objective_estimate": 1.0}), {"x": x0, "rule": lambda k: k}, PointReadout())

    fc.register(fc.Method("lambda-state", fc.CompositeProblem, (), setup, "keeps a function in its state"))
    steps = []
    with pytest.raises(CheckpointError, match=r"state\['rule'\] holds a function"):
        fc.solve(
            composite_problem(),
            "lambda-state",
            iters=3,
            progress=False,
            checkpoint=tmp_path / "c.ckpt",
            callback=steps.append,
        )
    assert steps == [] and list(tmp_path.iterdir()) == []
    assert fc.solve(composite_problem(), "lambda-state", iters=3, progress=False).status == "iterations"


class Warm:
    """A component whose saved state holds a function."""

    def state_dict(self):
        return {"pool": [1.0], "rule": print}

    def load_state_dict(self, saved):
        pass


def test_a_component_a_checkpoint_cannot_hold_is_refused_at_set_up(registry, tmp_path):
    def setup(problem, hp, run):
        x0 = torch.as_tensor(problem.x0, dtype=run.dtype)
        return fc.Plan(lambda s, k: (s, {"objective_estimate": 1.0}), {"x": x0}, PointReadout(), {"warm": Warm()})

    fc.register(fc.Method("odd-component", fc.CompositeProblem, (), setup, "a component holding a function"))
    with pytest.raises(CheckpointError, match=r"component 'warm', whose state_dict\(\)\['rule'\] holds a"):
        fc.solve(composite_problem(), "odd-component", iters=3, progress=False, checkpoint=tmp_path / "c.ckpt")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- check_method fails the methods that break a guarantee


def walk(state, k, problem, run):  # a random walk that ignores the domain
    y = state["x"] + torch.randn(state["x"].shape, generator=run.generator, dtype=state["x"].dtype)
    return {"x": y}, {"objective_estimate": float(y.abs().sum())}


def in_place(state, k, problem, run):  # a step towards a vertex, written into the state it started from
    x = state["x"]
    x.mul_(0.5)
    x[0] += 0.5
    return {"x": x}, {"objective_estimate": float(x.abs().sum())}


def nan_hidden(state, k, problem, run):  # the map's values move x; its rows stay finite, NaN or not
    value = problem.inner(state["x"], problem.sample(run.generator)).sum()
    return {"x": state["x"] + 0.0 * value}, {"objective_estimate": 1.0}


def nan_raw(state, k, problem, run):  # a raw error on a NaN, not a fullcomp one
    value = float(problem.inner(state["x"], problem.sample(run.generator)).sum())
    if value != value:
        raise ValueError("math domain error")
    return {"x": state["x"]}, {"objective_estimate": value}


def double_always(state, k, problem, run):  # computes in float64, whatever the problem's dtype
    x = state["x"].double()
    return {"x": x}, {"objective_estimate": float(problem.inner(x, problem.sample(run.generator)).sum())}


@pytest.mark.parametrize(
    "step, guarantee",
    [
        (walk, "outside the domain"),
        (in_place, "changed state\\['x'\\] in place"),
        (nan_hidden, "a map that returns NaN stops the run"),
        (nan_raw, "a map that returns NaN stops the run.*ValueError"),
        (double_always, "x follows the problem's dtype"),
    ],
)
def test_check_method_fails_a_method_that_breaks_a_guarantee(registry, step, guarantee):
    fc.register(fc.Method("broken", fc.CompositeProblem, (), point_setup(step), "breaks a guarantee"))
    with pytest.raises(AssertionError, match=guarantee):
        check_method("broken")
