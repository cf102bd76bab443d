"""train.py's flags: the TrainConfig dataclass (argparse is generated from it), the paper's preset,
and the checks that turn a bad value into one clear error line naming the flag."""
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from nanoatr import lora
from nanoatr.config import ConfigError, arg
from nanoatr.loss import AGGREGATIONS, DEFAULTS, METHODS, check_hparams
from nanoatr.rollout import SAMPLER_HELP, SAMPLERS
from nanoatr.tokenizer import check_template

@dataclass
class TrainConfig:
    model: str = arg("data/tiny-qwen3", "model directory (HF format: config.json, safetensors, tokenizer)")
    data: str = arg("data/arith/train.jsonl", "training problems (jsonl: problem/answer or DAPO format)")
    eval_data: list[str] = arg(["data/arith/heldout.jsonl"], "held-out problem files evaluated during training")
    preset: str | None = arg(None, "start from a published setting; flags given explicitly win (see below)",
                             choices=["paper"])
    clip: str = arg("kl3", "clipping rule (loss.METHODS)", choices=sorted(METHODS))
    aggregation: str = arg("dr-grpo", "loss aggregation", choices=AGGREGATIONS)
    std_normalize: bool = arg(False, "divide advantages by the group's std (GRPO); off = Dr. GRPO")
    beta: float = arg(0.0, "KL penalty to the reference policy (the starting model; nanoatr/reference.py); "
                      "0 = none, as in the paper")
    steps: int = arg(400, "rollout steps (each feeds minibatches x epochs optimizer steps)")
    prompts_per_step: int = arg(16, "distinct prompts sampled per rollout step (over all ranks)")
    group_size: int = arg(8, "completions per prompt (G)")
    minibatches: int = arg(2, "optimizer steps per epoch over a rollout batch; >1 makes clipping act")
    epochs: int = arg(1, "passes over each rollout batch")
    micro_batch: int = arg(0, "sequences per forward/backward (gradient accumulation); 0 = a rank's whole minibatch")
    rollout_batch: int = arg(0, "prompts sampled together, each such chunk with its own seed (0 = a rank's "
                             "whole share). Samples depend on it, not on the number of ranks: set it to "
                             "compare runs on different numbers of GPUs")
    lr: float = arg(1e-4, "AdamW learning rate")
    weight_decay: float = arg(0.0, "AdamW weight decay")
    grad_clip: float = arg(1.0, "clip the gradient norm to this (0 = off)")
    lora_rank: int = arg(0, "LoRA rank (0 = full fine-tuning); adapters are saved in peft's format")
    lora_alpha: float = arg(0.0, "LoRA alpha (0 = 2 x rank)")
    lora_targets: list[str] = arg(list(lora.TARGETS), "modules that get LoRA adapters")
    merge: bool = arg(False, "LoRA runs: at the end also write <run>/merged, base + adapter as a full HF checkpoint")
    max_new_tokens: int = arg(48, "completion budget in tokens")
    temperature: float = arg(1.0, "sampling temperature of rollouts (and of the log-probs trained on)")
    top_p: float = arg(1.0, "nucleus sampling of rollouts")
    top_k: int = arg(0, "top-k sampling of rollouts (0 = off)")
    sampler: str = arg("multinomial", SAMPLER_HELP, choices=SAMPLERS)
    stop: list[str] = arg([], "stop strings besides EOS: a completion is cut after the first one (base models)")
    system_prompt: str | None = arg(None, "system message for chat-template models")
    prompt_template: str | None = arg(None, "prompt text with a {question} field, used instead of the chat "
                                      "template (base models; default: the chat template when the tokenizer has one)")
    thinking: bool | None = arg(None, "Qwen3's enable_thinking switch in the chat template (default: the "
                                "template's own)")
    eval_every: int = arg(0, "evaluate every N steps (0 = only before and after training)")
    eval_k: int = arg(8, "k of Mean@k / Pass@k")
    eval_temperature: float = arg(1.0, "sampling temperature of evaluation")
    eval_top_p: float = arg(1.0, "nucleus of evaluation sampling")
    eval_max_new_tokens: int = arg(0, "completion budget of evaluation (0 = --max-new-tokens)")
    eval_batch_size: int = arg(256, "completions sampled together in evaluation")
    eval_limit: int = arg(0, "evaluate on the first N problems of each file (0 = all)")
    dtype: str = arg("float32", "bfloat16: frozen weights in bf16 and bf16 autocast for matmuls; trained weights "
                     "and log-softmax stay float32", choices=["float32", "bfloat16"])
    device: str = arg("auto", "cpu, cuda, cuda:N, or auto (CUDA if available; under torchrun each rank its own GPU)")
    grad_checkpoint: bool = arg(False, "recompute each layer's activations in backward (less memory, ~1/3 more time)")
    save_every: int = arg(50, "write the checkpoint every N steps (and at the end)")
    out_dir: str = arg("runs", "parent directory of run directories")
    name: str = arg("", "run name (default: <clip>-<time>)")
    resume: str = arg("", "continue the run in this run directory from its checkpoint")
    seed: int = arg(0, "seed of prompt order, sampling and initialisation")
    compile: bool = arg(True, "compile the loss with torch.compile (falls back to eager if it fails)")
    hparams: dict = arg(None, "clip method hyper-parameters after defaults (written to config.json)", cli=False)


# The paper's Appendix B, Table 4 (Qwen3-1.7B / 8B + LoRA on DAPO-Math-17k; Unsloth + TRL), on our flags.
# TRL counts its batch in completions: batch 8 = one group of G = 8, and 4 accumulated micro-batches make
# one optimizer step on 4 prompts x 8 completions, sampled together. With one optimizer step per rollout
# batch (TRL's num_iterations = 1) the ratio is exactly 1 and clipping is inert, as the warning says;
# --minibatches 4 turns each group into its own optimizer step (the ratio then moves, clipping acts).
PRESETS = {"paper": {
    "lora_rank": 32, "lora_alpha": 64.0,
    "lr": 5e-6, "weight_decay": 1e-3,                   # AdamW
    "prompts_per_step": 4, "group_size": 8,             # batch 8 x gradient accumulation 4 = 32 completions
    "micro_batch": 8, "minibatches": 1, "epochs": 1,    # 8 completions per backward, one optimizer step
    "steps": 1000,                                      # "1,000 gradient steps" (Section 6.1)
    "max_new_tokens": 2048,                             # maximum sequence length 2048
    "temperature": 1.0, "top_p": 1.0, "top_k": 0,       # top-k -1 = off
    "beta": 0.0, "aggregation": "dr-grpo", "std_normalize": False,   # Dr. GRPO backbone, no reference
    "clip": "kl3",                                      # delta = 0.07, kl3's default
    "eval_every": 50, "eval_k": 8, "eval_temperature": 0.3, "eval_top_p": 0.95, "eval_max_new_tokens": 32768,
    # Not in the paper, what makes it fit one 80 GB GPU: bf16 base weights, checkpointed activations,
    # 8 evaluation samples at a time (a 32k-token KV cache is ~3.7 GB per sample for Qwen3-1.7B).
    "dtype": "bfloat16", "grad_checkpoint": True, "eval_batch_size": 8,
}}


def preset_help() -> str:
    lines = [f"  {k.replace('_', '-'):<22} {v}" for k, v in PRESETS["paper"].items()]
    return "\n--preset paper (Appendix B, Table 4; every flag given explicitly overrides it):\n" + "\n".join(lines)


def hparam_flags(parser):
    """--eps, --delta, ...: every clip method's hyper-parameters, defaulting to the method's own."""
    names = sorted({k for d in DEFAULTS.values() for k in d})
    for k in names:
        users = ", ".join(f"{m}={d[k]}" for m, d in sorted(DEFAULTS.items()) if k in d)
        parser.add_argument("--" + k.replace("_", "-"), type=float, default=None, dest=k,
                            help=f"clip hyper-parameter; defaults per method: {users}")


def apply_preset(cfg: TrainConfig, given: set) -> TrainConfig:
    """The preset's values for every field not given on the command line."""
    if cfg.preset is None:
        return cfg
    if not {"model", "data"} <= given:
        raise ConfigError(f"--preset {cfg.preset} needs --model (a Qwen3 checkpoint directory) and --data "
                          "(DAPO-Math-17k as jsonl)")
    return TrainConfig(**{**asdict(cfg), **{k: v for k, v in PRESETS[cfg.preset].items() if k not in given}})


def resolve(cfg: TrainConfig, given_hparams: dict, world: int = 1) -> TrainConfig:
    """Fill in the method's default hyper-parameters and check every value; ConfigError names the flag."""
    unused = [k for k, v in given_hparams.items() if v is not None and k not in DEFAULTS[cfg.clip]]
    if unused:
        raise ConfigError(f"--{unused[0].replace('_', '-')} does not apply to --clip {cfg.clip} "
                          f"(its flags: {', '.join('--' + k.replace('_', '-') for k in DEFAULTS[cfg.clip]) or 'none'})")
    cfg.hparams = {**DEFAULTS[cfg.clip], **{k: v for k, v in given_hparams.items() if v is not None}}
    try:
        check_hparams(cfg.clip, **cfg.hparams)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    positive = ["steps", "prompts_per_step", "group_size", "minibatches", "epochs", "max_new_tokens", "eval_k",
                "eval_batch_size"]
    for name in positive:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(cfg, name)})")
    for name in ["micro_batch", "rollout_batch", "lora_rank", "eval_max_new_tokens", "lora_alpha", "beta"]:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (got {getattr(cfg, name)})")
    if cfg.prompts_per_step % world:
        raise ConfigError(f"--prompts-per-step {cfg.prompts_per_step} must be a multiple of the {world} ranks")
    share = cfg.prompts_per_step // world
    chunk = cfg.rollout_batch or share
    if share % chunk:
        raise ConfigError(f"--rollout-batch {chunk} must divide each rank's {share} prompts")
    if (chunk * cfg.group_size) % cfg.minibatches:  # every chunk gives each minibatch the same number of rows
        raise ConfigError(f"--minibatches {cfg.minibatches} must divide the {chunk * cfg.group_size} completions "
                          f"of a rollout chunk (--rollout-batch {chunk} x --group-size {cfg.group_size})")
    if not cfg.temperature > 0:
        raise ConfigError("--temperature must be > 0 for training: the policy gradient needs sampled, scored tokens")
    if not cfg.lr > 0:
        raise ConfigError(f"--lr must be > 0 (got {cfg.lr})")
    problem = (lora.check_targets(cfg.lora_targets) if cfg.lora_rank else None) or \
        (check_template(cfg.prompt_template) if cfg.prompt_template is not None else None)
    if problem:
        raise ConfigError(problem)
    if cfg.merge and not cfg.lora_rank:
        raise ConfigError("--merge needs a LoRA run (--lora-rank > 0); a full fine-tuning checkpoint is already whole")
    if any(not s for s in cfg.stop):
        raise ConfigError("--stop: empty stop string")
    cfg.lora_alpha = cfg.lora_alpha or 2.0 * cfg.lora_rank
    return cfg


def resumed_config(cfg: TrainConfig, extra: dict, given: set) -> tuple[TrainConfig, dict]:
    """The run's saved config, with only the flags given now on top (e.g. --steps to go further)."""
    saved_file = Path(cfg.resume) / "config.json"
    if not saved_file.is_file():
        raise ConfigError(f"--resume {cfg.resume}: no config.json there, not a run directory")
    saved = json.loads(saved_file.read_text())
    hparams = saved.pop("hparams") or {}
    cfg = TrainConfig(**{**saved, **{k: getattr(cfg, k) for k in given}})
    if "clip" not in given:
        extra = {**hparams, **{k: v for k, v in extra.items() if v is not None}}
    return cfg, extra
