"""The loop every method shares: budget, records, true objective, callbacks, progress, checkpoints, status.

A method's set-up returns a :class:`Plan`: its ``step(state, k) -> (next_state,
row)`` (the paper's box) and how to read a state.  The driver does the rest.
A step never modifies its state in place, so keeping the previous state costs
nothing and an update that crosses the time budget can be discarded.  A step may
write into the buffers of a state older than that (on the structured path HMSFW's
tracker and iterate each alternate two buffers), so a callback that keeps states
must copy what it needs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from fullcomp import distributed
from fullcomp.errors import CallbackError, CheckpointError
from fullcomp.run.budget import Stopwatch
from fullcomp.run.checkpoint import Checkpoint
from fullcomp.run.history import History
from fullcomp.run.options import RunOptions
from fullcomp.run.result import Result
from fullcomp.serial import missing_fields

Step = Callable[[dict, int], "tuple[dict, dict]"]

#: Up to this many inner values, the history holds the weights F puts on each (columns q[0], q[1], ...).
WEIGHT_COLUMNS = 64


@dataclass
class Iterate:
    """What a callback sees: the iteration, the iterate x and the row being recorded.

    ``state`` is the method's; later steps may reuse its buffers (and on the structured path, ``reads=``,
    the buffer of ``x``), so copy what you keep.
    """

    k: int
    x: Any
    row: dict
    state: dict


@dataclass
class Plan:
    """What a method's set-up hands the driver.

    ``step`` is the update; ``iterate(state)`` the point a callback sees;
    ``finish(state, history, info)`` the Result; ``observe(state, k)`` the row
    of the final state (outside optimizer time); ``objective(state)`` the true
    objective when the problem can compute it (else None); ``converged(row)``
    stops the run with status "converged"; ``weights(state)`` the weights F puts on each inner value at the
    state's tracked u (recorded with the true objective, and in ``result.weights``); ``components`` have
    ``state_dict``/``load_state_dict`` and are checkpointed with the state.
    """

    step: Step
    state: dict
    iterate: Callable[[dict], Any]
    finish: Callable[[dict, History, dict], Result]
    observe: Callable[[dict, int], dict] | None = None
    objective: Callable[[dict], float] | None = None
    converged: Callable[[dict], bool] | None = None
    weights: Callable[[dict], Any] | None = None
    #: More columns of a state, computed where the true objective is (outside optimizer time): estimates a
    #: method offers beside its tracked one.
    evaluate: Callable[[dict], dict] | None = None
    components: dict[str, Any] = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    #: The row's column that measures the gap or stationarity (a Frank-Wolfe gap, a gradient norm, the move of
    #: a proximal step); the shared ``gap_tol`` stops the run with status "converged" once it is below.
    gap: str | None = None
    progress_key: str = "objective_estimate"
    #: Each rank's state is its own share of the problem (sharded entries): every rank checkpoints it.
    sharded: bool = False


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


def drive(
    plan: Plan, run: RunOptions, fingerprint: dict | None, desc: str = "fullcomp", saved: dict | None = None
) -> Result:
    """Run ``plan.step`` until the budget is spent (or the callback, convergence or an error stops it).

    ``fingerprint`` identifies the run in its checkpoint (needed only when ``run.checkpoint`` is set);
    ``saved`` is what :func:`resuming` read from it.
    """
    info = dict(plan.info)
    history = History()
    watch = Stopwatch()
    state, k = plan.state, 0
    generator, here = run.generator, run.world
    own_file = plan.sharded and here.parallel
    ckpt = own_checkpoint(run, plan.sharded)
    if saved is not None:
        check_saved_state(saved, plan, ckpt)
        state, k, watch.elapsed = saved["state"], saved["k"], saved["time"]
        history = History(r for r in saved["history"] if r["k"] < k)
        try:
            generator.set_state(saved["generators"][here.rank] if here.parallel else saved["generator"])
            for name, obj in plan.components.items():
                obj.load_state_dict(saved["components"][name])
        except (KeyError, IndexError, RuntimeError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"checkpoint {ckpt.path} is damaged ({type(exc).__name__}: {exc}); delete it, or pass "
                "fc.Checkpoint(path, on_mismatch='restart') to overwrite it"
            ) from None
        info["resumed_from"] = k

    def snapshot() -> dict:
        """The components and the generator as the last complete state left them: the closing row's GLMO
        and an update discarded at the time budget move them on, and a resume must not see that."""
        components = {name: obj.state_dict() for name, obj in plan.components.items()}
        return {"components": components, "generator": generator.get_state()}

    committed = snapshot() if ckpt is not None else {}

    def save() -> None:
        """Checkpoint the last complete state; in a distributed job every rank's generator, written by rank 0."""
        if ckpt is None:
            return
        run_state = {
            "state": state,
            "k": k,
            "time": watch.elapsed,
            "history": history.saved(),
            "components": committed["components"],
            "horizon": run.resolved_horizon,
        }
        if here.parallel:
            run_state["generators"] = distributed.gather(committed["generator"])
        else:
            run_state["generator"] = committed["generator"]
        if here.writes or own_file:
            ckpt.save(fingerprint, run_state)

    def save_quietly() -> None:
        """``save`` while another error is on its way out: that error is the one the caller must see."""
        try:
            save()
        except CheckpointError:
            pass

    def over_time(elapsed: float) -> bool:
        """The budget decision, the same on every rank (the slowest rank's time decides)."""
        if run.budget.seconds is None:
            return False
        return run.budget.over_time(distributed.agree(elapsed) if here.parallel else elapsed)

    every = run.eval_every
    want_objective = plan.objective is not None
    metrics: dict[str, None] = dict.fromkeys(info.get("metrics", []))  # the callback's columns, in order
    weights: dict[int, np.ndarray] = {}  # iteration -> the weights F puts on the inner values there

    def record(row: dict, at: int, current: dict, last: bool) -> bool:
        """Append a row (with the true objective, the weights and the callback's metrics when due); False asks
        to stop."""
        due = last or at == 0 or (every is not None and at % every == 0)
        if want_objective and due:
            row["objective"] = plan.objective(current)
        if plan.evaluate is not None and due:
            row.update(plan.evaluate(current))
        if plan.weights is not None and due:
            q = weights[at] = np.asarray(plan.weights(current), dtype=np.float64)
            if q.size <= WEIGHT_COLUMNS:
                row.update({f"q[{i}]": float(v) for i, v in enumerate(q)})
        stop = False
        if run.callback is not None and (last or at % (every or 1) == 0):
            try:
                extra = run.callback(Iterate(at, plan.iterate(current), row, current))
            except Exception as exc:
                history.append(row)
                raise CallbackError(f"the callback raised {type(exc).__name__} at iteration {at}: {exc}") from exc
            if extra is False:
                stop = True
            elif isinstance(extra, dict):
                forged = [key for key in extra if key in row]
                if forged:
                    history.append(row)
                    raise CallbackError(
                        f"the callback returned column {forged[0]!r} at iteration {at}, which the run records "
                        f"itself ({', '.join(row)}); return your metrics under other names"
                    )
                row.update(extra)
                metrics.update(dict.fromkeys(extra))
            elif extra is not None and extra is not True:
                history.append(row)
                raise CallbackError(
                    f"the callback returned a {type(extra).__name__} at iteration {at}; return a dict of metrics, "
                    "None to go on, or False to stop"
                )
        history.append(row)
        return stop

    def result(status: str) -> Result:
        info.update(iterations=k, optimizer_seconds=watch.elapsed, clock=watch.clock, stopped=status)
        info["metrics"] = list(metrics)  # the callback's columns: a report tells them from the method's own
        result = plan.finish(state, history, info)
        if k in weights:
            result.weights = weights[k]
        return result

    def closing_row() -> None:
        """The row of the last complete state, outside optimizer time."""
        row = {"k": k, "time": watch.elapsed, **(plan.observe(state, k) if plan.observe else {})}
        record(row, k, state, True)

    # numpy/scipy's OpenBLAS threads and torch's OpenMP threads contend for the same cores when the loop
    # alternates small BLAS calls with torch ops: measured on MovieLens-100K with 2 cores, single-threaded
    # BLAS made certified HMSFW updates 4x and projected-subgradient updates 18x faster.
    blas = threadpool_limits(limits=1, user_api="blas")
    bar = tqdm(total=run.budget.iters, initial=k, desc=desc, disable=not run.progress, leave=False, dynamic_ncols=True)
    status, closed = "iterations", False
    # Where an interruption lands decides what a checkpoint can keep: inside a step the generator and the
    # components have moved past the last complete state, so only the last periodic checkpoint is exact;
    # after it the step is committed first, so nothing computed is lost.
    pending: tuple | None = None  # (row, new_state) of a finished step not yet committed

    def commit() -> None:
        nonlocal state, k, pending, committed
        row, new_state = pending
        if not history.rows or history.rows[-1].get("k") != row["k"]:  # a callback that raised already kept it
            history.append(row)
        state, k, pending = new_state, k + 1, None
        if ckpt is not None:
            committed = snapshot()

    try:
        while True:
            if not run.budget.iterations_left(k):
                break
            if over_time(watch.elapsed):
                status = "seconds"
                break
            started = watch.elapsed
            with watch:
                new_state, row = plan.step(state, k)
            row = {"k": k, "time": started, **row}
            if over_time(watch.elapsed):
                # This update crossed the budget: score the last complete in-budget state, and its time.
                watch.elapsed = started
                status, closed = "seconds", True
                record(row, k, state, True)
                break
            pending = (row, new_state)
            wants_stop = record(row, k, state, False)
            if here.parallel:  # a callback on any rank stops every rank
                wants_stop = bool(distributed.agree(float(wants_stop)))
            commit()
            bar.update(1)
            if plan.progress_key in row and k % 10 == 0:
                value = row[plan.progress_key]
                if isinstance(value, (int, float)) and math.isfinite(value):
                    bar.set_postfix({plan.progress_key: f"{value:.3e}"}, refresh=False)
            if ckpt is not None and k % ckpt.every == 0:
                save()
            if wants_stop:
                status = "callback"
                break
            if (plan.converged is not None and plan.converged(row)) or (
                run.gap_tol is not None and row.get(plan.gap, math.inf) <= run.gap_tol
            ):
                status = "converged"
                break
        if not closed:
            closed = True
            closing_row()
        save()
    except Exception as exc:
        # Every finite row so far is kept, with the last complete state's own row when it can be computed.
        if pending is not None:
            commit()
            if not here.parallel:  # a collective now could wait on a rank that failed elsewhere
                save_quietly()
        elif not closed and not isinstance(exc, CallbackError):
            try:
                closing_row()
            except Exception:  # noqa: BLE001 - the state that failed may not be observable either
                pass
        failed = result("error")
        failed.info["error"] = f"{type(exc).__name__}: {exc}"
        try:
            exc.result = failed
        except AttributeError:  # an exception type that takes no attributes
            pass
        raise
    except KeyboardInterrupt:
        if pending is not None:
            commit()
            if not here.parallel:
                save_quietly()
        raise
    finally:
        bar.close()
        blas.restore_original_limits()
    return result(status)


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
