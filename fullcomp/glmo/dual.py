"""The GLMO over a product of l2 balls, solved in the m dimensions of F through the blocks' Gram matrices.

For X = B_1 x ... x B_k, B_b the l2 ball of radius r_b on the entries of block b, and V_b the columns of V there,

    min_{x in X} F(c + V x)  =  min_{||v_b|| <= r_b} F(c + sum_b L_b v_b),    L_b L_b^T = G_b = V_b V_b^T,

because {V_b x_b : ||x_b|| <= r_b} is the ellipsoid {L_b v : ||v|| <= r_b}.  Its Lagrange dual is

    max_{q in dom F*}  q.c - F*(q) - sum_b r_b sqrt(q^T G_b q),

and a minimizer of the Lagrangian at q is x_b = -r_b V_b^T q / ||V_b^T q|| (unique where V_b^T q != 0).  So one
pass over the weights gives the k Gram matrices G_b (m x m) and V y, a conic program in k m + |F's variables|
numbers gives v and q, and one more pass gives x.  Nothing of the size of x is copied to float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from fullcomp import solvers
from fullcomp.autodiff import LazyJacobian, LazyPoint
from fullcomp.errors import ModelError, OptionError, SolverError
from fullcomp.glmo.base import GLMO, GLMOResult, Request, check_finite, target_gap
from fullcomp.glmo.colgen import ColumnGenerationGLMO
from fullcomp.glmo.master import ConicMaster
from fullcomp.layerwise import FactoredJacobian, FactoredPoint
from fullcomp.model.calculus import is_plain_max
from fullcomp.model.composite import Outer
from fullcomp.sets.atoms import DenseAtom
from fullcomp.sets.balls import L2Ball, project_simplex
from fullcomp.sets.base import Set
from fullcomp.sets.product import Product

#: Eigenvalues of a block's Gram matrix below this fraction of its largest are taken as zero, by V's dtype: a
#: Gram matrix rounded in float32 is known to about 1e-6 of its largest eigenvalue (7e-7 measured at 665,089
#: columns), and the primal recovery divides by the square roots of those it keeps.
RANK_TOL = {torch.float64: 1e-12, torch.float32: 1e-6}
#: For V's other dtypes (float16, bfloat16).
RANK_TOL_LOW = 1e-3
#: On the CPU a block's Gram matrix is summed over column chunks of this length by one batched product:
#: torch's product of an (m, d_b) V_b by its transpose runs a kernel made for larger m (0.28 against 0.51 ms
#: at 4 x 401,408 in float32, torch 2.13, one thread).
GRAM_CHUNK = 512
#: Up to this many numbers a float32 or float64 V on the CPU has its Gram matrices, V y and point from numpy,
#: whose calls cost less than torch's on small arrays (0.034 against 0.105 ms for the Gram matrices and V y,
#: 0.011 against 0.055 ms for the point, over the 6 blocks of a 3,641-weight CNN at m = 4); above, torch's
#: chunked products are the faster (and BLAS would start threads of its own).
NUMPY_SIZE = 1 << 16
#: ``build_glmo(route="auto")`` takes this route up to this many values of F.  The program's link is dense, k m^2
#: entries: over 6 blocks it took 0.3 ms at m = 4, 6 ms at 32, 68 ms at 64 and 0.5-0.75 s at 128, where column
#: generation's master has one column an atom; and the Gram pass's m^2 d products took 2-4 times one V^T q up
#: to m = 64, 4 times at 128 (at d = 665,089).
AUTO_OUTPUTS = 32


def ball_blocks(domain: Set) -> list[tuple[slice, float]] | None:
    """(the block's slice of the flat x, its radius) for each l2 ball of an ``L2Ball`` or a ``Product`` of
    them; None for any other set.  Only l2 balls: an l1 or linf block's dual norm ||V_b^T q||_inf or _1 is no
    function of G_b, so it would cost a pass over the weights for every evaluation of the dual."""
    if type(domain) is L2Ball:
        return [(slice(0, domain.size), float(domain.radius))]
    if type(domain) is Product and all(type(b) is L2Ball for b in domain.blocks):
        return [(s, float(b.radius)) for s, b in zip(domain.slices, domain.blocks)]
    return None


class DualBallGLMO(GLMO):
    """min_{x in X} F(c + V x) for X a product of l2 balls (or one l2 ball), through F's m-dimensional dual.

    ``route = "dual"``.  A call makes one pass over V for the blocks' Gram matrices and V y, in V's own dtype
    and on its device (a torch V stays a torch V: its x comes back as a tensor of V's dtype and device), solves
    the program in (v_1, .., v_k) and F's conic variables with Clarabel directly (F's conic form read once, as
    column generation's master reads it), and makes one pass for x.  On ``entries`` (a model reading some of
    x's entries), or where Clarabel does not solve the program, the call goes to column generation.

    The certificate: ``gap_bound`` = F(c + V x) less a lower bound on the optimum from the dual point q.  For
    F = ``cp.max(u)``, q is projected on the simplex and the bound is the dual value q.c - sum r_b ||V_b^T q||,
    sure for any such q; for any other F it is F(u') + q.(c - u') - sum r_b ||V_b^T q|| at the solver's own
    u', a bound wherever q is a subgradient of F at u' (to the solver's accuracy, as column generation's).
    Both are computed from the Gram matrices, which hold V's rounding (float32 for a float32 tracker).
    """

    route = "dual"
    #: hmsfw passes the tracked V and y as they are (no float64 copy): this route reads tensors, and a V kept
    #: as its layers' factors (fullcomp.layerwise.FactoredJacobian).
    takes_tensors = True
    takes_factored = True
    #: It reads V y from the tracker's revision where the tracker keeps it (``Revision.image``).
    takes_image = True
    #: Whether a large tensor V's point comes back as a :class:`BlockPoint`, for the step to form (HMSFW's box,
    #: whose iterate takes such points, sets it); else as a tensor.
    lazy_point = False

    def __init__(self, outer: Outer, domain: Set, pool: int = 30, device: torch.device | str | None = None):
        if outer.depends_on_x:
            raise ModelError("route='dual' needs an outer function of the placeholder only; use 'conic' or 'auto'")
        blocks = ball_blocks(domain)
        if blocks is None:
            raise ModelError(
                f"route='dual' needs an fc.L2Ball or an fc.Product of fc.L2Ball blocks, got {type(domain).__name__}"
                "; use 'colgen' or 'auto'"
            )
        if not isinstance(pool, (int, np.integer)) or pool < 1:  # column generation's, for calls on entries
            raise OptionError(f"pool must be a positive int (atoms kept between calls), got {pool}")
        try:
            self.master = ConicMaster(outer)
        except (ImportError, AttributeError, KeyError, TypeError) as exc:
            raise ModelError(f"route='dual' cannot read F's conic form from CVXPY ({exc}); use 'colgen'") from exc
        self.outer, self.domain, self.blocks = outer, domain, blocks
        self.slices = [s for s, _ in blocks]
        self.radii = np.array([r for _, r in blocks], dtype=np.float64)
        self.plain_max = is_plain_max(outer)
        self.pool, self.device = pool, device
        self._colgen: ColumnGenerationGLMO | None = None  # the route on entries, built when first asked
        self._colgen_state: dict | None = None
        self.q = np.full(outer.n, 1.0 / outer.n)  # the last dual point (F's weights), for inspection
        self._structure: tuple | None = None  # the program's fixed parts, see _program

    # ---- one call -------------------------------------------------------------------------------------------

    def _solve(self, z: Any, V: Any, y: Any, request: Request) -> GLMOResult:
        tol, max_calls, entries, start, revision, track = request
        if isinstance(V, LazyJacobian):
            grams = V.grams(self.slices) if entries is None and isinstance(V, FactoredJacobian) else None
            if grams is None:  # on entries, or blocks that split a parameter: the array written out
                return self._solve(z, V.dense(), y, request)
            return self._solve_factored(z, V, _as_tensor(y).reshape(-1), grams, request)
        if entries is not None:
            return self._by_colgen(z, V, y, request)
        image = getattr(revision, "image", None)  # V y, where the tracker keeps it
        n, size = self.outer.n, self.domain.size
        tensor = isinstance(V, torch.Tensor)
        Vt = _as_tensor(V)
        dtype = Vt.dtype if Vt.is_floating_point() else torch.float64
        if Vt.dtype != dtype or (Vt.device.type == "cpu" and dtype not in (torch.float32, torch.float64)):
            Vt = Vt.to(torch.float32 if dtype in (torch.float16, torch.bfloat16) else torch.float64)  # numpy's types
        yt = _as_tensor(y).to(device=Vt.device, dtype=Vt.dtype).reshape(-1)
        z = self._checked_z(z, tuple(Vt.shape), yt)
        Vt = Vt.reshape(n, size)
        grams, Vy = self._grams(Vt, yt, image)
        if not (np.isfinite(z - Vy).all() and np.isfinite(grams).all()):
            check_finite(z, *(a.detach().cpu().double().numpy() for a in (Vt, yt)))
        try:
            coefficients, u, value, gap = self._in_m_dimensions(z - Vy, grams, RANK_TOL.get(Vt.dtype, RANK_TOL_LOW))
        except SolverError:  # Clarabel alone failed: column generation's master also tries SCS through CVXPY
            return self._by_colgen(z, V, y, request)
        converged = bool(gap <= target_gap(tol, value))
        if self.lazy_point and tensor and Vt.dtype == dtype and not _small(Vt):  # formed by the step
            a = torch.as_tensor(coefficients, dtype=dtype, device=Vt.device)
            x = BlockPoint(Vt, a, self.slices, self.domain.shape)
            return GLMOResult(x, value, gap, 1, [], np.ones(0), converged=converged, inner=u)
        x = self._point(Vt, coefficients)
        if not tensor:
            x = x.cpu().numpy().reshape(self.domain.shape)
            return GLMOResult(x, value, gap, 1, [DenseAtom(x)], np.ones(1), converged=converged, inner=u)
        x = x.to(dtype).reshape(self.domain.shape)
        return GLMOResult(x, value, gap, 1, [], np.ones(0), converged=converged, inner=u)

    def _in_m_dimensions(
        self, c: np.ndarray, grams: np.ndarray, rank_tol: float
    ) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(each block's coefficients a_b, with x_b = V_b^T a_b; u = c + V x; F(u); its certified gap) from the
        Gram matrices and c = z - V y alone."""
        factors = _factors(grams)
        v, q, u_solver = self._solve_program(c, factors)
        coefficients, norms = self._recover(q, v, grams, factors, rank_tol)
        u = c + np.einsum("bij,bj->i", grams, coefficients)
        value = self.outer.value(u)
        lower = self._lower_bound(q, c, norms, u_solver, grams)
        self.q = q
        return coefficients, u, value, max(value - lower, 0.0)

    def _checked_z(self, z: Any, V_shape: tuple, y: torch.Tensor) -> np.ndarray:
        """z in float64, once z, V and y are checked to have F's and the domain's sizes."""
        n, size = self.outer.n, self.domain.size
        z = np.asarray(z.detach().cpu() if isinstance(z, torch.Tensor) else z, dtype=np.float64).reshape(-1)
        if z.shape != (n,) or y.shape != (size,) or int(np.prod(V_shape)) != n * size:
            raise OptionError(
                f"GLMO inputs must be z of size {n}, V of size {n}x{size}, y of size {size}; "
                f"got z {z.shape}, V {tuple(V_shape)}, y {tuple(y.shape)}"
            )
        return z

    def _solve_factored(
        self, z: Any, V: FactoredJacobian, yt: torch.Tensor, grams: torch.Tensor, request: Request
    ) -> GLMOResult:
        """The call on a V held as its layers' factors: the Gram matrices, V y and x from the factors (V y from
        the layers' own products where y is the point V was sampled at), never the (m, d) array."""
        z = self._checked_z(z, V.shape, yt)
        image = getattr(request.revision, "image", None)  # V y, where the tracker keeps it
        Vy = (V @ yt).double() if image is None else image.to(grams.device)
        together = torch.cat([grams.reshape(-1).double(), Vy]).cpu().numpy()
        grams_np, c = together[: grams.numel()].reshape(grams.shape), z - together[grams.numel() :]
        if not (np.isfinite(c).all() and np.isfinite(grams_np).all()):
            check_finite(z, V.dense().detach().cpu().double().numpy(), yt.detach().cpu().double().numpy())
        try:
            coefficients, u, value, gap = self._in_m_dimensions(c, grams_np, RANK_TOL.get(V.dtype, RANK_TOL_LOW))
        except SolverError:
            return self._by_colgen(z, V.dense(), yt, request)
        a = torch.as_tensor(coefficients, dtype=V.dtype, device=V.at.device)
        x = FactoredPoint(V, a, self.slices, self.domain.shape)
        converged = bool(gap <= target_gap(request.tol, value))
        return GLMOResult(x, value, gap, 1, [], np.ones(0), converged=converged, inner=u)

    def _grams(
        self, V: torch.Tensor, y: torch.Tensor, image: torch.Tensor | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The blocks' Gram matrices V_b V_b^T and V y (``image`` where the tracker knows it), in float64, from V
        in its dtype and on its device, brought to the host in one transfer.

        The products round in V's dtype (7e-7 relative in float32); a float64 copy of the pass would double its
        time.  On the CPU torch's products beat numpy's on a large V (torch 2.13, one thread, d = 665,089: 1.3
        against 2.3 ms in float32, 5 against 28 ms in float64, benchmarks/group_dro_cost.py's MLP), numpy's on a
        small one (:data:`NUMPY_SIZE`)."""
        if _small(V):
            Vn, yn = V.numpy(), y.numpy()
            grams = np.stack([Vn[:, s] @ Vn[:, s].T for s, _ in self.blocks])
            Vy = (Vn @ yn).astype(np.float64) if image is None else image.cpu().numpy()
            return grams.astype(np.float64), Vy
        grams = torch.stack([_gram(V[:, s]) for s, _ in self.blocks])
        Vy = (V @ y).double() if image is None else image.to(V.device)
        together = torch.cat([grams.reshape(-1).double(), Vy]).cpu().numpy()
        m, k = V.shape[0], len(self.blocks)
        return together[: k * m * m].reshape(k, m, m), together[k * m * m :]

    def _point(self, V: torch.Tensor, coefficients: np.ndarray) -> torch.Tensor:
        """x_b = V_b^T a_b for every block: one pass over V, in its dtype and on its device, each block's
        product written into its part of x (0.37 against 0.84 ms for numpy's scaled rows at 4 x 401,920)."""
        if _small(V):
            Vn = V.numpy()
            x = np.empty(V.shape[1], dtype=Vn.dtype)
            for (s, _), a in zip(self.blocks, coefficients.astype(x.dtype)):
                np.matmul(a, Vn[:, s], out=x[s])
            return torch.from_numpy(x)
        x = torch.empty(V.shape[1], dtype=V.dtype, device=V.device)
        for (s, _), a in zip(self.blocks, torch.as_tensor(coefficients, dtype=V.dtype, device=V.device)):
            torch.mv(V[:, s].T, a, out=x[s])
        return x

    # ---- the m-dimensional program ----------------------------------------------------------------------------

    def _solve_program(
        self, c: np.ndarray, factors: tuple[np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(v_b for each block, the dual q, the solver's u) of min F(u) s.t. u = c + sum L_b v_b, ||v_b|| <= r_b.

        Variables (v_1..v_k, F's v_F); rows: the link u(v_F) - sum L_b v_b = c (zero cone, dual -q), for each
        block (r_b, v_b) in the second-order cone, then F's own cones.  Only the link's L_b change between calls:
        they are written into the values of a matrix built once (building it took 1 of 1.3 ms a call)."""
        master, n, k = self.master, self.outer.n, len(self.blocks)
        A, head, P, b_fixed, q_obj, cones, settings = self._program()
        lam, E = factors
        L = (E * np.sqrt(lam)[:, None, :]).transpose(1, 0, 2).reshape(n, k * n)  # column j: v's link entries
        head[:, :n] = -L.T
        b = np.concatenate([c, b_fixed])
        solution = master._clarabel.DefaultSolver(P, q_obj, A, b, cones, settings).solve()
        if str(solution.status) not in ("Solved", "AlmostSolved"):
            raise SolverError(f"the dual GLMO's program: Clarabel reports {solution.status}")
        x, dual = np.asarray(solution.x), np.asarray(solution.z)
        u = x[k * n + master.u_start : k * n + master.u_start + n]  # F's u among its variables
        return x[: k * n].reshape(k, n), -dual[:n], u

    def _program(self) -> tuple:
        """(A, the view of A's values holding the link's L entries, P, the right-hand side below the link, the
        objective, the cones, Clarabel's settings), built on the first call.

        v's columns come first, each with n link rows (stored even where L is zero, so the structure holds)
        and its -1 in its block's cone; F's columns follow, its u picked in the link rows."""
        if self._structure is None:
            master, n, k = self.master, self.outer.n, len(self.blocks)
            clarabel = master._clarabel
            rows = n + k * (n + 1)  # the link, then the blocks' cones, then F's rows
            j = np.arange(k * n)
            cone_rows = n + (j // n) * (n + 1) + 1 + (j % n)
            v_rows = np.column_stack([np.tile(np.arange(n), (k * n, 1)), cone_rows]).reshape(-1)
            v_data = np.column_stack([np.zeros((k * n, n)), -np.ones(k * n)]).reshape(-1)
            v_part = sp.csc_matrix((v_data, v_rows, np.arange(k * n + 1) * (n + 1)), shape=(rows + master.m_F, k * n))
            F_part = sp.vstack([master._select_u, sp.csc_matrix((k * (n + 1), master.nv)), master._A_F], format="csc")
            A = sp.hstack([v_part, F_part], format="csc")
            A.sort_indices()
            head = A.data[: k * n * (n + 1)].reshape(k * n, n + 1)  # a view: writing it writes A
            size = k * n + master.nv
            if master.P_F is None:
                P = sp.csc_matrix((size, size))
            else:
                P = sp.block_diag([sp.csc_matrix((k * n, k * n)), sp.triu(master.P_F)], format="csc")
            b_fixed = np.concatenate([*(np.eye(1, n + 1, 0)[0] * r for _, r in self.blocks), master.b_F])
            q_obj = np.concatenate([np.zeros(k * n), master.c_F])
            cones = [clarabel.ZeroConeT(n), *(clarabel.SecondOrderConeT(n + 1) for _ in range(k)), *master.cones_F]
            settings = clarabel.DefaultSettings()
            settings.verbose = False
            for name, option in solvers.SOLVER_OPTIONS.get("CLARABEL", {}).items():
                setattr(settings, name, option)
            self._structure = (A, head, P, b_fixed, q_obj, cones, settings)
        return self._structure

    def _recover(
        self, q: np.ndarray, v: np.ndarray, grams: np.ndarray, factors: tuple, rank_tol: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(k, m) a_b with x_b = V_b^T a_b, and ||V_b^T q|| for each block, all the blocks at once.

        x_b = U_b v_b with U_b = V_b^T E_b diag(lam_b)^(-1/2) orthonormal on G_b's range, so ||x_b|| = ||v_b||
        and V_b x_b = L_b v_b: the solver's primal, accurate to its objective tolerance.  The Lagrangian's
        minimizer -r_b V_b^T q / ||V_b^T q|| is the same point in exact arithmetic, but an interior-point dual
        is accurate to about 1e-5 only (a GLMO gap of 2e-4 on a test instance), and undetermined where a ball
        is not binding.  Directions with eigenvalues below ``rank_tol`` of the block's largest are dropped: V's
        rounding does not resolve them, and their 1/sqrt(lam) would amplify it in x.  A point the solver left
        a rounding outside its ball is scaled back in."""
        lam, E = factors
        norms = np.sqrt(np.maximum(np.einsum("i,bij,j->b", q, grams, q), 0.0))
        keep = lam > rank_tol * lam.max(axis=1, keepdims=True)
        coefficients = np.einsum("bij,bj->bi", E, np.where(keep, v / np.sqrt(np.where(keep, lam, 1.0)), 0.0))
        length = np.sqrt(np.maximum(np.einsum("bi,bij,bj->b", coefficients, grams, coefficients), 0.0))
        over = length > self.radii
        if over.any():
            coefficients[over] *= (self.radii[over] / length[over])[:, None]
        return coefficients, norms

    def _lower_bound(
        self, q: np.ndarray, c: np.ndarray, norms: np.ndarray, u_solver: np.ndarray, grams: np.ndarray
    ) -> float:
        """A lower bound on the GLMO's optimum from the dual point q (see the class docstring)."""
        if self.plain_max:
            # F* of max is 0 on the simplex, so any simplex point is dual feasible and its value a sure bound.
            p = project_simplex(q)
            spread = np.sqrt(np.maximum(np.einsum("i,bij,j->b", p, grams, p), 0.0))
            return float(p @ c) - float(self.radii @ spread)
        return self.outer.value(u_solver) + float(q @ (c - u_solver)) - float(self.radii @ norms)

    # ---- entries, state ---------------------------------------------------------------------------------------

    def _by_colgen(self, z: Any, V: Any, y: Any, request: Request) -> GLMOResult:
        """Column generation's call: for a model on some entries of x (the Gram matrices need every column of a
        block), or where Clarabel did not solve the program."""
        if self._colgen is None:
            self._colgen = ColumnGenerationGLMO(self.outer, self.domain, pool=self.pool, device=self.device)
            if self._colgen_state is not None:
                self._colgen.load_state_dict(self._colgen_state)
        tol, max_calls, entries, start, revision, track = request
        return self._colgen.solve(z, _host(V), _host(y), tol, max_calls, entries, start, revision, track)

    def state_dict(self) -> dict:
        colgen = self._colgen.state_dict() if self._colgen is not None else self._colgen_state
        return {"q": self.q.copy(), "colgen": colgen}

    def load_state_dict(self, state: dict) -> None:
        self.q = np.array(state["q"])
        self._colgen, self._colgen_state = None, state.get("colgen")


class BlockPoint(LazyPoint):
    """The dual GLMO's point x_b = V_b^T a_b for an (m, d) tensor V, kept as its coefficients (k, m): a
    Frank-Wolfe step forms y + gamma (x - y) block by block as (1 - gamma) y_b + gamma V_b^T a_b, one pass
    over V and y (0.83 against 0.96 ms for x and then the lerp at 4 x 665,089, one thread)."""

    def __init__(self, V: torch.Tensor, coefficients: torch.Tensor, slices: list[slice], shape: tuple):
        self.V, self.coefficients, self.slices, self.shape = V, coefficients, slices, shape
        self.dtype, self.device = V.dtype, V.device

    def dense(self) -> torch.Tensor:
        x = self.V.new_empty(self.V.shape[1])
        for s, a in zip(self.slices, self.coefficients):
            torch.mv(self.V[:, s].T, a, out=x[s])
        return x.reshape(self.shape)

    def lerp(self, y: torch.Tensor, gamma: float) -> torch.Tensor:
        y, out = y.reshape(-1), torch.empty_like(y.reshape(-1))
        for s, a in zip(self.slices, self.coefficients):
            torch.addmv(y[s], self.V[:, s].T, a, beta=1.0 - gamma, alpha=gamma, out=out[s])
        return out


def _small(V: torch.Tensor) -> bool:
    """Whether V's products go through numpy (see :data:`NUMPY_SIZE`)."""
    return V.device.type == "cpu" and V.dtype in (torch.float32, torch.float64) and V.numel() <= NUMPY_SIZE


def _gram(block: torch.Tensor) -> torch.Tensor:
    """block block^T, on the CPU as the sum of its column chunks' products (see :data:`GRAM_CHUNK`)."""
    chunks = block.shape[1] // GRAM_CHUNK
    if block.device.type != "cpu" or chunks < 2:
        return block @ block.T
    head = block[:, : chunks * GRAM_CHUNK].unflatten(1, (chunks, GRAM_CHUNK)).transpose(0, 1)
    tail = block[:, chunks * GRAM_CHUNK :]
    return torch.bmm(head, head.transpose(1, 2)).sum(0) + tail @ tail.T


def _factors(grams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k, m) eigenvalues clipped at 0 and (k, m, m) eigenvectors of each symmetric PSD G_b: L_b =
    E_b diag(sqrt(lam_b)) has L_b L_b^T = G_b.  One batched call for all the blocks."""
    lam, E = np.linalg.eigh(0.5 * (grams + grams.transpose(0, 2, 1)))
    return np.clip(lam, 0.0, None), E


def _as_tensor(a: Any) -> torch.Tensor:
    """A tensor without a copy: numpy arrays are viewed."""
    if isinstance(a, torch.Tensor):
        return a.detach()
    return torch.from_numpy(np.ascontiguousarray(a))


def _host(a: Any) -> Any:
    return a.detach().cpu().double().numpy() if isinstance(a, torch.Tensor) else a
