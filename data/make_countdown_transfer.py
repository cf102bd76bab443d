r"""The Countdown transfer split: the same task, targets drawn another way.

    python data/make_countdown_transfer.py        # a few seconds; writes data/countdown/transfer.jsonl

data/make_countdown.py draws a problem's target where a uniformly random path of steps lands, so a
target with many solutions comes up often and one with few rarely: every split it writes (train, rl,
held-out) shares that law. This split keeps the numbers (four, uniform in 1..10) and draws the target
UNIFORMLY from 10..100 among those the numbers can make under the task's own rules (the reward's:
+ - * /, each number once, any intermediate value, fractions included). Targets that a random path
seldom reaches, and that have few solutions, weigh as much as easy ones. No problem repeats one of
make_countdown.py's splits up to its key (nanoatr.data.countdown_key: the numbers in any order and the
same target). When issue 38 redrew the held-out and validation splits, this one changed with them (the
same law and seed; other problems to avoid), though it never shared a key with the pool.

How the two laws differ is printed (`--describe`, and docs/results.md has the figures): the number of
solutions a problem has under make_countdown.py's step rules (positive integers <= 100 at every step,
all step orders), the share of targets above 50, and the share that needs a fraction on the way.
How hard the split is for the warm start: `python scripts/measure_task.py --task countdown --data
data/countdown/transfer.jsonl`. train.py evaluates it beside the held-out split (--task countdown's
eval files, nanoatr/data.py TASKS), so every run and sweep reports both.
"""
import argparse
import json
import random
import statistics
import sys
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from anywhere without installing
sys.path.insert(0, str(HERE))

from make_countdown import solutions  # noqa: E402  (the generator's step rules, for --describe)
from nanoatr.data import Problem, countdown_key, load_problems, save_problems  # noqa: E402

SIZE, SEED = 256, 20261125
LOW, HIGH, N_NUMBERS = 1, 10, 4          # the numbers, as make_countdown.py draws them
MIN_TARGET, MAX_TARGET = 10, 100         # the targets: make_countdown.py's --min-target and --max-value


def reachable(numbers: tuple) -> set:
    """Every value an expression over all of `numbers` (each once, + - * /, any order and grouping) can take,
    exactly (Fractions): the task's rules, which are the reward's."""
    values = {}

    def go(items: tuple) -> set:
        key = tuple(sorted(items))
        if key in values:
            return values[key]
        if len(items) == 1:
            return {items[0]}
        out = set()
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                a, b = items[i], items[j]
                rest = items[:i] + items[i + 1:j] + items[j + 1:]
                results = {a + b, a * b, a - b, b - a}
                results |= {a / b} if b else set()
                results |= {b / a} if a else set()
                for r in results:
                    out |= go(rest + (r,))
        values[key] = out
        return out

    return go(tuple(Fraction(n) for n in numbers))


def integer_reachable(numbers: tuple) -> set:
    """The values reachable with a positive integer <= MAX_TARGET at every step (make_countdown.py's rules)."""
    out = set()

    def go(items: tuple):
        if len(items) == 1:
            out.add(items[0])
            return
        for i in range(len(items)):
            for j in range(len(items)):
                if i != j:
                    a, b = items[i], items[j]
                    rest = tuple(x for k, x in enumerate(items) if k not in (i, j))
                    for r in (a + b, a * b, a - b, a // b if b > 1 and a % b == 0 else 0):
                        if 0 < r <= MAX_TARGET:
                            go(rest + (r,))

    go(tuple(numbers))
    return out


def make_transfer(seed: int, size: int, exclude: set) -> list[str]:
    """`size` questions 'n1,n2,n3,n4:target': numbers uniform in LOW..HIGH, the target uniform over
    MIN_TARGET..MAX_TARGET among the values the numbers can make; none whose key (countdown_key) is in
    `exclude`, none twice."""
    rng, seen, out = random.Random(seed), set(exclude), []
    while len(out) < size:
        numbers = [rng.randint(LOW, HIGH) for _ in range(N_NUMBERS)]
        targets = sorted(int(v) for v in reachable(tuple(numbers))
                         if v.denominator == 1 and MIN_TARGET <= v <= MAX_TARGET)
        if not targets:
            continue
        question = ",".join(map(str, numbers)) + f":{rng.choice(targets)}"
        key = countdown_key(Problem(question, question))
        if key not in seen:
            seen.add(key)
            out.append(question)
    return out


def describe(name: str, questions: list[str]) -> dict:
    """How hard a split's problems are by construction (not for a model): solutions under make_countdown.py's
    step rules, targets above 50, targets only reachable through a fraction or a value outside 1..100."""
    counts, integer_only = [], 0
    for q in questions:
        numbers, target = countdown_key(Problem(q, q))
        counts.append(len(solutions(list(numbers), target, MAX_TARGET)))
        integer_only += target in integer_reachable(numbers)
    n = len(questions)
    row = {"split": name, "problems": n, "median solutions": statistics.median(counts),
           "mean solutions": round(statistics.fmean(counts), 1),
           "<= 8 solutions (%)": round(100 * sum(c <= 8 for c in counts) / n, 1),
           "target > 50 (%)": round(100 * sum(int(q.split(":")[1]) > 50 for q in questions) / n, 1),
           "solvable with integer steps <= 100 (%)": round(100 * integer_only / n, 1)}
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=SEED, help=f"seed of the draw (default: {SEED})")
    ap.add_argument("--size", type=int, default=SIZE, help=f"problems (default: {SIZE})")
    ap.add_argument("--data-dir", default=str(HERE / "countdown"), help="make_countdown.py's splits, and where "
                    "to write transfer.jsonl")
    ap.add_argument("--out", help="the file to write (default: DATA_DIR/transfer.jsonl)")
    ap.add_argument("--describe", action="store_true", help="also print how the held-out and transfer "
                    "problems differ (solutions per problem, large targets; about a minute)")
    args = ap.parse_args()
    data = Path(args.data_dir)
    try:
        exclude = {countdown_key(p) for split in ("train", "val", "heldout")
                   for p in load_problems(data / f"{split}.jsonl")}
    except ValueError as e:
        raise SystemExit(f"error: {e} (make the splits first: python data/make_countdown.py)") from None
    questions = make_transfer(args.seed, args.size, exclude)
    out = Path(args.out) if args.out else data / "transfer.jsonl"
    save_problems(out, [Problem(q, q) for q in questions])
    print(f"wrote {out}: {len(questions)} problems", flush=True)
    if args.describe:
        describe("heldout", [p.question for p in load_problems(data / "heldout.jsonl")])
        describe("transfer", questions)


if __name__ == "__main__":
    main()
