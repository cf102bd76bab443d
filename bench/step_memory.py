"""Peak memory of one training step at Qwen3's vocabulary: chunked log-probs vs the naive (B, T, V) path.

    python bench/step_memory.py                    # B x T = 8 x 2048, V = 151,936; ~2 minutes on 2 cores
    python bench/step_memory.py --naive-rows 0     # only the chunked step

The step is train.optimize, the very function train.py runs after a rollout: old log-probs (no-grad),
then forward with entropy, the kl3 loss, backward and AdamW, on a batch shaped like the paper's micro-batch
(8 completions of 2048 tokens), with a random 1-layer Qwen3 whose hidden size is small (the
vocabulary dominates the memory either way) and LoRA r 32 as in the paper. Each variant runs in a fresh
subprocess and reports its peak RSS above the RSS it had once model and batch existed (bench/loss.py's
method and helper). "naive" swaps scoring.token_logprobs for token_logprobs_naive (one full (B, T, V)
float32 log-softmax): at 8 x 2048 x 151,936 a single such tensor is 9.96 GB and the naive step would
need several, so it runs on --naive-rows rows only.
"""
import argparse
import contextlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from loss import rss_mb  # noqa: E402  (bench/loss.py)


def naive_token_logprobs(h, w, y, temperature=1.0, chunk_size=0, with_entropy=False):
    """scoring.token_logprobs as the naive path computes it: one full (B, T, V) float32 log-softmax."""
    from nanoatr.scoring import token_logprobs_naive
    return token_logprobs_naive(h, w, y, temperature=temperature, with_entropy=with_entropy)


def step_inputs(rows: int, T: int, V: int, D: int, lora_rank: int):
    """(train.Run, rollout.Rollout) of the measured step: a random 1-layer Qwen3 of vocabulary V and hidden
    size D (LoRA r lora_rank, 0 = full fine-tuning), `rows` completions of T tokens after 16-token prompts.
    tests/test_memory.py runs train.optimize on them too."""
    import train
    from nanoatr import lora
    from nanoatr.machinery.flags import TrainConfig, resolve
    from nanoatr.data import Shard
    from nanoatr.machinery.distributed import Dist
    from nanoatr.rollout import Rollout
    from nanoatr.scoring import Scorer
    from nanoatr.model import Qwen3, Qwen3Config, init_weights
    cfg = resolve(TrainConfig(prompts_per_step=1, group_size=rows, minibatches=1, micro_batch=rows,
                                          max_new_tokens=T, lora_rank=lora_rank, compile=False), {})
    model = Qwen3(Qwen3Config(vocab_size=V, hidden_size=D, intermediate_size=2 * D, num_hidden_layers=1,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=D // 2))
    init_weights(model, std=0.02, seed=0)
    peft_model = lora.add_adapters(model, lora_rank, 2.0 * lora_rank, lora.TARGETS, base="random") \
        if lora_rank else None
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-6)
    run = train.Run(cfg, model, Scorer(model, contextlib.nullcontext), opt, trained, tok=None, eos_ids=[],
                    stopper=None, rewards=None, shard=Shard(cfg.seed, 1, 1, rows),
                    d=Dist(0, 1, torch.device("cpu")), precision=contextlib.nullcontext,
                    peft_model=peft_model)
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (rows,), generator=g).float()
    batch = Rollout(torch.randint(0, V, (rows, 16), generator=g), torch.ones(rows, 16, dtype=torch.bool),
                    torch.randint(0, V, (rows, T), generator=g), None, torch.ones(rows, T, dtype=torch.bool),
                    torch.ones(rows, dtype=torch.bool), rewards, torch.randn(rows, generator=g))
    return run, batch


def child(variant: str, rows: int, T: int, V: int, D: int, lora_rank: int) -> dict:
    """Runs in a subprocess: one train.optimize step; its peak RSS (MB) above the RSS before it."""
    import train
    from nanoatr import scoring
    if variant == "naive":  # scoring.score looks token_logprobs up in its module at each call
        scoring.token_logprobs = naive_token_logprobs
    run, batch = step_inputs(rows, T, V, D, lora_rank)
    before = rss_mb()
    t0 = time.perf_counter()
    train.optimize(run, batch, step=0)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB -> MB on Linux
    return {"variant": variant, "rows": rows, "tokens": T, "peak_mb": max(0.0, peak - before),
            "seconds": seconds, "full_logits_mb": rows * T * V * 4 / 2**20}


def measure(variant: str, rows: int, T: int = 2048, V: int = 151_936, D: int = 32, lora_rank: int = 32,
            threads: int = 1, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", variant, "--rows", str(rows),
                          "--length", str(T), "--vocab", str(V), "--dim", str(D),
                          "--lora-rank", str(lora_rank), "--threads", str(threads)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=8, help="completions in the step (B)")
    ap.add_argument("--length", type=int, default=2048, help="completion length (T)")
    ap.add_argument("--vocab", type=int, default=151_936, help="V")
    ap.add_argument("--dim", type=int, default=32, help="hidden size D")
    ap.add_argument("--lora-rank", type=int, default=32, help="LoRA rank (0 = full fine-tuning)")
    ap.add_argument("--naive-rows", type=int, default=1, help="rows of the naive step (0 = skip it)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 avoids OpenMP stalls on shared cores)")
    ap.add_argument("--child", choices=["chunked", "naive"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(child(args.child, args.rows, args.length, args.vocab, args.dim, args.lora_rank)))
        return
    kw = dict(T=args.length, V=args.vocab, D=args.dim, lora_rank=args.lora_rank, threads=args.threads)
    print(f"one train.optimize step, T = {args.length}, V = {args.vocab:,}, D = {args.dim}, "
          f"LoRA r = {args.lora_rank}")
    results = [measure("chunked", args.rows, **kw)]
    if args.naive_rows:
        results.append(measure("naive", args.naive_rows, **kw))
    for r in results:
        print(f"   {r['variant']:8s} B = {r['rows']}: peak +{r['peak_mb']:7.0f} MB   {r['seconds']:6.1f} s   "
              f"(one (B, T, V) float32 tensor: {r['full_logits_mb']:7.0f} MB)")
    if len(results) == 2:
        c, n = results
        per_row = n["peak_mb"] / n["rows"]
        print(f"   the chunked step on {c['rows']} rows peaks at {c['peak_mb'] / n['peak_mb']:.2f}x "
              f"the naive step on {n['rows']}; naive ~{per_row:.0f} MB per row, "
              f"~{per_row * c['rows'] / 1024:.0f} GB at B = {c['rows']}")


if __name__ == "__main__":
    main()
