"""The structured (entry-wise) path against the dense path on a small matrix-completion instance."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc

P, Q, GROUPS, OBSERVED = 6, 8, 3, 30
RNG = np.random.default_rng(5)
READS = np.sort(RNG.choice(P * Q, OBSERVED, replace=False))
RATINGS = torch.tensor(RNG.standard_normal(OBSERVED))
GROUP_OF = RNG.integers(0, GROUPS, OBSERVED)
MEMBERS = [torch.tensor(np.flatnonzero(GROUP_OF == g)) for g in range(GROUPS)]
TRACK = np.setdiff1d(np.arange(P * Q), READS)[:5]


def sampler(g: torch.Generator):
    """Four sampled positions (into READS) per group."""
    return [m[torch.randint(len(m), (4,), generator=g)] for m in MEMBERS]


def group_losses(values: torch.Tensor, batch) -> torch.Tensor:
    return torch.stack([torch.nn.functional.huber_loss(values[b], RATINGS[b], delta=1.0) for b in batch])


def problems(outer_of):
    X = fc.NuclearBall((P, Q), 2.0)
    dense = fc.CompositeProblem(
        outer_of(fc.inner_value(GROUPS)),
        lambda x, batch: group_losses(x.reshape(-1)[torch.as_tensor(READS)], batch),
        X,
        sampler=sampler,
    )
    structured = fc.CompositeProblem(
        outer_of(fc.inner_value(GROUPS)), group_losses, X, sampler=sampler, reads=READS, track=TRACK
    )
    return dense, structured


@pytest.mark.parametrize("outer_of", [cp.max, lambda u: fc.cvar(u, 0.5)])
@pytest.mark.parametrize("variant", ["taylor", "polyak"])
def test_structured_and_dense_paths_give_the_same_iterates(outer_of, variant):
    dense, structured = problems(outer_of)
    a = fc.hmsfw(dense, iters=12, variant=variant, seed=2, progress=False)
    b = fc.hmsfw(structured, iters=12, variant=variant, seed=2, progress=False)
    assert torch.allclose(a.x, b.x, atol=1e-7)
    kept = np.concatenate([READS, TRACK])
    assert torch.allclose(b.x_entries, a.x.reshape(-1)[torch.as_tensor(kept)], atol=1e-7)
    assert np.allclose(a.history.column("objective_estimate"), b.history.column("objective_estimate"), atol=1e-7)
    assert b.V.shape == (GROUPS, OBSERVED)  # the tracker lives on the observed entries only


def test_structured_atoms_are_rank_one_and_rebuild_the_iterate():
    _, structured = problems(cp.max)
    res = fc.hmsfw(structured, iters=6, seed=0, progress=False)
    rebuilt = res.x_start_weight * structured.x0 + sum(w * a.dense() for a, w in res.atoms)
    assert np.allclose(rebuilt, res.x.numpy())
    assert np.linalg.svd(res.x.numpy(), compute_uv=False).sum() <= 2.0 + 1e-8


def test_reads_validation():
    X = fc.NuclearBall((P, Q), 2.0)
    u = fc.inner_value(GROUPS)
    with pytest.raises(fc.errors.ModelError, match="reads"):
        fc.CompositeProblem(cp.max(u), group_losses, X, sampler=sampler, reads=np.array([0, P * Q]))
    with pytest.raises(fc.errors.ModelError, match="track"):
        fc.CompositeProblem(cp.max(u), group_losses, X, sampler=sampler, track=TRACK)
