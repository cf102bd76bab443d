"""A complete tiny model directory (character tokenizer + random Qwen3), built in-process."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "data"))
import make_default  # noqa: E402  (data/make_default.py: the embedded task's tokenizer)


def make_model_dir(path, tokenizer_config: dict | None = None, seed: int = 0, **overrides) -> Path:
    """tokenizer.json, tokenizer_config.json (the embedded task's, updated by `tokenizer_config`; a None value
    removes the key), config.json and model.safetensors of a random Qwen3 (`overrides` change its config)."""
    from nanoatr.model import Qwen3, Qwen3Config, init_weights
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = make_default.build_tokenizer()
    tokenizer.save(str(path / "tokenizer.json"))
    config = {**make_default.TOKENIZER_CONFIG, **(tokenizer_config or {})}
    (path / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    cfg = Qwen3Config(**{**dict(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64,
                                num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                rope_theta=10_000.0, tie_word_embeddings=False), **overrides})
    model = Qwen3(cfg)
    init_weights(model, std=0.3, seed=seed)
    model.save_pretrained(path)
    return path
