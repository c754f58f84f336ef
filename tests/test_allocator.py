"""The allocator settings a run applies: large temporaries are reused, not faulted in again every step."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from fullcomp.run import allocator

GLIBC = allocator.glibc()

# glibc's thresholds start at 128 kB and move with what the process frees: the environment fixes them there, the
# state in which every large block is mapped fresh from the kernel (6,144 page faults per 24 MB block).
SMALL = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
LOOP = textwrap.dedent(
    """
    import resource, sys
    import torch
    from fullcomp.run import allocator
    tuned = allocator.tune() if sys.argv[1] == "tune" else False
    for i in range(10):
        if i == 5:  # the heap has grown to hold the block by now
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = torch.ones(24 << 17, dtype=torch.float64)  # numpy would ask for huge pages
        del block
    print(int(tuned), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
    """
)


def faults(mode: str, **env: str) -> tuple[bool, int]:
    env = {**os.environ, **SMALL, **env}
    out = subprocess.run(
        [sys.executable, "-c", LOOP, mode], capture_output=True, text=True, timeout=120, env=env, check=True
    ).stdout.split()
    return bool(int(out[0])), int(out[1])


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
def test_tuned_allocator_reuses_large_blocks():
    tuned, few = faults("tune")
    untuned, many = faults("keep")
    assert tuned and not untuned
    pages = (24 << 20) // 4096
    assert many >= 4 * pages  # small thresholds fault every block in: 5 blocks
    assert few <= pages // 4  # the heap's memory is reused


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
def test_opt_out_leaves_the_allocator():
    tuned, many = faults("tune", FULLCOMP_MALLOC="system")
    assert not tuned and many >= 4 * (24 << 20) // 4096


def test_tune_reports_whether_the_settings_are_in_force(monkeypatch):
    monkeypatch.setattr(allocator, "_tuned", None)
    monkeypatch.setenv("FULLCOMP_MALLOC", "system")
    assert allocator.tune() is False
    monkeypatch.setattr(allocator, "_tuned", None)
    monkeypatch.delenv("FULLCOMP_MALLOC")
    assert allocator.tune() is GLIBC


def test_a_run_leaves_the_allocator_and_the_command_tunes_it(monkeypatch, tmp_path):
    import cvxpy as cp

    import fullcomp as fc
    from fullcomp.cli import main

    monkeypatch.setattr(allocator, "_tuned", None)
    u = fc.inner_value(1)
    problem = fc.CompositeProblem(cp.sum(u), lambda x, _: (x @ x).reshape(1), fc.L1Ball(3), sampler=lambda g: None)
    fc.hmsfw(problem, iters=2, progress=False)
    assert allocator._tuned is None  # a library call leaves its caller's process as it was
    script = tmp_path / "p.py"
    script.write_text(
        "import cvxpy as cp, fullcomp as fc\n"
        "problem = fc.CompositeProblem(cp.sum(fc.inner_value(1)), lambda x, _: (x @ x).reshape(1), fc.L1Ball(3))\n"
    )
    assert main(["run", str(script), "--iters", "2", "--no-progress", "--out", str(tmp_path / "out")]) == 0
    assert allocator._tuned is GLIBC
