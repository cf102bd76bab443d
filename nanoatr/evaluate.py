"""Sample n completions per problem, grade them, and summarise as Mean@k / Pass@k.

Shared by eval.py, the periodic evaluation in train.py and the warm-start script, so that every
number in the logs and the README comes from the same code path.
"""
import time

import torch
from tqdm import tqdm

from nanoatr.metrics import summarize
from nanoatr.rollout import generate
from nanoatr.tokenizer import encode_prompts, stop_string_check
from nanoatr.verifier import verify


def sample_and_grade(model, tokenizer, problems, n: int, *, max_new_tokens: int, temperature: float = 1.0,
                     top_p: float = 1.0, top_k: int = 0, stop_ids=None, batch_size: int = 256, seed: int = 0,
                     prompt_kw: dict | None = None, progress: bool = True, skip=frozenset(),
                     desc: str = "sampling", stops=(), sampler: str = "multinomial"):
    """Yield one dict per completion: problem_id, sample, completion, gold, correct, length, truncated.

    Work is flattened to (problem, sample) pairs and cut into fixed batches, each sampled with its
    own seed; pairs in `skip` (eval.py --resume) are not yielded again. Because the batches do not
    depend on what was skipped, a resumed evaluation draws exactly the samples of an uninterrupted one.
    `stops` (stop strings) only end a batch's decoding sooner; the caller cuts the text (apply_stop).
    """
    stop_ids = stop_ids if stop_ids is not None else [tokenizer.eos_token_id]
    prompts = encode_prompts(tokenizer, problems, **(prompt_kw or {}))
    pairs = [(i, j) for i in range(len(problems)) for j in range(n)]
    was_training = model.training
    model.eval()
    bar = tqdm(total=sum(p not in skip for p in pairs), desc=desc, unit="compl", disable=not progress, leave=False)
    try:
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start:start + batch_size]
            if all(p in skip for p in batch):
                continue
            g = torch.Generator(device=model.lm_head.weight.device).manual_seed(seed * 1_000_003 + start)
            out = generate(model, [prompts[i] for i, _ in batch], max_new_tokens, temperature=temperature,
                           top_p=top_p, top_k=top_k, eos_token_id=stop_ids, generator=g, sampler=sampler,
                           pad_id=tokenizer.pad_token_id or 0, stop=stop_string_check(tokenizer, stops))
            lengths = out.mask.sum(-1).tolist()
            for (i, j), toks, length in zip(batch, out.tokens.tolist(), lengths):
                if (i, j) in skip:
                    continue
                text = tokenizer.decode(toks[:length], skip_special_tokens=True)
                stopped = length > 0 and toks[length - 1] in stop_ids
                yield {"problem_id": i, "sample": j, "completion": text, "gold": problems[i].answer,
                       "correct": bool(verify(text, problems[i].answer)), "length": length,
                       "truncated": not stopped}
                bar.update(1)
    finally:
        bar.close()
        model.train(was_training)


def evaluate(model, tokenizer, problems, k: int = 8, n: int | None = None, **kw) -> tuple[dict, list[dict]]:
    """Mean@k and Pass@k in percent from n >= k samples per problem; returns (summary, rows)."""
    n = n or k
    t0 = time.perf_counter()
    rows = list(sample_and_grade(model, tokenizer, problems, n, **kw))
    verdicts = [[False] * n for _ in problems]
    for r in rows:
        verdicts[r["problem_id"]][r["sample"]] = r["correct"]
    summary = summarize(verdicts, [k])
    summary["completion_len"] = sum(r["length"] for r in rows) / max(len(rows), 1)
    summary["truncated"] = sum(r["truncated"] for r in rows) / max(len(rows), 1)
    summary["seconds"] = time.perf_counter() - t0
    return summary, rows
