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
from nanoatr.runs import read_metrics  # noqa: E402
from nanoatr.methods import check_hparams, defaults  # noqa: E402
from plot import COLORS, TRAIN_PANELS, Line, Panel, draw, moving_average, series  # noqa: E402  (scripts/plot.py)
import stats  # noqa: E402  (scripts/stats.py)

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
                           "--beta", "0.01", "--dynamic-sampling", "3", "--temperature", "1.2", "--no-compile"], 32)}
# A task whose flags set no --eval-every is evaluated (on every problem of its held-out files) at step 0, at the
# last step and at the step before it: a run's score is the mean of its last two evaluations (result).
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


def train_all(runs: list[Run], steps: int, train_args: list[str], jobs: int, threads: int, out: Path, saved: Path,
              settings: dict) -> list[Run]:
    """Train every unfinished run, `jobs` at a time, seed by seed (a sweep stopped early has every method's first
    seeds), a line per run as it ends; returns the runs that failed."""
    saved.write_text(json.dumps(settings, indent=2))
    print(f"{len(runs)} runs ({len({r.method for r in runs})} methods x {len({r.seed for r in runs})} seeds, {steps} "
          f"steps each), {jobs} at a time x {threads} threads; logs in {out / 'logs'}", flush=True)
    failed = []
    with ThreadPoolExecutor(jobs) as pool:
        order = sorted(runs, key=lambda r: r.seed)
        for i, (run, code, secs) in enumerate(pool.map(lambda r: execute(r, steps, train_args, threads, out / "logs"),
                                                       order), 1):
            res = result(run, steps) if code == 0 else None
            status = ("; ".join(f"{name} {res[key]:.1f}" for key, name in scores([res])) +
                      f"; cut {res['cut_low'] + res['cut_high']:.2f}%" if res else f"FAILED (exit {code})")
            print(f"[{i}/{len(runs)}] {run.dir.name}: {status}" + (f"  ({secs / 60:.1f} min)" if secs else
                                                                     "  (finished before)"), flush=True)
            if not res:
                failed.append(run)
    return failed


# ----------------------------------------------------------------------------
# Results

ENTROPY_WINDOW = 20  # the table's entropy: the mean over a run's last 20 steps (all of them in a shorter run)


def result(run: Run, steps: int) -> dict | None:
    """One finished run's numbers (None if unfinished). For the files' average ("mean@k", "pass@k") and for
    each evaluated file ("heldout/mean@k", ...): the score at the end, which is the mean of the evaluations
    logged at the last step and at the step before it (the sweep's settings evaluate both; one evaluation
    when only the last is logged), and at step 0 ("..._start", nan if not evaluated). Also the mean cut
    fractions (%) and the entropy (nats per completion token) over the last min(20, steps) steps."""
    if not finished(run, steps):
        return None
    k = json.loads((run.dir / "config.json").read_text())["eval_k"]
    rows = read_metrics(run.dir / "metrics.jsonl")
    evals = {r["step"]: r for r in rows if f"eval/mean@{k}" in r}  # a resumed step keeps its last row
    train = list({r["step"]: r for r in rows if "clip_frac_low" in r}.values())  # resumed steps: last row
    end = [s for s in (steps - 1, steps) if s in evals]
    splits = list(dict.fromkeys(m.group(1) for r in evals.values() for key in r
                                if (m := re.fullmatch(rf"eval/(.+)/mean@{k}", key))))

    def mean(key):
        return 100 * sum(r[key] for r in train) / max(len(train), 1)

    entropy = [r["entropy"] for r in train[-min(ENTROPY_WINDOW, steps):] if "entropy" in r]
    res = {"method": run.method, "seed": run.seed, "k": k, "dir": str(run.dir), "end_steps": end, "splits": splits,
           "cut_low": mean("clip_frac_low"), "cut_high": mean("clip_frac_high"),
           "entropy_end": statistics.fmean(entropy) if entropy else math.nan}
    for prefix in ["", *(f"{split}/" for split in splits)]:
        for metric in ("mean", "pass"):
            key = f"eval/{prefix}{metric}@{k}"
            at_end = [evals[s][key] for s in end if key in evals[s]]
            res[f"{prefix}{metric}@k"] = statistics.fmean(at_end) if at_end else math.nan
            res[f"{prefix}{metric}@k_start"] = evals[0][key] if key in evals.get(0, {}) else math.nan
    return res


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std (ddof 0, as the paper's Table 3: its 3-run stds are consistent with it)."""
    m = sum(values) / len(values)
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def pm(values: list[float], digits: int = 2) -> str:
    """'mean ± std' over seeds; one value alone has no spread to show."""
    m, s = mean_std(values)
    return f"{m:.{digits}f}" if len(values) == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"


def hyperparameters(method: str) -> str:
    """'eps=0.2', 'delta=0.05': the method's hyper-parameters as the runs used them (its defaults, then the spec's)."""
    clip, hp = parse_method(method)
    return ", ".join(f"{k}={v:g}" for k, v in {**defaults(clip), **hp}.items()) or "none"


def scores(done: list[dict]) -> list[tuple[str, str]]:
    """(result key, column name) of the scores to report: Mean@k and Pass@k of each evaluated file, or of
    their average when the runs logged no file's own."""
    k, splits = done[0]["k"], done[0]["splits"]
    return [(f"{p}{m}@k", f"{p.replace('/', ' ')}{m.capitalize()}@{k}") for p in [f"{s}/" for s in splits] or [""]
            for m in ("mean", "pass")]


def table(results: list[dict], methods: list[str], seeds: int, steps: int) -> str:
    """Table 3 in markdown: one row per method (its hyper-parameters, mean ± std over seeds of each score),
    plus the warm-start policy (step 0) for reference, mean ± std over the seeds of the finished runs."""
    done = [r for r in results if r]
    cols = scores(done) if done else [("mean@k", "Mean@k"), ("pass@k", "Pass@k")]
    window = min(ENTROPY_WINDOW, steps)
    lines = [f"| method | hyper-parameters | runs | {' | '.join(f'{name} (%)' for _, name in cols)} | "
             f"cut tokens (%) low + high | entropy, last {window} steps |", "|---" * (len(cols) + 5) + "|"]
    start = {}  # seed -> its runs' step-0 evaluations: one warm start per seed, however many methods ran it
    for r in done:
        if not math.isnan(r["mean@k_start"]):
            start.setdefault(r["seed"], []).append(r)
    if start:
        def at_start(key):  # each seed's step-0 score (its runs' mean: equal where they ran on one kind of machine)
            return [statistics.fmean(r[f"{key}_start"] for r in rs) for rs in start.values()]
        lines.append(f"| warm start (step 0) | | {len(start)} seed{'s' * (len(start) > 1)} | " +
                     " | ".join(pm(at_start(key)) for key, _ in cols) + " | | |")
    for m in methods:
        rs = [r for r in done if r["method"] == m]
        if not rs:
            lines.append(f"| {m} | {hyperparameters(m)} | 0/{seeds} |" + " |" * (len(cols) + 2))
            continue
        low, high = mean_std([r["cut_low"] for r in rs])[0], mean_std([r["cut_high"] for r in rs])[0]
        entropy = "" if any(math.isnan(r["entropy_end"]) for r in rs) else pm([r["entropy_end"] for r in rs], 3)
        lines.append(f"| {m} | {hyperparameters(m)} | {len(rs)}{'' if len(rs) == seeds else f'/{seeds}'} | " +
                     " | ".join(pm([r[key] for r in rs]) for key, _ in cols) +
                     f" | {low + high:.2f} ({low:.2f} + {high:.2f}) | {entropy} |")
    return "\n".join(lines) + "\n"


WARM_START = "warm-start"  # --compare kl3/warm-start: each run's end against its own step-0 evaluation


def comparisons(results: list[dict], pairs: list[tuple[str, str]], steps: int) -> str:
    """The seed-paired differences A - B (scripts/stats.py) of every score and of the end entropy, in markdown:
    the mean difference with its 95% bootstrap interval, wins : losses over seeds, the sign test, and the seeds
    a decision would need at the observed effect and spread."""
    done = [r for r in results if r]
    if not done or not pairs:
        return ""
    window = min(ENTROPY_WINDOW, steps)
    metrics = [*scores(done), ("entropy_end", f"entropy, last {window} steps")]
    lines = ["| A − B | score | seeds | mean difference [95% interval] | interval | A > B : A < B | sign test p | "
             "seeds needed |", "|---" * 8 + "|"]
    def by_seed(method: str, key: str) -> dict:  # "warm-start": step 0 of the other method's own runs
        own = [r for r in done if r["method"] == (a if method == WARM_START else method)]
        key = f"{key}_start" if method == WARM_START else key
        return {r["seed"]: r[key] for r in own if key in r and not math.isnan(r[key])}

    for a, b in pairs:
        for key, name in metrics:
            p = stats.paired(by_seed(a, key), by_seed(b, key))
            if not p.n:
                continue
            digits = 3 if key == "entropy_end" else 2
            side = "—" if p.n < 2 else {"confirmed": "above 0", "refuted": "below 0"}.get(stats.verdict(p, +1), "contains 0")
            needed = "—" if math.isnan(p.seeds_needed) else "∞" if math.isinf(p.seeds_needed) else f"{p.seeds_needed:.0f}"
            lines.append(f"| {a} − {b} | {name} | {p.n} | {p.mean:+.{digits}f} [{p.low:+.{digits}f}, "
                         f"{p.high:+.{digits}f}] | {side} | {p.wins} : {p.losses} | {p.p_sign:.3f} | {needed} |")
    return "\n".join(lines) + "\n"


def banded(values_by_seed: list[tuple[list[float], list[float]]]) -> tuple[list[float], list[float], tuple]:
    """(steps, mean over seeds, (low, high) 95% bootstrap band) at the steps every seed logged."""
    common = sorted(set.intersection(*(set(xs) for xs, _ in values_by_seed)))
    at = [dict(zip(xs, ys)) for xs, ys in values_by_seed]
    rows = [stats.mean_interval([a[x] for a in at]) for x in common]
    return common, [r[0] for r in rows], ([r[1] for r in rows], [r[2] for r in rows])


def plot_methods(runs: list[Run], out: Path, steps: int, window: int = 4) -> Path:
    """Figure 2 with bands: for each method the mean over its finished seeds and the 95% bootstrap band, of the return,
    the entropy and the completion length (each seed smoothed over `window` steps first) and of every
    evaluated file's Mean@k."""
    methods = list(dict.fromkeys(r.method for r in runs))
    done = [r for r in runs if finished(r, steps)]  # a run in progress would cut every band short
    k = next((json.loads((r.dir / "config.json").read_text())["eval_k"] for r in done), 8)
    logs = {r.dir: read_metrics(r.dir / "metrics.jsonl") for r in done}
    files = list(dict.fromkeys(m.group(1) for rows in logs.values() for row in rows for key in row
                               if (m := re.fullmatch(rf"eval/(.+)/mean@{k}", key))))
    evals = [(f"{f} Mean@{k} (%)", f"eval/{f}/mean@{k}") for f in files] or [(f"Mean@{k} (%)", f"eval/mean@{k}")]
    panels = []
    for i, (title, key) in enumerate([*TRAIN_PANELS, *evals]):
        lines = []
        for j, m in enumerate(methods):
            per_seed = []
            for r in (r for r in done if r.method == m):
                k_ = "reward_mean_first_round" if key == "reward_mean" and any(
                    "reward_mean_first_round" in row for row in logs[r.dir]) else key
                xs, ys = series(logs[r.dir], k_)
                if xs:
                    per_seed.append((xs, ys if key.startswith("eval/") else moving_average(ys, window)))
            if per_seed:
                xs, ys, band = banded(per_seed)
                lines.append(Line(m, COLORS[j % len(COLORS)], xs, ys, markers=key.startswith("eval/"), band=band))
        panels.append(Panel(f"({'abcdefgh'[i]}) {title.split(') ')[-1]}", key, lines))
    return draw(panels, out, "step")


def plot_ablation(results: list[dict], out: Path) -> Path:
    """Figure 3: Mean@k and Pass@k at the end against delta for each evaluated file: the mean over seeds with
    its 95% bootstrap band, each seed faint, and the warm start."""
    done = [r for r in results if r]
    delta = {r["method"]: parse_method(r["method"])[1].get("delta", defaults("kl3")["delta"]) for r in done}
    panels = []
    for i, (key, name) in enumerate(scores(done)):
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
        mean = [stats.mean_interval(list(by_delta[d].values())) for d in ds]
        lines.append(Line("kl3, mean over seeds (95% band)", COLORS[0], ds, [m[0] for m in mean], markers=True,
                          band=([m[1] for m in mean], [m[2] for m in mean])))
        panels.append(Panel(f"({'abcdefgh'[i]}) {name} (%) against δ", key, lines))
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
    parser.add_argument("--compare", nargs="+", metavar="A/B", default=None,
                        help="seed-paired comparisons to print, as A/B with methods as written in --clip, or "
                        "A/warm-start for A's runs against their own step 0 (default: every method against the first)")
    parser.add_argument("--delta", type=float, help="delta of every method that has one (default: its own, 0.07)")
    parser.add_argument("--jobs", type=int, default=0, help="runs at a time (default: one per core, at most one per run)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (default: cores / jobs)")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"), help="sweep directory (default: runs/sweep)")
    parser.add_argument("--dry-run", action="store_true", help="print the train.py commands and stop")
    parser.add_argument("--report", action="store_true", help="train nothing: write the table, the comparisons and "
                        "the figures from the runs finished so far (a sweep in progress is left alone)")
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
    pairs = [tuple(c.split("/", 1)) for c in args.compare] if args.compare else [(m, methods[0]) for m in methods[1:]]
    unknown = [x for pair in pairs for x in pair if x not in [*methods, WARM_START]] + \
        [c for c in args.compare or [] if "/" not in c]
    if unknown:
        parser.error(f"--compare {unknown[0]}: write A/B with A and B among the methods ({' '.join(methods)})")
    ends = [] if "--eval-every" in flags or args.steps < 2 else ["--eval-every", str(args.steps - 1)]
    train_args = ["--task", args.task, *flags, *ends, *train_args]  # later flags win in train.py's argparse
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
    t0 = time.perf_counter()
    failed = [] if args.report else train_all(runs, args.steps, train_args, jobs, threads, out, saved, settings)
    results = [result(run, args.steps) for run in runs]
    (out / "results.json").write_text(json.dumps([r for r in results if r], indent=2))
    at = " and ".join(f"step {s}" for s in next((r["end_steps"] for r in results if r), [args.steps]))
    head = (f"{'δ ablation of kl3' if args.ablate_delta else 'Clipping methods'}: each score is the mean of the "
            f"evaluations at {at}, then mean ± std over {args.seeds} seed(s) (population std); cut = mean over "
            f"training steps of clip_frac_low + clip_frac_high.\nSettings: `{' '.join(train_args)}`\n\n")
    paired = comparisons(results, pairs, args.steps)
    report = head + table(results, methods, args.seeds, args.steps) + (
        f"\nSeed-paired differences (scripts/stats.py: 95% bootstrap interval of the mean difference, exact sign "
        f"test, seeds for 80% power at the observed effect and spread):\n\n{paired}" if paired else "")
    (out / "table.md").write_text(report)
    print("\n" + report)
    try:
        written = [plot_methods(runs, out / "curves.svg", args.steps)]
        kl3 = [r for r in results if r and parse_method(r["method"])[0] == "kl3"]
        if len({r["method"] for r in kl3}) > 1:  # kl3 at two or more deltas: Figure 3 (with --ablate-delta or not)
            written.append(plot_ablation(kl3, out / "ablation.svg"))
    except SystemExit as e:  # no matplotlib: the table is written, the figures are not
        print(e, file=sys.stderr)
        written = []
    print(f"wrote {', '.join(map(str, [out / 'table.md', *written]))}  ({(time.perf_counter() - t0) / 60:.1f} min)")
    for run in failed:
        log = out / "logs" / f"{run.dir.name}.log"
        tail = log.read_text(errors="replace").replace("\r", "\n").strip().splitlines()[-3:] if log.is_file() else []
        print(f"{run.dir.name} failed; {log}:\n  " + "\n  ".join(tail), file=sys.stderr)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
