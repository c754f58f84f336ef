"""The tracked model z_k + V_k (x - y_k) of the inner map around y_k, shared by every composite method.

HMSFW, SCFW, PSG, prox-linear and LiNASA+ICG differ only in how they move the point; the sampling, the
Jacobian trackers (Polyak, STORM, Hessian-corrected), the value trackers (Taylor, Polyak), clipping and the
reuse of buffers live here once, on an :class:`~fullcomp.oracles.entries.EntryMap`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from fullcomp.autodiff import BatchJacobian, LazyJacobian, dense
from fullcomp.errors import OptionError, OracleError
from fullcomp.oracles.entries import EntryMap
from fullcomp.oracles.jacobian import InnerOracle
from fullcomp.oracles.rows import RowBuffers, RowsOracle
from fullcomp.persample import ALL_ROWS
from fullcomp.run.feed import Feed
from fullcomp.serial import encodable
from fullcomp.trackers import Revision, hessian_contraction, hessian_corrected, polyak, segment_point, storm, taylor

#: Jacobian trackers: Polyak momentum (Algorithm 1), STORM (Theorem 3), Hessian-corrected (Appendix N).
JACOBIAN_TRACKERS = ("polyak", "storm", "hessian")
#: Value trackers: Taylor (Variant II) and Polyak (Variant I).
VALUE_TRACKERS = ("taylor", "polyak")
#: TrackedModel's arguments take the names of the methods' options.
RENAMED = {"jacobian": "tracker", "value": "variant"}
#: Laws of the point w_k = y_{k-1} + alpha d_k of the Hessian correction, as Beta(a, b) shapes.
HESSIAN_POINTS = {"uniform": (1.0, 1.0), "beta": (0.5, 0.5)}
#: From this many entries of V on, the tracker keeps V y by its recursion (``Revision.image``): below, the
#: GLMO's own pass over V costs less than the recursion's products over the layers' outputs.
IMAGE_SIZE = 1 << 16


@encodable
@dataclass
class Tracked:
    """A state on the tracked model: the point ``y`` (in the entry map's layout), the Jacobian tracker ``V``
    (n x the entries read), the value tracker ``z`` (n), the tracker's :class:`Revision`, and ``sample``,
    f~(y) on the last fresh batch (an estimate no tracker extrapolates)."""

    y: torch.Tensor
    V: torch.Tensor
    z: torch.Tensor
    revision: Revision
    sample: torch.Tensor


State = TypeVar("State", bound=Tracked)


def evolve(state: State, **changes: Any) -> State:
    """A copy of a state with some fields changed: ``dataclasses.replace`` without its generic machinery,
    whose 8 us per call is a twentieth of a small problem's update."""
    new = object.__new__(type(state))
    new.__dict__.update(vars(state), **changes)
    return new


class TrackedModel:
    """Samples of the inner map at a point and the trackers' updates from them.

    Parameters
    ----------
    problem : CompositeProblem
    device, dtype : torch.device, torch.dtype
        Where the samples are taken, and in what precision.
    generator : torch.Generator
        The run's generator: every draw (batches, the Hessian tracker's point) comes from it.
    feed : Feed or None
        The run's feed (``run.feed``), whose generator is ``generator``: the batches are its draws, so that a
        batch given to ``fc.Stepper.step`` is every sample of that update.  None: the sampler's draws.
    layout : str
        The point's layout, "dense" or "kept" (see :class:`EntryMap`).
    tracker : str
        The Jacobian tracker, from :data:`JACOBIAN_TRACKERS` (the methods' option ``tracker``).
    variant : str
        The value tracker, from :data:`VALUE_TRACKERS` (HMSFW's option ``variant``).
    clip : float or None
        Rescale each sampled Jacobian to Frobenius norm at most ``clip`` (Clipped SCFW; Polyak tracker only).
    hessian_point : (a, b)
        The Beta law of the Hessian tracker's point on the last step.
    exact : bool
        Sample ``full_batch`` instead of drawing a batch (the deterministic method).
    in_place : bool
        Blend a factored Jacobian sample (fc.optim's layer factors) into the state's own V, where the run
        reads no state once its successor exists (``run.in_place``); otherwise into a spare buffer.
    factored : bool
        Where the Jacobian tracker takes a sample of layer factors whole (beta = 1, as SCFW's), keep it as a
        :class:`~fullcomp.layerwise.FactoredJacobian` instead of writing the (n, width) array: for a GLMO that
        reads such a V (``takes_factored``).
    image : bool
        Keep V y by its recursion (``Revision.image``, see :meth:`_image`) for a GLMO that reads it
        (``takes_image``).

    Notes
    -----
    On a problem declared with ``fc.PerSample`` (one loss per row of a data set) the model is index-based:
    the first sample is every row at y_0 (one pass over the data, in chunks of rows), then each
    update draws b rows and changes V and z on those rows only (:mod:`fullcomp.oracles.rows`): Polyak
    V_i <- (1 - beta) V_i + beta grad l_i(y), STORM on the same rows, and z_i by the Polyak value tracker;
    the Taylor value tracker moves every z_i by its row's prediction V_i (y_{k+1} - y_k) (one n x d product)
    before blending the sampled ones.  Rows not drawn are kept as they were, not re-estimated.  The
    Hessian tracker is refused (it needs the second derivative of the whole map).  ``sample`` holds each
    row's loss the last time it was drawn.
    """

    def __init__(
        self,
        problem: Any,
        device: Any,
        dtype: torch.dtype,
        generator: torch.Generator,
        layout: str = "dense",
        tracker: str = "polyak",
        variant: str = "taylor",
        clip: float | None = None,
        hessian_point: tuple[float, float] = (1.0, 1.0),
        exact: bool = False,
        feed: Feed | None = None,
        in_place: bool = False,
        factored: bool = False,
        image: bool = False,
        **renamed: Any,
    ):
        for old, new in RENAMED.items():
            if old in renamed:
                raise OptionError(f"TrackedModel has no argument {old!r}: it is named {new!r}, as the option")
        if renamed:
            raise TypeError(f"TrackedModel got unexpected arguments {', '.join(map(repr, renamed))}")
        for name, value, allowed in (("tracker", tracker, JACOBIAN_TRACKERS), ("variant", variant, VALUE_TRACKERS)):
            if value not in allowed:
                raise OptionError(f"TrackedModel: {name} must be one of {allowed}, got {value!r}")
        if clip is not None and tracker != "polyak":
            raise OptionError(
                "clip applies to the fresh sampled Jacobian of Clipped SCFW; use it with tracker='polyak'"
            )
        if feed is not None and feed.generator is not generator:
            raise OptionError("TrackedModel: feed draws with another generator than generator; pass run.feed")
        self.problem, self.dtype, self.generator = problem, dtype, generator
        self.feed = Feed(generator) if feed is None else feed
        self.tracker, self.variant, self.clip, self.exact = tracker, variant, clip, exact
        self.hessian_point, self.in_place, self.factored = hessian_point, in_place, factored
        self.keeps_image = image
        self.entries = EntryMap(problem, device, layout)
        self.per_sample = getattr(problem, "per_sample", None)
        self.oracle: Any
        if self.per_sample is not None:
            if tracker == "hessian":
                raise OptionError(
                    "tracker='hessian' differentiates the whole inner map twice, which a fc.PerSample problem "
                    "never forms; use tracker='polyak' or 'storm' (both update the sampled rows only)"
                )
            self.oracle = RowsOracle(self.per_sample, self.entries.shape, dtype)
            self._rows = {"V": RowBuffers(), "z": RowBuffers(), "sample": RowBuffers()}
        else:
            columns = "all" if problem.reads is None else "own" if problem.sharded else "touched"
            inner = problem.inner_declared if problem.touches is None else problem.inner_on_touched
            self.oracle = InnerOracle(
                inner, problem.n, self.entries.shape, device, dtype, columns=columns, touches=problem.touches
            )
        self._spare: list[torch.Tensor] = []  # V of the state before last, which no state holds now
        self._work: torch.Tensor | None = None  # y_k - y_{k-1} of the Taylor step

    def batch(self) -> Any:
        """The batch of one sample: ``full_batch`` for the exact method, else the feed's draw."""
        return self.problem.full_batch if self.exact else self.feed.draw(self.problem)

    def sample(self, y: torch.Tensor, k: int, batch: Any = None) -> tuple[torch.Tensor, Any]:
        """f~(y) and its Jacobian on the entries read, on ``batch`` (default: a fresh one), clipped.

        On a ``fc.PerSample`` problem: the values and Jacobian rows of the batch's rows (all n on the full
        batch); :meth:`sample_rows` also says which rows."""
        return self.sample_rows(y, k, batch)[:2]

    def sample_rows(self, y: torch.Tensor, k: int, batch: Any = None) -> tuple[torch.Tensor, Any, Any]:
        """:meth:`sample` with the rows it holds: the batch's row indices on a ``fc.PerSample`` problem
        (None: every row, or a map that is not per-sample)."""
        batch = self.batch() if batch is None else batch
        index = None
        if self.per_sample is not None:
            value, jac, index = self.oracle(self.entries.read(y), batch, k)
        else:
            value, jac = self.oracle(self.entries.read(y), batch, k)
        if self.clip is not None:
            jac = jac * torch.clamp(self.clip / self.entries.norm(jac).clamp_min(1e-300), max=1.0)
        return value, jac, index

    def value_at(self, y: torch.Tensor, batch: Any, where: str = "") -> torch.Tensor:
        """f~(y) on ``batch`` without a Jacobian."""
        return self.entries.call(self.entries.read(y), batch, self.dtype, where)

    def start(self, y: torch.Tensor) -> Tracked:
        """The model at y_0 from its first sample: V_0 and z_0 are the sample itself (every row of a
        ``fc.PerSample`` problem)."""
        value, jac = self.sample(y, 0, ALL_ROWS if self.per_sample is not None else None)
        return Tracked(y, dense(jac), value, Revision(0, image=self._image(jac, None, 1.0, None)), value)

    def advance(
        self,
        state: State,
        y_next: torch.Tensor,
        beta: float,
        rho: float,
        k: int,
        step_image: np.ndarray | None = None,
        **changes: Any,
    ) -> State:
        """The model at y_next = y_k: one sample there, V by the Jacobian tracker (beta), z by the value
        tracker (rho); the state's other fields are kept, or set to ``changes``.  ``step_image``: V_{k-1}
        (y_k - y_{k-1}) where the caller knows it (a Frank-Wolfe step's, from its GLMO's model), for the
        recursion of V y (see :meth:`_image`)."""
        if self.per_sample is not None:
            return evolve(state, **self._advance_rows(state, y_next, beta, rho, k), **changes)
        value, V, revision = self._track(state, y_next, beta, k, step_image)
        if self.variant == "taylor":
            read = self.entries.read
            if self._work is None:
                self._work = torch.empty_like(read(y_next))
            total = self.entries.total if self.entries.sharded else None
            z = taylor(state.z, V, read(y_next), read(state.y), value, rho, total, self._work)
        else:
            z = polyak(state.z, value, rho)
        return evolve(state, y=y_next, V=V, z=z, revision=revision, sample=value, **changes)

    def _track(
        self, state: Tracked, y_next: torch.Tensor, beta: float, k: int, step_image: np.ndarray | None = None
    ) -> tuple[Any, torch.Tensor, Revision]:
        """One sample at y_next; its value, the next Jacobian tracker and the tracker's revision."""
        V, y = state.V, state.y
        if self.tracker == "storm":  # both Jacobians on one batch: the difference sees one sample
            xi = self.batch()
            value, jac = self.sample(y_next, k, xi)
            jac_previous = self.sample(y, k, xi)[1]
            return value, storm(V, dense(jac), dense(jac_previous), beta), Revision(k)
        value, jac = self.sample(y_next, k)
        if self.tracker == "polyak":
            image = self._image(jac, state, beta, step_image)
            factored = self._factored(jac, y_next, beta)
            if factored is not None:
                return value, factored, Revision(k, image=image)
            if isinstance(V, LazyJacobian):  # a sample kept whole: written out, unless nothing of it is kept
                V = V.dense() if beta != 1 else V.at.new_empty(V.shape)
            if isinstance(jac, BatchJacobian):  # on the sampled columns only, into the spare buffer
                revision = Revision(k, state.revision.tag, 1 - beta, beta, jac)
                return value, polyak(V, jac, beta, out=self._buffer(V)), revision
            if isinstance(jac, LazyJacobian):  # blended from its factors into V itself or the spare buffer
                V = polyak(V, jac, beta, out=V if self.in_place else self._buffer(V))
                return value, V, Revision(k, image=image)
            return value, polyak(V, jac, beta, out=jac), Revision(k)  # jac is this step's own
        # The point's draw and the extra batch both come from the run's generator.
        generator = self.generator
        u = float(torch.rand((), generator=generator, dtype=torch.float64, device=generator.device))
        alpha, weight = segment_point(u, self.hessian_point)
        read = self.entries.read
        step = read(y_next) - read(y)
        correction = weight * self._contraction(read(y) + alpha * step, step, k)
        return value, hessian_corrected(V, dense(jac), correction, beta), Revision(k)

    def _image(self, jac: Any, state: Tracked | None, beta: float, step_image: np.ndarray | None) -> Any:
        """V_k y_k of the Polyak tracker V_k = (1 - beta) V_{k-1} + beta J by its recursion

            V_k y_k = (1 - beta) (V_{k-1} y_{k-1} + V_{k-1} (y_k - y_{k-1})) + beta J y_k,

        in float64, where J y_k comes from the layers' outputs (``at_sample`` of fc.optim's layer Jacobian) and
        the step's product is known (``step_image``; none is needed at beta = 1): a Frank-Wolfe step's GLMO has
        V_{k-1} x from its Gram matrices.  This saves the GLMO a pass over V (0.5 ms of 4 x 665,089).  None
        where a term is missing, V is small (:data:`IMAGE_SIZE`) or a rank's share."""
        at_sample = getattr(jac, "at_sample", None)
        if (
            not self.keeps_image
            or at_sample is None
            or self.entries.sharded
            or jac.shape[0] * jac.shape[1] < IMAGE_SIZE
        ):
            return None
        previous = None if state is None else state.revision.image
        if beta != 1 and (previous is None or step_image is None):
            return None
        sampled = at_sample().double()
        if beta == 1:
            return sampled
        step = torch.as_tensor(step_image, dtype=torch.float64, device=previous.device)
        return torch.lerp(previous + step, sampled, beta)

    def _factored(self, jac: Any, y_next: torch.Tensor, beta: float) -> Any:
        """The sample as its layers' factors, where the tracker keeps it whole (beta = 1) for a GLMO that reads
        them and some layer's factors are the cheaper; else None."""
        if beta != 1 or not self.factored or not hasattr(jac, "factored"):
            return None
        return jac.factored(self.entries.read(y_next))

    def _advance_rows(self, state: Tracked, y_next: torch.Tensor, beta: float, rho: float, k: int) -> dict:
        """The fields of the model at y_next on a ``fc.PerSample`` problem: V, z and sample changed on the
        drawn rows only (all of them on the full batch, by the dense rules), z moved by Taylor's prediction."""
        batch = self.batch()
        value, jac, index = self.sample_rows(y_next, k, batch)
        V, rows = state.V, self._rows
        if self.tracker == "storm":  # both Jacobians on one batch: the difference sees one sample
            before = self.sample_rows(state.y, k, batch)[1]
            fresh = storm(V if index is None else V.index_select(0, index), jac, before, beta)
        elif index is None:
            fresh = polyak(V, jac, beta, out=jac)
        else:
            fresh = torch.lerp(V.index_select(0, index), jac, beta)
        V = fresh if index is None else rows["V"].next(V, index).index_copy_(0, index, fresh)
        z = state.z
        if self.variant == "taylor":  # every row's prediction V_i (y_{k+1} - y_k); the drawn ones then blend
            z = z + V @ (self.entries.read(y_next) - self.entries.read(state.y))
        if index is None:
            return {"y": y_next, "V": V, "z": torch.lerp(z, value, rho), "revision": Revision(k), "sample": value}
        blended = torch.lerp(z.index_select(0, index), value, rho)
        z = (z if self.variant == "taylor" else rows["z"].next(z, index)).index_copy_(0, index, blended)
        sample = rows["sample"].next(state.sample, index).index_copy_(0, index, value)
        return {"y": y_next, "V": V, "z": z, "revision": Revision(k), "sample": sample}

    def _contraction(self, w: torch.Tensor, d: torch.Tensor, k: int) -> torch.Tensor:
        """H~(w; xi')[d] on a fresh batch xi', the Jacobian taken in the entries the map reads."""
        try:
            out = hessian_contraction(self.problem.inner, self.entries.shape, w, d, self.batch())
        except (RuntimeError, TypeError, ValueError, AttributeError, NotImplementedError) as exc:
            raise OracleError(
                f"tracker='hessian' differentiates inner(x, batch) twice (torch.func.jvp of jacrev) and this failed "
                f"at iteration {k}: {exc}. Use tracker='storm' for maps without forward-mode support"
            ) from exc
        if not torch.isfinite(out).all():
            raise OracleError(f"the Hessian contraction of inner(x, batch) has NaN or Inf entries at iteration {k}")
        return self.entries.rank_share(out.detach().to(self.dtype))

    def _buffer(self, V: torch.Tensor) -> torch.Tensor:
        """Where V_{k+1} goes when V_k is updated on a sparse sample's columns: a fresh (n, |reads|) array
        page-faults its way in (0.3 s at 10^7 entries), so two buffers take turns."""
        out = self._spare.pop() if self._spare else None
        if out is None or out is V:
            out = torch.empty_like(V)
        self._spare.append(V)
        return out


__all__ = ["TrackedModel", "Tracked", "evolve", "JACOBIAN_TRACKERS", "VALUE_TRACKERS", "HESSIAN_POINTS"]
