"""A task's warm-start, measured: mean completion-token entropy at temperature T, held-out Mean@k / Pass@k.

    python scripts/measure_task.py --task countdown          # the Countdown warm-start (about 1 minute)
    python scripts/measure_task.py                           # the embedded arithmetic default
    python scripts/measure_task.py --task countdown --model runs/NAME/checkpoint --show 8

Mean@k and Pass@k are exactly train.py's step-0 evaluation (the same samples for the same --seed,
--eval-batch-size 256 and budget: nanoatr.evaluate). The entropy is that of the full next-token
distribution at every sampled completion token (the EOS included), averaged over all completion
tokens (token-weighted, as train.py's `entropy` metric), from a second draw of the same size: it says
how much probability the policy spreads over different continuations. The arithmetic warm-start has
about 0.07 nats per token (one right answer, written one way); the Countdown one is made for >= 0.3.
"""
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere without installing

from nanoatr.machinery.flags import arg, read  # noqa: E402
from nanoatr.data import TASKS, load_problems  # noqa: E402
from nanoatr.evaluate import evaluate  # noqa: E402
from nanoatr.model import Qwen3  # noqa: E402
from nanoatr.rewards import Rewards  # noqa: E402
from nanoatr.rollout import generate, left_pad  # noqa: E402
from nanoatr.scoring import score  # noqa: E402
from nanoatr.tokenizer import encode_prompts, load_tokenizer, eos_token_ids  # noqa: E402


@torch.no_grad()
def mean_entropy(model, tok, problems, n: int, max_new_tokens: int, temperature: float = 1.0, seed: int = 0,
                 batch_size: int = 256, eos_ids=None) -> float:
    """Token-weighted mean entropy (nats) of the policy at its own sampled completion tokens."""
    prompts = [p for p in encode_prompts(tok, problems) for _ in range(n)]
    total = count = 0.0
    pad = tok.pad_token_id or 0
    was_training = model.training
    model.eval()
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start:start + batch_size]
        g = torch.Generator().manual_seed(seed * 1_000_003 + start + 1)
        out = generate(model, batch, max_new_tokens, temperature=temperature, eos_token_id=eos_ids,
                       generator=g, pad_id=pad)
        prompt_ids, prompt_mask = left_pad(batch, pad)
        entropy = score(model, prompt_ids, prompt_mask, out.tokens, temperature, with_entropy=True).entropy
        total += float((entropy * out.mask).sum())
        count += float(out.mask.sum())
    model.train(was_training)
    return total / max(count, 1.0)


@dataclass
class MeasureConfig:
    task: str = arg("math", "the task (train.py --task)", choices=sorted(TASKS))
    model: str | None = arg(None, "model directory (default: the task's warm-start)")
    data: str | None = arg(None, "problems (default: the task's held-out file)")
    k: int = arg(8, "samples per problem, k of Mean@k / Pass@k", range=">=1")
    limit: int = arg(0, "only the first N problems (0 = all; train.py --eval-limit)", range=">=0")
    max_new_tokens: int | None = arg(None, "completion budget (default: the task's)", range=">=1")
    temperature: float = arg(1.0, "sampling temperature", range=">0")
    seed: int = arg(0, "train.py's --seed (its step-0 evaluation draws these samples)")
    show: int = arg(0, "print this many sampled completions", range=">=0")


def main(argv=None):
    args = read(MeasureConfig, argv, __doc__)[0]  # a bad flag or value: one error line
    task = TASKS[args.task]
    model_dir = args.model or str(ROOT / task.model)
    data = args.data or str(ROOT / task.eval_data[0])
    budget = args.max_new_tokens or task.max_new_tokens
    model = Qwen3.from_pretrained(model_dir)
    tok = load_tokenizer(model_dir)
    eos_ids = eos_token_ids(tok, model_dir)
    problems = load_problems(data, limit=args.limit or None)
    summary, rows = evaluate(model, tok, problems, k=args.k, max_new_tokens=budget,
                             temperature=args.temperature, eos_ids=eos_ids, seed=args.seed, progress=False,
                             rewards=Rewards.of(task.reward))
    entropy = mean_entropy(model, tok, problems, args.k, budget, args.temperature, args.seed, eos_ids=eos_ids)
    for r in rows[:: max(1, len(rows) // args.show)][:args.show] if args.show else []:
        print(f"{'+' if r['correct'] else '-'} {problems[r['problem_id']].question}= {r['completion']}")
    k = args.k
    print(f"{model_dir} on {data} ({len(problems)} problems x {k} samples, T={args.temperature}): "
          f"entropy {entropy:.3f} nats/token  Mean@{k} {summary[f'mean@{k}']:.1f}%  Pass@{k} "
          f"{summary[f'pass@{k}']:.1f}%  length {summary['completion_len']:.1f}  "
          f"truncated {100 * summary['truncated']:.1f}%")


if __name__ == "__main__":
    main()
