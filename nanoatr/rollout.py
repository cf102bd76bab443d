"""Batched sampling with the KV cache: the rollout of GRPO.

Prompts of different lengths are left-padded into one batch, prefilled once, then decoded one token
per step for every row, writing keys and values in place into a preallocated cache. A row stops at
its first EOS (which is kept and trained on) or after its first stop string; later slots are padding
with mask 0. Completions come back finished: the caller only decodes and grades them.
"""
from typing import NamedTuple

import torch
import torch.nn.functional as F

SAMPLERS = ("inverse-cdf", "multinomial")  # the first is the default
BLOCK = 128  # tokens per block of the inverse-CDF sampler's first level
SAMPLER_HELP = ("how tokens are drawn (rollout.draw): inverse-cdf is the same distribution, much cheaper on CPU "
                "at large vocabularies, with other draws for a seed")
STOP_EVERY = 16  # decode steps between two checks of the `stop` callable (it decodes text: not every step)


class Rollout(NamedTuple):
    tokens: torch.Tensor    # (B, T) sampled completion tokens, pad_id after a row has stopped
    logprobs: torch.Tensor  # (B, T) log-prob of each sampled token under the sampling distribution, 0 after
    mask: torch.Tensor      # (B, T) bool, True for real completion tokens (the EOS included, after a stop string not)
    stopped: torch.Tensor   # (B,) bool, ended by an EOS or a stop string (False: ran out of max_new_tokens)


def left_pad(prompts: list[list[int]], pad_id: int = 0, device="cpu"):
    """(B, P) token ids and (B, P) bool mask of real tokens, right-aligned."""
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), P, dtype=torch.bool)
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError("empty prompt: every prompt needs at least one token")
        ids[i, P - len(p):] = torch.tensor(p)
        mask[i, P - len(p):] = True
    return ids.to(device), mask.to(device)


def sampling_logprobs(logits, temperature: float):
    """Log-probs of the distribution tokens are scored under: softmax(logits / T) in float32.

    The trainer scores completions with this same function, so rollout and training agree. Top-k and
    top-p only restrict which tokens may be drawn; the score is the untruncated tempered distribution
    (temperature 0 means greedy drawing, scored at T = 1).
    """
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1)


def filter_logits(logp, top_k: int, top_p: float):
    """Set to -inf the log-probs outside the top-k tokens and outside the top-p nucleus."""
    if top_k > 0 and top_k < logp.shape[-1]:
        kth = torch.topk(logp, top_k, dim=-1).values[..., -1:]
        logp = logp.masked_fill(logp < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logp, order = torch.sort(logp, dim=-1, descending=True)
        probs = sorted_logp.exp()
        # Drop a token when the tokens strictly more likely already cover top_p; the first always stays.
        drop = (probs.cumsum(-1) - probs) >= top_p
        logp = logp.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logp


def draw(probs, generator=None, sampler: str = SAMPLERS[0]):
    """One token id per row of probs (B, V) (unnormalised, >= 0): (B, 1). Probability 0 is never drawn.

    "multinomial" is torch.multinomial, which draws an exponential for every vocabulary entry: 45 ms
    per call at B = 64, V = 32k on one CPU core, 220 ms at Qwen3's V = 152k. "inverse-cdf" draws one
    uniform per row and finds it in the float64 cumulative sums, first of blocks of BLOCK tokens, then
    within the block: 3.5 ms and 67 ms. Both are exact for the float32 probabilities; they use the
    generator differently, so one seed gives different tokens under each.
    """
    if sampler == "multinomial":
        return torch.multinomial(probs, 1, generator=generator)
    if sampler != "inverse-cdf":
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    B, V = probs.shape
    u = torch.rand(B, 1, dtype=torch.float64, generator=generator, device=probs.device)  # in [0, 1)
    if V <= BLOCK:
        return locate(probs.cumsum(-1, dtype=torch.float64), u)[0]
    blocks = (F.pad(probs, (0, -V % BLOCK)) if V % BLOCK else probs).reshape(B, -1, BLOCK)  # zero-padded blocks
    block, u = locate(blocks.sum(-1, dtype=torch.float64).cumsum(-1), u)  # (B, 1) each
    inside = blocks.gather(1, block[..., None].expand(B, 1, BLOCK))[:, 0]  # (B, BLOCK)
    return block * BLOCK + locate(inside.cumsum(-1, dtype=torch.float64), u)[0]


def locate(cdf, u):
    """For x = u * total (u in [0, 1)): the index i (B, 1) with cdf[i-1] <= x < cdf[i], and where x
    lies between the two, in [0, 1] (for the next level). x is kept below the total, so cdf[i] > cdf[i-1]:
    the index always carries probability."""
    total = cdf[:, -1:]
    x = torch.minimum(u * total, total * (1 - 2 ** -40))
    i = torch.searchsorted(cdf, x, right=True)
    lo = torch.where(i > 0, cdf.gather(1, (i - 1).clamp(min=0)), 0.0)
    return i, (x - lo) / (cdf.gather(1, i) - lo)


def generate(model, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, top_k: int = 0, eos_token_id=None, generator=None, pad_id: int = 0,
             sampler: str = SAMPLERS[0], stop=None) -> Rollout:
    """Sample a completion for every prompt: Rollout(tokens, logprobs, mask (B, T), stopped (B,)).

    T is at most max_new_tokens; decoding stops early once every row has ended.
    eos_token_id is an int, a list of ints, or None (never stop before the budget).
    sampler: how tokens are drawn (see `draw`): "inverse-cdf" (the default; one uniform per row) or
    "multinomial" (torch.multinomial, as transformers draws: the same distribution, other draws).
    stop: optional stop strings (tokenizer.StopStrings: `holds(rows)` and `cut(tokens, mask)`). Checked
    every STOP_EVERY steps while decoding, so that the batch can end sooner, and applied at the end: a
    row's mask ends with the token that completes its first stop string. The tokens kept are a prefix
    of those drawn without `stop`, with the same log-probs.
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    device = model.lm_head.weight.device
    eos = torch.tensor([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or []), device=device)
    tokens, logprobs = decode(model, prompts, max_new_tokens, temperature, top_p, top_k, eos, generator, pad_id,
                              sampler, stop)
    # Which tokens count (up to each row's first EOS) is worked out once here, not per step. Outside
    # inference mode, so that the results are ordinary tensors autograd may save (e.g. as targets).
    is_eos = torch.isin(tokens, eos)
    mask = (is_eos.cumsum(1) - is_eos.long()) == 0  # (B, T)
    stopped = (is_eos & mask).any(-1)
    if stop is not None:
        mask, by_stop = stop.cut(tokens, mask)
        stopped |= by_stop
    return Rollout(tokens.masked_fill(~mask, pad_id), logprobs.masked_fill(~mask, 0.0), mask, stopped)


@torch.inference_mode()
def decode(model, prompts, max_new_tokens, temperature, top_p, top_k, eos, generator, pad_id, sampler, stop=None):
    """The decode loop: raw draws (B, T) and their log-probs (B, T), every row decoded to the end.

    A row that has finished keeps decoding its own (discarded) tokens, which cannot affect the other
    rows, and draws from `generator` like the others, so the draws of every row are what they
    would be without the early stop. The loop ends once every row has drawn an EOS.
    """
    device = model.lm_head.weight.device
    ids, prompt_mask = left_pad(prompts, pad_id, device)
    B, P = ids.shape
    cache = model.new_cache(B, P + max_new_tokens)
    positions = prompt_mask.long().cumsum(-1) - 1  # position of each real token within its own row
    next_pos = positions[:, -1:] + 1  # (B, 1)
    # Prefill; only the last position's logits are needed (a (B, P, V) tensor would be wasted).
    h = model.hidden(ids, attention_mask=prompt_mask, position_ids=positions.clamp(min=0), cache=cache)
    logits = model.logits(h[:, -1])  # (B, V)

    tokens = torch.empty(B, max_new_tokens, dtype=torch.long, device=device)
    logprobs = torch.empty(B, max_new_tokens, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        logp = sampling_logprobs(logits, temperature)  # (B, V)
        if temperature > 0:
            tok = draw(filter_logits(logp, top_k, top_p).exp(), generator, sampler)  # (B, 1)
        else:
            tok = logp.argmax(-1, keepdim=True)
        tokens[:, t:t + 1] = tok
        logprobs[:, t:t + 1] = logp.gather(1, tok)
        if len(eos):
            done |= torch.isin(tok[:, 0], eos)
        if stop is not None and (t + 1) % STOP_EVERY == 0:
            rows = (~done).nonzero()[:, 0].tolist()
            hit = stop.holds(tokens[rows, :t + 1].tolist()) if rows else []
            done[[r for r, h in zip(rows, hit) if h]] = True
        if (len(eos) or stop is not None) and bool(done.all()):
            return tokens[:, :t + 1], logprobs[:, :t + 1]
        if t + 1 < max_new_tokens:
            # Decode: one token per row; attention_mask None = a real token (the cache knows the rest).
            logits = model.logits(model.hidden(tok, position_ids=next_pos, cache=cache)[:, 0])
            next_pos += 1
    return tokens, logprobs
