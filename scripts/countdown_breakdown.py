r"""Where a Countdown policy wins and loses: Mean@k by how many solutions a problem has, and how it searches.

    python scripts/countdown_breakdown.py                                   # the warm start
    python scripts/countdown_breakdown.py runs/sweep/clip-s0/checkpoint     # a trained policy (LoRA or full)

For each evaluated file of --task countdown (held-out and transfer) and each policy given: Mean@k and
Pass@k as train.py's evaluation computes them (same samples for the same --seed), then Mean@k within
three groups of problems by their number of solutions under make_countdown.py's step rules (<= 8, 9-32,
> 32; the generator's targets mostly have many, the transfer split's few), and how the completions
search: attempts per completion (';'-separated), the share whose boxed expression uses the right
numbers but makes another value, and the share of written steps "a op b = c" whose arithmetic is false.
"""
import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere without installing
sys.path.insert(0, str(ROOT / "data"))

from countdown_puzzle import solutions  # noqa: E402  (data/countdown_puzzle.py)
from nanoatr.machinery.flags import Parser  # noqa: E402  (one error line, flags only in full)
from nanoatr.data import TASKS, load_problems  # noqa: E402
from nanoatr.evaluate import evaluate  # noqa: E402
from nanoatr.model import Qwen3  # noqa: E402
from nanoatr.rewards import Rewards  # noqa: E402
from nanoatr.tokenizer import eos_token_ids, load_tokenizer  # noqa: E402
from nanoatr.verifier.countdown import evaluate_expression, last_box, parse_answer  # noqa: E402

GROUPS = ((0, 8, "<=8"), (9, 32, "9-32"), (33, 10 ** 9, ">32"))  # solutions per problem
STEP = re.compile(r"(\d+)([-+*/])(\d+)=(\d+)")


def group(n: int) -> str:
    return next(name for low, high, name in GROUPS if low <= n <= high)


def true_value(a: int, op: str, b: int):
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[op]


def breakdown(rows: list[dict], problems) -> dict:
    """The groups' Mean@k and the search statistics of graded completions (evaluate's rows)."""
    size = {i: len(solutions(*parse_answer(p.answer), 100)) for i, p in enumerate(problems)}
    by_group, attempts, wrong_value, steps, false_steps = {}, [], 0, 0, 0
    for r in rows:
        numbers, target = parse_answer(problems[r["problem_id"]].answer)
        text = r["completion"]
        by_group.setdefault(group(size[r["problem_id"]]), []).append(r["correct"])
        attempts.append(text.count(";"))
        box = last_box(text)
        value = evaluate_expression(box, len(numbers)) if box is not None else None
        wrong_value += value is not None and sorted(value[1]) == sorted(numbers) and value[0] != target
        for a, op, b, c in STEP.findall(text):
            steps += 1
            false_steps += true_value(int(a), op, int(b)) != int(c)
    k = len(rows) // len(problems)
    return {"solutions per problem: problems, Mean@k (%)":
            {name: (len(v) // k, round(100 * statistics.fmean(v), 1)) for _, _, name in GROUPS
             if (v := by_group.get(name))},
            "attempts per completion": round(statistics.fmean(attempts), 2),
            "right numbers, other value (%)": round(100 * wrong_value / len(rows), 1),
            "false steps (%)": round(100 * false_steps / max(steps, 1), 1)}


def main():
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="policies: model directories or checkpoints of full-weight "
                    "runs (the sweep's; default: the warm start)")
    ap.add_argument("--k", type=int, default=8, help="samples per problem")
    ap.add_argument("--seed", type=int, default=0,
                    help="train.py's --seed (its evaluations draw these samples)")
    args = ap.parse_args()
    task = TASKS["countdown"]
    base = ROOT / task.model
    tok = load_tokenizer(base)
    for name in args.models or [str(base)]:
        try:
            model = Qwen3.from_pretrained(name)
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: {name}: {e}") from None
        for path in task.eval_data:
            problems = load_problems(ROOT / path)
            summary, rows = evaluate(model, tok, problems, k=args.k, max_new_tokens=task.max_new_tokens,
                                     temperature=1.0, eos_ids=eos_token_ids(tok, base), seed=args.seed,
                                     progress=False, rewards=Rewards.of(task.reward))
            print(json.dumps({"policy": name, "file": Path(path).name,
                              f"Mean@{args.k}": round(summary[f"mean@{args.k}"], 1),
                              f"Pass@{args.k}": round(summary[f"pass@{args.k}"], 1),
                              "length": round(summary["completion_len"], 1), **breakdown(rows, problems)}),
                  flush=True)


if __name__ == "__main__":
    main()
