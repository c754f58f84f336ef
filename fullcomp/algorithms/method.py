"""The method contract: every algorithm is a registered :class:`Method`, run by :func:`solve` through one driver.

A method declares the problem kind it accepts, its hyperparameters as data
(:class:`~fullcomp.validation.Param`), and a ``setup(problem, hp, run) -> Plan``
whose plan's ``step`` is the paper's box and whose readout reports its states
and declares its outputs.  Everything else (validation of the
shared options, dtype and device, the start point, checkpoints with their
fingerprint, the result and its status) is done here and in
:mod:`fullcomp.run`, once for all methods.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fullcomp import distributed
from fullcomp.errors import CheckpointError, ModelError, OptionError
from fullcomp.model.captured import stateful_samplers
from fullcomp.model.constraints import check_method
from fullcomp.model.fingerprint import problem_fingerprint
from fullcomp.run.driver import drive, resuming
from fullcomp.run.options import SHARED, RunOptions
from fullcomp.run.plan import Plan, Readout
from fullcomp.run.result import Result
from fullcomp.serial import ALLOWED, encode
from fullcomp.validation import Param, check_params

Setup = Callable[[Any, dict, RunOptions], Plan]


@dataclass(frozen=True)
class Method:
    """A registered method: name, problem kind, hyperparameters, set-up, and a one-line summary.

    ``fixed`` holds hyperparameters a preset pins (``hmsfw-i`` is ``hmsfw`` with
    ``variant="polyak"``); they are not options of the preset.  ``renamed`` maps an
    option's former name to its name: the former name is refused with an
    OptionError that names the new one.  ``adjustable`` names the hyperparameters a
    :class:`~fullcomp.Stepper` may change between steps (a step size, as
    ``torch.optim``'s learning rate).  ``per_sample`` says whether it runs on a
    problem declared with ``fc.PerSample`` (its batches are row indices, and a
    batch's map gives those rows' values only).
    """

    name: str
    problem: type
    params: tuple[Param, ...]
    setup: Setup
    summary: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    renamed: Mapping[str, str] = field(default_factory=dict)
    adjustable: tuple[str, ...] = ()
    per_sample: bool = False

    @property
    def options(self) -> tuple[Param, ...]:
        """The hyperparameters a caller may set (the preset's fixed ones left out)."""
        return tuple(p for p in self.params if p.name not in self.fixed)


REGISTRY: dict[str, Method] = {}


#: A method's name: what ``fullcomp run --method NAME`` takes (a letter, then letters, digits, '-' and '_').
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def register(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to the registry, so that ``fc.solve``, ``fc.Stepper``, ``fc.describe`` and ``fullcomp run
    --method`` know it by its name (docs/extending.md shows a whole method).

    Parameters
    ----------
    method : Method
        Its name is a letter followed by letters, digits, '-' and '_'; its setup is callable, and no
        hyperparameter may take the name of a shared option.
    replace : bool, default False
        Replace the method registered under that name (a notebook cell run again); a built-in method
        cannot be replaced.

    Returns
    -------
    Method
        ``method`` itself, so that a module can keep it: ``SFW = fc.register(fc.Method(...))``.

    Raises
    ------
    OptionError
        A malformed method, or a name already registered (without ``replace=True``, or a built-in's).
    """
    check_method_fields(method)
    held = REGISTRY.get(method.name)
    if held is not None and held is not method:
        if (getattr(held.setup, "__module__", None) or "").startswith("fullcomp."):
            raise OptionError(
                f"fc.register: {method.name!r} is a built-in method and cannot be replaced; register yours "
                f"under another name (e.g. Method('my-{method.name}', ...))"
            )
        if not replace:
            raise OptionError(
                f"fc.register: a method named {method.name!r} is already registered; pass "
                "fc.register(method, replace=True) to replace it, or give yours another name"
            )
    REGISTRY[method.name] = method
    return method


def check_method_fields(method: Any) -> None:
    """An OptionError naming the field of a malformed :class:`Method` and the fix."""
    if not isinstance(method, Method):
        raise OptionError(
            f"fc.register takes a fc.Method(name, problem, params, setup, summary), got a {type(method).__name__}"
        )
    name = method.name
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise OptionError(
            f"fc.register: method name {name!r} is not a name the CLI can take; use a letter followed by letters, "
            "digits, '-' and '_' (e.g. 'my-method')"
        )
    if not isinstance(method.problem, type):
        raise OptionError(f"{name}: problem must be a problem class (fc.CompositeProblem, fc.DMaxProblem)")
    if not isinstance(method.params, tuple) or not all(isinstance(p, Param) for p in method.params):
        raise OptionError(f"{name}: params must be a tuple of fullcomp.validation.Param, got {method.params!r}")
    if not callable(method.setup):
        raise OptionError(f"{name}: setup must be a callable setup(problem, hp, run) -> fc.Plan, got {method.setup!r}")
    if not isinstance(method.summary, str):
        raise OptionError(f"{name}: summary must be a one-line str")
    names = {p.name for p in method.params}
    clash = names & set(SHARED)
    if clash:
        raise OptionError(f"{name}: hyperparameters {sorted(clash)} shadow shared options; rename them")
    stale = {old: new for old, new in method.renamed.items() if old in names or new not in names}
    if stale:
        raise OptionError(f"{name}: renamed={stale} must map names that are not options to options")
    unknown = set(method.adjustable) - names
    if unknown:
        raise OptionError(f"{name}: adjustable names {sorted(unknown)}, which are not hyperparameters")


def preset(base: Method, name: str, summary: str, **fixed: Any) -> Method:
    """Register ``base`` with some hyperparameters pinned, under its own name."""
    pinned = {**base.fixed, **fixed}
    return register(
        Method(
            name, base.problem, base.params, base.setup, summary, pinned, base.renamed, base.adjustable, base.per_sample
        )
    )


def get(name: str) -> Method:
    if not isinstance(name, str) or name not in REGISTRY:
        close = difflib.get_close_matches(str(name), list(REGISTRY), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise OptionError(f"unknown method {name!r}{hint}; the methods are {', '.join(REGISTRY)}")
    return REGISTRY[name]


def methods(problem: type | None = None) -> list[Method]:
    """The registered methods, optionally only those accepting ``problem`` (a problem class or instance; an
    instance declared with ``fc.PerSample`` keeps the methods that run on it)."""
    rows = getattr(problem, "per_sample", None) is not None
    if problem is not None and not isinstance(problem, type):
        problem = type(problem)
    return [
        m
        for m in REGISTRY.values()
        if (problem is None or issubclass(problem, m.problem)) and (m.per_sample or not rows)
    ]


def describe(name: str | None = None) -> str:
    """A text table of one method's hyperparameters and the shared options, or of every method."""
    if name is None:
        lines = [f"{'method':<16} {'problem':<17} summary"]
        lines += [f"{m.name:<16} {m.problem.__name__:<17} {m.summary}" for m in REGISTRY.values()]
        return "\n".join(lines)
    m = get(name)
    lines = [f"{m.name} ({m.problem.__name__}): {m.summary}", "", "hyperparameters:"]
    for p in m.options:
        default = "required" if p.required else f"default {p.default!r}"
        lines.append(f"  {p.name}: {p.describe()}; {default}. {p.doc}")
    if m.fixed:
        lines.append("fixed by this preset: " + ", ".join(f"{k}={v!r}" for k, v in m.fixed.items()))
    lines += ["", "shared options:"] + [f"  {k}: {v}" for k, v in SHARED.items()]
    return "\n".join(lines)


def markdown() -> str:
    """The methods, their hyperparameters and the shared options as Markdown tables (docs/algorithm.md shows it)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| method | problem | what it is |", "| --- | --- | --- |"]
    lines += [f"| `{m.name}` | `{m.problem.__name__}` | {cell(m.summary)} |" for m in REGISTRY.values()]
    lines += ["", "| method | hyperparameter | accepts | default | meaning |", "| --- | --- | --- | --- | --- |"]
    for m in REGISTRY.values():
        if m.fixed:
            pinned = ", ".join(f"`{k}={v!r}`" for k, v in m.fixed.items())
            required = "".join(f", `{p.name}` required" for p in m.options if p.required)
            base = m.setup.__module__.rsplit(".", 1)[-1]
            lines.append(f"| `{m.name}` | | | | the options of `{base}` with {pinned}{required} |")
            continue
        for p in m.options:
            default = "required" if p.required else f"`{p.default!r}`"
            lines.append(f"| `{m.name}` | `{p.name}` | {cell(p.describe())} | {default} | {cell(p.doc)} |")
    lines += ["", "| shared option | meaning |", "| --- | --- |"]
    lines += [f"| `{k}` | {cell(v)} |" for k, v in SHARED.items()]
    return "\n".join(lines)


def write_tables(path: str) -> None:
    """Refresh the generated tables between the ``<!-- methods:begin -->`` and ``<!-- methods:end -->`` marks."""
    from pathlib import Path

    text = Path(path).read_text()
    begin, end = "<!-- methods:begin -->\n", "\n<!-- methods:end -->"
    head, tail = text[: text.index(begin) + len(begin)], text[text.index(end) :]
    Path(path).write_text(head + markdown() + tail)


def default_method(problem: Any) -> str:
    """The method :func:`solve` runs when none is named: ``"oce"`` for a problem on ``fc.PerSample`` whose F
    is a named OCE risk (``fc.cvar``, ``fc.chi2_dro``, ``fc.kl_dro``, ``fc.entropic_risk``), measured the
    fastest there (docs/performance.md); an OptionError asking for a method otherwise."""
    from fullcomp.algorithms.oce import OCE_RISKS
    from fullcomp.model.calculus import named_risk

    outer = getattr(problem, "outer", None)
    named = named_risk(getattr(outer, "expr", None))
    if getattr(problem, "per_sample", None) is not None and named is not None and named[0] in OCE_RISKS:
        if not outer.depends_on_x:
            return "oce"
    fits = ", ".join(m.name for m in methods(problem)) or "none"
    raise OptionError(
        f"fc.solve needs a method for a {type(problem).__name__} (the methods for it: {fits}); pass it as the "
        "second argument, e.g. fc.solve(problem, 'hmsfw'). Only a problem on fc.PerSample with a named OCE risk "
        "(fc.cvar, fc.chi2_dro, fc.kl_dro, fc.entropic_risk) has a default, 'oce'"
    )


def solve(problem: Any, method: str | None = None, /, **options: Any) -> Result:
    """Run the registered ``method`` on ``problem``; ``options`` are its hyperparameters and the shared options.

    ``fc.describe(method)`` lists both.  Every method returns a Result with
    ``x``, ``history`` (``k``, ``time``, ``objective_estimate``, ``objective``
    when the problem can compute it, and the method's columns) and ``status``.

    Parameters
    ----------
    problem : CompositeProblem or DMaxProblem
        The problem to solve, an instance of the problem class the method
        accepts (``fc.methods(problem)`` lists the methods for it).
        Positional only.
    method : str, optional
        The name of a registered method (``fc.methods()``), e.g. ``"hmsfw"``
        or ``"smag"``.  Positional only.  Left out, :func:`default_method`
        picks it: ``"oce"`` for a problem on ``fc.PerSample`` with a named
        OCE risk, and no other problem has a default.
    **options
        The method's hyperparameters and the shared options (``iters``,
        ``seconds``, ``seed``, ``device``, ``callback``, ``checkpoint``, ...),
        by keyword; ``fc.describe(method)`` and the tables of the algorithm
        guide list both.  A preset's fixed hyperparameters cannot be given.

    Returns
    -------
    Result
        The run's final point, history and status.

    Raises
    ------
    OptionError
        An unknown method, an option the method does not accept, a required
        hyperparameter missing, or a value that fails validation.
    ModelError
        ``problem`` is not of the problem class the method accepts.
    """
    if method is None:
        method = default_method(problem)
    spec, hp, problem, shared = validated(problem, method, options)
    run = RunOptions.resolve(problem, spec.name, shared)
    if run.x0 is not None:
        problem = problem.with_start(run.x0)
    # Only a checkpoint needs the fingerprint, whose data hash reads every array the problem holds.
    with kept_buffers(problem):  # the fingerprint's probe evaluates the map: BatchNorm's statistics stay as they were
        stamp = None if run.checkpoint is None else fingerprint(spec, hp, run, problem)
    if stamp is not None and run.world.parallel:  # each rank holds its own shard: the checkpoint knows them all
        stamp = {**stamp, "problem": distributed.gather(stamp["problem"])}
    with resuming(run, stamp, sharded=getattr(problem, "sharded", False)) as saved:
        plan = planned(spec, problem, hp, run)
        if saved is not None and run.horizon_used and run.resolved_horizon != run.budget.iters:
            warnings.warn(
                f"{spec.name}: the checkpoint's run resolved its budget-dependent parameters with the horizon "
                f"{run.resolved_horizon}; this run continues it with that horizon (iters={run.budget.iters} "
                f"only extends it). For a run with the horizon {run.budget.iters}, pass another checkpoint "
                "path or fc.Checkpoint(path, on_mismatch='restart')",
                UserWarning,
                stacklevel=2,
            )
        return drive(plan, run, stamp, desc=spec.name, saved=saved)


def validated(problem: Any, method: str, options: dict) -> tuple[Method, dict, Any, dict]:
    """(method, hyperparameters, problem, shared options): the method found, the problem's kind checked and the
    hyperparameters validated against their declared constraints; what :func:`solve` and
    :class:`~fullcomp.Stepper` do first."""
    spec = get(method)
    if not isinstance(problem, spec.problem):
        fits = ", ".join(m.name for m in methods(problem)) or "none"
        raise ModelError(
            f"{spec.name} needs a fc.{spec.problem.__name__}, got {type(problem).__name__} (methods for it: {fits})"
        )
    check_method(spec.name, spec.setup.__module__, problem)  # a method that would drop the constraints
    if getattr(problem, "per_sample", None) is not None and not spec.per_sample:
        raise ModelError(
            f"{spec.name} does not run on a problem declared with fc.PerSample (its batches are row indices and "
            f"a batch gives those rows' losses only); methods for it: {', '.join(m.name for m in methods(problem))}"
        )
    options = dict(options)
    check_renamed(spec, options)
    shared = {k: options.pop(k) for k in list(options) if k in SHARED}
    pinned = set(options) & set(spec.fixed)
    if pinned:
        raise OptionError(f"{spec.name} fixes {sorted(pinned)}; use the base method to change them")
    hp = check_params(spec.params, {**options, **spec.fixed}, spec.name)
    return spec, hp, problem, shared


def module_buffers(problem: Any) -> dict[str, Any]:
    """A module variable's buffers as a component, so that checkpoints hold BatchNorm's running statistics."""
    from fullcomp.model.params import ModuleBuffers, Params

    params = getattr(problem, "params", None)
    if isinstance(params, Params) and params.kind == "module" and params.buffers:
        return {"buffers": ModuleBuffers(params)}
    return {}


@contextlib.contextmanager
def kept_buffers(problem: Any) -> Iterator[None]:
    """Evaluations inside that leave a module variable's buffers (running statistics) as they were."""
    found = module_buffers(problem).get("buffers")
    saved = None if found is None else found.state_dict()
    try:
        yield
    finally:
        if found is not None:
            found.load_state_dict(saved)


def check_renamed(spec: Method, options: Mapping[str, Any]) -> None:
    """An OptionError naming the option's name when ``options`` use a name the method has renamed."""
    for old in options:
        if old in spec.renamed:
            new = spec.renamed[old]
            raise OptionError(f"{spec.name} has no option {old!r}: it is named {new!r} (pass {new}={options[old]!r})")


def planned(spec: Method, problem: Any, hp: dict, run: RunOptions) -> Plan:
    """The method's plan for this run, with the run's facts in its info.

    A stateful sampler starts the run afresh (``reset()``: what the problem's checks drew is forgotten), and
    its state is checkpointed with the plan's components, so that a resume continues from its position.
    """
    samplers = stateful_samplers(problem)
    for sampler in samplers.values():
        sampler.reset()
    plan = spec.setup(problem, hp, run)
    if not isinstance(plan, Plan):
        raise OptionError(
            f"{spec.name}: setup returned a {type(plan).__name__}, not a fc.Plan; return "
            "fc.Plan(step=..., state=..., readout=...) (docs/extending.md)"
        )
    plan.components = {**plan.components, **samplers, **module_buffers(problem)}
    if run.checkpoint is not None:  # refused now, not at the first save after updates were spent
        check_encodable(spec.name, plan.state, "state")
        for name, component in plan.components.items():
            check_encodable(spec.name, component.state_dict(), f"component {name!r}, whose state_dict()")
    if run.gap_tol is not None and plan.readout.gap is None:
        raise OptionError(
            f"{spec.name} has no gap or stationarity measure, so gap_tol cannot stop it; drop gap_tol, or use a "
            "method that has one (result.info['gap_measure'] names it: the Frank-Wolfe methods, prox-linear, "
            "SMAG, the min-max methods)"
        )
    plan.info = {**plan.info, "method": spec.name, "seed": run.seed, "device": str(run.device), "dtype": str(run.dtype)}
    if plan.readout.gap is not None:
        plan.info["gap_measure"] = plan.readout.gap
    if run.horizon_used:
        plan.info["horizon"] = run.resolved_horizon
    return plan


def check_encodable(name: str, state: Any, root: str) -> None:
    """A CheckpointError naming the field of ``state`` (the plan's ``root``) that a checkpoint cannot hold (a
    function, a module)."""
    try:
        encode(state)
    except TypeError:
        where, held = unencodable(state, "")
        raise CheckpointError(
            f"{name}: the plan's {root}{where} holds a {type(held).__name__}, which a checkpoint cannot hold; keep run "
            "state in tensors, arrays, numbers and containers (or a class decorated with "
            "fullcomp.serial.encodable), or run without checkpoint="
        ) from None


def unencodable(value: Any, where: str) -> tuple[str, Any]:
    """(path, value) of the first part of ``value`` that :func:`fullcomp.serial.encode` refuses."""
    if isinstance(value, dict):
        parts = [(f"{where}[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        parts = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    elif dataclasses.is_dataclass(value) or type(value).__name__ in ALLOWED:
        parts = [(f"{where}.{k}", v) for k, v in vars(value).items()]
    else:
        return where, value
    for inner, part in parts:
        try:
            encode(part)
        except TypeError:
            return unencodable(part, inner)
    return where, value


def fingerprint(spec: Method, hp: dict, run: RunOptions, problem: Any) -> dict:
    """What a checkpoint must agree on to be resumed by this run."""
    from fullcomp import __version__

    return {
        "method": spec.name,
        "options": {k: _plain(v) for k, v in sorted(hp.items())},
        "seed": run.seed,
        "dtype": str(run.dtype),
        "world_size": run.world.size,
        "problem": problem_fingerprint(problem, run.dtype, run.device),
        "fullcomp": __version__,
    }


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return f"{type(value).__name__}:{name}"
    return getattr(value, "__qualname__", type(value).__qualname__)


__all__ = ["Method", "REGISTRY", "register", "preset", "get", "methods", "describe", "solve", "Plan", "Readout"]
