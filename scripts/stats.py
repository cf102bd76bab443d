"""Seed-paired comparisons of two methods: the statistics scripts/sweep.py prints under its table.

Runs of one seed share their prompts, their first completions and their evaluation draws, so two methods
are compared seed by seed: d_s = A_s - B_s over the seeds both finished (paired by seed, never by order).
For the mean of the n differences (sd = their sample standard deviation, se = sd / sqrt(n)) we give

- the 95% paired t-interval, mean -+ t(0.975, n-1) se. It is the verdict's interval: a percentile
  bootstrap over 10 seeds covers only about 91% of the time;
- the two-sided exact sign test: how often A > B among the seeds where they differ, against a fair coin;
- the minimal detectable effect: the mean difference a paired t-test at the 5% level (two-sided) finds
  with 80% power at this n and spread, (t(0.975, n-1) + t(0.8, n-1)) se. This is the usual t-based
  approximation (central t quantiles in place of the noncentral t), a little below the exact value;
- the seeds a decision would need: the smallest n at which that minimal detectable effect reaches the
  observed |mean|, and never fewer than 6, since over 5 seeds even a 5 : 0 sign test has p = 0.0625;
- on request, a one-sided test against a stated effect (`reject`): "a gain of 3.67 or more is rejected"
  when the one-sided 95% upper bound of the mean difference lies below 3.67.

A hypothesis predicts the sign of A - B (+1: A > B, -1: A < B). It is "confirmed" when the interval lies
wholly on the predicted side of 0, "refuted" when wholly on the other side, "undecided" otherwise
(`verdict`).

The t distribution is computed here (no scipy): its CDF for integer degrees of freedom in closed form
(Abramowitz & Stegun 26.7.3-4), its quantiles by bisection of the CDF.
"""
from __future__ import annotations

import math
import statistics
from functools import lru_cache
from typing import NamedTuple

LEVEL = 0.95            # two-sided level of every interval
POWER = 0.8             # power of the minimal detectable effect and of the seeds needed
MIN_SIGN_SEEDS = 6      # fewest seeds at which a two-sided sign test can reach p < 0.05 (2 / 2^6 = 0.031)
MAX_SEEDS = 1000        # seeds needed beyond this are reported as inf ("> 1000")


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with `df` (a positive integer) degrees of freedom.

    With theta = atan(|t| / sqrt(df)), P(|T| < |t|) is (A & S 26.7.3-4)
      df odd:  (2 / pi) (theta + sin(theta) (cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ... up to cos^(df-2)))
      df even: sin(theta) (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
    where cos = cos(theta); for df = 1 the first sum is empty (the Cauchy distribution)."""
    if df < 1 or df != int(df):
        raise ValueError(f"degrees of freedom must be a positive integer (got {df})")
    theta = math.atan(abs(t) / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:
        term, total = math.cos(theta), 0.0
        for k in range(1, (df - 1) // 2 + 1):  # (df - 1) / 2 terms: cos, 2/3 cos^3, ...
            total += term
            term *= cos2 * (2 * k) / (2 * k + 1)
        inside = 2 / math.pi * (theta + math.sin(theta) * total)
    else:
        term, total = 1.0, 0.0
        for k in range(1, df // 2 + 1):        # df / 2 terms: 1, 1/2 cos^2, ...
            total += term
            term *= cos2 * (2 * k - 1) / (2 * k)
        inside = math.sin(theta) * total
    return 0.5 + math.copysign(inside / 2, t)


@lru_cache(maxsize=None)
def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p, for 0.5 <= p < 1: bisection of t_cdf to 1e-12."""
    if not 0.5 <= p < 1:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 (got {p})")
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2 * high
    while high - low > 1e-12 * high:
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial p-value of `wins` against `losses` under a fair coin (ties left out)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` and its 95% t-interval, mean -+ t(0.975, n-1) sd / sqrt(n)
    (nan bounds for fewer than two values: one value has no spread)."""
    if not values:
        return math.nan, math.nan, math.nan
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(1 - (1 - LEVEL) / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


class Paired(NamedTuple):
    n: int                 # seeds both methods finished
    mean: float            # mean of the seed-paired differences A - B
    sd: float              # their sample standard deviation (nan for n < 2)
    low: float             # 95% paired t-interval of the mean (nan for n < 2)
    high: float
    wins: int              # seeds with A > B
    losses: int            # seeds with A < B (ties are the rest)
    p_sign: float          # two-sided exact sign test, ties dropped


def paired(a: dict[int, float], b: dict[int, float]) -> Paired:
    """A against B over the seeds both have: a and b map seed -> value, in any order."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    mean, low, high = mean_interval(diffs)
    sd = statistics.stdev(diffs) if len(diffs) > 1 else math.nan
    return Paired(len(diffs), mean, sd, low, high, wins, losses, sign_test(wins, losses))


def verdict(p: Paired, predicted: int) -> str:
    """'confirmed' if the interval lies wholly on the predicted side of 0 (predicted = +1: A > B, -1: A < B),
    'refuted' if wholly on the other side, else 'undecided'."""
    if predicted not in (1, -1):
        raise ValueError(f"predicted must be +1 (A > B) or -1 (A < B) (got {predicted})")
    if p.n < 2:
        return "undecided"
    side = 1 if p.low > 0 else -1 if p.high < 0 else 0
    return "undecided" if side == 0 else "confirmed" if side == predicted else "refuted"


def detectable(n: int, sd: float) -> float:
    """Minimal detectable effect: the mean difference a two-sided paired t-test at the 5% level finds with
    80% power over n seeds at spread sd, (t(0.975, n-1) + t(0.8, n-1)) sd / sqrt(n) (t-based approximation)."""
    if n < 2:
        return math.nan
    return (t_quantile(1 - (1 - LEVEL) / 2, n - 1) + t_quantile(POWER, n - 1)) * sd / math.sqrt(n)


def seeds_needed(p: Paired) -> float:
    """Seeds at which the observed |mean| is the minimal detectable effect at the observed spread, and at least
    MIN_SIGN_SEEDS; inf beyond MAX_SEEDS (and for a mean of 0); nan for fewer than two seeds."""
    if p.n < 2:
        return math.nan
    if p.mean == 0 or detectable(MAX_SEEDS, p.sd) > abs(p.mean):
        return math.inf
    low, high = MIN_SIGN_SEEDS - 1, MAX_SEEDS  # detectable(high) <= |mean|; low is below the floor or falls short
    while high - low > 1:
        mid = (low + high) // 2
        if detectable(mid, p.sd) <= abs(p.mean):
            high = mid
        else:
            low = mid
    return high


class Rejection(NamedTuple):
    effect: float    # the stated effect, e.g. the paper's +3.67
    t: float         # (mean - effect) / se
    p: float         # one-sided: P(T <= t) for a positive effect, P(T >= t) for a negative one
    rejected: bool   # p < 0.05: the data rule out an effect this large (or larger) in the stated direction


def reject(p: Paired, effect: float) -> Rejection:
    """One-sided paired t-test of 'the mean difference is effect or beyond' (>= effect for a gain, <= effect
    for a loss): rejected when the one-sided 95% bound of the mean lies short of effect."""
    if p.n < 2 or effect == 0:
        return Rejection(effect, math.nan, math.nan, False)
    se = p.sd / math.sqrt(p.n)
    t = (p.mean - effect) / se if se > 0 else math.copysign(math.inf, p.mean - effect)
    p_value = t_cdf(t, p.n - 1) if effect > 0 else 1 - t_cdf(t, p.n - 1)
    return Rejection(effect, t, p_value, p_value < 1 - LEVEL)
