"""Benchmark of nanoatr/loss.py: the compiled vs the eager loss, and chunked vs naive log-probs.

    python bench/loss.py                      # both parts, ~3 minutes on 2 CPU cores
    python bench/loss.py --skip-memory --methods kl3,clip,gspo

1. Loss time: forward + backward of policy_loss on B x T = 64 x 1024 tokens (float32, random
   lengths), eager vs torch.compile, median over --repeats after --warmup calls (the warm-up
   includes compiling).  Target: compiled >= 1.5x faster.
2. Peak memory of token_logprobs (chunked) vs token_logprobs_naive, forward + backward with
   entropy, at V = 151,936 (Qwen3's vocabulary) and D = 256.  Each variant runs in a fresh
   subprocess and reports its peak RSS above the RSS it had once the inputs were allocated.
   The naive (B, T, V) float32 logits are 0.6 GB per 1,024 tokens, so the naive side runs on
   --mem-tokens tokens (64 x 1024 would need ~40 GB per copy).  Target: chunked <= 1/4 of naive.
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nanoatr.loss import policy_loss  # noqa: E402
from nanoatr.scoring import token_logprobs, token_logprobs_naive  # noqa: E402


def loss_inputs(B: int, T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old_logp = -3 * torch.rand(B, T, generator=g)
    logp = old_logp + 0.3 * torch.randn(B, T, generator=g)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    advantages = torch.randn(B, generator=g)
    return logp, old_logp, advantages, mask


def time_loss(method: str, compile: bool, B: int, T: int, warmup: int, repeats: int) -> float:
    """Median seconds of one forward + backward of the aggregated loss."""
    logp, old_logp, advantages, mask = loss_inputs(B, T)
    full_kl = 0.1 * torch.rand(B, T) if method in ("kl-full", "truly-ppo") else None
    logp.requires_grad_()
    times = []
    for i in range(warmup + repeats):
        logp.grad = None
        t0 = time.perf_counter()
        loss, _ = policy_loss(method, logp, old_logp, advantages, mask, num_sequences=B,
                              num_tokens=int(mask.sum()), max_new_tokens=T, compile=compile, full_kl=full_kl)
        loss.backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[warmup:])


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def memory_child(variant: str, tokens: int, V: int, D: int, chunk_size: int) -> dict:
    """Runs in a subprocess: peak RSS (MB) of one forward + backward above the inputs' RSS."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, tokens, D, generator=g).requires_grad_()
    weight = (0.05 * torch.randn(V, D, generator=g)).requires_grad_()
    targets = torch.randint(0, V, (1, tokens), generator=g)
    before = rss_mb()
    t0 = time.perf_counter()
    if variant == "chunked":
        logp, entropy = token_logprobs(hidden, weight, targets, chunk_size=chunk_size, with_entropy=True)
    else:
        logp, entropy = token_logprobs_naive(hidden, weight, targets, with_entropy=True)
    (logp.sum() + entropy.sum()).backward()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB -> MB on Linux
    return {"variant": variant, "tokens": tokens, "peak_mb": max(0.0, peak - before), "seconds": seconds}


def measure_memory(variant: str, tokens: int, V: int, D: int, chunk_size: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", variant, "--mem-tokens", str(tokens),
                          "--threads", str(torch.get_num_threads()),
                          "--vocab", str(V), "--dim", str(D), "--chunk-size", str(chunk_size)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default="kl3,clip", help="comma-separated --clip methods to time")
    ap.add_argument("--batch", type=int, default=64, help="B of the timed loss")
    ap.add_argument("--length", type=int, default=1024, help="T of the timed loss")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls first (include compiling)")
    ap.add_argument("--repeats", type=int, default=20, help="timed calls; the median is reported")
    ap.add_argument("--mem-tokens", type=int, default=2048, help="tokens of the memory comparison")
    ap.add_argument("--vocab", type=int, default=151_936, help="V of the memory comparison")
    ap.add_argument("--dim", type=int, default=256, help="D of the memory comparison")
    ap.add_argument("--chunk-size", type=int, default=512, help="token_logprobs chunk size")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default); on a shared "
                    "machine use 1: OpenMP waiting for busy cores makes each eager op ~10 ms")
    ap.add_argument("--skip-memory", action="store_true", help="only time the loss")
    ap.add_argument("--child", choices=["chunked", "naive"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(memory_child(args.child, args.mem_tokens, args.vocab, args.dim, args.chunk_size)))
        return

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"\n1. loss forward+backward, B x T = {args.batch} x {args.length}, median of {args.repeats}")
    for method in args.methods.split(","):
        eager = time_loss(method, False, args.batch, args.length, args.warmup, args.repeats)
        compiled = time_loss(method, True, args.batch, args.length, args.warmup, args.repeats)
        print(f"   {method:12s} eager {eager * 1e3:7.2f} ms   compiled {compiled * 1e3:7.2f} ms   "
              f"speed-up {eager / compiled:4.1f}x")
    if args.skip_memory:
        return
    print(f"\n2. log-probs + entropy forward+backward, V = {args.vocab:,}, D = {args.dim}, "
          f"{args.mem_tokens} tokens, chunk {args.chunk_size}")
    results = {v: measure_memory(v, args.mem_tokens, args.vocab, args.dim, args.chunk_size)
               for v in ("chunked", "naive")}
    for v, r in results.items():
        print(f"   {v:8s} peak +{r['peak_mb']:8.0f} MB   {r['seconds']:6.2f} s")
    if min(r["peak_mb"] for r in results.values()) <= 0:  # in a process that held the memory already
        print("   chunked / naive peak = n/a: a peak did not rise above the memory the process held")
        return
    ratio = results["chunked"]["peak_mb"] / results["naive"]["peak_mb"]
    print(f"   chunked / naive peak = {ratio:.3f} (1/{1 / ratio:.1f}); the naive (B, T, V) float32 logits "
          f"alone would be {args.batch * args.length * args.vocab * 4 / 2**30:.1f} GiB "
          f"at {args.batch} x {args.length}")


if __name__ == "__main__":
    main()
