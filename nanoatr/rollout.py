"""Batched sampling with the KV cache: the rollout of GRPO.

Prompts of different lengths are left-padded into one batch, prefilled once, then decoded one token
per step for every row, writing keys and values in place into a preallocated cache. A row stops at
its first EOS (kept and trained on) or after its first stop string. A DecodePlan says how the steps
run: EAGER here, the fast plans machinery/decoding.py's; every plan gives the same tokens
(docs/library.md#rollout)."""
import contextlib
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from nanoatr import lora
from nanoatr.model import DecodeSlot, KVCache

SAMPLERS = ("inverse-cdf", "multinomial")  # the ways `draw` draws a token; the first is the default
BLOCK = 128  # tokens per block of the inverse-CDF sampler's first level
STOP_EVERY = 16  # decode steps between two checks of the `stopper` (it decodes text: not every step)


class Rollout(NamedTuple):
    """Completions of a batch of prompts: what generate() returns, and what a GRPO step carries to the
    update once the trainer has filled in the rewards and advantages (N rows)."""
    prompt_ids: torch.Tensor    # (N, P) the prompts, left-padded
    prompt_mask: torch.Tensor   # (N, P) bool, True for real prompt tokens
    tokens: torch.Tensor        # (N, T) sampled completion tokens, pad_id after a row has finished
    sampler_logp: torch.Tensor  # (N, T) log-prob each token was drawn with (sampling distribution), 0 after
    mask: torch.Tensor          # (N, T) bool: real completion tokens (EOS included; none after a stop string)
    finished: torch.Tensor      # (N,) bool, ended by an EOS or a stop string, not by max_new_tokens
    rewards: torch.Tensor | None = None     # (N,) the reward of each completion (the weighted total)
    advantages: torch.Tensor | None = None  # (N,) its advantage within its group
    rewards_per_function: torch.Tensor | None = None  # (N, F) each reward function's, NaN if unscored

    def select(self, rows) -> "Rollout":
        """Rows `rows` (an index tensor, list or slice) of every field."""
        return Rollout(*(None if x is None else x[rows] for x in self))

    def unpadded(self, rows):
        """Rows `rows` without the padding they all share: (prompt ids, prompt mask, tokens, mask), prompts
        cut to the longest of them (left padding) and completions to the longest (right padding). A
        micro-batch's forward is then on real positions only (the step's longest row sets the batch's
        width). Exact up to kernel rounding: positions come from the mask, and causal attention never
        looks at the later (padding) positions."""
        start = self.prompt_ids.shape[1] - int(self.prompt_mask[rows].sum(-1).max())
        T = max(1, int(self.mask[rows].sum(-1).max()))
        return (self.prompt_ids[rows, start:], self.prompt_mask[rows, start:], self.tokens[rows, :T],
                self.mask[rows, :T])

    @staticmethod
    def cat(parts: "list[Rollout]", pad_id: int, width: int = 0) -> "Rollout":
        """Rollouts one below the other: prompts left-padded to the longest, completions right-padded
        to the longest (or to `width`)."""
        P, T = max(r.prompt_ids.shape[1] for r in parts), max(width, *(r.tokens.shape[1] for r in parts))

        def field(i, value):
            xs = [r[i] for r in parts]
            if xs[0] is None:
                return None
            if value is None:  # one value (or row of values) per completion
                return torch.cat(xs)
            left = i < 2  # the prompt fields
            return torch.cat([F.pad(x, ((P if left else 0) - x.shape[1] * left,
                                        0 if left else T - x.shape[1]), value=value) for x in xs])
        pads = (pad_id, False, pad_id, 0.0, False, None, None, None, None)  # what each field is padded with
        return Rollout(*(field(i, v) for i, v in enumerate(pads)))


# ----------------------------------------------------------------------------
# A batch of completions

def generate(model, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, top_k: int = 0, eos_token_id=None, generator=None, pad_id: int = 0,
             sampler: str = SAMPLERS[0], stopper=None, plan: "DecodePlan | None" = None) -> Rollout:
    """Sample a completion for every prompt: a Rollout (its prompts, tokens, sampler_logp, mask, finished).

    T is at most max_new_tokens; decoding stops early once every row has ended.
    eos_token_id is an int, a list of ints, or None (never stop before the budget).
    sampler: how tokens are drawn (see `draw`): "inverse-cdf" (the default) or "multinomial".
    stopper: optional stop strings (a tokenizer.StopStrings), checked every STOP_EVERY steps so that the
    batch can end sooner, and applied at the end: a row's mask ends with the token that completes its
    first stop string; the tokens kept are those drawn without it, with the same log-probs.
    plan: how the decode steps run (None: EAGER, each as written; a GPU's: machinery/decoding.py's
    `decode_plan`). Every plan gives the same tokens for a seed (up to float rounding of the probabilities).
    """
    plan = plan or EAGER
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    device = model.lm_head.weight.device
    eos = torch.tensor([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or []),
                       device=device)
    sampling = Sampling(float(temperature), int(top_k), float(top_p), sampler, eos)
    ids, prompt_mask = left_pad(prompts, pad_id, device)
    with lora.merged(model) if plan.merge_adapters else contextlib.nullcontext():
        tokens, logprobs = decode(model, ids, prompt_mask, max_new_tokens, sampling, generator, pad_id,
                                  stopper, plan)
    # Which tokens count (up to each row's first EOS) is worked out once here, not per step. Outside
    # inference mode, so that the results are ordinary tensors autograd may save (e.g. as targets).
    is_eos = torch.isin(tokens, eos)
    mask = (is_eos.cumsum(1) - is_eos.long()) == 0  # (B, T)
    finished = (is_eos & mask).any(-1)
    if stopper is not None:
        mask, by_stop = stopper.cut(tokens, mask)
        finished |= by_stop
    return Rollout(ids, prompt_mask, tokens.masked_fill(~mask, pad_id), logprobs.masked_fill(~mask, 0.0),
                   mask, finished)


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


# ----------------------------------------------------------------------------
# The decode loop

class Sampling(NamedTuple):
    temperature: float
    top_k: int
    top_p: float
    sampler: str
    eos: torch.Tensor  # (E,) the token ids that end a row


@dataclass
class DecodeState:
    """What one decode step reads and advances in place: fixed-shape tensors over the B rows still in the
    batch."""
    cache: KVCache
    tok: torch.Tensor    # (B, 1) the token each row drew last, fed next
    logp: torch.Tensor   # (B, 1) its log-prob under the sampling distribution
    pos: torch.Tensor    # (B, 1) its position in its own row
    slot: torch.Tensor   # (1,) its cache slot, the same for every row (prompts are left-padded)
    u: torch.Tensor      # (B, 1) float64 uniforms of the next inverse-CDF draw
    done: torch.Tensor   # (B,) bool: drew an EOS or completed a stop string
    rows: torch.Tensor   # (B,) each row's index among the prompts given (rows leave the batch on a GPU)

    def keep_rows(self, sel):
        self.cache.keep_rows(sel)
        for name in ("tok", "logp", "pos", "u", "done", "rows"):
            setattr(self, name, getattr(self, name).index_select(0, sel))


@torch.inference_mode()
def decode(model, ids, prompt_mask, max_new_tokens, sampling: Sampling, generator, pad_id, stopper,
           plan: "DecodePlan"):
    """The decode loop from left-padded prompts (B, P): raw draws (B, T) and their log-probs (B, T), up to
    the step where every row has ended.

    A finished row keeps decoding its own (discarded) tokens until it leaves the batch (plan.compact),
    which cannot affect the other rows; the uniforms are drawn for every row at every step, so the
    draws of each row are what they would be without the early stop or the compaction."""
    device = model.lm_head.weight.device
    B, P = ids.shape
    uniforms = sampling.sampler == "inverse-cdf" and sampling.temperature > 0
    s = prefill(model, ids, prompt_mask, max_new_tokens, sampling, generator, plan, uniforms)
    steps = plan.runner(decode_step, model, sampling, generator, plan)

    # step-major: a row per step
    tokens = torch.full((max_new_tokens, B), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros(max_new_tokens, B, device=device)
    stop_at = torch.full((B,), max_new_tokens, device=device)  # the step at which a stop string ended a row
    ends = len(sampling.eos) > 0 or stopper is not None
    all_u = s.u if plan.compact else None  # every row's uniform, of which the live rows take theirs
    t = 0
    while True:
        tokens[t].index_copy_(0, s.rows, s.tok[:, 0])
        logprobs[t].index_copy_(0, s.rows, s.logp[:, 0])
        looked = stopper is not None and (t + 1) % STOP_EVERY == 0
        if looked:
            live = (~s.done).nonzero()[:, 0]
            hit = torch.tensor(stopper.holds(tokens[:t + 1, s.rows[live]].T.tolist()), dtype=torch.bool,
                               device=device)
            s.done[live[hit]] = True
            stop_at[s.rows[live[hit]]] = t
        if ends and (looked or (t + 1) % plan.check_every == 0):
            live = int((~s.done).sum())
            if live == 0:
                break
            if plan.compact and bucket(live) < len(s.rows):
                s.keep_rows(torch.cat([(~s.done).nonzero()[:, 0], s.done.nonzero()[:bucket(live) - live, 0]]))
                steps.forget()  # their graphs read the tensors just replaced
        t += 1
        if t == max_new_tokens:
            break
        if uniforms and all_u is not None and len(s.rows) < B:
            torch.rand(B, 1, dtype=torch.float64, generator=generator, device=device, out=all_u)
            torch.index_select(all_u, 0, s.rows, out=s.u)
        elif uniforms:
            torch.rand(B, 1, dtype=torch.float64, generator=generator, device=device, out=s.u)
        steps(s, window_for(P + t, plan))
    # Keep the steps up to the last row's end (its first EOS, or the step its stop string was found at):
    # what a look at every step would have kept.
    tokens, logprobs = tokens[:t + 1].T, logprobs[:t + 1].T
    if ends:
        is_eos = torch.isin(tokens, sampling.eos)
        first_eos = torch.where(is_eos.any(1), is_eos.int().argmax(1), max_new_tokens)
        t = min(t, int(torch.minimum(first_eos, stop_at).max()))
    return tokens[:, :t + 1].contiguous(), logprobs[:, :t + 1].contiguous()


def prefill(model, ids, prompt_mask, max_new_tokens: int, sampling: Sampling, generator, plan: "DecodePlan",
            uniforms: bool) -> DecodeState:
    """The left-padded prompts (B, P) through the model into a new cache, and each row's first token drawn:
    the state the decode steps start from."""
    device = model.lm_head.weight.device
    B, P = ids.shape
    cache = model.new_cache(B, cache_slots(P + max_new_tokens, plan), windows=plan.window > 1)
    positions = prompt_mask.long().cumsum(-1) - 1  # position of each real token within its own row
    # Only the last position's logits are needed (a (B, P, V) tensor would be wasted).
    h = model.hidden(ids, attention_mask=prompt_mask, position_ids=positions.clamp(min=0), cache=cache)
    s = DecodeState(cache, tok=None, logp=None, pos=positions[:, -1:] + 1,
                    slot=torch.full((1,), P, device=device),
                    u=torch.zeros(B, 1, dtype=torch.float64, device=device),
                    done=torch.zeros(B, dtype=torch.bool, device=device), rows=torch.arange(B, device=device))
    if uniforms:
        torch.rand(B, 1, dtype=torch.float64, generator=generator, device=device, out=s.u)
    s.tok, s.logp = next_token(model.logits(h[:, -1]), s.u, sampling, generator)
    s.done |= torch.isin(s.tok[:, 0], sampling.eos)
    return s


def decode_step(model, s: DecodeState, window: int, sampling: Sampling, generator=None):
    """One token for every row, in place on s: the model's step on the last token, then the draw. No
    value goes to the host and no shape depends on the slot, so it compiles once and replays as a graph."""
    h = model.decode(s.tok, s.pos, DecodeSlot(s.cache, s.slot, window))[:, 0]
    tok, logp = next_token(model.logits(h), s.u, sampling, generator)
    s.tok.copy_(tok)
    s.logp.copy_(logp)
    s.pos.add_(1)
    s.slot.add_(1)
    s.done.logical_or_(torch.isin(tok[:, 0], sampling.eos))


def next_token(logits, u, sampling: Sampling, generator=None):
    """A token per row (B, 1) and its log-prob under the sampling distribution (B, 1); inverse-CDF draws
    use the uniforms u (B, 1), multinomial ones the generator."""
    logp = sampling_logprobs(logits, sampling.temperature)
    if sampling.temperature <= 0:
        tok = logp.argmax(-1, keepdim=True)
    elif sampling.sampler == "inverse-cdf":
        tok = inverse_cdf(filter_logits(logp, sampling.top_k, sampling.top_p).exp(), u)
    else:
        tok = torch.multinomial(filter_logits(logp, sampling.top_k, sampling.top_p).exp(), 1,
                                generator=generator)
    return tok, logp.gather(1, tok)


# ----------------------------------------------------------------------------
# Drawing a token

def sampling_logprobs(logits, temperature: float):
    """Log-probs of the distribution tokens are scored under: softmax(logits / T) in float32, the same
    for rollout and training. Top-k and top-p only restrict which tokens may be drawn; the score is the
    untruncated tempered distribution (temperature 0 means greedy drawing, scored at T = 1)."""
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

    "multinomial" is torch.multinomial (an exponential per vocabulary entry); "inverse-cdf" finds one
    uniform per row in the cumulative sums (`inverse_cdf`), much cheaper on the CPU. Both are exact; one
    seed gives different tokens under each. Probabilities that are not finite are a ValueError."""
    bad = ~probs.isfinite()
    if bool(bad.any()):
        row = int(bad.any(-1).nonzero()[0])
        raise ValueError(f"the sampling probabilities are not finite (row {row} holds "
                         f"{probs[row][bad[row]][0].item()}): the model's logits overflowed or are NaN")
    if sampler == "multinomial":
        return torch.multinomial(probs, 1, generator=generator)
    if sampler != "inverse-cdf":
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    u = torch.rand(probs.shape[0], 1, dtype=torch.float64, generator=generator, device=probs.device)
    return inverse_cdf(probs, u)


def inverse_cdf(probs, u):
    """The token (B, 1) where each row's uniform u (B, 1) in [0, 1) falls in the cumulative probabilities:
    float64 sums, first of blocks of BLOCK tokens, then within the block (two short scans, not one of V)."""
    B, V = probs.shape
    if V <= BLOCK:
        return locate(probs.cumsum(-1, dtype=torch.float64), u)[0]
    blocks = (F.pad(probs, (0, -V % BLOCK)) if V % BLOCK else probs).reshape(B, -1, BLOCK)  # zero-padded
    block, u = locate(blocks.sum(-1, dtype=torch.float64).cumsum(-1), u)  # (B, 1) each
    inside = blocks.gather(1, block[..., None].expand(B, 1, BLOCK))[:, 0]  # (B, BLOCK)
    return block * BLOCK + locate(inside.cumsum(-1, dtype=torch.float64), u)[0]


def locate(cdf, u):
    """For x = u * total (u in [0, 1)): the index i (B, 1) with cdf[i-1] <= x < cdf[i], and where x
    lies between the two, in [0, 1] (for the next level). x is kept below the total, so cdf[i] > cdf[i-1]:
    the index always carries probability."""
    total = cdf[:, -1:]
    x = torch.minimum(u * total, total * (1 - 2 ** -40))
    i = torch.searchsorted(cdf, x, right=True).clamp(max=cdf.shape[1] - 1)  # NaN (overflow): no crash
    lo = torch.where(i > 0, cdf.gather(1, (i - 1).clamp(min=0)), 0.0)
    return i, (x - lo) / (cdf.gather(1, i) - lo)


# ----------------------------------------------------------------------------
# How the decode steps run

class DecodePlan(NamedTuple):
    """How the decode steps of a rollout run (EAGER here; the fast ones: machinery/decoding.py)."""
    decoding: str         # "eager" or "compiled" (torch.compile; on CUDA also replayed as CUDA graphs)
    window: int           # attention reads the cache in windows of this many slots (1: the filled ones)
    check_every: int      # decode steps between two looks at which rows have finished (each waits)
    compact: bool         # finished rows leave the batch when the live ones fit a batch half the size
    merge_adapters: bool  # LoRA adapters folded into the weights for the rollout (one product per projection)
    runner: Callable      # runner(step, model, sampling, generator, plan): what runs the steps (Eager)


class Eager:
    """EAGER's runner: each decode step as written."""

    def __init__(self, step, model, sampling, generator, plan: DecodePlan):
        self.step, self.model, self.sampling, self.generator = step, model, sampling, generator

    def __call__(self, s, window: int):
        self.step(self.model, s, window, self.sampling, self.generator)

    def forget(self):
        pass


EAGER = DecodePlan("eager", 1, 1, False, False, Eager)


def bucket(n: int) -> int:
    """The batch size that n live rows decode in once finished rows leave: the power of two >= n, and at
    least 2 (torch.compile treats a size of 1 as a constant: a batch of one would be compiled again)."""
    return max(2, 1 << (n - 1).bit_length())


def cache_slots(needed: int, plan: DecodePlan) -> int:
    """The KV cache's length for `needed` slots (prompt + new tokens). With windows (plan.window > 1): a
    whole number of windows and one slot more, so that no window is the whole cache (a slice of a whole
    dimension is contiguous, of part of it not: torch.compile would compile the step again for it)."""
    return needed if plan.window == 1 else -(-needed // plan.window) * plan.window + 1


def window_for(slots: int, plan: DecodePlan) -> int:
    """The slots a decode step's attention reads when `slots` of them are filled: the next multiple of
    plan.window (the filled ones exactly when it is 1)."""
    return -(-slots // plan.window) * plan.window
