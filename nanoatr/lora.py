"""LoRA through peft: adapters on our Qwen3, saved in peft's own format, loaded back, merged.

An adapter saved here loads on transformers' Qwen3ForCausalLM and one made there loads here (the same
module names). peft's layers live inside our model, which works as before; the PeftModel around it saves,
switches the adapters off and merges. Why so, and peft imported where used: docs/library.md#lora"""
import contextlib
import json
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors import SafetensorError, safe_open

from nanoatr.model import ModelError, Qwen3
from nanoatr.model.files import local_dir
from nanoatr.tokenizer import copy_tokenizer

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


class AdapterError(ValueError):
    """An adapter that does not fit; the message is one line for the user."""


def check_targets(targets) -> str | None:
    """What is wrong with --lora-targets, as one line, or None."""
    if "lm_head" in targets:
        # scoring.token_logprobs reads lm_head.weight itself: a LoRA on lm_head would be silently ignored.
        return ("--lora-targets: lm_head is not supported (log-probs use lm_head.weight directly, chunk by "
                "chunk)")
    if unknown := sorted(set(targets) - set(TARGETS) - {"embed_tokens"}):
        return f"--lora-targets: {unknown[0]!r} is not a Qwen3 projection (choose from {', '.join(TARGETS)})"
    return None


def add_adapters(model, rank: int, alpha: float, targets, base: str):
    """Wrap `model` (our Qwen3) with fresh, trainable LoRA adapters; every base weight is frozen.

    lora_B starts at zero, so the wrapped model starts exactly as the base. Dropout is 0: it would
    make the first ratio differ from 1 and the KL noisy (a dropout mask differs between the rollout's
    scoring and the update's, so pi_old would not be the policy that is trained).
    """
    from peft import LoraConfig, get_peft_model
    model.name_or_path = base  # peft records it as the adapter's base_model_name_or_path
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0, bias="none")
    return get_peft_model(model, config)


@contextlib.contextmanager
def merged(model):
    """Inside: the LoRA adapters in `model` folded into their base weights (peft's merge), so that each
    projection is one product instead of three (the rollout's decode steps, on a GPU). After: the adapters
    unmerged and the base weights restored bit for bit from a copy (merging and unmerging in bf16 would
    not give them back exactly). A model without adapters is left alone."""
    layers = [m for m in model.modules() if hasattr(m, "lora_A") and hasattr(m, "merge") and not m.merged]
    with torch.no_grad():
        saved = [m.get_base_layer().weight.detach().clone() for m in layers]
        for m in layers:
            m.merge()
        try:
            yield model
        finally:
            for m, weight in zip(layers, saved):
                m.unmerge()
                m.get_base_layer().weight.copy_(weight)


def is_adapter_dir(path) -> bool:
    return (Path(path) / CONFIG).is_file()


def read_config(path) -> dict:
    path = Path(path)
    try:
        config = json.loads((path / CONFIG).read_text())
    except FileNotFoundError:
        raise AdapterError(f"{path} is not a LoRA adapter directory ({CONFIG} is missing)") from None
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, too many digits, too deep
        raise AdapterError(f"{path}/{CONFIG} is not valid JSON: {e}") from None
    if config.get("peft_type") != "LORA":
        raise AdapterError(f"{path}: peft_type {config.get('peft_type')!r} is not supported (only LoRA "
                           "adapters)")
    return config


def check_adapter(model, path, model_dir=None):
    """Raise AdapterError unless every adapter weight in `path` fits a module of `model` in shape.

    An adapter made for another base (other sizes, or modules it lacks) would otherwise fail deep
    inside peft, or load silently wrong; a different base path with fitting shapes is only noted.
    """
    path = Path(path)
    config = read_config(path)
    if not (path / WEIGHTS).is_file():
        raise AdapterError(f"{path}/{WEIGHTS} is missing")
    base = config.get("base_model_name_or_path") or "an unknown base"
    modules = dict(model.named_modules())
    with safe_open(str(path / WEIGHTS), "pt") as f:
        for key in f.keys():
            # base_model.model.<module path>.lora_A.weight -> <module path>
            name = key.removeprefix("base_model.model.").rsplit(".lora_", 1)[0]
            module = modules.get(name)
            linear = getattr(module, "base_layer", module)  # already wrapped by peft, or not
            if not isinstance(linear, torch.nn.Linear):
                raise AdapterError(f"adapter {path} was made for {base}: it has weights for {name}, "
                                   f"which the model {model_dir or ''} lacks")
            shape = tuple(f.get_slice(key).get_shape())
            if not bool(f.get_tensor(key).isfinite().all()):
                raise AdapterError(f"adapter {path}: {key} holds a NaN or an inf (a run that diverged?)")
            fits = (shape[1] == linear.in_features) if ".lora_A." in key else \
                (shape[0] == linear.out_features)
            if not fits:
                raise AdapterError(f"adapter {path} was made for {base}: {key} has shape {list(shape)}, but "
                                   f"the model's {name} maps {linear.in_features} -> {linear.out_features} "
                                   "features")
    if model_dir and config.get("base_model_name_or_path"):
        made_for, used = Path(config["base_model_name_or_path"]), Path(model_dir)
        if made_for.resolve() != used.resolve() and made_for.name != used.name:
            print(f"note: adapter {path} was trained on {made_for}; applying it to {used} (the shapes fit)",
                  file=sys.stderr)


def load_adapter(model, path, trainable: bool = False, model_dir=None, base: str | None = None):
    """Apply the adapter saved in `path` to `model` (our Qwen3, changed in place); returns the PeftModel.
    base: the base model name to record when it is saved again (train.py's --base-name or --model)."""
    from peft import LoraConfig, PeftModel
    check_adapter(model, path, model_dir)
    config = LoraConfig.from_pretrained(str(path))
    # Saved as CAUSAL_LM for transformers users; our Qwen3 (no HF generation helpers) takes a plain PeftModel.
    config.task_type = None
    config.inference_mode = not trainable
    if base:
        config.base_model_name_or_path = base
    with warnings.catch_warnings():  # peft warns that our model's name differs from the recorded base
        warnings.simplefilter("ignore", UserWarning)
        return PeftModel.from_pretrained(model, str(path), config=config, is_trainable=trainable)


class Dirs(NamedTuple):
    """Where the parts of a model to sample from are: --model and --adapter, resolved."""
    base: Path              # the base model directory (config.json + weights)
    adapter: Path | None    # the LoRA adapter, if any
    tokenizer: Path         # the tokenizer files: the adapter's when it carries them (a run's checkpoint)


def locate(model_dir, adapter=None, revision: str | None = None) -> Dirs:
    """--model and --adapter as local directories; either may be a hub id (model/files.local_dir, at
    --revision for --model). --model may be an adapter directory itself (a LoRA run's checkpoint/): its
    base is then the one its adapter_config.json records, a directory here (a relative path is read from
    the current directory) or a hub id. AdapterError says what to pass if neither."""
    model_dir = local_dir(model_dir, revision)
    adapter = None if adapter is None else local_dir(adapter, what="--adapter")
    if adapter is None and is_adapter_dir(model_dir):
        adapter, base = model_dir, read_config(model_dir).get("base_model_name_or_path")
        if not base:
            raise AdapterError(f"adapter {adapter} does not name its base model: pass --model BASE "
                               f"--adapter {adapter}")
        try:
            model_dir = local_dir(base, what=f"adapter {adapter}'s base")
        except ModelError:
            raise AdapterError(f"adapter {adapter} was trained on {base}, which is neither a model directory "
                               f"here nor a hub id in reach (moved, or a name): pass --model BASE "
                               f"--adapter {adapter}") from None
    has_tokenizer = adapter is not None and (Path(adapter) / "tokenizer.json").is_file()
    return Dirs(Path(model_dir), Path(adapter) if adapter is not None else None,
                Path(adapter if has_tokenizer else model_dir))


def load_model(model_dir, adapter=None, dtype=torch.float32, device="cpu",
               revision: str | None = None) -> tuple:
    """(our Qwen3 in eval mode, its Dirs) for sampling: --model, plus --adapter (see `locate`).

    Adapters stay unmerged: in bf16, merging would round a small LoRA update into the base weights'
    coarse grid (see merge).
    """
    dirs = locate(model_dir, adapter, revision)
    model = Qwen3.from_pretrained(dirs.base, dtype=dtype, device=device)
    if dirs.adapter is not None:
        # its layers now live inside `model`
        load_adapter(model, dirs.adapter, model_dir=dirs.base).to(device)
    return model.eval(), dirs


def load_policy(cfg, model_dir: Path, ckpt: Path | None, device):
    """train.py's and sft.py's policy from their flags (cfg), --model as a local directory (model_dir) and the
    checkpoint it resumes from, if any: (our Qwen3, the PeftModel around it under LoRA or None).

    Trained weights are float32 whatever --dtype (AdamW on bf16 weights loses small updates); under
    LoRA the frozen base is stored in --dtype and peft keeps the adapters in float32.
    """
    if is_adapter_dir(model_dir):
        raise AdapterError(f"--model {cfg.model} is a LoRA adapter; train on its merged model instead "
                           f"(python scripts/merge_adapter.py --adapter {cfg.model} --out DIR)")
    if ckpt is not None and is_adapter_dir(ckpt) != bool(cfg.lora_rank):
        held = "an adapter" if cfg.lora_rank == 0 else "full weights"
        raise AdapterError(f"--resume: the checkpoint {ckpt} holds {held} but the run has "
                           f"--lora-rank {cfg.lora_rank}")
    if not cfg.lora_rank:
        model, peft_model = Qwen3.from_pretrained(ckpt or model_dir, device=device), None
    else:
        model = Qwen3.from_pretrained(model_dir, dtype=getattr(torch, cfg.dtype), device=device)
        base = getattr(cfg, "base_name", "") or cfg.model  # (sft.py has no --base-name)
        alpha = cfg.lora_alpha or 2.0 * cfg.lora_rank
        peft_model = add_adapters(model, cfg.lora_rank, alpha, cfg.lora_targets, base=base) \
            if ckpt is None else load_adapter(model, ckpt, trainable=True, model_dir=model_dir, base=base)
        peft_model.to(device)
    # Non-reentrant checkpointing (model/qwen3.py) gives LoRA its gradients even though the frozen
    # embedding's output does not require grad (the reentrant kind would silently give none).
    model.gradient_checkpointing = cfg.grad_checkpoint
    return model, peft_model


def save_adapter(peft_model, path):
    """adapter_config.json + adapter_model.safetensors, as peft writes them for transformers' models."""
    # CAUSAL_LM: PeftModel.from_pretrained on Qwen3ForCausalLM gives the usual PeftModelForCausalLM, and
    # peft does not record our class as the base (its auto_mapping) for AutoPeftModel to import.
    peft_model.peft_config["default"].task_type = "CAUSAL_LM"
    peft_model.save_pretrained(str(path), save_embedding_layers=False)


def merge(base_dir, adapter_dir, out_dir, dtype=torch.float32):
    """Write base + adapter as one full HF-format checkpoint (weights, config, tokenizer files).

    Merged in float32: a LoRA update after a few hundred steps at lr 5e-6 is far below bf16's
    resolution of the base weights, so merging into bf16 would round much of it away.
    """
    model = Qwen3.from_pretrained(base_dir)
    peft_model = load_adapter(model, adapter_dir, model_dir=base_dir)
    merged = peft_model.merge_and_unload()
    try:
        merged.to(dtype).save_pretrained(out_dir)  # config.json keeps the base's bos / eos / pad ids
        # The base's tokenizer files and generation_config.json, then the adapter's over them: a run's
        # checkpoint carries the tokenizer it trained with.
        copy_tokenizer(base_dir, out_dir)
        copy_tokenizer(adapter_dir, out_dir)
    except (OSError, SafetensorError) as e:  # a full or read-only disk: each file is written atomically
        why = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise AdapterError(f"cannot write the merged model to {out_dir} ({why}); the adapter {adapter_dir} "
                           "is intact") from None
    return Path(out_dir)
