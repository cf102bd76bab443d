"""--report-to tensorboard / wandb: every number of metrics.jsonl read back at its step, the settings, resumes
that show each step once, the missing package's one line, and a destination failing mid-run."""
import json
import math
import shutil
import struct
import sys
import types
from pathlib import Path
from contextlib import closing

import numpy as np
import pytest
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

import sft
import train
from nanoatr.machinery import metrics_log
from nanoatr.machinery.metrics_log import RunLog
from conftest import error_line, metrics, strict, strict_file

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(ROOT / "data/arith/train.jsonl"),
        "--eval-data", str(ROOT / "data/arith/heldout.jsonl"), "--eval-limit", "4", "--eval-k", "2",
        "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "24", "--no-compile"]


def train_run(out: Path, name: str, *args) -> list[dict]:
    train.main([*FAST, "--out-dir", str(out), "--name", name, *args])
    return metrics(out / name)


def numbers(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """What a reporter is to show: each number of the rows under its name, as (step, value) in order."""
    found = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)):
                found.setdefault(key, []).append((row["step"], value))
    return found


def events(run_dir: Path, purge: bool = True) -> EventAccumulator:
    """The run's TensorBoard events as TensorBoard itself reads them (its plugin accumulator, which the
    `tensorboard` command serves; purge: its handling of restarts)."""
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0},
                           purge_orphaned_data=purge)
    return acc.Reload()


def scalars(acc: EventAccumulator) -> dict[str, list[tuple[int, float]]]:
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"] if acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"}


def assert_same(shown: dict, rows: list[dict]):
    """Each number of the rows at its step, once, in TensorBoard's float32 (NaN as NaN)."""
    expected = numbers(rows)
    assert shown.keys() == expected.keys()
    for key, points in expected.items():
        assert [s for s, _ in shown[key]] == [s for s, _ in points], key
        for (_, got), (step, value) in zip(shown[key], points):
            want = float(np.float32(value))
            assert got == want or (math.isnan(got) and math.isnan(want)), (key, step, got, value)


def test_tensorboard_shows_every_number_of_metrics_jsonl_at_its_step(tmp_path):
    rows = train_run(tmp_path, "tb", "--steps", "2", "--report-to", "tensorboard")
    acc = events(tmp_path / "tb")
    assert_same(scalars(acc), rows)
    assert {"loss", "kl3", "threads", "eval/heldout/mean@2", "eval/mean@2"} <= set(scalars(acc))
    assert [s for s, _ in scalars(acc)["eval/mean@2"]] == [0, 2] and len(scalars(acc)["loss"]) == 2
    config = acc.Tensors("config/text_summary")
    assert [c.step for c in config] == [0]
    text = config[0].tensor_proto.string_val[0].decode()
    assert {**strict(text), "provenance": None} == {**strict_file(tmp_path / "tb/config.json"),
                                                        "provenance": None}  # the settings


def test_a_resumed_run_shows_each_step_once(tmp_path):
    """Stopped after logging step 3 but before its checkpoint (checkpoint/ removed: the latest is step 2's),
    then resumed: step 3 is logged again, and TensorBoard reads it once."""
    train_run(tmp_path, "r", "--steps", "3", "--save-every", "2", "--report-to", "tensorboard")
    shutil.rmtree(tmp_path / "r/checkpoint")
    train.main(["--resume", str(tmp_path / "r")])
    rows = metrics(tmp_path / "r")
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]
    assert len(list((tmp_path / "r/tensorboard").iterdir())) == 2  # the first process's file and the resume's
    assert_same(scalars(events(tmp_path / "r")), rows)
    # read without the restart mark, the stopped process's steps are there twice: the test can fail
    assert [s for s, _ in scalars(events(tmp_path / "r", purge=False))["loss"]] == [1, 2, 3, 1, 2, 3]
    # the settings once, the resume's
    assert [c.step for c in events(tmp_path / "r").Tensors("config/text_summary")] == [0]


def test_steps_resumed_without_tensorboard_are_shown_once_it_is_back(tmp_path):
    """Step 1 run with --report-to none, step 2 with tensorboard (added on resume: it shows the run from its
    start), step 3 with none, step 4 with tensorboard again: TensorBoard shows every step once."""
    train_run(tmp_path, "gap", "--steps", "1")
    for steps, report_to in (("2", "tensorboard"), ("3", "none"), ("4", "tensorboard")):
        train.main(["--resume", str(tmp_path / "gap"), "--steps", steps, "--report-to", report_to])
    rows = metrics(tmp_path / "gap")
    assert [r["step"] for r in rows] == [0, 1, 1, 2, 2, 3, 3, 4, 4]  # each sitting's last evaluation is kept
    assert_same(scalars(events(tmp_path / "gap")), rows)


def test_sft_reports_too(tmp_path):
    data = tmp_path / "sft.jsonl"
    rows = [{"problem": f"{a}+{b}", "solution": f"{a}+{b}={a + b}. \\boxed{{{a + b}}}", "answer": str(a + b)}
            for a in range(3, 7) for b in range(2, 4)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    sft.main(["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(data), "--steps", "2", "--batch-size",
              "4", "--max-len", "48", "--out-dir", str(tmp_path), "--name", "s",
              "--report-to", "tensorboard"])
    rows = metrics(tmp_path / "s")
    assert [r["step"] for r in rows] == [1, 2]
    assert_same(scalars(events(tmp_path / "s")), rows)


# ----------------------------------------------------------------------------
# wandb, offline: its run file read back

BLOCK = 32768  # the .wandb file: a 7-byte header, then LevelDB's log format (records in 32 KiB blocks)


def wandb_records(path: Path):
    """The protobuf records of an offline run's .wandb file."""
    from wandb.proto import wandb_internal_pb2
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a .wandb file (the format changed?)"
    pos, payload = 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's last few bytes are padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        payload += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            payload = b""
            yield record


def wandb_run(path: Path) -> tuple:
    """(run record, {step: {key: value}}) of an offline run's .wandb file; wandb's own keys (_step, ...) left
    out."""
    run, history = None, {}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
        elif kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                     for item in record.history.item}
            history[record.history.step.num] = {k: v for k, v in items.items() if not k.startswith("_")}
    return run, history


def by_step(rows: list[dict]) -> dict[int, dict]:
    """The rows' numbers merged per step: wandb keeps one history row a step (its loss and evaluation)."""
    merged = {}
    for row in rows:
        merged.setdefault(row["step"], {}).update(
            {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))})
    return merged


class WandbProcesses:
    """The offline wandb processes of a test, each writing under its own WANDB_DIR (tmp_path/wandb-N):
    wandb names an offline run's folder after the second the process started in, so two started within
    one second would write one file."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.tmp_path, self.monkeypatch, self.count = tmp_path, monkeypatch, 0
        self.next()

    def next(self):
        """The last process is torn down (wandb's service writes its run file after run.finish(): at exit, or
        on teardown), and the next one writes to a folder of its own."""
        import wandb
        wandb.teardown()
        self.count += 1
        folder = self.tmp_path / f"wandb-{self.count}"
        folder.mkdir()
        self.monkeypatch.setenv("WANDB_DIR", str(folder))

    def files(self, run_dir: Path) -> list[Path]:
        """The .wandb file each process wrote for the run's wandb run (<run>/wandb-id), in the order they
        ran."""
        run_id = (run_dir / "wandb-id").read_text()
        pattern = f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"
        return [file for n in range(1, self.count + 1)
                for file in (self.tmp_path / f"wandb-{n}").glob(pattern)]

    def histories(self, run_dir: Path) -> list[dict]:
        return [wandb_run(file)[1] for file in self.files(run_dir)]


@pytest.fixture
def processes(tmp_path, monkeypatch) -> WandbProcesses:
    return WandbProcesses(tmp_path, monkeypatch)


def assert_sent_once(histories: list[dict], rows: list[dict]):
    """Each step of metrics.jsonl in exactly one process's history, with metrics.jsonl's numbers."""
    sent = [step for history in histories for step in history]
    assert sorted(sent) == sorted(set(sent)), f"a step sent twice: {sent}"
    assert {step: numbers for history in histories for step, numbers in history.items()} == by_step(rows)


def test_wandb_offline_gets_every_number_and_a_resume_goes_on_in_the_same_run(tmp_path, processes):
    first = train_run(tmp_path, "w", "--steps", "1", "--report-to", "wandb", "--wandb-project", "p")
    processes.next()
    run_id = (tmp_path / "w/wandb-id").read_text()
    files = processes.files(tmp_path / "w")
    assert len(files) == 1
    run, history = wandb_run(files[0])
    assert (run.run_id, run.project, run.display_name) == (run_id, "p", "w")
    config = {item.key: json.loads(item.value_json) for item in run.config.update if item.key != "_wandb"}
    assert {**config, "provenance": None} == {**strict_file(tmp_path / "w/config.json"),
                                              "provenance": None}  # the settings
    assert history == by_step(first)

    train.main(["--resume", str(tmp_path / "w"), "--steps", "2"])
    processes.next()
    files = processes.files(tmp_path / "w")
    assert len(files) == 2  # the same wandb run, continued: only the resumed steps are sent
    run, history = wandb_run(files[1])
    assert run.run_id == run_id and list(history) == [2]
    assert_sent_once(processes.histories(tmp_path / "w"), metrics(tmp_path / "w"))


def test_steps_resumed_without_wandb_are_sent_once_it_is_back(tmp_path, processes):
    """Step 1 under wandb, step 2 under --report-to none, step 3 under wandb again: the third process first
    sends step 2 (its loss and evaluation rows), so the wandb run has every step of metrics.jsonl once."""
    run = tmp_path / "gap"
    train_run(tmp_path, "gap", "--steps", "1", "--report-to", "wandb")
    processes.next()
    train.main(["--resume", str(run), "--steps", "2", "--report-to", "none"])
    train.main(["--resume", str(run), "--steps", "3", "--report-to", "wandb"])
    processes.next()
    rows = metrics(run)
    assert [r["step"] for r in rows] == [0, 1, 1, 2, 2, 3, 3]  # an evaluation at every step after the first
    histories = processes.histories(run)
    assert [list(history) for history in histories] == [[0, 1], [2, 3]]
    assert_sent_once(histories, rows)


def test_steps_a_resume_redoes_are_not_sent_to_wandb_again(tmp_path, processes):
    """Stopped after logging step 3 but before its checkpoint (checkpoint/ removed: the latest is step 2's),
    then resumed: step 3 is redone, and logged again in metrics.jsonl, but wandb has it: nothing is sent."""
    run = tmp_path / "r"
    first = train_run(tmp_path, "r", "--steps", "3", "--save-every", "2", "--report-to", "wandb")
    processes.next()
    assert (run / "wandb-step").read_text() == "3"
    shutil.rmtree(run / "checkpoint")
    train.main(["--resume", str(run)])
    processes.next()
    assert [r["step"] for r in metrics(run)] == [0, 1, 2, 3, 3]
    histories = processes.histories(run)
    assert [list(history) for history in histories] == [[0, 1, 2, 3], []]
    assert_sent_once(histories, first)  # step 3 as first logged


def test_wandb_step_is_written_as_each_step_is_sent_and_a_new_wandb_run_starts_from_none(tmp_path, processes):
    """wandb-step holds the last step sent from the moment it is sent (a kill loses no record of it); the next
    start sends nothing up to it. Without wandb-id the wandb run is new: a stale wandb-step is dropped."""
    run, step_file = tmp_path / "run", tmp_path / "run/wandb-step"
    run.mkdir()
    reporter = metrics_log.Wandb(run, {}, "p")
    assert reporter.resend_after == -1 and not step_file.exists()
    reporter.log(0, {"a": 1.0})
    assert step_file.read_text() == "0"
    reporter.log(1, {"a": 2.0})
    reporter.log(1, {"b": 3.0})
    assert step_file.read_text() == "1"
    reporter.close()
    processes.next()
    again = metrics_log.Wandb(run, {}, "p")
    assert again.resend_after == 1
    again.log(1, {"b": 4.0})  # a redone step: the wandb run has it
    again.log(2, {"a": 5.0})
    again.close()
    processes.next()
    assert processes.histories(run) == [{0: {"a": 1.0}, 1: {"a": 2.0, "b": 3.0}}, {2: {"a": 5.0}}]
    assert step_file.read_text() == "2"
    (run / "wandb-id").unlink()
    fresh = metrics_log.Wandb(run, {}, "p")
    assert fresh.resend_after == -1 and not step_file.exists()
    fresh.close()


def test_a_wandb_step_file_that_holds_no_step_is_one_line(tmp_path, capsys):
    train_run(tmp_path, "s", "--steps", "1")
    (tmp_path / "s/wandb-id").write_text("abcd1234")
    (tmp_path / "s/wandb-step").write_text("x")
    capsys.readouterr()
    line = error_line(capsys, train.main, ["--resume", str(tmp_path / "s"), "--steps", "2", "--report-to",
                                           "wandb"])
    assert line == (f"error: --report-to wandb could not start (ValueError: {tmp_path / 's/wandb-step'} "
                    "holds 'x', not a step: remove it to resend every row)")


# ----------------------------------------------------------------------------
# Errors: one line at start; a destination failing mid-run is turned off

@pytest.mark.parametrize("args, missing, message", [
    *((["--report-to", p], p, f"--report-to {p} needs the {p} package: pip install {p}")
      for p in ("tensorboard", "wandb")),
    (["--report-to", "none", "wandb"], None, "--report-to none cannot go with wandb"),
    (["--wandb-project", "x"], None, "--wandb-project would be ignored: without --report-to wandb there is "
                                     "no wandb run"),
    (["--report-to", "mlflow"], None, "argument --report-to: invalid choice: 'mlflow'")])
def test_a_bad_report_flag_or_missing_package_is_one_line_before_any_run(tmp_path, capsys, monkeypatch, args,
                                                                         missing, message):
    if missing:  # as if not installed: import and find_spec both fail
        monkeypatch.setitem(sys.modules, missing, None)
    argv = [*FAST, "--out-dir", str(tmp_path), "--name", "m", "--steps", "1", *args]
    assert error_line(capsys, train.main, argv).startswith(f"error: {message}")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("raised, said", [  # what wandb raises (WANDB_MODE=bogus; a 300-character project)
    ("1 validation error for Settings\nmode\n  Input should be 'online' or 'offline' [input_value='bogus']",
     "1 validation error for Settings mode Input should be 'online' or 'offline' [input_value='bogus']"),
    (f"Invalid project name '{'p' * 300}': exceeded 128 characters",
     f"Invalid project name '{'p' * 39}... exceeded 128 characters")])
def test_a_destination_that_cannot_start_is_one_line_and_leaves_no_folder(tmp_path, capsys, monkeypatch, raised,
                                                                        said):
    def offline(*args):
        raise RuntimeError(raised)
    monkeypatch.setattr(metrics_log.Wandb, "__init__", offline)
    argv = [*FAST, "--out-dir", str(tmp_path), "--name", "n", "--steps", "1", "--report-to", "tensorboard",
            "wandb"]
    line = error_line(capsys, train.main, argv)
    assert line == f"error: --report-to wandb could not start (RuntimeError: {said})"
    assert not (tmp_path / "n").exists()  # tensorboard/, opened first, went with the folder


@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_destination_that_cannot_start_on_resume_leaves_the_run_as_it_was(tmp_path, capsys, command):
    """config.json records a resume's change only once the resume has started: a --report-to that cannot
    start (here a file where its folder goes) is one line, and no byte of the run changes."""
    if command == "train":
        train_run(tmp_path, "r", "--steps", "1")
        main = train.main
    else:
        test_sft_reports_too(tmp_path)  # a 2-step sft run "s", reporting to tensorboard
        shutil.rmtree(tmp_path / "s/tensorboard")
        main = sft.main
    run = tmp_path / ("r" if command == "train" else "s")
    (run / "tensorboard").write_text("in the way")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    capsys.readouterr()  # the first run's output
    line = error_line(capsys, main, ["--resume", str(run), "--steps", "3", "--report-to", "tensorboard"])
    assert line.startswith("error: --report-to tensorboard could not start")
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_a_destination_failing_mid_run_is_warned_once_and_the_run_completes(tmp_path, capsys, monkeypatch):
    log = metrics_log.TensorBoard.log

    def full_disk(self, step, values):
        if step >= 2:
            raise OSError(28, "No space left on device")
        log(self, step, values)
    monkeypatch.setattr(metrics_log.TensorBoard, "log", full_disk)
    rows = train_run(tmp_path, "f", "--steps", "3", "--report-to", "tensorboard")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 3]  # metrics.jsonl has every row
    warnings = [line for line in capsys.readouterr().err.splitlines() if "--report-to" in line]
    assert warnings == ["warning: --report-to tensorboard failed at step 2 (OSError: [Errno 28] No space "
                        "left on device); it is turned off, metrics.jsonl keeps every row"]
    assert_same(scalars(events(tmp_path / "f")), rows[:2])  # what it showed before it failed


class Recorder:
    """A reporter that keeps what it is sent."""
    name = "recorder"

    def __init__(self, resend_after: int):
        self.resend_after, self.sent, self.closed = resend_after, [], False

    def log(self, step, values):
        self.sent.append((step, values))

    def close(self):
        self.closed = True


def test_only_numbers_are_reported_and_a_reporter_first_gets_the_rows_after_its_resend_after(tmp_path):
    with closing(RunLog(tmp_path)) as log:
        log.write({"step": 0, "eval/mean@2": 50.0})
        log.write({"step": 1, "loss": 0.25})
        log.write({"step": 1, "eval/mean@2": 75.0})
        has_all, has_0, new = Recorder(1), Recorder(0), Recorder(-1)
        log.send_to([has_all, has_0, new])
        log.write({"step": 2, "loss": 0.5, "threads": 2, "note": "text", "ids": [1, 2], "drift": None})
    step_2 = (2, {"loss": 0.5, "threads": 2})
    assert has_all.sent == [step_2]
    assert has_0.sent == [(1, {"loss": 0.25}), (1, {"eval/mean@2": 75.0}), step_2]
    assert new.sent == [(0, {"eval/mean@2": 50.0}), (1, {"loss": 0.25}), (1, {"eval/mean@2": 75.0}), step_2]
    assert all(r.closed for r in (has_all, has_0, new)) and log.reporters == []


def test_a_folder_named_like_the_package_is_not_the_package(monkeypatch):
    """wandb writes its runs to ./wandb: with the package uninstalled, that folder is found as a namespace
    package, which is not wandb; the install line says so, not a failure to start."""
    import importlib.machinery
    from nanoatr.machinery.flags import ConfigError, TrainConfig, check_report_to
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: importlib.machinery.ModuleSpec(name, None))
    with pytest.raises(ConfigError, match=r"--report-to wandb needs the wandb package: pip install wandb"):
        check_report_to(TrainConfig(report_to=["wandb"]))


def test_wandb_honours_wandb_project_and_wandb_name_unless_the_flag_names_a_project(tmp_path, monkeypatch):
    """TRL users set WANDB_PROJECT: it is the project when --wandb-project is not given (then nanoatr);
    WANDB_NAME names the wandb run (else the run folder). A stand-in wandb records what init was given."""
    from nanoatr.machinery.metrics_log import Wandb
    given = []
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kw: given.append(kw),
                                                                      teardown=lambda: None))
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("WANDB_NAME", raising=False)
    Wandb(tmp_path, {}, None)
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    Wandb(tmp_path, {}, None)
    monkeypatch.setenv("WANDB_NAME", "my-run")
    Wandb(tmp_path, {}, "flag")
    assert [(kw["project"], kw["name"]) for kw in given] == [("nanoatr", tmp_path.name),
                                                             ("from-env", tmp_path.name), ("flag", "my-run")]
