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


def test_an_interrupted_structured_run_resumes_exactly(tmp_path):
    """Its state holds atoms and numpy-scalar weights: the checkpoint must load them with weights_only."""
    _, structured = problems(cp.max)
    full = fc.hmsfw(structured, iters=8, seed=3, progress=False)
    ckpt = fc.Checkpoint(tmp_path / "run.ckpt", every=3)

    def interrupt(it):
        if it.k == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fc.hmsfw(structured, iters=8, seed=3, progress=False, checkpoint=ckpt, callback=interrupt)
    resumed = fc.hmsfw(structured, iters=8, seed=3, progress=False, checkpoint=ckpt)
    assert resumed.info["resumed_from"] == 5 and torch.equal(resumed.x, full.x)
    # A finished run extended: its closing row's GLMO moved the pool on, which the checkpoint must not keep.
    longer = fc.hmsfw(structured, iters=12, seed=3, progress=False, checkpoint=ckpt)
    whole = fc.hmsfw(structured, iters=12, seed=3, progress=False)
    assert longer.info["resumed_from"] == 8 and torch.equal(longer.x, whole.x)


def test_sharded_entries_price_the_same_atom_by_lanczos_on_the_column_side():
    """Sharded entries always take the split Lanczos (column side); in one process it must find the plain
    LMO's atom (here the dense Gram eigensolve of a 6 x 8 direction) to Lanczos's tolerance."""
    from fullcomp.sets.atoms import Entries

    X = fc.NuclearBall((P, Q), 2.0)
    direction = RNG.standard_normal(OBSERVED)
    plain, lower = X.lmo_bounded(direction, Entries(READS, (P, Q)))
    split, split_lower = X.lmo_bounded(direction, Entries(READS, (P, Q), sharded=True))
    assert np.abs(np.outer(plain.u, plain.v) - np.outer(split.u, split.v)).max() < 1e-6
    assert split_lower == pytest.approx(lower, rel=1e-7)


def test_sharded_problems_need_reads_a_nuclear_ball_and_a_method_that_shards():
    u = fc.inner_value(GROUPS)
    with pytest.raises(fc.errors.ModelError, match="sharded=True needs reads="):
        fc.CompositeProblem(cp.max(u), group_losses, fc.NuclearBall((P, Q), 2.0), sampler=sampler, sharded=True)
    with pytest.raises(fc.errors.ModelError, match="fc.NuclearBall domain"):
        fc.CompositeProblem(cp.max(u), group_losses, fc.L1Ball((P, Q), 2.0), sampler=sampler, reads=READS, sharded=True)
    sharded = fc.CompositeProblem(
        cp.max(u), group_losses, fc.NuclearBall((P, Q), 2.0), sampler=sampler, reads=READS, sharded=True
    )
    with pytest.raises(fc.errors.ModelError, match="psg does not run on sharded entries.*hmsfw"):
        fc.solve(sharded, "psg", eta=0.1, iters=2, progress=False)
    with pytest.raises(fc.errors.OptionError, match="sharded problem takes route='colgen'"):
        fc.hmsfw(sharded, glmo="conic", iters=2, progress=False)
