"""TRL's flag names told ours: an unknown flag that is a TRL name gets our flag, its value converted.

TRL counts optimizer steps, nanoatr rollout steps (PER_ROLLOUT_STEP; docs/from-trl.md, "Counting batches"):
a hint converts with the command line's own --minibatches and --epochs (else their defaults), e.g. "TRL's
--max_steps 200 is --steps 100 here at --minibatches 2 (...)"."""
import math

# TRL's names (GRPOConfig, SFTConfig, the `trl` scripts' flags) for what our flags set. Where the meaning
# differs, docs/real-scale.md's table says how (with verl's keys and the paper's); CONVERTED below converts
# the value where the unit differs.
TRL_NAMES = {"num_generations": "--group-size", "num_iterations": "--epochs",
             "steps_per_generation": "--minibatches", "per_device_train_batch_size": "--micro-batch",
             "max_completion_length": "--max-new-tokens", "learning_rate": "--lr",
             "max_grad_norm": "--grad-clip", "max_steps": "--steps", "eval_steps": "--eval-every",
             "save_steps": "--save-every", "gradient_checkpointing": "--grad-checkpoint", "epsilon": "--eps",
             "epsilon_high": "--eps-high", "scale_rewards": "--std-normalize", "loss_type": "--aggregation",
             "model_name_or_path": "--model", "output_dir": "--out-dir",
             "sapo_temperature_pos": "--tau-pos", "sapo_temperature_neg": "--tau-neg",
             "lr_scheduler_type": "--lr-scheduler", "mask_truncated_completions": "--mask-truncated",
             "warmup_steps": "--warmup-steps", "warmup_ratio": "--warmup-ratio",
             "weight_decay": "--weight-decay", "top_p": "--top-p", "top_k": "--top-k",
             "reward_funcs": "--reward", "reward_weights": "--reward-weights", "report_to": "--report-to",
             "adam_beta1": "--adam-beta1", "adam_beta2": "--adam-beta2",
             "log_completions": "--log-completions", "num_completions_to_print": "--log-completions",
             "resume_from_checkpoint": "--resume"}

PER_ROLLOUT_STEP = "--steps counts rollout steps; one is --minibatches x --epochs optimizer steps"


class CommandLine:
    """The words of a command line, and the values of our flags on it (else `defaults`, by field name);
    `knobs`: each --clip method's knobs (flags.METHOD_KNOBS)."""

    def __init__(self, argv: list[str], defaults: dict, knobs: dict | None = None):
        self.argv, self.defaults, self.knobs = argv, defaults, knobs or {}

    def value(self, name: str) -> str | None:
        """The word given to flag `name` (--x V or --x=V); None when it is not given, or given no value."""
        for i, word in enumerate(self.argv):
            if word.startswith(name + "="):
                return word.partition("=")[2]
            if word == name and i + 1 < len(self.argv) and not self.argv[i + 1].startswith("--"):
                return self.argv[i + 1]
        return None

    def number(self, name: str, default=None):
        """Flag `name`'s value as a number (ours: its default when not given); None when it is no number."""
        given = self.value(name)
        if given is None:
            return self.defaults.get(name.lstrip("-").replace("-", "_"), default)
        try:
            return int(given) if given.lstrip("-").isdigit() else float(given)
        except ValueError:
            return None

    def per_rollout_step(self) -> tuple[int, str]:
        """(k, 'at --minibatches 2'): the optimizer steps of one rollout step here, and what sets them."""
        minibatches, epochs = self.number("--minibatches", 2), self.number("--epochs", 1)
        at = f"at --minibatches {minibatches}" + (f" --epochs {epochs}" if epochs != 1 else "")
        return minibatches * epochs, at


# What a TRL name is here, given its value (a number; of the WORDS, the word typed) on the command line:
# f(value, line) -> "is --steps 100 here ..." or "has no flag here: ..."; hint() puts "TRL's NAME VALUE"
# before it.

def in_rollout_steps(ours: str):
    """A TRL count of optimizer steps (max_steps, eval_steps, save_steps), in rollout steps."""
    def told(value: float, line: CommandLine) -> str:
        k, at = line.per_rollout_step()
        steps = math.ceil(value / k)
        rounded = f" ({value:g} / {k} rounded up)" if steps * k != value else ""
        return f"is {ours} {steps} here{rounded} {at} ({PER_ROLLOUT_STEP})"
    return told


def minibatches(value: float, line: CommandLine) -> str:
    accumulation = line.number("--gradient_accumulation_steps", 1)
    return (f"is --minibatches {value / accumulation:g} here with --gradient_accumulation_steps "
            f"{accumulation:g} (steps_per_generation / gradient_accumulation_steps: the optimizer steps one "
            "generation feeds)")


def warmup(value: float, line: CommandLine) -> str:
    if value < 1:
        return f"is --warmup-ratio {value:g} here (below 1, TRL reads it as a ratio)"
    return f"is --warmup-steps {value:g} here (optimizer steps in both)"


def accumulation(value: float, line: CommandLine) -> str:
    per_generation = line.number("--steps_per_generation")
    then = f": with --steps_per_generation {per_generation:g}, --minibatches {per_generation / value:g}" \
        if per_generation else ""
    return ("has no flag here: a minibatch's --micro-batch pieces are always summed into one optimizer step; "
            f"--minibatches is steps_per_generation / gradient_accumulation_steps{then}")


def logging(value: float, line: CommandLine) -> str:
    k, at = line.per_rollout_step()
    return (f"has no flag here: metrics.jsonl logs every rollout step, {k} optimizer steps {at} "
            "(TensorBoard's and wandb's step is the rollout step)")


def epochs(value: float, line: CommandLine) -> str:
    prompts = line.number("--prompts-per-step", 16)
    return (f"has no flag here: --steps counts rollout steps of --prompts-per-step {prompts} prompts; "
            f"{value:g} passes over a file of n prompts is --steps {value:g} x n / {prompts}")


def knob(ours: str, method: str):
    """TRL's name for the knob `ours` of `method` (TRL's method for it): our knob, with --clip `method` named
    where the command line's --clip (or its default) has no such knob. (ours, what it is here)"""
    def told(value, line: CommandLine) -> str:
        value = "" if value is None else f" {value}"
        clip = line.value("--clip") or line.defaults.get("clip")
        if ours[2:].replace("-", "_") in line.knobs.get(clip, {}):
            return f"is {ours}{value} here"
        knobs = " ".join(f"--{k.replace('_', '-')}" for k in line.knobs.get(clip, {})) or "none"
        return (f"is {ours}{value} with --clip {method} here ({ours} is no knob of --clip {clip}: its knobs "
                f"are {knobs})")
    return ours, told


def bf16(value, line: CommandLine) -> str:
    off = str(value).lower() in ("false", "0", "no")
    return f"is --dtype {'float32 (our default)' if off else 'bfloat16'} here"


def named(ours: str, values: dict):
    """A TRL setting whose words are ours spelled otherwise: values[TRL's word] is our flag(s)."""
    def told(value, line: CommandLine) -> str:
        return f"is {values.get(str(value).lower(), f'{ours} ({value}: see --help)')} here"
    return told


def output_dir(value, line: CommandLine) -> str:
    parent, _, run = str(value).rstrip("/").rpartition("/")
    return f"is --out-dir {parent or '.'} --name {run} here (the run folder is --out-dir/--name)"


LOSS_TYPES = {"dr_grpo": "--aggregation dr-grpo", "dapo": "--aggregation token-mean",
              "bnpo": "--aggregation token-mean", "grpo": "--aggregation seq-mean-token-mean"}
SCALES = {"none": "--no-std-normalize", "false": "--no-std-normalize", "group": "--std-normalize",
          "true": "--std-normalize", "batch": "none of ours (batch std: --std-normalize is the group's)"}

# TRL name: (the flag of ours the hint needs in the command, what it is here)
CONVERTED = {"max_steps": ("--steps", in_rollout_steps("--steps")),
             "eval_steps": ("--eval-every", in_rollout_steps("--eval-every")),
             "save_steps": ("--save-every", in_rollout_steps("--save-every")),
             "steps_per_generation": ("--minibatches", minibatches),
             "warmup_steps": ("--warmup-ratio", warmup),
             "gradient_accumulation_steps": ("--minibatches", accumulation),
             "logging_steps": ("--minibatches", logging), "num_train_epochs": ("--steps", epochs),
             "bf16": ("--dtype", bf16), "loss_type": ("--aggregation", named("--aggregation", LOSS_TYPES)),
             "scale_rewards": ("--std-normalize", named("--std-normalize", SCALES)),
             "output_dir": ("--out-dir", output_dir),
             "eval_strategy": ("--eval-every", "has no flag here: --eval-every N evaluates --eval-data every "
                               "N rollout steps (0: only before and after training)"),
             "epsilon": knob("--eps", "clip"), "epsilon_high": knob("--eps-high", "clip-higher"),
             "sapo_temperature_pos": knob("--tau-pos", "soft-gate"),
             "sapo_temperature_neg": knob("--tau-neg", "soft-gate"),
             "fp16": ("--dtype", "has no flag here: float16 is not supported (its narrow range overflows "
                                 "without loss scaling); --dtype bfloat16 is the half precision here"),
             "max_prompt_length": ("--max-new-tokens", "has no flag here: prompts are never cut; a prompt "
                                   "whose tokens and --max-new-tokens pass the model's positions is an error "
                                   "naming its file and row")}
# hinted whatever follows them (a word, a knob's value as given, or nothing)
WORDS = ("bf16", "loss_type", "scale_rewards", "output_dir", "eval_strategy", "fp16",
         "epsilon", "epsilon_high", "sapo_temperature_pos", "sapo_temperature_neg")


def hint(word: str, line: CommandLine, flags) -> str | None:
    """The hint for an unknown `word` that is a TRL name of one of `flags` (the command's), or None."""
    name = word.split("=")[0]
    key = name.lstrip("-").replace("-", "_") if name.startswith("--") else None
    if key in CONVERTED and CONVERTED[key][0] in flags:
        typed, told = line.value(name), CONVERTED[key][1]
        value = typed if key in WORDS else line.number(name)
        if value is not None or key in WORDS:
            return f"TRL's {name}{'' if typed is None else ' ' + typed} " + \
                (told if isinstance(told, str) else told(value, line))
    return f"TRL's {name} is {TRL_NAMES[key]} here" if TRL_NAMES.get(key) in flags else None
