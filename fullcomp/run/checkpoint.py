"""Checkpoints: the whole run state, written atomically, resumed exactly."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fullcomp.errors import OptionError
from fullcomp.run.history import write_atomic


@dataclass
class Checkpoint:
    """Save the run to ``path`` every ``every`` iterations and at the end.

    A run given a checkpoint that already exists resumes from it and follows
    the same trajectory as an uninterrupted run.
    """

    path: str | os.PathLike
    every: int = 100

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not isinstance(self.every, int) or self.every < 1:
            raise OptionError(f"Checkpoint every must be a positive int, got {self.every!r}")

    @classmethod
    def coerce(cls, value: Any) -> Checkpoint | None:
        if value is None or isinstance(value, Checkpoint):
            return value
        if isinstance(value, (str, os.PathLike)):
            return cls(value)
        raise OptionError(f"checkpoint must be a path or fc.Checkpoint(path, every=N), got {type(value).__name__}")

    def save(self, payload: dict) -> None:
        buf = io.BytesIO()
        torch.save(payload, buf)
        write_atomic(self.path, buf.getvalue())

    def load(self) -> dict | None:
        if not self.path.exists():
            return None
        return torch.load(self.path, weights_only=False)
