"""A lock file that names its owner, so two live runs never write the same checkpoint or run folder.

The file holds the owner's pid and host.  A second writer is refused while the owner lives; a lock
left by a process that died (on this host) is taken over.  The lock is advisory: it guards fullcomp's
own writers against each other, not against other programs.

Two processes never both hold it.  The owner record is written whole to a temporary file beside the
lock and hard-linked to the lock's name, which fails when the name exists: the lock appears complete
or not at all, never empty or half-written, and of several racers one link succeeds.  Taking over a
dead owner's lock happens under an exclusive ``flock`` of the lock's folder, which the kernel drops
when its holder dies: the taker looks at the lock again under it, so of several racers that saw the
same dead owner one removes its file and the others find the winner's record.  On a filesystem without
hard links the lock is created and written in place under that flock, so no taker reads it half-written.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from fullcomp.errors import CheckpointError
from fullcomp.run.history import umask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


#: What os.link raises on a filesystem without hard links (FAT, some network and FUSE mounts).
NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK}


@contextlib.contextmanager
def _folder_locked(folder: Path, what: str) -> Iterator[None]:
    """Holds an exclusive flock of ``folder`` (released by the kernel if this process dies)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:  # a filesystem without flock (some network mounts)
            raise CheckpointError(
                f"{what}: the folder {folder} cannot be locked ({exc.strerror or exc}), so its lock file cannot be "
                "taken over safely; if the process named in the lock file is gone, delete the lock file"
            ) from None
        yield
    finally:
        os.close(fd)  # closing drops the flock


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

    def _refuse_if_live(self) -> None:
        """A CheckpointError naming the owner when the lock file names a live process (or one on another host)."""
        owner = self.owner()
        if owner is not None and (owner[1] != socket.gethostname() or _alive(owner[0])):
            raise CheckpointError(
                f"{self.what} is in use by process {owner[0]} on {owner[1]} (lock file {self.path}); "
                "wait for that run to finish, or pass another path. If that process is gone, delete "
                "the lock file"
            )

    def _record(self) -> str:
        """A temporary file beside the lock holding this process's owner record, written whole."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            os.fchmod(fd, 0o666 & ~umask())  # the mode any new file gets, as before the lock was linked
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{os.getpid()} {socket.gethostname()}\n")
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp

    def _link(self, record: str, locked: bool = False) -> bool:
        """Whether this process made the lock file (False: the name exists); ``locked``: the folder's flock
        is held already."""
        try:
            os.link(record, self.path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in NO_LINKS:
                raise
            return self._create(record, locked)
        return True

    def _create(self, record: str, locked: bool) -> bool:
        """The lock file made and written in place, for a filesystem without hard links: under the folder's
        flock, which every taker holds while it reads, so none of them sees it empty."""
        with contextlib.ExitStack() as stack:
            if not locked:
                stack.enter_context(_folder_locked(self.path.parent, self.what))
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                return False
            try:
                os.write(fd, Path(record).read_bytes())
            except BaseException:
                os.unlink(self.path)
                raise
            finally:
                os.close(fd)
        return True

    def acquire(self) -> None:
        try:
            record = self._record()
        except OSError as exc:
            raise CheckpointError(self._unwritable(exc)) from None
        try:
            if not self._link(record):
                self._refuse_if_live()
                with _folder_locked(self.path.parent, self.what):  # one taker at a time looks again, takes over
                    self._refuse_if_live()
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()  # its owner died
                    if not self._link(record, locked=True):  # a new run made it between the unlink and the link
                        self._refuse_if_live()
                        raise CheckpointError(f"{self.what}: could not take the lock file {self.path}; try again")
        except OSError as exc:
            raise CheckpointError(self._unwritable(exc)) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(record)
        self._held = True

    def _unwritable(self, exc: OSError) -> str:
        fix = "free space on that filesystem" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "pass a writable path"
        return f"cannot write the lock file {self.path} of {self.what} ({exc.strerror or exc}); {fix}"

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
