"""metrics.jsonl and samples.jsonl: written a row at a time, repaired after a crash, read back; and
--report-to's TensorBoard / Weights & Biases reporters, fed from the log."""
import contextlib
import json
import math
import numbers
import os
import secrets
from pathlib import Path

from nanoatr.machinery.checkpoint import CheckpointError, reason, replace_bytes, warn


class RunLog:
    """metrics.jsonl and samples.jsonl of a run. `rows`: the metrics rows in the file (kept and written);
    `past`: the steps of those past a resume's checkpoint (dropped); `logged`: the rows this process wrote;
    `reporters`: the --report-to destinations each row also goes to (send_to)."""

    def __init__(self, run_dir, resume_step: int | None = None):
        """Resuming from a checkpoint of step s (resume_step=s): rows past s are dropped and a torn line cut
        at the first write (_open_files), not now: a start that fails before it leaves the files as they
        were."""
        self.run_dir, self.cut, self.logged = Path(run_dir), resume_step, 0
        path = self.run_dir / "metrics.jsonl"
        rows = [row for _, row in jsonl_rows(path)[0]] if path.is_file() else []
        self.rows = [r for r in rows if not past(r, resume_step)]
        self.past = [r["step"] for r in rows if past(r, resume_step)]
        self.files, self.reporters = {}, []

    def _open_files(self):
        for name in ("metrics.jsonl", "samples.jsonl"):
            repair_jsonl(self.run_dir / name, self.cut)
            try:
                self.files[name] = os.open(self.run_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as e:
                self.close()
                raise CheckpointError(f"cannot open {self.run_dir / name} ({reason(e)})") from None

    def write(self, row: dict):
        row = finite(row)  # as the file will hold it
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
        """Rows of samples.jsonl: an evaluation's on file `name`, or (None) the step's own rollout's."""
        tag = {"eval": name} if name is not None else {"rollout": True}
        self._append("samples.jsonl", [{"step": step, **tag, **r} for r in rows])

    def _append(self, name: str, rows: list[dict]):
        """All rows in one os.write; a failed or partial write is cut back off the file."""
        if not self.files:
            self._open_files()
        fd, data = self.files[name], "".join(json.dumps(finite(r)) + "\n" for r in rows).encode()
        start = os.lseek(fd, 0, os.SEEK_END)  # the lock makes us the only writer
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
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


# ----------------------------------------------------------------------------
# --report-to: each metrics row also sent to TensorBoard or Weights & Biases. A reporter has `name`,
# `resend_after` (the last step it holds from earlier processes, -1 for none: the rows logged after it are
# sent at start; TensorBoard -1, wandb the last step sent to its run), log(step, numbers) and close().

class TensorBoard:
    """--report-to tensorboard: event files in <run>/tensorboard/ (`tensorboard --logdir runs` shows every
    run), each number of a row a scalar under its metrics.jsonl name, the settings a text entry "config".
    Every start resends metrics.jsonl whole, marking step 0 a restart (docs/library.md#metrics-log)."""
    name = "tensorboard"
    resend_after = -1

    def __init__(self, run_dir: Path, config: dict):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
        self.writer = SummaryWriter(run_dir / "tensorboard", purge_step=0)
        text = json.dumps(config, indent=2)  # indented 4: a code block in TensorBoard's markdown
        self.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)

    def log(self, step: int, values: dict):
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self):
        self.writer.close()


class Wandb:
    """--report-to wandb: a Weights & Biases run in --wandb-project (else WANDB_PROJECT, else nanoatr) named
    WANDB_NAME (else after the run folder), the settings as its config, each number of a row logged at its
    step. WANDB_ENTITY, WANDB_MODE, WANDB_DIR and the rest of wandb's own settings apply. How a resume goes
    on in the same wandb run: docs/library.md#metrics-log"""
    name = "wandb"

    def __init__(self, run_dir: Path, config: dict, project: str | None):
        import wandb
        id_file, self.step_file = run_dir / "wandb-id", run_dir / "wandb-step"
        if not id_file.is_file():  # a new wandb run: no step sent to it yet
            self.step_file.unlink(missing_ok=True)
            replace_bytes(id_file, secrets.token_hex(4).encode())
        sent = self.step_file.read_text().strip() if self.step_file.is_file() else "-1"  # -1: none yet
        if sent != "-1" and not sent.isdigit():
            raise ValueError(f"{self.step_file} holds {sent[:20]!r}, not a step: remove it to resend every "
                             "row")
        self.resend_after = self.sent = int(sent)
        self.run = wandb.init(project=project or os.environ.get("WANDB_PROJECT") or "nanoatr",
                              name=os.environ.get("WANDB_NAME") or run_dir.name,
                              id=id_file.read_text().strip(), resume="allow", config=config)

    def log(self, step: int, values: dict):
        if step <= self.resend_after:  # redone after a crash: the wandb run has this step
            return
        self.run.log(values, step=step)
        if step != self.sent:
            replace_bytes(self.step_file, str(step).encode())
            self.sent = step

    def close(self):
        self.run.finish()


def finite(value):
    """`value` with each NaN or inf made None, null in metrics.jsonl, samples.jsonl, eval.py's --out and a
    sweep's results.json: JSON has no such numbers (json.dumps writes NaN, which other parsers refuse)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return [finite(v) for v in value] if isinstance(value, list | tuple) else value


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


def repair_jsonl(path: Path, max_step: int | None = None):
    """Cut a torn last line, unreadable lines and rows whose "step" is past max_step off a JSONL log; the
    file is rewritten (atomically) when anything was cut."""
    if not path.is_file():
        return
    rows, bad, torn = jsonl_rows(path)
    kept = [(line, row) for line, row in rows if not past(row, max_step)]
    dropped = len(rows) - len(kept)
    if bad or torn or dropped:
        replace_bytes(path, b"".join(line + b"\n" for line, _ in kept))
    done = [f"cut {len(bad)} unreadable line(s) (a torn write)"] * bool(bad) + \
        [f"dropped {dropped} row(s) past step {max_step}, the checkpoint's (they are redone)"] * bool(dropped)
    if done:
        warn(f"{'warning' if bad else 'note'}: {path}: " + "; ".join(done))
