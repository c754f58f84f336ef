"""The C allocator's settings for a run: freed memory is kept for reuse instead of handed back to the kernel.

With glibc's defaults, a block above a moving threshold (128 kB at start, then the largest block freed so
far) is mapped fresh from the kernel, and free memory at the top of the heap above twice that threshold is
returned to it.  A loop that allocates and frees the same large temporaries every step, as torch does for a
minibatch's rows, then pays a page fault per 4 kB each time the heap was trimmed: measured on the 5000 x
20000 least-squares problem of ``benchmarks/overhead.py``, up to 640 faults per update and 3.4-4.5 ms per
update, against 2.1-2.3 ms with these settings (docs/performance.md).  :func:`tune` fixes both thresholds
once per process (blocks up to 32 MB come from the heap, and up to 256 MB of free heap is kept): the price
is memory kept resident, never more than the process has used.

The setting is the process's, not a run's, so a library call never makes it: the ``fullcomp`` command,
which owns its process, applies it (``FULLCOMP_MALLOC=system`` opts out there); in Python it is an explicit
opt-in, ``fc.tune_allocator()``.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 256 << 20

_tuned: bool | None = None


def tune() -> bool:
    """Keep freed memory for reuse in this whole process (glibc only; it cannot be undone).

    Blocks up to 32 MB then come from the heap and up to 256 MB of free heap is kept, which removed
    nearly every page fault of a loop that takes fresh large temporaries each step.  Returns whether
    the settings are in force: False off glibc, or when ``FULLCOMP_MALLOC=system`` is set.
    """
    global _tuned
    if _tuned is None:
        _tuned = _apply()
    return _tuned


def glibc() -> bool:
    """Whether this process runs on glibc (other C libraries have other allocators and parameters)."""
    try:
        return sys.platform.startswith("linux") and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):
        return False


def _apply() -> bool:
    if os.environ.get("FULLCOMP_MALLOC", "").lower() == "system" or not glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
