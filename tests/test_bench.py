"""bench/rollout.py and bench/trl_step.py: they start, a tiny rollout comparison ends with its ratio line,
the TRL benchmark says how to install TRL when it is missing, and its 32,000-token tokenizer decodes."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HAS_TRL = importlib.util.find_spec("trl") is not None


def load(name: str):
    """bench/<name>.py as a module (under another name: bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rollout_help():
    out = subprocess.run([sys.executable, "bench/rollout.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--presets" in out.stdout and "--threads" in out.stdout and "--profile" in out.stdout


def test_rollout_smoke_run_ends_with_the_ratio(capsys):
    rollout = load("rollout")
    assert {"nano", "small", "tiny", "100m"} <= set(rollout.PRESETS)
    assert rollout.main(["--presets", "nano", "--batches", "4", "--new-tokens", "4", "--repeats", "1",
                         "--warmup", "0", "--no-ceiling"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"rollout ours/transformers: nano \d+\.\d\dx", lines[-1]), lines[-1]
    assert f"default = {rollout.DEFAULT_SAMPLER}" in lines[0]  # generate's own default, whatever it is


def test_rollout_rejects_an_unknown_preset():
    with pytest.raises(SystemExit):
        load("rollout").main(["--presets", "huge"])


def test_trl_step_without_trl_prints_how_to_install_it(monkeypatch, capsys):
    trl_step = load("trl_step")
    monkeypatch.setattr(trl_step, "trl_installed", lambda: False)
    assert trl_step.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "pip install trl==" + trl_step.TRL_VERSION in out


@pytest.mark.skipif(HAS_TRL, reason="trl is installed here: the script would run the benchmark")
def test_trl_step_script_exits_0_without_trl():
    out = subprocess.run([sys.executable, "bench/trl_step.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("trl is not installed") and out.stdout.count("\n") == 1


def test_the_58m_models_tokenizer_has_32000_tokens_that_all_decode():
    tok = load("trl_step").big_char_tokenizer(32_000)
    assert tok.get_vocab_size() == 32_000
    assert all(tok.id_to_token(i) for i in range(32_000))
    ids = tok.encode("12*34=\\boxed{408}").ids
    assert tok.decode(ids) == "12*34=\\boxed{408}" and len(ids) == 11  # a token per character; \boxed{ is one


def test_trl_step_times_our_side_alone_without_trl(capsys):
    """--ours-only: our step as the comparison runs it (train.Run built as train.setup builds it, its phases
    timed by wrapping train's functions and the scorer), without TRL; the TRL column is '-'. It ended in an
    AttributeError (run.score, renamed run.scorer) that no test saw, TRL not being installed here."""
    import torch
    import train
    trl_step, before = load("trl_step"), (torch.Tensor.backward, train.generate, train.policy_loss)
    assert trl_step.main(["--ours-only", "--models", "embedded", "--steps", "1", "--warmup", "0",
                          "--max-new-tokens", "4", "--no-compile"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("TRL not run (--ours-only)"), lines[0]
    assert re.fullmatch(r"GRPO step ours alone \(--ours-only\): embedded \d+\.\dms", lines[-1]), lines[-1]
    table = {line.split()[0]: line.split()[1:] for line in lines if line.startswith("  ")}
    for phase in (*trl_step.PHASES, "step"):
        assert re.fullmatch(r"\d+\.\dms", table[phase][0]) and table[phase][1:] == ["-", "-"], table[phase]
    assert "forward passes with gradients per step: ours 4, TRL -" in "\n".join(lines)  # 64 / 16 a forward
    assert (torch.Tensor.backward, train.generate, train.policy_loss) == before  # its timers are removed


def test_trl_step_runs_one_short_step_of_each_side(capsys):
    pytest.importorskip("trl", reason="needs trl (bench/trl_step.py says how to install it)")
    import torch
    import train
    trl_step, before = load("trl_step"), (torch.Tensor.backward, train.generate, train.policy_loss)
    assert trl_step.main(["--models", "embedded", "--steps", "1", "--warmup", "0", "--max-new-tokens", "4",
                          "--no-compile"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"GRPO step ours/TRL: embedded \d+\.\d\dx", last), last
    assert (torch.Tensor.backward, train.generate, train.policy_loss) == before  # its timers are removed
