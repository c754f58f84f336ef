"""HMSFW: Hybrid Momentum Stochastic Frank-Wolfe (Algorithm 1 of the HMSFW paper)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fullcomp.errors import ModelError, OptionError, OracleError
from fullcomp.glmo import build_glmo
from fullcomp.model.composite import CompositeProblem
from fullcomp.oracles import InnerOracle
from fullcomp.run import Budget, Loop, Result, drive
from fullcomp.schedules import Schedule, resolve
from fullcomp.sets.atoms import Entries, combine
from fullcomp.trackers import hessian_contraction, hessian_corrected, polyak, segment_point, storm, taylor

VARIANTS = {"taylor": "taylor", "ii": "taylor", "polyak": "polyak", "i": "polyak"}
#: Jacobian trackers: Polyak momentum (Algorithm 1), STORM (Theorem 3), Hessian-corrected (Appendix N).
TRACKERS = ("polyak", "storm", "hessian")
#: Laws of the point w_k = y_{k-1} + alpha d_k of the Hessian correction, as Beta(a, b) shapes.
HESSIAN_POINTS = {"uniform": (1.0, 1.0), "beta": (0.5, 0.5)}
#: Above this many entries the structured path does not rebuild the dense iterate.
MAX_DENSE = 50_000_000


def blend_atoms(atoms: dict, res: Any, gamma: float) -> dict:
    """The atomic form of y_{k+1} = (1 - gamma) y_k + gamma x_k: {id: (atom, weight)}."""
    blended = {key: (atom, (1 - gamma) * w) for key, (atom, w) in atoms.items()}
    for atom, w in zip(res.atoms, res.weights):
        old = blended.get(id(atom), (atom, 0.0))[1]
        blended[id(atom)] = (atom, old + gamma * w)
    return blended


def hmsfw(
    problem: CompositeProblem,
    *,
    iters: int | None = None,
    seconds: float | None = None,
    variant: str = "taylor",
    exact: bool = False,
    glmo: str = "auto",
    glmo_tol: float | Callable[[int], float] | None = None,
    max_pricing: int | None = None,
    pool: int = 30,
    schedule: Schedule | str | Callable | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    callback: Callable | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    checkpoint: Any = None,
    clip: float | None = None,
    method: str | None = None,
    tracker: str = "polyak",
    hessian_point: str | tuple[float, float] = "uniform",
    r_f: float | None = None,
    r_g: float | None = None,
) -> Result:
    """Minimize F(f(x), x) over X with tracked values and Jacobians and a GLMO step.

    Each iteration k: x_k = GLMO(z_k, V_k, y_k); y_{k+1} = y_k + gamma_k (x_k - y_k);
    one sample at y_{k+1}; V_{k+1} by the Jacobian ``tracker`` (Polyak by default); z_{k+1} by the
    Taylor (Variant II, ``variant="taylor"``) or Polyak (Variant I, ``"polyak"``)
    value tracker.

    Parameters
    ----------
    iters, seconds : budget in iterations and/or optimizer seconds (evaluation excluded).
    variant : "taylor" (Variant II, default) or "polyak" (Variant I).
    exact : use ``problem.full_batch`` (or the deterministic map) with beta = rho = 1:
        the deterministic Basic method.
    glmo : "auto", "conic" or "colgen" (see :func:`fullcomp.build_glmo`).
    glmo_tol : certified GLMO tolerance, a number or a function of k.  Default
        0.01 |phi(y_0)| (k+2)^(-1/3), and 0.01 |phi(y_0)| / (k+2) when ``exact``.
    max_pricing : cap on pricing calls per GLMO (the fixed-budget mode); with
        ``glmo_tol`` unset and ``max_pricing`` set, only the cap stops pricing.
    pool : atoms kept warm between column-generation calls.
    schedule : None (the paper's), "exact", a theory schedule "theorem1", "theorem3",
        "constant" (these three need ``iters``), "theorem2" or "doubling" (see
        :mod:`fullcomp.schedules`), a :class:`~fullcomp.schedules.Schedule` or a
        function k -> (gamma, beta, rho).
    r_f, r_g : moment orders in (1, 2] of the value and Jacobian noise, read by the
        theory schedules (default 2, finite variance).
    tracker : the Jacobian tracker. "polyak" (default, Algorithm 1); "storm"
        (Theorem 3: V_{k+1} = J~(y_{k+1}; xi) + (1 - beta)(V_k - J~(y_k; xi)), two
        Jacobians on the same batch); "hessian" (Appendix N: V_{k+1} = (1 - beta) V_k
        + beta J~(y_{k+1}; xi) + (1 - beta) H~(w; xi')[y_{k+1} - y_k] at a random point
        w of the step, one extra batch xi' and one forward-over-reverse contraction).
    hessian_point : law of w = y_k + alpha (y_{k+1} - y_k) for ``tracker="hessian"``:
        "uniform", "beta" (Beta(1/2, 1/2)) or a Beta shape (a, b) with 0 < a, b <= 1;
        a non-uniform alpha is reweighted by 1/density so the correction stays unbiased.
    seed : seeds the ``torch.Generator`` handed to the sampler.
    callback : ``callback(iterate) -> dict | None | False`` every ``eval_every``
        iterations, outside optimizer time; a dict is merged into the history row.
    checkpoint : path or :class:`~fullcomp.run.Checkpoint`; an existing one is resumed.
    clip : if set, each sampled Jacobian is rescaled to Frobenius norm at most ``clip``
        (used by Clipped SCFW).
    method : the name recorded in ``result.info["method"]`` (default from the variant).

    Returns
    -------
    Result with ``x`` (shape of the domain), ``history`` rows (``k``, ``time``,
    ``objective_estimate``, ``gap_estimate``, ``glmo_gap``, ``pricing_calls``),
    and the trackers ``V`` and ``z``.  When the problem declares ``reads``,
    ``x_entries`` holds the iterate at ``reads`` followed by ``track`` (this is
    also the ``x`` a callback sees), ``atoms`` its atomic form, and ``x`` the
    dense point rebuilt from them (None above 5e7 entries).
    """
    if not isinstance(problem, CompositeProblem):
        raise ModelError(f"hmsfw needs a fc.CompositeProblem, got {type(problem).__name__}")
    key = str(variant).lower()
    if key not in VARIANTS:
        raise OptionError(f"variant must be 'taylor' (Variant II) or 'polyak' (Variant I), got {variant!r}")
    value_tracker = VARIANTS[key]
    if tracker not in TRACKERS:
        raise OptionError(f"tracker must be one of {TRACKERS}, got {tracker!r}")
    point_shape = HESSIAN_POINTS.get(hessian_point) if isinstance(hessian_point, str) else hessian_point
    if (
        not isinstance(point_shape, (tuple, list))
        or len(point_shape) != 2
        or not all(isinstance(v, (int, float)) and 0 < v <= 1 for v in point_shape)
    ):
        raise OptionError(
            f"hessian_point must be 'uniform', 'beta' or a Beta shape (a, b) with 0 < a, b <= 1 (so the importance "
            f"weight 1/density stays bounded), got {hessian_point!r}"
        )
    point_shape = (float(point_shape[0]), float(point_shape[1]))
    if clip is not None and tracker != "polyak":
        raise OptionError("clip applies to the fresh sampled Jacobian of Clipped SCFW; use it with tracker='polyak'")
    loop = Loop(
        Budget(iters, seconds), callback, eval_every, progress, checkpoint, "gap_estimate", f"hmsfw-{value_tracker}"
    )
    sched = resolve(schedule, iters=iters, exact=exact, variant=value_tracker, tracker=tracker, r_f=r_f, r_g=r_g)
    if exact and problem.stochastic and problem.full_batch is None:
        raise OptionError("exact=True on a stochastic problem needs CompositeProblem(full_batch=...) for the exact f")
    if exact and schedule is None:
        sched = Schedule.exact()
    if clip is not None and not (np.isfinite(clip) and clip > 0):
        raise OptionError(f"clip must be a positive Frobenius-norm threshold, got {clip!r}")

    domain, outer = problem.domain, problem.outer
    reads = problem.reads
    solver = build_glmo(outer, domain, route=glmo, pool=pool)
    generator = torch.Generator(device=device).manual_seed(seed)
    if reads is None:
        # Dense path: the iterate is the whole point, the Jacobian is (n, d).
        kept, oracle = None, InnerOracle(problem.inner, outer.n, domain.shape, device, dtype)
        y0 = problem.x0.reshape(-1)
    else:
        # Structured path: the map reads x only at ``reads``, so the trackers live on those entries and
        # the iterate is kept only there and at ``track`` (evaluation entries); the dense point is
        # rebuilt from the atoms at the end.
        kept = problem.kept_entries
        track = Entries(kept.flat[len(reads) :], domain.shape)
        oracle = InnerOracle(problem.inner, outer.n, (len(reads),), device, dtype)
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
            # Clipped SCFW: rescale the stacked Jacobian to Frobenius norm at most ``clip``.
            jac = jac * torch.clamp(clip / torch.linalg.norm(jac).clamp_min(1e-300), max=1.0)
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
        return out.detach().to(dtype)

    def track_jacobian(V: torch.Tensor, y: torch.Tensor, y_next: torch.Tensor, beta: float, k: int):
        """One sample at y_next; the value and the next Jacobian tracker V_k -> V_{k+1}."""
        if tracker == "storm":
            # Both Jacobians on the same batch object: the STORM difference sees one sample.
            xi = batch()
            value, jac = oracle(y_next[:n_read], xi, k)
            _, jac_previous = oracle(y[:n_read], xi, k)
            return value, storm(V, jac, jac_previous, beta)
        value, jac = sample_at(y_next, k)
        if tracker == "polyak":
            return value, polyak(V, jac, beta)
        # Hessian correction: the point's draw and the extra batch both come from the run's generator.
        u = float(torch.rand((), generator=generator, dtype=torch.float64, device=generator.device))
        alpha, weight = segment_point(u, point_shape)
        step_read = y_next[:n_read] - y[:n_read]
        correction = weight * contraction(y[:n_read] + alpha * step_read, step_read, k)
        return value, hessian_corrected(V, jac, correction, beta)

    # Initialization (the first sample at y_0) is set-up, not optimizer time, as in the paper's protocol.
    y0 = tensor(y0)
    value, jac = sample_at(y0, 0)
    state = {"y": y0, "y_prev": y0, "V": jac, "z": value, "start": 1.0, "atoms": {}}

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
            z, numpy(state["V"]), y, tol=tolerance(k), max_calls=max_pricing, entries=reads, start=start_atom
        )
        objective = outer.value(z, y)
        row = {
            "objective_estimate": objective,
            "gap_estimate": objective - res.value,
            "glmo_gap": res.gap_bound,
            "pricing_calls": res.calls,
        }
        return row, res

    def step(state: dict, k: int) -> tuple[dict, dict]:
        row, res = linear_model(state, k)
        gamma, beta, rho = sched.at(k)
        y = state["y"]
        if kept is None:
            x, atoms = tensor(res.x.reshape(-1)), state["atoms"]
        else:
            # The GLMO gives x at the entries read; only the tracked extra entries are evaluated here.
            x = tensor(np.concatenate([res.x, sum(w * a.at(track) for w, a in zip(res.weights, res.atoms))]))
            atoms = blend_atoms(state["atoms"], res, gamma)
        y_next = y + gamma * (x - y)
        value, V = track_jacobian(state["V"], y, y_next, beta, k + 1)
        if value_tracker == "taylor":
            z = taylor(state["z"], V, y_next[:n_read], y[:n_read], value, rho)
        else:
            z = polyak(state["z"], value, rho)
        new = {"y": y_next, "y_prev": y, "V": V, "z": z, "start": state["start"] * (1 - gamma), "atoms": atoms}
        return new, row

    def dense_point(state: dict) -> torch.Tensor | None:
        if kept is None:
            return state["y"].reshape(domain.shape)
        if domain.size > MAX_DENSE:
            return None
        atoms, weights = zip(*state["atoms"].values()) if state["atoms"] else ((), ())
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
            atoms=state["atoms"],
            x_start_weight=state["start"],
        )

    info = {
        "method": method
        or ("hmsfw-exact" if exact else f"hmsfw-{'ii' if value_tracker == 'taylor' else 'i'}")
        + ("" if tracker == "polyak" else f"-{tracker}"),
        "variant": value_tracker,
        "glmo_route": solver.route,
        "schedule": sched.name,
        "tracker": tracker,
        "seed": seed,
        "device": str(device),
        "dtype": str(dtype),
    }
    return drive(
        step,
        state,
        loop,
        generator=generator,
        iterate=lambda s: s["y"] if kept is not None else s["y"].reshape(domain.shape),
        finish=finish,
        observe=lambda s, k: linear_model(s, k)[0],
        components={"glmo": solver},
        info=info,
    )


def scfw(problem: CompositeProblem, *, clip: float | None = None, **options: Any) -> Result:
    """Vanilla (``clip=None``) or Clipped SCFW: the HMSFW ablation without tracking.

    Each update uses the fresh minibatch value and Jacobian (beta = rho = 1),
    the same certified GLMO and gamma_k = 2/(k+2); Clipped SCFW rescales the
    stacked Jacobian to Frobenius norm at most ``clip``.  ``options`` are those
    of :func:`hmsfw` (budgets, GLMO settings, seed, callbacks, ...).
    """
    if "schedule" in options or "exact" in options:
        raise OptionError("scfw fixes the schedule (beta = rho = 1) and samples minibatches; use hmsfw to change them")
    name = "scfw" if clip is None else "clipped-scfw"
    return hmsfw(problem, schedule=Schedule.vanilla(), clip=clip, method=name, **options)
