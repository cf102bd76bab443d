"""A resume never rewrites what a run was (each field's resume=, nanoatr/machinery/flags.py): every flag of
train.py and sft.py is classified, and each is run through the command's own argument path with --resume on
a tiny finished run: a refused flag is one `error:` line naming it, the saved value and why, and leaves the
folder byte for byte; a recorded one takes effect and config.json keeps the start, the change under
"changes" at its step; a free one is taken and not recorded. Then what reads the record:
scripts/runs_table.py, scripts/plot.py's legend."""
import dataclasses
import json
import random
import shutil
import sys
from pathlib import Path

import pytest

import sft as sft_cli
import train
from nanoatr import loss
from nanoatr.machinery import folder
from nanoatr.machinery.flags import FREE, RECORDED, ModelFlags, Refused, TrainConfig, hparam_flags, parse
from nanoatr.machinery.resume import from_start, paths, resume_rules
from test_train import FAST
from tiny import make_default, make_model_dir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from plot import run_legend  # noqa: E402
import runs_table  # noqa: E402
from conftest import error_line, jsonl, strict, strict_file  # noqa: E402

TRAIN_RULES, SFT_RULES = resume_rules(TrainConfig), resume_rules(sft_cli.SFTConfig)  # each field's resume=

# A value other than the tiny runs' own, for every flag of train.py (--resume itself aside): the words
# --field-name VALUE (True: the switch alone), or the words themselves where they differ.
TRAIN_VALUES = {field: words if isinstance(words, list) else
                [f"--{field.replace('_', '-')}", *([] if words is True else [words])] for field, words in {
    "system_prompt": "Be brief.", "prompt_template": "Q: {question}", "thinking": ["--no-thinking"],
    "micro_batch": "4", "lr": "0.5", "weight_decay": "0.1", "grad_clip": "0.5", "lora_rank": "4",
    "lora_alpha": "3.0", "lora_targets": "q_proj", "dtype": "bfloat16", "grad_checkpoint": True,
    "eval_every": "1", "eval_k": "3", "eval_temperature": "0.5", "eval_top_p": "0.9",
    "eval_max_new_tokens": "20", "eval_limit": "3", "eval_batch_size": "3", "out_dir": "/x", "name": "other",
    "save_every": "7", "seed": "1", "device": "cpu", "preset": "paper", "task": "countdown",
    "model": "Qwen/Qwen3-1.7B", "revision": "main", "data": str(ROOT / "data/arith/val.jsonl"),
    "eval_data": str(ROOT / "data/arith/val.jsonl"), "clip": "clip", "hparams": ["--delta", "0.1"],
    "aggregation": "seq-mean-token-mean", "std_normalize": True, "beta": "0.01", "minibatches": "4",
    "epochs": "2", "prompts_per_step": "2", "group_size": "2", "max_new_tokens": "30", "temperature": "0.7",
    "top_p": "0.9", "top_k": "5", "sampler": "multinomial", "stop": "=", "dynamic_sampling": "1",
    "rollout_batch": "2", "steps": "2", "base_name": "Qwen/Qwen3-tiny", "merge": True, "compile": True,
    "keep_checkpoints": "3", "threads": "1", "reward": "mine.py:f", "reward_weights": "2.0",
    "answer_field": "solution", "overlong_buffer": "4", "overlong_penalty": "0.5", "mask_truncated": True,
    "lr_scheduler": "cosine", "warmup_steps": "1", "warmup_ratio": "0.5", "report_to": "tensorboard",
    "wandb_project": ["--report-to", "wandb", "--wandb-project", "p"],  # offline (the test sets WANDB_MODE)
    "workdir": [],  # not a flag: where the run started (test_a_run_resumes_from_anywhere_and_...)
    "correct_reward": "total", "adam_beta1": "0.8", "adam_beta2": "0.999", "log_completions": "2",
}.items()}
LORA_ONLY = {"base_name", "merge"}  # train.py refuses them on a full fine-tuning run (no adapter)

# The same for sft.py.
SFT_VALUES = {
    **{k: v for k, v in TRAIN_VALUES.items() if k in SFT_RULES},
    "data": ["--data", "OTHER"], "eval_data": ["--eval-data", "OTHER"],  # OTHER: the fixture's other file
    "max_len": ["--max-len", "60"], "skip_long": ["--skip-long"], "batch_size": ["--batch-size", "4"],
    "warmup": ["--warmup", "3"], "epochs": ["--epochs", "2.0"],
}


@pytest.mark.parametrize("config, values", [(TrainConfig, TRAIN_VALUES), (sft_cli.SFTConfig, SFT_VALUES)])
def test_every_flag_is_classified_and_has_a_test_value(config, values):
    assert all(isinstance(r, Refused) or r in (RECORDED, FREE) for r in resume_rules(config).values())
    fields = {f.name for f in dataclasses.fields(config)} - {"resume"}
    assert values.keys() == fields, f"give each flag a value above: {sorted(values.keys() ^ fields)}"
    with pytest.raises(TypeError, match=r"^ModelFlags's model, adapter, revision: no resume= \(flags.py"):
        resume_rules(ModelFlags)  # a field declared without resume= is named


# ----------------------------------------------------------------------------
# train.py

@pytest.fixture(scope="module")
def train_runs(tmp_path_factory):
    """Two finished 1-step runs, full fine-tuning and LoRA (rank 2); each test copies one."""
    out = tmp_path_factory.mktemp("train-runs")
    data = out / "train16.jsonl"  # 16 problems: start-up checks every prompt's length (4096: seconds)
    data.write_text("".join((ROOT / "data/arith/train.jsonl").read_text().splitlines(keepends=True)[:16]))
    fast = [*FAST, "--data", str(data), "--out-dir", str(out), "--steps", "1"]
    train.main([*fast, "--name", "full"])
    train.main([*fast, "--name", "lora", "--lora-rank", "2"])
    return {"full": out / "full", "lora": out / "lora"}


def copy_of(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def files(run: Path) -> dict:
    return {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def refused_line(run: Path, field: str, argv: list[str], rules: dict) -> str:
    """The one line a refused flag gives: the flag as given, the saved value and why."""
    saved = strict_file(run / "config.json")[field]
    return (f"error: {' '.join(argv)} cannot change on --resume ({run / 'config.json'} has \"{field}\": "
            f"{json.dumps(saved)}): {rules[field].why}")


@pytest.mark.parametrize("kind", ["full", "lora"])
@pytest.mark.parametrize("field", sorted(k for k, r in TRAIN_RULES.items() if isinstance(r, Refused)))
def test_train_refuses_the_flag_in_one_line_and_leaves_the_run_as_it_was(field, kind, train_runs, tmp_path,
                                                                         capsys):
    run = copy_of(train_runs[kind], tmp_path)
    before = files(run)
    argv = TRAIN_VALUES[field]
    assert error_line(capsys, train.main, ["--resume", str(run), "--steps", "2", *argv]) == \
        refused_line(run, field, argv, TRAIN_RULES)
    assert files(run) == before  # config.json, logs and checkpoints byte for byte


# What a run is, pinned by name. The test above takes its list from TRAIN_RULES itself, so a flag moved out of
# the refused ones there (seed made RECORDED, say) would leave it untested instead of failing it. These must
# stay refused whatever the table says: a resume that took one would continue the run as something it was not
# started as, under its name.
WHAT_A_RUN_IS = {
    # which run: its seed (scripts/runs_table.py pools one run per seed), task, weights and training file
    # (prompt order)
    "seed", "task", "model", "revision", "data",
    # the method compared: the clipping rule and its hyper-parameter, the loss, the updates per rollout
    "clip", "hparams", "aggregation", "std_normalize", "beta", "minibatches", "epochs", "mask_truncated",
    # the rollouts it trains on
    "group_size", "prompts_per_step", "max_new_tokens", "temperature", "top_p", "top_k", "sampler", "stop",
    "dynamic_sampling",
    # the rewards, and the prompts they are earned on
    "reward", "reward_weights", "answer_field", "overlong_buffer", "overlong_penalty", "system_prompt",
    "prompt_template", "thinking",
    # how it is measured: its evaluations are compared across its steps and with other runs
    "eval_data", "eval_k", "eval_temperature", "eval_top_p", "eval_max_new_tokens", "eval_limit",
    # the size and schedule of its updates, and the precision it trained in
    "lr", "weight_decay", "grad_clip", "lr_scheduler", "warmup_steps", "warmup_ratio", "dtype", "preset"}


def test_what_a_run_is_stays_refused():
    assert sorted(f for f in WHAT_A_RUN_IS if not isinstance(TRAIN_RULES[f], Refused)) == []


def test_a_run_resumes_from_anywhere_and_takes_its_own_files_however_spelled(tmp_path, monkeypatch, capsys):
    """Relative --data, --eval-data, --reward and --model, as given in the directory the run started in
    (config.json's workdir): found from there on a resume from another directory; given again as ./x, as
    an absolute path or as written, they are the run's own (no error, no change, as any flag at the run's
    value), and another file is refused. config.json keeps them as given; a value holding no path as it is."""
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    (start / "data").mkdir(parents=True)
    elsewhere.mkdir()
    lines = (ROOT / "data/arith/train.jsonl").read_text().splitlines(keepends=True)
    (start / "data/t.jsonl").write_text("".join(lines[:16]))
    (start / "data/other.jsonl").write_text("".join(lines[16:32]))
    (start / "rew.py").write_text("def digits(completions, **kwargs):\n"
                                  "    return [float(any(c.isdigit() for c in t)) for t in completions]\n")
    shutil.copytree(ROOT / "data/tiny-qwen3", start / "model")
    monkeypatch.chdir(start)
    given = ["--model", "model", "--data", "data/t.jsonl", "--eval-data", "data/t.jsonl", "--reward",
             "rew.py:digits"]
    train.main([*given, "--eval-limit", "2", "--eval-k", "2", "--prompts-per-step", "4", "--group-size", "2",
                "--max-new-tokens", "24", "--no-compile", "--out-dir", "runs", "--name", "r", "--steps", "1"])
    run = start / "runs/r"
    config = strict_file(run / "config.json")
    assert [config[k] for k in ("model", "data", "eval_data", "reward", "workdir")] == \
        ["model", "data/t.jsonl", ["data/t.jsonl"], ["rew.py:digits"], str(start)]
    train.main(["--resume", "runs/r", "--steps", "2", "--data", "./data/t.jsonl", "--reward", "./rew.py:digits",
                "--model", str(start / "model"), "--eval-data", "data/../data/t.jsonl", "--name", "r", "--lr",
                "1e-4", "--clip", "kl3", "--delta", "0.07", "--eval-every", "0", "--group-size", "2"])  # as it was
    monkeypatch.chdir(elsewhere)
    train.main(["--resume", str(run), "--steps", "3"])  # every relative path found from where it started
    train.main(["--resume", str(run), "--steps", "4", "--data", "data/t.jsonl",  # as written: the run's own
                "--reward", f"{start}/rew.py:digits"])
    rows = jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
    assert all(r["reward/digits"] is not None for r in rows if "loss" in r)
    after = strict_file(run / "config.json")
    assert {k: v for k, v in after.items() if k != "changes"} == {**config, "provenance": after["provenance"]}
    assert after["provenance"][:1] == config["provenance"] and [s["step"] for s in after["provenance"]] == [0, 1, 2, 3]
    assert [list(c) for c in after["changes"]] == [["step", "steps"]] * 3
    assert "has changed since the last sitting" not in capsys.readouterr().err  # the same reward code
    assert error_line(capsys, train.main, ["--resume", str(run), "--steps", "5", "--data",
                                          f"{start}/data/other.jsonl"]).startswith(
        f"error: --data {start}/data/other.jsonl cannot change on --resume")
    (elsewhere / "data").mkdir()  # the run's bytes here, under its relative path; its own file changed
    (elsewhere / "data/t.jsonl").write_text("".join(lines[:16]))
    (start / "data/t.jsonl").write_text("".join(lines[:15]))
    for argv in (["--resume", str(run)], ["--resume", f"{run}/checkpoint-step000003", "--name", "b"]):
        assert error_line(capsys, train.main, [*argv, "--steps", "5"]).startswith(
            f"error: {start / 'data/t.jsonl'} has changed since the run started")
    at = [paths(k, v, "x/".__add__) for k, v in [("data", ""), ("eval_data", ["a", None]), ("reward", "m:f")]]
    assert at == ["", ["x/a", None], "m:f"]  # fn on each path held: none in "", None, MODULE:FUNCTION
    assert from_start("data/t.jsonl", str(tmp_path / "gone")) == "data/t.jsonl"  # its start gone: as written


def settings(config: dict) -> dict:
    """config.json's settings: without the record of changes and of each start's provenance."""
    return {k: v for k, v in config.items() if k not in ("changes", "provenance")}


@pytest.mark.parametrize("field", sorted(k for k, r in TRAIN_RULES.items() if r in (RECORDED, FREE) and k != "resume"))
def test_train_records_a_change_and_takes_a_free_flag_without_one(field, train_runs, tmp_path, monkeypatch):
    """config.json keeps the start: a recorded flag's change is under "changes", at the step it took effect
    from; a free one is taken and not recorded. The run trains on under it."""
    monkeypatch.setattr(loss, "_compiled_loss", lambda: loss._fused_loss)  # --compile: no minute of compiling
    run = copy_of(train_runs["lora" if field in LORA_ONLY else "full"], tmp_path)
    start = strict_file(run / "config.json")
    train.main(["--resume", str(run), *([] if field == "steps" else ["--steps", "2"]), *TRAIN_VALUES[field]])
    config = strict_file(run / "config.json")
    assert settings(config) == settings(start) and config["provenance"][:-1] == start["provenance"]
    change = {"steps": {"from": 1, "to": 2}}
    if TRAIN_RULES[field] == RECORDED:
        given = parse(TrainConfig, TRAIN_VALUES[field], add_flags=hparam_flags)[0]
        change[field] = {"from": start[field], "to": getattr(given, field)}
    assert config["changes"] == [{"step": 1, **change}]
    assert [r["step"] for r in jsonl(run / "metrics.jsonl") if "loss" in r] == [1, 2]
    assert (run / "merged/model.safetensors").is_file() == (field == "merge")


def test_resumes_add_up_and_one_that_changes_nothing_adds_nothing(train_runs, tmp_path, capsys):
    """Two resumes with changes, then two without (a finished run; and one redoing a step from an older
    checkpoint): the record holds the two, and what reads it says so."""
    run = copy_of(train_runs["full"], tmp_path)
    train.main(["--resume", str(run), "--steps", "2"])
    train.main(["--resume", str(run), "--steps", "4", "--eval-every", "1", "--keep-checkpoints", "2"])
    config = (run / "config.json").read_bytes()
    assert strict(config)["changes"] == [
        {"step": 1, "steps": {"from": 1, "to": 2}},
        {"step": 2, "eval_every": {"from": 0, "to": 1}, "steps": {"from": 2, "to": 4}}]
    with pytest.raises(SystemExit) as e:  # finished: nothing to do, nothing written
        train.main(["--resume", str(run), "--eval-every", "1"])
    assert e.value.code == 0 and (run / "config.json").read_bytes() == config
    shutil.rmtree(run / "checkpoint")  # step 4's: the run goes on from step 2's, as it last ran
    train.main(["--resume", str(run)])
    after = strict_file(run / "config.json")  # only this sitting added (provenance)
    assert settings(after) == settings(strict(config)) and after["changes"] == strict(config)["changes"]
    assert [s["step"] for s in after["provenance"]] == [0, 1, 2, 2]
    rows = jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in rows if "eval/mean@2" in r] == [0, 1, 2, 3, 4]  # 3: --eval-every 1 from 2 on
    capsys.readouterr()

    runs_table.main([str(run)])
    notes = capsys.readouterr().out.splitlines()
    assert "full: changed on resume at step 1: --steps 1 -> 2" in notes
    assert "full: changed on resume at step 2: --eval-every 0 -> 1, --steps 2 -> 4" in notes
    assert not any("not finished" in line for line in notes)  # its --steps is 4 now, as it ran
    assert run_legend(run) == ("full (kl3; --steps 1->2 at 1; --eval-every 0->1, --steps 2->4 at 2)", (1, 2))


def test_a_change_recorded_past_the_checkpoint_is_restamped_at_it(tmp_path):
    """A damaged newer checkpoint was skipped: the steps after the one resumed from are redone, with the
    change, so the record says it took effect there."""
    (tmp_path / "config.json").write_text(json.dumps({"steps": 4, "changes": [
        {"step": 1, "steps": {"from": 2, "to": 3}}, {"step": 3, "steps": {"from": 3, "to": 4}}]}))
    run = folder.RunFolder(tmp_path, resuming=True)
    run.state = {"step": 3}
    run.write_config(None, {})
    assert strict_file(tmp_path / "config.json")["changes"][1]["step"] == 3  # at the checkpoint's step: kept
    run.state = {"step": 2}
    run.write_config(None, {"eval_every": {"from": 0, "to": 1}})
    assert strict_file(tmp_path / "config.json")["changes"] == [
        {"step": 1, "steps": {"from": 2, "to": 3}}, {"step": 2, "steps": {"from": 3, "to": 4}},
        {"step": 2, "eval_every": {"from": 0, "to": 1}}]


def test_a_branch_trains_and_records_the_run_as_it_stood_at_its_step(train_runs, tmp_path, capsys):
    """Changes recorded before, at and after a branch's step (1 or 2): it keeps those at or before it and
    trains under them; a plain resume of it finds it finished, and one that trains on records its own."""
    run = copy_of(train_runs["full"], tmp_path)  # step 1, then a change at 1 and one at 2
    train.main(["--resume", str(run), "--steps", "2", "--eval-every", "1", "--keep-checkpoints", "3"])
    train.main(["--resume", str(run), "--steps", "4", "--eval-every", "3"])
    at1, at2 = json.loads((run / "config.json").read_text())["changes"]
    capsys.readouterr()
    for step, kept, steps in [(1, [at1], 2), (2, [at1, at2], 4)]:
        branch = tmp_path / f"from{step}"
        train.main(["--resume", f"{run}/checkpoint-step00000{step}", "--name", branch.name])
        assert f", from step {step} of {run} (its log up to there copied)\n" in capsys.readouterr().out
        config = json.loads((branch / "config.json").read_text())
        assert config["changes"] == kept and settings(config) == settings(json.loads(
            (run / "config.json").read_text())) | {"name": branch.name, "out_dir": str(tmp_path),
                                                           "branched_from": config["branched_from"]}
        with pytest.raises(SystemExit) as e:  # finished at its own --steps
            train.main(["--resume", str(branch)])
        assert e.value.code == 0 and f"(step {steps} of {steps}, evaluated)" in capsys.readouterr().out
        if steps < 4:  # step 3 evaluated: its --eval-every 1
            train.main(["--resume", str(branch), "--steps", "4"])
        rows = [json.loads(line) for line in (branch / "metrics.jsonl").open()]
        assert [r["step"] for r in rows if "eval/mean@2" in r] == [0, 1, 2, 3, 4]  # 3: --eval-every 1 or 3
        assert json.loads((branch / "config.json").read_text())["changes"][len(kept):] == \
            [{"step": 2, "steps": {"from": 2, "to": 4}}] * (steps < 4)


@pytest.mark.parametrize("changes", [{"step": 1}, [{"steps": {"from": 1, "to": 2}}],  # a bad one after a good:
                                     [{"step": 1, "lr": {"from": 1, "to": 2}}, {"step": 2, "lr": 3}]])
def test_a_malformed_record_is_one_line(changes, train_runs, tmp_path, capsys):
    run = copy_of(train_runs["full"], tmp_path)
    config = strict_file(run / "config.json")
    (run / "config.json").write_text(json.dumps({**config, "changes": changes}))
    for main in (train.main, runs_table.main):
        argv = ["--resume", str(run), "--steps", "2"] if main is train.main else [str(run)]
        assert error_line(capsys, main, argv) == f'error: {run / "config.json"}: "changes" is not a list of ' \
            '{"step": S, "<flag>": {"from": A, "to": B}}'


# ----------------------------------------------------------------------------
# sft.py

@pytest.fixture(scope="module")
def sft_runs(tmp_path_factory):
    """Two finished 1-step SFT runs of a random tiny model, full fine-tuning and LoRA (rank 2), and a
    second data file."""
    out = tmp_path_factory.mktemp("sft-runs")
    rng = random.Random(0)
    rows = [dict(zip(("problem", "answer", "solution"), make_default.make_problem(rng))) for _ in range(24)]
    for name, part in (("sft.jsonl", rows[:16]), ("other.jsonl", rows[16:])):
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    model = make_model_dir(out / "random", seed=1)
    common = ["--model", str(model), "--data", str(out / "sft.jsonl"), "--eval-data", str(out / "sft.jsonl"),
              "--eval-limit", "2", "--eval-k", "1", "--batch-size", "8", "--max-len", "64", "--steps", "1",
              "--out-dir", str(out)]
    sft_cli.main([*common, "--name", "full", "--lora-rank", "0"])
    sft_cli.main([*common, "--name", "lora", "--lora-rank", "2"])
    return {"full": out / "full", "lora": out / "lora", "other": str(out / "other.jsonl")}


def sft_argv(field: str, sft_runs) -> list[str]:
    return [sft_runs["other"] if word == "OTHER" else word for word in SFT_VALUES[field]]


@pytest.mark.parametrize("kind", ["full", "lora"])
@pytest.mark.parametrize("field", sorted(k for k, r in SFT_RULES.items() if isinstance(r, Refused)))
def test_sft_refuses_the_flag_in_one_line_and_leaves_the_run_as_it_was(field, kind, sft_runs, tmp_path, capsys):
    run = copy_of(sft_runs[kind], tmp_path)
    before, argv = files(run), sft_argv(field, sft_runs)
    assert error_line(capsys, sft_cli.main, ["--resume", str(run), "--steps", "2", *argv]) == \
        refused_line(run, field, argv, SFT_RULES)
    assert files(run) == before


def test_sft_takes_the_run_folder_not_a_checkpoint_in_it(sft_runs, tmp_path, capsys):
    run = copy_of(sft_runs["full"], tmp_path)
    before = files(run)
    assert error_line(capsys, sft_cli.main, ["--resume", str(run / "checkpoint")]) == (
        f"error: --resume {run / 'checkpoint'} is a checkpoint of the run folder {run}: --resume takes the run "
        f"folder (--resume {run}), and goes on from its newest usable checkpoint")
    assert files(run) == before


@pytest.mark.parametrize("field", sorted(k for k, r in SFT_RULES.items() if r in (RECORDED, FREE) and
                                         k != "resume"))
def test_sft_records_a_change_and_takes_a_free_flag_without_one(field, sft_runs, tmp_path):
    run = copy_of(sft_runs["lora"], tmp_path)
    start = strict_file(run / "config.json")
    argv = sft_argv(field, sft_runs)
    sft_cli.main(["--resume", str(run), *([] if field == "steps" else ["--steps", "2"]), *argv])
    config = strict_file(run / "config.json")
    assert settings(config) == settings(start) and config["provenance"][:-1] == start["provenance"]
    change = {"steps": {"from": 1, "to": 2}}
    if SFT_RULES[field] == RECORDED:
        change[field] = {"from": start[field], "to": getattr(parse(sft_cli.SFTConfig, argv)[0], field)}
    assert config["changes"] == [{"step": 1, **change}]
    assert [r["step"] for r in jsonl(run / "metrics.jsonl") if "loss" in r] == [1, 2]
