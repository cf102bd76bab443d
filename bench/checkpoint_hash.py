"""What the SHA-256 of every checkpoint file costs, on a Qwen3-1.7B-shaped checkpoint (one core).

    python bench/checkpoint_hash.py                # 28 layers: 1.72B parameters, 3.44 GB of bf16 weights
    python bench/checkpoint_hash.py --layers 2     # a smaller file when disk or memory is short

A Qwen3 of Qwen3-1.7B's shape (hidden 2048, 28 layers, intermediate 6144, vocabulary 151,936, 16 heads,
8 KV heads, head_dim 128, tied embeddings) in bfloat16 is saved by checkpoint.save, the very function
train.py calls: its model.safetensors, tokenizer files, trainer_state.pt and manifest.json, every file
fsynced, then read back once for the manifest's SHA-256s. Then checkpoint.check validates it as a resume
does (latest()): page cache warm (just written), and cold (the files' pages dropped with posix_fadvise,
no root needed) with and without the hashes. Without them a resume reads only headers: the weights are
memory-mapped and read as training first touches them, so a cold check with hashes moves that read
forward and adds the hashing. Prints seconds and GB/s for each, and the hash functions' own speed on
256 MB in memory (why SHA-256: with SHA-NI it is the fastest here).
"""
import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from nanoatr.machinery import checkpoint  # noqa: E402
from nanoatr.model import Qwen3, Qwen3Config  # noqa: E402

SHAPE = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
             num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
             max_position_embeddings=40960)
# --tiny: the same steps on a few-MB checkpoint, and the hashes on 8 MB (tests/test_bench.py runs it)
TINY = dict(SHAPE, vocab_size=4096, hidden_size=128, intermediate_size=256, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32)


def model(layers: int, shape: dict = SHAPE) -> Qwen3:
    """The shape's Qwen3, bf16, every tensor filled (the hash's speed does not depend on the values)."""
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("meta"):
        m = Qwen3(Qwen3Config(**{**shape, "num_hidden_layers": layers}))
    torch.set_default_dtype(torch.float32)
    m = m.to_empty(device="cpu")
    m.lm_head.weight = m.model.embed_tokens.weight  # to_empty gave each its own tensor
    with torch.no_grad():
        for i, p in enumerate(m.parameters()):
            p.fill_(1e-3 * (i + 1))
    return m


def cold(path: Path):
    """Drop the page cache of the checkpoint's files, so that the next read comes from the disk."""
    for f in path.iterdir():
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def line(what: str, seconds: float, nbytes: int):
    print(f"{what:<48} {seconds:7.2f} s  {nbytes / seconds / 1e9:6.2f} GB/s", flush=True)


def hash_speeds(mb: int = 256):
    data = os.urandom(mb << 20)
    for name in ("sha256", "blake2b", "sha1", "md5"):
        line(f"{name} of {mb} MB in memory", timed(lambda: hashlib.new(name, data).digest()), len(data))


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=28, help="decoder layers (28 = Qwen3-1.7B)")
    ap.add_argument("--dir", default=None, help="where to write the run folder (default: a temporary one)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model of the shape (vocabulary 4096, hidden "
                    "128) and 8 MB of hashing: the same steps in seconds, to check the script runs")
    args = ap.parse_args(argv)
    m = model(args.layers, TINY if args.tiny else SHAPE)
    params = sum(p.numel() for p in m.parameters())
    tok = checkpoint.read_tokenizer_files(ROOT / "data/tiny-qwen3")
    hashing = []
    real_sha256 = checkpoint._sha256

    def sha256(path):  # the save's own hashing, timed apart
        t = time.perf_counter()
        digest = real_sha256(path)
        hashing.append(time.perf_counter() - t)
        return digest
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        run = Path(tmp) / "run"
        checkpoint._sha256 = sha256
        t_save = timed(lambda: checkpoint.save(run, m, tok, {"step": 1}))
        checkpoint._sha256 = real_sha256
        path = run / "checkpoint"
        nbytes = sum(f.stat().st_size for f in path.iterdir())
        print(f"{params / 1e9:.2f}B parameters, {args.layers} layers: checkpoint of {nbytes / 1e9:.2f} GB "
              f"({len(list(path.iterdir()))} files) in {path}")
        line("save, all of it (write, fsync, hash, check)", t_save, nbytes)
        line("  of which SHA-256 of the files just written", sum(hashing), nbytes)
        line("  the save without it", t_save - sum(hashing), nbytes)
        assert checkpoint.check(path) == (1, None)
        line("check with hashes, page cache warm", timed(lambda: checkpoint.check(path)), nbytes)
        cold(path)
        line("check without hashes, cold", timed(lambda: checkpoint.check(path, hashes=False)), nbytes)
        cold(path)
        line("check with hashes, cold (resume after a reboot)", timed(lambda: checkpoint.check(path)), nbytes)
    hash_speeds(8 if args.tiny else 256)


if __name__ == "__main__":
    main()
