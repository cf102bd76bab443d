import json

import pytest
import torch

from nanoatr.model import ModelError, Qwen3


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


@pytest.mark.parametrize("left", [False, True], ids=["right-pad", "left-pad"])
def test_logits_match_transformers(hf_dir, left):
    path, hf = hf_dir
    ours = Qwen3.from_pretrained(path).eval()
    ids, mask = padded_batch(ours.config.vocab_size, [11, 7, 3], left)
    # transformers counts positions from 0 at slot 0; ours counts real tokens. Pass the same to both.
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        out = ours(ids, attention_mask=mask)
    real = mask.bool()
    assert (out[real] - ref[real]).abs().max().item() <= 1e-4


def test_tied_embeddings_share_storage(hf_dir):
    path, hf = hf_dir
    ours = Qwen3.from_pretrained(path)
    tied = ours.config.tie_word_embeddings
    assert (ours.lm_head.weight.data_ptr() == ours.model.embed_tokens.weight.data_ptr()) == tied


def test_padding_does_not_change_real_tokens(tiny_model):
    ids, mask = padded_batch(tiny_model.config.vocab_size, [9, 4], left=True)
    with torch.no_grad():
        batched = tiny_model(ids, attention_mask=mask)
        alone = tiny_model(ids[1:, -4:])
    assert torch.allclose(batched[1, -4:], alone[0], atol=1e-5)


def test_kv_cache_prefill_then_decode_equals_full_forward(tiny_model):
    ids, mask = padded_batch(tiny_model.config.vocab_size, [8, 5], left=True)
    with torch.no_grad():
        full = tiny_model(ids, attention_mask=mask)
        cache = tiny_model.new_cache(2, ids.shape[1])
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        first = tiny_model(ids[:, :6], attention_mask=mask[:, :6], position_ids=pos[:, :6], cache=cache)
        steps = [tiny_model(ids[:, j:j + 1], attention_mask=mask[:, j:j + 1], position_ids=pos[:, j:j + 1], cache=cache)
                 for j in range(6, ids.shape[1])]
    inc = torch.cat([first, *steps], dim=1)
    real = mask.bool()
    assert (inc[real] - full[real]).abs().max() < 1e-5


def test_save_and_reload_roundtrip(tiny_model, tmp_path):
    tiny_model.save_pretrained(tmp_path)
    again = Qwen3.from_pretrained(tmp_path)
    ids = torch.randint(0, tiny_model.config.vocab_size, (2, 6))
    with torch.no_grad():
        assert torch.equal(tiny_model(ids), again(ids))


def test_our_checkpoint_loads_in_transformers(tiny_model, tmp_path):
    from transformers import Qwen3ForCausalLM
    tiny_model.save_pretrained(tmp_path)
    hf = Qwen3ForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, tiny_model.config.vocab_size, (2, 6))
    with torch.no_grad():
        assert (hf(ids).logits - tiny_model(ids)).abs().max() < 1e-4


def test_sharded_checkpoint(hf_dir, tmp_path):
    path, hf = hf_dir
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    ours = Qwen3.from_pretrained(tmp_path)
    ids = torch.randint(0, ours.config.vocab_size, (1, 5))
    with torch.no_grad():
        assert (ours(ids) - hf(ids).logits).abs().max() < 1e-4
    shard = sorted(tmp_path.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(ModelError, match="shard .* is missing"):
        Qwen3.from_pretrained(tmp_path)


def test_bad_directories(tmp_path, hf_dir):
    with pytest.raises(ModelError, match="does not exist"):
        Qwen3.from_pretrained(tmp_path / "nope")
    with pytest.raises(ModelError, match="config.json is missing"):
        Qwen3.from_pretrained(tmp_path)
    cfg = json.loads((hf_dir[0] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="no weights"):
        Qwen3.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    with pytest.raises(ModelError, match="model_type 'llama'"):
        Qwen3.from_pretrained(tmp_path)


def test_decode_without_attention_mask_means_real_tokens(tiny_model):
    """Decoding with attention_mask=None (the rollout's path: the mask comes from the cache's validity)
    equals passing a mask of ones, and both equal the full forward."""
    ids, mask = padded_batch(tiny_model.config.vocab_size, [8, 5], left=True)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    outs = []
    with torch.no_grad():
        full = tiny_model(ids, attention_mask=mask)
        for explicit in (True, False):
            cache = tiny_model.new_cache(2, ids.shape[1])
            tiny_model(ids[:, :4], attention_mask=mask[:, :4], position_ids=pos[:, :4], cache=cache)
            outs.append(torch.cat([tiny_model(ids[:, j:j + 1], position_ids=pos[:, j:j + 1], cache=cache,
                                              attention_mask=torch.ones(2, 1) if explicit else None)
                                   for j in range(4, ids.shape[1])], dim=1))
    assert torch.equal(outs[0], outs[1])
    assert (outs[1] - full[:, 4:]).abs().max() < 1e-5


def test_logits_in_vocabulary_blocks_equal_lm_head():
    """Qwen3.logits splits a large vocabulary into blocks on CPU (faster in MKL): same numbers as lm_head,
    and the plain lm_head when gradients are on."""
    from nanoatr.model import VOCAB_BLOCK, Qwen3Config
    cfg = Qwen3Config(vocab_size=5 * VOCAB_BLOCK + 7, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    model = Qwen3(cfg)
    h = torch.randn(3, 2, 64)
    with torch.no_grad():
        blocked = model.logits(h)
        assert blocked.shape == (3, 2, cfg.vocab_size)
        torch.testing.assert_close(blocked, model.lm_head(h), rtol=1e-6, atol=1e-6)
    assert model.logits(h).grad_fn.name() != "CatBackward0"
