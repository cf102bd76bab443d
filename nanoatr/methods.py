"""The --clip methods: the per-token surrogate of each, side by side (the loss is minimised).

Every method is a short function `method(t, **hparams) -> (loss, cut_low, cut_high, extras)`:
  loss      (B, T) per-token loss; `nanoatr.loss.policy_loss` zeroes padding afterwards
  cut_low   (B, T) bool: tokens whose gradient the method cut because the ratio went too low (A < 0)
  cut_high  (B, T) bool: ... too high (A > 0 above the region; dual clip's A < 0 above c)
  extras    method-specific metrics: (B, T) tensors are averaged over valid tokens, (B,) over sequences
`t` is a `Tokens` tuple of clean tensors: padding holds ratio 1, advantage 0, old log-prob 0.

Two shapes of clipping recur (w = ratio, A = advantage):
  ratio clip (Eq. 3 + PPO's min):  -min(wA, clip(w, l, u) A)      cut: A>0 & w>u, A<0 & w<l
  unified clip (Eq. 5 + the min):   -min(wA, clip_C(w) A)          clip_C(w) = w where C holds, else
                                    the constant w_old = 1, so a token outside C is cut when wA > A,
                                    i.e. when it moved further the way A pushes it.
Theorem 4.1: with C = (l <= w <= u) both give the same gradient (their loss values differ: uA vs A).
kl1 / kl2 / kl3 / kl3-is / kl-full use the unified clip with C = "divergence <= delta".

Sources are named per method; section numbers refer to the paper (arXiv 2602.05494).

Adding a method takes three steps:
  1. write `def my_rule(t: Tokens, knob: float = 0.1)`: the keyword defaults ARE the method's defaults,
     and each knob becomes a train.py flag (--knob); mark with @uses(...) anything it reads beyond
     ratio / advantages / old_logp (full_kl, noise, or "sequences" for a loss per sequence)
  2. add `"my-rule": my_rule` to METHODS at the end of this file: it is now a --clip choice
  3. if a knob is new, give it a range in RULES (a name of flags.RANGES; without one it need only be finite)
The generic tests then run on it (`python -m pytest tests/test_loss.py -k my-rule`): padding,
micro-batch invariance, compiled == eager, metrics, its docstring's "Flags:" line, and that it cuts a
token pushed far the way its advantage pushes, on the side it reports.
"""
import inspect
import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from nanoatr import divergence


class Tokens(NamedTuple):
    ratio: Tensor             # (B, T) w = exp(logp - old_logp), carries the gradient
    log_ratio: Tensor         # (B, T) log w, carries the gradient
    advantages: Tensor        # (B, T)
    valid: Tensor             # (B, T) bool, True = real completion token
    old_logp: Tensor          # (B, T) log pi_old(y_t), detached
    full_kl: Optional[Tensor]  # (B, T) KL(pi_old || pi_theta) over the vocabulary (kl-full, truly-ppo)
    noise: Optional[Tensor]    # (B, T) uniform [0, 1) keys for clip-cov's random choice


def uses(*inputs: str):
    """Mark what a method reads besides ratio, log_ratio, advantages, valid and old_logp:
    "full_kl" (the trainer computes t.full_kl), "noise" (t.noise, random keys), "sequences" (one loss
    per sequence copied onto its tokens: aggregation is forced to seq-mean-token-mean)."""
    unknown = set(inputs) - {"full_kl", "noise", "sequences"}
    if unknown:
        raise ValueError(f"uses(): unknown input {sorted(unknown)[0]!r}")

    def mark(fn):
        fn.uses = frozenset(inputs)
        return fn
    return mark


def ratio_clip(ratio: Tensor, advantages: Tensor, lower, upper):
    """-min(wA, clip(w, lower, upper) A) and its cut sets; bounds are floats or (B, T) tensors."""
    loss = -torch.minimum(ratio * advantages, torch.clamp(ratio, lower, upper) * advantages)
    return loss, (advantages < 0) & (ratio < lower), (advantages > 0) & (ratio > upper)


def unified_clip(ratio: Tensor, advantages: Tensor, inside: Tensor):
    """Eq. 5 inside PPO's min: -min(wA, where(C, w, 1) A), with C = `inside` (bool, no gradient)."""
    clipped = torch.where(inside, ratio, torch.ones_like(ratio))
    loss = -torch.minimum(ratio * advantages, clipped * advantages)
    cut = ~inside & (ratio * advantages > advantages)
    return loss, cut & (ratio < 1), cut & (ratio > 1)


def with_dual_clip(clipped: tuple, t: Tokens, c: float):
    """A ratio clip's (loss, cut_low, cut_high) dual-clipped for A < 0: loss = min(loss, -A c), i.e. the
    gradient is also cut when w > c (in cut_high, and the metric dual_clip_frac)."""
    loss, low, high = clipped
    dual = (t.advantages < 0) & (t.ratio > c)
    loss = torch.where(t.advantages < 0, torch.minimum(loss, -t.advantages * c), loss)
    return loss, low, high | dual, {"dual_clip_frac": dual}


def centred_cov(t: Tokens) -> Tensor:
    """cov_t = (A_t - mean A) (logp_t - mean logp) over the batch's valid tokens, no gradient (Cui et al.
    2025)."""
    logp = (t.old_logp + t.log_ratio).detach()
    n = t.valid.sum().clamp(min=1)
    mean_adv = torch.where(t.valid, t.advantages, 0.0).sum() / n
    mean_logp = torch.where(t.valid, logp, 0.0).sum() / n
    return (t.advantages - mean_adv) * (logp - mean_logp)


def rank(keys: Tensor) -> Tensor:
    """Position of each element in the ascending order of all of `keys` (0 = smallest)."""
    return keys.flatten().argsort().argsort().view_as(keys)


def seq_mean(x: Tensor, valid: Tensor) -> Tensor:
    """(B, T) -> (B,) mean over each sequence's valid tokens."""
    return torch.where(valid, x, 0.0).sum(-1) / valid.sum(-1).clamp(min=1)


def no_cut(t: Tokens) -> Tensor:
    return torch.zeros_like(t.valid)


# ----------------------------------------------------------------------------
# Ratio-range methods

def clip(t: Tokens, eps: float = 0.2):
    """PPO / GRPO: -min(wA, clip(w, 1-eps, 1+eps) A).

    Schulman et al. 2017 (arXiv 1707.06347); verl core_algos.py::compute_policy_loss_vanilla minus its
    always-on dual clip (that is --clip dual-clip).  Default eps 0.2 (verl, TRL).  Flags: eps.
    """
    return (*ratio_clip(t.ratio, t.advantages, 1 - eps, 1 + eps), {})


def clip_higher(t: Tokens, eps_low: float = 0.2, eps_high: float = 0.28):
    """DAPO Clip-Higher: -min(wA, clip(w, 1-eps_low, 1+eps_high) A), a wider band above 1.

    Yu et al. 2025 (arXiv 2503.14476, "eps_low 0.2, eps_high 0.28").  Flags: eps_low, eps_high.
    """
    return (*ratio_clip(t.ratio, t.advantages, 1 - eps_low, 1 + eps_high), {})


def dual_clip(t: Tokens, eps: float = 0.2, dual_clip_c: float = 3.0):
    """Dual-clip PPO: PPO clip, and for A < 0 also min(., -cA): no gradient once w > c.

    Ye et al. 2020 (arXiv 1912.09729); verl compute_policy_loss_vanilla.  Defaults: verl's eps 0.2,
    c = 3 (the DAPO and Clip-Cov scripts set c = 10).  Flags: eps, dual_clip_c.
    """
    return with_dual_clip(ratio_clip(t.ratio, t.advantages, 1 - eps, 1 + eps), t, dual_clip_c)


def dynamic(t: Tokens, eps_low: float = 0.16, eps_high: float = 0.2, dual_clip_c: float = 10.0):
    """DCPO dynamic clipping: bounds from |(w - 1) w q| <= eps with q = pi_old(y_t), then dual clip.

        lower = 0.5 + 0.5 sqrt(max(1 - 4 eps_low / q, 0))
        upper = min(0.5 + 0.5 sqrt(1 + 4 eps_high / q), max(c, 10))
    Rare tokens (small q) get a wider band.  When q < 4 eps_low every w in (0, 1] satisfies the
    constraint, yet the source floors the bound at 0.5; we keep the source's rule.
    Yang et al. 2025 (arXiv 2509.02333); lime-RL/DCPO core_algos.py::get_clip_low_high,
    compute_policy_loss_dcpo.  Defaults: the README's eps 0.16 / 0.2 (the paper's values; the run
    scripts use 0.2 / 0.28) and the scripts' c = 10.  Flags: eps_low, eps_high, dual_clip_c.
    """
    q = t.old_logp.exp()
    lower = 0.5 + 0.5 * torch.sqrt(torch.clamp(1 - 4 * eps_low / q, min=0))
    upper = torch.clamp(0.5 + 0.5 * torch.sqrt(1 + 4 * eps_high / q), max=max(dual_clip_c, 10.0))
    return with_dual_clip(ratio_clip(t.ratio, t.advantages, lower, upper), t, dual_clip_c)


@uses("noise")
def clip_cov(t: Tokens, eps_low: float = 1.0, eps_high: float = 1.0, clip_cov_ratio: float = 2e-4,
             clip_cov_lb: float = 1.0, clip_cov_ub: float = 5.0):
    """Clip-Cov: PPO clip, plus a random max(1, int(ratio * N)) of the unclipped tokens with
    lb < cov < ub lose their gradient (loss 0; they still count in the normaliser).

    cov = (A - mean A)(logp - mean logp) over this micro-batch's valid tokens.  The random keys are
    `t.noise` (drawn outside with the caller's generator, so the compiled loss stays pure).
    Cui et al. 2025 (arXiv 2505.22617); verl core_algos.py::compute_policy_loss_clip_cov.  Defaults
    follow the paper's scripts (recipe/dapo/7b_clip_cov.sh): eps 1 / 1 (band [0, 2]), ratio 2e-4,
    bounds (1, 5).  Flags: eps_low, eps_high, clip_cov_ratio, clip_cov_lb, clip_cov_ub.
    """
    loss, low, high = ratio_clip(t.ratio, t.advantages, 1 - eps_low, 1 + eps_high)
    cov = centred_cov(t)
    candidates = t.valid & ~(low | high) & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    n = torch.clamp(torch.floor(clip_cov_ratio * t.valid.sum()), min=1)
    chosen = candidates & (rank(torch.where(candidates, t.noise, 2.0)) < n)  # n random candidates
    return torch.where(chosen, 0.0, loss), low, high, {"cov_frac": chosen}


def kl_cov(t: Tokens, kl_cov_ratio: float = 2e-3, kl_cov_coef: float = 1.0):
    """KL-Cov: no clipping; the top max(1, int(ratio * N)) tokens by cov get a penalty coef * |log w|.

        loss = -wA + coef * |logp - old_logp| * [token in top-k by cov]
    Cui et al. 2025 (arXiv 2505.22617); verl core_algos.py::compute_policy_loss_kl_cov.  Defaults:
    the paper's 7B script (k_percent 0.2 % = 2e-3, coef 1); verl's yaml has 2e-4 / 0.1.  On an
    on-policy step log w = 0 and |.| has zero gradient there, so it is plain policy gradient.  As in
    verl, cov and the top-k are taken over the micro-batch, so the choice depends on the split.
    Flags: kl_cov_ratio, kl_cov_coef.
    """
    cov = centred_cov(t)
    k = torch.clamp(torch.floor(kl_cov_ratio * t.valid.sum()), min=1)
    chosen = t.valid & (rank(torch.where(t.valid, -cov, math.inf)) < k)  # the k largest cov
    loss = -t.ratio * t.advantages + torch.where(chosen, kl_cov_coef * t.log_ratio.abs(), 0.0)
    return loss, no_cut(t), no_cut(t), {"cov_frac": chosen}


def trgppo(t: Tokens, delta: float = 0.07, eps: float = 0.2):
    """TRGPPO: a ratio clip whose band is PPO's widened to the trust region of the token's old probability:

        [min(l_delta(p), 1 - eps), max(u_delta(p), 1 + eps)],   p = pi_old(y_t)
    where [l_delta(p), u_delta(p)] holds every ratio some pi with KL(pi_old || pi) <= delta can give
    (divergence.trgppo_ratio_range).  Needs only old_logp: the cheap stand-in for kl-full.
    Wang et al. 2019 (arXiv 1901.10314); the paper's Table 1 row; the discrete code (wangyuhuix/TRGPPO
    KL2Clip_discrete.py) uses the KL bounds alone.  Defaults: delta 0.07 as for every KL method of
    the paper, eps 0.2 as GRPO.  Flags: delta, eps.
    """
    lower, upper = divergence.trgppo_ratio_range(t.old_logp, delta)
    lower, upper = torch.clamp(lower, max=1 - eps), torch.clamp(upper, min=1 + eps)
    return (*ratio_clip(t.ratio, t.advantages, lower, upper), {})


def soft_gate(t: Tokens, tau_pos: float = 1.0, tau_neg: float = 1.05):
    """SAPO soft gate: -A * sigmoid(tau (w - 1)) * 4 / tau, tau = tau_pos if A > 0 else tau_neg.

    Never cut: d loss / d log w = -A * 4 s (1 - s) * w with s = sigmoid(tau (w - 1)), which is -A
    at w = 1 and decays smoothly away from it.  Metric `gate` = mean of 4 s (1 - s).
    Gao et al. 2025 (arXiv 2511.20347); verl compute_policy_loss_sapo; TRL loss_type="sapo".
    Flags: tau_pos, tau_neg.
    """
    tau = torch.full_like(t.ratio, tau_neg).masked_fill(t.advantages > 0, tau_pos)  # w's dtype, not float32
    s = torch.sigmoid(tau * (t.ratio - 1))
    loss = -s * (4 / tau) * t.advantages
    return loss, no_cut(t), no_cut(t), {"gate": (4 * s * (1 - s)).detach()}


def cispo(t: Tokens, eps_low: float = 1.0, eps_high: float = 4.0):
    """CISPO: the importance weight clipped and detached, the gradient kept, through log pi_theta itself:

        loss = -sg(clip(w, 1-eps_low, 1+eps_high)) * A * log pi_theta(y_t)
    Never cut: d loss / d logp = -clip(w) A, so a token past the bound still moves, weighted by the bound
    (PPO's min would give it no gradient). Metric `weight_clip_frac`: tokens whose weight was clipped.
    MiniMax 2025 (MiniMax-M1, arXiv 2506.13585, Eq. 4-5): the lower bound left off (eps_low set large),
    only eps_high tuned (its value: not in the summaries we read; we did not read the PDF).  verl
    compute_policy_loss_cispo (clip_ratio_low / clip_ratio_high; its example script: 10 / 0.2); TRL
    loss_type="cispo", whose epsilon_high is the cap itself (1 + eps_high here), recommended at 5.0 (after
    ScaleRL, arXiv 2510.13786).  Defaults: eps_low 1 (bound 0: none, w > 0), eps_high 4 (TRL's cap 5).
    Flags: eps_low, eps_high.
    """
    weight = torch.clamp(t.ratio, 1 - eps_low, 1 + eps_high).detach()
    logp = t.old_logp + t.log_ratio  # log pi_theta(y_t): its gradient is logp's, old_logp is a constant
    clipped = weight != t.ratio.detach()
    return -weight * t.advantages * logp, no_cut(t), no_cut(t), {"weight_clip_frac": clipped}


# ----------------------------------------------------------------------------
# Divergence constraints in the unified clip (Eq. 5), Table 3 of the paper

def kl1(t: Tokens, delta: float = 0.07):
    """C: k1 = -log w <= delta, i.e. w >= exp(-delta).  k1 < 0 whenever w > 1, so increases are
    never cut: only A < 0 tokens pushed below exp(-delta) lose their gradient (Table 3, delta 0.07).
    Flags: delta.
    """
    k1 = divergence.k1(t.log_ratio)
    return (*unified_clip(t.ratio, t.advantages, k1 <= delta), {"k1": k1.detach()})


def kl2(t: Tokens, delta: float = 0.07):
    """C: k2 = (log w)^2 / 2 <= delta, i.e. |log w| <= sqrt(2 delta) (Table 3, delta 0.07).  Flags: delta."""
    k2 = divergence.k2(t.log_ratio)
    return (*unified_clip(t.ratio, t.advantages, k2 <= delta), {"k2": k2.detach()})


def kl3(t: Tokens, delta: float = 0.07):
    """ATR-GRPO, the paper's method: C: KL3 = w - 1 - log w <= delta (Eq. 6, Sec. 4.2).

    Same gradient as a ratio clip with [l, u] = divergence.kl3_ratio_range(delta) (Theorem 4.2),
    [0.671, 1.422] at delta = 0.07 (the paper's choice, Sec. 6.4), but no range is computed: the
    constraint is checked directly, as the paper suggests.  Flags: delta.
    """
    k3 = divergence.k3(t.log_ratio)
    return (*unified_clip(t.ratio, t.advantages, k3 <= delta), {"kl3": k3.detach()})


def kl3_is(t: Tokens, delta: float = 0.07):
    """IS-weighted KL3: C: w * k3(1/w) = w log w - (w - 1) <= delta (Table 3).

    The paper does not spell the estimator out.  We take the importance-weighted k3 of the reversed
    ratio, the unbiased estimate from pi_old samples of KL(pi_theta || pi_old), i.e. of the direction
    the paper writes in Eq. 4; plain KL3 estimates KL(pi_old || pi_theta).  The other reading,
    w * k3(w), is not a KL estimator (its mean is chi^2 - KL), so we do not use it.
    Range at delta = 0.07 (Table 3): [0.650, 1.397] (divergence.kl3_is_ratio_range).  Flags: delta.
    """
    k3_is = divergence.k3_is(t.log_ratio)
    return (*unified_clip(t.ratio, t.advantages, k3_is <= delta), {"k3_is": k3_is.detach()})


def kl3_adaptive(t: Tokens, delta: float = 0.07, adapt: float = 0.5, delta_max: float = 0.35):
    """KL3 with a per-token threshold from the token's old probability (the paper's Sec. 6.5, future work):

        C: k3(w) <= delta_t,   delta_t = min(delta * q^(-adapt), delta_max),   q = pi_old(y_t)
    Why this rule: moving one token of old probability q by the ratio w (the rest of the distribution
    rescaled) changes the distribution by KL(pi_old || pi) ~ q/(1-q) k3(w) to second order in w - 1,
    so one delta for every token is a far tighter budget on the distribution for rare tokens than for
    confident ones: the reason TRGPPO (Wang et al. 2019) and DCPO (Yang et al. 2025) widen the band of
    low-probability tokens. adapt = 1 bounds q k3(w), about that real KL for rare tokens; adapt = 0
    is plain kl3 (delta_t = delta); the default 0.5 is half way in log scale. A token with q = 1 keeps
    delta; delta_max (5 delta by default, KL3 band [0.379, 2.085]) stops the band of very rare tokens
    from opening without limit.  Flags: delta, adapt, delta_max.
    """
    threshold = torch.clamp(delta * torch.exp(-adapt * t.old_logp), max=delta_max)  # (B, T); padding: q = 1
    k3 = divergence.k3(t.log_ratio)
    return (*unified_clip(t.ratio, t.advantages, k3 <= threshold), {"kl3": k3.detach(),
                                                                    "delta_t": threshold.detach()})


@uses("sequences")
def kl3_seq(t: Tokens, delta: float = 0.07):
    """Sequence-level KL3 (the paper's Sec. 6.5, future work): GSPO's sequence ratio in the unified clip.

        s = exp(mean_t log w_t),   C: T k3(s) <= delta   (T = the sequence's length),
        loss = -min(s A, where(C, s, 1) A), copied onto each valid token
    The sequence ratio is GSPO's geometric mean (its value and gradient; the full product of the T
    ratios has a variance that grows with T). The scale: k3 of the full sequence ratio W = prod w_t is
    the one-sample KL3 estimate of the sequence-level KL, a sum over T tokens, so its budget is T
    delta (delta per token); since log W = T log s, k3(W) ~ T^2 k3(s) to second order, and
    k3(W) <= T delta becomes T k3(s) <= delta. On a one-token sequence this is exactly kl3; a long
    sequence may drift by about sqrt(2 delta / T) in mean log-ratio. A sequence is kept or cut whole;
    aggregation is seq-mean-token-mean, as for gspo.  Flags: delta.
    """
    n = t.valid.sum(-1).clamp(min=1)                                         # (B,) T
    log_s = torch.where(t.valid, t.log_ratio, 0.0).sum(-1) / n               # (B,) mean log w
    divergence_seq = n * divergence.k3(log_s)                                # (B,) T k3(s)
    s = log_s.exp()[:, None].expand_as(t.ratio)                              # (B, T)
    loss, low, high = unified_clip(s, t.advantages, (divergence_seq <= delta)[:, None].expand_as(t.ratio))
    return loss, low, high, {"seq_kl3": divergence_seq.detach(),
                             "seq_clip_frac": (t.valid & (low | high)).any(-1)}


@uses("full_kl")
def kl_full(t: Tokens, delta: float = 0.07):
    """Full KL-guided clipping: C: KL(pi_old(.|s_t) || pi_theta(.|s_t)) <= delta, the exact KL over the
    vocabulary at the token's position (Eq. 4; Wang et al. 2019, "Full KL-Guided Clipping" in Table 3).

    Needs `full_kl` (B, T), see nanoatr.scoring.full_kl; only its value is used (no gradient needed).
    Direction KL(old || new) as in the TRGPPO / Truly PPO code and as KL3 estimates it (Eq. 4 writes
    KL(pi_theta || pi_old); near pi_old the two agree to second order).  Flags: delta.
    """
    return (*unified_clip(t.ratio, t.advantages, t.full_kl <= delta), {"full_kl": t.full_kl.detach()})


@uses("full_kl")
def truly_ppo(t: Tokens, delta: float = 0.07, rollback_alpha: float = 5.0):
    """Truly PPO (TR-PPO-RB): nothing is cut; where KL >= delta and wA > A the objective rolls back:

        loss = -wA + alpha * KL   if KL(pi_old || pi_theta) >= delta and wA > A,   else -wA
    so the gradient there is -A dw + alpha dKL.  Needs `full_kl` (B, T) *with* gradient.
    Wang, He, Tan 2020 (arXiv 1903.07940); TrulyPPO ppo2.py, cliptype kl_klrollback_constant_withratio.
    Defaults: delta 0.07, the threshold the paper uses for every KL constraint (Truly PPO's own
    0.03 / 0.0008 were tuned for MuJoCo / Atari), and alpha 5 (TrulyPPO run.py, MuJoCo).
    Flags: delta, rollback_alpha.
    """
    w, A = t.ratio, t.advantages
    rollback = (t.full_kl >= delta) & (w * A > A)
    loss = -w * A + torch.where(rollback, rollback_alpha * t.full_kl, 0.0)
    return loss, no_cut(t), no_cut(t), {"rollback_frac": rollback, "full_kl": t.full_kl.detach()}


# ----------------------------------------------------------------------------
# Sequence-level ratio

@uses("sequences")
def gspo(t: Tokens, eps_low: float = 3e-4, eps_high: float = 4e-4):
    """GSPO: one ratio per sequence, s = exp(mean_t log w_t) (geometric mean), PPO-clipped:

        loss_i = -min(s A, clip(s, 1-eps_low, 1+eps_high) A), copied onto each valid token,
    so the whole sequence is cut or kept.  Each copy carries the full sequence gradient; only
    `seq-mean-token-mean` aggregation gives GSPO's 1/G sum_i loss_i, so policy_loss forces it.
    Zheng et al. 2025 (arXiv 2507.18071, eps 3e-4 / 4e-4); TRL importance_sampling_level="sequence".
    Flags: eps_low, eps_high.
    """
    s = torch.exp(seq_mean(t.log_ratio, t.valid))[:, None].expand_as(t.ratio)  # (B, T)
    loss, low, high = ratio_clip(s, t.advantages, 1 - eps_low, 1 + eps_high)
    return loss, low, high, {"seq_clip_frac": (t.valid & (low | high)).any(-1)}


@uses("sequences")
def gspo_token(t: Tokens, eps_low: float = 3e-4, eps_high: float = 4e-4):
    """GSPO-token: s_t = sg(s) * w_t / sg(w_t), the value of s with the gradient of log w_t:

        loss_t = -min(s_t A_t, clip(s_t, 1-eps_low, 1+eps_high) A_t)
    With A constant over a sequence, this equals `gspo` in value and gradient (under seq-mean-token-mean,
    which policy_loss forces); it also accepts per-token advantages.
    Zheng et al. 2025 (arXiv 2507.18071); verl core_algos.py::compute_policy_loss_gspo.
    Flags: eps_low, eps_high.
    """
    s = (torch.exp(seq_mean(t.log_ratio.detach(), t.valid))[:, None]
         * torch.exp(t.log_ratio - t.log_ratio.detach()))
    loss, low, high = ratio_clip(s, t.advantages, 1 - eps_low, 1 + eps_high)
    return loss, low, high, {"seq_clip_frac": (t.valid & (low | high)).any(-1)}


# ----------------------------------------------------------------------------
# The registry: --clip name -> function. Its keyword defaults are the method's defaults and flags.

METHODS = {
    "clip": clip, "clip-higher": clip_higher, "dual-clip": dual_clip, "dynamic": dynamic,
    "clip-cov": clip_cov, "kl-cov": kl_cov, "trgppo": trgppo, "soft-gate": soft_gate, "cispo": cispo,
    "kl1": kl1, "kl2": kl2, "kl3": kl3, "kl3-is": kl3_is, "kl-full": kl_full, "truly-ppo": truly_ppo,
    "gspo": gspo, "gspo-token": gspo_token, "kl3-adaptive": kl3_adaptive, "kl3-seq": kl3_seq,
}

# The allowed values of each hyper-parameter: a range of flags.RANGES. A knob that is not listed here
# must merely be a finite number.
RULES = {
    "eps": "(0,1)", "eps_low": "(0,1]", "eps_high": ">0", "dual_clip_c": ">1", "delta": ">0", "tau_pos": ">0",
    "tau_neg": ">0", "clip_cov_ratio": "(0,1]", "kl_cov_ratio": "(0,1]", "kl_cov_coef": ">=0",
    "rollback_alpha": ">=0", "adapt": "[0,1]", "delta_max": ">0",
}


def defaults(method: str) -> dict:
    """The method's hyper-parameters and their defaults, read from its function's signature."""
    params = list(inspect.signature(METHODS[method]).parameters.values())[1:]  # after `t`
    missing = [p.name for p in params if p.default is inspect.Parameter.empty]
    if missing:
        raise TypeError(f"--clip {method}: hyper-parameter {missing[0]!r} needs a default in its signature")
    return {p.name: p.default for p in params}


def needs(method: str, what: str) -> bool:
    """Whether `method` reads `what` ("full_kl", "noise", "sequences"): see @uses."""
    return what in getattr(METHODS[method], "uses", ())
