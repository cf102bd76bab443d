"""Rollout speed on one GPU: nanoatr.rollout.generate against transformers' generate, random Qwen3 in bf16.

    python bench/gpu_rollout.py                                  # the issue's matrix (0.6B and 1.7B shapes)
    python bench/gpu_rollout.py --models 0.6b --batches 256 --new-tokens 512 --against eager,hf,hf-static
    python bench/gpu_rollout.py --device cpu --models tiny --batches 4 --new-tokens 16   # the code path,
                                                                                         # seconds

Random weights in the shapes of Qwen3-0.6B and Qwen3-1.7B (their config.json sizes), bf16, on one
GPU; ragged prompts of --prompt-len tokens (64-256: left-padded); every row samples exactly
--new-tokens tokens at temperature 1 (no top-k / top-p, EOS suppressed). Printed per shape, in
tokens per second (batch x new tokens over the wall time of the whole call, prefill included):

  ours        generate() as train.py calls it: on CUDA compiled and replayed from CUDA graphs
              (decoding.decode_plan); its first call, which compiles and records, is timed apart
  eager       generate(plan=eager): every step launched op by op from Python (the path before issue 27),
              timed over --eager-tokens tokens only (it is slow; tokens/s hardly depend on the length)
  hf          transformers' generate, its default dynamic cache (--hf-tokens: timed over fewer tokens)
  hf-static   transformers' generate with cache_implementation="static" (transformers compiles the
              forward itself for a static cache); its first call is timed apart

bench/gpu_check.py runs the figures a GPU loan needs (this one's 0.6B and 1.7B rows among them) in
one call of under 8 minutes; this script is for a wider matrix.
--lora times ours with LoRA adapters (rank 32 on every projection, as --preset paper) merged for the
rollout (the default) and unmerged, against the plain model, at the first shape.
"""
import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nanoatr import lora  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config, files  # noqa: E402
from nanoatr.machinery.decoding import decode_plan
from nanoatr.rollout import EAGER  # noqa: E402 (the CPU's plan: every step launched op by op)
from nanoatr.rollout import generate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_smoke import SHAPES  # noqa: E402  (Qwen3-0.6B's and 1.7B's config.json sizes, and a tiny one)



def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_model(shape: str, dtype, device, seed: int = 0) -> Qwen3:
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3(Qwen3Config(**SHAPES[shape]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.ones_like(p) if p.dim() == 1 else torch.randn_like(p) * 0.02)
    return model.to(dtype).eval()


def ragged_prompts(batch: int, lengths: tuple[int, int], vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(lengths[0], lengths[1] + 1, (batch,), generator=g).tolist()
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in sizes]


def timed(fn, device) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def ours(model, prompts, n, device, plan=None):
    """Our rollout under `plan` (None: decode_plan's for the device, as train.py runs it)."""
    g = torch.Generator(device=device).manual_seed(0)
    return generate(model, prompts, n, temperature=1.0, generator=g, plan=plan or decode_plan(device))


def hf_generate(hf, prompts, n, device, **kw):
    P = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts], device=device)
    return hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=True,
                       temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, **kw)


def to_hf(model: Qwen3):
    from transformers import Qwen3Config as HFConfig, Qwen3ForCausalLM
    cfg = HFConfig(**{k: v for k, v in files.config_json(dataclasses.asdict(model.config)).items()
                      if k not in ("architectures", "model_type")})
    with torch.device(model.lm_head.weight.device):
        hf = Qwen3ForCausalLM(cfg).to(model.lm_head.weight.dtype)
    hf.load_state_dict(model.state_dict(), assign=True, strict=False)  # shares our weights: no second copy
    hf.tie_weights()
    hf.generation_config.eos_token_id = None
    return hf.eval()


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="0.6b,1.7b", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--new-tokens", default="512,2048")
    ap.add_argument("--prompt-len", default="64:256", help="prompt lengths drawn uniformly in MIN:MAX")
    ap.add_argument("--against", default="eager,hf,hf-static", help="comma-separated: eager, hf, hf-static")
    ap.add_argument("--eager-tokens", type=int, default=32, help="new tokens of the eager path's timing")
    ap.add_argument("--hf-tokens", type=int, default=0,
                    help="new tokens of the hf (dynamic cache) timing (0: all)")
    ap.add_argument("--repeats", type=int, default=1, help="timed calls of ours per shape (the best is kept)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--lora", action="store_true", help="also LoRA merged / unmerged at the first shape")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA")
        return 0
    import transformers
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    dtype = getattr(torch, args.dtype)
    lo, hi = (int(x) for x in args.prompt_len.split(":"))
    against = [a for a in args.against.split(",") if a]
    first_shape = True
    for shape in args.models.split(","):
        model = random_model(shape, dtype, device)
        print(f"\n{shape}: {model.num_parameters() / 1e9:.2f}B parameters, {args.dtype}, "
              f"prompts {lo}-{hi} tokens", flush=True)
        hf = to_hf(model) if any(a.startswith("hf") for a in against) else None
        for B in (int(b) for b in args.batches.split(",")):
            prompts = ragged_prompts(B, (lo, hi), model.config.vocab_size)
            for n in (int(x) for x in args.new_tokens.split(",")):
                measure(model, hf, prompts, n, device, against, args.repeats, args.eager_tokens,
                        args.hf_tokens)
                if args.lora and first_shape:
                    lora_row(model, prompts, n, device)
                first_shape = False
                torch.cuda.empty_cache() if device.type == "cuda" else None
        del model, hf
    return 0


def measure(model, hf, prompts, n, device, against, repeats=1, eager_tokens=32, hf_tokens=0):
    """Ours, then each of `against` in its order, each printed (flushed) as soon as it is measured."""
    mine = time_ours(model, prompts, n, device, repeats).get("ours")
    if mine is None:
        return
    if "eager" in against:
        time_eager(model, prompts, n, device, mine, eager_tokens)
    for kind in [a for a in against if a.startswith("hf")]:
        time_hf(hf, kind, prompts, n, device, mine, hf_tokens if kind == "hf" else 0)


def say(prompts, n, text):
    print(f"  batch {len(prompts)} x {n} new, {text}", flush=True)


def time_ours(model, prompts, n, device, repeats=1) -> dict:
    """generate() as train.py calls it, printed: {"ours": tokens/s, "ours first": the first call's seconds
    (compiling and recording)}; empty when out of memory."""
    try:
        first = timed(lambda: ours(model, prompts, n, device), device)
        best = min(timed(lambda: ours(model, prompts, n, device), device) for _ in range(repeats))
    except torch.OutOfMemoryError:
        say(prompts, n, "ours: out of memory")
        return {}
    say(prompts, n, f"ours: {len(prompts) * n / best:.0f} tok/s ({best:.2f} s; first call {first:.1f} s)")
    return {"ours": len(prompts) * n / best, "ours first": first}


def time_eager(model, prompts, n, device, mine: float, tokens: int) -> dict:
    """The eager plan over min(n, tokens) new tokens, printed: {"eager": tokens/s}."""
    m = min(n, tokens)
    speed = len(prompts) * m / timed(lambda: ours(model, prompts, m, device, plan=EAGER), device)
    say(prompts, n, f"eager: {speed:.0f} tok/s over {m} tokens (ours x{mine / speed:.1f})")
    return {"eager": speed}


def time_hf(hf, kind: str, prompts, n, device, mine: float, tokens: int = 0) -> dict:
    """transformers' generate, `kind` "hf" (its dynamic cache, over `tokens` new tokens when given) or
    "hf-static" (its first call, which compiles, timed apart), printed: {kind: tokens/s,
    "<kind> first": s}."""
    kw = {"cache_implementation": "static"} if kind == "hf-static" else {}
    m = tokens or n
    figures = {}
    try:
        if kind == "hf-static":
            figures[f"{kind} first"] = timed(lambda: hf_generate(hf, prompts, m, device, **kw), device)
        speed = len(prompts) * m / timed(lambda: hf_generate(hf, prompts, m, device, **kw), device)
        figures[kind] = speed
        first = f"; first call {figures[f'{kind} first']:.1f} s" if kind == "hf-static" else ""
        say(prompts, n, f"{kind}: {speed:.0f} tok/s" + (f" over {m} tokens" if m < n else "")
            + f" (ours x{mine / speed:.2f}{first})")
    except torch.OutOfMemoryError:
        say(prompts, n, f"{kind}: out of memory")
    except Exception as e:  # a transformers version without this mode, a compile failure: say so, go on
        say(prompts, n, f"{kind}: failed ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return figures


def lora_row(model, prompts, n, device):
    """Ours with rank-32 LoRA on every projection (random, nonzero B), merged for the rollout or not."""
    peft_model = lora.add_adapters(model, 32, 64.0, lora.TARGETS, "random")
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.01)
    plain_plan = decode_plan(device)
    times = {}
    for label, plan in (("merged", plain_plan), ("unmerged", plain_plan._replace(merge_adapters=False))):
        ours(model, prompts, n, device, plan=plan)  # compiles and records for this model
        times[label] = statistics.median(timed(lambda: ours(model, prompts, n, device, plan=plan), device)
                                         for _ in range(2))
    peft_model.unload()  # the plain model again, for the shapes that follow
    plain = min(timed(lambda: ours(model, prompts, n, device), device) for _ in range(2))
    print(f"    LoRA r32 on every projection: merged {times['merged']:.2f} s "
          f"({times['merged'] / plain - 1:+.0%} over the plain model's {plain:.2f} s), "
          f"unmerged {times['unmerged']:.2f} s ({times['unmerged'] / plain - 1:+.0%})", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
