"""The MovieLens protocol's compared methods, constants and frozen configuration."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fullcomp import hmsfw, linasa_icg, prox_linear, psg, scfw
from fullcomp.datasets import RatingData, synthetic_ratings
from fullcomp.errors import OptionError
from fullcomp_lab.completion import OBJECTIVES
from fullcomp_lab.datasets.movielens import movielens
from fullcomp_lab.harness import (
    ConfigSchema,
    ProtocolMethod,
    check_keys,
    positive_number,
    select_methods,
)

#: The committed, frozen method settings and radius scales.
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "movielens.json"
FINAL_SEEDS = (2000, 2001, 2002, 2003, 2004)
TUNING_SEEDS = (1000, 1001)
RADIUS_SCALES = (0.5, 1.0, 2.0, 4.0)
BATCH = 1024
CLOCK = "cpu"  # optimizer seconds = CPU seconds of the single-threaded run (see run_method)
OBJECTIVE_LABELS = {"max": "Max", "cvar": "CVaR0.3"}
#: Tag written into every run's summary.json, so tables() never mixes in other run folders.
PROTOCOL = "movielens"

# ---------------------------------------------------------------------------------------------- methods


FB = frozenset({"fixed-budget"})
_HMSFW = (("hmsfw-i", "HMSFW I", "polyak"), ("hmsfw-ii", "HMSFW II", "taylor"))


def _hmsfw(name: str, label: str, variant: str, fixed_budget: bool) -> ProtocolMethod:
    if not fixed_budget:
        return ProtocolMethod(name, label, hmsfw, ("pool",), {"variant": variant})
    # glmo_tol=None with max_pricing set: only the cap on pricing calls stops the GLMO.
    fixed = {"variant": variant, "glmo_tol": None}
    return ProtocolMethod(f"{name}-fb", f"{label} FB", hmsfw, ("max_pricing", "pool"), fixed, tags=FB)


#: The nine methods in the paper's table order.
METHODS: dict[str, ProtocolMethod] = {
    m.name: m
    for m in (
        *(_hmsfw(name, label, variant, fb) for name, label, variant in _HMSFW for fb in (False, True)),
        ProtocolMethod("scfw", "Vanilla SCFW", scfw, ("pool",)),
        ProtocolMethod("clipped-scfw", "Clipped SCFW", scfw, ("clip", "pool")),
        ProtocolMethod("psg", "PSG", psg, ("eta",), {"step_size": "constant"}),
        ProtocolMethod("prox-linear", "Prox-linear", prox_linear, ("M", "inner_iters")),
        ProtocolMethod(
            "linasa-icg", "LiNASA+ICG", linasa_icg, ("mu", "beta", "horizon", "delta", "smoothing", "icg_steps")
        ),
    )
}


def method_names(methods: str | Iterable[str] | None) -> list[str]:
    """Validated method names in the paper's order (None: all nine); a comma-separated string is accepted."""
    return select_methods(methods, METHODS)


def objective_names(objective: str | Iterable[str]) -> list[str]:
    """``"max"``, ``"cvar"``, ``"both"`` or a sequence of them, validated."""
    if isinstance(objective, str):
        objective = list(OBJECTIVES) if objective == "both" else [objective]
    names = list(objective)
    bad = [o for o in names if o not in OBJECTIVES]
    if bad or not names:
        raise OptionError(f"objective must be 'max', 'cvar' or 'both', got {bad or names}")
    return [o for o in OBJECTIVES if o in names]


def check_settings(method: str, settings: Any) -> dict[str, Any]:
    """The settings of ``method`` as a dict holding exactly the keys its runner reads."""
    keys = check_keys(method, settings, METHODS)
    return {k: settings[k] for k in keys}


# ----------------------------------------------------------------------------------------------- config

#: ``settings[objective][method]`` and ``radius_scale[objective]`` (a multiple of
#: :func:`~fullcomp_lab.completion.base_radius`), for both objectives.
SCHEMA = ConfigSchema(
    DEFAULT_CONFIG,
    "pass the JSON written by tune_movielens",
    check_settings,
    blocks=tuple(OBJECTIVES),
    fields={"radius_scale": positive_number},
)


#: The protocol configuration: a path to JSON, a dict, a ProtocolConfig or None (the committed one).
load_config = SCHEMA.load


# ------------------------------------------------------------------------------------------------ data


def load_data(
    data_dir: str | os.PathLike | None, synthetic: dict[str, Any] | None = None, cache: bool | str | os.PathLike = True
) -> RatingData:
    """MovieLens from ``data_dir`` (split saved and reused), or ``synthetic_ratings(**synthetic)`` when None."""
    if data_dir is not None:
        if synthetic:
            raise OptionError("give either data_dir (MovieLens files) or synthetic options, not both")
        return movielens(data_dir, cache=cache)
    return synthetic_ratings(**(synthetic or {}))
