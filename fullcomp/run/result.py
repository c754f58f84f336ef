"""What a solver returns."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fullcomp.run.history import History, plain, write_atomic

#: Why a run stopped: its budget of iterations or seconds, the callback, convergence, or an error.
STATUSES = ("iterations", "seconds", "callback", "converged", "error")


#: The outputs a method returns besides x, each a declared attribute of :class:`Result` (None when the method
#: has none), and what it holds.
OUTPUTS = {
    "V": "the Jacobian tracker V_k, n x the entries read (HMSFW, SCFW, PSG, prox-linear)",
    "z": "the value tracker z_k of those methods; for SMAG, psi's maximizer z",
    "x_entries": "HMSFW's iterate at the entries it keeps (reads, then track); the dense x on the dense path",
    "entries": "those entries (an Entries; None on the dense path)",
    "atoms": "the iterate's atomic form [(atom, weight)]: HMSFW on reads=, Frank-Wolfe's active set",
    "x_start_weight": "the weight of the start point in HMSFW's atomic form",
    "w": "LiNASA+ICG's value tracker w_k",
    "d": "LiNASA+ICG's direction d_k",
    "x_phi": "SMAG's estimate of prox_{gamma Phi}(x)",
    "x_psi": "SMAG's estimate of prox_{gamma Psi}(x)",
    "y": "the maximizer y of phi (SMAG and the min-max methods)",
    "G": "SMAG's gradient estimate",
    "L": "Frank-Wolfe's estimate of the smoothness constant of its line search",
}


class Result:
    """A finished run: the iterate ``x``, the ``history``, a summary ``info`` and the ``status``.

    The outputs of :data:`OUTPUTS` are attributes (None where the method has none); any other point a method
    keeps (the DC methods' anchors and inner iterates, a user's method's own outputs) is in ``points``, by
    name.  ``save(folder)`` writes it and :meth:`Result.load` reads it back.
    """

    V: Any
    z: Any
    x_entries: Any
    entries: Any
    atoms: Any
    x_start_weight: float | None
    w: Any
    d: Any
    x_phi: Any
    x_psi: Any
    y: Any
    G: Any
    L: float | None

    def __init__(self, x: Any, history: History, info: dict, points: dict | None = None, **outputs: Any):
        unknown = sorted(set(outputs) - set(OUTPUTS))
        if unknown:
            raise TypeError(
                f"Result has no output {', '.join(map(repr, unknown))}; the declared ones are {', '.join(OUTPUTS)}, "
                "and others go in points={name: value}"
            )
        self.x, self.history, self.info = x, history, info
        #: The weights F puts on each inner value at the final tracked u (the adversary's q of a worst case,
        #: a CVaR, a DRO risk), for a composite problem; None otherwise.
        self.weights: np.ndarray | None = None
        #: Other points the method keeps, by name.
        self.points: dict[str, Any] = dict(points or {})
        for name in OUTPUTS:
            setattr(self, name, outputs.get(name))

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
        return {**{k: plain(v) for k, v in self.info.items()}, "status": self.status, **weights, "final": last}

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``history.csv``, ``summary.json`` and the final iterate ``x.npy`` into ``folder``
        (``x_entries.npy`` when a structured run kept no dense iterate, ``x.npz`` for a dict or module)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.history.to_csv(folder / "history.csv")
        write_atomic(folder / "summary.json", json.dumps(self.summary(), indent=1, default=str))
        # Structured runs too large for a dense iterate save the values they keep instead.
        x = self.x if self.x is not None else self.x_entries
        if isinstance(x, torch.nn.Module):
            x = dict(x.named_parameters())
        if isinstance(x, dict):  # parameters of a model: one array per name
            with open(folder / ".x.npz.tmp", "wb") as fh:
                np.savez(fh, **{k: v.detach().cpu().numpy() for k, v in x.items()})
            os.replace(folder / ".x.npz.tmp", folder / "x.npz")
        elif x is not None:
            name = "x.npy" if self.x is not None else "x_entries.npy"
            with open(folder / f".{name}.tmp", "wb") as fh:
                np.save(fh, x.detach().cpu().numpy())
            os.replace(folder / f".{name}.tmp", folder / name)
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike) -> Result:
        """A saved run: its history, info and iterate (``x`` as a tensor, or a dict of tensors from ``x.npz``).

        Arrays are read with ``allow_pickle=False``, so a folder from elsewhere never runs code.
        """
        from fullcomp.errors import DataError

        folder = Path(folder)
        try:
            summary = json.loads((folder / "summary.json").read_text())
            history = History.read_csv(folder / "history.csv")
        except (OSError, ValueError) as exc:
            raise DataError(
                f"{folder} is not a saved fullcomp run ({exc}); pass a folder written by Result.save"
            ) from None
        info = {k: v for k, v in summary.items() if k not in ("final", "status", "weights")}
        x, outputs = None, {}
        try:
            if (folder / "x.npy").exists():
                x = torch.from_numpy(np.load(folder / "x.npy", allow_pickle=False))
            elif (folder / "x.npz").exists():
                with np.load(folder / "x.npz", allow_pickle=False) as arrays:
                    x = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
            elif (folder / "x_entries.npy").exists():
                outputs["x_entries"] = torch.from_numpy(np.load(folder / "x_entries.npy", allow_pickle=False))
        except (OSError, ValueError, TypeError, EOFError) as exc:
            name = next(n for n in ("x.npy", "x.npz", "x_entries.npy") if (folder / n).exists())
            raise DataError(
                f"{folder / name} is not an array file fullcomp can read without running code ({exc}); "
                "write it with Result.save, or remove it"
            ) from None
        result = cls(x, history, info, **outputs)
        if isinstance(summary.get("weights"), list):
            result.weights = np.asarray(summary["weights"], dtype=np.float64)
        return result

    def __repr__(self) -> str:
        method, iterations = self.info.get("method"), self.info.get("iterations")
        return f"Result(method={method!r}, status={self.status!r}, iterations={iterations}, rows={len(self.history)})"
