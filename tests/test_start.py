"""Starts that fail and resumes that are refused (nanoatr/machinery/session.py, folder.py): one `error:` line and
a non-zero exit; a new run folder that holds nothing (no logged row, no checkpoint) is removed, whatever
failed after it was made (an error, a bug, sys.exit() in a reward function, Ctrl-C, SIGTERM); a refused
resume leaves its folder byte for byte, lock file included; a resume never drops logged rows on its own,
never goes on with settings or problem files other than the run's."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import train
from nanoatr.machinery.resume import checked_settings, settings_now
from nanoatr.machinery.flags import TrainConfig
from test_diverge import digests, tiny_args
from conftest import error_line, jsonl, strict_file

ROOT = Path(__file__).resolve().parent.parent

REWARDS = """
import os, signal, sys, time

def raises(completions, **kwargs):
    raise ValueError("no reward today")

def exits(completions, **kwargs):
    sys.exit(0)

def interrupts(completions, **kwargs):
    raise KeyboardInterrupt

def terminates(completions, **kwargs):  # its first call is the step-0 evaluation's
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)

def interrupts_at_step_2(completions, trainer_state, **kwargs):  # Ctrl-C while grading step 2's rollout
    if trainer_state.global_step >= 2:
        raise KeyboardInterrupt
    return [float(i % 2) for i, _ in enumerate(completions)]
"""


def with_eval(tmp_path: Path) -> list[str]:
    """tiny_args with a held-out file of 2 problems, 1 sample each: a step-0 evaluation of a second."""
    return [*tiny_args(tmp_path), "--eval-data", str(ROOT / "data/arith/heldout.jsonl"), "--eval-limit", "2",
            "--eval-k", "1"]


def rewards(tmp_path: Path, name: str) -> list[str]:
    """--reward FILE.py:name, the file named after the test (a module name is imported once a process)."""
    path = tmp_path / f"rewards_{''.join(c if c.isalnum() else '_' for c in tmp_path.name)}.py"
    path.write_text(REWARDS)
    return ["--reward", f"{path}:{name}"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-step run (a checkpoint each step) on its own copy of the problems; tests copy it."""
    out = tmp_path_factory.mktemp("finished")
    train.main([*tiny_args(out), "--name", "run", "--steps", "2", "--save-every", "1"])
    return out / "run"


def copy_of(run: Path, tmp_path: Path) -> Path:
    """A copy of the run, its lock file holding another process's pid (a refused resume puts it back)."""
    copy = Path(shutil.copytree(run, tmp_path / run.name))
    (copy / ".lock").write_text("99999\n")
    return copy


# ----------------------------------------------------------------------------
# Failed starts leave no folder

@pytest.mark.parametrize("kind, code, line", [
    ("raises", 2, "error: reward function raises raised ValueError: no reward today on row 0 of 2 "),
    ("exits", 2, "error: reward function exits raised SystemExit: 0 on row 0 of 2 "),  # rewards.call names it
    ("interrupts", 130, "error: interrupted during start-up"),
    ("wandb", 2, "error: --report-to wandb could not start (RuntimeError: offline today)"),
    ("eval file", 2, "error: "),
])
def test_a_start_that_fails_after_the_folder_is_made_leaves_no_folder(tmp_path, capsys, monkeypatch, kind, code,
                                                                     line):
    argv = [*with_eval(tmp_path), "--name", "r", "--steps", "1"]
    if kind == "wandb":
        import wandb
        monkeypatch.setattr(wandb, "init", lambda **kw: (_ for _ in ()).throw(RuntimeError("offline today")))
        argv += ["--report-to", "tensorboard", "wandb"]  # TensorBoard starts first: its files go too
    elif kind == "eval file":
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"question": "1+1=", "answer": "2"}\n{"question": \n')
        argv += ["--eval-data", str(bad)]
    else:
        argv += rewards(tmp_path, kind)
    assert error_line(capsys, train.main, argv, code).startswith(line)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("broken, kept", [("make_optimizer", False), ("grpo_step", True)])
def test_a_bug_removes_a_new_folder_unless_it_logged_a_row(tmp_path, monkeypatch, broken, kept):
    monkeypatch.setattr(train, broken, lambda *a: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        train.main([*with_eval(tmp_path), "--name", "r", "--steps", "1"])
    assert (tmp_path / "r").exists() == kept  # in grpo_step: after the step-0 evaluation's row was logged


def test_sigterm_in_the_step_0_evaluation_is_one_line_and_leaves_no_folder(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), *with_eval(tmp_path), "--name", "r",
                          "--steps", "1", *rewards(tmp_path, "terminates")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert (out.returncode, out.stderr.strip().splitlines()[-1:]) == \
        (143, ["error: stopped by SIGTERM during start-up"]), out.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("kind, code, end", [
    ("exits", 1, "; no step was done: no checkpoint (continue with --resume {run} once the reward is fixed)"),
    ("interrupts_at_step_2", 130, "; the last checkpoint is {run}/checkpoint (continue with --resume {run})")])
def test_sys_exit_or_ctrl_c_in_a_reward_function_mid_run(tmp_path, capsys, kind, code, end):
    """sys.exit() at step 1: no success, and no checkpoint made up; Ctrl-C at step 2: step 1's named."""
    error = error_line(capsys, train.main, [*tiny_args(tmp_path), "--name", "r", "--steps", "3", "--save-every",
                                            "1", *rewards(tmp_path, kind)], code, mid_run=True)
    assert error.startswith("error: reward function exits raised SystemExit: 0 on row 0 " if code == 1 else
                            "error: interrupted") and error.endswith(end.format(run=tmp_path / "r"))
    assert [r["step"] for r in jsonl(tmp_path / "r/metrics.jsonl")] == [1] if code == 130 else \
        sorted(p.name for p in (tmp_path / "r").iterdir()) == [".lock", "config.json"]


def test_a_folder_a_killed_start_left_is_taken_by_a_new_start_and_explained_to_a_resume(tmp_path, capsys):
    """A start killed before its config.json leaves a lock and empty logs: nothing to resume, so --resume
    says to start it again, and a new start with its name takes it."""
    run = tmp_path / "r"
    run.mkdir()
    for name in (".lock", "metrics.jsonl", "samples.jsonl"):
        (run / name).write_text("")
    assert error_line(capsys, train.main, ["--resume", str(run)]) == (
        f"error: --resume {run}: no config.json there: not a run folder, or one whose start never finished "
        "(start it again, without --resume)")
    train.main([*tiny_args(tmp_path), "--name", "r", "--steps", "1"])
    assert (run / "checkpoint").is_dir()


# ----------------------------------------------------------------------------
# Refused resumes leave the folder as it was

def test_an_empty_resume_path_is_one_line_and_starts_no_run(tmp_path, capsys):
    assert error_line(capsys, train.main, [*tiny_args(tmp_path), "--resume", "", "--steps", "1"]) == \
        "error: --resume was given an empty path (an unset shell variable?): name the run folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train16.jsonl"]


def refuse_wandb(run: Path, monkeypatch):
    import wandb
    monkeypatch.setattr(wandb, "init", lambda **kw: (_ for _ in ()).throw(RuntimeError("offline today")))
    return ["--report-to", "tensorboard", "wandb"]


def changed_data(run: Path, monkeypatch):
    data = Path(strict_file(run / "config.json")["data"])  # the test puts it back
    data.write_bytes(data.read_bytes() + b'{"question": "2+2=", "answer": "4"}\n')  # the same path, rewritten
    return []


def without(key: str, value=None):
    def edit(run: Path, monkeypatch):
        config = strict_file(run / "config.json")
        config.pop(key) if value is None else config.update({key: value})
        (run / "config.json").write_text(json.dumps(config))
        return []
    return edit


def no_checkpoint(run: Path, monkeypatch):
    for path in run.glob("checkpoint*"):
        shutil.rmtree(path)
    return []


@pytest.mark.parametrize("case, message", [
    (refuse_wandb, "--report-to wandb could not start (RuntimeError: offline today)"),
    (changed_data, "train16.jsonl has changed since the run started (its SHA-256 is not the one "),
    (without("group_size"), 'config.json lacks "group_size": a resumed run goes on with the settings it ran '
                            "with, not defaults; put them back, or start a new run"),
    (without("group_size", "4"), 'config.json has "group_size": "4", not of its type (int): put the run\'s value '
                                 "back"),
    (without("lr", [1]), 'config.json has "lr": [1], not of its type (float)'),
    (no_checkpoint, "has no checkpoint, but its metrics.jsonl logs steps up to 2: a resume would start again at "
                    "step 0 and drop them. Start a new run (--name), or remove "),
], ids=["wandb", "data rewritten", "missing key", "a string for a number", "a list for a number",
        "checkpoints deleted"])
def test_a_refused_resume_is_one_line_and_leaves_the_folder_byte_for_byte(finished, tmp_path, monkeypatch, capsys,
                                                                          case, message):
    run = copy_of(finished, tmp_path)
    data = Path(strict_file(run / "config.json")["data"])
    kept = data.read_bytes()
    try:
        extra = case(run, monkeypatch)
        before = digests(run)
        assert message in error_line(capsys, train.main, ["--resume", str(run), "--steps", "3", *extra])
        assert digests(run) == before  # the lock file's "99999" too
    finally:
        data.write_bytes(kept)


def test_a_finished_run_resumed_leaves_its_folder_byte_for_byte(finished, tmp_path, capsys):
    run = copy_of(finished, tmp_path)
    before = digests(run)
    with pytest.raises(SystemExit) as e:
        train.main(["--resume", str(run)])
    assert e.value.code == 0 and "is finished" in capsys.readouterr().out
    assert digests(run) == before


def test_a_run_from_before_the_hashes_resumes_with_a_note(finished, tmp_path, capsys):
    run = copy_of(finished, tmp_path)
    config = strict_file(run / "config.json")
    del config["sha256"]
    (run / "config.json").write_text(json.dumps(config))
    train.main(["--resume", str(run), "--steps", "3"])
    assert f"note: {run / 'config.json'} records no SHA-256 of the run's problem files (a run from before they " \
           "were): that they are unchanged could not be checked" in capsys.readouterr().err
    assert strict_file(run / "checkpoint/manifest.json")["step"] == 3


def test_the_runs_in_results_resume_on_their_own_settings():
    """Every train.py config.json in results/ (runs from before later flags: resume.ADDED_LATER) passes the
    resume's check of its settings: a new flag missing from ADDED_LATER would make old runs unresumable."""
    configs = [p for p in sorted((ROOT / "results").rglob("config.json")) if "clip" in strict_file(p)]
    assert len(configs) > 100
    for path in configs:
        checked_settings(TrainConfig, settings_now(strict_file(path), path), path)
