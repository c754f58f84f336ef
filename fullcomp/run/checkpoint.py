"""Checkpoints: the whole run state with a fingerprint of its run, written atomically, read back as data only."""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fullcomp.errors import CheckpointError, OptionError
from fullcomp.run.history import History, write_atomic
from fullcomp.run.serial import decode, encode

FORMAT = "fullcomp-checkpoint-1"
ON_MISMATCH = ("error", "restart")


@dataclass
class Checkpoint:
    """Save the run to ``path`` every ``every`` iterations, at the end, and when interrupted.

    A run given a checkpoint that already exists resumes from it and follows
    the same trajectory as an uninterrupted run, provided the checkpoint's
    fingerprint (method, options, seed, problem shapes, dtype, outer function,
    data, fullcomp version) matches the new run's.  When it does not, the run
    raises a :class:`~fullcomp.errors.CheckpointError` naming what differs, or,
    with ``on_mismatch="restart"``, starts over and overwrites the file.
    """

    path: str | os.PathLike
    every: int = 100
    on_mismatch: str = "error"

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise OptionError(f"Checkpoint every must be a positive int, got {self.every!r}")
        if self.on_mismatch not in ON_MISMATCH:
            raise OptionError(f"Checkpoint on_mismatch must be 'error' or 'restart', got {self.on_mismatch!r}")
        if self.path.exists() and self.path.is_dir():
            raise OptionError(f"checkpoint {self.path} is a folder; pass a file path such as {self.path}/run.ckpt")

    @classmethod
    def coerce(cls, value: Any) -> Checkpoint | None:
        if value is None or isinstance(value, Checkpoint):
            return value
        if isinstance(value, (str, os.PathLike)):
            return cls(value)
        raise OptionError(f"checkpoint must be a path or fc.Checkpoint(path, every=N), got {type(value).__name__}")

    def for_rank(self, rank: int) -> Checkpoint:
        """The file of rank ``rank`` when every rank keeps its own state (a sharded problem): ``path`` on
        rank 0, ``path.rank<r>`` beside it elsewhere."""
        if rank == 0:
            return self
        return dataclasses.replace(self, path=self.path.with_name(f"{self.path.name}.rank{rank}"))

    def save(self, fingerprint: dict, run: dict) -> None:
        buf = io.BytesIO()
        torch.save({"format": FORMAT, "fingerprint": fingerprint, "run": encode(run)}, buf)
        write_atomic(self.path, buf.getvalue())

    def read(self) -> dict:
        """The file's contents as data: {"fingerprint", "run"}; a CheckpointError if it is not a fullcomp checkpoint."""
        try:
            # weights_only: tensors, containers and scalars only, so a crafted file cannot run code when read.
            payload = torch.load(self.path, weights_only=True, map_location="cpu")
        except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
            raise CheckpointError(
                f"{self.path} is not a readable fullcomp checkpoint ({type(exc).__name__}: {str(exc)[:200]}); "
                "delete it, or pass fc.Checkpoint(path, on_mismatch='restart') to overwrite it"
            ) from None
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise CheckpointError(
                f"{self.path} is not a fullcomp checkpoint (no {FORMAT!r} header); delete it, or pass "
                "fc.Checkpoint(path, on_mismatch='restart') to overwrite it"
            )
        try:
            run = decode(payload["run"])
            if isinstance(run, dict) and "history" in run:  # kept in chunks (History.saved)
                run["history"] = History.from_saved(run["history"]).rows
            return {"fingerprint": payload["fingerprint"], "run": run}
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(f"{self.path} is a damaged fullcomp checkpoint ({exc}); delete it") from None

    def load(self, fingerprint: dict) -> dict | None:
        """The saved run when the file exists and was written by a run with this fingerprint, else None."""
        if not self.path.exists():
            return None
        try:
            saved = self.read()
        except CheckpointError:
            if self.on_mismatch == "restart":
                return None
            raise
        differs = differences(saved["fingerprint"], fingerprint)
        if not differs:
            return saved["run"]
        if self.on_mismatch == "restart":
            return None
        raise CheckpointError(
            f"checkpoint {self.path} was written by a different run: {'; '.join(differs)}. Pass the same "
            "problem and options to resume, fc.Checkpoint(path, on_mismatch='restart') to start over, or "
            "another path"
        )


def differences(saved: dict, current: dict) -> list[str]:
    """What differs between two fingerprints, one phrase per key."""
    out = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if a != b:
            out.append(f"{key} was {_short(a)}, now {_short(b)}")
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
