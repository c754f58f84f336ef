"""The MovieLens protocol's compared methods, constants and frozen configuration."""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fullcomp.algorithms.hmsfw import hmsfw, scfw
from fullcomp.algorithms.linasa import linasa_icg
from fullcomp.algorithms.prox_linear import prox_linear
from fullcomp.algorithms.psg import psg
from fullcomp.datasets import movielens, synthetic_ratings
from fullcomp.datasets.ratings import RatingData
from fullcomp.errors import OptionError
from fullcomp.experiments.completion import OBJECTIVES
from fullcomp.experiments.harness import (
    ProtocolMethod,
    check_keys,
    read_config,
    select_methods,
)
from fullcomp.run import write_atomic

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


# Fixed-budget HMSFW: glmo_tol=None with max_pricing set, so only the cap on pricing calls stops the GLMO.
_FB = {"glmo_tol": None}
FB = frozenset({"fixed-budget"})

#: The nine methods in the paper's table order.
METHODS: dict[str, ProtocolMethod] = {
    m.name: m
    for m in (
        ProtocolMethod("hmsfw-i", "HMSFW I", hmsfw, ("pool",), {"variant": "polyak"}),
        ProtocolMethod(
            "hmsfw-i-fb",
            "HMSFW I FB",
            hmsfw,
            ("max_pricing", "pool"),
            {"variant": "polyak", **_FB},
            tags=FB,
        ),
        ProtocolMethod("hmsfw-ii", "HMSFW II", hmsfw, ("pool",), {"variant": "taylor"}),
        ProtocolMethod(
            "hmsfw-ii-fb",
            "HMSFW II FB",
            hmsfw,
            ("max_pricing", "pool"),
            {"variant": "taylor", **_FB},
            tags=FB,
        ),
        ProtocolMethod("scfw", "Vanilla SCFW", scfw, ("pool",)),
        ProtocolMethod("clipped-scfw", "Clipped SCFW", scfw, ("clip", "pool")),
        ProtocolMethod("psg", "PSG", psg, ("eta",), {"step": "constant"}),
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


@dataclass
class ProtocolConfig:
    """Frozen method settings and radius scales per objective, plus free-form provenance.

    ``settings[objective][method]`` is the dict a runner reads; ``radius_scale[objective]``
    multiplies :func:`~fullcomp.experiments.completion.base_radius`; ``meta`` records
    where the values come from (source, data, tuning grids and scores).
    """

    settings: dict[str, dict[str, dict[str, Any]]]
    radius_scale: dict[str, float]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for objective in OBJECTIVES:
            if objective not in self.settings or objective not in self.radius_scale:
                raise OptionError(f"the configuration needs settings and a radius_scale for objective {objective!r}")
            scale = self.radius_scale[objective]
            if (
                isinstance(scale, bool)
                or not isinstance(scale, (int, float))
                or not (math.isfinite(scale) and scale > 0)
            ):
                raise OptionError(f"radius_scale[{objective!r}] must be a positive number, got {scale!r}")
            for method, settings in self.settings[objective].items():
                self.settings[objective][method] = check_settings(method, settings)

    def settings_for(self, objective: str, method: str) -> dict[str, Any]:
        try:
            return dict(self.settings[objective][method])
        except KeyError:
            raise OptionError(f"the configuration has no settings for {method} with objective {objective}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"radius_scale": dict(self.radius_scale), "settings": copy.deepcopy(self.settings), **self.meta}

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "configuration") -> ProtocolConfig:
        if not isinstance(data, dict) or "settings" not in data or "radius_scale" not in data:
            raise OptionError(f"{origin} must be a JSON object with 'settings' and 'radius_scale'")
        meta = {k: v for k, v in data.items() if k not in ("settings", "radius_scale")}
        try:
            return cls(copy.deepcopy(data["settings"]), dict(data["radius_scale"]), copy.deepcopy(meta))
        except OptionError as exc:
            raise OptionError(f"{origin}: {exc}") from None

    def save(self, path: str | os.PathLike) -> Path:
        # Full precision: json writes floats with repr, which round-trips exactly.
        write_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return Path(path)


def load_config(config: str | os.PathLike | dict | ProtocolConfig | None = None) -> ProtocolConfig:
    """The protocol configuration: a path to JSON, a dict, a :class:`ProtocolConfig` or None (the committed one)."""
    if isinstance(config, ProtocolConfig):
        return config
    data, origin = read_config(config, DEFAULT_CONFIG, "pass the JSON written by tune_movielens")
    return ProtocolConfig.from_dict(data, origin=origin)


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
