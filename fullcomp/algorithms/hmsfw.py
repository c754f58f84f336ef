"""HMSFW: Hybrid Momentum Stochastic Frank-Wolfe (Algorithm 1 of the HMSFW paper)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fullcomp import steps
from fullcomp.algorithms.iterate import iterate
from fullcomp.algorithms.method import Method, Plan, preset, register, solve
from fullcomp.algorithms.tracked import TRACKING, TrackedReadout, line_search, numpy, schedule_of, tracked_model
from fullcomp.autodiff import dense
from fullcomp.errors import OptionError
from fullcomp.glmo import ROUTES, build_glmo
from fullcomp.model.composite import CompositeProblem
from fullcomp.model.constraints import final_values
from fullcomp.oracles.tracked import Tracked
from fullcomp.run import History, Result, RunOptions
from fullcomp.schedules import VARIANTS, variant_key
from fullcomp.serial import encodable
from fullcomp.sets.atoms import AtomicForm
from fullcomp.validation import BOOL, CALLABLE, NONE, Interval, Options, Param, positive

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
    Param(
        "step_scale",
        (Interval(float, 0, 1, "right"),),
        1.0,
        "a factor on every gamma_k, adjustable between steps (fc.optim's lr); above 1 a step would leave the set",
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


class Algorithm1:
    """The box of Algorithm 1: x_k = GLMO(z_k, V_k, y_k); y_{k+1} = y_k + gamma_k (x_k - y_k); trackers at
    y_{k+1}.  Built once per run; ``initial`` is the state at y_0 from its first sample (set-up, not optimizer
    time, as in the paper's protocol)."""

    def __init__(self, problem: CompositeProblem, hp: dict, run: RunOptions):
        self.problem, self.hp, self.outer = problem, hp, problem.outer
        self.variant, self.exact = variant_key(hp["variant"]), hp["exact"]
        self.point = point = iterate(problem, run)
        self.solver = build_glmo(self.outer, problem.domain, route=hp["glmo"], pool=hp["pool"], device=run.device)
        self.factored = getattr(self.solver, "takes_factored", False)  # it reads a V kept as layer factors
        if hasattr(self.solver, "lazy_point"):  # its point formed by the move (both iterates take such points)
            self.solver.lazy_point = True
        self.model = tracked_model(
            problem,
            hp,
            run,
            layout=point.layout,
            variant=self.variant,
            clip=hp["clip"],
            exact=self.exact,
            factored=self.factored,
            image=getattr(self.solver, "takes_image", False),
        )
        self.schedule = schedule_of(hp, run, exact=self.exact, variant=self.variant, r_f=hp["r_f"], r_g=hp["r_g"])
        if self.exact and problem.stochastic and problem.full_batch is None:
            raise OptionError(
                "exact=True on a stochastic problem needs CompositeProblem(full_batch=...) for the exact f"
            )
        self.read = self.model.entries.read
        shift = 0.0 if hp["first_step"] == "auto" else steps.shift(hp["first_step"])
        start = vars(self.model.start(point.start()))
        self.initial = HMSFWState(**start, atoms=AtomicForm(), start=1.0, shift=shift, z_exact=self.exact)
        self.warm = hp["first_step"] == "auto" and problem.warm_start
        y0 = problem.x0 if self.outer.depends_on_x else None
        self.rescale(abs(self.outer.value(numpy(self.initial.z), y0)) or 1.0)

    def rescale(self, scale: float) -> None:
        """The GLMO's default tolerance on the scale |phi(y_0)| of the run's first sample (a run resumed on
        other batches, as fc.optim's, takes the saved run's scale)."""
        self.scale = scale
        self.tolerance = glmo_tolerance(self.hp["glmo_tol"], self.hp["max_pricing"], scale, self.exact)

    def linear_model(self, state: HMSFWState, k: int) -> tuple[dict, Any]:
        """One GLMO on the tracked model z + V (x - y); the row describing y_k."""
        z, y = numpy(state.z), self.read(state.y)
        arguments = self.point.glmo_arguments(state)
        # A route that reads tensors gets the tracked V and y as they are: a float64 copy of a network's
        # Jacobian cost 11-15 ms of a 135 ms update.
        V = state.V if self.factored else dense(state.V)
        V, y_in = (V, y) if getattr(self.solver, "takes_tensors", False) else (numpy(V), numpy(y))
        res = self.solver.solve(z, V, y_in, self.tolerance(k), self.hp["max_pricing"], **arguments)
        objective = self.outer.value(z, numpy(y) if self.outer.depends_on_x else None)
        gaps = {"gap_estimate": objective - res.value, "glmo_gap": res.gap_bound, "pricing_calls": res.calls}
        if self.outer.constraints is not None:  # the slack of the elastic fallback, 0 at a feasible step
            gaps["glmo_slack"] = res.slack
        return {"objective_estimate": objective, **gaps, "glmo_converged": int(res.converged)}, res

    def warm_shift(self, y: Any, x: Any) -> float:
        """s with gamma(s) = gamma_0, the line search's first step from y toward the first GLMO point x.
        Later steps read the schedule at k + s (2/(k+2+s) for the paper's), so none is longer than the first."""
        y, x = self.read(y), self.read(x)
        return steps.shift(line_search(self.problem, self.model, lambda t: y + t * (x - y)))

    def __call__(self, state: HMSFWState, k: int) -> tuple[HMSFWState, dict]:
        row, res = self.linear_model(state, k)  # x_k = GLMO(z_k, V_k, y_k)
        if k == 0 and self.warm:
            state = replace(state, shift=self.warm_shift(state.y, self.point.toward(res)))
        gamma, beta, rho = self.schedule.at(k)
        gamma = self.schedule.step_size(k + state.shift) if state.shift else gamma
        gamma = gamma * self.hp["step_scale"]  # read at each step: a Stepper (fc.optim's lr) may change it
        y, atoms = self.point.move(state.y, state.atoms, res, gamma, k)  # y_{k+1} = y_k + gamma_k (x_k - y_k)
        moved = {"atoms": atoms, "start": state.start * (1 - gamma), "z_exact": self.exact and rho == 1}
        # V_k (y_{k+1} - y_k) = gamma (u - z_k) from the GLMO's model u = z_k + V_k (x_k - y_k): V y's recursion.
        step_image = None if res.inner is None else gamma * (res.inner - numpy(state.z))
        new = self.model.advance(state, y, beta, rho, k + 1, step_image, **moved)  # V_{k+1}, z_{k+1} at y_{k+1}
        return new, {**row, "gamma": gamma}


class HMSFWReadout(TrackedReadout):
    """HMSFW's states reported: the GLMO's row at the final state, the atomic iterate and its dense point."""

    outputs = {
        **TrackedReadout.outputs,
        "x_entries": "the iterate at the entries it keeps (reads, then track); the dense x on the dense path",
        "entries": "those entries (an Entries; None on the dense path)",
        "atoms": "the iterate's atomic form [(atom, weight)] on reads=",
        "x_start_weight": "the weight of the start point in the atomic form",
    }
    gap = progress = "gap_estimate"

    def __init__(self, box: Algorithm1):
        super().__init__(box.problem, box.model)
        self.box, self.point = box, box.point

    def iterate(self, state: HMSFWState) -> Any:
        return self.point.view(state.y)

    def dense_x(self, state: HMSFWState) -> Any:
        return numpy(self.point.dense(state.y, state.atoms, state.start)) if self.outer.depends_on_x else None

    def known(self, state: HMSFWState) -> Any:
        return state.z if state.z_exact else None

    def observe(self, state: HMSFWState, k: int) -> dict:
        return self.box.linear_model(state, k)[0]

    def evaluate(self, state: HMSFWState, k: int) -> dict:
        # F at the last fresh sample beside the tracked estimate: on a map that is not affine the Taylor
        # tracker's extrapolation can drift (below the losses' own floor, on a network), the sample cannot.
        sample = {"objective_sample": self.outer.value(numpy(state.sample), self.dense_x(state))}
        return {**sample, **super().evaluate(state, k)}

    def returned(self, state: HMSFWState) -> dict:
        atomic = {"entries": self.point.kept, "atoms": state.atoms.pairs(), "x_start_weight": state.start}
        return {**super().returned(state), "x_entries": state.y, **atomic}

    def finish(self, state: HMSFWState, history: History, info: dict) -> Result:
        x = self.point.dense(state.y, state.atoms, state.start)
        result = Result(x, history, info, stand_in="x_entries", **self.returned(state))
        result.constraints = final_values(self.problem, x, state.z)
        return result


def setup(problem: CompositeProblem, hp: dict, run: RunOptions) -> Plan:
    """HMSFW (Algorithm 1) on the tracked model, reported by :class:`HMSFWReadout`."""
    box = Algorithm1(problem, hp, run)
    info = {"variant": box.variant, "glmo_route": box.solver.route, "schedule": box.schedule.name}
    return Plan(
        box,
        box.initial,
        readout=HMSFWReadout(box),
        components={"glmo": box.solver},
        sharded=problem.sharded,
        info={**info, "tracker": hp["tracker"]},
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
HMSFW = register(Method("hmsfw", CompositeProblem, PARAMS, setup, NAME, adjustable=("step_scale",), per_sample=True))
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
        adjustable=("step_scale",),
        per_sample=True,
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
    ``gamma``, and ``objective`` when the problem can compute phi; with constraints, ``glmo_slack`` (the elastic
    fallback's slack, 0 when the linearized constraints held) and ``result.constraints`` (each constraint's
    value and violation at the final point, see ``fc.constraint_report``).  The result holds the trackers ``V`` and
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
