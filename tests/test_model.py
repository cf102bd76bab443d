import contextlib
import copy
import json

import pytest
import torch

from nanoatr.model import VOCAB_BLOCK, ModelError, Qwen3, Qwen3Config, init_weights
from rounding import U64, another_cpu, qwen3_float64, sum_orders, within
from conftest import strict_file


def padded_batch(vocab, lengths, left, seed=0):
    g = torch.Generator().manual_seed(seed)
    S = max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), S), generator=g)
    mask = torch.zeros(len(lengths), S, dtype=torch.long)
    for i, n in enumerate(lengths):
        if left:
            mask[i, S - n:] = 1
        else:
            mask[i, :n] = 1
    return ids * mask, mask


# Every config.json field the model reads, each away from the value Qwen3 ships (a field read wrongly, or not
# at all, moves the logits): rope_theta, rms_norm_eps (0.5 dominates the mean square of these activations),
# head_dim unlike hidden_size / heads, key-value heads 1 (MQA), 2 (GQA) and 4 (MHA), tied embeddings,
# attention biases, the number of layers, max_position_embeddings (RoPE has no limit: carried, never read);
# and a config.json without the optional fields ("drop"), where each side takes its defaults (head_dim 128).
OPTIONAL = ("rms_norm_eps", "rope_parameters", "attention_bias", "tie_word_embeddings", "head_dim",
            "max_position_embeddings")
CONFIGS = {"tiny": dict(), "defaults": dict(drop=OPTIONAL, head_dim=128),
           "theta-eps-tied": dict(theta=30.0, rms_norm_eps=0.5, tie=True),
           "head_dim-mqa-bias": dict(head_dim=24, num_key_value_heads=1, attention_bias=True),
           "mha-3-layers": dict(head_dim=8, num_key_value_heads=4, rms_norm_eps=0.05, theta=1e6, num_hidden_layers=3,
                                max_position_embeddings=8, intermediate_size=48)}


@pytest.mark.parametrize("left", [False, True], ids=["right-pad", "left-pad"])
@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_field_gives_transformers_logits(tmp_path, config, left):
    """transformers' Qwen3ForCausalLM of each config, saved, loaded by us: the same logits (in float64:
    rounding.qwen3_float64, transformers' RMSNorm is other float32 code than ours), tied storage where the
    config ties; and the checkpoint we save of it loads in transformers with the same config and logits."""
    from conftest import make_hf_model
    from transformers import Qwen3ForCausalLM
    config_kw = dict(CONFIGS[config])
    drop = config_kw.pop("drop", ())
    hf = make_hf_model(**config_kw).double()
    with torch.no_grad():  # transformers zero-inits the biases: make them matter
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    hf.save_pretrained(tmp_path / "hf")
    if drop:
        saved = strict_file(tmp_path / "hf/config.json")
        (tmp_path / "hf/config.json").write_text(json.dumps({k: v for k, v in saved.items() if k not in drop}))
        hf = Qwen3ForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float64).eval()
    ours = Qwen3.from_pretrained(tmp_path / "hf", dtype=torch.float64).eval()
    tied = ours.lm_head.weight.data_ptr() == ours.model.embed_tokens.weight.data_ptr()
    assert tied == hf.config.tie_word_embeddings
    ids, mask = padded_batch(ours.config.vocab_size, [11, 7, 3], left)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # transformers counts from slot 0, ours real tokens: pass the same
    ours.save_pretrained(tmp_path / "ours")
    again = Qwen3ForCausalLM.from_pretrained(tmp_path / "ours", dtype=torch.float64).eval()
    fields = ("head_dim", "num_key_value_heads", "rms_norm_eps", "tie_word_embeddings", "attention_bias",
              "num_hidden_layers", "max_position_embeddings", "rope_parameters")
    assert {k: getattr(again.config, k) for k in fields} == {k: getattr(hf.config, k) for k in fields}
    real, tol = mask.bool(), qwen3_float64(ours.config, same_code=False)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits[real]
        within(ours(ids, attention_mask=mask)[real], ref, tol * ref.abs().max(), f"{config} vs HF")
        within(again(input_ids=ids, attention_mask=mask, position_ids=pos).logits[real], ref, tol * ref.abs().max(),
               f"{config}, saved by us, in HF")


def test_padding_does_not_change_real_tokens(tiny_model):
    model = copy.deepcopy(tiny_model).double()  # compared in float64 (rounding.qwen3_float64)
    ids, mask = padded_batch(model.config.vocab_size, [9, 4], left=True)
    with torch.no_grad():
        batched = model(ids, attention_mask=mask)
        alone = model(ids[1:, -4:])
    within(batched[1, -4:], alone[0], qwen3_float64(model.config) * alone.abs().max(), "padded vs alone")


def cached_then_full(model, ids, mask, plant=contextlib.nullcontext):
    """Logits of the real tokens: prefill of 6 and decode steps through the KV cache (under `plant`), and one
    full forward."""
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        with plant():
            cache = model.new_cache(2, ids.shape[1])
            first = model(ids[:, :6], attention_mask=mask[:, :6], position_ids=pos[:, :6], cache=cache)
            steps = [model(ids[:, j:j + 1], attention_mask=mask[:, j:j + 1], position_ids=pos[:, j:j + 1],
                           cache=cache) for j in range(6, ids.shape[1])]
    real = mask.bool()
    return torch.cat([first, *steps], dim=1)[real], full[real]


def test_another_cpus_rounding_passes_the_float64_comparison(tiny_model):
    """The KV-cache comparison's bound (rounding.qwen3_float64) holds when the cached side rounds as another
    CPU might (rounding.another_cpu: every float32 island entry one ulp off, every linear output 64 units of
    rounding off). The float32 comparison it replaced, 1e-5 on the float32 model, failed the same plant
    (64 units of float32 rounding a linear output: 3.7e-5 to 3.9e-5 over these seeds): it held only for CPUs
    that round as the one its tolerance was measured on."""
    ids, mask = padded_batch(tiny_model.config.vocab_size, [8, 5], left=True)
    model = copy.deepcopy(tiny_model).double()
    for seed in range(3):
        inc, full = cached_then_full(model, ids, mask, lambda: another_cpu(seed))
        within(inc, full, qwen3_float64(model.config) * full.abs().max(), f"another CPU, seed {seed}")
    inc, full = cached_then_full(tiny_model, ids, mask, another_cpu)  # the old comparison, float32
    assert (inc - full).abs().max() > 1e-5


def test_sharded_checkpoint(hf_dir, tmp_path):
    path, hf = hf_dir
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    ours, hf = Qwen3.from_pretrained(tmp_path, dtype=torch.float64), copy.deepcopy(hf).double()  # float64
    ids = torch.randint(0, ours.config.vocab_size, (1, 5))
    with torch.no_grad():
        expected = hf(ids).logits
        tol = qwen3_float64(ours.config, same_code=False) * expected.abs().max()
        within(ours(ids), expected, tol, "sharded")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(ModelError, match="shard .* is missing"):
        Qwen3.from_pretrained(tmp_path)


def test_decode_without_attention_mask_means_real_tokens(tiny_model):
    """Decoding with attention_mask=None (the rollout's path: the mask comes from the cache's validity)
    equals passing a mask of ones, and both equal the full forward (in float64: rounding.qwen3_float64)."""
    model = copy.deepcopy(tiny_model).double()
    ids, mask = padded_batch(model.config.vocab_size, [8, 5], left=True)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    outs = []
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        for explicit in (True, False):
            cache = model.new_cache(2, ids.shape[1])
            model(ids[:, :4], attention_mask=mask[:, :4], position_ids=pos[:, :4], cache=cache)
            outs.append(torch.cat([model(ids[:, j:j + 1], position_ids=pos[:, j:j + 1], cache=cache,
                                         attention_mask=torch.ones(2, 1) if explicit else None)
                                   for j in range(4, ids.shape[1])], dim=1))
    assert torch.equal(outs[0], outs[1])
    within(outs[1], full[:, 4:], qwen3_float64(model.config) * full[:, 4:].abs().max(), "decode vs full")


def test_logits_in_vocabulary_blocks_equal_lm_head():
    """Qwen3.logits splits a large vocabulary into blocks on CPU (faster in MKL): same numbers as lm_head,
    and the plain lm_head when gradients are on."""
    cfg = Qwen3Config(vocab_size=5 * VOCAB_BLOCK + 7, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    model = Qwen3(cfg).double()  # in float64: a block's products are summed in its own order
    h = torch.randn(3, 2, 64, dtype=torch.float64)
    with torch.no_grad():
        blocked = model.logits(h)
        assert blocked.shape == (3, 2, cfg.vocab_size)
        whole = model.lm_head(h)
        # each logit sums 64 products, by either kernel in any order: two orders differ elementwise by at
        # most sum_orders(64) of the sum of the products' magnitudes
        bound = sum_orders(64, U64) * (h.abs() @ model.lm_head.weight.abs().T)
        assert ((blocked - whole).abs() <= bound).all(), float((blocked - whole).abs().max())
    assert model.logits(h).grad_fn.name() != "CatBackward0"


# ----------------------------------------------------------------------------
# Unusable directories: one ModelError line naming the file, never a traceback (issue 15)

# config.json's fields as each broken directory holds them (None: the field left out)
CONFIG_EDITS = {
    "hidden_size a string": {"hidden_size": "64"}, "layers a float": {"num_hidden_layers": 2.5},
    "tie a string": {"tie_word_embeddings": "yes"}, "eps negative": {"rms_norm_eps": -1},
    "rope_theta too large for a float": {"rope_theta": 10 ** 400,
                                         "rope_parameters": {"rope_type": "default", "rope_theta": 10 ** 400}},
    "eos a string": {"eos_token_id": "</s>"}, "sliding window": {"use_sliding_window": True},
    "sliding layer": {"layer_types": ["sliding_attention"] * 2}, "hidden_act gelu": {"hidden_act": "gelu"},
    "rope a list": {"rope_parameters": [1]}, "heads not a multiple": {"num_key_value_heads": 3},
    "no vocab_size": {"vocab_size": None}, "hidden size not the weights'": {"hidden_size": 32, "head_dim": 8},
    "vocab not the weights'": {"vocab_size": 98}, "mlp not the weights'": {"intermediate_size": 64},
    "model_type llama": {"model_type": "llama"}}
SHARD_INDEXES = {"index not json": "{", "index without weight_map": "{}", "index weight_map a list": '{"weight_map": []}',
                 "index names a missing shard": '{"weight_map": {"x": "model-00009.safetensors"}}'}
OTHER_BREAKS = ["no directory", "no config.json", "no weights", "config list", "config string",
                "config not utf-8", "truncated", "header only", "empty weights", "garbage weights",
                "integer weights"]
BROKEN = [*CONFIG_EDITS, *SHARD_INDEXES, *OTHER_BREAKS]


def broken_dir(src, dst, case):
    """A copy of model directory `src` in `dst`, broken as `case` says."""
    import shutil
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    cfg, weights = dst / "config.json", dst / "model.safetensors"
    config, data = strict_file(cfg), weights.read_bytes()
    if case in CONFIG_EDITS:
        cfg.write_text(json.dumps({k: v for k, v in {**config, **CONFIG_EDITS[case]}.items() if v is not None}))
    elif case in SHARD_INDEXES:
        weights.unlink()
        (dst / "model.safetensors.index.json").write_text(SHARD_INDEXES[case])
    else:
        {"no directory": lambda: shutil.rmtree(dst), "no config.json": cfg.unlink,
         "no weights": weights.unlink,
         "config list": lambda: cfg.write_text(json.dumps([config])),
         "config string": lambda: cfg.write_text('"qwen3"'),
         "config not utf-8": lambda: cfg.write_bytes(b'{"model_type": "\xff"}'),
         "truncated": lambda: weights.write_bytes(data[:len(data) // 2]),
         "header only": lambda: weights.write_bytes(data[:8]),
         "empty weights": lambda: weights.write_bytes(b""),
         "garbage weights": lambda: weights.write_bytes(b"\x00\x01garbage" * 100),
         "integer weights": lambda: save_file({k: v.long() if "embed" in k else v
                                               for k, v in load_file(weights).items()}, weights)}[case]()
    return dst


@pytest.mark.parametrize("case", BROKEN)
def test_unusable_directory_is_one_model_error_naming_the_file(hf_dir, tmp_path, case):
    if hf_dir[1].config.tie_word_embeddings:
        pytest.skip("one layout is enough")
    path = broken_dir(hf_dir[0], tmp_path / "m", case)
    with pytest.raises(ModelError) as e:
        Qwen3.from_pretrained(path)
    message = str(e.value)
    assert "\n" not in message and str(path) in message, message
    named = {"directory": "does not exist", "no weights": "has no weights: expected model.safetensors",
             "index": "model.safetensors.index", "weights": "model.safetensors", "truncated": "model.safetensors",
             "header only": "model.safetensors", "not the weights'": "config.json",
             "eos": "eos_token_id must be a token id or a list of them"}
    expected = next((v for k, v in named.items() if k in case), "config.json")
    assert expected in message, message


def test_random_damage_is_a_model_error_or_a_load(hf_dir, tmp_path):
    """Fuzz: cut the weights at random places, or put random values into config.json fields."""
    import random
    src = hf_dir[0]
    data, config = (src / "model.safetensors").read_bytes(), strict_file(src / "config.json")
    rng = random.Random(0)
    values = [None, -1, 0, 1.5, "x", [], {}, True, [1, "a"], 10**12]
    for trial in range(24):
        path = tmp_path / f"m{trial}"
        path.mkdir()
        (path / "model.safetensors").write_bytes(data[:rng.randrange(len(data))] if trial % 2 else data)
        key = rng.choice(sorted(config))
        (path / "config.json").write_text(json.dumps(config if trial % 2 else {**config, key: rng.choice(values)}))
        try:
            Qwen3.from_pretrained(path)
        except ModelError as e:
            assert "\n" not in str(e) and str(path) in str(e), str(e)


def test_config_token_ids_are_kept_in_saved_checkpoints(hf_dir, tmp_path):
    """A checkpoint written by nanoatr keeps the source config.json's bos/eos/pad ids, which transformers'
    generate stops at when no generation_config.json came along (issue 16)."""
    src = tmp_path / "src"
    src.mkdir()
    config = strict_file(hf_dir[0] / "config.json")
    (src / "config.json").write_text(json.dumps({**config, "bos_token_id": 1, "eos_token_id": [2, 3],
                                                 "pad_token_id": 0}))
    (src / "model.safetensors").write_bytes((hf_dir[0] / "model.safetensors").read_bytes())
    Qwen3.from_pretrained(src).save_pretrained(tmp_path / "out")
    saved = strict_file(tmp_path / "out/config.json")
    assert (saved["bos_token_id"], saved["eos_token_id"], saved["pad_token_id"]) == (1, [2, 3], 0)
    plain = tmp_path / "plain"
    Qwen3.from_pretrained(hf_dir[0]).save_pretrained(plain)  # as the source has them, none invented
    again = strict_file(plain / "config.json")
    ids = ("bos_token_id", "eos_token_id", "pad_token_id")
    assert all(again.get(k) == config.get(k) for k in ids) and not [k for k in ids if k in again and again[k] is None]


def test_bf16_prefill_of_prompts_of_different_lengths_with_float32_weights(tiny_model):
    """Full fine-tuning in bf16: float32 weights under bf16 autocast. The rollout's prefill skips padding in
    the MLP with index_add, which failed on a bf16 MLP output into the float32 residual (issue 16)."""
    ids, mask = padded_batch(tiny_model.config.vocab_size, [7, 3], left=True)
    cache = tiny_model.new_cache(2, ids.shape[1])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        h = tiny_model.hidden(ids, attention_mask=mask.bool(), position_ids=pos, cache=cache)
        full = tiny_model.hidden(ids, attention_mask=mask.bool())
    assert h.dtype == torch.float32
    assert (h[mask.bool()] - full[mask.bool()]).abs().max() < 0.1  # bf16 rounding, same real tokens


def test_init_weights_is_gpt2s():
    """N(0, std^2) matrices (std 0.02 by default), norms at 1, the residual projections (o_proj, down_proj) scaled
    by 1 / sqrt(2 L). Each matrix's sample std is within 5 of its standard errors, std / sqrt(2 n), of that."""
    model = Qwen3(Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16))
    init_weights(model, seed=0)
    assert (model.config.rope_theta, model.gradient_checkpointing) == (1e6, False)  # the defaults
    for name, p in model.named_parameters():
        if p.dim() == 1:
            assert (p == 1).all(), name
            continue
        std = 0.02 / (6 ** 0.5 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1)
        assert abs(p.std().item() - std) <= 5 * std / (2 * p.numel()) ** 0.5, name
