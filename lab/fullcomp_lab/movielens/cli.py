"""``fullcomp-lab bench movielens``: the command-line options and their run."""

from __future__ import annotations

import argparse
import re

from fullcomp.errors import OptionError
from fullcomp_lab import harness
from fullcomp_lab.completion import OBJECTIVES
from fullcomp_lab.movielens.config import BATCH, CLOCK, DEFAULT_CONFIG, FINAL_SEEDS, METHODS, method_names
from fullcomp_lab.movielens.runs import bench_movielens
from fullcomp_lab.movielens.tables import plots, tables

# ---------------------------------------------------------------------------------------------- CLI glue


def _shape(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*", text)
    if not match:
        raise OptionError(f"shape must look like 943x1682, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fullcomp-lab bench movielens`` (see :func:`run_from_args`)."""
    parser.add_argument(
        "--data",
        help="MovieLens folder (u.data + u.user, or ratings.dat + users.dat); "
        "omit for synthetic data of the --synthetic-* size",
    )
    parser.add_argument("--objective", choices=(*OBJECTIVES, "both"), default="max", help="default max")
    harness.add_positive(
        parser,
        "--budget",
        float,
        120.0,
        "optimizer seconds per run (default 120; the paper used 1200 for MovieLens-1M)",
    )
    harness.add_seeds(parser, FINAL_SEEDS, "e.g. 2000-2004 (default) or 1000,1001")
    harness.add_methods(parser, method_names, f"comma-separated subset of {','.join(METHODS)} (default all)")
    parser.add_argument("--out", default="runs/movielens", help="output folder (default runs/movielens)")
    harness.add_positive(
        parser, "--radius-scale", float, None, "multiple of sqrt(P Q); default the configuration's validated scale"
    )
    harness.add_positive(
        parser, "--eval-every", int, 5, "updates between evaluations (default 5; outside optimizer time)"
    )
    harness.add_config(parser, DEFAULT_CONFIG)
    harness.add_positive(parser, "--iters", int, None, "optional cap on updates per run")
    harness.add_positive(parser, "--batch", int, BATCH, "ratings per group (default 1024)")
    harness.add_typed(parser, "--synthetic-shape", _shape, (943, 1682), "default 943x1682")
    harness.add_positive(parser, "--synthetic-ratings", int, 100_000, "default 100000")
    parser.add_argument("--synthetic-seed", type=int, default=0, help="default 0")
    parser.add_argument("--no-save-x", action="store_true", help="do not write the dense final iterate x.npy")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default=CLOCK,
        help="optimizer seconds as CPU seconds of the single-threaded run (default) or elapsed seconds",
    )
    parser.add_argument("--fresh", action="store_true", help="rerun runs already finished in --out")
    harness.add_no_progress(parser)


def run_from_args(args: argparse.Namespace) -> int:
    """Run :func:`bench_movielens` from parsed :func:`add_arguments` options, then write the
    tables and plots; prints one line per run and the files written.  Returns the exit code (0)."""
    synthetic = None
    if args.data is None:
        synthetic = {"shape": args.synthetic_shape, "n_ratings": args.synthetic_ratings, "seed": args.synthetic_seed}
    bench_movielens(
        args.data,
        args.objective,
        args.budget,
        args.seeds,
        args.methods,
        args.out,
        args.radius_scale,
        args.eval_every,
        config=args.config,
        iters=args.iters,
        batch=args.batch,
        synthetic=synthetic,
        save_x=not args.no_save_x,
        clock=args.clock,
        resume=not args.fresh,
        progress=not args.no_progress,
        log=lambda line: print(line, flush=True),
    )
    harness.write_report(args.out, tables, plots)
    return 0
