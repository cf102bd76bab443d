"""bench/gpu_smoke.py: skips cleanly without CUDA, and its code path runs on CPU with a tiny model."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gpu_smoke  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="has CUDA: the smoke test would run for real")
def test_skips_without_cuda(capsys):
    assert gpu_smoke.main([]) == 0
    assert capsys.readouterr().out == "skipped: no CUDA\n"


def test_runs_on_cpu_with_a_tiny_model(capsys):
    assert gpu_smoke.main(["--device", "cpu", "--tiny", "--steps", "2", "--prompts", "1", "--group-size", "4",
                           "--prompt-len", "8", "--max-new-tokens", "16", "--micro-batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "step 2:" in out and out.endswith("ok\n")


def test_the_paper_step_phases_on_cpu_with_a_tiny_model(capsys):
    """--paper: the preset's step (4 prompts x 8, LoRA 32, one optimizer step), its phases timed."""
    assert gpu_smoke.main(["--device", "cpu", "--paper", "--shape", "tiny", "--steps", "1", "--max-new-tokens", "24"]) == 0
    out = capsys.readouterr().out
    assert "phases: rollout" in out and "pi_old" in out and out.endswith("ok\n")


sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gpu_rollout  # noqa: E402


def test_the_gpu_rollout_benchmark_runs_on_cpu(capsys):
    """bench/gpu_rollout.py's code path (ours, eager, transformers' generate, LoRA merged or not) on a tiny model."""
    assert gpu_rollout.main(["--device", "cpu", "--models", "tiny", "--batches", "3", "--new-tokens", "8",
                             "--prompt-len", "2:6", "--against", "eager,hf", "--lora"]) == 0
    out = capsys.readouterr().out
    assert "ours" in out and "eager" in out and "hf" in out and "LoRA r32" in out
