"""A run folder: made or resumed under its lock, its JSONL logs and config.json, and what a resume may
change (train.py's and sft.py's Session opens theirs as a RunFolder; checkpoints are checkpoint.py's).
Its layout and what it guarantees: docs/library.md#folder"""
import contextlib
import dataclasses
import fcntl
import json
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

from nanoatr.machinery import checkpoint, distributed
from nanoatr.machinery.checkpoint import CheckpointError, _sha256, reason, replace_bytes, warn, write_bytes
from nanoatr.machinery.flags import ConfigError
from nanoatr.machinery.metrics_log import RunLog, TensorBoard, Wandb, jsonl_rows, past
from nanoatr.machinery.resume import recorded_changes
from nanoatr.rewards import one_line


LOCK = ".lock"


class RunFolder:
    """A run's folder as a command opens it: made, or resumed and repaired, under its lock (claim: only the
    process that writes), the checkpoint to start from (load_checkpoint: every process), the logs
    (open_log). branch_of: (run folder, its checkpoint) that a new folder continues (branch_run)."""

    def __init__(self, path, resuming: bool, branch_of: tuple[Path, Path] | None = None):
        self.path, self.resuming, self.branch_of = Path(path), resuming, branch_of
        self.lock = self.log = self.checkpoint = None
        self.state, self.before = {"step": 0}, set()

    def claim(self):
        """A new folder (a used one is refused), a branch (a new one too) or the resumed one, repaired;
        locked either way."""
        if self.branch_of:
            self.lock = branch_run(*self.branch_of, self.path)
            return
        if self.resuming:  # its files now: a start that fails removes those it made (discard)
            self.before = set(self.path.rglob("*"))
        self.lock = lock_run(self.path, resume=self.resuming)

    def load_checkpoint(self) -> int:
        """The newest usable checkpoint of a resumed run and its trainer state (read once: it is big);
        returns its step."""
        self.checkpoint = checkpoint.latest(self.path) if self.resuming else None
        self.state = checkpoint.load_state(self.checkpoint) if self.checkpoint else {"step": 0}
        return self.state["step"]

    def open_log(self):
        """metrics.jsonl and samples.jsonl; resumed, without the rows past the checkpoint's step. A resume
        with no checkpoint left would drop every step the log holds: refused (CheckpointError)."""
        self.log = RunLog(self.path, resume_step=self.state["step"] if self.resuming else None)
        if self.resuming and self.checkpoint is None and self.log.past:
            raise CheckpointError(f"{self.path} has no checkpoint, but its metrics.jsonl logs steps up to "
                                  f"{max(self.log.past)}: a resume would start again at step 0 and drop "
                                  f"them. Start a new run (--name), or remove {self.path / 'metrics.jsonl'} "
                                  "and samples.jsonl to redo this one from step 0")

    def write_config(self, cfg, change: dict | None = None, code: dict | None = None):
        """config.json: a new run's settings (the config dataclass, resolved). A resumed run's stay what it
        started with; this resume's change (resumed_config), if any, is added to its "changes" at the
        checkpoint's step. A change recorded past that step (a damaged newer checkpoint was skipped) took
        effect at it in the steps redone, and says so. Every start adds its "provenance" (distributed's) with
        `code`, {--reward function: its file's SHA-256}, as "reward_sha256" (a resume says which changed)."""
        path, ran = self.path / "config.json", {"reward_sha256": code} if code else {}
        if not self.resuming:
            write_json_atomic(path, {**record(cfg), "provenance": [distributed.provenance(0) | ran]})
            return
        saved, step = json.loads(path.read_text()), self.state["step"]
        earlier = recorded_changes(saved, path)
        changes = [{**c, "step": min(c["step"], step)} for c in earlier]
        if change:
            changes.append({"step": step, **change})
        before = saved.get("provenance") if isinstance(saved.get("provenance"), list) else []  # as found
        recorded = [s.get("reward_sha256") for s in before if isinstance(s, dict)]  # None: not recorded
        last = next((r for r in reversed(recorded) if isinstance(r, dict)), {})  # the last sitting's
        if changed := [k for k, sha in (code or {}).items() if last.get(k, sha) != sha]:
            warn(f"note: the file of reward function {', '.join(changed)} has changed since the last sitting "
                 f"(its SHA-256 is not the one {path} records): the steps from {step} on are graded by it")
        sitting = {"provenance": [*before, distributed.provenance(step) | ran]}
        write_json_atomic(path, {**saved, **({"changes": changes} if changes != earlier else {}), **sitting})

    def open_reporters(self, cfg):
        """cfg.report_to's destinations, started with the run's settings (before write_config, so that one
        that cannot start records no change): every later metrics row goes to them too. One that cannot start
        is a ConfigError naming it (none is left open)."""
        config, opened = record(cfg), []
        for name in cfg.report_to:
            try:
                if name == "tensorboard":
                    opened.append(TensorBoard(self.path, config))
                elif name == "wandb":
                    opened.append(Wandb(self.path, config, cfg.wandb_project))
            except Exception as e:  # an optional package: whatever it raises is its own
                for reporter in opened:
                    reporter.close()
                raise ConfigError(f"--report-to {name} could not start ({one_line(e)})") from None
        self.log.send_to(opened)

    def discard(self) -> str:
        """After a start (or run) that failed, the folder closed. Unless this process logged a row, a resumed
        one is left as it was (the files it made removed, the lock file's bytes put back), a new one with no
        checkpoint removed whole; for a new one kept, the words that say how to continue it ("" else)."""
        logged = self.log is not None and self.log.logged > 0
        if self.lock is None:  # not this process's to change
            return ""
        kept = logged or (not self.resuming and any(self.path.glob("checkpoint*")))
        if self.resuming and not kept and not self.branch_of:
            self.lock.restore()
            with contextlib.suppress(OSError):
                for path in sorted(set(self.path.rglob("*")) - self.before, reverse=True):  # inside first
                    path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
        elif not kept:
            shutil.rmtree(self.path, ignore_errors=True)
        self.close()
        return f"; the run folder {self.path} holds what was logged (continue with --resume {self.path})" \
            if kept and not self.resuming else ""

    def close(self):
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def reward_code(rewards, n: int) -> dict[str, str | None]:
    """Which code grades: {name: the SHA-256 of its module's file} of the first n functions (--reward's)."""
    modules = [sys.modules.get(getattr(fn, "__module__", "")) for fn in rewards.functions[:n]]
    return {name: _sha256(getattr(m, "__file__", None) or "") for m, name in zip(modules, rewards.names)}


def record(cfg) -> dict:
    """What config.json records of a new run (and --report-to shows): its settings, and the SHA-256 of its
    problem files, which a resume checks (check_files)."""
    return dataclasses.asdict(cfg) | {"sha256": {f: _sha256(f) for f in [cfg.data, *cfg.eval_data]}}


def write_json_atomic(path, obj):
    """config.json and the like: the old file or the new one, never half of one."""
    replace_bytes(Path(path), (json.dumps(obj, indent=2) + "\n").encode())


def unique_name(prefix: str) -> str:
    """A default run name: the start time and 6 random hex digits (two starts in one second differ)."""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


class RunLock:
    """An exclusive flock on run_dir/.lock, taken without waiting; the kernel drops it when the process
    dies."""

    def __init__(self, run_dir):
        self.run_dir, self.fd = Path(run_dir), None

    def acquire(self) -> "RunLock":
        try:
            fd = os.open(self.run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise CheckpointError(f"run folder {self.run_dir} is not writable ({reason(e)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise CheckpointError(f"run folder {self.run_dir} is in use by another process (pid {pid})") \
                from None
        self.fd, self.previous = fd, os.pread(fd, 64, 0)
        self.restore(f"{os.getpid()}\n".encode())
        return self

    def restore(self, data: bytes | None = None):
        """The file holds `data` (None: what it held before acquire). The pid is only for a second process's
        message (disk full: see lock_run)."""
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, self.previous if data is None else data, 0)

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def branch_run(run: Path, chosen: Path, new: Path) -> RunLock:
    """A new run folder `new` (locked; a used one is refused) that goes on from `run`'s checkpoint `chosen`
    of step s: that checkpoint (hard links where the disk allows), metrics.jsonl's and samples.jsonl's rows up
    to s, and config.json as the run stood at s (branched_record). `run` is read under its lock (not while
    another process trains it) and left as it was."""
    lock = lock_run(new, resume=False)
    try:
        held = RunLock(run).acquire()
        try:
            step, problem = checkpoint.check(chosen)
            if problem is not None:
                raise CheckpointError(f"--resume {chosen}: not a usable checkpoint ({problem})")
            try:  # hard links: a save never rewrites a checkpoint's file, it writes a new checkpoint
                shutil.copytree(chosen, new / checkpoint.LATEST, copy_function=os.link)
            except OSError:  # another file system: a copy
                shutil.rmtree(new / checkpoint.LATEST, ignore_errors=True)
                shutil.copytree(chosen, new / checkpoint.LATEST)
            for name in ("metrics.jsonl", "samples.jsonl"):  # its whole rows up to `step`
                if (run / name).is_file():
                    rows = jsonl_rows(run / name)[0]
                    write_bytes(new / name, b"".join(line + b"\n" for line, r in rows if not past(r, step)))
            saved = json.loads((run / "config.json").read_text())
            write_json_atomic(new / "config.json", branched_record(saved, run, chosen, step, new))
        finally:
            held.restore()
            held.release()
    except BaseException as e:
        lock.release()
        shutil.rmtree(new, ignore_errors=True)
        if isinstance(e, OSError):
            raise CheckpointError(f"cannot copy {chosen} into {new} ({reason(e)})") from None
        raise
    return lock


def branched_record(saved: dict, run: Path, chosen: Path, step: int, new: Path) -> dict:
    """A branch's config.json: the run's as it stood at its checkpoint of `step` (the changes recorded at or
    before it, the sittings from before it), named for its new folder, and "branched_from": where it came
    from. Session trains it so (resumed_config's at_step)."""
    changes = [c for c in recorded_changes(saved, run / "config.json") if c["step"] <= step]
    sittings = [p for p in saved.get("provenance") or [] if isinstance(p, dict) and p.get("step", 0) < step]
    return {**{k: v for k, v in saved.items() if k != "changes"}, **({"changes": changes} if changes else {}),
            "name": new.name, "out_dir": str(new.parent), "provenance": sittings,
            "branched_from": {"run": str(run), "checkpoint": chosen.name, "step": step}}


def _used(run_dir: Path) -> bool:
    """Anything but a lock and empty files (a start killed before its config.json: a new start takes it)."""
    return any(p.name != LOCK and not p.name.startswith(".write-test-") and not (p.is_file() and not
               p.stat().st_size) for p in run_dir.iterdir())


def lock_run(run_dir: Path, resume: bool) -> RunLock:
    """A run folder, locked and checked writable (one line now, before any model is loaded, rather than a
    failed save hours later): a new one made (one that holds anything is refused), or the run to resume,
    repaired (checkpoint.recover; then call latest())."""
    used = CheckpointError(f"run folder {run_dir} already exists: continue it with --resume {run_dir}, "
                           "or choose another --name")
    if resume and not run_dir.is_dir():
        raise CheckpointError(f"--resume {run_dir}: no such run folder")
    try:
        run_dir.mkdir(parents=True, exist_ok=resume)
    except FileExistsError:
        if not run_dir.is_dir() or _used(run_dir):
            raise used from None
    except OSError as e:
        raise CheckpointError(f"cannot create run folder {run_dir} ({reason(e)})") from None
    lock, probe = RunLock(run_dir).acquire(), run_dir / f".write-test-{os.getpid()}"
    try:
        if not resume and _used(run_dir):  # another process made it between our mkdir and our lock
            raise used
        write_bytes(probe, b"ok")
        probe.unlink()
        if resume:
            checkpoint.recover(run_dir)
    except BaseException as e:
        probe.unlink(missing_ok=True)  # on a full disk the file is made, then its write fails
        lock.release()
        if not resume and not _used(run_dir):  # a new run that fails here (disk full) leaves nothing
            shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(e, OSError):
            raise CheckpointError(f"run folder {run_dir} is not writable ({reason(e)})") from None
        raise
    return lock
