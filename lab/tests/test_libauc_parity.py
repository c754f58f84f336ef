"""Partial AUC as LibAUC users have it: the two-way metric, LibAUC's pAUC losses as DMax problems, SOPA's options.

The metric is checked against brute-force pair counts and the ROC area, the DMax forms against the exact
losses, and, where LibAUC 2.0 is installed (``pip install --no-deps libauc==2.0.1``: its losses,
optimizers and metrics need only torch, numpy, scipy, scikit-learn and tqdm), every update against
LibAUC's own loss and optimizer fed the same batches on a tiny linear model, in float64.  Without
LibAUC those comparisons skip.
"""

from __future__ import annotations

import contextlib
import copy
import math

import cvxpy as cp
import numpy as np
import pytest
import torch
from sklearn.metrics import roc_curve
from torch import nn

import fullcomp as fc
from fullcomp.algorithms.minimax import sopa
from fullcomp.errors import OptionError
from fullcomp_lab import pauc
from fullcomp_lab.metrics import partial_auc, two_way_partial_auc

torch.set_num_threads(1)


def data(seed: int = 0, n: int = 40, d: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + 0.7 * rng.normal(size=n) > 0.2).astype(int)
    return X.astype(np.float32), y, rng.integers(0, 2, n)


# ------------------------------------------------------------------------------------ two-way metric


def brute_force(y, s, k_pos, k_neg):
    """(1/(k_pos k_neg)) sum over the k_pos lowest positives and k_neg highest negatives of 1[>] + 1/2 1[=]."""
    pos, neg = np.sort(s[y == 1])[:k_pos], np.sort(s[y == 0])[::-1][:k_neg]
    return sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (k_pos * k_neg)


def scores(seed, n=57, ties=True):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    s = rng.normal(size=n) + 0.8 * y
    return y, (np.round(s, 1) if ties else s)


@pytest.mark.parametrize("seed", range(4))
def test_two_way_normalized_is_the_pair_count(seed):
    y, s = scores(seed)  # rounded scores: ties, within and across the classes
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    for max_fpr, min_tpr in [(0.3, 0.5), (0.05, 0.9), (1.0, 0.2), (0.37, 0.0), (0.5, 0.33)]:
        k_pos, k_neg = math.ceil((1 - min_tpr) * n_pos - 1e-9), math.ceil(max_fpr * n_neg - 1e-9)
        expected = brute_force(y, s, max(1, k_pos), max(1, k_neg))
        assert two_way_partial_auc(y, s, max_fpr, min_tpr) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_two_way_raw_is_the_roc_area(seed):
    # Distinct scores, integral products: the area is the pair count over n+ n-.
    y = np.r_[np.zeros(20, int), np.ones(10, int)]
    s = np.random.default_rng(seed).normal(size=30) + 0.7 * y
    count = brute_force(y, s, 5, 6)  # (1 - 0.5) 10 = 5 positives, 0.3 * 20 = 6 negatives
    assert two_way_partial_auc(y, s, 0.3, 0.5, "raw") == pytest.approx(count * 5 * 6 / (10 * 20), abs=1e-12)
    # With ties and fractional edges: the area of max(TPR - min_tpr, 0) over FPR <= max_fpr, by a fine grid
    # on scikit-learn's ROC curve (every threshold kept: ties are its diagonal pieces).
    y, s = scores(seed)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    grid = np.linspace(0, 0.37, 400_001)
    height = np.maximum(np.interp(grid, fpr, tpr) - 0.45, 0)
    area = float(np.sum(np.diff(grid) * (height[1:] + height[:-1]) / 2))
    # The grid's error: half a cell per jump of the curve, under 1e-6 in all.
    assert two_way_partial_auc(y, s, 0.37, 0.45, "raw") == pytest.approx(area, abs=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_two_way_with_min_tpr_zero_is_one_way(seed):
    y, s = scores(seed)
    for rho in (0.3, 0.05, 1.0):
        for kind in ("normalized", "raw"):
            assert two_way_partial_auc(y, s, rho, 0.0, kind) == pytest.approx(partial_auc(y, s, rho, kind), abs=1e-15)
        assert two_way_partial_auc(y, s, rho, 0.0, "libauc") == partial_auc(y, s, rho, "mcclish")


@pytest.mark.parametrize("seed", range(5))
def test_two_way_libauc_kind_is_libauc_pauc_roc_score(seed):
    metrics = pytest.importorskip("libauc.metrics")
    y, s = scores(seed)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    for max_fpr, min_tpr in [(0.3, 0.5), (0.05, 0.9), (0.5, 0.33), (0.25, 0.1), (0.3, 0.0), (1.0, 0.0)]:
        if min_tpr > 0 and (round(n_pos * (1 - min_tpr)) >= n_pos or round(n_neg * max_fpr) >= n_neg):
            continue  # LibAUC's argpartition fails there
        expected = metrics.pauc_roc_score(y, s, max_fpr=max_fpr, min_tpr=min_tpr)
        assert two_way_partial_auc(y, s, max_fpr, min_tpr, "libauc") == pytest.approx(expected, abs=1e-12)
    # Half-way products: LibAUC rounds half to even (round(2.5) = 2), "normalized" takes the ceiling.
    y = np.r_[np.zeros(5, int), np.ones(5, int)]
    s = np.arange(10.0)[::-1] % 7
    assert two_way_partial_auc(y, s, 0.5, 0.5, "libauc") == pytest.approx(
        metrics.pauc_roc_score(y, s, max_fpr=0.5, min_tpr=0.5), abs=1e-12
    )
    assert two_way_partial_auc(y, s, 0.5, 0.5, "libauc") == pytest.approx(brute_force(y, s, 2, 2))
    assert two_way_partial_auc(y, s, 0.5, 0.5) == pytest.approx(brute_force(y, s, 3, 3))


def test_two_way_errors():
    y, s = np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])
    assert two_way_partial_auc(y, s, 1.0, 0.0) == pytest.approx(0.75)
    with pytest.raises(OptionError, match="min_tpr"):
        two_way_partial_auc(y, s, 0.3, 1.0)
    with pytest.raises(OptionError, match="max_fpr"):
        two_way_partial_auc(y, s, 0.0, 0.5)
    with pytest.raises(OptionError, match="kind"):
        two_way_partial_auc(y, s, 0.3, 0.5, "mcclish")
    with pytest.raises(OptionError, match="both classes"):
        two_way_partial_auc([1, 1], [0.2, 0.3], 0.3, 0.5)


# ----------------------------------------------------------------------------------- the DMax forms

BUILDERS = {
    "kl": (pauc.pauc_dro_problem, {"Lambda": 0.5}),
    "two-way-kl r<1": (pauc.tpauc_kl_problem, {"Lambda": 0.5, "tau": 1.0}),
    "two-way-kl r=1": (pauc.tpauc_kl_problem, {}),
    "two-way-kl r>1": (pauc.tpauc_kl_problem, {"Lambda": 2.0, "tau": 1.0}),
    "two-way-cvar": (pauc.tpauc_cvar_problem, {"theta0": 0.5, "theta1": 0.25}),
}


def full_batch(declared):
    """phi's argument on every pair: the declared problem's batch covers all positives and negatives."""
    return declared.problem.sampler(torch.Generator().manual_seed(0))


def phi_at(declared, aux, y=None):
    """phi on the full batch at the start weights with the auxiliary entries (and y) given, unscaled."""
    p, scale = declared.problem, declared.scale
    params = {n: t.detach().double() for n, t in declared.model.named_parameters()}
    for name, value in aux.items():
        params[name] = value / (1.0 if name in ("v0", "s2") else scale)
    x = p.x.view(p.x.coerce(params, torch.float64, "cpu", "x"))
    batch = (full_batch(declared)[0].double(), full_batch(declared)[1])
    with torch.no_grad():
        return float(p.phi(x, batch) if p.y is None else p.phi(x, y / scale, batch))


@pytest.mark.parametrize("case", list(BUILDERS))
def test_dmax_forms_reach_the_loss_at_their_optimum(case):
    build, options = BUILDERS[case]
    X, y, _ = data(1, n=36)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    declared = build(X, y, hidden=(), batch_pos=n_pos, batch_neg=n_neg, replace=False, **options)
    inputs, i = full_batch(declared)
    with torch.no_grad():
        L, i = declared.pair_losses(copy.deepcopy(declared.model).double(), (inputs.double(), i))
    target = pauc.pair_objective(declared)
    if declared.loss != "kl":  # fullcomp's CVXPY form of the same two-way risks, an independent value
        o, flat = declared.options, cp.Constant(L.numpy().ravel())
        if declared.loss == "two-way-cvar":
            risk = fc.tpauc_cvar(flat, n_pos, o["theta0"], o["theta1"])
        else:
            risk = fc.tpauc_kl(flat, n_pos, o["Lambda"], o["tau"])
        assert float(risk.value) == pytest.approx(target, abs=1e-10)
    shift = torch.linspace(-0.3, 0.3, n_pos, dtype=torch.float64)
    if declared.loss == "two-way-cvar":
        th0, th1 = options["theta0"], options["theta1"]
        # The minimizing thresholds: the ceil(theta n)-th largest value (a VaR) of each row, then of the g_i.
        s = torch.sort(L, dim=1, descending=True)[0][:, math.ceil(th1 * n_neg - 1e-9) - 1]
        g = s + torch.relu(L - s[:, None]).mean(dim=1) / th1
        s2 = torch.sort(g, descending=True)[0][math.ceil(th0 * n_pos - 1e-9) - 1]
        # In the positives' order: the batch's rows are the positives i.
        s, best_y = torch.zeros_like(s).index_copy(0, i, s), torch.zeros_like(g).index_copy(0, i, (g > s2).double())
        aux = {"s": s, "s2": s2.reshape(1)}
        assert phi_at(declared, aux, best_y) == pytest.approx(target, abs=1e-12)
        assert phi_at(declared, aux, torch.rand(n_pos, dtype=torch.float64)) <= target + 1e-12  # a max over y
        assert phi_at(declared, {"s": s + shift, "s2": s2.reshape(1)}, best_y) > target  # a min over s
        return
    lam, tau = declared.options["Lambda"], declared.options.get("tau", 1.0)
    log_g = torch.logsumexp(L / lam, dim=1) - math.log(n_neg)  # in the order of the batch's positives i
    v = torch.zeros(n_pos, dtype=torch.float64).index_copy(0, i, log_g)
    if declared.loss == "kl":
        assert phi_at(declared, {"v": v}) == pytest.approx(target, abs=1e-12)
        assert phi_at(declared, {"v": v + shift}) > target  # a min over v
        return
    r = lam / tau
    v0 = (torch.logsumexp(r * log_g, dim=0) - math.log(n_pos)).reshape(1)
    assert phi_at(declared, {"v0": v0 + 0.2, **({"v": v} if r < 1 else {})}, v if r > 1 else None) > target
    if r < 1:
        assert phi_at(declared, {"v0": v0, "v": v}) == pytest.approx(target, abs=1e-12)
        assert phi_at(declared, {"v0": v0, "v": v + shift}) > target  # a min over v
    elif r > 1:
        assert phi_at(declared, {"v0": v0}, v) == pytest.approx(target, abs=1e-12)
        assert phi_at(declared, {"v0": v0}, v + shift) < target  # a max over v, which is y
    else:
        assert phi_at(declared, {"v0": v0}) == pytest.approx(target, abs=1e-12)


@pytest.mark.parametrize(
    ("case", "method", "hp"),
    [
        ("kl", "sgda", {"eta_x": 0.3, "eta_y": 0.3}),
        ("two-way-kl r<1", "smag", {"gamma": 0.5, "eta0": 0.2, "eta1": 0.2}),
        ("two-way-kl r>1", "sgda", {"eta_x": 0.1, "eta_y": 0.1}),
        ("two-way-cvar", "smag", {"gamma": 0.5, "eta0": 0.2, "eta1": 0.2}),
        ("two-way-cvar", "epoch-gda", {"eta_x": 0.3, "eta_y": 0.3, "gamma": 0.1}),
    ],
)
def test_dmax_methods_lower_the_losses(case, method, hp):
    build, options = BUILDERS[case]
    X, y, _ = data(2, n=60)
    declared = build(X, y, hidden=(), batch_pos=8, batch_neg=8, **options)
    result = fc.solve(declared.problem, method, iters=150, seed=1, progress=False, **hp)
    assert pauc.pair_objective(declared, result.x) < 0.6 * pauc.pair_objective(declared)


def test_builders_reject_bad_input():
    X, y, _ = data()
    with pytest.raises(OptionError, match="surrogate"):
        pauc.pauc_dro_problem(X, y, surrogate="cubic")
    with pytest.raises(OptionError, match="Lambda"):
        pauc.tpauc_kl_problem(X, y, Lambda=0.0)
    with pytest.raises(OptionError, match="theta1"):
        pauc.tpauc_cvar_problem(X, y, theta1=1.5)
    with pytest.raises(OptionError, match="replace=False"):
        pauc.tpauc_cvar_problem(X, y, batch_pos=100, replace=False)
    with pytest.raises(OptionError, match="replace=False"):
        pauc.pauc_problem(X, y, y, batch_pos=100, replace=False)
    with pytest.raises(OptionError, match="PairProblem"):
        pauc.LibAUCStepper(pauc.pauc_problem(X, y, y, hidden=(4,)), eta=0.1)
    with pytest.raises(OptionError, match="gamma"):
        pauc.LibAUCStepper(pauc.tpauc_cvar_problem(X, y, hidden=()), eta=0.1, gamma=0.5)


# ------------------------------------------------------------------------------------ against LibAUC


@contextlib.contextmanager
def float64_default():
    """LibAUC builds its state and some brackets (an int tensor over a float) in the default dtype."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def libauc_batch(batch, batch_pos):
    """(inputs, labels, index) as LibAUC's losses take them: positives first, index = the positive's number."""
    inputs, i = batch[:2]
    labels = torch.zeros(len(inputs))
    labels[:batch_pos] = 1
    index = torch.zeros(len(inputs), dtype=torch.long)
    index[:batch_pos] = i
    return inputs.double(), labels, index


def libauc_optimizer(optimizer, params, options):
    """A LibAUC optimizer with fullcomp's options (LibAUC's names) and its anchor at the start, as fullcomp's."""
    clip = options.get("clip_value")
    kwargs = {k: v for k, v in options.items() if k not in ("clip_value", "epoch_iters", "eta")}
    opt = optimizer(params, lr=options["eta"], clip_value=math.inf if clip is None else clip, device="cpu", **kwargs)
    for ref, p in zip(opt.model_ref or (), params):
        ref.data = p.detach().clone()
    return opt


def libauc_steps(opt, forward, batches, epoch_iters):
    for t, batch in enumerate(batches):
        opt.zero_grad()
        forward(batch).backward()
        opt.step()
        if epoch_iters is not None and (t + 1) % epoch_iters == 0:
            opt.update_regularizer()


SOPA_OPTIONS = {
    "momentum, clipping, decays": {
        "mode": "sgd", "momentum": 0.9, "clip_value": 0.05, "weight_decay": 1e-2, "epoch_decay": 0.1, "epoch_iters": 3,
    },
    "nesterov": {"mode": "sgd", "momentum": 0.8, "nesterov": True, "weight_decay": 1e-3},
    "adam, clipping, decays": {
        "mode": "adam", "betas": (0.8, 0.99), "clip_value": 0.05, "weight_decay": 1e-2, "epoch_decay": 0.1,
        "epoch_iters": 4,
    },
}  # fmt: skip


@pytest.mark.parametrize("name", list(SOPA_OPTIONS))
def test_sopa_options_follow_libauc_sopa(name):
    losses, optimizers = pytest.importorskip("libauc.losses"), pytest.importorskip("libauc.optimizers")
    options, steps, seed = SOPA_OPTIONS[name], 8, 3
    X, y, a = data()
    n_pos = int(y.sum())
    declared = pauc.pauc_problem(X, y, a, encoder=nn.Identity(), rep_dim=3, batch_pos=4, batch_neg=6, replace=False)
    run = dict(eta=0.3, eta_s=0.2, s_key="u", iters=steps, seed=seed, progress=False, dtype=torch.float64)
    result = sopa(declared.problem, **run, **options)
    generator = torch.Generator().manual_seed(seed)  # the run's draws
    batches = [declared.problem.sampler(generator) for _ in range(steps)]
    with float64_default():
        model = copy.deepcopy(declared.model).double()
        # num_neg given (auto=False): LibAUC's own count is a float32 tensor, which rounds the threshold step.
        loss_fn = losses.pAUC_CVaR_Loss(n_pos, n_pos, num_neg=6, margin=1.0, beta=0.3, eta=0.2, device="cpu")
        params = list(model.head.parameters())
        opt = libauc_optimizer(optimizers.SOPA, params, {"eta": 0.3, **options})

        def forward(batch):
            inputs, labels, index = libauc_batch(batch, 4)
            return loss_fn(torch.sigmoid(model(inputs)[0]), labels, index, auto=False)

        libauc_steps(opt, forward, batches, options.get("epoch_iters"))
    for mine, theirs in zip(result.x.head.parameters(), params):
        assert torch.allclose(mine.detach(), theirs.detach(), rtol=0, atol=1e-12)
    thresholds = declared.threshold_scale * result.x.u.detach()
    assert torch.allclose(thresholds, loss_fn.u_pos.reshape(-1), rtol=0, atol=1e-12)
    # Every option moved the trajectory: without them the weights differ.
    plain = sopa(declared.problem, **run, mode=options["mode"])
    assert (plain.x.head.weight - result.x.head.weight).abs().max() > 1e-4


def test_sopa_option_errors_and_resume(tmp_path):
    X, y, a = data()
    declared = pauc.pauc_problem(X, y, a, hidden=(4,), batch_pos=4, batch_neg=4)
    base = dict(eta=0.1, eta_s=0.1, s_key="u", progress=False)
    for bad, match in [
        ({"mode": "adam", "momentum": 0.9}, "options of mode='sgd'"),
        ({"nesterov": True}, "nesterov needs momentum"),
        ({"momentum": 0.9, "dampening": 0.1, "nesterov": True}, "nesterov needs momentum"),
        ({"epoch_iters": 3}, "give epoch_decay"),
        ({"clip_value": 0.0}, "clip_value"),
        ({"weight_decay": -1.0}, "weight_decay"),
    ]:
        with pytest.raises(OptionError, match=match):
            sopa(declared.problem, iters=1, **base, **bad)
    # The momentum buffer, the anchor and the epoch's sum are checkpointed: a resumed run is the same run.
    options = {**base, "momentum": 0.9, "dampening": 0.1, "clip_value": 0.5, "epoch_decay": 0.1, "epoch_iters": 5}
    full = sopa(declared.problem, iters=12, seed=5, **options)
    ckpt = fc.Checkpoint(tmp_path / "run.ckpt", every=4)

    def interrupt(it):
        if it.k == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sopa(declared.problem, iters=12, seed=5, checkpoint=ckpt, callback=interrupt, **options)
    resumed = sopa(declared.problem, iters=12, seed=5, checkpoint=ckpt, **options)
    assert resumed.info["resumed_from"] == 7
    for mine, theirs in zip(resumed.x.parameters(), full.x.parameters()):
        assert torch.equal(mine, theirs)


STEPPER_WEIGHTS = {
    "mode": "sgd", "momentum": 0.9, "dampening": 0.1, "clip_value": 0.05, "weight_decay": 1e-2, "epoch_decay": 0.1,
    "epoch_iters": 3,
}  # fmt: skip
ADAM = {"mode": "adam", "clip_value": 2.0, "weight_decay": 1e-5, "epoch_decay": 0.1, "epoch_iters": 3}
#: name -> (builder case, its options, the algorithm's options, the step on w, rows drawn with replacement)
STEPPER_CASES = {
    "SOPA-s": ("kl", {"Lambda": 0.5}, {"gamma": 0.7}, STEPPER_WEIGHTS, True),
    "SOPA-s, distinct rows, adam": ("kl", {"Lambda": 2.0}, {"gamma": 0.9}, ADAM, False),
    "SOTA-s r=1": ("two-way-kl r=1", {}, {"gammas": (0.7, 0.6)}, STEPPER_WEIGHTS, True),
    "SOTA-s r<1": ("two-way-kl r<1", {}, {"gammas": (0.7, 0.6)}, STEPPER_WEIGHTS, True),
    "SOTA-s r>1, adam": ("two-way-kl r>1", {}, {"gammas": (0.9, 0.9)}, ADAM, True),
    "STACO": (
        "two-way-cvar", {"theta0": 0.5, "theta1": 0.5}, {"alpha": 0.2, "beta_0": 0.3, "beta_1": 0.1}, STEPPER_WEIGHTS,
        False,
    ),
}  # fmt: skip


def libauc_loss(losses, declared, n_pos, hp):
    o = declared.options
    if declared.loss == "kl":
        return losses.pAUC_DRO_Loss(n_pos, gamma=hp["gamma"], margin=o["margin"], Lambda=o["Lambda"], device="cpu")
    if declared.loss == "two-way-kl":
        return losses.tpAUC_KL_Loss(
            n_pos, tau=o["tau"], Lambda=o["Lambda"], gammas=hp["gammas"], margin=o["margin"], device="cpu"
        )
    return pytest.importorskip("libauc.losses.auc").tpAUC_CVaR_loss(
        n_pos, threshold=o["margin"], alpha=hp["alpha"], beta_0=hp["beta_0"], beta_1=hp["beta_1"],
        theta_0=o["theta0"], theta_1=o["theta1"], device="cpu",
    )  # fmt: skip


@pytest.mark.parametrize("name", list(STEPPER_CASES))
def test_stepper_follows_libauc(name):
    losses, optimizers = pytest.importorskip("libauc.losses"), pytest.importorskip("libauc.optimizers")
    case, extra, algorithm, weights, replace = STEPPER_CASES[name]
    build, options = BUILDERS[case]
    X, y, _ = data()
    n_pos, steps = int(y.sum()), 8
    declared = build(X, y, hidden=(), batch_pos=4, batch_neg=6, replace=replace, **{**options, **extra})
    stepper = pauc.LibAUCStepper(declared, eta=0.3, dtype=torch.float64, seed=4, **algorithm, **weights)
    generator = torch.Generator().manual_seed(4)
    batches = [declared.problem.sampler(generator) for _ in range(steps)]
    rows = [stepper.step() for _ in range(steps)]  # draws the same batches from its own generator
    assert [r["k"] for r in rows] == list(range(steps)) and all(math.isfinite(r["phi_value"]) for r in rows)
    optimizer = {"kl": optimizers.SOPAs, "two-way-kl": optimizers.SOTAs}.get(declared.loss, optimizers.STACO)
    with float64_default():
        scorer = copy.deepcopy(declared.model.scorer).double()
        loss_fn = libauc_loss(losses, declared, n_pos, algorithm)
        params = list(scorer.parameters())
        opt = libauc_optimizer(optimizer, params, {"eta": 0.3, "verbose": False, **weights})

        def forward(batch):
            inputs, labels, index = libauc_batch(batch, 4)
            return loss_fn(torch.sigmoid(scorer(inputs)), labels, index)

        libauc_steps(opt, forward, batches, weights.get("epoch_iters"))
    x = stepper.x
    # LibAUC's STACO counts p_ij = 1[L_ij > s_i] in float32 (.float()): its thresholds and y carry float32 rounding.
    tol = 1e-6 if declared.loss == "two-way-cvar" else 1e-12
    for mine, theirs in zip(x.scorer.parameters(), params):
        assert torch.allclose(mine.detach(), theirs.detach(), rtol=0, atol=1e-3 * tol)
    if declared.loss == "two-way-cvar":
        assert torch.allclose(declared.scale * x.s.detach(), loss_fn.s1.reshape(-1), rtol=0, atol=tol)
        assert torch.allclose(x.s2.detach(), loss_fn.s2.reshape(-1), rtol=0, atol=tol)
        assert torch.allclose(declared.scale * stepper.y, loss_fn.dual_var.reshape(-1), rtol=0, atol=tol)
    else:
        assert torch.allclose(stepper.u, loss_fn.u_pos.reshape(-1), rtol=0, atol=tol)
        if declared.loss == "two-way-kl":
            assert float(stepper.W) == pytest.approx(float(loss_fn.w), abs=tol)
