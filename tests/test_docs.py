"""Every ```python block of README.md and docs/*.md runs, in order, in one namespace per file.

Blocks run in a temporary working folder, so files they write (run folders,
scripts) never land in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fullcomp.algorithms import method as method_module

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, source) of each ```python block."""
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


def test_docs_exist() -> None:
    names = {p.name for p in DOCUMENTS}
    assert {"README.md", "getting-started.md", "modeling.md", "glmo.md", "algorithm.md"} <= names


@pytest.mark.parametrize("path", DOCUMENTS, ids=[p.name for p in DOCUMENTS])
def test_code_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(path)
    assert blocks, f"{path.name} has no ```python block"
    monkeypatch.chdir(tmp_path)
    # A page may register a method of its own: the other tests see the built-ins only.
    monkeypatch.setattr(method_module, "REGISTRY", dict(method_module.REGISTRY))
    namespace: dict = {"__name__": f"docs_{path.stem}"}
    for line, source in blocks:
        code = compile(source, f"{path.name}:{line}", "exec")
        exec(code, namespace)  # noqa: S102 - running the documentation is the point of this test
