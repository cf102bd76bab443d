"""Rollout throughput: nanoatr.rollout.generate against transformers' generate, same weights, same prompts.

    python bench/rollout.py                          # the issue's setting: nano and small,
                                                     # batch 64 x 64 new tokens, on the CPU
    python bench/rollout.py --presets nano --repeats 1 --new-tokens 4       # a smoke run, seconds
    python bench/rollout.py --threads 1 --profile --presets tiny,100m --batches 8,64 --new-tokens 128 \\
        --samplers multinomial,inverse-cdf          # docs/speed.md's table (before issue 19's defaults)
    python bench/rollout.py --device cuda            # one GPU: 0.6b and 1.7b in bf16, batch 64 and 256 x 512
                                                     # and 2048 new tokens, against eager, hf and hf-static
    python bench/rollout.py --device cuda --presets 0.6b --batches 256 --new-tokens 512 --lora

Ours is generate() as train.py calls it (decoding.decode_plan: on the CPU eager with the steady allocator,
on CUDA compiled and replayed from CUDA graphs), with nanoatr's default sampler (generate() called without
`sampler=`; --samplers names others: "multinomial" as transformers samples, "inverse-cdf" one uniform per
row). Against it (--against; the device's default set):
  hf          transformers' generate, its default dynamic cache (--hf-tokens: timed over fewer tokens)
  hf-static   transformers' generate with cache_implementation="static" (transformers compiles it)
  eager       ours with plan=EAGER, every step launched op by op (the GPU's path before issue 27), timed
              over --eager-tokens tokens only (it is slow; tokens/s hardly depend on the length)
A random Qwen3 of the preset's shape (--dtype: float32 on the CPU, bf16 on CUDA) is shared by both sides:
transformers' Qwen3ForCausalLM is given our very tensors. Prompts have random lengths (left-padded, with an
attention mask for transformers); every row samples exactly its new tokens at temperature 1 (no top-k /
top-p, EOS suppressed). Tokens/s is batch x new tokens over the wall time of the whole call, prefill
included: the median of --repeats calls after --warmup untimed ones, the first call's seconds (on CUDA the
compiling and recording) printed apart. On the CPU the sides are interleaved call by call, so that a change
in machine load hits all alike; on CUDA each side runs in turn, its figures printed as soon as measured.
The last line is ours' tokens/s over the first transformers side's, e.g. `rollout ours/transformers: nano
1.52x, small 1.31x`. --lora (CUDA's matrix) also times ours with rank-32 LoRA on every projection, merged for
the rollout (the default) and unmerged, against the plain model, at the first shape.

Presets (--presets):
  nano   issue 19's small-vocabulary shape: the embedded model's layers (hidden 128, 4 layers, 4 heads,
         2 kv heads, head_dim 32, FFN 384) with a vocabulary of 512, tied embeddings (0.85M parameters)
  small  issue 19's larger shape: vocabulary 32,000, hidden 512, 8 layers, 8 heads, 4 kv heads,
         head_dim 64, FFN 1536, untied embeddings (57.9M parameters; bench/trl_step.py's "58M")
  tiny   the embedded default's shape (data/tiny-qwen3): hidden 128, 4 layers, 4 heads, 2 kv heads,
         head_dim 32, FFN 384, vocabulary 31 (0.79M parameters): per-token overhead dominates
  100m   hidden 768, 12 layers, 12 heads, 4 kv heads, head_dim 64, FFN 2048, vocabulary 32,000,
         tied embeddings (100M parameters): matrix products dominate
  0.6b, 1.7b   Qwen3-0.6B's and Qwen3-1.7B's config.json sizes (bench/gpu_smoke.py's shapes)

CPU only: the FLOP/s the rollout achieves (model FLOPs: 2 per multiply-add of every matrix product,
attention included, lm_head only where a token is sampled) against a large float32 matrix product's on the
same machine in the same run, the ceiling (--no-ceiling skips it); with --profile, where each side's time
goes (matrix products, attention, sampling, KV-cache concatenation, the rest) and the bound that sets on the
speed-up: the same kernels do the matrix products and the attention on both sides, so ours cannot beat
transformers by more than transformers' time over ours' matmul-plus-attention time. Also the speed-up ours
would have if its attention ran at memory speed (the cached keys and values streamed once per step at the
rate measured) and everything else took the time it takes now: what a perfect decode-attention kernel gives.

On a shared machine, measure when `uptime` shows a load below 1.5: two torch threads waiting for a
busy core make every small operation erratic (--threads 1 is steadier, but not the default setup).
"""
import argparse
import dataclasses
import inspect
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from nanoatr import lora  # noqa: E402
from nanoatr.machinery.decoding import decode_plan  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config, files  # noqa: E402
from nanoatr.rollout import EAGER, SAMPLERS, generate  # noqa: E402

QWEN3_0_6B = dict(vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)
PRESETS = {
    "nano": dict(vocab_size=512, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True),
    "small": dict(vocab_size=32_000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=64, tie_word_embeddings=False),
    "tiny": dict(vocab_size=31, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True),
    "100m": dict(vocab_size=32_000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=12, num_key_value_heads=4, head_dim=64, tie_word_embeddings=True),
    "0.6b": QWEN3_0_6B, "1.7b": dict(QWEN3_0_6B, hidden_size=2048, intermediate_size=6144),
}
# Each device's defaults: the CPU's as a user's run, CUDA's a GPU loan's wider matrix.
DEFAULTS = {"cpu": dict(presets="nano,small", batches="64", new_tokens="64", prompt_len="16,32", against="hf",
                        dtype="float32", repeats=5),
            "cuda": dict(presets="0.6b,1.7b", batches="64,256", new_tokens="512,2048", prompt_len="64,256",
                         against="eager,hf,hf-static", dtype="bfloat16", repeats=1)}
AGAINST = ("hf", "hf-static", "eager")
# generate()'s own default sampler, read from its signature when this runs (never assumed here).
DEFAULT_SAMPLER = inspect.signature(generate).parameters["sampler"].default


def random_model(shape: dict, dtype=torch.float32, device="cpu", seed: int = 0) -> Qwen3:
    """Our Qwen3 of `shape` with random weights (seeded): norms 1, the rest N(0, 0.02), as transformers'."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3(Qwen3Config(**shape))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.ones_like(p) if p.dim() == 1 else torch.randn_like(p) * 0.02)
    return model.to(dtype).eval()


def to_hf(model: Qwen3):
    """transformers' Qwen3ForCausalLM on our model's very tensors (no second copy); no EOS (ours has none)."""
    from transformers import Qwen3Config as HFConfig, Qwen3ForCausalLM
    cfg = HFConfig(**{k: v for k, v in files.config_json(dataclasses.asdict(model.config)).items()
                      if k not in ("architectures", "model_type")})
    with torch.device(model.lm_head.weight.device):
        hf = Qwen3ForCausalLM(cfg).to(model.lm_head.weight.dtype)
    hf.load_state_dict(model.state_dict(), assign=True, strict=False)
    hf.tie_weights()
    return hf.eval()


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
    to_hf(random_model(PRESETS["small"], seed=seed)).save_pretrained(out)
    return out


def ragged_prompts(batch: int, lengths: tuple[int, int], vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(lengths[0], lengths[1] + 1, (batch,), generator=g).tolist()
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in sizes]


def timed(fn, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def ours(model, prompts, n, seed=0, sampler="default", plan=None):
    """Our rollout at temperature 1, EOS suppressed, under `plan` (None: the device's, as train.py runs it);
    sampler "default" passes no `sampler=` at all."""
    kw = {} if sampler == "default" else {"sampler": sampler}
    device = model.lm_head.weight.device
    g = torch.Generator(device=device).manual_seed(seed)
    return generate(model, prompts, n, temperature=1.0, generator=g,
                    plan=plan or decode_plan(device, kw.get("sampler", SAMPLERS[0])), **kw)


def hf_generate(hf, prompts, n, seed=0, **kw):
    """transformers' generate on the prompts, left-padded with an attention mask: exactly n new tokens."""
    device, P = hf.lm_head.weight.device, max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts], device=device)
    torch.manual_seed(seed)
    return hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=True,
                       temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, use_cache=True, **kw)


def sampler_name(sampler: str) -> str:
    return f"default = {DEFAULT_SAMPLER}" if sampler == "default" else sampler


def sides(model, hf, prompts, n, samplers=("default",), against=("hf",), eager_tokens=32,
          hf_tokens=0) -> dict:
    """{name: (a call of that side with a seed, its new tokens)}: ours with each sampler, then `against`."""
    out = {}
    for s in samplers:
        name = "ours" if len(samplers) == 1 else f"ours ({sampler_name(s)})"
        out[name] = (lambda seed, s=s: ours(model, prompts, n, seed, s), n)
    if "eager" in against:
        m = min(n, eager_tokens)
        out["eager"] = (lambda seed: ours(model, prompts, m, seed, plan=EAGER), m)
    for kind in [a for a in against if a.startswith("hf")]:
        m = min(n, hf_tokens or n) if kind == "hf" else n
        kw = {"cache_implementation": "static"} if kind == "hf-static" else {}
        out[kind] = (lambda seed, m=m, kw=kw: hf_generate(hf, prompts, m, seed, **kw), m)
    return out


def time_sides(runs: dict, batch: int, n: int, device, warmup=1, repeats=5, figures=None) -> dict:
    """Time each side's calls (seeded 0, 1, ...): interleaved call by call on the CPU, one side after another
    on CUDA, a side's line printed as soon as its calls are done. Adds to `figures` {side: tokens/s,
    "<side> first": the first call's seconds, with a warm-up}; a side out of memory or failing is said and
    left out."""
    figures = {} if figures is None else figures
    calls = [(i, name) for i in range(warmup + repeats) for name in runs]
    if device.type == "cuda":
        calls.sort(key=lambda call: list(runs).index(call[1]))
    times = {name: [] for name in runs}
    for i, name in calls:
        if name not in times:
            continue
        run, m = runs[name]
        try:
            t = timed(lambda: run(i), device)
        except Exception as e:  # out of memory, a transformers without this mode, a failed compile: go on
            if name.startswith("ours") and not isinstance(e, torch.OutOfMemoryError):
                raise
            why = "out of memory" if isinstance(e, torch.OutOfMemoryError) else \
                f"failed ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
            print(f"  batch {batch} x {n} new, {name}: {why}", flush=True)
            del times[name]
            continue
        if warmup:
            figures.setdefault(f"{name} first", t)
        times[name] += [t] if i >= warmup else []
        if len(times[name]) == repeats:
            s = statistics.median(times[name])
            figures[name] = speed = batch * m / s
            mine = figures.get("ours", figures.get(next(iter(runs))))  # ours, or ours with the first sampler
            print(f"  batch {batch} x {n} new, {name}: {speed:.0f} tok/s"
                  + (f" over {m} tokens" if m < n else "")
                  + f" ({s:.2f} s" + (f"; first call {figures[f'{name} first']:.1f} s" if warmup else "")
                  + (f"; ours x{mine / speed:.2f}" if mine and not name.startswith("ours") else "") + ")",
                  flush=True)
    return figures


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


def median_seconds(fn, repeats: int = 5) -> float:
    fn()
    return statistics.median(timed(fn, torch.device("cpu")) for _ in range(repeats))


def matmul_flops_per_s() -> float:
    a = torch.randn(2048, 2048)
    return 2 * 2048 ** 3 / median_seconds(lambda: a @ a)


def measure_ceilings(args) -> tuple[float | None, float | None]:
    """Measure and print the CPU's ceilings: a 2048^3 float32 matmul's FLOP/s (not with --no-ceiling), and
    the bytes per second of summing a 512 MB tensor, how fast this core streams memory (--profile)."""
    ceiling = matmul_flops_per_s() if args.ceiling else None
    stream = 4 * (1 << 27) / median_seconds(torch.ones(1 << 27).sum) if args.profile else None
    if ceiling or stream:
        print("ceiling: "
              + "; ".join(([f"2048^3 float32 matmul {ceiling / 1e9:.1f} GFLOP/s"] if ceiling else [])
                          + ([f"streaming memory {stream / 1e9:.1f} GB/s"] if stream else [])), flush=True)
    return ceiling, stream


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


def print_profile(model, prompts, runs: dict, ref: str, seconds: dict, stream: float):
    """--profile: where ours' (the first side) and the reference's time goes, and the bounds that sets on
    ours' speed-up; `seconds` each side's median."""
    (mine, (run_ours, n)), run_ref = next(iter(runs.items())), runs[ref][0]
    secs = {mine: profile_seconds(lambda: run_ours(0)), ref: profile_seconds(lambda: run_ref(0))}
    for side, sec in secs.items():
        print(f"             {side:12s} time in " + ", ".join(
            f"{k} {100 * sec[k] / sec['total']:.0f}%" for k in [*GROUPS, "other"]))
    # The profiler slows small operations; the matmul and attention kernels it barely touches.
    floor = secs[mine]["matmul"] + secs[mine]["attention"]
    print(f"             bound: ours with only its matmuls and attention left would be "
          f"{seconds[ref] / floor:.2f}x {ref}")
    # Attention at memory speed: the cache streamed once per step, the rest of ours as measured.
    ideal = seconds[mine] - secs[mine]["attention"] + cache_bytes_read(model.config, prompts, n) / stream
    print(f"             with attention at memory speed (and all else as now) ours would be "
          f"{seconds[ref] / ideal:.2f}x {ref}")


def lora_row(model, prompts, n):
    """Ours with rank-32 LoRA on every projection (random, nonzero B), merged for the rollout or not."""
    device = model.lm_head.weight.device
    peft_model = lora.add_adapters(model, 32, 64.0, lora.TARGETS, "random")
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.01)
    plain_plan = decode_plan(device)
    times = {}
    for label, plan in (("merged", plain_plan), ("unmerged", plain_plan._replace(merge_adapters=False))):
        ours(model, prompts, n, plan=plan)  # compiles and records for this model
        times[label] = statistics.median(timed(lambda: ours(model, prompts, n, plan=plan), device)
                                         for _ in range(2))
    peft_model.unload()  # the plain model again, for the shapes that follow
    plain = min(timed(lambda: ours(model, prompts, n), device) for _ in range(2))
    print(f"    LoRA r32 on every projection: merged {times['merged']:.2f} s "
          f"({times['merged'] / plain - 1:+.0%} over the plain model's {plain:.2f} s), "
          f"unmerged {times['unmerged']:.2f} s ({times['unmerged'] / plain - 1:+.0%})", flush=True)


def make_parser() -> argparse.ArgumentParser:
    """The benchmark's flags; those the device sets default to None (DEFAULTS)."""
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--presets", help="comma-separated: " + ", ".join(PRESETS))
    ap.add_argument("--batches", help="comma-separated batch sizes")
    ap.add_argument("--new-tokens", help="comma-separated: tokens generated per row")
    ap.add_argument("--prompt-len", help="MIN,MAX prompt length (uniform)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"])
    ap.add_argument("--against", help="comma-separated, of " + ", ".join(AGAINST))
    ap.add_argument("--samplers", default="default",
                    help="comma-separated samplers to time ours with: default (generate's own, now "
                         f"{DEFAULT_SAMPLER!r}), multinomial, inverse-cdf")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls of each side first")
    ap.add_argument("--repeats", type=int, help="timed calls of each side, their median kept (CPU 5, CUDA 1)")
    ap.add_argument("--eager-tokens", type=int, default=32, help="new tokens of the eager side's timing")
    ap.add_argument("--hf-tokens", type=int, default=0, help="new tokens of the hf side's timing (0: all)")
    ap.add_argument("--lora", action="store_true", help="also LoRA merged / unmerged at the first shape")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                    help="skip measuring the CPU's matmul ceiling (seconds; for smoke runs)")
    ap.add_argument("--profile", action="store_true",
                    help="CPU: also profile one call of ours and the reference: where the time goes, and the "
                         "speed-up ours could reach if everything but its matrix products and attention took "
                         "no time")
    return ap


def parse_args(argv=None):
    """The flags, the device's defaults filled in, the lists split; an unknown name is one error line."""
    ap = make_parser()
    args = ap.parse_args(argv)
    args.device = torch.device(args.device)
    for k, v in DEFAULTS["cuda" if args.device.type == "cuda" else "cpu"].items():
        setattr(args, k, v if getattr(args, k) is None else getattr(args, k))
    for k in ("presets", "samplers", "against", "batches", "new_tokens", "prompt_len"):
        setattr(args, k, [int(x) if k in ("batches", "new_tokens", "prompt_len") else x
                          for x in getattr(args, k).split(",") if x])
    for name, given, known in (("--presets", args.presets, PRESETS), ("--against", args.against, AGAINST),
                               ("--samplers", args.samplers, ("default", *SAMPLERS))):
        if unknown := [x for x in given if x not in known]:
            ap.error(f"{name}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if args.profile and args.device.type != "cpu":
        ap.error("--profile: the CPU's only (torch.profiler's CPU times)")
    args.ceiling &= args.device.type == "cpu"
    return args


def bench_preset(preset: str, args, ceiling: float | None, stream: float | None) -> list[str]:
    """Time one preset at each batch size and length, printing each side; returns ours' ratios, labelled."""
    model = random_model(PRESETS[preset], getattr(torch, args.dtype), args.device)
    hf = to_hf(model) if any(a.startswith("hf") for a in args.against) else None
    print(f"\n{preset}: {model.num_parameters() / 1e6:.2f}M parameters, vocabulary "
          f"{model.config.vocab_size}, {args.dtype}", flush=True)
    ratios = []
    for B in args.batches:
        prompts = ragged_prompts(B, args.prompt_len, model.config.vocab_size)
        for n in args.new_tokens:
            runs = sides(model, hf, prompts, n, args.samplers, args.against, args.eager_tokens,
                         args.hf_tokens)
            speed = time_sides(runs, B, n, args.device, args.warmup, args.repeats)
            mine = [k for k in runs if k.startswith("ours")]
            ref = next((a for a in args.against if a.startswith("hf")), list(runs)[-1])  # the first hf side
            for name in [k for k in mine if ceiling and k in speed]:
                flops = rollout_flops(model.config, prompts, n) * speed[name] / (B * n)
                print(f"             {name}: {flops / 1e9:.2f} GFLOP/s = {100 * flops / ceiling:.1f}% of "
                      "matmul")
            label = (preset + (f"/b{B}" if len(args.batches) > 1 else "")
                     + (f"/n{n}" if len(args.new_tokens) > 1 else ""))
            ratios += [label + (f"/{s}" if len(mine) > 1 else "") + f" {speed[k] / speed[ref]:.2f}x"
                       for s, k in zip(args.samplers, mine) if k in speed and ref in speed]
            if args.profile:
                print_profile(model, prompts, runs, ref, {k: B * m / speed[k] for k, (_, m) in runs.items()},
                              stream)
            if args.lora and B == args.batches[0] and n == args.new_tokens[0]:
                lora_row(model, prompts, n)
            torch.cuda.empty_cache() if args.device.type == "cuda" else None
    return ratios


def main(argv=None):
    args = parse_args(argv)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers
    transformers.utils.logging.disable_progress_bar()  # save_pretrained's "Writing model shards" bar
    threads = f"{torch.get_num_threads()} threads ({'--threads' if args.threads else 'torch default'})"
    where = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else f"cpu, {threads}"
    lo, hi = args.prompt_len
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {where}; prompts {lo}-{hi} "
          f"tokens, sampling T=1, ours with sampler {', '.join(map(sampler_name, args.samplers))}; medians "
          f"of {args.repeats} after {args.warmup} warm-up", flush=True)
    ceiling, stream = measure_ceilings(args)
    ratios = []
    for preset in args.presets:
        ratios += bench_preset(preset, args, ceiling, stream)
    if ceiling:
        print(f"\nceiling again: {matmul_flops_per_s() / 1e9:.1f} GFLOP/s "
              "(a large drift means the load changed)")
    # the last line: tokens/s ours over transformers'
    print("rollout ours/transformers: " + ", ".join(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
