"""Robust linear models as scikit-learn estimators: a risk of the per-sample losses, minimized by ``fc.solve``.

Each estimator fits min over (w, b) in X of R(l_1(w, b), ..., l_n(w, b)): R a named risk (``risk=``, sized
by ``alpha=``) or the user's, l_i the model's loss on training row i, and X the compact domain
{||w|| <= radius} x [-bound, bound] that ``C`` sizes (fullcomp's methods need a compact domain).
"""

from __future__ import annotations

import math
import os
from numbers import Integral, Real
from typing import Any

import cvxpy as cp
import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from fullcomp.algorithms.method import default_method, solve
from fullcomp.errors import OptionError
from fullcomp.estimators import fairness, risks
from fullcomp.model.calculus import risk_weights
from fullcomp.model.composite import CompositeProblem
from fullcomp.model.placeholder import inner_value
from fullcomp.persample import PerSample
from fullcomp.run import Checkpoint
from fullcomp.sets import Box, L1Ball, L2Ball, Product

#: The torch loss of a score s (the linear model's output) for a target t: +-1 labels or real targets.
LOSSES = {
    "logistic": lambda s, t: torch.nn.functional.softplus(-t * s),
    "hinge": lambda s, t: torch.relu(1.0 - t * s),
    "squared": lambda s, t: (t - s) ** 2,
    "absolute": lambda s, t: torch.abs(t - s),
}
#: Lipschitz constants of the losses in the score, for the Wasserstein risk (the squared loss has none).
LIPSCHITZ = {"logistic": 1.0, "hinge": 1.0, "absolute": 1.0}
#: ``C = 1`` gives this radius (times the targets' standard deviation for a regression), see ``radius``.
RADIUS_PER_C = 10.0


def _method(est: RobustLinearModel, problem: CompositeProblem) -> str:
    """The estimator's ``method``, or fc.solve's route for the problem ("oce" for a per-sample OCE risk), or
    "hmsfw" for the risks that have no default route (max, mean, tv, group, Wasserstein, a callable)."""
    if est.method is not None:
        return est.method
    try:
        return default_method(problem)
    except OptionError:
        return "hmsfw"


class RobustLinearModel(BaseEstimator):
    """The fitting shared by the robust linear estimators; the subclasses set the loss and the targets."""

    _parameter_constraints: dict = {
        "risk": [StrOptions(set(risks.SIZES)), callable],
        "alpha": [Interval(Real, 0, None, closed="left"), None],
        "C": [Interval(Real, 0, None, closed="neither")],
        "penalty": [StrOptions({"l2", "l1"})],
        "fit_intercept": ["boolean"],
        "method": [str, None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="neither"), None],
        "seconds": [Interval(Real, 0, None, closed="neither"), None],
        "random_state": ["random_state"],
        "checkpoint": [str, os.PathLike, Checkpoint, None],
        "solver_options": [dict, None],
        "verbose": ["boolean"],
        "constraint": [StrOptions(set(fairness.CONSTRAINTS)), None],
        "bound": [Interval(Real, 0, None, closed="left")],
    }
    _y_numeric = False

    def __init__(
        self,
        risk: str | Any = "cvar",
        alpha: float | None = None,
        *,
        C: float = 1.0,
        penalty: str = "l2",
        fit_intercept: bool = True,
        method: str | None = None,
        max_iter: int = 200,
        tol: float | None = None,
        seconds: float | None = None,
        random_state: Any = None,
        checkpoint: Any = None,
        solver_options: dict | None = None,
        verbose: bool = False,
        constraint: str | None = None,
        bound: float = 0.05,
    ):
        self.risk, self.alpha, self.C, self.penalty, self.fit_intercept = risk, alpha, C, penalty, fit_intercept
        self.method, self.max_iter, self.tol, self.seconds = method, max_iter, tol, seconds
        self.random_state, self.checkpoint, self.solver_options, self.verbose = (
            random_state,
            checkpoint,
            solver_options,
            verbose,
        )
        self.constraint, self.bound = constraint, bound

    def fit(
        self, X: Any, y: Any, sample_weight: Any = None, groups: Any = None, sensitive_features: Any = None
    ) -> RobustLinearModel:
        """Fit the model: minimize the risk of the training losses over the domain that ``C`` sizes.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The training features.
        y : array-like of shape (n_samples,)
            The targets: two classes for a classifier, real numbers for a regressor.
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative weights: the risk of the weighted distribution (integer weights: of the data set with
            row i repeated ``sample_weight[i]`` times); risks "mean", "cvar", "chi2", "tv", "wasserstein" and
            "group" take them.
        groups : array-like of shape (n_samples,), optional
            The group label of each row, for ``risk="group"`` (and only for it).
        sensitive_features : array-like of shape (n_samples,), optional
            The sensitive feature, of two values, for ``constraint=`` (and only for it).

        Returns
        -------
        self
        """
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=self._y_numeric)
        t = self._targets(y)
        w = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if not w.sum() > 0:
            raise OptionError("sample_weight must have a positive entry: every row has weight 0")
        p = None if np.all(w == w[0]) else w / w.sum()
        if (self.constraint is None) != (sensitive_features is None):
            raise OptionError(
                "sensitive_features is read by constraint= and constraint= needs it: pass both "
                "(constraint='demographic_parity', fit(X, y, sensitive_features=column)) or neither"
            )
        fit = _fitted(self, X, t, p, w, (groups, sensitive_features))
        self.coef_, self.intercept_ = self._shaped(fit.pop("coef"), fit.pop("intercept"))
        for name, value in fit.items():
            setattr(self, name, value)
        self.constraint_ = None if self.constraint is None else fairness.report(self, X, t, sensitive_features, w)
        return self

    def constraint_report(self, X: Any, y: Any, sensitive_features: Any) -> dict:
        """The fitted model's ``constraint`` on the data (X, y): the two groups' mean outputs, the gap, the bound
        and the violation (``constraint_`` holds them on the training data).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sensitive_features : array-like of shape (n_samples,)
            The sensitive feature's two values.

        Returns
        -------
        dict
        """
        check_is_fitted(self)
        if self.constraint is None:
            raise OptionError("constraint_report needs a model fitted with constraint= (this one has none)")
        y = np.asarray(y)
        t = np.where(y == self.classes_[1], 1.0, -1.0) if hasattr(self, "classes_") else y.astype(np.float64)
        return fairness.report(self, X, t, sensitive_features)

    def _fit_options(self) -> dict:
        seed = self.random_state
        if not isinstance(seed, (int, np.integer)):
            seed = int(check_random_state(seed).randint(2**31 - 1))
        options = {"iters": self.max_iter, "seed": int(seed), "progress": bool(self.verbose)}
        named = {"seconds": self.seconds, "gap_tol": self.tol, "checkpoint": self.checkpoint}
        options.update({k: v for k, v in named.items() if v is not None})
        return {**options, **(self.solver_options or {})}

    def _scores(self, X: Any) -> np.ndarray:
        """The linear score X w + b of each row, once the model is fitted."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ np.ravel(self.coef_) + float(np.ravel(self.intercept_)[0])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags


class _Classifier(ClassifierMixin, RobustLinearModel):
    """Two classes: classes_[1] is the positive one (target +1), classes_[0] the negative (target -1)."""

    def _targets(self, y: np.ndarray) -> np.ndarray:
        check_classification_targets(y)
        kind = type_of_target(y, input_name="y", raise_unknown=True)
        self.classes_ = np.unique(y)
        if kind != "binary" or self.classes_.size != 2:
            raise ValueError(
                f"Only binary classification is supported. The type of the target is {kind} with "
                f"{self.classes_.size} class(es); for more classes, wrap the estimator in "
                "sklearn.multiclass.OneVsRestClassifier"
            )
        return np.where(y == self.classes_[1], 1.0, -1.0)

    def _shaped(self, coef: np.ndarray, intercept: float) -> tuple[np.ndarray, np.ndarray]:
        return coef.reshape(1, -1), np.array([intercept])

    def decision_function(self, X: Any) -> np.ndarray:
        """The linear score X w + b of each row: positive for classes_[1].

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to score.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return self._scores(X)

    def predict(self, X: Any) -> np.ndarray:
        """The class of each row: classes_[1] where the score is positive.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to classify.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        positive = self.decision_function(X) > 0  # first: it checks that the model is fitted
        return self.classes_[positive.astype(int)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags


def _fitted(est: RobustLinearModel, X: np.ndarray, t: np.ndarray, p: Any, w: np.ndarray, labels: tuple) -> dict:
    """Build the problem, solve it and read the fitted attributes off the result."""
    groups, sensitive = labels
    problem, losses, to_groups, radius, bound = _problem(est, X, t, p, w, groups, sensitive)
    result = solve(problem, _method(est, problem), **est._fit_options())
    x = result.x.detach().cpu().numpy().astype(np.float64)
    d = X.shape[1]
    u = losses(x)
    if est.risk == "wasserstein" or est.constraint is not None:  # the mean (or the moved points): their weights
        q = np.full(u.size, 1.0 / u.size) if p is None else p
    else:
        q = risk_weights(problem, u if to_groups is None else to_groups @ u)
        q = q if to_groups is None else to_groups.T @ q  # a group's weight shared as its mean shares its loss
    gap_name = result.info.get("gap_measure")
    last = result.history.rows[-1] if len(result.history) else {}
    return {
        "coef": x[:d],
        "intercept": float(x[d]) if est.fit_intercept else 0.0,
        "worst_case_weights_": np.asarray(q, dtype=np.float64),
        "robust_objective_": float(problem.objective(result.x)),
        "gap_": float(last.get(gap_name, math.nan)) if gap_name else math.nan,
        "history_": result.history,
        "result_": result,
        "n_iter_": int(result.info.get("iterations", len(result.history))),
        "radius_": radius,
        "intercept_bound_": bound,
    }


def _problem(
    est: RobustLinearModel, X: np.ndarray, t: np.ndarray, p: Any, w: np.ndarray, groups: Any, sensitive: Any
) -> tuple:
    """(problem, per-sample losses at a numpy x, the group-mean matrix or None, radius, intercept bound).

    The one place the estimators declare their problem: one loss per row (``fc.PerSample``), or the group
    means of the losses for ``risk="group"``.
    """
    n, d = X.shape
    loss = est._loss_name
    radius, bound = domain_size(est, X, t)
    ball = (L2Ball if est.penalty == "l2" else L1Ball)(d, radius)
    domain = Product(ball, Box(-bound, bound, shape=(1,))) if est.fit_intercept else ball
    Xt, tt = torch.tensor(X), torch.tensor(t, dtype=torch.float64)  # copies: X may be a read-only memmap
    to_groups, sizes = (
        _group_means(groups, w if p is not None else np.ones(n), n) if est.risk == "group" else (None, None)
    )
    if est.risk != "group" and groups is not None:
        raise OptionError(f"groups is read by risk='group' only; risk={est.risk!r} takes no groups (drop groups=)")
    G = None if to_groups is None else torch.as_tensor(to_groups)
    score_of = LOSSES[loss]

    def per_sample(x: torch.Tensor) -> torch.Tensor:
        return score_of(Xt @ x[:d] + (x[d] if est.fit_intercept else 0.0), tt)

    def group_means(x: torch.Tensor, batch: Any) -> torch.Tensor:
        return G @ per_sample(x)

    def losses(x: torch.Tensor, rows: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return score_of(rows[0] @ x[:d] + (x[d] if est.fit_intercept else 0.0), rows[1])

    if est.constraint is not None:
        fairness.check(est)
        S = fairness.sides(est.constraint, sensitive, t, w if p is not None else np.ones(n))
        inner, u, kept = fairness.constrained(
            est, lambda x: Xt @ x[:d] + (x[d] if est.fit_intercept else 0.0), lambda s: score_of(s, tt), S, w
        )
        x0 = torch.zeros(domain.shape, dtype=torch.float64)
        problem = CompositeProblem(u[0], inner, domain, x0=x0, check_gradient=False, constraints=kept)
        return problem, lambda x: per_sample(torch.as_tensor(x)).detach().numpy(), None, radius, bound
    # One loss per row: its Jacobian's rows come from per-sample gradients, never an n x n identity.
    inner = group_means if G is not None else PerSample(losses, (Xt, tt))
    u = inner_value(n if G is None else G.shape[0])
    if est.risk == "group":
        outer = risks.group_outer(u, sizes, est.alpha)
    else:
        outer = risks.outer(est.risk, est.alpha, u, p)
    if est.risk == "wasserstein":
        if loss not in LIPSCHITZ:
            raise OptionError(
                f"risk='wasserstein' needs a Lipschitz loss (one of {sorted(LIPSCHITZ)}); the {loss} loss has no "
                "Lipschitz constant, so its Wasserstein risk is not a norm penalty: pick another risk or loss"
            )
        # Wasserstein-1 DRO on the features of a Lipschitz loss of a linear score: the mean loss plus radius x
        # Lipschitz constant x the dual norm (l2) of w (Shafieezadeh-Abadeh, Kuhn and Mohajerin Esfahani 2015).
        outer = outer + risks.size("wasserstein", est.alpha) * LIPSCHITZ[loss] * cp.norm(domain.variable[:d], 2)
    x0 = torch.zeros(domain.shape, dtype=torch.float64)
    problem = CompositeProblem(outer, inner, domain, x0=x0, check_gradient=False)
    return problem, lambda x: per_sample(torch.as_tensor(x)).detach().numpy(), to_groups, radius, bound


def domain_size(est: RobustLinearModel, X: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(radius of w's ball, bound on |b|): radius = 10 C (times the targets' standard deviation for a
    regressor); the bound is one the optimal intercept does not reach (see the estimators' docstrings)."""
    scale = 1.0 if est._y_numeric is False else (float(np.std(t)) or 1.0)
    radius = RADIUS_PER_C * est.C * scale
    reach = float(np.max(np.linalg.norm(X, ord=2 if est.penalty == "l2" else np.inf, axis=1), initial=0.0))
    if est._y_numeric:
        return radius, radius * reach + float(np.max(np.abs(t))) + 1.0
    return radius, radius * reach + 1.0 + math.log(2.0 * X.shape[0])


def _group_means(groups: Any, w: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The (n_groups, n) matrix whose row g averages the losses of group g with the sample weights w, and the
    groups' sizes (their weights' sums: with integer weights, the group's rows once repeated)."""
    if groups is None:
        raise OptionError("risk='group' needs the group of each row: fit(X, y, groups=labels), labels of shape (n,)")
    labels = np.asarray(groups).reshape(-1)
    if labels.shape != (n,):
        raise OptionError(f"groups must hold one label per row of X ({n}), got shape {np.shape(groups)}")
    names = np.unique(labels)
    member = (labels[None, :] == names[:, None]).astype(np.float64) * w[None, :]
    if not np.all(member.sum(axis=1) > 0):
        raise OptionError("every group in groups needs a row of positive sample_weight")
    sizes = member.sum(axis=1)
    return member / sizes[:, None], sizes


_FIT_DOC = """
    Parameters
    ----------
    risk : str or callable, default "cvar"
        The risk of the per-sample losses that the fit minimizes: "cvar", "chi2", "kl", "tv", "entropic",
        "wasserstein", "group", "max" or "mean" (empirical risk minimization), or a callable that builds a
        CVXPY risk of the placeholder u it is given, ``risk=lambda u: fc.cvar(u, 0.2)``.{loss}
    alpha : float, optional
        The named risk's size (None: its default): the CVaR level in (0, 1] (0.5); the chi-square radius eps,
        the risk being fc.chi2_dro with kappa = eps / 2, that is n sum (q_i - 1/n)^2 <= eps (1.0); the KL
        radius rho (0.5); the total-variation radius eps in [0, 1) (0.1); the entropic temperature lam (1.0);
        the Wasserstein-1 radius on the features (0.1); Group DRO's C (0.0).  "max", "mean" and a callable
        take none.
    C : float, default 1.0
        Inverse regularization strength: the coefficients lie in the ball ||w|| <= 10 C{scale}.  The default
        does not bind on standardized features: a score w.x of norm-10 weights moves by 10 per standard
        deviation of the features{why}.
    penalty : {{"l2", "l1"}}, default "l2"
        The norm of that ball.
    fit_intercept : bool, default True
        Fit b in [-B, B], B = radius max_i ||x_i||_* + {bound}: a bound the optimal intercept does not reach
        ({bound_why}).
    method : str, optional
        A registered fullcomp method (``fc.methods()``); None lets ``fc.solve`` choose.
    max_iter : int, default 200
        The run's iterations (``iters`` of ``fc.solve``).
    tol : float, optional
        Stop once the method's gap is at most ``tol`` (``gap_tol`` of ``fc.solve``).
    seconds : float, optional
        A time budget for the run.
    random_state : int, RandomState or None
        Seeds the run (``seed`` of ``fc.solve``).
    checkpoint : str or fc.Checkpoint, optional
        Resume and save the run there.
    solver_options : dict, optional
        Any other option of the method or of ``fc.solve``.
    verbose : bool, default False
        Show the run's progress bar.
    constraint : {{"demographic_parity", "equal_opportunity"}}, optional
        Fit the mean loss (``risk="mean"``) subject to a bound on the gap between the two groups of
        ``fit(..., sensitive_features=)`` in the mean positive output h (the predicted probability, the hinge
        score clipped to [0, 1], the prediction): over all rows, or over the positive class's rows.  The
        GLMO keeps the constraint (``fc.CompositeProblem(constraints=...)``); ``constraint_`` reports it.
    bound : float, default 0.05
        The largest gap ``constraint`` allows.

    Attributes
    ----------
    coef_, intercept_ : ndarray
        The fitted model.{classes}
    worst_case_weights_ : ndarray of shape (n_samples,)
        The risk's weights q at the fitted model's training losses (``fc.risk_weights``): the adversary's
        distribution over the training rows (for "group", a group's weight shared by its rows as its mean
        loss shares it; for "wasserstein", whose adversary moves the rows, their own weights).
    robust_objective_ : float
        The risk at the fitted model (the penalty included for "wasserstein").
    gap_ : float
        The method's gap at its last iteration (the history's ``result_.info["gap_measure"]`` column): for
        HMSFW an estimate of the Frank-Wolfe gap, which bounds the suboptimality only once it is exact.
    history_, result_ : fc.History, fc.Result
        The run.
    n_iter_ : int
        Iterations run.
    radius_, intercept_bound_ : float
        The domain's sizes.
    constraint_ : dict or None
        With ``constraint``: the two groups' mean outputs, the gap, the bound and the violation on the training
        data; :meth:`constraint_report` computes them on other data.
    n_features_in_, feature_names_in_ :
        As in scikit-learn.
"""
_CLASSIFIER_DOC = dict(
    loss="",
    classes="\n    classes_ : ndarray of shape (2,)\n        The two classes; classes_[1] has the positive score.",
    scale="",
    why=", so sigmoid scores saturate long before a fitted model of non-separable data reaches the radius",
    bound="1 + log(2 n)",
    bound_why="beyond it one class has zero hinge loss, or logistic losses below 1 / (2 n), and shrinking |b| "
    "lowers the other class's losses more",
)


class RobustLogisticRegression(_Classifier):
    __doc__ = (
        "Logistic regression minimizing a robust risk of the logistic losses log(1 + exp(-y (w.x + b))).\n"
        + _FIT_DOC.format(**_CLASSIFIER_DOC)
    )
    _loss_name = "logistic"

    def predict_proba(self, X: Any) -> np.ndarray:
        """The probabilities of classes_[0] and classes_[1], sigmoid(+-score).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows.

        Returns
        -------
        ndarray of shape (n_samples, 2)
        """
        s = self.decision_function(X)
        positive = 0.5 * (1.0 + np.tanh(0.5 * s))  # the sigmoid, without overflow
        return np.column_stack([1.0 - positive, positive])

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The logarithms of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows.

        Returns
        -------
        ndarray of shape (n_samples, 2)
        """
        s = self.decision_function(X)
        return -np.column_stack([np.logaddexp(0.0, s), np.logaddexp(0.0, -s)])


class RobustLinearSVC(_Classifier):
    __doc__ = (
        "A linear support vector classifier minimizing a robust risk of the hinge losses max(0, 1 - y (w.x + b)).\n"
        + _FIT_DOC.format(**_CLASSIFIER_DOC)
    )
    _loss_name = "hinge"


class RobustLinearRegression(RegressorMixin, RobustLinearModel):
    __doc__ = (
        "Linear regression minimizing a robust risk of the squared losses (y - w.x - b)^2 or the absolute ones.\n"
        + _FIT_DOC.format(
            loss="\n    loss : {'squared', 'absolute'}, default 'squared'\n        The loss of a residual y - w.x - b.",
            classes="",
            scale=" std(y)",
            why=" for targets of standard deviation std(y)",
            bound="max |y| + 1",
            bound_why="beyond it shrinking |b| lowers every absolute residual",
        )
    )
    _parameter_constraints = {**RobustLinearModel._parameter_constraints, "loss": [StrOptions({"squared", "absolute"})]}
    _y_numeric = True

    def __init__(
        self,
        risk: str | Any = "cvar",
        alpha: float | None = None,
        *,
        loss: str = "squared",
        C: float = 1.0,
        penalty: str = "l2",
        fit_intercept: bool = True,
        method: str | None = None,
        max_iter: int = 200,
        tol: float | None = None,
        seconds: float | None = None,
        random_state: Any = None,
        checkpoint: Any = None,
        solver_options: dict | None = None,
        verbose: bool = False,
        constraint: str | None = None,
        bound: float = 0.05,
    ):
        super().__init__(
            risk, alpha, C=C, penalty=penalty, fit_intercept=fit_intercept, method=method, max_iter=max_iter,
            tol=tol, seconds=seconds, random_state=random_state, checkpoint=checkpoint,
            solver_options=solver_options, verbose=verbose, constraint=constraint, bound=bound,
        )  # fmt: skip
        self.loss = loss

    @property
    def _loss_name(self) -> str:
        return self.loss

    def _targets(self, y: np.ndarray) -> np.ndarray:
        return y.astype(np.float64)

    def _shaped(self, coef: np.ndarray, intercept: float) -> tuple[np.ndarray, float]:
        return coef, intercept

    def predict(self, X: Any) -> np.ndarray:
        """The prediction w.x + b of each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return self._scores(X)
