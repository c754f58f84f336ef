"""The ``fullcomp`` command: ``fullcomp run SCRIPT ...`` and ``fullcomp report DIR ...``.

Each subcommand is a ``(configure, handler)`` pair registered in
:data:`COMMANDS`, so later subcommands (``bench``) plug in without touching
the others.  Handlers return an exit code; library errors
(:class:`fullcomp.errors.FullcompError`) become one ``fullcomp <cmd>: error:``
line and exit code 1, option errors are argparse's (exit code 2).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fullcomp.errors import FullcompError, ModelError

#: --method -> keyword arguments of fc.hmsfw
METHODS = {
    "hmsfw-ii": {"variant": "taylor"},
    "hmsfw-i": {"variant": "polyak"},
    "exact": {"variant": "taylor", "exact": True},
}


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return value


# --------------------------------------------------------------------------- run


def configure_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "script", help="Python file defining build(args) -> CompositeProblem, or a module-level problem"
    )
    parser.add_argument("--method", choices=tuple(METHODS), default="hmsfw-ii", help="default hmsfw-ii (Taylor)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--iters", type=positive_int, help="number of iterations")
    budget.add_argument("--seconds", type=positive_float, help="optimizer seconds (evaluation and logging excluded)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampler's torch.Generator (default 0)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")
    parser.add_argument("--out", help="output folder (default runs/<script>-<method>-seed<seed>)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--max-pricing", type=positive_int, help="fixed budget of pricing calls per GLMO")
    parser.add_argument("--pool", type=positive_int, default=30, help="atoms kept warm between GLMO calls (default 30)")
    parser.add_argument("--eval-every", type=positive_int, default=10, help="iterations between evaluate(x) calls")
    parser.add_argument("--checkpoint", help="checkpoint file; an existing one is resumed")


def load_script(path: str | os.PathLike) -> dict[str, Any]:
    """Execute a script as a fresh module and return its namespace.

    The module is registered in ``sys.modules`` while it executes (dataclasses
    and pickling look it up there) and the script's folder is put first on
    ``sys.path``, as ``python SCRIPT`` would, so it can import its neighbours.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    name = f"fullcomp_script_{path.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"cannot load {path} as a Python script; pass a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.resolve().parent))
    return vars(module)


def check_device(name: str, parser: argparse.ArgumentParser) -> None:
    """Reject a device torch cannot parse or this machine lacks, before any work is done."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        parser.error(f"--device {name!r} is not a torch device; use cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        parser.error(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here")


def problem_from_script(namespace: dict[str, Any], script_args: list[str], script: str) -> tuple[Any, Callable | None]:
    """(problem, evaluate) from a script's ``build(args)`` or module-level ``problem``.

    ``build`` may return the problem or a pair ``(problem, evaluate)`` where
    ``evaluate(x) -> dict`` gives metrics recorded in the history.
    """
    from fullcomp.model import CompositeProblem

    if callable(namespace.get("build")):
        built = namespace["build"](list(script_args))
        source = f"{script}: build(args)"
    elif "problem" in namespace:
        if script_args:
            raise ModelError(
                f"{script} defines a module-level problem, so it takes no options; unrecognized: "
                f"{' '.join(script_args)}. Define build(args) to accept options."
            )
        built = namespace["problem"]
        source = f"{script}: problem"
    else:
        raise ModelError(
            f"{script} defines neither build(args) nor a module-level problem; add "
            "`def build(args): return fc.CompositeProblem(...)` (args: the options fullcomp run does not use)"
        )
    evaluate = None
    if isinstance(built, tuple) and len(built) == 2:
        built, evaluate = built
        if not callable(evaluate):
            raise ModelError(f"{source} returned (problem, evaluate) but evaluate is a {type(evaluate).__name__}")
    if not isinstance(built, CompositeProblem):
        raise ModelError(
            f"{source} returned an object of type {type(built).__name__}; it must be a fc.CompositeProblem "
            "(or a pair (problem, evaluate) with evaluate(x) -> dict)"
        )
    return built, evaluate


def run_command(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    """``fullcomp run``: build the script's problem, run the method, save the run folder."""
    import fullcomp as fc

    if args.iters is None and args.seconds is None:
        parser.error("give a budget: --iters N (iterations) or --seconds S (optimizer seconds)")
    check_device(args.device, parser)
    if rest[:1] == ["--"]:
        rest = rest[1:]  # `fullcomp run SCRIPT [options] -- [script options]`
    try:
        namespace = load_script(args.script)
    except FileNotFoundError:
        parser.error(f"script {args.script} not found; pass the path of a Python file, e.g. examples/quickstart.py")
    problem, evaluate = problem_from_script(namespace, rest, args.script)
    out = Path(args.out) if args.out else Path("runs") / f"{Path(args.script).stem}-{args.method}-seed{args.seed}"
    callback = None
    if evaluate is not None:

        def callback(iterate: Any) -> dict:
            metrics = evaluate(iterate.x)
            wrong = f"evaluate(x) in {args.script} must return a dict of numbers, e.g. {{'test_loss': 0.3}}; got"
            if not isinstance(metrics, dict):
                raise ModelError(f"{wrong} a {type(metrics).__name__}")
            try:
                return {str(key): float(value) for key, value in metrics.items()}
            except (TypeError, ValueError):
                raise ModelError(f"{wrong} {metrics!r}") from None

    try:
        result = fc.hmsfw(problem, **solver_options(args, callback))
    except FullcompError as exc:
        # An OracleError carries the run up to the last finite state: keep it on disk before failing.
        partial = getattr(exc, "result", None)
        if partial is not None:
            partial.info.update(run_info(args, rest))
            partial.save(out)
            print(f"fullcomp run: saved the run up to the failure in {out}/", file=sys.stderr)
        raise
    result.info.update(run_info(args, rest))
    result.save(out)
    print(summary_text(result, out))
    return 0


def solver_options(args: argparse.Namespace, callback: Callable | None) -> dict[str, Any]:
    """Keyword arguments of fc.hmsfw from the parsed `fullcomp run` options."""
    return dict(
        iters=args.iters,
        seconds=args.seconds,
        seed=args.seed,
        device=args.device,
        max_pricing=args.max_pricing,
        pool=args.pool,
        callback=callback,
        eval_every=args.eval_every if callback is not None else None,
        progress=not args.no_progress,
        checkpoint=args.checkpoint,
        **METHODS[args.method],
    )


def run_info(args: argparse.Namespace, rest: list[str]) -> dict[str, Any]:
    """What summary.json records about the command, beside the solver's own info."""
    return {
        "method": args.method,
        "script": str(args.script),
        "script_args": list(rest),
        "budget_iters": args.iters,
        "budget_seconds": args.seconds,
        "max_pricing": args.max_pricing,
        "pool": args.pool,
    }


def summary_text(result: Any, out: Path) -> str:
    """A few lines: the budget spent, the final estimates and how every evaluated metric moved."""
    info, history = result.info, result.history
    last = history[-1]
    lines = [
        f"{info['method']}: {info['iterations']} iterations, {info['optimizer_seconds']:.1f} optimizer seconds "
        f"(stopped by {info['stopped']})",
        f"final objective estimate {last['objective_estimate']:.6g}, gap estimate {last['gap_estimate']:.3g}",
    ]
    standard = {"k", "time", "objective_estimate", "gap_estimate", "glmo_gap", "pricing_calls"}
    for column in history.columns:
        if column in standard:
            continue
        values = [row[column] for row in history if column in row]
        if values and all(isinstance(v, (int, float)) for v in values):
            lines.append(f"{column}: {values[0]:.6g} -> {values[-1]:.6g}")
    lines.append(f"wrote {out}/ (history.csv, summary.json, x.npy)")
    return "\n".join(lines)


# ------------------------------------------------------------------------ report


def configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="a run folder or a folder containing run folders (searched recursively)")
    parser.add_argument("--plot", action="store_true", help="save PNG curves vs optimizer time into FOLDER")


def report_command(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    """``fullcomp report``: table of every run under FOLDER, optionally PNG curves."""
    from fullcomp import report

    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    runs = report.find_runs(args.folder)
    print(report.table(runs))
    if args.plot:
        for path in report.plot(runs, args.folder):
            print(f"saved {path}")
    protocols = {run.summary.get("protocol") for run in runs}
    for name in EXPERIMENTS:
        module = experiment_module(name)
        if module.PROTOCOL not in protocols:
            continue
        # Protocol folders also get the paper's aggregated tables and SD-band curves.
        written = module.tables(args.folder)
        print(f"wrote {written.csv} and {written.markdown}")
        if args.plot:
            for path in module.plots(args.folder):
                print(f"saved {path}")
    return 0


# --------------------------------------------------------------------------- bench


#: experiment -> (help, module); the module defines ``add_arguments(parser)`` and
#: ``run_from_args(args) -> int``, and, for ``fullcomp report``, ``PROTOCOL`` (the
#: ``protocol`` value its run summaries carry), ``tables(folder)`` and ``plots(folder)``.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "movielens": (
        "group-robust matrix completion (HMSFW paper, Section 6): every method, seeds, optimizer-time budget",
        "fullcomp.experiments.protocol",
    ),
    "pu": (
        "positive-unlabeled learning (SMAG paper, Section 5.1): SMAG against the DC baselines",
        "fullcomp.experiments.pu",
    ),
    "pauc-fairness": (
        "partial AUC with an adversarial fairness regularizer (SMAG paper, Section 5.2)",
        "fullcomp.experiments.pauc",
    ),
}


def experiment_module(name: str) -> Any:
    return importlib.import_module(EXPERIMENTS[name][1])


def configure_bench(parser: argparse.ArgumentParser) -> None:
    targets = parser.add_subparsers(dest="target", metavar="EXPERIMENT", required=True)
    for name, (help_text, _) in EXPERIMENTS.items():
        sub = targets.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        experiment_module(name).add_arguments(sub)


def bench_command(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    """``fullcomp bench EXPERIMENT``: run a paper protocol, then write its tables and plots."""
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return experiment_module(args.target).run_from_args(args)


# -------------------------------------------------------------------------- main

#: name -> (help, configure(parser), handler(args, rest, parser) -> exit code)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "run": ("run HMSFW on a problem script and save the run folder", configure_run, run_command),
    "report": ("tabulate (and plot) the run folders under a folder", configure_report, report_command),
    "bench": ("run a paper's experiment protocol (bench movielens ...)", configure_bench, bench_command),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="fullcomp", description="Stochastic solvers for min F(f(x), x) over a convex set."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    subparsers = {}
    for name, (help_text, configure, _) in COMMANDS.items():
        # allow_abbrev=False: `--se` or `--data` must never be taken for one of our options,
        # since unknown options are passed on to the script.
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        configure(p)
        subparsers[name] = p
    subparsers["run"].epilog = "Options not listed here (and all options after --) go to the script's build(args)."
    return parser, subparsers


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fullcomp`` console script; returns the exit code."""
    parser, subparsers = build_parser()
    args, rest = parser.parse_known_args(argv)
    sub = subparsers[args.command]
    _, _, handler = COMMANDS[args.command]
    try:
        return handler(args, rest, sub)
    except FullcompError as exc:
        print(f"fullcomp {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
