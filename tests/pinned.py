"""Trajectories pinned from a reference version of fullcomp, to hold a refactor to the same iterates.

``python tests/pinned.py --write`` records, for every case, the iterate a callback sees at each update and
the final history's numeric columns into ``tests/data/pinned_iterates.npz`` (read back without pickles);
``python tests/pinned.py`` compares the current code with the file and prints the largest difference per case,
0.0 where the trajectory is bit-identical.  tests/test_pinned.py compares within what another CPU's rounding
and each GLMO's certificate leave.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cvxpy as cp
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))

from contract_cases import CASES  # noqa: E402
from test_structured import problems, touched_problem  # noqa: E402

import fullcomp as fc  # noqa: E402

FILE = Path(__file__).parent / "data" / "pinned_iterates.npz"
ITERS = 6


def _flat(x: Any) -> np.ndarray:
    if isinstance(x, dict):
        return np.concatenate([_flat(v) for v in x.values()])
    return x.detach().cpu().double().reshape(-1).numpy().copy()


def _structured(outer_of: Callable = cp.max) -> fc.CompositeProblem:
    return problems(outer_of)[1]


def _cases() -> dict[str, tuple[Callable[[], Any], str, dict]]:
    """name -> (problem factory, method, options)."""
    cases = {f"contract/{m}": (factory, m, required) for m, (factory, required) in CASES.items()}
    composite = CASES["hmsfw"][0]
    for name, options in {
        "storm": {"tracker": "storm"},
        "hessian": {"tracker": "hessian"},
        "hessian-beta": {"tracker": "hessian", "hessian_point": "beta", "variant": "polyak"},
        "first-step": {"first_step": 0.5},
        "warm": {"x0": torch.full((10,), 0.1, dtype=torch.float64)},
        "colgen": {"glmo": "colgen"},
        "theorem1": {"schedule": "theorem1"},
    }.items():
        cases[f"composite/hmsfw-{name}"] = (composite, "hmsfw", options)
    for method in ("psg", "prox-linear", "linasa-icg"):
        options = {"icg_steps": 2} if method == "linasa-icg" else {}
        cases[f"composite/{method}-warm"] = (composite, method, {**options, "x0": torch.full((10,), 0.1).double()})
    for name, outer_of in (("max", cp.max), ("cvar", lambda u: fc.cvar(u, 0.5))):
        for method, options in (
            ("hmsfw-ii", {}),
            ("hmsfw-i", {}),
            ("hmsfw", {"tracker": "storm"}),
            ("hmsfw", {"tracker": "hessian"}),
            ("clipped-scfw", {"clip": 0.05}),
            ("hmsfw", {"first_step": "auto", "x0": "start"}),
            ("psg", {}),
            ("prox-linear", {}),
            ("linasa-icg", {"icg_steps": 2}),
        ):
            key = f"structured-{name}/{method}" + "".join(f"-{k}={v}" for k, v in options.items() if k != "x0")
            cases[key] = (lambda o=outer_of: _structured(o), method, options)
    for method, options in (
        ("hmsfw-ii", {}),
        ("hmsfw", {"tracker": "storm"}),
        ("hmsfw-ii", {"max_pricing": 2, "pool": 3}),
        ("clipped-scfw", {"clip": 0.05}),
        ("psg", {"eta": 0.1}),
    ):
        key = f"touched/{method}" + "".join(f"-{k}={v}" for k, v in options.items())
        cases[key] = (touched_problem, method, options)
    return cases


def trajectory(factory: Callable[[], Any], method: str, options: dict) -> dict[str, np.ndarray]:
    problem = factory()
    options = dict(options)
    if options.get("x0") == "start":  # a warm start from a feasible point of the structured problem
        options["x0"] = torch.full(problem.domain.shape, 0.01, dtype=torch.float64)
    seen: list[np.ndarray] = []
    result = fc.solve(
        problem, method, iters=ITERS, seed=3, progress=False, callback=lambda it: seen.append(_flat(it.x)), **options
    )
    out = {"x": np.stack(seen), "final": _flat(result.x)}
    for column in result.history.rows[0]:
        values = result.history.column(column)
        if column != "time" and np.issubdtype(np.asarray(values).dtype, np.number):
            out[f"history.{column}"] = np.asarray(values, dtype=np.float64)
    return out


def compute() -> dict[str, np.ndarray]:
    arrays = {}
    for case, (factory, method, options) in _cases().items():
        for key, value in trajectory(factory, method, options).items():
            arrays[f"{case}::{key}"] = value
    return arrays


def differences(case: str) -> tuple[dict[str, tuple[float, float]], float]:
    """Per pinned array of the case, (its largest difference from today's, its largest magnitude), inf where an
    array is missing or reshaped; and the largest GLMO gap the pinned run certified (0 without a GLMO)."""
    factory, method, options = _cases()[case]
    now = trajectory(factory, method, options)
    with np.load(FILE, allow_pickle=False) as saved:
        pinned = {key.split("::", 1)[1]: saved[key] for key in saved.files if key.split("::", 1)[0] == case}
    found = {}
    for key, value in pinned.items():
        if key not in now or now[key].shape != value.shape:
            found[key] = (float("inf"), 0.0)
            continue
        both_nan = np.isnan(value) & np.isnan(now[key])
        gap = np.where(both_nan, 0.0, np.abs(now[key] - value))
        found[key] = (float(np.max(gap, initial=0.0)), float(np.nanmax(np.abs(value), initial=0.0)))
    gaps = pinned.get("history.glmo_gap")
    return found, 0.0 if gaps is None else float(np.nanmax(gaps))


def compare(case: str) -> float:
    """The largest difference between the case's pinned arrays and today's (inf if a column is missing)."""
    return max(difference for difference, _ in differences(case)[0].values())


CASE_NAMES = list(_cases())

if __name__ == "__main__":
    if "--write" in sys.argv:
        FILE.parent.mkdir(exist_ok=True)
        np.savez_compressed(FILE, **compute())
        print(f"wrote {FILE}")
    else:
        for case in CASE_NAMES:
            print(f"{compare(case):.3g}  {case}")
