"""Supervised fine-tuning on question -> solution pairs: the paper's formatting SFT before RL (sft.py),
and the warm-start policies of the embedded tasks (data/make_default.py, data/make_countdown.py).

    examples = encode(tok, [(question, solution), ...], enable_thinking=False)   # (prompt ids, completion ids)
    trainer = Trainer(model, tok.pad_token_id, Recipe(lr=1e-3))
    loss = trainer.step(step, examples)                                           # one AdamW step

An example is [prompt | completion]. The prompt is built exactly as train.py and eval.py build it
(tokenizer.format_prompt: the chat template, --system-prompt, Qwen3's thinking switch), so the model
is trained on the very token sequence it will continue in RL; the completion is the solution's tokens
and EOS, tokenized on its own, as the sampler produces it after the prompt. Only completion tokens are
trained: the loss is the mean -log p over the step's completion tokens, every token weighing the same.

Layout: padding, one example per right-padded row (--micro-batch rows are cut to their own longest).
Measured on one CPU core (bench/sft_packing.py, batches of 64 worked solutions, the tiny models): on
arithmetic (16% of padded tokens are pads) packing into 256-token rows is 1.13x slower even without the
mask that keeps packed examples apart (1.19x with it); on Countdown (34% pads) a correctly masked
packing would be 0.90x of padding. Padding it is: the saving is small where there is one, a correct
packing needs a block-diagonal attention mask that model.hidden does not take, and padding keeps the
embedded warm-starts bit for bit.

Right padding needs no attention mask (a real token never attends to a later pad). The logits are one
(B, S, V) tensor when it is small (the tiny models: fast on the CPU, and what the embedded warm-starts
were built with, bit for bit), else scoring.token_logprobs chunk by chunk: at Qwen3's vocabulary one
(8, 2048, V) float32 tensor would be 10 GB.
"""
import contextlib
import functools
import random
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nanoatr import lora
from nanoatr.data import Problem
from nanoatr.evaluate import evaluate
from nanoatr.model import Qwen3
from nanoatr.scoring import token_logprobs
from nanoatr.tokenizer import format_prompt

THINK_END = "</think>"
DIRECT_LOGITS = 2**25  # logits elements (B x S x V) up to which the loss builds them in one tensor (128 MB)


def completion_text(solution: str, prompt: str) -> str:
    """The solution as the model is to write it after `prompt`. A prompt that has closed the think block
    already (Qwen3's chat template with enable_thinking=False ends in "<think>\\n\\n</think>\\n\\n") gets only
    the written part after the solution's own think block; otherwise the solution is kept whole."""
    if prompt.rstrip().endswith(THINK_END) and THINK_END in solution:
        return solution.rsplit(THINK_END, 1)[1].lstrip()
    return solution


def encode(tok, pairs, **prompt_kw) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids ending in EOS) for each (question, solution) pair.
    prompt_kw: template, system_prompt, enable_thinking, as tokenizer.format_prompt takes them."""
    out = []
    for question, solution in pairs:
        prompt = format_prompt(tok, Problem(question, ""), **prompt_kw)
        completion = tok.encode(completion_text(solution, prompt), add_special_tokens=False) + [tok.eos_token_id]
        out.append((tok.encode(prompt, add_special_tokens=False), completion))
    return out


def pad_batch(examples, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, S) and the loss mask (B, S): 1 on completion tokens, 0 on prompt and padding."""
    S = max(len(p) + len(c) for p, c in examples)
    ids = torch.full((len(examples), S), pad_id)
    mask = torch.zeros(len(examples), S)
    for i, (p, c) in enumerate(examples):
        ids[i, :len(p) + len(c)] = torch.tensor(p + c)
        mask[i, len(p):len(p) + len(c)] = 1
    return ids, mask


def completion_loss(model, ids, mask, total):
    """Sum of -log p over the completion tokens of right-padded rows, divided by `total` (the step's
    completion tokens, so that micro-batches add up to the step's mean). The hidden state at position i
    predicts token i + 1."""
    hidden = model.hidden(ids[:, :-1])
    targets, m = ids[:, 1:], mask[:, 1:]
    if hidden.shape[0] * hidden.shape[1] * model.config.vocab_size <= DIRECT_LOGITS:
        nll = F.cross_entropy(model.lm_head(hidden).flatten(0, 1).float(), targets.flatten(), reduction="none")
        return (nll * m.flatten()).sum() / total
    logp, _ = token_logprobs(hidden, model.lm_head.weight, targets)
    return -(logp * m).sum() / total


@dataclass
class Recipe:
    """The optimisation of an SFT: AdamW, a linear warm-up to lr, then lr; the gradient norm clipped."""
    lr: float = 1e-3
    warmup: int = 100            # steps of the linear warm-up (Adam's first steps are otherwise too large)
    weight_decay: float = 0.01
    betas: tuple = (0.9, 0.95)
    grad_clip: float = 1.0       # 0 = off
    micro_batch: int = 0         # rows per forward/backward (gradient accumulation); 0 = the whole batch

    def lr_at(self, step: int) -> float:
        return self.lr * min(1.0, step / self.warmup) if self.warmup else self.lr


class Trainer:
    """AdamW on the model's trainable parameters (all of them, or the LoRA adapters), one step per batch."""

    def __init__(self, model, pad_id: int, recipe: Recipe, precision=contextlib.nullcontext):
        self.model, self.pad_id, self.recipe, self.precision = model, pad_id, recipe, precision
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=recipe.lr, weight_decay=recipe.weight_decay, betas=recipe.betas)

    def step(self, step: int, examples) -> float:
        """One optimizer step on `examples` (step counts from 1: the warm-up's position); returns the loss."""
        for group in self.opt.param_groups:
            group["lr"] = self.recipe.lr_at(step)
        ids, mask = pad_batch(examples, self.pad_id)
        total = mask[:, 1:].sum()
        self.opt.zero_grad(set_to_none=True)
        loss = 0.0
        for rows, width in micro_batches([len(p) + len(c) for p, c in examples], self.recipe.micro_batch):
            with self.precision():
                part = completion_loss(self.model, ids[rows, :width], mask[rows, :width], total)
            part.backward()
            loss += part.item()
        if self.recipe.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.recipe.grad_clip)
        self.opt.step()
        return loss


def micro_batches(lengths: list[int], size: int) -> list[tuple[slice, int]]:
    """(rows, width) of each micro-batch: `size` rows at a time (0: all), each cut to its longest row."""
    size = size or len(lengths)
    return [(slice(i, i + size), max(lengths[i:i + size])) for i in range(0, len(lengths), size)]


def batch_indices(n: int, step: int, batch_size: int, seed: int) -> list[int]:
    """The examples of step `step` (from 1) over a file of n: epoch after epoch, each in its own seeded
    shuffle, so a resumed run takes exactly the batches an uninterrupted one would."""
    start = (step - 1) * batch_size
    out = []
    for pos in range(start, start + batch_size):
        epoch, i = divmod(pos, n)
        out.append(epoch_order(n, seed, epoch)[i])
    return out


@functools.lru_cache(maxsize=2)
def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def load(model_dir, *, lora_rank: int = 0, lora_alpha: float = 0.0, targets=lora.TARGETS, dtype=torch.float32,
         device="cpu", adapter=None, base_name: str | None = None):
    """(our Qwen3, what is saved): full weights in float32, or the base in `dtype` with LoRA adapters
    (fresh, or those in `adapter` when resuming) in float32, as train.py loads a policy."""
    if not lora_rank:
        model = Qwen3.from_pretrained(adapter or model_dir, device=device)  # resuming: the checkpoint's weights
        return model, model
    model = Qwen3.from_pretrained(model_dir, dtype=dtype, device=device)
    if adapter is None:
        weights = lora.add_adapters(model, lora_rank, lora_alpha or 2.0 * lora_rank, targets, base=base_name or str(model_dir))
    else:
        weights = lora.load_adapter(model, adapter, trainable=True, model_dir=model_dir, base=base_name or str(model_dir))
    weights.to(device)
    return model, weights


# ----------------------------------------------------------------------------
# The embedded tasks' warm-starts: full SFT of a model trained from scratch on an endless stream


def warm_start(model, tok, stream, val, recipe: Recipe, *, batch_size: int, max_steps: int, check_every: int,
               max_new_tokens: int, done, reward=None) -> int:
    """SFT on `stream` ((question, solution) pairs) until done(step, validation Mean@4 at temperature 1),
    checked every check_every steps; returns the step count (SystemExit if max_steps pass first)."""
    trainer = Trainer(model, tok.pad_token_id, recipe)
    t0 = time.perf_counter()
    for step in range(1, max_steps + 1):
        loss = trainer.step(step, encode(tok, [next(stream) for _ in range(batch_size)]))
        if step % check_every == 0:
            acc = evaluate(model, tok, val, k=4, max_new_tokens=max_new_tokens, temperature=1.0, progress=False,
                           seed=step, reward=reward)[0]["mean@4"]
            print(f"step {step:5d}  loss {loss:.3f}  val mean@4 {acc:5.1f}%  {time.perf_counter() - t0:5.0f}s",
                  flush=True)
            if done(step, acc):
                return step
    raise SystemExit(f"the warm-start never stopped in {max_steps} steps (see --target)")
