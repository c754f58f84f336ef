"""``fullcomp-lab bench pauc-fairness``: the command-line options and their run."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from fullcomp_lab import harness
from fullcomp_lab.pauc.config import (
    DEFAULT_BUDGETS,
    DEFAULT_CONFIG,
    FINAL_SEEDS,
    METHODS,
    TUNING_SEEDS,
    Workload,
    load,
    method_names,
)
from fullcomp_lab.pauc.runs import bench_pauc, select_settings
from fullcomp_lab.pauc.tables import plots, tables

# ---------------------------------------------------------------------------------------------- CLI glue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fullcomp-lab bench pauc-fairness`` (see :func:`run_from_args`)."""
    parser.add_argument("--data", required=True, help="folder with adult.data + adult.test, or with german.data")
    parser.add_argument("--out", default="runs/pauc", help="output folder (default runs/pauc)")
    harness.add_seeds(parser, FINAL_SEEDS, "e.g. 2000-2002 (default) or 1,2")
    harness.add_methods(parser, method_names, f"comma-separated subset of {','.join(METHODS)}")
    harness.add_positive(parser, "--iters", int, None, "iterations per run (default: the configuration's)")
    harness.add_positive(parser, "--eval-every", int, 50, "iterations between evaluations (default 50)")
    harness.add_config(parser, DEFAULT_CONFIG)
    parser.add_argument(
        "--select",
        action="store_true",
        help="first choose the settings on the validation split (DEFAULT_GRIDS, tuning seed 1000) and write "
        "them to --config (default OUT/pauc-config.json), then run the seeds with them",
    )
    tuning_help = "seeds of the --select runs (default 1000), distinct from the reported --seeds"
    harness.add_seeds(parser, TUNING_SEEDS, tuning_help, flag="--tuning-seeds")
    harness.add_no_progress(parser)


def run_from_args(args: argparse.Namespace) -> int:
    """Optionally select settings, run :func:`bench_pauc`, then write the tables and plots; prints wall times."""
    torch.set_num_threads(1)  # small models: threads only contend on a shared machine
    log = lambda line: print(line, flush=True)  # noqa: E731
    started = time.perf_counter()
    data = load(args.data)
    config = args.config
    if args.select:
        config = config or str(Path(args.out) / "pauc-config.json")
        workload = None
        if args.iters is not None:
            base = DEFAULT_BUDGETS.get(data.name, Workload(500))
            workload = Workload(args.iters, base.batch_pos, base.batch_neg)
        select_settings(
            data,
            args.methods,
            seeds=args.tuning_seeds,
            workload=workload,
            config_path=config,
            base_config=args.config if args.config and Path(args.config).is_file() else None,
            log=log,
        )
        log(f"selection on {data.name}: {time.perf_counter() - started:.1f} s wall; settings in {config}")
    bench_started = time.perf_counter()
    bench_pauc(
        args.data,
        args.seeds,
        args.methods,
        args.out,
        config=config,
        iters=args.iters,
        eval_every=args.eval_every,
        data=data,
        progress=not args.no_progress,
        log=log,
    )
    log(f"runs on {data.name}: {time.perf_counter() - bench_started:.1f} s wall")
    harness.write_report(args.out, tables, plots)
    log(f"total: {time.perf_counter() - started:.1f} s wall")
    return 0
