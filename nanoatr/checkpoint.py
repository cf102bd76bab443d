"""The run's latest checkpoint, replaced atomically, and everything a resume needs.

runs/<name>/checkpoint/ holds the trained weights, the tokenizer files and trainer_state.pt (optimizer,
step). Under full fine-tuning the weights are a complete model directory (config.json,
model.safetensors); under LoRA they are the adapter alone, in peft's format (adapter_config.json,
adapter_model.safetensors, naming the base model), a few MB instead of the whole model. eval.py and
sample.py take either as --model.
A new checkpoint is written to checkpoint.new/ and swapped in with two renames: at every instant
either checkpoint/ or checkpoint.old/ is complete, and `latest` finds whichever it is.
"""
import json
import os
import shutil
from pathlib import Path

import torch

from nanoatr import lora
from nanoatr.tokenizer import copy_tokenizer

def save(run_dir, model, tokenizer_dir, state: dict):
    """model: our Qwen3 (full weights are written) or the PeftModel around it (the adapter only)."""
    run_dir = Path(run_dir)
    new, cur, old = run_dir / "checkpoint.new", run_dir / "checkpoint", run_dir / "checkpoint.old"
    shutil.rmtree(new, ignore_errors=True)
    if hasattr(model, "peft_config"):
        lora.save_adapter(model, new)
    else:
        model.save_pretrained(new)
    copy_tokenizer(tokenizer_dir, new)  # a self-contained directory
    torch.save(state, new / "trainer_state.pt")
    _fsync_dir(new)
    if cur.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(cur, old)
    os.rename(new, cur)
    shutil.rmtree(old, ignore_errors=True)


def latest(run_dir) -> Path | None:
    """The complete checkpoint directory of a run, or None."""
    for name in ("checkpoint", "checkpoint.old"):
        path = Path(run_dir) / name
        if (path / "trainer_state.pt").is_file():
            return path
    return None


def load_state(path) -> dict:
    # weights_only=False: the state holds RNG states and plain Python values written by us.
    return torch.load(Path(path) / "trainer_state.pt", map_location="cpu", weights_only=False)


def _fsync_dir(path: Path):
    for f in path.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())


def read_metrics(path) -> list[dict]:
    """The JSON objects of a metrics.jsonl; a truncated last line (a run killed mid-write) is dropped."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path.parent}: no {path.name} (is it a run directory?)")
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
