"""train.py's flags: TrainConfig, the paper's preset, and the checks across flags."""
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path


from nanoatr import divergence, methods
from nanoatr.machinery import cli
from nanoatr.machinery.cli import (DATA, METHOD, OPTIM, ROLLOUT, RUN, ConfigError, DataFlags, EvalFlags,
                                   PromptFlags, RewardFlags, RunFlags, TrainingFlags, arg, check_flags, flag,
                                   override, sampler_field)
from nanoatr.machinery.parser import parse
from nanoatr.data import TASKS, task_defaults
from nanoatr.loss import AGGREGATIONS, effective_band



@dataclass
class TrainConfig(DataFlags, PromptFlags, RewardFlags, TrainingFlags, EvalFlags, RunFlags):
    """train.py's flags: its own below, the shared groups' in nanoatr/machinery/cli.py."""
    task: str = arg("math", "the task: its reward, and the defaults of --model, --data, --eval-data and "
                    "--max-new-tokens (nanoatr/data.py TASKS)", DATA, choices=lambda: sorted(TASKS))
    model: str = arg(TASKS["math"].model, "model directory (HF format: config.json, safetensors, tokenizer), "
                     "or a Hugging Face hub id (Qwen/Qwen3-1.7B) fetched into or read from its cache", DATA)
    revision: str | None = arg(None, "the hub revision (branch, tag or commit) of --model when it is a hub "
                               "id", DATA)
    data: str = arg(TASKS["math"].data, "training problems: .jsonl, .json or .parquet rows with a prompt "
                    "(text or chat messages: TRL, DAPO, verl) or problem/question, and an answer "
                    "(--answer-field)", DATA)
    eval_data: list[str] = arg(list(TASKS["math"].eval_data), "held-out problem files evaluated during "
                               "training (--eval-data with no file: no evaluation)", DATA, nargs="*")
    clip: str = arg("kl3", "clipping rule (nanoatr/methods.py); its hyper-parameters are the flags listed "
                    "under 'method hyper-parameters'", METHOD, choices=lambda: sorted(methods.METHODS))
    aggregation: str = arg("dr-grpo", "loss aggregation", METHOD, choices=AGGREGATIONS)
    std_normalize: bool = arg(False, "divide advantages by the group's std (GRPO); off = Dr. GRPO", METHOD)
    beta: float = arg(0.0, "KL penalty to the reference policy (the starting model; loss.kl_to_reference); "
                      "0 = none, as in the paper", METHOD, ">=0")
    mask_truncated: bool = arg(False, "completions that ran out of --max-new-tokens (no EOS, no stop string) "
                               "give no gradient; they still count in their group's advantage (TRL's "
                               "mask_truncated_completions)", METHOD)
    overlong_buffer: int = arg(0, "DAPO's soft overlong punishment: over the last N tokens of "
                               "--max-new-tokens the reward falls linearly to -(--overlong-penalty) "
                               "(loss.overlong_penalty); 0 = off", METHOD, ">=0")
    overlong_penalty: float = arg(1.0, "the reward lost by a completion that fills --max-new-tokens, under "
                                  "--overlong-buffer", METHOD, ">=0")
    prompts_per_step: int = arg(16, "distinct prompts sampled per rollout step (over all ranks)", ROLLOUT,
                                ">=1")
    group_size: int = arg(8, "completions per prompt (G; a group of one has no baseline)", ROLLOUT, ">=2")
    max_new_tokens: int = arg(48, "completion budget in tokens", ROLLOUT, ">=1")
    temperature: float = arg(1.0, "sampling temperature of rollouts (and of the log-probs trained on)",
                             ROLLOUT, ">0")
    top_p: float = arg(1.0, "nucleus sampling of rollouts", ROLLOUT, "(0,1]")
    top_k: int = arg(0, "top-k sampling of rollouts (0 = off)", ROLLOUT, ">=0")
    sampler: str = sampler_field(ROLLOUT)
    stop: list[str] = arg([], "stop strings besides EOS: a completion is cut after the first one (base "
                          "models; special tokens such as <|im_end|> work too)", ROLLOUT)
    rollout_batch: int = arg(0, "prompts sampled together, each such chunk with its own seed (0 = a rank's "
                             "whole share). Samples depend on it, not on the number of ranks: set it to "
                             "compare runs on different numbers of GPUs", ROLLOUT, ">=0")
    dynamic_sampling: int = arg(0, "DAPO's dynamic sampling: groups whose rewards are all equal (no "
                                "advantage) are replaced by the mixed groups of up to this many more rounds "
                                "of prompts; 0 = off. Each rank fills its own share, so samples then depend "
                                "on the number of ranks", ROLLOUT, ">=0")
    steps: int = arg(400, "rollout steps (each feeds minibatches x epochs optimizer steps)", OPTIM, ">=1")
    minibatches: int = arg(2, "optimizer steps per epoch over a rollout batch; >1 makes clipping act", OPTIM,
                           ">=1")
    epochs: int = arg(1, "passes over each rollout batch", OPTIM, ">=1")
    lr_scheduler: str = arg("constant", "learning-rate schedule over the run's optimizer steps (--steps x "
                            "--minibatches x --epochs), as transformers' get_*_schedule_with_warmup: "
                            "constant, or linear / cosine decay to 0 after the warmup (TRL's default is "
                            "linear with no warmup)", OPTIM, choices=["constant", "linear", "cosine"])
    warmup_steps: int = arg(0, "optimizer steps (not rollout steps) of linear warmup from 0 to --lr, under "
                            "any --lr-scheduler (TRL's default: 0)", OPTIM, ">=0")
    warmup_ratio: float = arg(0.0, "warmup as a fraction of the run's optimizer steps, rounded up; instead "
                              "of --warmup-steps", OPTIM, "[0,1]")
    adam_beta1: float = arg(0.9, "AdamW's beta1 (TRL's and transformers' default: 0.9)", OPTIM, "[0,1)")
    adam_beta2: float = arg(0.99, "AdamW's beta2 (TRL's and transformers' default: 0.999; set it to match a "
                            "TRL run)", OPTIM, "[0,1)")
    base_name: str = arg("", "LoRA runs: the base model the adapter records (adapter_config.json's "
                         "base_model_name_or_path), e.g. Qwen/Qwen3-1.7B for peft and vLLM users (default: "
                         "--model as given, a relative path staying relative)", OPTIM)
    merge: bool = arg(False, "LoRA runs: at the end also write <run>/merged, base + adapter as a full HF "
                      "checkpoint", OPTIM)
    compile: bool = arg(True, "compile the loss with torch.compile (falls back to eager if it fails)", OPTIM)
    log_completions: int = arg(0, "write N of each step's completions (prompt, completion, rewards, verdict) "
                               "to samples.jsonl, as TRL's log_completions (0: none)", RUN, ">=0")
    keep_checkpoints: int = arg(2, "checkpoints kept: checkpoint/ (the latest) and older ones beside it", RUN,
                                ">=1")
    threads: int = arg(0, "CPU threads of torch (0 = as many as the cores other processes leave idle, "
                       "checked before every step; an explicit OMP_NUM_THREADS wins)", RUN, ">=0")
    preset: str | None = arg(None, "start from a published setting; flags given explicitly win (listed at "
                             "the end of --help)", RUN, choices=["paper"])
    device: str = override(RunFlags, "device", help="cpu, cuda, cuda:N, or auto (CUDA if available; under "
                           "torchrun each rank its own GPU)")
    hparams: dict | None = arg(None, "clip method hyper-parameters after defaults (written to config.json)",
                               cli=False)

    @property
    def optimizer_steps(self) -> int:
        """The run's optimizer steps, which a learning-rate schedule counts: --steps x --minibatches x
        --epochs."""
        return self.steps * self.minibatches * self.epochs

    @property
    def warmup(self) -> int:
        """The warmup in optimizer steps: --warmup-steps, or --warmup-ratio of the run rounded up (as
        transformers' TrainingArguments.get_warmup_steps)."""
        return self.warmup_steps or math.ceil(self.warmup_ratio * self.optimizer_steps)

    @property
    def schedule_spans_run(self) -> bool:
        """The learning rate of an optimizer step depends on the run's length (a decay, or a warmup ratio)."""
        return self.lr_scheduler != "constant" or self.warmup_ratio > 0


# The paper's Appendix B, Table 4 (Qwen3-1.7B / 8B + LoRA on DAPO-Math-17k; Unsloth + TRL), on our flags,
# with --minibatches 4 (each group of 8 its own optimizer step) so that the ratio moves and clipping acts:
# why, docs/machinery.md#train-config.
PRESETS = {"paper": {
    "lora_rank": 32, "lora_alpha": 64.0,
    "lr": 5e-6, "weight_decay": 1e-3,                   # AdamW
    "prompts_per_step": 4, "group_size": 8,             # batch 8 x gradient accumulation 4 = 32 completions
    "micro_batch": 8, "minibatches": 4, "epochs": 1,    # each group of 8 one backward, one optimizer step
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


def parse_flags(argv, doc: str):
    """train.py's command line: (TrainConfig, the method's knobs given, the flags given)."""
    return parse(TrainConfig, argv, doc, hparam_flags, epilog=preset_help())


def preset_help() -> str:
    lines = [f"  {k.replace('_', '-'):<22} {v}" for k, v in PRESETS["paper"].items()]
    return "--preset paper (Appendix B, Table 4; every flag given explicitly overrides it):\n" + \
        "\n".join(lines)


def hparam_flags(parser):
    """--eps, --delta, ...: every clip method's hyper-parameters, defaulting to the method's own."""
    group = parser.add_argument_group("method hyper-parameters (each applies to the --clip methods listed)")
    table = {m: methods.defaults(m) for m in sorted(methods.METHODS)}
    for k in sorted({k for d in table.values() for k in d}):
        users = ", ".join(f"{m}={d[k]}" for m, d in table.items() if k in d)
        group.add_argument(flag(k), type=float, default=None, dest=k, metavar="X", help=f"defaults: {users}")


def apply_preset(cfg: TrainConfig, given: set) -> TrainConfig:
    """The task's files, then the preset's values, for every field not given on the command line. Your own
    --data needs --eval-data (files, or none): it is refused rather than evaluated on the task's set, which
    is held out from the task's training file only, and a warning line would scroll past above the log."""
    cfg = task_defaults(cfg, given)
    if cfg.preset is None:
        if "data" in given and "eval_data" not in given:  # the task's set is held out from its own file only
            raise ConfigError(f"--data {cfg.data} needs --eval-data: held-out problem files for it (the "
                              f"{cfg.task} task's own are held out from its training file, not from this "
                              "one), or --eval-data with no file for no evaluation")
        return cfg
    if not {"model", "data"} <= given:
        raise ConfigError(f"--preset {cfg.preset} needs --model (a Qwen3 checkpoint directory) and --data "
                          "(DAPO-Math-17k as jsonl)")
    if "eval_data" not in given:  # never the embedded arithmetic file, at a 32,768-token budget
        raise ConfigError(f"--preset {cfg.preset} needs --eval-data: its benchmark files (e.g. amc23.jsonl "
                          "aime24.jsonl aime25.jsonl), or --eval-data with no file for no evaluation")
    return dataclasses.replace(cfg, **{k: v for k, v in PRESETS[cfg.preset].items() if k not in given})


def resolve(cfg: TrainConfig, given_hparams: dict, world: int = 1, given=frozenset()) -> TrainConfig:
    """Fill in the method's default hyper-parameters and check every value, once; ConfigError names the flag.
    given: the flags set on the command line; one that would be ignored (LoRA flags without LoRA, evaluation
    flags without evaluation files) is an error rather than silence."""
    check_flags(cfg, given)
    cfg.hparams = cli.check_hparams(cfg.clip, **{k: v for k, v in given_hparams.items() if v is not None})
    if methods.needs(cfg.clip, "sequences"):  # one loss per sequence on its tokens: averaged per sequence
        cfg.aggregation = "seq-mean-token-mean"
    if cfg.prompts_per_step % world:
        raise ConfigError(f"--prompts-per-step {cfg.prompts_per_step} must be a multiple of the {world} "
                          "ranks")
    share = cfg.prompts_per_step // world
    chunk = cfg.rollout_batch or share
    if share % chunk:
        raise ConfigError(f"--rollout-batch {chunk} must divide each rank's {share} prompts")
    if (chunk * cfg.group_size) % cfg.minibatches:  # every chunk gives each minibatch the same number of rows
        raise ConfigError(f"--minibatches {cfg.minibatches} must divide the {chunk * cfg.group_size} "
                          f"completions of a rollout chunk (--rollout-batch {chunk} x --group-size "
                          f"{cfg.group_size})")
    if cfg.merge and not cfg.lora_rank:
        raise ConfigError("--merge needs a LoRA run (--lora-rank > 0); a full fine-tuning checkpoint is "
                          "already whole")
    if cfg.base_name and not cfg.lora_rank:
        raise ConfigError("--base-name needs a LoRA run (--lora-rank > 0): it is what the adapter records as "
                          "its base")
    cfg.lora_alpha = cfg.lora_alpha or 2.0 * cfg.lora_rank
    check_schedule(cfg, given)
    check_overlong(cfg, given)
    return cfg


def check_schedule(cfg: TrainConfig, given) -> None:
    """One warmup flag, and a warmup the run finishes."""
    if {"warmup_steps", "warmup_ratio"} <= set(given) or (cfg.warmup_steps and cfg.warmup_ratio):
        raise ConfigError("--warmup-steps and --warmup-ratio both set the warmup: give one of them")
    if cfg.warmup > cfg.optimizer_steps:  # --warmup-ratio <= 1 cannot be
        raise ConfigError(f"--warmup-steps {cfg.warmup_steps} is more than the run's {cfg.optimizer_steps} "
                          "optimizer steps (--steps x --minibatches x --epochs): the learning rate would "
                          "never reach --lr")


def check_overlong(cfg: TrainConfig, given) -> None:
    """A soft overlong buffer inside the completion budget; its penalty only with a buffer."""
    if cfg.overlong_buffer >= cfg.max_new_tokens:
        raise ConfigError(f"--overlong-buffer {cfg.overlong_buffer} must be below --max-new-tokens "
                          f"{cfg.max_new_tokens}: the buffer is the budget's last tokens")
    if "overlong_penalty" in given and not cfg.overlong_buffer:
        raise ConfigError("--overlong-penalty would be ignored: without --overlong-buffer > 0 there is no "
                          "overlong punishment")


def check_schedule_kept(cfg: TrainConfig, change: dict) -> None:
    """A resumed run keeps the learning rates it has followed: under a schedule, --minibatches and --epochs
    and (when the schedule spans the run) --steps stay as they were. cfg: the resumed config; change: this
    resume's, {field: {"from": the run's, "to": cfg's}} (resume.resumed_config)."""
    saved = dataclasses.replace(cfg, **{name: c["from"] for name, c in change.items()})
    if saved.lr_scheduler == "constant" and not saved.warmup:
        return
    names = ("steps", "minibatches", "epochs") if saved.schedule_spans_run else ("minibatches", "epochs")
    for name in names:
        if getattr(cfg, name) != getattr(saved, name):
            raise ConfigError(
                f"{flag(name)} {getattr(cfg, name)} would change the learning-rate schedule the run has "
                f"followed (--lr-scheduler {saved.lr_scheduler}, warmup {saved.warmup} of "
                f"{saved.optimizer_steps} optimizer steps = --steps x --minibatches x --epochs; "
                f'{Path(cfg.resume) / "config.json"} has "{name}": {getattr(saved, name)}): a resumed run '
                "keeps its schedule; start a new run to train under another")



PLAUSIBLE_DELTA = 1.0  # above it KL3's band is already [0.159, 3.146]: no trust region anyone sets on purpose


def delta_warning(cfg: TrainConfig) -> str | None:
    """A --delta above PLAUSIBLE_DELTA, as one warning line: most likely TRL's `delta` (INTELLECT-2's upper
    bound on the ratio, e.g. 3) carried over, which is a different quantity from our divergence bound."""
    delta = cfg.hparams.get("delta")
    if delta is None or delta <= PLAUSIBLE_DELTA:
        return None
    low, high = divergence.kl3_ratio_range(delta)
    return (f"warning: --delta {delta:g} bounds the divergence (as KL3's delta: w in [{low:.3f}, "
            f"{high:.3f}]); TRL's `delta` (INTELLECT-2's upper ratio bound) is a different quantity: "
            "--clip dual-clip --dual-clip-c here")


def band(cfg) -> str:
    """', it keeps w in [0.671, 1.422]': the method's effective band (loss.effective_band), if it has one."""
    found = effective_band(cfg.clip, tuple(sorted(cfg.hparams.items())))
    return "" if found is None else f", keeps w in [{found[0]:.3f}, {found[1]:.3f}]"
