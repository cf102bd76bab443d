"""scripts/stats.py: the t distribution, the t-interval of a mean, seed-paired contrasts, p-values, the verdict
rule, Holm's procedure over a family, power and rejection."""
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import contrasts  # noqa: E402  (scripts/contrasts.py)
import stats  # noqa: E402  (scripts/stats.py)
from conftest import strict_file  # noqa: E402


@pytest.mark.parametrize("p, df, published", [
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 7, 2.365), (0.975, 9, 2.262),
    (0.975, 19, 2.093), (0.975, 60, 2.000), (0.95, 9, 1.833), (0.8, 5, 0.920), (0.8, 9, 0.883), (0.8, 8, 0.889),
    (0.975, 3, 3.182), (0.975, 30, 2.042), (0.975, 1000, 1.962),  # 1000: near the normal's 1.960
])
def test_t_quantiles_match_published_tables(p, df, published):
    assert stats.t_quantile(p, df) == pytest.approx(published, abs=5e-4)


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, -1.7, 40.0])
def test_t_cdf_against_closed_forms(t):
    assert stats.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-14)           # Cauchy
    assert stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-14)
    x = t / math.sqrt(3)
    assert stats.t_cdf(t, 3) == pytest.approx(0.5 + (x / (1 + x * x) + math.atan(x)) / math.pi, abs=1e-14)
    for df in (4, 9, 30):
        assert stats.t_cdf(-t, df) == pytest.approx(1 - stats.t_cdf(t, df), abs=1e-14)
    assert stats.t_cdf(1.959964, 20_000) == pytest.approx(0.975, abs=1e-4)  # towards the normal
    with pytest.raises(ValueError, match="positive integer"):
        stats.t_cdf(1.0, 0)


def test_t_cdf_by_the_series_terms_at_t_sqrt_df():
    """At t = sqrt(df), theta = pi/4 and cos^2 = 1/2: the series past their first term, df 4 (even) and 5
    (odd)."""
    assert stats.t_cdf(2.0, 4) == pytest.approx(0.5 + math.sqrt(0.5) * (1 + 0.5 * 0.5) / 2, abs=1e-14)
    # sin(theta) (cos + 2/3 cos^3) = 1/2 + 1/6
    assert stats.t_cdf(math.sqrt(5), 5) == pytest.approx(0.5 + (math.pi / 4 + 2 / 3) / math.pi, abs=1e-14)


def test_sign_test_against_hand_computed_binomial_tails():
    assert stats.sign_test(5, 0) == 2 / 2 ** 5                  # 0.0625: five of five is not enough at 5%
    assert stats.sign_test(6, 0) == 2 / 2 ** 6                  # 0.031: six of six is
    assert stats.sign_test(9, 1) == pytest.approx(2 * (1 + 10) / 2 ** 10)  # 0.0215
    assert stats.sign_test(1, 9) == stats.sign_test(9, 1)       # two-sided
    assert stats.sign_test(3, 3) == 1.0 and stats.sign_test(0, 0) == 1.0


def test_paired_t_interval_against_a_hand_computation():
    """d = 1, 2, 3, 4, 5: mean 3, sd sqrt(2.5), se sqrt(2.5 / 5) = 0.7071; t(0.975, 4) = 2.776 (tables):
    3 -+ 1.963."""
    p = stats.paired({s: 10.0 + s for s in range(5)}, {s: 9.0 for s in range(5)})
    assert (p.n, p.mean, p.sd, p.wins, p.losses) == (5, 3.0, pytest.approx(math.sqrt(2.5)), 5, 0)
    assert (p.low, p.high) == (pytest.approx(3 - 2.776 * 0.70711, abs=1e-3), pytest.approx(3 + 2.776 * 0.70711, abs=1e-3))
    assert p.p_sign == 2 / 2 ** 5
    assert stats.mean_interval([1.0, 2.0, 3.0, 4.0, 5.0]) == (3.0, p.low, p.high)
    one = stats.paired({0: 2.0}, {0: 1.0})                       # one seed: a difference, no interval
    assert one.mean == 1.0 and math.isnan(one.low) and math.isnan(one.high) and math.isnan(one.sd)
    assert all(math.isnan(x) for x in stats.mean_interval([]))


UP = {s: 2.0 + s % 2 for s in range(10)}        # A - B = 1 or 2 on every seed: interval above 0
DOWN = {s: -1.0 - s % 2 for s in range(10)}     # -1 or -2: below 0
ACROSS = {s: (-1.0) ** s * (1 + s) for s in range(10)}  # both signs: the interval contains 0


@pytest.mark.parametrize("diffs, predicted, expected", [
    (UP, +1, "confirmed"), (UP, -1, "refuted"),
    (DOWN, -1, "confirmed"), (DOWN, +1, "refuted"),   # "A < B" (e.g. entropy lower): confirmed below 0
    (ACROSS, +1, "undecided"), (ACROSS, -1, "undecided"),
    (UP, 0, "confirmed"), (DOWN, 0, "confirmed"), (ACROSS, 0, "undecided"),  # "differs": never refuted
])
def test_verdict_reads_the_interval_for_either_predicted_side(diffs, predicted, expected):
    p = stats.paired(diffs, {s: 0.0 for s in range(10)})
    assert (p.low > 0, p.high < 0) == (diffs is UP, diffs is DOWN)
    assert stats.verdict(p, predicted) == expected


def test_verdict_of_one_seed_and_two_and_a_bad_side():
    two = stats.paired({0: 5.0, 1: 5.1}, {0: 1.0, 1: 1.0})  # 4.05 -+ 12.706 x 0.0707 / sqrt(2) = 0.64: above 0
    assert [stats.verdict(p, +1) for p in (stats.paired({0: 5.0}, {0: 1.0}), two)] == ["undecided", "confirmed"]
    for bad, judge in itertools.product((2, "above"), (stats.verdict, stats.p_value)):
        with pytest.raises(ValueError, match="predicted"):
            judge(stats.paired(UP, {s: 0.0 for s in range(10)}), bad)


# A 2 x 2 of a trust band's edges: clip (both edges narrow), LOW (low edge widened), HIGH (high edge widened),
# KL3 (both). Seed 3 has no HIGH run, and every arm lists its seeds in another order.
CLIP = {3: 30.0, 0: 30.0, 1: 28.0, 2: 31.0}
LOW = {2: 35.0, 3: 40.0, 1: 29.0, 0: 32.0}
HIGH = {1: 30.0, 0: 31.0, 2: 31.0}
KL3 = {0: 35.0, 3: 36.0, 2: 36.0, 1: 33.0}


def low_and_high():
    """The 2 x 2's two main effects (computed in the tests, not at import: a bug fails tests, not collection)."""
    return (stats.contrast([(0.5, LOW), (-0.5, CLIP), (0.5, KL3), (-0.5, HIGH)]),
            stats.contrast([(0.5, HIGH), (-0.5, CLIP), (0.5, KL3), (-0.5, LOW)]))


def test_main_effects_of_a_2x2_against_a_hand_computation():
    """low = 1/2 [(LOW - CLIP) + (KL3 - HIGH)] on each seed where all four finished (0, 1, 2; seed 3 lacks HIGH):
    1/2 (2 + 4) = 3, 1/2 (1 + 3) = 2, 1/2 (4 + 5) = 4.5: mean 19/6, variance ((1/6)^2 + (7/6)^2 + (4/3)^2) / 2
    = 19/12, se^2 = 19/36. high = 1/2 [(HIGH - CLIP) + (KL3 - LOW)]: 1/2 (1 + 3) = 2, 1/2 (2 + 4) = 3, 1/2 (0 + 1) = 0.5:
    mean 11/6, the same variance. t(0.975, 2) = 4.303: low 3.167 -+ 3.126, high 1.833 -+ 3.126. Pairing is
    by seed, not by the order the arms list their seeds in."""
    low, high = low_and_high()
    half = 4.302653 * math.sqrt(19 / 36)
    assert (low.n, low.mean, low.wins, low.losses) == (3, pytest.approx(19 / 6), 3, 0)
    assert low.sd == pytest.approx(math.sqrt(19 / 12))
    assert (low.low, low.high) == (pytest.approx(19 / 6 - half, abs=1e-5), pytest.approx(19 / 6 + half, abs=1e-5))
    assert (high.n, high.mean, high.sd) == (3, pytest.approx(11 / 6), pytest.approx(math.sqrt(19 / 12)))
    assert (high.low, high.high) == (pytest.approx(11 / 6 - half, abs=1e-5), pytest.approx(11 / 6 + half, abs=1e-5))
    assert low.p_sign == 2 / 2 ** 3
    # A - B is the contrast +1 A - 1 B
    assert stats.paired(KL3, CLIP) == stats.contrast([(1.0, KL3), (-1.0, CLIP)])


def test_p_values_of_each_predicted_side_by_hand():
    """df 2: P(T <= t) = 1/2 + t / (2 sqrt(2 + t^2)). low: t^2 = (19/6)^2 / (19/36) = 19, so above 0 has
    p = 1/2 (1 - sqrt(19/21)) = 0.0244; high: t^2 = (11/6)^2 / (19/36) = 121/19, two-sided p = 1 - sqrt(121/159)
    = 0.128."""
    low, high = low_and_high()
    above = 0.5 * (1 - math.sqrt(19 / 21))
    assert stats.t_statistic(low) == pytest.approx(math.sqrt(19))
    assert stats.p_value(low, +1) == pytest.approx(above, abs=1e-12)
    assert stats.p_value(low, -1) == pytest.approx(1 - above, abs=1e-12)
    assert stats.p_value(low, 0) == pytest.approx(2 * above, abs=1e-12)
    assert stats.p_value(high, 0) == pytest.approx(1 - math.sqrt(121 / 159), abs=1e-12)
    # against a stated value: low against 10, t = (19/6 - 10) / sqrt(19/36), t^2 = 1681/19
    assert stats.p_value(low, -1, 10.0) == pytest.approx(0.5 * (1 - math.sqrt(1681 / 1719)), abs=1e-12)
    # no spread: t = +inf (p 0 above, 1 below), or t = 0 when the mean is the value itself; one seed: no test
    flat = stats.paired({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0})
    assert (stats.p_value(flat, +1), stats.p_value(flat, -1), stats.p_value(flat, 0)) == (0.0, 1.0, 0.0)
    assert (stats.p_value(flat, +1, 1.0), stats.p_value(flat, 0, 1.0)) == (0.5, 1.0)
    assert math.isnan(stats.p_value(stats.paired({0: 2.0}, {0: 1.0}), +1))


@pytest.mark.parametrize("p_values, rejected, alpha", [
    ([0.01, 0.04, 0.03], [True, False, False], 0.05),  # 0.01 <= 0.05/3; 0.03 > 0.05/2: stop
    ([0.01, 0.04, 0.03], [True, True, True], 0.1),  # 0.033, 0.05, 0.1
    ([0.01, 0.02, 0.04], [True, True, True], 0.05),  # 0.0167, 0.025, 0.05 (Bonferroni keeps only 0.01)
    ([0.04, 0.02, 0.01], [True, True, True], 0.05),  # the order given does not matter
    ([0.001, 0.03, 0.001, 0.04], [True, False, True, False], 0.05),  # 0.03 > 0.05/2 stops: 0.04 not reached
    ([0.025, 0.05], [True, True], 0.05),  # at the threshold: rejected
    ([0.03], [True], 0.05),  # one test: alpha itself
    ([0.01, math.nan], [True, False], 0.05),  # no test: counts in m (0.01 <= 0.025), never rejected
    ([0.03, math.nan], [False, False], 0.05),  # 0.03 > 0.05/2, though 0.03 <= 0.05 alone
    ([], [], 0.05),
])
def test_holm_step_down_against_a_hand_computation(p_values, rejected, alpha):
    assert stats.holm(p_values, alpha=alpha) == rejected


def test_family_confirms_by_the_predicted_side_and_refutes_by_the_other():
    """m = 6 (p predicted side, p other side; 'differs' has none): confirmations over 0.009, 0.995, 0.2, 0.001,
    0.3, 0.999: 0.001 <= 0.05/6, 0.009 <= 0.05/5, 0.2 > 0.05/4: the 1st and 4th; refutations over 0.991, 0.005,
    0.8, nan, nan, nan: 0.005 <= 0.05/6, then 0.8: the 2nd. A 'differs' with p 0.999 shows no difference at all,
    but nothing refutes it (1 - p = 0.001 is not a p of anything)."""
    tests = [(0.009, 0.991), (0.995, 0.005), (0.2, 0.8), (0.001, math.nan), (0.3, math.nan), (0.999, math.nan)]
    assert stats.family(tests) == ["confirmed", "refuted", "undecided", "confirmed", "undecided", "undecided"]


# Page (1963), "Ordered hypotheses for multiple treatments", JASA 58, Table 1, k = 3: the smallest L
# significant at 5%, 1% and 0.1% for n = 2 .. 12 blocks (None: no L reaches the level)
PAGE_K3 = {2: (28, None, None), 3: (41, 42, None), 4: (54, 55, 56), 5: (66, 68, 70), 6: (79, 81, 83),
           7: (91, 93, 96), 8: (104, 106, 109), 9: (116, 119, 121), 10: (128, 131, 134), 11: (141, 144, 147),
           12: (153, 156, 160)}
# the orders of one block of three and what each adds to L: increasing 14, one swap 13, a rotation 11, reverse 10
ORDERS = {0: (1, 2, 3), 1: (2, 1, 3), 3: (2, 3, 1), 4: (3, 2, 1)}


def blocks_with(n: int, L: int) -> list[tuple]:
    """n blocks of three whose Page L is `L` (14 n less a deficit of 0, 1, 3 or 4 per block)."""
    deficit, out = 14 * n - L, []
    for _ in range(n):
        d = max(k for k in ORDERS if k <= deficit and (deficit - k) <= 4 * (n - len(out) - 1))
        out.append(ORDERS[d])
        deficit -= d
    return out


@pytest.mark.parametrize("n", sorted(PAGE_K3))
def test_page_trend_has_pages_critical_values(n):
    for level, critical in zip((0.05, 0.01, 0.001), PAGE_K3[n]):
        if critical is None:  # even the largest L, 14 n, is not significant
            assert stats.page_trend(blocks_with(n, 14 * n))[1] > level
            continue
        L, p, _ = stats.page_trend(blocks_with(n, critical))
        assert L == critical and p <= level < stats.page_trend(blocks_with(n, critical - 1))[1]


def test_page_trend_with_ties_against_every_order_of_every_block():
    """The exact p's by brute force: all 6^3 ways of reordering three blocks (two with ties) equally likely."""
    blocks = [(0.5, 0.5, 2.0), (3.0, -1.0, 3.0), (1.0, 2.0, 4.0)]
    L, p_up, p_down = stats.page_trend(blocks)
    assert L == (1.5 * 1 + 1.5 * 2 + 3 * 3) + (2.5 + 2 + 7.5) + 14
    every = [sum(sum((j + 1) * r for j, r in enumerate(order)) for order in orders) for orders in
             itertools.product(*(list(itertools.permutations(stats.midranks(b))) for b in blocks))]
    assert (p_up, p_down) == (sum(v >= L for v in every) / 216, sum(v <= L for v in every) / 216)


# ----------------------------------------------------------------------------
# The exact power of the paired t-test (the noncentral t), and the effect it detects

def test_exact_power_is_the_level_when_there_is_no_difference():
    """With no true difference t is central t: the power is alpha itself, one- and two-sided (to the
    quadrature's accuracy: mpmath integrates at 15 digits; 1e-9 leaves it six)."""
    for n, alpha in [(3, 0.05), (8, 0.05 / 6), (30, 0.01)]:
        for two_sided in (False, True):
            assert stats.exact_power(0.0, 1.0, n, alpha, two_sided) == pytest.approx(alpha, abs=1e-9)


def test_exact_power_against_a_simulation():
    """n = 5, sd 1, a true difference of 1, one-sided 5%: the share of 200,000 simulated experiments in which
    the paired t-test rejects lies within 4.5 binomial standard errors (about 0.0011 each) of the exact
    power; two-sided, the same."""
    rng = np.random.default_rng(0)
    d = rng.normal(1.0, 1.0, size=(200_000, 5))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(5))
    for two_sided, rejected in [(False, t > stats.t_quantile(0.95, 4)),
                                (True, abs(t) > stats.t_quantile(0.975, 4))]:
        exact = stats.exact_power(1.0, 1.0, 5, 0.05, two_sided)
        assert abs(float(rejected.mean()) - exact) < 4.5 * math.sqrt(exact * (1 - exact) / 200_000)


def test_exact_detectable_tends_to_the_normal_formula_and_lies_above_the_t_approximation():
    """At n = 10,000 the t quantiles are z's to about (z^3 + z) / (4 df) ≈ 2.4e-4 relative, so the detectable
    effect is (z(0.975) + z(0.8)) sd / sqrt(n) to 1e-3; at a few seeds the t-based `detectable` lies below
    the exact value (it puts central t quantiles where the noncentral t belongs), by less as n grows."""
    z = 1.959963985 + 0.841621234
    assert stats.exact_detectable(10_000, 1.0) == pytest.approx(z / 100, rel=1e-3)
    gaps = [stats.exact_detectable(n, 1.0) / stats.detectable(n, 1.0) - 1 for n in (4, 8, 20)]
    assert gaps[0] > gaps[1] > 0 and abs(gaps[2]) < gaps[1], gaps   # 2.3%, 0.28%, -0.013%


@pytest.mark.parametrize("n, mean, sd, needed", [
    (4, 1.0, 1.0, 10), (4, -1.0, 1.0, 10),  # (2.262 + 0.883) / sqrt(10) = 0.995 <= 1 < 1.065 at 9 seeds
    (4, 50.0, 1.0, stats.MIN_SIGN_SEEDS), (4, 0.01, 1.0, math.inf),  # 1000 seeds detect 0.0887 only
    (4, 0.0, 0.0, math.inf), (1, 5.0, math.nan, math.nan)])
def test_seeds_needed_by_hand(n, mean, sd, needed):
    got = stats.seeds_needed(stats.Paired(n, mean, sd, math.nan, math.nan, 0, 0, 1.0))
    assert got == needed or math.isnan(got) and math.isnan(needed)


def test_exact_detectable_gives_the_edges_runs_figures():
    """docs/results.md's "what the seeds could detect" for H1 (8 seeds, sd of KL3 − Clip 2.1358): 2.47 points
    two-sided at 5%, 2.09 and 3.10 one-sided at 5% and at Holm's strictest 5%/6; and at each, 80% power."""
    got = [stats.exact_detectable(8, 2.1358, alpha, two_sided)
           for alpha, two_sided in [(0.05, True), (0.05, False), (0.05 / 6, False)]]
    assert [round(x, 2) for x in got] == [2.47, 2.09, 3.10]
    # the bisection stops within 1e-5 x 3.1 of the effect, where power rises about 0.37 per point
    # (phi(z(0.8)) sqrt(8) / 2.1358): the power there is 0.8 to within 1.2e-5
    assert stats.exact_power(got[2], 2.1358, 8, 0.05 / 6, False) == pytest.approx(0.8, abs=2e-5)
    assert math.isnan(stats.exact_detectable(1, 2.1358))   # one seed: no t-test


def test_exact_detectable_gives_the_binding_runs_figures():
    """docs/results.md's binding-run answer, from the committed runs' per-seed spreads (10 seeds, Holm over a
    family of four): H1 (KL3 − Clip, held-out Mean@8) 1.72 points two-sided at 5%, 1.48 and 1.97 one-sided at
    5% and at 5%/4; H2 (the low edge's entropy effect) 0.053 and 0.071 nats one-sided; H4 (the interaction)
    0.057 and 0.073 nats two-sided."""
    corners = ["clip", "clip-higher:eps_low=0.329,eps_high=0.2", "clip-higher:eps_low=0.2,eps_high=0.422", "kl3"]
    c, low, high, k = corners
    effects = contrasts.effects_of([["low", "+0.5", low, "-0.5", c, "+0.5", k, "-0.5", high],
                                    ["edges", "+0.5", k, "-0.5", high, "-0.5", low, "+0.5", c]], corners)
    assert contrasts.effect_text(contrasts.parse_effect(["d", "-1", c, "+1", k], corners)) == f"d = −1 {c} + 1 {k}"
    done = strict_file(ROOT / "results/binding-countdown/results.json")
    sd = {name: contrasts.measured(done, contrast, key).sd for name, contrast, key in [
        ("H1", contrasts.difference_of(k, c), "heldout/mean@k"), ("H2", effects["low"], "heldout/entropy"),
        ("H4", effects["edges"], "heldout/entropy")]}
    assert round(sd["H1"], 2) == 1.73 and round(sd["H2"], 3) == 0.063 and round(sd["H4"], 3) == 0.057
    got = [round(stats.exact_detectable(10, sd[h], alpha, two_sided), digits) for h, alpha, two_sided, digits in [
        ("H1", 0.05, True, 2), ("H1", 0.05, False, 2), ("H1", 0.05 / 4, False, 2),
        ("H2", 0.05, False, 3), ("H2", 0.05 / 4, False, 3), ("H4", 0.05, True, 3), ("H4", 0.05 / 4, True, 3)]]
    assert got == [1.72, 1.48, 1.97, 0.053, 0.071, 0.057, 0.073]
