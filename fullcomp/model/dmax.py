"""The declared DMax problem min_x max_{y in Y} phi(x, y) - max_{z in Z} psi(x, z), validated once.

Parameters may be a tensor, a dict of tensors or a ``torch.nn.Module``.
Algorithms work on one flat vector per block; a :class:`Params` turns that
vector back into what the user's function expects (a reshaped tensor, a dict
of views, or the module called through ``torch.func.functional_call``) and
into what a result returns (a tensor, a dict, a copy of the module).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch

from fullcomp.autodiff import call_checked
from fullcomp.errors import DomainError, ModelError, OptionError
from fullcomp.model.params import Bound, Params, as_float_tensor, cast_like  # noqa: F401  (imported from here too)
from fullcomp.sets.base import Set

Sampler = Callable[[torch.Generator], Any]


def to_run(batch: Any, dtype: torch.dtype, device: str | torch.device) -> Any:
    """Move a batch (tensors nested in tuples, lists and dicts) to the run's device; floats to its dtype."""
    if isinstance(batch, torch.Tensor):
        device = torch.device(device) if isinstance(device, str) else device
        if batch.device == device and (batch.dtype == dtype or not batch.is_floating_point()):
            return batch  # the common case, without a dispatcher call
        return batch.to(device=device, dtype=dtype) if batch.is_floating_point() else batch.to(device=device)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_run(b, dtype, device) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_run(b, dtype, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_run(v, dtype, device) for k, v in batch.items()}
    return batch


class DMaxProblem:
    """min over x of  max_{y in Y} phi(x, y; xi)  -  max_{z in Z} psi(x, z; zeta)   (problem (1) of SMAG).

    Parameters
    ----------
    phi : callable
        ``phi(x, y, batch) -> scalar tensor``; ``phi(x, batch)`` when ``y0`` is
        None (no maximization).  Weakly convex in x, strongly concave in y.
    psi : callable, optional
        ``psi(x, z, batch)`` or ``psi(x, batch)`` when ``z0`` is None.  None
        for the min-max case (Algorithm 3).
    x0 : tensor, dict of tensors or torch.nn.Module
        Start point of x; required.  A module is called through
        ``torch.func.functional_call`` (``phi`` receives a callable that
        behaves like the module).
    y0, z0 : tensor, dict of tensors or torch.nn.Module, optional
        Start points of y and z, as for ``x0``.  ``y0`` is projected onto
        ``Y`` (``z0`` onto ``Z``) before the run.  None: no maximization over
        y (over z); ``z0`` needs ``psi``.
    Y, Z : fullcomp set, optional
        Constraint sets of the maxima (``fc.L2Ball``, ``fc.Box``, ``fc.Simplex``,
        ``fc.ConvexSet`` ...) with the shape of ``y0`` (the flat size for a dict
        or module).  None: unconstrained, so phi must be strongly concave on its
        own (a ridge term -mu/2 ||y||^2).
    sampler : callable, optional
        ``sampler(generator) -> batch``, one batch per iteration shared by phi
        and psi.  A pair ``(phi_sampler, psi_sampler)`` or ``psi_sampler=``
        gives psi its own batches.  None: deterministic, every call gets
        ``full_batch`` (None when not given).
    psi_sampler : callable, optional
        ``psi_sampler(generator) -> batch``: psi's own batches, while
        ``sampler`` draws phi's (the same as ``sampler=(sampler,
        psi_sampler)``).  Needs ``psi`` and ``sampler``.
    full_batch, psi_full_batch : batch, optional
        Batches on which phi (psi) are exact (the whole data set), used by
        :func:`fullcomp.stationarity`, the final history row, and as the
        batch of every iteration when there is no sampler.  ``psi_full_batch``
        defaults to ``full_batch``.
    """

    def __init__(
        self,
        phi: Callable,
        psi: Callable | None = None,
        x0: Any = None,
        y0: Any = None,
        z0: Any = None,
        Y: Set | None = None,
        Z: Set | None = None,
        sampler: Sampler | tuple[Sampler, Sampler] | None = None,
        psi_sampler: Sampler | None = None,
        full_batch: Any = None,
        psi_full_batch: Any = None,
    ):
        if not callable(phi):
            raise ModelError(f"phi must be a callable phi(x, y, batch) -> scalar tensor, got {type(phi).__name__}")
        if psi is not None and not callable(psi):
            raise ModelError(
                f"psi must be a callable psi(x, z, batch) -> scalar tensor or None, got {type(psi).__name__}"
            )
        if x0 is None:
            raise ModelError("x0 is required: a tensor, a dict of tensors or a torch.nn.Module to start from")
        if isinstance(sampler, (tuple, list)):
            if len(sampler) != 2 or psi_sampler is not None:
                raise ModelError("sampler must be one callable or a pair (phi_sampler, psi_sampler)")
            sampler, psi_sampler = sampler
        for name, s in (("sampler", sampler), ("psi_sampler", psi_sampler)):
            if s is not None and not callable(s):
                raise ModelError(f"{name} must be a callable {name}(generator) -> batch, or None")
        if psi_sampler is not None and psi is None:
            raise ModelError("psi_sampler is given but psi is None; drop psi_sampler or give psi")
        if psi_sampler is not None and sampler is None:
            raise ModelError("psi_sampler is given without sampler; give sampler= for phi's batches too")
        if psi is None and (z0 is not None or Z is not None):
            raise ModelError("z0 or Z is given but psi is None; give psi(x, z, batch) or drop z0 and Z")

        self.phi, self.psi = phi, psi
        self.sampler, self.psi_sampler = sampler, psi_sampler
        self.full_batch, self.psi_full_batch = full_batch, psi_full_batch
        self.x = Params(x0, "x0")
        self.y, self.Y = self._dual(y0, Y, "y0", "Y")
        self.z, self.Z = self._dual(z0, Z, "z0", "Z")
        self._check_functions()

    @property
    def device(self) -> torch.device:
        """Where x0's tensors live: a run defaults to that device."""
        return next(iter(self.x.initial.values())).device

    def with_start(self, x0: Any) -> DMaxProblem:
        """The same problem started at ``x0``: a tensor, dict or module with the names and shapes of its x0."""
        start = Params(x0, "x0")
        if start.names != self.x.names or start.shapes != self.x.shapes:
            raise ModelError(
                f"x0 has entries {dict(zip(start.names, start.shapes))} but the problem's x0 has "
                f"{dict(zip(self.x.names, self.x.shapes))}; pass a start of the same shape"
            )
        other = copy.copy(self)
        other.x = start
        return other

    @staticmethod
    def _dual(value: Any, domain: Set | None, name: str, set_name: str) -> tuple[Params | None, Set | None]:
        if domain is not None and not isinstance(domain, Set):
            raise DomainError(
                f"{set_name} must be a fullcomp set (fc.L2Ball, fc.Box, fc.Simplex, fc.ConvexSet, ...) or None, "
                f"got {type(domain).__name__}"
            )
        if value is None:
            if domain is not None:
                raise ModelError(
                    f"{set_name} is given but {name} is None; pass {name} (e.g. {name}={set_name}.default_point())"
                )
            return None, None
        params = Params(value, name)
        if domain is not None:
            fits = params.shapes[0] == domain.shape if params.kind == "tensor" else params.size == domain.size
            if not fits:
                have = params.shapes[0] if params.kind == "tensor" else f"{params.size} entries"
                raise DomainError(
                    f"{name} has shape {have} but {set_name} has shape {domain.shape}; build {set_name} with the "
                    f"shape of {name} (e.g. fc.L2Ball({tuple(params.shape)}, r))"
                )
        return params, domain

    # -- the problem's parts --------------------------------------------------

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the problem's data (read-only): x0's, unless phi or psi only runs in another one.

        The start-point check evaluates phi and psi in x0's dtype first (then float64, float32); when
        they fail in x0's dtype (float64 data captured by phi, x0 = torch.zeros(d) in float32), the
        problem's dtype is the one they run in.
        """
        return self._dtype

    def check_run_dtype(self, dtype: Any) -> torch.dtype:
        """``dtype`` if a run may use it (None: the problem's dtype); OptionError naming the fix otherwise.

        A run casts x0, y0, z0 and every batch to its dtype, so any floating dtype goes unless phi or
        psi cannot run in it (data they capture themselves, in another dtype): they are evaluated
        once at the start point in that dtype, as at construction, and a failure is reported here.
        """
        if dtype is None:
            return self._dtype
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise OptionError(f"dtype must be a torch floating dtype (torch.float32 or torch.float64), got {dtype!r}")
        for part in self._parts:
            key = (part[0], dtype)
            if key not in self._status:
                self._status[key] = self._evaluate(part, dtype)[1]
            failure = self._status[key]
            if failure is not None:
                data = self._dtype if self._dtype != dtype else self.x.dtype
                raise OptionError(
                    f"dtype={dtype} but the problem's data are {data}: pass dtype={data} or build the data in "
                    f"{str(dtype).removeprefix('torch.')} ({part[0]} raised {type(failure).__name__} at the start "
                    f"point in {dtype}: {failure})"
                ) from failure
        return dtype

    @property
    def stochastic(self) -> bool:
        return self.sampler is not None

    @property
    def separate_samplers(self) -> bool:
        return self.psi_sampler is not None

    @property
    def algorithm(self) -> int:
        """Which of the paper's algorithms applies: 3 (min-max, no psi), 2 (DWC, no maxima) or 1."""
        if self.psi is None:
            return 3
        return 2 if self.y is None and self.z is None else 1

    def sample(self, generator: torch.Generator) -> tuple[Any, Any]:
        """One batch for phi and one for psi (the same object unless psi has its own sampler).

        Without a sampler the problem is deterministic: both are ``full_batch`` (None if not given).
        """
        if self.sampler is None:
            return self.exact_batches()
        batch = self.sampler(generator)
        return batch, (self.psi_sampler(generator) if self.psi_sampler is not None else batch)

    def exact_batches(self, batch: Any = None, psi_batch: Any = None) -> tuple[Any, Any]:
        """Batches on which phi and psi are exact: the given ones, else ``full_batch`` (None if deterministic)."""
        if batch is None:
            batch = self.full_batch
        if batch is None and self.stochastic:
            raise ModelError(
                "phi is stochastic: pass batch= (the whole data set) or DMaxProblem(full_batch=...) to evaluate it"
            )
        if psi_batch is None:
            psi_batch = self.psi_full_batch
        if psi_batch is None and self.separate_samplers:
            raise ModelError(
                "psi has its own sampler: pass psi_batch= or DMaxProblem(psi_full_batch=...) to evaluate it"
            )
        return batch, (batch if psi_batch is None else psi_batch)

    def phi_value(self, x: Any, y: Any, batch: Any) -> torch.Tensor:
        return self.phi(x, batch) if self.y is None else self.phi(x, y, batch)

    def psi_value(self, x: Any, z: Any, batch: Any) -> torch.Tensor:
        return self.psi(x, batch) if self.z is None else self.psi(x, z, batch)

    def _check_functions(self) -> None:
        """Evaluate phi and psi once at the start so a malformed function fails here, not mid-run.

        A run casts the variables and the batch to its dtype, which is not known yet: x0's dtype is
        tried first, then float64 and float32, and only a function failing in all of them is reported.
        """
        batches = self._check_samplers()
        parts = [("phi", self.phi, self.y, batches[0], "sampler")]
        if self.psi is not None:
            sampler_name = "psi_sampler" if self.separate_samplers else "sampler"
            parts.append(("psi", self.psi, self.z, batches[1], sampler_name))
        self._parts = parts
        self._status: dict[tuple[str, torch.dtype], Exception | None] = {}  # (function, dtype) -> failure
        self._dtype = self.x.dtype
        dtypes = list(dict.fromkeys([self.x.dtype, torch.float64, torch.float32]))
        for part in parts:
            name, _, dual, data, sampler_name = part
            failure = None
            for dtype in dtypes:
                out, exc = self._evaluate(part, dtype)
                self._status[(name, dtype)] = exc
                if exc is None:
                    if dtype != self.x.dtype and self._dtype == self.x.dtype:
                        self._dtype = dtype  # it does not run in x0's dtype: the data decide
                    break
                failure = failure or exc
            else:
                raise self._failed(name, dual, data, sampler_name, failure) from failure
            check_scalar(out, name, "at the start point while building the problem", ModelError)

    def _evaluate(self, part: tuple, dtype: torch.dtype) -> tuple[Any, Exception | None]:
        """One function at the start point in ``dtype``: (value, None), or (None, the exception)."""
        name, fn, dual, data, _ = part
        args = [self.x.view(self.x.flat(dtype, "cpu"))]
        if dual is not None:
            args.append(dual.view(dual.flat(dtype, "cpu")))
        args.append(to_run(data, dtype, "cpu"))
        try:
            with torch.no_grad():
                return call_checked(fn, tuple(args), name, self._signature(name, dual), self._arity_hint(name)), None
        except ModelError:
            raise  # a wrong signature: the same in every dtype
        except Exception as exc:
            return None, exc

    def _check_samplers(self) -> tuple[Any, Any]:
        """``sample`` at seed 0, with a sampler of the wrong signature reported as such."""
        if self.sampler is None:
            return self.exact_batches()
        generator = torch.Generator().manual_seed(0)
        batch = call_checked(self.sampler, (generator,), "sampler", "sampler(generator) -> batch")
        if self.psi_sampler is None:
            return batch, batch
        return batch, call_checked(self.psi_sampler, (generator,), "psi_sampler", "psi_sampler(generator) -> batch")

    @staticmethod
    def _signature(name: str, dual: Params | None) -> str:
        other = "y" if name == "phi" else "z"
        return f"{name}(x, batch) -> scalar tensor" if dual is None else f"{name}(x, {other}, batch) -> scalar tensor"

    def _arity_hint(self, name: str) -> str:
        other, start = ("y", "y0") if name == "phi" else ("z", "z0")
        given = (self.y if name == "phi" else self.z) is not None
        if given:
            return f" ({name} takes {other} because {start} is given; drop {start} for {name}(x, batch))"
        return f" ({name} takes no {other} because {start} is None; pass {start} for {name}(x, {other}, batch))"

    def _failed(self, name: str, dual: Params | None, data: Any, sampler_name: str, exc: Exception) -> ModelError:
        args = "(x, batch)" if dual is None else ("(x, y, batch)" if name == "phi" else "(x, z, batch)")
        hint = (
            f" If {name} reads data, give DMaxProblem({sampler_name}=...), a callable generator -> batch"
            " (or full_batch= for a deterministic problem)."
            if data is None
            else ""
        )
        receives = f"x as {describe_argument(self.x)}"
        if dual is not None:
            receives += f" and {'y' if name == 'phi' else 'z'} as {describe_argument(dual)}"
        given = "None" if data is None else f"a draw of {sampler_name}"
        return ModelError(
            f"{name}{args} raised {type(exc).__name__} at the start point with batch={given}: {exc}."
            f"{hint} {name} receives {receives}."
        )

    def __repr__(self) -> str:
        parts = [f"x: {self.x.size}"]
        if self.y is not None:
            parts.append(f"y: {self.y.size}")
        if self.z is not None:
            parts.append(f"z: {self.z.size}")
        return f"DMaxProblem(algorithm {self.algorithm}, {', '.join(parts)}, stochastic={self.stochastic})"


def describe_argument(params: Params) -> str:
    if params.kind == "tensor":
        return f"a tensor of shape {params.shapes[0]}"
    if params.kind == "dict":
        return f"a dict with keys {params.names}"
    return f"a callable standing for the module {type(params.module).__name__}"


def check_scalar(out: Any, name: str, where: str, error: type[Exception]) -> torch.Tensor:
    """The function's value as a 0-d tensor; ``error`` naming ``where`` if it is not a finite scalar."""
    if not isinstance(out, torch.Tensor):
        raise error(f"{name} must return a scalar torch tensor, got {type(out).__name__} {where}")
    if out.numel() != 1:
        raise error(
            f"{name} returned a tensor of shape {tuple(out.shape)} {where}; it must return a scalar "
            "(reduce the per-sample losses with .mean() or .sum())"
        )
    if not out.is_floating_point():
        raise error(f"{name} returned dtype {out.dtype} {where}; it must return a floating-point scalar")
    value = float(out.detach().reshape(()))
    if not math.isfinite(value):
        raise error(f"{name} returned a non-finite value ({value}) {where}")
    return out.reshape(())
