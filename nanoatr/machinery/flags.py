"""Every command's flags: declared once, read before torch loads, checked.

A command's flags are a dataclass of `arg(default, help, section, range)` fields (the groups below are
shared), read with argparse: a bad flag, a typo or TRL's name for one (trl_names.py) is one `error:` line.
Nothing of the core is imported at the top: the core's names are read from its source, and the checks that
need its code import it once the flags are read, so --help and a bad flag answer before torch loads."""
import argparse
import ast
import dataclasses
import difflib
import importlib.util
import math
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path

from nanoatr.machinery.trl_names import CommandLine, hint

class ConfigError(ValueError):
    """A bad flag value; the message names the flag."""


def die(message: str, code: int = 2):
    """One clear line and a non-zero exit: how every command reports bad input."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def flag(name: str) -> str:
    """A field's flag: lora_rank -> --lora-rank."""
    return "--" + name.replace("_", "-")


# The ranges a value may be given in: a field's `range`, and each clipping knob's in methods.RULES.
# Name: (test, wording in the error line).
RANGES = {
    ">0": (lambda v: v > 0, "> 0"), ">=0": (lambda v: v >= 0, ">= 0"), ">=1": (lambda v: v >= 1, ">= 1"),
    ">=2": (lambda v: v >= 2, ">= 2"), ">1": (lambda v: v > 1, "> 1"),
    "(0,1)": (lambda v: 0 < v < 1, "in (0, 1)"),
    "(0,1]": (lambda v: 0 < v <= 1, "in (0, 1]"), "[0,1]": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "[0,1)": (lambda v: 0 <= v < 1, "in [0, 1)"),
}


def check_number(name: str, value, range: str | None = None):
    """A finite number inside its range (a RANGES name, or None for any); ConfigError names the flag."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{flag(name)} must be a finite number (got {value})")
    if range and not RANGES[range][0](value):
        raise ConfigError(f"{flag(name)} must be {RANGES[range][1]} (got {value})")


def check_ranges(cfg) -> None:
    """Every numeric field inside its declared range, every float finite; ConfigError names the flag."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check_number(f.name, value, f.metadata.get("range"))


# ----------------------------------------------------------------------------
# What the flags offer of the core, read from its source: importing it would load torch (seconds).
# tests/test_flags.py holds each equal to the core's own value.

CORE = Path(__file__).resolve().parent.parent


def core_source(module: str) -> dict:
    """The top-level functions and assigned values of nanoatr/<module>.py, by name, as syntax trees."""
    found = {}
    for node in ast.parse((CORE / f"{module}.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    return found


def method_knobs(source: dict) -> dict[str, dict]:
    """methods.METHODS read from methods.py's `source`: each --clip name -> its knobs and their defaults, the
    keyword defaults of the function it names (methods.defaults)."""
    table = {}
    for name, function in zip(source["METHODS"].keys, source["METHODS"].values):
        args = source[function.id].args
        knobs = args.args[len(args.args) - len(args.defaults):]
        table[ast.literal_eval(name)] = {a.arg: ast.literal_eval(d) for a, d in zip(knobs, args.defaults)}
    return table


METHODS_SOURCE = core_source("methods")
METHOD_KNOBS = method_knobs(METHODS_SOURCE)             # --clip's choices and their knobs
KNOB_RULES = ast.literal_eval(METHODS_SOURCE["RULES"])  # each knob's range (a RANGES name)
TASK_NAMES = [ast.literal_eval(name) for name in core_source("data")["TASKS"].keys]   # data.TASKS'
AGGREGATIONS = ast.literal_eval(core_source("loss")["AGGREGATIONS"])
SAMPLERS = ast.literal_eval(core_source("rollout")["SAMPLERS"])     # the first is the default
LORA_TARGETS = ast.literal_eval(core_source("lora")["TARGETS"])

# ----------------------------------------------------------------------------
# What a resume does with a flag given again with another value (resume.resumed_config): each train.py and
# sft.py field's `resume=`. Refused("why") when going on with it would make the run something it was not
# started as; RECORDED when that is a legitimate experiment (config.json's "changes" says from which step);
# FREE when it does not change what is trained.

@dataclass(frozen=True)
class Refused:
    """A flag a resume may not change (given with the run's own value it is no error), and why."""
    why: str


RECORDED = "recorded"  # takes effect from the resumed step on; config.json's "changes" says so
FREE = "free"          # where or how the run computes, not what it trains: taken, not recorded

WEIGHTS = Refused("the checkpoint holds the run's weights (full fine-tuning) or its adapter for that base "
                  "model (LoRA); start a new run from another model")
PROMPTS = Refused("it changes the prompts the policy is trained and evaluated on")
EVALUATION = Refused("the run's evaluations are compared across its steps and with other runs "
                     "(scripts/runs_table.py) under one setting")
ONE_METHOD = Refused("the run is one method of a comparison; start a new run for another")
ROLLOUTS = Refused("it changes the rollouts the run trains on, part of its setting; start a new run")
FOLDER = Refused("a resumed run stays in its folder (to go on in a new one, name a checkpoint: --resume "
                 "RUN/checkpoint --name NEW)")
OPTIMIZER = Refused("the checkpoint's optimizer state has its own")
ADAPTER = Refused("the checkpoint holds full weights or an adapter of the run's shape")
REWARDS = Refused("a run keeps the rewards it trains on; start a new run for another")
# Each optimizer step's rate is a function of its index in the run (train.learning_rate): a resume follows
# the schedule exactly. A linear or cosine one (or a --warmup-ratio) also keeps --steps (check_schedule_kept);
# --minibatches and --epochs, the numbering of the optimizer steps, no resume changes (ONE_METHOD).
SCHEDULE = Refused("the learning rates so far followed the run's schedule; the resumed steps go on with it")

# ----------------------------------------------------------------------------
# Declaring fields

# The --help sections, in the order --help lists them (a command has some of them).
DATA, METHOD, ROLLOUT, SAMPLING, OPTIM, EVAL, OUTPUT, RUN = (
    "model and data", "method", "rollout", "sampling", "optimisation", "evaluation", "output and run", "run")
SECTIONS = (DATA, METHOD, ROLLOUT, SAMPLING, OPTIM, EVAL, OUTPUT, RUN)


def arg(default, help: str, section: str = "", range: str | None = None, **kw):
    """A config field with its --help text, --help section and accepted range (a list default is copied per
    instance). kw: choices (a list, or a function giving it when the parser is built), nargs, repeat (one
    value per flag: --stop A --stop B), cli=False (not a flag), resume (train.py's and sft.py's: above)."""
    meta = {"help": help, "section": section, "range": range, **kw}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def override(group, name: str, default=dataclasses.MISSING, help: str | None = None, section: str = "",
             **kw):
    """A command's own default, help or --help section (or kw: arg's) for a field of a shared group; its range
    stays the group's."""
    shared = {f.name: f for f in dataclasses.fields(group)}[name]
    if default is dataclasses.MISSING:
        default = getattr(group(), name)
    return arg(default, **{**shared.metadata, "help": help or shared.metadata["help"],
                           "section": section or shared.metadata["section"], **kw})


def in_reading_order(cls) -> list:
    """The fields as --help lists them within a section: the class's own, then each group's, in the order the
    class names its groups (a field a command overrides keeps its group's place)."""
    groups = [base for base in cls.__bases__ if dataclasses.is_dataclass(base)]
    inherited = [f for group in groups for f in in_reading_order(group)]
    names = {f.name for f in inherited}
    own = [f for f in dataclasses.fields(cls) if f.name not in names]
    fields = {f.name: f for f in dataclasses.fields(cls)}  # an override's own metadata
    return own + [fields[f.name] for f in inherited]


# ----------------------------------------------------------------------------
# Groups of fields that several commands share

DTYPES = ["float32", "bfloat16"]


@dataclass
class PromptFlags:
    """How a problem becomes the prompt (every command; tokenizer.format_prompt)."""
    system_prompt: str | None = arg(None, "system message for chat-template models", DATA, resume=PROMPTS)
    prompt_template: str | None = arg(None, "prompt text with a {question} field, used instead of the chat "
                                      "template (base models; default: the chat template when the tokenizer "
                                      "has one)", DATA, resume=PROMPTS)
    thinking: bool | None = arg(None, "Qwen3's enable_thinking switch in the chat template (default: the "
                                "template's own)", DATA, resume=PROMPTS)


@dataclass
class DataFlags:
    """How a problem file is read (train.py's --data and --eval-data, eval.py's --data; nanoatr/data.py)."""
    answer_field: str | None = arg(None, "the column holding the gold answer, in every problem file; a "
                                   "dotted name reaches into a struct (reward_model.ground_truth). Default: "
                                   "answer, or reward_model.ground_truth in rows that have a reward_model "
                                   "(DAPO, verl)", DATA, resume=REWARDS)


@dataclass
class RewardFlags:
    """Which reward functions grade completions, and their weights (train.py, eval.py; nanoatr/rewards.py)."""
    reward: list[str] = arg([], "reward functions, FILE.py:FUNCTION or MODULE:FUNCTION, of TRL's shape: "
                            "fn(completions, **columns) -> a list of one float (or None) per completion "
                            "(nanoatr/rewards.py). They run in this process, unsandboxed, on untrusted model "
                            "output. Default: the --task's built-in (the verifier, for math)", DATA,
                            resume=REWARDS)
    reward_weights: list[float] = arg([], "the weight of each --reward function, in its order (default: 1 "
                                      "each); a completion's reward is the weighted sum, None left out", DATA,
                                      resume=REWARDS)
    correct_reward: str = arg("", "the reward function whose reward > 0 makes a completion correct, by "
                              "its function name: what accuracy (and groups_all_correct/_wrong), Mean@k and "
                              "Pass@k count. One of --reward's, the task's built-in (math_reward, "
                              "countdown_reward: graded beside yours, weight 0, on --answer-field's gold), "
                              "or total (the weighted total > 0). Default: the built-in, or total where a "
                              "row has no gold", DATA,
                              resume=Refused("it changes what accuracy, Mean@k and Pass@k count, which are "
                                             "compared across the run's steps"))


@dataclass
class ModelFlags:
    """The model sampled from (eval.py, sample.py): a directory or hub id, with or without an adapter."""
    model: str = arg("data/tiny-qwen3", "model directory (HF format: config.json, safetensors, tokenizer), "
                     "or a hub id (Qwen/Qwen3-1.7B); a run's checkpoint/ directory works as is", DATA)
    adapter: str | None = arg(None, "LoRA adapter directory (peft format, e.g. a LoRA run's checkpoint/), or "
                              "a hub id, applied on top of --model", DATA)
    revision: str | None = arg(None, "the hub revision (branch, tag or commit) of --model when it is a hub "
                               "id", DATA)


@dataclass
class SamplingFlags:
    """How eval.py and sample.py draw; temperature, top-p and top-k left unset come from the model
    (resolve_sampling)."""
    temperature: float | None = arg(None, "sampling temperature (0 = greedy). Default: the model's "
                                    "generation_config.json, else 1.0", SAMPLING, ">=0")
    top_p: float | None = arg(None, "nucleus sampling: draw only from the most likely tokens covering this "
                              "mass. Default: the model's generation_config.json, else 1.0", SAMPLING,
                              "(0,1]")
    top_k: int | None = arg(None, "top-k sampling: draw only from the k most likely tokens (0 = off). "
                            "Default: the model's generation_config.json, else 0", SAMPLING, ">=0")
    sampler: str = arg(SAMPLERS[0], "how tokens are drawn (rollout.draw): inverse-cdf is the same "
                       "distribution, much cheaper on CPU at large vocabularies, with other draws for a seed",
                       SAMPLING, choices=SAMPLERS)
    seed: int = arg(0, "sampling seed", SAMPLING, ">=0")


@dataclass
class DeviceFlags:
    """Where and in what precision eval.py and sample.py run the model."""
    dtype: str = arg("float32", "bfloat16: weights in bf16 and bf16 matmuls (log-softmax stays float32)",
                     OUTPUT, choices=DTYPES)
    device: str = arg("auto", "cpu, cuda, cuda:N, or auto (CUDA if available)", OUTPUT)


@dataclass
class TrainingFlags:
    """What train.py and sft.py train and how: AdamW, gradient accumulation, LoRA, precision."""
    micro_batch: int = arg(0, "sequences per forward/backward (gradient accumulation); 0 = a rank's whole "
                           "minibatch", OPTIM, ">=0", resume=RECORDED)  # the same gradient, other pieces
    lr: float = arg(1e-4, "AdamW learning rate", OPTIM, ">0", resume=OPTIMIZER)
    weight_decay: float = arg(0.0, "AdamW weight decay", OPTIM, ">=0", resume=OPTIMIZER)
    grad_clip: float = arg(1.0, "clip the gradient norm to this (0 = off)", OPTIM, ">=0",
                           resume=Refused("it changes the size of the run's updates, part of its setting"))
    lora_rank: int = arg(0, "LoRA rank (0 = full fine-tuning); adapters are saved in peft's format", OPTIM,
                         ">=0", resume=ADAPTER)
    lora_alpha: float = arg(0.0, "LoRA alpha (0 = 2 x rank)", OPTIM, ">=0", resume=ADAPTER)
    lora_targets: list[str] = arg(list(LORA_TARGETS), "modules that get LoRA adapters", OPTIM, resume=ADAPTER)
    dtype: str = arg("float32", "bfloat16: frozen weights in bf16 and bf16 autocast for matmuls; trained "
                     "weights and log-softmax stay float32", OPTIM, choices=DTYPES,
                     resume=Refused("the precision of the frozen weights and of the matmuls is part of what "
                                    "trained"))
    grad_checkpoint: bool = arg(False, "recompute each layer's activations in backward (less memory, ~1/3 "
                                "more time)", OPTIM, resume=FREE)


@dataclass
class EvalFlags:
    """The held-out evaluation during train.py and sft.py (the files are the command's --eval-data)."""
    eval_every: int = arg(0, "evaluate every N steps (0 = only before and after training)", EVAL, ">=0",
                          resume=RECORDED)  # which steps are evaluated
    eval_k: int = arg(8, "k of Mean@k / Pass@k (samples per held-out problem)", EVAL, ">=1",
                      resume=EVALUATION)
    eval_temperature: float = arg(1.0, "sampling temperature of evaluation (0 = greedy)", EVAL, ">=0",
                                  resume=EVALUATION)
    eval_top_p: float = arg(1.0, "nucleus of evaluation sampling", EVAL, "(0,1]", resume=EVALUATION)
    eval_max_new_tokens: int = arg(0, "completion budget of evaluation (0 = --max-new-tokens)", EVAL, ">=0",
                                   resume=EVALUATION)
    eval_batch_size: int = arg(256, "completions sampled together in evaluation", EVAL, ">=1",
                               resume=RECORDED)  # each batch has its own seed: other draws, same distribution
    eval_limit: int = arg(0, "evaluate on the first N problems of each file (0 = all)", EVAL, ">=0",
                          resume=EVALUATION)


@dataclass
class RunFlags:
    """The run folder of train.py and sft.py (machinery/folder.py), its checkpoints and seed."""
    out_dir: str = arg("runs", "parent directory of run directories", RUN, resume=FOLDER)
    name: str = arg("", "run name (default: <clip>-<time>-<random>); a new run refuses an existing folder",
                    RUN, resume=FOLDER)
    resume: str = arg("", "continue the run in this run directory from its checkpoint", RUN, resume=FREE)
    save_every: int = arg(50, "write the checkpoint every N steps (and at the end, and when stopped by "
                          "Ctrl-C or SIGTERM)", RUN, ">=1", resume=RECORDED)
    seed: int = arg(0, "seed of prompt order, sampling and initialisation", RUN, ">=0",
                    resume=Refused("a seed names one run of its method (scripts/runs_table.py pools one run "
                                   "per seed) and draws its prompt order"))
    device: str = arg("auto", "cpu, cuda, cuda:N, or auto (CUDA if available)", RUN, resume=FREE)
    report_to: list[str] = arg(["none"], "none, or where else every number of metrics.jsonl (at its "
                               "step) and the run's settings go: tensorboard (<run>/tensorboard/), wandb "
                               "(Weights & Biases), or both; each is an optional package (pip install "
                               "tensorboard / wandb). metrics.jsonl stays the record", RUN,
                               choices=["none", "tensorboard", "wandb"], resume=FREE)  # metrics_log.py's
    wandb_project: str | None = arg(None, "the wandb project of --report-to wandb (default: WANDB_PROJECT, "
                                    "else nanoatr; the wandb run is named after the run folder unless "
                                    "WANDB_NAME is set; wandb's other WANDB_* settings apply)", RUN,
                                    resume=FREE)
    workdir: str = arg("", "the directory the run was started in, which the relative paths of its "
                       "settings are relative to (resume.from_start); empty in a run from before it was "
                       "recorded", cli=False, resume=FREE)


# ----------------------------------------------------------------------------
# Each command's flags: its config, and how it reads them


@dataclass
class TrainConfig(DataFlags, PromptFlags, RewardFlags, TrainingFlags, EvalFlags, RunFlags):
    """train.py's flags: its own below, then the shared groups'."""
    task: str = arg("math", "the task: its reward, and the defaults of --model, --data, --eval-data and "
                    "--max-new-tokens (nanoatr/data.py TASKS)", DATA, choices=sorted(TASK_NAMES),
                    resume=Refused("a run keeps its task's model, data and reward; start a new run for "
                                   "another task"))
    model: str = arg("data/tiny-qwen3", "model directory (HF format: config.json, safetensors, tokenizer), "
                     "or a Hugging Face hub id (Qwen/Qwen3-1.7B) fetched into or read from its cache", DATA,
                     resume=WEIGHTS)
    revision: str | None = override(ModelFlags, "revision", resume=WEIGHTS)
    data: str = arg("data/arith/train.jsonl", "training problems: .jsonl, .json or .parquet rows with a "
                    "prompt (text or chat messages: TRL, DAPO, verl) or problem/question, and an answer "
                    "(--answer-field)", DATA,
                    resume=Refused("the run's prompt order is drawn from its own training file"))
    eval_data: list[str] = arg(["data/arith/heldout.jsonl"], "held-out problem files evaluated during "
                               "training (--eval-data with no file: no evaluation)", DATA, nargs="*",
                               resume=EVALUATION)
    clip: str = arg("kl3", "clipping rule (nanoatr/methods.py); its hyper-parameters are the flags listed "
                    "under 'method hyper-parameters'", METHOD, choices=lambda: sorted(METHOD_KNOBS),
                    resume=ONE_METHOD)
    aggregation: str = arg("dr-grpo", "loss aggregation", METHOD, choices=AGGREGATIONS, resume=ONE_METHOD)
    std_normalize: bool = arg(False, "divide advantages by the group's std (GRPO); off = Dr. GRPO", METHOD,
                              resume=ONE_METHOD)
    beta: float = arg(0.0, "KL penalty to the reference policy (the starting model; loss.kl_to_reference); "
                      "0 = none, as in the paper", METHOD, ">=0", resume=ONE_METHOD)
    mask_truncated: bool = arg(False, "completions that ran out of --max-new-tokens (no EOS, no stop string) "
                               "give no gradient; they still count in their group's advantage (TRL's "
                               "mask_truncated_completions)", METHOD, resume=ONE_METHOD)
    overlong_buffer: int = arg(0, "DAPO's soft overlong punishment: over the last N tokens of "
                               "--max-new-tokens the reward falls linearly to -(--overlong-penalty) "
                               "(loss.overlong_penalty); 0 = off", METHOD, ">=0", resume=REWARDS)
    overlong_penalty: float = arg(1.0, "the reward lost by a completion that fills --max-new-tokens, under "
                                  "--overlong-buffer", METHOD, ">=0", resume=REWARDS)
    prompts_per_step: int = arg(16, "distinct prompts sampled per rollout step (over all ranks)", ROLLOUT,
                                ">=1", resume=ROLLOUTS)
    group_size: int = arg(8, "completions per prompt (G; a group of one has no baseline)", ROLLOUT, ">=2",
                          resume=ROLLOUTS)
    max_new_tokens: int = arg(48, "completion budget in tokens", ROLLOUT, ">=1", resume=ROLLOUTS)
    temperature: float = arg(1.0, "sampling temperature of rollouts (and of the log-probs trained on)",
                             ROLLOUT, ">0", resume=ROLLOUTS)
    top_p: float = arg(1.0, "nucleus sampling of rollouts", ROLLOUT, "(0,1]", resume=ROLLOUTS)
    top_k: int = arg(0, "top-k sampling of rollouts (0 = off)", ROLLOUT, ">=0", resume=ROLLOUTS)
    sampler: str = override(SamplingFlags, "sampler", section=ROLLOUT, resume=ROLLOUTS)
    stop: list[str] = arg([], "stop strings besides EOS: a completion is cut after the first one (base "
                          "models; special tokens such as <|im_end|> work too)", ROLLOUT, resume=ROLLOUTS)
    rollout_batch: int = arg(0, "prompts sampled together, each such chunk with its own seed (0 = a rank's "
                             "whole share). Samples depend on it, not on the number of ranks: set it to "
                             "compare runs on different numbers of GPUs", ROLLOUT, ">=0",
                             resume=RECORDED)  # other draws of the same distribution, less memory
    dynamic_sampling: int = arg(0, "DAPO's dynamic sampling: groups whose rewards are all equal (no "
                                "advantage) are replaced by the mixed groups of up to this many more rounds "
                                "of prompts; 0 = off. Each rank fills its own share, so samples then depend "
                                "on the number of ranks", ROLLOUT, ">=0", resume=ROLLOUTS)
    steps: int = arg(400, "rollout steps (each feeds minibatches x epochs optimizer steps)", OPTIM, ">=1",
                     resume=RECORDED)  # train further (or stop sooner)
    minibatches: int = arg(2, "optimizer steps per epoch over a rollout batch; >1 makes clipping act", OPTIM,
                           ">=1", resume=ONE_METHOD)
    epochs: int = arg(1, "passes over each rollout batch", OPTIM, ">=1", resume=ONE_METHOD)
    lr_scheduler: str = arg("constant", "learning-rate schedule over the run's optimizer steps (--steps x "
                            "--minibatches x --epochs), as transformers' get_*_schedule_with_warmup: "
                            "constant, or linear / cosine decay to 0 after the warmup (TRL's default is "
                            "linear with no warmup)", OPTIM, choices=["constant", "linear", "cosine"],
                            resume=SCHEDULE)
    warmup_steps: int = arg(0, "optimizer steps (not rollout steps) of linear warmup from 0 to --lr, under "
                            "any --lr-scheduler (TRL's default: 0)", OPTIM, ">=0", resume=SCHEDULE)
    warmup_ratio: float = arg(0.0, "warmup as a fraction of the run's optimizer steps, rounded up; instead "
                              "of --warmup-steps", OPTIM, "[0,1]", resume=SCHEDULE)
    adam_beta1: float = arg(0.9, "AdamW's beta1 (TRL's and transformers' default: 0.9)", OPTIM, "[0,1)",
                            resume=OPTIMIZER)
    adam_beta2: float = arg(0.99, "AdamW's beta2 (TRL's and transformers' default: 0.999; set it to match a "
                            "TRL run)", OPTIM, "[0,1)", resume=OPTIMIZER)
    base_name: str = arg("", "LoRA runs: the base model the adapter records (adapter_config.json's "
                         "base_model_name_or_path), e.g. Qwen/Qwen3-1.7B for peft and vLLM users (default: "
                         "--model as given, a relative path staying relative)", OPTIM, resume=RECORDED)
    merge: bool = arg(False, "LoRA runs: at the end also write <run>/merged, base + adapter as a full HF "
                      "checkpoint", OPTIM, resume=FREE)
    compile: bool = arg(True, "compile the loss with torch.compile (falls back to eager if it fails)", OPTIM,
                        resume=FREE)
    log_completions: int = arg(0, "write N of each step's completions (prompt, completion, rewards, verdict) "
                               "to samples.jsonl, as TRL's log_completions (0: none)", RUN, ">=0",
                               resume=FREE)
    keep_checkpoints: int = arg(2, "checkpoints kept: checkpoint/ (the latest) and older ones beside it", RUN,
                                ">=1", resume=RECORDED)
    threads: int = arg(0, "CPU threads of torch (0 = as many as the cores other processes leave idle, "
                       "checked before every step; an explicit OMP_NUM_THREADS wins)", RUN, ">=0",
                       resume=FREE)  # every metrics row logs its own
    preset: str | None = arg(None, "start from a published setting; flags given explicitly win (listed at "
                             "the end of --help)", RUN, choices=["paper"],
                             resume=Refused("a resumed run keeps the settings it was started with"))
    device: str = override(RunFlags, "device", help="cpu, cuda, cuda:N, or auto (CUDA if available; under "
                           "torchrun each rank its own GPU)")
    hparams: dict | None = arg(None, "clip method hyper-parameters after defaults (written to config.json)",
                               cli=False, resume=ONE_METHOD)

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


# The paper's Appendix B, Table 4 (Qwen3-1.7B / 8B + LoRA on DAPO-Math-17k; Unsloth + TRL), on our flags,
# with --minibatches 4 (each group of 8 its own optimizer step) so that the ratio moves and clipping acts:
# why, docs/library.md#train-config.
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


# ----------------------------------------------------------------------------
# Reading flags: argparse from a config

class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line, not after a usage block of every flag, and takes every
    flag only in full: a typo or a shortened flag (--delt, --prompt for --prompt-template) is an error that
    names the flag meant, never silently another flag."""

    def __init__(self, *args, moved: dict | None = None, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)
        # A word that begins with - and a digit, a point or inf is a value (--lr -1e-4 reaches its range
        # check), never a flag: argparse's own pattern misses exponents, taking -1e-4 for a flag.
        self._negative_number_matcher = re.compile(r"^-(\.?\d|inf)", re.IGNORECASE)
        self.argv, self.field_defaults = [], {}  # for TRL hints: the words parsed, the fields' defaults
        self.moved = moved or {}  # old flag -> where it went

    def parse_known_args(self, args=None, namespace=None):
        self.argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        """One line: argparse's message, then for each unknown word TRL's name told ours (trl_names), where
        a flag moved, or else the flags it may have meant (names_meant)."""
        unknown = message.split()[2:] if message.startswith("unrecognized arguments:") else []
        line = CommandLine(self.argv, self.field_defaults, METHOD_KNOBS)
        trl = {w.split("=")[0]: told for w in unknown
               if (told := hint(w, line, self._option_string_actions)) is not None}
        trl_text = f"; {'; '.join(trl.values())} (docs/real-scale.md maps TRL's and verl's names)" \
            if trl else ""
        names = [word.split("=")[0] for word in unknown]
        moved = "".join(f"; {self.moved[name]}" for name in names if name in self.moved)
        flags = [f for f in self._option_string_actions if f.startswith("--")]
        hints = "".join(f"; {name}: did you mean {' or '.join(meant)}?" for name in names
                        if name.startswith("--") and name not in trl and name not in self.moved
                        and name not in flags and (meant := names_meant(name, flags)))
        die(f"{message} (see --help){trl_text}{moved}{hints}")


def names_meant(word: str, names: list[str]) -> list[str]:
    """The names a mistyped `word` may have meant: those it begins, when there are 1 to 3 of them, or else the
    one nearest spelling (difflib's ratio >= 0.75); [] when nothing is close."""
    longer = [n for n in names if n.startswith(word)]
    return longer if 0 < len(longer) <= 3 else difflib.get_close_matches(word, names, n=1, cutoff=0.75)


def add_fields(parser: argparse.ArgumentParser, cls):
    """One flag per field, in --help sections (SECTIONS' order, then any other in the order met)."""
    fields = [f for f in in_reading_order(cls) if f.metadata.get("cli") is not False]
    named = [f.metadata.get("section") or "options" for f in fields]
    order = sorted(dict.fromkeys(named), key=lambda s: SECTIONS.index(s) if s in SECTIONS else len(SECTIONS))
    sections = {name: parser.add_argument_group(name) for name in order}
    hints = typing.get_type_hints(cls)
    for f, section in sorted(zip(fields, named), key=lambda pair: order.index(pair[1])):
        add_flag(sections[section], f, hints[f.name])


def add_flag(group, f: dataclasses.Field, tp):
    """The argparse flag of one field: its type, default shown in the help, choices and list behaviour."""
    default = f.default_factory() if callable(f.default_factory) else f.default
    kw = dict(help=f.metadata.get("help", "") + (f" (default: {default})" if default is not None else ""),
              dest=f.name, default=argparse.SUPPRESS)
    if "choices" in f.metadata:  # a function is called now: --clip's choices include methods registered later
        choices = f.metadata["choices"]
        kw["choices"] = choices() if callable(choices) else choices
    args = typing.get_args(tp)
    base = next((a for a in args if a is not type(None)), tp) if args and type(None) in args else tp
    if base is bool:
        group.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, **kw)
    elif typing.get_origin(base) is list and f.metadata.get("repeat"):  # one value a flag: --stop A --stop B
        group.add_argument(flag(f.name), action="append", type=typing.get_args(base)[0], metavar="X", **kw)
    elif typing.get_origin(base) is list:  # --eval-data a b, or --eval-data a --eval-data b: both kept
        group.add_argument(flag(f.name), action="extend", nargs=f.metadata.get("nargs", "+"),
                           type=typing.get_args(base)[0], metavar="X", **kw)
    else:
        metavar = f.name.upper() if "choices" not in kw else None
        group.add_argument(flag(f.name), type=base, metavar=metavar, **kw)


def parse(cls, argv=None, description: str = "", add_flags=None, epilog: str = "",
          usage: str = "%(prog)s [flags]", moved: dict | None = None):
    """Parse argv into cls; `add_flags(parser)` may add flags that are not fields (returned separately). Flags
    not given keep the dataclass default; `given`: the fields the user set (presets fill in the others)."""
    parser = Parser(description=description, epilog=epilog, usage=usage, moved=moved,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fields(parser, cls)
    parser.field_defaults = vars(cls())
    if add_flags:
        add_flags(parser)
    ns = vars(parser.parse_args(argv))
    for action in parser._actions:  # Python keeps bytes that are no UTF-8 as surrogates, which no file takes
        values = ns.get(action.dest) if isinstance(ns.get(action.dest), list) else [ns.get(action.dest)]
        if any(isinstance(v, str) and re.search("[\ud800-\udfff]", v) for v in values):
            die(f"{(action.option_strings or [action.metavar])[0]}: not UTF-8 text (bytes that decode to no "
                "character on the command line)")
    names = {f.name for f in dataclasses.fields(cls)}
    cfg = cls(**{k: v for k, v in ns.items() if k in names})
    return cfg, {k: v for k, v in ns.items() if k not in names}, set(ns) & names


def read(cls, argv=None, description: str = "", add_flags=None, **kw):
    """A command's flags as it reads them first, before it loads anything: parse, then each value given in its
    range (a field's, a --clip knob's KNOB_RULES); a bad one is one error line. The checks across flags and
    files come later (check_flags, resolve)."""
    cfg, extra, given = parse(cls, argv, description, add_flags, **kw)
    knobs = {k for method in METHOD_KNOBS.values() for k in method}
    try:
        check_ranges(cfg)
        for name in sorted(knobs & {k for k, v in extra.items() if v is not None}):
            check_number(name, extra[name], KNOB_RULES.get(name))
    except ConfigError as e:
        die(str(e))
    return cfg, extra, given


def train_flags(argv=None, doc: str = ""):
    """train.py's command line: (TrainConfig, the method's knobs given, the flags given); --help ends with
    the values --preset paper sets."""
    preset = "".join(f"\n  {k.replace('_', '-'):<22} {v}" for k, v in PRESETS["paper"].items())
    epilog = "--preset paper (Appendix B, Table 4; every flag given explicitly overrides it):" + preset
    return read(TrainConfig, argv, doc, hparam_flags, epilog=epilog)


def hparam_flags(parser):
    """--eps, --delta, ...: every clip method's hyper-parameters, defaulting to the method's own."""
    group = parser.add_argument_group("method hyper-parameters (each applies to the --clip methods listed)")
    table = {m: METHOD_KNOBS[m] for m in sorted(METHOD_KNOBS)}
    for k in sorted({k for d in table.values() for k in d}):
        users = ", ".join(f"{m}={d[k]}" for m, d in table.items() if k in d)
        group.add_argument(flag(k), type=float, default=None, dest=k, metavar="X", help=f"defaults: {users}")


# ----------------------------------------------------------------------------
# Checks across flags, once a command has read them

LORA_ONLY = ("lora_alpha", "lora_targets")  # train.py's --merge and --base-name have their own messages
EVAL_ONLY = tuple(f.name for f in dataclasses.fields(EvalFlags))


def check_flags(cfg, given=frozenset()) -> None:
    """What every command checks of its flags: each value's range; the prompt flags; --stop; and, where the
    config has them, LoRA and evaluation flags given (`given`) that would be ignored. ConfigError names
    the flag."""
    ignored = sorted(k for k in given
                     if (k in LORA_ONLY and not cfg.lora_rank) or (k in EVAL_ONLY and not cfg.eval_data))
    if ignored:
        why = "without --lora-rank > 0 there is no adapter" if ignored[0] in LORA_ONLY else \
            "with no --eval-data there is no evaluation"
        raise ConfigError(f"{flag(ignored[0])} would be ignored: {why}")
    check_ranges(cfg)
    if isinstance(cfg, RunFlags):
        check_report_to(cfg, given)
    from nanoatr.lora import check_targets
    from nanoatr.tokenizer import check_template
    lora = isinstance(cfg, TrainingFlags) and cfg.lora_rank
    problem = (check_targets(cfg.lora_targets) if lora else None) or \
        (check_template(cfg.prompt_template) if cfg.prompt_template is not None else None) or \
        ignored_prompt_flag(cfg)
    if problem:
        raise ConfigError(problem)
    if any(not s for s in getattr(cfg, "stop", [])):
        raise ConfigError("--stop: empty stop string")
    if isinstance(cfg, DataFlags) and cfg.answer_field is not None and not cfg.answer_field.strip():
        raise ConfigError("--answer-field: empty column name")
    for name in ("data", "eval_data"):  # lists of files, whose results are named by the file's name
        files = getattr(cfg, name, None)
        stems = [Path(f).stem for f in files] if isinstance(files, list) else []
        if len(set(stems)) < len(stems):
            raise ConfigError(f"{flag(name)}: two files named {next(s for s in stems if stems.count(s) > 1)} "
                              f"({' '.join(files)}): each file's results go by its name; rename one")


def check_report_to(cfg: RunFlags, given=frozenset()) -> None:
    """--report-to: none, or destinations whose package is installed (found now, imported only when the run
    starts); --wandb-project only with wandb. ConfigError names the flag and what to install."""
    others = [r for r in cfg.report_to if r != "none"]
    if "none" in cfg.report_to and others:
        raise ConfigError(f"--report-to none cannot go with {' '.join(others)}")
    if "wandb_project" in given and "wandb" not in cfg.report_to:
        raise ConfigError("--wandb-project would be ignored: without --report-to wandb there is no wandb run")
    for name in others:
        spec = importlib.util.find_spec(name)
        # a folder of that name with no package in it (wandb's own ./wandb output) is not the package
        if spec is None or spec.origin in (None, "namespace"):
            raise ConfigError(f"--report-to {name} needs the {name} package: pip install {name}")


def ignored_prompt_flag(cfg) -> str | None:
    """Prompt flags that would be silently ignored, as one line, or None. (Those that depend on the
    tokenizer, e.g. --thinking with a template that has no such switch: tokenizer.ignored_prompt_flags.)"""
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


def resolve_sampling(cfg: SamplingFlags, defaults: dict, source) -> str:
    """Fill in cfg.temperature / top_k / top_p left unset (None): the model's generation_config.json
    values (`defaults`, read from the file `source`), else SAMPLING_DEFAULTS (1.0 / 0 / 1.0). Returns
    the line saying what is used and where each value came from."""
    from nanoatr.tokenizer import SAMPLING_DEFAULTS
    parts, origins = [], []
    for key, fallback in SAMPLING_DEFAULTS.items():
        if getattr(cfg, key) is not None:
            origins.append(flag(key))
        else:
            setattr(cfg, key, defaults.get(key, fallback))
            origins.append("generation_config.json" if key in defaults else "default")
        parts.append(f"{key.replace('_', '-')} {getattr(cfg, key)}")
    if len(set(origins)) == 1:
        none = f"defaults; {source} sets none" if source else "defaults: no generation_config.json"
        origin = {"generation_config.json": f"from {source}", "default": none}
        return f"sampling: {', '.join(parts)} ({origin.get(origins[0], 'flags')})"
    return "sampling: " + ", ".join(f"{p} ({o})" for p, o in zip(parts, origins)) + \
        (f"; generation_config.json: {source}" if source else "")


def check_hparams(method: str, **hparams) -> dict:
    """Validate a method's hyper-parameters and return them merged over its defaults: once, when a run is
    configured (policy_loss takes them as given). ConfigError names the flag ("--delta must be > 0")."""
    if method not in METHOD_KNOBS:
        raise ConfigError(f"--clip must be one of {', '.join(METHOD_KNOBS)} (got {method!r})")
    allowed = METHOD_KNOBS[method]
    for name in hparams:
        if name not in allowed:
            names = ", ".join(flag(k) for k in allowed) or "none"
            raise ConfigError(f"{flag(name)} does not apply to --clip {method} (its flags: {names})")
    hp = {**allowed, **hparams}
    for name, value in hp.items():
        check_number(name, value, KNOB_RULES.get(name))
    if "clip_cov_lb" in hp and not hp["clip_cov_lb"] < hp["clip_cov_ub"]:
        raise ConfigError(f"--clip-cov-lb must be < --clip-cov-ub (got {hp['clip_cov_lb']} and "
                          f"{hp['clip_cov_ub']})")
    if "delta_max" in hp and not hp["delta_max"] >= hp["delta"]:
        raise ConfigError(f"--delta-max must be >= --delta (got {hp['delta_max']} and {hp['delta']})")
    return hp

def apply_preset(cfg: TrainConfig, given: set) -> TrainConfig:
    """The task's files, then the preset's values, for every field not given on the command line. Your own
    --data needs --eval-data (files, or none): it is refused rather than evaluated on the task's set, which
    is held out from the task's training file only, and a warning line would scroll past above the log."""
    from nanoatr.data import task_defaults
    cfg = task_defaults(cfg, given)
    if cfg.preset is None:
        if "data" in given and "eval_data" not in given:  # the task's set is held out from its own file only
            if not Path(cfg.data).exists():  # said first: no --eval-data makes a missing file train
                raise ConfigError(f"--data {cfg.data}: file not found")
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
    cfg.hparams = check_hparams(cfg.clip, **{k: v for k, v in given_hparams.items() if v is not None})
    from nanoatr.methods import needs
    if needs(cfg.clip, "sequences"):  # one loss per sequence on its tokens: averaged per sequence
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
    for name, why in (("merge", "; a full fine-tuning checkpoint is already whole"),
                      ("base_name", ": it is what the adapter records as its base")):
        if getattr(cfg, name) and not cfg.lora_rank:
            raise ConfigError(f"{flag(name)} needs a LoRA run (--lora-rank > 0){why}")
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
    """A resumed run keeps the learning rates it has followed: under a schedule that spans the run (a decay,
    or a warmup ratio) --steps stays as it was (--minibatches and --epochs, which number the optimizer steps,
    are refused on any resume: ONE_METHOD). cfg: the resumed config; change: this resume's, {field: {"from":
    the run's, "to": cfg's}} (resume.resumed_config)."""
    saved = dataclasses.replace(cfg, **{name: c["from"] for name, c in change.items()})
    if (saved.lr_scheduler != "constant" or saved.warmup_ratio > 0) and cfg.steps != saved.steps:
        raise ConfigError(
            f"--steps {cfg.steps} would change the learning-rate schedule the run has followed "
            f"(--lr-scheduler {saved.lr_scheduler}, warmup {saved.warmup} of {saved.optimizer_steps} "
            f'optimizer steps = --steps x --minibatches x --epochs; {Path(cfg.resume) / "config.json"} has '
            f'"steps": {saved.steps}): a resumed run keeps its schedule; start a new run to train under '
            "another")


PLAUSIBLE_DELTA = 1.0  # above it KL3's band is already [0.159, 3.146]: no trust region anyone sets on purpose


def delta_warning(cfg: TrainConfig) -> str | None:
    """A --delta above PLAUSIBLE_DELTA, as one warning line: most likely TRL's `delta` (INTELLECT-2's upper
    bound on the ratio, e.g. 3) carried over, which is a different quantity from our divergence bound."""
    delta = cfg.hparams.get("delta")
    if delta is None or delta <= PLAUSIBLE_DELTA:
        return None
    from nanoatr.divergence import kl3_ratio_range
    low, high = kl3_ratio_range(delta)
    return (f"warning: --delta {delta:g} bounds the divergence (as KL3's delta: w in [{low:.3f}, "
            f"{high:.3f}]); TRL's `delta` (INTELLECT-2's upper ratio bound) is a different quantity: "
            "--clip dual-clip --dual-clip-c here")


def band(cfg) -> str:
    """', it keeps w in [0.671, 1.422]': the method's effective band (loss.effective_band), if it has one."""
    from nanoatr.loss import effective_band
    found = effective_band(cfg.clip, tuple(sorted(cfg.hparams.items())))
    return "" if found is None else f", keeps w in [{found[0]:.3f}, {found[1]:.3f}]"
