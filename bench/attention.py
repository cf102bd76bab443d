"""Decode attention on CPU: one query token per row against a preallocated KV cache, five ways.

    python bench/attention.py                 # tiny and 100m shapes, batch 64, 96 cached tokens
    python bench/attention.py --presets 100m --context 64,128

Why this benchmark exists: at the tiny preset attention is the largest part of a decode step (see
bench/rollout.py --profile), and no PyTorch way of computing it found so far comes near the time it
takes to stream the cached keys and values from memory. Each variant attends the same queries over
the same cache, laid out as nanoatr.model.KVCache lays it out (one tensor per layer, (B, H_kv, T_max,
D), read through a [:, :, :T] slice), rotating over the layers of the preset so that, as in a real
decode step, a layer's cache is not still in the core's cache from the previous call:

  sdpa, enable_gqa   F.scaled_dot_product_attention with enable_gqa=True (what transformers calls)
  sdpa, heads packed the query heads of one kv head as one query block (what nanoatr.model does)
  sdpa, copy first   the same on contiguous copies of the slices (the copy timed too), as a cache that
                     is concatenated at every step (transformers) hands SDPA freshly written memory
  bmm                baddbmm (scores + mask) -> softmax -> bmm, one batched product each
  compiled           torch.compile (inductor C++) of the elementwise formula, dynamic shapes
  flex_attention     torch.compile'd flex_attention with the padding mask as a score_mod

The floor is the bytes of the keys and values read once at the streaming rate of this core
(summing a 512 MB tensor): no implementation can be faster. Times are medians per layer call.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rollout import PRESETS, memory_bytes_per_s  # noqa: E402  (bench/rollout.py)


def variants(scale: float):
    def gqa(q, k, v, bias, valid):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)

    def packed(q, k, v, bias, valid):
        B, H, _, D = q.shape
        return F.scaled_dot_product_attention(q.view(B, k.shape[1], -1, D), k, v,
                                              attn_mask=bias).view(B, H, 1, D)

    def copied(q, k, v, bias, valid):
        return packed(q, k.contiguous(), v.contiguous(), bias, valid)

    def bmm(q, k, v, bias, valid):
        B, H, _, D = q.shape
        Hkv, T = k.shape[1], k.shape[2]
        qg = q.reshape(B * Hkv, H // Hkv, D)
        scores = torch.baddbmm(bias.expand(B, Hkv, H // Hkv, T).reshape(B * Hkv, -1, T), qg,
                               k.reshape(B * Hkv, T, D).transpose(1, 2), alpha=scale)
        return torch.bmm(scores.softmax(-1), v.reshape(B * Hkv, T, D)).view(B, H, 1, D)

    def elementwise(q, k, v, bias, valid):
        B, H, _, D = q.shape
        qg = q.view(B, k.shape[1], -1, 1, D)
        p = ((qg * k[:, :, None]).sum(-1) * scale + bias[:, :, None, 0]).softmax(-1)  # (B, H_kv, G, T)
        return (p[..., None] * v[:, :, None]).sum(-2).reshape(B, H, 1, D)

    def flex(q, k, v, bias, valid):
        from torch.nn.attention.flex_attention import flex_attention

        def pad_mask(score, b, h, q_idx, kv_idx):
            return torch.where(valid[b, kv_idx], score, -float("inf"))
        return flex_attention(q, k, v, score_mod=pad_mask, enable_gqa=True)

    return {"sdpa, enable_gqa": gqa, "sdpa, heads packed": packed, "sdpa, copy first": copied, "bmm": bmm,
            "compiled": torch.compile(elementwise, dynamic=True), "flex_attention": torch.compile(flex)}


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="tiny,100m", help="comma-separated: " + ", ".join(PRESETS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", default="96", help="comma-separated numbers of cached tokens attended")
    ap.add_argument("--max-len", type=int, default=160, help="cache slots per row (prompt + new tokens)")
    ap.add_argument("--repeats", type=int, default=30, help="timed passes over the layers")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    stream = memory_bytes_per_s()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}; "
          f"streaming memory {stream / 1e9:.1f} GB/s")
    summary = []
    for preset in args.presets.split(","):
        c = PRESETS[preset]
        B, H, Hkv, D, L = (args.batch, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                           c["num_hidden_layers"])
        g = torch.Generator().manual_seed(0)
        caches = [(torch.randn(B, Hkv, args.max_len, D, generator=g),
                   torch.randn(B, Hkv, args.max_len, D, generator=g))
                  for _ in range(L)]
        for T in map(int, args.context.split(",")):
            q = torch.randn(B, H, 1, D, generator=g)
            valid = torch.ones(B, T, dtype=torch.bool)
            valid[: B // 4, : T // 8] = False  # left padding on a quarter of the rows
            bias = torch.zeros(B, 1, 1, T).masked_fill_(~valid[:, None, None], float("-inf"))
            reference = F.scaled_dot_product_attention(q, caches[0][0][:, :, :T], caches[0][1][:, :, :T],
                                                       attn_mask=bias, enable_gqa=True)
            floor = 2 * B * Hkv * T * D * 4 / stream
            print(f"\n{preset}: batch {B}, {H} heads / {Hkv} kv heads of {D}, {T} cached tokens, {L} layers; "
                  f"floor {floor * 1e6:.0f} us per layer")
            with torch.inference_mode():
                for name, fn in variants(D ** -0.5).items():
                    err = (fn(q, caches[0][0][:, :, :T], caches[0][1][:, :, :T], bias, valid)
                           - reference).abs().max()
                    times = []
                    for i in range(args.repeats + 2):
                        t0 = time.perf_counter()
                        for k, v in caches:
                            fn(q, k[:, :, :T], v[:, :, :T], bias, valid)
                        if i >= 2:  # the first passes compile and warm up
                            times.append((time.perf_counter() - t0) / L)
                    t = statistics.median(times)
                    print(f"  {name:18s} {t * 1e6:7.0f} us   {t / floor:5.1f}x the floor   "
                          f"max |diff| {err:.1e}")
                    summary.append(f"{preset}/T{T}/{name.split(',')[-1].strip()} {t / floor:.1f}x")
    print("\nsummary: time over the memory floor: " + ", ".join(summary))


if __name__ == "__main__":
    main()
