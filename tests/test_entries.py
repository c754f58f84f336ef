"""The entry map: read and spread are adjoint, and the kept layout reads the prefix the atomic iterate holds."""

from __future__ import annotations

import cvxpy as cp
import torch
from test_structured import READS, TRACK, problems

import fullcomp as fc
from fullcomp.oracles import EntryMap


def test_read_and_spread_are_adjoint_and_the_adjoint_is_spread_of_v_transpose_w():
    _, structured = problems(cp.max)
    entries = EntryMap(structured, "cpu", "dense")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(structured.domain.size, generator=g, dtype=torch.float64)
    v = torch.randn(len(READS), generator=g, dtype=torch.float64)
    assert torch.allclose(entries.read(x) @ v, x @ entries.spread(v), rtol=1e-14, atol=1e-14)
    assert torch.equal(entries.read(x), x[torch.as_tensor(READS)])
    V = torch.randn(3, len(READS), generator=g, dtype=torch.float64)
    w = torch.randn(3, generator=g, dtype=torch.float64)
    assert torch.equal(entries.adjoint(V, w), entries.spread(V.T @ w))
    assert torch.allclose(entries.image(V, x), V @ x[torch.as_tensor(READS)], rtol=1e-14, atol=1e-14)


def test_the_kept_layout_reads_the_values_at_reads_before_those_at_track():
    _, structured = problems(cp.max)
    dense = torch.arange(structured.domain.size, dtype=torch.float64)
    kept = dense[torch.as_tensor(structured.kept_entries.flat)]
    entries = EntryMap(structured, "cpu", "kept")
    assert torch.equal(entries.read(kept), dense[torch.as_tensor(READS)])
    assert len(kept) == len(READS) + len(TRACK) and entries.width == len(READS)


def test_a_problem_without_reads_is_read_whole():
    problem = problems(cp.max)[0]
    entries = EntryMap(problem, "cpu")
    x = torch.ones(problem.domain.size, dtype=torch.float64)
    assert entries.read(x) is x and entries.shape == problem.domain.shape and not entries.sharded
    assert isinstance(fc.TrackedModel(problem, "cpu", torch.float64, torch.Generator()).entries, EntryMap)
