"""Your own problem: a declarative problem script, `fullcomp run` and `fullcomp report`.

A problem script is a Python file whose build(args) returns a fc.CompositeProblem (F in CVXPY, f~ in
torch, X a fullcomp set, a sampler on fullcomp's generator). This example writes one (printed below), runs
`fullcomp run SCRIPT --iters N --out DIR -- --alpha 0.3` (the script's options after --) and `fullcomp
report DIR --plot` through fullcomp.cli.main, as the shell would. Left: the report's gap.png; right: the
objective re-read with fc.Result.load, with the exact objective on full_batch at the first and last rows.
"""

import argparse
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

import fullcomp as fc
from fullcomp import cli

matplotlib.use("Agg")  # headless: figures are only written to PNG files
SCRIPT = '''"""CVaR of the losses of noisy groups over the simplex: a fullcomp problem script."""
import argparse

import torch

import fullcomp as fc


def build(args):
    parser = argparse.ArgumentParser(prog="my_problem.py")
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--alpha", type=float, default=0.5, help="CVaR level: the mean of the worst alpha")
    parser.add_argument("--noise", type=float, default=0.3)
    opts = parser.parse_args(args)
    torch.set_num_threads(1)  # tiny tensors
    targets = torch.rand(opts.groups, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def group_losses(x, noise):  # f~(x; noise), one loss per group
        return ((x - targets) ** 2).sum(dim=1) + noise @ x

    def sampler(gen):
        return opts.noise * torch.randn(opts.groups, 12, generator=gen, dtype=torch.float64)

    u = fc.inner_value(opts.groups)
    return fc.CompositeProblem(fc.cvar(u, opts.alpha), group_losses, fc.Simplex(12), sampler=sampler,
                               full_batch=torch.zeros(opts.groups, 12, dtype=torch.float64))
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/gallery")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    script, run = out / "my_problem.py", out / "my_problem_run"
    script.write_text(SCRIPT)
    print(f"wrote {script}:\n{SCRIPT}")
    argv = ["run", str(script), "--iters", "100", "--seed", "0", "--out", str(run), "--no-progress"]
    for command in ([*argv, "--", "--alpha", "0.3"], ["report", str(run), "--plot"]):
        if cli.main(command) != 0:  # the exit code `fullcomp ...` would return
            raise SystemExit(f"fullcomp {' '.join(command)} failed")

    result = fc.Result.load(run)
    k, estimate = result.history.column("k"), result.history.column("objective_estimate")
    first, last = result.history[0], result.history[-1]
    print(f"exact objective phi(x): {first['objective']:.5f} at x0 -> {last['objective']:.5f} after {int(k[-1])} its")

    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.9), layout="constrained")
    left.imshow(plt.imread(run / "gap.png"))
    left.set_axis_off()
    left.set_title(f"fullcomp report {run.name} --plot: gap.png", fontsize="medium")
    right.plot(k, estimate, label="objective estimate F(z_k, y_k)")
    right.plot([k[0], k[-1]], [first["objective"], last["objective"]], "ko", label="exact phi(y_k) (full_batch)")
    right.set(xlabel="iteration", ylabel="objective", title=f"{result.info['method']}, read with fc.Result.load")
    right.grid(alpha=0.3)
    right.legend(fontsize="small")
    fig.savefig(out / f"{Path(__file__).stem}.png", dpi=120)
    print(f"saved {out / (Path(__file__).stem + '.png')}")


if __name__ == "__main__":
    main()
