"""Policy divergence measures of one token: the KL estimators, and the ratio ranges their constraints
imply.

Samples come from pi_old and w = pi_theta(y_t) / pi_old(y_t) is the token's likelihood ratio.
Schulman's estimators ("Approximating KL divergence", 2020), as functions of log w:

    k1 = -log w                   unbiased for KL(pi_old || pi_theta); can be negative
    k2 = (log w)^2 / 2            biased (matches KL to 2nd order); >= 0
    k3 = w - 1 - log w            unbiased for KL(pi_old || pi_theta); >= 0    <- the paper's KL3 (Eq. 6)
    k3_is = w log w - (w - 1)     = w * k3(1/w): importance-weighted, unbiased for KL(pi_theta || pi_old)

A constraint "estimate <= delta" on one token is a constraint on w alone, so it is a ratio range:

    KL1: -log w <= delta           <=>  w >= exp(-delta)                 (no upper bound: k1 < 0 for w > 1)
    KL2: (log w)^2 / 2 <= delta    <=>  |log w| <= sqrt(2 delta)         (symmetric in log w)
    KL3: w - 1 - log w <= delta    <=>  l <= w <= u,  l = -W_0(-e^(-1-delta)), u = -W_-1(-e^(-1-delta))
    KL3-IS: w log w - w + 1 <= delta  <=>  exp(1 + W_-1((delta-1)/e)) <= w <= exp(1 + W_0((delta-1)/e))

The KL3 range is the paper's Theorem 4.2: 0 < l < 1 < u and 1 - l < u - 1 (wider above 1);
delta = 0.07 gives [0.671, 1.422]. W_0 and W_-1 are the two real branches of Lambert W
(w e^w = z), computed here by Halley's iteration so that scipy is not needed; kl3_ratio_range finds
its two roots by Newton's method instead (exercise 4 of docs/exercises.md), and the tests check both agree.
"""
import math

import torch
from torch import Tensor


# ----------------------------------------------------------------------------
# Estimators of a log-ratio tensor (any shape)

def k1(log_ratio: Tensor) -> Tensor:
    """k1 = -log w."""
    return -log_ratio


def k2(log_ratio: Tensor) -> Tensor:
    """k2 = (log w)^2 / 2."""
    return 0.5 * log_ratio.square()


def k3(log_ratio: Tensor) -> Tensor:
    """k3 = w - 1 - log w (the paper's KL3, Eq. 6); expm1 keeps it accurate when w is near 1."""
    return torch.expm1(log_ratio) - log_ratio


def k3_is(log_ratio: Tensor) -> Tensor:
    """k3_is = w * k3(1/w) = w log w - (w - 1): KL(pi_theta || pi_old) estimated from pi_old samples."""
    return log_ratio * log_ratio.exp() - torch.expm1(log_ratio)


# ----------------------------------------------------------------------------
# Lambert W and the ratio ranges

def lambert_w(z: float, branch: int = 0) -> float:
    """Real Lambert W: the x with x e^x = z, on branch 0 (x >= -1, z >= -1/e) or -1 (x <= -1,
    -1/e <= z < 0)."""
    if branch not in (0, -1):
        raise ValueError(f"branch must be 0 or -1 (got {branch})")
    if branch == -1 and not z < 0:
        raise ValueError(f"W_-1 is real only for -1/e <= z < 0 (got {z})")
    gap = 1.0 + math.e * z  # distance from the branch point z = -1/e, where both branches meet at -1
    if gap < -1e-15:
        raise ValueError(f"Lambert W is not real below -1/e (got {z})")
    if gap <= 0.0:
        return -1.0
    if z < -0.25:  # near the branch point: the series -1 +- p - p^2/3 + 11 p^3/72 with p = sqrt(2 gap)
        p = math.sqrt(2.0 * gap) * (1 if branch == 0 else -1)
        x = -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p ** 3
    elif branch == 0:
        x = math.log1p(z) if z < 3 else math.log(z) - math.log(math.log(z))
    else:  # z in [-0.25, 0): W_-1 heads to -inf like log(-z) - log(-log(-z))
        x = math.log(-z) - math.log(-math.log(-z))
    for _ in range(100):  # Halley's method on f(x) = x e^x - z; cubic convergence from these starts
        ex = math.exp(x)
        f = x * ex - z
        step = f / (ex * (x + 1.0) - (x + 2.0) * f / (2.0 * x + 2.0))
        x -= step
        if abs(step) <= 4e-16 * (1.0 + abs(x)):
            break
    return x


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, (int, float)) and math.isfinite(delta) and delta > 0):
        raise ValueError(f"--delta must be > 0 (got {delta})")


def kl1_ratio_range(delta: float) -> tuple[float, float]:
    """Ratios with k1 = -log w <= delta: [exp(-delta), inf).

    k1 is negative whenever w > 1, so KL1 never bounds a probability increase: used as a clip it
    only stops lowering a token's probability, like Clip-Higher with eps_high = inf.
    """
    _check_delta(delta)
    return math.exp(-delta), math.inf


def kl2_ratio_range(delta: float) -> tuple[float, float]:
    """Ratios with k2 = (log w)^2 / 2 <= delta: [exp(-sqrt(2 delta)), exp(sqrt(2 delta))]."""
    _check_delta(delta)
    r = math.sqrt(2.0 * delta)
    return math.exp(-r), math.exp(r)


def kl3_ratio_range(delta: float) -> tuple[float, float]:
    """Ratios with KL3 = w - 1 - log w <= delta (Theorem 4.2): the roots l < 1 < u of w - 1 - log w = delta.

    In closed form (l, u) = (-W_0(z), -W_-1(z)) with z = -e^(-1-delta); found here by Newton's method instead,
    as exercise 4 asks (its tests make lambert_w raise, and check that the two agree). f(w) = w - 1 - log w -
    delta is convex, so from the outer side of each root, where f > 0, Newton walks to it monotonically.
    """
    _check_delta(delta)

    def root(w):
        for _ in range(100):
            step = ((w - 1) - math.log(w) - delta) / (1 - 1 / w)
            w -= step
            if abs(step) <= 1e-15 * w:
                break
        return w

    # Both starts lie outside the range: f(e^(-1-delta)) = e^(-1-delta) > 0 and f(2 + 2 delta) > 0.
    return root(math.exp(-1.0 - delta)), root(2.0 + 2.0 * delta)


def kl3_is_ratio_range(delta: float) -> tuple[float, float]:
    """Ratios with k3_is = w log w - w + 1 <= delta: (exp(1 + W_-1(z)), exp(1 + W_0(z))), z = (delta - 1)/e.

    From w = e^y:  (y - 1) e^(y-1) = (delta - 1)/e.  k3_is(0+) = 1, so for delta >= 1 there is no lower bound.
    Compared with KL3 it reaches lower and less high: delta = 0.07 gives [0.6500, 1.3968] vs [0.6710, 1.4222].
    """
    _check_delta(delta)
    z = (delta - 1.0) / math.e
    lower = math.exp(1.0 + lambert_w(z, -1)) if delta < 1 else 0.0
    return lower, math.exp(1.0 + lambert_w(z, 0))


# 60 unrolled bisection steps take inductor ~40 s to compile; they are data, not the gradient's path.
@torch.compiler.disable
def trgppo_ratio_range(old_logp: Tensor, delta: float, iters: int = 60) -> tuple[Tensor, Tensor]:
    """TRGPPO's per-token bounds: the min and max of pi(a) / p over every pi with KL(pi_old || pi) <= delta,
    p = pi_old(a) = exp(old_logp) (Wang et al. 2019, arXiv 1901.10314).

    The extremal pi moves mass only between a and the rest, in proportion: pi(a) = r p and
    pi(b) = pi_old(b) (1 - r p) / (1 - p), so the bound solves, for r = ratio,
        f(r) = (1 - p) log((1 - p) / (1 - r p)) - p log r = delta
    with one root in (0, 1) and one in (1, 1/p); f is monotone on each side, so plain bisection, on
    x = log r so that tiny lower bounds (e^-50 for p = 0.001) come out exact too.
    Rare tokens get wide bounds, confident ones narrow: delta = 0.03 gives [0.0188, 5.614] at
    p = 0.01 and [0.9012, 1.0640] at p = 0.9.  p is kept in [1e-6, 1 - 1e-6] (the source tabulates
    p in [0.01, 0.99]).  Returns (lower, upper), tensors shaped like old_logp, without gradient.
    """
    _check_delta(delta)
    p = old_logp.detach().exp().clamp(1e-6, 1 - 1e-6)
    log_p = p.log()

    def excess(x):  # f(e^x) - delta;  1 - r p = -expm1(x + log p)
        return (1 - p) * (torch.log1p(-p) - torch.log(-torch.expm1(x + log_p))) - p * x - delta

    # f(e^x) >= -p x - p, so f > delta below x = -(delta + 1) / p; f = inf at x = -log p
    lo_a, lo_b = -(delta + 1) / p, torch.zeros_like(p)  # f decreases in x on (-inf, 0)
    hi_a, hi_b = torch.zeros_like(p), -log_p             # f increases on (0, -log p)
    for _ in range(iters):
        mid = (lo_a + lo_b) / 2
        outside = excess(mid) > 0
        lo_a, lo_b = torch.where(outside, mid, lo_a), torch.where(outside, lo_b, mid)
        mid = (hi_a + hi_b) / 2
        outside = excess(mid) > 0
        hi_a, hi_b = torch.where(outside, hi_a, mid), torch.where(outside, mid, hi_b)
    return lo_b.exp(), hi_a.exp()  # the ends on the feasible side
