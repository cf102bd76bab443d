"""Mean@k and Pass@k from per-problem verdicts, plus the small running stats the logs use.

``verdicts`` is one list of booleans per problem: did sample j solve problem i.
Every problem is sampled n >= k times (n may differ between problems).

- Mean@k: the expected accuracy of one sample. Its expectation does not depend on k,
  so we use all n samples (c/n per problem, then averaged over problems): same value
  as the paper's "average over the k samples" when n == k, and lower variance when n > k.
- Pass@k: the chance that at least one of k samples is correct, with the unbiased
  estimator 1 - C(n-c, k) / C(n, k) over all k-subsets of the n samples
  (Chen et al. 2021), not "any of the first k", which is noisier.

``summarize`` reports percent by default, as the paper's tables do (Mean@8 (%)).
"""
from __future__ import annotations

import math
from collections import deque
from typing import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with c correct out of n samples (1 <= k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i): no huge binomials, no overflow
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_at_k(verdicts: Sequence[Sequence[bool]]) -> float:
    """Mean accuracy (a fraction): per problem over its samples, then over problems."""
    _check(verdicts, 1)
    return sum(sum(v) / len(v) for v in verdicts) / len(verdicts)


def mean_pass_at_k(verdicts: Sequence[Sequence[bool]], k: int) -> float:
    """Pass@k (a fraction) averaged over problems."""
    _check(verdicts, k)
    return sum(pass_at_k(len(v), sum(v), k) for v in verdicts) / len(verdicts)


def summarize(verdicts: Sequence[Sequence[bool]], ks: Iterable[int], percent: bool = True) -> dict[str, float]:
    """``{"mean@k": ..., "pass@k": ...}`` for every k in ``ks``; percent unless ``percent=False``."""
    scale = 100.0 if percent else 1.0
    out = {}
    for k in ks:
        _check(verdicts, k)
        out[f"mean@{k}"] = scale * mean_at_k(verdicts)
        out[f"pass@{k}"] = scale * mean_pass_at_k(verdicts, k)
    return out


def default_ks(n: int) -> list[int]:
    """K values for a Pass@K-vs-K curve from n samples: 1, 2, 4, ... up to n, and n itself."""
    if n < 1:
        raise ValueError(f"need at least one sample per problem, got {n}")
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks if ks[-1] == n else ks + [n]


def verdicts_by_problem(rows: Iterable[dict]) -> list[list[bool]]:
    """Group eval rows ``{"problem_id", "sample", "correct"}`` into per-problem verdict lists.

    Problems come out sorted by id, samples by index; a repeated (problem_id, sample)
    pair is an error, since it usually means two files or two benchmarks were mixed.
    """
    grouped: dict[object, dict[int, bool]] = {}
    for row in rows:
        samples = grouped.setdefault(row["problem_id"], {})
        if row["sample"] in samples:
            raise ValueError(f"repeated sample {row['sample']} of problem {row['problem_id']!r}")
        samples[row["sample"]] = bool(row["correct"])
    return [[grouped[pid][j] for j in sorted(grouped[pid])] for pid in sorted(grouped)]


def _check(verdicts: Sequence[Sequence[bool]], k: int) -> None:
    if not verdicts:
        raise ValueError("no problems to score")
    fewest = min(range(len(verdicts)), key=lambda i: len(verdicts[i]))
    if len(verdicts[fewest]) < k:
        raise ValueError(f"@{k} needs at least {k} samples per problem; problem {fewest} has {len(verdicts[fewest])}")


# ---------------------------------------------------------------------------
# running stats


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start), as the paper smooths its curves."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    return [sum(values[max(0, i + 1 - window) : i + 1]) / min(i + 1, window) for i in range(len(values))]


class RunningMean:
    """Mean of the last ``window`` values pushed, e.g. a reward to print beside the noisy per-step one."""

    def __init__(self, window: int):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.values: deque[float] = deque(maxlen=window)

    def update(self, x: float) -> float:
        self.values.append(float(x))
        return self.value

    @property
    def value(self) -> float:
        return sum(self.values) / len(self.values) if self.values else math.nan
