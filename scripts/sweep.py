"""Methods x seeds of train.py with equal budgets, then the paper's Table 3 and Figure 2; or Figure 3,
the delta ablation of kl3.

    python scripts/sweep.py --clip clip clip-higher kl3 --seeds 3            # Table 3 + Figure 2
    python scripts/sweep.py --ablate-delta 0.03 0.05 0.07 0.1 0.2 --seeds 2  # Figure 3
    python scripts/sweep.py --clip kl3 clip:eps=0.329 --steps 60 -- --eval-limit 64   # train flags after --

A method is a --clip name, optionally with its hyper-parameters: `clip:eps=0.329`,
`clip-higher:eps_low=0.329,eps_high=0.6`.  Every run gets the same flags (SETTINGS, then yours after
`--`) and differs only in method and seed.  Runs go to OUT/<method>-s<seed>/ as ordinary train.py
run directories; logs to OUT/logs/.  A finished run is not run again and an interrupted one resumes
from its checkpoint, so the same command continues a sweep.  Subprocesses run --jobs at a time,
each with --threads torch threads (default: the cores shared out, e.g. 2 jobs x 1 thread on 2 cores).

Writes OUT/table.md (final held-out Mean@k / Pass@k, mean +- std over seeds, and the fraction of
tokens whose gradient was cut), OUT/curves.svg (Figure 2, one colour per method), OUT/results.json,
and with --ablate-delta OUT/ablation.svg (Figure 3: Mean@k and Pass@k against delta).
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a clone without installing
from nanoatr.checkpoint import read_metrics  # noqa: E402
from nanoatr.methods import check_hparams, defaults  # noqa: E402
from plot import COLORS, Line, Panel, curve_panels, draw  # noqa: E402  (scripts/plot.py)

# Where clipping acts and the policy still learns: 32 AdamW steps per rollout batch (8 minibatches x 4
# epochs) at a small lr, so later minibatches meet ratios well away from 1.  Measured on the embedded
# default (README, Results, has the table), seed 0, 40 steps, clip (kl3 where named), first 64 held-out
# problems, warm start Mean@8 31.8; cut %, then Mean@8 at step 40: 2 x 2 at lr 1e-4 0.72 (38.1); fresh
# data instead of re-use (64 prompts per step, 8 x 1, lr 1e-4) 0.55 (57.4, learns most); 4 x 4 at 3e-5
# 1.41 (43.4); 4 x 4 at 6e-5 1.73 (41.6); 8 x 4 at 3e-5 1.84, kl3 1.50 (43.4, 39.3); 4 x 8 at 3e-5 2.14
# (40.8) and 8 x 8 at 3e-5 2.36 (33.6, Pass@8 below the warm start), both at twice the time per step;
# 4 x 4 at 1e-4 1.93 and collapse (19.9).  Sampling at temperature 1.5 triples the entropy but cuts
# only 1.52.  The policy is confident (entropy ~0.07 nats/token): the more updates cut, the less it
# learns, and a stable several % was not reached.  8 x 4 at 3e-5 cuts most at a cost the sweep can
# afford.  The 3 x 3 sweep at these settings, 60 steps, full held-out: cut clip 1.75%, clip-higher
# 1.65%, kl3 1.38%; Mean@8 28.2 -> 37.7, 39.3, 37.2; 3.4-3.7 min per run on one core.
#
# Countdown (data/make_countdown.py; warm start Mean@8 18.7 on the first 128 held-out problems, entropy
# ~0.31 nats/token). Clip, seed 0, 32 prompts x 8; cut % over the run, then Mean@8 at steps 10/20/30/40.
# First round (multinomial sampler, all pool problems, T = 1, 60 steps, Mean@8 at 60, warm 18.4): 16
# prompts, 8 x 4 at 1e-4: 5.2 and collapse (13.8); at 6e-5 2.74 (20.0); 32 prompts, 8 x 4: 4.4 (flat);
# 8 x 2: 1.41 (31.2), at 2e-4 2.16 (14.6); 16 x 2 2.30 (23.1). Second round (2026-11-23), T = 1.2 and
# the filtered prompts (rl.jsonl) unless named: 8 x 2 at 1e-4 1.57 (26.9/29.8/29.1/25.9), on the whole
# pool 1.57 (27.1/27.7/28.6/28.1); 8 x 4 at 5e-5 2.63 (26.7/31.0/31.6/31.2), on the whole pool 2.38 (24.0
# at 10); at 7e-5 3.76 (25.2/28.6/30.1/25.3), on the whole pool 2.80 (23.5 at 10); 16 x 4 at 5e-5 3.89
# (25.1/24.8); 8 x 4 at 1e-4 5.14 (21.6/21.9, entropy 0.36 -> 0.44 by step 20), with --grad-clip 0.05
# 5.22 (20.6/18.9, entropy -> 0.49), with --beta 0.04 3.48 (25.9/27.8), --beta 0.02 / 0.01 over 60
# steps 3.67 / 3.85 (30.3 / 30.6 at step 60), at 1.5e-4 4.40 / 4.84 (28.6 / 27.9); T = 1, 64 prompts,
# 8 x 2 at 2e-4 1.98 (23.9/21.7/22.3). Cuts grow with AdamW steps per rollout batch and with lr; the filter adds a
# little (fewer all-wrong groups); T = 1.2 learns a little faster than T = 1 at the same cut. Every
# setting that cut >= 5% raised the entropy instead of the accuracy (the previous sweep used 8 x 4 at
# 6e-5: 3.24% and +9.96 over 3 seeds). Third round (2026-11-23), 8 x 4, --dynamic-sampling 3 (groups
# with one reward replaced, so every trained token has an advantage): at 6e-5 4.74 (25.6/28.6/29.2/
# 28.7); at 8e-5 6.55 (26.7/27.1/29.0/28.9, entropy 0.36 -> 0.36); with --beta 0.01 at 8e-5 4.74 (28.6/
# 28.7/32.2/32.7), at 1e-4 5.60 (26.9/28.5/29.8/30.9, entropy 0.36 -> 0.26). The sweep's: the last,
# over 32 steps so that fifteen runs fit in an hour on 2 cores (5.46% over its first 32 steps).
#
# Every task's settings: (train.py flags, steps). The task itself is passed as --task.
SETTINGS = {"math": (["--minibatches", "8", "--epochs", "4", "--lr", "3e-5", "--eval-every", "20", "--no-compile"], 60),
            "countdown": (["--prompts-per-step", "32", "--minibatches", "8", "--epochs", "4", "--lr", "1e-4",
                           "--beta", "0.01", "--dynamic-sampling", "3", "--temperature", "1.2", "--eval-every", "8",
                           "--eval-limit", "128", "--no-compile"], 32)}
OWN_FLAGS = {"--clip", "--seed", "--steps", "--out-dir", "--name", "--resume", "--task"}


class Run(NamedTuple):
    method: str    # the spec as given, the table's row name: "kl3", "clip:eps=0.329"
    clip: str
    hparams: dict  # flags beyond the method's defaults
    seed: int
    dir: Path


def parse_method(spec: str) -> tuple[str, dict]:
    """'clip-higher:eps_low=0.3,eps_high=0.6' -> ('clip-higher', {'eps_low': 0.3, 'eps_high': 0.6})."""
    clip, _, rest = spec.partition(":")
    try:
        hparams = {k.strip().replace("-", "_"): float(v) for k, v in (kv.split("=") for kv in rest.split(",") if kv)}
    except ValueError:
        raise ValueError(f"method {spec!r}: write hyper-parameters as name=value,name=value") from None
    check_hparams(clip, **hparams)  # unknown method, foreign or bad flag: ValueError naming it
    return clip, hparams


def plan(methods: list[str], seeds: int, out: Path, delta: float | None = None) -> list[Run]:
    """Every (method, seed) run; --delta goes to the methods that have one and did not set it."""
    runs = []
    for spec in methods:
        clip, hp = parse_method(spec)
        if delta is not None and "delta" in defaults(clip):
            hp = {"delta": delta, **hp}
        # a method at its own defaults is the same run however it is written: kl3:delta=0.07 is kl3
        slug = clip if all(defaults(clip).get(k) == v for k, v in hp.items()) else re.sub(r"[^A-Za-z0-9.-]+", "_", spec)
        runs += [Run(spec, clip, hp, s, out / f"{slug}-s{s}") for s in range(seeds)]
    return runs


def command(run: Run, steps: int, train_args: list[str]) -> list[str]:
    """The train.py command line of a run: a fresh start, or --resume of its folder (from its checkpoint, or
    from step 0 when it was stopped before the first one)."""
    if (run.dir / "config.json").is_file():
        return [sys.executable, "train.py", "--resume", str(run.dir), "--steps", str(steps)]
    hp = [x for k, v in run.hparams.items() for x in ("--" + k.replace("_", "-"), f"{v:g}")]
    return [sys.executable, "train.py", "--clip", run.clip, *hp, "--seed", str(run.seed), "--steps", str(steps),
            "--out-dir", str(run.dir.parent), "--name", run.dir.name, *train_args]


def finished(run: Run, steps: int) -> bool:
    """The run logged its final evaluation."""
    path = run.dir / "metrics.jsonl"
    return path.is_file() and any(r.get("step") == steps and any(k.startswith("eval/") for k in r)
                                  for r in read_metrics(path))


def execute(run: Run, steps: int, train_args: list[str], threads: int, log_dir: Path) -> tuple[Run, int, float]:
    """Train one run to completion in a subprocess; returns (run, exit code, seconds)."""
    if finished(run, steps):
        return run, 0, 0.0
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    t0 = time.perf_counter()
    with open(log_dir / f"{run.dir.name}.log", "a") as log:
        code = subprocess.run(command(run, steps, train_args), cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT).returncode
    return run, code, time.perf_counter() - t0


# ----------------------------------------------------------------------------
# Results

def result(run: Run, steps: int) -> dict | None:
    """Final and initial held-out Mean@k / Pass@k, mean cut fractions and the policy's entropy over the last
    20 steps (nats per completion token) of one run (None if unfinished)."""
    if not finished(run, steps):
        return None
    k = json.loads((run.dir / "config.json").read_text())["eval_k"]
    rows = read_metrics(run.dir / "metrics.jsonl")
    evals = {r["step"]: r for r in rows if f"eval/mean@{k}" in r}  # a resumed step keeps its last row
    train = list({r["step"]: r for r in rows if "clip_frac_low" in r}.values())  # resumed steps: last row

    def mean(key):
        return 100 * sum(r[key] for r in train) / max(len(train), 1)

    return {"method": run.method, "seed": run.seed, "k": k, "dir": str(run.dir),
            "mean@k": evals[steps][f"eval/mean@{k}"], "pass@k": evals[steps][f"eval/pass@{k}"],
            "mean@k_start": evals[0][f"eval/mean@{k}"] if 0 in evals else math.nan,
            "pass@k_start": evals[0][f"eval/pass@{k}"] if 0 in evals else math.nan,
            "cut_low": mean("clip_frac_low"), "cut_high": mean("clip_frac_high"),
            "entropy_end": statistics.fmean(e) if (e := [r["entropy"] for r in train[-20:] if "entropy" in r])
            else math.nan}


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std (ddof 0, as the paper's Table 3: its 3-run stds are consistent with it)."""
    m = sum(values) / len(values)
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def pm(values: list[float], digits: int = 2) -> str:
    m, s = mean_std(values)
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def table(results: list[dict], methods: list[str], seeds: int) -> str:
    """Table 3 in markdown: one row per method, plus the warm-start policy (step 0) for reference."""
    done = [r for r in results if r]
    k = done[0]["k"] if done else "k"
    lines = [f"| method | runs | Mean@{k} (%) | Pass@{k} (%) | cut tokens (%) low + high | entropy, last 20 steps |",
             "|---|---|---|---|---|---|"]
    start = [r for r in done if not math.isnan(r["mean@k_start"])]
    if start:
        lines.append(f"| warm start (step 0) | {len(start)} | {pm([r['mean@k_start'] for r in start])} | "
                     f"{pm([r['pass@k_start'] for r in start])} | | |")
    for m in methods:
        rs = [r for r in done if r["method"] == m]
        if not rs:
            lines.append(f"| {m} | 0/{seeds} | | | | |")
            continue
        low, high = mean_std([r["cut_low"] for r in rs])[0], mean_std([r["cut_high"] for r in rs])[0]
        lines.append(f"| {m} | {len(rs)}{'' if len(rs) == seeds else f'/{seeds}'} | {pm([r['mean@k'] for r in rs])} | "
                     f"{pm([r['pass@k'] for r in rs])} | {low + high:.2f} ({low:.2f} + {high:.2f}) | "
                     f"{'' if any(math.isnan(r['entropy_end']) for r in rs) else pm([r['entropy_end'] for r in rs], 3)} |")
    return "\n".join(lines) + "\n"


def plot_methods(runs: list[Run], out: Path, window: int = 10) -> Path:
    """Figure 2 with one colour per method (its seeds share it and its legend entry)."""
    methods = list(dict.fromkeys(r.method for r in runs))
    color = {m: COLORS[i % len(COLORS)] for i, m in enumerate(methods)}
    done = [r for r in runs if (r.dir / "metrics.jsonl").is_file()]
    k = next((json.loads((r.dir / "config.json").read_text())["eval_k"] for r in done), 8)
    rows = [(r.method, color[r.method], read_metrics(r.dir / "metrics.jsonl")) for r in done]
    panels = curve_panels(rows, window, f"eval/mean@{k}")
    panels[-1] = panels[-1]._replace(title=f"(d) held-out Mean@{k} (%)")
    return draw(panels, out, "step")


def plot_ablation(results: list[dict], out: Path) -> Path:
    """Figure 3: final Mean@k and Pass@k against delta, the mean over seeds and each seed faint."""
    done = [r for r in results if r]
    k = done[0]["k"]
    delta = {r["method"]: parse_method(r["method"])[1].get("delta", defaults("kl3")["delta"]) for r in done}
    panels = []
    for i, (key, name) in enumerate((("mean@k", f"Mean@{k}"), ("pass@k", f"Pass@{k}"))):
        by_delta = {}
        for r in done:
            by_delta.setdefault(delta[r["method"]], {})[r["seed"]] = r[key]
        ds = sorted(by_delta)
        seeds = sorted({s for v in by_delta.values() for s in v})
        lines = [Line("one seed", "#bbbbbb", [d for d in ds if s in by_delta[d]],
                      [by_delta[d][s] for d in ds if s in by_delta[d]], markers=True) for s in seeds]
        start = [r[f"{key}_start"] for r in done if not math.isnan(r[f"{key}_start"])]
        if start:  # where the runs began: is any delta better than not training?
            lines.append(Line("warm start (step 0)", "#888888", [ds[0], ds[-1]], [mean_std(start)[0]] * 2,
                              style="--"))
        lines.append(Line("kl3, mean over seeds", COLORS[0], ds,
                          [mean_std(list(by_delta[d].values()))[0] for d in ds], markers=True))
        panels.append(Panel(f"({'ab'[i]}) {name} (%) against δ", key, lines))
    return draw(panels, out, "δ")


# ----------------------------------------------------------------------------

def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    train_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python scripts/sweep.py",
                                     description=__doc__ + "".join(f"\nSETTINGS of --task {t}: {' '.join(f)} --steps {n}"
                                                                   for t, (f, n) in SETTINGS.items()),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clip", nargs="+", metavar="METHOD", help="methods (default: clip clip-higher kl3)")
    parser.add_argument("--ablate-delta", nargs="+", type=float, metavar="DELTA",
                        help="instead of --clip: kl3 at each delta, and Figure 3")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 per method (default: 3)")
    parser.add_argument("--task", default="math", choices=sorted(SETTINGS), help="the task (train.py --task)")
    parser.add_argument("--steps", type=int, help="rollout steps of every run (default: the task's)")
    parser.add_argument("--delta", type=float, help="delta of every method that has one (default: its own, 0.07)")
    parser.add_argument("--jobs", type=int, default=0, help="runs at a time (default: one per core, at most one per run)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (default: cores / jobs)")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"), help="sweep directory (default: runs/sweep)")
    parser.add_argument("--dry-run", action="store_true", help="print the train.py commands and stop")
    args = parser.parse_args(argv)
    if args.clip and args.ablate_delta:
        parser.error("--clip and --ablate-delta exclude each other (the ablation runs kl3)")
    own = OWN_FLAGS & {a.split("=")[0] for a in train_args}
    if own:
        parser.error(f"{', '.join(sorted(own))} after -- is set by the sweep itself")
    flags, steps = SETTINGS[args.task]
    args.steps = args.steps or steps
    if args.seeds < 1 or args.steps < 1:
        parser.error("--seeds and --steps must be >= 1")
    methods = [f"kl3:delta={d:g}" for d in args.ablate_delta] if args.ablate_delta else \
        args.clip or ["clip", "clip-higher", "kl3"]
    out = args.out.resolve()
    try:
        runs = plan(methods, args.seeds, out, args.delta)
    except ValueError as e:
        parser.error(str(e))
    train_args = ["--task", args.task, *flags, *train_args]  # later flags win in train.py's argparse
    cores = os.cpu_count() or 1
    jobs = args.jobs or max(1, min(len(runs), cores))
    threads = args.threads or max(1, cores // jobs)
    if args.dry_run:
        for run in runs:
            print(f"cd {ROOT} && OMP_NUM_THREADS={threads} {' '.join(command(run, args.steps, train_args))}")
        return

    # one sweep directory, one set of settings: finished runs are reused only if they ran with these
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    settings = {"steps": args.steps, "train_args": train_args}
    saved = out / "sweep.json"
    if saved.is_file() and json.loads(saved.read_text()) != settings:
        raise SystemExit(f"error: {out} holds a sweep with other settings ({saved}); choose another --out")
    saved.write_text(json.dumps(settings, indent=2))

    print(f"{len(runs)} runs ({len(methods)} methods x {args.seeds} seeds, {args.steps} steps each), "
          f"{jobs} at a time x {threads} threads; logs in {out / 'logs'}", flush=True)
    failed, t0 = [], time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        for i, (run, code, secs) in enumerate(pool.map(lambda r: execute(r, args.steps, train_args, threads,
                                                                         out / "logs"), runs), 1):
            res = result(run, args.steps) if code == 0 else None
            status = (f"Mean@{res['k']} {res['mean@k']:.1f}  Pass@{res['k']} {res['pass@k']:.1f}  "
                      f"cut {res['cut_low'] + res['cut_high']:.2f}%" if res else f"FAILED (exit {code})")
            print(f"[{i}/{len(runs)}] {run.dir.name}: {status}" + (f"  ({secs / 60:.1f} min)" if secs else
                                                                     "  (finished before)"), flush=True)
            if not res:
                failed.append(run)
    results = [result(run, args.steps) for run in runs]
    (out / "results.json").write_text(json.dumps([r for r in results if r], indent=2))
    head = (f"{'δ ablation of kl3' if args.ablate_delta else 'Clipping methods'}, held-out split at step "
            f"{args.steps} (final), mean ± std over {args.seeds} seed(s); cut = mean over training steps of "
            f"clip_frac_low + clip_frac_high.\nSettings: `{' '.join(train_args)}`\n\n")
    (out / "table.md").write_text(head + table(results, methods, args.seeds))
    print("\n" + head + table(results, methods, args.seeds))
    try:
        written = [plot_methods(runs, out / "curves.svg")]
        if args.ablate_delta and any(results):
            written.append(plot_ablation(results, out / "ablation.svg"))
    except SystemExit as e:  # no matplotlib: the table is written, the figures are not
        print(e, file=sys.stderr)
        written = []
    print(f"wrote {out / 'table.md'}, {', '.join(map(str, written))}  ({(time.perf_counter() - t0) / 60:.1f} min)")
    for run in failed:
        log = out / "logs" / f"{run.dir.name}.log"
        tail = log.read_text(errors="replace").replace("\r", "\n").strip().splitlines()[-3:] if log.is_file() else []
        print(f"{run.dir.name} failed; {log}:\n  " + "\n  ".join(tail), file=sys.stderr)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
