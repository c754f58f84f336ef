"""Run guarantees under attack: stale resumes, budget-dependent defaults, unwritable, linked or shared
checkpoints, malformed checkpoints, forged rows, and the errors that name the argument and the fix."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import cvxpy as cp
import numpy as np
import pytest
import torch
from contract_cases import CASES, composite, run

import fullcomp as fc
from fullcomp.errors import CallbackError, CheckpointError, DataError, ModelError, OptionError, OracleError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def least_squares(t: float = 0.5, noise: float = 0.1, dtype=torch.float64, lower=None):
    A = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), dtype=dtype)

    def sampler(gen):
        return noise * torch.randn(4, generator=gen, dtype=torch.float64).to(dtype)

    domain = fc.Simplex(10) if lower is None else fc.Box(lower, 1.0, shape=(10,))
    return fc.CompositeProblem(cp.max(fc.inner_value(4)), lambda x, n: (A @ x - t) ** 2 + n, domain, sampler=sampler)


# ---------------------------------------------------------------- a changed problem is refused, naming what


@pytest.mark.parametrize(
    "change",
    [
        lambda: least_squares(t=5.0),  # a scalar the map captures
        lambda: least_squares(noise=0.3),  # the sampler's noise scale
    ],
)
def test_a_change_inside_a_closure_is_refused(change, tmp_path):
    path = tmp_path / "c.ckpt"
    fc.hmsfw(least_squares(), iters=5, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match=r"problem\.behaviour"):
        fc.hmsfw(change(), iters=10, checkpoint=path, progress=False)


def test_a_box_bound_and_a_cvxpy_parameter_value_are_fingerprinted(tmp_path):
    path = tmp_path / "b.ckpt"
    fc.solve(least_squares(lower=0.0), "psg", iters=3, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match=r"problem\.domain"):
        fc.solve(least_squares(lower=-1.0), "psg", iters=6, checkpoint=path, progress=False)

    A = torch.randn(3, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    weight = cp.Parameter(nonneg=True, value=1.0)
    u = fc.inner_value(3)

    def make():
        return fc.CompositeProblem(cp.max(u) + weight * cp.sum(u), lambda x, b: A @ x, fc.Simplex(5))

    other = tmp_path / "p.ckpt"
    fc.hmsfw(make(), iters=3, checkpoint=other, progress=False)
    weight.value = 2.0
    with pytest.raises(CheckpointError, match=r"problem\.parameters"):
        fc.hmsfw(make(), iters=6, checkpoint=other, progress=False)


def _with_parameter(value: float, name: str | None = None) -> fc.CompositeProblem:
    """The least-squares problem with a penalty weight held by a new cp.Parameter (a notebook cell run again)."""
    base, weight, u = least_squares(), cp.Parameter(nonneg=True, value=value, name=name), fc.inner_value(4)
    return fc.CompositeProblem(cp.max(u) + weight * cp.sum(u), base.inner, base.domain, sampler=base.sampler)


@pytest.mark.parametrize("name", [None, "lam"])
def test_a_rebuilt_identical_parameter_resumes_and_a_changed_value_is_refused(name, tmp_path):
    path = tmp_path / "p.ckpt"
    fc.hmsfw(_with_parameter(0.1, name), iters=3, checkpoint=path, progress=False)
    again = fc.hmsfw(_with_parameter(0.1, name), iters=6, checkpoint=path, progress=False)
    assert again.info["resumed_from"] == 3
    with pytest.raises(CheckpointError, match=r"problem\.parameters\." + ("param\\[0\\]" if name is None else name)):
        fc.hmsfw(_with_parameter(0.2, name), iters=9, checkpoint=path, progress=False)


def test_a_dmax_function_change_inside_a_closure_is_refused(tmp_path):
    def make(c: float):
        return fc.DMaxProblem(
            lambda x, b: ((x - c * b) ** 2).sum(),
            lambda x, b: x.abs().sum(),
            x0=torch.zeros(3, dtype=torch.float64),
            sampler=lambda gen: torch.randn(3, generator=gen, dtype=torch.float64),
        )

    path = tmp_path / "d.ckpt"
    fc.solve(make(1.0), "sgd", eta=0.05, iters=3, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match=r"problem\.behaviour"):
        fc.solve(make(2.0), "sgd", eta=0.05, iters=6, checkpoint=path, progress=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", ["hmsfw", "psg", "sgd", "smag"])
def test_the_same_script_still_resumes(method, dtype, tmp_path):
    factory, required = CASES[method]
    path = tmp_path / "same.ckpt"
    run(method, iters=3, seed=1, checkpoint=path, problem=factory(dtype=dtype))
    again = run(method, iters=6, seed=1, checkpoint=path, problem=factory(dtype=dtype))
    assert again.info["resumed_from"] == 3


def test_the_differing_key_is_named_in_full(tmp_path):
    path = tmp_path / "c.ckpt"
    fc.hmsfw(composite(), iters=2, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError) as caught:
        fc.hmsfw(composite(scale=2.0), iters=4, checkpoint=path, progress=False)
    assert "problem.data was" in str(caught.value)


# ---------------------------------------------------------------- budget-dependent defaults


@pytest.mark.parametrize(
    "method, options",
    [("linasa-icg", {"icg_steps": 3}), ("hmsfw", {"schedule": "theorem1"}), ("psg", {"schedule": "theorem1"})],
)
def test_a_longer_budget_continues_the_run_it_resumes(method, options, tmp_path):
    P = composite()
    path = tmp_path / "l.ckpt"
    short = fc.solve(P, method, iters=6, seed=3, progress=False, **options)
    fc.solve(P, method, iters=6, seed=3, progress=False, checkpoint=fc.Checkpoint(path, every=3), **options)
    with pytest.warns(UserWarning, match="horizon"):
        longer = fc.solve(P, method, iters=12, seed=3, progress=False, checkpoint=path, **options)
    assert longer.info["resumed_from"] == 6 and longer.info["horizon"] == 6
    # The first six rows are the short run's: one trajectory, continued.
    for a, b in zip(short.history.rows[:6], longer.history.rows[:6]):
        assert a["objective_estimate"] == b["objective_estimate"]
    # ... and it goes on as the same run with a horizon of 6, extended, would: 12 updates of that run, stepped.
    extended = fc.Stepper(composite(), method, seed=3, iters=6, **options)
    rows = [extended.step() for _ in range(12)]
    assert [r["objective_estimate"] for r in rows] == [r["objective_estimate"] for r in longer.history.rows[:12]]
    assert torch.equal(extended.x, longer.x)


# ---------------------------------------------------------------- checkpoint files


def test_an_unwritable_checkpoint_path_fails_before_the_first_update():
    calls = []
    with pytest.raises(CheckpointError, match="/proc/nope/run.ckpt"):
        fc.hmsfw(
            composite(),
            iters=3,
            progress=False,
            callback=calls.append,
            checkpoint=fc.Checkpoint("/proc/nope/run.ckpt", every=10**6),
        )
    assert calls == []


def test_a_save_that_fails_mid_run_keeps_every_row(tmp_path, monkeypatch):
    path = tmp_path / "run.ckpt"
    from fullcomp.run import checkpoint

    saves = [0]
    original = checkpoint.write_atomic

    def flaky(target, data):
        saves[0] += 1
        if saves[0] == 2:
            raise OSError(28, "No space left on device")
        return original(target, data)

    monkeypatch.setattr(checkpoint, "write_atomic", flaky)
    with pytest.raises(CheckpointError, match="run.ckpt") as caught:
        fc.hmsfw(composite(), iters=10, progress=False, checkpoint=fc.Checkpoint(path, every=2))
    result = caught.value.result
    assert result.status == "error" and [r["k"] for r in result.history][:4] == [0, 1, 2, 3]


def test_a_symlinked_checkpoint_writes_through_to_its_target(tmp_path):
    (tmp_path / "real").mkdir()
    link = tmp_path / "link.ckpt"
    link.symlink_to(tmp_path / "real" / "target.ckpt")
    fc.hmsfw(composite(), iters=3, progress=False, checkpoint=link)
    assert link.is_symlink() and (tmp_path / "real" / "target.ckpt").is_file()
    again = fc.hmsfw(composite(), iters=5, progress=False, checkpoint=link)
    assert again.info["resumed_from"] == 3 and link.is_symlink()


def _pid_of_a_finished_process() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_live_writer_holds_the_checkpoint_and_a_dead_ones_lock_is_taken_over(tmp_path):
    path = tmp_path / "run.ckpt"
    lock = Path(f"{path}.lock")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(f"{sleeper.pid} {os.uname().nodename}\n")
        with pytest.raises(CheckpointError, match=rf"process {sleeper.pid}"):
            fc.hmsfw(composite(), iters=2, progress=False, checkpoint=path)
    finally:
        sleeper.kill()
        sleeper.wait()
    lock.write_text(f"{_pid_of_a_finished_process()} {os.uname().nodename}\n")
    result = fc.hmsfw(composite(), iters=2, progress=False, checkpoint=path)
    assert result.status == "iterations" and not lock.exists()


@pytest.mark.parametrize("key", ["k", "state", "history", "generator", "time"])
def test_a_checkpoint_missing_a_key_names_it(key, tmp_path):
    path = tmp_path / "run.ckpt"
    fc.hmsfw(composite(), iters=3, progress=False, checkpoint=path)
    payload = torch.load(path, weights_only=True)
    del payload["run"][key]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=repr(key)):
        fc.hmsfw(composite(), iters=5, progress=False, checkpoint=path)


def test_a_checkpoint_whose_state_misses_a_field_names_it(tmp_path):
    path = tmp_path / "run.ckpt"
    fc.hmsfw(composite(), iters=3, progress=False, checkpoint=path)
    payload = torch.load(path, weights_only=True)
    fields = payload["run"]["state"]["fields"]  # the typed state, written as its fields
    name = next(iter(fields))
    del fields[name]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=repr(name)):
        fc.hmsfw(composite(), iters=5, progress=False, checkpoint=path)


# ---------------------------------------------------------------- rows a callback cannot forge


@pytest.mark.parametrize("method", ["hmsfw", "psg", "sgd", "smag"])
@pytest.mark.parametrize("key", ["k", "time", "objective_estimate"])
def test_a_callback_cannot_overwrite_a_reserved_column(method, key):
    with pytest.raises(CallbackError, match=repr(key)):
        run(method, iters=3, callback=lambda it: {key: 99.0})


@pytest.mark.parametrize("key", ["objective", "q[0]", "gap_estimate"])
def test_a_callback_cannot_forge_a_column_the_run_writes_on_other_rows(key):
    # objective and q[i] are written at the first and last rows only: the rows between lack them.
    with pytest.raises(CallbackError, match=repr(key).replace("[", r"\[")):
        run("hmsfw", iters=5, callback=lambda it: {key: -999.0} if 0 < it.k < 4 else None)


def test_a_callback_cannot_edit_the_row_in_place(tmp_path):
    path = tmp_path / "a.ckpt"
    seen = []

    def edits(it):
        seen.append(dict(it.row))
        it.row["k"] = 1000 + it.k

    with pytest.raises(CallbackError, match=r"it\.row\['k'\].*read-only") as caught:
        run("hmsfw", iters=8, callback=edits, checkpoint=fc.Checkpoint(path, every=2))
    assert [r["k"] for r in caught.value.result.history] == [0] and seen[0]["k"] == 0
    resumed = run("hmsfw", iters=8, checkpoint=path)
    assert [r["k"] for r in resumed.history] == list(range(9))


def test_a_callbacks_metrics_survive_a_resume_and_may_be_returned_again(tmp_path):
    path = tmp_path / "m.ckpt"
    stop_at_3 = lambda it: False if it.k == 3 else {"mine": float(it.k)}  # noqa: E731
    run("hmsfw", iters=6, callback=stop_at_3, checkpoint=path)
    resumed = run("hmsfw", iters=6, callback=lambda it: {"mine": float(it.k)}, checkpoint=path)
    assert resumed.info["resumed_from"] == 4 and resumed.info["metrics"] == ["mine"]
    assert [r.get("mine") for r in resumed.history] == [0.0, 1.0, 2.0, None, 4.0, 5.0, 6.0]


class _Point(fc.Readout):
    def iterate(self, state):
        return state["y"]


def test_rows_that_turn_nan_stop_the_run_with_status_error(monkeypatch):
    from fullcomp.algorithms import method as method_module

    monkeypatch.setattr(method_module, "REGISTRY", dict(method_module.REGISTRY))

    def setup(problem, hp, run):
        def step(state, k):
            return {"y": state["y"]}, {"objective_estimate": float("nan") if k >= 2 else 1.0}

        return fc.Plan(step, {"y": torch.as_tensor(problem.x0, dtype=run.dtype)}, _Point())

    fc.register(fc.Method("nan-rows", fc.CompositeProblem, (), setup, "NaN estimates from k = 2"))
    with pytest.raises(OracleError, match="iteration 2 has objective_estimate = nan") as caught:
        fc.solve(composite(), "nan-rows", iters=5, progress=False)
    result = caught.value.result
    assert result.status == "error" and "objective_estimate = nan" in result.info["error"]
    assert [r["k"] for r in result.history] == [0, 1, 2] and "objective_estimate" not in result.history[-1]


class _InfiniteObjective(_Point):
    def objective(self, state):
        return float("inf")


def test_a_readouts_infinite_objective_stops_the_run(monkeypatch):
    from fullcomp.algorithms import method as method_module

    monkeypatch.setattr(method_module, "REGISTRY", dict(method_module.REGISTRY))

    def setup(problem, hp, run):
        state = {"y": torch.as_tensor(problem.x0, dtype=run.dtype)}
        return fc.Plan(lambda s, k: (s, {"objective_estimate": 1.0}), state, _InfiniteObjective())

    fc.register(fc.Method("inf-objective", fc.CompositeProblem, (), setup, "an infinite true objective"))
    with pytest.raises(OracleError, match="iteration 0 has objective = inf") as caught:
        fc.solve(composite(), "inf-objective", iters=5, progress=False)
    assert caught.value.result.status == "error" and len(caught.value.result.history) == 0


@pytest.mark.parametrize("value", [5, "stop", [1]])
def test_a_callback_returning_another_type_is_refused(value):
    with pytest.raises(CallbackError, match=type(value).__name__):
        run("hmsfw", iters=3, callback=lambda it: value)


def test_a_callback_may_add_columns_and_stop():
    result = run("hmsfw", iters=5, callback=lambda it: {"mine": float(it.k)} if it.k < 2 else False)
    assert [r.get("mine") for r in result.history][:2] == [0.0, 1.0] and result.status == "callback"


# ---------------------------------------------------------------- errors that name the argument


def test_the_meta_device_is_refused():
    with pytest.raises(OptionError, match="device"):
        run("hmsfw", iters=2, device="meta")


def test_a_map_returning_a_meta_tensor_is_a_model_error():
    with pytest.raises(ModelError, match="meta"):
        fc.CompositeProblem(
            cp.max(fc.inner_value(2)), lambda x, b: torch.empty(2, device="meta"), fc.Simplex(3), check_gradient=False
        )


def test_a_huge_seed_names_the_range():
    with pytest.raises(OptionError, match="seed"):
        run("hmsfw", iters=2, seed=2**70)


@pytest.mark.parametrize("method", ["sgd", "smag", "hmsfw"])
def test_half_precision_is_refused(method):
    with pytest.raises(OptionError, match="float16"):
        run(method, iters=2, dtype=torch.float16)


def test_an_out_of_memory_jacobian_names_its_size_and_the_fix():
    A = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    running = [False]

    def inner(x, batch):
        if running[0] and torch.is_grad_enabled():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return A @ x

    problem = fc.CompositeProblem(cp.max(fc.inner_value(4)), inner, fc.Simplex(10))
    running[0] = True
    with pytest.raises(OracleError) as caught:
        fc.hmsfw(problem, iters=2, progress=False)
    message = str(caught.value)
    assert "4 x 10" in message and "reads=" in message and "batch" in message and ".item()" not in message


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fullcomp", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "body, shown",
    [
        ("def build(args):\n    raise ValueError('my own mistake')\n", "my own mistake"),
        ("def build(args)\n    return 1\n", "SyntaxError"),
        ("raise SystemExit(3)\n", "SystemExit"),
    ],
)
def test_a_failing_script_shows_its_own_traceback_under_one_line(body, shown, tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(body)
    done = _cli("run", str(script), "--iters", "2", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 1
    assert f"fullcomp run: error: the script {script}" in done.stderr
    assert shown in done.stderr and "fullcomp/cli.py" not in done.stderr


def test_report_on_a_file_says_it_is_a_file(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text("k\n0\n")
    done = _cli("report", str(path), cwd=tmp_path)
    assert done.returncode == 1 and "is a file" in done.stderr and "does not exist" not in done.stderr


def test_a_pickled_x_is_a_data_error(tmp_path):
    result = run("hmsfw", iters=2)
    folder = result.save(tmp_path / "run")
    np.save(folder / "x.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match="x.npy"):
        fc.Result.load(folder)


def test_run_files_follow_the_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        result = run("hmsfw", iters=2, checkpoint=tmp_path / "run.ckpt")
        folder = result.save(tmp_path / "run")
    finally:
        os.umask(previous)
    for path in [*folder.iterdir(), tmp_path / "run.ckpt"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o640, path


def test_run_help_does_not_say_hmsfw_alone():
    from fullcomp.cli import COMMANDS

    assert "HMSFW" not in COMMANDS["run"][0]


def test_the_rates_benchmark_leaves_the_checkout_clean():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rates_benchmark", ROOT / "benchmarks" / "rates.py")
    rates = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = rates  # its dataclasses look their module up there
    spec.loader.exec_module(rates)
    docs = ROOT / "docs"
    default = rates.options([])
    assert docs not in default.plot.resolve().parents and docs not in default.json.resolve().parents
    explicit = rates.options(["--update-docs"])
    assert explicit.plot == docs / "theory-checks.png" and explicit.json == docs / "theory-checks.json"


# ---------------------------------------------------------------- process-wide state

MALLOC_PROBE = textwrap.dedent(
    """
    import ctypes, sys
    sys.path.insert(0, {tests!r})
    from contract_cases import run
    import fullcomp as fc
    if {opt_in}:
        fc.tune_allocator()
    run("hmsfw", iters=3)
    libc = ctypes.CDLL(None)

    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]

    libc.mallinfo2.restype = Info
    libc.malloc.restype = ctypes.c_void_p
    before = libc.mallinfo2().hblks
    block = libc.malloc(24 << 20)
    print(libc.mallinfo2().hblks - before)
    """
)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc >= 2.33 only"
)
def test_a_solve_leaves_the_allocator_alone_unless_asked():
    def mapped(opt_in: bool) -> int:
        code = MALLOC_PROBE.format(tests=str(HERE), opt_in=opt_in)
        env = {k: v for k, v in os.environ.items() if k != "FULLCOMP_MALLOC"}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        return int(done.stdout.split()[-1])

    assert mapped(False) == 1  # glibc's default: a 24 MB block is mapped fresh from the kernel
    assert mapped(True) == 0  # opted in: it comes from the heap


def test_a_second_live_run_on_one_out_folder_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "p.py"
    script.write_text(
        "import cvxpy as cp, fullcomp as fc\n"
        "problem = fc.CompositeProblem(cp.sum(fc.inner_value(1)), lambda x, _: (x @ x).reshape(1), fc.L1Ball(3))\n"
    )
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".lock").write_text(f"{sleeper.pid} {os.uname().nodename}\n")
        done = _cli("run", str(script), "--iters", "2", "--no-progress", "--out", str(out), cwd=tmp_path)
        assert done.returncode == 1 and f"in use by process {sleeper.pid}" in done.stderr
        assert not (out / "history.csv").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    done = _cli("run", str(script), "--iters", "2", "--no-progress", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0 and (out / "history.csv").exists() and not (out / ".lock").exists()


def test_the_cli_keeps_the_run_folder_when_a_checkpoint_save_fails(tmp_path):
    script = tmp_path / "p.py"
    script.write_text(
        "import cvxpy as cp, fullcomp as fc\n"
        "problem = fc.CompositeProblem(cp.sum(fc.inner_value(1)), lambda x, _: (x @ x).reshape(1), fc.L1Ball(3))\n"
    )
    done = _cli(
        "run",
        str(script),
        "--iters",
        "2",
        "--checkpoint",
        "/proc/nope/run.ckpt",
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert done.returncode == 1 and "/proc/nope/run.ckpt" in done.stderr and "Traceback" not in done.stderr


def _lock_racer(path, barrier, held, i):
    from fullcomp.run.lock import Lock

    for _ in range(held.rounds):
        barrier.wait(30)  # the parent has set the round up
        lock = Lock(path, "race")
        try:
            lock.acquire()
            held[i] = 1
        except CheckpointError:
            pass
        barrier.wait(30)  # every racer has tried while the winner still holds
        barrier.wait(30)  # the parent has counted the holders
        lock.release()
        barrier.wait(30)


class _Held:
    """Shared flags of which racer holds the lock, and the number of rounds."""

    def __init__(self, ctx, rounds: int):
        self.flags, self.rounds = ctx.Array("i", 3), rounds

    def __setitem__(self, i, value):
        self.flags[i] = value


@pytest.mark.parametrize("links", [True, False])
def test_two_processes_never_both_hold_a_lock_free_or_stale(tmp_path, monkeypatch, links):
    import multiprocessing as mp

    if not links:  # a filesystem without hard links (FAT, some network mounts): the racers inherit this
        monkeypatch.setattr(os, "link", lambda *a: (_ for _ in ()).throw(OSError(errno.EPERM, "not permitted")))
    ctx, rounds = mp.get_context("fork"), 200
    path = tmp_path / "race.lock"
    barrier, held = ctx.Barrier(4), _Held(ctx, rounds)
    racers = [ctx.Process(target=_lock_racer, args=(path, barrier, held, i)) for i in range(3)]
    for racer in racers:
        racer.start()
    counts, dead = [], _pid_of_a_finished_process()
    try:
        for t in range(rounds):
            if t % 2:  # half the rounds: a lock left by a dead process, to take over
                path.write_text(f"{dead} {os.uname().nodename}\n")
            barrier.wait(30)
            barrier.wait(30)
            counts.append(sum(held.flags))
            held.flags[:] = [0, 0, 0]
            barrier.wait(30)
            barrier.wait(30)
            assert not path.exists()
    finally:
        for racer in racers:
            racer.join(30)
            if racer.is_alive():
                racer.kill()
    assert counts == [1] * rounds and [racer.exitcode for racer in racers] == [0, 0, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _full_filesystem(monkeypatch, binary_only=False):
    """Every write through a file object made by os.fdopen (or every binary one) fails as on a full disk."""
    real = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            if binary_only and isinstance(data, str):
                return self.fh.write(data)
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def __getattr__(self, name):
            return getattr(self.fh, name)

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: Full(real(*a, **k)))


def test_a_full_filesystem_names_the_lock_and_leaves_no_file(tmp_path, monkeypatch):
    _full_filesystem(monkeypatch)
    with pytest.raises(CheckpointError, match=r"run\.ckpt\.lock.*free space"):
        fc.hmsfw(composite(), iters=3, progress=False, checkpoint=tmp_path / "run.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_a_full_filesystem_at_a_save_leaves_no_partial_checkpoint(tmp_path, monkeypatch):
    _full_filesystem(monkeypatch, binary_only=True)  # the lock's text record is written, the checkpoint is not
    with pytest.raises(CheckpointError, match=r"run\.ckpt.*free space") as caught:
        fc.hmsfw(composite(), iters=3, progress=False, checkpoint=fc.Checkpoint(tmp_path / "run.ckpt", every=1))
    assert len(caught.value.result.history) >= 1  # the rows computed before the failed save
    assert list(tmp_path.iterdir()) == []
