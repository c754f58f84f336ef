"""The step-size rules of fullcomp.steps: one protocol, one verb, and each method's step size taken from them."""

from __future__ import annotations

import numpy as np
import pytest

import fullcomp as fc
from fullcomp import steps
from fullcomp.errors import OptionError


def test_step_size_rules_share_one_verb():
    """Every rule of fullcomp.steps answers step_size(k, line); the line searches read phi along the step."""
    assert steps.rule("constant", 0.3).step_size(8) == 0.3
    assert steps.rule("sqrt", 0.3).step_size(8) == pytest.approx(0.1)
    assert steps.StepDecay((3, 6)).step_size(5) == pytest.approx(0.1)
    assert steps.multiplier(None, 4) == 1.0 and steps.multiplier(lambda k: 0.5, 4) == 0.5
    assert fc.Schedule.paper().step_size(2) == 0.5 and steps.shift(0.5) == 2.0
    quadratic = steps.Line(lambda t: (1 - t) ** 2, value=1.0, decrease=2.0, norm2=1.0, gamma_max=1.0)
    assert steps.ShortStep(2.0).step_size(0, quadratic) == 1.0 and quadratic.L == 2.0
    quadratic.L = None
    gamma = steps.Adaptive(2.0**-52).step_size(0, quadratic)  # tries 0.9 of the first estimate 2, then doubles
    assert gamma == pytest.approx(2 / 3.6) and quadratic.L == pytest.approx(3.6)
    assert steps.Halving().step_size(0, steps.Line(lambda t: (t - 0.25) ** 2, value=1.0)) == 0.25
    for rule in (steps.ShortStep(1.0), steps.Adaptive(1e-16), steps.Halving()):
        assert isinstance(rule, steps.StepSize)
        with pytest.raises(OptionError, match="line search"):
            rule.step_size(0)


def test_decay_takes_a_rule_or_a_function_and_both_give_the_same_run():
    from contract_cases import CASES

    factory, required = CASES["sgd"]
    by_rule = fc.solve(factory(), "sgd", iters=8, seed=0, progress=False, decay=fc.StepDecay((4,)), **required)
    tenth = lambda k: 0.1 ** (k >= 4)  # noqa: E731
    by_function = fc.solve(factory(), "sgd", iters=8, seed=0, progress=False, decay=tenth, **required)
    np.testing.assert_array_equal(by_rule.history.column("lr"), by_function.history.column("lr"))
    assert by_rule.history.column("lr")[5] == pytest.approx(0.1 * required["eta"])
    with pytest.raises(OptionError, match="decay"):
        fc.solve(factory(), "sgd", iters=1, progress=False, decay=0.5, **required)
