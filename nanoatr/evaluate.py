"""Evaluation: sample n completions per problem, grade them, summarise as Mean@k / Pass@k.

Shared by eval.py, the periodic evaluation in train.py and the warm-start scripts, so that every
number in the logs and the README comes from the same code path. ``verdicts`` is one list of booleans
per problem (did sample j solve problem i), each sampled n >= k times: Mean@k is c/n per problem (all n
samples), Pass@k the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021, not "any of the first
k", which is noisier), each averaged over problems, in percent as the paper's tables. Why so, and the
evaluation's entropy: docs/library.md#evaluate"""
import math
import re
import time
from typing import Iterable, Sequence

import torch
from tqdm import tqdm

from nanoatr.rollout import EAGER, SAMPLERS, DecodePlan, generate
from nanoatr.scoring import score
from nanoatr.rewards import Rewards, math_reward
from nanoatr.tokenizer import completion_ids, completion_texts, encode_prompts, make_stopper


def sample_and_grade(model, tokenizer, problems, n: int, *, max_new_tokens: int, temperature: float = 1.0,
                     top_p: float = 1.0, top_k: int = 0, eos_ids=None, batch_size: int = 256, seed: int = 0,
                     prompt_kw: dict | None = None, progress: bool = True, skip=frozenset(), stop=(),
                     sampler: str = SAMPLERS[0], rewards: Rewards | None = None, with_entropy: bool = False,
                     plan: DecodePlan = EAGER):
    """Yield one dict per completion: problem_id, sample, completion, gold, reward, correct, length,
    truncated, and with_entropy its entropy (completion_entropies: the mean over its tokens, nats).

    Work is flattened to (problem, sample) pairs and cut into fixed batches, each with its own seed, so
    a resumed evaluation (pairs in `skip` are not yielded again) draws the samples of an uninterrupted one.
    Completions end at an EOS in `eos_ids` or after a stop string in `stop`. `rewards` grade them (default:
    the verifier): `reward` is their weighted total, and `correct` Rewards.correct_of's verdict (the
    judging function's reward > 0, or the total's: --correct-reward)."""
    rewards = rewards or Rewards.of(math_reward)
    eos_ids = eos_ids if eos_ids is not None else [tokenizer.eos_token_id]
    prompts = encode_prompts(tokenizer, problems, **(prompt_kw or {}))
    stopper = make_stopper(tokenizer, stop)
    pairs = [(i, j) for i in range(len(problems)) for j in range(n)]
    was_training = model.training
    model.eval()
    # disable=None: tqdm draws only on a terminal, never into a pipe or file
    bar = tqdm(total=sum(p not in skip for p in pairs), desc="sampling", unit="compl", leave=False,
               disable=None if progress else True)
    try:
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start:start + batch_size]
            if all(p in skip for p in batch):
                continue
            g = torch.Generator(device=model.lm_head.weight.device).manual_seed(seed * 1_000_003 + start)
            out = generate(model, [prompts[i] for i, _ in batch], max_new_tokens, temperature=temperature,
                           top_p=top_p, top_k=top_k, eos_token_id=eos_ids, generator=g, sampler=sampler,
                           pad_id=tokenizer.pad_token_id or 0, stopper=stopper, plan=plan)
            texts = completion_texts(tokenizer, out.tokens, out.mask)
            graded = [problems[i] for i, _ in batch]
            each = rewards.per_function(graded, texts, completion_ids(out.tokens, out.mask))
            totals, right = rewards.total(each).tolist(), rewards.correct_of(each).tolist()
            entropies = completion_entropies(model, out, temperature) if with_entropy else [None] * len(batch)
            for (i, j), text, total, correct, length, finished, entropy in zip(
                    batch, texts, totals, right, out.mask.sum(-1).tolist(), out.finished.tolist(), entropies):
                if (i, j) in skip:
                    continue
                row = {"problem_id": i, "sample": j, "completion": text, "gold": problems[i].answer,
                       "reward": total, "correct": correct, "length": length, "truncated": not finished}
                yield row if entropy is None else row | {"entropy": entropy}
                bar.update(1)
    finally:
        bar.close()
        model.train(was_training)


@torch.no_grad()
def completion_entropies(model, out, temperature: float, max_positions: int = 16_384) -> list[float]:
    """Each completion's mean entropy (nats) of softmax(logits / temperature) over its real tokens (out.mask),
    teacher-forced as train.py scores them (scoring.score: log-softmax chunk by chunk, no (B, T, V) tensor),
    about `max_positions` prompt and completion positions a forward. Temperature 0 is scored at 1 (score)."""
    rows = max(1, max_positions // (out.prompt_ids.shape[1] + out.tokens.shape[1]))
    means = []
    for start in range(0, len(out.tokens), rows):
        prompt_ids, prompt_mask, tokens, mask = out.unpadded(slice(start, start + rows))
        entropy = score(model, prompt_ids, prompt_mask, tokens, temperature, with_entropy=True).entropy
        means += ((entropy * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist()
    return means


def entropy_key(temperature: float) -> str:
    """The evaluation entropy's name: 'entropy' at T = 1 (greedy decoding is scored at 1), else e.g.
    'entropy@T0.6'."""
    t = temperature if temperature > 0 else 1.0
    return "entropy" if t == 1.0 else f"entropy@T{t:g}"


def fits(tokenizer, problems, budget: int, positions: int, name: str, flag: str,
         prompt_kw: dict | None = None):
    """None if every problem's prompt plus `budget` new tokens fits the model's `positions`
    (max_position_embeddings: past them RoPE extrapolates untested, and the KV cache is sized by it),
    else one line naming the flag, or the file and the problem."""
    if budget >= positions:
        return f"{flag} {budget} does not fit the model's {positions} positions (max_position_embeddings)"
    lengths = [len(p) for p in encode_prompts(tokenizer, problems, **(prompt_kw or {}))]
    worst = max(range(len(lengths)), key=lengths.__getitem__)
    if lengths[worst] + budget > positions:
        return (f"{name}: problem {worst}'s prompt is {lengths[worst]} tokens; with {flag} {budget} it needs "
                f"{lengths[worst] + budget} positions, the model has {positions} (max_position_embeddings)")
    return None


def evaluate(model, tokenizer, problems, k: int = 8, n: int | None = None, **kw) -> tuple[dict, list[dict]]:
    """(summary_of the rows, the rows) of n >= k samples per problem."""
    t0 = time.perf_counter()
    rows = list(sample_and_grade(model, tokenizer, problems, n or k, **kw))
    return summary_of(rows, k, t0), rows


def summary_of(rows: list[dict], k: int, t0: float) -> dict:
    """`summarize` of graded rows at k, their mean length, the share truncated and the seconds since t0."""
    return summarize(verdicts_by_problem(rows), [k]) | {
        "completion_len": sum(r["length"] for r in rows) / len(rows),
        "truncated": sum(r["truncated"] for r in rows) / len(rows), "seconds": time.perf_counter() - t0}


def during_training(model, tokenizer, eval_sets: dict, k: int, batch_size: int, rank: int = 0, world: int = 1,
                    gather=list, **sampling) -> tuple[dict, dict]:
    """summary_of and the evaluation policy's entropy (entropy_key) on every held-out file of a training run:
    (results under eval/<file>/... and eval/mean@k, eval/pass@k (the files' average), a few sample rows per
    file, each with its entropy, for samples.jsonl).

    The ranks share the work: each samples every world-th of sample_and_grade's fixed batches, so the
    samples are those one process would draw; gather(rows) gives every rank's rows (all_gather)."""
    results, samples = {}, {}
    for name, problems in eval_sets.items():
        t0 = time.perf_counter()
        pairs = [(i, j) for i in range(len(problems)) for j in range(k)]
        others = {p for b, start in enumerate(range(0, len(pairs), batch_size)) if b % world != rank
                  for p in pairs[start:start + batch_size]}
        rows = list(sample_and_grade(model, tokenizer, problems, k, skip=others, batch_size=batch_size,
                                     progress=False, with_entropy=True, **sampling))
        rows = sorted(gather(rows), key=lambda r: (r["problem_id"], r["sample"]))
        summary = summary_of(rows, k, t0)
        summary[entropy_key(sampling.get("temperature", 1.0))] = \
            sum(r["entropy"] * r["length"] for r in rows) / max(sum(r["length"] for r in rows), 1)
        results.update({f"eval/{name}/{key}": v for key, v in summary.items()})
        samples[name] = rows[:: max(1, len(rows) // 4)][:4]
    for key in (f"mean@{k}", f"pass@{k}"):
        results[f"eval/{key}"] = sum(results[f"eval/{n}/{key}"] for n in eval_sets) / len(eval_sets)
    return results, samples


def scores_line(results: dict, k: int, before: dict | None = None) -> str:
    """'heldout Mean@8 53.7% (from 28.0%)  Pass@8 77.7%' per evaluated file, named by its file ('heldout
    ...; transfer ...'), which may or may not be held out (train.py says when it shares training problems).
    `before` (step 0's results) gives the 'from'."""
    names = [m.group(1) for key in results if (m := re.fullmatch(rf"eval/(.+)/mean@{k}", key))]
    return "; ".join(f"{n} Mean@{k} {results[f'eval/{n}/mean@{k}']:.1f}%" +
                     (f" (from {before[f'eval/{n}/mean@{k}']:.1f}%)" if before else "") +
                     f"  Pass@{k} {results[f'eval/{n}/pass@{k}']:.1f}%" for n in names)


def check_budgets(tokenizer, files: list[tuple], positions: int, prompt_kw: dict | None = None):
    """`fits` for each (file name, problems, budget, flag); the first problem found is a BudgetError."""
    for name, problems, budget, flag in files:
        if problem := fits(tokenizer, problems, budget, positions, name, flag, prompt_kw):
            raise BudgetError(problem)


class BudgetError(ValueError):
    """A prompt plus its completion budget that does not fit the model's positions; one line for the user."""


# ---------------------------------------------------------------------------
# Mean@k and Pass@k from verdicts

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with c correct out of n samples (1 <= k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i): no huge binomials, no overflow
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def summarize(verdicts: Sequence[Sequence[bool]], ks: Iterable[int]) -> dict:
    """``{"mean@k": ..., "pass@k": ...}`` in percent for every k in ``ks``, then "correct": how many samples
    of each problem were right, in problem order (256 small integers for 256 problems). With n, the samples
    per problem, Mean@k and Pass@k follow from it alone (the mean of c / n, of pass_at_k(n, c, k)), and two
    evaluations pair problem by problem."""
    out = {}
    for k in ks:
        if not verdicts:
            raise ValueError("no problems to score")
        fewest = min(range(len(verdicts)), key=lambda i: len(verdicts[i]))
        if len(verdicts[fewest]) < k:
            raise ValueError(f"@{k} needs at least {k} samples per problem; problem {fewest} has "
                             f"{len(verdicts[fewest])}")
        out[f"mean@{k}"] = 100 * (sum(sum(v) / len(v) for v in verdicts) / len(verdicts))
        out[f"pass@{k}"] = 100 * (sum(pass_at_k(len(v), sum(v), k) for v in verdicts) / len(verdicts))
    return out | {"correct": [sum(v) for v in verdicts]}


def verdicts_by_problem(rows: Iterable[dict]) -> list[list[bool]]:
    """Eval rows ``{"problem_id", "sample", "correct"}`` as per-problem verdict lists, problems sorted by id,
    samples by index; a repeated (problem_id, sample) is an error (two files or benchmarks mixed, usually)."""
    grouped: dict[object, dict[int, bool]] = {}
    for row in rows:
        samples = grouped.setdefault(row["problem_id"], {})
        if row["sample"] in samples:
            raise ValueError(f"repeated sample {row['sample']} of problem {row['problem_id']!r}")
        samples[row["sample"]] = bool(row["correct"])
    return [[grouped[pid][j] for j in sorted(grouped[pid])] for pid in sorted(grouped)]
