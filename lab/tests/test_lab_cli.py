"""`fullcomp-lab bench` and `fullcomp-lab report`: a protocol from the command line, its tables, its option errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fullcomp_lab.cli import EXPERIMENTS, main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench"], "the following arguments are required: EXPERIMENT"),
        (["bench", "imagenet"], "invalid choice: 'imagenet'"),
        (["bench", "movielens", "--budget", "0"], "--budget"),
        (["bench", "movielens", "--seeds", "1", "--budgte", "3"], "--budgte: did you mean --budget?"),
        (["report"], "the following arguments are required: folder"),
    ],
)
def test_option_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_movielens_on_synthetic_data_then_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "bench"
    argv = ["bench", "movielens", "--objective", "max", "--iters", "2", "--seeds", "1", "--methods", "hmsfw-ii,psg"]
    argv += ["--out", str(out), "--no-progress", "--synthetic-shape", "30x20", "--synthetic-ratings", "300"]
    assert main(argv) == 0
    assert (out / "tables.md").is_file() and (out / "max" / "curves.png").is_file()
    (out / "tables.md").unlink()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    # the library's one line per run, then the protocol's aggregated tables, written again
    assert "max/hmsfw-ii/seed1" in text and "max/psg/seed1" in text and "tables.md" in text
    assert (out / "tables.md").is_file()


def test_module_entry_point_lists_every_protocol() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fullcomp_lab", "bench", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert all(name in done.stdout for name in EXPERIMENTS)
