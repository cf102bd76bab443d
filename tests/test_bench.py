"""Every benchmark in bench/ (and the measuring scripts of scripts/) runs here on a tiny shape, in seconds: a
tool nothing runs breaks unseen (bench/trl_step.py ended in an AttributeError for a renamed attribute). The
GPU benchmarks' CPU paths are in tests/test_gpu_smoke.py, bench/step_memory.py's in tests/test_memory.py.
Here: a tiny rollout comparison (every side the GPU's matrix has but hf-static) ends with its ratio line, the
TRL benchmark says how to install TRL when it is missing (and times our side alone), its 58M model's
32,000-token tokenizer decodes; the loss and the verifier's speed and agreement each run."""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HAS_TRL = importlib.util.find_spec("trl") is not None


def load(name: str, folder: str = "bench"):
    """<folder>/<name>.py as a module (under another name: bench/ and scripts/ are not packages)."""
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rollout_help():
    out = subprocess.run([sys.executable, "bench/rollout.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--presets" in out.stdout and "--threads" in out.stdout and "--profile" in out.stdout


def test_rollout_smoke_run_ends_with_the_ratio_and_an_unknown_preset_is_refused(capsys):
    """Every side of the GPU's matrix but hf-static (transformers' compiled path), on the CPU: ours, the eager
    plan, transformers' generate, LoRA merged or not."""
    rollout = load("rollout")
    assert {"nano", "small", "tiny", "100m", "0.6b", "1.7b"} <= set(rollout.PRESETS)
    assert rollout.main(["--presets", "nano", "--batches", "4", "--new-tokens", "4", "--repeats", "1",
                         "--warmup", "0", "--no-ceiling", "--against", "eager,hf", "--lora"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"rollout ours/transformers: nano \d+\.\d\dx", lines[-1]), lines[-1]
    assert f"default = {rollout.DEFAULT_SAMPLER}" in lines[0]  # generate's own default, whatever it is
    for side in ("ours: ", "eager: ", "hf: ", "LoRA r32 on every projection: merged"):
        assert any(side in line for line in lines), (side, lines)
    with pytest.raises(SystemExit):
        rollout.main(["--presets", "huge"])  # an unknown preset


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
    tok = load("rollout").big_char_tokenizer(32_000)
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


def test_loss_benchmark_times_the_loss_and_measures_both_scorings(monkeypatch, capsys):
    """The compiled loss made the eager one (compiling is a minute, not what is checked); the memory part's
    children (a subprocess each, ~10 s of imports) run in this process: first as the child itself, through
    --child, then as what measure_memory would start."""
    from nanoatr import loss
    bench = load("loss")
    small = ["--mem-tokens", "32", "--vocab", "512", "--dim", "16", "--chunk-size", "8"]
    bench.main(["--child", "naive", *small])
    child = json.loads(capsys.readouterr().out)
    assert child["variant"] == "naive" and child["tokens"] == 32 and child["peak_mb"] >= 0, child
    monkeypatch.setattr(loss, "_compiled_loss", lambda: loss._fused_loss)
    monkeypatch.setattr(bench, "measure_memory", bench.memory_child)
    bench.main(["--methods", "kl3", "--batch", "2", "--length", "16", "--warmup", "1", "--repeats", "1",
                *small])
    out = capsys.readouterr().out
    assert re.search(r"kl3 +eager +\d+\.\d\d ms +compiled +\d+\.\d\d ms +speed-up", out), out
    assert re.search(r"chunked +peak \+ *\d+ MB", out) and re.search(r"naive +peak \+ *\d+ MB", out), out
    assert "chunked / naive peak = " in out


def test_verifier_benchmark_verifies_its_cases():
    """A subprocess: it pins itself to one core, which would pin the test process too."""
    out = subprocess.run([sys.executable, "bench/verifier.py", "--n", "40"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("cases=40 verified="), lines
    assert "disagreements with intended labels=0" in lines[0], lines
    assert re.fullmatch(r"verify: [\d,]+ verifications/s on one core \(\d+ us each; [\d,]+ per CPU-second\)",
                        lines[-1]), lines[-1]


# ----------------------------------------------------------------------------
# The measuring scripts of scripts/ (their main reads sys.argv)

def test_measure_task_prints_the_tasks_starting_figures(monkeypatch, capsys):
    """Its figures pinned (other draws, averaging or budget change them); --show 1: one completion."""
    monkeypatch.setattr(sys, "argv", ["measure_task.py", "--limit", "2", "--k", "2", "--max-new-tokens", "8",
                                      "--show", "1", "--seed", "3"])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # as at a terminal
    load("measure_task", "scripts").main()
    out, err = capsys.readouterr()
    assert (out, err) == (f"- 63*15= 63*10=63\n{ROOT}/data/tiny-qwen3 on {ROOT}/data/arith/heldout.jsonl "
                          "(2 problems x 2 samples, T=1.0): entropy 0.144 nats/token  Mean@2 0.0%  Pass@2 0.0%  "
                          "length 8.0  truncated 100.0%\n", ""), out
