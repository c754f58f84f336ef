"""The m group gradients of a group-balanced batch: declared with ``fc.Grouped`` against a tensor of m values.

Three ways a closure gives ``fc.optim.HMSFW`` the 4 group losses of a batch of 4 groups x 32 rows:

* ``tensor``: one forward pass of the 128 rows, the tensor of the 4 group means (the form without groups):
  4 backward passes, each over the whole batch's graph;
* ``rows``: the same forward pass, ``fc.Grouped(per_row_losses, groups, 4)``: through these row-wise layers
  one backward pass to the layers' outputs, then each group's weight gradients from its rows
  (fullcomp.layerwise);
* ``parts``: ``fc.Grouped([losses of group g's own 32 rows for g in range(4)])``, one forward pass per group:
  4 backward passes, each over its own 32 rows, about one backward pass of the batch.

Timed, interleaved round by round in one process on one thread: the closure's Jacobian alone (what the
optimizer's closure map computes per update), two routes fc.Grouped does not take (per-sample gradients by
``torch.func`` then a sum per group, which needs the network itself, not a closure; one backward pass batched
over the m one-hot weightings of the per-row losses, ``is_grads_batched=True``), the whole ``fc.optim.HMSFW``
update, and for scale a Group DRO step (one forward and backward pass of the batch, ``torch.optim.SGD``).
Ratios are medians of per-round ratios to ``tensor``.  Networks: the Colored-MNIST CNN of
benchmarks/network_overhead.py (3,641 weights) and an MLP 784-512-512-1 (665,089 weights) on 28 x 28 inputs.

    python benchmarks/grouped_jacobian.py --rounds 3 --steps 3   # about a minute on 2 cores
    python benchmarks/grouped_jacobian.py                        # 5 rounds of 5 updates
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import cvxpy as cp
import torch
from network_overhead import cnn  # the Colored-MNIST CNN (2 x 28 x 28 inputs)

import fullcomp as fc
from fullcomp.autodiff import grouped_jacobian
from fullcomp.layerwise import LayerGradients

GROUPS, PER_GROUP = 4, 32


def mlp() -> torch.nn.Module:
    """784-512-512-1 on 1 x 28 x 28 inputs: 665,089 weights."""
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(784, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 1),
    )


def row_losses(net: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.binary_cross_entropy_with_logits(net(X).reshape(-1), y, reduction="none")


def closures(net: torch.nn.Module, batch: tuple) -> dict[str, Callable[[], object]]:
    X, y, groups = batch  # rows of group g are those with groups == g, here in group order
    parts = [groups == g for g in range(GROUPS)]

    def tensor() -> torch.Tensor:
        losses = row_losses(net, X, y)
        return torch.stack([losses[mask].mean() for mask in parts])

    return {
        "tensor": tensor,
        "rows": lambda: fc.Grouped(row_losses(net, X, y), groups, GROUPS),
        "parts": lambda: fc.Grouped([row_losses(net, X[mask], y[mask]) for mask in parts]),
    }


def jacobian_of(closure: Callable[[], object], layers: LayerGradients) -> torch.Tensor:
    """The closure's m gradients as fc.optim's closure map takes them, written out as one (m, d) array: per-row
    losses layer by layer from one backward pass (fullcomp.layerwise; ``layers`` is kept from call to call, as
    the optimizer keeps it, so its one-time check of the rows runs once), one loss per group by its sub-batch's
    pass, a tensor by one backward pass per value."""
    params = tuple(layers.params)
    with layers.capture():
        out = closure()
    if isinstance(out, fc.Grouped):
        jac = layers.jacobian(out, params[0].dtype)
        return grouped_jacobian(out, params)[1] if jac is None else jac.dense()
    rows = []
    for i in range(out.numel()):
        grads = torch.autograd.grad(out[i], params, retain_graph=i + 1 < out.numel())
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


def group_dro_step(net: torch.nn.Module, opt: torch.optim.Optimizer, q: torch.Tensor, batch: tuple) -> None:
    """Sagawa et al.'s online Group DRO step: exponentiated-gradient group weights, one backward pass."""
    opt.zero_grad()
    losses = closures(net, batch)["tensor"]()
    with torch.no_grad():
        q.mul_(torch.exp(0.01 * losses)).div_(q.sum())
    (q @ losses).backward()
    opt.step()


def one_hot(groups: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """W (m, rows): W[g, i] = [groups_i = g] / n_g, so that W @ losses are the group means."""
    weights = torch.nn.functional.one_hot(groups, GROUPS).T.to(like.dtype)
    return weights / weights.sum(dim=1, keepdim=True)


def per_sample(net: torch.nn.Module, batch: tuple, params: tuple) -> torch.Tensor:
    """Route (a): every row's gradient by torch.func (vmap of grad), then W @ them: needs the network itself."""
    X, y, groups = batch
    named = {n: p.detach() for n, p in net.named_parameters()}

    def loss(weights: dict, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return row_losses(lambda inputs: torch.func.functional_call(net, weights, (inputs,)), x[None], target[None])[0]

    grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(named, X, y)
    flat = torch.cat([grads[n].reshape(X.shape[0], -1) for n in named], dim=1)
    return one_hot(groups, flat) @ flat


def batched_one_hot(net: torch.nn.Module, batch: tuple, params: tuple) -> torch.Tensor:
    """Route (c): one backward pass of the batch's graph, batched over the m one-hot weightings of its rows."""
    X, y, groups = batch
    losses = row_losses(net, X, y)
    grads = torch.autograd.grad(losses, params, one_hot(groups, losses), is_grads_batched=True)
    return torch.cat([g.reshape(GROUPS, -1) for g in grads], dim=1)


def batches(count: int, shape: tuple[int, ...], seed: int, rows: int = PER_GROUP) -> list[tuple]:
    """``count`` batches of ``rows`` rows a group, in group order."""
    gen = torch.Generator().manual_seed(seed)
    groups = torch.arange(GROUPS).repeat_interleave(rows)
    return [
        (
            torch.rand(GROUPS * rows, *shape, generator=gen),
            (torch.rand(groups.numel(), generator=gen) < 0.5).float(),
            groups,
        )
        for _ in range(count)
    ]


def run(name: str, build: Callable[[], torch.nn.Module], shape: tuple[int, ...], steps: int, rounds: int) -> dict:
    torch.manual_seed(0)
    template = build()
    domain = fc.layer_domains(template, "l2", factor=1.0)
    fc.make_feasible(template, domain)
    outer = cp.max(fc.inner_value(GROUPS))
    forms = ("tensor", "rows", "parts")
    routes = {"jacobian per-sample": per_sample, "jacobian one-hot": batched_one_hot}
    keys = [f"jacobian {f}" for f in forms] + [*routes] + [f"update {f}" for f in forms] + ["group dro step"]
    times: dict[str, list[float]] = {k: [] for k in keys}
    gap = 0.0
    for r in range(rounds):
        data = batches(steps + 1, shape, r)
        nets = {k: build() for k in keys}
        for net in nets.values():
            net.load_state_dict(template.state_dict())
        opts = {}
        for form in forms:  # set up and first update untimed
            net = nets[f"update {form}"]
            opts[form] = fc.optim.HMSFW(net.parameters(), outer, domain, first_step=1.0)
            opts[form].step(closures(net, data[0])[form])
        dro = nets["group dro step"]
        sgd = torch.optim.SGD(dro.parameters(), lr=0.01)
        q = torch.full((GROUPS,), 1.0 / GROUPS)

        contenders: dict[str, Callable[[tuple], object]] = {}
        for form in forms:
            net = nets[f"jacobian {form}"]
            layers = LayerGradients(list(net.parameters()))
            contenders[f"jacobian {form}"] = lambda b, net=net, layers=layers, form=form: jacobian_of(
                closures(net, b)[form], layers
            )
            net = nets[f"update {form}"]
            contenders[f"update {form}"] = lambda b, net=net, form=form, opt=opts[form]: opt.step(
                closures(net, b)[form]
            )
        for key, route in routes.items():
            net = nets[key]
            contenders[key] = functools.partial(route, net, params=tuple(net.parameters()))
        contenders["group dro step"] = functools.partial(group_dro_step, dro, sgd, q)
        group_dro_step(dro, sgd, q, data[0])  # its first step allocates the gradients: untimed, as the updates'
        for key, step in contenders.items():
            start = time.perf_counter()
            for b in data[1:]:
                step(b)
            times[key].append((time.perf_counter() - start) / steps)
        net = nets["jacobian tensor"]
        ref = jacobian_of(closures(net, data[0])["tensor"], LayerGradients(list(net.parameters())))
        for route in routes.values():
            gap = max(gap, float((route(net, data[0], tuple(net.parameters())) - ref).abs().max()))
        for form in ("rows", "parts"):
            other = jacobian_of(closures(net, data[0])[form], LayerGradients(list(net.parameters())))
            gap = max(gap, float((other - ref).abs().max()))
    size = sum(p.numel() for p in template.parameters())
    print(
        f"{name}: {size} weights, {GROUPS} groups x {PER_GROUP} rows, {steps} updates x {rounds} rounds, "
        f"{torch.get_num_threads()} torch thread(s)"
    )
    ratios = {}
    for key in keys:
        base = "jacobian tensor" if key.startswith("jacobian") else "update tensor"
        ratio = statistics.median(a / b for a, b in zip(times[key], times[base]))
        ratios[key] = ratio
        print(f"  {key:19s} {statistics.median(times[key]) * 1e3:8.2f} ms   {ratio:5.2f}x {base}")
    print(f"  largest |J - J_tensor| of the other forms and routes: {gap:.1e}")
    return ratios


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5, help="updates per round (default 5)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    return {
        "cnn": run("Colored-MNIST CNN", cnn, (2, 28, 28), args.steps, args.rounds),
        "mlp": run("MLP 784-512-512-1", mlp, (1, 28, 28), args.steps, args.rounds),
    }


if __name__ == "__main__":
    main()
