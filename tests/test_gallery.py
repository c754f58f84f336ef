"""The teaching gallery: every examples/gallery/plot_*.py runs as a script and writes exactly one PNG."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GALLERY = Path(__file__).resolve().parents[1] / "examples" / "gallery"
SCRIPTS = sorted(GALLERY.glob("plot_*.py"))


def test_the_gallery_has_its_ten_examples() -> None:
    assert [p.name[:7] for p in SCRIPTS] == [f"plot_{i:02d}" for i in range(1, 11)]
    readme = (GALLERY / "README.md").read_text()
    assert all(p.name in readme for p in SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_example_runs_and_saves_one_png(script: Path, tmp_path: Path) -> None:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,  # nothing may be written outside --out
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    pngs = sorted(tmp_path.glob("*.png"))
    assert [p.name for p in pngs] == [f"{script.stem}.png"], pngs
    assert pngs[0].stat().st_size > 10_000  # a real figure, not an empty canvas
    assert proc.stdout.strip(), "each example prints what it measured"
