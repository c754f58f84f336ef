"""The group-robust training protocol's compared methods, grids, workloads and configuration schema."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp.errors import OptionError
from fullcomp_lab.harness import ConfigSchema, ProtocolConfig, positive_settings, select_methods

#: Tag written into every run's summary.json, so tables() never mixes in other run folders.
PROTOCOL = "group-dro"
#: The committed frozen settings, if any (the bench tunes on validation and writes OUT/group-dro-config.json).
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "group-dro.json"
FINAL_SEEDS = (0, 1, 2, 3, 4)
TUNING_SEEDS = (100, 101)
#: The two data sets, in table order.
DATASETS = ("cmnist", "adult")
#: CVaR level of ``hmsfw-cvar``: the mean of the worst half of the four group losses.
CVAR_ALPHA = 0.5


@dataclass(frozen=True)
class GroupMethod:
    """One compared method: its name, label, how it trains and the settings keys it reads.

    ``kind`` is ``"torch"`` (a torch.optim loop: ERM, or Group DRO when ``"eta_q"`` is a key, with
    ``optimizer`` ``"adam"`` or ``"sgd"``: SGD with momentum 0.9 and the ``weight_decay`` setting, as
    kohpangwei/group_DRO's ``train.py`` builds it) or ``"fullcomp"`` (``fc.optim.HMSFW``, ``SCFW`` or ``PSG``
    in the protocol's own loop, one l2 ball per parameter tensor, ``outer`` the risk F of the four group
    losses).  ``sampling`` is ``"plain"`` (uniform rows, with replacement), ``"shuffled"`` (uniform batches
    of a reshuffled epoch, as a ``DataLoader(shuffle=True)``) or ``"balanced"`` (the same number of rows
    from every group).  ``fixed`` are solver options the protocol fixes.
    """

    name: str
    label: str
    kind: str
    sampling: str
    keys: tuple[str, ...]
    solver: str | None = None
    outer: str | None = None
    fixed: dict[str, Any] = field(default_factory=dict)
    optimizer: str = "adam"

    def run_fields(self, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
        """The fields every run summary starts with, which the tables select runs by."""
        return {
            "protocol": PROTOCOL,
            "method": self.name,
            "label": self.label,
            "seed": seed,
            "settings": settings,
            "sampling": self.sampling,
        }


#: The Frank-Wolfe methods' first step gamma_0 in ``fc.optim``: from the network's initialization, not the
#: paper's gamma_0 = 1 (which replaces the initial weights by a vertex of the balls).  1/8 is what
#: ``fc.solve``'s warm-start line search picks from ``x0=net`` on both data sets at factor 3; the later steps
#: follow 2/(k + 2 + s) with gamma(s) = 1/8.
FIRST = {"first_step": 0.125}
#: The compared methods in table order.  Every method trains the same network on the same data with the
#: same batch size (4 x per_group rows); all but plain ERM and the reference Group DRO draw group-balanced
#: batches.
METHODS: dict[str, GroupMethod] = {
    m.name: m
    for m in (
        GroupMethod("erm", "ERM", "torch", "plain", ("lr",)),
        GroupMethod("erm-balanced", "ERM, balanced batches", "torch", "balanced", ("lr",)),
        GroupMethod(
            "group-dro-ref",
            "Group DRO (reference: SGD+momentum, uniform batches)",
            "torch",
            "shuffled",
            ("lr", "weight_decay", "eta_q"),
            optimizer="sgd",
        ),
        GroupMethod(
            "group-dro-ref-rw",
            "Group DRO (reference with --reweight_groups: SGD+momentum, balanced batches)",
            "torch",
            "balanced",
            ("lr", "weight_decay", "eta_q"),
            optimizer="sgd",
        ),
        GroupMethod("group-dro", "Group DRO, balanced batches (Adam)", "torch", "balanced", ("lr", "eta_q")),
        GroupMethod("hmsfw-max", "HMSFW, F = max", "fullcomp", "balanced", ("factor",), "hmsfw", "max", FIRST),
        GroupMethod("hmsfw-cvar", "HMSFW, F = CVaR 0.5", "fullcomp", "balanced", ("factor",), "hmsfw", "cvar", FIRST),
        GroupMethod("scfw-max", "SCFW, F = max", "fullcomp", "balanced", ("factor",), "scfw", "max", FIRST),
        GroupMethod(
            "psg-max",
            "PSG, F = max",
            "fullcomp",
            "balanced",
            ("factor", "eta"),
            "psg",
            "max",
            {"step_size": "constant"},
        ),
    )
}

#: Validation grids (the same on both data sets).  The torch baselines use Adam, except the reference Group
#: DRO: SGD with momentum 0.9 on a grid of lr and weight decay; Group DRO's step on q is Sagawa et al.'s eta_q.
#: The Frank-Wolfe methods' only knob is the radius factor of the per-layer l2 balls (radius = factor x the
#: layer's expected initial norm, ``fc.layer_domains``); PSG also needs its step.
DEFAULT_GRIDS: dict[str, dict[str, list]] = {
    "erm": {"lr": [0.001, 0.003, 0.01]},
    "erm-balanced": {"lr": [0.001, 0.003, 0.01]},
    "group-dro-ref": {"lr": [0.01, 0.03, 0.1], "weight_decay": [0.0001, 0.01], "eta_q": [0.01, 0.1, 1.0]},
    "group-dro-ref-rw": {"lr": [0.01, 0.03, 0.1], "weight_decay": [0.0001, 0.01], "eta_q": [0.01, 0.1, 1.0]},
    "group-dro": {"lr": [0.001, 0.003, 0.01], "eta_q": [0.01, 0.1, 1.0]},
    "hmsfw-max": {"factor": [1.0, 3.0, 10.0]},
    "hmsfw-cvar": {"factor": [1.0, 3.0, 10.0]},
    "scfw-max": {"factor": [1.0, 3.0, 10.0]},
    "psg-max": {"factor": [3.0], "eta": [0.001, 0.003, 0.01, 0.03]},
}


def method_names(methods: str | Iterable[str] | None) -> list[str]:
    """Validated method names in table order (None: all); a comma-separated string is accepted."""
    return select_methods(methods, METHODS)


def dataset_names(datasets: str | Iterable[str] | None) -> list[str]:
    """Validated data set names in table order (None: both)."""
    return select_methods(datasets, DATASETS)


def check_settings(method: str, settings: Any) -> dict[str, Any]:
    """The settings of ``method`` holding exactly the keys it reads, as positive numbers."""
    return positive_settings(method, settings, METHODS)


def middle_settings(method: str, grids: dict[str, dict[str, list]] | None = None) -> dict[str, Any]:
    """The middle point of ``method``'s grid: the settings of a run without tuning (smoke tests)."""
    grid = (grids or DEFAULT_GRIDS)[method]
    return check_settings(method, {k: v[len(v) // 2] for k, v in grid.items()})


@dataclass(frozen=True)
class Workload:
    """Epochs, rows per group in a batch (the batch is 4 x per_group rows for every method) and the
    network's width.  An epoch is ceil(n_train / batch) iterations, evaluated at its end."""

    epochs: int
    per_group: int
    width: int

    def __post_init__(self) -> None:
        for name in ("epochs", "per_group", "width"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise OptionError(f"{name} must be a positive int, got {v!r}")


#: Sized so that the whole protocol (both data sets, tuning on two seeds and 5 reported seeds) runs in
#: about 20 minutes on two shared cores: Colored MNIST 25 epochs of 24 iterations (batch 128, a CNN with 16
#: channels, 2,689 weights), Adult 10 epochs of 114 iterations (batch 256, one hidden layer of 32 units,
#: 3,521 weights).
DEFAULT_WORKLOADS = {"cmnist": Workload(25, 32, 16), "adult": Workload(10, 64, 32)}


def configured_workload(config: ProtocolConfig | None, dataset: str) -> Workload:
    """The workload of ``dataset`` in ``config`` (None: no configuration), else :data:`DEFAULT_WORKLOADS`'."""
    saved = config.fields["workloads"].get(dataset) if config is not None else None
    return Workload(**saved) if saved else DEFAULT_WORKLOADS[dataset]


def workload_field(value: Any) -> dict[str, int]:
    """A data set's ``workloads`` entry, checked as a :class:`Workload`."""
    if not isinstance(value, dict) or set(value) - {"epochs", "per_group", "width"}:
        raise OptionError(f"must be {{'epochs': n, 'per_group': n, 'width': n}}, got {value!r}")
    return vars(Workload(**value))


#: ``settings[dataset][method]`` and ``workloads[dataset]``.
SCHEMA = ConfigSchema(
    DEFAULT_CONFIG,
    "run `fullcomp-lab bench group-dro` without --config: it tunes on validation and writes OUT/group-dro-config.json",
    check_settings,
    fields={"workloads": workload_field},
)

#: The frozen settings: a JSON path, a dict or a ProtocolConfig.
load_config = SCHEMA.load
