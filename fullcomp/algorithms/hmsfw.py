"""HMSFW: Hybrid Momentum Stochastic Frank-Wolfe (Algorithm 1 of the HMSFW paper)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fullcomp import distributed
from fullcomp.algorithms.method import Method, Plan, preset, register, solve
from fullcomp.algorithms.tracked import SCHEDULE, line_search, true_objective
from fullcomp.autodiff import check_inner_output
from fullcomp.errors import OptionError, OracleError
from fullcomp.glmo import build_glmo
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles import BatchJacobian, InnerOracle, dense
from fullcomp.run import Result, RunOptions
from fullcomp.schedules import HORIZON_SCHEDULES, Schedule, resolve
from fullcomp.sets.atoms import AtomicForm, Entries, combine
from fullcomp.trackers import (
    Revision,
    hessian_contraction,
    hessian_corrected,
    polyak,
    segment_point,
    storm,
    taylor,
)
from fullcomp.validation import BOOL, CALLABLE, NONE, Interval, Options, Pair, Param, positive

VARIANTS = {"taylor": "taylor", "ii": "taylor", "polyak": "polyak", "i": "polyak"}
#: Jacobian trackers: Polyak momentum (Algorithm 1), STORM (Theorem 3), Hessian-corrected (Appendix N).
TRACKERS = ("polyak", "storm", "hessian")
#: Laws of the point w_k = y_{k-1} + alpha d_k of the Hessian correction, as Beta(a, b) shapes.
HESSIAN_POINTS = {"uniform": (1.0, 1.0), "beta": (0.5, 0.5)}
#: Above this many entries the structured path does not rebuild the dense iterate.
MAX_DENSE = 50_000_000

_ORDER = Interval(float, 1, 2, "right")
PARAMS = (
    Param("variant", (Options(tuple(VARIANTS)),), "taylor", "value tracker: 'taylor' (Variant II) or 'polyak' (I)"),
    Param("exact", (BOOL,), False, "the deterministic method on full_batch with beta = rho = 1"),
    Param("glmo", (Options(("auto", "affine", "conic", "colgen")),), "auto", "GLMO route (see fc.build_glmo)"),
    Param(
        "glmo_tol",
        (positive(), CALLABLE, NONE),
        None,
        "certified GLMO tolerance, a number or k -> number; None: 0.01 |phi(y_0)| (k+2)^(-1/3) ((k+2)^-1 if exact)",
    ),
    Param("max_pricing", (positive(int), NONE), None, "cap on pricing calls per GLMO (the fixed-budget mode)"),
    Param("pool", (positive(int),), 30, "atoms kept warm between column-generation calls"),
    SCHEDULE,
    Param("clip", (positive(), NONE), None, "rescale each sampled Jacobian to Frobenius norm <= clip (Clipped SCFW)"),
    Param("tracker", (Options(TRACKERS),), "polyak", "Jacobian tracker: 'polyak', 'storm' or 'hessian'"),
    Param(
        "hessian_point",
        (Options(tuple(HESSIAN_POINTS)), Pair(Interval(float, 0, 1, "right"))),
        "uniform",
        "law of the Hessian tracker's point: 'uniform', 'beta' or a Beta shape (a, b), 0 < a, b <= 1",
    ),
    Param("r_f", (_ORDER, NONE), None, "moment order in (1, 2] of the value noise, read by theory schedules"),
    Param("r_g", (_ORDER, NONE), None, "moment order in (1, 2] of the Jacobian noise, read by theory schedules"),
    Param(
        "first_step",
        (Interval(float, 0, 1, "right"), Options(("auto",))),
        "auto",
        "gamma of the first step; 'auto': 1 from the default start, a line search on one batch from a warm start",
    ),
)


def form(state: dict) -> AtomicForm:
    """The state's atomic form; a checkpoint written before :class:`AtomicForm` holds [(atom, weight)]."""
    atoms = state["atoms"]
    if isinstance(atoms, AtomicForm):
        return atoms
    return AtomicForm([a for a, _ in atoms], np.array([w for _, w in atoms], dtype=np.float64))


def setup(problem: CompositeProblem, hp: dict, run: RunOptions) -> Plan:
    """HMSFW (Algorithm 1): x_k = GLMO(z_k, V_k, y_k); y_{k+1} = y_k + gamma_k (x_k - y_k); trackers at y_{k+1}."""
    value_tracker, tracker, exact, clip = VARIANTS[hp["variant"]], hp["tracker"], hp["exact"], hp["clip"]
    point_shape = HESSIAN_POINTS.get(hp["hessian_point"], hp["hessian_point"])
    if clip is not None and tracker != "polyak":
        raise OptionError("clip applies to the fresh sampled Jacobian of Clipped SCFW; use it with tracker='polyak'")
    schedule = hp["schedule"]
    iters = run.horizon if schedule in HORIZON_SCHEDULES else None
    sched = resolve(
        schedule, iters=iters, exact=exact, variant=value_tracker, tracker=tracker, r_f=hp["r_f"], r_g=hp["r_g"]
    )
    if exact and problem.stochastic and problem.full_batch is None:
        raise OptionError("exact=True on a stochastic problem needs CompositeProblem(full_batch=...) for the exact f")
    if exact and schedule is None:
        sched = Schedule.exact()
    glmo_tol, max_pricing, device, dtype, generator = (
        hp["glmo_tol"],
        hp["max_pricing"],
        run.device,
        run.dtype,
        run.generator,
    )

    domain, outer = problem.domain, problem.outer
    reads = problem.reads
    solver = build_glmo(outer, domain, route=hp["glmo"], pool=hp["pool"], device=device)
    if reads is None:
        # Dense path: the iterate is the whole point, the Jacobian is (n, d).
        kept, track, oracle = None, None, InnerOracle(problem.inner, outer.n, domain.shape, device, dtype)
        y0 = problem.x0.reshape(-1)
    else:
        # Structured path: the map reads x only at ``reads``, so the trackers live on those entries and
        # the iterate is kept only there and at ``track`` (evaluation entries); the dense point is
        # rebuilt from the atoms at the end.  A map declared on the entries a batch touches has sparse sampled
        # Jacobians: the tracker and the GLMO's pool images then move on those columns only.
        kept = problem.kept_entries
        track = Entries(kept.flat[len(reads) :], domain.shape) if len(kept) > len(reads) else None
        columns = "own" if problem.sharded else "touched"
        inner = problem.inner if problem.touches is None else problem.inner_on_touched
        oracle = InnerOracle(inner, outer.n, (len(reads),), device, dtype, columns=columns, touches=problem.touches)
        if problem.sharded:
            reads.check_blocks()
        y0 = problem.x0_at(kept)
    n_read = len(reads) if reads is not None else domain.size
    start_atom = None if reads is None else problem.start_atom()

    def batch() -> Any:
        return problem.full_batch if exact else problem.sample(generator)

    def numpy(t: torch.Tensor) -> np.ndarray:
        return t.detach().cpu().numpy().astype(np.float64, copy=False)

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=dtype, device=device)

    def sample_at(y: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        value, jac = oracle(y[:n_read], batch(), k)
        if clip is not None:
            # Clipped SCFW: rescale the stacked Jacobian to Frobenius norm at most ``clip`` (the whole
            # Jacobian's norm: on sharded entries, completed over the ranks).
            norm = jac.norm() if isinstance(jac, BatchJacobian) else torch.linalg.norm(jac)
            if problem.sharded:
                norm = reads.total(norm**2).sqrt()
            jac = jac * torch.clamp(clip / norm.clamp_min(1e-300), max=1.0)
        return value, jac

    point_shape_inner = (len(reads),) if reads is not None else domain.shape

    def contraction(w: torch.Tensor, d: torch.Tensor, k: int) -> torch.Tensor:
        """H~(w; xi')[d] on a fresh batch xi', the Jacobian taken w.r.t. the entries the map reads."""
        try:
            out = hessian_contraction(problem.inner, point_shape_inner, w, d, batch())
        except (RuntimeError, TypeError, ValueError, AttributeError, NotImplementedError) as exc:
            raise OracleError(
                f"tracker='hessian' differentiates inner(x, batch) twice (torch.func.jvp of jacrev) and this failed "
                f"at iteration {k}: {exc}. Use tracker='storm' for maps without forward-mode support"
            ) from exc
        if not torch.isfinite(out).all():
            raise OracleError(f"the Hessian contraction of inner(x, batch) has NaN or Inf entries at iteration {k}")
        if problem.sharded:  # the other ranks' contractions vanish on this rank's entries
            return out.detach().to(dtype) / distributed.world().size
        return distributed.mean(out.detach().to(dtype))[0]

    spare: list[torch.Tensor] = []  # the tracker buffer of the state before last, which no state holds now
    spare_y: list[torch.Tensor] = []  # the same for y on the structured path (y_0 may share the caller's x0)

    def buffer_for(V: torch.Tensor) -> torch.Tensor:
        """Where V_{k+1} goes when V_k is updated on a sparse sample's columns: a fresh (n, |reads|) array
        page-faults its way in (0.3 s at 10^7 entries), so two buffers take turns."""
        out = spare.pop() if spare else None
        if out is None or out is V:
            out = torch.empty_like(V)
        spare.append(V)
        return out

    def track_jacobian(state: dict, y_next: torch.Tensor, beta: float, k: int):
        """One sample at y_next; the value, the next Jacobian tracker V_k -> V_{k+1} and its revision."""
        V, y, revision = state["V"], state["y"], Revision(k)
        if tracker == "storm":
            # Both Jacobians on the same batch object: the STORM difference sees one sample.
            xi = batch()
            value, jac = oracle(y_next[:n_read], xi, k)
            _, jac_previous = oracle(y[:n_read], xi, k)
            return value, storm(V, dense(jac), dense(jac_previous), beta), revision
        value, jac = sample_at(y_next, k)
        if tracker == "polyak":
            if isinstance(jac, BatchJacobian):
                tag = state["revision"].tag
                return value, polyak(V, jac, beta, out=buffer_for(V)), Revision(k, tag, 1.0 - beta, beta, jac)
            return value, polyak(V, jac, beta, out=jac), revision  # jac is this step's own
        # Hessian correction: the point's draw and the extra batch both come from the run's generator.
        u = float(torch.rand((), generator=generator, dtype=torch.float64, device=generator.device))
        alpha, weight = segment_point(u, point_shape)
        step_read = y_next[:n_read] - y[:n_read]
        correction = weight * contraction(y[:n_read] + alpha * step_read, step_read, k)
        return value, hessian_corrected(V, dense(jac), correction, beta), revision

    # Initialization (the first sample at y_0) is set-up, not optimizer time, as in the paper's protocol.
    y0 = tensor(y0)
    work = torch.empty_like(y0[:n_read]) if value_tracker == "taylor" else None  # z's Taylor step, y_k - y_{k-1}
    value, jac = sample_at(y0, 0)
    # z_exact: z is f(y) on full_batch (the deterministic method while rho = 1), so phi(y) is F(z, y) and the
    # history's objective needs no evaluation of the map of its own
    # sample: f~(y_k) on the batch the trackers took at y_k, for an estimate of phi no tracker extrapolates
    state = {"y": y0, "V": dense(jac), "revision": Revision(0), "z": value, "start": 1.0, "z_exact": exact}
    state["sample"] = value
    state.update(atoms=AtomicForm(), shift=0.0)
    if hp["first_step"] != "auto":
        state["shift"] = 2.0 / hp["first_step"] - 2.0
    warm = hp["first_step"] == "auto" and problem.warm_start

    scale = abs(outer.value(numpy(value), problem.x0 if outer.depends_on_x else None)) or 1.0
    if glmo_tol is None and max_pricing is None:
        decay = 1.0 if exact else 1.0 / 3.0
        tolerance = lambda k: 0.01 * scale * (k + 2) ** (-decay)  # noqa: E731
    elif callable(glmo_tol):
        tolerance = glmo_tol
    else:
        tolerance = lambda k: glmo_tol  # noqa: E731

    def linear_model(state: dict, k: int) -> tuple[dict, Any]:
        """One GLMO on the tracked model z + V (x - y); the row describing y_k."""
        y, z = numpy(state["y"][:n_read]), numpy(state["z"])
        res = solver.solve(
            z,
            numpy(state["V"]),
            y,
            tol=tolerance(k),
            max_calls=max_pricing,
            entries=reads,
            start=start_atom,
            revision=state["revision"],
            track=track,
        )
        objective = outer.value(z, y)
        row = {
            "objective_estimate": objective,
            "gap_estimate": objective - res.value,
            "glmo_gap": res.gap_bound,
            "pricing_calls": res.calls,
            "glmo_converged": int(res.converged),
        }
        return row, res

    def value_at(point: torch.Tensor, batch: Any) -> torch.Tensor:
        """f~ at a point given by the entries the map reads (all of them on the dense path), without a Jacobian."""
        with torch.no_grad():
            out = problem.inner(point.reshape(domain.shape if kept is None else (n_read,)), batch)
        return distributed.mean(check_inner_output(out, outer.n, "in the warm start's line search").detach())[0]

    def warm_shift(y: torch.Tensor, x: torch.Tensor) -> float:
        """s with gamma(s) = gamma_0, the line search's first step from y toward the first GLMO point x.

        Later steps read the schedule at k + s (2/(k+2+s) for the paper's), so none is longer than the first.
        """
        return 2.0 / line_search(problem, value_at, lambda t: y + t * (x - y), generator) - 2.0

    def step(state: dict, k: int) -> tuple[dict, dict]:
        row, res = linear_model(state, k)
        gamma, beta, rho = sched.at(k)
        y = state["y"]
        if k == 0 and warm:
            first = tensor(res.x.reshape(-1)) if kept is None else tensor(res.x[:n_read])
            state = {**state, "shift": warm_shift(y[:n_read] if kept is not None else y, first)}
        if state["shift"]:
            gamma = sched.at(k + state["shift"])[0]
        row["gamma"] = gamma
        if kept is None:
            x, atoms = tensor(res.x.reshape(-1)), state["atoms"]
        else:
            x, atoms = tensor(res.x), form(state).blend(res.atoms, res.weights, gamma)  # x at the reads, then track
        # y + gamma (x - y) in one pass, into y_{k-1}'s array: no state holds it now, and a fresh one would
        # page-fault its way in at scale
        y_next = torch.lerp(y, x, gamma, out=spare_y.pop() if spare_y else None)
        if k and kept is not None:
            spare_y.append(y)
        value, V, revision = track_jacobian(state, y_next, beta, k + 1)
        if value_tracker == "taylor":
            total = None if reads is None else reads.total
            z = taylor(state["z"], V, y_next[:n_read], y[:n_read], value, rho, total, work)
        else:
            z = polyak(state["z"], value, rho)
        new = {**state, "y": y_next, "V": V, "revision": revision, "z": z, "atoms": atoms}
        new["start"], new["z_exact"] = state["start"] * (1 - gamma), exact and rho == 1
        new["sample"] = value
        return new, row

    def dense_point(state: dict) -> torch.Tensor | None:
        if kept is None:
            return state["y"].reshape(domain.shape)
        if domain.size > MAX_DENSE:
            return None
        pairs = form(state).pairs()
        atoms, weights = zip(*pairs) if pairs else ((), ())
        point = combine([problem.start_atom(), *atoms], [state["start"], *weights], domain.shape)
        return tensor(point)

    def finish(state: dict, history, info: dict) -> Result:
        return Result(
            dense_point(state),
            history,
            info,
            V=state["V"],
            z=state["z"],
            x_entries=state["y"],
            entries=kept,
            atoms=form(state).pairs(),
            x_start_weight=state["start"],
        )

    info = {
        "variant": value_tracker,
        "glmo_route": solver.route,
        "schedule": sched.name,
        "tracker": tracker,
    }

    def sampled_estimate(state: dict) -> dict:
        """F at the last fresh sample f~(y_k), beside the tracked estimate: on a map that is not affine the Taylor
        tracker's extrapolation can drift (below the losses' own floor, on a network), the sample cannot."""
        sample = state.get("sample")  # a checkpoint from before this column has none
        if sample is None or (outer.depends_on_x and kept is not None):  # no dense x to read F's x-terms at
            return {}
        x = numpy(state["y"]).reshape(domain.shape) if outer.depends_on_x else None
        return {"objective_sample": outer.value(numpy(sample), x)}

    return Plan(
        step,
        state,
        iterate=lambda s: s["y"] if kept is not None else s["y"].reshape(domain.shape),
        finish=finish,
        observe=lambda s, k: linear_model(s, k)[0],
        objective=true_objective(
            problem,
            lambda s: s["y"][:n_read],
            lambda s: numpy(s["y"]).reshape(domain.shape),
            known=lambda s: s["z"] if s.get("z_exact") else None,  # a checkpoint from before z_exact has none
        ),
        gap="gap_estimate",
        evaluate=sampled_estimate,
        components={"glmo": solver},
        sharded=problem.sharded,
        info=info,
        progress_key="gap_estimate",
    )


HMSFW = register(
    Method(
        "hmsfw",
        CompositeProblem,
        PARAMS,
        setup,
        "Hybrid Momentum Stochastic Frank-Wolfe (HMSFW paper, Algorithm 1)",
    )
)
preset(HMSFW, "hmsfw-ii", "HMSFW Variant II: Taylor value tracker", variant="taylor")
preset(HMSFW, "hmsfw-i", "HMSFW Variant I: Polyak value tracker", variant="polyak")
preset(HMSFW, "hmsfw-exact", "the deterministic Basic method on full_batch (beta = rho = 1)", exact=True)
preset(
    HMSFW,
    "scfw",
    "Vanilla SCFW: fresh minibatch values and Jacobians, gamma_k = 2/(k+2)",
    schedule="vanilla",
    exact=False,
)
register(
    Method(
        "clipped-scfw",
        CompositeProblem,
        tuple(Param("clip", (positive(),), doc=p.doc) if p.name == "clip" else p for p in PARAMS),
        setup,
        "Clipped SCFW: Vanilla SCFW with each sampled Jacobian rescaled to norm <= clip",
        {"schedule": "vanilla", "exact": False},
    )
)


def hmsfw(problem: CompositeProblem, **options: Any) -> Result:
    """Minimize F(f(x), x) over X with tracked values and Jacobians and a GLMO step (HMSFW, Algorithm 1).

    Each iteration k: x_k = GLMO(z_k, V_k, y_k); y_{k+1} = y_k + gamma_k (x_k - y_k);
    one sample at y_{k+1}; V_{k+1} by the Jacobian ``tracker`` (Polyak by default); z_{k+1} by the
    Taylor (Variant II, ``variant="taylor"``) or Polyak (Variant I, ``"polyak"``) value tracker.

    Hyperparameters (``fc.describe("hmsfw")`` lists them with their constraints): ``variant``,
    ``exact`` (``problem.full_batch`` with beta = rho = 1), ``glmo`` route, ``glmo_tol`` (default
    0.01 |phi(y_0)| (k+2)^(-1/3), and 0.01 |phi(y_0)| / (k+2) when ``exact``), ``max_pricing``
    (the fixed-budget mode; with ``glmo_tol`` unset only the cap stops pricing), ``pool``,
    ``schedule`` (None: the paper's; "exact", "theorem1", "theorem2", "theorem3", "constant",
    "doubling", a :class:`~fullcomp.schedules.Schedule` or k -> (gamma, beta, rho)), ``r_f``/``r_g``
    (moment orders read by the theory schedules), ``tracker`` ("polyak"; "storm": two Jacobians on
    one batch; "hessian": a Hessian-vector correction at a random point of the step, whose law is
    ``hessian_point``), ``clip`` (Clipped SCFW), and ``first_step``; the shared ``gap_tol`` stops at a
    gap estimate below it.

    Warm starts: from a start the user gave (``x0`` of the problem or of the run), gamma_0 is the
    best of 1, 1/2, ..., 2^-10 for phi on one batch (``full_batch`` when there is one: a line search
    of the first step; 2^-10 when none beats the start), and the schedule's gamma is read at k + s
    with gamma(s) = gamma_0, so a good start keeps its weight; from the default start gamma_0 = 1 as in
    the paper.  ``first_step=g`` fixes gamma_0 = g instead.

    History rows: ``objective_estimate`` = F(z_k, y_k), ``gap_estimate``, ``glmo_gap``,
    ``pricing_calls``, ``gamma``, and ``objective`` when the problem can compute phi (with ``exact=True``
    and rho = 1, z_k is f(y_k) on ``full_batch`` and ``objective`` equals ``objective_estimate``).  The result
    holds the trackers ``V`` and ``z``; with ``reads``, ``x_entries`` is the iterate at ``reads``
    followed by ``track`` (the ``x`` a callback sees), ``atoms`` its atomic form and ``x`` the dense
    point rebuilt from them (None above 5e7 entries).
    """
    return solve(problem, "hmsfw", **options)


def scfw(problem: CompositeProblem, *, clip: float | None = None, **options: Any) -> Result:
    """Vanilla (``clip=None``, method "scfw") or Clipped SCFW ("clipped-scfw"): HMSFW without tracking.

    Each update uses the fresh minibatch value and Jacobian (beta = rho = 1),
    the same certified GLMO and gamma_k = 2/(k+2); Clipped SCFW rescales the
    stacked Jacobian to Frobenius norm at most ``clip``.  ``options`` are those
    of :func:`hmsfw` but the schedule and ``exact``, which these methods fix.
    """
    if clip is None:
        return solve(problem, "scfw", **options)
    return solve(problem, "clipped-scfw", clip=clip, **options)
