"""A GRPO step's metrics line, over every rank: what metrics.jsonl logs of it (rewards and accuracy,
lengths, group shares, the loss and its clipping statistics, the learning rate, timings, throughput)."""
import math

import torch

from nanoatr.loss import merge_stats, overlong_penalty, uniform_groups
from nanoatr.machinery import distributed
from nanoatr.rollout import Rollout
from nanoatr.tokenizer import completion_texts


def metrics_line(run, batch: Rollout, updates: list[dict], draws: dict, times: dict) -> dict:
    """The metrics line of a step, over every rank's rows (gathered in prompt order); `draws`: rollout's;
    `times`: the seconds of rollout (1.-3.) and training (4.-5.). `lr` is the rate of the step's first
    optimizer step (its others follow learning_rate); reward_mean and accuracy are the task's reward,
    reward/overlong the mean penalty added to it under --overlong-buffer."""
    cfg, d = run.cfg, run.d
    rewards, lengths, finished = (torch.tensor(distributed.all_gather(x.tolist(), d))
                                  for x in (batch.rewards, batch.mask.sum(-1), batch.finished))
    losses = [loss for u in updates for loss in u["losses"]]
    right = torch.tensor(distributed.all_gather(correct(run, batch).tolist(), d))
    row = {"reward_mean": rewards.mean().item(), **reward_means(run, batch),
           "accuracy": right.float().mean().item(),
           "completion_len": lengths.float().mean().item(), "truncated": (~finished).float().mean().item(),
           **group_shares(rewards, cfg.group_size, right),
           "grad_norm": sum(u["grad_norm"] for u in updates) / len(updates),
           # a minibatch's loss is the sum of its micro-batches' on every rank; mean over optimizer steps
           "loss": sum(distributed.all_gather(losses, d)) / len(updates), "lr": updates[0]["lr"]}
    if cfg.overlong_buffer:
        row["reward/overlong"] = overlong_penalty(lengths, cfg.max_new_tokens, cfg.overlong_buffer,
                                                  cfg.overlong_penalty).mean().item()
    if draws:  # the kept groups are chosen for mixed rewards: the first round's are the policy's
        first = torch.tensor(distributed.all_gather(draws["first"].rewards.tolist(), d))
        first_right = torch.tensor(distributed.all_gather(correct(run, draws["first"]).tolist(), d))
        row |= {"reward_mean_first_round": first.mean().item(),
                "accuracy_first_round": first_right.float().mean().item(),
                "sampling_rounds": sum(distributed.all_gather([draws["rounds"]], d)) / d.world}
    sampled = sum(distributed.all_gather([draws["tokens"]], d)) if draws else lengths.sum().item()
    trained = cfg.epochs * lengths.sum().item()  # each epoch's minibatches cover every row once
    if cfg.log_completions:  # Session.log_step moves them to samples.jsonl
        row["completions"] = completions(run, batch, right[:cfg.log_completions].tolist())
    return row | merge_stats(distributed.all_gather([s for u in updates for s in u["stats"]], d)) | times | \
        throughput(sampled, trained, times)


def completions(run, batch: Rollout, right: list[bool]) -> list[dict]:
    """This rank's first len(right) completions as text: the prompt, the completion, the total reward, each
    function's (None: unscored) and the verdict `right` (--log-completions)."""
    n = len(right)
    texts = completion_texts(run.tok, batch.tokens[:n], batch.mask[:n])
    each = [[] for _ in texts] if batch.rewards_per_function is None else batch.rewards_per_function.tolist()
    return [{"prompt": run.tok.decode(batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist()),
             "completion": text, "reward": float(batch.rewards[i]), "correct": right[i],
             **{f"reward/{f}": None if math.isnan(r) else r for f, r in zip(run.rewards.names, each[i])}}
            for i, text in enumerate(texts)]


def correct(run, batch: Rollout) -> torch.Tensor:
    """(N,) bool: which completions are correct (--correct-reward: Rewards.correct_of); of a batch graded
    elsewhere (bench/gpu_smoke.py's random rewards), those of reward > 0."""
    scores = batch.rewards_per_function
    return batch.rewards > 0 if scores is None else run.rewards.correct_of(scores)


def group_shares(rewards: torch.Tensor, G: int, right: torch.Tensor | None = None) -> dict:
    """The shares of the groups (G rewards each) that are all correct (`right`, the rule of `accuracy`:
    --correct-reward; None: every reward > 0), all wrong (none correct) and of zero std (all G rewards equal:
    no advantage at any scale)."""
    groups = (rewards > 0 if right is None else right).view(-1, G)
    return {"groups_all_correct": groups.all(1).float().mean().item(),
            "groups_all_wrong": (~groups.any(1)).float().mean().item(),
            "groups_zero_std": len(uniform_groups(rewards, G)) / groups.shape[0]}


def throughput(sampled: float, trained: float, times: dict) -> dict:
    """Completion tokens per second over every rank (prompt tokens are not counted):
      tokens_per_s_rollout  tokens sampled (with --dynamic-sampling, of every round) / time_rollout
      tokens_per_s_update   tokens trained, each once per epoch (epochs x the batch's) / time_train
    time_rollout covers sampling and grading; time_train pi_old's pass, pi_ref's (--beta) and the updates.
    A token is one of a completion (up to and with its EOS or stop string); one that --mask-truncated
    leaves out of the loss counts too: the forward and backward passes still run over it."""
    return {"tokens_per_s_rollout": sampled / times["time_rollout"],
            "tokens_per_s_update": trained / times["time_train"]}


def reward_means(run, batch: Rollout) -> dict:
    """reward/<name>: each reward function's mean over the step's completions it scored (None: none); {}
    for a batch graded elsewhere (bench/gpu_smoke.py's random rewards)."""
    if batch.rewards_per_function is None:
        return {}
    scores = torch.tensor(distributed.all_gather(batch.rewards_per_function.tolist(), run.d))
    return {f"reward/{name}": None if math.isnan(mean) else mean
            for name, mean in zip(run.rewards.names, scores.nanmean(0).tolist())}
