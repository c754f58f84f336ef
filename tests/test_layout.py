"""The library is the library: its wheel, its import and its import graph hold none of the lab (``lab/``).

``fullcomp`` ships solvers, sets, models and small synthetic generators; the papers' protocols, their data
readers, tuned JSON settings and one-protocol metrics are the ``fullcomp-lab`` package.  These tests read
the built wheel, a fresh interpreter's ``sys.modules`` and the source's imports, so a reader or a protocol
that creeps back into the package fails here, not in a user's install.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fullcomp"

#: What ``fullcomp.datasets`` may hold: the rating container and the synthetic generator, no file reader.
GENERATORS = {"__init__", "ratings", "synthetic"}
#: Module names of the lab that must never reappear in the library, under any folder.
LAB_MODULES = {"experiments", "movielens", "tabular", "images", "celeba", "pu", "losses", "metrics", "noise"}
#: Folders and files of the checkout a wheel build never reads (caches, environments, run outputs).
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "runs", "site", "build", "dist", "__pycache__", "*.egg-info")


def _setuptools_here() -> bool:
    """Whether this environment can build the wheel itself (no isolated build environment to download)."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    from setuptools import __version__

    return int(__version__.split(".")[0]) >= 68


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not available in this environment")
    # A copy of the checkout is built, so setuptools' build/ and egg-info never land in the working tree.
    source = tmp_path_factory.mktemp("source") / "fullcomp"
    shutil.copytree(ROOT, source, ignore=NOT_COPIED)
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(out), "-q"]
    if _setuptools_here():
        command.append("--no-build-isolation")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("fullcomp-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_the_wheel_holds_the_library_and_no_protocol(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"fullcomp"}, tops
    modules = [Path(name) for name in names if name.endswith(".py")]
    assert Path("fullcomp/algorithms/hmsfw.py") in modules  # the library itself is there
    assert not [name for name in names if name.endswith(".json")]
    assert not [m for m in modules if set(m.with_suffix("").parts) & LAB_MODULES]
    readers = [m for m in modules if m.parent == Path("fullcomp/datasets") and m.stem not in GENERATORS]
    assert not readers
    entry_points = next((wheel.read(n).decode() for n in names if n.endswith("entry_points.txt")), "")
    assert "fullcomp = fullcomp.cli:main" in entry_points and "fullcomp-lab" not in entry_points


def test_import_fullcomp_imports_no_reader_and_nothing_of_the_lab() -> None:
    probe = "import json, sys\nimport fullcomp\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert not [m for m in loaded if m == "fullcomp_lab" or m.startswith("fullcomp_lab.")]
    ours = [m.split(".") for m in loaded if m.startswith("fullcomp.")]
    assert not [".".join(m) for m in ours if set(m[1:]) & LAB_MODULES]
    assert {m[2] for m in ours if m[1] == "datasets" and len(m) > 2} <= GENERATORS


# ---- the import graph of fullcomp/ ---------------------------------------------------------------------


def _unit(module: str) -> str | None:
    """The folder or top-level module of ``fullcomp`` that ``module`` lies in; None for the package root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "fullcomp" else None


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) of every import in ``path``, relative ones resolved; those under
    ``if TYPE_CHECKING:`` are left out, since annotations alone are no arrow at run time."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.orelse:
                    visit_statement(statement)
            else:
                visit_statement(child)

    def visit_statement(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from fullcomp import distributed` imports the module fullcomp.distributed
            found.extend(
                (f"{source}.{alias.name}" if source == "fullcomp" else source, node.lineno) for alias in node.names
            )
        visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return found


def _graph() -> tuple[dict[str, dict[str, list[str]]], list[str]]:
    """Arrows between the library's folders and top-level modules (each with the lines that draw it), and
    every import of the lab found in the library."""
    arrows: dict[str, dict[str, list[str]]] = {}
    lab: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":  # the facade imports every room; it is no room itself
            continue
        here = _unit(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for module, line in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if module.split(".")[0] == "fullcomp_lab":
                lab.append(where)
            there = _unit(module)
            if there and there != here and there != "__version__":
                arrows.setdefault(here, {}).setdefault(there, []).append(where)
    return arrows, lab


def _cycle(arrows: dict[str, dict[str, list[str]]]) -> list[str]:
    """One loop of ``arrows`` as the list of its nodes (first node repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished

    def walk(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(arrows.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (loop := walk(nxt, path + [nxt])):
                return loop
        state[node] = 2
        return []

    for start in sorted(arrows):
        if start not in state and (loop := walk(start, [start])):
            return loop
    return []


def test_no_arrow_from_the_library_into_the_lab() -> None:
    _, lab = _graph()
    assert not lab, f"fullcomp imports fullcomp_lab at {lab}"


def test_the_library_folders_import_each_other_without_a_loop() -> None:
    arrows, _ = _graph()
    assert "algorithms" in arrows and "sets" in arrows.get("algorithms", {})  # the walk sees real arrows
    loop = _cycle(arrows)
    lines = [f"{a} -> {b}: {arrows[a][b][0]}" for a, b in zip(loop, loop[1:])]
    assert not loop, "import loop between fullcomp's folders: " + "; ".join(lines)


def test_the_cycle_finder_finds_a_loop() -> None:
    assert _cycle({"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": ["x"]}, "b": {}}) == []


@pytest.mark.parametrize("name, where", [("noise", "fullcomp_lab.noise"), ("metrics", "fullcomp_lab.metrics")])
def test_a_lab_module_asked_of_the_library_names_the_lab(name: str, where: str) -> None:
    import fullcomp as fc

    with pytest.raises(AttributeError, match=rf"fullcomp\.{name} is not part of the library: import {where}"):
        getattr(fc, name)
    assert not hasattr(fc, "no_such_name")
