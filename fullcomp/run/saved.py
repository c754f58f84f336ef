"""The files of a saved run (``Result.save``), read back and checked before anything uses them.

A folder may come from elsewhere, so each file is treated as untrusted: it must be a regular file (a FIFO
would block the reader forever, a device could be endless), JSON may not nest without bound, an array's
header must agree with the bytes the file holds before anything is allocated, and nothing is unpickled.
Every refusal is a :class:`~fullcomp.errors.DataError` naming the file and what is wrong with it.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from fullcomp.errors import DataError
from fullcomp.run.history import History

#: How deeply summary.json may nest: a run's info is a few levels deep; anything deeper was not written by
#: Result.save, and deep nesting is how a crafted file exhausts a parser's stack.
MAX_DEPTH = 32
#: The columns that must hold finite numbers where a row has them: a run never records a non-finite objective.
FINITE_COLUMNS = ("objective", "objective_estimate")
#: Why a saved run is refused, appended to every message.
FIX = "pass a folder written by Result.save, or write it again"
KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_regular(path: Path) -> int:
    """The size of ``path``, a regular file (a link to one is followed); a DataError, before any open, if not."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror or exc}); {FIX}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in KINDS if test(info.st_mode)), "not a regular file")
        raise DataError(f"{path} is {kind}, not a regular file; {FIX}")
    return info.st_size


@contextlib.contextmanager
def open_regular(path: Path) -> Iterator[tuple[IO[bytes], int]]:
    """``path`` opened for binary reading with its size, checked regular before and after opening: O_NONBLOCK
    keeps the open itself from waiting on a FIFO put there after the check."""
    check_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror or exc}); {FIX}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise DataError(f"{path} is not a regular file; {FIX}")
    with os.fdopen(fd, "rb") as fh:
        yield fh, info.st_size


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def read_summary(path: Path) -> dict:
    """summary.json as a dict of run fields: an object with a ``status`` and a ``final`` row, of bounded depth."""
    with open_regular(path) as (fh, _):
        data = fh.read()
    try:
        summary = json.loads(data)
    except RecursionError:
        raise DataError(f"{path} nests too deeply to parse (a run's summary is a few levels deep); {FIX}") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise DataError(f"{path} is not readable JSON ({exc}); {FIX}") from None
    if not isinstance(summary, dict):
        raise DataError(f"{path} holds a JSON {type(summary).__name__}, not an object of run fields; {FIX}")
    if _depth(summary) > MAX_DEPTH:
        raise DataError(f"{path} nests deeper than {MAX_DEPTH} levels, which no saved run does; {FIX}")
    wrong = [
        f"{key!r} is not {kind}"
        for key, kind, ok in (
            ("status", "a string", lambda v: isinstance(v, str)),
            ("final", "an object (the last row)", lambda v: isinstance(v, dict)),
        )
        if not ok(summary.get(key))
    ]
    weights = summary.get("weights", [])
    if not (isinstance(weights, list) and all(_finite(w) for w in weights)):
        wrong.append("'weights' is not a list of finite numbers")
    if wrong:
        raise DataError(f"{path} is not a saved run's summary: {'; '.join(wrong)}; {FIX}")
    return summary


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_history(path: Path) -> History:
    """history.csv as a History whose rows each have an integer ``k`` (increasing) and finite objectives."""
    check_regular(path)
    try:
        history = History.read_csv(path)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError, TypeError) as exc:
        raise DataError(f"{path} is not a readable CSV history ({exc}); {FIX}") from None
    if len(history.rows) and "k" not in history.columns:
        raise DataError(f"{path} has no 'k' column; it is not a run's history; {FIX}")
    last = -1
    for line, row in enumerate(history.rows, start=2):  # line 1 is the header
        k = row.get("k")
        if not isinstance(k, int) or k <= last:
            raise DataError(
                f"{path} line {line} has k = {k!r}, not an iteration after {last}; a run's history has an "
                f"increasing integer 'k'; {FIX}"
            )
        bad = [c for c in FINITE_COLUMNS if c in row and not _finite(row[c])]
        if bad:
            raise DataError(f"{path} line {line} has {bad[0]} = {row[bad[0]]!r}, not a finite number; {FIX}")
        last = k
    return history


def _header(fh: IO[bytes], path: Path, room: int) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The .npy header read from ``fh`` (shape, Fortran order, dtype), checked against the ``room`` bytes the
    file holds: a header that claims more entries than are there is refused before allocating them."""
    try:
        version = np.lib.format.read_magic(fh)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version} is not one numpy.save writes for a plain array")
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(fh)
    except (ValueError, SyntaxError, OSError, EOFError) as exc:
        raise DataError(f"{path} is not an array file fullcomp can read ({exc}); {FIX}") from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise DataError(
            f"{path} holds {dtype} entries; a saved run's arrays are numbers, and objects would need unpickling "
            f"(not done, so a file from elsewhere never runs code); {FIX}"
        )
    claimed = math.prod(shape) * dtype.itemsize
    held = room - fh.tell()
    if claimed != held:
        raise DataError(
            f"{path} claims {math.prod(shape)} entries of shape {shape} ({claimed} bytes) in its header but holds "
            f"{held} bytes of data; it is damaged or crafted; {FIX}"
        )
    return shape, fortran, dtype


def read_array(path: Path) -> np.ndarray:
    """A .npy file's array, its header checked against the file's size first."""
    with open_regular(path) as (fh, size):
        _header(fh, path, size)
        fh.seek(0)
        return np.load(fh, allow_pickle=False)


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """An .npz file's arrays by name, each member's header checked against its stored size first."""
    with open_regular(path) as (fh, _):
        try:
            with zipfile.ZipFile(fh) as archive:
                for member in archive.infolist():
                    if member.compress_type != zipfile.ZIP_STORED or not member.filename.endswith(".npy"):
                        raise DataError(
                            f"{path} member {member.filename!r} is compressed or not an array; Result.save stores "
                            f"its arrays uncompressed, so the size of each is known before it is read; {FIX}"
                        )
                    with archive.open(member) as entry:
                        _header(entry, Path(f"{path}[{member.filename}]"), member.file_size)
            fh.seek(0)
            with np.load(fh, allow_pickle=False) as arrays:
                return {name: arrays[name] for name in arrays.files}
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"{path} is not an array archive fullcomp can read ({exc}); {FIX}") from None
