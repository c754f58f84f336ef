"""Data loaders as samplers: a ``torch.utils.data.DataLoader``, or any re-iterable of batches, as a problem's
``sampler(generator) -> batch``.

:class:`LoaderSampler` reads a DataLoader's configuration (dataset, batch size, ``drop_last``,
``collate_fn``, shuffled or sequential) and builds its batches itself, in the main process, as the loader
would, with the shuffling drawn from the run's generator: a seed reproduces the batches and a checkpoint
restores the sampler's place in its epoch.  Every run resets it (``reset``); its ``state_dict`` (epoch,
position, shuffle seed: numbers only) is checkpointed with the run.

The shuffle.  The first draw after a reset draws a shuffle seed ``s`` from the run's generator; epoch ``e``
visits the dataset in the order ``torch.randperm(n, generator=torch.Generator().manual_seed(s + e))``, as
``DistributedSampler(seed=s)`` does after ``set_epoch(e)``.  In a distributed job the ranks take rank 0's
``s`` (one collective at that first draw, so every rank must draw), pad the order by repeating its first
indices to a multiple of the world size and take every W-th index from their rank on, as torch's
``DistributedSampler(drop_last=False)`` does, so the ranks' shards are disjoint apart from the padding and
each rank has the same number of batches per epoch.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
)

from fullcomp import distributed
from fullcomp.errors import CheckpointError, FullcompError, ModelError

FORMAT = "fullcomp-loader-1"

#: Shuffle seeds and transform seeds are drawn below this bound, so that ``seed + epoch`` stays an int64.
SEED_BOUND = 2**62

_HOW = "or write sampler(generator) -> batch yourself, drawing every random number from the generator"

#: How many rows of a dataset its fingerprint reads (at fixed positions spread over it, the first and last
#: included), and the seed its reads run under (random transforms then give the same rows every time).
FINGERPRINT_ROWS = 64
FINGERPRINT_SEED = 0x5EED


class _Source:
    """One group's batches: a position in an epoch, and how the epoch's batches are made."""

    kind = ""

    def reset(self) -> None:
        self.epoch, self.position = 0, 0

    def state(self) -> dict:
        return {"kind": self.kind, "epoch": self.epoch, "position": self.position}

    def load(self, state: dict, where: str) -> None:
        if not isinstance(state, dict) or state.get("kind") != self.kind:
            found = state.get("kind") if isinstance(state, dict) else type(state).__name__
            raise CheckpointError(f"the loader state of {where} is of kind {found!r}, but this loader is {self.kind!r}")
        for key in ("epoch", "position"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CheckpointError(f"the loader state of {where} has {key} {value!r}; expected an int >= 0")
        self.epoch, self.position = state["epoch"], state["position"]

    def fingerprint(self) -> dict:
        raise NotImplementedError


class _Loaded(_Source):
    """A DataLoader's batches built from its dataset, in an order drawn from the run's generator."""

    def __init__(self, loader: DataLoader, where: str, seed_transforms: bool):
        dataset = loader.dataset
        if isinstance(dataset, IterableDataset):
            raise ModelError(
                f"{where}: its dataset is an IterableDataset, which yields examples in an order of its own that "
                "the run's generator cannot draw, nor a checkpoint restore; use a map-style dataset "
                f"(__getitem__ and __len__), {_HOW}"
            )
        if type(loader).__iter__ is not DataLoader.__iter__:
            raise ModelError(
                f"{where}: {type(loader).__name__} overrides DataLoader.__iter__, which fullcomp would bypass (it "
                f"builds the batches itself); pass a plain torch.utils.data.DataLoader, {_HOW}"
            )
        batches = loader.batch_sampler
        if batches is None:  # batch_size=None: one example per batch, with no batch dimension
            order, self.batch_size, self.drop_last = loader.sampler, None, False
        elif type(batches) is BatchSampler:
            order, self.batch_size, self.drop_last = batches.sampler, int(batches.batch_size), bool(batches.drop_last)
        else:
            raise ModelError(
                f"{where}: its batch_sampler is a {type(batches).__name__}, whose order fullcomp cannot draw from the "
                "run's generator nor restore from a checkpoint; give the DataLoader batch_size= with shuffle=True "
                f"(or a RandomSampler or SequentialSampler), {_HOW}"
            )
        if type(order) is RandomSampler:
            self.shuffle, self.replacement = True, bool(order.replacement)
            self.samples = int(order.num_samples)
        elif type(order) is SequentialSampler:
            self.shuffle, self.replacement = False, False
            self.samples = len(order.data_source)
        else:
            hint = (
                "fullcomp shards each epoch by rank itself, as DistributedSampler does: pass shuffle=True"
                if isinstance(order, torch.utils.data.DistributedSampler)
                else "use shuffle=True or shuffle=False (a RandomSampler or SequentialSampler; for a subset, pass "
                "torch.utils.data.Subset as the dataset)"
            )
            raise ModelError(
                f"{where}: its sampler is a {type(order).__name__}, whose order (and any state it keeps) fullcomp "
                f"cannot draw from the run's generator nor restore from a checkpoint; {hint}, {_HOW}"
            )
        if loader.num_workers > 0 and loader.worker_init_fn is not None:
            raise ModelError(
                f"{where}: worker_init_fn would never run: fullcomp builds the batches in the main process (so that "
                "they are a function of the run's seed) and starts no worker; drop worker_init_fn and "
                "num_workers (random transforms are seeded for each batch from the run's generator)"
            )
        if loader.num_workers > 0:
            warnings.warn(
                f"{where}: num_workers={loader.num_workers} starts no worker: fullcomp builds the batches in the "
                "main process, so that they are a function of the run's seed; pass num_workers=0 to silence this",
                UserWarning,
                stacklevel=4,
            )
        self.kind = "shuffled" if self.shuffle else "sequential"
        self.n = len(order.data_source)
        self.dataset, self.collate_fn, self.where = dataset, loader.collate_fn, where
        #: A TensorDataset with the default collate: its batch is the tensors indexed at once (the same values).
        self.fast = type(dataset) is TensorDataset and loader.collate_fn is default_collate and bool(self.batch_size)
        self.seed_transforms = seed_transforms and not self.fast
        if self.samples == 0:
            raise ModelError(f"{where}: its dataset is empty; a sampler needs at least one example")
        self._cached: tuple | None = None  # ((seed, epoch, rank, size), the epoch's indices on this rank)
        self.reset()
        self.batches_per_epoch(distributed.world())  # a loader with no batch at all fails now

    def reset(self) -> None:
        super().reset()
        self.seed = None

    def state(self) -> dict:
        return {**super().state(), "seed": self.seed}

    def load(self, state: dict, where: str) -> None:
        super().load(state, where)
        seed = state.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_BOUND):
            raise CheckpointError(f"the loader state of {where} has seed {seed!r}; expected None or an int >= 0")
        self.seed = seed

    def per_rank(self, size: int) -> int:
        return math.ceil(self.samples / size)

    def batches_per_epoch(self, here: distributed.World) -> int:
        examples = self.per_rank(here.size)
        if self.batch_size is None:
            return examples
        count = examples // self.batch_size if self.drop_last else math.ceil(examples / self.batch_size)
        if count == 0:
            raise ModelError(
                f"{self.where}: drop_last=True with batch_size={self.batch_size} leaves no batch of the "
                f"{examples} examples {'each rank holds' if here.parallel else 'in the dataset'}; lower batch_size "
                "or pass drop_last=False"
            )
        return count

    def order(self, here: distributed.World) -> torch.Tensor:
        """This rank's indices of the current epoch, in the order they are visited."""
        key = (self.seed, self.epoch, here.rank, here.size)
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + self.epoch)
            if self.replacement:
                indices = torch.randint(self.n, (self.samples,), generator=gen, dtype=torch.int64)
            elif self.samples == self.n:
                indices = torch.randperm(self.n, generator=gen)
            else:  # as RandomSampler: whole permutations, the last one cut to num_samples
                perms = [torch.randperm(self.n, generator=gen) for _ in range(math.ceil(self.samples / self.n))]
                indices = torch.cat(perms)[: self.samples]
        else:
            indices = torch.arange(self.samples, dtype=torch.int64)
        if here.parallel:  # DistributedSampler(drop_last=False): pad with the first indices, then stride
            total = self.per_rank(here.size) * here.size
            indices = indices.repeat(math.ceil(total / len(indices)))[:total][here.rank :: here.size]
        self._cached = (key, indices)
        return indices

    def draw(self, generator: torch.Generator | None) -> Any:
        here = distributed.world()
        if self.shuffle and self.seed is None:
            seed = _draw_seed(generator)
            self.seed = distributed.gather(seed)[0] if here.parallel else seed  # every rank shuffles as rank 0
        if self.position >= self.batches_per_epoch(here):
            self.epoch, self.position = self.epoch + 1, 0
        order = self.order(here)
        if self.batch_size is None:
            indices = order[self.position : self.position + 1]
        else:
            indices = order[self.position * self.batch_size : (self.position + 1) * self.batch_size]
        transform_seed = _draw_seed(generator) if self.seed_transforms else None
        self.position += 1
        with _seeded(transform_seed):
            return self.build(indices)

    def build(self, indices: torch.Tensor) -> Any:
        """The batch of the examples at ``indices``, as the DataLoader would collate it in its main process."""
        if self.fast:
            return [t[indices.to(t.device)] for t in self.dataset.tensors]
        picked = indices.tolist()
        if self.batch_size is None:
            return self.collate([self.row(picked[0])], picked, self.collate_fn, one=True)
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is None:
            samples = [self.row(i) for i in picked]
        else:
            try:
                samples = getitems(picked)
            except FullcompError:
                raise
            except Exception as exc:
                raise ModelError(self.unreadable(f"dataset.__getitems__({_few(picked)})", exc)) from exc
        return self.collate(samples, picked, self.collate_fn)

    def row(self, index: int) -> Any:
        """``dataset[index]``; a ModelError that names the row and the fix when it raises."""
        try:
            return self.dataset[index]
        except FullcompError:
            raise
        except Exception as exc:
            raise ModelError(self.unreadable(f"dataset[{index}]", exc)) from exc

    def unreadable(self, call: str, exc: Exception) -> str:
        text = f"{self.where}: {call} raised {type(exc).__name__}: {exc}"
        if isinstance(exc, (IndexError, KeyError)):
            return (
                f"{text}. The dataset's __len__ is {self.n}, and every index below it is read (each epoch visits "
                "every row): make __getitem__ give a row for each index below len(dataset), or __len__ count only "
                "the rows it can give"
            )
        return f"{text}. Fix the dataset's __getitem__ (its error is chained above)"

    def collate(self, samples: list, picked: list[int], collate_fn: Any, one: bool = False) -> Any:
        """``collate_fn`` of the rows; a ModelError naming the rows and how they differ when it raises."""
        try:
            return collate_fn(samples[0] if one else samples)
        except FullcompError:
            raise
        except Exception as exc:
            text = f"{self.where}: collate_fn raised {type(exc).__name__} on the rows {_few(picked)}: {exc}"
            shapes = [_structure(sample) for sample in samples]
            differ = next((i for i, shape in enumerate(shapes) if shape != shapes[0]), None)
            if differ is not None:
                raise ModelError(
                    f"{text}. Row {picked[0]} is {shapes[0]} but row {picked[differ]} is {shapes[differ]}: the "
                    "default collate stacks rows of one structure, dtype and shape; make every row of the dataset "
                    "alike (pad or crop them), or pass the DataLoader a collate_fn that combines them"
                ) from exc
            raise ModelError(f"{text}. Fix the collate_fn or the dataset's rows (the error is chained above)") from exc

    def fingerprint(self) -> dict:
        """What the sampler reads of its loader: the dataset's structure (lengths, ``Subset`` indices), the
        batching and order, and a hash of the rows at up to FINGERPRINT_ROWS fixed positions."""
        return {
            "order": self.kind,
            "replacement": self.replacement,
            "samples": self.samples,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "collate_fn": _name(self.collate_fn),
            "dataset": _dataset_structure(self.dataset),
            "rows": self.rows_hash(),
        }

    def rows_hash(self) -> str:
        """A hash of the rows at up to FINGERPRINT_ROWS positions spread evenly over the dataset, first and last
        included, read as the batches read them (random transforms seeded with FINGERPRINT_SEED)."""
        count = min(self.n, FINGERPRINT_ROWS)
        positions = sorted({i * (self.n - 1) // (count - 1) for i in range(count)}) if count > 1 else [0]
        h = hashlib.blake2b(digest_size=12)
        h.update(repr(positions[:2] + positions[-1:]).encode())
        if self.fast:
            at = torch.tensor(positions, dtype=torch.int64)
            _feed(h, [t[at.to(t.device)] for t in self.dataset.tensors])
            return h.hexdigest()
        with _seeded(FINGERPRINT_SEED):
            for i in positions:
                _feed(h, self.row(i))
        return h.hexdigest()


class _Cycled(_Source):
    """A re-iterable of batches, cycled in order."""

    kind = "cycled"

    def __init__(self, batches: Any, where: str):
        self.batches, self.where = batches, where
        self.indexed = isinstance(batches, Sequence)
        if self.indexed and len(batches) == 0:
            raise ModelError(f"{where} holds no batch; a sampler needs at least one")
        self.reset()

    def reset(self) -> None:
        super().reset()
        self._iterator = None
        #: The number of batches of a pass, once the run has finished one: every later pass must give as many.
        self.length: int | None = None

    def state(self) -> dict:
        return {**super().state(), "length": self.length}

    def load(self, state: dict, where: str) -> None:
        super().load(state, where)
        length = state.get("length")
        if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
            raise CheckpointError(f"the loader state of {where} has length {length!r}; expected None or an int >= 1")
        self.length = length
        self._iterator = None  # rebuilt at the next draw, past the batches of the epoch already drawn

    def fingerprint(self) -> dict:
        """What can be read of a re-iterable without iterating it: its type and length (None without one)."""
        try:
            length = len(self.batches)
        except TypeError:
            length = None
        return {"order": self.kind, "type": _name(type(self.batches)), "length": length}

    def passed(self, count: int) -> None:
        """A pass ended after ``count`` batches: the first sets the length of every pass, the others must agree."""
        if self.length is None:
            self.length = count
        elif count != self.length:
            raise ModelError(
                f"{self.where} gave {count} batches in pass {self.epoch + 1} of this run, but {self.length} in "
                "each pass before: a re-iterable sampler must give the same batches on every pass (a resumed run "
                "finds its place by counting them); pass a list of batches or a DataLoader, or start a new "
                "fc.LoaderSampler for new data"
            )

    def draw(self, generator: torch.Generator | None) -> Any:
        if self.indexed:
            if self.position >= len(self.batches):
                self.passed(self.position)
                self.epoch, self.position = self.epoch + 1, 0
            batch = self.batches[self.position]
            self.position += 1
            return batch
        if self._iterator is None:
            self._iterator = iter(self.batches)
            for skipped in range(self.position):
                if next(self._iterator, _END) is _END:
                    raise ModelError(
                        f"{self.where} gave {skipped} batches in a pass, fewer than the {self.position} already drawn "
                        "in this epoch; a re-iterable sampler must give the same batches on every pass"
                    )
        batch = next(self._iterator, _END)
        if batch is not _END and self.length is not None and self.position >= self.length:
            self.passed(self.position + 1)  # more than a pass held before: an error
        if batch is _END:
            if self.position == 0:
                raise ModelError(f"{self.where} gave no batch; a sampler needs at least one")
            self.passed(self.position)
            self.epoch, self.position = self.epoch + 1, 0
            self._iterator = iter(self.batches)
            batch = next(self._iterator, _END)
            if batch is _END:
                raise ModelError(f"{self.where} gave no batch on its second pass; pass a list or a DataLoader")
        self.position += 1
        return batch


_END = object()


def _few(indices: list[int]) -> str:
    return str(indices) if len(indices) <= 8 else f"[{', '.join(map(str, indices[:8]))}, ...] ({len(indices)} rows)"


def _name(obj: Any) -> str:
    kind = obj if isinstance(obj, type) else getattr(obj, "func", obj)  # a functools.partial: its function
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', type(kind).__qualname__)}"


def _structure(value: Any, depth: int = 0) -> str:
    """A row's structure as a short text: its containers, and each tensor's or array's dtype and shape."""
    if isinstance(value, torch.Tensor):
        return f"tensor({str(value.dtype).replace('torch.', '')}, {list(value.shape)})"
    if isinstance(value, np.ndarray):
        return f"array({value.dtype}, {list(value.shape)})"
    if depth > 4:
        return type(value).__name__
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {_structure(v, depth + 1)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_structure(v, depth + 1) for v in value) + ")"
    return type(value).__name__


def _indices_hash(indices: Any) -> str:
    """A hash of a Subset's indices: a range by its bounds, anything else as an int64 array."""
    h = hashlib.blake2b(digest_size=12)
    if isinstance(indices, range):
        h.update(repr(indices).encode())
    else:
        try:
            array = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices).astype(np.int64)
            h.update(np.ascontiguousarray(array).tobytes())
        except (TypeError, ValueError):
            h.update(repr(list(indices)).encode())
    return h.hexdigest()


def _dataset_structure(dataset: Any, depth: int = 0) -> dict:
    """A dataset's type and length, with a ``Subset``'s indices (hashed) and the dataset under it, and a
    ``ConcatDataset``'s parts, nested: what can be read without reading its rows."""
    try:
        length = len(dataset)
    except TypeError:
        length = None
    found: dict = {"type": _name(type(dataset)), "length": length}
    if depth >= 8:
        return found
    if isinstance(dataset, Subset):
        found["indices"] = _indices_hash(dataset.indices)
        found["of"] = _dataset_structure(dataset.dataset, depth + 1)
    elif isinstance(dataset, ConcatDataset):
        found["parts"] = [_dataset_structure(part, depth + 1) for part in dataset.datasets]
    return found


def _feed(h: Any, value: Any, depth: int = 0) -> None:
    """Add a row to a hash: each tensor's and array's dtype, shape and bytes, numbers and strings by value,
    the containers around them; an object of another kind by its type only."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        t = (t.to_dense() if t.layout != torch.strided else t).contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, np.ndarray):
        h.update(f"A{value.dtype}{value.shape}".encode())
        h.update(repr(value.tolist()).encode() if value.dtype == object else np.ascontiguousarray(value).tobytes())
    elif value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif depth > 8:
        h.update(type(value).__qualname__.encode())
    elif isinstance(value, Mapping):
        h.update(f"{{{len(value)}".encode())
        for key, item in value.items():
            _feed(h, key, depth + 1)
            _feed(h, item, depth + 1)
    elif isinstance(value, (list, tuple)):
        h.update(f"({len(value)}".encode())
        for item in value:
            _feed(h, item, depth + 1)
    elif hasattr(value, "__array__"):  # a PIL image, a pandas frame: its values
        _feed(h, np.asarray(value), depth + 1)
    else:
        h.update(type(value).__qualname__.encode())


def _draw_seed(generator: torch.Generator | None) -> int:
    device = "cpu" if generator is None else generator.device
    return int(torch.randint(SEED_BOUND, (1,), generator=generator, device=device).item())


@contextlib.contextmanager
def _seeded(seed: int | None) -> Iterator[None]:
    """torch's (CPU), numpy's and Python's global generators seeded with ``seed``, and put back after."""
    if seed is None:
        yield
        return
    torch_state, numpy_state, python_state = torch.get_rng_state(), np.random.get_state(), random.getstate()
    torch.default_generator.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def _data(source: _Source) -> Any:
    if isinstance(source, _Cycled):
        return source.batches
    return source.dataset.tensors if isinstance(source.dataset, TensorDataset) else ()


def _source(value: Any, where: str, seed_transforms: bool) -> _Source:
    if isinstance(value, DataLoader):
        return _Loaded(value, where, seed_transforms)
    if isinstance(value, torch.Tensor):
        raise ModelError(
            f"{where} is a tensor; pass DataLoader(TensorDataset(tensor), batch_size=..., shuffle=True) for "
            "batches of its rows, or a list of batch tensors to cycle"
        )
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise ModelError(
            f"{where} must be a torch.utils.data.DataLoader or a re-iterable of batches (a list of tensors), got "
            f"{type(value).__name__}"
        )
    if isinstance(value, Iterator):  # checked without calling __iter__, which may start a pass
        raise ModelError(
            f"{where} is an iterator ({type(value).__name__}), which gives its batches once; pass a list of "
            "batches or a DataLoader, which can be read again every epoch"
        )
    return _Cycled(value, where)


class LoaderSampler:
    """A DataLoader, or any re-iterable of batches, as a problem's ``sampler(generator) -> batch``.

    Calling it with the run's generator returns the next batch.  For a DataLoader, fullcomp builds the
    batches itself from the loader's dataset, batch size, ``drop_last`` and ``collate_fn``, in the main
    process, in an order drawn from the run's generator (module docstring); the loader's own
    ``generator=``, ``num_workers`` and ``pin_memory`` are not used.  Every example is visited once per
    epoch (a ``RandomSampler(replacement=True)`` draws with replacement, as it would).  A re-iterable that is
    not a DataLoader (a list of batch tensors) is cycled in order; it must give the same batches on every
    pass, and in a distributed job each rank cycles its own (give it the rank's shard).

    Every fullcomp run resets the sampler (epoch 0) before its first draw and checkpoints its
    :meth:`state_dict`, so a seed reproduces the batches and a resumed run continues from the same place.

    Parameters
    ----------
    loaders : DataLoader, re-iterable of batches, or a list, tuple or dict of them
        One source of batches, or one per group (the stratified batch of Group DRO): the sampler then
        returns a tuple (for a list or tuple) or a dict (same keys) of one batch per group, each group
        in its own epochs.
    groups : bool, optional
        Whether ``loaders`` holds one source per group.  Default: a dict, or a list or tuple of
        DataLoaders, does; any other list is one re-iterable of batches.
    seed_transforms : bool, default True
        Build each DataLoader batch with torch's CPU generator, numpy's and Python's global generators
        seeded from the run's generator (and put back after), so that random transforms in the dataset's
        ``__getitem__`` or the ``collate_fn`` repeat with the seed.  Saving and restoring those generators
        costs about 0.1 to 0.2 ms a batch: pass False for a dataset that draws no random numbers.  A
        ``TensorDataset`` with the default collate is indexed at once and never seeded.

    Raises
    ------
    ModelError
        A loader whose order fullcomp cannot draw or restore: an ``IterableDataset``, a sampler or batch
        sampler other than ``RandomSampler``, ``SequentialSampler`` or a ``BatchSampler`` over them
        (``DistributedSampler`` included: the sampler shards by rank itself), a ``worker_init_fn`` (no
        worker is started), an iterator (read once), an empty dataset.  At a draw: a row ``__getitem__``
        cannot give (the index named, its error chained), rows ``collate_fn`` cannot combine (the two rows
        that differ named, with their shapes), a re-iterable whose pass gives another number of batches
        than the run's first pass.

    A checkpoint's fingerprint holds :meth:`fingerprint` (the dataset's lengths and ``Subset`` indices,
    the batching and order, a hash of up to 64 rows), so a resume with another dataset is refused.
    """

    def __init__(self, loaders: Any, *, groups: bool | None = None, seed_transforms: bool = True):
        if not isinstance(seed_transforms, bool):
            raise ModelError(f"seed_transforms must be True or False, got {seed_transforms!r}")
        if groups is None:
            groups = isinstance(loaders, Mapping) or (
                isinstance(loaders, (list, tuple))
                and len(loaders) > 0
                and all(isinstance(v, DataLoader) for v in loaders)
            )
        elif not isinstance(groups, bool):
            raise ModelError(f"groups must be True, False or None, got {groups!r}")
        if groups:
            if not isinstance(loaders, (Mapping, list, tuple)) or len(loaders) == 0:
                raise ModelError(
                    "groups=True needs a non-empty list, tuple or dict of loaders (one per group), got "
                    f"{type(loaders).__name__}"
                )
            self.keys: list | None = list(loaders) if isinstance(loaders, Mapping) else list(range(len(loaders)))
            self.as_dict = isinstance(loaders, Mapping)
            values = list(loaders.values()) if isinstance(loaders, Mapping) else list(loaders)
            self._sources = [
                _source(v, f"the loader of group {key!r}", seed_transforms) for key, v in zip(self.keys, values)
            ]
        else:
            self.keys, self.as_dict = None, False
            self._sources = [_source(loaders, "the loader", seed_transforms)]
        #: The tensors the batches come from (a TensorDataset's, a list's batches): what a checkpoint's data
        #: hash and the problem's dtype and device inference read.
        self.data = tuple(_data(s) for s in self._sources)

    def __call__(self, generator: torch.Generator | None = None) -> Any:
        batches = [s.draw(generator) for s in self._sources]
        if self.keys is None:
            return batches[0]
        return dict(zip(self.keys, batches)) if self.as_dict else tuple(batches)

    def reset(self) -> None:
        """Start over: epoch 0, position 0, and a new shuffle seed drawn from the next run's generator."""
        for s in self._sources:
            s.reset()

    def state_dict(self) -> dict:
        """Epoch, position in the epoch and shuffle seed of each group (ints, None before the first draw)."""
        return {"format": FORMAT, "groups": [s.state() for s in self._sources]}

    def load_state_dict(self, state: dict) -> None:
        """Go back to a place :meth:`state_dict` returned; a CheckpointError when it is another loader's."""
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise CheckpointError(f"not a LoaderSampler state (no {FORMAT!r} format); pass LoaderSampler.state_dict()")
        found = state.get("groups")
        if not isinstance(found, list) or len(found) != len(self._sources):
            count = len(found) if isinstance(found, list) else found
            raise CheckpointError(
                f"the loader state holds {count} groups, but this sampler has {len(self._sources)}; it is another "
                "sampler's"
            )
        keys = self.keys if self.keys is not None else [None]
        for source, saved, key in zip(self._sources, found, keys):
            source.load(saved, "the loader" if key is None else f"group {key!r}")

    def fingerprint(self) -> dict:
        """What a checkpoint's fingerprint holds of this sampler (plain data; a resume with a sampler whose
        fingerprint differs is refused, naming the differing key).

        For a DataLoader: its order (shuffled or sequential, with replacement, number of samples),
        ``batch_size``, ``drop_last``, ``collate_fn``, the dataset's type and length with every nested
        ``Subset``'s indices (hashed) and ``ConcatDataset``'s parts, and a hash of the rows at up to 64 fixed
        positions spread over the dataset (first and last included), read with ``__getitem__`` under a fixed
        seed.  For a re-iterable of batches: its type and length (None without ``__len__``); it is not iterated.
        """
        found = [s.fingerprint() for s in self._sources]
        if self.keys is None:
            return found[0]
        return {"groups": {k if isinstance(k, str) else repr(k): f for k, f in zip(self.keys, found)}}

    def batches_per_epoch(self) -> int | list[int]:
        """The number of batches of an epoch on this rank (one per group, for per-group loaders; None for a
        re-iterable whose length is unknown)."""
        here = distributed.world()
        counts = [
            s.batches_per_epoch(here)
            if isinstance(s, _Loaded)
            else (len(s.batches) if hasattr(s.batches, "__len__") else None)
            for s in self._sources
        ]
        return counts[0] if self.keys is None else counts

    def __repr__(self) -> str:
        kinds = ", ".join(s.kind for s in self._sources)
        return f"LoaderSampler({kinds})"


__all__ = ["LoaderSampler"]
