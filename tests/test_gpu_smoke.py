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
