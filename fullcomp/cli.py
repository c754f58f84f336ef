"""The ``fullcomp`` command: ``fullcomp run SCRIPT ...`` and ``fullcomp report DIR ...``.

Everything after the first ``--`` is handed to the command as it is (for
``fullcomp run``: the script's options, ``build(args)``); an option before
``--`` that the command does not know is an argparse error that suggests the
closest known option.

Each subcommand is a ``(configure, handler)`` pair registered in
:data:`COMMANDS`, so a new subcommand plugs in without touching the others;
another command can reuse a pair (``fullcomp-lab report`` extends
:func:`report_command`).  Handlers return an exit code; library errors
(:class:`fullcomp.errors.FullcompError`) become one ``fullcomp <cmd>: error:``
line and exit code 1, option errors are argparse's (exit code 2).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import importlib.util
import os
import sys
import tempfile
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fullcomp.errors import FullcompError, ModelError, OptionError, ScriptError
from fullcomp.run.lock import Lock

#: The method `fullcomp run` picks when --method is not given, by problem kind.
DEFAULT_METHODS = {"CompositeProblem": "hmsfw-ii", "DMaxProblem": "smag"}


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


RUN_USAGE = "%(prog)s SCRIPT [fullcomp options] -- [script options]"
RUN_EPILOG = (
    "Script options go after --: fullcomp run SCRIPT [fullcomp options] -- [script options]. "
    "Everything after -- reaches the script's build(args) untouched; an unknown option before -- "
    "is an error (so a mistyped --seed is never passed on and ignored)."
)


def configure_run(parser: argparse.ArgumentParser) -> None:
    parser.usage = RUN_USAGE
    parser.epilog = RUN_EPILOG
    parser.add_argument(
        "script",
        help="Python file defining build(args) -> fc.CompositeProblem (or fc.DMaxProblem), or a module-level problem",
    )
    parser.add_argument(
        "--method",
        metavar="NAME",
        help="a registered method (fc.describe() lists them); default hmsfw-ii for a CompositeProblem, "
        "smag for a DMaxProblem",
    )
    parser.add_argument(
        "--set",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="method hyperparameters, e.g. --set max_pricing=4 pool=10 (values are Python literals or strings; "
        "fc.describe(METHOD) lists them)",
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--iters", type=positive_int, help="number of iterations")
    budget.add_argument("--seconds", type=positive_float, help="optimizer seconds (evaluation and logging excluded)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampler's torch.Generator (default 0)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")
    parser.add_argument("--out", help="output folder (default runs/<script>-<method>-seed<seed>)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--dtype", choices=("float32", "float64"), help="precision (default: the problem's)")
    parser.add_argument("--eval-every", type=positive_int, default=10, help="iterations between evaluate(x) calls")
    parser.add_argument("--checkpoint", help="checkpoint file; an existing one is resumed")
    parser.add_argument(
        "--nproc",
        type=positive_int,
        help="run data-parallel on N local processes (torchrun on 127.0.0.1, gloo on CPU); inside a torchrun job "
        "fullcomp run joins it by itself",
    )


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
        in_script(path, "while it loaded", spec.loader.exec_module, module)
    finally:
        sys.path.remove(str(path.resolve().parent))
    return vars(module)


def in_script(script: str | os.PathLike, when: str, call: Callable, *args: Any) -> Any:
    """``call(*args)``, the script's own code; what it raises (SystemExit too) becomes a ScriptError with the
    script's traceback, fullcomp's frames left out.  fullcomp's own errors, which name their fix, pass."""
    try:
        return call(*args)
    except FullcompError:
        raise
    except (Exception, SystemExit) as exc:
        trace = traceback.TracebackException.from_exception(exc)
        ours = str(Path(__file__).resolve().parent)
        trace.stack = traceback.StackSummary.from_list(
            [f for f in trace.stack if not f.filename.startswith((ours, "<frozen"))]
        )
        raise ScriptError(f"the script {script} failed {when}:\n{''.join(trace.format()).rstrip()}") from None


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
    from fullcomp.model.dmax import DMaxProblem

    if callable(namespace.get("build")):
        built = in_script(script, "in build(args)", namespace["build"], list(script_args))
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
            "`def build(args): return fc.CompositeProblem(...)` (args: the script options, given after --)"
        )
    evaluate = None
    if isinstance(built, tuple) and len(built) == 2:
        built, evaluate = built
        if not callable(evaluate):
            raise ModelError(f"{source} returned (problem, evaluate) but evaluate is a {type(evaluate).__name__}")
    if not isinstance(built, (CompositeProblem, DMaxProblem)):
        raise ModelError(
            f"{source} returned an object of type {type(built).__name__}; it must be a fc.CompositeProblem "
            "or a fc.DMaxProblem (or a pair (problem, evaluate) with evaluate(x) -> dict)"
        )
    return built, evaluate


def unwritable_reason(out: Path) -> str | None:
    """Why no run folder can be written at ``out``, or None; creates nothing."""
    if out.exists() and not out.is_dir():
        return f"{out} is a file, not a folder"
    probe = out
    while not probe.exists() and probe.parent != probe:  # the nearest existing ancestor
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, so no folder can be made under it"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def save_run(result: Any, out: Path) -> Path:
    """``result.save(out)``; when that fails, save to a fresh temporary folder so the run is not lost,
    and raise an OptionError naming --out and where the run went."""
    try:
        return result.save(out)
    except OSError as exc:
        reason = str(exc)
    try:
        rescue = result.save(Path(tempfile.mkdtemp(prefix=f"fullcomp-{out.name or 'run'}-")))
    except OSError:
        raise OptionError(
            f"cannot save the run to --out {out} ({reason}), nor to a temporary folder; pass --out a writable folder"
        ) from None
    raise OptionError(
        f"cannot save the run to --out {out} ({reason}); saved it to {rescue} instead. Pass --out a writable folder"
    )


def run_command(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    """``fullcomp run``: build the script's problem, run the method, save the run folder.

    ``rest`` holds the script's options (everything after ``--``).
    """
    from fullcomp import distributed

    if args.iters is None and args.seconds is None:
        parser.error("give a budget: --iters N (iterations) or --seconds S (optimizer seconds)")
    if args.nproc is not None and "WORLD_SIZE" not in os.environ:
        return launch(args.argv, args.nproc)
    check_device(args.device, parser)
    here = distributed.init() if "WORLD_SIZE" in os.environ else distributed.World()
    hyper = parse_settings(args.set, parser)
    name = args.method or "hmsfw-ii"
    out = Path(args.out) if args.out else Path("runs") / f"{Path(args.script).stem}-{name}-seed{args.seed}"
    reason = unwritable_reason(out)
    if reason is not None:  # checked before any work, so a finished run never has nowhere to go
        raise OptionError(f"--out {out}: cannot write the run folder there ({reason}); pass --out a writable folder")
    try:
        namespace = load_script(args.script)
    except FileNotFoundError:
        parser.error(f"script {args.script} not found; pass the path of a Python file, e.g. examples/quickstart.py")
    problem, evaluate = problem_from_script(namespace, rest, args.script)
    if args.method is None:
        args.method = DEFAULT_METHODS[type(problem).__name__]
        if not args.out:
            out = Path("runs") / f"{Path(args.script).stem}-{args.method}-seed{args.seed}"
    else:  # checked after the script loaded, since a script may register its own method
        from fullcomp.algorithms.method import get

        try:
            get(args.method)
        except OptionError as exc:
            parser.error(f"--method: {exc}")
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

    if not here.writes:
        return solve_and_save(problem, args, rest, callback, hyper, out, here)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)  # its lock file lives there while the run writes it
    try:
        with Lock(out / ".lock", f"--out {out}"):
            return solve_and_save(problem, args, rest, callback, hyper, out, here)
    finally:
        if created and not any(out.iterdir()):  # a run that failed before it had anything to keep
            out.rmdir()


def solve_and_save(
    problem: Any,
    args: argparse.Namespace,
    rest: list[str],
    callback: Callable | None,
    hyper: dict,
    out: Path,
    here: Any,
) -> int:
    """Run the method and write the run folder (the run up to a failure too, when the error carries it)."""
    import fullcomp as fc
    from fullcomp import distributed

    try:
        result = fc.solve(problem, args.method, **hyper, **solver_options(args, callback))
    except FullcompError as exc:
        # An OracleError carries the run up to the last finite state: keep it on disk before failing.
        partial = getattr(exc, "result", None)
        if partial is not None and here.writes:
            partial.info.update(run_info(args, rest))
            try:
                saved = save_run(partial, out)
            except OptionError as save_error:
                print(f"fullcomp run: {save_error}", file=sys.stderr)
            else:
                print(f"fullcomp run: saved the run up to the failure in {saved}/", file=sys.stderr)
        raise
    result.info.update(run_info(args, rest), world_size=here.size)
    if here.writes:  # one rank writes the run folder
        save_run(result, out)
        print(summary_text(result, out))
    distributed.leave()
    return 0


def launch(argv: list[str], nproc: int) -> int:
    """Re-run this command under torchrun on ``nproc`` local processes (loopback only, a free port)."""
    import socket
    import subprocess

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cut = argv.index("--") if "--" in argv else len(argv)  # the script's own options are left alone
    ours, kept, skip = argv[:cut], [], False
    for arg in ours:  # the same command without --nproc
        if skip or arg.startswith("--nproc="):
            skip = False
            continue
        if arg == "--nproc":
            skip = True
            continue
        kept.append(arg)
    kept += argv[cut:]
    runner = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1"]
    return subprocess.call([*runner, f"--master-port={port}", "-m", "fullcomp", *kept])


def parse_settings(pairs: list[str], parser: argparse.ArgumentParser) -> dict[str, Any]:
    """--set KEY=VALUE pairs as a dict; values are Python literals (4, 0.1, None, (0.5, 0.5)) or plain strings."""
    from fullcomp.run.options import SHARED

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.isidentifier():
            parser.error(f"--set takes KEY=VALUE pairs such as max_pricing=4; got {pair!r}")
        if key in SHARED:
            parser.error(f"--set {key}=...: {key} is a shared option; use --{key.replace('_', '-')}")
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key] = text
    return out


def solver_options(args: argparse.Namespace, callback: Callable | None) -> dict[str, Any]:
    """The shared options of fc.solve from the parsed `fullcomp run` options."""
    import torch

    return dict(
        iters=args.iters,
        seconds=args.seconds,
        seed=args.seed,
        device=args.device,
        dtype=None if args.dtype is None else getattr(torch, args.dtype),
        callback=callback,
        eval_every=args.eval_every if callback is not None else None,
        progress=not args.no_progress,
        checkpoint=args.checkpoint,
    )


def run_info(args: argparse.Namespace, rest: list[str]) -> dict[str, Any]:
    """What summary.json records about the command, beside the solver's own info."""
    return {
        "method": args.method,
        "script": str(args.script),
        "script_args": list(rest),  # the options after --
        "settings": list(args.set),
        "budget_iters": args.iters,
        "budget_seconds": args.seconds,
    }


def summary_text(result: Any, out: Path) -> str:
    """A few lines: the budget spent, the final estimates and how every evaluated metric moved."""
    info, history = result.info, result.history

    def final(column: str) -> Any:
        """The column's last recorded value (the closing row may not hold a method's own columns)."""
        return next((row[column] for row in reversed(history.rows) if column in row), None)

    estimates = [
        f"{label} {final(column):{fmt}}"
        for column, label, fmt in (
            ("objective_estimate", "final objective estimate", ".6g"),
            ("objective", "objective", ".6g"),
            ("gap_estimate", "gap estimate", ".3g"),
        )
        if isinstance(final(column), (int, float))
    ]
    lines = [
        f"{info['method']}: {info['iterations']} iterations, {info['optimizer_seconds']:.1f} optimizer seconds "
        f"(stopped by {info['stopped']})",
        ", ".join(estimates) or "no objective estimate recorded",
    ]
    standard = {"k", "time", "objective_estimate", "objective", "gap_estimate", "glmo_gap", "pricing_calls"}
    standard |= {"glmo_converged", "gamma"}
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

    def skipped(folder: Path, reason: str) -> None:
        print(f"fullcomp report: warning: skipping {folder}: {reason}", file=sys.stderr)

    # A corrupt run folder is left out with one warning line; the others are still reported.
    runs = report.find_runs(args.folder, on_skip=skipped)
    print(report.table(runs))
    if args.plot:
        for path in report.plot(runs, args.folder):
            print(f"saved {path}")
    return 0


# -------------------------------------------------------------------------- main

#: name -> (help, configure(parser), handler(args, rest, parser) -> exit code)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "run": ("run a method on a problem script and save the run folder", configure_run, run_command),
    "report": ("tabulate (and plot) the run folders under a folder", configure_report, report_command),
}


def build_parser(
    commands: dict[str, tuple[str, Callable, Callable]] | None = None,
    prog: str = "fullcomp",
    description: str = "Stochastic solvers for min F(f(x), x) over a convex set.",
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command's parser and one sub-parser per command of ``commands`` (default: ``fullcomp``'s own)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    subparsers = {}
    for name, (help_text, configure, _) in (COMMANDS if commands is None else commands).items():
        # allow_abbrev=False: `--se` must never be taken for --seed; an unknown option is an error
        # that suggests the closest one (see reject_unknown).
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        configure(p)
        subparsers[name] = p
    return parser, subparsers


def known_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The long options of ``parser`` and of the sub-command chosen in ``args`` (``bench movielens``)."""
    options = []
    for action in parser._actions:
        options += [o for o in action.option_strings if o.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                options += known_options(chosen, args)
    return options


def reject_unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]) -> None:
    """argparse error (exit 2) for arguments before ``--`` that ``parser`` does not know, with the closest
    known option for each mistyped one; for ``run``, a reminder that script options go after ``--``."""
    options = known_options(parser, args)
    message = f"unrecognized arguments: {' '.join(unknown)}"
    for token in unknown:
        if token.startswith("--") and len(token) > 2:
            name = token.split("=", 1)[0]
            close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
            if close:
                message += f"; {name}: did you mean {close[0]}?"
    if args.command == "run":
        message += f"; script options go after --: fullcomp run {args.script} [fullcomp options] -- {' '.join(unknown)}"
    parser.error(message)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fullcomp`` console script; returns the exit code."""
    parser, subparsers = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first -- belongs to the command's handler (the script, for `run`).
    before, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args, unknown = parser.parse_known_args(before)
    args.argv = argv  # `fullcomp run --nproc N` relaunches the same command under torchrun
    sub = subparsers[args.command]
    if unknown:
        reject_unknown(sub, args, unknown)
    _, _, handler = COMMANDS[args.command]
    from fullcomp.run import allocator

    allocator.tune()  # the command owns its process (FULLCOMP_MALLOC=system opts out)
    try:
        return handler(args, rest, sub)
    except FullcompError as exc:
        print(f"fullcomp {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
