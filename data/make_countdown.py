r"""Build the Countdown task from scratch: the task files, the tokenizer, the warm-start policy.

    python data/make_countdown.py                  # about 12 minutes on one CPU core
    python data/make_countdown.py --only-splits    # train, heldout and val alone, byte for byte (seconds)

Writes
    data/countdown/train.jsonl          the pool of training problems {"problem": "3,8,5,2:19", "answer": "3,8,5,2:19"}
    data/countdown/rl.jsonl             the RL prompts (--task countdown): the pool's problems the warm-start
                                        solves sometimes but not always (1-7 of 8 samples)
    data/countdown/heldout.jsonl        held-out test problems: none is a pool (so an RL) problem up to its key
    data/countdown/val.jsonl            validation problems, as clean, for choosing settings
    data/tiny-qwen3-countdown/          config.json, model.safetensors, tokenizer.json, tokenizer_config.json

The splits. A first draw (seed --seed) gives held-out, validation and pool problems, in this order,
disjoint as strings; train.jsonl is its pool. Its held-out and validation parts were the shipped ones
until issue 38 found 119 of the 256 held-out problems (95 of them RL prompts) and 65 of the 128
validation ones to be pool problems up to the order of their numbers. They are retired: only the
warm-start below still uses them, as the shipped policy was made. heldout.jsonl and val.jsonl are drawn
afresh (seed --seed + EVAL_SEED) by the same generator, redrawing a problem whose key (nanoatr.data.
countdown_key: the numbers as a multiset and the target) is a pool problem's or was drawn already
(fresh_problem); make_countdown_transfer.py then draws the transfer split clear of all three. This
changes what the held-out split holds: the pool, 4096 draws of the same law, holds the problems the law
draws most often (about 46% of its mass: 119 of the 256 retired held-out draws), which are those with
many solutions, so the problems left are harder. New against retired held-out split: a median of 56
solutions against 74 and targets above 50 25.4% against 11.7% (make_countdown_transfer.py --describe),
the shipped warm-start's Mean@8 10.0% against 20.3%, Pass@8 44.1% against 60.2% (scripts/measure_task.py
--task countdown [--data FILE]; the retired files are at commit 7e9adfe).
What the warm-start saw: a stream of search traces from the same generator (seed --seed + 1) that
skips the first draw's held-out and validation questions, as strings, and nothing else: 225 of the
256 held-out problems share a key with one of its 1050 x 64 problems (237 of the retired ones; the
transfer split 92; scripts/split_overlap.py). The held-out split is unseen by RL, not by the warm-start.

The task (`--task countdown`; the reward is nanoatr/verifier/countdown.py): reach the target from four
numbers 1-10 with + - * /, each number used exactly once; the prompt is "3,8,5,2:19=" and any correct
expression in the last \boxed{} scores. A problem has many solutions, and the warm-start is made to
spread its probability over them: that is the regime the paper is about, where a token's probability
can move a lot between rollout and update, so the choice of trust region matters.

The warm-start is supervised learning (sft.py, as make_default.py's) on a RANDOM search trace, drawn afresh
each time a problem comes up: attempts separated by ';', the steps of one attempt by ','. An attempt
combines two values at a time at random until two are left, then takes the step that makes the target
if one does (a one-step look-ahead), else it is abandoned and the next one starts; the attempt that
reaches the target is written out as an expression (4 numbers 6,2,8,2, target 18):

    2*8=16,6*16=96;2+8=10,10+6=16,2+16=18;\boxed{2+((2+8)+6)}

Why this format (measured, 0.79M-parameter Qwen3, validation Mean@4 and completion-token entropy at
temperature 1 during the warm-start): a single random solution per problem ("expr": "7+7=14;2*14=28;
28-2=26;\boxed{(2*(7+7))-2}") loses its spread before it learns: 10.5% Mean@4 at 0.22 nats/token
after 1000 steps. Search traces keep both: 21.7% at 0.32 nats after 1050 steps (the shipped policy,
as measured when it was made; this build's own print at step 1050 reads 22.5% for the same weights,
other sampling draws; its held-out figures: `python scripts/measure_task.py --task countdown`). The
warm-start stops at a fixed step count (--steps), the measured snapshot, rather than at a validation
target as the arithmetic one does: validation accuracy is noisy here and entropy falls as training
goes on.

Last, the pass-rate filter (as DAPO and most RL recipes filter their prompts): the warm-start samples
8 completions for every pool problem and rl.jsonl keeps those it solves 1-7 times. A group whose 8
rewards are equal has zero advantage everywhere, so it costs a rollout and a backward and teaches
nothing; 42% of the pool is never solved and 0.3% always. Measured over the first 10 steps of Clip
at the sweep's settings (seed 0): groups with all 8 wrong fall from 48% to 28% of the rollout and the
training accuracy is 35% instead of 17%; held-out Mean@8 after 10 steps 25.2 against 23.5 (one run
each: within the noise; on the retired held-out split, before issue 38). The held-out file is NOT
filtered: it measures the whole task.
`--only-filter` redoes this step alone from the shipped files (about 2.5 minutes on one core).
"""
import argparse
import json
import random
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from anywhere without installing
sys.path.insert(0, str(HERE))

from make_default import TOKENIZER_CONFIG, build_tokenizer  # noqa: E402
import sft  # noqa: E402  (the repository's sft.py: the SFT step)
from nanoatr.data import TASKS, Problem, countdown_key, load_problems, save_problems  # noqa: E402
from nanoatr.evaluate import evaluate  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config, init_weights  # noqa: E402
from nanoatr.tokenizer import load_tokenizer, eos_token_ids  # noqa: E402

SIZES = {"heldout": 256, "val": 128, "train": 4096}  # the first draw, in this order, disjoint by question
EVAL_SIZES = {"heldout": 256, "val": 128}            # the evaluation splits, drawn afresh (issue 38)
EVAL_SEED = 1000                                     # their seed is --seed + EVAL_SEED
FILTER_SAMPLES, FILTER_SEED = 8, 12345  # the pass-rate filter: samples per problem, and their seed
BOXED = "\\boxed{"


# ----------------------------------------------------------------------------
# The generator: problems and random worked solutions (positive integers at every step)


def _options(values: list[int], max_value: int):
    """Every (i, op, j, result) combining values[i] op values[j] (i != j, written in that order) into a
    positive integer <= max_value: + and * in both orders, a-b if a > b, a/b if b divides a (b > 1)."""
    out = []
    for i, a in enumerate(values):
        for j, b in enumerate(values):
            if i == j:
                continue
            if a + b <= max_value:
                out.append((i, "+", j, a + b))
            if a * b <= max_value and a > 1 and b > 1:
                out.append((i, "*", j, a * b))
            if a > b:
                out.append((i, "-", j, a - b))
            if b > 1 and a % b == 0:
                out.append((i, "/", j, a // b))
    return out


def _apply(values, exprs, option):
    i, op, j, r = option
    e = f"({exprs[i]}{op}{exprs[j]})"
    keep = [k for k in range(len(values)) if k not in (i, j)]
    return [values[k] for k in keep] + [r], [exprs[k] for k in keep] + [e], f"{values[i]}{op}{values[j]}={r}"


def worked(steps: list[str], expr: str) -> str:
    """'a*b=c;c+d=e;' + \\boxed{expr} (the outer parentheses of expr dropped)."""
    if expr.startswith("(") and expr.endswith(")"):
        expr = expr[1:-1]
    return "".join(s + ";" for s in steps) + BOXED + expr + "}"


def random_path(rng: random.Random, numbers: list[int], max_value: int):
    """A uniformly random sequence of steps (at each step a uniform choice among the valid options)
    combining all numbers; (target, solution text) or None if it gets stuck."""
    values, exprs, steps = list(numbers), [str(n) for n in numbers], []
    while len(values) > 1:
        opts = _options(values, max_value)
        if not opts:
            return None
        values, exprs, step = _apply(values, exprs, rng.choice(opts))
        steps.append(step)
    return values[0], worked(steps, exprs[0])


def solutions(numbers: list[int], target: int, max_value: int) -> list[str]:
    """Every worked solution (all step orders, both orders of + and *) reaching target; exhaustive."""
    out = []

    def go(values, exprs, steps):
        if len(values) == 1:
            if values[0] == target:
                out.append(worked(steps, exprs[0]))
            return
        for opt in _options(values, max_value):
            v, e, s = _apply(values, exprs, opt)
            go(v, e, steps + [s])

    go(list(numbers), [str(n) for n in numbers], [])
    return out


def random_solution(rng: random.Random, numbers: list[int], target: int, max_value: int,
                    tries: int = 10_000) -> str | None:
    """A random solution with the same law as random_path conditioned on reaching target (rejection)."""
    for _ in range(tries):
        path = random_path(rng, numbers, max_value)
        if path is not None and path[0] == target:
            return path[1]
    return None


def _attempt(rng: random.Random, numbers: list[int], target: int, max_value: int):
    """One attempt of a search trace: random steps until two values are left, then the step that
    makes the target if some operation does (a one-step look-ahead); if none does, the attempt is
    abandoned there. (reached, steps, expression of the target or None)."""
    values, exprs, steps = list(numbers), [str(n) for n in numbers], []
    while len(values) > 1:
        opts = _options(values, max_value)
        if len(values) == 2:
            opts = [o for o in opts if o[3] == target]
        if not opts:
            return False, steps, None
        values, exprs, step = _apply(values, exprs, rng.choice(opts))
        steps.append(step)
    return values[0] == target, steps, exprs[0]


def search_trace(rng: random.Random, numbers: list[int], target: int, max_value: int, max_attempts: int):
    """Format "search": attempts (steps joined by ',') separated by ';' until one reaches the target,
    then \\boxed{its expression}; None if none does within max_attempts."""
    attempts = []
    for _ in range(max_attempts):
        ok, steps, expr = _attempt(rng, numbers, target, max_value)
        attempts.append(",".join(steps))
        if ok:
            if expr.startswith("(") and expr.endswith(")"):
                expr = expr[1:-1]
            return ";".join(attempts) + ";" + BOXED + expr + "}"
    return None


class Spec:
    """The task's knobs: how many numbers, their range, the largest value any step may make."""

    def __init__(self, n_numbers: int = 4, low: int = 1, high: int = 10, max_value: int = 100,
                 min_target: int = 10, fmt: str = "search", max_attempts: int = 4):
        self.n_numbers, self.low, self.high, self.max_value, self.min_target = n_numbers, low, high, max_value, min_target
        self.fmt, self.max_attempts = fmt, max_attempts


def make_problem(rng: random.Random, spec: Spec) -> tuple[str, str, str]:
    """(question, answer, a random worked solution). The target is where a uniformly random path of
    steps lands (so targets with many solutions come up more often); question and answer are both
    'n1,n2,...:target', numbers in random order."""
    while True:
        numbers = [rng.randint(spec.low, spec.high) for _ in range(spec.n_numbers)]
        path = random_path(rng, numbers, spec.max_value)
        if path is None or path[0] < spec.min_target:
            continue
        target, solution = path
        if spec.fmt == "search":
            solution = search_trace(rng, numbers, target, spec.max_value, spec.max_attempts)
            if solution is None:
                continue
        text = ",".join(map(str, numbers)) + f":{target}"
        return text, text, solution


def make_splits(seed: int, sizes: dict[str, int], spec: Spec) -> dict[str, list[tuple[str, str, str]]]:
    """The first draw: splits disjoint by question, drawn in order (train.jsonl is its "train")."""
    rng, seen, splits = random.Random(seed), set(), {}
    for name, n in sizes.items():
        rows = []
        while len(rows) < n:
            q, a, s = make_problem(rng, spec)
            if q not in seen:
                seen.add(q)
                rows.append((q, a, s))
        splits[name] = rows
    return splits


def fresh_problem(rng: random.Random, spec: Spec, taken: set) -> tuple[str, str, str]:
    """A problem of make_problem's law whose key (countdown_key) is not in `taken`, then added to it."""
    while True:
        question, answer, solution = make_problem(rng, spec)
        key = countdown_key(Problem(question, answer))
        if key not in taken:
            taken.add(key)
            return question, answer, solution


def eval_splits(seed: int, train: list[tuple[str, str, str]], spec: Spec) -> dict[str, list[tuple]]:
    """heldout.jsonl and val.jsonl, in this order: EVAL_SIZES fresh problems, none a pool problem up to its
    key and no two with one key."""
    rng, taken = random.Random(seed + EVAL_SEED), {countdown_key(Problem(q, a)) for q, a, _ in train}
    return {name: [fresh_problem(rng, spec, taken) for _ in range(n)] for name, n in EVAL_SIZES.items()}


def sft_stream(seed: int, exclude: set[str], spec: Spec):
    """Endless (question, random worked solution) pairs whose questions are not in `exclude`."""
    rng = random.Random(seed)
    while True:
        q, _, s = make_problem(rng, spec)
        if q not in exclude:
            yield q, s


# ----------------------------------------------------------------------------
# The warm-start


def model_config(vocab_size: int, hidden: int, layers: int) -> Qwen3Config:
    return Qwen3Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=3 * hidden,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4,
                       rope_theta=10_000.0, tie_word_embeddings=True, max_position_embeddings=256)


def pass_rate_filter(model, tok, model_dir: Path, pool: list[Problem]) -> list[Problem]:
    """The problems of `pool` that `model` solves in 1 .. FILTER_SAMPLES - 1 of FILTER_SAMPLES samples
    at temperature 1 (train.py's sampler and budget), in the pool's order."""
    task = TASKS["countdown"]
    summary, rows = evaluate(model, tok, pool, k=FILTER_SAMPLES, max_new_tokens=task.max_new_tokens,
                             eos_ids=eos_token_ids(tok, model_dir), seed=FILTER_SEED, reward=task.reward,
                             progress=False)
    solved = [0] * len(pool)
    for r in rows:
        solved[r["problem_id"]] += r["correct"]
    keep = [p for p, c in zip(pool, solved) if 0 < c < FILTER_SAMPLES]
    print(f"pass-rate filter: the warm-start solves {summary[f'mean@{FILTER_SAMPLES}']:.1f}% of the pool's samples; "
          f"kept {len(keep)} of {len(pool)} problems (never solved {solved.count(0)}, always "
          f"{solved.count(FILTER_SAMPLES)})", flush=True)
    return keep


def write_rl_prompts(model, tok, model_dir: Path, data: Path):
    """data/rl.jsonl: the pass-rate-filtered problems of data/train.jsonl."""
    save_problems(data / "rl.jsonl", pass_rate_filter(model, tok, model_dir, load_problems(data / "train.jsonl")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="seed of the task splits and of the training")
    ap.add_argument("--numbers", type=int, default=4, help="numbers per problem")
    ap.add_argument("--high", type=int, default=10, help="numbers are drawn from 1..HIGH")
    ap.add_argument("--max-value", type=int, default=100, help="largest value a step of a solution may make")
    ap.add_argument("--min-target", type=int, default=10, help="smallest target")
    ap.add_argument("--format", default="search", choices=["search", "expr"],
                    help="search: attempts until one reaches the target; expr: one random solution")
    ap.add_argument("--attempts", type=int, default=4, help="format search: most attempts in a trace")
    ap.add_argument("--steps", type=int, default=1050, help="supervised steps (a multiple of --check-every)")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of the warm-start")
    ap.add_argument("--batch-size", type=int, default=64, help="worked solutions per step")
    ap.add_argument("--hidden", type=int, default=128, help="hidden size of the tiny Qwen3")
    ap.add_argument("--layers", type=int, default=4, help="layers of the tiny Qwen3")
    ap.add_argument("--check-every", type=int, default=150, help="steps between validation prints")
    ap.add_argument("--data-dir", default=str(HERE / "countdown"), help="where to write the splits")
    ap.add_argument("--out", default=str(HERE / "tiny-qwen3-countdown"), help="where to write the policy and tokenizer")
    ap.add_argument("--only-splits", action="store_true", help="only write DATA_DIR's train, heldout and val")
    ap.add_argument("--only-filter", action="store_true",
                    help="only rewrite DATA_DIR/rl.jsonl from DATA_DIR/train.jsonl and the policy in OUT")
    args = ap.parse_args()
    data, out = Path(args.data_dir), Path(args.out)
    if args.only_filter:
        model, tok = Qwen3.from_pretrained(out), load_tokenizer(out)
        write_rl_prompts(model, tok, out, data)
        return
    torch.manual_seed(args.seed)
    spec = Spec(args.numbers, 1, args.high, args.max_value, args.min_target, args.format, args.attempts)
    task = TASKS["countdown"]

    first = make_splits(args.seed, SIZES, spec)
    splits = {"train": first["train"], **eval_splits(args.seed, first["train"], spec)}
    for name, rows in splits.items():
        save_problems(data / f"{name}.jsonl", [Problem(q, a) for q, a, _ in rows])
    if args.only_splits:
        return
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2))
    tok = load_tokenizer(out)

    model = Qwen3(model_config(len(tok), args.hidden, args.layers))
    init_weights(model, seed=args.seed)
    print(f"warm-start of a {model.num_parameters() / 1e6:.2f}M-parameter Qwen3 on Countdown ({vars(spec)}; "
          f"{args.steps} steps)", flush=True)
    # as the shipped policy was made: the first draw's validation problems for the progress prints, its
    # held-out and validation questions left out of the stream (the splits redrawn since are not used here)
    val = [Problem(q, a) for q, a, _ in first["val"]]
    stream = sft_stream(args.seed + 1, {q for q, _, _ in first["heldout"] + first["val"]}, spec)
    steps = sft.warm_start(model, tok, stream, val, sft.Recipe(lr=args.lr), batch_size=args.batch_size,
                           max_steps=args.steps, check_every=args.check_every, max_new_tokens=task.max_new_tokens,
                           done=lambda step, acc: step >= args.steps, reward=task.reward)
    model.save_pretrained(out)
    heldout = load_problems(data / "heldout.jsonl")
    summary = evaluate(model, tok, heldout, k=8, max_new_tokens=task.max_new_tokens, temperature=1.0,
                       progress=False, reward=task.reward)[0]
    print(f"saved {out} after {steps} steps: held-out mean@8 {summary['mean@8']:.1f}%  pass@8 "
          f"{summary['pass@8']:.1f}%  (entropy and more: python scripts/measure_task.py --task countdown)")
    write_rl_prompts(model, tok, out, data)


if __name__ == "__main__":
    main()
