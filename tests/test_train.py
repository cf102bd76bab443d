"""train.py end to end on the shipped tiny policy (a few steps), its checks, and its error lines."""
import json
import math
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import train
from nanoatr.data import Shard
from nanoatr.rollout import Rollout
from nanoatr import loss
from nanoatr.machinery import step_metrics
from nanoatr.methods import METHODS, needs
from nanoatr.rewards import Rewards
from conftest import error_line, jsonl, strict_file
from rounding import sampled_logprob_error, within

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from same_run import wall_clock  # noqa: E402  (what differs between any two runs)
FAST = ["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(ROOT / "data/arith/train.jsonl"),
        "--eval-data", str(ROOT / "data/arith/heldout.jsonl"), "--eval-limit", "4", "--eval-k", "2",
        "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "40", "--no-compile"]


def run(tmp_path, *args):
    train.main([*FAST, "--out-dir", str(tmp_path), *args])
    return jsonl(tmp_path / args[args.index("--name") + 1] / "metrics.jsonl")


def test_log_completions_writes_each_steps_completions_to_samples_jsonl(tmp_path):
    """--log-completions N (TRL's log_completions): N of each step's completions in samples.jsonl, beside the
    evaluation's samples, with the prompt, each function's reward, the total and the verdict; the metrics
    line stays numbers."""
    rows = run(tmp_path, "--name", "c", "--steps", "2", "--log-completions", "3")
    samples = jsonl(tmp_path / "c/samples.jsonl")
    rollout = [s for s in samples if s.get("rollout")]
    assert [s["step"] for s in rollout] == [1, 1, 1, 2, 2, 2]
    assert all("eval" in s for s in samples if not s.get("rollout")), "the evaluation's samples as before"
    for s in rollout:
        assert isinstance(s["prompt"], str) and s["prompt"] and isinstance(s["completion"], str)
        assert s["reward/math_reward"] == s["reward"] and s["correct"] == (s["reward"] > 0)
    assert not any("completions" in r for r in rows)


def test_run_writes_config_metrics_checkpoint(tmp_path, capsys):
    rows = run(tmp_path, "--name", "a", "--steps", "2", "--lr", "1e-3", "--eval-every", "2")
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step 2: heldout ")]
    assert len(said) == 1 and "% (from " in said[0]  # the last evaluation, once, beside step 0's
    run_dir = tmp_path / "a"
    cfg = strict_file(run_dir / "config.json")
    assert cfg["clip"] == "kl3" and cfg["hparams"] == {"delta": 0.07}
    steps = [r for r in rows if "reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert {"reward_mean", "accuracy", "entropy", "completion_len", "truncated", "groups_all_correct", "kl3",
            "groups_all_wrong", "clip_frac_low", "clip_frac_high", "ratio_min", "ratio_max", "grad_norm",
            "time_rollout", "time_train"} <= steps[0].keys()
    evals = [r for r in rows if "eval/mean@2" in r]
    assert [r["step"] for r in evals] == [0, 2]
    for r in evals:  # each of the 4 problems' correct samples of 2: Mean@2 and Pass@2 follow exactly
        counts = r["eval/heldout/correct"]
        assert len(counts) == 4 and r["eval/heldout/mean@2"] == 100 * (sum(c / 2 for c in counts) / 4)
        assert r["eval/heldout/pass@2"] == 100 * (sum(c > 0 for c in counts) / 4)
    assert not any(s.get("rollout") for s in jsonl(run_dir / "samples.jsonl"))  # no --log-completions: none
    assert all((run_dir / "checkpoint" / f).is_file() for f in ("model.safetensors", "tokenizer.json"))
    # several optimizer steps per rollout: after the first, the policy has moved off pi_old
    assert steps[0]["ratio_max"] > 1.0 or steps[0]["ratio_min"] < 1.0


def test_a_run_stopped_by_sigterm_and_resumed_is_the_unbroken_run_exactly(tmp_path, monkeypatch):
    """2 steps of 4 AdamW steps (--minibatches 2 --epochs 2), cosine after a warmup, an evaluation each step:
    stopped by a SIGTERM in step 1 (it finishes the step, saves it, exits 143) and resumed with --resume alone,
    the run equals the unbroken one exactly, not to a tolerance: every value logged but the wall-clock ones
    (the evaluations' per-problem counts among them), the final weights and AdamW's moments and step count."""
    data = tmp_path / "train16.jsonl"  # start-up checks every prompt's length: 16, not 4096, each sitting
    data.write_text("".join((ROOT / "data/arith/train.jsonl").read_text().splitlines(keepends=True)[:16]))
    args = ["--data", str(data), "--steps", "2", "--minibatches", "2", "--epochs", "2", "--lr", "1e-3",
            "--lr-scheduler", "cosine", "--warmup-steps", "3", "--eval-every", "1"]
    whole, grpo_step = run(tmp_path, "--name", "whole", *args), train.grpo_step

    def sigterm_in_step_1(r, problems, step):
        if step == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return grpo_step(r, problems, step)
    monkeypatch.setattr(train, "grpo_step", sigterm_in_step_1)
    with pytest.raises(SystemExit) as stopped:
        run(tmp_path, "--name", "part", *args)
    monkeypatch.undo()
    assert stopped.value.code == 143 and strict_file(tmp_path / "part/checkpoint/manifest.json")["step"] == 1
    train.main(["--resume", str(tmp_path / "part")])
    logged = [[{k: v for k, v in r.items() if not wall_clock(k)} for r in rows]
              for rows in (whole, jsonl(tmp_path / "part/metrics.jsonl"))]
    assert logged[0] == logged[1] and [r["step"] for r in logged[0]] == [0, 1, 1, 2, 2]
    (weights, adam), (weights_part, adam_part) = [
        (load_file(tmp_path / name / "checkpoint/model.safetensors"),
         torch.load(tmp_path / name / "checkpoint/trainer_state.pt")["optimizer"]) for name in ("whole", "part")]
    torch.testing.assert_close(weights_part, weights, rtol=0, atol=0)  # equal: every weight, every bit
    torch.testing.assert_close(adam_part["state"], adam["state"], rtol=0, atol=0)  # Adam's step and moments
    assert adam_part["param_groups"] == adam["param_groups"]


def test_a_run_saving_every_n_steps_saves_at_its_multiples_and_its_end(tmp_path):
    """--save-every 2 over 5 steps: checkpoints of steps 2, 4 and 5 (the last), none of 1 or 3."""
    run(tmp_path, "--name", "s", "--steps", "5", "--save-every", "2", "--keep-checkpoints", "5")
    manifests = (tmp_path / "s").glob("checkpoint*/manifest.json")
    assert sorted(strict_file(m)["step"] for m in manifests) == [2, 4, 5]


def test_sampler_check_fails_loudly():
    logp, mask = torch.zeros(2, 3), torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    assert train.check_sampler_agrees(logp, logp + 1e-6, mask, "float32") == pytest.approx(1e-6)
    shifted = logp.clone()
    shifted[0, 2] = 5.0  # a padding slot: not compared
    assert train.check_sampler_agrees(logp, shifted, mask, "float32") == 0.0
    with pytest.raises(RuntimeError, match="differ from the sampler"):
        train.check_sampler_agrees(logp, logp + 0.1, mask, "float32")
    assert train.check_sampler_agrees(logp, logp + 0.1, mask, "bfloat16") == pytest.approx(0.1)  # logged only


def test_first_minibatch_is_scored_once_and_ratios_start_at_one(tmp_path, monkeypatch):
    """pi_old's log-probs of the first minibatch come from its own update forward: the no-grad pass
    scores only the other rows, and the first minibatch's ratios are exactly 1."""
    scored, ratios = [], []
    import nanoatr.scoring
    real_score, real_loss = nanoatr.scoring.score, train.policy_loss

    def counting_score(model, prompt_ids, *args, **kw):
        if not torch.is_grad_enabled():
            scored.append(len(prompt_ids))
        return real_score(model, prompt_ids, *args, **kw)

    def recording_loss(method, logp, old_logp, *args, **kw):
        ratios.append((logp.detach() - old_logp).abs().max().item())
        return real_loss(method, logp, old_logp, *args, **kw)

    monkeypatch.setattr(nanoatr.scoring, "score", counting_score)
    monkeypatch.setattr(train, "policy_loss", recording_loss)
    # The policy in float64, so that the sampler-vs-trainer gap has a bound from arithmetic (in float32 the
    # two forwards' rounding has none that is not tuned to one CPU): the largest logit the sampler saw, and
    # whether the gap was measured at all
    import nanoatr.rollout
    from nanoatr.model import Qwen3
    load, real_logprobs, real_check = Qwen3.from_pretrained.__func__, nanoatr.rollout.sampling_logprobs, \
        train.check_sampler_agrees
    seen = {"z_max": 0.0, "V": 0, "checked": 0, "config": None}

    def float64_model(cls, path, dtype=None, device="cpu"):
        model = load(cls, path, torch.float64, device)
        seen["config"] = model.config
        return model

    def recording_logprobs(logits, temperature):
        seen["z_max"] = max(seen["z_max"], float(logits.abs().max()))
        seen["V"], seen["T"] = logits.shape[-1], temperature
        return real_logprobs(logits, temperature)

    def counting_check(*args):
        seen["checked"] += 1
        return real_check(*args)
    monkeypatch.setattr(Qwen3, "from_pretrained", classmethod(float64_model))
    monkeypatch.setattr(nanoatr.rollout, "sampling_logprobs", recording_logprobs)
    monkeypatch.setattr(train, "check_sampler_agrees", counting_check)
    rows = run(tmp_path, "--name", "once", "--steps", "1", "--minibatches", "4", "--epochs", "2",
               "--prompts-per-step", "4", "--group-size", "4")
    assert sum(scored) == 16 - 4  # 16 rows, the first minibatch's 4 not rescored
    assert ratios[0] == 0.0 and max(ratios[1:]) > 0  # later minibatches see the updated policy
    gap = [r for r in rows if "loss" in r][0]["sampler_logp_gap_max"]
    # The KV-cache sampler and the training forward agree to rounding: two float64 forwards of one Qwen3
    # (rounding.qwen3_float64), the sampler's log-softmax in float32, the trainer's in float64 (scoring keeps
    # float64; sampled_logprob_error counts two float32 ones, more than that). No "0 <": the gap is exactly
    # 0 whenever each float64 log-prob happens to be a float32 number, which nothing rules out; that it was
    # measured is checked instead.
    assert seen["checked"] > 0
    within(gap, 0.0, sampled_logprob_error(seen["config"], seen["z_max"], seen["V"], seen["T"]),
           "sampler vs trainer log-probs, float64 policy")


def step_run(clip: str, reuse_first_forward: bool):
    """A Run on the shipped tiny policy and a real batch of its samples: 4 prompts x 4 completions, 2
    minibatches x 2 epochs, micro-batches of 3 (so they do not divide a minibatch's 8 rows)."""
    import contextlib
    import grpo
    from nanoatr.machinery.flags import TrainConfig, resolve
    from nanoatr.data import TASKS, load_problems
    from nanoatr.machinery.distributed import Dist
    from nanoatr.model import Qwen3
    from nanoatr.scoring import Scorer
    from nanoatr.tokenizer import load_tokenizer
    task = TASKS["math"]
    model, tok = Qwen3.from_pretrained(task.model), load_tokenizer(task.model)
    batch = grpo.rollout(model, tok, load_problems(task.data, limit=4), 4, 48, Rewards.of(task.reward),
                         torch.Generator().manual_seed(0))
    assert batch.advantages.abs().sum() > 0, "a batch with something to learn"
    cfg = resolve(TrainConfig(prompts_per_step=4, group_size=4, minibatches=2, epochs=2, micro_batch=3,
                              max_new_tokens=48, compile=False, clip=clip, lr=1e-3), {})
    trained = list(model.parameters())
    opt = train.make_optimizer(cfg, trained)
    return train.Run(cfg, model, Scorer(model, contextlib.nullcontext), opt, trained, tok, [], None,
                     Rewards.of(task.reward), Shard(cfg.seed, 4, 4, 4), Dist(0, 1, torch.device("cpu")),
                     contextlib.nullcontext, reuse_first_forward=reuse_first_forward), batch


def watch_scorer(run) -> list:
    """run.scorer wrapped to log each forward as (gradient enabled, rows); returns the log."""
    scorer, log = run.scorer, []

    def scored(prompt_ids, *args, **kw):
        log.append((torch.is_grad_enabled(), len(prompt_ids)))
        return scorer(prompt_ids, *args, **kw)
    run.scorer = scored
    return log


@pytest.mark.parametrize("clip", ["kl3", "kl-full"])  # kl-full: pi_old's hidden states are kept too
def test_reusing_the_first_forward_for_pi_old_changes_no_number(clip):
    """pi_old of the first minibatch's rows taken from its own update's forward (reuse_first_forward, the
    default) or scored by old_logprobs like every other row: the same losses, metrics, grad norms,
    gradients and weights after the step, bit for bit. Both are the training forward over the same
    micro-batches, on the same weights (no optimizer step has run yet); recording the graph for backward
    does not change a forward's numbers. Only the count of forwards differs."""
    outs = []
    for reuse in (True, False):
        run, batch = step_run(clip, reuse)
        start = [p.detach().clone() for p in run.trained]
        log = watch_scorer(run)
        updates = train.optimize(run, batch, step=0)
        no_grad_rows = sum(rows for grad, rows in log if not grad)
        outs.append((updates, [p.grad for p in run.trained], [p.detach() for p in run.trained], no_grad_rows))
    (updates, grads, weights, scored), (updates_, grads_, weights_, scored_) = outs
    assert (scored, scored_) == (8, 16)  # the first minibatch's 8 rows are not rescored under reuse
    assert updates == updates_  # every loss, metric (the sampler gap too) and grad norm, as floats
    assert all(torch.equal(g, g_) for g, g_ in zip(grads, grads_))
    assert all(torch.equal(w, w_) for w, w_ in zip(weights, weights_))
    assert any(not torch.equal(w, w0) for w, w0 in zip(weights, start))  # the step did move the weights
    assert max(s["ratio_max"] for u in updates[1:] for s in u["stats"]) > 1  # later updates: off-policy


@pytest.mark.parametrize("reuse", [True, False])
def test_pi_old_is_a_constant_of_the_step(reuse):
    """old_logprobs scores without building a graph, and pi_old's table (log-probs, and hidden states for
    kl-full) never requires a gradient, also after the first update filled its rows under reuse."""
    run, batch = step_run("kl-full", reuse)
    minibatches = run.shard.minibatches(0, run.cfg.epochs, run.cfg.minibatches)
    log = watch_scorer(run)
    old = train.old_logprobs(run, batch, minibatches[1:2] if reuse else minibatches[:2])
    assert log and not any(grad for grad, _ in log), "old_logprobs ran a forward that records a graph"
    ref = None if reuse else old.logp - 0.5  # pi_ref = e^-0.5 pi_old at every token (--beta's kl_ref below)
    stats = train.update(run, batch, old, ref, minibatches[0], run.shard.noise(0), on_policy=True,
                         keep_old=reuse)["stats"]
    if not reuse:  # on policy w = 1: each token's penalty k3 = e^-0.5 - 1 + 0.5, kl_ref their token mean, to
        # float32's rounding of ref - logp (an ulp of |log p| + 0.5; k3' < 1) and of a sum of 3 x 48 terms
        k3, top = math.exp(-0.5) - 0.5, float(old.logp.abs().max()) + 0.5
        assert all(abs(s["kl_ref"] - k3) <= 2 ** -23 * (top + 3 * 48 * k3) for s in stats)
    assert (old.logp[minibatches[0]] != 0).any()  # the first minibatch's rows are filled either way
    for name, table in (("log-probs", old.logp), ("hidden states", old.hidden)):
        assert not table.requires_grad and table.grad_fn is None, f"pi_old's {name} carry a gradient"


def test_sampler_flag_reaches_rollout_and_evaluation(tmp_path, monkeypatch):
    import nanoatr.evaluate
    used = []

    def recording(generate):
        return lambda *a, **kw: used.append(kw["sampler"]) or generate(*a, **kw)

    monkeypatch.setattr(train, "generate", recording(train.generate))
    monkeypatch.setattr(nanoatr.evaluate, "generate", recording(nanoatr.evaluate.generate))
    run(tmp_path, "--name", "icdf", "--steps", "1", "--sampler", "multinomial")  # not the default
    assert used and set(used) == {"multinomial"}  # rollouts and both evaluations
    assert strict_file(tmp_path / "icdf/config.json")["sampler"] == "multinomial"


def test_prompt_order_visits_every_problem_once_per_pass():
    order = [Shard(1, 4, 4, 2).problems(20, step, 0, 4) for step in range(6)]
    assert sorted(i for step in order[:5] for i in step) == list(range(20))
    assert order[0] == [15, 5, 11, 14] and order[5] == [4, 7, 15, 18]  # pinned: resumed runs rely on it


@pytest.mark.parametrize("args, message", [
    (["--clip", "nope"], "invalid choice: 'nope'"), (["--delta", "-1"], "--delta"),
    (["--delta", "0"], "--delta"), (["--steps", "0"], "--steps must be >= 1"),
    (["--clip", "clip", "--delta", "0.1"], "--delta does not apply to --clip clip"),
    (["--model", "/nonexistent/dir"], "--model /nonexistent/dir: no such directory"),
    (["--minibatches", "3"], "--minibatches 3 must divide"),
    (["--group-size", "1"], "--group-size must be >= 2 (got 1)"),  # not the loss's ValueError mid-step
    (["--max-new-tokens", "300"],
     "error: --max-new-tokens 300 does not fit the model's 256 positions (max_position_embeddings)"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, message):
    assert message in error_line(capsys, train.main, [*FAST, "--out-dir", str(tmp_path), "--steps", "1",
                                                      *args])
    assert not any(tmp_path.iterdir()), "refused before a run folder is made"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_trains_end_to_end(tmp_path, method):
    rows = run(tmp_path, "--name", "m", "--steps", "1", "--clip", method, "--lr", "1e-3", "--eval-limit", "1")
    step = [r for r in rows if "loss" in r][0]
    assert all(v == v for v in step.values() if isinstance(v, float)), "no NaN in the metrics"
    if needs(method, "full_kl"):
        assert step["full_kl"] >= 0  # the full-vocabulary KL reached the method


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_stops_after_the_step_and_saves_it(tmp_path, sig, code):
    """Ctrl-C or SIGTERM: the step in progress finishes, is logged and saved; one line; exit 128 + signal.
    Nothing done is lost: the checkpoint is at the last logged step (resumed from it, the run goes on as an
    unbroken one: test_a_run_stopped_by_sigterm_and_resumed_is_the_unbroken_run_exactly)."""
    import subprocess
    import time
    from nanoatr.model import Qwen3
    cmd = [sys.executable, str(ROOT / "train.py"), *FAST, "--out-dir", str(tmp_path), "--name", "c",
           "--steps", "1000", "--save-every", "500"]
    # A shell's background job (CI scripts, `cmd &`) inherits SIGINT ignored, and Python then installs
    # no KeyboardInterrupt handler: give the child the default disposition, as a terminal would.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    metrics = tmp_path / "c/metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        time.sleep(0.2)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=300)  # generous: on a loaded machine one step can take many seconds
    assert proc.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: stopped by {sig} after step ") and "checkpoint saved" in last, err
    assert "Traceback" not in err
    rows = jsonl(metrics)  # every line is whole
    steps = [r["step"] for r in rows if "loss" in r]
    ckpt = tmp_path / "c/checkpoint"
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    assert state["step"] == steps[-1] == int(last.split("after step ")[1].split(";")[0]) >= 2
    Qwen3.from_pretrained(ckpt)


@pytest.mark.parametrize("case, message", [
    ("not qwen3", "model_type 'llama'; nanoatr runs 'qwen3' models"),
    ("missing shard", "shard model-00002-of-00002.safetensors named in model.safetensors.index.json is missing"),
    ("no eos", "has no EOS token"),
    ("truncated weights", "model.safetensors is not a readable"),
])
@pytest.mark.parametrize("command", ["train", "eval"])
def test_bad_model_directory_is_one_line(tmp_path, capsys, case, message, command):
    from safetensors.torch import load_file, save_file
    from tiny import make_model_dir
    path = make_model_dir(tmp_path / "m", {"eos_token": None} if case == "no eos" else None)
    if case == "not qwen3":
        config = strict_file(path / "config.json")
        (path / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    elif case == "missing shard":  # a sharded checkpoint whose second shard was never downloaded
        state = load_file(path / "model.safetensors")
        names = sorted(state)
        save_file({k: state[k] for k in names[:5]}, path / "model-00001-of-00002.safetensors")
        (path / "model.safetensors").unlink()
        index = {n: f"model-0000{1 if i < 5 else 2}-of-00002.safetensors" for i, n in enumerate(names)}
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
    elif case == "truncated weights":
        (path / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes()[:-100])
    import eval as eval_cli
    main, argv = (train.main, [*FAST, "--model", str(path), "--out-dir", str(tmp_path), "--steps", "1"]) \
        if command == "train" else (eval_cli.main, ["--model", str(path), "--out", str(tmp_path / "o.jsonl")])
    assert message in error_line(capsys, main, argv)


# ----------------------------------------------------------------------------
# --dynamic-sampling

def draws_of(rewards_by_round):
    """draw(r, n) for loss.dynamic_sampling: round r's first n groups (G = 2) of hand-built rewards; and
    the calls it got."""
    from types import SimpleNamespace
    calls = []

    def draw(r, n):
        calls.append((r, n))
        return SimpleNamespace(rewards=torch.tensor(rewards_by_round[r][:2 * n], dtype=torch.float32))
    return draw, calls


def test_dynamic_sampling_draws_again_only_while_a_slot_is_uniform_and_rounds_are_left():
    as_drawn = [(0, 0), (0, 1), (0, 2)]
    draw, calls = draws_of([[1, 0, 0, 1, 1, 0]])  # every group mixed: nothing to refill
    assert loss.dynamic_sampling(draw, 3, 2, max_rounds=5)[1] == as_drawn and calls == [(0, 3)]
    uniform = [[1, 1, 0, 1, 0, 0], [1, 1, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0], [0, 1] * 3]
    draw, calls = draws_of(uniform)  # rounds 1 and 2 hold no mixed group: after K = 2 the slots keep theirs
    assert loss.dynamic_sampling(draw, 3, 2, max_rounds=2)[1] == as_drawn
    assert calls == [(0, 3), (1, 3), (2, 3)]
    draw, calls = draws_of(uniform)  # K = 0 (no --dynamic-sampling): one round, as drawn
    assert loss.dynamic_sampling(draw, 3, 2, max_rounds=0)[1] == as_drawn and calls == [(0, 3)]


def test_uniform_groups_are_those_with_one_reward():
    rewards = torch.tensor([1., 1., 1., 0., 0., 0., 1., 0., 0.5, 0.5, 0.5])[:9]  # groups of 3
    assert loss.uniform_groups(rewards, 3) == [0, 1]
    assert loss.uniform_groups(torch.tensor([0., 1., 1., 1.]), 2) == [1]


def fake_rounds(monkeypatch, rewards_by_round):
    """sample_round replaced: round r's group g holds tokens [[r, g, row]] and the given rewards."""
    calls = []

    def sample_round(run, problems, step, r, n):
        calls.append((r, n))
        rewards = torch.tensor(rewards_by_round[r][:n * 2], dtype=torch.float32)
        N = len(rewards)
        tokens = torch.tensor([[r, i // 2, i % 2] for i in range(N)])[:, :2 + r % 2]  # rounds of other lengths
        prompts = torch.tensor([[100 + r, i // 2] for i in range(N)])
        return Rollout(prompts, torch.ones_like(prompts, dtype=torch.bool), tokens, torch.zeros(tokens.shape),
                       torch.ones_like(tokens, dtype=torch.bool), torch.ones(N, dtype=torch.bool), rewards)
    monkeypatch.setattr(train, "sample_round", sample_round)
    return calls


def fake_run(k, prompts=3, **flags):
    """A train.Run of no model: --dynamic-sampling k, `prompts` prompts a step in groups of 2, and flags."""
    from nanoatr.machinery.flags import TrainConfig
    from nanoatr.machinery.distributed import Dist
    cfg = TrainConfig(prompts_per_step=prompts, group_size=2, dynamic_sampling=k, **flags)
    tok = type("Tok", (), {"pad_token_id": 0})()
    return train.Run(cfg, model=None, scorer=None, opt=None, trained=[], tok=tok, eos_ids=[], stopper=None,
                     rewards=None, shard=Shard(cfg.seed, prompts, prompts, 2),
                     d=Dist(0, 1, torch.device("cpu")), precision=None)


def test_dynamic_sampling_replaces_uniform_groups_in_order(monkeypatch):
    # round 0: groups 0 and 2 uniform; round 1: only its group 1 mixed -> fills slot 0; round 2: group 0
    # mixed -> slot 2; no round 3 is drawn since every slot is then mixed
    calls = fake_rounds(monkeypatch, [[1, 1, 0, 1, 0, 0], [0, 0, 1, 0, 1, 1], [1, 0, 0, 1, 0, 0], [0, 1] * 3])
    b, draws = train.rollout(fake_run(5), None, 0)
    assert calls == [(0, 3), (1, 3), (2, 2)]  # round 2: 2 x the one group left
    assert draws["rounds"] == 3
    assert b.tokens[:, :2].tolist() == [[1, 1], [1, 1], [0, 1], [0, 1], [2, 0], [2, 0]]  # (round, group) of each row
    assert b.rewards.tolist() == [1, 0, 0, 1, 1, 0]
    assert b.advantages.tolist() == [0.5, -0.5, -0.5, 0.5, 0.5, -0.5]
    assert draws["first"].rewards.tolist() == [1, 1, 0, 1, 0, 0]
    assert b.tokens.shape[1] == 3  # padded to the longest round (round 1's) with masked tokens
    assert b.mask[:, 2].tolist() == [True, True, False, False, False, False] and b.mask[:, :2].all()
    assert b.prompt_ids[:, -2].tolist() == [101, 101, 100, 100, 102, 102]


@pytest.mark.parametrize("k, rewards_by_round, calls, groups, advantages", [
    (1, [[1, 1, 0, 1, 0, 0], [1, 1, 1, 0, 1, 1], [0, 1] * 3], [(0, 3), (1, 3)],  # slot 2 stays uniform
     [[1, 1], [1, 1], [0, 1], [0, 1], [0, 2], [0, 2]], [0.5, -0.5, -0.5, 0.5, 0, 0]),
    (0, [[1, 1, 0, 0, 0, 0]], [(0, 3)],  # no --dynamic-sampling: one round, nothing of it in the metrics
     [[0, 0], [0, 0], [0, 1], [0, 1], [0, 2], [0, 2]], [0] * 6)], ids=["k=1", "k=0"])
def test_dynamic_sampling_stops_after_k_rounds_and_keeps_what_is_left(monkeypatch, k, rewards_by_round, calls,
                                                                      groups, advantages):
    drawn = fake_rounds(monkeypatch, rewards_by_round)
    b, draws = train.rollout(fake_run(k), None, 0)
    assert drawn == calls and b.tokens[:, :2].tolist() == groups and b.advantages.tolist() == advantages
    assert draws["rounds"] == len(calls) if k else draws == {}


def test_group_metrics_follow_the_accuracy_rule_under_any_reward():
    """Groups of 2 with non-0/1 rewards: correct means reward > 0 (as `accuracy`), zero std all equal."""
    rewards = torch.tensor([0.5, 0.5, 2, 0, -1, -1, 0, 0, 1, 2, -1, 0])
    # groups: [.5 .5] all correct, equal; [2 0] mixed; [-1 -1] all wrong, equal; [0 0] all wrong, equal;
    #         [1 2] all correct; [-1 0] all wrong
    n = len(rewards)
    batch = Rollout(torch.zeros(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.bool),
                    torch.zeros(n, 1, dtype=torch.long), torch.zeros(n, 1), torch.ones(n, 1, dtype=torch.bool),
                    torch.ones(n, dtype=torch.bool), rewards, torch.zeros(n))
    update = {"losses": [0.0], "grad_norm": 0.0, "lr": 1e-6, "stats": [{"_tokens": 1.0, "kl3": 0.0}]}
    row = step_metrics.metrics_line(fake_run(0), batch, [update], {}, {"time_rollout": 1.0, "time_train": 1.0})
    assert row["accuracy"] == pytest.approx(5 / 12)  # .5 .5 2 1 2
    assert row["groups_all_correct"] == pytest.approx(2 / 6)  # [.5 .5], [1 2]
    assert row["groups_all_wrong"] == pytest.approx(3 / 6)  # [-1 -1], [0 0], [-1 0]
    assert row["groups_zero_std"] == pytest.approx(3 / 6)  # [.5 .5], [-1 -1], [0 0]


def test_own_data_without_eval_data_is_refused(tmp_path, capsys):
    """--data mine.jsonl alone would evaluate the embedded arithmetic set and log it as held out: one error
    line naming --eval-data, and no run folder; --eval-data with no file trains with no evaluation. (One
    update per rollout: a warning that the ratio is exactly 1.)"""
    err = error_line(capsys, train.main, ["--data", str(ROOT / "data/arith/train.jsonl"), "--steps", "1",
                                          "--out-dir", str(tmp_path), "--name", "mine"])
    assert err.startswith("error: --data ") and "needs --eval-data" in err
    assert not (tmp_path / "mine").exists()
    train.main(["--data", str(ROOT / "data/arith/train.jsonl"), "--eval-data", "--steps", "1",
                "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8", "--no-compile",
                "--out-dir", str(tmp_path), "--name", "none", "--minibatches", "1"])
    assert "the ratio is exactly 1" in capsys.readouterr().err
    rows = jsonl(tmp_path / "none/metrics.jsonl")
    assert [r["step"] for r in rows] == [1] and not [k for k in rows[0] if k.startswith("eval/")]
