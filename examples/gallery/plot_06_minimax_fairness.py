"""A min-max game with an adversary: SMAG's primal and dual paths on a fairness-regularized classifier.

Logistic w; group A (40%) with gap(w) = mean score on A - mean score elsewhere; the adversary y in
fc.L2Ball(1, 1) plays min_w max_y logloss(w) + lam (y gap(w) - y^2/2), whose max is a Huber penalty of the
gap (CVXPY gives P*) with best response y*(w) = clip(gap(w), -1, 1). SMAG (Algorithm 3) steps x, its
proximal estimate and y per stratified batch. Left: P(x_k) falls to P* (rates / 10 at the dotted line);
right: y_k follows y*(x_k).
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
torch.set_num_threads(1)  # small tensors: one thread avoids contention on a shared machine
N, DIM, LAM, R, ITERS = 400, 5, 2.0, 1.0, 1500
rng = np.random.default_rng(0)
group = rng.random(N) < 0.4
X_np = rng.standard_normal((N, DIM)) + 1.5 * np.outer(group, np.eye(DIM)[0])  # feature 0 reveals the group
labels_np = np.sign(X_np @ np.array([1.0, 1.0, -0.5, 0.5, 0.0]) + rng.standard_normal(N))
C_np = np.where(group, 1.0 / group.sum(), -1.0 / (~group).sum())  # gap(w) = C . (X w)
X, labels, C, SHARE = torch.tensor(X_np), torch.tensor(labels_np), torch.tensor(C_np), group.mean()
IN_A, OUT_A = torch.tensor(np.flatnonzero(group)), torch.tensor(np.flatnonzero(~group))


def sampler(gen):  # a stratified batch: 32 points of A and 32 of the rest
    return tuple(part[torch.randint(len(part), (32,), generator=gen)] for part in (IN_A, OUT_A))


def phi(w, y, batch):  # the minibatch game: unbiased logloss and gap, then the adversary's term
    (a, b), softplus = batch, torch.nn.functional.softplus
    sa, sb = X[a] @ w, X[b] @ w
    logloss = SHARE * softplus(-labels[a] * sa).mean() + (1 - SHARE) * softplus(-labels[b] * sb).mean()
    return logloss + LAM * (y[0] * (sa.mean() - sb.mean()) - 0.5 * y[0] ** 2)


def primal(w):  # max over |y| <= R in closed form: a Huber penalty of the exact gap
    scores, gap = X @ w, float(C @ (X @ w))
    huber = 0.5 * gap**2 if abs(gap) <= R else R * abs(gap) - 0.5 * R**2
    return float(torch.nn.functional.softplus(-labels * scores).mean()) + LAM * huber, gap


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/gallery")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    w = cp.Variable(DIM)
    scores = X_np @ w  # CVXPY's optimum of the primal, and the unregularized model's gap
    logloss = cp.sum(cp.logistic(cp.multiply(-labels_np, scores))) / N
    p_star = cp.Problem(cp.Minimize(logloss + LAM * cp.huber(C_np @ scores, R) / 2)).solve()
    y_star = float(np.clip(C_np @ X_np @ w.value, -R, R))
    cp.Problem(cp.Minimize(logloss)).solve()
    unfair_gap = float(C_np @ X_np @ w.value)

    x0, y0 = torch.zeros(DIM, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    problem = fc.DMaxProblem(phi, x0=x0, y0=y0, Y=fc.L2Ball(1, R), sampler=sampler)

    def record(it):  # outside optimizer time: exact primal value, the dual variable and the best response
        value, gap = primal(it.x)
        return {"primal": value, "y": float(it.state.y[0]), "best_y": float(np.clip(gap, -R, R))}

    steps = {"gamma": 0.5, "eta0": 0.1, "eta1": 0.1, "decay": fc.StepDecay((750,))}  # rates / 10 at k = 750
    res = fc.smag(problem, **steps, iters=ITERS, seed=0, callback=record, eval_every=10, progress=False)
    rows, (value, gap) = [r for r in res.history if "primal" in r], primal(res.x)
    k = np.array([r["k"] for r in rows])
    print(f"primal P(x_T) = {value:.5f}, CVXPY optimum P* = {p_star:.5f}, gap {value - p_star:.1e}")
    print(f"dual y_T = {float(res.y[0]):.4f}, best response y*(x_T) = {np.clip(gap, -R, R):.4f}, y* = {y_star:.4f}")
    print(f"demographic gap: {unfair_gap:.3f} without the adversary, {gap:.3f} with it (lam = {LAM})")

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8), layout="constrained")
    left.plot(k, [r["primal"] for r in rows], label="P(x_k) (SMAG)")
    left.axhline(p_star, color="k", ls="--", lw=1, label="P* (CVXPY)")
    left.set(xlabel="iteration", ylabel="primal P(x) = max_y phi(x, y)", title="primal: logloss + lam Huber(gap)")
    right.plot(k, [r["y"] for r in rows], label="dual y_k (SMAG)")
    right.plot(k, [r["best_y"] for r in rows], alpha=0.7, label="best response clip(gap(x_k))")
    right.axhline(y_star, color="k", ls="--", lw=1, label="y* at the optimum")
    right.set(xlabel="iteration", ylabel="adversary y", title="dual path")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.axvline(750, color="gray", ls=":", lw=1)
        ax.legend(fontsize="small")
    fig.savefig(out / f"{Path(__file__).stem}.png", dpi=120)
    print(f"saved {out / (Path(__file__).stem + '.png')}")


if __name__ == "__main__":
    main()
