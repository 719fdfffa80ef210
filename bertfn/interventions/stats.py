"""The spread of a study's per-example values: their mean and Student's t confidence interval.

For n values with mean m and sample standard deviation s, the two-sided interval at ``level`` is

    m +- t_{(1 + level) / 2, n - 1} * s / sqrt(n)

where t_{p, df} is the p-quantile of Student's t with df degrees of freedom (the usual interval for a
mean when the spread is estimated from the same values; for n = 16 at 95% t = 2.131, against the
normal's 1.960). The quantile is computed here from the regularized incomplete beta function (a
continued fraction, Numerical Recipes 6.4) and bisection, so that bertfn needs no SciPy; the tests
hold it to published tables.
"""

from __future__ import annotations

import math

import torch

from ..errors import InputError

Tensor = torch.Tensor


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b).

    Args:
        a: the first shape parameter, > 0.
        b: the second shape parameter, > 0.
        x: the point, in [0, 1].
    """
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom.

    Args:
        t: the point.
        df: degrees of freedom, > 0.
    """
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`).

    Args:
        p: the probability, in (0, 1).
        df: degrees of freedom, > 0.
    """
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, abs(mid)):
            break
    return (lo + hi) / 2


def mean_interval(values: Tensor, level: float = 0.95) -> tuple[Tensor, Tensor, Tensor]:
    """The mean over the first axis and its t interval, leaving out NaN (a cell an example lacks).

    Args:
        values: (P, ...) per-example values; NaN where an example has no value.
        level: the interval's coverage, in (0, 1).

    Returns:
        ``(mean, low, high)``, each of shape ``values.shape[1:]``; low and high are NaN where fewer
        than two examples have a value.

    Raises:
        InputError: a level outside (0, 1).
    """
    if not isinstance(level, float | int) or not 0 < level < 1:
        raise InputError(f"level is the interval's coverage, a number between 0 and 1 (e.g. 0.95), got {level!r}")
    x = values.double()
    have = ~torch.isnan(x)
    n = have.sum(dim=0)  # (...): examples per cell
    mean = torch.where(have, x, 0.0).sum(dim=0) / n
    spread = torch.where(have, x - mean, 0.0).pow(2).sum(dim=0) / (n - 1)  # sample variance
    t = torch.tensor([t_quantile((1 + level) / 2, k - 1) if k > 1 else math.nan for k in range(int(n.max()) + 1)],
                     dtype=torch.float64)[n]  # each cell's quantile, by its count
    half = t * (spread / n).sqrt()
    return mean.to(values.dtype), (mean - half).to(values.dtype), (mean + half).to(values.dtype)
