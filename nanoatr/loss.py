"""The policy loss: per-token surrogate of any --clip method, aggregation, compiled fusion, log-probs.

Deliberate choices, in one place:
  - the loss is token-level; the per-token surrogates live in nanoatr/methods.py (one function each)
  - the log-ratio log w = logp - old_logp is clamped to [-20, 20] (as verl does) so a diverged
    token gives a finite loss; beyond that its gradient is zero
  - padding (mask 0) gets exactly zero loss and zero gradient, whatever its logp holds (torch.where,
    never a multiplication by the mask, so inf / nan there cannot leak)
  - no KL-to-reference penalty (beta = 0, as in the paper and Dr. GRPO)
  - aggregation is a separate step; `dr-grpo` (token sum / (sequences * max_new_tokens)) is the
    default; every normaliser counts the whole optimizer step, so micro-batches just add up
  - advantages are computed elsewhere (nanoatr/advantages.py: Dr. GRPO mean-only by default)
  - log-probs and entropy come from the hidden states chunk by chunk (`token_logprobs`); a (B, T, V)
    tensor is never built, in forward or backward
"""
import types
import warnings
from typing import Optional

import torch
from torch import Tensor

from nanoatr import divergence
from nanoatr.methods import (DEFAULTS, METHODS, NEEDS_FULL_KL, RANDOM, SEQUENCE_LEVEL, Tokens,  # noqa: F401
                             check_hparams)

AGGREGATIONS = ("dr-grpo", "token-mean", "seq-mean-token-mean")
MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: far outside every clip region, still finite in float32


# ----------------------------------------------------------------------------
# Per-token loss and metrics

def token_loss(method: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
               full_kl: Optional[Tensor] = None, generator: Optional[torch.Generator] = None,
               **hparams) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token loss (B, T) of `method` (to be minimised) and its metrics (dict of 0-dim tensors).

    logp (B, T) carries the gradient; old_logp (B, T) is pi_old's; advantages (B,) per sequence or
    (B, T); mask (B, T) bool or float, 1 = real completion token.  hparams: the method's flags with
    underscores (methods.DEFAULTS[method] lists them; missing ones take those defaults).
    full_kl (B, T): KL(pi_old || pi_theta) over the vocabulary, needed by kl-full (value only) and
    truly-ppo (with gradient); build it with `full_kl(...)` below.  generator: the RNG of clip-cov's
    random token choice (default: torch's global RNG).
    Metrics: clip_frac_low / clip_frac_high (fraction of valid tokens whose gradient was cut with the
    ratio below / above the allowed region), kl3 (mean KL3(w)), ratio_min, ratio_max (+inf / -inf when
    no token is valid), and each method's own (methods.py).
    """
    hp, full_kl, noise = _prepare(method, logp, old_logp, advantages, mask, full_kl, generator, hparams)
    return _token_loss(method, logp, old_logp, advantages, mask, full_kl, noise, hp)


def _prepare(method, logp, old_logp, advantages, mask, full_kl, generator, hparams):
    """Eager checks and inputs of the (possibly compiled) loss: hparams, full_kl, clip-cov's noise."""
    hp = check_hparams(method, **hparams)
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(f"logp, old_logp and mask must all be (B, T); got {tuple(logp.shape)}, "
                         f"{tuple(old_logp.shape)}, {tuple(mask.shape)}")
    if advantages.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(f"advantages must be (B,) or (B, T) = {tuple(logp.shape)}; got {tuple(advantages.shape)}")
    if method in NEEDS_FULL_KL:
        if full_kl is None or full_kl.shape != logp.shape:
            raise ValueError(f"--clip {method} needs full_kl (B, T), the per-token KL(pi_old || pi_theta) "
                             "over the vocabulary: see nanoatr.loss.full_kl")
    else:
        full_kl = None
    noise = None
    if method in RANDOM:  # drawn on the generator's device, used on logp's
        device = generator.device if generator is not None else logp.device
        noise = torch.rand(logp.shape, generator=generator, device=device).to(logp.device)
    return hp, full_kl, noise


def _token_loss(method, logp, old_logp, advantages, mask, full_kl, noise, hp):
    """The pure tensor part of token_loss (compiled by policy_loss)."""
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


# ----------------------------------------------------------------------------
# The fused loss: surrogate + aggregation, compiled once per method

def _fused_loss(method, agg, logp, old_logp, advantages, mask, full_kl, noise, counts, hp):
    """token_loss + aggregate on tensors only; counts = (num_sequences, num_tokens, max_new_tokens)."""
    loss, metrics = _token_loss(method, logp, old_logp, advantages, mask, full_kl, noise, hp)
    return aggregate(loss, mask, agg, num_sequences=counts[0], num_tokens=counts[1],
                     max_new_tokens=counts[2]), metrics


_COMPILED: dict = {}  # method -> (function, is_compiled); built on first use, eager after a failure


def _compiled(method: str):
    """The compiled fusion of `method`, built on first use.

    Dynamo keeps its compiled graphs on the function's code object, at most 8 per code object
    (torch._dynamo.config.recompile_limit) before it silently runs eagerly; one shared _fused_loss
    would hit that after 8 methods.  So each method compiles its own copy of the code.
    dynamic=True: one graph for every B and T; the per-step counts arrive as tensors, not constants.
    """
    if method not in _COMPILED:
        code = _fused_loss.__code__.replace(co_name=f"fused_loss_{method.replace('-', '_')}")
        _COMPILED[method] = (torch.compile(types.FunctionType(code, globals()), dynamic=True), True)
    return _COMPILED[method]


def policy_loss(method: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                agg: str = "dr-grpo", num_sequences: int, num_tokens: int, max_new_tokens: int,
                compile: bool = True, full_kl: Optional[Tensor] = None,
                generator: Optional[torch.Generator] = None, **hparams) -> tuple[Tensor, dict[str, Tensor]]:
    """Scalar loss of one micro-batch (token_loss, then aggregate) and the metrics of token_loss.

    num_sequences / num_tokens: sequences and valid tokens of the whole optimizer step;
    max_new_tokens: the completion budget (Dr. GRPO's constant).  gspo and gspo-token always use
    seq-mean-token-mean (their per-token copies of a sequence loss must be averaged per sequence).
    compile=True runs a torch.compile'd fusion of the two (one per method, built on first use); if
    compiling fails it warns once and stays eager for that method.  clip-cov's random keys are drawn
    here, eagerly, from `generator`, so the compiled function is pure.
    """
    hp, full_kl, noise = _prepare(method, logp, old_logp, advantages, mask, full_kl, generator, hparams)
    agg = "seq-mean-token-mean" if method in SEQUENCE_LEVEL else agg
    if agg not in AGGREGATIONS:
        raise ValueError(f"--aggregation must be one of {', '.join(AGGREGATIONS)} (got {agg!r})")
    for name, value in [("num_sequences", num_sequences), ("num_tokens", num_tokens), ("max_new_tokens", max_new_tokens)]:
        if not value > 0:
            raise ValueError(f"{name} must be > 0 (got {value})")
    dtype = torch.promote_types(logp.dtype, torch.float32)  # exact counts up to 2^24; the loss keeps logp's dtype
    counts = torch.tensor([num_sequences, num_tokens, max_new_tokens], dtype=dtype, device=logp.device)
    args = (method, agg, logp, old_logp, advantages, mask, full_kl, noise, counts, hp)
    if not compile:
        return _fused_loss(*args)
    fn, is_compiled = _compiled(method)
    if not is_compiled:
        return fn(*args)
    try:
        return fn(*args)
    except Exception as err:  # a missing C compiler, an unsupported op...: the eager loss is the same maths
        warnings.warn(f"torch.compile of the {method} loss failed ({type(err).__name__}: {str(err)[:200]}); "
                      "using the eager loss from now on (pass --no-compile to skip compiling)")
        _COMPILED[method] = (_fused_loss, False)
        return _fused_loss(*args)


# ----------------------------------------------------------------------------
# Log-probs, entropy and full-vocabulary KL from hidden states, chunk by chunk

def _log_softmax(hidden: Tensor, weight: Tensor, temperature: float, dtype) -> Tensor:
    """log softmax(hidden @ weight.T / temperature) in `dtype`: (c, D) -> (c, V); one (c, V) temporary."""
    return (hidden @ weight.T).to(dtype).div_(temperature).log_softmax(-1)


class _ChunkedLogprobs(torch.autograd.Function):
    """log softmax(h W^T / tau)[y] and the entropy of softmax(h W^T / tau), chunk by chunk.

    Autograd over a plain loop would keep every chunk's (chunk, V) logits for backward, i.e. the
    whole (N, V) again, and torch.utils.checkpoint would still hold ~5 (chunk, V) tensors while a
    chunk is recomputed.  So backward recomputes each chunk's log-softmax and applies the
    gradients by hand, in place:
        d logp_y / d z = onehot(y) - p,     d H / d z = -p (log p + H)       (z = h W^T / tau)
    Peak extra memory: about two (chunk, V) tensors, plus a (V, D) gradient buffer when W is trained.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk_size, with_entropy):
        dtype = torch.promote_types(hidden.dtype, torch.float32)  # bf16 -> float32; float64 stays
        logp = torch.empty(hidden.shape[0], dtype=dtype, device=hidden.device)
        entropy = torch.empty_like(logp) if with_entropy else None
        for i in range(0, hidden.shape[0], chunk_size):
            logp_all = _log_softmax(hidden[i:i + chunk_size], weight, temperature, dtype)  # (c, V)
            logp[i:i + chunk_size] = logp_all.gather(-1, targets[i:i + chunk_size, None]).squeeze(-1)
            if with_entropy:
                entropy[i:i + chunk_size] = -logp_all.exp().mul_(logp_all).sum(-1)
            del logp_all  # free it before the next chunk's logits exist
        ctx.save_for_backward(hidden, weight, targets, entropy)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, targets, entropy = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[:2]
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=dtype) if need_w else None
        c, tau = ctx.chunk_size, ctx.temperature
        for i in range(0, hidden.shape[0], c):
            h, y = hidden[i:i + c], targets[i:i + c, None]
            logp_all = _log_softmax(h, weight, tau, dtype)  # (c, V), recomputed
            p = logp_all.exp()
            g = grad_logp[i:i + c, None] if grad_logp is not None else torch.zeros_like(p[:, :1])
            if grad_entropy is not None:  # dz = -p (gH (log p + H) + g), reusing logp_all's memory
                dz = logp_all.add_(entropy[i:i + c, None]).mul_(grad_entropy[i:i + c, None]).add_(g).mul_(p).neg_()
            else:
                dz = p.mul_(-g)
            dz.scatter_add_(1, y, g).div_(tau)  # + onehot(y) g;  z = h W^T / tau
            if need_h:
                grad_h[i:i + c] = dz.to(weight.dtype) @ weight
            if need_w:
                grad_w.addmm_(dz.T, h.to(dtype))
            del logp_all, p, dz  # free them before the next chunk's logits exist
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None, None


def token_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor, *, temperature: float = 1.0,
                   chunk_size: int = 512, with_entropy: bool = False) -> tuple[Tensor, Optional[Tensor]]:
    """log pi(targets) (B, T) and optionally the entropy (B, T) of pi = softmax(hidden @ weight.T / temperature).

    hidden (B, T, D) final-norm hidden states, weight (V, D) the lm_head, targets (B, T) token ids
    (valid ids everywhere; padding positions may hold any id).  Logits are float32, `chunk_size`
    tokens at a time, in forward and (recomputed) in backward, so memory is O(chunk_size * V), not
    O(B * T * V).  Gradients flow to hidden and weight.  Outputs are float32 (float64 for float64 inputs).
    """
    B, T, D = hidden.shape
    logp, entropy = _ChunkedLogprobs.apply(hidden.reshape(B * T, D), weight, targets.reshape(B * T).long(),
                                           float(temperature), int(chunk_size), bool(with_entropy))
    return logp.view(B, T), None if entropy is None else entropy.view(B, T)


def token_logprobs_naive(hidden: Tensor, weight: Tensor, targets: Tensor, *, temperature: float = 1.0,
                         with_entropy: bool = False) -> tuple[Tensor, Optional[Tensor]]:
    """The obviously-correct twin of token_logprobs: full (B, T, V) log-softmax. For tests and benchmarks."""
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    logp_all = ((hidden @ weight.T).to(dtype) / temperature).log_softmax(-1)  # (B, T, V), the whole of it
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None


class _ChunkedFullKL(torch.autograd.Function):
    """KL(pi_old || pi_theta) per position from new and old hidden states, chunk by chunk.

    d KL / d z_new = p_new - p_old (z_new = h W^T / tau); the old side carries no gradient.
    """

    @staticmethod
    def forward(ctx, hidden, old_hidden, weight, old_weight, temperature, chunk_size):
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        kl = torch.empty(hidden.shape[0], dtype=dtype, device=hidden.device)
        for i in range(0, hidden.shape[0], chunk_size):
            new = _log_softmax(hidden[i:i + chunk_size], weight, temperature, dtype)  # (c, V)
            old = _log_softmax(old_hidden[i:i + chunk_size], old_weight, temperature, dtype)
            log_ratio = old - new  # log p_old / p_new
            kl[i:i + chunk_size] = log_ratio.mul_(old.exp_()).sum(-1)
            del new, old, log_ratio  # free them before the next chunk's logits exist
        ctx.save_for_backward(hidden, old_hidden, weight, old_weight)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        return kl

    @staticmethod
    def backward(ctx, grad_kl):
        hidden, old_hidden, weight, old_weight = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=dtype) if need_w else None
        c, tau = ctx.chunk_size, ctx.temperature
        for i in range(0, hidden.shape[0], c):
            h = hidden[i:i + c]
            p_old = _log_softmax(old_hidden[i:i + c], old_weight, tau, dtype).exp_()  # (c, V)
            dz = _log_softmax(h, weight, tau, dtype).exp_().sub_(p_old).mul_(grad_kl[i:i + c, None]).div_(tau)
            if need_h:
                grad_h[i:i + c] = dz.to(weight.dtype) @ weight
            if need_w:
                grad_w.addmm_(dz.T, h.to(dtype))
            del p_old, dz  # free them before the next chunk's logits exist
        return grad_h, None, None if grad_w is None else grad_w.to(weight.dtype), None, None, None


def full_kl(hidden: Tensor, old_hidden: Tensor, weight: Tensor, *, old_weight: Optional[Tensor] = None,
            temperature: float = 1.0, chunk_size: int = 512) -> Tensor:
    """KL(pi_old(.|s_t) || pi_theta(.|s_t)) over the whole vocabulary at each position, (B, T) float32.

    The input of --clip kl-full and truly-ppo.  Storing pi_old's (B, T, V) log-probs is out of the
    question at V = 151,936, so the caller keeps pi_old's final hidden states instead (B, T, D; what the
    no-grad old-logp forward computes anyway, ~V/D = 37x smaller for Qwen3-8B) and the old logits are
    recomputed here chunk by chunk with the lm_head weight (old_weight if the lm_head itself is
    trained, else the same frozen weight).  The gradient flows to hidden and weight, never to the old side.
    """
    B, T, D = hidden.shape
    old_weight = weight.detach() if old_weight is None else old_weight.detach()
    kl = _ChunkedFullKL.apply(hidden.reshape(B * T, D), old_hidden.detach().reshape(B * T, D), weight,
                              old_weight, float(temperature), int(chunk_size))
    return kl.view(B, T)


def full_kl_naive(hidden: Tensor, old_hidden: Tensor, weight: Tensor, *, old_weight: Optional[Tensor] = None,
                  temperature: float = 1.0) -> Tensor:
    """The obviously-correct twin of full_kl (full (B, T, V) tensors). For tests."""
    old_weight = weight.detach() if old_weight is None else old_weight.detach()
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    new = ((hidden @ weight.T).to(dtype) / temperature).log_softmax(-1)  # (B, T, V)
    old = ((old_hidden.detach() @ old_weight.T).to(dtype) / temperature).log_softmax(-1)
    return (old.exp() * (old - new)).sum(-1)
