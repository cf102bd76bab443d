"""Rollout throughput: nanoatr.rollout.generate vs transformers' generate, same weights, same prompts.

    python bench/rollout.py                          # the issue's setting: nano and small,
                                                     # batch 64 x 64 new tokens
    python bench/rollout.py --presets nano --repeats 1 --new-tokens 4       # a smoke run, seconds
    python bench/rollout.py --threads 1 --profile --presets tiny,100m --batches 8,64 --new-tokens 128 \\
        --samplers multinomial,inverse-cdf          # docs/speed.md's table (before issue 19's defaults)

By default it runs at the defaults a user runs: torch's own thread count (--threads N to change it)
and nanoatr's default sampler (generate() called without `sampler=`, so whatever rollout.generate's
default is when this runs; --samplers names others), on the two shapes of issue 19 ("nano", "small"),
64 prompts x 64 new tokens at temperature 1. Its last line is the ratio of tokens per second, ours
over transformers', e.g. `rollout ours/transformers: nano 1.52x, small 1.31x`.

A random transformers Qwen3ForCausalLM is saved to a temporary directory and loaded by
nanoatr.model.Qwen3.from_pretrained, so both sides run the very same float32 weights. Prompts have
random lengths (left-padded, with an attention mask for transformers); both sample at temperature 1
(no top-k / top-p) with EOS suppressed, so every run produces exactly batch x new-tokens tokens.
Timings are medians over --repeats, after --warmup untimed runs, with ours and transformers'
interleaved so that a change in machine load hits both alike. Ours runs once per --samplers entry:
"default" (generate's default sampler, named in the output), "multinomial" (torch.multinomial, as
transformers samples) or "inverse-cdf" (rollout.draw's one-uniform-per-row sampler, which matters at
large vocabularies).

Presets (--presets):
  nano   issue 19's small-vocabulary shape: the embedded model's layers (hidden 128, 4 layers, 4 heads,
         2 kv heads, head_dim 32, FFN 384) with a vocabulary of 512, tied embeddings (0.85M parameters)
  small  issue 19's larger shape: vocabulary 32,000, hidden 512, 8 layers, 8 heads, 4 kv heads,
         head_dim 64, FFN 1536, untied embeddings (57.9M parameters; bench/trl_step.py's "58M")
  tiny   the embedded default's shape (data/tiny-qwen3): hidden 128, 4 layers, 4 heads, 2 kv heads,
         head_dim 32, FFN 384, vocabulary 31 (0.79M parameters): per-token overhead dominates
  100m   hidden 768, 12 layers, 12 heads, 4 kv heads, head_dim 64, FFN 2048, vocabulary 32,000,
         tied embeddings (100M parameters): matrix products dominate

With --profile, also where each side's time goes (matrix products, attention, sampling, KV-cache
concatenation, the rest) and the bound that sets on the speed-up: the same kernels do the matrix
products and the attention on both sides, so ours cannot beat transformers by more than transformers'
time over ours' matmul-plus-attention time. Also: the speed-up ours would have if its attention ran
at memory speed (the cached keys and values streamed once per step at the rate measured below) and
everything else took the time it takes now -- what a perfect decode-attention kernel could give.

Also printed: the FLOP/s the rollout achieves (model FLOPs: 2 per multiply-add of every matrix
product, attention included, lm_head only where a token is sampled) against the FLOP/s of a large
float32 matrix product on the same machine in the same run -- the ceiling.

On a shared machine, measure when `uptime` shows a load below 1.5: two torch threads waiting for a
busy core make every small operation erratic (--threads 1 is steadier, but not the default setup).
"""
import argparse
import inspect
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from nanoatr.rollout import SAMPLERS  # noqa: E402
from nanoatr.model import Qwen3  # noqa: E402
from nanoatr.rollout import generate  # noqa: E402
from nanoatr.machinery.decoding import decode_plan  # noqa: E402

PRESETS = {
    "nano": dict(vocab_size=512, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True),
    "small": dict(vocab_size=32_000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=64, tie_word_embeddings=False),
    "tiny": dict(vocab_size=31, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True),
    "100m": dict(vocab_size=32_000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=12, num_key_value_heads=4, head_dim=64, tie_word_embeddings=True),
}
# generate()'s own default sampler, read from its signature when this runs (never assumed here).
DEFAULT_SAMPLER = inspect.signature(generate).parameters["sampler"].default


def random_qwen3(preset: str, seed: int = 0):
    """A transformers Qwen3ForCausalLM of the preset's shape with random weights (seeded)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen3Config(**PRESETS[preset], max_position_embeddings=4096,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return Qwen3ForCausalLM(cfg)


def build(preset: str, tmp: str, seed: int = 0):
    """(transformers model, our model) with the same random weights."""
    hf = random_qwen3(preset, seed).eval()
    hf.generation_config.eos_token_id = None  # EOS suppressed: every row runs the whole budget
    hf.generation_config.pad_token_id = 0
    hf.save_pretrained(tmp)
    return hf, Qwen3.from_pretrained(tmp).eval()


def big_char_tokenizer(vocab_size: int):
    """The embedded model's character tokenizer (its special tokens, characters and "\\boxed{"), grown to
    `vocab_size` tokens with CJK / Hangul filler characters, one token each: every id decodes."""
    sys.path.insert(0, str(ROOT / "data"))
    from make_default import char_tokenizer
    tiny = json.loads((ROOT / "data/tiny-qwen3/tokenizer.json").read_text())
    added = tiny["added_tokens"]
    specials = [t["content"] for t in sorted(added, key=lambda t: t["id"]) if t["special"]]
    words = [t["content"] for t in added if not t["special"]]
    chars = "".join(t for t, _ in sorted(tiny["model"]["vocab"].items(), key=lambda kv: kv[1])
                    if t not in specials and t not in words)
    fillers = [chr(c) for c in [*range(0x4E00, 0x9FA6), *range(0xAC00, 0xD7A4)]]  # CJK ideographs, Hangul
    n = vocab_size - len(specials) - len(chars) - len(words)
    if not 0 <= n <= len(fillers):
        raise ValueError(f"cannot build a character tokenizer of {vocab_size} tokens")
    tok = char_tokenizer(chars + "".join(fillers[:n]), special=tuple(specials), words=words)
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def build_58m(out: Path, seed: int = 0):
    """A random Qwen3 of the "small" preset's shape and a 32,000-token character tokenizer, saved in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    big_char_tokenizer(PRESETS["small"]["vocab_size"]).save(str(out / "tokenizer.json"))
    tok_cfg = json.loads((ROOT / "data/tiny-qwen3/tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))
    random_qwen3("small", seed).save_pretrained(out)
    return out


def random_prompts(batch: int, vocab: int, lo: int, hi: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (batch,), generator=g).tolist()
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in lengths]


def hf_inputs(prompts):
    """Left-padded ids and attention mask, as transformers' generate wants them for a decoder."""
    P = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), P, dtype=torch.long)
    mask = torch.zeros(len(prompts), P, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p):] = torch.tensor(p)
        mask[i, P - len(p):] = 1
    return ids, mask


def rollout_flops(cfg, prompts, new_tokens: int) -> float:
    """Model FLOPs of prefill + decode: 2 x multiply-adds of the projections, attention scores and
    weighted sums over the context each token sees, and lm_head once per sampled token."""
    D, L, H, hd, F, V = (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_dim,
                         cfg.intermediate_size, cfg.vocab_size)
    per_token = L * (D * H * hd * 2 + D * cfg.num_key_value_heads * hd * 2 + 3 * D * F)  # q,o + k,v + MLP
    total = 0.0
    for p in prompts:
        n = len(p) + new_tokens - 1  # tokens fed through the layers (the last sample is never fed)
        total += n * per_token + L * H * hd * 2 * n * (n + 1) / 2  # QK^T and PV over a causal context
        total += new_tokens * D * V  # lm_head where a token is drawn
    return 2 * total


def cache_bytes_read(cfg, prompts, new_tokens: int) -> float:
    """Bytes of cached keys and values the decode steps read: every layer, every row, every slot filled
    so far (the left-padded prompt width included), once per step."""
    P = max(len(p) for p in prompts)
    slots = sum(P + t for t in range(1, new_tokens))
    return 2 * cfg.num_hidden_layers * len(prompts) * cfg.num_key_value_heads * cfg.head_dim * 4 * slots


def matmul_flops_per_s(n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times)


def memory_bytes_per_s(n: int = 1 << 27, repeats: int = 5) -> float:
    """Bytes per second of summing a 512 MB float32 tensor: how fast this core streams memory."""
    x = torch.ones(n)
    x.sum()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t0)
    return 4 * n / statistics.median(times)


def ours_generate(ours, prompts, new_tokens, sampler, generator=None):
    """Our rollout at temperature 1 with EOS suppressed, under the device's plan as train.py runs it
    (decode_plan: on the CPU, the steady allocator); sampler "default" passes no `sampler=` at all."""
    kw = {} if sampler == "default" else {"sampler": sampler}
    plan = decode_plan(ours.lm_head.weight.device, kw.get("sampler", SAMPLERS[0]))
    return generate(ours, prompts, new_tokens, temperature=1.0, eos_token_id=None, generator=generator,
                    plan=plan, **kw)


def sampler_name(sampler: str) -> str:
    return f"default = {DEFAULT_SAMPLER}" if sampler == "default" else sampler


def time_all(hf, ours, prompts, new_tokens, warmup, repeats, samplers):
    """Median seconds of transformers' generate and of ours with each sampler, interleaved."""
    ids, mask = hf_inputs(prompts)

    def run_ours(seed, sampler):
        out = ours_generate(ours, prompts, new_tokens, sampler, generator=torch.Generator().manual_seed(seed))
        assert out.tokens.shape == (len(prompts), new_tokens)

    def run_hf(seed):
        torch.manual_seed(seed)
        out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=True,
                          temperature=1.0, top_k=0, top_p=1.0, use_cache=True)
        assert out.shape == (len(prompts), ids.shape[1] + new_tokens)

    runs = {"transformers": run_hf, **{s: (lambda seed, s=s: run_ours(seed, s)) for s in samplers}}
    times = {k: [] for k in runs}
    for i in range(warmup + repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run(i)
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


GROUPS = {"matmul": ("aten::mm", "aten::addmm", "aten::bmm"), "attention": ("scaled_dot_product",),
          "sampling": ("aten::exponential_", "aten::multinomial", "aten::searchsorted", "aten::rand"),
          "KV cat": ("aten::cat",)}


def profile_seconds(run) -> dict:
    """Self CPU seconds of one run by kind of operation (torch.profiler), and the total."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    times = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    out = {g: sum(t for k, t in times.items() if any(n in k for n in names)) for g, names in GROUPS.items()}
    out["other"] = sum(times.values()) - sum(out.values())
    return out | {"total": sum(times.values())}


def make_parser() -> argparse.ArgumentParser:
    """The benchmark's flags: the shapes, batches and samplers to time, threads, ceiling and profile."""
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="nano,small", help="comma-separated: " + ", ".join(PRESETS))
    ap.add_argument("--batches", default="64", help="comma-separated batch sizes")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens generated per row")
    ap.add_argument("--prompt-len", default="16,32", help="min,max prompt length (uniform)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each side first")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each side; medians are reported")
    ap.add_argument("--samplers", default="default",
                    help="comma-separated samplers to time ours with: default (generate's own, now "
                         f"{DEFAULT_SAMPLER!r}), multinomial, inverse-cdf")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                    help="skip measuring the matmul ceiling (seconds; for smoke runs): "
                         "no %% of matmul column")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one run of each side: where the time goes, and the speed-up over "
                         "transformers that ours could reach if everything but its matrix products and "
                         "attention took no time")
    return ap


def measure_ceilings(args) -> tuple[float | None, float | None]:
    """Measure and print the ceilings: a float32 matmul's FLOP/s (not with --no-ceiling), memory speed."""
    ceiling = matmul_flops_per_s() if args.ceiling else None
    stream = memory_bytes_per_s() if args.profile else None  # only --profile's attention bound uses it
    if ceiling or stream:
        print("ceiling: "
              + "; ".join(([f"2048^3 float32 matmul {ceiling / 1e9:.1f} GFLOP/s"] if ceiling else [])
                          + ([f"streaming memory {stream / 1e9:.1f} GB/s"] if stream else [])), flush=True)
    return ceiling, stream


def print_profile(hf, ours, prompts, t: dict, sampler: str, new_tokens: int, stream: float):
    """--profile: where each side's time goes, and the bounds that sets on ours' speed-up."""
    ids, mask = hf_inputs(prompts)
    secs = {
        "ours": profile_seconds(lambda: ours_generate(ours, prompts, new_tokens, sampler)),
        "transformers": profile_seconds(lambda: hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=True,
            temperature=1.0, top_k=0, top_p=1.0, use_cache=True))}
    for side, sec in secs.items():
        print(f"             {side:12s} time in " + ", ".join(
            f"{k} {100 * sec[k] / sec['total']:.0f}%" for k in [*GROUPS, "other"]))
    # The profiler slows small operations; the matmul and attention kernels it barely touches.
    floor = secs["ours"]["matmul"] + secs["ours"]["attention"]
    print(f"             bound: ours with only its matmuls and attention left would be "
          f"{t['transformers'] / floor:.2f}x transformers")
    # Attention at memory speed: the cache streamed once per step, the rest of ours as measured.
    ideal = (t[sampler] - secs["ours"]["attention"]
             + cache_bytes_read(ours.config, prompts, new_tokens) / stream)
    print(f"             with attention at memory speed (and all else as now) ours would be "
          f"{t['transformers'] / ideal:.2f}x transformers")


def bench_preset(preset: str, batches: list[int], samplers: list[str], lo: int, hi: int, args,
                 ceiling: float | None, stream: float | None) -> list[str]:
    """Time one preset at each batch size and print each side's tokens/s; returns ours' ratios, labelled."""
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        hf, ours = build(preset, tmp)
    print(f"\n{preset}: {ours.num_parameters() / 1e6:.2f}M parameters, "
          f"vocabulary {ours.config.vocab_size}")
    for B in batches:
        prompts = random_prompts(B, ours.config.vocab_size, lo, hi)
        t = time_all(hf, ours, prompts, args.new_tokens, args.warmup, args.repeats, samplers)
        n = B * args.new_tokens
        flops = rollout_flops(ours.config, prompts, args.new_tokens)
        print(f"  batch {B:3d}: transformers {n / t['transformers']:8.0f} tok/s")
        for sampler in samplers:
            ratio = t["transformers"] / t[sampler]
            print(f"             ours ({sampler_name(sampler):11s}) {n / t[sampler]:8.0f} tok/s   ratio "
                  f"{ratio:4.2f}x   {flops / t[sampler] / 1e9:6.2f} GFLOP/s"
                  + (f" = {100 * flops / t[sampler] / ceiling:4.1f}% of matmul" if ceiling else ""),
                  flush=True)
            label = (preset + (f"/b{B}" if len(batches) > 1 else "")
                     + (f"/{sampler}" if len(samplers) > 1 else ""))
            ratios.append(f"{label} {ratio:.2f}x")
        if args.profile:
            print_profile(hf, ours, prompts, t, samplers[0], args.new_tokens, stream)
    return ratios


def main(argv=None):
    ap = make_parser()
    args = ap.parse_args(argv)
    presets, batches, samplers = (args.presets.split(","), [int(b) for b in args.batches.split(",")],
                                  args.samplers.split(","))
    for name, given, known in (("--presets", presets, PRESETS),
                               ("--samplers", samplers, ("default", *SAMPLERS))):
        if unknown := [x for x in given if x not in known]:
            ap.error(f"{name}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers
    transformers.utils.logging.disable_progress_bar()  # save_pretrained's "Writing model shards" bar
    lo, hi = map(int, args.prompt_len.split(","))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads ({'--threads' if args.threads else 'torch default'}); "
          f"{args.new_tokens} new tokens, prompts {lo}-{hi} tokens, sampling T=1, "
          f"ours with sampler {', '.join(map(sampler_name, samplers))}; medians of "
          f"{args.repeats} after {args.warmup} warm-up", flush=True)
    ceiling, stream = measure_ceilings(args)
    ratios = []
    for preset in presets:
        ratios += bench_preset(preset, batches, samplers, lo, hi, args, ceiling, stream)
    if ceiling:
        print(f"\nceiling again: {matmul_flops_per_s() / 1e9:.1f} GFLOP/s "
              "(a large drift means the load changed)")
    # the last line: tokens/s ours over transformers'
    print("rollout ours/transformers: " + ", ".join(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
