"""GRPO with a choice of clipping rule; ATR-GRPO (--clip kl3) is the paper's method.

    python train.py --clip kl3 --delta 0.07      # the embedded default: a tiny Qwen3 learns arithmetic
    python train.py --preset paper --model Qwen3-1.7B/ --data dapo-math-17k.jsonl --eval-data aime24.jsonl ...
    torchrun --nproc_per_node 4 train.py ...     # data-parallel over 4 GPUs

This file is one GRPO step, then the loop around it. The step, in order:
  1. rollout      sample G completions for each of the step's prompts (KV cache), ended at EOS / stop strings
  2. rewards      grade each completion (the --reward functions; default the --task's, the verifier)
  3. advantages   reward (+ --overlong-buffer's penalty) minus its group's mean (Dr. GRPO)
  4. pi_old       the log-probs every ratio of the step is taken against: a no-grad forward
  5. updates      for each epoch x minibatch: new log-probs, the clipped surrogate of --clip, backward, AdamW
                  at the --lr-scheduler's rate
  6. metrics      one line of metrics.jsonl (nanoatr/machinery/step_metrics.py)
The flags (TrainConfig), the run folder, checkpoints, resuming and signals are nanoatr/machinery/'s.
A first reading without DDP, chunks, dynamic sampling or checkpoints: grpo.py (~100 lines).
"""
import nanoatr
nanoatr.quiet_ctrl_c()  # before the imports below (seconds): Ctrl-C is one line, not a traceback
from nanoatr.machinery.flags import TrainConfig, train_flags
if __name__ == "__main__":  # --help and a bad flag answer now, before torch loads; main() reads them again
    train_flags(None, __doc__)
import functools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from nanoatr import lora
from nanoatr.data import Shard, load_problems, not_held_out
from nanoatr.evaluate import check_budgets, during_training, scores_line
from nanoatr.loss import (aggregate, check_finite, dynamic_sampling, group_advantages, kl_to_reference,
                          loss_mask, overlong_penalty, policy_loss)
from nanoatr.methods import needs
from nanoatr.model import Qwen3
from nanoatr.rewards import Rewards
from nanoatr.rollout import EAGER, DecodePlan, Rollout, generate
from nanoatr.scoring import Reference, Scorer, check_sampler_agrees, full_kl
from nanoatr.tokenizer import (completion_ids, completion_texts, encode_prompts, eos_token_ids,
                               load_tokenizer, make_stopper)
# the run machinery (nanoatr/machinery/): flags, the run folder, checkpoints, DDP, the fast decode plan
from nanoatr.machinery import distributed
from nanoatr.machinery.checkpoint import read_tokenizer_files
from nanoatr.machinery.decoding import decode_plan
from nanoatr.machinery.session import Session
from nanoatr.machinery.step_metrics import metrics_line, progress


@dataclass
class Run:
    """What every step uses. The network goes by three names, one per object: `model` (our Qwen3, LoRA
    layers inside: what samples and what is trained), `peft_model` (under LoRA, peft's PeftModel around
    that same model: what a checkpoint saves and what switches the adapters off) and `scorer`
    (scoring.Scorer(model), DDP-wrapped across ranks: the differentiable scoring pass)."""
    cfg: TrainConfig
    model: Qwen3
    scorer: nn.Module
    opt: torch.optim.Optimizer
    trained: list             # the parameters the optimizer moves
    tok: Any                  # the tokenizer
    eos_ids: list[int]        # token ids that end a completion
    stopper: Any              # tokenizer.StopStrings of the --stop strings (cfg.stop), or None
    rewards: Rewards          # the reward functions and their weights (--reward, --reward-weights)
    shard: Shard              # this rank's prompts, chunks, seeds and minibatch rows of a step
    d: distributed.Dist       # rank, world size, device
    precision: Callable       # autocast context factory (bf16) or nullcontext
    peft_model: Any = None    # None without LoRA
    ref: Reference | None = None  # pi_ref, for the --beta penalty
    prompt_kw: dict | None = None
    reuse_first_forward: bool = True  # pi_old of the first minibatch from its update's forward (optimize)
    plan: DecodePlan = EAGER  # how the rollout's decode steps run on this device (machinery/decoding.py)


# ----------------------------------------------------------------------------
# One GRPO step

def grpo_step(run: Run, problems, step: int) -> dict:
    """Sample and grade G completions per prompt, then several clipped updates; returns the metrics line."""
    t0 = time.perf_counter()
    batch, draws = rollout(run, problems, step)  # 1.-3. N rows: completions, rewards, advantages
    t_rollout = time.perf_counter() - t0
    updates = optimize(run, batch, step)         # 4.-5. pi_old, then the clipped updates
    times = {"time_rollout": t_rollout, "time_train": time.perf_counter() - t0 - t_rollout}
    return {"step": step + 1} | metrics_line(run, batch, updates, draws, times)  # 6.


def optimize(run: Run, batch: Rollout, step: int) -> list[dict]:
    """4.-5. pi_old's log-probs of every row, then one optimizer step per minibatch (--minibatches x --epochs
    of them), each at its learning rate.

    The step's first update runs before any optimizer step, on pi_old's own weights, so its forward gives
    pi_old of its rows bit for bit: under run.reuse_first_forward they are kept from there (one forward
    fewer a step), else scored with the others. The same numbers either way (tests/test_train.py)."""
    cfg = run.cfg
    minibatches = run.shard.minibatches(step, cfg.epochs, cfg.minibatches)  # row indices, in order
    first_epoch = minibatches[:cfg.minibatches]  # every row once
    reuse = run.reuse_first_forward
    run.model.train()
    old = old_logprobs(run, batch, first_epoch[1:] if reuse else first_epoch)  # 4. pi_old
    ref_logp = reference_logprobs(run, batch)  # pi_ref, for --beta only
    noise = run.shard.noise(step)              # clip-cov's random picks
    updates = []
    for i, rows in enumerate(minibatches):  # 5.
        lr = learning_rate(cfg, step * len(minibatches) + i)  # the run's optimizer step k
        for group in run.opt.param_groups:
            group["lr"] = lr
        updates.append({"lr": lr} | update(run, batch, old, ref_logp, rows, noise, on_policy=i == 0,
                                           keep_old=reuse and i == 0, step=step))
    return updates


# 1.-3. Rollout, rewards, advantages

def rollout(run: Run, problems, step: int) -> tuple[Rollout, dict]:
    """This rank's share of the step's prompts, G completions each, graded, with group advantages; and
    what --dynamic-sampling drew, for the metrics ({} without it). The advantages are those of the reward
    plus --overlong-buffer's penalty (0 without it); batch.rewards, what dynamic sampling and the accuracy
    metrics judge, stay the task's (verl's DAPO filters its groups on the accuracy too)."""
    cfg, G = run.cfg, run.cfg.group_size
    rounds, picks = dynamic_sampling(lambda r, n: sample_round(run, problems, step, r, n), run.shard.share, G,
                                     cfg.dynamic_sampling)
    groups = [rounds[r].select(slice(g * G, (g + 1) * G)) for r, g in picks]
    batch = Rollout.cat(groups, run.tok.pad_token_id or 0, width=max(r.tokens.shape[1] for r in rounds))
    lengths = batch.mask.sum(-1).to(batch.rewards.device)
    shaped = batch.rewards + overlong_penalty(lengths, cfg.max_new_tokens, cfg.overlong_buffer,
                                              cfg.overlong_penalty)
    advantages = group_advantages(shaped, G, normalize_std=cfg.std_normalize).to(run.d.device)  # 3.
    logp = {} if batch.sampler_logp is None else {  # NaN: the policy's forward overflows (weights too large)
        "a log-prob of the policy's tokens": batch.sampler_logp.where(batch.mask, 0.0)}
    check_finite(f"step {step + 1}", {"a reward": shaped, "an advantage": advantages} | logp, run.d.all_sum)
    draws = {"rounds": len(rounds), "first": rounds[0],
             "tokens": sum(int(r.mask.sum()) for r in rounds)} if cfg.dynamic_sampling else {}
    return batch._replace(advantages=advantages), draws


def sample_round(run: Run, problems, step: int, r: int, n: int) -> Rollout:
    """Sampling round r of a step: this rank's first n prompts of the round's draw, G completions each,
    sampled in chunks (each seeded by its place in the step: data.Shard), graded."""
    cfg, G = run.cfg, run.cfg.group_size
    picked = [problems[i] for i in run.shard.problems(len(problems), step, r, n)]
    prompts = [p for p in encode_prompts(run.tok, picked, **run.prompt_kw) for _ in range(G)]  # [p0 x G, ...]
    run.model.eval()
    parts, pad_id = [], run.tok.pad_token_id or 0
    for span, seed in run.shard.chunks(step, r, n):  # span: the chunk's slice of the n prompts
        generator = torch.Generator(device=run.d.device).manual_seed(seed)
        with run.precision():
            parts.append(generate(run.model, prompts[span.start * G:span.stop * G], cfg.max_new_tokens,
                                  generator=generator, temperature=cfg.temperature, top_p=cfg.top_p,
                                  top_k=cfg.top_k, sampler=cfg.sampler, eos_token_id=run.eos_ids,
                                  pad_id=pad_id, stopper=run.stopper, plan=run.plan))
    return grade(run, Rollout.cat(parts, pad_id), [p for p in picked for _ in range(G)], step)  # 2.


def grade(run: Run, out: Rollout, problems: list, step: int) -> Rollout:
    """The rollout with its rewards: each function's of each row (problems[i] is row i's), and their total."""
    each = rewards_at(run, step).per_function(problems, completion_texts(run.tok, out.tokens, out.mask),
                                              completion_ids(out.tokens, out.mask))
    return out._replace(rewards=run.rewards.total(each), rewards_per_function=each)


def rewards_at(run: Run, step: int) -> Rewards:
    """The run's reward functions, told its progress after `step` GRPO steps: the optimizer steps done of
    the run's (their trainer_state, as TRL counts them)."""
    return run.rewards.at(step * run.cfg.minibatches * run.cfg.epochs, run.cfg.optimizer_steps)


# 4. pi_old: what every ratio of the step is taken against

class OldLogprobs:
    """pi_old's log-probs (N, T) of every completion token; for the methods that compare whole next-token
    distributions (kl-full, truly-ppo) also its hidden states (N, T, D) and lm_head weight, from which
    full_kl recomputes the distributions chunk by chunk ((N, T, V) log-probs would not fit). Constants:
    nothing here ever carries a gradient."""

    def __init__(self, run: Run, N: int, T: int):
        self.N, self.T, self.keeps_hidden = N, T, needs(run.cfg.clip, "full_kl")
        head = run.model.lm_head.weight
        moves = self.keeps_hidden and head.requires_grad  # full fine-tuning moves lm_head: keep pi_old's
        self.head = head.detach().clone() if moves else None
        self.logp = self.hidden = None

    def keep(self, rows, scores):
        """Store pi_old's scores of `rows` (b, T'), T' <= T (a micro-batch cut to its own longest row)."""
        logp, hidden = scores.logp.detach(), scores.hidden
        if self.logp is None:
            self.logp = logp.new_zeros((self.N, self.T))
            self.hidden = hidden.new_zeros((self.N, self.T, hidden.shape[-1])) if self.keeps_hidden else None
        self.logp[rows, :logp.shape[1]] = logp
        if self.keeps_hidden:
            self.hidden[rows, :hidden.shape[1]] = hidden.detach()

    def full_kl(self, rows, hidden, weight, temperature):
        """KL(pi_old || pi_theta) (b, T') at every position of `rows`, with gradient through `hidden`."""
        return full_kl(hidden, self.hidden[rows, :hidden.shape[1]], weight, old_weight=self.head,
                       temperature=temperature)


def micro_batches(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    """`rows` cut into consecutive micro-batches of `size` (--micro-batch; 0 = all of them at once)."""
    return list(rows.split(size or len(rows)))


@torch.no_grad()
def old_logprobs(run: Run, batch: Rollout, minibatches: list[torch.Tensor]) -> OldLogprobs:
    """pi_old's log-probs of every row of `minibatches`: a no-grad pass of the training forward (not the
    sampler's numbers, which come from other kernels) over the very micro-batches their updates score."""
    old = OldLogprobs(run, *batch.tokens.shape)
    for rows in minibatches:
        for sel in micro_batches(rows, run.cfg.micro_batch):
            prompt_ids, prompt_mask, tokens, _ = batch.unpadded(sel)
            old.keep(sel, run.scorer(prompt_ids, prompt_mask, tokens, run.cfg.temperature,
                                     return_hidden=old.keeps_hidden))
    return old


# 5. Updates

def update(run: Run, batch: Rollout, old: OldLogprobs, ref_logp, rows, noise, on_policy: bool,
           keep_old: bool = False, step: int = 0) -> dict:
    """One optimizer step on a minibatch (`rows`) of step `step`: the clipped surrogate of --clip, gradients
    accumulated over micro-batches and normalised over the whole minibatch on all ranks, then AdamW (not on a
    loss or gradient that is not finite, nor leaving a weight that is not: check_finite). on_policy: the
    step's first update, before any optimizer step, so its forward is pi_old's: checked against the
    sampler's log-probs (and, keep_old, kept as pi_old of `rows`)."""
    cfg, d = run.cfg, run.d
    run.opt.zero_grad(set_to_none=True)
    masks = loss_mask(batch.mask, batch.finished, cfg.mask_truncated)  # the tokens trained on
    trained = d.all_sum(float(masks[rows].sum()))  # under --mask-truncated maybe 0
    counts = dict(num_sequences=len(rows) * d.world, max_new_tokens=cfg.max_new_tokens,
                  num_tokens=max(1.0, trained))  # a token-mean over no token is 0
    parts, stats, losses = micro_batches(rows, cfg.micro_batch), [], []
    for j, sel in enumerate(parts):
        prompt_ids, prompt_mask, tokens, sampled = batch.unpadded(sel)  # (b, P'), (b, T'): no shared padding
        T = tokens.shape[1]
        mask = masks[sel][:, :T]  # (a view: the compiled loss rounds by the layout it is given)
        with distributed.accumulating(run.scorer, sync=j == len(parts) - 1):
            new = run.scorer(prompt_ids, prompt_mask, tokens, cfg.temperature, with_entropy=True,
                             return_hidden=old.keeps_hidden)
            if keep_old:
                old.keep(sel, new)
            full = {"full_kl": old.full_kl(sel, new.hidden, run.model.lm_head.weight, cfg.temperature)} \
                if old.keeps_hidden else {}
            loss, metrics = policy_loss(cfg.clip, new.logp, old.logp[sel, :T], batch.advantages[sel], mask,
                                        agg=cfg.aggregation, compile=cfg.compile, generator=noise, **counts,
                                        **full, **cfg.hparams)
            if ref_logp is not None:  # --beta: the KL penalty to the reference, aggregated like the loss
                kl = kl_to_reference(new.logp, old.logp[sel, :T], ref_logp[sel, :T], mask)
                loss = loss + cfg.beta * aggregate(kl, mask, cfg.aggregation, **counts)
                metrics["kl_ref"] = (kl.detach() * mask).sum() / mask.sum().clamp(min=1)
            # DDP averages gradients over ranks, but the normalisers already count the whole
            # minibatch, so the rank's share of the sum is wanted: undo the 1/world.
            (loss * d.world).backward()
        losses.append(loss.item())
        gap = check_sampler_agrees(new.logp, batch.sampler_logp[sel, :T], sampled, cfg.dtype) \
            if on_policy and batch.sampler_logp is not None else 0.0  # a batch from a benchmark may have none
        stats.append({**{k: v.item() for k, v in metrics.items()}, "_tokens": float(mask.sum()),
                      "entropy": float((new.entropy.detach() * mask).sum() / mask.sum().clamp(min=1)),
                      "sampler_logp_gap_max": gap})
    grad_norm = float(torch.nn.utils.clip_grad_norm_(run.trained, cfg.grad_clip or math.inf))
    check_finite(f"step {step + 1}", {"the loss": losses, "the gradient norm": grad_norm}, d.all_sum)
    run.opt.step()
    check_finite(f"step {step + 1}", {"a weight after the optimizer step": run.trained}, d.all_sum)
    return {"stats": stats, "losses": losses, "grad_norm": grad_norm}


@torch.no_grad()
def reference_logprobs(run: Run, batch: Rollout):
    """log pi_ref (N, T) of every completion token, for the --beta penalty; None without one."""
    if run.ref is None:
        return None
    micro = run.cfg.micro_batch or len(batch.tokens) // run.cfg.minibatches
    return torch.cat([run.ref.logprobs(batch.prompt_ids[i:i + micro], batch.prompt_mask[i:i + micro],
                                       batch.tokens[i:i + micro], run.cfg.temperature)
                      for i in range(0, len(batch.tokens), micro)])


# ----------------------------------------------------------------------------
# The loop, and what it needs

def train(run: Run, problems, eval_sets: dict, session: Session):
    """The steps, from the checkpoint's on: held-out evaluations before, every --eval-every steps and
    after; checkpoints and signals are the session's (Session.steps)."""
    cfg, k = run.cfg, run.cfg.eval_k
    before = evaluate(run, eval_sets, session, 0) if session.start == 0 else None
    if before:
        session.say(f"step 0: {scores_line(before, k)}")
    if cfg.compile and session.start < cfg.steps:
        session.say(f"compiling the {cfg.clip} loss with torch.compile "
                    "(the first step only; --no-compile skips it)")
    for step in session.steps(progress=lambda row: progress(row, cfg.clip)):
        session.log_step(grpo_step(run, problems, step))
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
            res = evaluate(run, eval_sets, session, step + 1)
            session.say(f"step {step + 1}: {scores_line(res, k)}" if res else None)
    if session.ended_by_signal:
        return
    after = evaluate(run, eval_sets, session, cfg.steps)  # also a resumed run stopped in its last evaluation
    if after:
        session.say(f"step {cfg.steps}: {scores_line(after, k, before)}")
    path = session.folder.path
    if cfg.merge and run.d.main:
        session.say(f"merged: {lora.merge(session.model_dir, path / 'checkpoint', path / 'merged')}")
    session.say(f"metrics: {path / 'metrics.jsonl'}  checkpoint: {path / 'checkpoint'}")


def evaluate(run: Run, eval_sets: dict, session: Session, step: int) -> dict | None:
    """Mean@k / Pass@k on the held-out files, logged; None without files, or if this step's is logged."""
    cfg = run.cfg
    if not eval_sets or session.evaluated(step):
        return None
    with run.precision():
        results, samples = during_training(
            run.model, run.tok, eval_sets, cfg.eval_k, cfg.eval_batch_size, run.d.rank, run.d.world,
            functools.partial(distributed.all_gather, d=run.d), seed=cfg.seed,
            max_new_tokens=cfg.eval_max_new_tokens or cfg.max_new_tokens, temperature=cfg.eval_temperature,
            top_p=cfg.eval_top_p, sampler=cfg.sampler, eos_ids=run.eos_ids, prompt_kw=run.prompt_kw,
            stop=cfg.stop, rewards=rewards_at(run, step),
            plan=decode_plan(run.d.device, cfg.sampler, cfg.eval_temperature))
    check_finite(f"the evaluation of step {step}",  # a policy whose forward overflows: NaN entropy
                 {"a number": [v for v in results.values() if isinstance(v, float)]}, run.d.all_sum)
    session.log_eval(step, results, samples)
    return results


def setup(session: Session) -> tuple[Run, list, dict]:
    """The policy, its optimizer, tokenizer, problems and reward: (Run, training problems, held-out sets)."""
    cfg, d = session.cfg, session.d
    rewards = session.rewards  # loaded and checked against the files' columns before the run folder
    torch.manual_seed(cfg.seed)  # LoRA's initial A matrices
    resumed = session.folder.checkpoint  # the checkpoint it goes on from (None: a new run)
    model, peft_model = lora.load_policy(cfg, session.model_dir, resumed, d.device)  # base + LoRA?
    tok_dir = resumed or session.model_dir
    tok = load_tokenizer(tok_dir)
    prompt_kw = dict(template=cfg.prompt_template, system_prompt=cfg.system_prompt,
                     enable_thinking=cfg.thinking)
    columns = dict(answer_field=cfg.answer_field, need_answer=not cfg.reward)  # your reward may need no gold
    problems = load_problems(cfg.data, **columns)
    eval_sets = {Path(f).stem: load_problems(f, limit=cfg.eval_limit or None, **columns)
                 for f in cfg.eval_data}
    for f in cfg.eval_data:  # a file that shares problems with --data is no held-out one: said so
        session.say(not_held_out(f, problems, eval_sets[Path(f).stem], cfg.task))
    check_budgets(tok, [(cfg.data, problems, cfg.max_new_tokens, "--max-new-tokens")] + [
        (f, eval_sets[Path(f).stem], cfg.eval_max_new_tokens or cfg.max_new_tokens, "--eval-max-new-tokens")
        for f in cfg.eval_data], model.config.max_position_embeddings, prompt_kw)
    precision = distributed.precision(cfg.dtype, d.device)
    ref = None
    if cfg.beta > 0:  # the starting policy: adapters off, or (full fine-tuning) a frozen copy
        ref = Reference(model, peft_model.disable_adapter, precision) if peft_model else \
            Reference(Qwen3.from_pretrained(session.model_dir, device=d.device).eval().requires_grad_(False),
                      precision=precision)
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(cfg, trained)
    if resumed is not None:
        opt.load_state_dict(session.folder.state.pop("optimizer"))
    chunk = cfg.rollout_batch or cfg.prompts_per_step // d.world
    shard = Shard(cfg.seed, cfg.prompts_per_step, chunk, cfg.group_size, d.rank, d.world)
    run = Run(cfg, model, distributed.wrap(Scorer(model, precision), d), opt, trained, tok,
              eos_token_ids(tok, tok_dir, session.model_dir), make_stopper(tok, cfg.stop),
              rewards, shard, d, precision, peft_model, ref, prompt_kw,
              plan=decode_plan(d.device, cfg.sampler, cfg.temperature))
    session.started(lambda: (run.peft_model or run.model, run.opt), read_tokenizer_files(tok_dir))
    session.describe(model, trained, len(problems), beta=bool(ref))
    return run, problems, eval_sets


# The optimizer and its schedule

def learning_rate(cfg: TrainConfig, k: int) -> float:
    """The learning rate of the run's optimizer step k (0, 1, ...; step s's i-th update is k = s x minibatches
    x epochs + i): --lr times the factor of transformers' get_{constant,linear,cosine}_schedule_with_warmup
    at k, a function of k alone, so a resumed run goes on with the very same rates. As there, the warmup
    rises linearly from 0 (step 0 trains at lr 0), then linear and cosine decay to 0 at the run's end."""
    warmup, total = cfg.warmup, cfg.optimizer_steps
    if k < warmup:
        factor = k / warmup
    elif cfg.lr_scheduler == "constant":
        factor = 1.0
    elif cfg.lr_scheduler == "linear":
        factor = max(0.0, (total - k) / max(1, total - warmup))
    else:  # cosine: half a period, from 1 to 0
        progress = (k - warmup) / max(1, total - warmup)
        factor = max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return cfg.lr * factor


def make_optimizer(cfg: TrainConfig, trained: list):
    """AdamW over the trained parameters, fused: one kernel for all of them (docs/speed.md)."""
    return torch.optim.AdamW(trained, lr=cfg.lr, weight_decay=cfg.weight_decay,
                             betas=(cfg.adam_beta1, cfg.adam_beta2), fused=True)


def main(argv=None):
    with Session(argv, __doc__) as session:  # flags; the run folder made or resumed, locked; errors: one line
        run, problems, eval_sets = setup(session)
        train(run, problems, eval_sets, session)


if __name__ == "__main__":
    main()
