"""γ*(p0) of Proposition 2 of Mukhoti et al. (2020): the smallest focal-loss γ whose gradient is
smaller than cross-entropy's for every true-class probability p ≥ p0 (no torch; SciPy's Lambert W).

The focal loss's gradient is the cross-entropy's times g(p, γ) = (1 − p)^γ − γ p (1 − p)^(γ−1) log p.
For p0 < 0.5, g(p0, γ) = 1 has one root γ* > 0:

.. math::

    γ^*(p_0) = \\frac{1 - p_0}{p_0 \\ln p_0} + \\frac{W_{-1}(z)}{\\ln(1 - p_0)},\\qquad
    z = -\\frac{\\ln(1 - p_0)}{p_0 \\ln p_0} (1 - p_0)^{1 - (1 - p_0)/(p_0 \\ln p_0)},

with W₋₁ the lower branch of Lambert's W (z ∈ [−1/e, 0)). For p0 ≥ 0.5, g(p, γ) ≤ 1 for every
γ ≥ 0 and γ* = 0. Near p0 = 0.5, z nears the branch point −1/e and SciPy's W₋₁ loses digits, so
the closed form's value is polished by Newton steps on an equivalent, well-conditioned equation
(:func:`_polish`): γ* to ~1e-15 relative everywhere (mpmath's values in tests/cli/test_gamma.py). The reference code (``get_gamma`` in focal_loss_adaptive_gamma.py) adds 1e-12
to z; here z is exact (the difference is below 1e-9 at 0.2). FLSD-53 rounds γ*(0.2) = 4.85 up to 5
and uses 3 from 0.2 on (γ*(0.25) = 3.07).
"""

from __future__ import annotations

import math

from ..errors import InputError

#: γ* is 0 from this p0 on
GAMMA_ZERO_FROM = 0.5
#: the double nearest −1/e on the side where W₋₁ is defined (−1/e itself rounds just outside)
BRANCH_POINT = math.nextafter(-math.exp(-1.0), 0.0)


def focal_gamma(p0: float) -> float:
    """γ*(p0) of Proposition 2 (see the module docstring); 0 for p0 ≥ 0.5.

    >>> round(focal_gamma(0.2), 4), round(focal_gamma(0.25), 4), focal_gamma(0.5)
    (4.8506, 3.0702, 0.0)
    """
    from scipy.special import lambertw

    try:
        p0 = float(p0)
    except (TypeError, ValueError):
        raise InputError(f"p0 must be a number in (0, 1), got {p0!r}") from None
    if not (0.0 < p0 < 1.0):  # also NaN
        raise InputError(f"p0 must be in (0, 1), got {p0!r}")
    if p0 >= GAMMA_ZERO_FROM:
        return 0.0
    log_p, log_q = math.log(p0), math.log1p(-p0)
    a = (1.0 - p0) / (p0 * log_p)
    z = -(log_q / (p0 * log_p)) * math.exp((1.0 - a) * log_q)
    # z ≥ −1/e mathematically; near p0 = 0.5 rounding may cross the branch point, where SciPy's
    # W₋₁ is NaN: clamp to the first double inside
    z = max(z, BRANCH_POINT)
    gamma = a + float(lambertw(z, k=-1).real) / log_q
    if not math.isfinite(gamma):
        raise InputError(f"γ*(p0) overflows for p0 = {p0!r}; p0 is too small")
    return _polish(p0, log_p, log_q, gamma)


def _polish(p0: float, log_p: float, log_q: float, gamma: float) -> float:
    """Newton steps on a well-conditioned form of g(p0, γ) = 1: the closed form loses digits near
    p0 = 0.5, where z nears W's branch point −1/e (at p0 = 0.49999 it is off by a factor of 2).

    With q = 1 − p0, u = −p0 ln p0 / q > 0 and x = γ u, g(p0, γ) = 1 ⇔ r(x) = d where
    r(x) = 1 − log1p(x)/x (increasing and concave from r(0) = 0) and d = (p0 ln p0 − q ln q)/(p0 ln p0)
    ∈ (0, 1) for p0 < 0.5; Newton from either side then converges monotonically.
    """
    q = 1.0 - p0
    u = -p0 * log_p / q
    d = (p0 * log_p - q * log_q) / (p0 * log_p)
    x = gamma * u
    if not (math.isfinite(x) and x > 0):
        x = 2.0 * d  # r(x) ≈ x/2 near 0
    for _ in range(100):
        step = (_r(x) - d) / _dr(x)
        x_new = x - step
        if not x_new > 0:
            x_new = x / 2
        if abs(x_new - x) <= 4e-16 * x:
            x = x_new
            break
        x = x_new
    return max(x / u, 0.0)


def _r(x: float) -> float:
    """1 − log1p(x)/x, accurate near 0 (series)."""
    if x < 1e-3:
        return x * (0.5 - x * (1 / 3 - x * (0.25 - x * (0.2 - x / 6))))
    return 1.0 - math.log1p(x) / x


def _dr(x: float) -> float:
    """r'(x) = (log1p(x) − x/(1 + x)) / x², accurate near 0 (series)."""
    if x < 1e-3:
        return 0.5 - x * (2 / 3 - x * (0.75 - x * (0.8 - x * 5 / 6)))
    return (math.log1p(x) - x / (1.0 + x)) / (x * x)


def focal_gammas(p0s) -> list[tuple[float, float]]:
    """[(p0, γ*(p0)), ...] for several p0 (:func:`focal_gamma` each)."""
    return [(float(p), focal_gamma(p)) for p in p0s]
