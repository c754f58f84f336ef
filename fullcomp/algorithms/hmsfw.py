"""HMSFW: Hybrid Momentum Stochastic Frank-Wolfe (Algorithm 1 of the HMSFW paper)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fullcomp import steps
from fullcomp.algorithms.iterate import iterate
from fullcomp.algorithms.method import Method, Plan, preset, register, solve
from fullcomp.algorithms.tracked import TRACKING, line_search, numpy, schedule_of, tracked_model, true_objective
from fullcomp.errors import OptionError
from fullcomp.glmo import ROUTES, build_glmo
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles.tracked import Tracked
from fullcomp.run import Result, RunOptions
from fullcomp.serial import encodable
from fullcomp.sets.atoms import AtomicForm
from fullcomp.validation import BOOL, CALLABLE, NONE, Interval, Options, Param, positive

VARIANTS = {"taylor": "taylor", "ii": "taylor", "polyak": "polyak", "i": "polyak"}
_ORDER = Interval(float, 1, 2, "right")
PARAMS = (
    Param("variant", (Options(tuple(VARIANTS)),), "taylor", "value tracker: 'taylor' (Variant II) or 'polyak' (I)"),
    Param("exact", (BOOL,), False, "the deterministic method on full_batch with beta = rho = 1"),
    Param("glmo", (Options(ROUTES),), "auto", "GLMO route (see fc.build_glmo)"),
    Param(
        "glmo_tol",
        (positive(), CALLABLE, NONE),
        None,
        "certified GLMO tolerance, a number or k -> number; None: 0.01 |phi(y_0)| (k+2)^(-1/3) ((k+2)^-1 if exact)",
    ),
    Param("max_pricing", (positive(int), NONE), None, "cap on pricing calls per GLMO (the fixed-budget mode)"),
    Param("pool", (positive(int),), 30, "atoms kept warm between column-generation calls"),
    *TRACKING,
    Param("clip", (positive(), NONE), None, "rescale each sampled Jacobian to Frobenius norm <= clip (Clipped SCFW)"),
    Param("r_f", (_ORDER, NONE), None, "moment order in (1, 2] of the value noise, read by theory schedules"),
    Param("r_g", (_ORDER, NONE), None, "moment order in (1, 2] of the Jacobian noise, read by theory schedules"),
    Param(
        "first_step",
        (Interval(float, 0, 1, "right"), Options(("auto",))),
        "auto",
        "gamma of the first step; 'auto': 1 from the default start, a line search on one batch from a warm start",
    ),
)


@encodable
@dataclass
class HMSFWState(Tracked):
    """The tracked model at y_k, with y_k's atomic form, y_0's weight in it, the shift s the schedule is read at
    (k + s) and whether z_k is f(y_k) on ``full_batch`` (the exact method while rho = 1)."""

    atoms: AtomicForm
    start: float
    shift: float
    z_exact: bool


def setup(problem: CompositeProblem, hp: dict, run: RunOptions) -> Plan:
    """HMSFW (Algorithm 1): x_k = GLMO(z_k, V_k, y_k); y_{k+1} = y_k + gamma_k (x_k - y_k); trackers at y_{k+1}."""
    variant, exact, outer = VARIANTS[hp["variant"]], hp["exact"], problem.outer
    point = iterate(problem, run)
    model = tracked_model(problem, hp, run, layout=point.layout, value=variant, clip=hp["clip"], exact=exact)
    sched = schedule_of(hp, run, exact=exact, variant=variant, r_f=hp["r_f"], r_g=hp["r_g"])
    if exact and problem.stochastic and problem.full_batch is None:
        raise OptionError("exact=True on a stochastic problem needs CompositeProblem(full_batch=...) for the exact f")
    solver = build_glmo(outer, problem.domain, route=hp["glmo"], pool=hp["pool"], device=run.device)
    read = model.entries.read

    # Initialization (the first sample at y_0) is set-up, not optimizer time, as in the paper's protocol.
    shift = 0.0 if hp["first_step"] == "auto" else steps.shift(hp["first_step"])
    state = HMSFWState(**vars(model.start(point.start())), atoms=AtomicForm(), start=1.0, shift=shift, z_exact=exact)
    warm = hp["first_step"] == "auto" and problem.warm_start
    scale = abs(outer.value(numpy(state.z), problem.x0 if outer.depends_on_x else None)) or 1.0
    tolerance = glmo_tolerance(hp["glmo_tol"], hp["max_pricing"], scale, exact)

    def linear_model(state: HMSFWState, k: int) -> tuple[dict, Any]:
        """One GLMO on the tracked model z + V (x - y); the row describing y_k."""
        y, z = numpy(read(state.y)), numpy(state.z)
        res = solver.solve(z, numpy(state.V), y, tolerance(k), hp["max_pricing"], **point.glmo_arguments(state))
        objective = outer.value(z, y)
        gaps = {"gap_estimate": objective - res.value, "glmo_gap": res.gap_bound, "pricing_calls": res.calls}
        return {"objective_estimate": objective, **gaps, "glmo_converged": int(res.converged)}, res

    def warm_shift(y: Any, x: Any) -> float:
        """s with gamma(s) = gamma_0, the line search's first step from y toward the first GLMO point x.
        Later steps read the schedule at k + s (2/(k+2+s) for the paper's), so none is longer than the first."""
        y, x = read(y), read(x)
        return steps.shift(line_search(problem, model, lambda t: y + t * (x - y)))

    def step(state: HMSFWState, k: int) -> tuple[HMSFWState, dict]:
        row, res = linear_model(state, k)  # x_k = GLMO(z_k, V_k, y_k)
        if k == 0 and warm:
            state = replace(state, shift=warm_shift(state.y, point.toward(res)))
        gamma, beta, rho = sched.at(k)
        gamma = sched.step_size(k + state.shift) if state.shift else gamma
        y, atoms = point.move(state.y, state.atoms, res, gamma, k)  # y_{k+1} = y_k + gamma_k (x_k - y_k)
        moved = {"atoms": atoms, "start": state.start * (1 - gamma), "z_exact": exact and rho == 1}
        new = model.advance(state, y, beta, rho, k + 1, **moved)  # V_{k+1}, z_{k+1} from one sample at y_{k+1}
        return new, {**row, "gamma": gamma}

    def x_of(state: HMSFWState) -> Any:
        """The dense point as numpy, when F reads it."""
        return numpy(point.dense(state.y, state.atoms, state.start)) if outer.depends_on_x else None

    def finish(state: HMSFWState, history: Any, info: dict) -> Result:
        x = point.dense(state.y, state.atoms, state.start)
        atomic = {"entries": point.kept, "atoms": state.atoms.pairs(), "x_start_weight": state.start}
        return Result(x, history, info, V=state.V, z=state.z, x_entries=state.y, **atomic)

    return Plan(
        step,
        state,
        iterate=lambda s: point.view(s.y),
        finish=finish,
        observe=lambda s, k: linear_model(s, k)[0],
        objective=true_objective(problem, model, lambda s: s.y, x_of, known=lambda s: s.z if s.z_exact else None),
        gap="gap_estimate",
        # F at the last fresh sample beside the tracked estimate: on a map that is not affine the Taylor
        # tracker's extrapolation can drift (below the losses' own floor, on a network), the sample cannot.
        evaluate=lambda s: {"objective_sample": outer.value(numpy(s.sample), x_of(s))},
        components={"glmo": solver},
        sharded=problem.sharded,
        info={"variant": variant, "glmo_route": solver.route, "schedule": sched.name, "tracker": hp["tracker"]},
        progress_key="gap_estimate",
    )


def glmo_tolerance(glmo_tol: Any, max_pricing: int | None, scale: float, exact: bool) -> Any:
    """k -> the GLMO's certified tolerance: ``glmo_tol`` (a number or a function of k), or by default
    0.01 |phi(y_0)| (k+2)^(-1/3) (exact: (k+2)^(-1)); None when only ``max_pricing`` stops pricing."""
    if callable(glmo_tol):
        return glmo_tol
    if glmo_tol is not None or max_pricing is not None:
        return lambda k: glmo_tol
    decay = 1.0 if exact else 1.0 / 3.0
    return lambda k: 0.01 * scale * (k + 2) ** (-decay)


NAME = "Hybrid Momentum Stochastic Frank-Wolfe (HMSFW paper, Algorithm 1)"
HMSFW = register(Method("hmsfw", CompositeProblem, PARAMS, setup, NAME))
preset(HMSFW, "hmsfw-ii", "HMSFW Variant II: Taylor value tracker", variant="taylor")
preset(HMSFW, "hmsfw-i", "HMSFW Variant I: Polyak value tracker", variant="polyak")
preset(HMSFW, "hmsfw-exact", "the deterministic Basic method on full_batch (beta = rho = 1)", exact=True)
SCFW = "Vanilla SCFW: fresh minibatch values and Jacobians, gamma_k = 2/(k+2)"
preset(HMSFW, "scfw", SCFW, schedule="vanilla", exact=False)
CLIPPED = tuple(Param("clip", (positive(),), doc=p.doc) if p.name == "clip" else p for p in PARAMS)
register(
    Method(
        "clipped-scfw",
        CompositeProblem,
        CLIPPED,
        setup,
        "Clipped SCFW: Vanilla SCFW with each sampled Jacobian rescaled to norm <= clip",
        {"schedule": "vanilla", "exact": False},
    )
)


def hmsfw(problem: CompositeProblem, **options: Any) -> Result:
    """Minimize F(f(x), x) over X with tracked values and Jacobians and a GLMO step (HMSFW, Algorithm 1).

    Each iteration k: x_k = GLMO(z_k, V_k, y_k); y_{k+1} = y_k + gamma_k (x_k - y_k); one sample at y_{k+1};
    V_{k+1} by the Jacobian ``tracker`` (Polyak by default; "storm": two Jacobians on one batch; "hessian": a
    Hessian-vector correction at a random point of the step, whose law is ``hessian_point``); z_{k+1} by the
    Taylor (Variant II, ``variant="taylor"``) or Polyak (Variant I) value tracker.  ``fc.describe("hmsfw")``
    lists every hyperparameter with its constraints; the shared ``gap_tol`` stops at a gap estimate below it.

    Warm starts: from a start the user gave, gamma_0 is the best of 1, 1/2, ..., 2^-10 for phi on one batch
    (``full_batch`` when there is one), and the schedule's gamma is read at k + s with gamma(s) = gamma_0, so a
    good start keeps its weight; from the default start gamma_0 = 1 as in the paper.  ``first_step=g`` fixes
    gamma_0 = g instead.

    History rows: ``objective_estimate`` = F(z_k, y_k), ``gap_estimate``, ``glmo_gap``, ``pricing_calls``,
    ``gamma``, and ``objective`` when the problem can compute phi.  The result holds the trackers ``V`` and
    ``z``; with ``reads``, ``x_entries`` is the iterate at ``reads`` followed by ``track`` (the ``x`` a callback
    sees), ``atoms`` its atomic form and ``x`` the dense point rebuilt from them (None above 5e7 entries).
    """
    return solve(problem, "hmsfw", **options)


def scfw(problem: CompositeProblem, *, clip: float | None = None, **options: Any) -> Result:
    """Vanilla (``clip=None``, method "scfw") or Clipped SCFW ("clipped-scfw"): HMSFW without tracking.

    Each update uses the fresh minibatch value and Jacobian (beta = rho = 1), the same certified GLMO and
    gamma_k = 2/(k+2); Clipped SCFW rescales the stacked Jacobian to Frobenius norm at most ``clip``.
    """
    if clip is None:
        return solve(problem, "scfw", **options)
    return solve(problem, "clipped-scfw", clip=clip, **options)
