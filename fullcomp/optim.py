"""fullcomp's composite methods and SMAG as ``torch.optim`` optimizers, for networks trained in a loop of one's own.

``fc.optim.HMSFW(model.parameters(), outer=fc.cvar(u, 0.2), domain=...)`` (or param groups, each with its own
``domain``) takes one update per ``step(closure)``: the closure returns the ``n`` inner values (the group
losses) on the user's batch, the optimizer takes their Jacobian, tracks it, solves the GLMO and writes the new
point into the parameters.  It is the same update as ``fc.solve``'s: a :class:`fullcomp.Stepper` runs it, on a
problem whose inner map is the closure (passed to each update as its batch), so fed the same batches it takes
``fc.solve``'s iterates from the same start.

By torch's rules: each of ``param_groups`` holds its ``domain``, its ``lr`` and the method's options;
``lr`` multiplies the Frank-Wolfe step gamma_k (HMSFW, SCFW: lr in (0, 1], the same in every group) or SMAG's
eta0 and eta1, which is what an LR scheduler changes; ``state_dict()`` is ``{"state": ..., "param_groups":
...}`` and ``load_state_dict`` checks that it fits before it restores anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from fullcomp.algorithms.method import check_renamed, get
from fullcomp.algorithms.stepper import Stepper
from fullcomp.algorithms.tracked import TrackedReadout
from fullcomp.autodiff import dense, graph_nodes, grouped_jacobian
from fullcomp.errors import CheckpointError, FullcompError, ModelError, OptionError
from fullcomp.grouped import Grouped
from fullcomp.layerwise import LayerGradients
from fullcomp.model.composite import CompositeProblem, Outer
from fullcomp.model.fingerprint import set_numbers
from fullcomp.run.options import SHARED
from fullcomp.sets.base import Set
from fullcomp.sets.product import Product
from fullcomp.validation import check_params

#: The shared options an optimizer passes on to its stepper (seed is its own argument).
PASSED = ("device", "dtype", "iters")


def _write(params: list[torch.Tensor], v: torch.Tensor) -> None:
    """The flat point v into the parameters, in place."""
    with torch.no_grad():
        for p, part in zip(params, v.split([p.numel() for p in params])):
            p.copy_(part.view_as(p).to(p.dtype))


class _Parameters:
    """The optimizer's parameters as one flat point, written by :meth:`write`, which skips a point they hold
    from its last write: an update writes y_{k+1} for the closure's sample there, and the step then writes its
    iterate, the same y_{k+1} (0.3 ms of a 10 ms update at 665,089 weights).  They hold it while neither it nor
    any parameter changed since (their storage and version counters say so; the point is kept alive, so that
    no other tensor takes its storage meanwhile)."""

    def __init__(self, params: list[torch.Tensor]):
        self.tensors = params
        self._held: tuple | None = None

    def write(self, v: torch.Tensor) -> None:
        if self._held is not None and self._held[1] == self._mark(v):
            return
        _write(self.tensors, v)
        self._held = (v, self._mark(v))

    def _mark(self, v: torch.Tensor) -> tuple:
        point = (v.data_ptr(), v.shape, v.stride(), v.dtype, v.device, v._version)
        return point, [(p.data_ptr(), p._version) for p in self.tensors]


class _ClosureMap(torch.autograd.Function):
    """Values of the closure as a function of the flat point v: the point is written into the parameters, the
    closure run, ``pick`` takes the 1-D tensor of values from its output, and their Jacobian is taken by one
    backward pass per value, for the backward pass to hand on.  A closure returning ``fc.Grouped`` gives the
    group means, their gradients taken layer by layer from one backward pass (:mod:`fullcomp.layerwise`) where
    that holds, else by its groups.  The Jacobian is also kept on the output's node as ``jacobian``, where
    :func:`fullcomp.autodiff.jacobian` takes it as it is instead of a backward pass per row."""

    @staticmethod
    def forward(
        ctx: Any, v: torch.Tensor, closure: Callable, layers: LayerGradients, pick: Callable, writer: _Parameters
    ) -> Any:
        params = layers.params
        writer.write(v)
        with torch.enable_grad():
            layer_wise = ctx.needs_input_grad[0] and pick is _inner_values  # group means' Jacobian: by layers
            with layers.capture() if layer_wise else contextlib.nullcontext():
                out = closure()
            if not ctx.needs_input_grad[0]:
                return _picked(out, pick).detach().to(v.dtype)
            if isinstance(out, Grouped) and pick is _inner_values:  # its groups say which rows each value reads
                try:
                    jac = layers.jacobian(out, v.dtype)
                finally:
                    layers.release()
                if jac is None:
                    value, jac, _ = grouped_jacobian(out, tuple(params))
                else:
                    with torch.no_grad():
                        value = out.values()
                ctx.jacobian = jac.to(v.dtype)
                return value.detach().to(v.dtype)
            layers.release()
            out = pick(out)
            rows = []
            for i in range(out.numel()):
                grads = torch.autograd.grad(out[i], params, retain_graph=i + 1 < out.numel(), allow_unused=True)
                flat = [(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)]
                rows.append(torch.cat(flat))
            ctx.jacobian = torch.stack(rows).to(v.dtype)
        return out.detach().to(v.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple:
        return grad_out @ dense(ctx.jacobian), None, None, None, None


def _picked(out: Any, pick: Callable) -> torch.Tensor:
    """The values ``pick`` takes from a closure's output (a ``fc.Grouped``'s group means for the inner map)."""
    if isinstance(out, Grouped) and pick is _inner_values:
        return out.values()
    return pick(out)


def _flat(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def _reaches(tensor: torch.Tensor, params: list[torch.Tensor]) -> bool:
    """Whether ``tensor``'s autograd graph reaches one of ``params`` (a walk of the graph, no backward pass)."""
    targets = {id(p) for p in params}
    if tensor.grad_fn is None:
        return id(tensor) in targets
    # An AccumulateGrad node holds its leaf tensor as ``variable``.
    return any(id(getattr(node, "variable", None)) in targets for node in graph_nodes(tensor.grad_fn))


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  (arrays, tensors: not a plain option value)
        return False


def _describe(domain: Any) -> str | None:
    """What a saved group's domain is compared by: its kind, numbers and shape."""
    return None if domain is None else f"{set_numbers(domain)} shape {tuple(domain.shape)}"


class _SteppedOptimizer(torch.optim.Optimizer):
    """A registered method behind ``torch.optim``'s interface: a :class:`fullcomp.Stepper` on a problem whose
    batch is the step's closure, built at the first step (whose closure also gives the set-up's sample).

    The method's options are validated at construction and live in every param group (they must agree across
    groups: one method runs over all the parameters); ``lr`` scales the method's step (:attr:`lr_scales`)."""

    method: str
    #: The hyperparameters the group's lr multiplies (besides HMSFW's ``step_scale``, which is the lr itself).
    lr_scales: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Any], seed: int, options: dict, extra: dict):
        spec = get(self.method)
        options = dict(options)
        check_renamed(spec, options)
        lr = options.pop("lr", 1.0)
        if "step_scale" in options:
            raise OptionError("step_scale is the param group's lr in fc.optim: pass lr= (or set param_groups[i]['lr'])")
        shared = {k: options.pop(k) for k in list(options) if k in SHARED}
        refused = sorted(set(shared) - set(PASSED))
        if refused:
            raise OptionError(
                f"fc.optim takes the shared options {', '.join(PASSED)} (and seed=); {', '.join(refused)} belong to "
                "fc.solve's loop (an optimizer's loop is yours: save state_dict() to checkpoint it)"
            )
        pinned = sorted(set(options) & set(spec.fixed))
        if pinned:
            raise OptionError(f"{spec.name} fixes {pinned}; use the base method to change them")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise OptionError(f"seed must be an int, got {seed!r}")
        hp = check_params(spec.params, {**options, **spec.fixed}, spec.name)  # bad options fail here, not at step
        self.spec, self.seed, self.shared = spec, seed, shared
        #: The method's options kept in each param group (step_scale is lr there).
        self.options = tuple(p.name for p in spec.options if p.name != "step_scale")
        self.stepper: Stepper | None = None
        self._closure: Callable | None = None
        self._building = False  # while the problem is declared: its probe of the map does not call the closure
        self._graph_checked = False
        self._pending: dict | None = None  # a stepper state loaded before the first step
        self._pending_scale: float | None = None
        self._built: list[tuple] = []  # each group's params and domain, as the stepper was built on them
        super().__init__(params, {**extra, "lr": lr, **{name: hp[name] for name in self.options}})
        self._lr()  # an lr the method cannot take fails at construction
        dtypes = {p.dtype for p in self._params}
        dtype = shared.get("dtype")
        if len(dtypes) > 1 or (dtype is not None and dtypes != {dtype}):
            have = ", ".join(sorted(map(str, dtypes)))
            raise OptionError(
                f"the parameters are {have}{f' but dtype={dtype}' if dtype is not None else ''}: the method's iterate "
                "is the parameters, in one dtype; cast the model (model.double()) and leave dtype= out"
            )
        self.dtype = next(iter(dtypes))

    @property
    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (before the first step: the method's state covers the parameters it started on)."""
        if getattr(self, "stepper", None) is not None:
            raise OptionError(
                "add_param_group after the first step: the method's state (its iterate, trackers and generator) "
                "covers the parameters it started on; add every group before the first step, or build a new "
                "optimizer"
            )
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise OptionError("a param group is a dict with 'params' (and, for a composite method, its 'domain')")
        at = len(self.param_groups)
        try:
            super().add_param_group(param_group)
        except (ValueError, TypeError) as exc:
            raise OptionError(f"param group {at}: {exc}") from None
        try:
            self._check_group(self.param_groups[-1], at)
        except FullcompError:
            self.param_groups.pop()
            raise

    def _check_group(self, group: dict, at: int) -> None:
        for i, p in enumerate(group["params"]):
            if not p.requires_grad:
                # Refused rather than skipped: the method's iterate and domain are all the parameters given.
                raise OptionError(
                    f"param group {at}'s parameter {i} has requires_grad=False: pass only the parameters to train "
                    "(filter(lambda p: p.requires_grad, model.parameters())), with a domain over those"
                )
        for name in self.options:
            if name in group and not _same(group[name], self.defaults[name]):
                group_values = {**self.defaults, **group}
                check_params(self.spec.params, {n: group_values[n] for n in self.options}, self.spec.name)

    def _lr(self) -> float:
        """The groups' lr (one value: a method moves all the parameters by one step), checked."""
        rates = [group["lr"] for group in self.param_groups]
        for i, lr in enumerate(rates):
            if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0 or lr != lr:
                raise OptionError(f"param_groups[{i}]['lr'] must be a positive number, got {lr!r}")
        if any(lr != rates[0] for lr in rates):
            raise OptionError(
                f"the param groups' lr differ ({rates}): {self.spec.name} takes one step for all the parameters, "
                "so every group's lr must be the same"
            )
        lr = float(rates[0])
        names = {p.name for p in self.spec.params}
        if "step_scale" in names and lr > 1:
            raise OptionError(
                f"lr={lr:g}: {self.spec.name}'s lr multiplies the Frank-Wolfe step gamma_k in (0, 1], and a step "
                "beyond 1 would leave the domain; keep lr in (0, 1]"
            )
        if "step_scale" not in names and not self.lr_scales and lr != 1:
            raise OptionError(
                f"lr={lr:g}: {self.spec.name} has no step size that lr scales (its steps are set by its own "
                "hyperparameters, fixed for the run), so an LR scheduler cannot act on it; leave lr at 1"
            )
        return lr

    def _values(self) -> dict:
        """The stepper's hyperparameters from the param groups: the options, and what lr scales."""
        first = self.param_groups[0]
        for i, group in enumerate(self.param_groups[1:], 1):
            for name in self.options:
                if not _same(group[name], first[name]):
                    raise OptionError(
                        f"param_groups[{i}][{name!r}] is {group[name]!r} but param_groups[0]'s is {first[name]!r}: "
                        f"one {self.spec.name} runs over all the groups, so its options must agree"
                    )
        lr = self._lr()
        values = {name: first[name] for name in self.options}
        if any(p.name == "step_scale" for p in self.spec.params):
            values["step_scale"] = lr
        for name in self.lr_scales:
            values[name] = lr * values[name]
        return values

    def _layout(self) -> list[tuple]:
        return [(tuple(map(id, group["params"])), group.get("domain")) for group in self.param_groups]

    def _sync(self) -> None:
        """The param groups' values into the running stepper: adjustable ones as torch's lr, others refused."""
        values = self._values()
        if self.stepper is None:
            return
        for i, (now, then) in enumerate(zip(self._layout(), self._built)):
            if now[0] != then[0] or now[1] is not then[1]:
                field = "params" if now[0] != then[0] else "domain"
                raise OptionError(
                    f"param_groups[{i}][{field!r}] changed after the first step: the method's state (its iterate, "
                    "trackers and atoms) belongs to the set it started on; build a new optimizer over the new "
                    f"{field}, or change it before the first step"
                )
        changed = {k: v for k, v in values.items() if not _same(self.stepper.hyperparameters[k], v)}
        fixed = sorted(set(changed) - set(self.stepper.adjustable))
        if fixed:
            raise OptionError(
                f"param group option {', '.join(fixed)} changed after the first step; {self.spec.name} can change "
                f"only {', '.join(self.stepper.adjustable) or 'nothing'} between steps: build a new optimizer"
            )
        if changed:
            self.stepper.adjust(**changed)

    def _problem(self, point: torch.Tensor) -> Any:
        """The problem the method runs on, started at the parameters' flat ``point``."""
        raise NotImplementedError

    def _parameters(self) -> _Parameters:
        """The writer of the problem's points into the parameters, built with the problem."""
        self._writer = _Parameters(self._params)
        return self._writer

    def _check_output(self, out: Any) -> None:
        """What the closure must return (the subclass's form), checked at every call."""

    def _wrapped(self, closure: Callable) -> Callable:
        params = self._params

        def run() -> Any:
            try:
                out = closure()
            except FullcompError:
                raise
            except Exception as exc:  # the user's code: named as theirs, with its own traceback chained
                raise ModelError(f"the closure raised {type(exc).__name__}: {exc}") from exc
            self._check_output(out)
            if isinstance(out, Grouped):
                tensors = list(out.parts) if out.by_sub_batch else [out.losses]
            elif isinstance(out, torch.Tensor):
                tensors = [out]
            else:
                tensors = [t for t in out if isinstance(t, torch.Tensor)]
            for t in tensors:
                if not t.requires_grad:
                    raise ModelError(
                        "the closure's values carry no gradient: compute them from the optimizer's parameters "
                        "(with requires_grad=True; step enables gradients while it calls the closure)"
                    )
            if not self._graph_checked:  # once: the graph's structure does not change between batches
                if not any(_reaches(t, params) for t in tensors):
                    raise ModelError(
                        "the closure's values do not depend on the optimizer's parameters (their autograd graph "
                        "never reaches them): compute them from the model whose parameters you gave"
                    )
                self._graph_checked = True
            return out

        return run

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> dict:  # type: ignore[override]
        """One update on the closure's batch; returns the history row (``objective_estimate``, ...).

        ``closure()`` computes the values from the model's parameters (it is called with gradients enabled,
        once at the first step's set-up and once per later sample) and must not call ``backward`` itself.
        """
        if closure is None or not callable(closure):
            raise OptionError(
                f"step needs a closure() computing the {self.method} problem's values on your batch: "
                "opt.step(lambda: losses(model, batch))"
            )
        self._sync()
        params = self._params
        for p in params:
            if p.dtype != self.dtype:
                raise OptionError(
                    f"a parameter is {p.dtype} but the optimizer was built on {self.dtype} parameters; cast the "
                    "model before building the optimizer"
                )
        self._closure = self._wrapped(closure)
        try:
            if self.stepper is None:
                point = _flat(params)
                self._building = True
                try:
                    problem = self._problem(point)
                finally:
                    self._building = False
                options = {**self.shared, **self._values()}
                self.stepper = Stepper(
                    problem, self.method, seed=self.seed, device=point.device, in_place=True, **options
                )
                self._built = self._layout()
                if self._pending is not None:
                    pending, self._pending = self._pending, None
                    self.stepper.load_state_dict(pending)
                    self._rescale(self._pending_scale)
            row = self.stepper.step(self._closure)
        finally:
            self._closure = None
        self._writer.write(self.stepper.x.reshape(-1))
        return row

    def _signature(self) -> dict:
        """What the problem is, beside the groups: a state must come from the same one."""
        return {}

    def _domain_now(self) -> Set | None:
        return None

    def state_dict(self) -> dict:
        """torch's layout: ``state`` holds the method's (its stepper's state, the point, the method, seed and
        problem), ``param_groups`` each group's options with ``params`` as indices, as torch.optim's do, and
        its ``sizes`` and ``domain`` (described by kind and numbers).  As torch.optim's, it holds the live
        state's tensors, which later steps update in place: ``torch.save`` it (or ``copy.deepcopy`` it) to keep
        a snapshot."""
        groups, index = [], 0
        for group in self.param_groups:
            saved = {k: v for k, v in group.items() if k not in ("params", "domain")}
            saved["params"] = list(range(index, index + len(group["params"])))
            saved["sizes"] = [p.numel() for p in group["params"]]
            if "domain" in group:
                saved["domain"] = _describe(group["domain"])
            index += len(group["params"])
            groups.append(saved)
        state = {
            "method": self.method,
            "seed": self.seed,
            **self._signature(),
            "x": _flat(self._params).clone(),
            "stepper": None if self.stepper is None else self.stepper.state_dict(),
            "scale": self._scale(),
        }
        return {"state": state, "param_groups": groups}

    def _box(self) -> Any:
        return None if self.stepper is None else getattr(self.stepper.plan.readout, "box", None)

    def _scale(self) -> float | None:
        """The scale a method set from its first sample (HMSFW's GLMO tolerance): a resumed optimizer sets up
        on another batch, so it takes the saved one."""
        return getattr(self._box(), "scale", None)

    def _rescale(self, scale: Any) -> None:
        box = self._box()
        if box is not None and hasattr(box, "rescale") and isinstance(scale, float):
            box.rescale(scale)

    def load_state_dict(self, state_dict: dict) -> None:
        """Resume from :meth:`state_dict`: the parameters take the saved point at once, the method's state
        at once (or, before the first step, when the step builds the method).  A state that does not fit this
        optimizer (method, seed, problem, groups, sizes, domains, options, a point outside the domain) is
        refused with a CheckpointError naming the field, before anything changes."""
        if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise CheckpointError(
                f"not an fc.optim state_dict (torch's layout, with 'state' and 'param_groups'; got {got}): pass "
                "opt.state_dict(); a fc.Stepper's state_dict loads into a Stepper"
            )
        state, groups = state_dict["state"], state_dict["param_groups"]
        if not isinstance(state, dict) or not isinstance(groups, list):
            raise CheckpointError("the state_dict's 'state' must be a dict and its 'param_groups' a list")
        mine = self.state_dict()
        for key in ("method", "seed", *self._signature()):
            if key not in state or not _same(state[key], mine["state"][key]):
                raise CheckpointError(
                    f"the state_dict's state[{key!r}] is {state.get(key)!r} but this optimizer's is "
                    f"{mine['state'][key]!r}; load it into an optimizer built as the one that saved it"
                )
        if len(groups) != len(self.param_groups):
            raise CheckpointError(
                f"the state_dict has {len(groups)} param groups, this optimizer {len(self.param_groups)}"
            )
        fixed = [n for n in self.options if n not in self.spec.adjustable and n not in self.lr_scales]
        for i, (theirs, ours) in enumerate(zip(groups, mine["param_groups"])):
            if not isinstance(theirs, dict):
                raise CheckpointError(f"the state_dict's param_groups[{i}] is not a dict")
            for key in ("sizes", "domain", *fixed):
                if key in ours and (key not in theirs or not _same(theirs[key], ours[key])):
                    raise CheckpointError(
                        f"the state_dict's param_groups[{i}][{key!r}] is {theirs.get(key)!r} but this optimizer's "
                        f"is {ours[key]!r}; it was saved by an optimizer over other parameters or options"
                    )
        x = state.get("x")
        size = sum(p.numel() for p in self._params)
        if not isinstance(x, torch.Tensor) or x.numel() != size or not torch.isfinite(x).all():
            raise CheckpointError(f"the state_dict's state['x'] must be a finite tensor of {size} entries")
        domain = self._domain_now()
        if domain is not None:
            point = x.detach().double().cpu().numpy().reshape(domain.shape)
            if not domain.contains(point, tol=1e-6):
                raise CheckpointError(
                    "the state_dict's state['x'] is not in this optimizer's domain; it was saved on another set "
                    "or edited"
                )
        saved = state.get("stepper")
        if saved is not None and self.stepper is not None:
            self.stepper.load_state_dict(saved)  # checked by the stepper before it changes anything
            self._rescale(state.get("scale"))
        else:
            self.stepper, self._pending = None, saved  # None: the next step starts the method afresh at x
            self._pending_scale = state.get("scale")
            self._graph_checked = False
        _write(self._params, x.to(self._params[0].device))
        for theirs, group in zip(groups, self.param_groups):
            group.update({k: v for k, v in theirs.items() if k not in ("params", "sizes", "domain")})


def _inner_values(out: Any) -> torch.Tensor:
    if not isinstance(out, torch.Tensor) or out.dim() != 1:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelError(
            "the closure must return a 1-D tensor of the inner values (one loss per group), computed from the "
            f"model's parameters; got {got}"
        )
    return out


class CompositeOptimizer(_SteppedOptimizer):
    """A registered composite method (``method``) as a ``torch.optim.Optimizer``.

    Parameters
    ----------
    params : iterable of tensors or of dicts
        ``model.parameters()``, or param groups: dicts with ``"params"`` and, for per-layer domains, a
        ``"domain"`` each (a fullcomp set over the group's parameters flattened in order).  Every parameter
        must have ``requires_grad=True``: a frozen one is refused (leave it out, with its domain).
    outer : cvxpy.Expression
        F, written in ``fc.inner_value(n)``; the closure returns the n inner values.
    domain : Set, optional
        The set of all the parameters flattened in order; omit it when every group has its own.  With one
        group it becomes that group's ``"domain"``.
    seed : int
        The seed of the method's generator (what it draws besides the batches: none for HMSFW's default).
    lr : float
        The default of the groups' ``lr``, a factor in (0, 1] on every Frank-Wolfe step gamma_k (HMSFW,
        SCFW); an LR scheduler changes it.  A method with no such step (PSG) takes only 1.
    **hyperparameters
        The method's (``fc.describe(method)``), e.g. ``variant``, ``tracker``, ``schedule``, ``first_step``;
        ``iters`` is the horizon of a schedule that needs one, ``dtype`` and ``device`` must be the
        parameters'.  They are checked here and kept in every param group.
    """

    method = "hmsfw"

    def __init__(
        self,
        params: Iterable[Any],
        outer: Any,
        domain: Set | None = None,
        *,
        seed: int = 0,
        lr: float = 1.0,
        **hyperparameters: Any,
    ):
        self._whole: Set | None = None
        super().__init__(params, seed, {"lr": lr, **hyperparameters}, {"domain": None})
        if domain is not None:
            if any(group["domain"] is not None for group in self.param_groups):
                raise OptionError("give domain= or a domain per param group, not both")
            if len(self.param_groups) == 1:
                self.param_groups[0]["domain"] = domain
                self._check_group(self.param_groups[0], 0)
            else:
                self._whole = domain
        found = self._domain_now()
        self._outer = Outer(outer, found)  # F is checked here (convex, in fc.inner_value(n)), not at the step
        self.outer = outer

    def _check_group(self, group: dict, at: int) -> None:
        super()._check_group(group, at)
        domain = group.get("domain")
        if domain is None:
            return
        size = sum(p.numel() for p in group["params"])
        if not isinstance(domain, Set) or domain.size != size:
            # Checked per group: in total, swapped sizes would put each constraint on another group's entries.
            raise OptionError(
                f"param group {at}'s domain must be a fullcomp set of its {size} parameter entries (flattened in "
                f"order), got {type(domain).__name__} of size {getattr(domain, 'size', '?')}"
            )

    def add_param_group(self, param_group: dict) -> None:
        if getattr(self, "_whole", None) is not None:
            raise OptionError(
                "this optimizer's domain= covers all its parameters at once; to add a group, build it with a "
                "'domain' in every param group"
            )
        super().add_param_group(param_group)

    def _domain_now(self) -> Set:
        """The set of all the parameters, from the groups' domains as they are now."""
        own = [group.get("domain") for group in self.param_groups]
        if self._whole is not None:
            found = self._whole
        elif all(isinstance(d, Set) for d in own):
            found = own[0] if len(own) == 1 else Product(*own)
        else:
            missing = [i for i, d in enumerate(own) if d is None]
            raise OptionError(
                "give domain= (a set of all the parameters, flattened in order) or a 'domain' in every param "
                f"group (param groups {missing} have none); fc.layer_domains(model) builds one set per layer"
            )
        size = sum(p.numel() for p in self._params)
        if not isinstance(found, Set) or found.size != size:
            raise OptionError(
                f"the domain must be a fullcomp set of the {size} parameter entries (flattened in order), got "
                f"{type(found).__name__} of size {getattr(found, 'size', '?')}"
            )
        for i, (group, d) in enumerate(zip(self.param_groups, own)):
            if d is not None:
                self._check_group(group, i)
        return found

    @property
    def domain(self) -> Set:
        """The set of all the parameters (the groups' domains' product)."""
        return self._domain_now()

    def _signature(self) -> dict:
        return {"outer": str(self.outer)}

    def _problem(self, point: torch.Tensor) -> CompositeProblem:
        domain = self._domain_now()
        if not domain.contains(point.double().cpu().numpy().reshape(domain.shape), tol=1e-6):
            raise OptionError("the parameters are not in the domain; fc.make_feasible(model, domain) puts them there")
        layers, n, writer = LayerGradients(self._params), self._outer.n, self._parameters()

        def inner(v: torch.Tensor, closure: Callable) -> torch.Tensor:
            if self._building:  # the declaration's probe: the closure's values are checked at every real call
                return torch.zeros(n, dtype=v.dtype, device=v.device)
            return _ClosureMap.apply(v, closure, layers, _inner_values, writer)

        problem = CompositeProblem(
            self.outer,
            inner,
            domain,
            sampler=lambda generator: self._closure,  # the set-up's sample: the first step's closure
            x0=point.cpu().double().numpy().reshape(domain.shape),
            dtype=point.dtype,
            check_gradient=False,  # the closure is the user's loop: its derivative is autograd's own
        )
        # The method starts as from its default start: a warm start's line search on the first batch would
        # call the closure a dozen times; lr and first_step= set how far the first step goes.
        problem.warm_start = False
        return problem

    @property
    def weights(self) -> np.ndarray | None:
        """The weights F puts on each inner value at the tracked values (the adversary's q): what to log."""
        readout = None if self.stepper is None else self.stepper.plan.readout
        return readout.weights(self.stepper.state) if isinstance(readout, TrackedReadout) else None


class SMAG(_SteppedOptimizer):
    """SMAG (Algorithm 2 of the SMAG paper: phi - psi, both smooth-weakly convex) as a torch optimizer.

    ``step(closure)``: the closure returns phi on the user's batch (a scalar tensor), or the pair (phi, psi)
    for a difference of two functions (with ``psi=True``), computed from the model's parameters; SMAG's update
    (the Moreau envelopes' proximal estimates, then x along their difference) is ``fc.solve(problem,
    "smag")``'s, run by a :class:`fullcomp.Stepper` on the closure, and the new x is written into the
    parameters.

    Parameters
    ----------
    params : iterable of tensors
        ``model.parameters()`` (or param groups), every one with ``requires_grad=True``.
    gamma, eta0, eta1 : float
        SMAG's Moreau parameter and step sizes (``fc.describe("smag")``), kept in every param group.
    lr : float
        The groups' lr (default 1): SMAG's steps are ``lr * eta0`` and ``lr * eta1``, what an LR scheduler
        changes.
    psi : bool
        Whether the closure returns (phi, psi) (default False: phi alone; a pair is then refused).
    seed : int
        The seed of the method's generator.
    **hyperparameters
        SMAG's other hyperparameters (``decay``, ``output``).
    """

    method = "smag"
    lr_scales = ("eta0", "eta1")

    def __init__(
        self,
        params: Iterable[Any],
        gamma: float,
        eta0: float,
        eta1: float,
        *,
        psi: bool = False,
        seed: int = 0,
        lr: float = 1.0,
        **hyperparameters: Any,
    ):
        if not isinstance(psi, bool):
            raise OptionError(f"psi must be True or False, got {psi!r}")
        self.psi = psi
        super().__init__(params, seed, {"gamma": gamma, "eta0": eta0, "eta1": eta1, "lr": lr, **hyperparameters}, {})

    def _signature(self) -> dict:
        return {"psi": self.psi}

    def _check_output(self, out: Any) -> None:
        values = out if isinstance(out, (tuple, list)) else (out,)
        if len(values) != (2 if self.psi else 1) or not all(
            isinstance(v, torch.Tensor) and v.numel() == 1 for v in values
        ):
            want = "the pair (phi, psi) of scalar tensors" if self.psi else "phi, a scalar tensor"
            hint = " (a pair needs fc.optim.SMAG(..., psi=True))" if not self.psi and len(values) == 2 else ""
            raise ModelError(
                f"SMAG's closure returns {want}, computed from the model's parameters{hint}; got "
                f"{type(out).__name__} of {len(values)}"
            )

    def _problem(self, point: torch.Tensor) -> Any:
        from fullcomp.model.dmax import DMaxProblem

        layers, writer = LayerGradients(self._params), self._parameters()

        def part(which: int) -> Callable:
            def pick(out: Any) -> torch.Tensor:
                values = out if isinstance(out, (tuple, list)) else (out,)
                return values[which].reshape(1)

            def value(x: torch.Tensor, closure: Callable) -> torch.Tensor:
                if self._building:  # the declaration's probe: the closure's values are checked at every real call
                    return torch.zeros((), dtype=x.dtype, device=x.device)
                return _ClosureMap.apply(x, closure, layers, pick, writer)[0]

            return value

        return DMaxProblem(
            part(0), part(1) if self.psi else None, x0=point.clone(), sampler=lambda generator: self._closure
        )


class HMSFW(CompositeOptimizer):
    """HMSFW (Algorithm 1 of the HMSFW paper) as a torch optimizer; ``variant``, ``tracker``, ... as ``fc.hmsfw``."""

    method = "hmsfw"


class SCFW(CompositeOptimizer):
    """Stochastic conditional Frank-Wolfe, no tracking (``clip=`` for Clipped SCFW is method ``clipped-scfw``)."""

    method = "scfw"


class PSG(CompositeOptimizer):
    """Projected subgradient steps on the tracked model; needs a domain with ``project``."""

    method = "psg"


__all__ = ["CompositeOptimizer", "HMSFW", "SCFW", "PSG", "SMAG"]
