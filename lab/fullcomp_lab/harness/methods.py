"""A protocol's compared methods: the spec of one, and the checks of names and settings against them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fullcomp.errors import OptionError
from fullcomp_lab.harness.config import positive_number


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

    def run_fields(self, protocol: str, seed: int, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The fields every protocol's run summary starts with, which its tables select runs by."""
        return {"protocol": protocol, "method": self.name, "label": self.label, "seed": seed, "settings": settings}


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


def positive_settings(method: str, settings: Any, registry: dict[str, Any]) -> dict[str, float]:
    """The settings of ``method`` holding exactly the keys of ``registry[method]`` (:func:`check_keys`), each
    refused unless it is a positive number and returned as a float."""
    out = {}
    for k in check_keys(method, settings, registry):
        try:
            out[k] = positive_number(settings[k])
        except OptionError as exc:
            raise OptionError(f"setting {k} of {method} {exc}") from None
    return out
