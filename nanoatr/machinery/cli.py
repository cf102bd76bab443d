"""Flags from dataclasses: a command declares its flags as a dataclass, this module turns it into argparse,
checks every value against its range and reports a bad one as one `error:` line naming the flag.
A field is `arg(default, help, section, range)`; the groups below are shared by the commands' configs
(docs/machinery.md#cli)."""
import dataclasses
import importlib.util
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nanoatr.lora import TARGETS, check_targets
from nanoatr.methods import METHODS, RULES, defaults
from nanoatr.rollout import SAMPLERS
from nanoatr.tokenizer import SAMPLING_DEFAULTS, check_template


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


def check_numbers(args, ranges: dict[str, str]) -> None:
    """A command's own counts and rates, each given attribute of `args` (an argparse namespace) inside its
    RANGES name, e.g. {"steps": ">=0", "lr": ">0"}; one left unset (None) is not checked."""
    for name, allowed in ranges.items():
        if getattr(args, name) is not None:
            check_number(name, getattr(args, name), allowed)


def check_ranges(cfg) -> None:
    """Every numeric field inside its declared range, every float finite; ConfigError names the flag."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check_number(f.name, value, f.metadata.get("range"))


# ----------------------------------------------------------------------------
# Declaring fields

# The --help sections, in the order --help lists them (a command has some of them).
DATA, METHOD, ROLLOUT, SAMPLING, OPTIM, EVAL, OUTPUT, RUN = (
    "model and data", "method", "rollout", "sampling", "optimisation", "evaluation", "output and run", "run")
SECTIONS = (DATA, METHOD, ROLLOUT, SAMPLING, OPTIM, EVAL, OUTPUT, RUN)


def arg(default, help: str, section: str = "", range: str | None = None, **kw):
    """A config field with its --help text, --help section and accepted range (a list default is copied per
    instance). kw: choices (a list, or a function giving it when the parser is built), nargs, repeat
    (one value per flag: --stop A --stop B), cli=False (not a flag)."""
    meta = {"help": help, "section": section, "range": range, **kw}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def override(group, name: str, default=dataclasses.MISSING, help: str | None = None):
    """A command's own default (or help) for a field of a shared group; section and range stay the group's."""
    shared = {f.name: f for f in dataclasses.fields(group)}[name]
    if default is dataclasses.MISSING:
        default = shared.default_factory() if callable(shared.default_factory) else shared.default
    return arg(default, **{**shared.metadata, "help": help or shared.metadata["help"]})


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


def sampler_field(section: str):
    """The --sampler field, defined once: SamplingFlags' (eval.py, sample.py) and TrainConfig's (rollouts)
    differ only in their --help section."""
    return arg(SAMPLERS[0], "how tokens are drawn (rollout.draw): inverse-cdf is the same distribution, much "
               "cheaper on CPU at large vocabularies, with other draws for a seed", section, choices=SAMPLERS)


@dataclass
class PromptFlags:
    """How a problem becomes the prompt (every command; tokenizer.format_prompt)."""
    system_prompt: str | None = arg(None, "system message for chat-template models", DATA)
    prompt_template: str | None = arg(None, "prompt text with a {question} field, used instead of the chat "
                                      "template (base models; default: the chat template when the tokenizer "
                                      "has one)", DATA)
    thinking: bool | None = arg(None, "Qwen3's enable_thinking switch in the chat template (default: the "
                                "template's own)", DATA)


@dataclass
class DataFlags:
    """How a problem file is read (train.py's --data and --eval-data, eval.py's --data; nanoatr/data.py)."""
    answer_field: str | None = arg(None, "the column holding the gold answer, in every problem file; a "
                                   "dotted name reaches into a struct (reward_model.ground_truth). Default: "
                                   "answer, or reward_model.ground_truth in rows that have a reward_model "
                                   "(DAPO, verl)", DATA)


@dataclass
class RewardFlags:
    """Which reward functions grade completions, and their weights (train.py, eval.py; nanoatr/rewards.py)."""
    reward: list[str] = arg([], "reward functions, FILE.py:FUNCTION or MODULE:FUNCTION, of TRL's shape: "
                            "fn(completions, **columns) -> a list of one float (or None) per completion "
                            "(nanoatr/rewards.py). They run in this process, unsandboxed, on untrusted model "
                            "output. Default: the --task's built-in (the verifier, for math)", DATA)
    reward_weights: list[float] = arg([], "the weight of each --reward function, in its order (default: 1 "
                                      "each); a completion's reward is the weighted sum, None left out", DATA)
    correct_reward: str = arg("", "the reward function whose reward > 0 makes a completion correct, by "
                              "its function name: what accuracy (and groups_all_correct/_wrong), Mean@k and "
                              "Pass@k count. One of --reward's, the task's built-in (math_reward, "
                              "countdown_reward: graded beside yours, weight 0, on --answer-field's gold), "
                              "or total (the weighted total > 0). Default: the built-in, or total where a "
                              "row has no gold", DATA)


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
    sampler: str = sampler_field(SAMPLING)
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
                           "minibatch", OPTIM, ">=0")
    lr: float = arg(1e-4, "AdamW learning rate", OPTIM, ">0")
    weight_decay: float = arg(0.0, "AdamW weight decay", OPTIM, ">=0")
    grad_clip: float = arg(1.0, "clip the gradient norm to this (0 = off)", OPTIM, ">=0")
    lora_rank: int = arg(0, "LoRA rank (0 = full fine-tuning); adapters are saved in peft's format", OPTIM,
                         ">=0")
    lora_alpha: float = arg(0.0, "LoRA alpha (0 = 2 x rank)", OPTIM, ">=0")
    lora_targets: list[str] = arg(list(TARGETS), "modules that get LoRA adapters", OPTIM)
    dtype: str = arg("float32", "bfloat16: frozen weights in bf16 and bf16 autocast for matmuls; trained "
                     "weights and log-softmax stay float32", OPTIM, choices=DTYPES)
    grad_checkpoint: bool = arg(False, "recompute each layer's activations in backward (less memory, ~1/3 "
                                "more time)", OPTIM)


@dataclass
class EvalFlags:
    """The held-out evaluation during train.py and sft.py (the files are the command's --eval-data)."""
    eval_every: int = arg(0, "evaluate every N steps (0 = only before and after training)", EVAL, ">=0")
    eval_k: int = arg(8, "k of Mean@k / Pass@k (samples per held-out problem)", EVAL, ">=1")
    eval_temperature: float = arg(1.0, "sampling temperature of evaluation (0 = greedy)", EVAL, ">=0")
    eval_top_p: float = arg(1.0, "nucleus of evaluation sampling", EVAL, "(0,1]")
    eval_max_new_tokens: int = arg(0, "completion budget of evaluation (0 = --max-new-tokens)", EVAL, ">=0")
    eval_batch_size: int = arg(256, "completions sampled together in evaluation", EVAL, ">=1")
    eval_limit: int = arg(0, "evaluate on the first N problems of each file (0 = all)", EVAL, ">=0")


REPORTERS = ("tensorboard", "wandb")  # --report-to's destinations (metrics_log.py), one package each


@dataclass
class RunFlags:
    """The run folder of train.py and sft.py (machinery/folder.py), its checkpoints and seed."""
    out_dir: str = arg("runs", "parent directory of run directories", RUN)
    name: str = arg("", "run name (default: <clip>-<time>-<random>); a new run refuses an existing folder",
                    RUN)
    resume: str = arg("", "continue the run in this run directory from its checkpoint", RUN)
    save_every: int = arg(50, "write the checkpoint every N steps (and at the end, and when stopped by "
                          "Ctrl-C or SIGTERM)", RUN, ">=1")
    seed: int = arg(0, "seed of prompt order, sampling and initialisation", RUN, ">=0")
    device: str = arg("auto", "cpu, cuda, cuda:N, or auto (CUDA if available)", RUN)
    report_to: list[str] = arg(["none"], "none, or where else every number of metrics.jsonl (at its "
                               "step) and the run's settings go: tensorboard (<run>/tensorboard/), wandb "
                               "(Weights & Biases), or both; each is an optional package (pip install "
                               "tensorboard / wandb). metrics.jsonl stays the record", RUN,
                               choices=["none", *REPORTERS])
    wandb_project: str | None = arg(None, "the wandb project of --report-to wandb (default: WANDB_PROJECT, "
                                    "else nanoatr; the wandb run is named after the run folder unless "
                                    "WANDB_NAME is set; wandb's other WANDB_* settings apply)", RUN)
    workdir: str = arg("", "the directory the run was started in, which the relative paths of its "
                       "settings are relative to (runs.from_start); empty in a run from before it was "
                       "recorded", cli=False)


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
    if "none" in cfg.report_to and len(cfg.report_to) > 1:
        others = " ".join(r for r in cfg.report_to if r != "none")
        raise ConfigError(f"--report-to none cannot go with {others}")
    if "wandb_project" in given and "wandb" not in cfg.report_to:
        raise ConfigError("--wandb-project would be ignored: without --report-to wandb there is no wandb run")
    for name in cfg.report_to:
        spec = importlib.util.find_spec(name) if name != "none" else None
        # a folder of that name with no package in it (wandb's own ./wandb output) is not the package
        if name != "none" and (spec is None or spec.origin in (None, "namespace")):
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
    if method not in METHODS:
        raise ConfigError(f"--clip must be one of {', '.join(METHODS)} (got {method!r})")
    allowed = defaults(method)
    for name in hparams:
        if name not in allowed:
            names = ", ".join(flag(k) for k in allowed) or "none"
            raise ConfigError(f"{flag(name)} does not apply to --clip {method} (its flags: {names})")
    hp = {**allowed, **hparams}
    for name, value in hp.items():
        check_number(name, value, RULES.get(name))
    if "clip_cov_lb" in hp and not hp["clip_cov_lb"] < hp["clip_cov_ub"]:
        raise ConfigError(f"--clip-cov-lb must be < --clip-cov-ub (got {hp['clip_cov_lb']} and "
                          f"{hp['clip_cov_ub']})")
    if "delta_max" in hp and not hp["delta_max"] >= hp["delta"]:
        raise ConfigError(f"--delta-max must be >= --delta (got {hp['delta_max']} and {hp['delta']})")
    return hp
