"""Memory: a training step never holds a (B, T, V) tensor (the logits of every completion token at once).

The paper-sized step (8 x 2048 tokens at Qwen3's vocabulary, RSS measured; slow, run with --slow) and a
small one with a large vocabulary (every tensor any op returns is looked at; seconds, run by default).
bench/step_memory.py measures the same step against the naive path."""
import os
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import step_memory  # noqa: E402


@pytest.mark.slow  # ~25 s on 2 cores: python -m pytest -q --slow tests/test_memory.py
def test_a_paper_sized_step_never_builds_full_logits():
    # glibc would return every freed (512, V) chunk to the OS and fault it in again (~30 s of page faults
    # on 2 cores); keeping freed memory in the heap makes the step 3x faster and can only raise the peak.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**36)}
    r = step_memory.measure("chunked", rows=8, T=2048, V=151_936, D=32, lora_rank=32, env=env)
    # One (8, 2048, 151936) float32 tensor is 9,496 MB; the step's whole peak stays far below it
    # (~0.7 GB with the default allocator, bench/step_memory.py; the naive step needs ~37 GB).
    assert r["peak_mb"] < r["full_logits_mb"] / 2, r


class LargestTensors(TorchDispatchMode):
    """While active, records the largest tensor (element count, shape, op) that any aten op returns:
    forward, autograd's backward (it runs under the same mode) and the optimizer step alike. Exact and
    independent of the allocator, unlike a memory peak."""

    def __init__(self):
        super().__init__()
        self.largest = (0, (), "")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel() > self.largest[0]:
                self.largest = (t.numel(), tuple(t.shape), str(func))
        return out


# 8 completions of 256 tokens (4 of scoring's 512-token chunks) at a vocabulary 256x the hidden size:
# the (B, T, V) logits are 16.8M elements, a chunk's (512, V) a quarter of that.
SMALL = dict(rows=8, T=256, V=8192, D=32, lora_rank=8)


def largest_tensor_of_a_step() -> tuple:
    import train
    run, batch = step_memory.step_inputs(**SMALL)
    with LargestTensors() as probe:
        train.optimize(run, batch, step=0)
    return probe.largest


def test_a_small_step_never_builds_full_logits():
    """train.optimize (old log-probs, scoring with entropy, the kl3 loss, backward, AdamW) on the
    bench's step, small enough for every run: no op returns a tensor of half the (B, T, V) logits'
    size or more. The slow paper-sized test above is the same check by RSS; this one runs in CI.
    A scoring path that builds the whole logits (token_logprobs_naive, or one chunk of every token)
    fails it."""
    full = SMALL["rows"] * SMALL["T"] * SMALL["V"]
    numel, shape, op = largest_tensor_of_a_step()
    assert numel < full / 2, f"{op} returned a {shape} tensor: the (B, T, V) logits are {full:,} elements"


def test_the_probe_sees_full_logits_on_the_naive_path(monkeypatch):
    """The check above can fail: with bench/step_memory.py's naive scoring (one full (B, T, V)
    log-softmax) the probe finds a tensor of the logits' size."""
    from nanoatr import scoring
    monkeypatch.setattr(scoring, "token_logprobs", step_memory.naive_token_logprobs)
    numel, shape, _ = largest_tensor_of_a_step()
    assert numel >= SMALL["rows"] * SMALL["T"] * SMALL["V"], shape
