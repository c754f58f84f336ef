"""The pAUC-fairness protocol's compared methods, data sets, workloads and frozen configuration."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fullcomp import epoch_gda, sgda, smag, sopa
from fullcomp.errors import DataError, OptionError
from fullcomp_lab.datasets.tabular import TabularData, adult, german_credit
from fullcomp_lab.harness import (
    ConfigSchema,
    ProtocolConfig,
    ProtocolMethod,
    positive_settings,
    select_methods,
)

#: Tag written into every run's summary.json, so tables() never mixes in other run folders.
PROTOCOL = "pauc-fairness"
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "pauc.json"
FINAL_SEEDS = (2000, 2001, 2002)
TUNING_SEEDS = (1000,)
LAMBDA0 = 1e-3


# ---------------------------------------------------------------------------------------------- methods


#: The adversary's weight: the protocol builds the problem with it; methods without it play no adversary.
ADVERSARY = ("alpha",)

#: The five methods in the paper's table order (Table 3).
METHODS: dict[str, ProtocolMethod] = {
    m.name: m
    for m in (
        ProtocolMethod("sopa", "SOPA", sopa, ("eta", "eta_s"), {"s_key": "u"}),
        ProtocolMethod("smag-star", "SMAG*", smag, ("gamma", "eta0", "eta1")),
        ProtocolMethod("sgda", "SGDA", sgda, ("alpha", "eta_x", "eta_y"), protocol_keys=ADVERSARY),
        ProtocolMethod(
            "epoch-gda",
            "EGDA",
            epoch_gda,
            ("alpha", "eta_x", "eta_y", "gamma", "epoch_iters"),
            protocol_keys=ADVERSARY,
        ),
        ProtocolMethod("smag", "SMAG", smag, ("alpha", "gamma", "eta0", "eta1"), protocol_keys=ADVERSARY),
    )
}

#: Searched settings: the paper's Section 5.2 grids (alpha in {0.1, 0.2, 0.5}, adversary steps in
#: {0.1, 0.01, 0.001}, Epoch-GDA's gamma and inner loop), with step sizes moved up to {1, 0.3, 0.1}: this
#: small MLP trains for 3 epochs and a first selection chose the largest steps of {0.3, 0.1, 0.03}.
#: SMAG's gamma and eta0 are searched as eta1 / gamma (how far x_phi is pulled toward x per step) and
#: eta0 / gamma (how far x moves toward x_phi), so that eta1 <= gamma / 2 (SMAG's step condition) holds;
#: eta0 / gamma = 1 would be SGDA.  SMAG's adversary steps with eta1 (Algorithm 3 has one step size).
DEFAULT_GRIDS: dict[str, dict[str, list]] = {
    "sopa": {"eta": [1.0, 0.3, 0.1, 0.03], "eta_s": [1.0, 0.1, 0.01]},
    "smag-star": {"eta1": [1.0, 0.3, 0.1], "eta1_over_gamma": [0.5, 0.1, 0.02], "eta0_over_gamma": [0.5, 0.1]},
    "sgda": {"alpha": [0.1, 0.2, 0.5], "eta_x": [1.0, 0.3, 0.1], "eta_y": [0.1, 0.01, 0.001]},
    "epoch-gda": {
        "alpha": [0.1, 0.2, 0.5],
        "eta_x": [1.0, 0.3],
        "eta_y": [0.1, 0.01],
        "gamma": [0.1, 0.01],
        "epoch_iters": [5, 15],
    },
    "smag": {
        "alpha": [0.1, 0.2, 0.5],
        "eta1": [1.0, 0.3, 0.1],
        "eta1_over_gamma": [0.5, 0.1, 0.02],
        "eta0_over_gamma": [0.5, 0.1],
    },
}


def grid_settings(method: str, point: dict[str, Any]) -> dict[str, Any]:
    """Absolute settings of ``method`` from a grid point (SMAG's ratios turned into gamma and eta0)."""
    point = dict(point)
    if "eta1_over_gamma" in point:
        # 12 significant digits: 0.3 / 0.1 is 2.9999999999999996 in binary floating point
        gamma = float(f"{point['eta1'] / point.pop('eta1_over_gamma'):.12g}")
        point["gamma"] = gamma
        point["eta0"] = float(f"{point.pop('eta0_over_gamma') * gamma:.12g}")
    return check_settings(method, point)


def method_names(methods: str | Iterable[str] | None) -> list[str]:
    """Validated method names in the paper's order (None: all five); a comma-separated string is accepted."""
    return select_methods(methods, METHODS)


def check_settings(method: str, settings: Any) -> dict[str, Any]:
    """The settings of ``method`` holding exactly the keys it reads, as numbers."""
    out = positive_settings(method, settings, METHODS)
    if "epoch_iters" in out:
        out["epoch_iters"] = int(out["epoch_iters"])
    return out


# ------------------------------------------------------------------------------------------------- data

DATASETS = {"adult": adult, "german-credit": german_credit}


def dataset_name(data_dir: str | os.PathLike) -> str:
    """``"adult"`` or ``"german-credit"`` from the files in ``data_dir``."""
    folder = Path(data_dir)
    if (folder / "adult.data").is_file():
        return "adult"
    if (folder / "german.data").is_file() or (folder.is_file() and folder.name == "german.data"):
        return "german-credit"
    raise DataError(
        f"{folder} holds neither adult.data/adult.test (UCI Adult) nor german.data (German credit); "
        "pass one of those folders"
    )


def load(data_dir: str | os.PathLike) -> TabularData:
    """The data set in ``data_dir`` (see :func:`dataset_name`)."""
    return DATASETS[dataset_name(data_dir)](data_dir)


# ------------------------------------------------------------------------------------------------- runs


@dataclass
class Workload:
    """Iterations per run and the mini-batch sizes (the same for every method); not a time budget."""

    iters: int
    batch_pos: int = 64
    batch_neg: int = 64

    def __post_init__(self) -> None:
        for name in ("iters", "batch_pos", "batch_neg"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise OptionError(f"{name} must be a positive int, got {v!r}")


#: Iterations and batch sizes per data set: Adult about 3 epochs of 128-row batches (the paper's 3 epochs),
#: German credit (800 training rows) about 20 epochs of 64-row batches.
DEFAULT_BUDGETS = {"adult": Workload(700), "german-credit": Workload(250, 32, 32)}


# ----------------------------------------------------------------------------------------------- config


def budget_field(value: Any) -> dict[str, int]:
    """A data set's ``budgets`` entry, checked as a :class:`Workload`."""
    if not isinstance(value, dict) or set(value) - {"iters", "batch_pos", "batch_neg"}:
        raise OptionError(f"must be {{'iters': n, 'batch_pos': n, 'batch_neg': n}}, got {value!r}")
    return vars(Workload(**value))


#: ``settings[dataset][method]`` and ``budgets[dataset]`` (a :class:`Workload` as a dict).
SCHEMA = ConfigSchema(
    DEFAULT_CONFIG,
    "write one with select_settings (--select)",
    check_settings,
    fields={"budgets": budget_field},
)


#: The frozen settings: a JSON path, a dict, a ProtocolConfig or None (the committed ``configs/pauc.json``).
load_config = SCHEMA.load


def configured_workload(config: ProtocolConfig, dataset: str) -> Workload:
    """The configured iterations and batch sizes on ``dataset`` (else :data:`DEFAULT_BUDGETS`')."""
    if dataset in config.fields["budgets"]:
        return Workload(**config.fields["budgets"][dataset])
    return DEFAULT_BUDGETS.get(dataset, Workload(500))
