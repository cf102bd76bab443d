"""Group advantages: Dr. GRPO (mean only) and GRPO (mean / std), grouping, dead groups.

    python -m pytest tests/test_advantages.py -q
"""
import math

import pytest
import torch

from nanoatr.loss import group_advantages
from rounding import U64, sum_orders, within


def short(t: torch.Tensor) -> str:
    """A tensor's values for a failure message: [-0.429, 0, 1.2e-08]."""
    return "[" + ", ".join(f"{v:.3g}" for v in t.tolist()) + "]"


def test_dr_grpo_subtracts_the_group_mean():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # two groups of 4
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25])
    out = group_advantages(rewards, 4)
    torch.testing.assert_close(out, expected, msg=f"rewards {rewards.tolist()}, group_size 4: expected "
                               f"{short(expected)} (R - the group's mean), got {short(out)}")


def test_grpo_divides_by_the_unbiased_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    std = math.sqrt((0.75 ** 2 + 3 * 0.25 ** 2) / 3)  # n - 1 = 3
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (std + 1e-6)
    out = group_advantages(rewards, 4, normalize_std=True)
    torch.testing.assert_close(out, expected, msg=f"rewards {rewards.tolist()}, normalize_std=True: expected "
                               f"{short(expected)} ((R - mean) / (unbiased std + 1e-6)), got {short(out)}")


def test_groups_are_consecutive_not_interleaved():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])  # [p0, p0, p1, p1]: both groups are dead
    for normalize_std in (False, True):
        out = group_advantages(rewards, 2, normalize_std=normalize_std)
        assert out.eq(0).all(), (f"rewards {rewards.tolist()}, group_size 2 (normalize_std={normalize_std}): "
                                 f"expected all 0 (groups [1, 1] and [0, 0]), got {out.tolist()}: groups are "
                                 f"consecutive rows of rewards.view(-1, G), not interleaved")


@pytest.mark.parametrize("normalize_std", [False, True])
@pytest.mark.parametrize("value, dtype, residue", [
    (0.0, torch.float32, False), (1.0, torch.float32, False), (0.1, torch.float32, False),
    (1 / 3, torch.float32, False), (1234.567, torch.float32, False),
    (0.1, torch.float64, True), (0.7, torch.float64, True), (1234.567, torch.float64, True)])
def test_equal_rewards_give_exactly_zero(value, dtype, residue, normalize_std):
    """A group whose rewards are all equal has no advantage: exactly 0, not a rounding residue that
    normalize_std would blow up. The means are taken in float64, where 7 float32 copies sum and
    divide exactly (no residue: those cases pass even without the equal-rewards guard), but 7
    float64 copies of 0.1, 0.7 or 1234.567 do not: their mean is a few ulps off, and only the guard
    (group_advantages' `equal`) makes those advantages 0."""
    rewards = torch.full((7,), value, dtype=dtype)
    as_used = rewards.double()  # what group_advantages takes the mean of
    assert bool((as_used - as_used.mean()).abs().max() > 0) == residue  # the case exercises the guard, or not
    out = group_advantages(torch.cat([rewards, torch.tensor([0.0, 1, 0, 1, 0, 1, 0], dtype=dtype)]), 7, normalize_std)
    case = f"7 rewards {value:.7g} ({dtype}, normalize_std={normalize_std}), then 0, 1, 0, 1, 0, 1, 0"
    assert out.dtype == dtype, f"{case}: the advantages' dtype is {out.dtype}, expected the rewards' {dtype}"
    assert torch.equal(out[:7], torch.zeros(7, dtype=dtype)), (
        f"{case}: expected exactly 0.0 for the equal group (std {as_used.std().item():.2g} <= "
        f"EQUAL_RTOL * max(1, |mean|)), got {short(out[:7])}")
    assert out[7:].abs().sum() > 0 and torch.isfinite(out).all(), (
        f"{case}: expected finite advantages, not all 0, for the second group, got {short(out[7:])}")


def test_fp32_residue_is_not_amplified():
    rewards = torch.full((4,), 0.1)
    rewards[2] = torch.nextafter(rewards[2], torch.tensor(1.0))  # one ulp apart: std ~4e-9
    out = group_advantages(rewards, 4, normalize_std=True)
    assert torch.equal(out, torch.zeros(4)), (
        f"expected exactly 0.0 (normalize_std=True), got {short(out)}: rewards one float32 ulp apart "
        f"(std ~4e-9) count as all equal, {rewards.tolist()}")


@pytest.mark.parametrize("mean", [0.01, -0.5, 300.0])
def test_equal_means_a_spread_within_the_tolerance(mean):
    """"All equal" is std <= EQUAL_RTOL * max(1, |mean|): a group of std half that has no advantage, one of twice
    that has, near a small mean (where the tolerance is absolute, 1e-5) and a large one (relative)."""
    for share, equal in ((0.5, True), (2.0, False)):
        std = share * 1e-5 * max(1.0, abs(mean))
        rewards = mean + std * torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64) / math.sqrt(4 / 3)
        out = group_advantages(rewards, 4, normalize_std=True)
        assert out.eq(0).all() == equal, f"mean {mean}, std {std:.3g}: {short(out)}"


def test_bool_and_int_rewards_become_float32():
    out = group_advantages(torch.tensor([True, False, False, False]), 4)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([0.75, -0.25, -0.25, -0.25]))
    assert group_advantages(torch.tensor([1.0, 0.0], dtype=torch.float64), 2).dtype == torch.float64


def test_advantages_sum_to_zero_per_group():
    """In float64 (the advantages keep the rewards' dtype). The group's mean errs by at most half of
    sum_orders(8) of sum|r| / 8, an error all 8 advantages repeat (divided by the std when normalised: the
    scale s = sum|a| / sum|r - mean|); each subtraction and division rounds once more (2 U64 of |a|), and
    the final 8-term sum by half of sum_orders(8) of sum|a|: within sum_orders(8) (s sum|r| + sum|a|)."""
    rewards = torch.rand(6 * 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    r = rewards.view(6, 8)
    for normalize_std in (False, True):
        out = group_advantages(rewards, 8, normalize_std).view(6, 8)
        size = out.abs().sum(-1)
        scale = size / (r - r.mean(-1, keepdim=True)).abs().sum(-1)
        tol = sum_orders(8, U64) * float((scale * r.abs().sum(-1) + size).max())
        within(out.sum(-1), torch.zeros(6), tol, f"sum, normalize_std={normalize_std}")


def test_bad_layout_raises():
    with pytest.raises(ValueError, match="not a multiple of group_size 4"):
        group_advantages(torch.zeros(10), 4)
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        group_advantages(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(torch.zeros(2, 4), 4)
