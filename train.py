"""GRPO with a choice of clipping rule; ATR-GRPO (--clip kl3) is the paper's method.

    python train.py --clip kl3 --delta 0.07      # the embedded default: a tiny Qwen3 learns arithmetic
    python train.py --preset paper --model Qwen3-1.7B/ --data dapo-math-17k.jsonl --eval-data aime24.jsonl ...
    torchrun --nproc_per_node 4 train.py ...     # data-parallel over 4 GPUs

One step, in the order of this file:
  1. rollout      sample G completions for each of P prompts (KV cache), finished at EOS / stop strings
                  (--dynamic-sampling: groups with one reward for all G are replaced by those of more prompts)
  2. rewards      grade each completion (the verifier)
  3. advantages   reward minus its group's mean (Dr. GRPO)
  4. pi_old       log-probs of every completion token before any update (a no-grad forward; the first
                  minibatch's come from its own update's forward)
  5. updates      for each epoch x minibatch: new log-probs, the clipped surrogate of --clip, backward
                  (gradient accumulation over micro-batches), AdamW step
  6. metrics      one line of metrics.jsonl
The flags are nanoatr/config.py's TrainConfig.
"""
import functools
import math
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F
from tqdm import tqdm

from nanoatr import checkpoint, distributed, lora
from nanoatr.checkpoint import CheckpointError, RunLog
from nanoatr.config import (ConfigError, TrainConfig, apply_preset, die, hparam_flags, parse, preset_help, resolve,
                            resumed_config)
from nanoatr.data import TASKS, DataError, load_problems
from nanoatr.distributed import Dist
from nanoatr.evaluate import fits, sample_and_grade, summarize, verdicts_by_problem
from nanoatr.loss import aggregate, group_advantages, kl_to_reference, own_metrics, policy_loss
from nanoatr.methods import needs
from nanoatr.model import ModelError, Qwen3
from nanoatr.rollout import generate, left_pad
from nanoatr.scoring import Reference, Scorer, full_kl
from nanoatr.tokenizer import (TokenizerError, completion_texts, encode_prompts, load_tokenizer, stop_strings,
                               stop_token_ids)


@dataclass
class Run:
    """What every step uses."""
    cfg: TrainConfig
    model: Qwen3                 # the policy; rollout.generate and scoring.score call it (LoRA layers inside)
    policy: torch.nn.Module      # Scorer(model): the differentiable scoring pass, DDP-wrapped across ranks
    opt: torch.optim.Optimizer
    trained: list                # the parameters the optimizer moves
    tok: Any
    stop_ids: list[int]          # EOS ids
    stop: Any                    # tokenizer.StopStrings of --stop, or None
    reward: Callable             # reward(completion text, gold answer) -> float: the --task's
    d: Dist
    precision: Callable          # autocast context factory (bf16) or nullcontext
    weights: Any                 # what a checkpoint saves: the model, or the PeftModel (its adapter)
    ref: Reference | None = None
    prompt_kw: dict | None = None
    threads: Any = None          # distributed.CpuThreads: the CPU thread count, adjusted before each step


# ----------------------------------------------------------------------------
# 1.-3. Rollout, rewards, advantages

def prompt_order(n_problems: int, step: int, per_step: int, seed: int) -> list[int]:
    """Problem indices for a step: a fresh seeded shuffle every pass over the data (resumable by step)."""
    return [shuffle(n_problems, seed, i // n_problems)[i % n_problems]
            for i in range(step * per_step, (step + 1) * per_step)]


@functools.lru_cache(maxsize=2)  # a step's prompts span at most two passes
def shuffle(n_problems: int, seed: int, epoch: int) -> list[int]:
    return random.Random(seed * 7919 + epoch).sample(range(n_problems), n_problems)


def chunk_seed(cfg, step: int, chunk: int, salt: int = 0) -> int:
    """Seed of one rollout chunk's sampling (salt 0) or of its shuffle in epoch salt - 1: a function of
    the step and the chunk's place in the whole step, never of the rank that holds it."""
    return cfg.seed * 1_000_003 + step + (chunk << 32) + (salt << 48)


class Batch(NamedTuple):
    """A rank's rollout: N = its prompts x G rows, grouped by prompt ([p0 x G, p1 x G, ...])."""
    prompt_ids: torch.Tensor   # (N, P) left-padded
    prompt_mask: torch.Tensor  # (N, P)
    tokens: torch.Tensor       # (N, T) completions
    mask: torch.Tensor         # (N, T) real completion tokens (EOS included, after a stop string excluded)
    rewards: torch.Tensor      # (N,)
    advantages: torch.Tensor   # (N,)
    stopped: torch.Tensor      # (N,) ended by EOS or a stop string, not by the budget
    sampler_logp: torch.Tensor | None  # (N, T) log-probs the sampler drew each token with (checked, not
                                       # trained on); None for a batch that was not sampled (benchmarks)
    rounds: int = 1                    # sampling rounds it took (--dynamic-sampling)
    first_rewards: torch.Tensor | None = None  # (N,) the first round's rewards, before any group was replaced


def rollout(run: Run, problems, step) -> Batch:
    """This rank's share of the step's prompts, G finished completions each, graded, with advantages.

    --dynamic-sampling K (DAPO's dynamic sampling): a group whose G rewards are all equal has no advantage
    and gives no gradient, so it is replaced, in order, by the mixed groups of up to K further rounds of
    prompts, each a fresh draw of twice as many prompts as groups are still to replace (at most the rank's
    share: DAPO draws whole batches, which costs a GPU little and a CPU a lot); groups still unreplaced
    after K rounds stay.
    """
    G, share = run.cfg.group_size, run.cfg.prompts_per_step // run.d.world
    rounds = [sample_round(run, problems, step, 0, share)]
    picks = [(0, g) for g in range(share)]  # (round, group) trained in each slot
    slots = uniform_groups(rounds[0].rewards, G)
    while slots and len(rounds) <= run.cfg.dynamic_sampling:
        rounds.append(sample_round(run, problems, step, len(rounds), min(share, 2 * len(slots))))
        n = len(rounds[-1].rewards) // G
        for g in [g for g in range(n) if g not in uniform_groups(rounds[-1].rewards, G)][:len(slots)]:
            picks[slots.pop(0)] = (len(rounds) - 1, g)
    T = max(r.tokens.shape[1] for r in rounds)

    def pick(field, value=0):  # the picked groups' rows of a Round field, completions padded to T
        rows = [getattr(rounds[r], field)[g * G:(g + 1) * G] for r, g in picks]
        return torch.cat([F.pad(x, (0, T - x.shape[1]), value=value) if x.dim() == 2 else x for x in rows])
    pad = run.tok.pad_token_id or 0
    rewards = pick("rewards")
    advantages = group_advantages(rewards, G, normalize_std=run.cfg.std_normalize).to(run.d.device)
    prompt_ids, prompt_mask = left_pad([p for r, g in picks for p in rounds[r].prompts[g * G:(g + 1) * G]], pad,
                                       run.d.device)
    return Batch(prompt_ids, prompt_mask, pick("tokens", pad), pick("mask"), rewards, advantages, pick("stopped"),
                 pick("sampler_logp"), rounds=len(rounds), first_rewards=rounds[0].rewards)


class Round(NamedTuple):
    """One round of a rank's sampling: its share of prompts x G rows, graded."""
    prompts: list              # token ids of each row's prompt
    tokens: torch.Tensor       # (N, T)
    mask: torch.Tensor         # (N, T)
    sampler_logp: torch.Tensor  # (N, T)
    stopped: torch.Tensor      # (N,)
    rewards: torch.Tensor      # (N,)


def sample_round(run: Run, problems, step, r: int, n: int) -> Round:
    """Sampling round r of a step: the first n of this rank's share of the prompts (round r > 0: of another
    seeded draw), G completions each, in chunks of --rollout-batch prompts seeded by their place in the
    step, graded."""
    cfg, d, tok = run.cfg, run.d, run.tok
    G, share = cfg.group_size, cfg.prompts_per_step // d.world
    C = cfg.rollout_batch or share
    order = prompt_order(len(problems), step, cfg.prompts_per_step, cfg.seed + (r << 20))  # round r: its own draw
    order = order[d.rank * share:d.rank * share + n]
    batch = [problems[i] for i in order]
    prompts = [p for p in encode_prompts(tok, batch, **run.prompt_kw) for _ in range(G)]  # [p0 x G, p1 x G, ...]

    run.model.eval()
    chunks = []
    for c in range(math.ceil(n / C)):  # chunk c holds prompts [c*C, (c+1)*C) of the rank's share
        place = r * (cfg.prompts_per_step // C) + (d.rank * share) // C + c  # the chunk's place in the step
        g = torch.Generator(device=d.device).manual_seed(chunk_seed(cfg, step, place))
        with run.precision():
            chunks.append(generate(run.model, prompts[c * C * G:(c + 1) * C * G], cfg.max_new_tokens,
                                   temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, sampler=cfg.sampler,
                                   eos_token_id=run.stop_ids, generator=g, pad_id=tok.pad_token_id or 0, stop=run.stop))
    T = max(out.tokens.shape[1] for out in chunks)  # chunks stop at their own longest row

    def cat(field, value=0):
        return torch.cat([F.pad(getattr(out, field), (0, T - out.tokens.shape[1]), value=value) for out in chunks])
    tokens, mask = cat("tokens", tok.pad_token_id or 0), cat("mask")
    rewards = grade(run, completion_texts(tok, tokens, mask), [p.answer for p in batch for _ in range(G)])  # 2.
    return Round(prompts, tokens, mask, cat("logprobs"), torch.cat([out.stopped for out in chunks]), rewards)


def uniform_groups(rewards: torch.Tensor, G: int) -> list[int]:
    """Indices of the groups whose G rewards are all equal (zero advantage: no gradient)."""
    groups = rewards.view(-1, G)
    return (groups == groups[:, :1]).all(1).nonzero()[:, 0].tolist()


def grade(run: Run, texts: list[str], golds: list[str]) -> torch.Tensor:
    """2. Rewards (N,): the task's reward of each completion against its problem's answer."""
    return torch.tensor([float(run.reward(text, gold)) for text, gold in zip(texts, golds)])


# ----------------------------------------------------------------------------
# 4. pi_old: what every update's ratio is taken against

class OldPolicy:
    """pi_old, frozen before the first update: log-probs (N, T) of every completion token, and for the
    methods that compare whole next-token distributions (kl-full, truly-ppo) its final hidden states
    (N, T, D) and lm_head weight, from which full_kl recomputes the distributions chunk by chunk
    ((N, T, V) log-probs would not fit at Qwen3's vocabulary)."""

    def __init__(self, run: Run, N: int, T: int):
        self.N, self.T, self.keeps_hidden = N, T, needs(run.cfg.clip, "full_kl")
        head = run.model.lm_head.weight
        self.head = head.detach().clone() if self.keeps_hidden and head.requires_grad else None  # full FT moves it
        self.logp = self.hidden = None

    def keep(self, rows, logp, hidden=None):
        """Store pi_old's log-probs (b, T') (and hidden states) of `rows`, T' <= T (a trimmed micro-batch)."""
        if self.logp is None:
            self.logp = logp.new_zeros((self.N, self.T))
            self.hidden = hidden.new_zeros((self.N, self.T, hidden.shape[-1])) if self.keeps_hidden else None
        self.logp[rows, :logp.shape[1]] = logp
        if self.keeps_hidden:
            self.hidden[rows, :hidden.shape[1]] = hidden

    def full_kl(self, rows, hidden, weight, temperature):
        """KL(pi_old || pi_theta) (b, T') at every position of `rows`, with gradient through `hidden`."""
        old = self.hidden[rows, :hidden.shape[1]]
        return full_kl(hidden, old, weight, old_weight=self.head, temperature=temperature)


@torch.no_grad()
def old_logprobs(run: Run, b: Batch, rows, micro: int) -> OldPolicy:
    """pi_old's log-probs of `rows` (all but the first minibatch's: its update's own forward, before any
    optimizer step, is pi_old's bit for bit), with the training forward (not the sampler's numbers,
    which come from other kernels and shapes), in micro-batches of the update's size."""
    old = OldPolicy(run, *b.tokens.shape)
    for i in range(0, len(rows), micro):
        sel = rows[i:i + micro]
        logp, _, *hidden = run.policy(*unpadded(b, sel)[:3], run.cfg.temperature, return_hidden=old.keeps_hidden)
        old.keep(sel, logp, *hidden)
    return old


def unpadded(b: Batch, sel):
    """Rows `sel` of a batch without the padding they all share: (prompt ids, prompt mask, tokens, mask),
    prompts cut to the longest of them (left padding) and completions to the longest (right padding).
    The micro-batch's forward is then on real positions only (the whole step's longest row sets the
    batch's width). Exact up to kernel rounding: positions come from the mask, and causal attention
    never looks at the later (padding) positions."""
    P = b.prompt_ids.shape[1]
    start = P - int(b.prompt_mask[sel].sum(-1).max())
    T = max(1, int(b.mask[sel].sum(-1).max()))
    return b.prompt_ids[sel, start:], b.prompt_mask[sel, start:], b.tokens[sel, :T], b.mask[sel, :T]


@torch.no_grad()
def reference_logprobs(run: Run, b: Batch, micro: int):
    """log pi_ref (N, T) of every completion token, for the --beta penalty; None without one."""
    if run.ref is None:
        return None
    slices = [slice(i, i + micro) for i in range(0, len(b.tokens), micro)]
    return torch.cat([run.ref.logprobs(b.prompt_ids[s], b.prompt_mask[s], b.tokens[s], run.cfg.temperature)
                      for s in slices])


# ----------------------------------------------------------------------------
# 5. Updates

def minibatch_rows(cfg, step: int, epoch: int, rank: int, share: int) -> list[torch.Tensor]:
    """This rank's row indices of each minibatch of an epoch: every minibatch takes the same number of
    rows of every rollout chunk, shuffled per chunk (seeded by the chunk, wherever it was sampled)."""
    G, C = cfg.group_size, cfg.rollout_batch or share
    per_chunk = C * G // cfg.minibatches  # rows each rollout chunk gives a minibatch
    perms = [c * C * G + torch.randperm(C * G, generator=torch.Generator().manual_seed(
        chunk_seed(cfg, step, (rank * share) // C + c, salt=1 + epoch))) for c in range(share // C)]
    return [torch.cat([p[m * per_chunk:(m + 1) * per_chunk] for p in perms]) for m in range(cfg.minibatches)]


def optimize(run: Run, b: Batch, step):
    """epochs x minibatches optimizer steps on a rollout batch; returns (stats, losses, grad norms)."""
    cfg, d = run.cfg, run.d
    N = len(b.tokens)                    # this rank's rows
    micro = cfg.micro_batch or N // cfg.minibatches
    order = [minibatch_rows(cfg, step, epoch, d.rank, cfg.prompts_per_step // d.world) for epoch in range(cfg.epochs)]
    run.model.train()
    rest = torch.ones(N, dtype=torch.bool)
    rest[order[0][0]] = False
    old = old_logprobs(run, b, rest.nonzero()[:, 0], micro)  # 4. pi_old
    ref_logp = reference_logprobs(run, b, micro)
    noise = torch.Generator().manual_seed(cfg.seed * 31 + step + (d.rank << 32))  # clip-cov's random picks
    stats, losses, grad_norms = [], [], []
    for epoch in range(cfg.epochs):
        for m, rows in enumerate(order[epoch]):
            s, loss = update(run, b, old, ref_logp, rows, micro, noise, first=epoch == m == 0)
            stats += s
            losses += loss
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(run.trained, cfg.grad_clip or math.inf)))
            run.opt.step()
    return stats, losses, grad_norms


def update(run: Run, b: Batch, old: OldPolicy, ref_logp, rows, micro: int, noise, first: bool):
    """The gradient of one minibatch (`rows`), accumulated over micro-batches, normalised over the whole
    minibatch on all ranks. first: no optimizer step yet, so this forward is pi_old's (and is kept)."""
    cfg, d = run.cfg, run.d
    run.opt.zero_grad(set_to_none=True)
    counts = dict(num_sequences=len(rows) * d.world, num_tokens=distributed.all_sum(float(b.mask[rows].sum()), d),
                  max_new_tokens=cfg.max_new_tokens)
    stats, losses = [], []
    for j in range(0, len(rows), micro):
        sel = rows[j:j + micro]
        prompt_ids, prompt_mask, tokens, mask = unpadded(b, sel)  # (b, P'), (b, T')
        T = tokens.shape[1]
        with distributed.accumulating(run.policy, sync=j + micro >= len(rows)):
            logp, entropy, *hidden = run.policy(prompt_ids, prompt_mask, tokens, cfg.temperature, with_entropy=True,
                                                return_hidden=old.keeps_hidden)
            gap = 0.0  # max |logp - sampler's logp|, measured on the first minibatch
            if first:
                old.keep(sel, logp.detach(), *(h.detach() for h in hidden))
                if b.sampler_logp is not None:
                    gap = check_sampler_agrees(logp, b.sampler_logp[sel, :T], mask, cfg.dtype)
            extra = {"full_kl": old.full_kl(sel, hidden[0], run.model.lm_head.weight, cfg.temperature)} if hidden else {}
            loss, metrics = policy_loss(cfg.clip, logp, old.logp[sel, :T], b.advantages[sel], mask,
                                        agg=cfg.aggregation, compile=cfg.compile, generator=noise, **counts, **extra,
                                        **cfg.hparams)
            if ref_logp is not None:  # --beta: the KL penalty to the reference, aggregated like the loss
                kl = kl_to_reference(logp, old.logp[sel, :T], ref_logp[sel, :T], mask)
                loss = loss + cfg.beta * aggregate(kl, mask, cfg.aggregation, **counts)
                metrics["kl_ref"] = (kl.detach() * mask).sum() / mask.sum().clamp(min=1)
            # DDP averages gradients over ranks, but the normalisers already count the whole
            # minibatch, so the rank's share of the sum is wanted: undo the 1/world.
            (loss * d.world).backward()
        losses.append(loss.item())
        stats.append({**{k: v.item() for k, v in metrics.items()}, "_tokens": float(mask.sum()),
                      "entropy": float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1)),
                      "sampler_logp_gap_max": gap})
    return stats, losses


def check_sampler_agrees(logp, sampler_logp, mask, dtype: str) -> float:
    """Max |log-prob the trainer scores - log-prob the sampler drew with| over real tokens.

    Both are pi_old's log-probs of the same tokens, computed by different code (a full forward vs the
    KV-cache decode), so in float32 they agree up to rounding (~1e-5 on the embedded default). A gap
    over 1e-2 is a bug -- a temperature applied on one side only, dropout, completions shifted by a
    token -- and fails loudly rather than training on wrong ratios. In bfloat16 the rounding alone can
    reach that on rare tokens, so the gap is only logged there.
    """
    gap = float(((logp.detach() - sampler_logp).abs() * mask).max()) if mask.any() else 0.0
    if dtype == "float32" and gap > 1e-2:
        raise RuntimeError(f"the trainer's log-probs differ from the sampler's by up to {gap:.2e}: they score "
                           "different distributions (temperature? dropout? completions misaligned?)")
    return gap


# ----------------------------------------------------------------------------
# 6. Metrics

def metrics_row(run: Run, b: Batch, step, stats, losses, grad_norms) -> dict:
    """The metrics line of a step, over every rank's rows (gathered in prompt order)."""
    cfg, d = run.cfg, run.d
    rewards, lengths, stopped = (torch.tensor(distributed.all_gather(x.tolist(), d))
                                 for x in (b.rewards, b.mask.sum(-1), b.stopped))
    groups = rewards.view(-1, cfg.group_size)
    row = {"step": step + 1, "reward_mean": rewards.mean().item(), "accuracy": (rewards > 0).float().mean().item(),
           "completion_len": lengths.float().mean().item(), "truncated": (~stopped).float().mean().item(),
           "groups_all_correct": (groups.min(1).values == 1).float().mean().item(),
           "groups_all_wrong": (groups.max(1).values == 0).float().mean().item(),
           "grad_norm": sum(grad_norms) / len(grad_norms),
           # a minibatch's loss is the sum of its micro-batches' on every rank; mean over optimizer steps
           "loss": sum(distributed.all_gather(losses, d)) / (cfg.epochs * cfg.minibatches)}
    if cfg.dynamic_sampling:  # the kept groups are chosen for mixed rewards: the first round's are the policy's
        first = torch.tensor(distributed.all_gather(b.first_rewards.tolist(), d))
        row |= {"reward_mean_first_round": first.mean().item(),
                "accuracy_first_round": (first > 0).float().mean().item(),
                "sampling_rounds": sum(distributed.all_gather([b.rounds], d)) / d.world}
    return row | merge_stats(distributed.all_gather(stats, d))


def merge_stats(stats: list[dict]) -> dict:
    """Token-weighted means over micro-batches; min/max where the name says so."""
    out, weight = {}, sum(s["_tokens"] for s in stats) or 1.0
    for k in stats[0]:
        if k == "_tokens":
            continue
        values = [s[k] for s in stats]
        out[k] = min(values) if k.endswith("_min") else max(values) if k.endswith("_max") else \
            sum(v * s["_tokens"] for v, s in zip(values, stats)) / weight
    return out


def progress(row: dict, clip: str) -> dict:
    """The progress bar's fields: accuracy, the share of tokens cut, what the method itself acts on (its
    divergence, gate or cut metric; the ratio range for plain ratio clips), completion length."""
    own = {k: f"{row[k]:.4f}" for k in own_metrics(clip)} or {"w": f"[{row['ratio_min']:.2f},{row['ratio_max']:.2f}]"}
    return {"acc": f"{row['accuracy']:.2f}", "cut": f"{row['clip_frac_low'] + row['clip_frac_high']:.3f}", **own,
            "len": f"{row['completion_len']:.0f}"}


# ----------------------------------------------------------------------------
# Evaluation

def run_eval(run: Run, eval_sets, step, log):
    """Mean@k / Pass@k on every eval file; logged under eval/<file>/... and eval/... (their average).

    Ranks share the work: each samples every world-th of sample_and_grade's fixed batches (each seeded
    by its position), so the samples are those one process would draw.
    """
    cfg, d, k = run.cfg, run.d, run.cfg.eval_k
    results = {}
    for name, problems in eval_sets.items():
        t0 = time.perf_counter()
        pairs = [(i, j) for i in range(len(problems)) for j in range(k)]
        B = cfg.eval_batch_size
        others = {p for b, start in enumerate(range(0, len(pairs), B)) if b % d.world != d.rank
                  for p in pairs[start:start + B]}
        with run.precision():
            rows = list(sample_and_grade(run.model, run.tok, problems, k, skip=others, batch_size=B,
                                         max_new_tokens=cfg.eval_max_new_tokens or cfg.max_new_tokens,
                                         temperature=cfg.eval_temperature, top_p=cfg.eval_top_p, sampler=cfg.sampler,
                                         stop_ids=run.stop_ids, seed=cfg.seed, prompt_kw=run.prompt_kw,
                                         progress=False, stops=cfg.stop, reward=run.reward))
        rows = sorted(distributed.all_gather(rows, d), key=lambda r: (r["problem_id"], r["sample"]))
        summary = summarize(verdicts_by_problem(rows), [k])
        summary.update(completion_len=sum(r["length"] for r in rows) / len(rows),
                       truncated=sum(r["truncated"] for r in rows) / len(rows), seconds=time.perf_counter() - t0)
        results.update({f"eval/{name}/{key}": v for key, v in summary.items()})
        if d.main:
            log.samples(step, name, rows[:: max(1, len(rows) // 4)][:4])
    for key in (f"mean@{k}", f"pass@{k}"):
        results[f"eval/{key}"] = sum(results[f"eval/{n}/{key}"] for n in eval_sets) / len(eval_sets)
    if d.main:
        log.write({"step": step, **results})
    return results


# ----------------------------------------------------------------------------
# The loop

def train_step(run: Run, problems, step) -> dict:
    """One rollout step and its optimizer steps; returns the metrics line (over all ranks)."""
    t0 = time.perf_counter()
    batch = rollout(run, problems, step)  # 1.-3. sample with the current policy (also pi_old), grade
    t_rollout = time.perf_counter() - t0
    t0 = time.perf_counter()
    stats, losses, grad_norms = optimize(run, batch, step)  # 4.-5. pi_old's log-probs, then the updates
    t_train = time.perf_counter() - t0
    return metrics_row(run, batch, step, stats, losses, grad_norms) | {"time_rollout": t_rollout, "time_train": t_train}


def train(run: Run, problems, eval_sets, run_dir, tok_files, start, log, stop: distributed.Stop):
    cfg, d = run.cfg, run.d
    say = print if d.main else (lambda *a, **k: None)
    key = f"eval/mean@{cfg.eval_k}"

    def save(step):
        if d.main:
            checkpoint.save(run_dir, run.weights, tok_files, {"step": step, "optimizer": run.opt.state_dict()},
                            keep=cfg.keep_checkpoints)

    before = run_eval(run, eval_sets, 0, log) if eval_sets and start == 0 and not (d.main and log.has(0)) else None
    if before:
        say(f"step 0: held-out Mean@{cfg.eval_k} {before[key]:.1f}%  Pass@{cfg.eval_k} "
            f"{before[f'eval/pass@{cfg.eval_k}']:.1f}%", flush=True)
    if cfg.compile and start < cfg.steps:
        say(f"compiling the {cfg.clip} loss with torch.compile (the first step only; --no-compile skips it)",
            flush=True)
    with tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="train", unit="step",
              disable=not d.main) as bar:
        for step in bar:
            threads = run.threads.adjust()
            row = train_step(run, problems, step) | {"threads": threads}
            if d.main:
                log.write(row)
                bar.set_postfix(progress(row, cfg.clip))
            if cfg.eval_every and eval_sets and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
                res = run_eval(run, eval_sets, step + 1, log)
                if d.main:
                    tqdm.write(f"step {step + 1}: held-out Mean@{cfg.eval_k} {res[key]:.1f}%")
            if stop.requested(d):
                save(step + 1)
                distributed.barrier(d)
                return step + 1
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                save(step + 1)
    if eval_sets and not (d.main and log.has(cfg.steps)):  # a resumed run that stopped in its final evaluation
        after = run_eval(run, eval_sets, cfg.steps, log)
        say(f"step {cfg.steps}: held-out Mean@{cfg.eval_k} {after[key]:.1f}%  Pass@{cfg.eval_k} "
            f"{after[f'eval/pass@{cfg.eval_k}']:.1f}%" + (f"  (from {before[key]:.1f}%)" if before else ""))
    if cfg.merge and d.main:
        say(f"merged: {lora.merge(cfg.model, run_dir / 'checkpoint', run_dir / 'merged')}")
    say(f"metrics: {run_dir / 'metrics.jsonl'}  checkpoint: {run_dir / 'checkpoint'}")
    return None


# ----------------------------------------------------------------------------
# Setting up a run

def make_optimizer(cfg: TrainConfig, trained: list):
    """AdamW over the trained parameters, fused (one kernel for all of them, on CPU ~8x faster than the
    per-parameter loop at 58M parameters)."""
    return torch.optim.AdamW(trained, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99), fused=True)


def load_policy(cfg: TrainConfig, ckpt: Path | None, device):
    """(our Qwen3, what its checkpoints save): full weights, or the base with LoRA adapters on it.

    Trained weights are float32 whatever --dtype (AdamW on bf16 weights loses small updates); under
    LoRA the frozen base is stored in --dtype and peft keeps the adapters in float32.
    """
    if lora.is_adapter_dir(cfg.model):
        raise ConfigError(f"--model {cfg.model} is a LoRA adapter; train on its merged model instead "
                          f"(python scripts/merge_adapter.py --adapter {cfg.model} --out DIR)")
    if ckpt is not None and lora.is_adapter_dir(ckpt) != bool(cfg.lora_rank):
        held = "an adapter" if cfg.lora_rank == 0 else "full weights"
        raise ConfigError(f"--resume: the checkpoint {ckpt} holds {held} but the run has --lora-rank {cfg.lora_rank}")
    if not cfg.lora_rank:
        model = Qwen3.from_pretrained(ckpt or cfg.model, device=device)
        weights = model
    else:
        model = Qwen3.from_pretrained(cfg.model, dtype=getattr(torch, cfg.dtype), device=device)
        if ckpt is None:
            weights = lora.add_adapters(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets,
                                        base=cfg.base_name or cfg.model)
        else:
            weights = lora.load_adapter(model, ckpt, trainable=True, model_dir=cfg.model,
                                        base=cfg.base_name or cfg.model)
        weights.to(device)
    # Non-reentrant checkpointing (model.py) gives LoRA its gradients even though the frozen
    # embedding's output does not require grad (the reentrant kind would silently give none).
    model.gradient_checkpointing = cfg.grad_checkpoint
    return model, weights


def main(argv=None):
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before training started (after, Stop handles it): nothing of the run is lost
        die("interrupted during start-up", 130)


def _main(argv=None):
    cfg, extra, given = parse(TrainConfig, argv, __doc__, hparam_flags, epilog=preset_help())
    lock = log = None
    try:
        if cfg.resume:
            cfg, extra = resumed_config(cfg, extra, given)
        else:
            cfg = apply_preset(cfg, given)
        d = distributed.setup(cfg.device)
        cfg = resolve(cfg, extra, d.world, given)
        # The run folder first, before minutes of loading: a used name, a second process on the same
        # run, a read-only or full disk are one line now. Only rank 0 writes (and holds the lock).
        run_dir = Path(cfg.resume) if cfg.resume else Path(cfg.out_dir) / distributed.broadcast(
            cfg.name or checkpoint.unique_name(cfg.clip), d)
        if d.main:
            lock = checkpoint.resume_run(run_dir) if cfg.resume else checkpoint.create_run(cfg.out_dir, run_dir.name)
        distributed.barrier(d)  # rank 0 has repaired the folder before anyone reads it
        ckpt = checkpoint.latest(run_dir) if cfg.resume else None
        state = checkpoint.load_state(ckpt) if ckpt else {"step": 0}  # step and optimizer (read once: it is big)
        start = state["step"]
        if start > cfg.steps:
            raise ConfigError(f"--steps {cfg.steps} is before the checkpoint's step {start} in {run_dir}: "
                              f"give --steps {start} or more")
        log = RunLog.open(run_dir, resume_step=start if cfg.resume else None) if d.main else None
        if start == cfg.steps and d.main and (not cfg.eval_data or log.has(cfg.steps)):
            print(f"run {run_dir} is finished (step {start} of {cfg.steps}, evaluated): nothing to do; "
                  f"--resume {run_dir} --steps N with N > {start} trains further")
            return
        torch.manual_seed(cfg.seed)  # LoRA's initial A matrices
        model, weights = load_policy(cfg, ckpt, d.device)
        tok_dir = ckpt or cfg.model
        tok, tok_files = load_tokenizer(tok_dir), checkpoint.read_tokenizer_files(tok_dir)
        problems = load_problems(cfg.data)
        eval_sets = {Path(f).stem: load_problems(f, limit=cfg.eval_limit or None) for f in cfg.eval_data}
        check_lengths(cfg, model, tok, problems, eval_sets)
        ref = None
        precision = distributed.precision(cfg.dtype, d.device)
        if cfg.beta > 0:  # the starting policy: adapters off, or (full fine-tuning) a frozen copy
            ref = Reference(model, weights.disable_adapter, precision) if cfg.lora_rank else \
                Reference(Qwen3.from_pretrained(cfg.model, device=d.device).eval().requires_grad_(False),
                          precision=precision)
        trained = [p for p in model.parameters() if p.requires_grad]
        opt = make_optimizer(cfg, trained)
        if ckpt is not None:
            opt.load_state_dict(state.pop("optimizer"))
        if d.main:
            checkpoint.write_json_atomic(run_dir / "config.json", asdict(cfg))
    except (ConfigError, ModelError, TokenizerError, DataError, lora.AdapterError, CheckpointError,
            distributed.DeviceError) as e:
        if log is not None:
            log.close()
        if lock is not None and not cfg.resume:
            checkpoint.discard_run(lock)  # nothing was written: no empty run folder is left behind
        die(str(e))
    run = Run(cfg, model, distributed.wrap(Scorer(model, precision), d), opt, trained, tok,
              stop_token_ids(tok, tok_dir, cfg.model), stop_strings(tok, cfg.stop), TASKS[cfg.task].reward, d,
              precision, weights, ref,
              dict(template=cfg.prompt_template, system_prompt=cfg.system_prompt, enable_thinking=cfg.thinking),
              distributed.CpuThreads(cfg.threads, d.device))
    if d.main:
        if cfg.minibatches * cfg.epochs == 1:
            print("warning: each rollout batch feeds one optimizer step, so the ratio is exactly 1 and "
                  f"--clip {cfg.clip} has no effect; use --minibatches or --epochs > 1", file=sys.stderr)
        print(f"run {run_dir}: {model.num_parameters() / 1e6:.2f}M parameters ({sum(p.numel() for p in trained) / 1e6:.2f}M"
              f" trained{f', LoRA r={cfg.lora_rank}' if cfg.lora_rank else ''}), {len(problems)} training problems, "
              f"{d.world} x {d.device.type}, --clip {cfg.clip} {cfg.hparams}"
              + (f", beta {cfg.beta} ({'adapters off' if cfg.lora_rank else 'a frozen copy of --model'})"
                 if ref else "") + (f", from step {start}" if start else ""), flush=True)

    try:
        with distributed.Stop() as stop:
            stopped_at = train(run, problems, eval_sets, run_dir, tok_files, start, log, stop)
        if stopped_at is not None:
            die(f"stopped by {signal.Signals(stop.signal).name} after step {stopped_at}; checkpoint saved "
                f"(continue with --resume {run_dir})", 128 + stop.signal)
    except CheckpointError as e:  # disk full or read-only while saving or logging: earlier checkpoints are intact
        die(str(e), 1)
    except KeyboardInterrupt:  # a second Ctrl-C: stop at once
        try:
            last = checkpoint.latest(run_dir)
        except CheckpointError:
            last = None
        die(f"interrupted; the last checkpoint is {last or 'not written yet'}"
            + (f" (continue with --resume {run_dir})" if last else ""), 130)
    finally:
        if log is not None:
            log.close()
        if lock is not None:
            lock.release()
        distributed.shutdown()


def check_lengths(cfg, model, tok, problems, eval_sets):
    """Every prompt plus its completion budget fits the model's positions (evaluate.fits); else ConfigError."""
    kw = dict(template=cfg.prompt_template, system_prompt=cfg.system_prompt, enable_thinking=cfg.thinking)
    positions = model.config.max_position_embeddings
    checks = [(cfg.data, problems, cfg.max_new_tokens, "--max-new-tokens")] + \
        [(f, eval_sets[Path(f).stem], cfg.eval_max_new_tokens or cfg.max_new_tokens, "--eval-max-new-tokens")
         for f in cfg.eval_data]
    for name, probs, budget, flag in checks:
        problem = fits(tok, probs, budget, positions, name, flag, kw)
        if problem:
            raise ConfigError(problem)


if __name__ == "__main__":
    main()
