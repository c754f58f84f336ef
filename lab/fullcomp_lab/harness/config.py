"""A protocol's frozen configuration: one schema for all, validated once when it is read."""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fullcomp.errors import OptionError
from fullcomp.run import write_atomic


@dataclass(frozen=True)
class ConfigSchema:
    """How a protocol's configuration looks.

    ``settings[block][method]`` holds what a method's runner reads, a block being a data set (PU, pAUC)
    or an objective (MovieLens), checked by ``check(method, settings)``.  ``fields`` name values the
    protocol keeps per block beside the settings (MovieLens's radius scale, pAUC's workload), each with
    the check that returns it normalized.  Every block of ``blocks`` must hold settings and every field.
    A block without a method's settings takes ``fallback``'s.  Any other top-level key is provenance
    (``meta``): tuning grids, scores, dates.  ``default`` is the committed file and ``hint`` tells a user
    without it how to write one.
    """

    default: Path
    hint: str
    check: Callable[[str, Any], dict[str, Any]]
    blocks: tuple[str, ...] = ()
    fields: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    fallback: str | None = None

    def load(self, config: str | os.PathLike | dict | ProtocolConfig | None = None) -> ProtocolConfig:
        """A configuration from a JSON path, a dict (copied), a :class:`ProtocolConfig` or None (the committed one)."""
        if isinstance(config, ProtocolConfig):
            return config
        if isinstance(config, dict):
            return self.from_dict(copy.deepcopy(config))
        path = Path(self.default if config is None else config)
        if not path.is_file():
            raise OptionError(f"configuration file {path} not found; {self.hint}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise OptionError(f"configuration file {path} is not valid JSON: {exc}") from None
        return self.from_dict(data, str(path))

    def from_dict(self, data: Any, origin: str = "configuration") -> ProtocolConfig:
        if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
            raise OptionError(f"{origin} must be a JSON object with 'settings': {{block: {{method: settings}}}}")
        fields = {name: data.get(name, {}) for name in self.fields}
        meta = {k: v for k, v in data.items() if k != "settings" and k not in self.fields}
        try:
            return ProtocolConfig(self, data["settings"], fields, meta)
        except OptionError as exc:
            raise OptionError(f"{origin}: {exc}") from None

    def empty(self) -> ProtocolConfig:
        """A configuration with no settings yet, for a tuning that starts from nothing."""
        return ProtocolConfig(self, {}, {name: {} for name in self.fields}, {})


@dataclass
class ProtocolConfig:
    """Frozen method settings per block, per-block fields and free-form provenance (see :class:`ConfigSchema`)."""

    schema: ConfigSchema = field(repr=False)
    settings: dict[str, dict[str, dict[str, Any]]]
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, check in self.schema.fields.items():
            values = self.fields.setdefault(name, {})
            if not isinstance(values, dict):
                raise OptionError(f"{name} must map each block to its value, got {values!r}")
            for block, value in values.items():
                try:
                    values[block] = check(value)
                except OptionError as exc:
                    raise OptionError(f"{name}[{block!r}] {exc}") from None
        for block in self.schema.blocks:
            missing = [name for name in self.schema.fields if block not in self.fields[name]]
            if block not in self.settings or missing:
                needs = " and ".join((["settings"] if block not in self.settings else []) + missing)
                raise OptionError(f"the configuration needs {needs} for {block!r}")
        for block, methods in self.settings.items():
            if not isinstance(methods, dict):
                raise OptionError(f"settings[{block!r}] must map methods to their settings, got {methods!r}")
            for method, settings in methods.items():
                try:
                    methods[method] = self.schema.check(method, settings)
                except OptionError as exc:
                    raise OptionError(f"{block}: {exc}") from None

    def tuned_on(self, block: str, method: str) -> str:
        """The block whose settings of ``method`` serve ``block``: its own, else the schema's fallback."""
        for key in (block, self.schema.fallback):
            if key is not None and method in self.settings.get(key, {}):
                return key
        also = f" (nor {self.schema.fallback})" if self.schema.fallback else ""
        raise OptionError(f"the configuration has no settings for {method} on {block}{also}; run the tuning first")

    def settings_for(self, block: str, method: str) -> dict[str, Any]:
        """A copy of the settings of ``method`` that serve ``block``."""
        return dict(self.settings[self.tuned_on(block, method)][method])

    def set(self, block: str, method: str, settings: dict[str, Any]) -> None:
        """Freeze ``settings`` for ``method`` on ``block``, checked."""
        self.settings.setdefault(block, {})[method] = self.schema.check(method, settings)

    def set_field(self, name: str, block: str, value: Any) -> None:
        """Set the field ``name`` of ``block``, checked."""
        try:
            self.fields[name][block] = self.schema.fields[name](value)
        except OptionError as exc:
            raise OptionError(f"{name}[{block!r}] {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy({"settings": self.settings, **self.fields, **self.meta})

    def save(self, path: str | os.PathLike) -> Path:
        # Full precision: json writes floats with repr, which round-trips exactly.
        write_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return Path(path)


def positive_number(value: Any) -> float:
    """``value`` as a float, refused unless it is a positive finite number (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise OptionError(f"must be a positive number, got {value!r}")
    return float(value)
