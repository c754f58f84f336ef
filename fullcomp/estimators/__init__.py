"""scikit-learn estimators of robust linear models (a risk of the per-sample losses, solved by ``fc.solve``).

``from fullcomp.estimators import RobustLogisticRegression``; this subpackage needs scikit-learn
(``pip install "fullcomp[estimators]"``), which ``import fullcomp`` does not load.
"""

try:
    import sklearn  # noqa: F401
except ImportError as missing:  # pragma: no cover - the test environment has scikit-learn
    raise ImportError(
        'fullcomp.estimators needs scikit-learn >= 1.6: pip install "fullcomp[estimators]" (or scikit-learn)'
    ) from missing

from fullcomp.estimators.linear import (
    RobustLinearModel,
    RobustLinearRegression,
    RobustLinearSVC,
    RobustLogisticRegression,
)

__all__ = ["RobustLogisticRegression", "RobustLinearRegression", "RobustLinearSVC", "RobustLinearModel"]
