"""Rollout speed on one GPU: nanoatr.rollout.generate against transformers' generate, random Qwen3 in bf16.

    python bench/gpu_rollout.py                                  # the issue's matrix (0.6B and 1.7B shapes)
    python bench/gpu_rollout.py --models 0.6b --batches 256 --new-tokens 512 --against eager,hf,hf-static
    python bench/gpu_rollout.py --device cpu --models tiny --batches 4 --new-tokens 16   # the code path, seconds

Random weights in the shapes of Qwen3-0.6B and Qwen3-1.7B (their config.json sizes), bf16, on one
GPU; ragged prompts of --prompt-len tokens (64-256: left-padded); every row samples exactly
--new-tokens tokens at temperature 1 (no top-k / top-p, EOS suppressed). Printed per shape, in
tokens per second (batch x new tokens over the wall time of the whole call, prefill included):

  ours        generate() as train.py calls it: on CUDA compiled and replayed from CUDA graphs
              (rollout.decode_plan); its first call, which compiles and records, is timed apart
  eager       generate(plan=eager): every step launched op by op from Python (the path before issue 27),
              timed over --eager-tokens tokens only (it is slow; tokens/s hardly depend on the length)
  hf          transformers' generate, its default dynamic cache
  hf-static   transformers' generate with cache_implementation="static" (transformers compiles the
              forward itself for a static cache); its first call is timed apart

--check first runs the correctness checks on this device: a float32 model's compiled-and-graphed
rollout gives the tokens and log-probs of its eager one, and the number of host syncs (CUDA's sync
debug mode) is counted in a rollout that can stop early: one per CHECK_EVERY steps, not per token.
--lora times ours with LoRA adapters (rank 32 on every projection, as --preset paper) merged for the
rollout (the default) and unmerged, against the plain model, at the first shape.
"""
import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nanoatr import lora  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config  # noqa: E402
from nanoatr.decoding import CHECK_EVERY, DecodePlan, decode_plan  # noqa: E402
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
    g = torch.Generator(device=device).manual_seed(0)
    return generate(model, prompts, n, temperature=1.0, generator=g, plan=plan)


def hf_generate(hf, prompts, n, device, **kw):
    P = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts], device=device)
    return hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=True,
                       temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, **kw)


def to_hf(model: Qwen3):
    from transformers import Qwen3Config as HFConfig, Qwen3ForCausalLM
    cfg = HFConfig(**{k: v for k, v in model.config.to_hf().items() if k not in ("architectures", "model_type")})
    with torch.device(model.lm_head.weight.device):
        hf = Qwen3ForCausalLM(cfg).to(model.lm_head.weight.dtype)
    hf.load_state_dict(model.state_dict(), assign=True, strict=False)  # shares our weights: no second copy
    hf.tie_weights()
    hf.generation_config.eos_token_id = None
    return hf.eval()


def check(device):
    """The compiled, graphed rollout against the eager one (float32), and the host syncs it makes."""
    model = random_model("tiny", torch.float32, device)
    prompts = ragged_prompts(24, (3, 40), model.config.vocab_size, seed=1)
    eos = list(range(0, 1000, 25))  # 40 of 1000 tokens end a row: rows finish at different steps
    outs = {}
    for name in ("eager", "compiled"):
        plan = DecodePlan("eager", 1, 1, False, False) if name == "eager" else decode_plan(device)
        g = torch.Generator(device=device).manual_seed(0)
        outs[name] = generate(model, prompts, 200, generator=g, eos_token_id=eos, plan=plan)
    a, b = outs["eager"], outs["compiled"]
    same = a.tokens.shape == b.tokens.shape and torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
    gap = (a.sampler_logp - b.sampler_logp).abs().max().item() if same else float("nan")
    print(f"check: compiled+graphs vs eager, float32, 24 rows x <= 200 tokens (lengths {a.mask.sum(1).min().item()}"
          f"-{a.mask.sum(1).max().item()}): tokens {'identical' if same else 'DIFFER'}, log-prob gap {gap:.1e}")
    if device.type == "cuda":
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = torch.Generator(device=device).manual_seed(0)
            out = generate(model, prompts, 200, generator=g, eos_token_id=eos)
        torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(w.message) for w in caught)
        steps = out.tokens.shape[1]
        print(f"check: host syncs in a {steps}-step rollout: {syncs} (one look every {CHECK_EVERY} steps: "
              f"{-(-steps // CHECK_EVERY)}; per token would be {steps})")
    return same


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="0.6b,1.7b", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--new-tokens", default="512,2048")
    ap.add_argument("--prompt-len", default="64:256", help="prompt lengths drawn uniformly in MIN:MAX")
    ap.add_argument("--against", default="eager,hf,hf-static", help="comma-separated: eager, hf, hf-static")
    ap.add_argument("--eager-tokens", type=int, default=32, help="new tokens of the eager path's timing")
    ap.add_argument("--repeats", type=int, default=1, help="timed calls of ours per shape (the best is kept)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--check", action="store_true", help="correctness and host-sync checks first")
    ap.add_argument("--lora", action="store_true", help="also LoRA merged / unmerged at the first shape")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA")
        return 0
    import transformers
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    if args.check and not check(device):
        return 1
    dtype = getattr(torch, args.dtype)
    lo, hi = (int(x) for x in args.prompt_len.split(":"))
    against = [a for a in args.against.split(",") if a]
    first_shape = True
    for shape in args.models.split(","):
        model = random_model(shape, dtype, device)
        print(f"\n{shape}: {model.num_parameters() / 1e9:.2f}B parameters, {args.dtype}, prompts {lo}-{hi} tokens",
              flush=True)
        hf = to_hf(model) if any(a.startswith("hf") for a in against) else None
        for B in (int(b) for b in args.batches.split(",")):
            prompts = ragged_prompts(B, (lo, hi), model.config.vocab_size)
            for n in (int(x) for x in args.new_tokens.split(",")):
                row = measure(model, hf, prompts, n, device, against, args)
                print(f"  batch {B:4d} x {n:5d} new: " + "  ".join(row), flush=True)
                if args.lora and first_shape:
                    lora_row(model, prompts, n, device)
                first_shape = False
                torch.cuda.empty_cache() if device.type == "cuda" else None
        del model, hf
    return 0


def measure(model, hf, prompts, n, device, against, args) -> list[str]:
    B = len(prompts)
    row = []
    try:
        first = timed(lambda: ours(model, prompts, n, device), device)
        best = min(timed(lambda: ours(model, prompts, n, device), device) for _ in range(args.repeats))
        mine = B * n / best
        row.append(f"ours {mine:8.0f} tok/s ({best:.2f} s; first call {first:.1f} s)")
    except torch.OutOfMemoryError:
        return ["ours: out of memory"]
    if "eager" in against:
        m = min(n, args.eager_tokens)
        t = timed(lambda: ours(model, prompts, m, device, plan=DecodePlan("eager", 1, 1, False, False)), device)
        row.append(f"eager {B * m / t:7.0f} tok/s (x{mine / (B * m / t):.1f})")
    for kind in [a for a in against if a.startswith("hf")]:
        kw = {"cache_implementation": "static"} if kind == "hf-static" else {}
        try:
            first = timed(lambda: hf_generate(hf, prompts, n, device, **kw), device) if kind == "hf-static" else None
            t = timed(lambda: hf_generate(hf, prompts, n, device, **kw), device)
            row.append(f"{kind} {B * n / t:7.0f} tok/s (ours x{mine / (B * n / t):.2f}"
                       + (f"; first call {first:.1f} s)" if first else ")"))
        except torch.OutOfMemoryError:
            row.append(f"{kind}: out of memory")
        except Exception as e:  # a transformers version without this mode, a compile failure: say so, go on
            row.append(f"{kind}: failed ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


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
    print(f"    LoRA r32 on every projection: merged {times['merged']:.2f} s ({times['merged'] / plain - 1:+.0%} "
          f"over the plain model's {plain:.2f} s), unmerged {times['unmerged']:.2f} s "
          f"({times['unmerged'] / plain - 1:+.0%})", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
