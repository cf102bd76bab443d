"""Statistics over seeds: the 95% t-interval of a mean, and seed-paired comparisons of methods.

scripts/runs_table.py prints each method's mean with the half-width of its t-interval (`half_width`);
scripts/sweep_report.py draws the same intervals as its figures' bands (`mean_interval`) and prints, under its
table, the comparisons below.

Runs of one seed share their prompts, their first completions and their evaluation draws, so methods are
compared seed by seed. A comparison is a contrast: on each seed s its value is d_s = sum_i w_i X_i(s) over
the methods X_i it weighs (weights summing to 0), over the seeds where every one of them finished (paired
by seed, never by order). A - B is the contrast +1 A - 1 B; the main effect of one factor of a 2 x 2 is
1/2 (A2 - A1) + 1/2 (B2 - B1). For the mean of the n values d_s (`contrast`) we give the 95% paired
t-interval (the verdict's interval: a percentile bootstrap over 10 seeds covers only about 91% of the time),
the paired t-test's p of a predicted side (`p_value`), the two-sided exact sign test (`sign_test`), the
minimal detectable effect (`detectable`, the usual t-based approximation; `exact_detectable` integrates the
noncentral t: the approximation is 2.3% below it at 4 seeds, 0.3% at 8), the seeds a decision would need
(`seeds_needed`) and, on request, a one-sided test against a stated effect (`reject`): "a gain of 3.67 or
more is rejected" when the one-sided 95% upper bound of the mean difference lies below 3.67.

A hypothesis predicts the side of the mean (+1: above 0, -1: below 0, 0: differs from 0); its own interval
gives its `verdict`. Pre-registered hypotheses are one family (`family`): each one's p on its predicted
side goes through Holm's step-down procedure at FAMILY_ALPHA (`holm`); those it rejects are "confirmed".
The same procedure over the p-values of the opposite sides (1 - p) marks the "refuted" ones; the rest, and
every "differs" the first pass leaves, are "undecided". Each pass holds its family-wise error at
FAMILY_ALPHA; a wrong call of either kind (a false confirmation or a false refutation) has at most twice
that chance, approached only when some true differences lie at 0 and others just on the predicted side.

The t distribution is computed here (no scipy): its CDF for integer degrees of freedom in closed form
(Abramowitz & Stegun 26.7.3-4), its quantiles by bisection of the CDF.
"""
from __future__ import annotations

import itertools
import math
import statistics
from functools import lru_cache
from typing import NamedTuple, Sequence

import mpmath  # sympy's dependency: the exact power's integral

LEVEL = 0.95            # two-sided level of every interval
POWER = 0.8             # power of the minimal detectable effect and of the seeds needed
MIN_SIGN_SEEDS = 6      # fewest seeds at which a two-sided sign test can reach p < 0.05 (2 / 2^6 = 0.031)
MAX_SEEDS = 1000        # seeds needed beyond this are reported as inf ("> 1000")
FAMILY_ALPHA = 0.05     # family-wise error rate of Holm's procedure over the pre-registered hypotheses


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


def half_width(values: Sequence[float]) -> float:
    """The half-width of the 95% t-interval of the mean of n `values`, t(0.975, n-1) sd / sqrt(n) (nan for
    fewer than two values: one value has no spread)."""
    if len(values) < 2:
        return math.nan
    t = t_quantile(1 - (1 - LEVEL) / 2, len(values) - 1)
    return t * statistics.stdev(values) / math.sqrt(len(values))


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` and its 95% t-interval, mean -+ half_width (nan bounds for
    fewer than two values; all nan for none)."""
    if not values:
        return math.nan, math.nan, math.nan
    mean, half = statistics.fmean(values), half_width(values)
    return mean, mean - half, mean + half


class Paired(NamedTuple):
    n: int                 # seeds every compared method finished
    mean: float            # mean of the seed-paired values d_s (A - B, or a contrast)
    sd: float              # their sample standard deviation (nan for n < 2)
    low: float             # 95% paired t-interval of the mean (nan for n < 2)
    high: float
    wins: int              # seeds with d_s > 0 (A > B)
    losses: int            # seeds with d_s < 0 (A < B); ties are the rest
    p_sign: float          # two-sided exact sign test, ties dropped


def contrast(terms: list[tuple[float, dict[int, float]]]) -> Paired:
    """sum_i w_i X_i seed by seed, over the seeds every X_i has: terms are (w_i, X_i), X_i mapping
    seed -> value in any order."""
    seeds = sorted(set.intersection(*(set(values) for _, values in terms)))
    diffs = [sum(w * values[s] for w, values in terms) for s in seeds]
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    mean, low, high = mean_interval(diffs)
    sd = statistics.stdev(diffs) if len(diffs) > 1 else math.nan
    return Paired(len(diffs), mean, sd, low, high, wins, losses, sign_test(wins, losses))


def paired(a: dict[int, float], b: dict[int, float]) -> Paired:
    """A against B over the seeds both have: a and b map seed -> value, in any order."""
    return contrast([(1.0, a), (-1.0, b)])


SIDES = (1, -1, 0)  # a prediction: above 0, below 0, differs from 0


def t_statistic(p: Paired, against: float = 0.0) -> float:
    """(mean - against) / se, se = sd / sqrt(n); for seeds without spread (se = 0) +-inf, or 0 when the mean
    is `against` itself."""
    se = p.sd / math.sqrt(p.n)
    if se > 0:
        return (p.mean - against) / se
    return 0.0 if p.mean == against else math.copysign(math.inf, p.mean - against)


def p_value(p: Paired, predicted: int, against: float = 0.0) -> float:
    """The paired t-test's p that the mean lies on the `predicted` side of `against`, with t = t_statistic and
    df = n - 1: P(T >= t) for +1, P(T <= t) for -1, 2 min(P(T <= t), P(T >= t)) for 0 (two-sided); nan for
    n < 2."""
    if predicted not in SIDES:
        raise ValueError(f"predicted must be +1 (above), -1 (below) or 0 (differs) (got {predicted})")
    if p.n < 2:
        return math.nan
    below = t_cdf(t_statistic(p, against), p.n - 1)
    return 1 - below if predicted > 0 else below if predicted < 0 else min(1.0, 2 * min(below, 1 - below))


def verdict(p: Paired, predicted: int) -> str:
    """By the interval alone: 'confirmed' if it lies wholly on the predicted side of 0 (+1: above, -1: below,
    0: either side), 'refuted' if wholly on the other side, else 'undecided' ('differs' is never refuted: an
    interval across 0 does not show a difference of 0)."""
    if predicted not in SIDES:
        raise ValueError(f"predicted must be +1 (above), -1 (below) or 0 (differs) (got {predicted})")
    if p.n < 2:
        return "undecided"
    side = 1 if p.low > 0 else -1 if p.high < 0 else 0
    if side == 0:
        return "undecided"
    return "confirmed" if predicted in (0, side) else "refuted"


def holm(p_values: list[float], alpha: float = FAMILY_ALPHA) -> list[bool]:
    """Holm's step-down procedure: with the m p-values in ascending order p_(1) <= ... <= p_(m), reject
    p_(1), p_(2), ... while p_(k) <= alpha / (m - k + 1), and stop at the first that is not. Returns, in the
    order given, which are rejected. A nan p (no test could be made) counts in m and is never rejected."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    rejected = [False] * m
    for k, i in enumerate(order):   # k = 0 for the smallest: alpha / m
        if math.isnan(p_values[i]) or p_values[i] > alpha / (m - k):
            break
        rejected[i] = True
    return rejected


def family(tests: list[tuple[float, float]], alpha: float = FAMILY_ALPHA) -> list[str]:
    """The decisions over a pre-registered family: tests are (p on the predicted side, p on the opposite side,
    nan where there is none, as for 'differs'). 'confirmed' where Holm rejects by the first, 'refuted' where
    Holm over the second rejects, 'undecided' otherwise."""
    confirmed = holm([p for p, _ in tests], alpha)
    refuted = holm([opposite for _, opposite in tests], alpha)
    return ["confirmed" if c else "refuted" if r else "undecided" for c, r in zip(confirmed, refuted)]


def midranks(values: Sequence[float]) -> tuple[float, ...]:
    """The ranks 1..k of `values`, ties sharing the mean of the ranks they span."""
    order = sorted(values)
    return tuple((order.index(v) + 1 + order.index(v) + order.count(v)) / 2 for v in values)


def page_trend(blocks: list[Sequence[float]]) -> tuple[float, float, float]:
    """Page's test for an ordered trend over k conditions, blocks (seeds) of k values each, in the predicted
    order: L = sum over blocks of sum_j j r_j, r_j the midrank of the j-th value in its block. Returns (L,
    P(L' >= L), P(L' <= L)): the exact one-sided p of an increasing and of a decreasing trend under the null
    that every order within a block is equally likely, by convolving each block's k! equally likely values
    (its midranks permuted; exact with ties: midranks and L are multiples of 1/2, exact in floats)."""
    dist = {0.0: 1}
    for block in blocks:
        ranks = midranks(block)
        values = [sum((j + 1) * r for j, r in enumerate(p)) for p in itertools.permutations(ranks)]
        step: dict[float, int] = {}
        for total, count in dist.items():
            for v in values:
                step[total + v] = step.get(total + v, 0) + count
        dist = step
    L = sum(sum((j + 1) * r for j, r in enumerate(midranks(b))) for b in blocks)
    n = sum(dist.values())
    return (L, sum(c for v, c in dist.items() if v >= L) / n,
            sum(c for v, c in dist.items() if v <= L) / n)


def detectable(n: int, sd: float) -> float:
    """Minimal detectable effect: the mean difference a two-sided paired t-test at the 5% level finds with
    80% power over n seeds at spread sd, (t(0.975, n-1) + t(0.8, n-1)) sd / sqrt(n) (t-based
    approximation)."""
    if n < 2:
        return math.nan
    return (t_quantile(1 - (1 - LEVEL) / 2, n - 1) + t_quantile(POWER, n - 1)) * sd / math.sqrt(n)


def exact_power(effect: float, sd: float, n: int, alpha: float, two_sided: bool) -> float:
    """The power of a paired t-test at level alpha over n seeds when the true mean difference is `effect` and
    the differences' sd is `sd`: t = mean / (s / sqrt(n)) is noncentral t with df = n - 1 and noncentrality
    ncp = effect sqrt(n) / sd, i.e. (Z + ncp) / sqrt(V / df) with V chi-square(df); so
    P(t > c) = E_V[1 - Phi(c sqrt(V / df) - ncp)], integrated numerically over V (mpmath). One-sided: the
    predicted side is effect's sign, c = t(1 - alpha); two-sided: both tails at c = t(1 - alpha / 2)."""
    df, ncp = n - 1, abs(effect) * math.sqrt(n) / sd
    c = t_quantile(1 - alpha / (2 if two_sided else 1), df)
    log_norm = (df / 2) * math.log(2) + math.lgamma(df / 2)

    def density(v):  # chi-square(df)
        return mpmath.exp((df / 2 - 1) * mpmath.log(v) - v / 2 - log_norm)

    def beyond(v):  # P(t > c | V = v) (+ P(t < -c | V = v) two-sided)
        scale = c * mpmath.sqrt(v / df)
        return 1 - mpmath.ncdf(scale - ncp) + (mpmath.ncdf(-scale - ncp) if two_sided else 0)

    spread = 10 * math.sqrt(2 * df)  # chi-square(df) has sd sqrt(2 df): split the range around its peak
    points = sorted({0.0, max(0.0, df - spread), float(df), df + spread})
    return float(mpmath.quad(lambda v: beyond(v) * density(v), [*points, mpmath.inf]))


def exact_detectable(n: int, sd: float, alpha: float = 1 - LEVEL, two_sided: bool = True,
                     power: float = POWER) -> float:
    """The mean difference a paired t-test at level alpha finds with the given power over n seeds at spread
    sd, by exact_power (bisection to a relative 1e-5). `detectable` is its t-based approximation: 2.3% below
    it at 4 seeds, 0.3% at 8, within 0.02% at 20 (two-sided 5%, 80%)."""
    if n < 2:
        return math.nan
    low, high = 0.5 * detectable(n, sd), 2 * detectable(n, sd)  # the approximation is within a few %
    while exact_power(low, sd, n, alpha, two_sided) >= power:
        low /= 2
    while exact_power(high, sd, n, alpha, two_sided) < power:
        high *= 2
    while high - low > 1e-5 * high:
        mid = (low + high) / 2
        low, high = (mid, high) if exact_power(mid, sd, n, alpha, two_sided) < power else (low, mid)
    return high


def seeds_needed(p: Paired) -> float:
    """Seeds at which the observed |mean| is the minimal detectable effect at the observed spread, and at
    least MIN_SIGN_SEEDS; inf beyond MAX_SEEDS (and for a mean of 0); nan for fewer than two seeds."""
    if p.n < 2:
        return math.nan
    if p.mean == 0 or detectable(MAX_SEEDS, p.sd) > abs(p.mean):
        return math.inf
    # detectable(high) <= |mean|; low is below the floor or falls short
    low, high = MIN_SIGN_SEEDS - 1, MAX_SEEDS
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
    p_beyond: float  # the opposite side: is the mean beyond the effect?
    rejected: bool   # p < 0.05: the data rule out an effect this large (or larger) in the stated direction


def reject(p: Paired, effect: float) -> Rejection:
    """One-sided paired t-test of 'the mean difference is effect or beyond' (>= effect for a gain, <= effect
    for a loss): rejected when the one-sided 95% bound of the mean lies short of effect."""
    if p.n < 2 or effect == 0:
        return Rejection(effect, math.nan, math.nan, math.nan, False)
    short = -1 if effect > 0 else 1   # the side of the effect the mean lies on when the effect is ruled out
    ruled_out = p_value(p, short, effect)
    return Rejection(effect, t_statistic(p, effect), ruled_out, p_value(p, -short, effect),
                     ruled_out < 1 - LEVEL)
