"""Fault injection on the run directory: a kill or an error at every stage of a save, disk full (in
every writer, as each reports it), real SIGKILLs of a process saving and logging in a loop, torn log
lines, a failed start that leaves nothing, two processes on one run."""
import errno
import io
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
import time
import traceback
from contextlib import closing

import pytest
import torch
from safetensors import SafetensorError

import nanoatr.model.files
from nanoatr.machinery import checkpoint, folder
from nanoatr.machinery.checkpoint import CheckpointError
from nanoatr.machinery.metrics_log import RunLog
from test_checkpoint import assert_loads, names, save, state, tiny  # noqa: F401 (tiny: the fixture)
from conftest import jsonl, metrics


class Killed(BaseException):
    """A process killed at this instant: nothing after it runs (we look at a snapshot taken just before)."""


class Faults:
    """Counts the filesystem operations of a save; at the k-th, either takes a snapshot of the run
    directory as a kill there would leave it and raises Killed, or raises `error`.

    fsync is counted but not performed: it matters only for power loss, which no test can cause."""

    def __init__(self, monkeypatch, fail_at=None, run_dir=None, snapshot=None, error=None):
        self.k, self.fail_at, self.run_dir, self.snapshot, self.error = 0, fail_at, run_dir, snapshot, error
        self.stages = []
        for module, name in [(os, "rename"), (os, "replace"), (os, "fsync"), (os, "mkdir"), (shutil, "rmtree"),
                             (checkpoint, "write_bytes"), (torch, "save"), (nanoatr.model.files, "save_file")]:
            monkeypatch.setattr(module, name, self.wrap(name, getattr(module, name)))

    def wrap(self, name, real):
        def op(*args, **kw):
            if self.fail_at is None or self.k < self.fail_at:
                self.k += 1
                paths = [os.readlink(f"/proc/self/fd/{args[0]}")] if name == "fsync" else \
                    [a for a in args if isinstance(a, (str, os.PathLike))]
                self.stages.append(f"{name}({', '.join('/'.join(str(a).split('/')[-2:]) for a in paths)})")
                if self.k == self.fail_at:
                    self.fail_at = -1  # once: the handlers below run unhindered
                    if self.error is not None:
                        raise self.error
                    if name == "write_bytes":  # killed halfway through writing the file
                        with open(args[0], "wb") as f:
                            f.write(args[1][:len(args[1]) // 2])
                    shutil.copytree(self.run_dir, self.snapshot, symlinks=True)
                    raise Killed
            if name == "fsync":
                return None
            return real(*args, **kw)
        return op


@pytest.fixture(scope="module")
def template(tiny, tmp_path_factory):
    """A run with checkpoints of steps 1 and 2 (keep 2), a lock file, and the leftover of a save
    killed while writing (which the next save removes)."""
    run = tmp_path_factory.mktemp("template")
    for step in (1, 2):
        save(run, tiny, step)
    (run / ".lock").write_text("")
    (run / ".checkpoint-new").mkdir()
    (run / ".checkpoint-new/tokenizer.json").write_bytes(tiny[1]["tokenizer.json"][:100])
    return run


def assert_clean_next_save(run, tiny, previous):
    """The next save works and leaves checkpoint/ and one older checkpoint (keep 2), nothing else."""
    save(run, tiny, 4)
    assert names(run) == [".lock", "checkpoint", f"checkpoint-step{previous:06d}"]
    assert_loads(run / "checkpoint", 4)


def full_disk_outcome(run, tiny, capsys, where) -> str:
    """How save() met a disk full at some stage: one line naming it, or (saved) a warning while pruning."""
    try:
        save(run, tiny, 3)  # failed while pruning (a warning), or harmlessly (mkdir of an existing dir)
    except CheckpointError as e:
        message = str(e)
        assert "\n" not in message and "disk full" in message, (where, message)
        if "while writing checkpoint" not in message:
            return "swap" if "into place" in message else "recover"  # recover(): removing the leftover
        assert f"the previous checkpoint {run / 'checkpoint'} is intact" in message
        assert not (run / ".checkpoint-new").exists(), where
        return "write"
    assert checkpoint.latest(run) == run / "checkpoint" and checkpoint.check(run / "checkpoint")[0] == 3
    err = capsys.readouterr().err
    assert err == "" or err.startswith(f"warning: could not remove an old checkpoint in {run} (disk full)")
    return "saved"


@pytest.mark.parametrize("fault", ["kill", "disk full"])
def test_a_fault_at_every_stage_of_a_save(monkeypatch, tiny, template, tmp_path, capsys, fault):
    """The process killed (the run folder as the kill left it) or the disk full (one line) at each operation of
    a save: latest() finds step 2 or 3 complete; recover() finishes or removes the interrupted save (step 3
    whenever its directory was complete); the next save is clean."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # for speed: it matters only for power loss
    run = shutil.copytree(template, tmp_path / "count")
    with monkeypatch.context() as m:  # the operations of a save, counted
        faults = Faults(m)
        save(run, tiny, 3)
    seen = set()
    for k, stage in enumerate(faults.stages, 1):
        run, where = shutil.copytree(template, tmp_path / f"run{k}"), f"{fault} at stage {k}: {stage}"
        with monkeypatch.context() as m:
            if fault == "kill":
                Faults(m, fail_at=k, run_dir=run, snapshot=tmp_path / f"snap{k}")
                with pytest.raises(Killed):
                    save(run, tiny, 3)
                run = tmp_path / f"snap{k}"
            else:
                Faults(m, fail_at=k, error=OSError(errno.ENOSPC, "No space left on device"))
                outcome = full_disk_outcome(run, tiny, capsys, where)
        step = checkpoint.check(found := checkpoint.latest(run))[0]
        assert step in (2, 3), where
        assert_loads(found, step)
        complete = checkpoint.check(run / ".checkpoint-new")[1] is None
        checkpoint.recover(run)
        after = checkpoint.check(run / "checkpoint")[0]
        assert checkpoint.latest(run) == run / "checkpoint" and after == (3 if complete else step), where
        assert not [n for n in names(run) if n.startswith(".checkpoint")], where
        seen.add((step, after) if fault == "kill" else outcome)
        assert_clean_next_save(run, tiny, after)
        assert capsys.readouterr().err == "", where  # no checkpoint was ever unusable
    # killed before, between the renames (rolled forward), after
    assert seen == ({(2, 2), (2, 3), (3, 3)} if fault == "kill" else {"recover", "write", "swap", "saved"})


# ----------------------------------------------------------------------------
# Each writer's own error on a failed write: torch.save and safetensors do not raise OSError

ENOSPC_SAFETENSORS = {  # seen on a full tmpfs (0.8), and the Debug form of older versions
    "safetensors": "Error while serializing: I/O error: No space left on device (os error 28)",
    "safetensors-0.4": 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left '
                       'on device" })'}


class FullFile(io.FileIO):
    """A file on a disk with `room` bytes left: a write past them fails as the kernel's does (ENOSPC)."""
    room = 1000

    def write(self, data):
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def full_disk_for(monkeypatch, name, nth=1):
    """checkpoint's open() of the nth file called `name` for writing gives a FullFile: the real torch.save
    writing into it then raises what it raises on a full disk (RuntimeError "... unexpected pos")."""
    opened = []

    def fake_open(path, mode="r", *args, **kw):
        if os.path.basename(path) == name and "w" in mode:
            opened.append(path)
            if len(opened) == nth:
                return FullFile(path, mode)
        return open(path, mode, *args, **kw)
    monkeypatch.setattr(checkpoint, "open", fake_open, raising=False)


def disk_full_message(run, step=3, why="disk full"):
    return (f"{why} while writing checkpoint {run / '.checkpoint-new'} (step {step}): the previous checkpoint "
            f"{run / 'checkpoint'} is intact")


def in_child(limit: int, fn) -> tuple[str, str]:
    """fn() in a forked process where the kernel refuses to write past `limit` bytes of any file
    (RLIMIT_FSIZE: EFBIG, a real failed write without root or a full disk); (type, message) of what it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            fn()
            out = ["ok", ""]
        except BaseException as e:
            out = [type(e).__name__, str(e)]
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return tuple(json.loads(out))


@pytest.mark.parametrize("writer", ["safetensors", "torch.save", "safetensors-0.4", "peft", "silent"])
def test_a_failed_write_in_every_writer_is_one_line(monkeypatch, tiny, template, tmp_path, writer):
    """Real writers, real failed writes (the kernel's file size limit): the weights (safetensors, written
    first), or trainer_state.pt (torch.save) made the only file over it. A full disk as safetensors 0.4 and
    peft's writer report it stood in for (SafetensorError "... code: 28", "... (os error 28)"), and a silent
    one: no error, a short file. Each is the one line of any failed save, the previous checkpoint intact and
    the next save clean."""
    from nanoatr import lora
    run, why = shutil.copytree(template, tmp_path / "run"), "disk full"
    if writer in ("safetensors", "torch.save"):
        largest = max(f.stat().st_size for f in (run / "checkpoint").iterdir())
        limit, big = (1000, state(3)) if writer == "safetensors" else \
            (largest + 1000, {**state(3), "optimizer": {"state": {0: {"exp_avg": torch.zeros(largest // 2)}}}})
        got = in_child(limit, lambda: checkpoint.save(run, tiny[0], tiny[1], big))
        assert got == ("CheckpointError", disk_full_message(run, why="file too large"))
    else:
        weights, real = tiny[0], nanoatr.model.files.save_file

        def full(state, path, **kw):
            if writer != "silent":
                raise SafetensorError(ENOSPC_SAFETENSORS.get(writer, ENOSPC_SAFETENSORS["safetensors"]))
            real(state, path, **kw)  # as safetensors can do on a full disk: the header whole, the data cut
            os.truncate(path, 8 + int.from_bytes(Path(path).read_bytes()[:8], "little"))
        if writer == "peft":
            import peft.peft_model
            weights = lora.add_adapters(nanoatr.model.Qwen3.from_pretrained(run / "checkpoint"), 2, 4.0,
                                        ["q_proj"], base="base")
            monkeypatch.setattr(peft.peft_model, "safe_save_file", full)
        else:
            monkeypatch.setattr(nanoatr.model.files, "save_file", full)
        if writer == "silent":  # the same weights as the previous checkpoint's: the same sizes
            whole = run / "checkpoint/model.safetensors"
            why = (f"it is unusable: model.safetensors has {8 + int.from_bytes(whole.read_bytes()[:8], 'little')} "
                   f"bytes but its header says {whole.stat().st_size} (truncated?)")
        with pytest.raises(CheckpointError) as e:
            checkpoint.save(run, weights, tiny[1], state(3))
        monkeypatch.undo()
        assert str(e.value) == disk_full_message(run, why=why)
    assert names(run) == [".lock", "checkpoint", "checkpoint-step000001"]
    assert_loads(run / "checkpoint", 2)
    assert_clean_next_save(run, tiny, 2)


def test_a_full_disk_mid_run_is_one_line_and_the_run_resumes(tmp_path, monkeypatch, capsys):
    """train.py, its second checkpoint on a full disk: exit 1 with one line, no traceback; --resume then
    goes on from the first checkpoint, and the log holds every step once."""
    import train
    from test_train import FAST
    run = tmp_path / "r"
    with monkeypatch.context() as m:
        full_disk_for(m, "trainer_state.pt", nth=2)
        with pytest.raises(SystemExit) as e:
            train.main([*FAST, "--out-dir", str(tmp_path), "--name", "r", "--steps", "3", "--save-every", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "error: " + disk_full_message(run, step=2)
    assert checkpoint.check(run / "checkpoint")[0] == 1 and not (run / ".checkpoint-new").exists()
    train.main(["--resume", str(run)])  # room again
    rows = jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]
    assert_loads(run / "checkpoint", 3)


@pytest.mark.parametrize("sig, code, nth", [("SIGINT", 130, 1), ("SIGTERM", 143, 2)])  # mid-run; the last
def test_a_signal_while_a_checkpoint_is_written_stops_the_run_there(tmp_path, monkeypatch, capsys, sig, code,
                                                                     nth):
    """Ctrl-C or SIGTERM while step nth's checkpoint (of 2) is written: no step more, no final evaluation,
    exit 128 + signal and one line saying so."""
    import train
    from test_train import FAST
    real, saves = checkpoint.save, []

    def save(*args, **kw):
        saves.append(args[3]["step"])
        if len(saves) == nth:
            os.kill(os.getpid(), getattr(signal, sig))
        return real(*args, **kw)
    monkeypatch.setattr(checkpoint, "save", save)
    with pytest.raises(SystemExit) as e:
        train.main([*FAST, "--out-dir", str(tmp_path), "--name", "r", "--steps", "2", "--save-every", "1"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert (e.value.code, last) == (code, f"error: stopped by {sig} after step {nth}; checkpoint saved (continue "
                                          f"with --resume {tmp_path / 'r'})")
    rows = metrics(tmp_path / "r")
    assert [(r["step"], "loss" in r) for r in rows] == [(0, False), *((s, True) for s in range(1, nth + 1))]
    assert checkpoint.check(tmp_path / "r/checkpoint")[0] == nth


# ----------------------------------------------------------------------------
# A failed start leaves nothing

@pytest.mark.parametrize("start", ["new", "resume"])
@pytest.mark.parametrize("how", ["fsync", "rlimit"])
def test_a_start_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, tiny, start, how):
    """No probe file in the run folder, no new run folder (with its lock) left behind. fsync: ENOSPC
    where ext4 or NFS report it; rlimit: every write refused by the kernel."""
    run = tmp_path / "r"
    if start == "resume":
        folder.lock_run(tmp_path / "r", resume=False).release()
        save(run, tiny, 1)
        before = names(run)

    def begin():
        folder.lock_run(run, resume=start == "resume").release()
    if how == "rlimit":
        got = in_child(0, begin)
    else:
        def full(fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "fsync", full)
        with pytest.raises(CheckpointError) as e:
            begin()
        monkeypatch.undo()
        got = ("CheckpointError", str(e.value))
    why = "disk full" if how == "fsync" else "file too large"
    assert got == ("CheckpointError", f"run folder {run} is not writable ({why})")
    if start == "new":
        assert not run.exists()
    else:
        assert names(run) == before


# ----------------------------------------------------------------------------
# Real kills

def _train_forever(run, tiny, steps, save_every):
    """The child: resume the run (or start it), log a row per step and save every save_every steps."""
    model, tok = tiny
    lock = folder.lock_run(run, resume=run.exists())
    found = checkpoint.latest(run)
    start = checkpoint.load_state(found)["step"] if found else 0
    log = RunLog(run, resume_step=start if found else None)
    for step in range(start + 1, steps + 1):
        log.write({"step": step, "loss": 1.0 / step, "pad": "x" * 2000})  # long rows: kills land mid-row too
        if step % save_every == 0:
            checkpoint.save(run, model, tok, state(step))
    lock.release()


def test_sigkill_at_random_times_loses_nothing(tmp_path, tiny):
    """A process saving and logging in a loop is SIGKILLed at random times, then resumed: after
    every kill latest() loads, steps never go back, and the final log holds every step once, in order."""
    run, rng, last, steps = tmp_path / "run", random.Random(0), 0, 10 ** 9  # only a kill ends the child
    for kill in range(9):
        pid = os.fork()
        if pid == 0:  # the child never returns into pytest
            code = 0
            try:
                _train_forever(run, tiny, steps, save_every=3)
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        time.sleep(rng.uniform(0.1, 0.6))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"the child ended by itself (exit {os.WEXITSTATUS(status)}), see stderr"
        found = checkpoint.latest(run)
        if found is not None:
            step = checkpoint.check(found)[0]
            assert_loads(found, step)
            assert step >= last
            last = step
    assert last > 0
    _train_forever(run, tiny, last + 6, save_every=3)  # resumed to the end, in process
    rows = jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, last + 7))
    assert names(run) == [".lock", "checkpoint", f"checkpoint-step{last + 3:06d}", "metrics.jsonl", "samples.jsonl"]


# ----------------------------------------------------------------------------
# Torn log lines

@pytest.mark.parametrize("partial", [0, 7], ids=["nothing-written", "half-written"])
def test_disk_full_while_logging_leaves_whole_lines(tmp_path, monkeypatch, partial):
    real = os.write
    with closing(RunLog(tmp_path)) as log:
        log.write({"step": 1})
        calls = []

        def full(fd, data):
            calls.append(1)
            if partial and len(calls) == 1:
                return real(fd, bytes(data)[:partial])
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "write", full)
        with pytest.raises(CheckpointError) as e:
            log.write({"step": 2, "loss": 0.25})
        assert str(e.value) == f"disk full while writing {tmp_path / 'metrics.jsonl'}: the row of step 2 was not logged"
        with pytest.raises(CheckpointError, match="samples.jsonl: the row of step 2"):
            log.samples(2, "heldout", [{"completion": "x"}])
        monkeypatch.undo()
        assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n'
        log.write({"step": 2})  # space again: the log goes on
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert (tmp_path / "samples.jsonl").read_text() == ""


# ----------------------------------------------------------------------------
# Two processes

LOCKER = """
import sys, time
from pathlib import Path
from nanoatr.machinery import checkpoint, folder
try:
    lock = folder.lock_run(Path(sys.argv[1], "same"), resume=False)
except checkpoint.CheckpointError as e:
    print("error:", e, flush=True)
    sys.exit(2)
print("ok", flush=True)
folder.write_json_atomic(lock.run_dir / "config.json", {"pid": __import__("os").getpid()})
sys.stdin.read()  # holds the run until the test closes stdin
"""


def test_two_processes_on_one_run_folder(tmp_path):
    """Started together with the same --name: exactly one runs; the other gets one line. While the
    winner lives, --resume is refused naming its pid; once it is SIGKILLed, the lock is free."""
    env = {**os.environ, "PYTHONPATH": str(checkpoint.Path(checkpoint.__file__).parent.parent)}
    procs = [subprocess.Popen([sys.executable, "-c", LOCKER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    first = [p.stdout.readline().strip() for p in procs]
    assert sorted(line == "ok" for line in first) == [False, True], first
    winner, loser = (procs[0], procs[1]) if first[0] == "ok" else (procs[1], procs[0])
    assert loser.wait(timeout=30) == 2
    refused = first[procs.index(loser)]
    assert refused.startswith(f"error: run folder {tmp_path / 'same'} ")
    assert "is in use by another process" in refused or "already exists" in refused
    with pytest.raises(CheckpointError, match=rf"is in use by another process \(pid {winner.pid}\)"):
        folder.lock_run(tmp_path / "same", resume=True)
    with pytest.raises(CheckpointError, match="already exists: continue it with --resume"):
        folder.lock_run(tmp_path / "same", resume=False)
    winner.kill()
    winner.wait(timeout=30)
    folder.lock_run(tmp_path / "same", resume=True).release()  # the kernel dropped the dead process's lock


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command, delay", [("train.py", 1.0), ("train.py", 3.0), ("eval.py", 1.0), ("sample.py", 1.0)])
def test_ctrl_c_during_start_up_is_one_line(tmp_path, command, delay):
    """Ctrl-C while a command imports torch or loads its model: one `error:` line, exit 130, no traceback,
    and no run folder left behind (train.py's is removed: nothing was written to it). The first probe is
    a second in: importing torch takes longer, and a Ctrl-C before Python has run the command's first
    line at all cannot be caught by it."""
    args = {"train.py": ["--no-compile", "--out-dir", str(tmp_path / "runs"), "--name", "r"],
            "eval.py": ["--out", str(tmp_path / "e.jsonl")], "sample.py": ["1+1="]}[command]
    proc = subprocess.Popen([sys.executable, str(ROOT / command), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    run = tmp_path / "runs" / "r"
    if run.exists():  # the held-out evaluation of step 0 was logged before the Ctrl-C: kept, and said so
        assert (run / "metrics.jsonl").read_text() and err == (
            f"error: interrupted during start-up; the run folder {run} holds what was logged (continue with "
            f"--resume {run})\n"), err
    else:
        assert err == "error: interrupted during start-up\n", err


def test_ctrl_c_during_start_up_ends_the_process_even_inside_a_swallowing_except():
    """A library's bare `except:` around an import must not swallow the start-up Ctrl-C (under load one did:
    eval.py printed the error line, then went on with numpy half-imported into a RecursionError traceback)."""
    code = ("import os, signal, time, nanoatr\nnanoatr.quiet_ctrl_c()\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(5)\nexcept BaseException:\n    pass\nprint('went on')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a `cmd &` shell ignores it
    assert (out.returncode, out.stdout, out.stderr) == (130, "", "error: interrupted during start-up\n")


@pytest.mark.parametrize("where", ["merge_adapter.py", "train.py --merge"])
def test_a_full_disk_while_merging_is_one_line(tmp_path, monkeypatch, capsys, where):
    """Writing the merged model (scripts/merge_adapter.py, or train.py --merge after a LoRA run) on a full
    disk: one `error:` line naming the folder, the adapter intact; not a SafetensorError traceback."""
    import train
    sys.path.insert(0, str(ROOT / "scripts"))
    import merge_adapter
    from tiny import make_model_dir
    base = make_model_dir(tmp_path / "base")
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(4)))
    args = ["--model", str(base), "--data", str(data), "--eval-data", "--steps", "1", "--prompts-per-step", "2",
            "--group-size", "2", "--max-new-tokens", "4", "--lora-rank", "2", "--no-compile",
            "--out-dir", str(tmp_path / "runs"), "--name", "r"]
    if where == "merge_adapter.py":
        train.main(args)
    monkeypatch.setattr(nanoatr.model.files, "save_file",
                        lambda *a, **k: (_ for _ in ()).throw(SafetensorError(ENOSPC_SAFETENSORS["safetensors"])))
    adapter, out = tmp_path / "runs/r/checkpoint", tmp_path / ("m" if where == "merge_adapter.py" else "runs/r/merged")
    with pytest.raises(SystemExit) as e:
        if where == "merge_adapter.py":
            merge_adapter.main(["--adapter", str(adapter), "--out", str(out)])
        else:
            train.main(args + ["--merge"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and (e.value.code, err.splitlines()[-1]) == (
        2 if where == "merge_adapter.py" else 1, f"error: cannot write the merged model to {out} "
        f"({ENOSPC_SAFETENSORS['safetensors']}); the adapter {adapter} is intact")
    assert checkpoint.check(adapter)[1] is None  # intact
