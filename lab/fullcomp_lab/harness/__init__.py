"""What every experiment protocol shares (MovieLens :mod:`~fullcomp_lab.movielens`, PU learning
:mod:`~fullcomp_lab.pu`, pAUC fairness :mod:`~fullcomp_lab.pauc`), written once.

* :mod:`.methods`: :class:`ProtocolMethod`, the spec of a compared method, and the checks of names and
  settings against a protocol's registry.
* :mod:`.config`: :class:`ConfigSchema` and :class:`ProtocolConfig`, the frozen settings per data set or
  objective, validated once when read.
* :mod:`.search`: the tuning searches (:func:`grid_search`, :func:`coordinate_search`, or your own).
* :mod:`.tables`: the CSV and Markdown tables.
* :mod:`.cli`: the options of ``fullcomp-lab bench <protocol>``, the run log and the report after it.
"""

from fullcomp_lab.harness.cli import (
    add_config,
    add_methods,
    add_no_progress,
    add_positive,
    add_seeds,
    add_typed,
    argparse_type,
    check_seeds,
    emit,
    parse_seeds,
    positive_parser,
    write_report,
)
from fullcomp_lab.harness.config import ConfigSchema, ProtocolConfig, positive_number
from fullcomp_lab.harness.methods import ProtocolMethod, check_keys, positive_settings, select_methods
from fullcomp_lab.harness.search import (
    Search,
    coordinate_search,
    grid_edges,
    grid_search,
    resolve_search,
    search_points,
)
from fullcomp_lab.harness.tables import (
    RunFolder,
    TableFiles,
    best_mean,
    by_seed,
    cell,
    csv_text,
    group_runs,
    grouped,
    markdown_table,
    mean_cells,
    mean_sd,
    protocol_runs,
    rank_rows,
    save_figure,
    seed_columns,
    write_tables,
)

__all__ = [
    "ConfigSchema",
    "ProtocolConfig",
    "ProtocolMethod",
    "RunFolder",
    "Search",
    "TableFiles",
    "mean_sd",
    "protocol_runs",
    "add_config",
    "add_methods",
    "add_no_progress",
    "add_positive",
    "add_seeds",
    "add_typed",
    "argparse_type",
    "best_mean",
    "by_seed",
    "cell",
    "check_keys",
    "check_seeds",
    "coordinate_search",
    "csv_text",
    "emit",
    "grid_edges",
    "grid_search",
    "group_runs",
    "grouped",
    "markdown_table",
    "mean_cells",
    "parse_seeds",
    "positive_number",
    "positive_parser",
    "positive_settings",
    "rank_rows",
    "resolve_search",
    "save_figure",
    "search_points",
    "seed_columns",
    "select_methods",
    "write_tables",
    "write_report",
]
