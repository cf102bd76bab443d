"""--preset paper: the paper's Appendix B (Table 4) on our flags; explicit flags win; --help shows it."""
import re
from pathlib import Path

import pytest

import train
from nanoatr.machinery.flags import PRESETS, TrainConfig, apply_preset, delta_warning, hparam_flags, parse, resolve
from nanoatr.machinery.trl_names import TRL_NAMES
from conftest import error_line, jsonl

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ["--model", "m", "--data", "d.jsonl", "--eval-data", "aime24.jsonl"]


def resolved(*argv):
    cfg, extra, given = parse(TrainConfig, [*argv], "", hparam_flags)
    return resolve(apply_preset(cfg, given), extra)


def test_paper_preset_is_table_4():
    cfg = resolved("--preset", "paper", *REQUIRED)
    table_4 = {
        "lora_rank": 32, "lora_alpha": 64,            # LoRA rank 32, alpha 64
        "lr": 5e-6, "weight_decay": 1e-3,             # learning rate, weight decay (AdamW)
        "group_size": 8,                              # group size G
        "micro_batch": 8,                             # batch size 8 (TRL: completions per device batch)
        "prompts_per_step": 4,                        # x gradient accumulation 4 = 32 completions = 4 prompts x 8
        "minibatches": 4, "epochs": 1,                # ours: each group its own optimizer step (ratio moves)
        "steps": 1000,                                # 1,000 gradient steps (Section 6.1)
        "max_new_tokens": 2048,                       # maximum sequence length
        "temperature": 1.0, "top_p": 1.0, "top_k": 0,  # training sampling; top-k -1 = off = our 0
        "beta": 0.0,                                  # no reference policy
        "aggregation": "dr-grpo", "std_normalize": False,  # Dr. GRPO backbone
        "clip": "kl3", "hparams": {"delta": 0.07},    # ATR-GRPO, delta 0.07
        "eval_temperature": 0.3, "eval_top_p": 0.95,  # evaluation sampling
        "eval_k": 8, "eval_every": 50,                # Mean@8 / Pass@8 every 50 steps
        "eval_max_new_tokens": 32768,                 # evaluation max tokens
    }
    assert {k: getattr(cfg, k) for k in table_4} == table_4
    # Ours, to fit one 80 GB GPU; not hyper-parameters of the paper.
    assert (cfg.dtype, cfg.grad_checkpoint, cfg.eval_batch_size) == ("bfloat16", True, 8)
    assert cfg.prompts_per_step * cfg.group_size == 8 * 4 and cfg.micro_batch == 8


def test_explicit_flags_override_the_preset_and_list_flags_given_twice_keep_every_value():
    cfg = resolved("--preset", "paper", *REQUIRED, "--lr", "1e-5", "--lora-rank", "16", "--minibatches", "4",
                   "--clip", "clip-higher")
    assert (cfg.lr, cfg.lora_rank, cfg.minibatches, cfg.clip) == (1e-5, 16, 4, "clip-higher")
    assert cfg.lora_alpha == 64 and cfg.weight_decay == 1e-3  # the rest is still the preset's
    assert resolved("--preset", "paper", *REQUIRED, "--delta", "0.1").hparams == {"delta": 0.1}
    plain = resolved(*REQUIRED)
    assert (plain.lora_rank, plain.lr) == (0, 1e-4)  # no preset: the embedded default's values
    argv = ["--stop", "a", "--stop", "b", "--eval-data", "x.jsonl", "--eval-data", "y.jsonl"]
    twice = parse(TrainConfig, argv, "", hparam_flags)[0]
    assert twice.stop == ["a", "b"] and twice.eval_data == ["x.jsonl", "y.jsonl"]  # a list flag twice: both


def test_help_lists_the_preset(capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--preset paper (Appendix B, Table 4" in out
    for flag, value in [("lora-rank", "32"), ("lr", "5e-06"), ("eval-temperature", "0.3"), ("micro-batch", "8")]:
        assert any(line.split() == [flag, value] for line in out.splitlines()), flag


@pytest.mark.parametrize("given, needed", [([], "--model"),
                                           (["--model", "m", "--data", "d.jsonl"], "--eval-data")])
def test_preset_needs_a_model_data_and_its_evaluation_files_or_none(capsys, tmp_path, given, needed):
    """Never the embedded arithmetic file at a 32,768-token budget: --eval-data FILES, or --eval-data alone."""
    err = error_line(capsys, train.main, ["--preset", "paper", *given, "--out-dir", str(tmp_path)])
    assert err.startswith(f"error: --preset paper needs {needed}")
    assert resolved("--preset", "paper", "--model", "m", "--data", "d.jsonl", "--eval-data").eval_data == []
    assert resolved(*REQUIRED).eval_data == ["aime24.jsonl"]
    assert resolved("--model", "m").eval_data == ["data/arith/heldout.jsonl"]  # no preset: the embedded default


@pytest.mark.parametrize("argv, message", [
    (["--thinking", "--prompt-template", "Q: {question}"], "--thinking has no effect with --prompt-template"),
    (["--no-thinking", "--prompt-template", "Q: {question}"], "--no-thinking has no effect with --prompt-template"),
    (["--system-prompt", "S", "--prompt-template", "Q: {question}"], "--system-prompt has no effect with"),
    (["--base-name", "Qwen/Qwen3-1.7B"], "--base-name needs a LoRA run"),
    (["--lora-alpha", "16"], "--lora-alpha would be ignored: without --lora-rank > 0"),
    (["--lora-targets", "q_proj"], "--lora-targets would be ignored"),
    (["--eval-data", "--eval-k", "4"], "--eval-k would be ignored: with no --eval-data"),
    (["--warmup-steps", "0", "--warmup-ratio", "0.1"], "and --warmup-ratio both set the warmup"),
])
def test_flags_that_would_be_ignored_are_errors(argv, message):
    cfg, extra, given = parse(TrainConfig, argv, "", hparam_flags)
    with pytest.raises(ValueError, match=message):
        resolve(apply_preset(cfg, given), extra, 1, given)


@pytest.mark.parametrize("trl, ours", sorted(TRL_NAMES.items()))
def test_a_trl_name_is_told_its_flag_here(capsys, trl, ours):
    """Users of TRL type its GRPOConfig names: the one error line names our flag, for both spellings (but the
    one that is our flag: --reward-weights is TRL's reward_weights)."""
    for spelled in [s for s in (f"--{trl}", f"--{trl.replace('_', '-')}") if s != ours]:
        with pytest.raises(SystemExit):
            parse(TrainConfig, [spelled, "1"], "", hparam_flags)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and re.search(rf"TRL's {spelled}( 1)? is {ours}\b[^;]* here", err), err


def test_every_trl_name_is_in_the_docs_table_beside_its_flag():
    """TRL_NAMES and docs/real-scale.md's table say the same: each TRL name on the row of the flag it maps to;
    and each mapped flag is one of train.py's."""
    rows = [line for line in (ROOT / "docs/real-scale.md").read_text().splitlines() if line.startswith("| `--")]
    flags = {s for a in train_parser_actions() for s in a.option_strings}
    for trl, ours in TRL_NAMES.items():
        assert ours in flags, f"{ours} is not a flag of train.py"
        assert any(re.search(rf"(?<![\w-]){ours}(?![\w-])", row.split("|")[1]) and re.search(rf"\b{trl}\b", row.split("|")[3])
                   for row in rows), \
            f"docs/real-scale.md: no table row of {ours} naming TRL's {trl}"


def train_parser_actions():
    from nanoatr.machinery.flags import Parser, add_fields
    parser = Parser()
    add_fields(parser, TrainConfig)
    hparam_flags(parser)
    return parser._actions


def test_the_presets_step_structure_makes_clipping_act(tmp_path, capsys):
    """Table 4's 4 prompts x 8 completions, with the preset's --minibatches 4 (each group its own optimizer
    step): after the first update pi moves off pi_old, so kl3 cuts tokens. A tiny policy at a tiny model's
    learning rate; the step structure is the preset's own values."""
    structure = ["prompts_per_step", "group_size", "micro_batch", "minibatches", "epochs"]
    flags = [x for k in structure for x in (f"--{k.replace('_', '-')}", str(PRESETS["paper"][k]))]
    assert flags[flags.index("--minibatches") + 1] == "4"
    train.main(["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(ROOT / "data/arith/train.jsonl"),
                "--eval-data", "--max-new-tokens", "24", "--no-compile", "--lr", "1e-3", "--steps", "2",
                *flags, "--out-dir", str(tmp_path), "--name", "p"])
    assert "the ratio is exactly 1" not in capsys.readouterr().err
    rows = jsonl(tmp_path / "p" / "metrics.jsonl")
    steps = [r for r in rows if "clip_frac_low" in r]
    assert len(steps) == 2
    assert sum(r["clip_frac_low"] + r["clip_frac_high"] for r in steps) > 0


def test_a_delta_above_a_plausible_kl3_range_warns_naming_trls_delta():
    """--delta 3 (TRL's INTELLECT-2 bound carried over) is taken as the divergence bound: one warning line,
    with the band it gives KL3 (w - 1 - log w <= 3: [0.019, 5.749]); a plausible delta gives none."""
    warning = delta_warning(resolved("--clip", "kl3", "--delta", "3"))
    assert warning.startswith("warning: --delta 3 ") and "\n" not in warning
    assert "w in [0.019, 5.749]" in warning and "TRL's `delta` (INTELLECT-2's upper ratio bound)" in warning
    assert delta_warning(resolved("--clip", "kl3", "--delta", "1")) is None  # the boundary: [0.159, 3.146]
    assert delta_warning(resolved("--clip", "kl3")) is None
    assert delta_warning(resolved("--clip", "clip")) is None
    assert delta_warning(resolved("--clip", "trgppo", "--delta", "2")) is not None  # any method's delta


def test_train_prints_the_delta_warning(tmp_path, capsys):
    train.main(["--data", str(ROOT / "data/arith/train.jsonl"), "--eval-data", "--steps", "1",
                "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8", "--no-compile",
                "--delta", "3", "--out-dir", str(tmp_path), "--name", "d"])
    assert any(line.startswith("warning: --delta 3 ") for line in capsys.readouterr().err.splitlines())


def test_the_docs_table_says_where_trl_and_verl_differ():
    """docs/real-scale.md's flag table: TRL's steps_per_generation counts micro-steps (divided by the
    accumulation it is our --minibatches), TRL's delta is not our --delta, SAPO's temperatures are --tau-pos /
    --tau-neg, and verl's seq-mean-token-sum-norm is only close to Dr. GRPO (≈)."""
    lines = (ROOT / "docs/real-scale.md").read_text().splitlines()
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| `--")}
    assert "`steps_per_generation` / `gradient_accumulation_steps`" in rows["`--minibatches M`"]
    assert "TRL's `delta` ≠ our `--delta`" in rows["`--clip kl3 --delta δ`"]
    soft_gate = rows["`--clip soft-gate --tau-pos --tau-neg`"]
    assert "`sapo_temperature_pos`" in soft_gate and "`sapo_temperature_neg`" in soft_gate
    assert "≈ `loss_agg_mode=seq-mean-token-sum-norm`" in rows["`--aggregation dr-grpo`"]
