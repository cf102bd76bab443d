"""A run that diverges: a reward, advantage, log-prob, loss, gradient norm or weight that is not finite stops
the step before the optimizer moves on it (loss.check_finite): one `error:` line naming what and at which
step, exit 1, the last checkpoint byte for byte as it was, nothing of the bad step logged or saved. A
checkpoint never holds a NaN or an inf (checkpoint.save refuses one), and one that does (an older nanoatr
wrote them) is one line on --resume and in eval.py, not a traceback from the sampler."""
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import eval as eval_cli
import train
from nanoatr.machinery import checkpoint, session
from nanoatr.machinery.checkpoint import CheckpointError
from nanoatr.data import TASKS, load_problems
from nanoatr.loss import Diverged
from test_checkpoint import names, save, state, tiny  # noqa: F401 (tiny: the fixture)
from test_train import step_run
from conftest import error_line, jsonl, strict_file

ROOT = Path(__file__).resolve().parent.parent

# Finite as a Python float (rewards.py accepts it), inf as the float32 the trainer computes in: from the
# run's second step on (its optimizer steps 2, 3: --minibatches 2).
EXPLODING = """
def exploding(completions, trainer_state, **kwargs):
    return [1e39 if trainer_state.global_step >= 2 else float(i % 2) for i, _ in enumerate(completions)]
"""


def tiny_args(tmp_path: Path) -> list[str]:
    """A tiny run on 16 problems without evaluation: a step takes a second or two."""
    data = tmp_path / "train16.jsonl"
    data.write_text("".join((ROOT / "data/arith/train.jsonl").read_text().splitlines(keepends=True)[:16]))
    return ["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(data), "--eval-data", "--prompts-per-step",
            "4", "--group-size", "4", "--max-new-tokens", "16", "--no-compile", "--out-dir", str(tmp_path)]


def digests(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_reward_that_goes_inf_at_step_2_stops_the_run_and_keeps_step_1s_checkpoint(tmp_path, monkeypatch,
                                                                                    capsys):
    (tmp_path / "r.py").write_text(EXPLODING)
    saved, real = {}, checkpoint.save

    def spy(run_dir, model, tokenizer_files, state, **kw):  # the checkpoint's bytes as each save left them
        path = real(run_dir, model, tokenizer_files, state, **kw)
        saved[state["step"]] = digests(path)
        return path
    monkeypatch.setattr(session.checkpoint, "save", spy)
    argv = [*tiny_args(tmp_path), "--name", "d", "--steps", "3", "--save-every", "1", "--reward",
            f"{tmp_path / 'r.py'}:exploding"]
    assert error_line(capsys, train.main, argv, 1, mid_run=True) == (
        "error: step 2: a reward is not finite (inf): the run diverged and stops; nothing of step 2 is logged "
        "or saved, and the last checkpoint holds step 1")
    run = tmp_path / "d"
    assert list(saved) == [1] and digests(run / "checkpoint") == saved[1]  # byte for byte
    assert checkpoint.check(run / "checkpoint") == (1, None)
    assert all(w.isfinite().all() for w in load_file(run / "checkpoint/model.safetensors").values())
    rows = jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1]  # step 2 is not logged as if it were fine
    assert not list(run.glob("checkpoint-step*"))


def poisoned(what: str):
    """train.update's pieces, one made non-finite: (what goes wrong, the monkeypatch that does it)."""
    def loss(monkeypatch, run):
        real = train.policy_loss
        monkeypatch.setattr(train, "policy_loss", lambda *a, **kw: (lambda out: (out[0] * torch.nan, out[1]))(
            real(*a, **kw)))

    def grad_norm(monkeypatch, run):
        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, clip: torch.tensor(torch.inf))

    def weight(monkeypatch, run):
        step = run.opt.step
        monkeypatch.setattr(run.opt, "step", lambda: (step(), run.trained[3].data.fill_(torch.inf)))
    return {"the loss": loss, "the gradient norm": grad_norm, "a weight after the optimizer step": weight}[what]


@pytest.mark.parametrize("what, shown", [("the loss", "nan"), ("the gradient norm", "inf"),
                                         ("a weight after the optimizer step", "inf")])
def test_a_loss_gradient_or_weight_that_is_not_finite_stops_before_the_optimizer_moves(monkeypatch, what, shown):
    run, batch = step_run("kl3", True)
    before = [p.detach().clone() for p in run.trained]
    poisoned(what)(monkeypatch, run)
    with pytest.raises(Diverged, match=rf"^step 1: {what} is not finite \({shown}\)$"):
        train.optimize(run, batch, step=0)
    moved = [not torch.equal(p, p0) for p, p0 in zip(run.trained, before)]
    assert any(moved) == (what == "a weight after the optimizer step")  # the loss, the norm: no step taken


def test_a_policy_whose_forward_gives_nan_stops_at_its_rollout_not_in_the_sampler():
    """NaN logits drew an out-of-range index in rollout.locate (a RuntimeError; on a GPU a device-side
    assert): now the draw stays in range and the step stops on the NaN log-prob, before any update."""
    run, _ = step_run("kl3", True)
    run = dataclasses.replace(run, prompt_kw={})
    with torch.no_grad():
        run.model.model.norm.weight.fill_(torch.nan)
    with pytest.raises(Diverged, match=r"^step 1: a log-prob of the policy's tokens is not finite \(nan\)$"):
        train.rollout(run, load_problems(TASKS["math"].data, limit=8), 0)


def test_save_refuses_a_nan_weight_or_optimizer_state_and_keeps_the_checkpoint(tmp_path, tiny):
    model, tok = tiny
    save(tmp_path, tiny, 1)
    before = digests(tmp_path)
    bad_state = state(2)
    bad_state["optimizer"]["state"][0]["exp_avg"][1] = torch.inf
    with pytest.raises(CheckpointError, match=r"^step 2 was not saved: optimizer.state.0.exp_avg holds a NaN or "
                                              r"an inf \(the run diverged\); .* keeps its earlier checkpoints"):
        checkpoint.save(tmp_path, model, tok, bad_state)
    weight = next(model.parameters())
    kept = weight.detach().clone()
    try:
        with torch.no_grad():
            weight[0] = torch.nan
        with pytest.raises(CheckpointError, match=r"^step 3 was not saved: weights\..* holds a NaN or an inf"):
            save(tmp_path, tiny, 3)
    finally:
        with torch.no_grad():
            weight.copy_(kept)
    assert digests(tmp_path) == before and names(tmp_path) == ["checkpoint"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Finished 1-step runs (full fine-tuning, LoRA); each test poisons a copy."""
    out = tmp_path_factory.mktemp("finished")
    args = tiny_args(out)
    train.main([*args, "--name", "full", "--steps", "1"])
    train.main([*args, "--name", "lora", "--steps", "1", "--lora-rank", "2"])
    return out


def poison(ckpt: Path, name: str):
    """A NaN in the checkpoint's file `name` (weights, or the optimizer state), its manifest made to match:
    a checkpoint as an older nanoatr saved one of a diverged run."""
    if name.endswith(".safetensors"):
        tensors = load_file(ckpt / name)
        tensors[sorted(tensors)[-1]][0] = torch.nan  # the embedding (full), a LoRA B
        save_file(tensors, ckpt / name, metadata={"format": "pt"})
    else:
        saved = torch.load(ckpt / name, weights_only=False)
        next(iter(saved["optimizer"]["state"].values()))["exp_avg"].fill_(torch.nan)
        torch.save(saved, ckpt / name)
    manifest = strict_file(ckpt / "manifest.json")
    manifest["files"][name] = (ckpt / name).stat().st_size
    manifest["sha256"][name] = hashlib.sha256((ckpt / name).read_bytes()).hexdigest()
    (ckpt / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("kind, name, message", [
    ("full", "model.safetensors", "model.safetensors: model.norm.weight holds a NaN or an inf (the weights of "
                                  "a run that diverged?)"),
    ("lora", "adapter_model.safetensors", "holds a NaN or an inf (a run that diverged?)"),
    ("full", "trainer_state.pt", "trainer_state.pt: optimizer.state.0.exp_avg holds a NaN or an inf (a run that "
                                 "diverged): it cannot be resumed from"),
])
def test_a_checkpoint_holding_a_nan_is_one_line_on_resume_and_in_eval(finished, tmp_path, capsys, kind, name,
                                                                      message):
    import shutil
    run = Path(shutil.copytree(finished / kind, tmp_path / kind))
    poison(run / "checkpoint", name)
    before = digests(run)
    assert message in error_line(capsys, train.main, ["--resume", str(run), "--steps", "2"])
    assert digests(run) == before
    if name == "model.safetensors":
        argv = ["--model", str(run / "checkpoint"), "--out", str(tmp_path / "e.jsonl")]
        assert message in error_line(capsys, eval_cli.main, argv)
