"""Where a certified HMSFW update spends its time: Jacobian, LMO (pricing), master, and the rest.

Shared by the completion benchmarks.  ``TimeSplit`` wraps the three entry points for the
duration of a run and sums CPU seconds (``time.process_time``, the clock the benchmarks
report); ``floor`` times one minibatch Jacobian plus one exact LMO on the same problem, the
least an update that prices once could cost.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import numpy as np
import torch

from fullcomp.glmo.master import ConicMaster
from fullcomp.oracles.jacobian import InnerOracle, dense


class TimeSplit:
    """``with TimeSplit(domain) as split: ...``; then ``split.seconds[part]`` (CPU seconds)."""

    def __init__(self, domain):
        self.targets = [(InnerOracle, "__call__", "jacobian"), (type(domain), "lmo_bounded", "lmo")]
        self.targets.append((ConicMaster, "solve", "master"))
        self.seconds: dict[str, float] = defaultdict(float)

    def _timed(self, real, part):
        def timed(*args, **kwargs):
            start = time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds[part] += time.process_time() - start

        return timed

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


def floor(problem, rounds: int = 3) -> float:
    """CPU seconds of one minibatch Jacobian at the start plus one exact (cold) LMO of a direction V^T q."""
    reads = problem.reads
    n_read = len(reads)
    inner = problem.inner if problem.touches is None else problem.inner_on_touched
    oracle = InnerOracle(inner, problem.n, (n_read,), "cpu", torch.float64, touches=problem.touches)
    x = torch.zeros(n_read, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    times = []
    for _ in range(rounds):
        batch = problem.sample(generator)
        start = time.process_time()
        _, jac = oracle(x, batch, 0)
        # A direction stored on every entry read, as V^T q is once the tracker has seen a few batches.
        direction = np.full(problem.n, 1.0 / problem.n) @ dense(jac).numpy()
        problem.domain.lmo_bounded(direction, reads)
        times.append(time.process_time() - start)
    return statistics.median(times)


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
