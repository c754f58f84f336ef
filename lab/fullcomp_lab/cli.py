"""The ``fullcomp-lab`` command: ``fullcomp-lab bench EXPERIMENT ...`` and ``fullcomp-lab report FOLDER``.

``bench`` runs a paper's protocol, then writes its tables and plots; ``report``
is ``fullcomp-lab report`` (one line per run folder, ``--plot`` curves) followed by
the aggregated tables (and SD-band curves) of every protocol whose runs the
folder holds.  Option errors are argparse's (exit code 2), library errors
(:class:`fullcomp.errors.FullcompError`) one ``fullcomp-lab <cmd>: error:`` line
and exit code 1, as for ``fullcomp``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

import fullcomp as fc
from fullcomp import cli, report
from fullcomp.errors import FullcompError

#: experiment -> (help, module); the module defines ``add_arguments(parser)`` and
#: ``run_from_args(args) -> int``, and, for ``fullcomp-lab report``, ``PROTOCOL`` (the
#: ``protocol`` value its run summaries carry), ``tables(folder)`` and ``plots(folder)``.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "movielens": (
        "group-robust matrix completion (HMSFW paper, Section 6): every method, seeds, optimizer-time budget",
        "fullcomp_lab.movielens",
    ),
    "pu": (
        "positive-unlabeled learning (SMAG paper, Section 5.1): SMAG against the DC baselines",
        "fullcomp_lab.pu",
    ),
    "pauc-fairness": (
        "partial AUC with an adversarial fairness regularizer (SMAG paper, Section 5.2)",
        "fullcomp_lab.pauc",
    ),
    "group-dro": (
        "group-robust training of a network (Colored MNIST, Adult): HMSFW against ERM and Group DRO",
        "fullcomp_lab.groupdro",
    ),
}


def experiment_module(name: str) -> Any:
    # Imported on demand: `fullcomp-lab bench pu` should not pay for the other protocols' imports.
    return importlib.import_module(EXPERIMENTS[name][1])


def configure_bench(parser: argparse.ArgumentParser) -> None:
    targets = parser.add_subparsers(dest="target", metavar="EXPERIMENT", required=True)
    for name, (help_text, _) in EXPERIMENTS.items():
        sub = targets.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        experiment_module(name).add_arguments(sub)


def bench_command(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    """``fullcomp-lab bench EXPERIMENT``: run a paper protocol, then write its tables and plots."""
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return experiment_module(args.target).run_from_args(args)


def report_command(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    """``fullcomp-lab report FOLDER``: ``fullcomp-lab report``'s table, then each protocol's aggregated tables."""
    code = cli.report_command(args, rest, parser)
    if code:
        return code
    # The run folders are read a second time here (the library's command returns only its exit code); a
    # corrupt folder was already warned about above, so its warning is not repeated.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", report.CorruptRunWarning)
        protocols = {run.summary.get("protocol") for run in report.find_runs(args.folder)}
        for name in EXPERIMENTS:
            module = experiment_module(name)
            if module.PROTOCOL not in protocols:
                continue
            written = module.tables(args.folder)
            print(f"wrote {written.csv} and {written.markdown}")
            if args.plot:
                for path in module.plots(args.folder):
                    print(f"saved {path}")
    return 0


#: name -> (help, configure(parser), handler(args, rest, parser) -> exit code)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "bench": ("run a paper's experiment protocol (bench movielens ...)", configure_bench, bench_command),
    "report": (
        "tabulate (and plot) the run folders under a folder, with each protocol's aggregated tables",
        cli.configure_report,
        report_command,
    ),
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fullcomp-lab`` console script (and of ``python -m fullcomp_lab``); returns the exit code."""
    parser, subparsers = cli.build_parser(
        COMMANDS, "fullcomp-lab", "The papers' experiment protocols of fullcomp: run them and tabulate them."
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    sub = subparsers[args.command]
    if unknown:
        cli.reject_unknown(sub, args, unknown)
    fc.tune_allocator()  # the command owns its process (FULLCOMP_MALLOC=system opts out)
    try:
        return COMMANDS[args.command][2](args, [], sub)
    except FullcompError as exc:
        print(f"fullcomp-lab {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
