"""The run directory: checkpoints kept and validated with fallback, the tokenizer written from memory
(nanoatr.machinery.checkpoint); logs repaired on resume and read past bad lines, run names, the lock, atomic JSON,
the settings a resume starts from (nanoatr/machinery/resume.py)."""
import dataclasses
import errno
import hashlib
import json
import math
import os
import shutil
from contextlib import closing

import pytest
import torch

from nanoatr.machinery import checkpoint, folder, resume
from nanoatr.machinery.checkpoint import CheckpointError
from nanoatr.machinery.flags import ConfigError
from nanoatr.machinery.metrics_log import RunLog
from conftest import jsonl, strict_file


SMALL = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=1,
             num_key_value_heads=1, head_dim=16, max_position_embeddings=64)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """(a tiny Qwen3 of ours, its tokenizer files in memory)."""
    from nanoatr.model import Qwen3
    from tiny import make_model_dir
    path = make_model_dir(tmp_path_factory.mktemp("tiny"), **SMALL)
    return Qwen3.from_pretrained(path), checkpoint.read_tokenizer_files(path)


def state(step):
    return {"step": step, "optimizer": {"state": {0: {"exp_avg": torch.full((4,), float(step))}}},
            "rng": torch.get_rng_state()}


def save(run_dir, tiny, step, keep=2):
    model, tok = tiny
    return checkpoint.save(run_dir, model, tok, state(step), keep=keep)


def assert_loads(path, step):
    """A complete checkpoint: weights, tokenizer and trainer state load, at the expected step."""
    from nanoatr.model import Qwen3
    from nanoatr.tokenizer import load_tokenizer
    assert checkpoint.check(path) == (step, None)
    assert checkpoint.load_state(path)["step"] == step
    Qwen3.from_pretrained(path)
    load_tokenizer(path)


def names(run_dir):
    return sorted(p.name for p in run_dir.iterdir())


def test_save_keeps_the_newest_k_and_latest_is_checkpoint(tmp_path, tiny):
    assert checkpoint.latest(tmp_path) is None and checkpoint.latest(tmp_path / "missing") is None  # none yet
    for step in range(1, 5):
        assert save(tmp_path, tiny, step) == tmp_path / "checkpoint"
    assert names(tmp_path) == ["checkpoint", "checkpoint-step000003"]
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoint"
    assert_loads(tmp_path / "checkpoint", 4)
    assert_loads(tmp_path / "checkpoint-step000003", 3)
    assert strict_file(tmp_path / "checkpoint/manifest.json")["step"] == 4
    save(tmp_path, tiny, 5, keep=3)
    save(tmp_path, tiny, 6, keep=3)
    assert names(tmp_path) == ["checkpoint", "checkpoint-step000004", "checkpoint-step000005"]
    save(tmp_path, tiny, 7, keep=1)
    assert names(tmp_path) == ["checkpoint"]


def test_tokenizer_comes_from_memory_not_from_a_deleted_folder(tmp_path, tiny):
    """The bricked run of issue 15: the tokenizer was copied from checkpoint.old, which a save deletes."""
    from tiny import make_model_dir
    model_dir = make_model_dir(tmp_path / "model", **SMALL)
    tok = checkpoint.read_tokenizer_files(model_dir)
    assert set(tok) == {"tokenizer.json", "tokenizer_config.json"}
    shutil.rmtree(model_dir)
    run = tmp_path / "run"
    for step in (1, 2, 3):
        checkpoint.save(run, tiny[0], tok, state(step))
        assert_loads(run / "checkpoint", step)
    only_config = checkpoint.save(run, tiny[0], {"tokenizer_config.json": tok["tokenizer_config.json"]}, state(4))
    assert checkpoint.check(only_config) == (4, None)  # either file is a tokenizer: no tokenizer.json is fine


def _truncate(f):
    os.truncate(f, f.stat().st_size - 10)


def _garble(f):
    f.write_bytes(b"\0" * f.stat().st_size)


def _flip(f):
    """One bit of one byte in the middle changed: same size, headers intact, the file still loads."""
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 1
    f.write_bytes(bytes(data))


class RunsCode:
    def __reduce__(self):  # unpickled, it runs code: a run's state must load without (torch's weights_only)
        return exec, ("raise SystemExit('a checkpoint ran code')",)


@pytest.mark.parametrize("damage, message", [
    (lambda c: [(c / "manifest.json").unlink(), torch.save({"step": RunsCode()}, c / "trainer_state.pt")],
     "trainer_state.pt does not load (UnpicklingError"),
    (lambda c: _truncate(c / "model.safetensors"), "model.safetensors has"),
    (lambda c: _garble(c / "model.safetensors"), "model.safetensors has no valid safetensors header"),
    (lambda c: (c / "config.json").write_text("{" + " " * 200), "config.json"),
    (lambda c: (c / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    (lambda c: _truncate(c / "trainer_state.pt"), "trainer_state.pt has"),
    (lambda c: _garble(c / "trainer_state.pt"), "trainer_state.pt does not load"),
    (lambda c: (c / "manifest.json").write_text("{"), "manifest.json is unreadable"),
    (lambda c: _flip(c / "model.safetensors"), "model.safetensors does not match its SHA-256 in manifest.json"),
    (lambda c: _flip(c / "trainer_state.pt"), "trainer_state.pt does not match its SHA-256 in manifest.json"),
    (lambda c: _flip(c / "tokenizer.json"), "tokenizer.json does not match its SHA-256 in manifest.json"),
])
def test_unusable_checkpoint_falls_back_with_a_warning(tmp_path, tiny, capsys, damage, message):
    for step in (1, 2, 3):
        save(tmp_path, tiny, step)
    damage(tmp_path / "checkpoint")
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoint-step000002"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: checkpoint {tmp_path / 'checkpoint'} is unusable (")
    assert message in err[0] and "falling back to" in err[0]
    # step 3 saved again, killed once complete (a copy, made in a leftover's name): recover() installs it
    shutil.copytree(save(tmp_path / ".checkpoint-x", tiny, 3), tmp_path / ".checkpoint-new")
    checkpoint.recover(tmp_path)
    save(tmp_path, tiny, 4)  # and the damaged one is not kept
    assert names(tmp_path) == ["checkpoint", "checkpoint-step000003"] and not capsys.readouterr().err
    assert checkpoint.check(tmp_path / "checkpoint-step000003") == (3, None)
    torch.save({"step": RunsCode()}, tmp_path / "checkpoint/trainer_state.pt")
    with pytest.raises(Exception, match="Unpickler"):  # and resuming from it
        checkpoint.load_state(tmp_path / "checkpoint")


def test_the_manifest_records_each_files_sha256_and_an_older_one_only_sizes(tmp_path, tiny, capsys):
    """A checkpoint of an older nanoatr (sizes only) still loads; nothing can tell a changed byte there."""
    path = save(tmp_path, tiny, 1)
    manifest = strict_file(path / "manifest.json")
    files = sorted(p.name for p in path.iterdir() if p.name != "manifest.json")
    assert sorted(manifest["files"]) == files  # and the digests, as sha256sum prints them:
    assert manifest["sha256"] == {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in files}
    del manifest["sha256"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert_loads(path, 1)
    _flip(path / "model.safetensors")
    assert checkpoint.latest(tmp_path) == path and checkpoint.check(path) == (1, None)
    _truncate(path / "model.safetensors")
    assert "model.safetensors has" in checkpoint.check(path)[1]  # sizes are still checked
    assert capsys.readouterr().err == ""


def test_a_save_with_a_newer_stale_checkpoint_beside_it(tmp_path, tiny):
    """Resumed from step 2 because step 3 (kept) was damaged, saving step 3 replaces it. With every
    checkpoint damaged, latest() is one line naming the run."""
    for step in (1, 2, 3, 4):
        save(tmp_path, tiny, step, keep=3)
    _truncate(tmp_path / "checkpoint/model.safetensors")
    _truncate(tmp_path / "checkpoint-step000003/model.safetensors")
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoint-step000002"
    save(tmp_path, tiny, 3, keep=3)
    assert names(tmp_path) == ["checkpoint", "checkpoint-step000002"]  # step 1 went at step 4's save
    assert_loads(tmp_path / "checkpoint", 3)
    for name in names(tmp_path):
        _truncate(tmp_path / name / "model.safetensors")
    with pytest.raises(CheckpointError, match=rf"{tmp_path} has no usable checkpoint: .*model.safetensors has"):
        checkpoint.latest(tmp_path)


def test_lora_checkpoint_is_a_peft_adapter(tmp_path, tiny):
    from nanoatr import lora
    from nanoatr.model import Qwen3
    model = Qwen3.from_pretrained(checkpoint_dir := save(tmp_path / "full", tiny, 1))
    peft_model = lora.add_adapters(model, 2, 4.0, ["q_proj"], base=str(checkpoint_dir))
    path = checkpoint.save(tmp_path / "lora", peft_model, tiny[1], state(5))
    assert lora.is_adapter_dir(path) and checkpoint.check(path) == (5, None)
    _garble(path / "adapter_config.json")
    assert checkpoint.check(path)[1] == "adapter_config.json is missing or not valid JSON"


# ----------------------------------------------------------------------------
# Logs

def test_resume_cuts_a_torn_line_and_drops_rows_past_the_checkpoint(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"step": 0, "eval/mean@2": 1.0}] + [{"step": s, "loss": s} for s in range(1, 6)]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 6, "lo')
    (tmp_path / "samples.jsonl").write_text('{"step": 0, "eval": "a"}\n{"step": 4, "eval": "a"}\n')
    before = metrics.read_bytes()
    with closing(RunLog(tmp_path, resume_step=3)) as log:
        assert log.rows == rows[:4] and log.past == [4, 5]
        assert metrics.read_bytes() == before and capsys.readouterr().err == ""  # until the first write
        for s in (4, 5):
            log.write({"step": s, "loss": -s})
        log.samples(5, "a", [{"completion": "x"}])
    assert capsys.readouterr().err == (f"warning: {metrics}: cut 1 unreadable line(s) (a torn write); dropped 2 "
                                       "row(s) past step 3, the checkpoint's (they are redone)\n"
                                       f"note: {tmp_path / 'samples.jsonl'}: dropped 1 row(s) past step 3, the "
                                       "checkpoint's (they are redone)\n")
    assert jsonl(metrics) == rows[:4] + [{"step": 4, "loss": -4}, {"step": 5, "loss": -5}] == log.rows
    assert metrics.read_text().endswith("}\n")
    assert jsonl(tmp_path / "samples.jsonl") == [{"step": 0, "eval": "a"}, {"step": 5, "eval": "a", "completion": "x"}]
    assert log.has(0) and not log.has(5) and log.has(5, prefix="loss")  # e.g. is the final evaluation logged?


def test_a_whole_last_row_is_kept_a_number_not_finite_is_null_and_a_sound_log_is_not_rewritten(tmp_path, capsys):
    """A last row missing only its newline is whole: kept, and nothing said. JSON has no NaN or Infinity
    (json.dumps writes them, other parsers refuse them): both logs write null."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1}\n{"step": 2}')
    with closing(RunLog(tmp_path, resume_step=2)) as log:
        log.write({"step": 3, "loss": math.nan, "w": [math.inf, 1.0]})
        log.samples(3, "a", [{"reward": -math.inf}])
    assert metrics.read_text() == '{"step": 1}\n{"step": 2}\n{"step": 3, "loss": null, "w": [null, 1.0]}\n'
    assert jsonl(tmp_path / "samples.jsonl") == [{"step": 3, "eval": "a", "reward": None}]
    assert capsys.readouterr().err == ""  # nothing was lost
    before = metrics.stat().st_mtime_ns
    with closing(RunLog(tmp_path, resume_step=3)) as log:
        assert log.rows == jsonl(metrics) and log.past == []
    assert metrics.stat().st_mtime_ns == before  # not rewritten


def test_write_json_atomic_and_the_reason_it_names(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    folder.write_json_atomic(path, {"a": 1})
    assert path.read_bytes() == b'{\n  "a": 1\n}\n'  # a POSIX text file: its last line ends in a newline

    def full(*a):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(CheckpointError, match=rf"cannot write {path} \(disk full\)"):
        folder.write_json_atomic(path, {"a": 2})
    assert strict_file(path) == {"a": 1} and names(tmp_path) == ["config.json"]
    # reason(), the phrase: an OSError's, also one torch.save wraps in a RuntimeError; another error raised
    # while handling one (a bug, Ctrl-C) has none (None: it is re-raised as it is)
    full, read_only = OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EROFS, "Read-only file system")
    wrapped, bug = RuntimeError("unexpected pos"), KeyError("x")
    for e in (wrapped, bug, read_only):
        e.__context__ = full
    assert [checkpoint.reason(e) for e in (wrapped, bug, read_only)] == ["disk full", None, "read-only file system"]


# ----------------------------------------------------------------------------
# Runs

def test_unique_names_differ_within_one_second():
    many = {folder.unique_name("kl3") for _ in range(50)}  # 2^24 suffixes: a clash has p ~ 1e-4
    assert len(many) == 50 and all(n.startswith("kl3-") for n in many)


def test_a_new_run_refuses_a_used_folder(tmp_path):
    """A folder holding a file with something in it is refused; one that holds only a lock and empty files
    (a start killed before its config.json: nothing to --resume) is taken."""
    lock = folder.lock_run(tmp_path / "a", resume=False)
    (tmp_path / "a/metrics.jsonl").write_text("")
    lock.release()
    folder.lock_run(tmp_path / "a", resume=False).release()
    (tmp_path / "a/config.json").write_text("{}")
    with pytest.raises(CheckpointError) as e:
        folder.lock_run(tmp_path / "a", resume=False)
    assert str(e.value) == (f"run folder {tmp_path / 'a'} already exists: continue it with --resume "
                            f"{tmp_path / 'a'}, or choose another --name")
    with pytest.raises(CheckpointError, match="no such run folder"):
        folder.lock_run(tmp_path / "b", resume=True)


def test_a_resume_takes_the_saved_config_with_the_flags_given_on_top(tmp_path):
    from nanoatr.machinery.flags import TrainConfig
    run = tmp_path / "r"
    run.mkdir()
    folder.write_json_atomic(run / "config.json", dataclasses.asdict(TrainConfig(steps=4, lr=3e-4, group_size=4)))
    now = TrainConfig(resume=str(run), steps=8, lr=3e-4)  # group_size not given: the run's 4, not the default 8
    cfg, change = resume.resumed_config(now, {"resume", "steps", "lr"})
    assert (cfg.steps, cfg.lr, cfg.group_size, cfg.resume) == (8, 3e-4, 4, str(run))
    assert change == {"steps": {"from": 4, "to": 8}}  # lr at the run's own value: no change, no error
    (run / "config.json").write_text('["not", "a", "dict"]')
    with pytest.raises(ConfigError, match=r"config.json is not a run's config.json \(AttributeError: "):
        resume.resumed_config(now, {"resume"})
