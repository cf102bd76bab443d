"""The flags of every command: one dataclass per command, argparse generated from its fields, and the
checks that turn a bad value into one `error:` line naming the flag.

A field is `arg(default, help, group, range)`: its --help text, the --help section it is listed in,
and the values it accepts (RANGES; every float must also be finite). `--some-field` maps to
`some_field`. The trainer writes the resolved TrainConfig to the run directory, so the logged config
is the one that ran. The paper's preset (Appendix B) is PRESETS["paper"].
"""
import argparse
import dataclasses
import json
import math
import sys
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nanoatr import lora, methods
from nanoatr.data import TASKS
from nanoatr.loss import AGGREGATIONS
from nanoatr.rollout import SAMPLER_HELP, SAMPLERS
from nanoatr.tokenizer import SAMPLING_DEFAULTS, check_template


class ConfigError(ValueError):
    """A bad flag value; the message names the flag."""


# A range's name in arg(), its test and its wording in the error line.
RANGES = {">0": (lambda v: v > 0, "> 0"), ">=0": (lambda v: v >= 0, ">= 0"), ">=1": (lambda v: v >= 1, ">= 1"),
          "(0,1]": (lambda v: 0 < v <= 1, "in (0, 1]"), "[0,1]": (lambda v: 0 <= v <= 1, "in [0, 1]")}


def arg(default, help: str, group: str = "", range: str | None = None, **kw):
    """A config field with its --help text, --help group and accepted range (lists need a default_factory)."""
    meta = {"help": help, "group": group, "range": range, **kw}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_fields(parser: argparse.ArgumentParser, cls):
    """One flag per field, in --help sections by `group` (in the order the groups first appear)."""
    hints, groups = typing.get_type_hints(cls), {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("cli") is False:
            continue
        name = f.metadata.get("group") or "options"
        if name not in groups:
            groups[name] = parser.add_argument_group(name)
        tp, default = hints[f.name], (f.default_factory() if callable(f.default_factory) else f.default)
        kw = dict(help=f.metadata.get("help", "") + (f" (default: {default})" if default is not None else ""),
                  dest=f.name, default=argparse.SUPPRESS)
        if "choices" in f.metadata:  # a callable is read now: --clip's choices include methods registered later
            choices = f.metadata["choices"]
            kw["choices"] = choices() if callable(choices) else choices
        args = typing.get_args(tp)
        base = next((a for a in args if a is not type(None)), tp) if args and type(None) in args else tp
        if base is bool:
            groups[name].add_argument(flag(f.name), action=argparse.BooleanOptionalAction, **kw)
        elif typing.get_origin(base) is list and f.metadata.get("repeat"):  # one value per flag: --stop A --stop B
            groups[name].add_argument(flag(f.name), action="append", type=typing.get_args(base)[0], metavar="X", **kw)
        elif typing.get_origin(base) is list:  # --eval-data a b, or --eval-data a --eval-data b: both kept
            groups[name].add_argument(flag(f.name), action="extend", nargs=f.metadata.get("nargs", "+"),
                                      type=typing.get_args(base)[0], metavar="X", **kw)
        else:
            groups[name].add_argument(flag(f.name), type=base, metavar=f.name.upper() if "choices" not in kw else None,
                                      **kw)


# TRL's names (GRPOConfig, SFTConfig) for what our flags set: an unknown flag that is one of them is told
# ours. Where the meaning differs, docs/real-scale.md's table says how (with verl's keys and the paper's).
TRL_NAMES = {"num_generations": "--group-size", "num_iterations": "--epochs", "steps_per_generation": "--minibatches",
             "per_device_train_batch_size": "--micro-batch", "max_completion_length": "--max-new-tokens",
             "learning_rate": "--lr", "max_grad_norm": "--grad-clip", "max_steps": "--steps",
             "eval_steps": "--eval-every", "save_steps": "--save-every", "gradient_checkpointing": "--grad-checkpoint",
             "epsilon": "--eps", "epsilon_high": "--eps-high", "scale_rewards": "--std-normalize",
             "loss_type": "--aggregation", "model_name_or_path": "--model", "output_dir": "--out-dir"}


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line, not after a usage block of every flag."""

    def error(self, message):
        trl = list(self.trl_flags(message.split()[2:])) if message.startswith("unrecognized arguments:") else []
        die(f"{message} (see --help)" + (f"; TRL's {', '.join(f'{a} is {b}' for a, b in trl)} here "
                                         f"(docs/real-scale.md maps TRL's and verl's names)" if trl else ""))

    def trl_flags(self, words):
        """(flag, ours) for each of `words` that is a TRL name of one of this command's flags."""
        for word in words:
            name = word.split("=")[0]
            ours = TRL_NAMES.get(name.lstrip("-").replace("-", "_")) if name.startswith("--") else None
            if ours in self._option_string_actions:
                yield name, ours


def parse(cls, argv=None, description: str = "", extra=None, epilog: str = "", usage: str = "%(prog)s [flags]"):
    """Parse argv into cls; `extra(parser)` may add flags that are not fields (returned separately).

    Flags not given keep the dataclass default; `given` lists the fields the user set explicitly
    (presets fill in only the others).
    """
    parser = Parser(description=description, epilog=epilog, usage=usage,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fields(parser, cls)
    if extra:
        extra(parser)
    ns = vars(parser.parse_args(argv))
    names = {f.name for f in dataclasses.fields(cls)}
    cfg = cls(**{k: v for k, v in ns.items() if k in names})
    return cfg, {k: v for k, v in ns.items() if k not in names}, set(ns) & names


def die(message: str, code: int = 2):
    """One clear line and a non-zero exit: how every command reports bad input."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def check_ranges(cfg) -> None:
    """Every numeric field inside its declared range, every float finite; ConfigError names the flag."""
    for f in dataclasses.fields(cfg):
        value, rule = getattr(cfg, f.name), f.metadata.get("range")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{flag(f.name)} must be a finite number (got {value})")
        if rule and not RANGES[rule][0](value):
            raise ConfigError(f"{flag(f.name)} must be {RANGES[rule][1]} (got {value})")


# ----------------------------------------------------------------------------
# train.py

DATA, METHOD, ROLLOUT, OPTIM, EVAL, RUN = ("model and data", "method", "rollout", "optimisation", "evaluation", "run")


@dataclass
class TrainConfig:
    task: str = arg("math", "the task: its reward, and the defaults of --model, --data and --eval-data "
                    "(nanoatr/data.py TASKS)", DATA, choices=lambda: sorted(TASKS))
    model: str = arg(TASKS["math"].model, "model directory (HF format: config.json, safetensors, tokenizer), or a "
                     "Hugging Face hub id (Qwen/Qwen3-1.7B) fetched into or read from its cache", DATA)
    revision: str | None = arg(None, "the hub revision (branch, tag or commit) of --model when it is a hub id", DATA)
    data: str = arg(TASKS["math"].data, "training problems (jsonl: problem/answer or DAPO format)", DATA)
    eval_data: list[str] = arg(list(TASKS["math"].eval_data), "held-out problem files evaluated during training "
                               "(--eval-data with no file: no evaluation)", DATA, nargs="*")
    system_prompt: str | None = arg(None, "system message for chat-template models", DATA)
    prompt_template: str | None = arg(None, "prompt text with a {question} field, used instead of the chat "
                                      "template (base models; default: the chat template when the tokenizer has one)",
                                      DATA)
    thinking: bool | None = arg(None, "Qwen3's enable_thinking switch in the chat template (default: the "
                                "template's own)", DATA)
    clip: str = arg("kl3", "clipping rule (nanoatr/methods.py); its hyper-parameters are the flags listed "
                    "under 'method hyper-parameters'", METHOD, choices=lambda: sorted(methods.METHODS))
    aggregation: str = arg("dr-grpo", "loss aggregation", METHOD, choices=AGGREGATIONS)
    std_normalize: bool = arg(False, "divide advantages by the group's std (GRPO); off = Dr. GRPO", METHOD)
    beta: float = arg(0.0, "KL penalty to the reference policy (the starting model; loss.kl_to_reference); "
                      "0 = none, as in the paper", METHOD, ">=0")
    prompts_per_step: int = arg(16, "distinct prompts sampled per rollout step (over all ranks)", ROLLOUT, ">=1")
    group_size: int = arg(8, "completions per prompt (G)", ROLLOUT, ">=1")
    max_new_tokens: int = arg(48, "completion budget in tokens", ROLLOUT, ">=1")
    temperature: float = arg(1.0, "sampling temperature of rollouts (and of the log-probs trained on)", ROLLOUT, ">0")
    top_p: float = arg(1.0, "nucleus sampling of rollouts", ROLLOUT, "(0,1]")
    top_k: int = arg(0, "top-k sampling of rollouts (0 = off)", ROLLOUT, ">=0")
    sampler: str = arg(SAMPLERS[0], SAMPLER_HELP, ROLLOUT, choices=SAMPLERS)
    stop: list[str] = arg([], "stop strings besides EOS: a completion is cut after the first one (base models; "
                          "special tokens such as <|im_end|> work too)", ROLLOUT)
    rollout_batch: int = arg(0, "prompts sampled together, each such chunk with its own seed (0 = a rank's "
                             "whole share). Samples depend on it, not on the number of ranks: set it to "
                             "compare runs on different numbers of GPUs", ROLLOUT, ">=0")
    dynamic_sampling: int = arg(0, "DAPO's dynamic sampling: groups whose rewards are all equal (no advantage) are "
                                "replaced by the mixed groups of up to this many more rounds of prompts; 0 = off. "
                                "Each rank fills its own share, so samples then depend on the number of ranks",
                                ROLLOUT, ">=0")
    steps: int = arg(400, "rollout steps (each feeds minibatches x epochs optimizer steps)", OPTIM, ">=1")
    minibatches: int = arg(2, "optimizer steps per epoch over a rollout batch; >1 makes clipping act", OPTIM, ">=1")
    epochs: int = arg(1, "passes over each rollout batch", OPTIM, ">=1")
    micro_batch: int = arg(0, "sequences per forward/backward (gradient accumulation); 0 = a rank's whole "
                           "minibatch", OPTIM, ">=0")
    lr: float = arg(1e-4, "AdamW learning rate", OPTIM, ">0")
    weight_decay: float = arg(0.0, "AdamW weight decay", OPTIM, ">=0")
    grad_clip: float = arg(1.0, "clip the gradient norm to this (0 = off)", OPTIM, ">=0")
    lora_rank: int = arg(0, "LoRA rank (0 = full fine-tuning); adapters are saved in peft's format", OPTIM, ">=0")
    lora_alpha: float = arg(0.0, "LoRA alpha (0 = 2 x rank)", OPTIM, ">=0")
    lora_targets: list[str] = arg(list(lora.TARGETS), "modules that get LoRA adapters", OPTIM)
    base_name: str = arg("", "LoRA runs: the base model the adapter records (adapter_config.json's "
                         "base_model_name_or_path), e.g. Qwen/Qwen3-1.7B for peft and vLLM users (default: --model "
                         "as given, a relative path staying relative)", OPTIM)
    merge: bool = arg(False, "LoRA runs: at the end also write <run>/merged, base + adapter as a full HF "
                      "checkpoint", OPTIM)
    dtype: str = arg("float32", "bfloat16: frozen weights in bf16 and bf16 autocast for matmuls; trained weights "
                     "and log-softmax stay float32", OPTIM, choices=["float32", "bfloat16"])
    grad_checkpoint: bool = arg(False, "recompute each layer's activations in backward (less memory, ~1/3 "
                                "more time)", OPTIM)
    compile: bool = arg(True, "compile the loss with torch.compile (falls back to eager if it fails)", OPTIM)
    eval_every: int = arg(0, "evaluate every N steps (0 = only before and after training)", EVAL, ">=0")
    eval_k: int = arg(8, "k of Mean@k / Pass@k", EVAL, ">=1")
    eval_temperature: float = arg(1.0, "sampling temperature of evaluation (0 = greedy)", EVAL, ">=0")
    eval_top_p: float = arg(1.0, "nucleus of evaluation sampling", EVAL, "(0,1]")
    eval_max_new_tokens: int = arg(0, "completion budget of evaluation (0 = --max-new-tokens)", EVAL, ">=0")
    eval_batch_size: int = arg(256, "completions sampled together in evaluation", EVAL, ">=1")
    eval_limit: int = arg(0, "evaluate on the first N problems of each file (0 = all)", EVAL, ">=0")
    out_dir: str = arg("runs", "parent directory of run directories", RUN)
    name: str = arg("", "run name (default: <clip>-<time>-<random>); a new run refuses an existing folder", RUN)
    resume: str = arg("", "continue the run in this run directory from its checkpoint", RUN)
    save_every: int = arg(50, "write the checkpoint every N steps (and at the end, and when stopped by Ctrl-C or "
                          "SIGTERM)", RUN, ">=1")
    keep_checkpoints: int = arg(2, "checkpoints kept: checkpoint/ (the latest) and older ones beside it", RUN, ">=1")
    seed: int = arg(0, "seed of prompt order, sampling and initialisation", RUN, ">=0")
    device: str = arg("auto", "cpu, cuda, cuda:N, or auto (CUDA if available; under torchrun each rank its own "
                      "GPU)", RUN)
    threads: int = arg(0, "CPU threads of torch (0 = as many as the cores other processes leave idle, checked "
                       "before every step; an explicit OMP_NUM_THREADS wins)", RUN, ">=0")
    preset: str | None = arg(None, "start from a published setting; flags given explicitly win (listed at the "
                             "end of --help)", RUN, choices=["paper"])
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
    return "--preset paper (Appendix B, Table 4; every flag given explicitly overrides it):\n" + "\n".join(lines)


def hparam_flags(parser):
    """--eps, --delta, ...: every clip method's hyper-parameters, defaulting to the method's own."""
    group = parser.add_argument_group("method hyper-parameters (each applies to the --clip methods listed)")
    table = {m: methods.defaults(m) for m in sorted(methods.METHODS)}
    for k in sorted({k for d in table.values() for k in d}):
        users = ", ".join(f"{m}={d[k]}" for m, d in table.items() if k in d)
        group.add_argument(flag(k), type=float, default=None, dest=k, metavar="X", help=f"defaults: {users}")


REPOSITORY = Path(__file__).resolve().parent.parent


def located(path: str) -> str:
    """A task's file as written when it is there from the current directory, else the repository's own
    (a command started from another folder)."""
    return path if Path(path).exists() or not (REPOSITORY / path).exists() else str(REPOSITORY / path)


def task_defaults(cfg, given: set):
    """The --task's model, problem files and completion budget, for every such field not given on the
    command line (train.py: --data and --eval-data; eval.py: --data is the held-out files)."""
    task = TASKS[cfg.task]
    held_out = [located(f) for f in task.eval_data]
    files = {"data": located(task.data), "eval_data": held_out} if isinstance(cfg, TrainConfig) else \
        {"data": held_out}
    values = {"model": located(task.model), "max_new_tokens": task.max_new_tokens, **files}
    return dataclasses.replace(cfg, **{k: v for k, v in values.items() if k not in given})


def apply_preset(cfg: TrainConfig, given: set) -> TrainConfig:
    """The task's files, then the preset's values, for every field not given on the command line."""
    cfg = task_defaults(cfg, given)
    if cfg.preset is None:
        return cfg
    if not {"model", "data"} <= given:
        raise ConfigError(f"--preset {cfg.preset} needs --model (a Qwen3 checkpoint directory) and --data "
                          "(DAPO-Math-17k as jsonl)")
    if "eval_data" not in given:  # never the embedded arithmetic file, at a 32,768-token budget
        raise ConfigError(f"--preset {cfg.preset} needs --eval-data: its benchmark files (e.g. amc23.jsonl "
                          "aime24.jsonl aime25.jsonl), or --eval-data with no file for no evaluation")
    return TrainConfig(**{**asdict(cfg), **{k: v for k, v in PRESETS[cfg.preset].items() if k not in given}})


LORA_ONLY = ("lora_alpha", "lora_targets")  # --merge and --base-name have their own messages below
EVAL_ONLY = ("eval_every", "eval_k", "eval_temperature", "eval_top_p", "eval_max_new_tokens", "eval_batch_size",
             "eval_limit")


def resolve(cfg: TrainConfig, given_hparams: dict, world: int = 1, given=frozenset()) -> TrainConfig:
    """Fill in the method's default hyper-parameters and check every value, once; ConfigError names the flag.
    given: the flags set on the command line; one that would be ignored (LoRA flags without LoRA, evaluation
    flags without evaluation files) is an error rather than silence."""
    ignored = [k for k in given if (k in LORA_ONLY and not cfg.lora_rank) or (k in EVAL_ONLY and not cfg.eval_data)]
    if ignored:
        why = "without --lora-rank > 0 there is no adapter" if ignored[0] in LORA_ONLY else \
            "with no --eval-data there is no evaluation"
        raise ConfigError(f"{flag(ignored[0])} would be ignored: {why}")
    try:
        cfg.hparams = methods.check_hparams(cfg.clip, **{k: v for k, v in given_hparams.items() if v is not None})
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_ranges(cfg)
    if methods.needs(cfg.clip, "sequences"):  # a loss per sequence, copied onto its tokens: averaged per sequence
        cfg.aggregation = "seq-mean-token-mean"
    if cfg.prompts_per_step % world:
        raise ConfigError(f"--prompts-per-step {cfg.prompts_per_step} must be a multiple of the {world} ranks")
    share = cfg.prompts_per_step // world
    chunk = cfg.rollout_batch or share
    if share % chunk:
        raise ConfigError(f"--rollout-batch {chunk} must divide each rank's {share} prompts")
    if (chunk * cfg.group_size) % cfg.minibatches:  # every chunk gives each minibatch the same number of rows
        raise ConfigError(f"--minibatches {cfg.minibatches} must divide the {chunk * cfg.group_size} completions "
                          f"of a rollout chunk (--rollout-batch {chunk} x --group-size {cfg.group_size})")
    problem = (lora.check_targets(cfg.lora_targets) if cfg.lora_rank else None) or \
        (check_template(cfg.prompt_template) if cfg.prompt_template is not None else None) or prompt_flags_problem(cfg)
    if problem:
        raise ConfigError(problem)
    if cfg.merge and not cfg.lora_rank:
        raise ConfigError("--merge needs a LoRA run (--lora-rank > 0); a full fine-tuning checkpoint is already whole")
    if cfg.base_name and not cfg.lora_rank:
        raise ConfigError("--base-name needs a LoRA run (--lora-rank > 0): it is what the adapter records as its base")
    if any(not s for s in cfg.stop):
        raise ConfigError("--stop: empty stop string")
    cfg.lora_alpha = cfg.lora_alpha or 2.0 * cfg.lora_rank
    return cfg


# What a resume cannot change, and why: train.py takes the folder from --resume, applies no preset or task
# defaults, and loads the optimizer (its lr and weight decay) and the adapter (its shape) from the checkpoint.
FIXED_ON_RESUME = {
    "preset": "a resumed run keeps the settings it was started with",
    "name": "a resumed run stays in its folder", "out_dir": "a resumed run stays in its folder",
    "task": "a run keeps its task's model, data and reward; start a new run for another task",
    "lr": "the checkpoint's optimizer state has its own", "weight_decay": "the checkpoint's optimizer state has its own",
    "lora_rank": "the checkpoint holds full weights or an adapter of the run's rank",
    "lora_alpha": "the checkpoint's adapter keeps its own", "lora_targets": "the checkpoint's adapter keeps its own",
}


def resumed_config(cfg: TrainConfig, extra: dict, given: set) -> tuple[TrainConfig, dict]:
    """The run's saved config, with only the flags given now on top (e.g. --steps to go further). A flag
    the resume would ignore (FIXED_ON_RESUME) with a value other than the run's is a ConfigError, so that
    config.json never records a setting that did not run."""
    saved_file = Path(cfg.resume) / "config.json"
    if not saved_file.is_file():
        raise ConfigError(f"--resume {cfg.resume}: no config.json there, not a run directory")
    try:
        saved = json.loads(saved_file.read_text())
        hparams = saved.pop("hparams") or {}
        run = TrainConfig(**saved)
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, KeyError, TypeError) as e:
        raise ConfigError(f"{saved_file} is not a run's config.json ({type(e).__name__}: {e})") from None
    fixed = [f.name for f in dataclasses.fields(TrainConfig)
             if f.name in given and f.name in FIXED_ON_RESUME and getattr(cfg, f.name) != getattr(run, f.name)]
    if fixed:
        k = fixed[0]
        raise ConfigError(f"{flag(k)} would be ignored by --resume: {FIXED_ON_RESUME[k]} ({saved_file} has "
                          f'"{k}": {json.dumps(getattr(run, k))})')
    cfg = dataclasses.replace(run, **{k: getattr(cfg, k) for k in given})
    if "clip" not in given:
        extra = {**hparams, **{k: v for k, v in extra.items() if v is not None}}
    return cfg, extra


# ----------------------------------------------------------------------------
# sft.py

SFT_DATA, SFT_OPTIM = "model and data", "optimisation"


@dataclass
class SFTConfig:
    model: str | None = arg(None, "the Qwen3 model directory to fine-tune (HF format: config.json, safetensors, "
                            "tokenizer)", SFT_DATA)
    data: str | None = arg(None, "SFT rows, jsonl {problem, solution, answer} (data/get_paper_data.py: "
                           "omr-sft.jsonl)", SFT_DATA)
    eval_data: list[str] = arg([], "held-out problem files whose Mean@k is measured every --eval-every steps "
                               "(e.g. omr-heldout.jsonl; none: no evaluation)", SFT_DATA, nargs="*")
    system_prompt: str | None = arg(None, "system message for chat-template models (as train.py)", SFT_DATA)
    prompt_template: str | None = arg(None, "prompt text with a {question} field instead of the chat template "
                                      "(as train.py)", SFT_DATA)
    thinking: bool | None = arg(None, "Qwen3's enable_thinking switch (as train.py). --no-thinking trains on the "
                                "written solution after a <think> block; thinking keeps the block", SFT_DATA)
    max_len: int = arg(2048, "longest example, prompt + solution + EOS, in tokens; a longer one is an error "
                       "naming it, unless --skip-long", SFT_DATA, ">=1")
    skip_long: bool = arg(False, "drop the examples longer than --max-len (counted and reported) instead of "
                          "stopping", SFT_DATA)
    epochs: float = arg(1.0, "passes over --data (each in its own shuffle)", SFT_OPTIM, ">0")
    steps: int = arg(0, "optimizer steps (0 = --epochs x rows / --batch-size)", SFT_OPTIM, ">=0")
    batch_size: int = arg(16, "examples per optimizer step", SFT_OPTIM, ">=1")
    micro_batch: int = arg(0, "examples per forward/backward (gradient accumulation); 0 = the whole batch",
                           SFT_OPTIM, ">=0")
    lr: float = arg(1e-4, "AdamW learning rate, after a linear --warmup", SFT_OPTIM, ">0")
    warmup: int = arg(20, "steps of linear learning-rate warm-up", SFT_OPTIM, ">=0")
    weight_decay: float = arg(0.01, "AdamW weight decay", SFT_OPTIM, ">=0")
    grad_clip: float = arg(1.0, "clip the gradient norm to this (0 = off)", SFT_OPTIM, ">=0")
    lora_rank: int = arg(32, "LoRA rank (0 = full fine-tuning)", SFT_OPTIM, ">=0")
    lora_alpha: float = arg(0.0, "LoRA alpha (0 = 2 x rank)", SFT_OPTIM, ">=0")
    lora_targets: list[str] = arg(list(lora.TARGETS), "modules that get LoRA adapters", SFT_OPTIM)
    dtype: str = arg("float32", "bfloat16: frozen weights in bf16 and bf16 autocast (a GPU); trained weights and "
                     "log-softmax stay float32", SFT_OPTIM, choices=["float32", "bfloat16"])
    grad_checkpoint: bool = arg(False, "recompute each layer's activations in backward", SFT_OPTIM)
    eval_every: int = arg(0, "evaluate every N steps (0 = before and after training only)", EVAL, ">=0")
    eval_k: int = arg(4, "k of Mean@k / Pass@k (samples per held-out problem)", EVAL, ">=1")
    eval_temperature: float = arg(1.0, "sampling temperature of evaluation (0 = greedy)", EVAL, ">=0")
    eval_top_p: float = arg(1.0, "nucleus of evaluation sampling", EVAL, "(0,1]")
    eval_max_new_tokens: int = arg(0, "completion budget of evaluation (0 = --max-len)", EVAL, ">=0")
    eval_batch_size: int = arg(64, "completions sampled together in evaluation", EVAL, ">=1")
    eval_limit: int = arg(0, "evaluate on the first N problems of each file (0 = all)", EVAL, ">=0")
    out_dir: str = arg("runs", "parent directory of run directories", RUN)
    name: str = arg("", "run name (default: sft-<time>-<random>)", RUN)
    resume: str = arg("", "continue the SFT run in this run directory from its checkpoint", RUN)
    save_every: int = arg(100, "write the checkpoint every N steps (and at the end, and when stopped)", RUN, ">=1")
    seed: int = arg(0, "seed of the data order, LoRA's initialisation and evaluation sampling", RUN, ">=0")
    device: str = arg("auto", "cpu, cuda, cuda:N, or auto (CUDA if available)", RUN)


# ----------------------------------------------------------------------------
# Prompt flags (all three commands) and the sampling defaults of eval.py and sample.py

def prompt_flags_problem(cfg) -> str | None:
    """Prompt flags that would be silently ignored, as one line, or None. (Those that depend on the
    tokenizer, e.g. --thinking with a template that has no such switch: tokenizer.prompt_flags_problem.)"""
    ignored = [f for f, on in (("--thinking" if cfg.thinking else "--no-thinking", cfg.thinking is not None),
                               ("--system-prompt", cfg.system_prompt is not None)) if on]
    if getattr(cfg, "raw", False):
        ignored += ["--prompt-template"] * (cfg.prompt_template is not None)
        if ignored:
            return f"{ignored[0]} has no effect with --raw (the prompt is fed as is)"
    elif cfg.prompt_template is not None and ignored:
        return (f"{ignored[0]} has no effect with --prompt-template (both belong to the chat template): "
                "write it into the template, or drop --prompt-template")
    return None


def resolve_sampling(cfg, defaults: dict, source) -> str:
    """Fill in cfg.temperature / top_k / top_p left unset (None): the model's generation_config.json
    values (`defaults`, read from the file `source`), else SAMPLING_DEFAULTS (1.0 / 0 / 1.0). Returns
    the line saying what is used and where each value came from."""
    parts, origins = [], []
    for key, fallback in SAMPLING_DEFAULTS.items():
        if getattr(cfg, key) is not None:
            origins.append(flag(key))
        else:
            setattr(cfg, key, defaults.get(key, fallback))
            origins.append("generation_config.json" if key in defaults else "default")
        parts.append(f"{key.replace('_', '-')} {getattr(cfg, key)}")
    if len(set(origins)) == 1:
        origin = {"generation_config.json": f"from {source}",
                  "default": f"defaults; {source} sets none" if source else "defaults: no generation_config.json"}
        return f"sampling: {', '.join(parts)} ({origin.get(origins[0], 'flags')})"
    return "sampling: " + ", ".join(f"{p} ({o})" for p, o in zip(parts, origins)) + \
        (f"; generation_config.json: {source}" if source else "")


# ----------------------------------------------------------------------------
# eval.py and sample.py

MODEL, SAMPLING, OUTPUT = "model and data", "sampling", "output and run"


@dataclass
class EvalConfig:
    task: str = arg("math", "the task: its reward, and the defaults of --model, --data and --max-new-tokens "
                    "(nanoatr/data.py TASKS)", MODEL, choices=lambda: sorted(TASKS))
    model: str = arg("data/tiny-qwen3", "model directory (HF format: config.json, safetensors, tokenizer), or a "
                     "hub id (Qwen/Qwen3-1.7B); a run's checkpoint/ directory works as is", MODEL)
    adapter: str | None = arg(None, "LoRA adapter directory (peft format, e.g. a LoRA run's checkpoint/), or a hub "
                              "id, applied on top of --model", MODEL)
    revision: str | None = arg(None, "the hub revision (branch, tag or commit) of --model when it is a hub id", MODEL)
    data: list[str] = arg(["data/arith/heldout.jsonl"], "benchmark files (jsonl: problem/answer or DAPO "
                          "format); each is one column of the table, named by its file stem", MODEL)
    limit: int = arg(0, "use only the first N problems of each file (0 = all)", MODEL, ">=0")
    system_prompt: str | None = arg(None, "system message for chat-template models", MODEL)
    prompt_template: str | None = arg(None, "prompt text with a {question} field, used instead of the chat "
                                      "template (default: the chat template when the tokenizer has one)", MODEL)
    thinking: bool | None = arg(None, "Qwen3's enable_thinking switch in the chat template (default: the "
                                "template's own)", MODEL)
    k: int = arg(8, "k of Mean@k and Pass@k", SAMPLING, ">=1")
    n: int = arg(0, "samples per problem, n >= k (0 = k); more samples give a lower-variance Pass@k", SAMPLING, ">=0")
    temperature: float | None = arg(None, "sampling temperature (0 = greedy); the paper evaluates at 0.3. Default: "
                                    "the model's generation_config.json, else 1.0", SAMPLING, ">=0")
    top_p: float | None = arg(None, "nucleus sampling; the paper evaluates at 0.95. Default: the model's "
                              "generation_config.json, else 1.0", SAMPLING, "(0,1]")
    top_k: int | None = arg(None, "top-k sampling (0 = off). Default: the model's generation_config.json, else 0",
                            SAMPLING, ">=0")
    sampler: str = arg(SAMPLERS[0], SAMPLER_HELP, SAMPLING, choices=SAMPLERS)
    max_new_tokens: int = arg(48, "completion budget in tokens (48 fits the embedded default; real "
                              "math models need thousands)", SAMPLING, ">=1")
    stop: list[str] = arg([], "stop strings besides EOS: a completion is cut after the first one (base models; "
                          "special tokens such as <|im_end|> work too)", SAMPLING)
    batch_size: int = arg(64, "completions sampled together", SAMPLING, ">=1")
    seed: int = arg(0, "sampling seed", SAMPLING, ">=0")
    out: str | None = arg(None, "jsonl file receiving every completion and its verdict "
                          "(default: runs/eval/<model name>-<time>.jsonl)", OUTPUT)
    resume: bool = arg(False, "continue --out: skip the (benchmark, problem, sample) triples already in it", OUTPUT)
    runs: list[str] = arg([], "training run directories: print Table 2 from the evaluations they logged (each run's "
                          "step 0, and the last evaluation with the best of each column in brackets), sampling "
                          "nothing; no other flag applies", OUTPUT)
    dtype: str = arg("float32", "bfloat16: weights in bf16 and bf16 matmuls (log-softmax stays float32)", OUTPUT,
                     choices=["float32", "bfloat16"])
    device: str = arg("auto", "cpu, cuda, cuda:N, or auto (CUDA if available)", OUTPUT)


@dataclass
class SampleConfig:
    model: str = arg("data/tiny-qwen3", "model directory (HF format: config.json, safetensors, tokenizer), or a "
                     "hub id (Qwen/Qwen3-1.7B); a run's checkpoint/ directory works as is", MODEL)
    adapter: str | None = arg(None, "LoRA adapter directory (peft format, e.g. a LoRA run's checkpoint/), or a hub "
                              "id, applied on top of --model", MODEL)
    revision: str | None = arg(None, "the hub revision (branch, tag or commit) of --model when it is a hub id", MODEL)
    raw: bool = arg(False, "feed the prompt text as is: no chat template, no prompt template", MODEL)
    system_prompt: str | None = arg(None, "system message for chat-template models", MODEL)
    prompt_template: str | None = arg(None, "prompt text with a {question} field, used instead of the chat "
                                      "template (default: the chat template when the tokenizer has one)", MODEL)
    thinking: bool | None = arg(None, "Qwen3's enable_thinking switch in the chat template (default: the "
                                "template's own)", MODEL)
    max_new_tokens: int = arg(256, "stop after this many tokens if no stop token came", SAMPLING, ">=1")
    temperature: float | None = arg(None, "sampling temperature (0 = greedy). Default: the model's "
                                    "generation_config.json, else 1.0", SAMPLING, ">=0")
    top_p: float | None = arg(None, "nucleus sampling: draw only from the most likely tokens covering this mass. "
                              "Default: the model's generation_config.json, else 1.0", SAMPLING, "(0,1]")
    top_k: int | None = arg(None, "draw only from the k most likely tokens (0 = off). Default: the model's "
                            "generation_config.json, else 0", SAMPLING, ">=0")
    stop: list[str] = arg([], "a stop string besides EOS: the completion ends after it; one string per --stop, "
                          "repeat the flag for more (special tokens such as <|im_end|> work too)", SAMPLING,
                          repeat=True)
    sampler: str = arg(SAMPLERS[0], SAMPLER_HELP, SAMPLING, choices=SAMPLERS)
    seed: int = arg(0, "sampling seed (one generator for all prompts, in order)", SAMPLING, ">=0")
    gold: str | None = arg(None, "the correct answer: also print the verifier's verdict on each completion", OUTPUT)
    dtype: str = arg("float32", "bfloat16: weights in bf16 and bf16 matmuls (log-softmax stays float32)", OUTPUT,
                     choices=["float32", "bfloat16"])
    device: str = arg("auto", "cpu, cuda, cuda:N, or auto (CUDA if available)", OUTPUT)
