"""HMSFW's update on a network against a hand-written loop doing the same work, and per-epoch times against ERM
and Group DRO, all in one process.

The update of ``fc.optim.HMSFW`` (F = max of the 4 group losses, one l2 ball per layer, Polyak-tracked
Jacobian and Taylor-tracked values, the paper's schedule) against a floor written with torch alone: the same
4 backward passes on the same group-balanced batch, the same tracker updates, the same GLMO object (so the
floor pays the GLMO too: what is measured is fullcomp's orchestration), the same Frank-Wolfe step.  Two
networks: the Colored-MNIST CNN of the group-DRO protocol (2 x 28 x 28 inputs) and a wider MLP.  The
contenders alternate round by round; the ratios are medians of per-round ratios.

Also, on the same batches: an ERM step (one backward pass of the mean loss, ``torch.optim.SGD``) and a Group
DRO step (Sagawa et al. 2020: exponentiated-gradient group weights, one backward pass of the weighted loss),
reported per epoch of the same number of batches.

    python benchmarks/network_overhead.py            # about a minute on 2 cores
    python benchmarks/network_overhead.py --quick

Target: HMSFW's update at most 1.3 times the floor's.  Nothing is written to disk.
"""

from __future__ import annotations

import argparse
import statistics
import time

import cvxpy as cp
import numpy as np
import torch

import fullcomp as fc
from fullcomp.schedules import Schedule

TARGET = 1.3
GLMO_TOL = 1e-6  # both sides certify the GLMO to this gap
GROUPS, PER_GROUP = 4, 32


def cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(2, 8, 5, stride=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 5, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 1),
    )


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(2 * 28 * 28, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
    )


def group_batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A group-balanced batch: PER_GROUP images of each of the 4 groups (random pixels: only the cost matters)."""
    X = torch.rand(GROUPS, PER_GROUP, 2, 28, 28, generator=gen)
    y = (torch.rand(GROUPS, PER_GROUP, generator=gen) < 0.5).float()
    return X, y


def group_losses(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    X, y = batch
    logits = model(X.reshape(-1, 2, 28, 28)).reshape(GROUPS, PER_GROUP)
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none").mean(dim=1)


class Floor:
    """HMSFW Variant II by hand: V, z tracked; x = GLMO(z, V, y); y <- y + gamma (x - y); trackers at y."""

    def __init__(self, model: torch.nn.Module, domain: fc.Set, outer: cp.Expression, first: tuple):
        self.model, self.params = model, list(model.parameters())
        self.glmo = fc.build_glmo(outer, domain)
        self.schedule = Schedule.paper()
        self.y = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.z, self.V = self.sample(first)
        self.k = 0

    def sample(self, batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        out = group_losses(self.model, batch)
        rows = [
            torch.cat([g.reshape(-1) for g in torch.autograd.grad(out[i], self.params, retain_graph=i + 1 < GROUPS)])
            for i in range(GROUPS)
        ]
        return out.detach(), torch.stack(rows)

    def step(self, batch: tuple) -> None:
        gamma, beta, rho = self.schedule.at(self.k)
        y64 = self.y.double().numpy()
        res = self.glmo.solve(self.z.double().numpy(), self.V.double().numpy(), y64, tol=GLMO_TOL)
        y_next = torch.lerp(self.y, torch.as_tensor(res.x, dtype=self.y.dtype), gamma)
        with torch.no_grad():
            for p, part in zip(self.params, y_next.split([p.numel() for p in self.params])):
                p.copy_(part.view_as(p))
        value, jac = self.sample(batch)
        self.V = torch.lerp(self.V, jac, beta)
        self.z = (1 - rho) * (self.z + self.V @ (y_next - self.y)) + rho * value
        self.y, self.k = y_next, self.k + 1


def erm_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: tuple) -> None:
    opt.zero_grad()
    group_losses(model, batch).mean().backward()
    opt.step()


def group_dro_step(model: torch.nn.Module, opt: torch.optim.Optimizer, q: torch.Tensor, batch: tuple) -> None:
    opt.zero_grad()
    losses = group_losses(model, batch)
    with torch.no_grad():
        q.mul_(torch.exp(0.01 * losses)).div_(q.sum())
    (q @ losses).backward()
    opt.step()


def setup(models: dict, domain: fc.Set, outer: cp.Expression, first: tuple) -> tuple[dict, object, Floor]:
    """The four updates, each past its set-up and first step (not timed)."""
    net = models["fullcomp"]
    # The floor's GLMO: certified to the same tolerance, from the same first step (no line search).
    ours = fc.optim.HMSFW(net.parameters(), outer, domain, variant="taylor", glmo_tol=GLMO_TOL, first_step=1.0)
    ours.step(lambda: group_losses(net, first))
    floor = Floor(models["floor"], domain, outer, first)
    floor.step(first)
    sgd = torch.optim.SGD(models["erm"].parameters(), lr=0.01)
    dro_opt = torch.optim.SGD(models["group_dro"].parameters(), lr=0.01)
    q = torch.full((GROUPS,), 1.0 / GROUPS)
    erm_step(models["erm"], sgd, first)  # their first steps allocate the gradients: untimed, as the others'
    group_dro_step(models["group_dro"], dro_opt, q, first)
    contenders = {
        "fullcomp": lambda b: ours.step(lambda: group_losses(net, b)),
        "floor": floor.step,
        "erm": lambda b: erm_step(models["erm"], sgd, b),
        "group_dro": lambda b: group_dro_step(models["group_dro"], dro_opt, q, b),
    }
    return contenders, ours, floor


def run(name: str, build, steps: int, rounds: int) -> dict:
    torch.manual_seed(0)
    template = build()
    domain = fc.layer_domains(template, "l2", factor=3.0)
    fc.make_feasible(template, domain)
    outer = cp.max(fc.inner_value(GROUPS))
    size = sum(p.numel() for p in template.parameters())
    times: dict[str, list[float]] = {"fullcomp": [], "floor": [], "erm": [], "group_dro": []}
    final_gap = []
    for r in range(rounds):
        gen = torch.Generator().manual_seed(r)
        data = [group_batch(gen) for _ in range(steps + 1)]
        models = {k: build() for k in times}
        for m in models.values():
            m.load_state_dict(template.state_dict())
        contenders, ours, floor = setup(models, domain, outer, data[0])
        for key, step in contenders.items():
            start = time.perf_counter()
            for b in data[1:]:
                step(b)
            times[key].append((time.perf_counter() - start) / steps)
        ours_x = torch.cat([p.detach().reshape(-1) for p in models["fullcomp"].parameters()])
        final_gap.append(float((ours_x - floor.y).abs().max()))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = statistics.median(a / b for a, b in zip(times["fullcomp"], times["floor"]))
    print(
        f"{name}: {size} parameters, {GROUPS} groups x {PER_GROUP}, {steps} updates x {rounds} rounds, "
        f"{torch.get_num_threads()} torch threads"
    )
    for key, seconds in med.items():
        print(f"  {key:10s} {seconds * 1e3:8.2f} ms / update")
    print(f"  HMSFW / floor: {ratio:.2f}x (target {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})")
    erm, dro = med["fullcomp"] / med["erm"], med["fullcomp"] / med["group_dro"]
    print(f"  HMSFW / ERM: {erm:.2f}x, HMSFW / Group DRO: {dro:.2f}x (an epoch is the same number of updates)")
    print(f"  largest |x_fullcomp - x_floor| after the last update: {max(final_gap):.1e}")
    return {"ratio": ratio, **med, "difference": max(final_gap)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer updates and rounds")
    parser.add_argument("--steps", type=int, default=None, help="updates per round (default 30, quick 5)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5, quick 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    steps = args.steps or (5 if args.quick else 30)
    rounds = args.rounds or (2 if args.quick else 5)
    np.random.seed(0)
    return {"cnn": run("Colored-MNIST CNN", cnn, steps, rounds), "mlp": run("wider MLP", mlp, steps, rounds)}


if __name__ == "__main__":
    main()
