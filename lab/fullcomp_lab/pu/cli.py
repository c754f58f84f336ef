"""``fullcomp-lab bench pu``: the command-line options and their run."""

from __future__ import annotations

import argparse
import math
import time

import torch

from fullcomp.errors import OptionError
from fullcomp_lab import harness
from fullcomp_lab.datasets.pu import RIDGE
from fullcomp_lab.pu.config import (
    BATCH,
    DATASETS,
    DEFAULT_CONFIG,
    EPOCHS,
    FINAL_SEEDS,
    METHODS,
    Workload,
    method_names,
)
from fullcomp_lab.pu.runs import bench_pu, gamma_ablation
from fullcomp_lab.pu.tables import plots, tables
from fullcomp_lab.pu.tuning import tune_pu

# ------------------------------------------------------------------------------------------------- CLI


def _floats(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or any(not (math.isfinite(v) and v > 0) for v in values):
        raise OptionError(f"expected comma-separated positive numbers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fullcomp-lab bench pu`` (see :func:`run_from_args`)."""
    parser.add_argument("--data", help="data folder or file (mnist_5k.csv.gz, MNIST/Fashion-MNIST IDX files, "
                        "CIFAR-10 python batches, fer2013.csv); omit for scikit-learn's digits")  # fmt: skip
    parser.add_argument("--dataset", choices=("auto", *DATASETS), default="auto", help="default: from the files")
    parser.add_argument("--out", default="runs/pu", help="output folder (default runs/pu)")
    harness.add_seeds(parser, FINAL_SEEDS, "default 0-3 (4 trials)")
    harness.add_methods(parser, method_names, f"subset of {','.join(METHODS)} (default all)")
    harness.add_positive(parser, "--epochs", int, EPOCHS, "passes over S_u (default 40)")
    harness.add_positive(parser, "--iters", int, None, "optional cap on iterations per run")
    harness.add_positive(parser, "--batch", int, BATCH, "points of S_+ and S_u per draw (64)")
    parser.add_argument("--ridge", type=float, default=RIDGE, help="lambda of lambda/2 ||w||^2 (default 0.01)")
    harness.add_config(parser, DEFAULT_CONFIG)
    parser.add_argument(
        "--gamma-ablation",
        type=harness.argparse_type(_floats),
        default=None,
        metavar="GAMMAS",
        help="instead of the methods, run SMAG for each gamma, e.g. 0.05,0.1,0.2,0.5,1,2 (Figure 2)",
    )
    parser.add_argument(
        "--tune", action="store_true", help="select the settings on --seeds over Section 5.1's grids, write --config"
    )
    parser.add_argument(
        "--search",
        choices=("grid", "coordinate"),
        default="grid",
        help="with --tune: the full grids (default) or two axis-by-axis sweeps over them",
    )
    harness.add_positive(parser, "--threads", int, 1, "torch threads (default 1: the batches are small)")
    harness.add_no_progress(parser)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the benchmark (or the gamma ablation, or the tuning) from parsed options, then write the
    tables and plots of ``--out``; prints one line per run, the wall time and the files written."""
    log = lambda line: print(line, flush=True)  # noqa: E731
    torch.set_num_threads(args.threads)
    common = dict(workload=Workload(args.epochs, args.iters, args.batch, ridge=args.ridge))
    started = time.perf_counter()
    if args.tune:
        path = args.config or DEFAULT_CONFIG
        tune_pu(args.data, args.dataset, args.methods, args.seeds, search=args.search, config_path=path, log=log,
                **common)  # fmt: skip
        print(f"wrote {path} in {time.perf_counter() - started:.0f} s")
        return 0
    if args.gamma_ablation is not None:
        gamma_ablation(args.data, args.dataset, args.gamma_ablation, args.seeds, args.out, config=args.config,
                       log=log, **common)  # fmt: skip
    else:
        bench_pu(args.data, args.dataset, args.seeds, args.methods, args.out, config=args.config,
                 progress=not args.no_progress, log=log, **common)  # fmt: skip
    print(f"wall time {time.perf_counter() - started:.1f} s")
    harness.write_report(args.out, tables, plots)
    return 0
