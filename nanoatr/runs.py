"""A run folder: made or resumed under its lock, its JSONL logs and config.json, and what a resume may
change. train.py's Session (nanoatr/session.py) and sft.py both open theirs as a RunFolder; the
checkpoints inside are nanoatr/checkpoint.py's.

    runs/<name>/
        .lock          flock'ed by the one process writing the run (its pid inside)
        config.json    the run's settings, written atomically (write_json_atomic)
        metrics.jsonl  one JSON object per line, each with its "step"; samples.jsonl likewise
        checkpoint/    and older checkpoint-stepN/: nanoatr/checkpoint.py
        tensorboard/   --report-to tensorboard's event files
        wandb-id       --report-to wandb's run id; wandb-step: the last step sent to it

Guarantees:
- create_run() refuses a used folder; RunLock keeps a second process out of a run folder; resume_run()
  repairs a folder a crash left (checkpoint.recover). A failed start (RunFolder.discard) leaves nothing
  new, and a resumed folder byte for byte; a resume never drops logged steps for want of a checkpoint.
- RunLog writes each row with one os.write and an fsync; a failed write is cut back off.
  Opened on resume from step s, it cuts a torn last line and drops rows past s (they are redone) at its
  first write, so every step appears once. read_metrics() skips unreadable lines with one warning per file.
- A resume never rewrites what a run was: every flag is in RESUME_RULES (train.py) or SFT_RESUME_RULES
  (sft.py), refused (one line naming it, the saved value and why), recorded, or free. resumed_config()
  gives the settings as the run last ran; config.json keeps those it started with and, under "changes",
  each recorded change {"step": S, "<field>": {"from": a, "to": b}} at the checkpoint's step S it took
  effect at (RunFolder.write_config), and the SHA-256 of its problem files, which a resume checks.
- --report-to (TensorBoard, Wandb) sends every number of each metrics row on, after the row is in
  metrics.jsonl, which stays the record: a destination that raises is warned about once and turned off.
Every error a user can meet is one line: a CheckpointError naming the path, or a ConfigError naming the flag.
"""
import contextlib
import dataclasses
import fcntl
import json
import numbers
import os
import secrets
import shutil
import time
import types
import typing
from pathlib import Path

from nanoatr import checkpoint, distributed
from nanoatr.checkpoint import CheckpointError, _sha256, reason, replace_bytes, warn, write_bytes
from nanoatr.config import ConfigError, flag
from nanoatr.data import located

LOCK = ".lock"


class RunFolder:
    """A run's folder as a command opens it: made, or resumed and repaired, under its lock (claim: only the
    process that writes), the checkpoint to start from (load_checkpoint: every process), the logs
    (open_log)."""

    def __init__(self, path, resuming: bool):
        self.path, self.resuming = Path(path), resuming
        self.lock = self.log = self.checkpoint = None
        self.state, self.before = {"step": 0}, set()

    def claim(self):
        """A new folder (a used one is refused) or the resumed one, repaired; locked either way."""
        if self.resuming:  # its files now: a start that fails removes those it made (discard)
            self.before = set(self.path.rglob("*")) if self.path.is_dir() else set()
        self.lock = resume_run(self.path) if self.resuming else create_run(self.path.parent, self.path.name)

    def load_checkpoint(self) -> int:
        """The newest usable checkpoint of a resumed run and its trainer state (read once: it is big);
        returns its step."""
        self.checkpoint = checkpoint.latest(self.path) if self.resuming else None
        self.state = checkpoint.load_state(self.checkpoint) if self.checkpoint else {"step": 0}
        return self.state["step"]

    def open_log(self):
        """metrics.jsonl and samples.jsonl; resumed, without the rows past the checkpoint's step. A resume
        with no checkpoint left would drop every step the log holds: refused (CheckpointError)."""
        self.log = RunLog.open(self.path, resume_step=self.state["step"] if self.resuming else None)
        if self.resuming and self.checkpoint is None and self.log.past:
            raise CheckpointError(f"{self.path} has no checkpoint, but its metrics.jsonl logs steps up to "
                                  f"{max(self.log.past)}: a resume would start again at step 0 and drop "
                                  f"them. Start a new run (--name), or remove {self.path / 'metrics.jsonl'} "
                                  "and samples.jsonl to redo this one from step 0")

    def write_config(self, cfg, change: dict | None = None):
        """config.json: a new run's settings (the config dataclass, resolved). A resumed run's stay what it
        started with; this resume's change (resumed_config), if any, is added to its "changes" at the
        checkpoint's step. A change recorded past that step (a damaged newer checkpoint was skipped) took
        effect at it in the steps redone, and says so. Every start adds its "provenance" (distributed's)."""
        path = self.path / "config.json"
        if not self.resuming:
            write_json_atomic(path, {**record(cfg), "provenance": [distributed.provenance(0)]})
            return
        saved, step = json.loads(path.read_text()), self.state["step"]
        earlier = recorded_changes(saved, path)
        changes = [{**c, "step": min(c["step"], step)} for c in earlier]
        if change:
            changes.append({"step": step, **change})
        before = saved.get("provenance") if isinstance(saved.get("provenance"), list) else []  # as found
        sitting = {"provenance": [*before, distributed.provenance(step)]}
        write_json_atomic(path, {**saved, **({"changes": changes} if changes != earlier else {}), **sitting})

    def open_reporters(self, cfg):
        """cfg.report_to's destinations, started with the run's settings (before write_config, so that one
        that cannot start records no change): every later metrics row goes to them too. One that cannot start
        is a ConfigError naming it (none is left open)."""
        config = record(cfg)
        opened = []
        for name in cfg.report_to:
            try:
                if name == "tensorboard":
                    opened.append(TensorBoard(self.path, config))
                elif name == "wandb":
                    opened.append(Wandb(self.path, config, cfg.wandb_project))
            except Exception as e:  # an optional package: whatever it raises is its own
                for reporter in opened:
                    reporter.close()
                raise ConfigError(f"--report-to {name} could not start ({type(e).__name__}: {e})") from None
        self.log.send_to(opened)

    def discard(self) -> str:
        """After a start (or run) that failed, the folder closed. Unless this process logged a row, a resumed
        one is left as it was (the files it made removed, the lock file's bytes put back), a new one with no
        checkpoint removed whole; for a new one kept, the words that say how to continue it ("" else)."""
        logged = self.log is not None and self.log.logged > 0
        if self.lock is None:  # not this process's to change
            return ""
        kept = logged or (not self.resuming and any(self.path.glob("checkpoint*")))
        if self.resuming and not kept:
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


def record(cfg) -> dict:
    """What config.json records of a new run (and --report-to shows): its settings, and the SHA-256 of its
    problem files, which a resume checks (check_files)."""
    return dataclasses.asdict(cfg) | {"sha256": {f: _sha256(f) for f in [cfg.data, *cfg.eval_data]}}


def write_json_atomic(path, obj):
    """config.json and the like: the old file or the new one, never half of one."""
    replace_bytes(Path(path), (json.dumps(obj, indent=2) + "\n").encode())


class RunLog:
    """metrics.jsonl and samples.jsonl of a run. `rows`: the metrics rows in the file (kept and written);
    `past`: the steps of those past a resume's checkpoint (dropped); `logged`: the rows this process wrote;
    `reporters`: the --report-to destinations each row also goes to (send_to)."""

    def __init__(self, run_dir: Path, rows: list[dict], fsync: bool, cut: int | None = None):
        self.run_dir, self.fsync, self.cut, self.logged = run_dir, fsync, cut, 0
        self.rows = [r for r in rows if not past(r, cut)]
        self.past = [r["step"] for r in rows if past(r, cut)]
        self.files, self.reporters = {}, []

    @classmethod
    def open(cls, run_dir, resume_step: int | None = None, fsync: bool = True) -> "RunLog":
        """Resuming from a checkpoint of step s (resume_step=s): rows past s are dropped and a torn line cut
        at the first write (_open_files), not now: a start that fails before it leaves the files as they
        were."""
        path = Path(run_dir) / "metrics.jsonl"
        rows = [row for _, row in jsonl_rows(path)[0]] if path.is_file() else []
        return cls(Path(run_dir), rows, fsync, resume_step)

    def _open_files(self):
        for name in ("metrics.jsonl", "samples.jsonl"):
            repair_jsonl(self.run_dir / name, self.cut)
            try:
                self.files[name] = os.open(self.run_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as e:
                self.close()
                raise CheckpointError(f"cannot open {self.run_dir / name} ({reason(e)})") from None

    def write(self, row: dict):
        self._append("metrics.jsonl", [row])
        self.rows.append(row)
        self.logged += 1
        for reporter in list(self.reporters):
            self._report(reporter, [row])

    def send_to(self, reporters: list):
        """Each row written from now on also goes to `reporters`; each first gets the rows already logged at
        steps after its `resend_after` (those it lacks), so that one added on --resume shows the run from its
        start, and wandb gets the steps a resume under --report-to none logged."""
        self.reporters = list(reporters)
        for reporter in list(self.reporters):
            self._report(reporter, [row for row in self.rows if row["step"] > reporter.resend_after])

    def _report(self, reporter, rows: list[dict]):
        """The numbers of each row at its step (other values skipped). A reporter that raises is warned about
        once and turned off: metrics.jsonl has the row, and training goes on."""
        try:
            for row in rows:
                reporter.log(row["step"], {k: v for k, v in row.items()
                                           if k != "step" and isinstance(v, numbers.Real)})
        except Exception as e:  # an optional package: whatever it raises is its own
            self.reporters.remove(reporter)
            warn(f"warning: --report-to {reporter.name} failed at step {row['step']} "
                 f"({type(e).__name__}: {e}); it is turned off, metrics.jsonl keeps every row")
            self._close(reporter)

    def has(self, step, prefix: str = "eval/") -> bool:
        """A row of `step` with a key starting with `prefix` is logged (a finished run's last evaluation)."""
        return any(r.get("step") == step and any(k.startswith(prefix) for k in r) for r in self.rows)

    def samples(self, step, name, rows):
        self._append("samples.jsonl", [{"step": step, "eval": name, **r} for r in rows])

    def _append(self, name: str, rows: list[dict]):
        """All rows in one os.write; a failed or partial write is cut back off the file."""
        if not self.files:
            self._open_files()
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
            raise CheckpointError(f"{reason(e)} while writing {self.run_dir / name}: the row of step "
                                  f"{rows[0].get('step') if rows else '?'} was not logged") from None

    def close(self):
        for fd in self.files.values():
            os.close(fd)
        self.files = {}
        for reporter in self.reporters:
            self._close(reporter)
        self.reporters = []

    @staticmethod
    def _close(reporter):
        try:
            reporter.close()
        except Exception as e:
            warn(f"warning: --report-to {reporter.name} did not close cleanly ({type(e).__name__}: {e})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ----------------------------------------------------------------------------
# --report-to: each metrics row also sent to TensorBoard or Weights & Biases. A reporter has `name`,
# `resend_after` (the last step it holds from earlier processes, -1 for none: the rows logged after it are
# sent at start; TensorBoard -1, wandb the last step sent to its run), log(step, numbers) and close().

class TensorBoard:
    """--report-to tensorboard: event files in <run>/tensorboard/ (`tensorboard --logdir runs` shows every
    run), each number of a row a scalar under its metrics.jsonl name, the settings a text entry "config".

    Every start sends metrics.jsonl whole (`resend_after` -1), its writer marking step 0 as a (re)start
    (purge_step): TensorBoard drops every event of the earlier processes (it takes the first start mark of a
    folder as its beginning, each later one as a restart) and shows the run as metrics.jsonl has it: each
    step once (the rows redone past the checkpoint too), and none missing (the steps of a resume under
    --report-to none too). Every row is flushed at once, so a crash loses none that metrics.jsonl holds."""
    FOLDER = "tensorboard"
    name = "tensorboard"
    resend_after = -1

    def __init__(self, run_dir: Path, config: dict):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
        folder = run_dir / self.FOLDER
        self.writer = SummaryWriter(folder, purge_step=0)
        text = json.dumps(config, indent=2)  # indented 4: a code block in TensorBoard's markdown
        self.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)

    def log(self, step: int, values: dict):
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self):
        self.writer.close()


class Wandb:
    """--report-to wandb: a Weights & Biases run in --wandb-project named after the run folder, the settings
    as its config, each number of a row logged at its step. WANDB_MODE, WANDB_DIR and the rest of wandb's
    own settings apply.

    The wandb run's id is kept in <run>/wandb-id: a resumed run goes on in the same wandb run. Each start
    first sends the rows of metrics.jsonl after the last step sent to it, kept in <run>/wandb-step (written
    atomically once a step's first row is sent; none: a new wandb run, or one from before the file, gets every
    row): so the steps of a resume under --report-to none reach it too. wandb keeps a run's steps increasing,
    so the rows a resume redoes at steps it already has are not sent: they keep their first values. A kill
    between a row sent and its step written sends that step again (online, wandb keeps its first values)."""
    ID_FILE = "wandb-id"
    STEP_FILE = "wandb-step"
    name = "wandb"

    def __init__(self, run_dir: Path, config: dict, project: str):
        import wandb
        id_file, self.step_file = run_dir / self.ID_FILE, run_dir / self.STEP_FILE
        if not id_file.is_file():  # a new wandb run: no step sent to it yet
            self.step_file.unlink(missing_ok=True)
            replace_bytes(id_file, secrets.token_hex(4).encode())
        self.resend_after = self.sent = self.last_step_sent(self.step_file)
        self.run = wandb.init(project=project, name=run_dir.name, id=id_file.read_text().strip(),
                              resume="allow", config=config)

    @staticmethod
    def last_step_sent(step_file: Path) -> int:
        """The step in the wandb-step file; -1 when there is none."""
        if not step_file.is_file():
            return -1
        text = step_file.read_text().strip()
        if not text.isdigit():
            raise ValueError(f"{step_file} holds {text[:20]!r}, not a step: remove it to resend every row")
        return int(text)

    def log(self, step: int, values: dict):
        if step <= self.resend_after:  # redone after a crash: the wandb run has this step
            return
        self.run.log(values, step=step)
        if step != self.sent:
            replace_bytes(self.step_file, str(step).encode())
            self.sent = step

    def close(self):
        self.run.finish()


def past(row: dict, max_step: int | None) -> bool:
    """A row whose "step" is past max_step (None: none is)."""
    return max_step is not None and isinstance(row.get("step"), (int, float)) and row["step"] > max_step


def jsonl_rows(path: Path) -> tuple[list[tuple[bytes, dict]], list[int], bool]:
    """(line, row) of each whole JSON object of a JSONL file, the numbers of its unreadable lines, and whether
    its last line is torn (no newline)."""
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as e:
        raise CheckpointError(f"cannot read {path} ({reason(e)})") from None
    last = lines.pop()  # b"" unless the last line is torn
    rows, bad = [], []
    for number, line in enumerate(lines + [last] * bool(last), 1):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict):  # a dict is whole: a cut one lacks its closing brace
            rows.append((line, row))
        elif line.strip():
            bad.append(number)
    return rows, bad, bool(last)


def repair_jsonl(path: Path, max_step: int | None = None) -> list[dict]:
    """The rows of a JSONL log, after cutting a torn last line, unreadable lines and rows whose
    "step" is past max_step; the file is rewritten (atomically) when anything was cut."""
    if not path.is_file():
        return []
    rows, bad, torn = jsonl_rows(path)
    kept = [(line, row) for line, row in rows if not past(row, max_step)]
    if bad or torn or len(kept) < len(rows):
        replace_bytes(path, b"".join(line + b"\n" for line, _ in kept))
    if bad or len(kept) < len(rows):
        done = ([f"cut {len(bad)} unreadable line(s) (a torn write)"] if bad else []) + \
               ([f"dropped {len(rows) - len(kept)} row(s) past step {max_step}, the checkpoint's (they are "
                 "redone)"] if len(kept) < len(rows) else [])
        warn(f"{'warning' if bad else 'note'}: {path}: " + "; ".join(done))
    return [row for _, row in kept]


def read_metrics(path) -> list[dict]:
    """The JSON objects of a metrics.jsonl, for readers (plot, sweep): bad lines skipped with one warning."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path.parent}: no {path.name} (is it a run directory?)")
    rows, bad, _ = jsonl_rows(path)
    if bad:
        warn(f"warning: {path}: skipped {len(bad)} unreadable line(s) (line {', '.join(map(str, bad[:3]))}"
             f"{', ...' if len(bad) > 3 else ''})")
    return [row for _, row in rows]


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
        message (disk full: see check_writable)."""
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, self.previous if data is None else data, 0)

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
        write_bytes(probe, b"ok")
    except OSError as e:
        raise CheckpointError(f"run folder {run_dir} is not writable ({reason(e)})") from None
    finally:  # also after a failed write: on a full disk the file is made, then its write fails
        probe.unlink(missing_ok=True)


def _used(run_dir: Path) -> bool:
    """Anything but a lock and empty files (a start killed before its config.json: a new start takes it)."""
    return any(p.name != LOCK and not p.name.startswith(".write-test-") and not (p.is_file() and not
               p.stat().st_size) for p in run_dir.iterdir())


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
        raise CheckpointError(f"cannot create run folder {run_dir} ({reason(e)})") from None
    lock = RunLock(run_dir).acquire()
    try:
        if _used(run_dir):  # another process made it between our mkdir and our lock
            raise refuse
        check_writable(run_dir)
    except BaseException:
        lock.release()
        if not _used(run_dir):  # a start that fails here (disk full) leaves nothing
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return lock


def resume_run(run_dir) -> RunLock:
    """An existing run folder, locked, checked writable and repaired (recover); then call latest()."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"--resume {run_dir}: no such run folder")
    lock = RunLock(run_dir).acquire()
    try:
        check_writable(run_dir)
        checkpoint.recover(run_dir)
    except BaseException:
        lock.release()
        raise
    return lock


# ----------------------------------------------------------------------------
# Resuming: what each flag given on --resume does, and the record of what changed

@dataclasses.dataclass(frozen=True)
class Refused:
    """A flag a resume may not change (given with the run's own value it is no error), and why."""
    why: str


RECORDED = "recorded"  # takes effect from the resumed step on; config.json's "changes" says so
FREE = "free"          # where or how the run computes, not what it trains: taken, not recorded

WEIGHTS = Refused("the checkpoint holds the run's weights (full fine-tuning) or its adapter for that base "
                  "model (LoRA); start a new run from another model")
PROMPTS = Refused("it changes the prompts the policy is trained and evaluated on")
EVALUATION = Refused("the run's evaluations are compared across its steps and with other runs (eval.py "
                     "--runs) under one setting")
METHOD = Refused("the run is one method of a comparison; start a new run for another")
ROLLOUTS = Refused("it changes the rollouts the run trains on, part of its setting; start a new run")
FOLDER = Refused("a resumed run stays in its folder")
OPTIMIZER = Refused("the checkpoint's optimizer state has its own")
ADAPTER = Refused("the checkpoint holds full weights or an adapter of the run's shape")
REWARDS = Refused("a run keeps the rewards it trains on; start a new run for another")
SCHEDULE = Refused("the learning rates so far followed the run's schedule; the resumed steps go on with it")

# The fields of config.py's shared groups (PromptFlags, TrainingFlags, EvalFlags, RunFlags): train.py's and
# sft.py's.
SHARED_RESUME_RULES = {
    "system_prompt": PROMPTS, "prompt_template": PROMPTS, "thinking": PROMPTS,
    "micro_batch": RECORDED,  # the same gradient summed in other pieces (rounding): what fits a smaller GPU
    "lr": OPTIMIZER, "weight_decay": OPTIMIZER,
    "grad_clip": Refused("it changes the size of the run's updates, part of its setting"),
    "lora_rank": ADAPTER, "lora_alpha": ADAPTER, "lora_targets": ADAPTER,
    "dtype": Refused("the precision of the frozen weights and of the matmuls is part of what trained"),
    "grad_checkpoint": FREE,  # the same activations, recomputed in backward
    "eval_every": RECORDED,   # which steps are evaluated
    "eval_k": EVALUATION, "eval_temperature": EVALUATION, "eval_top_p": EVALUATION,
    "eval_max_new_tokens": EVALUATION, "eval_limit": EVALUATION,
    "eval_batch_size": RECORDED,  # each batch has its own seed: other draws of the same distribution
    "out_dir": FOLDER, "name": FOLDER,
    "resume": FREE,  # the folder itself
    "save_every": RECORDED,  # which checkpoints the folder holds
    "seed": Refused("a seed names one run of its method (eval.py --runs pools one run per seed) and draws "
                    "its prompt order"),
    "device": FREE,  # where it computes; "auto" already differs from machine to machine
    "report_to": FREE, "wandb_project": FREE,  # where the metrics are also sent; metrics.jsonl is the record
    "workdir": FREE,  # not a flag: the directory the run started in, kept (from_start)
}

# train.py's TrainConfig: every field (tests/test_resume.py checks it). A new flag goes here: Refused("why")
# when continuing with another value would make the run something it was not started as, RECORDED when that
# is a legitimate experiment (the record says from which step), FREE when it does not change what is trained.
RESUME_RULES = {
    **SHARED_RESUME_RULES,
    "preset": Refused("a resumed run keeps the settings it was started with"),
    "task": Refused("a run keeps its task's model, data and reward; start a new run for another task"),
    "model": WEIGHTS, "revision": WEIGHTS,
    "data": Refused("the run's prompt order is drawn from its own training file"),
    "eval_data": EVALUATION,
    "clip": METHOD, "hparams": METHOD, "aggregation": METHOD, "std_normalize": METHOD, "beta": METHOD,
    "minibatches": METHOD, "epochs": METHOD,  # optimizer steps per rollout batch: what makes clipping act
    "prompts_per_step": ROLLOUTS, "group_size": ROLLOUTS, "max_new_tokens": ROLLOUTS, "temperature": ROLLOUTS,
    "top_p": ROLLOUTS, "top_k": ROLLOUTS, "sampler": ROLLOUTS, "stop": ROLLOUTS, "dynamic_sampling": ROLLOUTS,
    "rollout_batch": RECORDED,  # prompts sampled together: other draws of the same distribution, less memory
    "steps": RECORDED,          # train further (or stop sooner)
    "base_name": RECORDED,      # what the adapters saved from then on name as their base
    "merge": FREE,              # one more output at the end
    "compile": FREE,            # the same loss, compiled or eager
    "keep_checkpoints": RECORDED,  # which checkpoints the folder holds
    "threads": FREE,            # every metrics row logs its own
    "reward": REWARDS, "reward_weights": REWARDS, "answer_field": REWARDS,
    "overlong_buffer": REWARDS, "overlong_penalty": REWARDS,
    "mask_truncated": METHOD,   # which completions give a gradient
    # Each optimizer step's rate is a function of its index in the run (train.learning_rate): a resume follows
    # the schedule exactly. A linear or cosine one (or a --warmup-ratio) also keeps --steps, and any schedule
    # --minibatches and --epochs: the numbering of the optimizer steps (session.check_schedule_kept).
    "lr_scheduler": SCHEDULE, "warmup_steps": SCHEDULE, "warmup_ratio": SCHEDULE,
}

# sft.py's SFTConfig: every field, as above.
SFT_RESUME_RULES = {
    **SHARED_RESUME_RULES,
    "model": WEIGHTS,
    "data": Refused("the run's batches are drawn from its own file"),
    "eval_data": EVALUATION,
    "max_len": Refused("it changes which examples are trained (and the evaluation's budget)"),
    "skip_long": Refused("it changes which examples are trained"),
    "batch_size": Refused("the run's data order is drawn per batch size"),
    "warmup": Refused("it changes the run's learning-rate schedule"),
    "epochs": RECORDED, "steps": RECORDED,  # train further (or stop sooner): each epoch has its own shuffle
}


def resumed_config(cfg, given: set, rules: dict, hparams: dict | None = None):
    """(config, change): the run's settings as it last ran (cfg.resume/config.json with its recorded changes),
    with the flags given now on top, and this resume's change, {field: {"from": a, "to": b}} for each RECORDED
    flag given with a value other than the run's ({} when none). A Refused flag given with another value is a
    ConfigError naming it, the saved value and why, so that config.json never records a setting that did not
    run; so is a method hyper-parameter in `hparams` (train.py's --eps, --delta, ...; None: not given) other
    than the run's. A path flag (PATH_FIELDS) naming the run's own files is the run's value, however spelled;
    the run's relative paths are found from the directory it started in (from_start), so a resume may run
    from anywhere. A field missing from `rules` is a KeyError: every field must be classified."""
    saved_file = Path(cfg.resume) / "config.json"
    if not saved_file.is_file():
        raise ConfigError(f"--resume {cfg.resume}: no config.json there: not a run folder, or one whose "
                          "start never finished (start it again, without --resume)")
    try:
        saved = json.loads(saved_file.read_text())
        run = type(cfg)(**checked_settings(type(cfg), settings_now(saved, saved_file), saved_file))
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, AttributeError) as e:
        raise ConfigError(f"{saved_file} is not a run's config.json ({type(e).__name__}: {e})") from None
    found = dataclasses.replace(run, **{k: paths(k, getattr(run, k), lambda p: from_start(p, run.workdir))
                                        for k in PATH_FIELDS if hasattr(run, k)})
    check_files(found, saved.get("sha256"), saved_file)
    names = [f.name for f in dataclasses.fields(cfg) if f.name in given]
    differ = [k for k in names if getattr(cfg, k) != getattr(run, k) and
              not (k in PATH_FIELDS and same_files(k, getattr(cfg, k), getattr(found, k)))]
    refused = [(as_given(k, getattr(cfg, k)), k) for k in differ if isinstance(rules[k], Refused)]
    refused += [(as_given(k, v), "hparams") for k, v in sorted((hparams or {}).items())
                if v is not None and (run.hparams or {}).get(k) != v]
    if refused:
        given_flag, k = refused[0]
        raise ConfigError(f"{given_flag} cannot change on --resume ({saved_file} has \"{k}\": "
                          f"{json.dumps(getattr(run, k))}): {rules[k].why}")
    change = {k: {"from": getattr(run, k), "to": getattr(cfg, k)} for k in differ if rules[k] == RECORDED}
    kept = [k for k in names if k in differ or k not in PATH_FIELDS]  # the run's own files: as it names them
    return dataclasses.replace(found, **{k: getattr(cfg, k) for k in kept}), change


# What a resumed run's config.json may lack: flags added since the runs in results/, which ran with the
# default; any other missing field is refused. A new flag goes here (tests/test_start.py checks results/).
ADDED_LATER = {"task", "revision", "sampler", "dynamic_sampling", "base_name", "threads", "reward",
               "reward_weights", "answer_field", "mask_truncated", "overlong_buffer", "overlong_penalty",
               "lr_scheduler", "warmup_steps", "warmup_ratio", "keep_checkpoints", "report_to",
               "wandb_project", "workdir"}


def checked_settings(cls, settings: dict, where) -> dict:
    """config.json's settings, none missing (but those ADDED_LATER), each of its field's type; else a
    ConfigError naming the file and the key."""
    if missing := sorted({f.name for f in dataclasses.fields(cls)} - settings.keys() - ADDED_LATER):
        raise ConfigError(f"{where} lacks {', '.join(map(json.dumps, missing))}: a resumed run goes on with "
                          "the settings it ran with, not defaults; put them back, or start a new run")
    for k, tp in typing.get_type_hints(cls).items():
        if k in settings and not of_type(settings[k], tp):
            raise ConfigError(f'{where} has "{k}": {json.dumps(settings[k])}, not of its type '
                              f"({getattr(tp, '__name__', tp)}): put the run's value back")
    return settings


def of_type(value, tp) -> bool:
    """A JSON value is of a field's type (int, float (an int too), str, bool, dict, list[...], X | None)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(of_type(value, t) for t in typing.get_args(tp))
    if typing.get_origin(tp) is list:
        return isinstance(value, list) and all(of_type(v, typing.get_args(tp)[0]) for v in value)
    return isinstance(value, (int, float) if tp is float else tp) and (tp is bool or type(value) is not bool)


def check_files(run, recorded: dict | None, where):
    """The run's problem files are those it started with (`recorded`: config.json's "sha256", written at its
    start), or a ConfigError names the one changed; a run from before they were recorded gets a note."""
    if recorded is None:
        warn(f"note: {where} records no SHA-256 of the run's problem files (a run from before they were): "
             "that they are unchanged could not be checked")
    for file, digest in (recorded or {}).items():
        if _sha256(found := from_start(file, run.workdir)) not in (digest, None):  # None: loading names it
            raise ConfigError(f"{found} has changed since the run started (its SHA-256 is not the one "
                              f"{where} records): the run goes on with the problem files it started with; "
                              "put it back, or start a new run")


# The settings that are paths (--reward's FILE.py), a relative one relative to the directory the run was
# started in (workdir). A resume finds them from there, and takes a path given again as the run's own when
# it names the same file (./data/x.jsonl and data/x.jsonl; an absolute path).
PATH_FIELDS = ("model", "data", "eval_data", "reward")


def paths(name: str, value, fn):
    """`value` of field `name` with fn applied to each path it holds: each of a list; of a --reward
    FILE.py:FUNCTION, its FILE.py (a MODULE:FUNCTION holds none)."""
    if isinstance(value, list):
        return [paths(name, v, fn) for v in value]
    if not isinstance(value, str) or not value:
        return value
    if name == "reward":
        source, _, function = value.rpartition(":")
        return f"{fn(source)}:{function}" if source.endswith(".py") else value
    return fn(value)


def from_start(path: str, workdir: str) -> str:
    """A relative path of a resumed run's settings as this process finds it: from the directory the run was
    started in (`workdir`; a run from before it was recorded: as written, else the repository's own, as the
    embedded tasks' files: data.located). As written when that is the same file, or none is there."""
    if Path(path).is_absolute():
        return path
    there = Path(workdir, path) if workdir else Path(located(path))
    return str(there) if there.exists() and there.resolve() != Path(path).resolve() else path


def same_files(name: str, given, found) -> bool:
    """A path flag given on --resume names the files the run's own value names (`found`: from_start's)."""
    return paths(name, given, real_path) == paths(name, found, real_path)


def real_path(path: str) -> str:
    """An existing file's or folder's absolute path, symbolic links resolved; anything else as it is."""
    return str(Path(path).resolve()) if Path(path).exists() else path


def as_given(name: str, value) -> str:
    """A flag as it is typed: --clip clip, --eval-data a.jsonl b.jsonl, --no-thinking, --eval-data (none)."""
    if isinstance(value, bool):
        return flag(name) if value else "--no-" + flag(name)[2:]
    words = value if isinstance(value, list) else [value]
    return " ".join([flag(name), *map(str, words)])


def recorded_changes(saved: dict, where) -> list[dict]:
    """config.json's "changes" ([] if none), checked: a list of {"step": S, field: {"from": a, "to": b}, ...};
    anything else is a ConfigError naming the file `where`."""
    changes = saved.get("changes", [])
    if not isinstance(changes, list) or not all(
            isinstance(c, dict) and isinstance(c.get("step"), int) and
            all(isinstance(v, dict) and v.keys() == {"from", "to"} for k, v in c.items() if k != "step")
            for c in changes):
        raise ConfigError(f'{where}: "changes" is not a list of '
                          '{"step": S, "<flag>": {"from": A, "to": B}}')
    return changes


def settings_now(saved: dict, where) -> dict:
    """A run's settings as it last ran: those config.json says it started with, each change applied."""
    settings = {k: v for k, v in saved.items() if k not in ("changes", "sha256", "provenance")}
    for change in recorded_changes(saved, where):
        settings.update({k: v["to"] for k, v in change.items() if k != "step"})
    return settings


def change_text(change: dict, arrow: str = " -> ") -> str:
    """'--steps 32 -> 64, --eval-every 0 -> 8': one recorded change's flags (without its step)."""
    def shown(v):
        return v if isinstance(v, str) else json.dumps(v)
    return ", ".join(f"{flag(k)} {shown(v['from'])}{arrow}{shown(v['to'])}" for k, v in change.items()
                     if k != "step")
