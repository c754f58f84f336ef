"""A lock file that names its owner, so two live runs never write the same checkpoint or run folder.

The file holds the owner's pid and host.  A second writer is refused while the owner lives; a lock
left by a process that died (on this host) is taken over.  The lock is advisory: it guards fullcomp's
own writers against each other, not against other programs.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from fullcomp.errors import CheckpointError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


class Lock:
    """``with Lock(path, what):`` holds ``path`` (a lock file) for this process; ``what`` names the guarded
    thing in the error (``checkpoint run.ckpt``, ``--out runs/demo``)."""

    def __init__(self, path: str | os.PathLike, what: str):
        self.path, self.what = Path(path), what
        self._held = False

    def owner(self) -> tuple[int, str] | None:
        """(pid, host) written in the lock file, or None when there is none or it cannot be read."""
        try:
            pid, host = self.path.read_text().split()[:2]
            return int(pid), host
        except (OSError, ValueError):
            return None

    def acquire(self) -> None:
        me = f"{os.getpid()} {socket.gethostname()}\n"
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                owner = self.owner()
                if owner is not None and (owner[1] != socket.gethostname() or _alive(owner[0])):
                    raise CheckpointError(
                        f"{self.what} is in use by process {owner[0]} on {owner[1]} (lock file {self.path}); "
                        "wait for that run to finish, or pass another path. If that process is gone, delete "
                        "the lock file"
                    ) from None
                try:  # its owner died: take it over
                    self.path.unlink()
                except FileNotFoundError:
                    pass
                continue
            except OSError as exc:
                raise CheckpointError(
                    f"cannot write the lock file {self.path} of {self.what} ({exc.strerror}); pass a writable path"
                ) from None
            with os.fdopen(fd, "w") as fh:
                fh.write(me)
            self._held = True
            return
        raise CheckpointError(f"{self.what}: could not take the lock file {self.path}; another run keeps taking it")

    def release(self) -> None:
        if self._held:
            self._held = False
            try:
                if self.owner() == (os.getpid(), socket.gethostname()):
                    self.path.unlink()
            except OSError:
                pass

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
