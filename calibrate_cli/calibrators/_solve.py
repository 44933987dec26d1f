"""What the smooth fits share: one BLAS thread around a small solve, and the Newton budget.

The solvers of matrix, Dirichlet and vector scaling work on a few hundred parameters; their
BLAS/LAPACK calls (inside scipy's L-BFGS-B and trust-region code) are far too small to gain from
threads, and on a busy machine a threaded BLAS spends most of its time waiting for its own threads
(docs/performance.md has the measurement). :func:`one_blas_thread` limits BLAS to one thread for the solve when ``threadpoolctl``
is installed (it is optional; without it nothing changes but the speed).
"""

from __future__ import annotations

import contextlib

__all__ = ["NEWTON_BUDGET", "newton_affordable", "one_blas_thread"]

#: the largest N · P² (rows times the squared number of parameters) for which a fit builds the exact
#: Hessian (P × P, in row chunks) and solves by Newton's method (scipy's trust-exact): 4·10⁹
#: multiply-adds, about a second per Hessian on one core; above it the fit uses L-BFGS-B
NEWTON_BUDGET = 4e9
#: the largest number of parameters P for a dense Hessian (P² float64: 32 MB at 2000)
NEWTON_MAX_PARAMETERS = 2000


def newton_affordable(n: int, p: int) -> bool:
    """True when an exact P × P Hessian on N rows is cheap enough (see :data:`NEWTON_BUDGET`)."""
    return p <= NEWTON_MAX_PARAMETERS and float(n) * p * p <= NEWTON_BUDGET


def one_blas_thread():
    """A context limiting BLAS/LAPACK to one thread (a no-op without ``threadpoolctl``)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")
