"""GRPO in one file, for a first reading: what train.py does, without DDP, chunks, compile, dynamic
sampling, evaluations or checkpoints.

    python grpo.py                          # ATR-GRPO (--clip kl3) on the embedded arithmetic task: CPU,
                                            # about a minute
    python grpo.py --clip clip --steps 50   # any method of nanoatr/methods.py, with its default knobs

One step: sample G completions for each of P prompts (1), grade them (2), compare each reward with
its group's mean (3: the advantage), score the completions under the policy that sampled them (4: pi_old),
then one AdamW step per minibatch on the clipped surrogate of --clip (5). tests/test_grpo.py checks that
its loss and gradients are train.py's on the same batch.
"""
import argparse
import math
import re


class Flags(argparse.ArgumentParser):
    """argparse taking flags only in full and a bad one as one `error:` line (train.py's: machinery/)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(\.?\d|inf)")  # --lr -1e-4 is a value, not a flag

    def error(self, message):
        self.exit(2, f"error: {message}\n")


def parse_flags(argv=None) -> argparse.Namespace:
    """The command line, read before the imports below (torch takes seconds): --help and a bad flag answer at
    once. --clip's name is checked in main, against nanoatr/methods.py."""
    ap = Flags(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--clip", default="kl3", help="the clipping rule, a name in nanoatr/methods.py's METHODS")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step (P)")
    ap.add_argument("--group-size", type=int, default=8, help="completions per prompt (G)")
    ap.add_argument("--minibatches", type=int, default=2,
                    help="AdamW steps per rollout batch: >1 makes clipping act")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for name, low in (("steps", 0), ("prompts", 1), ("group_size", 2), ("minibatches", 1)):
        if getattr(args, name) < low:
            ap.error(f"--{name.replace('_', '-')} must be >= {low} (got {getattr(args, name)})")
    if not math.isfinite(args.lr) or args.lr <= 0:
        ap.error(f"--lr must be {'> 0' if math.isfinite(args.lr) else 'a finite number'} (got {args.lr})")
    return args


if __name__ == "__main__":
    parse_flags()

import torch

from nanoatr.data import TASKS, load_problems, located
from nanoatr.loss import group_advantages, policy_loss
from nanoatr.methods import METHODS, defaults
from nanoatr.model import Qwen3
from nanoatr.rewards import Rewards
from nanoatr.rollout import Rollout, generate
from nanoatr.scoring import score
from nanoatr.tokenizer import completion_ids, completion_texts, encode_prompts, load_tokenizer, eos_token_ids


def rollout(model, tok, problems, G: int, max_new_tokens: int, rewards: Rewards, generator) -> Rollout:
    """1.-3. G completions of each problem, their rewards, and their advantages within the group."""
    prompts = [p for p in encode_prompts(tok, problems) for _ in range(G)]  # [p0 x G, p1 x G, ...]
    model.eval()
    batch = generate(model, prompts, max_new_tokens, eos_token_id=eos_token_ids(tok), generator=generator,
                     pad_id=tok.pad_token_id or 0)  # 1. sample, with the KV cache
    texts = completion_texts(tok, batch.tokens, batch.mask)
    graded = [p for p in problems for _ in range(G)]  # each completion's problem, in the order of the prompts
    each = rewards.per_function(graded, texts, completion_ids(batch.tokens, batch.mask))  # 2. grade: (N, F)
    total = rewards.total(each)  # the weighted sum over the reward functions
    return batch._replace(rewards=total, advantages=group_advantages(total, G))  # 3. reward - group mean


@torch.no_grad()
def old_logprobs(model, batch: Rollout) -> torch.Tensor:
    """4. pi_old: each completion token's log-prob under the policy before any update of this step."""
    return score(model, batch.prompt_ids, batch.prompt_mask, batch.tokens, temperature=1.0).logp


def update(model, opt, batch: Rollout, old_logp, rows, clip: str, hparams: dict, max_new_tokens: int):
    """5. One AdamW step on the minibatch `rows`: the clipped surrogate of --clip, Dr. GRPO's aggregation."""
    model.train()
    logp = score(model, batch.prompt_ids[rows], batch.prompt_mask[rows], batch.tokens[rows],
                 temperature=1.0).logp
    mask = batch.mask[rows]
    # w = exp(logp - old_logp), then the method's rule
    loss, metrics = policy_loss(clip, logp, old_logp[rows], batch.advantages[rows], mask, agg="dr-grpo",
                                num_sequences=len(rows), num_tokens=float(mask.sum()),
                                max_new_tokens=max_new_tokens, compile=False, **hparams)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item(), metrics


def main(argv=None):
    args = parse_flags(argv)
    if args.clip not in METHODS:
        Flags().error(f"argument --clip: invalid choice: {args.clip!r} (choose from "
                      f"{', '.join(sorted(METHODS))})")
    task = TASKS["math"]
    model_dir = located(task.model)  # the repository's own files, from whatever folder it is started in
    model, tok = Qwen3.from_pretrained(model_dir), load_tokenizer(model_dir)
    problems = load_problems(located(task.data))
    held_out = load_problems(located(task.eval_data[0]), limit=64)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.0)
    hparams = defaults(args.clip)       # the method's default knobs (delta = 0.07 for kl3)
    rewards = Rewards.of(task.reward)   # the verifier (nanoatr/rewards.py)
    g = torch.Generator().manual_seed(args.seed)
    print(f"held-out accuracy {accuracy(model, tok, held_out, task):.1%}; --clip {args.clip} {hparams}")
    for step in range(args.steps):
        picked = [problems[i] for i in torch.randint(len(problems), (args.prompts,), generator=g).tolist()]
        batch = rollout(model, tok, picked, args.group_size, task.max_new_tokens, rewards, g)      # 1.-3.
        old_logp = old_logprobs(model, batch)                                                      # 4.
        for rows in torch.randperm(len(batch.tokens), generator=g).chunk(args.minibatches):        # 5.
            loss, metrics = update(model, opt, batch, old_logp, rows, args.clip, hparams, task.max_new_tokens)
        if (step + 1) % 10 == 0:
            cut = float(metrics["clip_frac_low"] + metrics["clip_frac_high"])
            print(f"step {step + 1}: reward {batch.rewards.mean():.2f}, tokens cut {cut:.2%}, "
                  f"loss {loss:+.4f}")
    print(f"held-out accuracy {accuracy(model, tok, held_out, task):.1%}")


@torch.no_grad()
def accuracy(model, tok, problems, task, k: int = 4) -> float:
    """The share of k samples per held-out problem that the task's reward counts as right."""
    generator = torch.Generator().manual_seed(1)
    batch = rollout(model, tok, problems, k, task.max_new_tokens, Rewards.of(task.reward), generator)
    return float((batch.rewards > 0).float().mean())


if __name__ == "__main__":
    main()
