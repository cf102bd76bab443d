"""How held out the embedded tasks' evaluation splits are, up to a problem's key (nanoatr.data.arith_key,
countdown_key: the numbers as a multiset and the answer or target).

    python scripts/split_overlap.py          # about a minute on one core
    python scripts/split_overlap.py --data-dir OLD --task countdown    # another copy of the split files

For every evaluation split: how many of its problems share a key with a training or RL problem, and
with a problem of the warm-start's supervised stream (all none since issue 38: tests/test_splits.py).
That stream is not a file: data/make_*.py draws it from the task's generator while the warm-start
trains (sft_stream, seed 1, every evaluation key of the build's splits skipped), and it is regenerated
here as the build draws it, its first STEPS x 64 problems: the shipped warm-starts' steps (STEPS below).
Another copy of the split files (--data-dir) is measured against today's stream.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere without installing
sys.path.insert(0, str(ROOT / "data"))

import make_countdown  # noqa: E402  (data/make_countdown.py: the Countdown splits and warm-start stream)
from countdown_puzzle import Spec  # noqa: E402  (data/countdown_puzzle.py: the Countdown generator's knobs)
import make_default  # noqa: E402  (data/make_default.py: the arithmetic generator)
from nanoatr.machinery.flags import Parser  # noqa: E402  (one error line, flags only in full)
from nanoatr.data import DataError, Problem, arith_key, countdown_key, load_problems  # noqa: E402

# task: (directory under data/, key, the files trained on, the evaluation files, the shipped
# warm-start's steps)
TASKS = {
    "arith": ("arith", arith_key, ("train",), ("heldout", "val"), 725),
    "countdown": ("countdown", countdown_key, ("train", "rl"), ("heldout", "val", "transfer"), 1050),
}
SFT_BATCH = 64  # worked solutions per warm-start step (both scripts' --batch-size)


def warm_start_stream(task: str):
    """The task's warm-start stream as data/make_*.py draws it with its defaults (seed 0; the stream's seed 1,
    the evaluation keys of the splits it writes skipped)."""
    if task == "arith":
        return make_default.sft_stream(1, make_default.evaluation_keys(make_default.task_splits(0)))
    return make_countdown.warm_start_stream(1, make_countdown.task_splits(0, Spec()), Spec())


def sft_keys(task: str, steps: int) -> set:
    """The keys of the first steps x SFT_BATCH problems of the task's warm-start stream."""
    stream = warm_start_stream(task)
    keys = set()
    for _ in range(steps * SFT_BATCH):
        question, solution = next(stream)
        answer = solution.rsplit("{", 1)[1].rstrip("}") if task == "arith" else question  # the boxed answer
        keys.add(TASKS[task][1](Problem(question, answer)))
    return keys


def report(task: str, data_dir: Path, steps: int) -> list[str]:
    """One line per evaluation split of `task`'s files under data_dir."""
    folder, key, trained, evaluated, _ = TASKS[task]

    def keys_of(split: str) -> list:
        return [key(p) for p in load_problems(data_dir / folder / f"{split}.jsonl", dedupe=False)]

    training = {split: set(keys_of(split)) for split in trained}
    seen_by_sft = sft_keys(task, steps)
    lines, earlier = [], set()
    for split in evaluated:
        keys, repeats = keys_of(split), 0
        for k in keys:  # an evaluation problem of this split or an earlier one with the same key
            repeats += k in earlier
            earlier.add(k)
        shared = ", ".join(f"{t} {sum(k in training[t] for k in keys)}" for t in trained)
        lines.append(f"{task} {split}: {len(keys)} problems; sharing a key with {shared}; repeats {repeats}; "
                     f"sharing a key with the warm-start's stream ({steps} x {SFT_BATCH}) "
                     f"{sum(k in seen_by_sft for k in keys)}")
    return lines


def main(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(TASKS), action="append", help="the task (default: both)")
    ap.add_argument("--data-dir", default=str(ROOT / "data"),
                    help="holds arith/ and countdown/ (default: data)")
    ap.add_argument("--sft-steps", type=int,
                    help="warm-start steps of the stream (default: the shipped warm-start's, "
                    + ", ".join(f"{t[4]} {task}" for task, t in TASKS.items()) + ")")
    args = ap.parse_args(argv)
    for task in args.task or sorted(TASKS):
        try:
            lines = report(task, Path(args.data_dir), args.sft_steps or TASKS[task][4])
        except DataError as e:
            raise SystemExit(f"error: {e}") from None
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
