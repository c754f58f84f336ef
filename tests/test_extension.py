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
from fullcomp.errors import OptionError
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

        def step(state, k):
            calls[0] += 1
            x = state["x"] + 1.0 / (calls[0] + 1)
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
