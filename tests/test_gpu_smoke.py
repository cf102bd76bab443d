"""bench/gpu_smoke.py and gpu_check.py: skip cleanly without CUDA; their code paths run on CPU, tiny models."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gpu_smoke  # noqa: E402


def test_runs_on_cpu_with_a_tiny_model(capsys):
    before = (gpu_smoke.train.old_logprobs, gpu_smoke.train.update)  # timed during the run, then train's again
    assert gpu_smoke.main(["--device", "cpu", "--tiny", "--steps", "2", "--prompts", "1", "--group-size", "4",
                           "--prompt-len", "8", "--max-new-tokens", "16", "--micro-batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "step 2:" in out and out.endswith("ok\n")
    assert (gpu_smoke.train.old_logprobs, gpu_smoke.train.update) == before


def test_the_paper_step_phases_on_cpu_with_a_tiny_model(capsys):
    """--paper: the preset's step (4 prompts x 8, LoRA 32, one optimizer step per group), its phases timed."""
    assert gpu_smoke.main(["--device", "cpu", "--paper", "--shape", "tiny", "--steps", "1", "--max-new-tokens", "24"]) == 0
    out = capsys.readouterr().out
    assert "phases: rollout" in out and "pi_old" in out and out.endswith("ok\n")


# ----------------------------------------------------------------------------
# bench/gpu_check.py: every GPU figure in one call, each part in its own time box

import gpu_check  # noqa: E402


def gpu_check_lines(capsys, *args) -> list[str]:
    """bench/gpu_check.py's lines (its parts run in child processes, their lines echoed by it)."""
    assert gpu_check.main(list(args)) == 0
    return capsys.readouterr().out.splitlines()


def test_gpu_check_help_names_every_part_and_an_unknown_part_is_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        gpu_check.main(["--help"])
    text = capsys.readouterr().out
    assert done.value.code == 0 and "--budget" in text and "SUMMARY" in text
    assert all(f"  {part} " in text for part in gpu_check.PARTS), text
    with pytest.raises(SystemExit) as done:
        gpu_check.main(["--parts", "a,z"])
    assert done.value.code == 2 and capsys.readouterr().err.splitlines()[-1].endswith("error: --parts: unknown z")


@pytest.mark.skipif(torch.cuda.is_available(), reason="has CUDA: both would run for real")
def test_the_smoke_test_and_the_check_skip_without_cuda(capsys):
    assert gpu_smoke.main([]) == 0
    assert capsys.readouterr().out == "skipped: no CUDA\n"
    assert gpu_check_lines(capsys) == ["skipped: no CUDA"]
    assert gpu_check.rollout.main(["--device", "cuda"]) == 0 and capsys.readouterr().out == "skipped: no CUDA\n"


def test_a_part_past_its_share_is_stopped_and_the_next_part_runs(capsys):
    lines = gpu_check_lines(capsys, "--device", "cpu", "--tiny", "--parts", "a,e", "--budget", "0.5")
    assert any(line.startswith("part a: over budget") for line in lines)
    assert any(line.startswith("part e: over budget") for line in lines), "the part after it still ran"
    assert lines[-1].startswith("SUMMARY device=cpu | a: over budget") and "| e: over budget" in lines[-1]


def test_gpu_check_parts_a_and_e_on_the_cpu(capsys):
    """The rollout that crashed on the GPU, against the eager loop, and transformers' log-probs of our tokens."""
    lines = gpu_check_lines(capsys, "--device", "cpu", "--tiny", "--parts", "a,e", "--budget", "900")
    [a] = [line for line in lines if line.startswith("a: ")]
    assert "tokens identical" in a and "batch sizes 24 > " in a, a
    assert any(line.startswith("e: transformers' teacher-forced log-probs") for line in lines)
    summary = lines[-1]
    assert summary.startswith("SUMMARY device=cpu | a: ok tokens=identical gap=") and "| e: ok gap_mean=" in summary


@pytest.mark.slow
def test_gpu_check_runs_every_part_on_the_cpu(capsys):
    """python bench/gpu_check.py --tiny end to end: every part's header and figures, the projection, SUMMARY last."""
    lines = gpu_check_lines(capsys, "--device", "cpu", "--tiny", "--budget", "3000")
    assert not any("over budget" in line or "failed" in line for line in lines), lines
    for part in gpu_check.PARTS:
        assert f"== part {part} (" in "\n".join(lines)
        assert f"| {part}: ok " in lines[-1], (part, lines[-1])
    assert any(line.startswith("paper run projected on this device: training") for line in lines)
    assert lines[-1].startswith("SUMMARY device=cpu | a: ok") and "| run: ok training_h=" in lines[-1]
