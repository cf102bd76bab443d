"""The run around train.py's and sft.py's loops: the Session (flags read and resolved, the run folder
made or resumed and locked, the metrics log, checkpoints on schedule, Ctrl-C / SIGTERM, the CPU thread
count, one-line errors). How train.py uses it and what goes wrong how: docs/library.md#session"""
import dataclasses
import os
import signal
import sys
from pathlib import Path

from tqdm import tqdm

import nanoatr
from nanoatr import lora
from nanoatr.machinery import checkpoint, distributed
from nanoatr.machinery.checkpoint import CheckpointError
from nanoatr.data import DataError
from nanoatr.evaluate import BudgetError
from nanoatr.loss import Diverged
from nanoatr.model import ModelError
from nanoatr.model.files import local_dir
from nanoatr.rewards import RewardError
from nanoatr.machinery.resume import change_text, named_checkpoint, real_path, resumed_config
from nanoatr.machinery.flags import (ConfigError, apply_preset, band, check_schedule_kept, delta_warning, die,
                                     resolve, train_flags)
from nanoatr.machinery.reward_loader import load_rewards
from nanoatr.machinery.folder import RunFolder, reward_code, unique_name
from nanoatr.tokenizer import TokenizerError


START_ERRORS = (ConfigError, ModelError, TokenizerError, DataError, lora.AdapterError, CheckpointError,
                distributed.DeviceError, BudgetError, RewardError)


class Terminated(KeyboardInterrupt):
    """SIGTERM outside the loop (start-up, the step-0 evaluation, the last one): it stops as a Ctrl-C does."""


def terminated(signum, frame):
    raise Terminated


class Session:
    """A run folder opened for training (a context manager): docs/library.md#session. train.py's; a
    command with other flags (sft.py) overrides what differs: read_flags, configure, finished."""
    branches = True       # --resume RUN/checkpoint-stepN --name NEW goes on from it in a new folder
    prefix = None         # a default run name's first word (None: the --clip method's)

    def __init__(self, argv=None, doc: str = ""):
        nanoatr.ctrl_c_raises()  # from here on, a Ctrl-C is the session's (a new run folder is removed first)
        self.folder = self.bar = self.threads = self.checkpointed = None  # set as the start goes on
        self.training, self.reward_code = False, None
        self.interrupted_at = None  # (step, signal) when Ctrl-C / SIGTERM ended the loop
        self.cfg, self.hparams, self.given = self.read_flags(argv, doc)
        self.sigterm = signal.signal(signal.SIGTERM, terminated)  # the loop has its own; close() puts it back

    def read_flags(self, argv, doc: str):
        """(config, the method's knobs given, the flags given): the command's command line."""
        return train_flags(argv, doc)

    def configure(self, cfg):
        """The config with its defaults filled in (a new run's task and preset, the method's knobs) and every
        value checked (resolve), the --reward functions loaded and checked against the files' columns; a
        ConfigError names the flag."""
        if self.cfg.resume:  # the run's knobs, and its learning-rate schedule kept
            check_schedule_kept(cfg, self.change)
        else:
            cfg = apply_preset(cfg, self.given)
        cfg = resolve(cfg, cfg.hparams or {} if self.cfg.resume else self.hparams, self.d.world, self.given)
        self.rewards = load_rewards(cfg, [cfg.data, *cfg.eval_data])
        self.reward_code = reward_code(self.rewards, len(cfg.reward))  # config.json records it
        self.threads = distributed.CpuThreads(cfg.threads, self.d.device)
        return cfg

    def finished(self) -> bool:
        """A resumed run with nothing left to do: every step done, the last one evaluated."""
        cfg = self.cfg
        return self.start == cfg.steps and (not cfg.eval_data or self.folder.log.has(cfg.steps))

    def __enter__(self) -> "Session":
        try:
            finished = self.open()
        except BaseException as e:
            self.__exit__(type(e), e, None)  # one line and an exit, or (a bug) the traceback
            raise
        if finished:  # not an error: the folder as it was, its lock file too
            self.folder.discard()
            self.close()
            print(finished)
            raise SystemExit(0)
        return self

    def open(self) -> str | None:
        """Flags resolved, the run folder made or resumed and locked, the checkpoint to start from read; a
        finished run resumed (nothing left to do) opens nothing more and returns the line that says so."""
        if "resume" in self.given and not self.cfg.resume.strip():  # --resume "$UNSET": not a new run
            raise ConfigError("--resume was given an empty path (an unset shell variable?): name the run "
                              "folder")
        if "/" in self.cfg.name or self.cfg.name in (".", ".."):  # a folder's name, never a path
            raise ConfigError(f"--name {self.cfg.name}: a run folder's name, not a path: --out-dir says "
                              "where it goes")
        if self.cfg.resume:  # the run's settings and hyper-parameters; a flag that may change is recorded
            run_dir, chosen = named_checkpoint(self.cfg.resume) if self.branches else (self.cfg.resume, None)
            branch, at = self.branch_folder(run_dir, chosen) or (None, None)  # at: the step it goes on from
            given = self.given - {"name", "out_dir"} if branch else self.given
            cfg, self.change = resumed_config(dataclasses.replace(self.cfg, resume=run_dir), given,
                                              hparams=self.hparams, at_step=at)
            if branch:  # from here on the new folder is the run resumed
                cfg = dataclasses.replace(cfg, resume=str(branch), name=branch.name,
                                          out_dir=str(branch.parent))
        else:  # a new run records where it starts: its relative paths are relative to it (resume.from_start)
            cfg, self.change, branch = dataclasses.replace(self.cfg, workdir=os.getcwd()), {}, None
        self.d = d = distributed.setup(cfg.device)
        self.cfg = cfg = self.configure(cfg)
        # The run folder first, before minutes of loading: a used name, a second process on the same
        # run, a read-only or full disk are one line now. Only rank 0 writes (and holds the lock).
        path = Path(cfg.resume) if cfg.resume else Path(cfg.out_dir) / distributed.all_gather(
            [cfg.name or unique_name(self.prefix or cfg.clip)], d)[0]  # rank 0's name
        self.folder = RunFolder(path, resuming=bool(cfg.resume), branch_of=branch and (Path(run_dir), chosen))
        if d.main:
            self.folder.claim()
        distributed.barrier(d)  # rank 0 has repaired the folder before anyone reads it
        self.start = self.folder.load_checkpoint()
        self.done = self.saved = self.start  # the steps whose metrics line is logged; those checkpointed
        if self.start > cfg.steps > 0:  # (sft.py's --steps 0: as many as its --epochs take)
            raise ConfigError(f"--steps {cfg.steps} is before the checkpoint's step {self.start} in "
                              f"{self.folder.path}: give --steps {self.start} or more")
        if d.main:
            self.folder.open_log()
            if self.finished():
                named = self.folder.branch_of[1] if self.folder.branch_of else path  # a branch's: removed
                return (f"run {named} is finished (step {self.start} of {cfg.steps}, evaluated): nothing to "
                        f"do; --resume {named} --steps N with N > {self.start} trains further")
        self.model_dir = local_dir(cfg.model, getattr(cfg, "revision", None))  # a hub id: fetched or cached

    def branch_folder(self, run_dir: str, chosen: Path | None) -> tuple[Path, int] | None:
        """--resume RUN/checkpoint-stepN --name NEW (or --out-dir): the new folder that goes on from that
        checkpoint (RunFolder's branch_of) and its step N, RUN left as it is. Without a new folder, the
        checkpoint named must be RUN's newest usable one (the run goes on in place), or a ConfigError says
        how to branch."""
        if chosen is None:
            return None
        step, problem = checkpoint.check(chosen, load=False)
        if problem is not None:
            raise ConfigError(f"--resume {self.cfg.resume}: not a usable checkpoint ({problem})")
        named = {"name", "out_dir"} & self.given
        new = Path(self.cfg.out_dir if "out_dir" in named else Path(run_dir).parent,
                   self.cfg.name if "name" in named else Path(run_dir).name)
        if named and real_path(new) != real_path(run_dir):
            return new, step
        if (last := checkpoint.check(checkpoint.latest(run_dir), load=False)[0]) > step:
            itself = f"{new} is the run itself; give another --name" if named else "give --name NEW"
            raise ConfigError(f"--resume {self.cfg.resume} holds step {step}, and {run_dir}'s newest "
                              f"checkpoint step {last}: the run keeps its later steps; {itself} to go "
                              f"on from step {step} in a new run folder (beside it, its record up to step "
                              f"{step} copied)")
        return None

    def started(self, checkpointed, tokenizer_files: dict):
        """Setup is done: what the checkpoints save, `checkpointed()` -> (model, optimizer), asked at each
        save (the command's objects hold them; model as checkpoint.save takes it); the run's --report-to
        started (folder.open_reporters), then its config.json written (folder.write_config)."""
        self.checkpointed, self.tokenizer_files = checkpointed, tokenizer_files
        if self.d.main:
            self.folder.open_reporters(self.cfg)
            self.folder.write_config(self.cfg, self.change, self.reward_code)

    def steps(self, progress=None, total: int | None = None, desc: str = "train"):
        """The steps from the checkpoint's to `total` (default --steps), under a progress bar (`progress(row)`
        gives its fields). After each: a checkpoint every --save-every steps and at the last; on Ctrl-C /
        SIGTERM a checkpoint, and the loop ends (the exit then names the signal)."""
        cfg, d, total = self.cfg, self.d, total or self.cfg.steps
        self.training, self.progress = True, progress
        bar = tqdm(range(self.start, total), initial=self.start, total=total, desc=desc, unit="step",
                   disable=not d.main)
        with distributed.Interrupts() as interrupts, bar as self.bar:
            try:
                for step in self.bar:
                    self.thread_count = self.threads and self.threads.adjust()
                    yield step
                    stop = interrupts.requested(d)
                    if stop or (step + 1) % cfg.save_every == 0 or step + 1 == total:
                        self.save(step + 1)
                    if stop or interrupts.requested(d):  # also one that came while saving: no step more
                        distributed.barrier(d)
                        self.interrupted_at = (step + 1, interrupts.signal)
                        return
            finally:
                self.bar = None

    @property
    def ended_by_signal(self) -> bool:
        return self.interrupted_at is not None

    def save(self, step: int):
        if self.d.main:
            model, optimizer = self.checkpointed()
            checkpoint.save(self.folder.path, model, self.tokenizer_files,
                            {"step": step, "optimizer": optimizer.state_dict()},
                            keep=getattr(self.cfg, "keep_checkpoints", 2))
        self.saved = step

    def log_step(self, row: dict):
        """A step's metrics line (under --log-completions its completions to samples.jsonl) and the progress
        bar's fields: the step is done."""
        self.done, completions = row["step"], row.pop("completions", None)
        if self.d.main:
            if completions:  # --log-completions
                self.folder.log.samples(row["step"], None, completions)
            self.folder.log.write(row | ({"threads": self.thread_count} if self.threads else {}))
            if self.progress:
                self.bar.set_postfix(self.progress(row))

    def say(self, line: str | None):
        """Print a line (None: nothing), on rank 0 only; above the progress bar while it runs."""
        if line is not None and self.d.main:
            tqdm.write(line) if self.bar is not None else print(line, flush=True)

    def describe(self, model, trained: list, n_problems: int, beta: bool):
        """The run's first lines: what trains, on what, with which clipping rule (warned if it is inert)."""
        cfg = self.cfg
        if cfg.minibatches * cfg.epochs == 1 and self.d.main:
            print("warning: each rollout batch feeds one optimizer step, so the ratio is exactly 1 and "
                  f"--clip {cfg.clip} has no effect; use --minibatches or --epochs > 1", file=sys.stderr)
        if (warning := delta_warning(cfg)) and self.d.main:
            print(warning, file=sys.stderr)
        n = sum(p.numel() for p in trained)
        source = self.folder.branch_of  # a branch: the run it goes on from
        branched = f" of {source[0]} (its log up to there copied)" if source else ""
        self.say(f"run {self.folder.path}: {model.num_parameters() / 1e6:.2f}M parameters ({n / 1e6:.2f}M "
                 f"trained"
                 f"{f', LoRA r={cfg.lora_rank}' if cfg.lora_rank else ''}), {n_problems} training problems, "
                 f"{self.d.world} x {self.d.device.type}, --clip {cfg.clip} {cfg.hparams}{band(cfg)}"
                 + (f", beta {cfg.beta} ({'adapters off' if cfg.lora_rank else 'a frozen copy of --model'})"
                    if beta else "") + (f", from step {self.start}{branched}" if self.start else "")
                 + (f" ({change_text(self.change)})" if self.change else ""))
        if cfg.reward or cfg.correct_reward:
            self.say(f"accuracy, Mean@k and Pass@k count a completion correct when {self.rewards.judge} "
                     "(--correct-reward)")

    def evaluated(self, step: int) -> bool:
        """This step's evaluation is already in the log (a resumed run)."""
        return self.d.main and self.folder.log.has(step)

    def log_eval(self, step: int, results: dict, samples: dict):
        """An evaluation's line of metrics.jsonl, and a few of its completions per file in samples.jsonl."""
        if self.d.main:
            for name, rows in samples.items():
                self.folder.log.samples(step, name, rows)
            self.folder.log.write({"step": step, **results})

    def __exit__(self, kind, error, tb):
        """How the run ends: each way but success and a bug (whose traceback follows) is one `error:` line
        and an exit code (docs/library.md#session lists them)."""
        try:
            if kind is None and self.ended_by_signal:
                step, signum = self.interrupted_at
                die(f"stopped by {signal.Signals(signum).name} after step {step}; checkpoint saved "
                    f"(continue with --resume {self.folder.path})", 128 + signum)
            if kind is None:
                return False
            if issubclass(kind, SystemExit):  # user code's sys.exit() (a reward function's): no success
                kind, error = RewardError, RewardError(f"sys.exit({error.code!r}) was called during the run "
                                                       "(by a reward function?)")
            if issubclass(kind, KeyboardInterrupt):  # outside the loop, or a second Ctrl-C in it: at once
                what, code = ("stopped by SIGTERM", 143) if kind is Terminated else ("interrupted", 130)
                if not self.training:
                    self.fail(f"{what} during start-up", code)
                try:
                    last = checkpoint.latest(self.folder.path)
                except CheckpointError:
                    last = None
                die(f"{what}; the last checkpoint is {last or 'not written yet'}"
                    + (f" (continue with --resume {self.folder.path})" if last else ""), code)
            if kind is Diverged:  # "step 2: the loss is not finite (nan)"
                last = f"the last checkpoint holds step {self.saved}" if self.saved else \
                    "no checkpoint was written"
                self.fail(f"{error}: the run diverged and stops; nothing of {str(error).partition(':')[0]} "
                          f"is logged or saved, and {last}", 1, advice=False)
            if issubclass(kind, START_ERRORS) and not self.training:
                self.fail(error)
            if kind is RewardError:  # while training: the steps done are checkpointed first
                try:
                    if self.done > self.saved:
                        self.save(self.done)
                except CheckpointError as e:
                    die(f"{error}; saving step {self.done} failed too: {e}", 1)
                kept = f"the checkpoint holds step {self.saved}" if self.saved else \
                    "no step was done: no checkpoint"
                die(f"{error}; {kept} (continue with --resume {self.folder.path} once the reward is "
                    "fixed)", 1)
            if kind is CheckpointError or (kind is lora.AdapterError and self.training):
                die(str(error), 1)  # a full or read-only disk while saving or logging: what was saved is kept
            if self.folder is not None:  # anything else (a bug: its traceback follows)
                self.folder.discard()
        finally:
            self.close()
        return False

    def fail(self, error, code: int = 2, advice: bool = True):
        """One line for an error (__exit__ then closes). A new run folder that holds nothing of value (no
        logged row, no checkpoint) is removed; one that does is kept, and the line says how to continue it
        (under `advice`); a resumed one is left as it was (folder.RunFolder.discard)."""
        kept = self.folder.discard() if self.folder is not None else ""
        die(f"{error}{kept if advice else ''}", code)

    def close(self):
        if self.folder is not None:
            self.folder.close()
        signal.signal(signal.SIGTERM, self.sigterm)
        distributed.shutdown()
