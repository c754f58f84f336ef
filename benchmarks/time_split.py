"""Where a certified HMSFW update spends its time: Jacobian, LMO (pricing), master, and the rest.

Shared by the completion benchmarks.  ``TimeSplit`` wraps the three entry points for the
duration of a run and sums CPU seconds (``time.process_time``, the clock the benchmarks
report); its floor is one minibatch Jacobian as the run took them plus one exact LMO of a
direction the run priced, the least an update that prices once could cost.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import defaultdict

import numpy as np

from fullcomp.glmo.master import ConicMaster
from fullcomp.oracles.jacobian import InnerOracle
from fullcomp.sets.atoms import ScaledRows


class TimeSplit:
    """``with TimeSplit(domain) as split: ...``; then ``split.seconds[part]`` (CPU seconds) and ``split.floor_line``.

    Every ``every``-th direction priced is kept (a copy, outside the timed call), for the floor's LMOs.
    """

    def __init__(self, domain, every: int = 16):
        self.domain, self.every = domain, every
        self.targets = [(InnerOracle, "__call__", "jacobian"), (type(domain), "lmo_bounded", "lmo")]
        self.targets.append((ConicMaster, "solve", "master"))
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.directions: list = []

    def _timed(self, real, part):
        def timed(*args, **kwargs):
            start = time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds[part] += time.process_time() - start
                self.calls[part] += 1
                if part == "lmo" and self.calls[part] % self.every == 1:
                    self._keep(args[1])

        return timed

    def _keep(self, direction) -> None:
        # The run reuses the arrays a direction lives in.  A ScaledRows direction keeps only its q, on the G of
        # the run's last GLMO call (a copy of G would add 64 MB a direction to the run's peak at 10^7 entries);
        # a tag of its own makes the LMO build its factors as for a new direction.
        if isinstance(direction, ScaledRows):
            direction = dataclasses.replace(direction, q=direction.q.copy(), tag=-1 - len(self.directions))
        else:
            direction = np.array(direction, copy=True)
        self.directions.append(direction)

    def floor_line(self, reads, per_update: float) -> str:
        """The update over its floor, with the floor's parts.  The floor is one minibatch Jacobian (the run's mean)
        plus one exact LMO: the median, over the kept directions of the run (at scale: their q's on the last G),
        of a cold LMO (no warm start, no early stop) on the run's entries."""
        jacobian = self.seconds["jacobian"] / self.calls["jacobian"]
        times = []
        for direction in self.directions:
            start = time.process_time()
            self.domain.lmo_bounded(direction, reads)
            times.append(time.process_time() - start)
        lmo = statistics.median(times)
        floor = jacobian + lmo
        return (
            f"{per_update / floor:.1f} (floor {floor * 1e3:.1f} ms: Jacobian {jacobian * 1e3:.1f} ms, exact LMO"
            f" {lmo * 1e3:.1f} ms, the median over {len(times)} of the run's directions, {min(times) * 1e3:.1f}-"
            f"{max(times) * 1e3:.1f} ms)"
        )

    def __enter__(self) -> TimeSplit:
        self._saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in self.targets]
        for cls, name, part in self.targets:
            setattr(cls, name, self._timed(cls.__dict__[name], part))
        return self

    def __exit__(self, *exc) -> None:
        for cls, name, real in self._saved:
            setattr(cls, name, real)

    def line(self, updates: int, per_update: float) -> str:
        parts = {p: self.seconds[p] / updates for p in ("jacobian", "lmo", "master")}
        rest = per_update - sum(parts.values())
        return " | ".join(f"{p} {s:.3f}" for p, s in [*parts.items(), ("rest", rest)])


class SparseProducts:
    """``with SparseProducts() as count: ...``; then ``count.products``: sparse products of a matrix with a
    vector or a block of vectors, scipy's and torch's (each Lanczos step takes two, a block step too), the work
    a fixed pricing budget does not fix."""

    def __enter__(self) -> SparseProducts:
        import scipy.sparse._compressed as compressed

        from fullcomp.sets import lanczos

        self.products = 0
        self._patched = [
            (compressed._cs_matrix, name, compressed._cs_matrix.__dict__[name])
            for name in ("_matmul_vector", "_matmul_multivector")
        ]
        self._patched.append((lanczos.DeviceMatrix, "__matmul__", lanczos.DeviceMatrix.__matmul__))
        for cls, name, real in self._patched:
            setattr(cls, name, self._counted(real))
        return self

    def _counted(self, real):
        def counted(matrix, other):
            self.products += 1
            return real(matrix, other)

        return counted

    def __exit__(self, *exc) -> None:
        for cls, name, real in self._patched:
            setattr(cls, name, real)


def steady(res, slots: int = 31) -> tuple[float | None, int, float]:
    """(seconds per update, first update, mean pricing calls) once the atom pool's value cache has been
    written (31 slots of len(reads) floats on the default pool); None when no update follows.

    Until the pool is full each new atom's row is fresh memory, which this machine faults in at about
    250 MB/s: a one-time cost of the run rather than of an update.
    """
    times = res.history.column("time")
    calls = np.cumsum(res.history.column("pricing_calls")[:-1])
    full = int(np.searchsorted(calls, slots, side="right")) + 1  # the first update after the pool filled
    if full >= len(times) - 1:
        return None, full, float("nan")
    per = (times[-1] - times[full]) / (len(times) - 1 - full)
    return per, full, float(res.history.column("pricing_calls")[full:-1].mean())
