"""The loop every method shares: budget, records, true objective, callbacks, progress, checkpoints, status.

A method's set-up returns a :class:`~fullcomp.run.plan.Plan`: its ``step(state, k) -> (next_state, row)``
(the paper's box) and its :class:`~fullcomp.run.plan.Readout`.  A :class:`Loop` does the rest, one named
part at a time.  A step never modifies its state in place, so keeping the previous state costs nothing and
an update that crosses the time budget can be discarded.  A step may write into the buffers of a state
older than that (on the structured path HMSFW's tracker and iterate each alternate two buffers), so a
callback that keeps states must copy what it needs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from fullcomp import distributed
from fullcomp.errors import CallbackError, CheckpointError, OracleError
from fullcomp.run.budget import Stopwatch
from fullcomp.run.checkpoint import Checkpoint
from fullcomp.run.history import History
from fullcomp.run.options import RunOptions
from fullcomp.run.plan import Iterate, Plan, Readout, RowView, Step
from fullcomp.run.result import Result
from fullcomp.serial import missing_fields


def own_checkpoint(run: RunOptions, sharded: bool) -> Checkpoint | None:
    """The checkpoint file this rank reads and writes: its own when each rank's state is its own share."""
    if run.checkpoint is None:
        return None
    return run.checkpoint.for_rank(run.world.rank) if sharded and run.world.parallel else run.checkpoint


@contextlib.contextmanager
def resuming(run: RunOptions, fingerprint: dict | None, sharded: bool) -> Iterator[dict | None]:
    """Hold the run's checkpoint for the whole run and yield what it saved (None: a fresh start).

    Before any work: the file must be writable, and no other live run may hold it.  A resumed run
    takes back the horizon its budget-dependent parameters were resolved with (``run.horizon``).
    """
    ckpt, here = own_checkpoint(run, sharded), run.world
    if ckpt is None:
        yield None
        return
    writer = here.writes or (sharded and here.parallel)
    with ckpt.lock() if writer else contextlib.nullcontext():
        if writer:
            ckpt.check_writable()
        saved = ckpt.load(fingerprint)
        if sharded and here.parallel:
            found = distributed.gather(None if saved is None else saved["k"])
            if len(set(found)) > 1:
                raise CheckpointError(
                    f"the ranks' checkpoint files hold iterations {found} (None: no file); a sharded run resumes "
                    f"only when every rank's file is from the same save: delete {run.checkpoint.path} and its "
                    ".rank files"
                )
        if saved is not None and "horizon" in saved:
            run.resume_horizon(saved["horizon"])
        yield saved


class Loop:
    """One run of a plan: ``Loop(plan, run, fingerprint, desc, saved).run()`` steps until the budget is spent
    (or the callback, convergence or an error stops it) and returns the Result.

    ``fingerprint`` identifies the run in its checkpoint (needed only when ``run.checkpoint`` is set);
    ``saved`` is what :func:`resuming` read from it.  Where an interruption lands decides what a checkpoint
    can keep: inside a step the generator and the components have moved past the last complete state, so
    only the last periodic checkpoint is exact; after it the step is committed first, so nothing computed is
    lost.
    """

    def __init__(
        self, plan: Plan, run: RunOptions, fingerprint: dict | None, desc: str = "fullcomp", saved: dict | None = None
    ):
        self.plan, self.readout, self.options = plan, plan.readout, run
        self.fingerprint, self.desc = fingerprint, desc
        self.info, self.history, self.watch = dict(plan.info), History(), Stopwatch()
        self.state, self.k = plan.state, 0
        self.here = run.world
        self.own_file = plan.sharded and self.here.parallel
        self.ckpt = own_checkpoint(run, plan.sharded)
        self.metrics: dict[str, None] = dict.fromkeys(self.info.get("metrics", []))  # the callback's, in order
        # The columns the run writes itself, which a callback may not return (it adds columns of its own).
        self.own = {"k", "time", "objective", "objective_estimate"} | ({self.readout.gap} - {None})
        self.pending: tuple | None = None  # (row, new_state) of a finished step not yet committed
        self.closed = False  # the last complete state's row is recorded
        if saved is not None:
            self.resume(saved)
        self.committed = self.snapshot() if self.ckpt is not None else {}

    # -- start ---------------------------------------------------------------------------------------------

    def resume(self, saved: dict) -> None:
        """Take the state, iteration, optimizer time, rows, generator and components a checkpoint saved."""
        check_saved_state(saved, self.plan, self.ckpt)
        self.state, self.k, self.watch.elapsed = saved["state"], saved["k"], saved["time"]
        self.history = History(r for r in saved["history"] if r["k"] < self.k)
        metrics = saved.get("metrics")
        if isinstance(metrics, list) and all(isinstance(m, str) for m in metrics):  # a file before it saved them
            self.metrics.update(dict.fromkeys(metrics))
            self.own.update(set(self.history.columns) - set(self.metrics))
        try:
            generators = saved["generators"][self.here.rank] if self.here.parallel else saved["generator"]
            self.options.generator.set_state(generators)
            for name, obj in self.plan.components.items():
                obj.load_state_dict(saved["components"][name])
        except (KeyError, IndexError, RuntimeError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"checkpoint {self.ckpt.path} is damaged ({type(exc).__name__}: {exc}); delete it, or pass "
                "fc.Checkpoint(path, on_mismatch='restart') to overwrite it"
            ) from None
        self.info["resumed_from"] = self.k

    # -- the loop ------------------------------------------------------------------------------------------

    def run(self) -> Result:
        """Step until a stop; the Result, with its status.  An error carries the Result of the rows so far."""
        # numpy/scipy's OpenBLAS threads and torch's OpenMP threads contend for the same cores when the loop
        # alternates small BLAS calls with torch ops: measured on MovieLens-100K with 2 cores,
        # single-threaded BLAS made certified HMSFW updates 4x and projected-subgradient updates 18x faster.
        blas = threadpool_limits(limits=1, user_api="blas")
        self.bar = tqdm(
            total=self.options.budget.iters,
            initial=self.k,
            desc=self.desc,
            disable=not self.options.progress,
            leave=False,
            dynamic_ncols=True,
        )
        try:
            status = self.steps()
            if not self.closed:
                self.close()
            self.save()
        except Exception as exc:
            self.fail(exc)
            raise
        except KeyboardInterrupt:
            self.keep_pending()
            raise
        finally:
            self.bar.close()
            blas.restore_original_limits()
        return self.result(status)

    def steps(self) -> str:
        """Updates until one of the stops; why it stopped."""
        while True:
            stop = self.budget_spent()
            if stop is not None:
                return stop
            started = self.watch.elapsed
            with self.watch:
                new_state, row = self.plan.step(self.state, self.k)
            row = {"k": self.k, "time": started, **row}
            if self.over_time(self.watch.elapsed):
                # This update crossed the budget: score the last complete in-budget state, and its time.
                self.watch.elapsed = started
                self.closed = True
                self.record(row, self.state, last=True)
                return "seconds"
            finite(row, "the step's")
            self.pending = (row, new_state)
            wants_stop = self.record(row, self.state, last=False)
            if self.here.parallel:  # a callback on any rank stops every rank
                wants_stop = bool(distributed.agree(float(wants_stop)))
            self.commit()
            self.show_progress(row)
            if self.ckpt is not None and self.k % self.ckpt.every == 0:
                self.save()
            if wants_stop:
                return "callback"
            if self.converged(row):
                return "converged"

    def budget_spent(self) -> str | None:
        """The status the budget stops the run with before the next update, or None to go on."""
        if not self.options.budget.iterations_left(self.k):
            return "iterations"
        if self.over_time(self.watch.elapsed):
            return "seconds"
        return None

    def over_time(self, elapsed: float) -> bool:
        """The budget decision, the same on every rank (the slowest rank's time decides)."""
        if self.options.budget.seconds is None:
            return False
        return self.options.budget.over_time(distributed.agree(elapsed) if self.here.parallel else elapsed)

    def converged(self, row: dict) -> bool:
        """The shared ``gap_tol`` is met by the readout's gap column."""
        tol = self.options.gap_tol
        return tol is not None and row.get(self.readout.gap, math.inf) <= tol

    def commit(self) -> None:
        """Make the pending update's state the current one (its row is recorded already)."""
        row, new_state = self.pending
        rows = self.history.rows
        if not rows or rows[-1].get("k") != row["k"]:  # a callback that raised already kept it
            self.history.append(row)
        self.state, self.k, self.pending = new_state, self.k + 1, None
        if self.ckpt is not None:
            self.committed = self.snapshot()

    def show_progress(self, row: dict) -> None:
        self.bar.update(1)
        key = self.readout.progress
        if key in row and self.k % 10 == 0:
            value = row[key]
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.bar.set_postfix({key: f"{value:.3e}"}, refresh=False)

    # -- rows ----------------------------------------------------------------------------------------------

    def record(self, row: dict, state: Any, last: bool) -> bool:
        """Append a row, with the readout's evaluation and the callback's metrics when due; False asks to stop."""
        at, every = row["k"], self.options.eval_every
        if last or at == 0 or (every is not None and at % every == 0):
            self.evaluate(row, state)
            try:
                finite(row, "the evaluated")
            except OracleError:
                self.pending = None  # the update from a state that evaluates to NaN is not kept either
                raise
        self.own.update(row)
        stop = False
        if self.options.callback is not None and (last or at % (every or 1) == 0):
            stop = self.call_back(row, state)
        self.history.append(row)
        return stop

    def evaluate(self, row: dict, state: Any) -> None:
        """The true objective and the readout's other columns, outside optimizer time."""
        objective = self.readout.objective(state)
        if objective is not None:
            row["objective"] = objective
        row.update(self.readout.evaluate(state, row["k"]))

    def call_back(self, row: dict, state: Any) -> bool:
        """Run the callback on the row's state; its metrics join the row.  True asks to stop."""
        at = row["k"]
        try:
            extra = self.options.callback(Iterate(at, self.readout.iterate(state), RowView(row), state))
        except Exception as exc:
            self.history.append(row)
            if isinstance(exc, CallbackError):  # the row refused a change, and says which
                raise CallbackError(f"at iteration {at}, {exc}") from exc
            raise CallbackError(f"the callback raised {type(exc).__name__} at iteration {at}: {exc}") from exc
        if extra is False:
            return True
        if isinstance(extra, dict):
            forged = [key for key in extra if key in row or key in self.own]
            if forged:
                self.history.append(row)
                raise CallbackError(
                    f"the callback returned column {forged[0]!r} at iteration {at}, which the run records "
                    f"itself ({', '.join(sorted(self.own))}); return your metrics under other names"
                )
            row.update(extra)
            self.metrics.update(dict.fromkeys(extra))
        elif extra is not None and extra is not True:
            self.history.append(row)
            raise CallbackError(
                f"the callback returned a {type(extra).__name__} at iteration {at}; return a dict of metrics, "
                "None to go on, or False to stop"
            )
        return False

    def close(self) -> None:
        """The row of the last complete state, outside optimizer time."""
        self.closed = True
        row = {"k": self.k, "time": self.watch.elapsed, **self.readout.observe(self.state, self.k)}
        self.record(row, self.state, last=True)

    # -- checkpoints ---------------------------------------------------------------------------------------

    def snapshot(self) -> dict:
        """The components and the generator as the last complete state left them: the closing row's GLMO
        and an update discarded at the time budget move them on, and a resume must not see that."""
        components = {name: obj.state_dict() for name, obj in self.plan.components.items()}
        return {"components": components, "generator": self.options.generator.get_state()}

    def save(self) -> None:
        """Checkpoint the last complete state; in a distributed job every rank's generator, written by rank 0."""
        if self.ckpt is None:
            return
        run_state = {
            "state": self.state,
            "k": self.k,
            "time": self.watch.elapsed,
            "history": self.history.saved(),
            "components": self.committed["components"],
            "horizon": self.options.resolved_horizon,
            "metrics": list(self.metrics),
        }
        if self.here.parallel:
            run_state["generators"] = distributed.gather(self.committed["generator"])
        else:
            run_state["generator"] = self.committed["generator"]
        if self.here.writes or self.own_file:
            self.ckpt.save(self.fingerprint, run_state)

    def keep_pending(self) -> None:
        """Commit a finished update an interruption caught, and checkpoint it when this rank can alone."""
        if self.pending is None:
            return
        self.commit()
        if not self.here.parallel:  # a collective now could wait on a rank that failed elsewhere
            try:
                self.save()
            except CheckpointError:  # the error on its way out is the one the caller must see
                pass

    # -- the end -------------------------------------------------------------------------------------------

    def fail(self, exc: Exception) -> None:
        """Keep every finite row so far, with the last complete state's own row when it can be computed, and
        attach the Result of the failed run to ``exc``."""
        if self.pending is not None:
            self.keep_pending()
        elif not self.closed and not isinstance(exc, CallbackError):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - the state that failed may not be observable either
                pass
        failed = self.result("error")
        failed.info["error"] = f"{type(exc).__name__}: {exc}"
        try:
            exc.result = failed
        except AttributeError:  # an exception type that takes no attributes
            pass

    def result(self, status: str) -> Result:
        info = self.info
        info.update(iterations=self.k, optimizer_seconds=self.watch.elapsed, clock=self.watch.clock, stopped=status)
        info["metrics"] = list(self.metrics)  # the callback's columns: a report tells them from the method's own
        return self.readout.result(self.state, self.history, info)


def drive(
    plan: Plan, run: RunOptions, fingerprint: dict | None, desc: str = "fullcomp", saved: dict | None = None
) -> Result:
    """Run ``plan`` in a :class:`Loop` until the budget is spent (or the callback, convergence or an error
    stops it); its Result."""
    return Loop(plan, run, fingerprint, desc, saved).run()


def finite(row: dict, which: str) -> None:
    """An OracleError naming the column when a row holds NaN, or an infinite objective: the run stops at its
    last finite state (status "error") instead of recording it."""
    for key, value in row.items():
        if type(value) is not float:  # most of a row, and the hot path
            if isinstance(value, (bool, int, str, complex)) or value is None or getattr(value, "ndim", None) != 0:
                continue
            try:
                value = float(value)
            except (TypeError, ValueError, RuntimeError):  # a 0-d value that is no real number
                continue
        if value - value != 0.0 and (math.isnan(value) or key in ("objective", "objective_estimate")):
            raise OracleError(
                f"{which} row of iteration {row['k']} has {key} = {value}: the run stopped at its last finite "
                "state, whose rows the error's .result holds; look for a NaN or an overflow in the inner map, its "
                "data or the step sizes"
            )


def check_saved_state(saved: dict, plan: Plan, ckpt: Checkpoint | None) -> None:
    """A CheckpointError naming what a saved run lacks that this method's state and components have."""
    missing = missing_fields(plan.state, saved["state"])
    components = saved["components"] if isinstance(saved["components"], dict) else {}
    missing += [f"component {name!r}" for name in plan.components if name not in components]
    if missing:
        raise CheckpointError(
            f"checkpoint {ckpt.path if ckpt else ''} is damaged: it has no {', '.join(missing)}; delete it, or pass "
            "fc.Checkpoint(path, on_mismatch='restart') to overwrite it"
        )


__all__ = ["Loop", "drive", "resuming", "Plan", "Readout", "Iterate", "Step"]
