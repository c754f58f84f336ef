"""What a solver returns."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fullcomp.errors import DataError
from fullcomp.run.history import History, plain, write_atomic
from fullcomp.run.saved import read_array, read_arrays, read_history, read_summary

#: Why a run stopped: its budget of iterations or seconds, the callback, convergence, or an error.
STATUSES = ("iterations", "seconds", "callback", "converged", "error")


class Result:
    """A finished run: the iterate ``x``, the ``history``, a summary ``info`` and the ``status``.

    The outputs the method declares (its readout's ``outputs``: trackers, an atomic form, dual points) are
    attributes, and ``outputs`` holds them by name; any other point a method keeps (the DC methods' anchors
    and inner iterates) is in ``points``, by name.  ``x`` is None when a run keeps no dense iterate; then
    ``stand_in`` names the output that :meth:`save` writes in its place.  ``save(folder)`` writes the result
    and :meth:`Result.load` reads it back.
    """

    def __init__(
        self,
        x: Any,
        history: History,
        info: dict,
        points: dict | None = None,
        stand_in: str | None = None,
        **outputs: Any,
    ):
        self.x, self.history, self.info = x, history, info
        #: The method's declared outputs, by name.
        self.outputs: dict[str, Any] = outputs
        #: The output saved in place of x when x is None.
        self.stand_in = stand_in
        #: The weights F puts on each inner value at the final tracked u (the adversary's q of a worst case,
        #: a CVaR, a DRO risk), for a composite problem; None otherwise.
        self.weights: np.ndarray | None = None
        #: Each declared constraint's value and violation at the returned point (a list of
        #: :class:`~fullcomp.model.constraints.ConstraintValue`) for a problem with constraints; None otherwise.
        self.constraints: list | None = None
        #: Other points the method keeps, by name.
        self.points: dict[str, Any] = dict(points or {})

    def __getattr__(self, name: str) -> Any:
        outputs = self.__dict__.get("outputs")
        if outputs is None or name.startswith("__"):
            raise AttributeError(name)
        if name in outputs:
            return outputs[name]
        method = self.__dict__.get("info", {}).get("method", "this method")
        raise AttributeError(
            f"the result of {method} has no output {name!r}; its outputs are {', '.join(outputs) or 'none'} "
            f"(result.outputs), and its other points are in result.points ({', '.join(self.points) or 'none'})"
        )

    @property
    def value(self) -> float | None:
        """The true objective at the returned point, as CVXPY's ``problem.value``: the last row's ``objective``,
        which the run computes when the problem can (a ``full_batch``, or a deterministic map); else None."""
        last = self.history[-1] if len(self.history) else {}
        value = last.get("objective")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def status(self) -> str:
        """Why the run stopped: one of :data:`STATUSES`."""
        return self.info.get("stopped", "iterations")

    def to_csv(self, path: str | os.PathLike) -> None:
        """The history as CSV, one row per recorded iteration."""
        self.history.to_csv(path)

    def summary(self) -> dict:
        last = self.history[-1] if len(self.history) else {}
        weights = {} if self.weights is None else {"weights": [float(v) for v in self.weights]}
        if self.constraints is not None:
            weights["constraints"] = [c.as_dict() for c in self.constraints]
        return {**{k: plain(v) for k, v in self.info.items()}, "status": self.status, **weights, "final": last}

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``history.csv``, ``summary.json`` and the final iterate ``x.npy`` into ``folder``
        (``<stand_in>.npy`` when the run kept no dense iterate, ``x.npz`` for a dict or module)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.history.to_csv(folder / "history.csv")
        write_atomic(folder / "summary.json", json.dumps(self.summary(), indent=1, default=str))
        # Structured runs too large for a dense iterate save the values they keep instead.
        name = "x" if self.x is not None or self.stand_in is None else self.stand_in
        x = self.x if name == "x" else self.outputs.get(name)
        if isinstance(x, torch.nn.Module):
            x = dict(x.named_parameters())
        if isinstance(x, dict):  # parameters of a model: one array per name
            with open(folder / ".x.npz.tmp", "wb") as fh:
                np.savez(fh, **{k: v.detach().cpu().numpy() for k, v in x.items()})
            os.replace(folder / ".x.npz.tmp", folder / "x.npz")
        elif x is not None:
            with open(folder / f".{name}.npy.tmp", "wb") as fh:
                np.save(fh, x.detach().cpu().numpy())
            os.replace(folder / f".{name}.npy.tmp", folder / f"{name}.npy")
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike) -> Result:
        """A saved run: its history, info and iterate (``x`` as a tensor, or a dict of tensors from ``x.npz``).

        Every file is checked before it is used: each must be a regular file (a FIFO or a device is refused
        unopened), ``summary.json`` an object of run fields, ``history.csv`` a history with a ``k`` column and
        finite objectives, and an array file's header must match the bytes it holds before anything is
        allocated.  Arrays are read with ``allow_pickle=False``, so a folder from elsewhere never runs code.
        A file that fails a check is a :class:`~fullcomp.errors.DataError` naming it and what is wrong.
        """
        folder = Path(folder)
        if not folder.is_dir():
            raise DataError(f"{folder} is not a folder; pass a folder written by Result.save")
        summary = read_summary(folder / "summary.json")
        history = read_history(folder / "history.csv")
        info = {k: v for k, v in summary.items() if k not in ("final", "status", "weights", "constraints")}
        x, outputs, stand_in = None, {}, None
        # Only the iterate is saved: x.npy, x.npz, or the one output that stood in for it.
        stand_ins = sorted(p.stem for p in folder.glob("*.npy") if p.stem != "x")
        path = next((folder / n for n in ("x.npy", "x.npz") if os.path.lexists(folder / n)), None)
        path = path or (folder / f"{stand_ins[0]}.npy" if stand_ins else None)
        if path is not None and path.suffix == ".npz":
            x = {k: torch.from_numpy(v) for k, v in read_arrays(path).items()}
        elif path is not None and path.stem == "x":
            x = torch.from_numpy(read_array(path))
        elif path is not None:
            stand_in = path.stem
            outputs[stand_in] = torch.from_numpy(read_array(path))
        result = cls(x, history, info, stand_in=stand_in, **outputs)
        if "weights" in summary:
            result.weights = np.asarray(summary["weights"], dtype=np.float64)
        return result

    def __repr__(self) -> str:
        method, iterations = self.info.get("method"), self.info.get("iterations")
        return f"Result(method={method!r}, status={self.status!r}, iterations={iterations}, rows={len(self.history)})"
