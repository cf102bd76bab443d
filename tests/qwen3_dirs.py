"""Tiny random-weight Qwen3 directories laid out like the published checkpoints, with Qwen3's real
tokenizer and chat template (tests/data/qwen3-tokenizer, gzipped: a clone has no ../shared).

    instruct / base     which tokenizer_config.json eos (<|im_end|> / <|endoftext|>), config.json ids
                        and generation_config.json the published Qwen3-1.7B / Qwen3-1.7B-Base carry
    tie, shard          tied embeddings in one model.safetensors (1.7B) or untied and sharded (8B)

Weights are transformers' Qwen3ForCausalLM at a tiny width (hidden 32) and Qwen3's vocabulary of
151,936 rows. A *scripted* model (`script`) makes greedy and sampled decoding follow fixed token
chains (each chain token's successor wins by a logit margin of ~100), so stop behaviour can be
checked token by token: CHAT after a chat prompt, NO_THINKING after an --no-thinking one.
"""
import gzip
import json
import shutil
from pathlib import Path

import torch

from conftest import make_hf_model

DATA = Path(__file__).resolve().parent / "data" / "qwen3-tokenizer"
VOCAB, ENDOFTEXT, IM_START, IM_END = 151936, 151643, 151644, 151645

# What the published checkpoints carry (Qwen3-1.7B and Qwen3-1.7B-Base on the Hugging Face hub).
INSTRUCT_CONFIG = {"bos_token_id": ENDOFTEXT, "eos_token_id": IM_END}
INSTRUCT_GENERATION = {"bos_token_id": ENDOFTEXT, "do_sample": True, "eos_token_id": [IM_END, ENDOFTEXT],
                       "pad_token_id": ENDOFTEXT, "temperature": 0.6, "top_k": 20, "top_p": 0.95}
BASE_CONFIG = {"bos_token_id": ENDOFTEXT, "eos_token_id": ENDOFTEXT}
BASE_GENERATION = {"bos_token_id": ENDOFTEXT, "do_sample": False, "eos_token_id": ENDOFTEXT, "max_new_tokens": 2048}

# Scripted continuations. A chat prompt ends in "assistant\n" (198): the model answers 4, ends its turn
# with <|im_end|>, then (as a base model would) invents more: a \boxed{2} that must never be graded,
# then <|endoftext|>. After --no-thinking's "</think>\n\n" (271): " Hi there" and <|endoftext|>, no <|im_end|>.
#             \n    " The" " answer" " is"  " "  "4"  <|im_end|> " \\" "boxed" "{"  "2"  "}" <|endoftext|>
CHAT = [198, 576, 4226, 374, 220, 19, IM_END, 1124, 79075, 90, 17, 92, ENDOFTEXT, 1283, 279, 835]
#              "\n\n" " Hi"  " there" <|endoftext|> " after" " the" " end"
NO_THINKING = [271, 21018, 1052, ENDOFTEXT, 1283, 279, 835]


def tokenizer_files(dst, eos_token: str | None = None) -> Path:
    """Qwen3's tokenizer.json and tokenizer_config.json in dst (eos_token replaced, e.g. for a base model)."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with gzip.open(DATA / f"{name}.gz", "rb") as f:
            data = f.read()
        if name == "tokenizer_config.json" and eos_token:
            data = json.dumps({**json.loads(data), "eos_token": eos_token}, indent=2).encode()
        (dst / name).write_bytes(data)
    return dst


def hf_model(tie: bool, seed: int = 0):
    """A random transformers Qwen3ForCausalLM at Qwen3's vocabulary, tiny otherwise (norms away from 1)."""
    return make_hf_model(tie, theta=1e6, seed=seed, vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         head_dim=8, max_position_embeddings=4096)


def script(model, chains=(CHAT, NO_THINKING), margin: float = 20.0):
    """Make an untied model's next token a function of the current one along `chains`: attention and MLP
    outputs off, each chain token's embedding a one-hot direction of its own, and its successor's
    lm_head row large along it."""
    successor = {}
    for chain in chains:
        for a, b in zip(chain, chain[1:]):
            assert successor.setdefault(a, b) == b, f"token {a} has two successors"
    assert not model.config.tie_word_embeddings and len(successor) <= model.config.hidden_size
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        for dim, (a, b) in enumerate(successor.items()):
            emb[a] = 0.0
            emb[a, dim] = 1.0
            head[b, dim] = margin
    return model


def write_dir(path, model, kind: str = "instruct", config: dict | None = None, generation: dict | None = None,
              shard: bool = False, weights_from: Path | None = None) -> Path:
    """A model directory: weights (or links to those of `weights_from`), config.json with the special-token
    ids of `config` (default: the published ones of `kind`; a None value removes the key),
    generation_config.json = `generation` (default: the published one; {} = no file), the tokenizer."""
    path = Path(path)
    if weights_from is None:
        model.save_pretrained(path, max_shard_size="20MB" if shard else "50GB")
    else:
        path.mkdir(parents=True)
        for f in weights_from.iterdir():
            if f.name.startswith("model"):
                (path / f.name).symlink_to(f.resolve())
        shutil.copy2(weights_from / "config.json", path / "config.json")
    (path / "generation_config.json").unlink(missing_ok=True)
    cfg = json.loads((path / "config.json").read_text())
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        cfg.pop(k, None)
    ids = {**(INSTRUCT_CONFIG if kind == "instruct" else BASE_CONFIG), **(config or {})}
    cfg.update({k: v for k, v in ids.items() if v is not None})
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    generation = (INSTRUCT_GENERATION if kind == "instruct" else BASE_GENERATION) if generation is None else generation
    if generation:
        (path / "generation_config.json").write_text(json.dumps(generation, indent=2))
    tokenizer_files(path, None if kind == "instruct" else "<|endoftext|>")
    return path
