"""The documentation site builds with warnings as errors (skipped where the docs extra is not installed)."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fullcomp as fc

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
    # Numpy-style Parameters sections render as parameter tables (not one paragraph), one row per parameter.
    for cls in (fc.CompositeProblem, fc.DMaxProblem):
        documented = parameter_names(api, f"{cls.__module__}.{cls.__qualname__}")
        assert documented == set(inspect.signature(cls).parameters), cls.__name__
    assert parameter_names(api, "fullcomp.model.composite.CompositeProblem") >= {"outer", "inner", "domain"}
    assert "phi" in parameter_names(api, "fullcomp.model.dmax.DMaxProblem")
    assert parameter_names(api, "fullcomp.algorithms.method.solve") == {"problem", "method", "**options"}
    gallery = (site / "gallery" / "index.html").read_text()
    assert all(f"plot_{i:02d}_" in gallery for i in range(1, 11))
    assert len(list((site / "gallery").glob("plot_*.png"))) == 10


def parameter_names(page: str, ident: str) -> set[str]:
    """The names in the Parameters table of the object whose heading id is ``ident`` on a built page."""
    start = page.index(f'id="{ident}"')
    after = re.search(r'<h3 id="', page[start + 1 :])  # the next object rendered at the top heading level
    own = page[start : start + 1 + after.start()] if after else page[start:]
    section = re.search(r'<span class="doc-section-title">Parameters:</span>\s*</p>\s*<table>(.*?)</table>', own, re.S)
    assert section, f"{ident}: no Parameters table in the API reference"
    table = section.group(1)
    assert re.search(r"<th>\s*Name\s*</th>\s*<th>\s*Type\s*</th>\s*<th>\s*Description\s*</th>", table), ident
    return set(re.findall(r'<tr class="doc-section-item">\s*<td>\s*<code>([^<]+)</code>', table))
