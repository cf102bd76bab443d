"""Table 2 over seeds, from the evaluations training (and SFT) runs logged: nothing is sampled.

    python scripts/runs_table.py runs/kl3-s* runs/clip-s*    # per method over seeds: mean ± 95% interval

It reads each run directory's config.json and metrics.jsonl and prints one table per evaluation setting
(temperature, top-p, budget, k, files, model, prompt: runs evaluated otherwise get their own table, headed by
what differs), with the base model's row (step 0) once, then per method (clip, its hyper-parameters, any other
training flag that differs between the runs) its final and best evaluation over seeds: n, and the mean ± the
half-width of its 95% t-interval (scripts/stats.py). The columns are eval.py's: Mean@k and Pass@k per
evaluated file, then their average. A line under a table says when its runs did not all run one git commit
without changes (config.json's "provenance"), and which ran which.
"""
import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone without installing
import sft  # noqa: E402  (the commands' flags: a run from before a flag ran with its default)
from eval import grid, model_name  # noqa: E402  (eval.py's table layout and its name for a run)
from nanoatr.machinery.checkpoint import CheckpointError  # noqa: E402
from nanoatr.machinery.flags import ConfigError, Parser, TrainConfig, die, flag  # noqa: E402
from nanoatr.machinery.resume import (PATH_FIELDS, from_start, paths, real_path,  # noqa: E402
                                      settings_now)
from nanoatr.tokenizer import TokenizerError, read_json  # noqa: E402

import stats  # noqa: E402  (scripts/stats.py: the t-interval)
from plot import change_lines, read_metrics  # noqa: E402

# What a run's logged evaluations depend on (config.json of train.py and sft.py): runs that differ in one are
# in different tables, each with its own base-model row.
EVALUATION = ("model", "revision", "task", "eval_data", "eval_limit", "eval_k", "eval_temperature",
              "eval_top_p", "eval_top_k", "eval_max_new_tokens", "sampler", "prompt_template",
              "system_prompt", "thinking", "stop")
SHOWN = ("eval_k", "eval_temperature", "eval_top_p", "eval_max_new_tokens")  # under every table, with top-k
# What says nothing about what was trained (where and how fast it ran, how it was saved and logged): runs
# differing only in these and their seed are one method. Every other field (besides clip and its hparams,
# always in the label) that differs between the runs of a table is named in their labels.
BOOKKEEPING = ("name", "out_dir", "resume", "device", "threads", "save_every", "keep_checkpoints",
               "eval_every", "eval_batch_size", "compile", "grad_checkpoint", "merge", "base_name", "preset",
               "report_to", "wandb_project", "workdir")


class LoggedRun(NamedTuple):
    name: str                # the run directory's name
    config: dict             # its settings as it last ran: config.json's, each recorded change applied
    evals: dict[int, dict]   # step -> the evaluation logged at that step
    changes: list[str]       # config.json's "changes" (on resumes): 'at step S: --flag a -> b'
    provenance: list[dict]   # config.json's "provenance": what each start ran (distributed.provenance)


def evaluation(config: dict) -> dict:
    """The settings a run's evaluations were sampled with (EVALUATION, the completion budget as used)."""
    values = {key: config.get(key) for key in EVALUATION}
    values["eval_top_k"] = config.get("eval_top_k", 0)  # train.py and sft.py evaluate without top-k
    values["eval_max_new_tokens"] = config.get("eval_max_new_tokens") or config.get("max_new_tokens") or \
        config.get("max_len")  # 0 = the run's own budget: train.py's --max-new-tokens, sft.py's --max-len
    return values


def columns(names: list[str], k: int) -> list[str]:
    """The metrics keys of Table 2's columns: Mean@k and Pass@k per benchmark, then their average."""
    return [f"eval/{n}/{m}@{k}" for n in names for m in ("mean", "pass")] + \
        [f"eval/mean@{k}", f"eval/pass@{k}"]


def read_run(run_dir: str) -> LoggedRun:
    """A run's settings, evaluations and recorded changes; one line naming the run when it has none to
    show."""
    config_file = Path(run_dir, "config.json")
    config, rows = read_json(config_file), read_metrics(Path(run_dir, "metrics.jsonl"))
    if not config:
        die(f"{run_dir}: no config.json (is it a run directory?)")
    names, k = [Path(f).stem for f in config.get("eval_data") or []], config.get("eval_k")
    evals = {r["step"]: r for r in rows if f"eval/mean@{k}" in r and isinstance(r.get("step"), int)}
    if not names or not evals:
        die(f"{run_dir}: no evaluation logged in its metrics.jsonl (a run with --eval-data logs eval/... "
            "rows)")
    for step, row in evals.items():
        for key in columns(names, k):
            if isinstance(row.get(key), bool) or not isinstance(row.get(key), (int, float)):
                die(f"{run_dir}/metrics.jsonl: the evaluation of step {step} has no number {key}")
    changes = change_lines(config, config_file)
    settings = {**defaults(config), **settings_now(config, config_file)}
    return LoggedRun(model_name(run_dir), same_spelling(settings), evals, changes,
                     config.get("provenance", []))


def same_spelling(settings: dict) -> dict:
    """The run's files (--model, --data, --eval-data, --reward's FILE.py), where they exist, found from the
    directory it started in and named one way (from here when under here, else absolutely): runs started
    from two folders, or naming one file two ways (./data/x.jsonl, data/x.jsonl), are compared by their
    files, not by their spelling."""
    def found(path):
        file = Path(real_path(from_start(path, settings.get("workdir"))))
        return str(file.relative_to(Path.cwd())) if file.is_absolute() and file.is_relative_to(Path.cwd()) \
            else str(file)
    return settings | {k: paths(k, settings[k], found) for k in PATH_FIELDS if k in settings}


def defaults(config: dict) -> dict:
    """The default of every flag of the command that wrote `config` (train.py's runs have a clip method,
    sft.py's do not): a run from before a flag existed ran with its default, and is one method with the runs
    that give it."""
    fields = dataclasses.fields(TrainConfig if "clip" in config else sft.SFTConfig)
    return {f.name: f.default_factory() if callable(f.default_factory) else f.default for f in fields}


def shown(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def method_label(config: dict, named: list[str]) -> str:
    """'kl3 (delta=0.07)': the clip method (sft for an SFT run), its hyper-parameters and the `named`
    fields."""
    settings = {**(config.get("hparams") or {}), **{k: config.get(k) for k in named}}
    method = config.get("clip") or "sft"
    return f"{method} ({', '.join(f'{k}={shown(v)}' for k, v in settings.items())})" if settings else method


def final_and_best(run: LoggedRun, keys: list[str]) -> tuple[list[float], list[float]]:
    """The run's last evaluation, and the best of each column over its evaluations after step 0 (over all of
    them when step 0 is the only one)."""
    trained = [row for step, row in run.evals.items() if step > 0] or list(run.evals.values())
    final = [run.evals[max(run.evals)][key] for key in keys]
    return final, [max(row[key] for row in trained) for key in keys]


def over_seeds(per_seed: list[list[float]]) -> list[str]:
    """n, then 'mean ± half-width of its 95% t-interval' (stats.half_width) of each column over the seeds'
    values; one seed: its value."""
    cells = [str(len(per_seed))]
    for column in zip(*per_seed):
        mean = statistics.fmean(column)
        cells.append(f"{mean:.2f}" if len(column) < 2 else f"{mean:.2f} ± {stats.half_width(column):.2f}")
    return cells


def by_method(runs: list[LoggedRun]) -> dict[str, dict]:
    """{method label: {seed: run}}: runs differing only in their seed and BOOKKEEPING are one method; the
    label names the clip method, its hyper-parameters and every other training setting that differs between
    runs."""
    fields = dict.fromkeys(f for run in runs for f in run.config if f not in EVALUATION + BOOKKEEPING)
    named = [f for f in fields if f not in ("seed", "clip", "hparams") and
             len({json.dumps(run.config.get(f), sort_keys=True) for run in runs}) > 1]
    methods: dict[str, dict] = {}
    for run in runs:
        label, seed = method_label(run.config, named), run.config.get("seed")
        if seed in methods.setdefault(label, {}):
            die(f"{methods[label][seed].name} and {run.name} are both {label} at seed {seed}: "
                "each method's rows pool one run per seed")
        methods[label][seed] = run
    return methods


def base_model(runs: list[LoggedRun], keys: list[str]) -> list[list[float]]:
    """Each seed's step-0 evaluation (the model the runs start from): the mean of that seed's runs, which
    are equal where they ran alike. [] when no run logged one."""
    starts: dict = {}
    for run in runs:
        if 0 in run.evals:
            starts.setdefault(run.config.get("seed"), []).append([run.evals[0][key] for key in keys])
    return [[statistics.fmean(column) for column in zip(*values)] for values in starts.values()]


def seed_table(runs: list[LoggedRun]) -> str:
    """One table of runs evaluated alike: the base model's row, then each method's final and best rows over
    its seeds; under it the evaluation settings, and the runs that did not finish or were changed on
    resume."""
    settings = evaluation(runs[0].config)
    names, k = [Path(f).stem for f in settings["eval_data"]], settings["eval_k"]
    keys = columns(names, k)
    base = base_model(runs, keys)
    rows = [("Base model (step 0)", over_seeds(base))] if base else []
    for label, by_seed in by_method(runs).items():
        finals, bests = zip(*(final_and_best(run, keys) for run in by_seed.values()))
        rows += [(f"{label} final", over_seeds(list(finals))), (f"{label} best", over_seeds(list(bests)))]
    top_k = settings["eval_top_k"] or "off"  # no train.py or sft.py flag: named as eval.py's --top-k
    shown_flags = ", ".join(f"{flag(key)} {shown(settings[key])}" for key in SHOWN)
    notes = [f"evaluation: {shown_flags}, top-k {top_k}"]
    for run in runs:
        last, steps = max(run.evals), run.config.get("steps")
        if isinstance(steps, int) and last < steps:
            notes.append(f"{run.name}: last evaluation at step {last} of {steps} (not finished)")
        notes += [f"{run.name}: changed on resume {change}" for change in run.changes]
    notes += filter(None, [code_note({run.name: run.provenance for run in runs})])
    return grid("Method", names, k, rows, before=("n",)) + "\n" + "\n".join(notes)


def code_note(runs: dict[str, list]) -> str | None:
    """A line when runs (name: config.json's "provenance") did not all run one commit without changes, saying
    which ran which (a run whose first sitting is not recorded, from before provenance, ran unknown code)."""
    def code(sitting: dict) -> str:
        return f"{str(sitting.get('commit', 'unknown'))[:12]}{'+dirty' * (sitting.get('dirty') is True)}"
    runs = {name: [s for s in p if isinstance(s, dict)] if isinstance(p, list) else [] 
            for name, p in runs.items()}  # a config.json as found
    codes = {name: sorted({*map(code, p), *(["unknown"] if not p or p[0].get("step") != 0 else [])})
             for name, p in runs.items()}
    every = {c for cs in codes.values() for c in cs}
    if len(every) > 1 or any(c == "unknown" or c.endswith("+dirty") for c in every):
        listed = "; ".join(f"{name} {' '.join(c)}" for name, c in codes.items())
        return f"code: not one commit without changes: {listed} (+dirty: with changes not committed; " \
            "unknown: not recorded, or not a git checkout)"


def runs_table(run_dirs: list[str]) -> str:
    """Table 2 over seeds from training runs' logs, as the paper prints it: per method the mean over seeds and
    the half-width of its 95% t-interval, final (each run's last evaluation) and best (each run's best of each
    column after step 0), the base model's row once. Runs evaluated with other settings (EVALUATION) get
    their own table, headed by the settings that differ."""
    first: dict[Path, int] = {}  # each folder's first place in run_dirs: two globs may name one folder twice
    for i, run_dir in enumerate(run_dirs):
        j = first.setdefault(Path(run_dir).resolve(), i)
        if j != i:
            die(f"{run_dir} is given twice (as {run_dirs[j]} too): one run per folder")
    tables: dict[str, list[LoggedRun]] = {}
    for run in map(read_run, run_dirs):
        tables.setdefault(json.dumps(evaluation(run.config), sort_keys=True), []).append(run)
    settings = [evaluation(runs[0].config) for runs in tables.values()]
    differ = [key for key in EVALUATION if len({json.dumps(s[key]) for s in settings}) > 1]
    parts = []
    for i, (runs, s) in enumerate(zip(tables.values(), settings), 1):
        head = f"Table {i} of {len(tables)}: evaluated with " + ", ".join(f"{flag(key)} {shown(s[key])}"
                                                                            for key in differ) + "\n"
        parts.append((head if len(tables) > 1 else "") + seed_table(runs))
    return "\n\n".join(parts) + (
        "\n\nmean ± the half-width of its 95% t-interval over the n seeds (t at n-1 degrees of freedom; "
        "one seed: its value).\nfinal: each run's last evaluation; best: each run's best of each column "
        "after step 0; base model: each seed's step-0 evaluation")


def main(argv=None) -> None:
    parser = Parser(prog="python scripts/runs_table.py", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="training (train.py) or SFT (sft.py) run directories, each with the evaluations "
                        "it logged (--eval-data)")
    args = parser.parse_args(argv)
    try:
        print(runs_table(args.run_dirs))
    except (CheckpointError, TokenizerError, ConfigError) as e:
        die(str(e))


if __name__ == "__main__":
    main()
