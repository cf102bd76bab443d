"""The knobs a TRL user brings: the learning-rate schedule (against transformers', resumed exactly), lr and tokens
per second in metrics.jsonl, --mask-truncated, and DAPO's soft overlong punishment.

    python -m pytest tests/test_knobs.py -q
"""
import contextlib
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

import train
from nanoatr.machinery.flags import ConfigError, TrainConfig, check_schedule_kept
from nanoatr.loss import overlong_penalty
from nanoatr.rollout import Rollout
from nanoatr.machinery import distributed, step_metrics
from nanoatr.machinery.distributed import Dist
from conftest import error_line, metrics

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(ROOT / "data/arith/train.jsonl"), "--eval-data",
         "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "24", "--no-compile", "--lr", "1e-3"]


# ----------------------------------------------------------------------------
# The learning-rate schedule

def transformers_rates(name: str, warmup: int, total: int, lr: float) -> list[float]:
    """The learning rate of each of `total` optimizer steps under transformers' scheduler, read off the
    optimizer as its Trainer steps it: the optimizer step, then the scheduler's."""
    from transformers.optimization import (get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                                           get_linear_schedule_with_warmup)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    schedule = {"constant": lambda: get_constant_schedule_with_warmup(opt, warmup),
                "linear": lambda: get_linear_schedule_with_warmup(opt, warmup, total),
                "cosine": lambda: get_cosine_schedule_with_warmup(opt, warmup, total)}[name]()
    rates = []
    for _ in range(total):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    return rates


@pytest.mark.parametrize("warmup, steps", [({}, 0), ({"warmup_steps": 3}, 3), ({"warmup_ratio": 0.21}, 5)])
@pytest.mark.parametrize("name", ["constant", "linear", "cosine"])
def test_the_learning_rate_is_transformers_at_every_optimizer_step(name, warmup, steps):
    """5 steps x 2 minibatches x 2 epochs = 20 optimizer steps: every rate equal to transformers' (bit for bit).
    A warmup ratio rounds up, as transformers' TrainingArguments.get_warmup_steps does: 0.21 x 20 = 4.2 -> 5."""
    cfg = TrainConfig(steps=5, minibatches=2, epochs=2, lr=3e-4, lr_scheduler=name, **warmup)
    assert cfg.optimizer_steps == 20 and cfg.warmup == steps
    assert [train.learning_rate(cfg, k) for k in range(20)] == transformers_rates(name, cfg.warmup, 20, 3e-4)


def test_the_learning_rate_by_hand():
    """Warmup 2 of 6 optimizer steps, lr 1: k / 2 during the warmup, then linear (6 - k) / 4, cosine
    (1 + cos(pi (k - 2) / 4)) / 2; constant stays 1."""
    def rates(name):
        cfg = TrainConfig(steps=3, minibatches=2, lr=1.0, lr_scheduler=name, warmup_steps=2)
        return [train.learning_rate(cfg, k) for k in range(6)]
    assert rates("constant") == [0, 0.5, 1, 1, 1, 1]
    assert rates("linear") == [0, 0.5, 1, 0.75, 0.5, 0.25]
    r = 0.5 ** 0.5
    assert rates("cosine") == pytest.approx([0, 0.5, 1, (1 + r) / 2, 0.5, (1 - r) / 2], abs=1e-15)


@pytest.mark.parametrize("args, message", [
    (["--warmup-steps", "2", "--warmup-ratio", "0.1"], "--warmup-steps and --warmup-ratio both set the warmup"),
    (["--warmup-steps", "5"], "--warmup-steps 5 is more than the run's 4 optimizer steps"),
    (["--warmup-ratio", "1.5"], "--warmup-ratio must be in [0, 1]"),
    (["--lr-scheduler", "step"], "invalid choice: 'step'"),
    (["--overlong-buffer", "24"], "--overlong-buffer 24 must be below --max-new-tokens 24"),
    (["--overlong-penalty", "0.5"], "--overlong-penalty would be ignored"),
    (["--overlong-buffer", "4", "--overlong-penalty", "-1"], "--overlong-penalty must be >= 0"),
])
def test_a_bad_knob_is_one_line(tmp_path, capsys, args, message):
    assert message in error_line(capsys, train.main, [*QUICK, "--steps", "2", "--out-dir", str(tmp_path),
                                                      "--name", "bad", *args])
    assert not (tmp_path / "bad").exists()


@pytest.fixture(scope="module")
def cosine_run(tmp_path_factory):
    """A finished 2-step run under --lr-scheduler cosine --warmup-steps 3 (4 optimizer steps), in part/."""
    out = tmp_path_factory.mktemp("cosine")
    train.main([*QUICK, "--out-dir", str(out), "--name", "part", "--steps", "2", "--lr-scheduler", "cosine",
                "--warmup-steps", "3"])
    return out


def test_each_optimizer_step_runs_at_its_rate(tmp_path, monkeypatch):
    """AdamW steps at the rate of the schedule, not only the log: 2 steps x 2 minibatches under linear with
    1 warmup step, lr 1e-3: 0, then (4 - k) / 3 of it. The line of a step logs its first update's."""
    seen, real_step = [], torch.optim.AdamW.step

    def recording_step(self, *a, **kw):
        seen.append(self.param_groups[0]["lr"])
        return real_step(self, *a, **kw)
    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    train.main([*QUICK, "--out-dir", str(tmp_path), "--name", "lin", "--steps", "2", "--minibatches", "2",
                "--lr-scheduler", "linear", "--warmup-steps", "1"])
    assert seen == pytest.approx([0.0, 1e-3, 1e-3 * 2 / 3, 1e-3 / 3], rel=1e-12)
    assert [r["lr"] for r in metrics(tmp_path / "lin")] == [seen[0], seen[2]]


@pytest.mark.parametrize("args, message", [
    (["--steps", "5"], "--steps 5 would change the learning-rate schedule the run has followed"),
    (["--minibatches", "4"], "--minibatches 4 cannot change on --resume"),
    (["--lr-scheduler", "linear"], "--lr-scheduler linear cannot change on --resume"),
    (["--warmup-steps", "1"], "--warmup-steps 1 cannot change on --resume"),
])
def test_a_resume_keeps_its_schedule(cosine_run, capsys, monkeypatch, args, message):
    """Refused before the run folder is opened; Session.open takes the run's settings and this resume's change
    from one read of config.json."""
    run, reads, read_text = cosine_run / "part", [], Path.read_text
    before = (run / "metrics.jsonl").read_bytes()

    def counting_read(path, *a, **kw):
        reads.extend([path] if path == run / "config.json" else [])
        return read_text(path, *a, **kw)
    monkeypatch.setattr(Path, "read_text", counting_read)
    assert message in error_line(capsys, train.main, ["--resume", str(run), *args])
    assert (run / "metrics.jsonl").read_bytes() == before and len(reads) == 1


@pytest.mark.parametrize("schedule, changed, refused", [
    ({}, {"steps": 9, "minibatches": 4, "epochs": 2}, False),  # constant, no warmup: nothing depends on them
    ({"warmup_steps": 2}, {"steps": 9}, False),            # a warmup of so many steps: the length is free
    ({"warmup_ratio": 0.5}, {"steps": 9}, True),           # a ratio of the run's length
    ({"lr_scheduler": "linear"}, {"steps": 9}, True),
])
def test_what_a_schedule_fixes_on_resume(schedule, changed, refused):
    saved = TrainConfig(steps=4, minibatches=2, resume="runs/r", **schedule)
    resumed = dataclasses.replace(saved, **changed)
    change = {name: {"from": getattr(saved, name), "to": value} for name, value in changed.items()}
    with pytest.raises(ConfigError, match=f"--{[*changed][0]} ") if refused else contextlib.nullcontext():
        check_schedule_kept(resumed, change)


# ----------------------------------------------------------------------------
# Tokens per second

def test_each_step_logs_its_tokens_per_second_and_its_overlong_penalty(cosine_run, tmp_path, monkeypatch):
    """Tokens over seconds: 16 completions a step, sampled = 16 x length, trained so many once per epoch. With
    --dynamic-sampling the rollout also sampled the groups it dropped: tokens_per_s_rollout counts them
    (sampling_rounds > 1 then means more tokens than the batch's). A buffer of 23 of the 24 tokens: every
    completion (1 token or more) is in it, so the mean penalty is 0.5 (1 - mean length) / 23, linear in the
    mean length the line also logs. Off (cosine_run), it is not logged."""
    assert step_metrics.throughput(120, 360, {"time_rollout": 2.0, "time_train": 4.5}) == \
        {"tokens_per_s_rollout": 60.0, "tokens_per_s_update": 80.0}
    with monkeypatch.context() as m:  # seconds of the rollout (until graded), then of the rest of the step
        m.setattr(train, "time", type("Clock", (), {"perf_counter": iter([10.0, 13.0, 20.0]).__next__}))
        m.setattr(train, "rollout", lambda run, problems, step: ("batch", {}))
        m.setattr(train, "optimize", lambda run, batch, step: [])
        m.setattr(train, "metrics_line", lambda run, batch, updates, draws, times: times)
        assert train.grpo_step(None, [], 4) == {"step": 5, "time_rollout": 3.0, "time_train": 7.0}
    train.main([*QUICK, "--out-dir", str(tmp_path), "--name", "ds", "--steps", "2", "--dynamic-sampling", "3",
                "--epochs", "2", "--overlong-buffer", "23", "--overlong-penalty", "0.5"])
    assert not any("reward/overlong" in r for r in metrics(cosine_run / "part"))
    for row in metrics(tmp_path / "ds"):
        assert row["reward/overlong"] == pytest.approx(0.5 * (1 - row["completion_len"]) / 23, rel=1e-6)
        # slots all filled before the last of the 1 + 3 rounds: no uniform group is left
        assert row["sampling_rounds"] == 4 or row["groups_all_correct"] == row["groups_all_wrong"] == 0
    for run, epochs in ((cosine_run / "part", 1), (tmp_path / "ds", 2)):
        for row in metrics(run):
            batch_tokens = 16 * row["completion_len"]
            sampled = row["tokens_per_s_rollout"] * row["time_rollout"]
            if row.get("sampling_rounds", 1) == 1:
                assert sampled == pytest.approx(batch_tokens, rel=1e-9)
            else:  # each further round sampled at least one group of at least one token each
                assert sampled > batch_tokens + 1
            assert row["tokens_per_s_update"] * row["time_train"] == pytest.approx(epochs * batch_tokens, rel=1e-9)


def test_two_ranks_log_the_mean_of_their_sampling_rounds(monkeypatch):
    """Each of two ranks drew 3 rounds (test_train's three-round rollout, on every rank alike: all_gather
    repeats this rank's lists): sampling_rounds is 3, their mean, not the 6 rounds of both."""
    from test_train import fake_rounds, fake_run
    fake_rounds(monkeypatch, [[1, 1, 0, 1, 0, 0], [0, 0, 1, 0, 1, 1], [1, 0, 0, 1, 0, 0], [0, 1] * 3])
    run = fake_run(5)
    batch, draws = train.rollout(run, None, 0)
    run.d = Dist(0, 2, torch.device("cpu"))
    monkeypatch.setattr(distributed, "all_gather", lambda items, d: list(items) * d.world)
    update = {"grad_norm": 1.0, "losses": [0.5], "stats": [{"_tokens": 6.0}], "lr": 1e-6}
    row = step_metrics.metrics_line(run, batch, [update], draws, {"time_rollout": 1.0, "time_train": 1.0})
    assert (row["sampling_rounds"], row["reward_mean"], row["reward_mean_first_round"]) == (3, 0.5, 0.5)


# ----------------------------------------------------------------------------
# --mask-truncated

def test_a_truncated_completion_gives_no_gradient_and_the_others_are_unchanged():
    """On a real batch (4 prompts x 4 completions), two rows with an advantage marked as run out of
    --max-new-tokens. With --mask-truncated the gradient is that of the same batch with those rows'
    advantages set to 0 (dr-grpo's normaliser counts sequences: unchanged, as in TRL), and those rows alone
    give none; without it they do give one (so the test can fail). lr 0: no update moves the weights."""
    from test_train import step_run
    run, batch = step_run("kl3", reuse_first_forward=False)
    rows, cut = torch.arange(16), (batch.advantages != 0).nonzero()[:2, 0]
    batch = batch._replace(finished=torch.ones(16, dtype=torch.bool).index_fill(0, cut, False))
    run.opt.param_groups[0]["lr"] = 0.0
    old = train.old_logprobs(run, batch, [rows])

    def gradient(b, which, mask_truncated):
        run.cfg.mask_truncated = mask_truncated
        train.update(run, b, old, None, which, run.shard.noise(0), on_policy=False)
        return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in run.trained]

    masked = gradient(batch, rows, True)
    zeroed = batch._replace(advantages=batch.advantages.index_fill(0, cut, 0.0))
    for g, expected in zip(masked, gradient(zeroed, rows, False)):
        torch.testing.assert_close(g, expected, rtol=1e-6, atol=1e-9)
    assert all((g == 0).all() for g in gradient(batch, cut, True))
    assert any((g != 0).any() for g in gradient(batch, cut, False))


def test_a_step_with_every_completion_truncated_trains_nothing_and_says_so(tmp_path):
    """A budget of 2 tokens: every completion runs out, --mask-truncated leaves no token to train on (even
    under token-mean, whose count of tokens is then 0). The step's loss and gradient are 0 and its ratio
    metrics those of no token (1, none cut), not the 0 a token-weighted mean over no token would give."""
    train.main([*QUICK, "--out-dir", str(tmp_path), "--name", "mt", "--steps", "1", "--max-new-tokens", "2",
                "--mask-truncated", "--aggregation", "token-mean"])
    row = metrics(tmp_path / "mt")[0]
    assert row["truncated"] == 1 and row["loss"] == 0 and row["grad_norm"] == 0
    assert row["ratio_p01"] == row["ratio_p99"] == 1 and row["clip_frac_low"] == row["clip_frac_high"] == 0
    assert row["ratio_min"] == row["ratio_max"] == 1


def test_merging_the_stats_of_micro_batches_without_tokens():
    stats = [{"_tokens": 0.0, "ratio_p99": 1.0, "ratio_min": math.inf, "ratio_max": -math.inf}]  # one only
    assert step_metrics.merge_stats(stats) == {"ratio_p99": 1.0, "ratio_min": 1.0, "ratio_max": 1.0}
    stats = [{"_tokens": 1.0, "ratio_p99": 2.0, "ratio_min": 0.5, "ratio_max": 3.0},  # by tokens: 1 trained
             {"_tokens": 0.0, "ratio_p99": 1.0, "ratio_min": math.inf, "ratio_max": -math.inf}]
    assert step_metrics.merge_stats(stats) == {"ratio_p99": 2.0, "ratio_min": 0.5, "ratio_max": 3.0}


# ----------------------------------------------------------------------------
# DAPO's soft overlong punishment

def test_the_overlong_penalty_by_hand():
    """L_max 10, L_cache 4: no penalty up to 6 tokens, then (6 - |y|) / 4 x F, -F at 10 (and beyond)."""
    lengths = torch.tensor([0, 5, 6, 7, 8, 9, 10, 12])
    assert overlong_penalty(lengths, 10, 4).tolist() == [0, 0, 0, -0.25, -0.5, -0.75, -1, -1]
    assert overlong_penalty(lengths, 10, 4, factor=0.5).tolist() == [0, 0, 0, -0.125, -0.25, -0.375, -0.5, -0.5]
    assert overlong_penalty(lengths, 10, 0).tolist() == [0] * 8  # off
    assert overlong_penalty(lengths, 10, 4).dtype == torch.float32


def test_the_overlong_penalty_is_verls_up_to_the_budget():
    """verl's DAPORewardManager: reward += min(-(|y| - (L_max - L_cache)) / L_cache * factor, 0)."""
    for L_max, L_cache, factor in [(48, 8, 1.0), (20, 19, 0.3), (2048, 512, 2.0)]:
        lengths = torch.arange(L_max + 1)
        verl = [min(-(n - (L_max - L_cache)) / L_cache * factor, 0) for n in range(L_max + 1)]
        assert overlong_penalty(lengths, L_max, L_cache, factor).tolist() == pytest.approx(verl, abs=1e-6)


def test_the_penalty_moves_the_advantages_not_the_rewards(monkeypatch):
    """Two groups of 2, all wrong (reward 0), of 3 and 8 tokens, and right, of 8 and 8 tokens; budget 8,
    buffer 4: penalties 0, -1 and -1, -1. The first group gets advantages +0.5 / -0.5; the second none;
    batch.rewards (accuracy, dynamic sampling) stay the task's."""
    from test_train import fake_run
    lengths, rewards = [3, 8, 8, 8], [0.0, 0.0, 1.0, 1.0]

    def sample_round(run, problems, step, r, n):
        mask = torch.arange(8)[None, :] < torch.tensor(lengths)[:, None]
        tokens = torch.ones(4, 8, dtype=torch.long)
        return Rollout(torch.ones(4, 1, dtype=torch.long), torch.ones(4, 1, dtype=torch.bool), tokens,
                       torch.zeros(4, 8), mask, torch.ones(4, dtype=torch.bool), torch.tensor(rewards))
    monkeypatch.setattr(train, "sample_round", sample_round)
    batch, _ = train.rollout(fake_run(0, 2, max_new_tokens=8, overlong_buffer=4), None, 0)
    assert batch.rewards.tolist() == rewards
    assert batch.advantages.tolist() == [0.5, -0.5, 0.0, 0.0]
    batch, _ = train.rollout(fake_run(0, 2, max_new_tokens=8), None, 0)  # off: no signal in either group
    assert batch.advantages.tolist() == [0.0, 0.0, 0.0, 0.0]
