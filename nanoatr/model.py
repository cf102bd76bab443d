"""Qwen3 from scratch: RMSNorm, RoPE, grouped-query attention with per-head q/k norm, SwiGLU, a KV cache.

Parameter names mirror transformers' Qwen3ForCausalLM (`model.layers.0.self_attn.q_proj.weight`, ...)
so that a Hugging Face checkpoint loads with a plain `load_state_dict`, and LoRA adapters made by peft
on our modules carry the same keys as adapters made on transformers' model.
"""
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn


VOCAB_BLOCK = 1024  # vocabulary rows per block of Qwen3.logits on CPU


class ModelError(ValueError):
    """A checkpoint directory that cannot be loaded; the message is one line for the user."""


@dataclass
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    max_position_embeddings: int = 40960
    # Not used by the model; carried from the source config.json into every config.json written, because
    # transformers' generate stops at config.json's eos_token_id when no generation_config.json came along.
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    @classmethod
    def from_hf(cls, d) -> "Qwen3Config":
        """Read a transformers config.json dict (4.x writes `rope_theta`, 5.x `rope_parameters`).
        Anything that is not a Qwen3 config raises ModelError, one line without the file's name."""
        if not isinstance(d, dict):
            raise ModelError(f"expected a JSON object, found a {type(d).__name__}")
        if d.get("model_type") != "qwen3":
            raise ModelError(f"has model_type {d.get('model_type')!r}; nanoatr runs 'qwen3' models")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ModelError(f"rope_parameters must be an object, found {rope!r}")
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ModelError(f"rope type {rope.get('rope_type', rope.get('type'))!r} is not supported (only default RoPE)")
        missing = [k for k in SIZES if d.get(k) is None]
        if missing:
            raise ModelError(f"lacks the Qwen3 field {missing[0]!r}")
        values = {k: d[k] for k in (*SIZES, *OPTIONAL) if d.get(k) is not None}
        values["rope_theta"] = rope.get("rope_theta", d.get("rope_theta", 1_000_000.0))
        values.setdefault("head_dim", d["hidden_size"] // d["num_attention_heads"]
                          if is_count(d["hidden_size"]) and is_count(d["num_attention_heads"]) else None)
        for k, v in values.items():
            problem = field_problem(k, v)
            if problem:
                raise ModelError(f"{k} {problem} (found {v!r})")
        if values["num_attention_heads"] % values["num_key_value_heads"]:
            raise ModelError(f"num_attention_heads {values['num_attention_heads']} is not a multiple of "
                             f"num_key_value_heads {values['num_key_value_heads']}")
        values.update({k: float(values[k]) for k in ("rms_norm_eps", "rope_theta") if k in values})
        return cls(**values)

    def to_hf(self) -> dict:
        """The config.json that transformers' Qwen3ForCausalLM loads (token ids only where known)."""
        d = {k: v for k, v in asdict(self).items() if v is not None or k not in TOKEN_IDS}
        d["rope_scaling"] = None  # written in the 4.x form, which 5.x still reads
        return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu", **d}


SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads")
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
OPTIONAL = ("head_dim", "rms_norm_eps", "tie_word_embeddings", "attention_bias", "max_position_embeddings",
            *TOKEN_IDS)


def is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def field_problem(name: str, v) -> str | None:
    """What is wrong with one config.json value, or None."""
    if name in ("tie_word_embeddings", "attention_bias"):
        return None if isinstance(v, bool) else "must be true or false"
    if name in ("rms_norm_eps", "rope_theta"):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        return None if ok else "must be a positive number"
    if name in TOKEN_IDS:
        ids = v if isinstance(v, list) and name == "eos_token_id" else [v]
        ok = ids and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
        return None if ok else "must be a token id" + (" or a list of them" if name == "eos_token_id" else "")
    return None if is_count(v) else "must be a positive integer"


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # Normalise in float32 whatever the activation dtype, then scale in x's dtype, as the reference
        # does (bf16 loses the mean).
        return self.weight * F.rms_norm(x.float(), x.shape[-1:], eps=self.eps).to(x.dtype)


def rope_cos_sin(positions, head_dim: int, theta: float, dtype):
    """cos and signed sin, each (B, 1, S, head_dim), for integer positions (B, S).

    RoPE rotates the pairs (x[i], x[i + head_dim/2]); the sin returned is (-sin, sin) over the two
    halves, so that apply_rope needs only a roll, not a negation and a concatenation, per layer.
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    freqs = positions.float()[:, None, :, None] * inv_freq  # (B, 1, S, head_dim/2)
    sin = freqs.sin()
    return freqs.cos().repeat(1, 1, 1, 2).to(dtype), torch.cat([-sin, sin], dim=-1).to(dtype)


def apply_rope(x, cos, sin):
    """x (B, H, S, D) rotated: x * cos + rotate_half(x) * sin, with rotate_half(x) = roll(x) * sign."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), sin)


class KVCache:
    """Keys and values of every layer, preallocated for the whole generation and written in place.

    Slot j of every row holds the token fed at step j (prompt padding included); `valid` says which
    slots are real, so left-padded prompts of different lengths share one cache. One tensor per layer:
    a compiled decode step then writes each in place (one tensor for all layers compiles to a copy).
    """

    def __init__(self, cfg: Qwen3Config, batch: int, max_len: int, dtype, device):
        shape = (batch, cfg.num_key_value_heads, max_len, cfg.head_dim)
        # Zeros, not empty: a decode window may reach past the filled slots, and the weight 0 that the mask
        # gives them times a NaN left in uninitialised memory would still be NaN.
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.valid = torch.zeros(batch, max_len, dtype=torch.bool, device=device)
        self.length = 0  # slots filled so far by Qwen3.hidden (Qwen3.decode counts its slots in a tensor)

    def update(self, layer: int, k, v):
        """Write k, v (B, H_kv, S, D) after the filled slots; return the keys and values so far."""
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def keep_rows(self, rows):
        """Keep only these rows (a 1-D index tensor), in this order: finished rows leave the batch."""
        self.k = [k.index_select(0, rows) for k in self.k]
        self.v = [v.index_select(0, rows) for v in self.v]
        self.valid = self.valid.index_select(0, rows)


class DecodeSlot(NamedTuple):
    """The cache as one Qwen3.decode step sees it: the new keys go to `slot`, a (1,) tensor, and
    attention reads the first `window` slots. Nothing depends on the slot's value but data, so one
    compiled step (or CUDA graph) serves every slot of a window."""
    cache: KVCache
    slot: torch.Tensor
    window: int

    def update(self, layer: int, k, v):
        # .to: under bf16 autocast with float32 weights (full fine-tuning) the cache is float32, k and v bf16
        self.cache.k[layer].index_copy_(2, self.slot, k.to(self.cache.k[layer].dtype))
        self.cache.v[layer].index_copy_(2, self.slot, v.to(self.cache.v[layer].dtype))
        return self.cache.k[layer][:, :, :self.window], self.cache.v[layer][:, :, :self.window]


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.cfg = cfg
        hd, bias = cfg.head_dim, cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_attention_heads * hd, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=bias)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, cfg.hidden_size, bias=bias)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)  # Qwen3 normalises each head's q and k before RoPE
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, cache: "KVCache | DecodeSlot | None", layer: int):
        B, S, _ = x.shape
        hd = self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, S, -1, hd)).transpose(1, 2)  # (B, H, S, D)
        k = self.k_norm(self.k_proj(x).view(B, S, -1, hd)).transpose(1, 2)  # (B, H_kv, S, D)
        v = self.v_proj(x).view(B, S, -1, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        if S == 1 and cache is not None:
            # Decode: the query heads that share a key/value head become the rows of one query block, so
            # SDPA streams each cached head once for all of them (with enable_gqa it does once per query
            # head): 11-17% less attention time on CPU. They all sit at the same position: nothing causal.
            # reshape, not view: a GPU kernel may return its output in another memory layout.
            out = F.scaled_dot_product_attention(q.reshape(B, k.shape[1], -1, hd), k, v, attn_mask=mask)
            out = out.reshape(B, -1, 1, hd)
        else:
            # mask None means plain causal attention over unpadded rows: the fast fused path.
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))


class MLP(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, cache, layer, real=None):
        """real: None, or the flat indices of the real tokens of x (B, S, D), when the MLP may skip padding."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        h = self.post_attention_layernorm(x)
        if real is None:
            return x + self.mlp(h)
        # The MLP, three quarters of a layer's products, runs on the real tokens only; padding keeps x.
        # Under bf16 autocast the MLP returns bf16 while float32 weights keep x in float32: add in x's dtype.
        return x.flatten(0, 1).index_add(0, real, self.mlp(h.flatten(0, 1)[real]).to(x.dtype)).view_as(x)


class Backbone(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def build_mask(key_valid, q_len: int, offset: int):
    """Boolean (B, 1, S, K) mask: query i (at slot offset+i) sees valid keys at slots <= its own.

    A query always sees itself, so a padding query never has an empty row (which would give NaN).
    """
    K = key_valid.shape[1]
    q_slot = torch.arange(offset, offset + q_len, device=key_valid.device)[:, None]  # (S, 1)
    k_slot = torch.arange(K, device=key_valid.device)[None, :]  # (1, K)
    causal = k_slot <= q_slot
    return ((causal & key_valid[:, None, :]) | (k_slot == q_slot))[:, None]


class Qwen3(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.gradient_checkpointing = False

    def hidden(self, input_ids, attention_mask=None, position_ids=None, cache: KVCache | None = None):
        """Final normalised hidden states (B, S, D).

        attention_mask (B, S) marks real tokens (1) and padding (0); None means all real. Without a
        cache, positions count real tokens only (cumsum), so a left-padded row gets the positions it
        has alone. With a cache, the caller passes positions; the new slots' validity goes to
        `cache.valid`, which masks the keys of later steps.
        """
        B, S = input_ids.shape
        offset = cache.length if cache is not None else 0
        if cache is not None:
            cache.valid[:, offset:offset + S] = True if attention_mask is None else attention_mask.bool()
            key_valid = cache.valid[:, :offset + S]  # (B, K)
            mask = None if offset == 0 and key_valid.all() else build_mask(key_valid, S, offset)
        elif attention_mask is not None and not attention_mask.bool().all():
            mask = build_mask(attention_mask.bool(), S, 0)
        else:
            mask = None
        if position_ids is None:
            if attention_mask is not None and cache is None:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
            else:
                position_ids = torch.arange(offset, offset + S, device=input_ids.device).expand(B, S)
        x = self.model.embed_tokens(input_ids)
        # A prefill of left-padded prompts (rollout): ~25% of its tokens are padding, which the MLPs skip.
        # Only with a cache, so training (autograd) keeps the plain path. Real rows come out bit-identical.
        real = None
        if cache is not None and S > 1 and attention_mask is not None and not attention_mask.all():
            real = attention_mask.flatten().nonzero()[:, 0]
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta, x.dtype)
        for i, block in enumerate(self.model.layers):
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, cos, sin, mask, cache, i, use_reentrant=False)
            else:
                x = block(x, cos, sin, mask, cache, i, real)
        if cache is not None:
            cache.length += S
        return self.model.norm(x)

    def decode(self, tokens, positions, at: DecodeSlot):
        """Final hidden states (B, 1, D) of one new token per row, tokens (B, 1) at positions (B, 1),
        its keys and values written at slot `at.slot` of `at.cache`. The rollout's step: every shape
        depends on B and `at.window` alone, so it compiles once and replays as a CUDA graph."""
        at.cache.valid.index_fill_(1, at.slot, True)
        x = self.model.embed_tokens(tokens)
        # One query per row sees every valid slot of the window: no causal part. Additive (0 / -inf), since
        # SDPA on CPU handles a boolean mask ~30% slower in every layer; a score plus 0 is exact.
        mask = torch.zeros(x.shape[0], 1, 1, at.window, dtype=x.dtype, device=x.device)
        mask.masked_fill_(~at.cache.valid[:, None, None, :at.window], float("-inf"))
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        for i, block in enumerate(self.model.layers):
            x = block(x, cos, sin, mask, at, i)
        return self.model.norm(x)

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache: KVCache | None = None):
        """Logits (B, S, V). Training code should prefer `hidden` + chunked log-probs (see loss.py)."""
        return self.logits(self.hidden(input_ids, attention_mask, position_ids, cache))

    def logits(self, h):
        """lm_head(h). On CPU, in blocks of VOCAB_BLOCK vocabulary rows: MKL runs the (N, D) x (D, V)
        product of a 32k-152k vocabulary ~25% slower in one call than block by block (64 x 768 x 32k:
        54 ms vs 41 ms on one core here, 64 x 1024 x 152k: 348 vs 263 ms), with bit-identical results.
        This is the largest single product of a decode step of a small model."""
        w = self.lm_head.weight
        if w.device.type != "cpu" or w.shape[0] < 4 * VOCAB_BLOCK or torch.is_grad_enabled():
            return self.lm_head(h)
        return torch.cat([F.linear(h, w[i:i + VOCAB_BLOCK]) for i in range(0, w.shape[0], VOCAB_BLOCK)], dim=-1)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        p = self.lm_head.weight
        return KVCache(self.config, batch, max_len, p.dtype, p.device)

    @classmethod
    def from_pretrained(cls, path, dtype=torch.float32, device="cpu") -> "Qwen3":
        """Load an HF-format directory: config.json plus model.safetensors or a sharded index.

        Every way the directory can be unusable (no config, a config that is not Qwen3's or has wrong
        types, truncated or foreign weights, a broken shard index, weights whose shapes do not fit the
        config) is a ModelError whose one line names the file."""
        path = Path(path)
        if not path.is_dir():
            raise ModelError(f"model directory {str(path)!r} does not exist")
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ModelError(f"{config_file} is missing: not a Hugging Face model directory")
        try:
            cfg = Qwen3Config.from_hf(json.loads(config_file.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ModelError(f"{config_file} is not valid JSON: {e}") from None
        except OSError as e:
            raise ModelError(f"cannot read {config_file}: {e.strerror or e}") from None
        except ModelError as e:
            raise ModelError(f"{config_file}: {e}") from None
        state, where = load_state_dict(path)
        with torch.device("meta"):
            model = cls(cfg)
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
        model.load_state_dict(state, strict=False, assign=True)
        if cfg.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        return model.to(device=device, dtype=dtype)

    def save_pretrained(self, path):
        """Write config.json and model.safetensors, each atomically (temp file + rename)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight")  # shared with embed_tokens; safetensors refuses aliases
        atomic_write(path / "model.safetensors", lambda f: save_file(state, f, metadata={"format": "pt"}))
        atomic_write(path / "config.json", lambda f: Path(f).write_text(json.dumps(self.config.to_hf(), indent=2)))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def load_state_dict(path: Path) -> tuple[dict, dict]:
    """(tensors by name, the file each came from): model.safetensors, or the shards of an index."""
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) and v for v in weight_map.values()):
                raise TypeError("weight_map must map tensor names to shard file names")
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
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


def init_weights(model: Qwen3, std: float = 0.02, seed: int = 0):
    """Random init for training from scratch (the embedded default's warm-start)."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            nn.init.ones_(p)  # norm weights
        else:
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)
    # Residual projections scaled down with depth, as in GPT-2, so activations start O(1).
    for block in model.model.layers:
        for lin in (block.self_attn.o_proj, block.mlp.down_proj):
            lin.weight.data.mul_(1 / math.sqrt(2 * model.config.num_hidden_layers))
