"""fc.LoaderSampler: DataLoaders and re-iterables of batches as samplers, shuffled by the run's generator."""

from __future__ import annotations

import io
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import cvxpy as cp
import numpy as np
import pytest
import torch
from contract_cases import kill_at_update
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
)

import fullcomp as fc
from fullcomp.errors import CheckpointError, ModelError
from fullcomp.model.fingerprint import PROBE_SEED, problem_fingerprint
from fullcomp.serial import decode, encode

HERE = Path(__file__).parent
ROWS, BATCH = 23, 5  # 5 batches an epoch, the last of 3 examples
FEATURES = torch.randn(ROWS, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def loader(batch_size: int = BATCH, shuffle: bool = True, **kwargs) -> DataLoader:
    """A shuffled DataLoader whose second field is each example's index."""
    return DataLoader(TensorDataset(FEATURES, torch.arange(ROWS)), batch_size=batch_size, shuffle=shuffle, **kwargs)


def problem(seen: list | None = None) -> fc.CompositeProblem:
    """max of three losses of a linear model over a shuffled DataLoader; ``seen`` records each batch's indices."""

    def inner(x, batch):
        rows, index = batch
        if seen is not None:
            seen.append(index.tolist())
        z = rows @ x
        return torch.stack(
            [torch.nn.functional.softplus(z - 1).mean(), torch.nn.functional.softplus(-z).mean(), 0.1 * (z**2).mean()]
        )

    return fc.CompositeProblem(cp.max(fc.inner_value(3)), inner, fc.L1Ball(4, 2.0), sampler=fc.LoaderSampler(loader()))


def indices(sampler: fc.LoaderSampler, generator: torch.Generator, count: int) -> list[list[int]]:
    return [sampler(generator)[1].tolist() for _ in range(count)]


def test_each_epoch_visits_every_example_once_in_an_order_drawn_from_the_generator():
    sampler = fc.LoaderSampler(loader())
    assert sampler.batches_per_epoch() == 5
    drawn = indices(sampler, torch.Generator().manual_seed(4), 15)
    epochs = [sum(drawn[e * 5 : (e + 1) * 5], []) for e in range(3)]
    assert [len(b) for b in drawn[:5]] == [5, 5, 5, 5, 3]
    assert all(sorted(epoch) == list(range(ROWS)) for epoch in epochs)  # without replacement
    assert epochs[0] != epochs[1] != epochs[2] and epochs[0] != list(range(ROWS))
    # Epoch e is DistributedSampler(seed=s)'s order after set_epoch(e), s the seed drawn from the run's generator.
    seed = sampler.state_dict()["groups"][0]["seed"]
    reference = DistributedSampler(range(ROWS), num_replicas=1, rank=0, shuffle=True, seed=seed)
    for e, epoch in enumerate(epochs):
        reference.set_epoch(e)
        assert epoch == list(reference)
    # The same generator seed gives the same batches, another seed others; reset starts over.
    sampler.reset()
    assert indices(sampler, torch.Generator().manual_seed(4), 15) == drawn
    sampler.reset()
    assert indices(sampler, torch.Generator().manual_seed(5), 15) != drawn


def test_batches_are_the_dataloaders_own():
    """Collated as the loader would: TensorDataset's fast path, a collate_fn of one's own, no batching,
    __getitems__, a BatchSampler, drop_last."""
    sequential = loader(shuffle=False)
    gen = torch.Generator().manual_seed(0)
    for made in (
        sequential,
        loader(shuffle=False, collate_fn=lambda samples: samples),
        loader(batch_size=None, shuffle=False),
        loader(shuffle=False, drop_last=True),
        DataLoader(TensorDataset(FEATURES), batch_sampler=BatchSampler(SequentialSampler(FEATURES), 4, False)),
    ):
        expected = list(made)
        sampler = fc.LoaderSampler(made)
        got = [sampler(gen) for _ in range(len(expected) + 1)]
        assert _same(got[:-1], expected) and _same(got[-1], expected[0])  # the next epoch starts over

    class Items(Dataset):
        def __len__(self):
            return 7

        def __getitem__(self, i):
            raise AssertionError("__getitems__ is used when the dataset has it")

        def __getitems__(self, picked):
            return [{"i": torch.tensor(i)} for i in picked]

    items = DataLoader(Items(), batch_size=3)
    sampler = fc.LoaderSampler(items)
    assert _same([sampler(gen) for _ in range(3)], list(items))


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_a_random_sampler_with_replacement_and_num_samples():
    data = TensorDataset(torch.arange(6))
    gen = torch.Generator().manual_seed(0)
    longer = fc.LoaderSampler(DataLoader(data, batch_size=4, sampler=RandomSampler(data, num_samples=8)))
    epoch = torch.cat([longer(gen)[0] for _ in range(2)]).tolist()
    assert sorted(epoch[:6]) == list(range(6)) and len(epoch) == 8  # a permutation, then the start of another
    drawn = fc.LoaderSampler(DataLoader(data, batch_size=3, sampler=RandomSampler(data, replacement=True)))
    assert drawn.batches_per_epoch() == 2 and all(0 <= i < 6 for i in drawn(gen)[0].tolist())


def test_per_group_loaders_give_one_batch_per_group_each_in_its_own_epochs():
    small = DataLoader(TensorDataset(torch.arange(4)), batch_size=2, shuffle=True)
    large = DataLoader(TensorDataset(torch.arange(100, 109)), batch_size=3, shuffle=True)
    gen = torch.Generator().manual_seed(1)
    pair = fc.LoaderSampler([small, large])
    batches = [pair(gen) for _ in range(6)]
    assert all(isinstance(b, tuple) and len(b) == 2 for b in batches)
    assert pair.batches_per_epoch() == [2, 3]
    for g, per_epoch in ((0, 2), (1, 3)):
        seen = [b[g][0].tolist() for b in batches]
        for e in range(6 // per_epoch):
            epoch = sum(seen[e * per_epoch : (e + 1) * per_epoch], [])
            assert sorted(epoch) == sorted(small.dataset.tensors[0].tolist() if g == 0 else range(100, 109))
    by_name = fc.LoaderSampler({"young": small, "old": large})
    batch = by_name(torch.Generator().manual_seed(1))
    assert list(batch) == ["young", "old"] and _same(batch["young"], batches[0][0])
    # Plain lists of batches, one per group, need groups=True (a list of lists is otherwise one list of batches).
    listed = fc.LoaderSampler([[torch.zeros(1)], [torch.ones(1), torch.ones(2)]], groups=True)
    assert [len(b[1]) for b in (listed(gen), listed(gen), listed(gen))] == [1, 2, 1]


def test_a_plain_reiterable_is_cycled_in_order_and_resumes_where_it_was():
    batches = [torch.full((2,), float(i)) for i in range(3)]

    class Again:  # re-iterable, not a sequence: resumed by skipping the batches already drawn
        def __iter__(self):
            return iter(batches)

    for source in (batches, Again()):
        sampler = fc.LoaderSampler(source)
        got = [sampler(None)[0].item() for _ in range(5)]
        assert got == [0, 1, 2, 0, 1]
        saved = sampler.state_dict()
        after = [sampler(None)[0].item() for _ in range(3)]
        sampler.load_state_dict(saved)
        assert [sampler(None)[0].item() for _ in range(3)] == after == [2, 0, 1]
        sampler.reset()
        assert sampler(None)[0].item() == 0


def test_the_state_is_plain_data_that_resumes_the_same_batches():
    sampler = fc.LoaderSampler({"a": loader(), "b": loader(batch_size=4)})
    gen = torch.Generator().manual_seed(2)
    for _ in range(7):  # past an epoch's end
        sampler(gen)
    buffer = io.BytesIO()
    torch.save(encode(sampler.state_dict()), buffer)
    buffer.seek(0)
    state = decode(torch.load(buffer, weights_only=True))
    assert state["groups"][0]["epoch"] == 1 and state["groups"][0]["position"] == 2
    generator_state = gen.get_state()
    ahead = [sampler(gen) for _ in range(9)]
    other = fc.LoaderSampler({"a": loader(), "b": loader(batch_size=4)})
    other.load_state_dict(state)
    gen.set_state(generator_state)
    assert _same([other(gen) for _ in range(9)], ahead)
    with pytest.raises(CheckpointError, match="2 groups"):
        fc.LoaderSampler(loader()).load_state_dict(state)
    with pytest.raises(CheckpointError, match="kind"):
        fc.LoaderSampler({"a": loader(shuffle=False), "b": loader()}).load_state_dict(state)
    with pytest.raises(CheckpointError, match="format"):
        other.load_state_dict({"epoch": 3})


def test_loaders_that_cannot_be_reproduced_are_refused_with_the_fix():
    data = TensorDataset(torch.arange(6.0))

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    refused = {
        "IterableDataset": lambda: DataLoader(Stream(), batch_size=2),
        "SubsetRandomSampler": lambda: DataLoader(data, batch_size=2, sampler=SubsetRandomSampler([0, 2])),
        "shards each epoch by rank": lambda: DataLoader(
            data, batch_size=2, sampler=DistributedSampler(data, num_replicas=2, rank=0)
        ),
        "batch_sampler is a list": lambda: DataLoader(data, batch_sampler=[[0, 1], [2, 3]]),
        "sampler is a range": lambda: DataLoader(data, batch_sampler=BatchSampler(range(6), 2, False)),
        "worker_init_fn": lambda: DataLoader(data, batch_size=2, num_workers=2, worker_init_fn=print),
        "empty": lambda: DataLoader(TensorDataset(torch.zeros(0)), batch_size=2),
        "no batch": lambda: DataLoader(data, batch_size=8, drop_last=True),
        "iterator": lambda: iter([torch.zeros(2)]),
        "is a tensor": lambda: torch.zeros(3, 2),
        "DataLoader or a re-iterable": lambda: 3,
        "holds no batch": lambda: [],
    }
    for match, make in refused.items():
        with pytest.raises(ModelError, match=match):
            fc.LoaderSampler(make())
    with pytest.raises(ModelError, match="gave no batch"):
        fc.LoaderSampler(type("Nothing", (), {"__iter__": lambda self: iter(())})())(None)
    with pytest.warns(UserWarning, match="starts no worker"):
        workers = fc.LoaderSampler(DataLoader(data, batch_size=3, shuffle=True, num_workers=2))
    assert sorted(workers(None)[0].tolist() + workers(None)[0].tolist()) == list(range(6))


def test_random_transforms_repeat_with_the_runs_seed_and_leave_the_global_generators_alone():
    class Noisy(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.rand(()) + np.random.rand() + random.random() + 10 * i

    sampler = fc.LoaderSampler(DataLoader(Noisy(), batch_size=4, shuffle=True))
    before = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    first = [sampler(torch.Generator().manual_seed(0)) for _ in range(3)]
    assert torch.equal(torch.get_rng_state(), before[0]) and np.array_equal(np.random.get_state()[1], before[1])
    assert random.getstate() == before[2]
    sampler.reset()
    again = [sampler(torch.Generator().manual_seed(0)) for _ in range(3)]
    assert _same(first, again)
    sampler.reset()
    assert not torch.equal(sampler(torch.Generator().manual_seed(1)), first[0])


def test_solve_and_stepper_draw_the_seeds_batches_and_the_data_is_fingerprinted():
    seen: dict = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        seen[name] = []
        made = problem(seen[name])
        seen[name].clear()  # the construction's checks drew too
        fc.solve(made, "hmsfw", iters=8, seed=seed, progress=False)
    assert seen["a"] == seen["b"] and seen["a"] != seen["c"] and len(seen["a"]) >= 8

    solved = fc.solve(problem(), "hmsfw", iters=8, seed=3, progress=False)
    stepper = fc.Stepper(problem(), "hmsfw", seed=3, iters=8)
    for _ in range(8):
        stepper.step()
    assert torch.equal(stepper.x, solved.x)

    made = problem()
    other = fc.CompositeProblem(
        made.outer.expr,
        made.inner,
        made.domain,
        sampler=fc.LoaderSampler(DataLoader(TensorDataset(FEATURES + 1, torch.arange(ROWS)), batch_size=BATCH)),
    )
    assert problem_fingerprint(other)["data"] != problem_fingerprint(made)["data"]


def test_a_problem_that_already_ran_resumes_its_checkpoint(tmp_path):
    made = problem()
    stamp = problem_fingerprint(made, torch.float64)
    for _ in range(3):
        made.sampler(torch.Generator())
    assert problem_fingerprint(made, torch.float64) == stamp  # the sampler's place is no part of the problem
    first = fc.solve(made, "hmsfw", iters=4, seed=1, progress=False, checkpoint=tmp_path / "run.ckpt")
    again = fc.solve(made, "hmsfw", iters=7, seed=1, progress=False, checkpoint=tmp_path / "run.ckpt")
    assert again.info["resumed_from"] == 4 and len(first.history) == 5
    assert torch.equal(again.x, fc.solve(problem(), "hmsfw", iters=7, seed=1, progress=False).x)


def test_a_run_killed_with_sigkill_resumes_bit_identically(tmp_path):
    """Epochs of 5 batches wrap at iterations 5, 10 and 15; the child dies past iteration 9, saved at 9."""
    path, marker = tmp_path / "run.ckpt", tmp_path / "started"
    run = 'from test_loaders import problem; fc.solve(problem(), "hmsfw", iters=16, seed=2, progress=False, '
    kill_at_update(run + "checkpoint=checkpoint, callback=callback)", marker, path)
    resumed = fc.solve(problem(), "hmsfw", iters=16, seed=2, progress=False, checkpoint=path)
    assert resumed.info["resumed_from"] == 9
    full = fc.solve(problem(), "hmsfw", iters=16, seed=2, progress=False)
    assert len(resumed.history) == len(full.history)
    for a, b in zip(resumed.history, full.history):
        assert {k: v for k, v in a.items() if k != "time"} == {k: v for k, v in b.items() if k != "time"}
    assert torch.equal(resumed.x, full.x)


RANK = """
import json, sys, torch
import fullcomp as fc
from torch.utils.data import DataLoader, TensorDataset

here = fc.distributed.init(backend="gloo", timeout=30)
sampler = fc.LoaderSampler(DataLoader(TensorDataset(torch.arange(11)), batch_size=2, shuffle=True))
sampler.reset()
gen = torch.Generator().manual_seed(fc.distributed.rank_seed(3, here.rank))
drawn = [sampler(gen)[0].tolist() for _ in range(6)]
json.dump({"drawn": drawn, "state": sampler.state_dict(), "per_epoch": sampler.batches_per_epoch()},
          open(sys.argv[1] + str(here.rank), "w"))
fc.distributed.leave()
"""


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed support")
def test_two_ranks_shard_each_epoch_as_distributed_sampler_does(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-c", RANK, str(tmp_path / "rank")], env=env))
    try:
        for p in procs:
            assert p.wait(timeout=90) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    found = [json.loads((tmp_path / f"rank{r}").read_text()) for r in range(2)]
    seed = found[0]["state"]["groups"][0]["seed"]
    assert found[1]["state"]["groups"][0]["seed"] == seed  # rank 0's shuffle seed, on every rank
    assert all(f["per_epoch"] == 3 for f in found)  # 11 examples padded to 12: 6 a rank
    for epoch in range(2):
        shards = [sum(f["drawn"][epoch * 3 : (epoch + 1) * 3], []) for f in found]
        for rank, shard in enumerate(shards):
            reference = DistributedSampler(range(11), num_replicas=2, rank=rank, shuffle=True, seed=seed)
            reference.set_epoch(epoch)
            assert shard == list(reference)
        assert sorted(set(shards[0] + shards[1])) == list(range(11)) and len(shards[0] + shards[1]) == 12


def _subset_problem(data=FEATURES, indices=range(ROWS), outer=range(ROWS), **kwargs) -> fc.CompositeProblem:
    """A problem over a Subset of a Subset of a TensorDataset (no TensorDataset at the top: the data hash
    does not see the rows, the loader's fingerprint must)."""
    options = {"batch_size": BATCH, "shuffle": True, **kwargs}
    dataset = Subset(Subset(TensorDataset(data, torch.arange(ROWS)), list(indices)), list(outer))
    sampler = fc.LoaderSampler(DataLoader(dataset, **options))
    return fc.CompositeProblem(problem().outer.expr, problem().inner, fc.L1Ball(4, 2.0), sampler=sampler)


def test_a_resume_with_another_dataset_row_subset_or_batching_is_refused_naming_it(tmp_path):
    """S6: only the probe batch was fingerprinted, so a changed row, Subset index or drop_last resumed."""
    path = tmp_path / "run.ckpt"
    fc.solve(_subset_problem(), "hmsfw", iters=4, seed=1, progress=False, checkpoint=path)
    probed = _subset_problem().sampler(torch.Generator().manual_seed(PROBE_SEED))[1].tolist()
    changed_row = FEATURES.clone()
    changed_row[min(set(range(ROWS)) - set(probed))] += 5.0  # a row the fingerprint's probe batch does not hold
    swapped = list(range(ROWS))
    swapped[3], swapped[4] = 4, 3
    cases = {
        "loaders.sampler.rows": _subset_problem(data=changed_row),
        "loaders.sampler.dataset.indices": _subset_problem(outer=swapped),
        "loaders.sampler.dataset.of.indices": _subset_problem(indices=swapped),
        "loaders.sampler.drop_last": _subset_problem(drop_last=True),
        "loaders.sampler.batch_size": _subset_problem(batch_size=BATCH + 1),
        "loaders.sampler.order": _subset_problem(shuffle=False),
    }
    for leaf, other in cases.items():
        with pytest.raises(CheckpointError, match=rf"problem\.{leaf.replace('.', chr(92) + '.')} was"):
            fc.solve(other, "hmsfw", iters=6, seed=1, progress=False, checkpoint=path)
    resumed = fc.solve(_subset_problem(), "hmsfw", iters=6, seed=1, progress=False, checkpoint=path)
    assert resumed.info["resumed_from"] == 4


def test_the_loader_fingerprint_reads_a_fixed_sample_of_rows_under_a_fixed_seed():
    class Big(Dataset):  # a million rows, each read counted; a random transform in __getitem__
        reads = 0

        def __len__(self):
            return 10**6

        def __getitem__(self, i):
            Big.reads += 1
            return torch.tensor([float(i)]) + torch.rand(1), {"label": i % 3, "name": f"row{i}"}

    sampler = fc.LoaderSampler(DataLoader(Subset(Big(), range(10**6)), batch_size=32, shuffle=True))
    stamp = sampler.fingerprint()
    assert 0 < Big.reads <= 64 and stamp == sampler.fingerprint()  # the random transform is seeded
    assert stamp["dataset"]["length"] == 10**6 and stamp["dataset"]["of"]["type"].endswith("Big")
    assert stamp["batch_size"] == 32 and stamp["drop_last"] is False and stamp["order"] == "shuffled"
    grouped = fc.LoaderSampler({"a": loader(), "b": loader(batch_size=4)})
    assert grouped.fingerprint()["groups"]["b"]["batch_size"] == 4
    flipped = DataLoader(TensorDataset(FEATURES.flip(0), torch.arange(ROWS)), batch_size=BATCH)
    assert fc.LoaderSampler(loader()).fingerprint()["rows"] != fc.LoaderSampler(flipped).fingerprint()["rows"]

    class Again:  # a plain re-iterable: what can be read without iterating it
        def __iter__(self):
            return iter([torch.zeros(2)])

    seen = fc.LoaderSampler(Again()).fingerprint()
    assert seen["order"] == "cycled" and seen["type"].endswith("<locals>.Again") and seen["length"] is None
    assert fc.LoaderSampler([torch.zeros(2)] * 3).fingerprint()["length"] == 3


def test_a_dataset_whose_rows_cannot_be_read_or_stacked_fails_naming_the_row_and_the_fix():
    """S4: a row past what __getitem__ can give, or rows of another shape, gave torch's raw error."""
    rows = torch.randn(20, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    class Short(Dataset):  # says 60 rows, gives 50
        def __len__(self):
            return 60

        def __getitem__(self, i):
            return rows[i % 20] if i < 50 else rows[99]

    class Ragged(Short):  # the rows from 50 on are shorter
        def __getitem__(self, i):
            return rows[i % 20] if i < 50 else rows[i % 20, :3]

    sampler = fc.LoaderSampler(DataLoader(Short(), batch_size=8))
    gen = torch.Generator()
    for _ in range(6):
        sampler(gen)
    with pytest.raises(ModelError, match=r"dataset\[50\] raised IndexError.*__len__ is 60") as raised:
        sampler(gen)
    assert isinstance(raised.value.__cause__, IndexError)
    with pytest.raises(ModelError, match=r"dataset\[50\] raised IndexError"):
        sampler.fingerprint()
    ragged = fc.LoaderSampler(DataLoader(Ragged(), batch_size=8))
    for _ in range(6):
        ragged(gen)
    with pytest.raises(ModelError, match=r"Row 48 is tensor\(float64, \[5\]\) but row 50 is tensor\(float64, \[3\]\)"):
        ragged(gen)
    with pytest.raises(ModelError, match="dataset\\[50\\] raised IndexError"):
        fc.hmsfw(
            fc.CompositeProblem(
                cp.max(fc.inner_value(2)),
                lambda w, b: torch.stack([(b @ w).mean(), w.sum()]),
                fc.L2Ball(5, 1.0),
                sampler=fc.LoaderSampler(DataLoader(Short(), batch_size=8)),
            ),
            iters=10,
            progress=False,
        )


def test_a_reiterable_whose_passes_change_length_fails_naming_the_passes():
    """S8: an iterable that gave fewer (or more) batches on a later pass was cycled silently."""
    batch = torch.ones(4, 5, dtype=torch.float64)

    class Shrinking:
        calls = 0

        def __init__(self, counts):
            self.counts = counts

        def __iter__(self):
            Shrinking.calls += 1
            return iter([batch] * self.counts[min(Shrinking.calls, len(self.counts)) - 1])

    sampler = fc.LoaderSampler(Shrinking([3, 3, 2]))
    assert Shrinking.calls == 0  # the construction does not start a pass
    for _ in range(6):
        sampler(None)
    with pytest.raises(ModelError, match="gave 2 batches in pass 3 of this run, but 3 in each pass before"):
        sampler(None), sampler(None), sampler(None)
    Shrinking.calls = 0
    growing = fc.LoaderSampler(Shrinking([2, 3]))
    with pytest.raises(ModelError, match="gave 3 batches in pass 2 of this run, but 2"):
        for _ in range(5):
            growing(None)
    listed = [batch] * 2
    cycled = fc.LoaderSampler(listed)
    cycled(None), cycled(None), cycled(None)
    listed.pop()
    with pytest.raises(ModelError, match="gave 1 batches in pass 2"):
        cycled(None)
    Shrinking.calls = 0
    steady = fc.LoaderSampler(Shrinking([3]))
    for _ in range(4):
        steady(None)
    state = steady.state_dict()
    assert state["groups"][0]["length"] == 3
    again = fc.LoaderSampler(Shrinking([3]))
    again.load_state_dict(state)
    assert again.state_dict() == state
