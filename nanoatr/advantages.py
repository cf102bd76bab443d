"""Group-relative advantages: each completion is scored against the other completions of its prompt.

    Dr. GRPO (default, the paper's backbone):  A_i = R_i - mean_group(R)
    GRPO (normalize_std=True):                  A_i = (R_i - mean_group(R)) / (std_group(R) + 1e-6)

std is the unbiased (n - 1) standard deviation, as torch.std, verl and TRL use; eps 1e-6 is verl's.
A group whose rewards are all equal carries no signal: its advantages are exactly 0 in both modes.
"All equal" is judged with a tolerance (std <= 1e-5 * max(1, |mean|)), because float rounding of the
mean leaves a residue ~1e-8 that the std division would otherwise blow up to advantages of ~1.
"""
import torch
from torch import Tensor

STD_EPS = 1e-6       # GRPO's divisor guard (verl compute_grpo_outcome_advantage)
EQUAL_RTOL = 1e-5    # rewards within this (relative) spread count as equal


def group_advantages(rewards: Tensor, group_size: int, normalize_std: bool = False) -> Tensor:
    """Advantages (N,) for rewards (N,) laid out as consecutive groups [p0 x G, p1 x G, ...].

    Computed in float64 and returned as float32 (or the rewards' own floating dtype).
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2: a group of one has no baseline (got {group_size})")
    if rewards.numel() % group_size:
        raise ValueError(f"got {rewards.numel()} rewards, not a multiple of group_size {group_size} "
                         "(rewards must be consecutive groups [p0 x G, p1 x G, ...])")
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    groups = rewards.double().view(-1, group_size)  # (P, G)
    mean = groups.mean(-1, keepdim=True)
    std = groups.std(-1, keepdim=True)  # unbiased
    advantages = groups - mean
    if normalize_std:
        advantages = advantages / (std + STD_EPS)
    equal = std <= EQUAL_RTOL * mean.abs().clamp(min=1.0)
    return torch.where(equal, 0.0, advantages).view(-1).to(out_dtype)
