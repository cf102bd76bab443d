"""Seed-paired comparisons of two methods: the statistics scripts/sweep.py prints under its table.

Runs of one seed share their prompts, their first completions and their evaluation draws, so two methods
are compared seed by seed: d_s = A_s - B_s. For the mean of the d_s we give

- a 95% bootstrap interval (percentile; seeds resampled with replacement, B draws, a fixed seed, so the
  same runs print the same interval),
- the two-sided exact sign test (how often A > B among the seeds where they differ, against a fair coin),
- the seeds a decision would need: the n at which a paired test at the 5% level finds the observed mean
  difference with 80% power, n = ((z_0.975 + z_0.8) * sd(d) / |mean(d)|)^2, from the observed spread.

A comparison is "confirmed" when the interval lies wholly on the predicted side of 0, "refuted" when it
lies wholly on the other side, and "undecided" otherwise (`verdict`).
"""
from __future__ import annotations

import math
import random
import statistics
from typing import NamedTuple

Z_95, Z_80 = 1.959964, 0.841621  # the normal quantiles at 0.975 and 0.8


class Paired(NamedTuple):
    n: int                 # seeds both methods finished
    mean: float            # mean of the seed-paired differences A - B
    low: float             # 95% bootstrap interval of that mean
    high: float
    wins: int              # seeds with A > B
    losses: int            # seeds with A < B (ties are the rest)
    p_sign: float          # two-sided exact sign test, ties dropped
    seeds_needed: float    # seeds for 80% power at the 5% level, from the observed spread (inf: no effect)


def bootstrap_interval(values: list[float], draws: int = 10_000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (resampled with replacement)."""
    if not values:
        return math.nan, math.nan
    rng, n = random.Random(seed), len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(draws))
    tail = (1 - level) / 2
    return means[int(tail * draws)], means[min(draws - 1, int((1 - tail) * draws))]


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial p-value of `wins` against `losses` under a fair coin (ties left out)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def seeds_needed(diffs: list[float]) -> float:
    """Seeds at which a paired test at the 5% level detects the observed mean difference with 80% power."""
    if len(diffs) < 2:
        return math.nan
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    if mean == 0:
        return math.inf
    return math.ceil(((Z_95 + Z_80) * sd / abs(mean)) ** 2) if sd > 0 else 2


def paired(a: dict[int, float], b: dict[int, float]) -> Paired:
    """A against B over the seeds both have: a and b map seed -> value."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    low, high = bootstrap_interval(diffs)
    return Paired(len(diffs), statistics.fmean(diffs) if diffs else math.nan, low, high, wins, losses,
                  sign_test(wins, losses), seeds_needed(diffs))


def verdict(p: Paired, predicted: int) -> str:
    """'confirmed' if the interval is wholly on the predicted side of 0 (predicted = +1: A > B, -1: A < B),
    'refuted' if wholly on the other side, else 'undecided'."""
    if p.n < 2 or math.isnan(p.low):
        return "undecided"
    low, high = p.low * predicted, p.high * predicted
    low, high = min(low, high), max(low, high)
    return "confirmed" if low > 0 else "refuted" if high < 0 else "undecided"


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, 95% bootstrap interval) of values over seeds: the bands of the sweep's figures."""
    if not values:
        return math.nan, math.nan, math.nan
    low, high = bootstrap_interval(values, draws=2000)
    return statistics.fmean(values), low, high
