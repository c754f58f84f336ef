"""The structured (entry-wise) path against the dense path on a small matrix-completion instance."""

from __future__ import annotations

import importlib

import cvxpy as cp
import numpy as np
import pytest
import torch

import fullcomp as fc
from fullcomp.algorithms.method import Plan

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


def test_a_structured_step_leaves_its_state_intact_and_reuses_the_iterate_of_the_state_before(monkeypatch):
    """The driver's contract: a step never modifies the state it is given (an update past the budget is
    discarded), and only an older state lends its buffers: y_{k+1} is written into y_{k-1}'s (a fresh array
    at 10^7 entries page-faults its way in)."""
    hmsfw_module = importlib.import_module("fullcomp.algorithms.hmsfw")
    made = {}

    def spying(step, state, **kwargs):
        def spied(state, k):
            new, row = step(state, k)
            made[k + 1] = (new.y.clone(), new.V.clone())
            return new, row

        made[0] = (state.y.clone(), state.V.clone())
        return Plan(spied, state, **kwargs)

    monkeypatch.setattr(hmsfw_module, "Plan", spying)
    iterates = []  # held, so that no fresh array can take a freed one's address

    def check(it):  # the driver calls back on state k after step k has run on it
        assert torch.equal(it.state.y, made[it.k][0]) and torch.equal(it.state.V, made[it.k][1])
        iterates.append(it.state.y)

    _, structured = problems(cp.max)
    fc.hmsfw(structured, iters=8, seed=2, progress=False, callback=check)
    pointers = [y.data_ptr() for y in iterates]
    assert len(pointers) == 9 and all(pointers[k + 2] == pointers[k] for k in range(1, 7))


def test_structured_atoms_are_rank_one_and_rebuild_the_iterate():
    _, structured = problems(cp.max)
    res = fc.hmsfw(structured, iters=6, seed=0, progress=False)
    rebuilt = res.x_start_weight * structured.x0 + sum(w * a.dense() for a, w in res.atoms)
    assert np.allclose(rebuilt, res.x.numpy())
    assert np.linalg.svd(res.x.numpy(), compute_uv=False).sum() <= 2.0 + 1e-8


def test_an_atomic_form_blends_as_the_convex_combination_of_its_atoms():
    """y <- (1 - gamma) y + gamma sum_i w_i a_i, step after step, against the same sums of dense matrices; the atoms
    of a new point are matched with recent ones, a form is never changed by blending, and gamma = 1 keeps only
    the new point."""
    from fullcomp.sets import atoms as A

    rng = np.random.default_rng(0)
    pool = [A.RankOneAtom(rng.standard_normal(4), rng.standard_normal(5)) for _ in range(6)]
    form, dense = A.AtomicForm(), np.zeros((4, 5))
    forms = []
    for k in range(40):
        picked = [pool[i] for i in rng.choice(6, size=3, replace=False)]
        if k % 7 == 3:
            picked.append(A.RankOneAtom(rng.standard_normal(4), rng.standard_normal(5)))  # a new atom
        weights = rng.dirichlet(np.ones(len(picked)))
        gamma = 1.0 if k == 0 else 2.0 / (k + 2)
        before = form.pairs()
        form, old = form.blend(picked, weights, gamma), form
        assert old.pairs() == before
        dense = (1 - gamma) * dense + gamma * sum(w * a.dense() for a, w in zip(picked, weights))
        forms.append(form)
        assert np.allclose(sum(w * a.dense() for a, w in form.pairs()), dense, rtol=1e-12, atol=1e-12)
    # Pool atoms are matched, not added again: 6 pool atoms and the 6 new ones.
    assert len(form) == 12 and len({id(a) for a in form.atoms}) == 12
    assert all(w > 0 for _, w in form.pairs())
    only = forms[-1].blend([pool[0]], np.ones(1), 1.0)
    assert [(a, w) for a, w in only.pairs()] == [(pool[0], 1.0)]
    # Forms blended again from an older one (a step redone) share nothing the others added.
    kept = [forms[10].pairs(), forms[11].pairs(), form.pairs()]
    fork = [forms[10].blend([A.RankOneAtom(np.ones(4), np.ones(5))], np.ones(1), 0.5) for _ in range(2)]
    assert len(fork[0]) == len(fork[1]) == len(forms[10]) + 1 and fork[0].atoms[-1] is not fork[1].atoms[-1]
    assert [forms[10].pairs(), forms[11].pairs(), form.pairs()] == kept
    # Beyond RECENT other atoms, an atom comes in again as a new entry; the sum is the same.
    fresh = [A.RankOneAtom(rng.standard_normal(4), rng.standard_normal(5)) for _ in range(A.RECENT + 1)]
    late = A.AtomicForm().blend([pool[0]], np.ones(1), 1.0).blend(fresh, np.full(len(fresh), 1 / len(fresh)), 0.5)
    again = late.blend([pool[0]], np.ones(1), 0.5)
    assert len(again) == len(late) + 1
    expected = 0.25 * pool[0].dense() + 0.25 * sum(a.dense() for a in fresh) / len(fresh) + 0.5 * pool[0].dense()
    assert np.allclose(sum(w * a.dense() for a, w in again.pairs()), expected, rtol=1e-12, atol=1e-12)


def test_reads_validation():
    X = fc.NuclearBall((P, Q), 2.0)
    u = fc.inner_value(GROUPS)
    with pytest.raises(fc.errors.ModelError, match="reads"):
        fc.CompositeProblem(cp.max(u), group_losses, X, sampler=sampler, reads=np.array([0, P * Q]))
    with pytest.raises(fc.errors.ModelError, match="track"):
        fc.CompositeProblem(cp.max(u), group_losses, X, sampler=sampler, track=TRACK)


@pytest.mark.parametrize("variant", ["reads", "touches", "subspace", "blocks"])
def test_an_interrupted_structured_run_resumes_exactly(tmp_path, variant, monkeypatch):
    """Its state holds atoms and numpy-scalar weights (and, for a map on the touched entries, the tracker's
    revision with its sparse sample, and the heuristic pricer's basis and products): the checkpoint must
    load them with weights_only.  ``blocks``: as at scale, the LMO runs block Lanczos from the last atom's
    Ritz vectors, which the atom carries, and priced atoms stay lazy (x sums them by one sampled product); the
    checkpoint keeps both, so the resumed run starts its next LMO where the uninterrupted one did and sums the
    same atoms the same way."""
    from fullcomp.glmo import ColumnGenerationGLMO, colgen
    from fullcomp_lab import completion_problem

    touched, subspace = variant in ("touches", "subspace"), variant == "subspace"
    heuristic = []
    if subspace:
        monkeypatch.setattr(fc.sets.balls, "DENSE_SIDE", 0)
        monkeypatch.setattr(fc.sets.balls, "SUBSPACE_ENTRIES", 0)
        real = ColumnGenerationGLMO.solve

        def counted(self, *args, **kwargs):
            res = real(self, *args, **kwargs)
            heuristic.append(res.heuristic)
            return res

        monkeypatch.setattr(ColumnGenerationGLMO, "solve", counted)
    if variant == "blocks":
        monkeypatch.setattr(fc.sets.balls, "BLOCK_ENTRIES", 0)
        monkeypatch.setattr(fc.sets.balls, "SAMPLED_FACTORS", 2)
        monkeypatch.setattr(colgen, "LAZY_ENTRIES", 0)
        structured = completion_problem(fc.datasets.synthetic_ratings((40, 60), 1200, seed=1), batch=64).problem
    else:
        structured = touched_problem() if touched else problems(cp.max)[1]
    priced, lmo = [], fc.NuclearBall.lmo_bounded

    def carrying(self, *args, **kwargs):  # whether each LMO atom comes with the Ritz vectors found with it
        found = lmo(self, *args, **kwargs)
        priced.append(isinstance(found[0].ritz, tuple))
        return found

    monkeypatch.setattr(fc.NuclearBall, "lmo_bounded", carrying)
    full = fc.hmsfw(structured, iters=8, seed=3, progress=False)
    assert any(priced) == (variant == "blocks")
    # Only the atom that starts the next LMO keeps them (fullcomp.glmo.base.pass_hint).
    assert sum(isinstance(getattr(atom, "ritz", None), tuple) for atom, _ in full.atoms) <= 1
    ckpt = fc.Checkpoint(tmp_path / "run.ckpt", every=3)

    def interrupt(it):
        if it.k == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fc.hmsfw(structured, iters=8, seed=3, progress=False, checkpoint=ckpt, callback=interrupt)
    resumed = fc.hmsfw(structured, iters=8, seed=3, progress=False, checkpoint=ckpt)
    assert resumed.info["resumed_from"] == 5 and torch.equal(resumed.x, full.x)
    assert torch.equal(resumed.x_entries, full.x_entries)
    # A finished run extended: its closing row's GLMO moved the pool on, which the checkpoint must not keep.
    longer = fc.hmsfw(structured, iters=12, seed=3, progress=False, checkpoint=ckpt)
    whole = fc.hmsfw(structured, iters=12, seed=3, progress=False)
    assert longer.info["resumed_from"] == 8 and torch.equal(longer.x, whole.x)
    assert sum(heuristic) > 0 if subspace else not heuristic


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


def test_sharded_problems_need_reads_and_a_nuclear_ball():
    u = fc.inner_value(GROUPS)
    with pytest.raises(fc.errors.ModelError, match="sharded=True needs reads="):
        fc.CompositeProblem(cp.max(u), group_losses, fc.NuclearBall((P, Q), 2.0), sampler=sampler, sharded=True)
    with pytest.raises(fc.errors.ModelError, match="fc.NuclearBall domain"):
        fc.CompositeProblem(cp.max(u), group_losses, fc.L1Ball((P, Q), 2.0), sampler=sampler, reads=READS, sharded=True)
    sharded = fc.CompositeProblem(
        cp.max(u), group_losses, fc.NuclearBall((P, Q), 2.0), sampler=sampler, reads=READS, sharded=True
    )
    with pytest.raises(fc.errors.OptionError, match="sharded problem takes route='colgen'"):
        fc.hmsfw(sharded, glmo="conic", iters=2, progress=False)


# ---- a map declared on the entries its batch touches (touches=) ----------------------------------------


def touched_losses(values: torch.Tensor, batch) -> torch.Tensor:
    """group_losses written on the values the batch reads, in the order torch.cat(batch) lists them."""
    parts = values.split([len(b) for b in batch])
    return torch.stack([torch.nn.functional.huber_loss(v, RATINGS[b], delta=1.0) for v, b in zip(parts, batch)])


def touched_problem(outer_of=cp.max) -> fc.CompositeProblem:
    return fc.CompositeProblem(
        outer_of(fc.inner_value(GROUPS)),
        touched_losses,
        fc.NuclearBall((P, Q), 2.0),
        sampler=sampler,
        reads=READS,
        track=TRACK,
        touches=torch.cat,
    )


TOUCHED_RUNS = [
    ("hmsfw-ii", {}),
    ("hmsfw-i", {}),
    ("scfw", {}),
    ("clipped-scfw", {"clip": 0.05}),
    ("hmsfw-ii", {"max_pricing": 2, "pool": 3}),
    ("hmsfw", {"tracker": "storm"}),
    ("hmsfw", {"tracker": "hessian"}),
    ("psg", {"eta": 0.1}),
]


@pytest.mark.parametrize("method, options", TOUCHED_RUNS, ids=lambda v: v if isinstance(v, str) else str(v))
def test_a_map_on_the_touched_entries_gives_the_iterates_of_the_map_on_all_reads(method, options):
    """The sparse sampled Jacobian, the tracker updated on its columns and the GLMO's carried-over pool images
    against the dense (n, |reads|) path; ``pool=3`` with two calls makes the pool merge atoms between updates.

    The two paths round differently in the last bit (a blend on the touched columns against a dense lerp,
    images carried over against recomputed): measured at most 6e-13 in x over 15 updates, but 1.4e-10 by the
    15th in the capped run (4e-14 by the 10th), where the master's interior-point solves amplify it.
    """
    _, structured = problems(cp.max)
    dense = fc.solve(structured, method, iters=15, seed=2, progress=False, **options)
    sparse = fc.solve(touched_problem(), method, iters=15, seed=2, progress=False, **options)
    point = "x" if method == "psg" else "x_entries"  # projected methods keep the dense point
    assert torch.allclose(getattr(sparse, point), getattr(dense, point), rtol=0, atol=1e-8)
    for column in ("objective_estimate", "gap_estimate"):
        if column in dense.history.rows[0]:
            assert np.allclose(sparse.history.column(column), dense.history.column(column), rtol=0, atol=1e-8)


def test_the_touched_oracle_returns_the_dense_jacobian_on_the_distinct_touched_columns():
    from fullcomp.oracles import BatchJacobian, InnerOracle

    _, structured = problems(cp.max)
    touched = touched_problem()
    batch = sampler(torch.Generator().manual_seed(4))
    x = torch.tensor(RNG.standard_normal(OBSERVED))
    dense = InnerOracle(structured.inner, GROUPS, (OBSERVED,), "cpu", torch.float64)
    sparse = InnerOracle(touched.inner_on_touched, GROUPS, (OBSERVED,), "cpu", torch.float64, touches=torch.cat)
    value, jac = dense(x, batch, 0)
    value_t, jac_t = sparse(x, batch, 0)
    assert isinstance(jac_t, BatchJacobian)
    assert torch.equal(jac_t.columns, torch.unique(torch.cat(batch)))
    assert torch.allclose(value_t, value, rtol=0, atol=1e-15)
    assert torch.allclose(jac_t.dense(), jac, rtol=0, atol=1e-15)
    assert float(jac_t.norm()) == pytest.approx(float(torch.linalg.norm(jac)), rel=1e-14)


def test_touches_is_checked_when_the_problem_is_built():
    u, X = fc.inner_value(GROUPS), fc.NuclearBall((P, Q), 2.0)
    with pytest.raises(fc.errors.ModelError, match="touches= needs reads="):
        fc.CompositeProblem(cp.max(u), touched_losses, X, sampler=sampler, touches=torch.cat)
    with pytest.raises(fc.errors.ModelError, match="touches must be a callable"):
        fc.CompositeProblem(cp.max(u), touched_losses, X, sampler=sampler, reads=READS, touches=[0, 1])
    for bad, says in (
        (lambda b: torch.cat(b).double(), "integer"),
        (lambda b: torch.stack(b), "1-D"),
        (lambda b: torch.cat(b) + OBSERVED, f"0..{OBSERVED - 1}"),
    ):
        with pytest.raises(fc.errors.ModelError, match=f"touches\\(batch\\).*{says}"):
            fc.CompositeProblem(cp.max(u), touched_losses, X, sampler=sampler, reads=READS, touches=bad)


def test_column_generation_carries_its_pool_images_over_a_sparse_tracker_step():
    """A GLMO told V = keep V_prev + weight J (J on few columns) must answer as one that multiplies every
    pooled atom by V; told nothing, or a revision of another V, it recomputes."""
    from fullcomp.glmo import ColumnGenerationGLMO
    from fullcomp.model.composite import Outer
    from fullcomp.oracles import BatchJacobian
    from fullcomp.sets.atoms import Entries
    from fullcomp.trackers import Revision

    X = fc.NuclearBall((P, Q), 2.0)
    outer = Outer(cp.max(fc.inner_value(GROUPS)), X)
    entries = Entries(READS, (P, Q))
    rng = np.random.default_rng(0)
    V0 = rng.standard_normal((GROUPS, OBSERVED))
    cols = torch.tensor([1, 4, 9, 20])
    J = BatchJacobian(cols, torch.tensor(rng.standard_normal((GROUPS, 4))), OBSERVED)
    V1 = 0.7 * V0 + 0.3 * J.dense().numpy()
    z, y = rng.standard_normal(GROUPS), np.zeros(OBSERVED)
    answers = []
    for revisions in (
        (Revision(0), Revision(1, since=0, keep=0.7, weight=0.3, jacobian=J)),
        (None, None),
        (Revision(0), Revision(1, since=5, keep=0.7, weight=0.3, jacobian=J)),
    ):
        glmo = ColumnGenerationGLMO(outer, X, pool=4)
        start = fc.sets.atoms.ZeroAtom((P, Q))
        glmo.solve(z, V0, y, tol=1e-6, entries=entries, start=start, revision=revisions[0])
        answers.append(glmo.solve(z, V1, y, tol=1e-6, entries=entries, start=start, revision=revisions[1]))
    for other in answers[1:]:
        assert np.allclose(answers[0].x, other.x, rtol=0, atol=1e-12)
        assert answers[0].value == pytest.approx(other.value, abs=1e-12)
    # The images are carried over, not recomputed: a revision that misstates the change is believed.
    glmo = ColumnGenerationGLMO(outer, X, pool=4)
    glmo.solve(z, V0, y, tol=1e-6, entries=entries, start=start, revision=Revision(0))
    misled = glmo.solve(z, V1, y, tol=1e-6, entries=entries, start=start, revision=Revision(1, since=0))
    assert abs(misled.value - answers[0].value) > 1e-6


@pytest.mark.parametrize("route", ["colgen", "conic"])
def test_a_glmo_gives_x_at_the_tracked_entries_after_those_read(route):
    """Column generation keeps its pooled atoms' values at ``track``; x there is its atoms' combination."""
    from fullcomp.glmo import build_glmo
    from fullcomp.sets.atoms import Entries, ZeroAtom

    X = fc.NuclearBall((P, Q), 2.0)
    glmo = build_glmo(cp.max(fc.inner_value(GROUPS)), X, route=route)
    entries, track = Entries(READS, (P, Q)), Entries(TRACK, (P, Q))
    rng = np.random.default_rng(1)
    for _ in range(3):  # later calls start from a warm pool
        V, z = rng.standard_normal((GROUPS, OBSERVED)), rng.standard_normal(GROUPS)
        args = (z, V, np.zeros(OBSERVED))
        res = glmo.solve(*args, tol=1e-6, entries=entries, start=ZeroAtom((P, Q)), track=track)
        combined = sum(w * a.at(track) for w, a in zip(res.weights, res.atoms))
        assert res.x.shape == (OBSERVED + len(TRACK),)
        assert np.allclose(res.x[OBSERVED:], combined, rtol=0, atol=1e-12)
        assert np.allclose(res.x[:OBSERVED], sum(w * a.at(entries) for w, a in zip(res.weights, res.atoms)), atol=1e-12)


def test_hmsfw_on_a_touched_map_updates_its_tracker_on_the_sampled_columns(monkeypatch):
    """The sparse path is taken, not a dense fallback: every update blends a BatchJacobian into V."""
    from fullcomp.oracles import BatchJacobian

    blended, real = [], BatchJacobian.blend

    def spy(self, previous, weight, out):
        blended.append((self.values.shape[1], out is previous))
        return real(self, previous, weight, out)

    monkeypatch.setattr(BatchJacobian, "blend", spy)
    res = fc.hmsfw(touched_problem(), iters=6, seed=1, progress=False)
    assert len(blended) == 6 and res.V.shape == (GROUPS, OBSERVED)
    assert all(0 < width <= GROUPS * 4 and not same for width, same in blended)  # 4 draws per group


def test_a_glmo_call_that_raises_leaves_no_images_to_carry(monkeypatch):
    """A call that fails after changing its pool must not let the next call carry the images of before."""
    from fullcomp.glmo import ColumnGenerationGLMO
    from fullcomp.glmo.master import ConicMaster
    from fullcomp.model.composite import Outer
    from fullcomp.sets.atoms import Entries, ZeroAtom
    from fullcomp.trackers import Revision

    X = fc.NuclearBall((P, Q), 2.0)
    outer = Outer(cp.max(fc.inner_value(GROUPS)), X)
    entries, start = Entries(READS, (P, Q)), ZeroAtom((P, Q))
    rng = np.random.default_rng(3)
    V0, V1 = rng.standard_normal((2, GROUPS, OBSERVED))
    z, y = rng.standard_normal(GROUPS), np.zeros(OBSERVED)
    glmo = ColumnGenerationGLMO(outer, X, pool=4)
    glmo.solve(z, V0, y, tol=1e-6, entries=entries, start=start, revision=Revision(0))
    real, calls = ConicMaster.solve, []

    def failing(self, c, images):
        calls.append(1)
        if len(calls) == 3:  # after two atoms were added
            raise RuntimeError("the master failed")
        return real(self, c, images)

    monkeypatch.setattr(ConicMaster, "solve", failing)
    with pytest.raises(RuntimeError):
        glmo.solve(z, V1, y, tol=1e-9, entries=entries, start=start, revision=Revision(1))
    monkeypatch.setattr(ConicMaster, "solve", real)
    # Told that V is unchanged since call 0: nothing is carried, the images are recomputed for V0.
    again = glmo.solve(z, V0, y, tol=1e-6, entries=entries, start=start, revision=Revision(2, since=0))
    reference = ColumnGenerationGLMO(outer, X, pool=4).solve(z, V0, y, tol=1e-6, entries=entries, start=start)
    # Both are certified within 1e-6 of the optimum; the model's value at again.x is recomputed from V0.
    assert again.value == pytest.approx(reference.value, abs=2e-6)
    assert outer.value(z + V0 @ again.x) == pytest.approx(again.value, abs=1e-9)


def test_sparse_products_through_torch_give_the_iterates_of_scipy_products(monkeypatch):
    """The route a CUDA run takes for its Lanczos products, exercised on the CPU."""
    from fullcomp.sets import lanczos
    from fullcomp_lab import completion_problem

    data = fc.datasets.synthetic_ratings(shape=(150, 100), n_ratings=3000, seed=0)
    problem = completion_problem(data, "max", batch=16).problem
    host = fc.hmsfw(problem, iters=8, seed=3, progress=False)
    monkeypatch.setattr(lanczos, "PRODUCT_DEVICES", ("cpu",))
    products = []
    real = lanczos.DeviceMatrix.__matmul__
    monkeypatch.setattr(lanczos.DeviceMatrix, "__matmul__", lambda self, x: products.append(1) or real(self, x))
    torch_route = fc.hmsfw(problem, iters=8, seed=3, progress=False)
    assert products
    # torch sums each product in another order, so a Lanczos run may stop at another check and its pair differ
    # within the Lanczos tolerance (tests/test_sets.py); the masters amplify that over the updates: after 8,
    # 2e-9 of max |x| when this test was written, 2e-5 on the AMD EPYC with numpy 2.4.6 and scipy 1.17.1.  What
    # each GLMO certifies is its gap: the two runs' estimates agree well within it (measured: a thousandth of
    # it), and their pricing calls within a tenth.
    calls = host.history.column("pricing_calls"), torch_route.history.column("pricing_calls")
    assert abs(calls[0].sum() - calls[1].sum()) <= 0.1 * calls[0].sum()
    for a, b in zip(host.history.rows, torch_route.history.rows):
        assert abs(a["objective_estimate"] - b["objective_estimate"]) <= 0.01 * a["glmo_gap"]
    scale = float(host.x_entries.abs().max())
    assert torch.allclose(host.x_entries, torch_route.x_entries, rtol=0, atol=1e-3 * scale)


def test_a_warm_start_on_the_structured_path_with_tracked_entries_takes_the_dense_paths_first_step():
    """The warm start's line search reads the GLMO's point at the entries the map reads, not at those it tracks."""
    dense, structured = problems(cp.max)
    x0 = torch.full((P, Q), 0.01, dtype=torch.float64)
    a = fc.hmsfw(dense, iters=6, seed=2, progress=False, x0=x0)
    b = fc.hmsfw(structured, iters=6, seed=2, progress=False, x0=x0)
    assert np.allclose(a.history.column("gamma"), b.history.column("gamma"), rtol=0, atol=1e-12, equal_nan=True)
    assert torch.allclose(a.x, b.x, atol=1e-7)
