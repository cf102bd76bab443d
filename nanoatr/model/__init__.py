"""Qwen3: the network (qwen3.py, in the order of its diagram) and its checkpoint directories (files.py).

    from nanoatr.model import Qwen3
    model = Qwen3.from_pretrained("Qwen3-1.7B/")      # config.json + safetensors, every field checked
"""
from nanoatr.model.files import ModelError
from nanoatr.model.qwen3 import VOCAB_BLOCK, DecodeSlot, KVCache, Qwen3, Qwen3Config, init_weights

__all__ = ["ModelError", "VOCAB_BLOCK", "DecodeSlot", "KVCache", "Qwen3", "Qwen3Config", "init_weights"]
