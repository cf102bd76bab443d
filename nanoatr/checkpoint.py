"""The run directory: checkpoints, logs, lock.

    runs/<name>/
        .lock                  flock'ed by the one process writing the run (its pid inside)
        config.json            the run's settings, written atomically (write_json_atomic)
        metrics.jsonl          one JSON object per line, each with its "step"; samples.jsonl likewise
        checkpoint/            the latest complete checkpoint: eval.py / sample.py take it as --model
        checkpoint-step000040/ older checkpoints, the newest keep - 1 of them
        .checkpoint-new/       a save in progress (or cut short: recover() finishes or removes it)

A checkpoint is the weights (a full model directory, config.json + model.safetensors; or a LoRA
adapter in peft's format, adapter_config.json + adapter_model.safetensors), the tokenizer files,
trainer_state.pt (optimizer, step, ...) and manifest.json ({"step", "files": {name: size}, "sha256":
{name: digest}}), written last. Guarantees:
- save() writes and fsyncs everything in .checkpoint-new/, checks it, then renames checkpoint/ to
  checkpoint-stepN/ and .checkpoint-new/ to checkpoint/, fsyncing the run directory after each
  rename. A crash at any instant leaves a complete checkpoint of the previous or the new step that
  latest() finds; recover() (start-up, under the lock) swaps in a new checkpoint that was complete
  when the save died and removes leftovers. A failed save (disk full, read-only; in any writer) removes
  its partial directory and raises CheckpointError; the previous checkpoint is untouched. The tokenizer files
  are written from memory (read_tokenizer_files once at start), never copied from a checkpoint.
- latest() checks candidates newest first (sizes, safetensors headers, JSON, tokenizer, SHA-256s, state)
  and falls back to an older one with a one-line warning naming what was wrong (a changed byte too).
- RunLog writes each row with one os.write and an fsync; a failed write is cut back off.
  Opened on resume from step s, it cuts a torn last line and drops rows past s (they are redone),
  so every step appears once. read_metrics() skips unreadable lines with one warning per file.
- create_run() refuses a used folder; RunLock keeps a second process out of a run folder. A failed start leaves nothing.
Every error a user can meet is a CheckpointError whose message is one line naming the path.
"""
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors import SafetensorError

from nanoatr import lora
from nanoatr.tokenizer import TOKENIZER_FILES

LATEST, NEW, MANIFEST, STATE, LOCK = "checkpoint", ".checkpoint-new", "manifest.json", "trainer_state.pt", ".lock"
LEFTOVER = ".checkpoint-"  # NEW and the trash of a deletion: removed by recover() and save()
LEGACY = ("checkpoint.old", "checkpoint.new")  # what older versions leave behind
KEPT = re.compile(r"checkpoint-step(\d+)$")


class CheckpointError(ValueError):
    """A run folder, log or checkpoint that cannot be used or written; the message is one line for the user."""


def _warn(message: str):
    print(message, file=sys.stderr, flush=True)


def _why(e: BaseException) -> str | None:
    """An OSError in a phrase ("disk full"), also as torch.save (RuntimeError) or safetensors report it; else None."""
    if isinstance(e, SafetensorError) and (code := re.search(r"(?:os error|code:) (\d+)", str(e))):
        e = OSError(int(code[1]), os.strerror(int(code[1])))
    e = e.__context__ if isinstance(e, RuntimeError) and isinstance(e.__context__, OSError) else e
    if isinstance(e, OSError):
        return "disk full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else (e.strerror or str(e)).lower()


def _sha256(path) -> str | None:
    """What sha256sum prints, None if unreadable."""
    h = hashlib.sha256()
    with contextlib.suppress(OSError), open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
        return h.hexdigest()


def _fsync(path, directory: bool = False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_bytes(path, data: bytes):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _replace_bytes(path: Path, data: bytes):
    """Write a whole file atomically: a temp file, fsynced, renamed over it, the directory fsynced."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        _write_bytes(tmp, data)
        os.replace(tmp, path)
        _fsync(path.parent, directory=True)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise CheckpointError(f"cannot write {path} ({_why(e)})") from None


def write_json_atomic(path, obj):
    """config.json and the like: the old file or the new one, never half of one."""
    _replace_bytes(Path(path), (json.dumps(obj, indent=2) + "\n").encode())


def read_tokenizer_files(model_dir) -> dict[str, bytes]:
    """The tokenizer files of a model directory, read once at start; every save writes them from memory."""
    files = [Path(model_dir) / name for name in TOKENIZER_FILES]
    return {f.name: f.read_bytes() for f in files if f.is_file()}


# ----------------------------------------------------------------------------
# Checkpoints

def save(run_dir, weights, tokenizer_files: dict[str, bytes], state: dict, keep: int = 2) -> Path:
    """Write a checkpoint of state["step"] and make it run_dir/checkpoint; keep the newest `keep` in all.

    weights: our Qwen3 (the full model is written) or the PeftModel around it (the adapter only).
    tokenizer_files: read_tokenizer_files(...) of the run's start, never a checkpoint a save may delete."""
    if keep < 1:
        raise CheckpointError(f"keep must be >= 1, not {keep}")
    run_dir, step = Path(run_dir), int(state["step"])
    new, cur = run_dir / NEW, run_dir / LATEST
    recover(run_dir)  # finishes a swap cut short, removes leftovers
    try:
        new.mkdir(parents=True)
        if hasattr(weights, "peft_config"):
            lora.save_adapter(weights, new)
        else:
            weights.save_pretrained(new)
        for name, data in tokenizer_files.items():
            _write_bytes(new / name, data)
        with open(new / STATE, "wb") as f:  # a file object: torch's "unexpected pos" then has the OSError as context
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        for f in (files := [f for f in sorted(new.iterdir()) if f.is_file()]):
            _fsync(f)  # those written by save_pretrained / peft
        _write_bytes(new / MANIFEST, json.dumps({"step": step, "files": {f.name: f.stat().st_size for f in files},
                                                 "sha256": {f.name: _sha256(f) for f in files}}).encode())
        _fsync(new, directory=True)
        problem = check(new, hashes=False)[1]  # hashes: just read from these very files
        if problem:  # a writer that failed without an error
            raise CheckpointError(problem)
    except BaseException as e:
        shutil.rmtree(new, ignore_errors=True)
        if (why := f"it is unusable: {e}" if isinstance(e, CheckpointError) else _why(e)) is None:
            raise  # Ctrl-C, or a bug: as it is
        previous = f"the previous checkpoint {cur} is intact" if cur.is_dir() else "no earlier checkpoint exists"
        raise CheckpointError(f"{why} while writing checkpoint {new} (step {step}): {previous}") from None
    try:
        _install(run_dir)
    except OSError as e:  # .checkpoint-new/ is complete: recover() puts it in place
        raise CheckpointError(f"{_why(e)} while moving checkpoint {new} (step {step}) into place: {run_dir} "
                              f"keeps a complete checkpoint (--resume {run_dir} continues from it)") from None
    try:
        older = _older(run_dir)
        for s, path in [(s, p) for s, p in older if s is None or s >= step] + \
                       [(s, p) for s, p in older if s is not None and s < step][keep - 1:]:
            _trash(path)
    except OSError as e:
        _warn(f"warning: could not remove an old checkpoint in {run_dir} ({_why(e)})")
    return cur


def _install(run_dir: Path):
    """The swap: checkpoint/ -> checkpoint-stepN/ (an unusable one is deleted), .checkpoint-new/ -> checkpoint/."""
    new, cur = run_dir / NEW, run_dir / LATEST
    if cur.is_dir():
        previous = check(cur, load=False)[0]
        if previous is None:  # unusable (latest() fell back past it): not kept
            _trash(cur)
        else:
            older = run_dir / f"checkpoint-step{previous:06d}"
            if older.exists():
                _trash(older)
            os.rename(cur, older)
            _fsync(run_dir, directory=True)
    os.rename(new, cur)
    _fsync(run_dir, directory=True)


def _older(run_dir: Path) -> list[tuple[int | None, Path]]:
    """(step, path) of the checkpoints kept beside checkpoint/, newest first; a legacy checkpoint.old last."""
    kept = sorted(((int(m[1]), p) for p in run_dir.iterdir() if (m := KEPT.match(p.name)) and p.is_dir()), reverse=True)
    return kept + [(None, run_dir / LEGACY[0])] * (run_dir / LEGACY[0]).is_dir()


def _trash(path: Path):
    """Delete a directory so that a crash midway never leaves a half-deleted one under its real name."""
    trash = path.with_name(f"{LEFTOVER}trash-{path.name}")
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(path, trash)
    _fsync(path.parent, directory=True)
    shutil.rmtree(trash)


def recover(run_dir):
    """Repair a run directory after a crash; call it holding the lock (resume_run and save do).

    A complete .checkpoint-new/ newer than checkpoint/ (a save killed after writing it) is swapped
    in; if checkpoint/ is still missing, the newest usable older checkpoint becomes it. Leftovers
    are removed; old checkpoints are pruned by the next save."""
    run_dir = Path(run_dir)
    new, cur = run_dir / NEW, run_dir / LATEST
    if not run_dir.is_dir():
        return
    try:
        if new.is_dir():
            step, problem = check(new)
            current = check(cur, load=False)[0] if cur.is_dir() else None
            if problem is None and (current is None or step > current):
                _install(run_dir)
        if not cur.is_dir():
            for _, path in _older(run_dir):
                if check(path)[1] is None:
                    os.rename(path, cur)
                    _fsync(run_dir, directory=True)
                    break
        for path in run_dir.iterdir():
            if path.name.startswith(LEFTOVER) or path.name == LEGACY[1]:
                shutil.rmtree(path)
    except OSError as e:
        raise CheckpointError(f"cannot repair run folder {run_dir} ({_why(e)})") from None


def latest(run_dir) -> Path | None:
    """The newest usable checkpoint of a run (checkpoint/, then older ones), or None if it has none.

    Reads only. An unusable one is skipped with a warning; CheckpointError if none is usable."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    candidates = [p for p in [run_dir / LATEST] + [p for _, p in _older(run_dir)] if p.is_dir()]
    bad = []
    for path in candidates:
        problem = check(path)[1]
        if problem is None:
            for b, why in bad:
                _warn(f"warning: checkpoint {b} is unusable ({why}); falling back to {path}")
            return path
        bad.append((path, problem))
    if bad:
        raise CheckpointError(f"{run_dir} has no usable checkpoint: {bad[0][0]}: {bad[0][1]}")
    return None


def check(path, load: bool = True, hashes: bool | None = None) -> tuple[int | None, str | None]:
    """(step, None) for a complete checkpoint directory, else (None, what is wrong in one phrase).

    Checks the manifest's file sizes, each safetensors header against its file size, the JSON config, the tokenizer,
    (load, or no manifest: an older nanoatr's) that trainer_state.pt unpickles (memory-mapped), and (hashes, by
    default load) each file's SHA-256 (every byte read, docs/speed.md says what it costs; an older manifest has sizes only)."""
    path = Path(path)
    manifest, digests = None, {}
    if (path / MANIFEST).is_file():
        try:
            manifest = json.loads((path / MANIFEST).read_bytes())
            sizes, step, digests = dict(manifest["files"]), int(manifest["step"]), dict(manifest.get("sha256", {}))
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            return None, f"{MANIFEST} is unreadable"
        for name, size in sizes.items():
            if not (path / name).is_file():
                return None, f"{name} is missing"
            if (actual := (path / name).stat().st_size) != size:
                return None, f"{name} has {actual} bytes instead of {size}"
    config = "adapter_config.json" if (path / "adapter_config.json").is_file() else "config.json"
    try:
        json.loads((path / config).read_bytes())
    except (OSError, ValueError):
        return None, f"{config} is missing or not valid JSON"
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        return None, "no *.safetensors weights"
    for f in weights:
        if problem := _safetensors_problem(f):
            return None, problem
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return None, "no tokenizer (tokenizer.json / tokenizer_config.json)"
    if not (path / STATE).is_file():
        return None, f"{STATE} is missing"
    if load or manifest is None:
        try:
            state = torch.load(path / STATE, map_location="cpu", weights_only=False, mmap=True)
            saved = int(state["step"])
        except Exception as e:  # unpickling raises anything
            return None, f"{STATE} does not load ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})"
        if manifest is not None and saved != step:
            return None, f"{STATE} holds step {saved} but {MANIFEST} says {step}"
        step = saved
    for name in digests if (load if hashes is None else hashes) else ():  # last: the slow check, and the others
        if _sha256(path / name) != digests[name]:                          # name a damage more precisely
            return None, f"{name} does not match its SHA-256 in {MANIFEST} (changed since the save)"
    return step, None


def _safetensors_problem(f: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then the data its offsets span."""
    size = f.stat().st_size
    try:
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if size < 8 or n > size - 8:
                raise ValueError
            header = json.loads(fh.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return f"{f.name} has no valid safetensors header (truncated?)"
    if 8 + n + end != size:
        return f"{f.name} has {size} bytes but its header says {8 + n + end} (truncated?)"
    return None


def load_state(path) -> dict:
    # weights_only=False: the state holds RNG states and plain Python values written by us.
    return torch.load(Path(path) / STATE, map_location="cpu", weights_only=False)


# ----------------------------------------------------------------------------
# Logs

class RunLog:
    """metrics.jsonl and samples.jsonl of a run. `rows`: the metrics rows in the file (kept and written)."""

    def __init__(self, run_dir: Path, rows: list[dict], fsync: bool):
        self.run_dir, self.rows, self.fsync = run_dir, rows, fsync
        self.files = {}
        for name in ("metrics.jsonl", "samples.jsonl"):
            try:
                self.files[name] = os.open(run_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as e:
                self.close()
                raise CheckpointError(f"cannot open {run_dir / name} ({_why(e)})") from None

    @classmethod
    def open(cls, run_dir, resume_step: int | None = None, fsync: bool = True) -> "RunLog":
        """Resuming from a checkpoint of step s (resume_step=s): rows past s are dropped first."""
        run_dir = Path(run_dir)
        rows = repair_jsonl(run_dir / "metrics.jsonl", resume_step)
        repair_jsonl(run_dir / "samples.jsonl", resume_step)
        return cls(run_dir, rows, fsync)

    def write(self, row: dict):
        self._append("metrics.jsonl", [row])
        self.rows.append(row)

    def has(self, step, prefix: str = "eval/") -> bool:
        """A row of `step` with a key starting with `prefix` is logged (say, a finished run's last evaluation)."""
        return any(r.get("step") == step and any(k.startswith(prefix) for k in r) for r in self.rows)

    def samples(self, step, name, rows):
        self._append("samples.jsonl", [{"step": step, "eval": name, **r} for r in rows])

    def _append(self, name: str, rows: list[dict]):
        """All rows in one os.write; a failed or partial write is cut back off the file."""
        fd, data = self.files[name], "".join(json.dumps(r) + "\n" for r in rows).encode()
        start = os.lseek(fd, 0, os.SEEK_END)  # the lock makes us the only writer
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self.fsync:
                os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise CheckpointError(f"{_why(e)} while writing {self.run_dir / name}: the row of step "
                                  f"{rows[0].get('step') if rows else '?'} was not logged") from None

    def close(self):
        for fd in self.files.values():
            os.close(fd)
        self.files = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def repair_jsonl(path: Path, max_step: int | None = None) -> list[dict]:
    """The rows of a JSONL log, after cutting a torn last line, unreadable lines and rows whose
    "step" is past max_step; the file is rewritten (atomically) when anything was cut."""
    if not path.is_file():
        return []
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as e:
        raise CheckpointError(f"cannot read {path} ({_why(e)})") from None
    last = lines.pop()  # b"" unless the last line is torn
    kept, rows, bad, later = [], [], 0, 0
    for line in lines + [last] * bool(last):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):  # a dict is whole: a cut one lacks its closing brace
            bad += bool(line.strip())
            continue
        if max_step is not None and isinstance(row.get("step"), (int, float)) and row["step"] > max_step:
            later += 1
            continue
        kept.append(line)
        rows.append(row)
    if bad or later or last:
        _replace_bytes(path, b"".join(line + b"\n" for line in kept))
    if bad or later:
        done = ([f"cut {bad} unreadable line(s) (a torn write)"] if bad else []) + \
               ([f"dropped {later} row(s) past step {max_step}, the checkpoint's (they are redone)"] if later else [])
        _warn(f"{'warning' if bad else 'note'}: {path}: " + "; ".join(done))
    return rows


def read_metrics(path) -> list[dict]:
    """The JSON objects of a metrics.jsonl, for readers (plot, sweep): bad lines are skipped with one warning."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path.parent}: no {path.name} (is it a run directory?)")
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise CheckpointError(f"cannot read {path} ({_why(e)})") from None
    rows, bad = [], []
    for lineno, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        elif line.strip():
            bad.append(lineno)
    if bad:
        _warn(f"warning: {path}: skipped {len(bad)} unreadable line(s) (line {', '.join(map(str, bad[:3]))}"
              f"{', ...' if len(bad) > 3 else ''})")
    return rows


# ----------------------------------------------------------------------------
# Runs

def unique_name(prefix: str) -> str:
    """A default run name: the start time and 6 random hex digits (two starts in one second differ)."""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


class RunLock:
    """An exclusive flock on run_dir/.lock, taken without waiting; the kernel drops it when the process dies."""

    def __init__(self, run_dir):
        self.run_dir, self.fd = Path(run_dir), None

    def acquire(self) -> "RunLock":
        try:
            fd = os.open(self.run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise CheckpointError(f"run folder {self.run_dir} is not writable ({_why(e)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise CheckpointError(f"run folder {self.run_dir} is in use by another process (pid {pid})") from None
        with contextlib.suppress(OSError):  # the pid is only for a second process's message (disk full: see
            os.ftruncate(fd, 0)             # check_writable)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None

    def __enter__(self):
        return self if self.fd is not None else self.acquire()

    def __exit__(self, *exc):
        self.release()


def check_writable(run_dir):
    """One line now, before any model is loaded, rather than a failed save hours later."""
    probe = Path(run_dir) / f".write-test-{os.getpid()}"
    try:
        _write_bytes(probe, b"ok")
    except OSError as e:
        raise CheckpointError(f"run folder {run_dir} is not writable ({_why(e)})") from None
    finally:  # also after a failed write: on a full disk the file is made, then its write fails
        probe.unlink(missing_ok=True)


def _used(run_dir: Path) -> bool:
    return any(p.name != LOCK and not p.name.startswith(".write-test-") for p in run_dir.iterdir())


def create_run(out_dir, name) -> RunLock:
    """A new run folder out_dir/name, locked and checked writable; refuses one that holds anything."""
    run_dir = Path(out_dir) / name
    refuse = CheckpointError(f"run folder {run_dir} already exists: continue it with --resume {run_dir}, "
                             "or choose another --name")
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        if not run_dir.is_dir() or _used(run_dir):
            raise refuse from None
    except OSError as e:
        raise CheckpointError(f"cannot create run folder {run_dir} ({_why(e)})") from None
    lock = RunLock(run_dir).acquire()
    try:
        if _used(run_dir):  # another process made it between our mkdir and our lock
            raise refuse
        check_writable(run_dir)
    except BaseException:
        discard_run(lock)  # and the folder if empty: a start that fails here (disk full) leaves nothing
        raise
    return lock


def discard_run(lock: RunLock):
    """A new run that stopped before writing anything (a bad flag found after the folder was made): its
    lock released and its folder removed, so that a failed start leaves nothing behind."""
    run_dir = lock.run_dir
    lock.release()
    if run_dir.is_dir() and all(p.name == LOCK or (p.is_file() and p.stat().st_size == 0) for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)  # only the lock and empty logs


def resume_run(run_dir) -> RunLock:
    """An existing run folder, locked, checked writable and repaired (recover); then call latest()."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"--resume {run_dir}: no such run folder")
    lock = RunLock(run_dir).acquire()
    try:
        check_writable(run_dir)
        recover(run_dir)
    except BaseException:
        lock.release()
        raise
    return lock
