"""Derivatives of the user's torch maps, and the checks a problem runs on its maps once, when it is built.

The Jacobian is taken in reverse mode, by the autograd engine's backward passes.  No ``torch.func``
transform that differentiates is used on the way to a run's first update: functorch's ``grad``, ``vjp`` and
``jacrev`` import ``torch._dynamo`` on their first call, and its forward mode (``jvp``, like
``torch.autograd.forward_ad``) reaches decompositions that do too, about 1 to 2 s of a fresh process for a
map of 5 outputs whose first update otherwise takes 0.05 s.  Only ``torch.func.vmap`` is used, to batch the
engine's backward passes, and it imports nothing.

The problem declarations (:mod:`fullcomp.model`) and the oracles that evaluate them during a run
(:mod:`fullcomp.oracles`) both use this module, which uses neither.
"""

from __future__ import annotations

import inspect
import math
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import vmap

from fullcomp.errors import ModelError, OracleError
from fullcomp.grouped import Grouped
from fullcomp.serial import encodable


def all_finite(*tensors: torch.Tensor) -> bool:
    """Whether every entry of the tensors is finite, with one synchronisation.

    The tensors' sums are added and checked: a NaN or Inf entry makes the total non-finite, and no mask of
    a tensor's size is allocated (``torch.isfinite(t).all()`` on a 7 x 800,000 Jacobian cost 20 times the
    sum; on a small one its extra kernels cost 25 us a step).  Only a total that overflows (or is not
    finite) takes the elementwise check.
    """
    if not tensors:
        return True
    total = tensors[0].sum()
    for t in tensors[1:]:
        total = total + t.sum()
    return math.isfinite(float(total)) or all(bool(torch.isfinite(t).all()) for t in tensors)


def check_inner_output(out: Any, n: int, where: str) -> torch.Tensor:
    """Reject anything but a finite tensor of shape (n,), saying where it happened."""
    if not isinstance(out, torch.Tensor):
        raise OracleError(f"inner(x, batch) must return a torch.Tensor; it returned {type(out).__name__} {where}")
    if tuple(out.shape) != (n,):
        raise OracleError(
            f"inner(x, batch) returned shape {tuple(out.shape)} {where}, but the placeholder "
            f"fc.inner_value({n}) has shape ({n},); make them agree"
        )
    if out.device.type == "meta":
        raise OracleError(
            f"inner(x, batch) returned a tensor on the meta device {where}, which holds no values; compute it "
            "from x and the batch, on x's device"
        )
    if not torch.isfinite(out).all():
        raise OracleError(f"inner(x, batch) returned NaN or Inf {where}")
    return out


class LazyJacobian:
    """A sampled (n, width) Jacobian held in a cheaper form than its dense array: what the trackers take as
    such.  ``dense()`` writes the array; ``blend(previous, weight, out)`` writes (1 - weight) previous +
    weight J into ``out`` without the dense J (``out`` may be ``previous`` only where the subclass says so);
    ``norm()``, ``finite()`` and ``* factor`` are the array's."""

    shape: tuple[int, int]
    dtype: torch.dtype

    def dense(self) -> torch.Tensor:
        raise NotImplementedError

    def blend(self, previous: torch.Tensor, weight: float, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def norm(self) -> torch.Tensor:
        raise NotImplementedError

    def finite(self) -> bool:
        raise NotImplementedError


class LazyPoint:
    """A GLMO's point held in a cheaper form than its array, for the step that moves toward it to form:
    ``lerp(y, gamma)`` gives the flat y + gamma (x - y) without writing x, in ``dtype`` on ``device``;
    ``dense()`` writes x in the domain's shape."""

    dtype: torch.dtype
    device: torch.device

    def dense(self) -> torch.Tensor:
        raise NotImplementedError

    def lerp(self, y: torch.Tensor, gamma: float) -> torch.Tensor:
        raise NotImplementedError


@encodable
@dataclass
class BatchJacobian(LazyJacobian):
    """A sampled Jacobian that vanishes off the entries its batch touched: ``values`` (n, t) at the distinct,
    sorted ``columns`` (t,) of an (n, width) matrix.

    What the oracle returns for a map declared with ``touches=``: a batch of 7 x 1024 ratings touches 7,168 of
    8,000,000 entries, and the dense (n, width) array would cost more than the rest of the sample.
    """

    columns: torch.Tensor
    values: torch.Tensor
    width: int

    def dense(self) -> torch.Tensor:
        out = self.values.new_zeros(self.values.shape[0], self.width)
        return out.index_copy_(1, self.columns, self.values)

    def norm(self) -> torch.Tensor:
        """The Frobenius norm (the columns are distinct, so it is the dense matrix's)."""
        return torch.linalg.norm(self.values)

    def __mul__(self, factor: Any) -> BatchJacobian:
        return BatchJacobian(self.columns, self.values * factor, self.width)

    def finite(self) -> bool:
        return all_finite(self.values)

    @property
    def shape(self) -> tuple[int, int]:  # type: ignore[override]
        return (self.values.shape[0], self.width)

    @property
    def dtype(self) -> torch.dtype:  # type: ignore[override]
        return self.values.dtype

    def blend(self, previous: torch.Tensor, weight: float, out: torch.Tensor) -> torch.Tensor:
        """(1 - weight) previous + weight self, written into ``out`` (not ``previous``: states are not modified)."""
        torch.mul(previous, 1.0 - weight, out=out)
        return out.index_add_(1, self.columns, self.values, alpha=weight)


def dense(jacobian: torch.Tensor | LazyJacobian) -> torch.Tensor:
    """The (n, width) array of a sampled Jacobian, dense or not."""
    return jacobian.dense() if isinstance(jacobian, LazyJacobian) else jacobian


def check_touched(index: Any, width: int, where: str) -> torch.Tensor:
    """``touches(batch)`` must give a 1-D integer tensor of positions into the ``width`` entries read."""
    if not isinstance(index, torch.Tensor) or index.dtype.is_floating_point or index.dtype.is_complex:
        kind = index.dtype if isinstance(index, torch.Tensor) else type(index).__name__
        raise OracleError(f"touches(batch) must return an integer tensor of positions into reads; got {kind} {where}")
    if index.dim() != 1:
        raise OracleError(
            f"touches(batch) must return a 1-D tensor of positions into reads; got shape {tuple(index.shape)} {where}"
        )
    if index.numel() and bool((index.min() < 0) | (index.max() >= width)):
        raise OracleError(f"touches(batch) returned positions outside 0..{width - 1} (the reads) {where}")
    return index


#: How torch's allocators word running out of memory (CPU, CUDA, MPS).
OUT_OF_MEMORY = re.compile(r"out of memory|not enough memory|failed to allocate|can't allocate", re.IGNORECASE)


def graph_nodes(root: Any, inputs_of: Callable[[Any], Any] | None = None) -> Iterator[Any]:
    """The autograd nodes reachable from ``root`` (a ``grad_fn``), each once, without a backward pass.

    ``inputs_of(node)``, when it returns something other than None, gives the nodes to walk on from
    ``node`` instead of its own inputs (a layer call entered by its input, not its weights)."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        instead = None if inputs_of is None else inputs_of(node)
        stack.extend(instead if instead is not None else (n for n, _ in node.next_functions))


#: Up to this many outputs the Jacobian's rows come from plain backward passes, one after the other: for one
#: or two rows this is cheaper than vmapped ones (0.26 against 0.87 ms for a 200 x 500 least squares).  Above
#: it the passes run as one, vmapped over the rows of the identity (:func:`jacobian`), which for 7 to 500
#: outputs costs 1/2 to 1/20 of a loop over them (benchmarks/first_update.py prints both).
ROWS_BY_BACKWARD = 4


def gradient(output: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor | None, ...]:
    """The gradients of a one-element ``output`` in ``inputs`` (None for one it does not depend on), as
    ``torch.autograd.grad(output, inputs, allow_unused=True)`` gives them: the same seed of 1, straight into the
    autograd engine, without that call's checks (8 us and more an update)."""
    if ENGINE is None:
        return torch.autograd.grad(output, inputs, allow_unused=True)
    return ENGINE((output,), (torch.ones_like(output),), False, False, inputs, True, accumulate_grad=False)


def rows_by_backward(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(fn(x), its Jacobian) by one backward pass per output, flat in x."""
    value, jac, _ = jacobian(fn, x, batched=False)
    return value, jac


def jacobian(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batched: bool = True
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(fn(x), its Jacobian flat in x, whether the rows were batched), by reverse mode.

    One backward pass per output; with ``batched`` and more than :data:`ROWS_BY_BACKWARD` outputs, the
    passes run as one, ``torch.func.vmap`` over the engine's vector-Jacobian product seeded with the rows of
    the identity: what ``torch.func.jacrev`` computes (equal to its last bit on the maps measured), without
    its import of ``torch._dynamo``.  A map whose backward pass does not run under vmap (an operation
    without a batching rule that vmap cannot fall back on) gets its rows one at a time, and the third value
    is then False, so a caller asks for the loop next time.
    """
    if not torch.is_grad_enabled():  # checked first: entering the context costs as much as a small forward op
        with torch.enable_grad():
            return jacobian(fn, x, batched)
    point = x.detach().requires_grad_(True)
    out = fn(point)
    known = _known_jacobian(out, point)
    if known is not None:
        return out.detach(), known, batched
    if isinstance(out, Grouped):
        value, jac, batched = grouped_jacobian(out, (point,), batched)
        return value, jac, batched
    n = out.numel()
    if not out.requires_grad:  # a map constant in x (or one that detached it; the construction check catches that)
        return out, torch.zeros(n, point.numel(), dtype=out.dtype, device=out.device), batched
    if n == 1:
        (row,) = gradient(out, (point,))
        return out.detach(), (torch.zeros_like(point) if row is None else row).reshape(1, -1), batched
    if batched and n > ROWS_BY_BACKWARD:
        try:
            return out.detach(), _vmapped_rows(out, point).reshape(n, -1), True
        except Exception:  # noqa: BLE001  (vmap's refusals are RuntimeErrors, NotImplementedErrors, ...)
            batched = False  # the graph is retained: its rows one at a time, below (a map's own error recurs there)
    # Scalar outputs, not grad_outputs: torch's first call with grad_outputs imports sympy (0.5 s of set-up).
    flat = out.reshape(-1)
    rows = []
    for i in range(n):
        (row,) = torch.autograd.grad(flat[i], point, retain_graph=i + 1 < n, allow_unused=True)
        rows.append(torch.zeros_like(point) if row is None else row)
    return out.detach(), torch.stack(rows).reshape(n, -1), batched


#: The nodes through which an output may reach the point and keep the point's Jacobian: views of it.
_VIEWS = ("ViewBackward0", "ReshapeAliasBackward0", "UnsafeViewBackward0")


def _known_jacobian(out: Any, point: torch.Tensor) -> torch.Tensor | LazyJacobian | None:
    """The Jacobian a map computed itself and left on its output's node as ``jacobian`` (``fc.optim``'s
    closure map takes it with the values), when the node reads the point itself or a view of it: taken as it
    is, not by a backward pass per row through it."""
    node = getattr(out, "grad_fn", None)
    jac = getattr(node, "jacobian", None)
    if not isinstance(jac, (torch.Tensor, LazyJacobian)) or tuple(jac.shape) != (out.numel(), point.numel()):
        return None
    inputs = [n for n, _ in node.next_functions if n is not None]
    if len(inputs) != 1:
        return None
    source = inputs[0]
    if type(source).__name__ in _VIEWS:
        nested = [n for n, _ in source.next_functions if n is not None]
        source = nested[0] if len(nested) == 1 else None
    return jac if getattr(source, "variable", None) is point else None


def _vmapped_rows(out: torch.Tensor, point: torch.Tensor) -> torch.Tensor:
    """The rows e_i^T J of ``out``'s Jacobian in ``point``, all backward passes at once.

    The engine is called as ``torch.autograd.grad`` calls it (``_engine_run_backward``), not through
    ``torch.autograd.grad`` itself: that checks a tensor ``grad_outputs`` with torch's symbolic-shape module,
    whose first import (sympy) costs 0.3 s, and ``is_grads_batched=True`` does the same.  The graph is
    retained, so that a refusal of vmap leaves it to the loop.
    """
    basis = torch.eye(out.numel(), dtype=out.dtype, device=out.device).reshape(out.numel(), *out.shape)
    run = ENGINE

    def vjp(seed: torch.Tensor) -> torch.Tensor:
        if run is None:  # a torch without it: the public call (and its one-off import)
            (row,) = torch.autograd.grad(out, point, seed, retain_graph=True, allow_unused=True)
        else:
            (row,) = run((out,), (seed,), True, False, (point,), True, accumulate_grad=False)
        return torch.zeros_like(point) if row is None else row

    return vmap(vjp)(basis)


def grouped_jacobian(
    out: Grouped, inputs: tuple[torch.Tensor, ...], batched: bool = True
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(the group means, their Jacobian in ``inputs`` flattened and concatenated (m, sum of sizes), whether the
    rows were batched) of a :class:`~fullcomp.grouped.Grouped` output.

    One loss tensor per group: one backward pass per group, each seeded at that group's mean alone, so it runs
    through that group's sub-graph only and the m passes cost about one backward pass of the whole batch
    (benchmarks/grouped_jacobian.py measures it).  Per-row losses with their group index share the batch's
    graph, so each group's gradient is a pass over all of it: they are taken as a tensor of m values is
    (:func:`jacobian`'s rule: one by one up to :data:`ROWS_BY_BACKWARD` groups, vmapped above).  The
    gradients of an input a value does not depend on are zeros.
    """
    if out.by_sub_batch:
        means = [part.mean() for part in out.parts]
        rows = []
        for g, mean in enumerate(means):
            if not mean.requires_grad:
                rows.append(None)
                continue
            # Retained: the groups' graphs may share nodes upstream (the parameters' views, a shared encoder).
            rows.append(backward(mean, inputs, retain=g + 1 < len(means)))
        value = torch.stack([mean.detach() for mean in means])
        return value, _flat_rows(rows, inputs, value), batched
    values = out.values()
    if not values.requires_grad:
        return values.detach(), _flat_rows([None] * out.m, inputs, values), batched
    if batched and out.m > ROWS_BY_BACKWARD:
        try:
            seeds = torch.eye(out.m, dtype=values.dtype, device=values.device)
            grads = vmap(lambda seed: backward(values, inputs, retain=True, seed=seed))(seeds)
            flat = [
                torch.zeros(out.m, x.numel(), dtype=values.dtype, device=values.device)
                if g is None
                else g.reshape(out.m, -1)
                for x, g in zip(inputs, grads)
            ]
            return values.detach(), torch.cat(flat, dim=1), True
        except Exception:  # noqa: BLE001  (vmap's refusals are RuntimeErrors, NotImplementedErrors, ...)
            batched = False
    flat_values = values.reshape(-1)
    rows = [backward(flat_values[g], inputs, retain=g + 1 < out.m) for g in range(out.m)]
    return values.detach(), _flat_rows(rows, inputs, values), batched


def backward(
    output: torch.Tensor, inputs: tuple[torch.Tensor, ...], retain: bool, seed: torch.Tensor | None = None
) -> tuple[torch.Tensor | None, ...]:
    """The engine's backward pass from ``output`` (seeded with ``seed``, default 1) to ``inputs``."""
    seed = torch.ones_like(output) if seed is None else seed
    if ENGINE is None:
        return torch.autograd.grad(output, inputs, seed, retain_graph=retain, allow_unused=True)
    return ENGINE((output,), (seed,), retain, False, inputs, True, accumulate_grad=False)


def _flat_rows(
    rows: list[tuple[torch.Tensor | None, ...] | None], inputs: tuple[torch.Tensor, ...], like: torch.Tensor
) -> torch.Tensor:
    """The (m, sum of the inputs' sizes) Jacobian from each value's gradients (None: zeros), each row written
    once in place (no zero fill of the whole array, no stack of row copies: 4 x 665,089 entries a step)."""
    width = sum(x.numel() for x in inputs)
    out = torch.empty(len(rows), width, dtype=like.dtype, device=like.device)
    for g, grads in enumerate(rows):
        if grads is None:
            out[g].zero_()
            continue
        parts = [
            torch.zeros(x.numel(), dtype=like.dtype, device=like.device) if grad is None else grad.reshape(-1)
            for x, grad in zip(inputs, grads)
        ]
        torch.cat(parts, out=out[g])
    return out


def _engine_run_backward() -> Callable | None:
    """torch.autograd's entry to the engine, where this torch has it (2.3 and later)."""
    try:
        from torch.autograd.graph import _engine_run_backward as run
    except ImportError:
        return None
    return run


#: The engine's entry, looked up once (None on a torch without it: the public calls then).
ENGINE = _engine_run_backward()


# ---- checks run once while a problem is built ------------------------------------------------------

_ARITY = re.compile(r"positional argument|required .*argument|takes no arguments|unexpected keyword argument")


def _raised_by_the_call(exc: TypeError) -> bool:
    """True when a TypeError came from the call itself (bad arity), not from inside the callee's body."""
    tb = exc.__traceback__
    return tb is not None and tb.tb_next is None and bool(_ARITY.search(str(exc)))


def call_checked(fn: Callable, args: tuple, name: str, expected: str, hint: str = "") -> Any:
    """``fn(*args)``; a wrong signature raises ModelError naming ``expected``, the TypeError chained.

    The signature is checked with ``inspect.signature(fn).bind``; where Python knows none (some
    builtins), a TypeError raised by the call itself, not from inside ``fn``, counts as a wrong
    signature.  A TypeError from inside ``fn`` is the user's own and propagates unchanged.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(*args)
        except TypeError:
            pass  # call it to chain the TypeError the user would see (inspect may also be wrong)
        else:
            return fn(*args)
    try:
        return fn(*args)
    except TypeError as exc:
        if not _raised_by_the_call(exc):
            raise
        raise ModelError(
            f"{name} must have the signature {expected}; calling it with {len(args)} positional "
            f"argument{'s' if len(args) != 1 else ''} failed: {exc}{hint}"
        ) from exc


BREAKS_GRAPH = (
    "the map probably breaks the autodiff graph (.item(), float(...), numpy, .detach(), in-place ops on x); "
    "write it with torch operations on x only, or pass check_gradient=False if the map is deliberately "
    "non-differentiable there"
)

# (relative step, relative tolerance) per dtype; lower precisions are not checked.
_STEPS = {torch.float64: (1e-4, 1e-3), torch.float32: (3e-3, 5e-2)}


def _directional(fn: Callable, point: torch.Tensor, tangent: torch.Tensor) -> torch.Tensor:
    """J(point) @ tangent, J from the run's own backward passes (:func:`jacobian`, batched as a run batches
    them): what is checked is what the run will use."""
    try:
        _, jac, _ = jacobian(fn, point.clone())
    except Exception as exc:
        raise ModelError(
            f"inner(x, batch) fails under torch autodiff at a test point near x0 ({type(exc).__name__}: {exc}): "
            f"{BREAKS_GRAPH}"
        ) from exc
    return jac @ tangent.reshape(-1).to(jac.dtype)


def _transform_failure(fn: Callable, point: torch.Tensor) -> Exception | None:
    """The exception ``torch.func.jacrev`` raises on ``fn`` at ``point``, if any: its tensor wrappers refuse
    what plain autograd lets through unseen (numpy, data pointers), and say which operation it was.

    Asked only of a map the check is about to reject, so only such a map pays the transform's first-call
    import of ``torch._dynamo`` (1 to 2 s).
    """
    from torch.func import jacrev

    try:
        with warnings.catch_warnings():  # torch's first transform compiles its decompositions with a deprecated API
            warnings.filterwarnings("ignore", message=".*torch.jit.script.* is deprecated", category=DeprecationWarning)
            jacrev(fn)(point.clone())
    except Exception as exc:  # noqa: BLE001  (whatever it is, it is the message)
        return exc
    return None


def _finite_tensor(out: Any, like: torch.Tensor | None = None) -> bool:
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return False
    if like is not None and out.shape != like.shape:
        return False
    return bool(torch.isfinite(out).all())


def _trial(fn: Callable, point: torch.Tensor, direction: torch.Tensor, h: float, rtol: float) -> Any:
    """One central-difference comparison: True (agrees), None (cannot tell here) or (jd, fd) (disagrees)."""
    plus, minus = point + h * direction, point - h * direction
    tangent = (plus - minus) / (2 * h)  # the step actually taken, after rounding
    try:
        with torch.no_grad():
            f_plus, f_minus = fn(plus.clone()), fn(minus.clone())
    except Exception:
        return None  # the map is not defined there (it may only be defined on the domain)
    if not (_finite_tensor(f_plus) and _finite_tensor(f_minus, f_plus)):
        return None
    jd = _directional(fn, point, tangent)
    if not _finite_tensor(jd, f_plus):
        return None
    eps = max(torch.finfo(point.dtype).eps, torch.finfo(f_plus.dtype).eps)
    fd = ((f_plus - f_minus) / (2 * h)).double().reshape(-1)
    jd = jd.detach().double().reshape(-1)
    noise = 100 * eps * (float(f_plus.double().norm()) + float(f_minus.double().norm())) / (2 * h)
    gap = float((jd - fd).norm())
    if gap <= rtol * (float(jd.norm()) + float(fd.norm())) + noise + 1e-300:
        return True
    try:  # a map with its own randomness cannot be checked by differences
        with torch.no_grad():
            again = fn(plus.clone())
        if not torch.equal(again, f_plus):
            return True
    except Exception:
        return None
    return jd, fd


def check_directional_derivative(fn: Callable, start: torch.Tensor, scale: float, seed: int = 0) -> None:
    """Compare autodiff's directional derivative of ``fn`` with central differences near ``start``.

    ``fn(x) -> Tensor of shape (n,)`` with the batch bound.  The test point is ``start`` plus a random
    perturbation of entry size ``0.1 * scale``, the direction a random unit vector (a fixed seed, so
    the check is deterministic); the step is relative to the point's norm and suited to its dtype.
    A disagreement is retried with a smaller step and at a second point (a kink of max or abs may lie
    between the two evaluations); non-finite values or a map failing off the domain skip the point.
    Raises ModelError when autodiff and differences disagree everywhere they could be compared.
    """
    if start.dtype not in _STEPS or start.numel() == 0:
        return
    relative, rtol = _STEPS[start.dtype]
    generator = torch.Generator().manual_seed(seed)
    mismatch = None
    for attempt in range(3):
        if attempt < 2:
            noise = torch.randn(start.shape, generator=generator, dtype=torch.float64)
            point = (start.double() + 0.1 * scale * noise).to(start.dtype)
        elif mismatch is None:
            point = start.clone()  # every perturbed point was off the map's domain: try the start itself
        else:
            break
        direction = torch.randn(start.shape, generator=generator, dtype=torch.float64)
        direction = (direction / direction.norm()).to(start.dtype)
        size = float(point.double().norm())
        size = size if math.isfinite(size) and size > 0 else 1.0
        for step in (relative, relative / 10):
            outcome = _trial(fn, point, direction, step * size, rtol)
            if outcome is True:
                return
            if outcome is not None:
                mismatch = (*outcome, point)
    if mismatch is not None:
        jd, fd, point = mismatch
        failure = _transform_failure(fn, point)
        if failure is not None:  # the graph is broken where torch.func can say how
            raise ModelError(
                f"inner(x, batch) fails under torch.func autodiff at a test point near x0 "
                f"({type(failure).__name__}: {failure}): {BREAKS_GRAPH}"
            ) from failure
        i = int((jd - fd).abs().argmax())
        where = f"output {i}: " if jd.numel() > 1 else ""
        raise ModelError(
            "the Jacobian of inner(x, batch) from torch autodiff disagrees with finite differences "
            f"(directional derivative {where}{float(jd[i]):.6g} vs {float(fd[i]):.6g}): {BREAKS_GRAPH}"
        )
