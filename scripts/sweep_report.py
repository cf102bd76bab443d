"""The report of a sweep (scripts/sweep.py): reads its finished runs and writes, in its folder OUT,

- OUT/table.md (printed too): Table 3, each arm's final Mean@k / Pass@k on each evaluated file, mean ± std
  over seeds (population std), beside the warm start (step 0), the share of tokens whose gradient was cut,
  the training tokens' entropy and the evaluation policy's on each file; then the --effect definitions, the
  pre-registered family of --hypothesis and --reject (each with its 95% paired t-interval, its p and Holm's
  decision over the family) and the seed-paired comparisons (--compare, by default every arm against the
  first, then the effects); a line says when the runs did not all run one git commit without changes;
- OUT/results.json: each finished run's numbers (result; one it lacks, nan there, is null);
- OUT/curves.svg: Figure 2, each arm's mean over seeds with its 95% t-interval band, step by step, of the
  return, the entropy, the completion length and each evaluated file's Mean@k;
- OUT/ablation.svg, when kl3 ran at two or more deltas (--ablate-delta): Figure 3, Mean@k and Pass@k
  against delta.

Every interval, test and power figure comes from scripts/stats.py: the Student t-interval of a mean and of
a seed-paired difference or contrast, the paired t-test, the exact sign test, Holm's procedure, the effect
the seeds could detect and the seeds a decision would need. The figures are drawn by scripts/plot.py
(matplotlib, optional: without it the table and results.json are still written).

sweep.py plans and trains the runs and calls write_report for --report and after a sweep. This module
imports nothing from it: Run, the plan's record of one run (its arm, method, hyper-parameters as the run
used them, seed and folder), is defined here.
"""
import json
import math
import re
import statistics
import sys
import typing
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone without installing
from nanoatr.machinery import flags  # noqa: E402
from nanoatr.methods import defaults  # noqa: E402
from nanoatr.machinery.metrics_log import finite  # noqa: E402
from nanoatr.machinery.flags import TrainConfig  # noqa: E402
# scripts/plot.py
from plot import (COLORS, TRAIN_PANELS, Line, Panel, change_lines, draw, moving_average,  # noqa: E402
                  read_metrics, series)
from runs_table import code_note  # noqa: E402
import stats  # noqa: E402  (scripts/stats.py)
from contrasts import (Claim, Contrast, Hypothesis, Questions, difference, digits, effect_text,  # noqa: E402
                       measured)


# One run of the sweep: sweep.py's plan makes it, the report reads its folder (defined here, so that the
# report needs nothing from sweep.py).
class Run(NamedTuple):
    method: str    # the arm as given, the table's row name: "kl3", "clip:eps=0.329", "kl3:lr=2e-4"
    clip: str
    hparams: dict  # the method's hyper-parameters the arm sets (and the sweep's --delta, if it set none)
    seed: int
    dir: Path
    flags: tuple = ()  # (train.py field, value) pairs the arm sets besides its method's hyper-parameters


def finished(run: Run, steps: int) -> bool:
    """The run logged its final evaluation."""
    path = run.dir / "metrics.jsonl"
    return path.is_file() and any(r.get("step") == steps and any(k.startswith("eval/") for k in r)
                                  for r in read_metrics(path))


def run_config(run: Run) -> dict:
    """A finished run's config.json; one missing, unreadable or without eval_k is one error line naming it."""
    path = run.dir / "config.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        why = None if isinstance(saved, dict) and isinstance(saved.get("eval_k"), int) else "no eval_k"
    except OSError as e:
        why = (e.strerror or str(e)).lower()
    except (ValueError, RecursionError):
        why = "not JSON"
    if why:
        flags.die(f"{path}: {why}: {run.dir.name} logged its last evaluation, but without the settings it "
                   f"ran with it cannot be reported; remove {run.dir} to run it again")
    return saved


ENTROPY_WINDOW = 20  # the table's entropy: the mean over a run's last 20 steps (all of them in a shorter run)


def result(run: Run, steps: int) -> dict | None:
    """One finished run's numbers (None if unfinished). For the files' average ("mean@k", "pass@k") and for
    each evaluated file ("heldout/mean@k", ...): the score at the end, which is the mean of the evaluations
    logged at the last step and at the step before it (the sweep's settings evaluate both; one evaluation
    when only the last is logged), and at step 0 ("..._start", nan if not evaluated). Also the mean cut
    fractions (%) and the entropy (nats per completion token) over the last min(20, steps) steps."""
    if not finished(run, steps):
        return None
    saved = run_config(run)
    k, rows = saved["eval_k"], read_metrics(run.dir / "metrics.jsonl")
    evals = {r["step"]: r for r in rows if f"eval/mean@{k}" in r}  # a resumed step keeps its last row
    train = list({r["step"]: r for r in rows if "clip_frac_low" in r}.values())  # resumed steps: last row
    end = [s for s in (steps - 1, steps) if s in evals]
    splits = list(dict.fromkeys(m.group(1) for r in evals.values() for key in r
                                if (m := re.fullmatch(rf"eval/(.+)/mean@{k}", key))))

    def mean(key):
        return 100 * sum(r[key] for r in train) / max(len(train), 1)

    entropy = [r["entropy"] for r in train[-min(ENTROPY_WINDOW, steps):] if "entropy" in r]
    res = {"method": run.method, "seed": run.seed, "k": k, "dir": run.dir.name, "end_steps": end,
           "splits": splits, "cut_low": mean("clip_frac_low"), "cut_high": mean("clip_frac_high"),
           "entropy_end": statistics.fmean(entropy) if entropy else math.nan,
           "changes": change_lines(saved, run.dir / "config.json"),
           "provenance": saved.get("provenance") or []}
    for prefix in ["", *(f"{split}/" for split in splits)]:
        for metric in ("mean", "pass"):
            key = f"eval/{prefix}{metric}@{k}"
            at_end = [evals[s][key] for s in end if key in evals[s]]
            res[f"{prefix}{metric}@k"] = statistics.fmean(at_end) if at_end else math.nan
            res[f"{prefix}{metric}@k_start"] = evals[0][key] if key in evals.get(0, {}) else math.nan
        if prefix:  # the evaluation policy's entropy on that file (T = 1), logged since the clean splits
            at_end = [evals[s][f"eval/{prefix}entropy"] for s in end if f"eval/{prefix}entropy" in evals[s]]
            res[f"{prefix}entropy"] = statistics.fmean(at_end) if at_end else math.nan
    return res


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std (ddof 0, as the paper's Table 3: its 3-run stds are consistent with it)."""
    m = sum(values) / len(values)
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def pm(values: list[float], digits: int = 2) -> str:
    """'mean ± std' over seeds; one value alone has no spread to show."""
    m, s = mean_std(values)
    return f"{m:.{digits}f}" if len(values) == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"


def hyperparameters(arm: Run) -> str:
    """'eps=0.2', 'delta=0.05, lr=0.0002': the method's hyper-parameters as the arm's runs used them (its
    defaults, then the arm's and the sweep's --delta), then the arm's own train.py flags."""
    hp = {**defaults(arm.clip), **arm.hparams}
    words = [*(f"{k}={v:g}" for k, v in hp.items()), *(f"{k}={v}" for k, v in arm.flags)]
    return ", ".join(words) or "none"


def settings_text(train_args: list[str]) -> str:
    """The sweep's train.py flags as the runs took them: a flag given twice (the task's setting, then the
    user's after --) is shown once, as its last value, which is the one train.py's argparse keeps; a list
    flag given twice keeps both, as train.py does."""
    groups = []  # (flag, [flag and its values])
    for word in train_args:
        if word.startswith("--"):
            groups.append((word.split("=")[0], [word]))
        elif groups:
            groups[-1][1].append(word)
    hints = typing.get_type_hints(TrainConfig)
    lists = {flags.flag(name) for name, tp in hints.items() if typing.get_origin(tp) is list}
    key = lambda name: "--" + name[len("--no-"):] if name.startswith("--no-") else name  # noqa: E731
    last = {key(name): i for i, (name, _) in enumerate(groups) if name not in lists}
    kept = [words for i, (name, words) in enumerate(groups) if name in lists or last[key(name)] == i]
    return " ".join(word for words in kept for word in words)


def scores(done: list[dict]) -> list[tuple[str, str]]:
    """(result key, column name) of the scores to report: Mean@k and Pass@k of each evaluated file, or of
    their average when the runs logged no file's own."""
    k, splits = done[0]["k"], done[0]["splits"]
    return [(f"{p}{m}@k", f"{p.replace('/', ' ')}{m.capitalize()}@{k}")
            for p in [f"{s}/" for s in splits] or [""] for m in ("mean", "pass")]


def entropies(done: list[dict]) -> list[tuple[str, str]]:
    """(result key, column name) of the evaluation policy's entropy on each evaluated file (T = 1, at the
    end), for the files the runs logged it on (runs since the clean splits)."""
    return [(f"{s}/entropy", f"{s} entropy (T = 1)") for s in done[0]["splits"]
            if any(not math.isnan(r.get(f"{s}/entropy", math.nan)) for r in done)]


def table(results: list[dict], arms: dict[str, Run], seeds: int, steps: int) -> str:
    """Table 3 in markdown: one row per method (its hyper-parameters, mean ± std over seeds of each score),
    plus the warm-start policy (step 0) for reference, mean ± std over the seeds of the finished runs.
    `arms`: each arm as written (a row, in order) -> one of its runs."""
    done = [r for r in results if r]
    cols = scores(done) if done else [("mean@k", "Mean@k"), ("pass@k", "Pass@k")]
    evaluated = entropies(done) if done else []
    window = min(ENTROPY_WINDOW, steps)
    lines = [f"| method | hyper-parameters | runs | {' | '.join(f'{name} (%)' for _, name in cols)} | "
             f"cut tokens (%) low + high | entropy, last {window} steps |" +
             "".join(f" {name} |" for _, name in evaluated), "|---" * (len(cols) + len(evaluated) + 5) + "|"]
    start = {}  # seed -> its runs' step-0 evaluations: one warm start per seed, however many methods ran it
    for r in done:
        if not math.isnan(r["mean@k_start"]):
            start.setdefault(r["seed"], []).append(r)
    if start:
        # each seed's step-0 score (its runs' mean: equal where they ran on one kind of machine)
        def at_start(key):
            return [statistics.fmean(r[f"{key}_start"] for r in rs) for rs in start.values()]
        seeds_run = f"{len(start)} seed{'s' * (len(start) > 1)}"
        lines.append(f"| warm start (step 0), one value per seed | | {seeds_run} | " +
                     " | ".join(pm(at_start(key)) for key, _ in cols) + " | | |" + " |" * len(evaluated))
    for m, arm in arms.items():
        rs = [r for r in done if r["method"] == m]
        if not rs:
            lines.append(f"| {m} | {hyperparameters(arm)} | 0/{seeds} |" +
                         " |" * (len(cols) + len(evaluated) + 2))
            continue
        low, high = mean_std([r["cut_low"] for r in rs])[0], mean_std([r["cut_high"] for r in rs])[0]
        entropy = "" if any(math.isnan(r["entropy_end"]) for r in rs) else \
            pm([r["entropy_end"] for r in rs], 3)
        lines.append(f"| {m} | {hyperparameters(arm)} | "
                     f"{len(rs)}{'' if len(rs) == seeds else f'/{seeds}'} | " +
                     " | ".join(pm([r[key] for r in rs]) for key, _ in cols) +
                     f" | {low + high:.2f} ({low:.2f} + {high:.2f}) | {entropy} |" +
                     "".join(f" {pm([r.get(key, math.nan) for r in rs], 3)} |" for key, _ in evaluated))
    code = code_note({r["dir"]: r.get("provenance", []) for r in done})
    return "\n".join(lines) + "\n" + changed_on_resume(done) + (f"\n{code}\n" if code else "")


def changed_on_resume(done: list[dict]) -> str:
    """Under the table, the runs whose config.json records changes made on a resume (train.py --resume with
    --steps, --eval-every, ...: machinery/flags.py's resume=), each change with its step; "" when none."""
    lines = [f"- {r['dir']}: {change}" for r in done for change in r.get("changes", [])]
    return "\nChanged on resume (config.json's \"changes\"):\n" + "\n".join(lines) + "\n" if lines else ""


def score_names(done: list[dict], steps: int) -> dict:
    """result key -> column name of every score of the runs, of the end entropy and of the evaluation
    policy's."""
    return {**dict(scores(done)), "entropy_end": f"entropy, last {min(ENTROPY_WINDOW, steps)} steps",
            **dict(entropies(done))}


def seeds_text(needed: float) -> str:
    return "—" if math.isnan(needed) else f"> {stats.MAX_SEEDS}" if math.isinf(needed) else f"{needed:.0f}"


def p_text(p: float) -> str:
    return "—" if math.isnan(p) else f"{p:.2g}"


def comparisons(results: list[dict], contrasts: list[Contrast], steps: int) -> str:
    """The seed-paired differences A - B and effects (scripts/stats.py) of every score and of the end
    entropy, in markdown: the mean with its 95% paired t-interval, seeds above : below 0, the sign test, the
    minimal detectable effect (80% power, t-based) and the seeds a decision would need at the observed effect
    and spread."""
    done = [r for r in results if r]
    if not done or not contrasts:
        return ""
    lines = ["| A − B or effect | score | seeds | mean difference [95% t-interval] | interval "
             "| seeds > 0 : < 0 | sign test p | detectable (80% power) | seeds needed |", "|---" * 9 + "|"]
    for c in contrasts:
        for key, name in score_names(done, steps).items():
            p = measured(done, c, key)
            if not p.n:
                continue
            side = "—" if p.n < 2 else \
                {"confirmed": "above 0", "refuted": "below 0"}.get(stats.verdict(p, +1), "contains 0")
            lines.append(f"| {c.name} | {name} | {p.n} | {difference(p, key)} | {side} "
                         f"| {p.wins} : {p.losses} "
                         f"| {p.p_sign:.3f} | {stats.detectable(p.n, p.sd):.{digits(key)}f} | "
                         f"{seeds_text(stats.seeds_needed(p))} |")
    return "\n".join(lines) + "\n"


def verdicts(results: list[dict], hypotheses: list[Hypothesis], claims: list[Claim], steps: int) -> str:
    """The pre-registered family in markdown. A row per hypothesis: its verdict by its own 95% paired
    t-interval, its paired t-test's p on the predicted side (two-sided for 'differs') and the family's
    decision by Holm's procedure over every hypothesis and --reject claim (scripts/stats.py), and, when its
    interval leaves it undecided, the effect the seeds could have detected and the seeds a decision would
    need. Then a line per --reject claim: its one-sided paired t-test against the stated effect and the
    family's decision on it."""
    done = [r for r in results if r]
    if not done or not (hypotheses or claims):
        return ""
    names = score_names(done, steps)
    tested = [measured(done, h.contrast, h.score) for h in hypotheses]
    claimed = [measured(done, c.contrast, c.score) for c in claims]
    rejections = [stats.reject(p, c.effect) for c, p in zip(claims, claimed)]
    decisions = stats.family(  # 'differs' (predicted 0) has no opposite side that could refute it
        [(stats.p_value(p, h.predicted), stats.p_value(p, -h.predicted) if h.predicted else math.nan)
         for h, p in zip(hypotheses, tested)] + [(r.p, r.p_beyond) for r in rejections])
    holm = f"Holm, family of {len(decisions)}"
    lines = [f"| A − B or effect | score | predicted | seeds | mean difference [95% t-interval] "
             f"| seeds > 0 : < 0 "
             f"| sign test p | interval says | t-test p, predicted side | {holm} | detectable (80% power) "
             "| seeds needed |", "|---" * 12 + "|"]
    for h, p, decision in zip(hypotheses, tested, decisions):
        side = {1: "> 0", -1: "< 0", 0: "≠ 0"}[h.predicted]
        head = f"| {h.contrast.name} | {names.get(h.score, h.score)} | {side} | {p.n} |"
        if not p.n:
            why = "no seed where all its methods finished" if h.score in names else \
                "not a score of these runs"
            lines.append(f"{head} {why} | | | | — | **{decision}** | | |")
            continue
        verdict = stats.verdict(p, h.predicted)
        power = f"{stats.detectable(p.n, p.sd):.{digits(h.score)}f} | {seeds_text(stats.seeds_needed(p))}" \
            if verdict == "undecided" else "— | —"
        lines.append(f"{head} {difference(p, h.score)} | {p.wins} : {p.losses} | {p.p_sign:.3f} | "
                     f"{verdict} | "
                     f"{p_text(stats.p_value(p, h.predicted))} | **{decision}** | {power} |")
    text = "\n".join(lines) + "\n" if hypotheses else ""
    for c, n, r, decision in zip(claims, (p.n for p in claimed), rejections, decisions[len(hypotheses):]):
        what = f"a {'gain' if c.effect > 0 else 'loss'} of {abs(c.effect):g} or more"
        test = f"one-sided paired t-test against {c.effect:+g}: t = {r.t:.2f}, df {n - 1}, p = {r.p:.2g}" \
            if n > 1 else f"{n} seed(s): no test" if c.score in names else "not a score of these runs"
        text += f"\n- {c.contrast.name}, {names.get(c.score, c.score)}: {what} is " \
                f"{'rejected' if r.rejected else 'not rejected'} ({test}); {holm}: **{decision}**."
    return text + ("\n" if claims else "")


def banded(values_by_seed: list[tuple[list[float], list[float]]]) -> tuple[list[float], list[float], tuple]:
    """(steps, mean over seeds, (low, high) 95% t-interval band or None for one seed) at the steps every seed
    logged."""
    common = sorted(set.intersection(*(set(xs) for xs, _ in values_by_seed)))
    at = [dict(zip(xs, ys)) for xs, ys in values_by_seed]
    rows = [stats.mean_interval([a[x] for a in at]) for x in common]
    band = ([r[1] for r in rows], [r[2] for r in rows]) if len(values_by_seed) > 1 else None
    return common, [r[0] for r in rows], band


def plot_methods(runs: list[Run], out: Path, steps: int, window: int = 4) -> Path:
    """Figure 2 with bands: for each method the mean over its finished seeds and the 95% t-interval band, of
    the return, the entropy and the completion length (each seed smoothed over `window` steps first) and of
    every evaluated file's Mean@k."""
    methods = list(dict.fromkeys(r.method for r in runs))
    done = [r for r in runs if finished(r, steps)]  # a run in progress would cut every band short
    k = next((run_config(r)["eval_k"] for r in done), 8)
    logs = {r.dir: read_metrics(r.dir / "metrics.jsonl") for r in done}
    files = list(dict.fromkeys(m.group(1) for rows in logs.values() for row in rows for key in row
                               if (m := re.fullmatch(rf"eval/(.+)/mean@{k}", key))))
    evals = [(f"{f} Mean@{k} (%)", f"eval/{f}/mean@{k}") for f in files] or \
        [(f"Mean@{k} (%)", f"eval/mean@{k}")]
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
                lines.append(Line(m, COLORS[j % len(COLORS)], xs, ys, markers=key.startswith("eval/"),
                                  band=band))
        panels.append(Panel(f"({'abcdefgh'[i]}) {title.split(') ')[-1]}", key, lines))
    return draw(panels, out, "step")


def plot_ablation(results: list[dict], out: Path, arms: dict[str, Run]) -> Path:
    """Figure 3: Mean@k and Pass@k at the end against delta for each evaluated file: the mean over seeds with
    its 95% t-interval band, each seed faint, and the warm start. `arms` as table takes them."""
    done = [r for r in results if r]
    delta = {r["method"]: arms[r["method"]].hparams.get("delta", defaults("kl3")["delta"]) for r in done}
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
        lines.append(Line("kl3, mean over seeds (95% band)", COLORS[0], ds, [m[0] for m in mean],
                          markers=True, band=([m[1] for m in mean], [m[2] for m in mean])))
        panels.append(Panel(f"({'abcdefgh'[i]}) {name} (%) against δ", key, lines))
    return draw(panels, out, "δ")


def write_report(runs: list[Run], out: Path, steps: int, seeds: int, train_args: list[str],
                 questions: Questions, ablation: bool) -> list[Path]:
    """Read the runs finished so far (the others are left out) and write OUT/results.json, OUT/table.md
    (printed too) and the figures (none without matplotlib: the reason goes to stderr); returns table.md's
    path and the figures'. `ablation`: the sweep is --ablate-delta's."""
    arms: dict[str, Run] = {}
    for run in runs:  # each arm (a row, in order) -> its first run
        arms.setdefault(run.method, run)
    results = [result(run, steps) for run in runs]
    (out / "results.json").write_text(json.dumps(finite([r for r in results if r]), indent=2))  # nan: null
    at = " and ".join(f"step {s}" for s in next((r["end_steps"] for r in results if r), [steps]))
    head = (f"{'δ ablation of kl3' if ablation else 'Clipping methods'}: each score is the mean of the "
            f"evaluations at {at}, then mean ± std over {seeds} seed(s) (population std); cut = mean over "
            f"training steps of clip_frac_low + clip_frac_high.\nSettings: `{settings_text(train_args)}`\n\n")
    effects = questions.effects
    decided = verdicts(results, questions.hypotheses, questions.claims, steps)
    compared = comparisons(results, questions.contrasts, steps)
    defined = "".join(f"\n- {effect_text(c)}" for c in effects.values())
    report = head + table(results, arms, seeds, steps) + (
        "\nEffects: each seed's weighted sum of its arms' scores, over the seeds where every arm finished; "
        f"compared as a difference A − B is:\n{defined}\n" if effects else "") + (
        "\nPre-registered hypotheses (scripts/stats.py): each one's 95% paired t-interval of the mean "
        "difference (df = seeds - 1) says confirmed when it lies wholly on the predicted side of 0, refuted "
        "when wholly on the other, undecided otherwise; the paired t-test's p is one-sided on the predicted "
        "side (two-sided for ≠ 0); the family, every hypothesis and --reject claim, is decided by Holm's "
        f"procedure at the {stats.FAMILY_ALPHA:g} level: confirmed when it rejects the p of the predicted "
        "side, refuted when it rejects the p of the other side (1 − p; none for ≠ 0), undecided "
        "otherwise (a --reject claim is confirmed when the effect is ruled out). For one the interval "
        "leaves undecided, the difference a paired t-test at the 5% level would detect with 80% power at "
        "this spread (t-based approximation) and the seeds a decision would need (t-based, and at least "
        f"{stats.MIN_SIGN_SEEDS}: fewer cannot make the sign test significant):"
        f"\n\n{decided}" if decided else "") + (
        "\nSeed-paired differences"
        f"{', exploratory: no correction for multiple comparisons' if decided else ''} "
        "(scripts/stats.py: 95% paired t-interval of the mean difference, exact sign test, the difference "
        "detectable with 80% power at this spread and the seeds needed for the observed one, both "
        f"t-based):\n\n{compared}" if compared else "")
    (out / "table.md").write_text(report)
    print("\n" + report)
    try:
        written = [plot_methods(runs, out / "curves.svg", steps)]
        # kl3 arms without a train.py flag of their own
        kl3 = [r for r in results if r and arms[r["method"]].clip == "kl3" and not arms[r["method"]].flags]
        if len({r["method"] for r in kl3}) > 1:  # kl3 at two or more deltas: Figure 3
            written.append(plot_ablation(kl3, out / "ablation.svg", arms))
    except SystemExit as e:  # no matplotlib: the table is written, the figures are not
        print(e, file=sys.stderr)
        written = []
    return [out / "table.md", *written]
