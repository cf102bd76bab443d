"""The GRPO objective: group advantages, the per-token loss of any --clip method, aggregation.

    rewards (N,) (+ overlong_penalty) --group_advantages--> advantages (N,)
    logp, old_logp, advantages, mask (B, T) --_token_loss--> per-token loss (B, T) + metrics
    per-token loss --aggregate--> the micro-batch's scalar (normalised over the whole optimizer step)
    policy_loss = _token_loss + aggregate, compiled once with torch.compile: what the trainer calls
    check_finite: a reward, loss, gradient norm or weight that is not finite stops the run (Diverged)

The per-token surrogates live in nanoatr/methods.py (one function each), the log-probs come from
nanoatr/scoring.py. The deliberate choices (advantages, the log-ratio clamp, padding, the KL penalty,
aggregation, when hyper-parameters are checked), in one place: docs/library.md#loss"""
import functools
import math
import warnings
from typing import Callable, Optional

import torch
from torch import Tensor

from nanoatr import divergence
from nanoatr.methods import METHODS, Tokens, defaults, needs

AGGREGATIONS = ("dr-grpo", "token-mean", "seq-mean-token-mean")
MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: far outside every clip region, still finite in float32


# ----------------------------------------------------------------------------
# Group-relative advantages: each completion is scored against the other completions of its prompt
#
#     Dr. GRPO (default, the paper's backbone):  A_i = R_i - mean_group(R)
#     GRPO (normalize_std=True):                  A_i = (R_i - mean_group(R)) / (std_group(R) + 1e-6)
#
# std is the unbiased (n - 1) standard deviation, as torch.std, verl and TRL use; eps 1e-6 is verl's.
# A group whose rewards are all equal carries no signal: its advantages are exactly 0 in both modes.
# "All equal" is judged with a tolerance (std <= 1e-5 * max(1, |mean|)), because float rounding of the
# mean leaves a residue ~1e-8 that the std division would otherwise blow up to advantages of ~1.

STD_EPS = 1e-6       # GRPO's divisor guard (verl compute_grpo_outcome_advantage)
EQUAL_RTOL = 1e-5    # rewards within this (relative) spread count as equal


def group_advantages(rewards: Tensor, group_size: int, normalize_std: bool = False) -> Tensor:
    """Advantages (N,) for rewards (N,) laid out as consecutive groups [p0 x G, p1 x G, ...]; computed in
    float64, returned as float32 (or the rewards' own floating dtype)."""
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


def overlong_penalty(lengths: Tensor, max_new_tokens: int, buffer: int, factor: float = 1.0) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, Eq. 13), added to each reward (N,):

        0                                        |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache * F   L_max - L_cache < |y| <= L_max    (0 down to -F)
        -F                                       |y| > L_max
    with |y| = lengths (N,) (completion tokens, the EOS counted), L_max = max_new_tokens, L_cache = buffer
    (0: off, every penalty 0), F = factor (Eq. 13 has 1), as verl's DAPORewardManager. float32."""
    if buffer == 0:
        return torch.zeros(lengths.shape, device=lengths.device)
    expected = max_new_tokens - buffer
    return ((expected - lengths.double()) / buffer * factor).clamp(min=-factor, max=0.0).float()


# ----------------------------------------------------------------------------
# Per-token loss and metrics

def uniform_groups(rewards: torch.Tensor, G: int) -> list[int]:
    """Indices of the groups whose G rewards are all equal (zero advantage: no gradient)."""
    groups = rewards.view(-1, G)
    return (groups == groups[:, :1]).all(1).nonzero()[:, 0].tolist()


def dynamic_sampling(draw: Callable, share: int, G: int, max_rounds: int) -> tuple[list, list[tuple]]:
    """DAPO's dynamic sampling (--dynamic-sampling K = max_rounds): the rounds drawn, and the (round, group)
    that fills each of the batch's `share` slots.

    draw(r, n) is sampling round r: n prompts, G completions each (anything with .rewards, (n G,)).
    Round 0 fills every slot. A group whose G rewards are all equal gives no gradient, so its slot is
    refilled, in slot order, by the mixed groups of up to K further rounds, each drawing twice as many
    prompts as slots are still uniform (at most `share`; DAPO draws whole batches, cheap on a GPU only).
    Slots still uniform after K rounds keep their group; K = 0 is one round, as drawn."""
    rounds = [draw(0, share)]
    picks = [(0, g) for g in range(share)]
    todo = uniform_groups(rounds[0].rewards, G)  # slots to refill, in order
    while todo and len(rounds) <= max_rounds:
        r = len(rounds)
        rounds.append(draw(r, min(share, 2 * len(todo))))
        uniform = uniform_groups(rounds[r].rewards, G)
        mixed = [g for g in range(len(rounds[r].rewards) // G) if g not in uniform]
        for g in mixed[:len(todo)]:
            picks[todo.pop(0)] = (r, g)
    return rounds, picks


def loss_mask(mask: Tensor, finished: Tensor, mask_truncated: bool) -> Tensor:
    """(b, T) the completion tokens (mask) the loss is taken over: every one, or under --mask-truncated none
    of a completion that did not finish (no EOS, no stop string: it ran out of --max-new-tokens), as TRL's
    mask_truncated_completions. As there, such a row keeps its part in its group's advantage and in the
    normalisers that count sequences (dr-grpo, seq-mean-token-mean); token-mean's count leaves it out."""
    return mask & finished[:, None] if mask_truncated else mask


def _inputs(method, logp, old_logp, advantages, mask, full_kl, generator):
    """Eager shape checks and the extra inputs of the (possibly compiled) loss: full_kl, clip-cov's noise."""
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(f"logp, old_logp and mask must all be (B, T); got {tuple(logp.shape)}, "
                         f"{tuple(old_logp.shape)}, {tuple(mask.shape)}")
    if advantages.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(f"advantages must be (B,) or (B, T) = {tuple(logp.shape)}; "
                         f"got {tuple(advantages.shape)}")
    if method not in METHODS:
        raise ValueError(f"--clip must be one of {', '.join(METHODS)} (got {method!r})")
    full_kl = full_kl if needs(method, "full_kl") else None  # no other method reads it
    if needs(method, "full_kl") and (full_kl is None or full_kl.shape != logp.shape):
        raise ValueError(f"--clip {method} needs full_kl (B, T), the per-token KL(pi_old || pi_theta) "
                         "over the vocabulary: see nanoatr.scoring.full_kl")
    noise = None
    if needs(method, "noise"):  # drawn on the generator's device, used on logp's
        device = generator.device if generator is not None else logp.device
        noise = torch.rand(logp.shape, generator=generator, device=device).to(logp.device)
    return full_kl, noise


def _token_loss(method, logp, old_logp, advantages, mask, full_kl, noise, hp):
    """Per-token loss (B, T) of `method` (to be minimised) and its metrics (dict of 0-dim tensors).

    logp carries the gradient; old_logp (pi_old's) never does: the ratio and the method see it detached.
    Metrics: clip_frac_low / clip_frac_high (fraction of valid tokens whose gradient was cut with the
    ratio below / above the allowed region), kl3 (mean KL3(w)), ratio_min, ratio_max (+inf / -inf when
    no token is valid), and each method's own (methods.py). Tensors only: policy_loss compiles it.
    """
    valid = mask.bool()
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)  # one advantage per sequence, on every token
    # sanitise padding first: whatever logp / old_logp hold there, the method sees w = 1, A = 0
    log_ratio = torch.where(valid, (logp - old_logp.detach()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO), 0.0)
    t = Tokens(ratio=log_ratio.exp(), log_ratio=log_ratio,
               advantages=torch.where(valid, advantages, 0.0).to(log_ratio.dtype), valid=valid,
               old_logp=torch.where(valid, old_logp.detach(), 0.0),
               full_kl=None if full_kl is None else torch.where(valid, full_kl, 0.0), noise=noise)
    loss, cut_low, cut_high, extras = METHODS[method](t, **hp)
    loss = torch.where(valid, loss, 0.0)
    return loss, _metrics(t, cut_low, cut_high, extras)


def _metrics(t: Tokens, cut_low: Tensor, cut_high: Tensor, extras: dict) -> dict[str, Tensor]:
    n = t.valid.sum().clamp(min=1)
    n_seq = t.valid.any(-1).sum().clamp(min=1)

    def mean(x):  # (B, T) over valid tokens; (B,) over sequences with at least one valid token
        if x.dim() == 1:
            return torch.where(t.valid.any(-1), x.to(t.ratio.dtype), 0.0).sum().detach() / n_seq
        return torch.where(t.valid, x.to(t.ratio.dtype), 0.0).sum().detach() / n

    ratio = t.ratio.detach()
    metrics = {"clip_frac_low": mean(cut_low), "clip_frac_high": mean(cut_high),
               "kl3": mean(divergence.k3(t.log_ratio.detach())),
               "ratio_min": torch.where(t.valid, ratio, torch.inf).amin(),
               "ratio_max": torch.where(t.valid, ratio, -torch.inf).amax()}
    metrics.update({name: mean(x) for name, x in extras.items()})
    return metrics


# ----------------------------------------------------------------------------
# Aggregation

def aggregate(per_token_loss: Tensor, mask: Tensor, mode: str, *, num_sequences, num_tokens,
              max_new_tokens) -> Tensor:
    """Scalar loss of a micro-batch; the counts are those of the whole optimizer step, so summing the
    micro-batches' losses gives the gradient of one big batch.

      dr-grpo              sum of token losses / (num_sequences * max_new_tokens)   (Dr. GRPO; default)
      token-mean           sum of token losses / num_tokens                         (DAPO)
      seq-mean-token-mean  sum over sequences of their token mean / num_sequences   (GRPO)
    An empty sequence (no valid token) adds 0 but still counts in num_sequences.
    The counts may be ints or 0-dim tensors (the compiled path passes tensors to avoid recompiles).
    """
    loss = torch.where(mask.bool(), per_token_loss, 0.0)
    if mode == "dr-grpo":
        return loss.sum() / (num_sequences * max_new_tokens)
    if mode == "token-mean":
        return loss.sum() / num_tokens
    if mode == "seq-mean-token-mean":
        return (loss.sum(-1) / mask.bool().sum(-1).clamp(min=1)).sum() / num_sequences
    raise ValueError(f"--aggregation must be one of {', '.join(AGGREGATIONS)} (got {mode!r})")


def kl_to_reference(logp, old_logp, ref_logp, mask):
    """Per-token w * k3(rho) (B, T), the KL penalty to the reference policy (--beta); 0 on padding.

    With samples from pi_old, w = pi_theta / pi_old and rho = pi_ref / pi_theta,
        kl = w * k3(rho) = w * (rho - 1 - log rho)
    is an unbiased estimate of KL(pi_theta || pi_ref) from these stale samples whose gradient, through
    w and rho, is that KL's gradient (TRL's use_bias_correction_kl). Plain k3(rho) is biased once
    pi_theta != pi_old, and its gradient is that of the other direction, KL(pi_ref || pi_theta).
    logp carries the gradient; old_logp and ref_logp are constants. Log-ratios are clamped to
    +-MAX_LOG_RATIO as in the policy loss, so a diverged token stays finite.
    """
    valid = mask.bool()
    log_w = torch.where(valid, logp - old_logp.detach(), 0.0).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    log_rho = torch.where(valid, ref_logp.detach() - logp, 0.0).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return torch.where(valid, log_w.exp() * divergence.k3(log_rho), 0.0)


# ----------------------------------------------------------------------------
# The fused loss: surrogate + aggregation, compiled once

def _fused_loss(method, agg, logp, old_logp, advantages, mask, full_kl, noise, counts, hp):
    """_token_loss + aggregate on tensors only; counts = (num_sequences, num_tokens, max_new_tokens)."""
    loss, metrics = _token_loss(method, logp, old_logp, advantages, mask, full_kl, noise, hp)
    return aggregate(loss, mask, agg, num_sequences=counts[0], num_tokens=counts[1],
                     max_new_tokens=counts[2]), metrics


@functools.cache
def _compiled_loss():
    """torch.compile(_fused_loss), built on first use. dynamic=True: one graph for every B and T; one
    per method, up to torch._dynamo.config.recompile_limit (8) of them (docs/library.md#loss)."""
    return torch.compile(_fused_loss, dynamic=True)


_EAGER = set()  # methods whose compilation failed once: they stay eager (same maths)


def policy_loss(method: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                agg: str = "dr-grpo", num_sequences: int, num_tokens: int, max_new_tokens: int,
                compile: bool = True, full_kl: Optional[Tensor] = None,
                generator: Optional[torch.Generator] = None, **hparams) -> tuple[Tensor, dict[str, Tensor]]:
    """Scalar loss of one micro-batch (_token_loss, then aggregate) and the metrics of _token_loss.

    logp (B, T) carries the gradient; old_logp (B, T) is pi_old's (never differentiated); advantages
    (B,) per sequence or (B, T); mask (B, T) bool or float, 1 = real completion token. full_kl (B, T):
    KL(pi_old || pi_theta) over the vocabulary, needed by kl-full (value only) and truly-ppo (with
    gradient); build it with nanoatr.scoring.full_kl. generator: the RNG of clip-cov's random token
    choice (default: torch's global RNG).
    hparams: the method's, already checked (flags.check_hparams); missing ones take the method's defaults.
    num_sequences / num_tokens: sequences and valid tokens of the whole optimizer step; max_new_tokens:
    the completion budget (Dr. GRPO's constant). Methods that use "sequences" (gspo, gspo-token) always
    aggregate with seq-mean-token-mean. compile=True runs the torch.compile'd fusion (a failed compile:
    one warning, then eager for that method); clip-cov's random keys are drawn here, eagerly."""
    full_kl, noise = _inputs(method, logp, old_logp, advantages, mask, full_kl, generator)
    hp = {**defaults(method), **hparams}
    agg = "seq-mean-token-mean" if needs(method, "sequences") else agg
    if agg not in AGGREGATIONS:
        raise ValueError(f"--aggregation must be one of {', '.join(AGGREGATIONS)} (got {agg!r})")
    for name, value in [("num_sequences", num_sequences), ("num_tokens", num_tokens),
                        ("max_new_tokens", max_new_tokens)]:
        if not value > 0:
            raise ValueError(f"{name} must be > 0 (got {value})")
    # Counts are exact up to 2^24 in float32; the loss keeps logp's dtype.
    dtype = torch.promote_types(logp.dtype, torch.float32)
    counts = torch.tensor([num_sequences, num_tokens, max_new_tokens], dtype=dtype, device=logp.device)
    args = (method, agg, logp, old_logp, advantages, mask, full_kl, noise, counts, hp)
    if not compile or method in _EAGER:
        loss, metrics = _fused_loss(*args)
    else:
        try:
            loss, metrics = _compiled_loss()(*args)
        except Exception as err:  # no C compiler, an unsupported op...: the eager loss is the same maths
            warnings.warn(f"torch.compile of the {method} loss failed ({type(err).__name__}: "
                          f"{str(err)[:200]}); using the eager loss from now on (pass --no-compile to skip "
                          "compiling)")
            _EAGER.add(method)
            loss, metrics = _fused_loss(*args)
    return loss, metrics | ratio_quantiles(logp, old_logp, mask) | band_metrics(method, hp)


QUANTILES = (0.01, 0.1, 0.9, 0.99)


def ratio_quantiles(logp, old_logp, mask) -> dict[str, Tensor]:
    """Where the ratios sit: w at the 1st, 10th, 90th and 99th percentile of the valid tokens (ratio_p01 ...).
    Unlike ratio_min / ratio_max, which one outlier sets, they show how much of the batch a band reaches."""
    w = (logp.detach() - old_logp.detach())[mask.bool()].float().clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    if w.numel() == 0:
        w = torch.ones(1, device=logp.device)
    q = torch.quantile(w, torch.tensor(QUANTILES, device=w.device))
    return {f"ratio_p{round(100 * p):02d}": v for p, v in zip(QUANTILES, q)}


def band_metrics(method: str, hp: dict) -> dict[str, Tensor]:
    """band_low / band_high: the method's effective band (effective_band), where it has one."""
    band = effective_band(method, tuple(sorted(hp.items())))
    return {} if band is None else {"band_low": torch.tensor(band[0]), "band_high": torch.tensor(band[1])}


@functools.lru_cache(maxsize=64)
def effective_band(method: str, hp: tuple) -> tuple[float, float] | None:
    """(low, high): the ratios outside which `method` cuts a token that moved the way its advantage
    pushes it (A < 0 below low, A > 0 above high; an unbounded side is inf or 0), found by probing the
    method's own function to the last float of log w (so a new method needs nothing more). None where
    the cut is not a function of w alone: it depends on pi_old (trgppo, dynamic, kl3-adaptive: probed at
    1 and 0.01, each rule monotone in it), on the full-vocabulary KL, on random or covariance picks, on
    the sequence's length, or the method never cuts (soft-gate, kl-cov)."""
    fn, hp = METHODS[method], dict(hp)
    if needs(method, "full_kl") or needs(method, "noise"):
        return None

    def cuts(log_w: Tensor, sign: float, q: float = 1.0, length: int = 1) -> Tensor:
        lw = log_w.to(torch.float64)[:, None].expand(-1, length)
        t = Tokens(lw.exp(), lw, torch.full_like(lw, sign), torch.ones_like(lw, dtype=torch.bool),
                   torch.full_like(lw, math.log(q)), None, None)
        _, low, high, _ = fn(t, **hp)
        return (low if sign < 0 else high)[:, 0]

    grid = torch.linspace(-8.0, 8.0, 4001, dtype=torch.float64)  # log w, 0.004 apart
    edges = []
    for sign, side in ((-1.0, grid[grid < 0].flip(0)), (1.0, grid[grid > 0])):
        cut = cuts(side, sign)
        if not torch.equal(cut, cuts(side, sign, q=0.01)) or not torch.equal(cut, cuts(side, sign, length=3)):
            return None
        if not cut.any():
            edges.append(math.inf * sign)
            continue
        first = int(cut.int().argmax())
        inner, outer = (float(side[first - 1]) if first else 0.0), float(side[first])
        while (mid := (inner + outer) / 2) not in (inner, outer):  # bisect to two adjacent floats
            cut_mid = cuts(torch.tensor([mid], dtype=torch.float64), sign)[0]
            inner, outer = (inner, mid) if cut_mid else (mid, outer)
        edges.append(outer)
    if edges == [-math.inf, math.inf]:
        return None
    return math.exp(edges[0]), math.exp(edges[1])


# ----------------------------------------------------------------------------
# The step's guard: a number that is not finite stops the run

class Diverged(Exception):
    """A value that is not finite (check_finite): the run stops; nothing of the step is logged or saved."""


def check_finite(where: str, values: dict, all_sum: Callable[[float], float] = float):
    """Stop the run (Diverged, one line) when one of `values` ({what: tensors, numbers, or lists of either})
    is not finite, before the optimizer moves on it, on every rank alike: all_sum(x) sums x over the ranks
    (float: one process; train.py passes Dist.all_sum). Why stopped, not skipped: docs/library.md#loss"""
    for what, v in values.items():
        parts = [torch.as_tensor(x).detach() for x in (v if isinstance(v, list) else [v])]
        finite = not parts or bool(torch.stack([t.isfinite().all() for t in parts]).all())  # one sync
        bad = [] if finite else [t for t in parts if not bool(t.isfinite().all())]
        if all_sum(float(not finite)):
            shown = bad[0][~bad[0].isfinite()].flatten()[0].item() if bad else "on another rank"
            raise Diverged(f"{where}: {what} is not finite ({shown})")
