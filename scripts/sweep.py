"""Methods x seeds of train.py with equal budgets, then the paper's Table 3 and Figure 2; or Figure 3,
the delta ablation of kl3.

    python scripts/sweep.py --clip clip clip-higher kl3 --seeds 3            # Table 3 + Figure 2
    python scripts/sweep.py --ablate-delta 0.03 0.05 0.07 0.1 0.2 --seeds 2  # Figure 3
    python scripts/sweep.py --clip kl3 clip:eps=0.329 --steps 60 -- --eval-limit 64   # train flags after --

An arm (a --clip entry) is a method, optionally with its hyper-parameters and train.py flags of its own:
`clip:eps=0.329`, `kl3:delta=0.07,aggregation=seq-mean-token-mean,lr=2e-4` (flags in full, as train.py
takes them).  Every run gets the same flags (SETTINGS, then yours after `--`, then its arm's) and
differs only in arm and seed; a --preset after `--` replaces SETTINGS (the preset wins).  Runs go to
OUT/<arm>-s<seed>/ as ordinary train.py run directories, named by what differs from the method's
defaults (kl3:delta=0.07 is kl3); logs to OUT/logs/.  A finished run is not run again and an interrupted
one resumes from its checkpoint, so the same command continues a sweep.  On CUDA one run per GPU at a time
(--gpus, default every visible GPU), each with its CUDA_VISIBLE_DEVICES; on the CPU --jobs at a time.
Each run has --threads torch threads (default: the cores shared out, e.g. 2 jobs x 1 thread on 2 cores).

    python scripts/sweep.py --gpus 0,1,2,3 --clip clip kl3 --seeds 8 -- --preset paper --model ... --data ...

Writes OUT/table.md (Table 3, then the pre-registered --hypothesis and --reject family and the seed-paired
comparisons), OUT/curves.svg (Figure 2), OUT/results.json, and with --ablate-delta OUT/ablation.svg
(Figure 3): scripts/sweep_report.py says what each holds, scripts/stats.py how it is computed.  A
comparison is A/B, or an --effect of more than two arms, e.g. the main effects of a 2 x 2 (edges of a trust
band: clip, two hybrids, kl3):

    python scripts/sweep.py --clip clip LOWHYB HIGHHYB kl3 --seeds 10 \\
        --effect low +0.5 LOWHYB -0.5 clip +0.5 kl3 -0.5 HIGHHYB \\
        --effect high +0.5 HIGHHYB -0.5 clip +0.5 kl3 -0.5 LOWHYB \\
        --hypothesis low entropy below --hypothesis high heldout/mean differs \\
        --reject kl3/clip heldout/mean 3.67
"""
import argparse
import dataclasses
import json
import os
import queue
import re
import subprocess
import sys
import time
import typing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a clone without installing
import torch  # noqa: E402
from nanoatr.machinery.flags import (PRESETS, ConfigError, Parser, TrainConfig, apply_preset,  # noqa: E402
                                     check_hparams, check_number, check_ranges, flag, hparam_flags,
                                     names_meant, parse, resolve)
from nanoatr.methods import METHODS, defaults  # noqa: E402
# the report: scripts/sweep_report.py, and the questions it answers: scripts/contrasts.py
from sweep_report import Run, finished, result, run_config, scores, write_report  # noqa: E402
from contrasts import Questions, questions  # noqa: E402

# Where clipping acts and the policy still learns: several AdamW steps per rollout batch (minibatches x
# epochs) at a small lr, so that later minibatches meet ratios away from 1. More updates per batch and a
# larger lr cut more tokens, and past a few percent the policy's entropy rose instead of its accuracy.
# Every setting tried, with its cut share and Mean@8 along the way: docs/results.md, "How the settings were
# chosen" (math: 8 x 4 at 3e-5, 1.84% cut) and "Exploration: finding the settings" (Countdown: 8 x 4 at
# 1e-4 with --dynamic-sampling 3 and --beta 0.01, 5.46% cut over its first 32 steps).
#
# Every task's settings: (train.py flags, steps). The task itself is passed as --task.
SETTINGS = {"math": (["--minibatches", "8", "--epochs", "4", "--lr", "3e-5", "--eval-every", "20",
                      "--no-compile"], 60),
            "countdown": (["--prompts-per-step", "32", "--minibatches", "8", "--epochs", "4", "--lr", "1e-4",
                           "--beta", "0.01", "--dynamic-sampling", "3", "--temperature", "1.2",
                           "--no-compile"], 32)}
# A task whose flags set no --eval-every is evaluated (on every problem of its held-out files) at step 0, at
# the last step and at the step before it: a run's score is the mean of its last two evaluations
# (sweep_report.py's result).
OWN_FLAGS = {"--clip", "--seed", "--steps", "--out-dir", "--name", "--resume", "--task"}


# train.py flags an arm may not set: the sweep's own, the preset (one for the whole sweep, after --) and the
# lists (a repeated list flag extends the list instead of replacing it)
ARM_EXCLUDED = {flag[2:].replace("-", "_") for flag in OWN_FLAGS} | {"preset"}


def train_fields() -> dict:
    """train.py's flags an arm may set: field name -> its type."""
    return {f.name: f.type for f in dataclasses.fields(TrainConfig) if f.metadata.get("cli") is not False
            and f.name not in ARM_EXCLUDED and typing.get_origin(f.type) is not list}


def is_switch(name: str) -> bool:
    """A train.py flag without a value: --compile / --no-compile."""
    return bool in (train_fields()[name], *typing.get_args(train_fields()[name]))


def flag_argv(name: str, value: str) -> list[str]:
    """The train.py argv of one arm flag: --name value, or for a switch --name (true) / --no-name (false)."""
    if is_switch(name):
        return [flag(name) if value == "true" else "--no-" + flag(name)[2:]]
    return [flag(name), value]


def train_flag(spec: str, key: str, value: str) -> tuple[str, str]:
    """An arm's train.py flag: (field, value), the field named in full, as train.py takes it, and the value
    as train.py parses it (a bad one: train.py's one error line)."""
    if key in ARM_EXCLUDED or typing.get_origin(typing.get_type_hints(TrainConfig).get(key)) is list:
        raise ValueError(f"method {spec!r}: {flag(key)} is one for the whole sweep (the sweep's own, "
                         "or a train.py flag after --)")
    if key not in train_fields():
        meant = names_meant(key, list(train_fields()))
        hint = f"; did you mean {' or '.join(meant)}?" if meant else ""
        raise ValueError(f"method {spec!r}: {flag(key)} is neither a hyper-parameter of its method "
                         f"nor a train.py flag{hint}")
    if is_switch(key):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"method {spec!r}: {flag(key)} is a switch: {key}=true or {key}=false")
        value = value.lower()
    cfg = parse(TrainConfig, flag_argv(key, value), add_flags=hparam_flags)[0]
    check_ranges(cfg)  # ConfigError (a ValueError) naming the flag
    parsed = getattr(cfg, key)
    return key, value if isinstance(parsed, bool) else f"{parsed:g}" if isinstance(parsed, float) else \
        str(parsed)


def parse_method(spec: str) -> tuple[str, dict, tuple]:
    """An arm: 'kl3:delta=0.07,aggregation=seq-mean-token-mean,lr=2e-4' -> ('kl3', {'delta': 0.07},
    (('aggregation', 'seq-mean-token-mean'), ('lr', '0.0002'))). A key that is a hyper-parameter of some
    method goes to the method (checked against this one's); any other must be a train.py flag."""
    clip, _, rest = spec.partition(":")
    try:
        pairs = [(k.strip().replace("-", "_"), v.strip())
                 for k, v in (kv.split("=") for kv in rest.split(",") if kv)]
    except ValueError:
        raise ValueError(f"method {spec!r}: write settings as name=value,name=value") from None
    every_hparam = {k for m in METHODS for k in defaults(m)}
    try:
        hparams = {k: float(v) for k, v in pairs if k in every_hparam}
    except ValueError:
        raise ValueError(f"method {spec!r}: hyper-parameters are numbers") from None
    check_hparams(clip, **hparams)  # unknown method, foreign or bad hyper-parameter: ValueError naming it
    flags = [train_flag(spec, k, v) for k, v in pairs if k not in every_hparam]
    return clip, hparams, tuple(sorted(flags))


def run_name(clip: str, hparams: dict, flags: tuple) -> str:
    """The folder name of an arm: its method, the hyper-parameters it sets away from their defaults (in the
    method's order) and its train.py flags (sorted), so that one run has one name however it is written:
    kl3:delta=0.07 is kl3; kl3:lr=2e-4,delta=0.05 is kl3_delta_0.05_lr_0.0002."""
    changed = [(k, f"{hparams[k]:g}") for k, v in defaults(clip).items() if k in hparams and hparams[k] != v]
    words = [clip, *(f"{k}_{v}" for k, v in [*changed, *flags])]
    return re.sub(r"[^A-Za-z0-9.-]+", "_", "_".join(words))


def plan(methods: list[str], seeds: int, out: Path, delta: float | None = None,
         first_seed: int = 0) -> list[Run]:
    """Every (arm, seed) run, seeds first_seed .. first_seed + seeds - 1; --delta goes to the methods that
    have one and did not set it. Two arms that are one run (kl3 and kl3:delta=0.07) are refused."""
    runs, named = [], {}
    for spec in methods:
        clip, hp, flags = parse_method(spec)
        if delta is not None and "delta" in defaults(clip):
            hp = {"delta": delta, **hp}
        name = run_name(clip, hp, flags)
        if name in named:
            raise ValueError(f"methods {named[name]!r} and {spec!r} are the same run ({name})")
        named[name] = spec
        runs += [Run(spec, clip, hp, s, out / f"{name}-s{s}", flags)
                 for s in range(first_seed, first_seed + seeds)]
    return runs


def command(run: Run, steps: int, train_args: list[str]) -> list[str]:
    """The train.py command line of a run: a fresh start, or --resume of its folder (from its checkpoint, or
    from step 0 when it was stopped before the first one)."""
    if (run.dir / "config.json").is_file():
        return [sys.executable, "train.py", "--resume", str(run.dir), "--steps", str(steps)]
    hp = [x for k, v in run.hparams.items() for x in (flag(k), f"{v:g}")]
    own = [x for k, v in run.flags for x in flag_argv(k, v)]
    return [sys.executable, "train.py", "--clip", run.clip, *hp, "--seed", str(run.seed),
            "--steps", str(steps), "--out-dir", str(run.dir.parent), "--name", run.dir.name,
            *train_args, *own]  # the arm's flags win


def visible_gpus() -> list[str]:
    """The GPUs this process sees, as CUDA_VISIBLE_DEVICES names them for a child process: its entries when it
    is set (a job given "2" runs on physical GPU 2), else 0 .. device_count - 1; none without CUDA."""
    if not torch.cuda.is_available():
        return []
    count, listed = torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES")
    return [g.strip() for g in listed.split(",")][:count] if listed else [str(i) for i in range(count)]


def job_env(threads: int, gpu: str | None) -> dict:
    """The environment of one train.py job: its torch threads, and on CUDA the one GPU it may use."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def execute(run: Run, steps: int, train_args: list[str], env: dict, log_dir: Path) -> tuple[int, float]:
    """Train one run to completion in a subprocess; returns (exit code, seconds)."""
    if finished(run, steps):
        return 0, 0.0
    t0 = time.perf_counter()
    with open(log_dir / f"{run.dir.name}.log", "a") as log:
        code = subprocess.run(command(run, steps, train_args), cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT).returncode
    return code, time.perf_counter() - t0


def train_all(runs: list[Run], steps: int, train_args: list[str], devices: list[str | None], threads: int,
              out: Path, saved: Path, settings: dict) -> list[Run]:
    """Train every unfinished run, one per device at a time (a GPU id, or None for a CPU job slot), seed by
    seed (a sweep stopped early has every method's first seeds), a line per run as it ends; returns the runs
    that failed."""
    saved.write_text(json.dumps(settings, indent=2))
    where = f"one per GPU ({', '.join(devices)})" if devices[0] is not None else "on the CPU"
    print(f"{len(runs)} runs ({len({r.method for r in runs})} methods x {len({r.seed for r in runs})} seeds, "
          f"{steps} steps each), {len(devices)} at a time {where} x {threads} threads; "
          f"logs in {out / 'logs'}", flush=True)
    free = queue.Queue()  # the devices no job holds
    for device in devices:
        free.put(device)

    def job(run: Run) -> tuple[Run, int, float, str | None]:
        device = free.get()  # one of len(devices) workers: a device is always free
        try:
            return run, *execute(run, steps, train_args, job_env(threads, device), out / "logs"), device
        finally:
            free.put(device)

    failed = []
    with ThreadPoolExecutor(len(devices)) as pool:
        for i, (run, code, secs, device) in enumerate(pool.map(job, sorted(runs, key=lambda r: r.seed)), 1):
            res = result(run, steps) if code == 0 else None
            status = ("; ".join(f"{name} {res[key]:.1f}" for key, name in scores([res])) +
                      f"; cut {res['cut_low'] + res['cut_high']:.2f}%" if res else f"FAILED (exit {code})")
            took = f"  ({secs / 60:.1f} min{f' on GPU {device}' if device is not None else ''})" \
                if secs else "  (finished before)"
            print(f"[{i}/{len(runs)}] {run.dir.name}: {status}{took}", flush=True)
            if not res:
                failed.append(run)
    return failed


# ----------------------------------------------------------------------------

def make_parser() -> argparse.ArgumentParser:
    """The sweep's own flags (train.py's come after --)."""
    settings_help = "".join(f"\nSETTINGS of --task {t} (none under --preset): {' '.join(f)} --steps {n}"
                            for t, (f, n) in SETTINGS.items())
    parser = Parser(prog="python scripts/sweep.py", description=__doc__ + settings_help,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # a bad flag: one line
    parser.add_argument("--clip", nargs="+", metavar="ARM", help="arms: methods, each with its "
                        "hyper-parameters and train.py flags if any, as above (default: clip clip-higher "
                        "kl3)")
    parser.add_argument("--ablate-delta", nargs="+", type=float, metavar="DELTA",
                        help="instead of --clip: kl3 at each delta, and Figure 3")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 per method (default: 3)")
    parser.add_argument("--first-seed", type=int, default=0, metavar="S",
                        help="seeds S .. S+N-1 instead (tuning seeds apart from the confirmatory ones)")
    parser.add_argument("--task", default="math", choices=sorted(SETTINGS), help="the task (train.py --task)")
    parser.add_argument("--steps", type=int, help="rollout steps of every run (default: the task's)")
    parser.add_argument("--compare", nargs="+", metavar="A/B", default=None,
                        help="seed-paired comparisons to print, as A/B with methods as written in --clip, or "
                        "A/warm-start for A's runs against their own step 0 (default: every method against "
                        "the first)")
    parser.add_argument("--effect", nargs="+", action="append", default=[], metavar=("NAME", "WEIGHT ARM"),
                        help="a contrast of arms, repeatable: NAME then weights and arms in turn, the "
                        "weights summing to 0, e.g. the low edge's main effect in a 2 x 2, --effect low +0.5 "
                        "LOWHYB -0.5 clip +0.5 kl3 -0.5 HIGHHYB (weights as decimals: -1/2 reads as a flag). "
                        "Its per-seed value over the seeds where every arm finished is compared as A - B is; "
                        "it is printed after the comparisons and may stand for A/B in --hypothesis and "
                        "--reject")
    parser.add_argument("--hypothesis", nargs=3, action="append", default=[],
                        metavar=("A/B", "SCORE", "SIDE"),
                        help="a pre-registered hypothesis, repeatable: A - B (or an --effect's NAME) is "
                        "above, below or differs from 0 in SCORE (heldout/mean, transfer/pass, mean: the "
                        "files' average, entropy: the training tokens', heldout/entropy: the evaluation "
                        "policy's); its verdict by the 95%% paired t-interval, its paired t-test's p "
                        "(one-sided on the predicted side, two-sided for differs) and the decision of Holm's "
                        "procedure over every --hypothesis and --reject at the 5%% level are printed above "
                        "the comparisons, which are then exploratory")
    parser.add_argument("--reject", nargs=3, action="append", default=[], metavar=("A/B", "SCORE", "EFFECT"),
                        help="is a difference A - B (or an --effect) of EFFECT or beyond (e.g. the paper's "
                        "3.67) ruled out? A one-sided paired t-test at the 5%% level, repeatable; one of the "
                        "family that Holm's procedure decides")
    parser.add_argument("--delta", type=float,
                        help="delta of every method that has one (default: its own, 0.07)")
    parser.add_argument("--gpus", help="GPUs to run on, e.g. 0,1,2,3: one run per GPU at a time, each with "
                        "its CUDA_VISIBLE_DEVICES (default: every GPU visible; on a machine without CUDA, "
                        "CPU jobs)")
    parser.add_argument("--jobs", type=int, default=0, help="CPU runs at a time (default: one per core, at "
                        "most one per run); on GPUs the number of GPUs")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads per run (default: cores / jobs)")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"),
                        help="sweep directory (default: runs/sweep)")
    parser.add_argument("--dry-run", action="store_true", help="print the train.py commands and stop")
    parser.add_argument("--report", action="store_true", help="train nothing: write the table, the "
                        "comparisons and the figures from the runs finished so far (a sweep in progress is "
                        "left alone)")
    return parser


def check_counts(args, parser: argparse.ArgumentParser):
    """The sweep's counts in their ranges (those given): one error line naming the flag."""
    try:
        for name, allowed in {"seeds": ">=1", "steps": ">=1", "first_seed": ">=0", "jobs": ">=0",
                              "threads": ">=0"}.items():
            if getattr(args, name) is not None:
                check_number(name, getattr(args, name), allowed)
    except ConfigError as e:
        parser.error(str(e))


def asked(args, methods: list[str], parser: argparse.ArgumentParser) -> Questions:
    """What the report asks of the runs (scripts/contrasts.py); a bad question is the parser's error line."""
    try:
        return questions(methods, args.effect, args.compare, args.hypothesis, args.reject)
    except ValueError as e:
        parser.error(str(e))


def devices_and_threads(args, runs: list[Run], parser: argparse.ArgumentParser) -> tuple[list, int]:
    """Where the runs go: one slot per GPU (--gpus, default every visible one), else --jobs CPU slots (default
    one per core, at most one per run); and the torch threads of each run (--threads, default the cores
    shared out)."""
    gpus = [g.strip() for g in args.gpus.split(",")] if args.gpus is not None else visible_gpus()
    if "" in gpus or len(set(gpus)) < len(gpus):
        parser.error(f"--gpus {args.gpus}: name each GPU once, e.g. --gpus 0,1,2,3")
    if gpus and args.jobs:
        parser.error(f"--jobs with GPUs ({','.join(gpus)}): one run per GPU at a time; "
                     "choose them with --gpus")
    cores = os.cpu_count() or 1
    devices = gpus or [None] * (args.jobs or max(1, min(len(runs), cores)))
    return devices, args.threads or max(1, cores // len(devices))


def check_runs(runs: list[Run], steps: int, train_args: list[str], parser: argparse.ArgumentParser):
    """Each new run's train.py flags, checked as train.py checks them before its first step (each value in
    its range, and how they fit together): a setting that would fail its runs is one error line now, not
    failed runs later. A resumed run is train.py's to check against its config.json."""
    for run in runs:
        argv = command(run, steps, train_args)[2:]
        if "--resume" in argv:
            continue
        cfg, hparams, given = parse(TrainConfig, argv, add_flags=hparam_flags)
        try:
            resolve(apply_preset(cfg, given), hparams, 1, given)
        except ConfigError as e:
            parser.error(f"{e} (train.py, run {run.dir.name})")


def print_commands(runs: list[Run], steps: int, train_args: list[str], devices: list, threads: int):
    """--dry-run: each run's train.py command line, as the sweep would start it."""
    gpus = [d for d in devices if d is not None]
    if gpus:
        print(f"# {len(gpus)} at a time: each command runs with CUDA_VISIBLE_DEVICES set to a GPU of "
              f"{','.join(gpus)} that no other run holds")
    for run in runs:
        print(f"cd {ROOT} && OMP_NUM_THREADS={threads} {' '.join(command(run, steps, train_args))}")


def print_failed(failed: list[Run], out: Path):
    """Each failed run's name and the last lines of its log, on stderr."""
    for run in failed:
        log = out / "logs" / f"{run.dir.name}.log"
        tail = log.read_text(errors="replace").replace("\r", "\n").strip().splitlines()[-3:] \
            if log.is_file() else []
        print(f"{run.dir.name} failed; {log}:\n  " + "\n  ".join(tail), file=sys.stderr)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    train_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.clip and args.ablate_delta:
        parser.error("--clip and --ablate-delta exclude each other (the ablation runs kl3)")
    given = parse(TrainConfig, train_args, add_flags=hparam_flags)  # a bad flag: train.py's error line
    own = sorted(flag(name) for name in given[2] if flag(name) in OWN_FLAGS)
    if own:
        parser.error(f"{', '.join(own)} after -- is set by the sweep itself")
    preset = given[0].preset
    # A preset wins: the sweep's SETTINGS are tuned for the embedded tasks, and a preset (the paper's, for
    # Qwen3-1.7B on GPUs) is a setting of its own; only --steps, the sweep's own flag, is still the sweep's.
    flags, steps = ([], PRESETS[preset]["steps"]) if preset else SETTINGS[args.task]
    args.steps = args.steps or steps
    check_counts(args, parser)
    methods = [f"kl3:delta={d:g}" for d in args.ablate_delta] if args.ablate_delta else \
        args.clip or ["clip", "clip-higher", "kl3"]
    out = args.out.resolve()
    try:
        runs = plan(methods, args.seeds, out, args.delta, args.first_seed)
    except ValueError as e:
        parser.error(str(e))
    questions = asked(args, methods, parser)
    ends = [] if preset or "--eval-every" in flags or args.steps < 2 else \
        ["--eval-every", str(args.steps - 1)]
    train_args = ["--task", args.task, *flags, *ends, *train_args]  # later flags win in train.py's argparse
    devices, threads = devices_and_threads(args, runs, parser)
    if not args.report:
        check_runs(runs, args.steps, train_args, parser)
    elif not out.is_dir():
        parser.error(f"--report: {out} holds no sweep (no such folder)")
    if preset:
        print(f"--preset {preset} after --: the sweep's settings of --task {args.task} are not applied (the "
              f"preset's win); {args.steps} steps", flush=True)
    if args.dry_run:
        print_commands(runs, args.steps, train_args, devices, threads)
        return

    # one sweep directory, one set of settings: finished runs are reused only if they ran with these
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    settings = {"steps": args.steps, "train_args": train_args}
    saved = out / "sweep.json"
    if saved.is_file() and json.loads(saved.read_text()) != settings:
        raise SystemExit(f"error: {out} holds a sweep with other settings ({saved}); choose another --out")
    for run in runs:  # a finished run that cannot be reported: said now, not after the others have trained
        if finished(run, args.steps):
            run_config(run)
    t0 = time.perf_counter()
    failed = [] if args.report else train_all(runs, args.steps, train_args, devices, threads, out, saved,
                                              settings)
    written = write_report(runs, out, args.steps, args.seeds, train_args, questions, bool(args.ablate_delta))
    print(f"wrote {', '.join(map(str, written))}  ({(time.perf_counter() - t0) / 60:.1f} min)")
    print_failed(failed, out)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
