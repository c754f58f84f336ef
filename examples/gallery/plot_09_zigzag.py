"""Frank-Wolfe's zig-zag near a face of a polytope, and how away and pairwise steps fix it.

Left: phi(x) = ||M (x - p)||^2 over the triangle (the simplex of R^3), whose minimizer x* lies inside the
edge between vertices 1 and 2. Every vanilla Frank-Wolfe step (`fc.solve(problem, "fw", corrective="vanilla")`)
moves towards a vertex, so from vertex 3 the iterates can only shrink vertex 3's weight by a factor
(1 - gamma) and zig-zag between vertices 1 and 2 towards the edge, in ever shorter steps. An away step
(`corrective="away"`) moves away from the worst vertex of the active set instead, here vertex 3, and drops it
once its weight reaches 0: the iterate lands on the edge and then converges along it (the inset zooms in
on x*; both methods take the same first two steps).
Right: the primal error phi(x_k) - phi* on the simplex of R^30 with the optimum on a 5-vertex face
(phi(x) = ||A x - b||^2, A well conditioned): vanilla Frank-Wolfe follows c/k (dashed), the away,
pairwise and blended pairwise steps converge linearly down to the rounding of phi (about 1e-14, where the
curves stop). Look at the straight lines on the log scale against vanilla's flat curve.
"""

import argparse
from pathlib import Path

import cvxpy as cp
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch

import fullcomp as fc

matplotlib.use("Agg")  # headless: figures are only written to PNG files
torch.set_num_threads(1)  # tiny tensors: one thread avoids contention on a shared machine
STEPS = ("vanilla", "away", "pairwise", "blended-pairwise")
COLORS = {"vanilla": "C3", "away": "C0", "pairwise": "C2", "blended-pairwise": "C1"}
ITERS, FLOOR = 100, 1e-13  # below FLOOR, phi ~ 16 differs from phi* by its rounding
CORNERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])  # the triangle's vertices in the plane


def triangle_problem():
    """||M (x - p)||^2 on the simplex of R^3, minimized inside the edge of vertices 1 and 2."""
    M = torch.tensor([[1.0, 0.3, 0.0], [0.0, 1.0, 0.2], [0.1, 0.0, 0.7]], dtype=torch.float64)
    p = torch.tensor([0.7, 0.5, -0.3], dtype=torch.float64)
    problem = fc.CompositeProblem(cp.sum_squares(fc.inner_value(3)), lambda x, _: M @ (x - p), fc.Simplex(3))
    return problem, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)  # start at vertex 3


def face_problem(d=30, m=40, support=5, seed=0):
    """||A x - b||^2 on the simplex of R^d with its minimizer x* in the relative interior of a face."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((m, d)))
    R, _ = np.linalg.qr(rng.standard_normal((d, d)))
    A = Q @ np.diag(np.linspace(1.0, 2.0, d)) @ R.T  # singular values in [1, 2]
    x_star = np.zeros(d)
    x_star[rng.choice(d, support, replace=False)] = rng.dirichlet(5 * np.ones(support))
    # The optimality conditions: grad phi(x*) = 2 A^T (A x* - b) is 1 on the face, above 1 off it.
    grad = 1.0 + np.where(x_star > 0, 0.0, rng.uniform(0.5, 2.0, d))
    b = A @ x_star - np.linalg.lstsq(A.T, grad / 2, rcond=None)[0]
    A_t, b_t = torch.tensor(A), torch.tensor(b)
    problem = fc.CompositeProblem(cp.sum_squares(fc.inner_value(m)), lambda x, _: A_t @ x - b_t, fc.Simplex(d))
    return problem, x_star


def walk(problem, step, start, iters):
    """The run and every iterate x_0, ..., x_iters it visits (a callback sees each one)."""
    path = []
    res = fc.solve(
        problem,
        "fw",
        corrective=step,
        iters=iters,
        x0=start,
        progress=False,
        callback=lambda it: path.append(it.x.numpy().copy()),
    )
    return res, path


def plane(x):
    return np.asarray(x) @ CORNERS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/gallery")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")

    problem, start = triangle_problem()
    x = cp.Variable(3)
    M, p = np.array([[1.0, 0.3, 0.0], [0.0, 1.0, 0.2], [0.1, 0.0, 0.7]]), np.array([0.7, 0.5, -0.3])
    cp.Problem(cp.Minimize(cp.sum_squares(M @ (x - p))), [x >= 0, cp.sum(x) == 1]).solve(solver="CLARABEL")
    zoom = left.inset_axes([0.6, 0.35, 0.42, 0.42])
    for ax in (left, zoom):
        ax.fill(*CORNERS.T, color="0.95", edgecolor="0.3")
    for i, corner in enumerate(CORNERS):
        left.annotate(f"vertex {i + 1}", corner, textcoords="offset points", xytext=(-20, 8 if i == 2 else -14))
    for step, style in [("away", "--s"), ("vanilla", "-o")]:
        res, path = walk(problem, step, start, 40)
        distance = np.linalg.norm(res.x.numpy() - x.value)
        print(f"triangle, {step:7s}: 40 steps, weight of vertex 3 = {res.x[2].item():.1e}, |x - x*| = {distance:.1e}")
        for ax in (left, zoom):
            ax.plot(*plane(path).T, style, color=COLORS[step], ms=3, lw=1, label=f"{step}, 40 steps")
    for ax in (left, zoom):
        ax.plot(*plane(x.value), "k*", ms=12, label="x* (CVXPY)", zorder=3)
        ax.set_aspect("equal")
        ax.set_axis_off()
    centre = plane(x.value)
    zoom.set_xlim(centre[0] - 0.06, centre[0] + 0.06)
    zoom.set_ylim(-0.01, 0.11)
    zoom.set_axis_on()
    zoom.set_xticks([])
    zoom.set_yticks([])
    left.indicate_inset_zoom(zoom, edgecolor="0.5")
    left.set_title("the triangle: vanilla zig-zags, an away step drops vertex 3")
    left.legend(loc="upper left", fontsize="small")

    problem, x_star = face_problem()
    phi_star = problem.objective(x_star)
    for step in STEPS:
        res = fc.solve(problem, "fw", corrective=step, iters=ITERS, progress=False)
        k = np.array([row["k"] for row in res.history])
        error = res.history.column("objective_estimate") - phi_star
        shown = k <= np.argmax(error < FLOOR) if (error < FLOOR).any() else k >= 0  # down to phi's rounding
        right.semilogy(k[shown], error[shown], color=COLORS[step], label=step)
        if step == "vanilla":
            right.semilogy(k[10:], error[-1] * k[-1] / k[10:], "k--", lw=1, label="c / k")
            print(f"R^30, vanilla: error {error[-1]:.1e} at k = {k[-1]}, k * error = {k[-1] * error[-1]:.2f}")
        else:
            reached = int(np.argmax(error < 1e-10))
            rate = (error[reached] / error[0]) ** (1 / reached)
            atoms = len(res.atoms)
            print(f"R^30, {step}: error < 1e-10 at k = {reached}, {rate:.2f} per step on average, {atoms} vertices")
    right.set_ylim(FLOOR / 10, 10)
    right.set_xlabel("iteration k")
    right.set_ylabel("phi(x_k) - phi*")
    right.set_title("the simplex of R^30, optimum on a 5-vertex face")
    right.grid(alpha=0.3)
    right.legend(fontsize="small")
    fig.savefig(out / f"{Path(__file__).stem}.png", dpi=120)
    print(f"saved {out / (Path(__file__).stem + '.png')}")


if __name__ == "__main__":
    main()
