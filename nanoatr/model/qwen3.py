"""Qwen3 from scratch: in the order of its diagram, token embedding -> N blocks (RMSNorm -> attention
with per-head q/k RMSNorm and RoPE, grouped-query -> residual -> RMSNorm -> SwiGLU MLP -> residual) ->
RMSNorm -> lm_head; and the KV cache the rollout decodes with.

Parameter names mirror transformers' Qwen3ForCausalLM, so a Hugging Face checkpoint loads with a plain
`load_state_dict` (docs/library.md#qwen3). Three CPU speed variants are named functions below:
real_tokens, decode_attention, blocked_lm_head (docs/speed.md)."""
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from nanoatr.model import files

VOCAB_BLOCK = 1024  # vocabulary rows per block of blocked_lm_head on CPU


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
    max_position_embeddings: int = 32_768  # transformers' default: what a config.json without it means
    # Not used by the model; carried from the source config.json into every config.json written, because
    # transformers' generate stops at config.json's eos_token_id when no generation_config.json came along.
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None


# ----------------------------------------------------------------------------
# The model, top down

class Qwen3(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.gradient_checkpointing = False

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache: "KVCache | None" = None):
        """Logits (B, S, V). Training code should prefer `hidden` + chunked log-probs (see scoring.py)."""
        return self.logits(self.hidden(input_ids, attention_mask, position_ids, cache))

    def hidden(self, input_ids, attention_mask=None, position_ids=None, cache: "KVCache | None" = None):
        """Final normalised hidden states (B, S, D).

        attention_mask (B, S) marks real tokens (1) and padding (0); None means all real. Without a
        cache, positions count real tokens only (cumsum), so a left-padded row gets the positions it
        has alone. With a cache, the caller passes positions; the new slots' validity goes to
        `cache.valid`, which masks the keys of later steps.
        """
        mask, positions = attention_layout(input_ids, attention_mask, position_ids, cache)
        x = self.model.embed_tokens(input_ids)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        real = real_tokens(attention_mask, cache, input_ids.shape[1])
        for i, block in enumerate(self.model.layers):
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, cos, sin, mask, cache, i, use_reentrant=False)
            else:
                x = block(x, cos, sin, mask, cache, i, real)
        if cache is not None:
            cache.length += input_ids.shape[1]
        return self.model.norm(x)

    def decode(self, tokens, positions, at: "DecodeSlot"):
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

    def logits(self, h):
        """lm_head(h); on the CPU at inference, blocked_lm_head (the same numbers, faster)."""
        w = self.lm_head.weight
        if w.device.type != "cpu" or w.shape[0] < 4 * VOCAB_BLOCK or torch.is_grad_enabled():
            return self.lm_head(h)
        return blocked_lm_head(h, w)

    def new_cache(self, batch: int, max_len: int, windows: bool = True) -> "KVCache":
        p = self.lm_head.weight
        return KVCache(self.config, batch, max_len, p.dtype, p.device, windows)

    @classmethod
    def from_pretrained(cls, path, dtype=torch.float32, device="cpu") -> "Qwen3":
        """Load an HF-format directory (config.json, model.safetensors or shards); a ModelError names
        the file of whatever is wrong with it (files.load)."""
        return files.load(cls, Qwen3Config, path, dtype, device)

    def save_pretrained(self, path):
        """Write config.json and model.safetensors, each atomically (files.save)."""
        files.save(self, path)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class Backbone(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Block(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, cache, layer, real=None):
        """real: None, or the flat indices of x's (B, S, D) real tokens when the MLP may skip padding."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        h = self.post_attention_layernorm(x)
        if real is None:
            return x + self.mlp(h)
        # The MLP, three quarters of a layer's products, runs on the real tokens only; padding keeps x.
        # Under bf16 autocast the MLP returns bf16 while float32 weights keep x in float32: add in x's dtype.
        return x.flatten(0, 1).index_add(0, real, self.mlp(h.flatten(0, 1)[real]).to(x.dtype)).view_as(x)


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
            out = decode_attention(q, k, v, mask)
        else:
            # mask None means plain causal attention over unpadded rows: the fast fused path.
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                                 enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))


class MLP(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


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
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32)
                               / head_dim)
    freqs = positions.float()[:, None, :, None] * inv_freq  # (B, 1, S, head_dim/2)
    sin = freqs.sin()
    return freqs.cos().repeat(1, 1, 1, 2).to(dtype), torch.cat([-sin, sin], dim=-1).to(dtype)


def apply_rope(x, cos, sin):
    """x (B, H, S, D) rotated: x * cos + rotate_half(x) * sin, with rotate_half(x) = roll(x) * sign."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), sin)


def build_mask(key_valid, q_len: int, offset: int):
    """Boolean (B, 1, S, K) mask: query i (at slot offset+i) sees valid keys at slots <= its own.

    A query always sees itself, so a padding query never has an empty row (which would give NaN).
    """
    q_slot = torch.arange(offset, offset + q_len, device=key_valid.device)[:, None]  # (S, 1)
    k_slot = torch.arange(key_valid.shape[1], device=key_valid.device)[None, :]  # (1, K)
    causal = k_slot <= q_slot
    return ((causal & key_valid[:, None, :]) | (k_slot == q_slot))[:, None]


def attention_layout(input_ids, attention_mask, position_ids, cache):
    """(boolean (B, 1, S, K) mask, or None for plain causal attention; positions (B, S)) of a forward.

    With a cache the new slots' validity is recorded first, and the mask covers every slot so far;
    without one, padding (attention_mask 0) is masked and positions count real tokens only."""
    B, S = input_ids.shape
    offset = cache.length if cache is not None else 0
    key_valid = None if attention_mask is None else attention_mask.bool()  # (B, K)
    if cache is not None:
        cache.valid[:, offset:offset + S] = True if key_valid is None else key_valid
        key_valid = cache.valid[:, :offset + S]
    plain = key_valid is None or (offset == 0 and key_valid.all())
    mask = None if plain else build_mask(key_valid, S, offset)
    if position_ids is None and attention_mask is not None and cache is None:  # count real tokens only
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    elif position_ids is None:
        position_ids = torch.arange(offset, offset + S, device=input_ids.device).expand(B, S)
    return mask, position_ids


class KVCache:
    """Keys and values of every layer, preallocated for the whole generation and written in place.

    Slot j of every row holds the token fed at step j (prompt padding included); `valid` says which
    slots are real, so left-padded prompts of different lengths share one cache. One tensor per layer:
    a compiled decode step then writes each in place (one tensor for all layers compiles to a copy).
    """

    def __init__(self, cfg: Qwen3Config, batch: int, max_len: int, dtype, device, windows: bool = True):
        """windows (decode steps may read past the filled slots: rollout.DecodePlan): each layer gets its own
        zeroed tensors; otherwise one uninitialised block, viewed per layer (why: docs/library.md#qwen3)."""
        shape = (batch, cfg.num_key_value_heads, max_len, cfg.head_dim)
        L = cfg.num_hidden_layers
        if windows:
            self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(L)]
            self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(L)]
        else:
            self.k = list(torch.empty((L, *shape), dtype=dtype, device=device).unbind(0))
            self.v = list(torch.empty((L, *shape), dtype=dtype, device=device).unbind(0))
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


# ----------------------------------------------------------------------------
# CPU speed variants: the same numbers as the plain formulation, faster (figures: docs/speed.md)

def real_tokens(attention_mask, cache, S: int):
    """The flat indices of the real tokens of a left-padded prefill (with a cache, S > 1), else None:
    the MLPs, three quarters of a layer's products, then skip the padding (~25% of a rollout's prompt
    tokens); training (no cache) keeps the plain path. Real rows come out bit-identical."""
    if cache is None or S == 1 or attention_mask is None or attention_mask.all():
        return None
    return attention_mask.flatten().nonzero()[:, 0]


def decode_attention(q, k, v, mask):
    """One query per row (B, H, 1, D) over the cache: the query heads that share a key/value head become
    the rows of one query block, so SDPA streams each cached head once for all of them (with enable_gqa
    it does so once per query head), 11-17% less attention time on CPU. Nothing causal: one position."""
    B, H, _, D = q.shape
    # reshape, not view: a GPU kernel may return its output in another memory layout.
    out = F.scaled_dot_product_attention(q.reshape(B, k.shape[1], -1, D), k, v, attn_mask=mask)
    return out.reshape(B, H, 1, D)


def blocked_lm_head(h, w):
    """h @ w.T in blocks of VOCAB_BLOCK vocabulary rows: MKL runs the (N, D) x (D, V) product of a 32k-152k
    vocabulary ~25% slower in one call than block by block, with bit-identical results; it is the
    largest product of a small model's decode step."""
    return torch.cat([F.linear(h, w[i:i + VOCAB_BLOCK]) for i in range(0, w.shape[0], VOCAB_BLOCK)], dim=-1)


def init_weights(model: Qwen3, std: float = 0.02, seed: int = 0):
    """Random init for training from scratch (the embedded default's warm-start)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():  # the norms' weights (1-D) 1, the matrices N(0, std^2)
            p.copy_(torch.ones_like(p) if p.dim() == 1 else torch.randn(p.shape, generator=g) * std)
        # Residual projections scaled down with depth, as in GPT-2, so activations start O(1).
        for block in model.model.layers:
            for lin in (block.self_attn.o_proj, block.mlp.down_proj):
                lin.weight.mul_(1 / math.sqrt(2 * model.config.num_hidden_layers))
