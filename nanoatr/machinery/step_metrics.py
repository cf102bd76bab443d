"""A GRPO step's metrics line, over every rank: what metrics.jsonl logs of it (rewards, accuracy, lengths,
group shares, the loss and its clipping statistics, the lr, timings, throughput), and the progress bar's."""
import functools

import torch

from nanoatr.loss import overlong_penalty, uniform_groups
from nanoatr.machinery import distributed
from nanoatr.methods import METHODS, Tokens, defaults
from nanoatr.rollout import Rollout
from nanoatr.tokenizer import completion_texts


def metrics_line(run, batch: Rollout, updates: list[dict], draws: dict, times: dict) -> dict:
    """The metrics line of a step, over every rank's rows (gathered in prompt order); `draws`: rollout's;
    `times`: the seconds of rollout (1.-3.) and training (4.-5.). `lr` is the rate of the step's first
    optimizer step (its others follow learning_rate); reward_mean and accuracy are the task's reward,
    reward/overlong the mean penalty added to it under --overlong-buffer."""
    cfg, right = run.cfg, correct(run, batch)
    shown = completions(run, batch, right[:cfg.log_completions].tolist()) if cfg.log_completions else None
    drawn = {"first": draws["first"].rewards, "first_right": correct(run, draws["first"]),
             "rounds": [draws["rounds"]], "tokens": [draws["tokens"]]} if draws else {}  # --dynamic-sampling
    every = gathered(run.d, {"rewards": batch.rewards, "lengths": batch.mask.sum(-1), "right": right,
                             "finished": batch.finished, "per_function": batch.rewards_per_function,
                             "losses": [loss for u in updates for loss in u["losses"]],
                             "stats": [s for u in updates for s in u["stats"]]} | drawn)
    stats = merge_stats(every["stats"])  # the loss's metrics, over every micro-batch of every rank
    rewards, lengths, right = every["rewards"], every["lengths"], every["right"]
    row = {"reward_mean": rewards.mean().item(), **reward_means(run, every["per_function"]),
           "accuracy": right.float().mean().item(), "completion_len": lengths.float().mean().item(),
           "truncated": (~every["finished"]).float().mean().item(),
           **group_shares(rewards, cfg.group_size, right),
           "grad_norm": sum(u["grad_norm"] for u in updates) / len(updates),
           # a minibatch's loss is the sum of its micro-batches' on every rank; mean over optimizer steps
           "loss": sum(every["losses"]) / len(updates), "lr": updates[0]["lr"]}
    if cfg.overlong_buffer:
        row["reward/overlong"] = overlong_penalty(lengths, cfg.max_new_tokens, cfg.overlong_buffer,
                                                  cfg.overlong_penalty).mean().item()
    if draws:  # the kept groups are chosen for mixed rewards: the first round's are the policy's
        row |= {"reward_mean_first_round": every["first"].mean().item(),
                "accuracy_first_round": every["first_right"].float().mean().item(),
                "sampling_rounds": sum(every["rounds"]) / run.d.world}
    sampled = sum(every["tokens"]) if draws else lengths.sum().item()
    trained = cfg.epochs * lengths.sum().item()  # each epoch's minibatches cover every row once
    if shown is not None:  # Session.log_step moves them to samples.jsonl
        row["completions"] = shown
    return row | stats | times | throughput(sampled, trained, times)


def gathered(d: distributed.Dist, mine: dict) -> dict:
    """This rank's values (tensors, lists; None: none), each concatenated over the ranks in prompt order."""
    lists = {k: v.tolist() if torch.is_tensor(v) else v or [] for k, v in mine.items()}
    ranks = distributed.all_gather([lists], d)  # each rank's lists
    return {k: (torch.tensor if torch.is_tensor(v) else list)([x for r in ranks for x in r[k]])
            for k, v in mine.items()}


def completions(run, batch: Rollout, right: list[bool]) -> list[dict]:
    """This rank's first len(right) completions as text: the prompt, the completion, the total reward, each
    function's (NaN: unscored, null in samples.jsonl) and the verdict `right` (--log-completions)."""
    texts = completion_texts(run.tok, batch.tokens[:len(right)], batch.mask[:len(right)])
    each = [[] for _ in texts] if batch.rewards_per_function is None else batch.rewards_per_function.tolist()
    return [{"prompt": run.tok.decode(batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist()),
             "completion": text, "reward": float(batch.rewards[i]), "correct": right[i],
             **{f"reward/{f}": r for f, r in zip(run.rewards.names, each[i])}}
            for i, text in enumerate(texts)]


def correct(run, batch: Rollout) -> torch.Tensor:
    """(N,) bool: which completions are correct (--correct-reward: Rewards.correct_of); of a batch graded
    elsewhere (bench/gpu_smoke.py's random rewards), those of reward > 0."""
    each = batch.rewards_per_function
    return batch.rewards > 0 if each is None else run.rewards.correct_of(each)


def group_shares(rewards: torch.Tensor, G: int, right: torch.Tensor) -> dict:
    """The shares of the groups (G rewards each) all correct (`right` (N,): what `accuracy` counts correct),
    all wrong (none correct) and of zero std (all G rewards equal: no advantage at any scale)."""
    groups = right.view(-1, G)
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


def reward_means(run, scores) -> dict:
    """reward/<name>: each reward function's mean over the step's completions it scored (NaN: none, null in
    metrics.jsonl), of `scores` (N, F) over every rank; {} for none ([]: bench/gpu_smoke.py's batch)."""
    if len(scores) == 0:
        return {}
    return {f"reward/{name}": m for name, m in zip(run.rewards.names, scores.nanmean(0).tolist())}


def merge_stats(stats: list[dict]) -> dict:
    """Token-weighted means over micro-batches; min/max where the name says so. A step with no token trained
    (--mask-truncated cut them all) weighs its micro-batches alike: their values are those of no token (no
    cut, ratios 1), not 0; its ratio_min and ratio_max are 1 too, not the +inf / -inf of an empty min / max,
    which metrics.jsonl would hold as Infinity, no JSON number."""
    tokens = [s["_tokens"] for s in stats]
    trained = sum(tokens) > 0
    tokens = tokens if trained else [1.0] * len(stats)
    out = {}
    for k in [k for k in stats[0] if k != "_tokens"]:
        values = [s[k] for s in stats]
        out[k] = min(values) if k.endswith("_min") else max(values) if k.endswith("_max") else \
            sum(v * n for v, n in zip(values, tokens)) / sum(tokens)
    if not trained:
        out |= {k: 1.0 for k in ("ratio_min", "ratio_max") if k in out}
    return out


def progress(row: dict, clip: str) -> dict:
    """The progress bar's fields: accuracy, the share of tokens cut (in %: a tenth of a percent shows), what
    the method itself acts on (its divergence, gate or cut metric), where the ratios sit (1% to 99%),
    completion length."""
    own = {k: f"{row[k]:.4f}" for k in own_metrics(clip)}
    return {"acc": f"{row['accuracy']:.2f}",
            "cut": f"{100 * (row['clip_frac_low'] + row['clip_frac_high']):.2f}%", **own,
            "w": f"[{row['ratio_p01']:.2f},{row['ratio_p99']:.2f}]", "len": f"{row['completion_len']:.0f}"}


@functools.cache
def own_metrics(method: str) -> tuple[str, ...]:
    """The names of the metrics `method` reports itself (the divergence or gate it acts on: what the
    progress bar shows; kl3's is the common "kl3"), read off one call on a dummy batch."""
    x = torch.zeros(1, 2)
    t = Tokens(ratio=x.exp(), log_ratio=x, advantages=x + 1, valid=x == 0, old_logp=x - 1, full_kl=x, noise=x)
    return tuple(METHODS[method](t, **defaults(method))[3])
