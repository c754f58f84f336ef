"""The m group gradients of a network's per-row losses from one backward pass: :class:`LayerGradients`.

For a layer whose weight gradient is a sum over rows (``nn.Linear``, ``nn.Conv1d/2d/3d``), group g's gradient
is that sum over group g's rows: dW_g = sum over i in g of delta_i a_i^T, with a_i the layer's input and
delta_i the gradient of sum_g u_g in the layer's output at row i (the seed 1/n_g of row i's group makes it
u_g's own).  So one forward pass over the batch, one backward pass to the layers' outputs (no weight
gradients) and one small product per layer and group give the (m, d) Jacobian: the cost of a Group DRO step's
backward pass, where m backward passes over the batch's graph cost m times it.

It holds only where nothing mixes the rows between the layers and the losses (a batch norm in training mode,
``x - x.mean(0)``): checked once, at the first batch, by the backward pass of one row's loss, whose gradient
must vanish in every other row.  A parameter the graph reaches outside a captured layer call (a normalization
layer's, a weight used directly), an activation changed in place after a layer (``ReLU(inplace=True)``), or a
layer input whose rows are not the batch's: the caller's own per-group passes are taken instead, and the
structural ones switch this path off for good.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from fullcomp.autodiff import LazyJacobian, LazyPoint, all_finite, backward, graph_nodes
from fullcomp.grouped import Grouped
from fullcomp.serial import encodable

#: The layers whose weight gradient is a sum over the rows of their input, with the function giving it from
#: (input, weight's shape, output gradient) for a convolution.
CONV = {
    torch.nn.Conv1d: torch.nn.grad.conv1d_weight,
    torch.nn.Conv2d: torch.nn.grad.conv2d_weight,
    torch.nn.Conv3d: torch.nn.grad.conv3d_weight,
}


class _Call:
    """One captured layer call: the module, its input and output, and the output's autograd node and version
    when captured (an in-place change afterwards replaces the node: the output is then not the layer's)."""

    __slots__ = ("module", "input", "output", "node", "version")

    def __init__(self, module: torch.nn.Module, inp: torch.Tensor, output: torch.Tensor):
        self.module, self.input, self.output = module, inp, output
        self.node, self.version = output.grad_fn, output._version


class LayerGradients:
    """Group gradients layer by layer for the flat parameters ``params`` (their order is the Jacobian's)."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = params
        self.offsets, at = {}, 0
        for p in params:
            self.offsets[id(p)] = (at, p.numel())
            at += p.numel()
        self.width = at
        self.enabled = True
        self.rows_checked = False
        self.calls: list[_Call] = []
        self.indicators: dict[tuple, torch.Tensor] = {}  # see LayerJacobian._groups

    @contextmanager
    def capture(self) -> Iterator[None]:
        """Record, while the closure runs, every call of a supported layer whose weight is one of the params."""
        self.calls = []
        if not self.enabled:
            yield
            return

        def hook(module: torch.nn.Module, args: tuple, output: Any) -> None:
            if type(module) is torch.nn.Linear or (type(module) in CONV and _plain_padding(module)):
                weight = module.weight
                if id(weight) in self.offsets and args and isinstance(args[0], torch.Tensor):
                    if isinstance(output, torch.Tensor) and output.grad_fn is not None:
                        self.calls.append(_Call(module, args[0], output))

        handle = torch.nn.modules.module.register_module_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    def release(self) -> None:
        """Drop the captured calls (their inputs and outputs live as long as the graph otherwise would)."""
        self.calls = []

    def jacobian(self, out: Grouped, dtype: torch.dtype) -> LayerJacobian | None:
        """The (m, d) Jacobian of ``out``'s group means, as its layers' factors, or None where this path does
        not hold."""
        if not self.enabled or out.by_sub_batch or not self.calls or not out.losses.requires_grad:
            return None
        losses, rows = out.losses, out.losses.shape[0]
        calls = self.calls
        if any(c.input.shape[:1] != (rows,) or c.output.shape[:1] != (rows,) for c in calls):
            return None
        if any(c.output.grad_fn is not c.node or c.output._version != c.version for c in calls):
            self.enabled = False  # an in-place change after a layer: the same at every batch
            return None
        if not self._covered(losses, calls):
            self.enabled = False
            return None
        outputs = tuple(c.output for c in calls)
        if not self.rows_checked:
            if not self._rows_apart(losses, outputs):
                self.enabled = False
                return None
            self.rows_checked = True
        counts, groups = out.counts, out.groups
        seed = (1.0 / counts.to(losses.dtype))[groups]
        deltas = backward(losses, outputs, retain=False, seed=seed)
        bounds = [0, *torch.cumsum(counts, 0).tolist()]
        order = None if bool((groups[1:] >= groups[:-1]).all()) else torch.argsort(groups, stable=True)
        with torch.no_grad():  # each group's rows together: a slice of the batch (a copy only if unsorted)
            parts = [
                (call, *((t if order is None else t[order]).detach().to(dtype) for t in (call.input, delta)))
                for call, delta in zip(calls, deltas)
                if delta is not None
            ]
        return LayerJacobian(self, parts, bounds, dtype, order)

    def _covered(self, losses: torch.Tensor, calls: list[_Call]) -> bool:
        """Whether the losses reach the params only through the captured calls' weights and biases: a walk of
        the graph that enters each captured call by its input, never its parameters."""
        at_node = {id(c.node): c for c in calls}

        def inputs_of(node: Any) -> list | None:
            call = at_node.get(id(node))
            return None if call is None else [call.input.grad_fn]

        params = set(self.offsets)
        if any(id(c.input) in params for c in calls):  # a parameter fed to a layer as its input
            return False
        nodes = graph_nodes(losses.grad_fn, inputs_of)
        return not any(id(getattr(node, "variable", None)) in params for node in nodes)

    @staticmethod
    def _rows_apart(losses: torch.Tensor, outputs: tuple[torch.Tensor, ...]) -> bool:
        """Whether the first row's loss has no gradient in the other rows of any layer's output."""
        seed = torch.zeros_like(losses)
        seed[0] = 1.0
        for delta in backward(losses, outputs, retain=True, seed=seed):
            if delta is not None and bool(delta[1:].any()):
                return False
        return True


class LayerJacobian(LazyJacobian):
    """The (m, d) Jacobian of the group means held as its layers' factors (each call's input and output
    gradient, rows in group order): ``dense()`` writes it out, and ``blend`` writes the Polyak tracker's
    (1 - w) V + w J straight from the factors, one product per layer and group reading V's columns and writing
    the new tracker's, instead of writing J and then making a pass over both."""

    def __init__(
        self,
        layers: LayerGradients,
        parts: list[tuple],
        bounds: list[int],
        dtype: torch.dtype,
        order: torch.Tensor | None = None,
    ):
        self.layers, self.parts, self.order = layers, parts, order
        self.m = len(bounds) - 1
        self.slices = [slice(bounds[g], bounds[g + 1]) for g in range(self.m)]
        self.equal = len({bounds[g + 1] - bounds[g] for g in range(self.m)}) == 1
        self.shape = (self.m, layers.width)
        self.dtype = dtype
        self.device = layers.params[0].device

    def dense(self) -> torch.Tensor:
        out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        return self._write(out, None, 1.0)

    def blend(self, previous: torch.Tensor, weight: float, out: torch.Tensor) -> torch.Tensor:
        """(1 - weight) previous + weight J into ``out``, which may be ``previous`` itself: in place, each product
        reads and writes V's columns once (0.95 against 1.7 ms for a 4 x 512 x 784 layer, where a separate
        ``out`` is first a copy of ``previous``)."""
        return self._write(out, previous, weight)

    def norm(self) -> torch.Tensor:
        return torch.linalg.norm(self.dense())

    def __mul__(self, factor: Any) -> torch.Tensor:
        return self.dense() * factor

    def finite(self) -> bool:
        """Whether the factors are finite (J's entries are their products: an overflow there shows in V's
        Gram matrices, which the GLMO checks)."""
        return all_finite(*(t for _, a, delta in self.parts for t in (a, delta)))

    def to(self, dtype: torch.dtype) -> LazyJacobian | torch.Tensor:
        return self if dtype == self.dtype else self.dense().to(dtype)

    @torch.no_grad()
    def at_sample(self) -> torch.Tensor:
        """(m,): J theta at the parameters theta of the forward pass, from the layers' outputs, without a pass
        over J: a layer's output is linear in its weight and bias, so J_g . theta is the sum over group g's rows
        and the captured calls of delta_i . output_i (less delta_i . b where the bias is not one of the params)."""
        offsets = self.layers.offsets
        total = torch.zeros(self.slices[-1].stop, dtype=self.dtype, device=self.device)
        for call, _, delta in self.parts:
            output = call.output.detach()
            output = (output if self.order is None else output[self.order]).to(self.dtype)
            bias = call.module.bias
            if bias is not None and id(bias) not in offsets:
                channels = -1 if type(call.module) is torch.nn.Linear else 1
                shape = [1] * output.dim()
                shape[channels] = -1
                output = output - bias.detach().to(self.dtype).view(shape)
            total += (delta * output).reshape(delta.shape[0], -1).sum(1)
        if self.equal:
            return total.view(self.m, -1).sum(1)
        return torch.stack([total[rows].sum() for rows in self.slices])

    @torch.no_grad()
    def factored(self, at: torch.Tensor) -> FactoredJacobian | None:
        """This Jacobian as a :class:`FactoredJacobian` sampled at ``at`` (the flat point of the forward pass):
        an ``nn.Linear`` weight of more outputs and inputs than the rows its calls read together keeps those
        rows' factors; every other parameter is written out.  None where no weight is kept as factors (a network
        of convolutions and narrow layers): the array is the cheaper."""
        offsets = self.layers.offsets
        linear: dict[int, list | None] = {}  # a weight's nn.Linear calls; None: it is somewhere else too
        for call, a, delta in self.parts:
            module = call.module
            if module.bias is not None:
                linear[id(module.bias)] = None
            calls = linear.setdefault(id(module.weight), [])
            if type(module) is torch.nn.Linear and calls is not None:
                calls.append((call, a.reshape(-1, a.shape[-1]), delta.reshape(-1, delta.shape[-1])))
            else:
                linear[id(module.weight)] = None
        factored = {
            key: calls
            for key, calls in linear.items()
            if calls and key in offsets and sum(a.shape[0] for _, a, _ in calls) < min(calls[0][0].module.weight.shape)
        }
        if not factored:
            return None
        dense = self._dense_columns(set(factored))
        pieces: list[RowFactors | DenseColumns] = []
        for p in self.layers.params:
            start = offsets[id(p)][0]
            if id(p) not in factored:
                pieces.append(DenseColumns(start, dense[id(p)]))
                continue
            parts = [(delta, a, self._groups(a.shape[0])) for _, a, delta in factored[id(p)]]
            fields = ([part[i] for part in parts] for i in range(3))  # deltas, inputs, groups
            pieces.append(RowFactors(start, *(t[0] if len(t) == 1 else torch.cat(t) for t in fields)))
        return FactoredJacobian(self.m, self.layers.width, pieces, at)

    def _groups(self, rows: int) -> torch.Tensor:
        """(rows, m): the groups of a layer input's rows (the batch's, each repeated for the input's further
        dimensions), one-hot; kept on the layers for the next batches of these group sizes."""
        counts = tuple(s.stop - s.start for s in self.slices)
        key = (counts, rows, self.dtype, self.device)
        cache = self.layers.indicators
        if key not in cache:
            if len(cache) >= 8:  # batches of other group sizes (a data set's last batch) come and go
                cache.clear()
            group = torch.repeat_interleave(torch.arange(self.m), torch.tensor(counts))
            group = group.repeat_interleave(rows // sum(counts)).to(self.device)
            cache[key] = torch.nn.functional.one_hot(group, self.m).to(self.dtype)
        return cache[key]

    def _dense_columns(self, skip: set[int]) -> dict[int, torch.Tensor]:
        """(m, size) for every parameter not in ``skip``: its columns of J, written out (views of one buffer)."""
        kept = [p for p in self.layers.params if id(p) not in skip]
        buffer = torch.empty(self.m, sum(p.numel() for p in kept), dtype=self.dtype, device=self.device)
        columns, at = {}, 0
        for p in kept:
            columns[id(p)] = buffer[:, at : at + p.numel()]
            at += p.numel()
        self._write(buffer, None, 1.0, columns)
        return columns

    @torch.no_grad()
    def _write(
        self, out: torch.Tensor, previous: torch.Tensor | None, weight: float, columns: dict | None = None
    ) -> torch.Tensor:
        """Each group's gradient of each captured layer's weight and bias into their columns of ``out``, blended
        with ``previous`` (None: weight is 1); a layer called again in the same forward pass adds its share.
        ``columns`` (id -> (m, size) view): write those parameters only, each into its view."""
        offsets, written = self.layers.offsets, set()
        in_place = previous is out
        for call, a, delta in self.parts:
            module = call.module
            linear = type(module) is torch.nn.Linear
            if linear:  # rows of the batch times any further dimensions, as F.linear reads them
                a, delta = a.reshape(a.shape[0], -1, a.shape[-1]), delta.reshape(delta.shape[0], -1, delta.shape[-1])
            for p in (module.weight, module.bias):
                if p is None or id(p) not in (offsets if columns is None else columns):
                    continue
                start, size = offsets[id(p)]
                view = (out[:, start : start + size] if columns is None else columns[id(p)]).unflatten(1, p.shape)
                first = id(p) not in written
                if previous is None or not first:
                    before = None
                else:
                    before = view if in_place else previous[:, start : start + size].unflatten(1, p.shape)
                if linear and p is module.weight:
                    self._linear(view, before, first, weight, a, delta)
                    continue
                grads = self._bias(delta, linear) if p is module.bias else self._conv(module, a, delta)
                if not first:
                    view.add_(grads, alpha=weight)
                elif before is None:
                    view.copy_(grads)
                elif in_place:
                    view.lerp_(grads, weight)
                else:
                    torch.lerp(before, grads, weight, out=view)
            written.update(id(p) for p in (module.weight, module.bias) if p is not None and id(p) in offsets)
        for p in self.layers.params:  # reached by no captured call: a zero gradient
            if columns is not None:
                if id(p) in columns and id(p) not in written:
                    columns[id(p)].zero_()
            elif id(p) not in written:
                start, size = offsets[id(p)]
                if previous is None:
                    out[:, start : start + size].zero_()
                elif in_place:
                    out[:, start : start + size].mul_(1.0 - weight)
                else:
                    torch.mul(previous[:, start : start + size], 1.0 - weight, out=out[:, start : start + size])
        return out

    def _linear(
        self,
        view: torch.Tensor,
        before: torch.Tensor | None,
        first: bool,
        weight: float,
        a: torch.Tensor,
        delta: torch.Tensor,
    ) -> None:
        """Group g's weight gradient, the sum over its rows of delta_i a_i^T, blended into ``view[g]`` (``before``
        is ``view`` itself in place): one batched product for groups of equal size (a balanced batch), one
        product a group otherwise."""
        keep = 1.0 if not first else 1.0 - weight
        if self.equal:
            left, right = delta.reshape(self.m, -1, delta.shape[-1]).transpose(1, 2), a.reshape(self.m, -1, a.shape[-1])
            if first and before is None:
                torch.bmm(left, right, out=view)
            elif not first or before is view:
                view.baddbmm_(left, right, beta=keep, alpha=weight)
            else:
                torch.baddbmm(before, left, right, beta=keep, alpha=weight, out=view)
            return
        for g, rows in enumerate(self.slices):
            left, right = delta[rows].reshape(-1, delta.shape[-1]).T, a[rows].reshape(-1, a.shape[-1])
            if first and before is None:
                torch.mm(left, right, out=view[g])
            elif not first or before is view:
                view[g].addmm_(left, right, beta=keep, alpha=weight)
            else:
                torch.addmm(before[g], left, right, beta=keep, alpha=weight, out=view[g])

    def _bias(self, delta: torch.Tensor, linear: bool) -> torch.Tensor:
        """(m, channels): each group's bias gradient, the sum of delta over its rows and positions."""
        if self.equal:
            grouped = delta.reshape(self.m, -1, *delta.shape[1:])
            channel = grouped.dim() - 1 if linear else 2
            return grouped.sum([i for i in range(1, grouped.dim()) if i != channel])
        channel = delta.dim() - 1 if linear else 1
        dims = [i for i in range(delta.dim()) if i != channel]
        return torch.stack([delta[rows].sum(dims) for rows in self.slices])

    def _conv(self, module: torch.nn.Module, a: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """(m, *weight's shape): each group's convolution weight gradient from its rows."""
        grad = CONV[type(module)]
        shape, options = module.weight.shape, (module.stride, module.padding, module.dilation, module.groups)
        return torch.stack([grad(a[rows], shape, delta[rows], *options) for rows in self.slices])


@encodable
@dataclass
class RowFactors:
    """An ``nn.Linear`` weight's columns of a group Jacobian: group g's row is the flattened sum, over the rows
    i of the batch in group g, of delta_i a_i^T (``deltas`` (N, out), ``inputs`` (N, in), ``groups`` (N, m) the
    rows' groups, one-hot)."""

    start: int
    deltas: torch.Tensor
    inputs: torch.Tensor
    groups: torch.Tensor

    @property
    def stop(self) -> int:
        return self.start + self.deltas.shape[1] * self.inputs.shape[1]

    def gram(self) -> torch.Tensor:
        """(m, m): <J_g, J_h> = sum over i in g, j in h of (delta_i . delta_j)(a_i . a_j), by two N x N products
        (N^2 (out + in) multiplications, where writing the rows J_g out costs N out in)."""
        E = self.groups
        return E.T @ ((self.deltas @ self.deltas.T) * (self.inputs @ self.inputs.T)) @ E

    def times(self, w: torch.Tensor) -> torch.Tensor:
        """(m,): J_g . W for W = w's columns here, from W a_i for every row (one product)."""
        products = self.inputs @ w[self.start : self.stop].view(self.deltas.shape[1], -1).T
        return self.groups.T @ (self.deltas * products).sum(1)

    def combine(self, coefficients: torch.Tensor, out: torch.Tensor, y: torch.Tensor | None, gamma: float) -> None:
        """sum_g c_g J_g into ``out`` (out x in), by one product of the rows' factors; with ``y`` (this piece of
        the iterate), (1 - gamma) y + gamma sum_g c_g J_g, the same product."""
        left = (self.deltas * (self.groups @ coefficients)[:, None]).T
        if y is None:
            torch.mm(left, self.inputs, out=out)
        else:
            torch.addmm(y, left, self.inputs, beta=1.0 - gamma, alpha=gamma, out=out)

    def dense(self) -> torch.Tensor:
        """(m, out * in): each group's rows J_g, written out."""
        out = self.deltas.new_empty(self.groups.shape[1], self.stop - self.start)
        for g, weights in enumerate(self.groups.T):
            torch.mm((self.deltas * weights[:, None]).T, self.inputs, out=out[g].view(self.deltas.shape[1], -1))
        return out

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.deltas, self.inputs


@encodable
@dataclass
class DenseColumns:
    """A parameter's columns of a group Jacobian, written out: ``values`` (m, size) from column ``start``."""

    start: int
    values: torch.Tensor

    @property
    def stop(self) -> int:
        return self.start + self.values.shape[1]

    def gram(self) -> torch.Tensor:
        return self.values @ self.values.T

    def times(self, w: torch.Tensor) -> torch.Tensor:
        return self.values @ w[self.start : self.stop]

    def combine(self, coefficients: torch.Tensor, out: torch.Tensor, y: torch.Tensor | None, gamma: float) -> None:
        out = out.reshape(-1)
        torch.mv(self.values.T, coefficients, out=out)
        if y is not None:
            torch.lerp(y.reshape(-1), out, gamma, out=out)

    def dense(self) -> torch.Tensor:
        return self.values

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.values,)


@encodable
@dataclass
class FactoredJacobian(LazyJacobian):
    """An (m, width) Jacobian of group means kept as its parameters' pieces (:class:`RowFactors` for the low-rank
    weight gradients of ``nn.Linear`` layers, :class:`DenseColumns` for the rest), sampled at the point ``at``.

    What a tracker holds when it takes each update's sample whole (SCFW's beta = 1): the dual GLMO reads its
    blocks' Gram matrices and V y from the pieces (:meth:`grams`, ``@``) and returns its point as a
    :class:`FactoredPoint`, so that no (m, width) array is written.  Its tensors are a checkpoint's like any
    state's.  ``at`` is the state's point itself, which no step changes in place."""

    m: int
    width: int
    pieces: list
    at: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:  # type: ignore[override]
        return (self.m, self.width)

    @property
    def dtype(self) -> torch.dtype:  # type: ignore[override]
        return self.at.dtype

    def dense(self) -> torch.Tensor:
        out = self.at.new_empty(self.shape)
        for piece in self.pieces:
            out[:, piece.start : piece.stop] = piece.dense()
        return out

    def blend(self, previous: torch.Tensor, weight: float, out: torch.Tensor) -> torch.Tensor:
        return torch.lerp(previous, self.dense(), weight, out=out)

    def __matmul__(self, w: torch.Tensor) -> torch.Tensor:
        """J w for a flat w, one product a layer (at the sampled point, the tracker keeps J y from the layers'
        outputs instead: ``LayerJacobian.at_sample``)."""
        return sum(piece.times(w) for piece in self.pieces)

    def grams(self, slices: list[slice]) -> torch.Tensor | None:
        """(k, m, m): the Gram matrix of each block of columns, or None where a block splits a parameter."""
        out = self.at.new_zeros(len(slices), self.m, self.m)
        at = 0
        for b, block in enumerate(slices):
            if at == len(self.pieces) or self.pieces[at].start != block.start:
                return None
            while at < len(self.pieces) and self.pieces[at].stop <= block.stop:
                out[b] += self.pieces[at].gram()
                at += 1
            if self.pieces[at - 1].stop != block.stop:
                return None
        return out

    def norm(self) -> torch.Tensor:
        return torch.sqrt(sum(torch.trace(piece.gram()) for piece in self.pieces))

    def finite(self) -> bool:
        return all_finite(*(t for piece in self.pieces for t in piece.tensors()))

    def __mul__(self, factor: Any) -> torch.Tensor:
        return self.dense() * factor


class FactoredPoint(LazyPoint):
    """The flat point x with x_b = V_b^T a_b on each block b of columns, for V a :class:`FactoredJacobian`: the
    dual GLMO's point, kept as its coefficients (k, m) so that a Frank-Wolfe step forms y + gamma (x - y) by one
    product a layer (:meth:`lerp`) instead of writing x and then making a pass over both."""

    def __init__(self, V: FactoredJacobian, coefficients: torch.Tensor, slices: list[slice], shape: tuple):
        self.V, self.coefficients, self.slices, self.shape = V, coefficients, slices, shape
        self.dtype, self.device = V.dtype, V.at.device

    def dense(self) -> torch.Tensor:
        return self._write(None, 0.0).reshape(self.shape)

    def lerp(self, y: torch.Tensor, gamma: float) -> torch.Tensor:
        """y + gamma (x - y), flat, without x."""
        return self._write(y.reshape(-1), gamma)

    def _write(self, y: torch.Tensor | None, gamma: float) -> torch.Tensor:
        pieces, at = self.V.pieces, 0
        x = self.V.at.new_empty(self.V.width)
        for block, a in zip(self.slices, self.coefficients):
            while at < len(pieces) and pieces[at].stop <= block.stop:
                piece = pieces[at]
                part = slice(piece.start, piece.stop)
                view = x[part].view(-1, piece.inputs.shape[1]) if isinstance(piece, RowFactors) else x[part]
                y_part = None if y is None else y[part].view(view.shape)
                piece.combine(a, view, y_part, gamma)
                at += 1
        return x


def _plain_padding(conv: torch.nn.Module) -> bool:
    """Whether the convolution pads its input with zeros by numbers, as its weight-gradient function does: a
    "reflect" mode pads the input before the call, and "same" is a string that function does not take (such a
    layer is not captured, so its weight counts as reached outside the captured calls)."""
    return conv.padding_mode == "zeros" and not isinstance(conv.padding, str)


__all__ = ["LayerGradients", "LayerJacobian", "FactoredJacobian", "FactoredPoint", "RowFactors", "DenseColumns"]
