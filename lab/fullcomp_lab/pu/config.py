"""The PU protocol's data sets, compared methods, constants and frozen configuration."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fullcomp import DMaxProblem, dc_sgd, sbcd, sdca, smag, ssdc_adagrad, ssdc_spg
from fullcomp.errors import DataError, OptionError
from fullcomp.run import Result
from fullcomp_lab.datasets import images
from fullcomp_lab.datasets.images import ImageData
from fullcomp_lab.datasets.pu import PRIOR, RIDGE, PUData, pu_split
from fullcomp_lab.harness import ConfigSchema, ProtocolMethod, check_keys, select_methods

#: Tag written into every run's summary.json, so tables() reads only this protocol's folders.
PROTOCOL = "pu"
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "pu.json"
FINAL_SEEDS = (0, 1, 2, 3)
TUNING_SEEDS = (100,)
EPOCHS = 40
DECAY_AT = (0.3, 0.6)  # fractions of the epochs: 12 and 24 of 40
BATCH = 64
#: The configuration's settings for a data set it was not tuned on.
FALLBACK_DATASET = "mnist5k"

# ------------------------------------------------------------------------------------------------ data


@dataclass(frozen=True)
class Dataset:
    """A data set of the protocol: its label and loader (``loader(path)``; digits ignores the path)."""

    key: str
    label: str
    loader: Callable[[Any], ImageData]
    needs_path: bool = True


DATASETS: dict[str, Dataset] = {
    d.key: d
    for d in (
        Dataset("digits", "digits (sklearn)", lambda path: images.digits(), needs_path=False),
        Dataset("mnist5k", "MNIST-5k", images.mnist5k),
        Dataset("mnist", "MNIST", images.mnist),
        Dataset("fashion-mnist", "Fashion-MNIST", images.fashion_mnist),
        Dataset("cifar10", "CIFAR-10", images.cifar10),
        Dataset("fer2013", "FER2013", images.fer2013),
    )
}


def detect_dataset(path: str | os.PathLike | None) -> str:
    """The data set a path holds, from its file names (IDX files count as MNIST unless 'fashion' is in the path)."""
    if path is None:
        return "digits"
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p} does not exist; pass a data folder or file, or omit --data for sklearn's digits")
    names = {f.name for f in p.iterdir()} if p.is_dir() else {p.name}
    if any(n.startswith("mnist_5k") for n in names):
        return "mnist5k"
    if any(n.startswith("train-images") for n in names):
        return "fashion-mnist" if "fashion" in str(p).lower() else "mnist"
    if "test_batch" in names or "cifar-10-batches-py" in names:
        return "cifar10"
    if any(n.lower().startswith("fer2013") for n in names):
        return "fer2013"
    raise DataError(
        f"cannot tell which data set {p} holds; pass --dataset ({', '.join(DATASETS)}) or a folder with "
        "mnist_5k.csv.gz, the MNIST IDX files, the CIFAR-10 python batches or fer2013.csv"
    )


def load_pu(dataset: str | None, path: str | os.PathLike | None) -> tuple[str, PUData]:
    """(data set key, PU data) for a key (None: detected from ``path``) and a path (None for digits)."""
    key = detect_dataset(path) if dataset in (None, "auto") else dataset
    if key not in DATASETS:
        raise OptionError(f"unknown data set {key!r}; choose from {', '.join(DATASETS)}")
    spec = DATASETS[key]
    if spec.needs_path and path is None:
        raise OptionError(f"{spec.label} is read from files: pass its folder as --data / path")
    return key, pu_split(spec.loader(path))


@dataclass(frozen=True)
class Workload:
    """What a run does, the same for every method: ``epochs`` passes over S_u (capped at ``iters``
    iterations in smoke runs), ``batch`` points of S_+ and of S_u per draw, the class prior pi_p and
    the ridge lambda of lambda/2 ||w||^2."""

    epochs: int = EPOCHS
    iters: int | None = None
    batch: int = BATCH
    prior: float = PRIOR
    ridge: float = RIDGE

    def __post_init__(self) -> None:
        for name in ("epochs", "iters", "batch"):
            v = getattr(self, name)
            if not (v is None and name == "iters") and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise OptionError(f"{name} must be a positive int, got {v!r}")
        if not 0 < self.prior < 1:
            raise OptionError(f"prior must lie in (0, 1), got {self.prior!r}")
        if not (math.isfinite(self.ridge) and self.ridge >= 0):
            raise OptionError(f"ridge must be a finite number >= 0, got {self.ridge!r}")

    def per_epoch(self, data: PUData) -> int:
        """Iterations per epoch: one pass over the unlabeled set S_u (the larger of S_+ and S_u)."""
        return math.ceil(len(data.unlabeled) / self.batch)


# --------------------------------------------------------------------------------------------- methods


def smag_run(problem: DMaxProblem, **options: Any) -> Result:
    """``fc.smag(problem, **options)`` (Algorithm 2) returning x_phi, as Algorithm 2 does; ``x_t`` is the outer
    iterate.  The protocol passes ``decay``: eta0 and eta1 both decay, since the analysis takes eta0
    proportional to eta1, and decaying eta1 alone lets x run ahead of the slowed proximal estimates
    (measured on digits: x_t's objective then grows)."""
    with warnings.catch_warnings():
        # The grid includes eta1 > gamma/2, outside the analysis; the tuning decides, not a warning per run.
        warnings.simplefilter("ignore", UserWarning)
        res = smag(problem, **options)
    return Result(res.x_phi, res.history, {**res.info, "output": "x_phi"}, x_psi=res.x_psi, points={"x_t": res.x})


METHODS: dict[str, ProtocolMethod] = {
    m.name: m
    for m in (
        ProtocolMethod("sgd", "SGD", dc_sgd, ("eta",)),
        ProtocolMethod("sdca", "SDCA", sdca, ("eta", "anchor_step", "inner_iters")),
        ProtocolMethod("ssdc-spg", "SSDC-SPG", ssdc_spg, ("eta", "gamma", "inner_iters")),
        ProtocolMethod("ssdc-adagrad", "SSDC-Adagrad", ssdc_adagrad, ("eta", "gamma", "inner_iters")),
        ProtocolMethod("sbcd", "SBCD", sbcd, ("eta", "mu", "inner_iters", "envelope_step")),
        ProtocolMethod("smag", "SMAG", smag_run, ("eta1", "eta0", "gamma")),
    )
}


def method_names(methods: str | Iterable[str] | None) -> list[str]:
    """Validated method names in the paper's order (None: all six); a comma-separated string is accepted."""
    return select_methods(methods, METHODS)


def check_settings(method: str, settings: Any) -> dict[str, Any]:
    return {k: settings[k] for k in check_keys(method, settings, METHODS)}


# ----------------------------------------------------------------------------------------------- config


#: ``settings[dataset][method]``; a data set it was not tuned on takes the MNIST-5k settings.
SCHEMA = ConfigSchema(DEFAULT_CONFIG, "pass the JSON written by tune_pu", check_settings, fallback=FALLBACK_DATASET)


#: The frozen settings: a JSON path, a dict, a ProtocolConfig or None (the committed ``configs/pu.json``).
load_config = SCHEMA.load


#: Section 5.1's grids.  "eta" (eta1 for SMAG) is the learning rate of every method; "anchor_step" of SDCA and
#: "eta0" of SMAG the outer rates; "inner_iters" the inner loops; mu of SBCD and gamma of SMAG from PROX,
#: and 1/gamma of SSDC from PROX (so gamma = 1/value).  SBCD's envelope_step (gamma/mu of AGD-SBCD) is not in
#: the paper's list: it is searched over AGD-SBCD's own {0.1, 1, 2}.
LR = [10.0, 1.0, 0.2, 0.1, 0.01, 0.001]
OUTER = [0.1, 0.5, 0.9]
INNER = [2, 5, 10]
PROX = [0.05, 0.1, 0.2, 0.5, 1.0, 2.0]
