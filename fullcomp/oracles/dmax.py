"""The one gradient oracle of every method on a :class:`~fullcomp.model.dmax.DMaxProblem`.

SMAG, the DC baselines and the min-max baselines all need sampled
(sub)gradients of phi at one point (x, y) and of psi at another (x', z).
phi(x, y) + psi(x', z) separates across the blocks, so the gradient of the sum
with respect to each block is exactly the partial gradient a method needs: one
backward pass serves every method (SGD on
phi - psi passes the same x to both, SSDC the stage's anchor to psi, SMAG its
two proximal estimates).

The oracle also draws batches in the run's dtype and device, checks a step's
values with one synchronisation (an :class:`~fullcomp.errors.OracleError`
before a non-finite value spreads) and evaluates phi and psi exactly, without
gradients, for the rows and objectives the driver records outside optimizer time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from fullcomp import distributed
from fullcomp.autodiff import gradient
from fullcomp.errors import ModelError, OracleError
from fullcomp.model.dmax import DMaxProblem, Params, to_run

if TYPE_CHECKING:
    from fullcomp.run.options import RunOptions

#: Offset of the seed of the one fresh draw that stands in for the full batch of a problem without one.
REFERENCE_SEED = 2_000_003


@dataclass
class Sample:
    """Sampled values (0-d tensors, 0 where not asked for) and gradients (None where not asked for)."""

    phi: torch.Tensor
    psi: torch.Tensor
    phi_x: torch.Tensor | None = None  # d_x phi at phi's point
    phi_y: torch.Tensor | None = None  # d_y phi
    psi_x: torch.Tensor | None = None  # d_x psi at psi's point
    psi_z: torch.Tensor | None = None  # d_z psi


def _pair(point: Any) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    if point is None:
        return None
    return (point, None) if isinstance(point, torch.Tensor) else tuple(point)


def _view(params: Params | None, flat: torch.Tensor | None) -> Any:
    return None if params is None or flat is None else params.view(flat)


class DMaxOracle:
    """Sampled (sub)gradients and exact values of phi and psi of ``problem``, in ``run``'s dtype and device.

    ``method`` names the caller in error messages.  Points are flat vectors
    (``problem.x.flat``); a point of phi is ``x`` or ``(x, y)``, of psi ``x``
    or ``(x, z)``.
    """

    def __init__(self, problem: DMaxProblem, run: RunOptions, method: str):
        if not isinstance(problem, DMaxProblem):
            raise ModelError(f"{method} needs a fc.DMaxProblem, got {type(problem).__name__}")
        self.problem, self.method = problem, method
        self.dtype, self.device, self.seed, self.feed = run.dtype, run.device, run.seed, run.feed
        self._k: Any = 0  # the iteration being computed, for messages raised inside the transform
        self._exact: tuple | None = None
        self._reference: tuple | None = None
        self._parallel = run.world.parallel  # asked once: torch.distributed's query costs 14 us per step

    # -- points and batches ------------------------------------------------------------------------------

    def start(self) -> dict[str, torch.Tensor | None]:
        """x0, and y0, z0 projected onto Y, Z (None where absent), as flat vectors of the run."""
        p = self.problem
        y = None if p.y is None else self.project_y(p.y.flat(self.dtype, self.device))
        z = None if p.z is None else self.project_z(p.z.flat(self.dtype, self.device))
        return {"x": p.x.flat(self.dtype, self.device), "y": y, "z": z}

    def project_y(self, y: torch.Tensor | None) -> torch.Tensor | None:
        return _project(self.problem.Y, y)

    def project_z(self, z: torch.Tensor | None) -> torch.Tensor | None:
        return _project(self.problem.Z, z)

    def to_run(self, batch: Any, psi_batch: Any = None) -> tuple[Any, Any]:
        """(batch, psi_batch) moved to the run; psi_batch defaults to batch and stays the same object when shared."""
        moved = to_run(batch, self.dtype, self.device)
        if psi_batch is None or psi_batch is batch:
            return moved, moved
        return moved, to_run(psi_batch, self.dtype, self.device)

    def draw(self) -> tuple[Any, Any]:
        """The run's draw of the problem's sampler(s) (``full_batch`` without one), or the batches a stepper
        gave this update, moved to the run."""
        return self.to_run(*self.feed.draw(self.problem))

    @property
    def exact(self) -> bool:
        """Whether phi and psi can be evaluated exactly: full batches given, or a deterministic problem."""
        try:
            self.problem.exact_batches()
        except ModelError:
            return False
        return True

    def exact_batches(self) -> tuple[Any, Any]:
        """The batches on which phi and psi are exact, moved to the run once."""
        if self._exact is None:
            self._exact = self.to_run(*self.problem.exact_batches())
        return self._exact

    def reference_batches(self) -> tuple[Any, Any]:
        """The exact batches, or where the problem has none one fixed fresh draw.

        The draw has a generator of its own (seeded by the run's seed), so the
        run's stream, and a resumed run, stay untouched.
        """
        if self.exact:
            return self.exact_batches()
        if self._reference is None:
            p = self.problem
            batch, psi_batch = p.full_batch, p.psi_full_batch
            if psi_batch is None and not p.separate_samplers:
                psi_batch = batch
            if batch is None or psi_batch is None:
                drawn = p.sample(torch.Generator(device=self.device).manual_seed(self.seed + REFERENCE_SEED))
                batch = drawn[0] if batch is None else batch
                psi_batch = drawn[1] if psi_batch is None else psi_batch
            self._reference = self.to_run(batch, psi_batch)
        return self._reference

    # -- values and gradients ----------------------------------------------------------------------------

    def _scalar(self, out: Any, name: str) -> torch.Tensor:
        if not isinstance(out, torch.Tensor) or out.numel() != 1:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise OracleError(
                f"{self.method}: {name} returned {shape} {self._where()}; it must return a scalar "
                "(use .mean() or .sum())"
            )
        return out if out.dim() == 0 else out.reshape(())

    def _where(self) -> str:
        return f"at iteration {self._k}" if isinstance(self._k, int) else self._k

    def _terms(self, blocks: dict, batch: Any, psi_batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.problem
        phi = psi = None
        if "phi_x" in blocks:
            out = p.phi_value(p.x.view(blocks["phi_x"]), _view(p.y, blocks.get("phi_y")), batch)
            phi = self._scalar(out, "phi")
        if "psi_x" in blocks:
            out = p.psi_value(p.x.view(blocks["psi_x"]), _view(p.z, blocks.get("psi_z")), psi_batch)
            psi = self._scalar(out, "psi")
        zero = torch.zeros_like(phi if phi is not None else psi)
        return (zero if phi is None else phi), (zero if psi is None else psi)

    def _grad(self, blocks: dict, batch: Any, psi_batch: Any, held: tuple[str, ...] = ()) -> tuple[dict, tuple]:
        """The gradient of phi + psi in every block, by one plain backward pass.

        Plain autograd rather than torch.func's transform: the same gradients, and per call it costs less
        than the transform's wrapping (measured on the pAUC protocol's MLP: fullcomp's SGDA step went from
        2.0x to about the hand-written loop's time).
        """
        leaves = {name: v.detach().requires_grad_(True) for name, v in blocks.items() if name not in held}
        with torch.enable_grad():
            phi, psi = self._terms({n: leaves.get(n, v) for n, v in blocks.items()}, batch, psi_batch)
            # One term alone is its own total: no zero added, and one node less for the backward pass.
            total = phi + psi if "phi_x" in blocks and "psi_x" in blocks else (phi if "phi_x" in blocks else psi)
        if total.requires_grad:
            found = gradient(total, tuple(leaves.values()))
        else:  # phi and psi do not depend on the blocks
            found = [None] * len(leaves)
        grads = {name: torch.zeros_like(v) if g is None else g for (name, v), g in zip(leaves.items(), found)}
        return grads, (total.detach(), (phi.detach(), psi.detach()))

    def _blocks(self, phi_at: Any, psi_at: Any) -> dict[str, torch.Tensor]:
        blocks = {}
        for prefix, dual, point in (("phi", "y", _pair(phi_at)), ("psi", "z", _pair(psi_at))):
            if point is not None:
                blocks[f"{prefix}_x"] = point[0]
                if point[1] is not None:
                    blocks[f"{prefix}_{dual}"] = point[1]
        if not blocks:
            raise ValueError("give phi_at, psi_at or both")
        return blocks

    def gradients(
        self,
        k: int,
        batch: Any,
        psi_batch: Any = None,
        *,
        phi_at: Any = None,
        psi_at: Any = None,
        held: tuple[str, ...] = (),
    ) -> Sample:
        """Sampled phi at ``phi_at`` on ``batch``, psi at ``psi_at`` on ``psi_batch`` (default ``batch``),
        and their gradients in every block given, from one backward pass.

        The blocks named in ``held`` ("phi_y", "psi_z") enter as constants: no gradient (None), and no
        backward work through them, for a method that never moves them (SOPA's y)."""
        self._k = k
        psi_batch = batch if psi_batch is None else psi_batch
        grads, (_, (phi, psi)) = self._grad(self._blocks(phi_at, psi_at), batch, psi_batch, held)
        if self._parallel:  # the union of the ranks' batches, as DistributedDataParallel averages
            names = list(grads)
            phi, psi, *averaged = distributed.mean(phi, psi, *(grads[n] for n in names))
            grads = dict(zip(names, averaged))
        return Sample(phi, psi, grads.get("phi_x"), grads.get("phi_y"), grads.get("psi_x"), grads.get("psi_z"))

    def difference(self, k: int, batch: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled phi and psi at x (no y, z) on ``batch`` and the gradient of phi - psi there, by one backward
        pass through one leaf: the hand-written loop's work, 10% less than two blocks' gradients on the PU
        protocol's step.  It is d phi - d psi up to the order of the sum: where phi or psi reads an element
        more than once, autograd may interleave the two terms' parts (after 300 PU steps in float32 the
        iterates differ from the two-block difference by 3.6e-7, one unit in the last place)."""
        self._k = k
        leaf = x.detach().requires_grad_(True)
        with torch.enable_grad():
            phi, psi = self._terms({"phi_x": leaf, "psi_x": leaf}, batch, batch)
            gap = phi - psi
        (grad,) = gradient(gap, (leaf,)) if gap.requires_grad else (None,)
        grad = torch.zeros_like(leaf) if grad is None else grad
        phi, psi = phi.detach(), psi.detach()
        if self._parallel:
            phi, psi, grad = distributed.mean(phi, psi, grad)
        return phi, psi, grad

    def evaluate(
        self,
        batch: Any,
        psi_batch: Any = None,
        *,
        phi_at: Any = None,
        psi_at: Any = None,
        where: int | str = "evaluating phi and psi",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """phi at ``phi_at`` and psi at ``psi_at`` (0 where not given) as 0-d tensors, without gradients.

        ``where`` (an iteration, or a phrase such as "at the final state") is what a message says.
        """
        self._k = where
        with torch.no_grad():
            phi, psi = self._terms(self._blocks(phi_at, psi_at), batch, batch if psi_batch is None else psi_batch)
        return distributed.mean(phi, psi)  # each rank evaluated its shard

    def values(
        self, *batches: Any, phi_at: Any = None, psi_at: Any = None, where: int | str = "evaluating phi and psi"
    ) -> tuple[float, float]:
        """:meth:`evaluate` as floats (the exact evaluations of rows and objectives, outside optimizer time)."""
        phi, psi = self.evaluate(*batches, phi_at=phi_at, psi_at=psi_at, where=where)
        return float(phi), float(psi)

    def check(self, k: int, stats: dict[str, torch.Tensor | None], hint: str) -> list[float | None]:
        """The 0-d tensors of ``stats`` as floats, with one synchronisation (None stays None).

        Keys name what each is: "phi" and "psi" are the sampled values, any
        other key a phrase ("the x-gradient of phi") for the message.  A
        non-finite one raises an OracleError naming it, the iteration and
        ``hint`` (how to avoid it).
        """
        given = [v.detach() for v in stats.values() if v is not None]
        if self.device.type == "cpu":  # no synchronisation to save: a third of the stacked path's 40 us
            floats = iter([v.item() for v in given])
        else:
            floats = iter(torch.stack([v.reshape(()) for v in given]).tolist() if given else [])
        values = [None if v is None else next(floats) for v in stats.values()]
        for name, value in zip(stats, values):
            if value is not None and not math.isfinite(value):
                value_of = name in ("phi", "psi")
                what = f"{name} returned a non-finite value ({value})" if value_of else f"{name} is non-finite"
                raise OracleError(
                    f"{self.method}: {what} at iteration {k}; the run stopped and exc.result holds the last finite "
                    f"state. {hint}"
                )
        return values


def _project(domain: Any, v: torch.Tensor | None) -> torch.Tensor | None:
    if v is None or domain is None:
        return v
    return domain.project(v.view(domain.shape)).reshape(-1)


__all__ = ["DMaxOracle", "Sample", "REFERENCE_SEED"]
