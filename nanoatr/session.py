"""A training run's life around the loop: its folder and lock, resuming, the metrics log, checkpoints
on schedule, Ctrl-C / SIGTERM, the CPU thread count, and one-line errors. train.py reads:

    with Session(argv, ...) as session:        # flags, the run folder made (or resumed) and locked
        run = setup(session)                   # what a step needs; a bad file is one `error:` line
        for step in session.steps(...):        # from the checkpoint's step; checkpoints every --save-every
            session.log(grpo_step(run, step))  #   and at the end; Ctrl-C / SIGTERM: after this step, saved

Whatever goes wrong is one `error:` line and an exit code: a bad flag or file before training (the
new run folder is then removed: nothing is left behind), a full or read-only disk while saving or
logging (earlier checkpoints are intact), a second Ctrl-C (the last checkpoint is named). The files
themselves (atomic checkpoints, the log, the lock) are nanoatr/checkpoint.py's.
"""
import signal
import sys
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

import nanoatr
from nanoatr import checkpoint, distributed, lora
from nanoatr.checkpoint import CheckpointError, RunLog
from nanoatr.config import (ConfigError, TrainConfig, apply_preset, die, hparam_flags, parse, preset_help, resolve,
                            resumed_config)
from nanoatr.data import DataError
from nanoatr.evaluate import BudgetError
from nanoatr.loss import effective_band
from nanoatr.model import ModelError
from nanoatr.model.files import local_dir
from nanoatr.tokenizer import TokenizerError

START_ERRORS = (ConfigError, ModelError, TokenizerError, DataError, lora.AdapterError, CheckpointError,
                distributed.DeviceError, BudgetError)


class NothingToDo(Exception):
    """The run has nothing left to do (a finished run resumed): not an error."""


class Session:
    """A run folder opened for training (a context manager); see the module's docstring."""

    def __init__(self, argv=None, doc: str = ""):
        nanoatr.ctrl_c_raises()  # from here on, a Ctrl-C is the session's (a new run folder is removed first)
        self.lock = self.log = self.bar = None
        self.training = False
        self.interrupted_at = None  # (step, signal) when Ctrl-C / SIGTERM ended the loop
        cfg, extra, given = parse(TrainConfig, argv, doc, hparam_flags, epilog=preset_help())
        self.cfg, self.extra, self.given = cfg, extra, given

    def __enter__(self) -> "Session":
        try:
            self.open()
        except NothingToDo as done:
            self.close()
            print(done)
            raise SystemExit(0)
        except START_ERRORS as e:
            self.fail(e)
        except KeyboardInterrupt:
            self.fail("interrupted during start-up", 130)
        except BaseException:
            self.close()
            raise
        return self

    def open(self):
        """Flags resolved, the run folder made or resumed and locked, the checkpoint to start from read."""
        if self.cfg.resume:
            cfg, extra = resumed_config(self.cfg, self.extra, self.given)
        else:
            cfg, extra = apply_preset(self.cfg, self.given), self.extra
        self.d = d = distributed.setup(cfg.device)
        self.cfg = cfg = resolve(cfg, extra, d.world, self.given)
        # The run folder first, before minutes of loading: a used name, a second process on the same
        # run, a read-only or full disk are one line now. Only rank 0 writes (and holds the lock).
        self.dir = Path(cfg.resume) if cfg.resume else Path(cfg.out_dir) / distributed.broadcast(
            cfg.name or checkpoint.unique_name(cfg.clip), d)
        if d.main:
            self.lock = checkpoint.resume_run(self.dir) if cfg.resume else checkpoint.create_run(cfg.out_dir,
                                                                                                 self.dir.name)
        distributed.barrier(d)  # rank 0 has repaired the folder before anyone reads it
        self.checkpoint = checkpoint.latest(self.dir) if cfg.resume else None
        # step and optimizer state, read once (it is big)
        self.state = checkpoint.load_state(self.checkpoint) if self.checkpoint else {"step": 0}
        self.start = self.state["step"]
        if self.start > cfg.steps:
            raise ConfigError(f"--steps {cfg.steps} is before the checkpoint's step {self.start} in {self.dir}: "
                              f"give --steps {self.start} or more")
        self.log = RunLog.open(self.dir, resume_step=self.start if cfg.resume else None) if d.main else None
        if self.start == cfg.steps and d.main and (not cfg.eval_data or self.log.has(cfg.steps)):
            raise NothingToDo(f"run {self.dir} is finished (step {self.start} of {cfg.steps}, evaluated): nothing to "
                           f"do; --resume {self.dir} --steps N with N > {self.start} trains further")
        self.threads = distributed.CpuThreads(cfg.threads, d.device)
        self.model_dir = local_dir(cfg.model, cfg.revision)  # a hub id: fetched into, or read from, its cache

    def started(self, weights, optimizer, tokenizer_files: dict):
        """Setup is done: what the checkpoints save; the run's config.json written."""
        self.weights, self.optimizer, self.tokenizer_files = weights, optimizer, tokenizer_files
        if self.d.main:
            checkpoint.write_json_atomic(self.dir / "config.json", asdict(self.cfg))

    def steps(self, progress=None):
        """The steps from the checkpoint's to --steps, under a progress bar (`progress(row)`: its fields).
        After each: a checkpoint every --save-every steps and at the last; on Ctrl-C / SIGTERM a
        checkpoint, and the loop ends (the exit then names the signal)."""
        cfg, d = self.cfg, self.d
        self.training, self.progress = True, progress
        with distributed.Interrupts() as interrupts, tqdm(range(self.start, cfg.steps), initial=self.start, total=cfg.steps,
                                              desc="train", unit="step", disable=not d.main) as self.bar:
            try:
                for step in self.bar:
                    self.thread_count = self.threads.adjust()
                    yield step
                    if interrupts.requested(d):
                        self.save(step + 1)
                        distributed.barrier(d)
                        self.interrupted_at = (step + 1, interrupts.signal)
                        return
                    if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                        self.save(step + 1)
            finally:
                self.bar = None

    @property
    def ended_by_signal(self) -> bool:
        return self.interrupted_at is not None

    def save(self, step: int):
        if self.d.main:
            checkpoint.save(self.dir, self.weights, self.tokenizer_files,
                            {"step": step, "optimizer": self.optimizer.state_dict()}, keep=self.cfg.keep_checkpoints)

    def log_step(self, row: dict):
        """A step's metrics line, and the progress bar's fields."""
        if self.d.main:
            self.log.write(row | {"threads": self.thread_count})
            if self.progress:
                self.bar.set_postfix(self.progress(row))

    def say(self, line: str | None):
        """Print a line (None: nothing), on rank 0 only; above the progress bar while it runs."""
        if line is not None and self.d.main:
            tqdm.write(line) if self.bar is not None else print(line, flush=True)

    def describe(self, model, trained: list, n_problems: int, beta: bool):
        """The run's first lines: what trains, on what, with which clipping rule (and a warning if it is inert)."""
        cfg = self.cfg
        if cfg.minibatches * cfg.epochs == 1 and self.d.main:
            print("warning: each rollout batch feeds one optimizer step, so the ratio is exactly 1 and "
                  f"--clip {cfg.clip} has no effect; use --minibatches or --epochs > 1", file=sys.stderr)
        n = sum(p.numel() for p in trained)
        self.say(f"run {self.dir}: {model.num_parameters() / 1e6:.2f}M parameters ({n / 1e6:.2f}M trained"
                 f"{f', LoRA r={cfg.lora_rank}' if cfg.lora_rank else ''}), {n_problems} training problems, "
                 f"{self.d.world} x {self.d.device.type}, --clip {cfg.clip} {cfg.hparams}{band(cfg)}"
                 + (f", beta {cfg.beta} ({'adapters off' if cfg.lora_rank else 'a frozen copy of --model'})"
                    if beta else "") + (f", from step {self.start}" if self.start else ""))

    def evaluated(self, step: int) -> bool:
        """This step's evaluation is already in the log (a resumed run)."""
        return self.d.main and self.log.has(step)

    def log_eval(self, step: int, results: dict, samples: dict):
        """An evaluation's line of metrics.jsonl, and a few of its completions per file in samples.jsonl."""
        if self.d.main:
            for name, rows in samples.items():
                self.log.samples(step, name, rows)
            self.log.write({"step": step, **results})

    def __exit__(self, kind, error, tb):
        try:
            if kind is None and self.ended_by_signal:
                step, signum = self.interrupted_at
                die(f"stopped by {signal.Signals(signum).name} after step {step}; checkpoint saved "
                    f"(continue with --resume {self.dir})", 128 + signum)
            if kind is not None and issubclass(kind, START_ERRORS) and not self.training:
                self.fail(error)
            if kind is CheckpointError or (kind is lora.AdapterError and self.training):
                die(str(error), 1)  # disk full or read-only while saving, logging or merging: what was saved is intact
            if kind is KeyboardInterrupt:
                self.abort()
        finally:
            self.close()
        return False

    def fail(self, error, code: int = 2):
        """One line for an error before training. A new run folder that holds nothing of value (no
        checkpoint, no logged row; its config.json is written again by the next start) is removed;
        one that does is kept, and the line says how to continue it."""
        logged = self.log is not None and bool(self.log.rows)
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.lock is not None and not self.cfg.resume:
            if not logged and not any(self.dir.glob("checkpoint*")):
                (self.dir / "config.json").unlink(missing_ok=True)
            checkpoint.discard_run(self.lock)  # only the lock and empty logs left: the folder goes
            self.lock = None
            if self.dir.is_dir():
                error = f"{error}; the run folder {self.dir} holds what was logged (continue with --resume {self.dir})"
        self.close()
        die(str(error), code)

    def abort(self):
        """Ctrl-C during start-up, or a second one while training: stop at once, say where things stand."""
        if not self.training:
            self.fail("interrupted during start-up", 130)
        try:
            last = checkpoint.latest(self.dir)
        except CheckpointError:
            last = None
        die(f"interrupted; the last checkpoint is {last or 'not written yet'}"
            + (f" (continue with --resume {self.dir})" if last else ""), 130)

    def close(self):
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        distributed.shutdown()


def band(cfg) -> str:
    """', it keeps w in [0.671, 1.422]': the method's effective band (loss.effective_band), where it has one."""
    found = effective_band(cfg.clip, tuple(sorted(cfg.hparams.items())))
    return "" if found is None else f", keeps w in [{found[0]:.3f}, {found[1]:.3f}]"
