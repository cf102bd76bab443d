r"""Build the Countdown task from scratch: the task files, the tokenizer, the warm-start policy.

    python data/make_countdown.py                  # 48 minutes on one core shared with other work
    python data/make_countdown.py --only-splits    # the four split files alone, byte for byte (seconds)
    python data/make_countdown.py --describe       # how the held-out and transfer problems differ (a minute)

Writes
    data/countdown/heldout.jsonl        held-out test problems: a sample of the task's law that nothing
                                        trains on
    data/countdown/val.jsonl            validation problems, drawn the same way, for choosing settings
    data/countdown/transfer.jsonl       transfer problems: the same numbers, targets drawn another way
    data/countdown/train.jsonl          the pool of training problems
                                        {"problem": "3,8,5,2:19", "answer": "3,8,5,2:19"}
    data/countdown/rl.jsonl             the RL prompts (--task countdown): the pool's problems the warm-start
                                        solves sometimes but not always (1-7 of 8 samples)
    data/tiny-qwen3-countdown/          config.json, model.safetensors, tokenizer.json, tokenizer_config.json

The splits, evaluation first (task_splits, issue 38). One generator (seed --seed) draws the held-out,
then the validation problems from the task's law, drawing again a problem whose key was drawn already
(nanoatr.data.countdown_key: the numbers as a multiset and the target; '3,8,5,2:19' is '2,3,5,8:19'):
a sample of the law with no key twice. The transfer split has a law of its own (make_transfer, seed
TRANSFER_SEED, below) and skips their keys. The same first generator then draws the pool, distinct as
questions, skipping every evaluation key; rl.jsonl is a subset of the pool; and the warm-start's stream
of search traces (sft_stream, seed --seed + 1) skips every evaluation key too. So neither RL nor the
warm-start sees an evaluation problem, up to the order of its numbers (tests/test_splits.py;
scripts/split_overlap.py counts, for any copy of the files).
Before issue 38 the splits were disjoint only as strings (119 of the 256 held-out problems were pool
problems up to the key, and the warm-start's stream held 225 of them), and that fix's held-out split, drawn
from what the pool left, was harder than the law (a median of 56 solutions against 74, the old warm-start's
Mean@8 10.0% against 20.3%): drawing the evaluation splits first keeps them a sample of the law.

The task (`--task countdown`; the reward is nanoatr/verifier/countdown.py): reach the target from four
numbers 1-10 with + - * /, each number used exactly once; the prompt is "3,8,5,2:19=" and any correct
expression in the last \boxed{} scores. A problem has many solutions, and the warm-start is made to
spread its probability over them: that is the regime the paper is about, where a token's probability
can move a lot between rollout and update, so the choice of trust region matters.

The warm-start is supervised learning (sft.py, as make_default.py's) on a random search trace, drawn afresh
each time a problem comes up (data/countdown_puzzle.py: attempts until one reaches the target, then the
expression in \boxed{}). A single random solution per problem ("--format expr") loses its spread before
it learns, search traces keep both (docs/results.md, "Countdown: where the trust region has more to do").
It stops at a fixed step count (--steps), not at a validation target as the arithmetic one does:
validation accuracy is noisy here and entropy falls as training goes on.

The shipped files are this build's (one thread). Validation Mean@4 at steps 150-1050: 0.4, 1.6, 2.7,
7.4, 11.1, 16.0, 14.8%; held-out Mean@8 18.1%, Pass@8 61.3% at the end. `python scripts/measure_task.py
--task countdown [--data FILE]` (train.py's step-0 evaluation; entropy in nats/token at T = 1):
held-out 18.1% / 61.3% / 0.326, validation 16.7% / 58.6% / 0.323, transfer 2.9% / 16.0% / 0.336.

Last, the pass-rate filter (as DAPO and most RL recipes filter their prompts): the warm-start samples
8 completions for every pool problem and rl.jsonl keeps those it solves 1-7 times (2332 of 4096; a group
whose 8 rewards are equal has zero advantage everywhere: a rollout and a backward that teach nothing;
measured effect: docs/results.md, "The RL prompts"). The held-out file is NOT filtered: it measures the
whole task. `--only-filter` redoes this step alone from the shipped files (about 2.5 minutes on one core).
"""
import argparse
import json
import random
import statistics
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from anywhere without installing
sys.path.insert(0, str(HERE))

from make_default import (evaluation_keys, evaluation_problem, save_problems, sft_stream,  # noqa: E402
                          training_pool, write_tokenizer)
from countdown_puzzle import Spec, integer_reachable, make_problem, reachable, solutions  # noqa: E402
import sft  # noqa: E402  (the repository's sft.py: the SFT step)
from nanoatr.machinery.flags import Parser  # noqa: E402  (one error line, flags only in full)
from nanoatr.data import TASKS, DataError, Problem, countdown_key, load_problems  # noqa: E402
from nanoatr.evaluate import evaluate  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config, init_weights  # noqa: E402
from nanoatr.rewards import Rewards  # noqa: E402
from nanoatr.tokenizer import load_tokenizer, eos_token_ids  # noqa: E402

SIZES = {"heldout": 256, "val": 128, "transfer": 256, "train": 4096}  # problems per task file
EVALUATION = ("heldout", "val", "transfer")  # the evaluation splits, drawn before the pool (task_splits)
TRANSFER_SEED = 20261125                     # the transfer split's own generator
FILTER_SAMPLES, FILTER_SEED = 8, 12345  # the pass-rate filter: samples per problem, and their seed


# ----------------------------------------------------------------------------
# The splits: problems of the puzzle's law (data/countdown_puzzle.py), evaluation first


def law(spec: Spec):
    """The task's law as make_default.py's split helpers draw it: rng -> (question, answer, solution)."""
    return lambda rng: make_problem(rng, spec)


def task_splits(seed: int, spec: Spec) -> dict[str, list[Problem]]:
    """The task files, in this order: held-out and validation from one generator (seed; the task's law,
    no key twice), the transfer split by its own law (make_transfer, seed TRANSFER_SEED, clear of them),
    then the training pool from the first generator, clear of all three up to the key."""
    rng, taken, splits = random.Random(seed), set(), {}
    for name in ("heldout", "val"):
        splits[name] = [evaluation_problem(rng, taken, law(spec), countdown_key) for _ in range(SIZES[name])]
    splits["transfer"] = make_transfer(TRANSFER_SEED, SIZES["transfer"], spec, taken)
    taken |= {countdown_key(p) for p in splits["transfer"]}
    splits["train"] = training_pool(rng, SIZES["train"], taken, law(spec), countdown_key)
    return splits


def warm_start_stream(seed: int, splits: dict[str, list[Problem]], spec: Spec):
    """The warm-start's search traces (make_default.sft_stream, seed `seed`), every evaluation key skipped."""
    return sft_stream(seed, evaluation_keys(splits, EVALUATION, countdown_key), law(spec), countdown_key)


def make_transfer(seed: int, size: int, spec: Spec, excluded: set) -> list[Problem]:
    """`size` problems 'n1,n2,...:target': the generator's numbers (spec), the target uniform over
    spec.min_target..spec.max_value among the values the numbers can make (reachable); none whose key
    (countdown_key) is in `excluded`, none twice."""
    rng, seen, out = random.Random(seed), set(excluded), []
    while len(out) < size:
        numbers = [rng.randint(spec.low, spec.high) for _ in range(spec.n_numbers)]
        targets = sorted(int(v) for v in reachable(tuple(numbers))
                         if v.denominator == 1 and spec.min_target <= v <= spec.max_value)
        if not targets:
            continue
        question = ",".join(map(str, numbers)) + f":{rng.choice(targets)}"
        problem = Problem(question, question)
        if countdown_key(problem) not in seen:
            seen.add(countdown_key(problem))
            out.append(problem)
    return out


def describe(name: str, problems: list[Problem], max_value: int = 100) -> dict:
    """How hard a split's problems are by construction (not for a model): worked solutions under the
    generator's step rules (solutions), targets above 50, targets reachable
    with integer steps <= max_value."""
    counts, integer_only = [], 0
    for p in problems:
        numbers, target = countdown_key(p)
        counts.append(len(solutions(list(numbers), target, max_value)))
        integer_only += target in integer_reachable(numbers, max_value)
    n = len(problems)
    row = {"split": name, "problems": n, "median solutions": statistics.median(counts),
           "mean solutions": round(statistics.fmean(counts), 1),
           "<= 8 solutions (%)": round(100 * sum(c <= 8 for c in counts) / n, 1),
           "target > 50 (%)": round(100 * sum(countdown_key(p)[1] > 50 for p in problems) / n, 1),
           f"solvable with integer steps <= {max_value} (%)": round(100 * integer_only / n, 1)}
    print(json.dumps(row), flush=True)
    return row


# ----------------------------------------------------------------------------
# The warm-start


def model_config(vocab_size: int, hidden: int, layers: int) -> Qwen3Config:
    return Qwen3Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=3 * hidden,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=hidden // 4, rope_theta=10_000.0, tie_word_embeddings=True,
                       max_position_embeddings=256)


def pass_rate_filter(model, tok, model_dir: Path, pool: list[Problem]) -> list[Problem]:
    """The problems of `pool` that `model` solves in 1 .. FILTER_SAMPLES - 1 of FILTER_SAMPLES samples
    at temperature 1 (train.py's sampler and budget), in the pool's order."""
    task = TASKS["countdown"]
    summary = evaluate(model, tok, pool, k=FILTER_SAMPLES, max_new_tokens=task.max_new_tokens, progress=False,
                       eos_ids=eos_token_ids(tok, model_dir), seed=FILTER_SEED,
                       rewards=Rewards.of(task.reward))[0]
    solved = summary["correct"]  # of each problem's FILTER_SAMPLES samples
    keep = [p for p, c in zip(pool, solved) if 0 < c < FILTER_SAMPLES]
    print(f"pass-rate filter: the warm-start solves {summary[f'mean@{FILTER_SAMPLES}']:.1f}% "
          f"of the pool's samples; kept {len(keep)} of {len(pool)} problems (never solved {solved.count(0)}, "
          f"always {solved.count(FILTER_SAMPLES)})", flush=True)
    return keep


def write_rl_prompts(model, tok, model_dir: Path, data: Path):
    """DATA/rl.jsonl: the pass-rate-filtered problems of DATA/train.jsonl (--data-dir)."""
    save_problems(data / "rl.jsonl",
                  pass_rate_filter(model, tok, model_dir, load_problems(data / "train.jsonl")))


def make_parser() -> argparse.ArgumentParser:
    """The generator's flags: the task's law, the warm-start's recipe, and where to write."""
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    ap.add_argument("--out", default=str(HERE / "tiny-qwen3-countdown"),
                    help="where to write the policy and tokenizer")
    ap.add_argument("--only-splits", action="store_true",
                    help="only write DATA_DIR's heldout, val, transfer and train")
    ap.add_argument("--describe", action="store_true", help="only print how DATA_DIR's held-out and transfer "
                    "problems differ (solutions per problem, large targets; about a minute)")
    ap.add_argument("--only-filter", action="store_true",
                    help="only rewrite DATA_DIR/rl.jsonl from DATA_DIR/train.jsonl and the policy in OUT")
    return ap


def describe_splits(data: Path, max_value: int):
    """--describe: print how DATA_DIR's held-out and transfer problems differ."""
    for name in ("heldout", "transfer"):
        try:
            describe(name, load_problems(data / f"{name}.jsonl"), max_value)
        except DataError as e:
            raise SystemExit(f"error: {e} (make the splits first: "
                             "python data/make_countdown.py --only-splits)")


def train_warm_start(args, tok, spec: Spec, splits: dict[str, list[Problem]], out: Path) -> Qwen3:
    """The tiny Qwen3's supervised warm-start on worked solutions, saved to OUT; prints its held-out score."""
    task = TASKS["countdown"]
    model = Qwen3(model_config(len(tok), args.hidden, args.layers))
    init_weights(model, seed=args.seed)
    print(f"warm-start of a {model.num_parameters() / 1e6:.2f}M-parameter Qwen3 on Countdown ({vars(spec)}; "
          f"{args.steps} steps)", flush=True)
    stream = warm_start_stream(args.seed + 1, splits, spec)  # no evaluation problem, up to its key
    steps = sft.warm_start(model, tok, stream, splits["val"], sft.Recipe(lr=args.lr),
                           batch_size=args.batch_size, max_steps=args.steps, check_every=args.check_every,
                           max_new_tokens=task.max_new_tokens, done=lambda step, acc: step >= args.steps,
                           rewards=Rewards.of(task.reward))
    model.save_pretrained(out)
    summary = evaluate(model, tok, splits["heldout"], k=8, max_new_tokens=task.max_new_tokens,
                       temperature=1.0, progress=False, rewards=Rewards.of(task.reward))[0]
    print(f"saved {out} after {steps} steps: held-out mean@8 {summary['mean@8']:.1f}%  pass@8 "
          f"{summary['pass@8']:.1f}%  (entropy and more: python scripts/measure_task.py --task countdown)")
    return model


def main():
    args = make_parser().parse_args()
    data, out = Path(args.data_dir), Path(args.out)
    if args.only_filter:
        model, tok = Qwen3.from_pretrained(out), load_tokenizer(out)
        write_rl_prompts(model, tok, out, data)
        return
    if args.describe:
        describe_splits(data, args.max_value)
        return
    torch.manual_seed(args.seed)
    spec = Spec(args.numbers, 1, args.high, args.max_value, args.min_target, args.format, args.attempts)
    splits = task_splits(args.seed, spec)
    for name, problems in splits.items():
        save_problems(data / f"{name}.jsonl", problems)
    if args.only_splits:
        return
    tok = write_tokenizer(out)
    model = train_warm_start(args, tok, spec, splits, out)
    write_rl_prompts(model, tok, out, data)


if __name__ == "__main__":
    main()
