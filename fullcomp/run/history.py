"""Per-iteration records, written atomically as CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch


def umask() -> int:
    """The process's file-creation mask, read without changing it where Linux shows it."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write to a temporary file in the target's folder, then rename: a crash never leaves half a file.

    A symbolic link is written through to its target (the link stays).  The file gets the mode any
    new file gets, ``0o666`` less the umask, as numpy's and matplotlib's files do.
    """
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def plain(value: Any) -> Any:
    """Python scalars for JSON and CSV (numpy and torch scalars included)."""
    if type(value) in (float, int, str, bool) or value is None:  # most of a row, and the hot path
        return value
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


#: Value types a row may hold (its keys being strings) for its chunk to be kept as JSON, which reads them back
#: as they were.
JSON_TYPES = (float, int, str, bool, type(None))


class History:
    """A list of dict rows, one per recorded iteration."""

    def __init__(self, rows: Iterable[dict] | None = None):
        self.rows: list[dict] = [dict(r) for r in rows or []]
        self._chunks: list = []  # see saved()
        self._saved = 0  # rows in _chunks

    def saved(self) -> list:
        """The rows as a checkpoint keeps them: chunks, one per call that found new rows, each the rows added
        since the call before as JSON (in a uint8 tensor) or, if a row holds another type, as the rows.  A save
        then costs its new rows: encoding and pickling all 20,000 rows of a run took 110 ms a save."""
        if self._saved < len(self.rows):
            new = self.rows[self._saved :]
            if all(type(key) is str and type(v) in JSON_TYPES for row in new for key, v in row.items()):
                text = json.dumps(new, allow_nan=True).encode()
                self._chunks.append(torch.frombuffer(bytearray(text), dtype=torch.uint8))
            else:
                self._chunks.append([dict(r) for r in new])
            self._saved = len(self.rows)
        return list(self._chunks)

    @classmethod
    def from_saved(cls, saved: list) -> History:
        """The history :meth:`saved` gave (or the plain rows a checkpoint held before chunks)."""
        rows: list[dict] = []
        for item in saved:
            if isinstance(item, dict):
                rows.append(item)
            elif isinstance(item, torch.Tensor):
                rows += json.loads(item.numpy().tobytes().decode())
            else:
                rows += item
        if not all(isinstance(r, dict) and "k" in r for r in rows):
            raise ValueError("a history row is not a record of its iteration")
        return cls(rows)

    def append(self, row: dict) -> None:
        self.rows.append({k: plain(v) for k, v in row.items()})

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]

    def __iter__(self):
        return iter(self.rows)

    @property
    def columns(self) -> list[str]:
        cols: dict[str, None] = {}
        for row in self.rows:
            cols.update(dict.fromkeys(row))
        return list(cols)

    def column(self, name: str) -> np.ndarray:
        """One column as a float array (NaN where a row lacks it)."""
        return np.array([float(r.get(name, np.nan)) for r in self.rows])

    def to_csv(self, path: str | os.PathLike) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns, restval="")
        writer.writeheader()
        writer.writerows(self.rows)
        write_atomic(path, buf.getvalue())

    def to_json(self, path: str | os.PathLike) -> None:
        write_atomic(path, json.dumps(self.rows, indent=1))

    @classmethod
    def read_csv(cls, path: str | os.PathLike) -> History:
        with open(path, newline="") as fh:
            rows = [{k: _number(v) for k, v in row.items() if v != ""} for row in csv.DictReader(fh)]
        return cls(rows)


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
