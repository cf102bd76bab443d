"""A Qwen3 checkpoint directory in and out: a local directory or a Hugging Face hub id (local_dir),
config.json checked into Qwen3Config's fields, the safetensors weights (one file or shards) checked
against the config, and both written atomically. An unusable directory is a ModelError whose one line
names the file (docs/library.md#model-files)."""
import dataclasses
import json
import math
import os
import re
import shutil
import sys
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, HFValidationError,
                                    LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError)
from safetensors.torch import load_file, save_file


class ModelError(ValueError):
    """A checkpoint directory that cannot be loaded; the message is one line for the user."""


# What nanoatr reads of a hub repository: configs, safetensors weights, tokenizer and chat template files
# (never .bin / .pt / .gguf weights, which a repository may carry beside them).
HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "tokenizer*"]


def hub_cli(action: str) -> str:
    """The command line that does `action` ("download NAME", "login") with the hub's CLI as installed here:
    huggingface_hub >= 0.34 has `hf` (`hf auth login`), and 1.0 dropped `huggingface-cli`."""
    beside = Path(sys.executable).parent  # a venv used without activating it: its bin/ is not on PATH
    if any(shutil.which(n, path=p) for n in ("hf", "hf.exe") for p in (str(beside), None)):
        return "hf " + ("auth login" if action == "login" else action)
    return "huggingface-cli " + action


def local_dir(name, revision: str | None = None, what: str = "--model") -> Path:
    """`name` as a local model directory: itself when it is a directory, else a Hugging Face hub id
    ("Qwen/Qwen3-1.7B") found in, or downloaded into, huggingface_hub's cache (its progress bar; HF_HOME /
    HF_HUB_CACHE say where; HF_HUB_OFFLINE=1 reads the cache only), at `revision` (a branch, tag or
    commit; default main). Anything else is one ModelError line saying which and what to pass instead."""
    path = Path(name)
    if path.is_dir():
        if revision:
            raise ModelError(f"--revision {revision}: {what} {name} is a local directory, which has no "
                             "revisions")
        return path
    if path.exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", str(name)) or path.parent.is_dir():
        raise ModelError(f"{what} {name}: no such directory" + (" (a file)" if path.is_file() else ""))
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    at = f" at revision {revision}" if revision else ""
    local = "pass a local model directory"
    try:
        return Path(snapshot_download(str(name), revision=revision, allow_patterns=HUB_FILES,
                                      local_files_only=offline))
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
        raise ModelError(f"{what} {name}{at} is not in the local hub cache and {why}: download it where "
                         f"there is a network ({hub_cli(f'download {name}')}), or {local}") from None
    except GatedRepoError:
        raise ModelError(f"{what} {name} is gated on the hub: accept its license there and log in "
                         f"({hub_cli('login')}), or {local}") from None
    except RevisionNotFoundError:
        raise ModelError(f"--revision {revision}: {name} has no such branch, tag or commit on the "
                         "hub") from None
    except RepositoryNotFoundError:
        raise ModelError(f"{what} {name}: no such model on the hub (a private one needs {hub_cli('login')}), "
                         f"and no such directory here; {local}") from None
    except (HfHubHTTPError, HFValidationError, OSError) as e:
        raise ModelError(f"{what} {name}: the hub failed ({str(e).splitlines()[0][:160]}); {local}") from None


def config_fields(d) -> dict:
    """Qwen3Config's fields from a transformers config.json dict (4.x writes `rope_theta`, 5.x
    `rope_parameters`). Anything that is not a Qwen3 config raises ModelError, one line without the
    file's name."""
    if not isinstance(d, dict):
        raise ModelError(f"expected a JSON object, found a {type(d).__name__}")
    if d.get("model_type") != "qwen3":
        raise ModelError(f"has model_type {d.get('model_type')!r}; nanoatr runs 'qwen3' models")
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise ModelError(f"rope_parameters must be an object, found {rope!r}")
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ModelError(f"rope type {rope.get('rope_type', rope.get('type'))!r} is not supported (only "
                         "default RoPE)")
    layers = d.get("layer_types")  # transformers 5 writes each layer's attention there
    if d.get("use_sliding_window") or (isinstance(layers, list) and "sliding_attention" in layers):
        raise ModelError("uses sliding-window attention (use_sliding_window), which nanoatr's Qwen3 lacks")
    if d.get("hidden_act", "silu") != "silu":
        raise ModelError(f"has hidden_act {d.get('hidden_act')!r}; nanoatr's Qwen3 has SiLU ('silu') only")
    missing = [k for k in SIZES if d.get(k) is None]
    if missing:
        raise ModelError(f"lacks the Qwen3 field {missing[0]!r}")
    values = {k: d[k] for k in (*SIZES, *OPTIONAL) if d.get(k) is not None}
    values["rope_theta"] = rope.get("rope_theta", d.get("rope_theta", 10_000.0))  # transformers' default
    values.setdefault("head_dim", 128)  # transformers' Qwen3Config default (not hidden_size / heads)
    for k, v in values.items():
        problem = field_problem(k, v)
        if problem:
            raise ModelError(f"{k} {problem} (found {v!r})")
    if values["num_attention_heads"] % values["num_key_value_heads"]:
        raise ModelError(f"num_attention_heads {values['num_attention_heads']} is not a multiple of "
                         f"num_key_value_heads {values['num_key_value_heads']}")
    values.update({k: float(values[k]) for k in ("rms_norm_eps", "rope_theta") if k in values})
    return values


def config_json(fields: dict) -> dict:
    """The config.json that transformers' Qwen3ForCausalLM loads (token ids only where known)."""
    d = {k: v for k, v in fields.items() if v is not None or k not in TOKEN_IDS}
    d["rope_scaling"] = None  # written in the 4.x form, which 5.x still reads
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu", **d}


SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads")
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
OPTIONAL = ("head_dim", "rms_norm_eps", "tie_word_embeddings", "attention_bias", "max_position_embeddings",
            *TOKEN_IDS)


def is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def finite(v) -> bool:
    """A finite number, also as a float: an int too large for one (10**400) is not."""
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def field_problem(name: str, v) -> str | None:
    """What is wrong with one config.json value, or None."""
    if name in ("tie_word_embeddings", "attention_bias"):
        return None if isinstance(v, bool) else "must be true or false"
    if name in ("rms_norm_eps", "rope_theta"):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and finite(v) and v > 0
        return None if ok else "must be a positive number"
    if name in TOKEN_IDS:
        ids = v if isinstance(v, list) and name == "eos_token_id" else [v]
        ok = ids and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
        return None if ok else "must be a token id" + (" or a list of them" if name == "eos_token_id" else "")
    return None if is_count(v) else "must be a positive integer"


def load(model_cls, config_cls, path, dtype=torch.float32, device="cpu"):
    """A model_cls(config_cls(...)) with the weights of an HF-format directory: config.json plus
    model.safetensors or a sharded index, in `dtype` on `device`."""
    path = Path(path)
    if not path.is_dir():
        raise ModelError(f"model directory {str(path)!r} does not exist")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelError(f"{config_file} is missing: not a Hugging Face model directory")
    try:
        cfg = config_cls(**config_fields(json.loads(config_file.read_text(encoding="utf-8"))))
    except ModelError as e:
        raise ModelError(f"{config_file}: {e}") from None
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, too many digits, too deep
        raise ModelError(f"{config_file} is not valid JSON: {e}") from None
    except OSError as e:
        raise ModelError(f"cannot read {config_file}: {e.strerror or e}") from None
    state, where = load_state_dict(path)
    with torch.device("meta"):
        model = model_cls(cfg)
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    shapes = {k: v.shape for k, v in model.state_dict().items()
              if not (cfg.tie_word_embeddings and k == "lm_head.weight")}
    missing, unexpected = shapes.keys() - state.keys(), state.keys() - shapes.keys()
    if missing or unexpected:
        what = f"missing {sorted(missing)[:3]}" if missing else f"unexpected {sorted(unexpected)[:3]}"
        raise ModelError(f"{path}: weights do not match the Qwen3 config ({what})")
    for k, shape in shapes.items():
        if state[k].shape != shape:
            raise ModelError(f"{where[k]}: {k} has shape {list(state[k].shape)}, but {config_file} gives "
                             f"{list(shape)}: the config's sizes do not match the weights")
        if not state[k].is_floating_point():
            raise ModelError(f"{where[k]}: {k} holds {state[k].dtype}, not floating-point weights")
        if not bool(state[k].isfinite().all()):
            raise ModelError(f"{where[k]}: {k} holds a NaN or an inf (the weights of a run that diverged?)")
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(device=device, dtype=dtype)


def save(model, path):
    """Write config.json and model.safetensors, each atomically (temp file + rename)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight")  # shared with embed_tokens; safetensors refuses aliases
    atomic_write(path / "model.safetensors", lambda f: save_file(state, f, metadata={"format": "pt"}))
    config = config_json(dataclasses.asdict(model.config))
    atomic_write(path / "config.json", lambda f: Path(f).write_text(json.dumps(config, indent=2)))


def load_state_dict(path: Path) -> tuple[dict, dict]:
    """(tensors by name, the file each came from): model.safetensors, or the shards of an index."""
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict) or \
                    not all(isinstance(v, str) and v for v in weight_map.values()):
                raise TypeError("weight_map must map tensor names to shard file names")
        except (ValueError, RecursionError, KeyError, TypeError) as e:
            what = "no weight_map" if isinstance(e, KeyError) else str(e).splitlines()[0]
            raise ModelError(f"{index} is not a shard index ({what})") from None
        except OSError as e:
            raise ModelError(f"cannot read {index}: {e.strerror or e}") from None
        files = [path / shard for shard in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise ModelError(f"{path}: shard {f.name} named in {index.name} is missing")
    else:
        raise ModelError(f"{path} has no weights: expected model.safetensors or model.safetensors.index.json")
    state, where = {}, {}
    for f in files:
        try:
            tensors = load_file(f)
        except Exception as e:  # safetensors raises its own error types (truncated, bad header, not a file)
            raise ModelError(f"{f} is not a readable safetensors file (truncated or corrupt?): "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        state.update(tensors)
        where.update(dict.fromkeys(tensors, f))
    return state, where


def atomic_write(path: Path, write):
    """Call write(tmp_path) and rename over `path`, so a crash never leaves a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(str(tmp))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
