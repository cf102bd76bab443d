"""Scoring a completion: its tokens' log-probs, entropies and full-vocabulary KL under a policy.

A (B, T, V) tensor is never built on the fast paths: log-softmax runs chunk by chunk in forward, and
backward recomputes each chunk and applies the gradient by hand. The tests compare each fast function
with an obviously-correct naive twin (token_logprobs_naive; full_kl's in tests/test_loss.py). Everything
is float32 (float64 stays float64), as the sampler's rollout.sampling_logprobs is, so the trainer's and
the sampler's numbers agree. Its functions at a glance: docs/library.md#scoring"""
import contextlib
from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

CHUNK = 512  # rows of logits at a time by default: O(CHUNK * V) memory, whatever B x T


# ----------------------------------------------------------------------------
# Log-probs, entropy and full-vocabulary KL from hidden states, chunk by chunk

def _log_softmax(hidden: Tensor, weight: Tensor, temperature: float, dtype) -> Tensor:
    """log softmax(hidden @ weight.T / temperature) in `dtype`: (c, D) -> (c, V); one (c, V) temporary."""
    return (hidden @ weight.T).to(dtype).div_(temperature).log_softmax(-1)


def _chunked_backward(ctx, hidden, weight, need_h: bool, need_w: bool, dz):
    """The gradients of hidden (N, D) and weight (V, D) (None where not needed) through z = h W^T / tau,
    one chunk of ctx.chunk_size rows at a time: dz(rows) is d out / d z of those rows, (c, V) in ctx.dtype."""
    grad_h = torch.empty_like(hidden) if need_h else None
    grad_w = torch.zeros_like(weight, dtype=ctx.dtype) if need_w else None
    for i in range(0, hidden.shape[0], ctx.chunk_size):
        rows = slice(i, i + ctx.chunk_size)
        d = dz(rows).div_(ctx.temperature)  # d out / d (h W^T)
        if need_h:
            grad_h[rows] = d.to(weight.dtype) @ weight
        if need_w:
            grad_w.addmm_(d.T, hidden[rows].to(ctx.dtype))
        del d  # free it before the next chunk's logits exist
    return grad_h, None if grad_w is None else grad_w.to(weight.dtype)


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
        ctx.temperature, ctx.chunk_size, ctx.dtype = temperature, chunk_size, dtype
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, targets, entropy = ctx.saved_tensors

        def dz(rows: slice) -> Tensor:  # -p (gH (log p + H) + g) + onehot(y) g, recomputed
            logp_all = _log_softmax(hidden[rows], weight, ctx.temperature, ctx.dtype)  # (c, V)
            p = logp_all.exp()
            g = grad_logp[rows, None] if grad_logp is not None else torch.zeros_like(p[:, :1])
            if grad_entropy is None:
                return p.mul_(-g).scatter_add_(1, targets[rows, None], g)
            return (logp_all.add_(entropy[rows, None]).mul_(grad_entropy[rows, None]).add_(g).mul_(p).neg_()
                    .scatter_add_(1, targets[rows, None], g))

        grad_h, grad_w = _chunked_backward(ctx, hidden, weight, *ctx.needs_input_grad[:2], dz)
        return grad_h, grad_w, None, None, None, None


def token_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor, *, temperature: float = 1.0,
                   chunk_size: int = CHUNK, with_entropy: bool = False) -> tuple[Tensor, Optional[Tensor]]:
    """log pi(targets) (B, T), and its entropy if asked, of pi = softmax(hidden @ weight.T / temperature).

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
        ctx.temperature, ctx.chunk_size, ctx.dtype = temperature, chunk_size, dtype
        return kl

    @staticmethod
    def backward(ctx, grad_kl):
        hidden, old_hidden, weight, old_weight = ctx.saved_tensors

        def dz(rows: slice) -> Tensor:  # (p_new - p_old) gKL, recomputed
            p_old = _log_softmax(old_hidden[rows], old_weight, ctx.temperature, ctx.dtype).exp_()  # (c, V)
            p_new = _log_softmax(hidden[rows], weight, ctx.temperature, ctx.dtype).exp_()
            return p_new.sub_(p_old).mul_(grad_kl[rows, None])

        need = ctx.needs_input_grad
        grad_h, grad_w = _chunked_backward(ctx, hidden, weight, need[0], need[2], dz)
        return grad_h, None, grad_w, None, None, None


def full_kl(hidden: Tensor, old_hidden: Tensor, weight: Tensor, *, old_weight: Optional[Tensor] = None,
            temperature: float = 1.0, chunk_size: int = CHUNK) -> Tensor:
    """KL(pi_old(.|s_t) || pi_theta(.|s_t)) over the whole vocabulary at each position, (B, T) float32.

    The input of --clip kl-full and truly-ppo. pi_old's (B, T, V) log-probs are never stored: the caller
    keeps pi_old's final hidden states (B, T, D) and the old logits are recomputed here chunk by chunk with
    old_weight (the lm_head's, if it is trained; docs/library.md#scoring). The gradient flows to hidden
    and weight, never to the old side."""
    B, T, D = hidden.shape
    old_weight = weight.detach() if old_weight is None else old_weight.detach()
    kl = _ChunkedFullKL.apply(hidden.reshape(B * T, D), old_hidden.detach().reshape(B * T, D), weight,
                              old_weight, float(temperature), int(chunk_size))
    return kl.view(B, T)


# ----------------------------------------------------------------------------
# A completion's score under a model

class Scores(NamedTuple):
    """A completion's tokens scored by a policy."""
    logp: Tensor                # (B, T) log pi(token) at the sampling temperature
    entropy: Optional[Tensor]   # (B, T) entropy of pi at each position (with_entropy), else None
    hidden: Optional[Tensor]    # (B, T, D) final hidden states that scored them (return_hidden, for
                                # full_kl), else None


def score(model, prompt_ids, prompt_mask, tokens, temperature: float, with_entropy: bool = False,
          return_hidden: bool = False) -> Scores:
    """Scores (log-probs, entropies, hidden states) of completion tokens under the current policy.

    One forward over [left-padded prompt | completion]; the hidden state at position i scores token
    i + 1, so the last prompt position scores the first completion token. Log-softmax over the
    vocabulary runs chunk by chunk (token_logprobs), never as a full (B, T, V) tensor.
    """
    P = prompt_ids.shape[1]
    ids = torch.cat([prompt_ids, tokens], dim=1)
    # Completion slots after a row's EOS hold padding; attending to it cannot change earlier
    # positions (causal), so every completion slot is marked real here.
    mask = torch.cat([prompt_mask, torch.ones_like(tokens, dtype=torch.bool)], dim=1)
    hidden = model.hidden(ids[:, :-1], attention_mask=mask[:, :-1])[:, P - 1:]  # (B, T, D)
    t = temperature if temperature > 0 else 1.0
    logp, entropy = token_logprobs(hidden, model.lm_head.weight, tokens, temperature=t,
                                   with_entropy=with_entropy)
    return Scores(logp, entropy, hidden if return_hidden else None)


class Scorer(nn.Module):
    """`score` as a module's forward, under the run's autocast.

    DDP all-reduces only gradients produced through its own forward, so the differentiable scoring
    pass must be one; and autocast belongs around forward passes only, not backward.
    """

    def __init__(self, model, precision):
        super().__init__()
        self.model, self.precision = model, precision

    def forward(self, prompt_ids, prompt_mask, tokens, temperature, **kw):
        with self.precision():
            return score(self.model, prompt_ids, prompt_mask, tokens, temperature, **kw)


class Reference:
    """Scores completions under pi_ref, the policy training started from (the --beta penalty).

    Under LoRA it is the same weights with the adapters switched off (`adapters_off` = peft's
    disable_adapter), so no second copy is held; under full fine-tuning the weights themselves move,
    so `model` is a frozen copy of --model (twice the weight memory; the trainer says so at start).
    """

    def __init__(self, model, adapters_off=contextlib.nullcontext, precision=contextlib.nullcontext):
        self.model, self.adapters_off, self.precision = model, adapters_off, precision

    @torch.no_grad()
    def logprobs(self, prompt_ids, prompt_mask, tokens, temperature: float):
        """log pi_ref (B, T) of the completion tokens at the sampling temperature, as the policy's."""
        with self.adapters_off(), self.precision():
            return score(self.model, prompt_ids, prompt_mask, tokens, temperature).logp


def check_sampler_agrees(logp, sampler_logp, mask, dtype: str) -> float:
    """Max |log-prob the trainer scores - log-prob the sampler drew with| over real tokens.

    Both are pi_old's log-probs of the same tokens by different code (a full forward vs the KV-cache
    decode): in float32 they agree up to rounding, and a gap over 1e-2 is a bug that fails loudly rather
    than training on wrong ratios; in bfloat16 it is only logged (docs/library.md#scoring)."""
    gap = float(((logp.detach() - sampler_logp).abs() * mask).max()) if mask.any() else 0.0
    if dtype == "float32" and gap > 1e-2:
        raise RuntimeError(f"the trainer's log-probs differ from the sampler's by up to {gap:.2e}: they "
                           "score different distributions (temperature? dropout? completions misaligned?)")
    return gap
