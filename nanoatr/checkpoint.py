"""The run's latest checkpoint, replaced atomically, and everything a resume needs.

runs/<name>/checkpoint/ is a complete model directory (config.json, model.safetensors, tokenizer
files), so eval.py and sample.py take it as --model, plus trainer_state.pt (optimizer, step, RNG).
A new checkpoint is written to checkpoint.new/ and swapped in with two renames: at every instant
either checkpoint/ or checkpoint.old/ is complete, and `latest` finds whichever it is.
"""
import os
import shutil
from pathlib import Path

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "generation_config.json", "chat_template.jinja")


def save(run_dir, model, tokenizer_dir, state: dict):
    run_dir = Path(run_dir)
    new, cur, old = run_dir / "checkpoint.new", run_dir / "checkpoint", run_dir / "checkpoint.old"
    shutil.rmtree(new, ignore_errors=True)
    model.save_pretrained(new)
    for name in TOKENIZER_FILES:  # a self-contained model directory
        if (Path(tokenizer_dir) / name).is_file():
            shutil.copy2(Path(tokenizer_dir) / name, new / name)
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
