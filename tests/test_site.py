"""The documentation site builds with warnings as errors (skipped where the docs extra is not installed)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEEDED = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")


@pytest.mark.skipif(
    any(importlib.util.find_spec(name.split(".")[0]) is None for name in NEEDED),
    reason="the docs tools are not installed: pip install -e .[docs]",
)
def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    site = tmp_path / "site"
    api = (site / "api" / "index.html").read_text()
    for name in ("CompositeProblem", "DMaxProblem", "solve", "hmsfw", "smag", "Result", "Checkpoint"):
        assert name in api, name
    gallery = (site / "gallery" / "index.html").read_text()
    assert all(f"plot_0{i}_" in gallery for i in range(1, 9))
    assert len(list((site / "gallery").glob("plot_0*.png"))) == 8
