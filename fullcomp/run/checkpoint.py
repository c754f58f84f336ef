"""Checkpoints: the whole run state with a fingerprint of its run, written atomically, read back as data only."""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fullcomp.errors import CheckpointError, OptionError
from fullcomp.run.history import History, write_atomic
from fullcomp.run.lock import Lock
from fullcomp.serial import decode, encode

FORMAT = "fullcomp-checkpoint-1"
ON_MISMATCH = ("error", "restart")
#: What every checkpoint's run holds (and "generator", or "generators" in a distributed job).
RUN_KEYS = ("state", "k", "time", "history", "components")


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

    @property
    def target(self) -> Path:
        """The file written: the path itself, or where it links to (a link stays a link)."""
        return Path(os.path.realpath(self.path))

    def lock(self) -> Lock:
        """The lock a writer holds while it runs, so a second live run on this file is refused."""
        return Lock(f"{self.target}.lock", f"checkpoint {self.path}")

    def check_writable(self) -> None:
        """A CheckpointError naming the path when no checkpoint can be written there; run before any update."""
        target = self.target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            os.close(fd)
            os.unlink(probe)
            if target.exists() and not os.access(target, os.W_OK):
                raise PermissionError(13, "the file is read-only")
        except OSError as exc:
            raise CheckpointError(
                f"cannot write checkpoint {self.path} ({exc.strerror or exc}); pass a path in a writable folder"
            ) from None

    def save(self, fingerprint: dict, run: dict) -> None:
        buf = io.BytesIO()
        torch.save({"format": FORMAT, "fingerprint": fingerprint, "run": encode(run)}, buf)
        try:
            write_atomic(self.path, buf.getvalue())
        except OSError as exc:
            raise CheckpointError(
                f"cannot write checkpoint {self.path} ({exc.strerror or exc}); the run stopped with every row "
                "kept in the error's .result; free space or pass a path in a writable folder"
            ) from exc

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
            fingerprint = payload["fingerprint"]
        except KeyError as exc:
            raise CheckpointError(f"{self.path} is a damaged fullcomp checkpoint: it has no {exc}; delete it") from None
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"{self.path} is a damaged fullcomp checkpoint ({exc}); delete it") from None
        if not isinstance(run, dict):
            raise CheckpointError(f"{self.path} is a damaged fullcomp checkpoint: its run is not a record; delete it")
        missing = [key for key in RUN_KEYS if key not in run]
        if "generator" not in run and "generators" not in run:
            missing.append("generator")
        if missing:
            raise CheckpointError(
                f"{self.path} is a damaged fullcomp checkpoint: its run has no {', '.join(map(repr, missing))}; "
                "delete it, or pass fc.Checkpoint(path, on_mismatch='restart') to overwrite it"
            )
        if isinstance(run["k"], bool) or not isinstance(run["k"], int) or run["k"] < 0:
            raise CheckpointError(f"{self.path} is a damaged fullcomp checkpoint: 'k' is {run['k']!r}; delete it")
        try:
            run["history"] = History.from_saved(run["history"]).rows  # kept in chunks (History.saved)
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(
                f"{self.path} is a damaged fullcomp checkpoint ('history': {exc}); delete it"
            ) from None
        return {"fingerprint": fingerprint, "run": run}

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


def differences(saved: Any, current: Any, where: str = "") -> list[str]:
    """What differs between two fingerprints, one phrase per differing leaf, named by its dotted key."""
    if isinstance(saved, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(saved) | set(current), key=str):
            out += differences(saved.get(key), current.get(key), f"{where}.{key}" if where else str(key))
        return out
    if isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        return [line for i, (a, b) in enumerate(zip(saved, current)) for line in differences(a, b, f"{where}[{i}]")]
    if saved == current:
        return []
    return [f"{where} was {_short(saved)}, now {_short(current)}"]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
