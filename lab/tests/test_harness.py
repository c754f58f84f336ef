"""Results unchanged: each protocol's bench on tiny data, with fixed seeds and iteration budgets, writes tables
that match the committed reference copies in ``lab/tests/data/harness/`` byte for byte, except the timing columns
(optimizer seconds per update, wall seconds per run), which are masked in both the CSV and the Markdown.

Regenerate the references (only when a change of results is intended) with
``FULLCOMP_REGEN_HARNESS=1 python -m pytest -q lab/tests/test_harness.py``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from test_pauc import SETTINGS as PAUC_SETTINGS
from test_pauc import german_line
from test_protocol import BATCH as MOVIELENS_BATCH
from test_protocol import SYNTHETIC, tiny_config
from test_pu import TINY_CONFIG as PU_CONFIG

from fullcomp_lab import cli, pauc, pu
from fullcomp_lab import movielens as protocol

REFERENCE = Path(__file__).parent / "data" / "harness"
REGENERATE = os.environ.get("FULLCOMP_REGEN_HARNESS") == "1"

#: CSV columns and Markdown column titles that hold clock readings: masked before comparing.
TIMING_COLUMNS = {"seconds_per_update_mean", "seconds_per_update_sd", "wall_seconds_mean", "wall_seconds_sd"}
TIMING_TITLES = {"Seconds/update", "Seconds/run", "wall s/run"}
MASK = "<time>"


def masked_csv(text: str) -> str:
    """The CSV text with every timing cell replaced by :data:`MASK` (all other bytes kept)."""
    rows = list(csv.reader(io.StringIO(text)))
    timing = [i for i, name in enumerate(rows[0]) if name in TIMING_COLUMNS]
    for row in rows[1:]:
        for i in timing:
            if i < len(row) and row[i] != "":
                row[i] = MASK
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def masked_markdown(text: str) -> str:
    """The Markdown text with the cells of every timing column replaced by :data:`MASK`."""
    out, timing = [], set()
    for line in text.split("\n"):
        if not line.startswith("|"):
            timing = set()
            out.append(line)
            continue
        cells = line.split(" | ")
        titles = [c.strip("| ") for c in cells]
        if any(t in TIMING_TITLES for t in titles):
            timing = {i for i, t in enumerate(titles) if t in TIMING_TITLES}
        elif not line.startswith("|---"):
            last = len(cells) - 1
            for i in timing:
                cells[i] = ("| " if i == 0 else "") + MASK + (" |" if i == last else "")
        out.append(" | ".join(cells))
    return "\n".join(out)


def check_tables(out: Path, names: list[str], tag: str, rel_tol: float = 1e-9) -> None:
    """Compare (or, when regenerating, write) the masked tables of ``out`` with ``REFERENCE/<tag>-<name>``
    (or ``REFERENCE/<name>`` when the name already starts with the tag); numbers of a CSV that is not
    byte-identical must agree to ``rel_tol``."""
    for name in names:
        text = (out / name).read_text()
        masked = masked_csv(text) if name.endswith(".csv") else masked_markdown(text)
        if name.endswith(".csv"):
            assert masked != text or not (TIMING_COLUMNS & set(text.split("\n", 1)[0].split(",")))
        reference = REFERENCE / (name if name.startswith(f"{tag}-") else f"{tag}-{name}")
        if REGENERATE:
            reference.parent.mkdir(parents=True, exist_ok=True)
            reference.write_text(masked)
        expected = reference.read_text()
        if masked != expected and name.endswith(".csv"):
            # Byte-identical where the references were made; on another BLAS the last digits of a float may move.
            same_numbers(masked, expected, f"{name} of {tag}", rel_tol)
            continue
        assert masked == expected, f"{name} of {tag} differs from {reference}"


def same_numbers(text: str, expected: str, what: str, rel_tol: float = 1e-9) -> None:
    """Every number of ``text`` within ``rel_tol`` of the reference's, at the scale of what it measures: a
    standard deviation over seeds (``X_sd``) at the scale of its mean (``X_mean``), since the deviation of
    near-equal numbers is their rounding, whatever its own size."""
    rows, reference = list(csv.reader(io.StringIO(text))), list(csv.reader(io.StringIO(expected)))
    assert [len(r) for r in rows] == [len(r) for r in reference], what
    header = reference[0]
    for row, ref in zip(rows[1:], reference[1:]):
        for name, a, b in zip(header, row, ref):
            try:
                x, y = float(a), float(b)
            except ValueError:
                assert a == b, (what, a, b)
                continue
            if math.isnan(x) and math.isnan(y):
                continue
            scale = max(abs(x), abs(y))
            mean = name[: -len("_sd")] + "_mean" if name.endswith("_sd") else None
            if mean in header:
                scale = max(scale, abs(float(ref[header.index(mean)] or 0.0)))
            assert abs(x - y) <= rel_tol * scale + 1e-300, (what, name, a, b)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_movielens_tables_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "movielens"
    common = dict(eval_every=2, iters=4, batch=MOVIELENS_BATCH, synthetic=SYNTHETIC, config=tiny_config())
    protocol.bench_movielens(None, "max", None, [0, 1], None, out, save_x=False, **common)
    protocol.bench_movielens(None, "cvar", None, [0], "psg,hmsfw-ii-fb", out, save_x=False, **common)
    written = protocol.tables(out)
    assert (written.csv.name, written.markdown.name) == ("tables.csv", "tables.md")
    # float64 runs: on another CPU the numbers move in their last digits, 3e-12 of their scale on an AMD EPYC
    # against references made on a Xeon (measured), far inside 1e-9.
    check_tables(out, ["tables.csv", "tables.md"], "movielens")


def test_pu_tables_unchanged(tmp_path: Path) -> None:
    config = tmp_path / "pu.json"
    config.write_text(json.dumps(PU_CONFIG))
    out = tmp_path / "pu"
    common = dict(config=str(config), workload=pu.Workload(epochs=2))
    pu.bench_pu(None, None, [0, 1], "sgd,smag,sbcd", out, **common)
    pu.gamma_ablation(None, None, [0.5, 1.0], [0], out, **common)
    written = pu.tables(out)
    assert (written.csv.name, written.markdown.name) == ("pu-tables.csv", "pu-tables.md")
    # The PU runs are float32: their numbers carry float32 rounding, which torch's vector kernels do
    # differently on another instruction set, through two epochs of SGD: a thousand units in the last place
    # of float32 (1.2e-4), against 9.6e-6 measured between two Xeons.
    check_tables(out, ["pu-tables.csv", "pu-tables.md"], "pu", rel_tol=1000 * float(np.finfo(np.float32).eps))


def test_pauc_tables_unchanged(tmp_path: Path, capsys) -> None:
    data_dir = tmp_path / "german"
    data_dir.mkdir()
    lines = [german_line(i, "A92" if i % 2 else "A93") for i in range(60)]
    (data_dir / "german.data").write_text("\n".join(lines) + "\n")
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"settings": {"german-credit": {m: PAUC_SETTINGS[m] for m in pauc.METHODS}}}))
    out = tmp_path / "pauc"
    argv = ["bench", "pauc-fairness", "--data", str(data_dir), "--out", str(out), "--config", str(config)]
    assert cli.main([*argv, "--seeds", "1,2", "--iters", "12", "--eval-every", "6", "--no-progress"]) == 0
    assert "tables.md" in capsys.readouterr().out
    check_tables(out, ["tables.csv", "tables.md"], "pauc")


# ---- tuning searches shared by the three protocols


def test_grid_search_visits_the_product_in_order_and_coordinate_search_its_axes() -> None:
    from fullcomp_lab.harness import coordinate_search, grid_search

    grid = {"a": [1, 2], "b": [10, 20, 30]}
    seen: list[dict] = []
    grid_search(grid, lambda p: seen.append(p) or 0.0)
    assert seen == [{"a": a, "b": b} for a in (1, 2) for b in (10, 20, 30)]
    seen.clear()
    # f = (a - 2)^2 + (b - 10)^2 is separable: one sweep from the middle (a=2, b=20) finds (2, 10).
    coordinate_search(grid, lambda p: seen.append(p) or (p["a"] - 2) ** 2 + (p["b"] - 10) ** 2, sweeps=1)
    assert seen[-1] == {"a": 2, "b": 30} and {"a": 2, "b": 10} in seen and len(seen) == 5


def test_resolve_search_names_and_callables() -> None:
    from fullcomp.errors import OptionError
    from fullcomp_lab.harness import grid_search, resolve_search

    assert resolve_search("grid") is grid_search
    custom = lambda grid, score: None  # noqa: E731
    assert resolve_search(custom) is custom
    with pytest.raises(OptionError, match="search must be 'grid'"):
        resolve_search("random")


def test_a_protocol_tunes_with_a_search_of_the_users(tmp_path: Path) -> None:
    """The PU tuner takes any search(grid, score): here one that tries the last value of each axis only."""
    calls = []

    def last_point(grid: dict, score) -> None:
        calls.append(score({k: v[-1] for k, v in grid.items()}))

    grids = {"sgd": {"eta": [10.0, 0.001, 0.1]}}
    config = pu.tune_pu(
        None, "digits", "sgd", [7], grids=grids, config_path=None, workload=pu.Workload(iters=8), search=last_point
    )
    tried = config.meta["tuning"]["digits"]["methods"]["sgd"]["candidates"]
    assert len(calls) == 1 and [c["settings"] for c in tried] == [{"eta": 0.1}]
    assert config.settings["digits"]["sgd"] == {"eta": 0.1}


# ---- the configuration schema shared by the three protocols


def test_one_config_schema_checks_settings_fields_and_fallback(tmp_path: Path) -> None:
    from fullcomp.errors import OptionError
    from fullcomp_lab.harness import ConfigSchema, positive_number

    def check(method: str, settings: dict) -> dict:
        if set(settings) != {"eta"}:
            raise OptionError(f"settings of {method} must hold exactly eta")
        return {"eta": positive_number(settings["eta"])}

    schema = ConfigSchema(tmp_path / "none.json", "write one", check, ("a",), {"scale": positive_number}, "a")
    cfg = schema.load({"settings": {"a": {"sgd": {"eta": 1}}}, "scale": {"a": 2}, "about": "x"})
    assert cfg.settings_for("b", "sgd") == {"eta": 1.0} and cfg.tuned_on("b", "sgd") == "a"
    assert cfg.fields == {"scale": {"a": 2.0}} and cfg.meta == {"about": "x"}
    cfg.set("b", "sgd", {"eta": 0.5})
    assert cfg.tuned_on("b", "sgd") == "b" and schema.load(cfg.to_dict()).to_dict() == cfg.to_dict()
    saved = schema.load(cfg.save(tmp_path / "c.json"))
    assert saved.to_dict() == cfg.to_dict()  # floats round-trip exactly
    bad = [
        ({"settings": {"a": {"sgd": {"eta": 1}}}}, "needs scale for 'a'"),
        ({"settings": {}, "scale": {"a": 1}}, "needs settings for 'a'"),
        ({"settings": {}}, "needs settings and scale for 'a'"),
        ({"settings": {}, "scale": 3}, r"scale must map each block to its value, got 3"),
        ({"settings": {"a": {"sgd": {"lr": 1}}}, "scale": {"a": 1}}, "a: settings of sgd must hold exactly eta"),
        ({"settings": {"a": {}}, "scale": {"a": True}}, r"scale\['a'\] must be a positive number, got True"),
        ({"settings": []}, "must be a JSON object with 'settings'"),
    ]
    for data, message in bad:
        with pytest.raises(OptionError, match=message):
            schema.load(data)
    with pytest.raises(OptionError, match="none.json not found; write one"):
        schema.load()
    with pytest.raises(OptionError, match="no settings for psg on b \\(nor a\\)"):
        cfg.settings_for("b", "psg")


def test_table_numbers_are_compared_at_the_scale_of_what_they_measure() -> None:
    reference = "method,x_mean,x_sd\na,0.5,1e-10\n"
    same_numbers("method,x_mean,x_sd\na,0.5,1.00001e-10\n", reference, "sd")  # 1e-15 at its mean's scale
    with pytest.raises(AssertionError):
        same_numbers("method,x_mean,x_sd\na,0.5000001,1e-10\n", reference, "mean")
    with pytest.raises(AssertionError):
        same_numbers("method,x_mean,x_sd\nb,0.5,1e-10\n", reference, "label")
