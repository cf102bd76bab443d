"""GPU smoke test: a random Qwen3-0.6B-shaped policy in bf16 + LoRA trains a few steps with the compiled loss.

    python bench/gpu_smoke.py                          # one GPU; prints "skipped: no CUDA" and exits 0
                                                       # without one
    torchrun --nproc_per_node 2 bench/gpu_smoke.py     # DDP over NCCL
    python bench/gpu_smoke.py --device cpu --tiny      # the same code path on a tiny model (what the
                                                       # tests run)

Each step is what train.py does after loading a checkpoint: rollout.generate with the KV cache (random
prompts of different lengths, so left-padded; the random model rarely stops, so every row runs to
--max-new-tokens), random 0/1 rewards,
then train.optimize (pi_old's log-probs, forward/backward under bf16 autocast with gradient checkpointing,
the torch.compile'd kl3 loss, AdamW). It prints the largest gap between the trainer's log-probs and
the sampler's (bf16 rounding: logged, not checked; with --dtype float32 train.optimize raises above
1e-2), checks that the loss is finite, and prints time per phase and peak GPU memory.
No checkpoint or tokenizer is needed: nothing is downloaded.

    python bench/gpu_smoke.py --paper --shape 1.7b --steps 2    # one step of --preset paper
                                                                # on a Qwen3-1.7B shape

--paper takes the step's shape from --preset paper (4 prompts x 8 completions of up to 2048 tokens, LoRA
rank 32 / alpha 64, micro-batches of 8, 4 optimizer steps, bf16, checkpointed activations) and prints
the time of each phase: rollout, pi_old (a separate no-grad pass; none when the first update's forward
is pi_old's), the updates (forward + backward), the optimizer; and peak GPU memory. The random model
never samples an EOS, so every completion runs to the budget: the step's longest case.
"""
import argparse
import collections
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import train  # noqa: E402
from nanoatr.machinery.flags import PRESETS, TrainConfig, resolve  # noqa: E402
from nanoatr import lora
from nanoatr.data import Shard  # noqa: E402
from nanoatr.machinery import distributed, step_metrics  # noqa: E402
from nanoatr.loss import group_advantages  # noqa: E402
from nanoatr.scoring import Scorer  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config, init_weights  # noqa: E402
from nanoatr.rollout import generate  # noqa: E402
from nanoatr.machinery.decoding import decode_plan  # noqa: E402
import rollout  # noqa: E402  (bench/rollout.py: its presets)

# Qwen3-0.6B's and 1.7B's config.json sizes (bench/rollout.py's presets), and a tiny one
SHAPES = {"0.6b": rollout.PRESETS["0.6b"], "1.7b": rollout.PRESETS["1.7b"],
          "tiny": dict(rollout.PRESETS["0.6b"], vocab_size=1000, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)}


def main(argv=None):
    args = parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("skipped: no CUDA")
        return 0
    for _ in train_steps(args):
        pass
    return 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer, hidden-64 model instead of 0.6B's shape")
    ap.add_argument("--shape", choices=list(SHAPES), default=None,
                    help="the model's shape (default 0.6b; --tiny: tiny)")
    ap.add_argument("--paper", action="store_true", help="the step of --preset paper, phase by phase")
    ap.add_argument("--steps", type=int, default=3, help="training steps")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step (over all ranks)")
    ap.add_argument("--group-size", type=int, default=8, help="completions per prompt")
    ap.add_argument("--prompt-len", type=int, default=128, help="prompt tokens")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="completion tokens (512; --paper: 2048)")
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward")
    ap.add_argument("--lora-rank", type=int, default=32, help="0 = full fine-tuning")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--no-compile", action="store_true", help="eager loss")
    return ap.parse_args(argv)


def step_config(args, world: int) -> TrainConfig:
    """The step's TrainConfig from the flags; --paper: the preset's step, written back into `args`."""
    args.max_new_tokens = args.max_new_tokens or (None if args.paper else 512)
    fields = dict(prompts_per_step=args.prompts, group_size=args.group_size, minibatches=2,
                  micro_batch=args.micro_batch, max_new_tokens=args.max_new_tokens, lora_rank=args.lora_rank,
                  dtype=args.dtype, grad_checkpoint=True, compile=not args.no_compile, lr=1e-5)
    if args.paper:
        keys = ("lora_rank", "lora_alpha", "lr", "weight_decay", "prompts_per_step", "group_size",
                "micro_batch", "minibatches", "epochs", "max_new_tokens", "aggregation", "std_normalize",
                "clip", "dtype", "grad_checkpoint")
        fields.update({k: PRESETS["paper"][k] for k in keys})
        args.lora_rank, args.prompts, args.group_size = (fields["lora_rank"], fields["prompts_per_step"],
                                                         fields["group_size"])
        fields["max_new_tokens"] = args.max_new_tokens or fields["max_new_tokens"]
        args.max_new_tokens, args.dtype = fields["max_new_tokens"], fields["dtype"]
        args.prompt_len = max(args.prompt_len, 256)
    return resolve(TrainConfig(**fields), {}, world)


def make_run(args, cfg: TrainConfig, d, shape: dict) -> train.Run:
    """A random policy of `shape` (LoRA unless --lora-rank 0), its scorer and optimizer: a train.Run."""
    with torch.device(d.device):
        model = Qwen3(Qwen3Config(**shape))
    init_weights(model, std=0.02, seed=0)
    # As lora.load_policy: frozen weights in --dtype, trained ones float32.
    model.to(getattr(torch, args.dtype) if args.lora_rank else torch.float32)
    peft_model = (lora.add_adapters(model, args.lora_rank, cfg.lora_alpha or 2.0 * args.lora_rank,
                                    lora.TARGETS, "random") if args.lora_rank else None)
    model.gradient_checkpointing = True
    precision = distributed.precision(args.dtype, d.device)
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = train.make_optimizer(cfg, trained)
    shard = Shard(cfg.seed, cfg.prompts_per_step, cfg.prompts_per_step // d.world, cfg.group_size,
                  d.rank, d.world)
    return train.Run(cfg, model, distributed.wrap(Scorer(model, precision), d), opt, trained, tok=None,
                     eos_ids=[], stopper=None, rewards=None, shard=shard, d=d, precision=precision,
                     peft_model=peft_model)


def timed_rollout(args, run: train.Run, shape: dict, share: int, g: torch.Generator):
    """Sample G completions of `share` random prompts: (the rollout, its prompts, its seconds)."""
    d, G = run.d, args.group_size
    if d.device.type == "cuda":
        torch.cuda.synchronize(d.device)
        torch.cuda.reset_peak_memory_stats(d.device)
    t0 = time.perf_counter()
    # prompts of different lengths (half to all of --prompt-len): left padding, as real batches have
    lengths = torch.randint(max(1, args.prompt_len // 2), args.prompt_len + 1, (share,)).tolist()
    prompts = [torch.randint(0, shape["vocab_size"], (n,)).tolist() for n in lengths]
    prompts = [p for p in prompts for _ in range(G)]
    run.model.eval()
    with run.precision():
        out = generate(run.model, prompts, args.max_new_tokens, temperature=1.0, generator=g,
                       plan=decode_plan(d.device))
    if d.device.type == "cuda":
        torch.cuda.synchronize(d.device)
    return out, prompts, time.perf_counter() - t0


def timed_update(run: train.Run, out, prompts: list, G: int, step: int):
    """Random 0/1 rewards and train.optimize on them: (the batch, its updates, their seconds)."""
    d = run.d
    t0 = time.perf_counter()
    rewards = torch.randint(0, 2, (len(prompts),)).float()
    batch = out._replace(rewards=rewards, advantages=group_advantages(rewards, G).to(d.device))
    updates = train.optimize(run, batch, step)
    if d.device.type == "cuda":
        torch.cuda.synchronize(d.device)
    return batch, updates, time.perf_counter() - t0


def print_step(say, step: int, row: dict, tokens: int, t_train: float, times: dict, peak: float | None):
    """Print the step's line (rollout, train, the loss and its ratios) and its phases' line."""
    t_rollout = times["rollout"]
    mem = f"  peak {peak:.1f} GiB" if peak is not None else ""
    say(f"step {step + 1}: rollout {t_rollout:6.1f} s ({tokens / t_rollout:7.0f} tok/s)  "
        f"train {t_train:6.1f} s  loss {row['loss']:+.2e}  kl3 {row['kl3']:.2e}  "
        f"ratio [{row['ratio_min']:.3f}, {row['ratio_max']:.3f}]  grad_norm {row['grad_norm']:.3f}  "
        f"sampler gap {row['sampler_logp_gap_max']:.1e}{mem}", flush=True)
    say(f"  phases: rollout {times['rollout']:.2f} s, pi_old {times['pi_old']:.2f} s, "
        f"updates (forward + backward) {times['updates']:.2f} s, "
        f"optimizer and the rest {times['optimizer']:.2f} s; step {times['step']:.2f} s, "
        f"rollout {times['rollout'] / times['step']:.0%} of it", flush=True)


def train_steps(args):
    """Runs the steps of `args`, printing each (flushed) as it ends, and yields each one's figures: the
    seconds of its phases (rollout, pi_old, updates, optimizer: the rest of the update; step), its
    completion tokens and peak GiB (CUDA; None on the CPU)."""
    d = distributed.setup(args.device)
    torch.manual_seed(0)
    cfg = step_config(args, d.world)
    shape = SHAPES[args.shape or ("tiny" if args.tiny else "0.6b")]
    run = make_run(args, cfg, d, shape)
    model = run.model
    say = print if d.main else (lambda *a, **k: None)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    say(f"{args.shape or ('tiny' if args.tiny else '0.6b')}-shaped random model, "
        f"{model.num_parameters() / 1e6:.0f}M parameters ({trained / 1e6:.1f}M trained), {args.dtype}, "
        f"{d.world} x {d.device}, compile={cfg.compile}", flush=True)
    phases = collections.defaultdict(float)  # seconds per phase of the step, the GPU synchronised around each
    originals = train.old_logprobs, train.update
    train.old_logprobs = timed_phase(train.old_logprobs, "pi_old", phases, d.device)
    train.update = timed_phase(train.update, "update", phases, d.device)
    try:
        yield from timed_steps(args, run, shape, phases, say)
    finally:  # train's own functions again: the process (a test's) goes on with them
        train.old_logprobs, train.update = originals
    say("ok")
    distributed.shutdown()


def timed_steps(args, run: train.Run, shape: dict, phases: dict, say):
    """train_steps' loop: each step's rollout and update, checked, printed, its figures yielded."""
    d = run.d
    G, share = args.group_size, args.prompts // d.world
    g = torch.Generator(device=d.device).manual_seed(d.rank)
    for step in range(args.steps):
        out, prompts, t_rollout = timed_rollout(args, run, shape, share, g)
        phases.clear()
        batch, updates, t_train = timed_update(run, out, prompts, G, step)
        times = {"time_rollout": t_rollout, "time_train": t_train}
        row = step_metrics.metrics_line(run, batch, updates, {}, times)
        if not all(math.isfinite(row[k]) for k in ("loss", "grad_norm", "kl3", "entropy")):
            raise SystemExit(f"error: non-finite metrics at step {step + 1}: {row}")
        tokens = int(out.mask.sum()) * d.world
        peak = torch.cuda.max_memory_allocated(d.device) / 2**30 if d.device.type == "cuda" else None
        times = dict(rollout=t_rollout, pi_old=phases["pi_old"], updates=phases["update"],
                     optimizer=t_train - phases["pi_old"] - phases["update"], step=t_rollout + t_train)
        print_step(say, step, row, tokens, t_train, times, peak)
        yield {**times, "tokens": tokens, "peak_gib": peak}


def timed_phase(fn, name, phases, device):
    """fn, adding its wall time (the GPU synchronised before and after) to phases[name]."""
    def run(*args, **kw):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = fn(*args, **kw)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        phases[name] += time.perf_counter() - t0
        return out
    return run


if __name__ == "__main__":
    raise SystemExit(main())
