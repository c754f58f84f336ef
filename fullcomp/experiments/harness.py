"""The pieces every experiment protocol shares (MovieLens :mod:`~fullcomp.experiments.movielens`, PU learning
:mod:`~fullcomp.experiments.pu`, pAUC fairness :mod:`~fullcomp.experiments.pauc`).

* :func:`emit`: the optional one-line log of a bench run.
* :class:`TableFiles`, :func:`csv_text`, :func:`write_tables`, :func:`cell`, :func:`best_mean`,
  :func:`by_seed` and :func:`seed_columns`: the CSV and Markdown tables.
* :func:`parse_seeds`, :func:`argparse_type`, :func:`positive_parser` and the ``add_*`` option helpers: the
  command-line options of ``fullcomp bench <protocol>``, and :func:`write_report` (tables and plots) after it.
"""

from __future__ import annotations

import argparse
import copy
import csv
import functools
import io
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.errors import OptionError
from fullcomp.run import write_atomic

# ------------------------------------------------------------------------------------------------ logging


def emit(log: Callable[[str], None] | None, text: str) -> None:
    """Pass ``text`` to ``log`` unless it is None."""
    if log is not None:
        log(text)


# ------------------------------------------------------------------------------------------------- tables


@dataclass
class TableFiles:
    """What a protocol's ``tables`` wrote: the CSV and Markdown paths and the rows themselves."""

    csv: Path
    markdown: Path
    rows: list[dict[str, Any]]


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV (``\\n`` line ends): every key of any row in order of first appearance, blank where a
    row lacks one."""
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in rows for k in r))
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_tables(
    out_dir: str | os.PathLike,
    stem: str,
    csv_rows: Sequence[dict[str, Any]],
    markdown: str,
    rows: list[dict[str, Any]] | None = None,
) -> TableFiles:
    """Write ``out_dir/<stem>.csv`` (``csv_rows``) and ``out_dir/<stem>.md`` (``markdown``) atomically; the
    returned :class:`TableFiles` holds ``rows`` (default the CSV rows)."""
    out = Path(out_dir)
    write_atomic(out / f"{stem}.csv", csv_text(csv_rows))
    write_atomic(out / f"{stem}.md", markdown)
    return TableFiles(out / f"{stem}.csv", out / f"{stem}.md", list(csv_rows) if rows is None else rows)


def by_seed(runs: Iterable[Any]) -> list[Any]:
    """Run folders (with a ``summary`` dict) sorted by their seed."""
    return sorted(runs, key=lambda r: int(r.summary.get("seed", 0)))


def seed_columns(runs: Sequence[Any]) -> dict[str, Any]:
    """The ``seeds`` (space-separated) and ``n_seeds`` columns of a table row over ``runs``."""
    return {"seeds": " ".join(str(r.summary.get("seed", "")) for r in runs), "n_seeds": len(runs)}


def best_mean(rows: Iterable[dict[str, Any]], key: str, higher: bool | None) -> float | None:
    """The best finite ``<key>_mean`` of ``rows`` (the highest if ``higher``, else the lowest); None where
    ``higher`` is None (a column not ranked) or no mean is finite."""
    means = [r[f"{key}_mean"] for r in rows if math.isfinite(r[f"{key}_mean"])]
    if higher is None or not means:
        return None
    return max(means) if higher else min(means)


def cell(mean: float, sd: float, digits: int, bold: bool = False) -> str:
    """A Markdown table cell ``mean ± sd`` (only the mean when SD is NaN), "n/a" for a NaN mean and
    "diverged" for an infinite one."""
    if math.isnan(mean):
        return "n/a"
    if math.isinf(mean):
        return "diverged"
    text = f"{mean:.{digits}f}" if math.isnan(sd) else f"{mean:.{digits}f} ± {sd:.{digits}f}"
    return f"**{text}**" if bold else text


# -------------------------------------------------------------------------------------------------- CLI


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


__all__ = [
    "emit",
    "TableFiles",
    "csv_text",
    "write_tables",
    "by_seed",
    "seed_columns",
    "best_mean",
    "cell",
    "parse_seeds",
    "argparse_type",
    "positive_parser",
    "add_typed",
    "add_positive",
    "add_seeds",
    "add_methods",
    "add_config",
    "add_no_progress",
    "write_report",
]


@dataclass(frozen=True)
class ProtocolMethod:
    """One compared method of a protocol: its name there, the paper's label, the library's entry point,
    the options the protocol fixes, and the settings keys it reads from the configuration.

    Settings are passed to the solver under their own names, except ``protocol_keys``, which the
    protocol uses itself (the pAUC adversary's weight alpha builds the problem); ``tags`` mark
    families a protocol treats apart (MovieLens draws its fixed-budget variants dashed).
    """

    name: str
    label: str
    solver: Callable[..., Any]
    keys: tuple[str, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    protocol_keys: tuple[str, ...] = ()
    tags: frozenset[str] = frozenset()

    def options(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The solver's options for ``settings``: the fixed ones, then every key it reads."""
        return {**self.fixed, **{k: settings[k] for k in self.keys if k not in self.protocol_keys}}

    def run(self, problem: Any, settings: Mapping[str, Any], **run_options: Any) -> Any:
        """The solver on ``problem`` with these settings and the run's shared options (budget, seed, ...)."""
        return self.solver(problem, **self.options(settings), **run_options)


def select_methods(methods: str | Iterable[str] | None, registry: Iterable[str]) -> list[str]:
    """Validated names from ``registry`` in its order (None: all); a comma-separated string is accepted."""
    order = list(registry)
    if methods is None:
        return order
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    names = list(methods)
    unknown = [m for m in names if m not in order]
    if unknown or not names:
        raise OptionError(f"unknown method(s) {unknown or names}; choose from {', '.join(order)}")
    return [m for m in order if m in names]


def check_keys(method: str, settings: Any, registry: dict[str, Any]) -> tuple[str, ...]:
    """The keys of ``registry[method]``, after refusing an unknown method or settings without exactly those keys."""
    if method not in registry:
        raise OptionError(f"unknown method {method!r}; choose from {', '.join(registry)}")
    if not isinstance(settings, dict):
        raise OptionError(f"settings of {method} must be a dict, got {type(settings).__name__}")
    keys = registry[method].keys
    missing = [k for k in keys if k not in settings]
    extra = [k for k in settings if k not in keys]
    if missing or extra:
        raise OptionError(
            f"settings of {method} must hold exactly {', '.join(keys)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(extra)}" if extra else "")
        )
    return keys


def read_config(config: str | os.PathLike | dict | None, default: Path, hint: str) -> tuple[Any, str]:
    """A configuration given as a dict (copied) or a JSON file (None: ``default``), and its name for messages.

    ``hint`` tells a user without the file how to write one.
    """
    if isinstance(config, dict):
        return copy.deepcopy(config), "configuration"
    path = Path(default if config is None else config)
    if not path.is_file():
        raise OptionError(f"configuration file {path} not found; {hint}")
    try:
        return json.loads(path.read_text()), str(path)
    except json.JSONDecodeError as exc:
        raise OptionError(f"configuration file {path} is not valid JSON: {exc}") from None


def check_dataset_settings(data: Any, origin: str, check: Callable[[str, Any], dict]) -> dict[str, Any]:
    """Validate ``{"settings": {dataset: {method: settings}}}`` in place with ``check(method, settings)``."""
    if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
        raise OptionError(f"{origin} must be a JSON object with 'settings': {{dataset: {{method: settings}}}}")
    for dataset, block in data["settings"].items():
        for method, settings in block.items():
            try:
                block[method] = check(method, settings)
            except OptionError as exc:
                raise OptionError(f"{origin}, {dataset}: {exc}") from None
    return data


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


# ------------------------------------------------------------------------------------------------ tuning

#: A search visits points of a grid {setting: [values]} and calls ``score(point)`` on each (lower is better;
#: a protocol's score records what it ran, so the final choice may use more than the score).
Search = Callable[[dict[str, list], Callable[[dict[str, Any]], float]], None]


def grid_search(grid: dict[str, list], score: Callable[[dict[str, Any]], float]) -> None:
    """Every point of the product, the first setting varying slowest (the grid's order breaks ties)."""
    for values in itertools.product(*grid.values()):
        score(dict(zip(grid, values)))


def coordinate_search(grid: dict[str, list], score: Callable[[dict[str, Any]], float], sweeps: int = 2) -> None:
    """Start at every axis's middle value and, ``sweeps`` times, scan one axis at a time over all its values
    with the others at the best point so far (each axis in full, not the product).  Revisits call
    ``score`` again: a score that caches makes them free."""
    best = {k: v[len(v) // 2] for k, v in grid.items()}
    for _ in range(sweeps):
        for axis, values in grid.items():
            points = [{**best, axis: v} for v in values]
            scores = [score(p) for p in points]
            best = points[int(np.argmin(scores))]


def resolve_search(search: str | Search, sweeps: int = 2) -> Search:
    """``"grid"``, ``"coordinate"`` (with ``sweeps``) or any callable ``search(grid, score)``."""
    if callable(search):
        return search
    if search == "grid":
        return grid_search
    if search == "coordinate":
        return functools.partial(coordinate_search, sweeps=sweeps)
    raise OptionError(
        f"search must be 'grid' (the full product), 'coordinate' (axis by axis) or a callable "
        f"search(grid, score), got {search!r}"
    )


def grid_edges(grid: dict[str, list], point: dict[str, Any]) -> list[str]:
    """The settings of ``point`` at an end of their grid axis (of more than one value): a choice there
    suggests extending the grid."""
    return [k for k, v in point.items() if k in grid and len(grid[k]) > 1 and v in (grid[k][0], grid[k][-1])]
