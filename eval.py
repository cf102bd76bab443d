"""Mean@k and Pass@k of a model on benchmark files, as in the paper's Table 2.

    python eval.py              # the embedded default: tiny-qwen3 on held-out arithmetic
    python eval.py --model runs/kl3-.../checkpoint --data amc23.jsonl aime24.jsonl aime25.jsonl \\
        --k 8 --temperature 0.3 --top-p 0.95 --max-new-tokens 32768 --dtype bfloat16   # the paper's setting
    python eval.py --model Qwen3-1.7B/ --adapter runs/<lora run>/checkpoint ...       # base + LoRA adapter

A LoRA run's checkpoint/ holds only the adapter; as --model it brings its base model along (named in
its adapter_config.json).

Temperature, top-k and top-p default to the model's generation_config.json (the published Qwen3
instruct checkpoints: 0.6 / 20 / 0.95), else 1.0 / 0 / 1.0; a line on stderr says which were used.
For the paper's numbers give them explicitly, as above.

A completion is correct when the reward --correct-reward names is > 0 (default: the --task's built-in, the
verifier for math, graded on --answer-field's gold beside any --reward of yours; total: the weighted total of
the --reward functions): a reward function of yours evaluates as it trains.

Every problem gets n >= k samples. Mean@k is the mean accuracy over all n samples; Pass@k is the
unbiased estimate from n samples of the chance that one of k is correct (nanoatr/evaluate.py). --out
starts with a line {"settings": ...} (the model, the sampling and prompt settings as used); every
completion is appended to it with its verdict as soon as its batch is graded, so an interrupted
evaluation keeps its work and `--skip-done --out FILE` samples only what is missing. --skip-done with
other settings is refused (one table never mixes two evaluations).

Table 2 over seeds, from the evaluations training (and SFT) runs logged, samples nothing: it is
`python scripts/runs_table.py RUN_DIR...`, which prints its tables with this one's layout (grid).
"""
import nanoatr

nanoatr.quiet_ctrl_c()  # before the imports below (seconds): Ctrl-C is one line, not a traceback
from dataclasses import dataclass

from nanoatr.machinery.flags import (DATA, OUTPUT, SAMPLING, TASK_NAMES, ConfigError, DataFlags, DeviceFlags,
                                     ModelFlags, PromptFlags, RewardFlags, SamplingFlags, arg, check_flags,
                                     die, flag, override, read, resolve_sampling)


@dataclass
class EvalConfig(ModelFlags, DataFlags, PromptFlags, RewardFlags, SamplingFlags, DeviceFlags):
    """eval.py's flags: its own below, then the shared groups'."""
    task: str = arg("math", "the task: its reward, and the defaults of --model, --data and --max-new-tokens "
                    "(nanoatr/data.py TASKS)", DATA, choices=sorted(TASK_NAMES))
    data: list[str] = arg(["data/arith/heldout.jsonl"], "benchmark files (.jsonl, .json or .parquet; rows as "
                          "train.py's --data); each is one column of the table, named by its file stem", DATA)
    limit: int = arg(0, "use only the first N problems of each file (0 = all)", DATA, ">=0")
    k: int = arg(8, "k of Mean@k and Pass@k", SAMPLING, ">=1")
    n: int = arg(0, "samples per problem, n >= k (0 = k); more samples give a lower-variance Pass@k",
                 SAMPLING, ">=0")
    max_new_tokens: int = arg(48, "completion budget in tokens (48 fits the embedded default; real "
                              "math models need thousands)", SAMPLING, ">=1")
    stop: list[str] = arg([], "stop strings besides EOS: a completion is cut after the first one (base "
                          "models; special tokens such as <|im_end|> work too)", SAMPLING)
    batch_size: int = arg(64, "completions sampled together", SAMPLING, ">=1")
    out: str | None = arg(None, "jsonl file receiving every completion and its verdict "
                          "(default: runs/eval/<model name>-<time>.jsonl)", OUTPUT)
    skip_done: bool = arg(False, "continue --out: sample only the (benchmark, problem, sample) triples it "
                          "does not hold yet", OUTPUT)
    temperature: float | None = override(SamplingFlags, "temperature", help="sampling temperature (0 = "
                                         "greedy); the paper evaluates at 0.3. Default: the model's "
                                         "generation_config.json, else 1.0")
    top_p: float | None = override(SamplingFlags, "top_p", help="nucleus sampling; the paper evaluates at "
                                   "0.95. Default: the model's generation_config.json, else 1.0")
    reward: list[str] = override(RewardFlags, "reward", help="reward functions, FILE.py:FUNCTION or "
                                 "MODULE:FUNCTION, of TRL's shape (nanoatr/rewards.py); a completion is "
                                 "correct as --correct-reward says. They run in this process, "
                                 "unsandboxed, on untrusted model output. Default: the --task's built-in "
                                 "(the verifier, for math)")



# Flags that moved: the old spelling is told the new one.
MOVED = {"--runs": "eval.py --runs (Table 2 over seeds) is now python scripts/runs_table.py RUN_DIR...",
              "--resume": "eval.py's --resume is now --skip-done: it continues --out FILE, sampling only "
                          "what it lacks (--resume is a run folder, in train.py and sft.py)"}


def read_flags(argv=None):
    return read(EvalConfig, argv, __doc__, moved=MOVED)


if __name__ == "__main__":  # --help and a bad flag answer now, before torch loads; main() reads them again
    read_flags()

import functools
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from nanoatr import lora
from nanoatr.machinery import distributed
from nanoatr.machinery.decoding import decode_plan
from nanoatr.machinery.metrics_log import finite
from nanoatr.data import DataError, load_problems, task_defaults
from nanoatr.evaluate import fits, sample_and_grade, summarize, verdicts_by_problem
from nanoatr.model import ModelError
from nanoatr.rewards import RewardError
from nanoatr.machinery.reward_loader import load_rewards
from nanoatr.machinery.resume import paths, real_path
from nanoatr.tokenizer import (TokenizerError, eos_token_ids, generation_defaults, ignored_prompt_flags,
                               load_tokenizer, read_json)


def check(cfg: EvalConfig) -> str | None:
    """The first thing wrong with the flags, as one line, or None."""
    try:
        check_flags(cfg)
    except ConfigError as e:
        return str(e)
    n = cfg.n or cfg.k
    if n < cfg.k:
        return f"--n {n} is smaller than --k {cfg.k}: Pass@k needs at least k samples per problem"
    if cfg.skip_done and not cfg.out:
        return "--skip-done needs --out FILE (the evaluation to continue)"
    if cfg.out and Path(cfg.out).exists() and not cfg.skip_done:
        return f"{cfg.out} already exists: pass --skip-done to continue it, or another --out"
    return None


def check_writable(out: Path) -> str | None:
    """Whether completions can be appended to `out` (its folder is created), as one line, or None:
    checked before the model loads, not after minutes of it."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            with open(out, "a", encoding="utf-8"):
                pass
        else:
            tempfile.TemporaryFile(dir=out.parent).close()
    except OSError as e:
        return f"cannot write --out {out} ({(e.strerror or str(e)).lower()})"
    return None


CHECKPOINT_NAMES = ("checkpoint",)  # and checkpoint-stepNNNNNN (nanoatr.machinery.checkpoint.KEPT)


def model_name(model_dir: str) -> str:
    """The directory's name; a run's checkpoint/ (or an older checkpoint-stepNNNNNN/) is named after its
    run."""
    path = Path(model_dir).resolve()
    kept = path.name.startswith("checkpoint-step") and path.name[len("checkpoint-step"):].isdigit()
    return path.parent.name if path.name in CHECKPOINT_NAMES or kept else path.name


def default_out(model_dir: str) -> Path:
    # Not inside the model directory: a run's checkpoint/ is replaced wholesale at every save.
    return Path("runs/eval") / f"{model_name(model_dir)}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"


ROW_FIELDS = {"benchmark", "problem_id", "sample", "correct", "gold", "length", "truncated"}
# What the samples depend on: a file resumed with other values would mix two evaluations in one table.
# (--k, --n, --limit, --data and --batch-size may change: rows are selected by problem and sample, and
# gold answers are checked per row.)
SETTINGS = ("model", "adapter", "checkpoint_step", "temperature", "top_p", "top_k", "max_new_tokens", "seed",
            "sampler", "prompt_template", "system_prompt", "thinking", "stop", "dtype", "task", "reward",
            "reward_weights", "correct_reward")


def settings(cfg: EvalConfig, dirs) -> dict:
    """The output file's first line: the model (absolute paths, a run checkpoint's step; a --reward's
    FILE.py too) and the sampling settings as used (generation_config.json's values filled in)."""
    step = read_json(Path(dirs.adapter or dirs.base, "manifest.json")).get("step")
    return {"model": str(dirs.base.resolve()),
            "adapter": str(dirs.adapter.resolve()) if dirs.adapter else None,
            "checkpoint_step": step, **{k: getattr(cfg, k) for k in SETTINGS[3:]},
            "reward": paths("reward", cfg.reward, real_path)}


def differences(saved: dict, now: dict) -> list[str]:
    """The flags whose values differ between a file's settings and this run's, as 'FLAG A (now B)'; a
    --reward FILE.py naming the same file is no difference (./r.py:f, r.py:f, /abs/r.py:f)."""
    names = {"checkpoint_step": "--model (its checkpoint's step)"}
    saved = {"task": "math", "reward": [], "reward_weights": [], "correct_reward": "", **saved}  # older files
    saved["reward"] = paths("reward", saved["reward"], real_path)  # a file's from before it was absolute
    return [f"{names.get(k, flag(k))} {saved.get(k)!r} (now {now[k]!r})"
            for k in SETTINGS if saved.get(k) != now[k]]


def read_done(path: Path) -> tuple[dict | None, list[dict]]:
    """(the settings line, rows) already in an output file. A torn last line (killed mid-write) is cut off
    the file."""
    if not path.exists():
        return None, []
    rows, saved, good_bytes = [], None, 0
    with open(path, "rb") as f:
        lines = f.readlines()
    for lineno, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # not JSON or UTF-8, too many digits, too deep
            row = None
        if lineno == 1 and isinstance(row, dict) and isinstance(row.get("settings"), dict):
            saved = row["settings"]
        elif not (isinstance(row, dict) and ROW_FIELDS <= row.keys()):
            if lineno == len(lines) and not line.endswith(b"\n"):
                with open(path, "r+b") as f:
                    f.truncate(good_bytes)
                break
            die(f"{path}:{lineno}: not an eval.py row (expected JSON with {', '.join(sorted(ROW_FIELDS))})")
        else:
            rows.append(row)
        good_bytes += len(line)
    return saved, rows


def benchmark_rows(done: list[dict], name: str, problems, n: int) -> list[dict]:
    """The rows of one benchmark that fit the current problems and n; refuses rows of other data."""
    rows = [r for r in done if r["benchmark"] == name and r["problem_id"] < len(problems) and r["sample"] < n]
    for r in rows:
        if r.get("gold") != problems[r["problem_id"]].answer:
            die(f"--skip-done: row {r['problem_id']}/{r['sample']} of {name} has gold {r.get('gold')!r} but "
                f"the file's problem {r['problem_id']} has {problems[r['problem_id']].answer!r}: a "
                "different data file?")
    return rows


def table(model: str, results: dict[str, dict], k: int) -> str:
    """The paper's Table 2 layout: per benchmark Mean@k (%) and Pass@k (%), then their average."""
    avg = {key: sum(r[key] for r in results.values()) / len(results) for key in (f"mean@{k}", f"pass@{k}")}
    cells = [f"{c[f'{m}@{k}']:.2f}" for c in list(results.values()) + [avg] for m in ("mean", "pass")]
    return grid("Model", list(results), k, [(model, cells)])


def grid(corner: str, names: list[str], k: int, rows: list[tuple[str, list[str]]], before: tuple = ()) -> str:
    """Columns of (Mean@k, Pass@k) per benchmark and their Average, one line per (label, cells) row.
    before: the names of columns ahead of the benchmarks (headed on the second line); each row's cells start
    with their values."""
    sub = f"Mean@{k} (%)", f"Pass@{k} (%)"
    w = max([len(sub[0]), len(sub[1])] + [len(c) for _, cells in rows for c in cells[len(before):]]) + 2
    label = max([len(corner)] + [len(name) for name, _ in rows]) + 2
    lead = [max([len(b)] + [len(cells[i]) for _, cells in rows]) + 2 for i, b in enumerate(before)]
    lines = [corner.ljust(label + sum(lead)) +
             "".join(n[:2 * w - 2].ljust(2 * w) for n in names + ["Average"]),
             " " * label + "".join(b.rjust(v) for b, v in zip(before, lead)) +
             "".join(f"{sub[0]:>{w}}{sub[1]:>{w}}" for _ in names + ["Average"])]
    widths = lead + [w] * (2 * len(names) + 2)
    lines += [name.ljust(label) + "".join(f"{c:>{v}}" for c, v in zip(cells, widths)) for name, cells in rows]
    return "\n".join(line.rstrip() for line in lines)


def append_samples(out: Path, now: dict, benchmarks: dict, results: dict, n: int, sample, precision) -> int:
    """Sample and grade what `out` does not hold yet, n samples per problem of each benchmark: each row is
    appended to the file (flushed) and to results[benchmark]. `sample(problems, skip=...)` yields the graded
    rows; a Ctrl-C keeps what was sampled. Returns the number of new rows."""
    new = 0
    with open(out, "a", encoding="utf-8") as f:
        if f.tell() == 0:  # a new file (or an empty one): the settings first
            f.write(json.dumps({"settings": now}, ensure_ascii=False) + "\n")
            f.flush()
        nanoatr.ctrl_c_raises()  # from here a Ctrl-C keeps what was sampled (below)
        try:
            for name, problems in benchmarks.items():
                skip = {(r["problem_id"], r["sample"]) for r in results[name]}
                if len(skip) == len(problems) * n:
                    continue
                print(f"{name}: {len(problems)} problems x {n} samples ({len(skip)} already done)",
                      file=sys.stderr, flush=True)
                rows = sample(problems, skip=skip)
                with precision():  # sampling happens as the rows are drawn, so inside the context
                    for row in rows:
                        row = {"benchmark": name, **row}
                        f.write(json.dumps(finite(row), ensure_ascii=False) + "\n")  # an inf total: null
                        f.flush()
                        results[name].append(row)
                        new += 1
        except KeyboardInterrupt:
            die(f"interrupted; {new} new completions kept in {out} (continue with --skip-done --out {out})",
                130)
        except RewardError as e:
            die(f"{e}; {new} new completions kept in {out} (continue with --skip-done --out {out} once the "
                "reward is fixed)", 1)
    return new


def print_summary(cfg: EvalConfig, out: Path, results: dict, new: int) -> dict:
    """The table of Mean@k / Pass@k per benchmark, and a line on the completions; returns the summary
    (evaluate.summarize per benchmark: with "correct", each problem's correct samples of n)."""
    try:
        summary = {name: summarize(verdicts_by_problem(rows), [cfg.k]) for name, rows in results.items()}
    except ValueError as e:  # a resumed file with repeated rows
        die(f"{out}: {e}")
    print(table(model_name(cfg.adapter or cfg.model), summary, cfg.k))
    rows = [r for rs in results.values() for r in rs]
    print(f"\n{len(rows)} completions ({new} new) in {out}; mean length "
          f"{sum(r['length'] for r in rows) / len(rows):.1f} tokens, "
          f"{100 * sum(r['truncated'] for r in rows) / len(rows):.1f}% hit --max-new-tokens")
    return summary


def main(argv=None):
    cfg, _, given = read_flags(argv)
    cfg = task_defaults(cfg, given)
    problem = check(cfg)
    if problem:
        die(problem)
    n = cfg.n or cfg.k
    try:
        device = distributed.pick_device(cfg.device)
    except distributed.DeviceError as e:
        die(str(e))
    try:  # flags, output file and data first: each is reported before minutes of model loading
        dirs = lora.locate(cfg.model, cfg.adapter, cfg.revision)
        sampling = resolve_sampling(cfg, *generation_defaults(dirs.tokenizer, dirs.base))
        out = Path(cfg.out) if cfg.out else default_out(cfg.adapter or cfg.model)
        problem = check_writable(out)
        if problem:
            die(problem)
        rewards = load_rewards(cfg, cfg.data)  # checked against each file's columns
        now = settings(cfg, dirs)
        saved, done = read_done(out) if cfg.skip_done else (None, [])
        if saved is not None and differences(saved, now):
            die(f"--skip-done: {out} was sampled with other settings: {'; '.join(differences(saved, now))}. "
                f"Give the same flags to continue it, or another --out")
        columns = dict(answer_field=cfg.answer_field, need_answer=not cfg.reward)  # yours may need no gold
        benchmarks = {Path(f).stem: load_problems(f, limit=cfg.limit or None, **columns) for f in cfg.data}
        model, dirs = lora.load_model(cfg.model, cfg.adapter, getattr(torch, cfg.dtype), device, cfg.revision)
        tok = load_tokenizer(dirs.tokenizer)
        eos_ids = eos_token_ids(tok, dirs.tokenizer, dirs.base)
        problem = ignored_prompt_flags(tok, cfg.prompt_template, cfg.system_prompt, cfg.thinking)
        prompt_kw = dict(template=cfg.prompt_template, system_prompt=cfg.system_prompt,
                         enable_thinking=cfg.thinking)
        for f in cfg.data:
            problem = problem or fits(tok, benchmarks[Path(f).stem], cfg.max_new_tokens,
                                      model.config.max_position_embeddings, f, "--max-new-tokens", prompt_kw)
    except (DataError, ModelError, TokenizerError, lora.AdapterError, ConfigError) as e:
        die(str(e))
    if problem:
        die(problem)
    print(sampling, file=sys.stderr, flush=True)
    results = {name: benchmark_rows(done, name, problems, n) for name, problems in benchmarks.items()}
    sample = functools.partial(sample_and_grade, model, tok, n=n, max_new_tokens=cfg.max_new_tokens,
                               temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                               sampler=cfg.sampler, eos_ids=eos_ids, batch_size=cfg.batch_size,
                               seed=cfg.seed, prompt_kw=prompt_kw, stop=cfg.stop,
                               rewards=rewards, plan=decode_plan(device, cfg.sampler, cfg.temperature))
    new = append_samples(out, now, benchmarks, results, n, sample, distributed.precision(cfg.dtype, device))
    return print_summary(cfg, out, results, new)


if __name__ == "__main__":
    main()
