"""Data parallelism on torch.distributed: 2 processes on 127.0.0.1 with gloo, free ports, bounded timeouts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from distributed_cases import (
    HANG_SLEEP,
    RUNS,
    SEED,
    SHARDED_DATA,
    WORLD,
    composite,
    record,
    subspace_case,
    subspace_run,
)

import fullcomp as fc

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed support")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(case: str, tmp_path: Path, extra: str = "", timeout: float = 150, codes: tuple = (0, 0)) -> dict:
    """Run ``distributed_cases.py case`` on WORLD local ranks and check their exit ``codes`` (None: any);
    rank 0's findings.

    A failure shows every rank's log: with faulthandler on, a rank that aborts (a signal, not an exception)
    prints its Python stack, so a rare teardown abort says where it happened."""
    out, port = tmp_path / f"{case}.json", free_port()
    procs = []
    for rank in range(WORLD):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(WORLD),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "PYTHONFAULTHANDLER": "1",
            "TORCH_SHOW_CPP_STACKTRACES": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(HERE / "distributed_cases.py"), case, str(out), extra],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    found = json.loads(out.read_text()) if out.exists() else {}
    shown = "\n".join(
        f"--- rank {rank}, exit code {p.returncode}:\n{log[-4000:]}" for rank, (p, log) in enumerate(zip(procs, logs))
    )
    assert found, "rank 0 wrote nothing; logs:\n" + shown
    assert all(want in (None, p.returncode) for want, p in zip(codes, procs)), "exit codes; logs:\n" + shown
    return found


def close(a: list[dict], b: list[dict], tol: float, name: str) -> None:
    assert len(a) == len(b), name
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys(), name
        for key in ra:
            assert ra[key] == pytest.approx(rb[key], rel=tol, abs=tol), (name, key, ra["k"])


def certified(a: dict, b: dict, name: str) -> None:
    """Two GLMO runs that differ in rounding only agree within what their GLMOs certify.

    Each GLMO's answer is certified to its ``glmo_gap``, and a master's interior-point solve may return any
    answer within it: a difference in the last bit of its inputs can move the answer that far, and the
    trajectories part by the same amount, at a rate that depends on the CPU's rounding.  The bound is a
    hundredth of the largest gap either run certified, in every row's estimates, and a thousandth of the
    iterate's scale in x.  An exact GLMO (an affine F: gap 0) leaves the rounding itself, 10^4 units in the
    last place.  The dual route's small conic program is solved to its solver's tolerance, which its
    certified gap (exact for cp.max) can undercut by more than a hundredth: its answers agree within the gap.
    """
    rounding, largest = 1e4 * np.finfo(np.float64).eps, max(row["glmo_gap"] for row in a["rows"] + b["rows"])
    bound = (1.0 if "dual" in (a["route"], b["route"]) else 0.01) * largest + rounding
    assert len(a["rows"]) == len(b["rows"]), name
    for ra, rb in zip(a["rows"], b["rows"]):
        for key in ("objective_estimate", "gap_estimate", "glmo_gap"):
            assert abs(ra[key] - rb[key]) <= bound, (name, key, ra["k"], bound)
    x, y = np.array(a["x"]), np.array(b["x"])
    assert np.abs(x - y).max() <= (1e-3 if largest > 0 else rounding) * np.abs(y).max(), name


def test_two_ranks_match_one_process_drawing_the_union(tmp_path):
    found = job("equivalence", tmp_path)
    for name, (build, method, options) in RUNS.items():
        single = record(fc.solve(build(None), method, iters=20, seed=SEED, progress=False, **options))
        # Equal up to the order of floating-point sums: the mean of the ranks' means against the union's mean.
        # Sharded entries split every sum over entries into the ranks' partial sums, which differ from the
        # one-process sums in the last bit, and so do a network's batch sums in every layer; the GLMO's master
        # carries that on within its certificate (measured here: up to 1.2e-6 in the rows and 4.3e-6 in x of a
        # sharded run by the 20th update, 3e-10 in x of the network's, against largest gaps of 0.2 to 2).  A rank
        # clipping by its own part of the Jacobian's norm (0.4 in glmo_gap at k = 0) or keeping its own
        # Jacobian instead of the mean (1.07 in x) is far outside it.
        glmo = "glmo_gap" in single["rows"][0]
        if glmo and ("-sharded" in name or name == "hmsfw-network"):
            certified(found[name], single, name)
            continue
        # The projection methods have no master: the ranks' parts of a dense direction are disjoint, so its
        # all-reduce adds zeros, and only the model's n-vectors V (x - x_k) sum two partial products
        # (measured: PSG's x equal to the bit, prox-linear's and LiNASA's within 1.4e-14).
        assert found[name]["x"] == pytest.approx(single["x"], rel=1e-10, abs=1e-10), name
        close(found[name]["rows"], single["rows"], 1e-9, name)
    # The structured run sends the Jacobian columns its batches touched (at most 2 x 8 of 64 entries), not
    # every column: per sample, less than the dense (2, 64) float64 Jacobian the all-reduce would carry.
    samples = 21  # the first sample and one per iteration
    assert found["hmsfw-structured"]["bytes"] < samples * 2 * 64 * 8
    # The projection methods' direction V^T g lives on each rank's own reads: the ranks gather those values
    # (every rank's positions gathered once), fewer numbers than the dense 30 x 20 direction, which is never
    # all-reduced (measured, 20 steps: PSG 98 kB sent before, 58 kB after; prox-linear 306 and 179 kB).
    P, Q = SHARDED_DATA.shape
    for name in ("psg-sharded", "prox-linear-sharded", "prox-linear-subgradient-sharded", "linasa-icg-sharded"):
        assert found[name]["biggest"] < P * Q, name


@pytest.fixture(scope="module")
def split_lanczos(tmp_path_factory):
    return job("lanczos", tmp_path_factory.mktemp("lanczos"))


@pytest.mark.parametrize("kind", ["single", "block", "factored"])
@pytest.mark.parametrize("blocks", ["rows", "cols"])
def test_the_split_lanczos_matches_the_whole_matrix_svd(split_lanczos, blocks, kind):
    found = split_lanczos[f"{blocks}-{kind}"]
    assert found["ritz"] == (kind != "single")  # a block iteration leaves its Ritz vectors with the atom
    # Row blocks multiply a row-scaled direction by its factors; column blocks are given its values.
    assert found["factored"] == (kind == "factored")
    assert found["side"] == blocks  # the side check_blocks finds: the ranks' rows, or columns, are disjoint
    flat, values = np.array(found["flat"]), np.array(found["values"])
    dense = np.zeros(120 * 50)
    dense[flat] = values
    u, s, vt = np.linalg.svd(dense.reshape(120, 50))
    # The LMO's atom is -r u v^T (scale folded into u): the top pair up to a common sign, to Lanczos's tolerance.
    left, right = -np.array(found["u"]) / 2.0, np.array(found["v"])
    sign = np.sign(left @ u[:, 0])
    assert np.abs(sign * left - u[:, 0]).max() < 1e-6 and np.abs(sign * right - vt[0]).max() < 1e-6
    # lower = -r sqrt(theta + rho): a valid bound, within the residual tolerance (1e-7 of sigma^2) of -r sigma.
    assert -2.0 * s[0] * (1 + 1e-7) <= found["lower"] <= -2.0 * s[0] + 1e-12
    # The float32 iteration of a factored direction sums its float32 products over the ranks as such (half the
    # bytes); every other sum, the pair's other side last of all, is float64.
    kinds = {dtype for dtype, _ in found["sums"]}
    assert kinds == ({"torch.float32", "torch.float64"} if kind == "factored" else {"torch.float64"})
    assert found["sums"][-1] == ["torch.float64", 120 if blocks == "rows" else 50]


def test_two_gloo_ranks_sum_by_one_exchange_with_the_all_reduces_bits(split_lanczos):
    found = split_lanczos["sums"]
    # One message each way instead of the ring all-reduce's two rounds (half the latency on loopback), and
    # a + b = b + a: the all-reduce's bits, the same on both ranks.
    assert found["without_all_reduce"]
    assert all(found["equal"]) and len(found["equal"]) == 6
    assert found["bytes"][0] == found["bytes"][1]


@pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.device_count() >= 2 and torch.distributed.is_nccl_available()),
    reason="needs 2 CUDA devices and NCCL",
)
def test_two_ranks_on_nccl_keep_one_iterate(tmp_path):
    found = job("nccl", tmp_path)
    assert found["device"].startswith("cuda")
    assert found["x"][0] == found["x"][1]  # the same step on every rank, from the all-reduced oracle


def test_heuristic_pricing_on_sharded_entries_prices_as_one_process(tmp_path):
    """The Ritz basis and its products are the same on every rank (a new vector's products summed over the
    ranks, their sampled Jacobians gathered), so two ranks holding row (or column) blocks price what one
    process holding the whole pattern prices."""
    found = job("subspace", tmp_path)
    for shape, single in subspace_case(None).items():
        for key in ("u", "v", "images"):
            assert found[shape][key] == pytest.approx(single[key], rel=1e-12, abs=1e-12), (shape, key)
        assert found[shape]["value"] == pytest.approx(single["value"], rel=1e-12), shape


def test_a_sharded_run_with_heuristic_pricing_certifies_every_glmo(tmp_path):
    found = job("subspace-run", tmp_path)
    assert found["heuristic"] > 0
    assert all(row["glmo_converged"] == 1 for row in found["rows"])
    # The first GLMO's answer is certified to its glmo_gap (about 3e-3) only, and so is the gap estimate
    # built from it: the ranks' segments of V (fullcomp.sets.segments) sum its images in another order than
    # one process's, their masters' duals differ in the last bits, and the estimates by 3e-6 (measured).
    a, b = found["rows"][0], subspace_run(None)["rows"][0]
    assert a["objective_estimate"] == pytest.approx(b["objective_estimate"], rel=1e-12)
    assert abs(a["gap_estimate"] - b["gap_estimate"]) <= max(a["glmo_gap"], b["glmo_gap"])


@pytest.fixture(scope="module")
def factored_runs(tmp_path_factory):
    return job("factored-run", tmp_path_factory.mktemp("factored"))


@pytest.mark.parametrize("blocks", ["rows", "cols"])
def test_a_sharded_run_pricing_by_the_directions_factors_certifies_as_one_process_does(factored_runs, blocks):
    """Ranks holding row (or column) blocks price q^T V = diag(s) G by their block of G (float32 first), as one
    process does."""
    found, single = factored_runs[blocks], subspace_run(None, blocked=True, blocks=blocks)
    assert found["factored"] == 11  # every GLMO call, the closing one included
    # The one-process twin holds the blocks one after the other; with column blocks its GLMOs took the factored
    # path in some calls only (4 of the 11, measured), the others were given the direction's values.
    assert single["factored"] == 11 if blocks == "rows" else single["factored"] >= 1
    assert all(row["glmo_converged"] == 1 for run in (found, single) for row in run["rows"])
    # Float32 products stop early at other steps on two ranks than on one, so the atoms differ within the
    # GLMO's tolerance and the runs part from the first update on (measured on row blocks: 2.3e-3 in the first
    # GLMO's value, whose certified gaps are 5.5e-3 and 6.2e-3).  The first GLMO has the same inputs in both:
    # the intervals its certificates give for the same optimum must meet.
    a, b = found["rows"][0], single["rows"][0]
    assert a["objective_estimate"] == pytest.approx(b["objective_estimate"], rel=1e-12)
    assert abs(a["gap_estimate"] - b["gap_estimate"]) <= max(a["glmo_gap"], b["glmo_gap"])


def test_ranks_sharing_rows_are_refused_before_the_run(tmp_path):
    found = job("overlap", tmp_path)
    assert "sharded reads must be disjoint blocks of rows, or of columns" in found["error"]


def test_sharded_checkpoint_and_resume_on_two_ranks(tmp_path):
    found = job("sharded-checkpoint", tmp_path, extra=str(tmp_path))
    assert found["resumed_from"] == 6
    assert found["resumed"] == found["whole"]  # each rank's own share came back from its own file
    assert (tmp_path / "sharded.ckpt").is_file() and (tmp_path / "sharded.ckpt.rank1").is_file()
    # PSG keeps the dense iterate on every rank but each rank's own Jacobian tracker: every rank's file counts.
    assert found["psg"] == {"resumed_from": 6, "same": True} and (tmp_path / "psg.ckpt.rank1").is_file()


def test_checkpoint_and_resume_on_two_ranks(tmp_path):
    found = job("checkpoint", tmp_path, extra=str(tmp_path))
    assert found["resumed_from"] == 8
    assert found["resumed"] == found["whole"]  # every rank's generator came back: the same trajectory
    # The checkpoint knows its world size: one process may not resume it.
    with pytest.raises(fc.errors.CheckpointError, match="world_size was 2, now 1"):
        fc.solve(composite(0), "hmsfw", iters=16, seed=SEED, progress=False, checkpoint=tmp_path / "run.ckpt")


def test_a_lost_rank_stops_the_others_with_a_clear_error(tmp_path):
    # Rank 1 vanishes with os._exit(3); rank 0 exits without leave() (its peer is gone), unchecked here.
    found = job("kill", tmp_path, timeout=120, codes=(None, 3))
    assert "rank 0 of 2" in found["error"] and "rank 1 did not answer" in found["error"]
    assert found["seconds"] < 60


def test_a_lost_rank_0_is_named_by_the_others_though_the_store_went_with_it(tmp_path):
    found = job("kill-host", tmp_path, timeout=120, codes=(3, None))
    assert "rank 1 of 2" in found["error"] and "rank 0, which hosts the job's store, did not answer" in found["error"]
    assert found["seconds"] < 60


def test_ranks_at_different_collectives_say_so_and_blame_no_one(tmp_path):
    job("disagree", tmp_path, extra=str(tmp_path), timeout=120, codes=(None, None))
    for rank in range(WORLD):
        found = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert f"rank {rank} of 2" in found["error"] and "every rank's collective failed" in found["error"]
        assert found["seconds"] < 60


def test_a_hung_rank_stops_the_others_within_the_timeout_and_is_named(tmp_path):
    # Rank 1 sleeps at k = 5 for HANG_SLEEP seconds; rank 0's next collective times out after 4 s and names
    # rank 1, without waiting for it to wake.
    found = job("hang", tmp_path, timeout=120, codes=(None, 3))
    assert "rank 0 of 2" in found["error"] and "rank 1 did not answer" in found["error"]
    assert found["seconds"] < HANG_SLEEP


SCRIPT = """
import torch, fullcomp as fc

def build(args):
    rows = torch.arange(64)[fc.distributed.shard(64)]
    X = torch.randn(64, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def sampler(g):
        return rows[torch.randint(rows.numel(), (8,), generator=g)]

    return fc.DMaxProblem(lambda x, r: ((X[r] @ x - 1) ** 2).mean(), psi=lambda x, r: x.abs().sum(),
                          x0=torch.zeros(3, dtype=torch.float64), sampler=sampler)
"""


def test_fullcomp_run_nproc_launches_a_local_job(tmp_path):
    script = tmp_path / "dc.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "fullcomp", "run", str(script), "--method", "sgd", "--set", "eta=0.1"]
    argv += ["--iters", "20", "--no-progress", "--out", str(out), "--nproc", "2"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    loaded = fc.Result.load(out)
    assert loaded.info["world_size"] == 2 and loaded.info["method"] == "sgd" and len(loaded.history) == 21
