"""Every function of the library is short enough to read as one box: at most 100 lines anywhere in the
package, and at most 60 in the loop (``run/``) and the methods (``algorithms/``), where a long function means
a paper's box and its bookkeeping have grown together."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fullcomp"
#: The longest function anywhere in the package, and in the folders held to a shorter one.
LIMIT, STRICT_LIMIT = 100, 60
STRICT = ("run", "algorithms")


def lengths() -> list[tuple[str, str, int, int]]:
    """(path inside the package, function, its lines, its limit) for every function and method."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        limit = STRICT_LIMIT if relative.parts[0] in STRICT else LIMIT
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((relative.as_posix(), node.name, node.end_lineno - node.lineno + 1, limit))
    return found


def test_no_function_is_longer_than_its_limit():
    long = [f"{path}::{name} has {size} lines (limit {limit})" for path, name, size, limit in lengths() if size > limit]
    assert not long, "split these into named parts:\n" + "\n".join(long)


def test_the_measure_sees_the_whole_package():
    found = {(path, name): limit for path, name, _, limit in lengths()}
    assert len(found) > 300
    assert found[("run/driver.py", "drive")] == found[("algorithms/hmsfw.py", "setup")] == STRICT_LIMIT
    assert found[("model/composite.py", "__init__")] == LIMIT
