"""The command-line options of ``fullcomp-lab bench <protocol>`` and the report written after it."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.errors import OptionError
from fullcomp_lab.harness.tables import TableFiles


def emit(log: Callable[[str], None] | None, text: str) -> None:
    """Pass ``text`` to ``log`` unless it is None."""
    if log is not None:
        log(text)


def parse_seeds(text: str) -> list[int]:
    """``"2000-2004"``, ``"1000,1001"`` or ``"2000-2002,2007"`` as a list of ints."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"(-?\d+)\s*-\s*(-?\d+)", part)
        try:
            if match:
                a, b = int(match.group(1)), int(match.group(2))
                if b < a:
                    raise ValueError
                seeds += range(a, b + 1)
            else:
                seeds.append(int(part))
        except ValueError:
            raise OptionError(f"seeds must look like 2000-2004 or 1000,1001, got {text!r}") from None
    return seeds


def argparse_type(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser raising OptionError (argparse then reports a usage error)."""

    def convert(text: str) -> Any:
        try:
            return kind(text)
        except (OptionError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(kind, "__name__", "value")
    return convert


def positive_parser(cast: type) -> Callable[[str], Any]:
    """A parser of positive finite numbers of type ``cast``."""

    def parse(text: str) -> Any:
        value = cast(text)
        if not (value > 0 and math.isfinite(value)):
            raise OptionError(f"expected a positive number, got {text}")
        return value

    parse.__name__ = f"positive {cast.__name__}"
    return parse


def add_typed(parser: argparse.ArgumentParser, flag: str, parse: Callable[[str], Any], default: Any, help: str) -> None:
    """Add ``flag`` whose text ``parse`` converts (an OptionError becomes argparse's usage error)."""
    parser.add_argument(flag, type=argparse_type(parse), default=default, help=help)


def add_positive(parser: argparse.ArgumentParser, flag: str, cast: type, default: Any, help: str) -> None:
    """Add ``flag`` taking a positive number of type ``cast``."""
    add_typed(parser, flag, positive_parser(cast), default, help)


def add_seeds(parser: argparse.ArgumentParser, default: Iterable[int], help: str, flag: str = "--seeds") -> None:
    """Add ``--seeds`` (ranges and lists as :func:`parse_seeds` reads them; default the list ``default``)."""
    add_typed(parser, flag, parse_seeds, list(default), help)


def add_methods(parser: argparse.ArgumentParser, names: Callable[[str], list[str]], help: str) -> None:
    """Add ``--methods``: a comma-separated subset that ``names`` checks (default None: all of them)."""
    add_typed(parser, "--methods", names, None, help)


def add_config(parser: argparse.ArgumentParser, default_config: Path) -> None:
    """Add ``--config``: the frozen settings JSON (default None: the committed ``default_config``)."""
    parser.add_argument("--config", default=None, help=f"frozen settings JSON (default {default_config.name})")


def add_no_progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def write_report(
    out_dir: str | os.PathLike,
    tables: Callable[[str | os.PathLike], TableFiles],
    plots: Callable[[str | os.PathLike], list[Path]],
) -> None:
    """Write the tables and plots of ``out_dir`` and print the files written."""
    written = tables(out_dir)
    print(f"wrote {written.csv} and {written.markdown}")
    for path in plots(out_dir):
        print(f"wrote {path}")


def check_seeds(seeds: int | Iterable[int] | str) -> list[int]:
    """Seeds as a list of ints: one int, a list of ints, or a string like "2000-2004" or "1,2"."""
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        return [int(seeds)]
    out = list(seeds)
    if not out or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s in out):
        raise OptionError(f"seeds must be a non-empty list of ints, got {seeds!r}")
    return [int(s) for s in out]
