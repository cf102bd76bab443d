"""grpo.py, the one-file GRPO a student reads first, computes train.py's step: on the same batch, the
same minibatches and the same starting weights, the same losses and gradients, minibatch after
minibatch, to float64 rounding (train.py scores micro-batches cut to their own length and takes the
first minibatch's pi_old from its own forward; grpo.py does neither). Both sides step with plain SGD
here: AdamW divides by the root of each gradient's square, which turns the rounding noise of
near-zero gradients into whole steps, and the optimizer is torch's, not what is compared."""
import contextlib
import copy

import pytest
import torch

import grpo
import train
from nanoatr.machinery.flags import TrainConfig, check_hparams, resolve
from nanoatr.data import TASKS, Shard, load_problems
from nanoatr.machinery.distributed import Dist
from nanoatr.model import Qwen3
from nanoatr.rewards import Rewards
from nanoatr.scoring import Scorer
from nanoatr.tokenizer import load_tokenizer, eos_token_ids


# Both sides compute the same step in float64, where the order of a sum cannot decide the test. A reduction of
# n terms in unit roundoff u = 2^-53 errs by at most n*u*sum|x| (Higham, Accuracy and Stability of Numerical
# Algorithms, ch. 4); the longest reductions here are under 2^14 terms (rows x positions x width), about ten
# follow one another from the weights to a gradient, and taking cancellation (sum|x| / |sum x|) under 2^10,
# two orderings agree within 10 * 2^14 * 2^-53 * 2^10 ~ 2e-11 of the largest entry. RTOL = 1e-9 leaves a
# factor 50 above that, and sits far below float32's own rounding (6e-8), let alone a wrong formula (one
# token clipped differently moves a gradient by ~1e-3). Qwen3's RMSNorm and RoPE angles stay float32 even in
# a float64 model, but both sides run them on the same rows with the same code, so they round alike.
# Measured on AMD EPYC: 1.2e-14 (gradients), 3e-16 (weights).
RTOL = 1e-9


def close(a, b, rel=RTOL, atol=0.0):
    return (a - b).abs().max() <= rel * b.abs().max() + atol


@pytest.mark.parametrize("clip", ["kl3", "gspo"])  # a token-level rule and a sequence-level one
def test_grpo_py_computes_train_py_step(clip):
    task = TASKS["math"]
    model, tok = Qwen3.from_pretrained(task.model), load_tokenizer(task.model)
    problems = load_problems(task.data, limit=4)
    batch = grpo.rollout(model, tok, problems, 4, 48, Rewards.of(task.reward), torch.Generator().manual_seed(0))
    assert 0 < batch.rewards.mean() < 1 and batch.advantages.abs().sum() > 0, "a batch with something to learn"
    model.double()  # the same computation on both sides: compared in float64 (see RTOL)
    twin = copy.deepcopy(model)
    cfg = resolve(TrainConfig(prompts_per_step=4, group_size=4, minibatches=2, epochs=2, max_new_tokens=48,
                              compile=False, clip=clip, lr=30.0), {})  # SGD, a large step: later minibatches move off-policy
    trained = list(twin.parameters())
    run = train.Run(cfg, twin, Scorer(twin, contextlib.nullcontext), torch.optim.SGD(trained, lr=cfg.lr), trained, tok,
                    eos_token_ids(tok), None, Rewards.of(task.reward), Shard(cfg.seed, 4, 4, 4), Dist(0, 1, torch.device("cpu")),
                    contextlib.nullcontext)
    minibatches = run.shard.minibatches(0, cfg.epochs, cfg.minibatches)
    old = train.old_logprobs(run, batch, minibatches[1:cfg.minibatches])  # the first update: its own rows
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    old_logp = grpo.old_logprobs(model, batch)
    hparams = check_hparams(clip)
    ratios_moved = False
    for i, rows in enumerate(minibatches):
        theirs = train.update(run, batch, old, None, rows, run.shard.noise(0), on_policy=i == 0, keep_old=i == 0)
        loss, metrics = grpo.update(model, opt, batch, old_logp, rows, clip, hparams, cfg.max_new_tokens)
        assert loss == pytest.approx(theirs["losses"][0], rel=RTOL, abs=RTOL), (clip, i)
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            assert close(p.grad, q.grad), (clip, i, name)
            # each SGD step moves a weight by lr x its gradient, clipped to norm <= 1: the steps so far add at
            # most lr x RTOL apiece to the weights' difference, beside u of the weight itself
            assert close(p.detach(), q.detach(), rel=2 ** -52, atol=(i + 1) * cfg.lr * RTOL), (clip, i, name)
        ratios_moved |= float(metrics["ratio_max"]) > 1.001 or float(metrics["ratio_min"]) < 0.999
    assert ratios_moved, "the later minibatches were off-policy: the rule itself was compared, not only w = 1"


def test_grpo_py_runs_from_any_folder(tmp_path, monkeypatch, capsys):
    """From another folder it reads the repository's own model and problems (data.located), as train.py does.
    The whole path (a blank update, exercise 12, fails it): held-out accuracy on 64 problems x 4 drawn at seed
    1, before and after; the steps drawn from --seed (0); AdamW's settings; every 10th step's line."""
    monkeypatch.chdir(tmp_path)
    drawn, opts, real_rollout, real_update = [], [], grpo.rollout, grpo.update
    def rollout(model, tok, problems, G, *args):
        drawn.append((len(problems), G, args[-1].initial_seed()))
        return real_rollout(model, tok, problems, G, *args)
    def update(model, opt, *args):
        opts.append(opt.defaults)
        loss, metrics = real_update(model, opt, *args)
        return loss, metrics | {"clip_frac_low": torch.tensor(0.25), "clip_frac_high": torch.tensor(0.125)}
    monkeypatch.setattr(grpo, "rollout", rollout)
    monkeypatch.setattr(grpo, "update", update)
    grpo.main(["--steps", "10", "--prompts", "1", "--group-size", "2"])
    first, step, last = capsys.readouterr().out.splitlines()
    assert first.startswith("held-out accuracy ") and "--clip kl3" in first and last.startswith("held-out accuracy ")
    assert step.startswith("step 10: reward ") and ", tokens cut 37.50%, loss " in step
    assert drawn == [(64, 4, 1)] + [(1, 2, 0)] * 10 + [(64, 4, 1)] and len(opts) == 20
    assert all((o["lr"], o["betas"], o["weight_decay"]) == (1e-4, (0.9, 0.99), 0.0) for o in opts)
