"""nanoatr/machinery/flags.py: the one range table at its endpoints, shared groups defined once and composed into each
command's config, a command's own default for a shared field, and --help's sections in one order."""
import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

import eval as eval_cli
import grpo
import sample
import sft
from nanoatr import methods
from nanoatr.machinery import flags
from nanoatr.machinery.flags import (RANGES, SECTIONS, ConfigError, TrainConfig, check_number,
                                     in_reading_order, parse)

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [TrainConfig, sft.SFTConfig, eval_cli.EvalConfig, sample.SampleConfig]
GROUPS = [flags.PromptFlags, flags.ModelFlags, flags.SamplingFlags, flags.DeviceFlags, flags.TrainingFlags,
          flags.EvalFlags, flags.RunFlags]


@pytest.mark.parametrize("name, inside, outside", [
    (">0", [1e-9, 1], [0, -1]), (">=0", [0, 2], [-1e-9]), (">=1", [1, 7], [0.999]), (">=2", [2, 9], [1.999, 1]),
    (">1", [1.001], [1, 0]),
    ("(0,1)", [1e-9, 0.5, 0.999], [0, 1]), ("(0,1]", [1e-9, 1], [0, 1.001]), ("[0,1]", [0, 1], [-1e-9, 1.001]),
])
def test_each_range_at_its_endpoints(name, inside, outside):
    test, wording = RANGES[name]
    assert all(test(v) for v in inside) and not any(test(v) for v in outside)
    with pytest.raises(ConfigError) as e:
        check_number("x_y", outside[0], name)
    assert str(e.value) == f"--x-y must be {wording} (got {outside[0]})"
    for value in (float("nan"), float("inf"), True, "1"):  # whatever the range: a finite number first
        with pytest.raises(ConfigError, match=r"^--x-y must be a finite number"):
            check_number("x_y", value, name)


def test_every_method_knob_names_a_range_of_the_one_table():
    assert set(methods.RULES.values()) <= set(RANGES)
    assert set(methods.RULES) <= {k for m in methods.METHODS for k in methods.defaults(m)}  # no stale knob


def test_a_shared_field_is_defined_in_one_group_only():
    names = [f.name for group in GROUPS for f in dataclasses.fields(group)]
    repeated = {n for n in names if names.count(n) > 1} - {"dtype", "device", "seed"}  # see below
    assert not repeated
    # Same name, different flags: the precision of training vs of sampling, the device of a run folder's
    # command vs of eval/sample (a section of their own), the seed of a run vs of sampling.
    assert flags.TrainingFlags.__dataclass_fields__["dtype"].metadata["help"] != \
        flags.DeviceFlags.__dataclass_fields__["dtype"].metadata["help"]


def test_a_command_changes_a_shared_default_and_keeps_its_section_and_range():
    shared = flags.EvalFlags.__dataclass_fields__["eval_k"]
    ours = sft.SFTConfig.__dataclass_fields__["eval_k"]
    assert (shared.default, ours.default) == (8, 4) and TrainConfig().eval_k == 8 and sft.SFTConfig().eval_k == 4
    assert ours.metadata["section"] == shared.metadata["section"] == flags.EVAL
    assert ours.metadata["range"] == shared.metadata["range"] == ">=1"
    with pytest.raises(ConfigError, match=r"^--eval-k must be >= 1 \(got 0\)$"):
        flags.check_ranges(sft.SFTConfig(eval_k=0))
    lr = sft.SFTConfig.__dataclass_fields__["lr"]  # help only: the default stays the group's
    assert lr.default == 1e-4 and "--warmup" in lr.metadata["help"] and lr.metadata["range"] == ">0"


def test_reading_order_lists_the_commands_own_fields_then_its_groups_and_overrides_stay_in_place():
    names = [f.name for f in in_reading_order(sft.SFTConfig)]
    assert names[:3] == ["model", "data", "eval_data"]
    prompt = [f.name for f in dataclasses.fields(flags.PromptFlags)]
    assert names[names.index("system_prompt"):][:3] == prompt  # thinking (an override) in its group's place
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(sft.SFTConfig))


@pytest.mark.parametrize("cls", COMMANDS, ids=lambda c: c.__name__)
def test_help_sections_come_in_one_order(cls, capsys):
    with pytest.raises(SystemExit):
        parse(cls, ["--help"])
    out = capsys.readouterr().out
    heads = [f"\n{s}:" for s in SECTIONS if f"\n{s}:" in out]
    assert len(heads) >= 3 and [out.index(h) for h in heads] == sorted(out.index(h) for h in heads)
    for f in dataclasses.fields(cls):  # every flag listed, and no field that is none (cli=False: --hparams)
        assert (flags.flag(f.name) in out) == (f.metadata.get("cli") is not False), f.name


@pytest.mark.parametrize("argv, message", [
    (["--steps", "-1"], "error: --steps must be >= 0 (got -1)"),   # it trained nothing and said so twice
    (["--prompts", "0"], "error: --prompts must be >= 1 (got 0)"),
    (["--group-size", "1"], "error: --group-size must be >= 2 (got 1)"),
    (["--minibatches", "0"], "error: --minibatches must be >= 1 (got 0)"),
    (["--lr", "-1e-4"], "error: --lr must be > 0 (got -0.0001)"),   # a negative number is a value
    (["--lr", "nan"], "error: --lr must be a finite number (got nan)"),
    (["--clip", "kl4"], "error: argument --clip: invalid choice: 'kl4'"),
    (["--learning_rate", "1e-4"], "error: unrecognized arguments: --learning_rate 1e-4"),
])
def test_a_bad_grpo_py_flag_is_one_error_line(argv, message, capsys):
    """grpo.py (the one-file GRPO) checks its counts and rate as train.py does: one line naming the flag. It
    imports only the core, so TRL's names are told ours by train.py alone (test_preset.py)."""
    with pytest.raises(SystemExit) as e:
        grpo.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("cls", COMMANDS, ids=lambda c: c.__name__)
def test_a_shortened_or_misspelt_flag_is_an_error_naming_the_flag_meant(cls, capsys):
    """A flag is taken only in full (argparse's prefixes are off): a shortened one would silently be
    whichever flag it begins, and would break once another flag begins the same way."""
    typos = [("--mod", "--model"), ("--sytem-prompt", "--system-prompt"), ("--devise", "--device")]
    for word, meant in typos:
        with pytest.raises(SystemExit) as e:
            parse(cls, [word, "4"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1
        assert f"unrecognized arguments: {word} 4 (see --help); {word}: did you mean {meant}?" in err


@pytest.mark.parametrize("argv, hint", [
    (["--prompt", "x"], "; --prompt: did you mean --prompt-template or --prompts-per-step?"),
    (["--ev", "3"], ""),    # begins eight flags, near none: no guess
    (["--zzz"], ""), (["--hparams", "{}"], ""),   # a field that is no flag (cli=False)
    (["--learning_rate", "1e-4"], "; TRL's --learning_rate is --lr here (docs/real-scale.md maps TRL's and "
                                  "verl's names)"),   # the TRL name, not a guess too
])
def test_a_prefix_of_several_flags_names_them_and_a_word_near_none_names_none(argv, hint, capsys):
    with pytest.raises(SystemExit):
        parse(TrainConfig, argv)
    err = capsys.readouterr().err.strip()  # and nothing after: no TRL hint for a word that is no TRL name
    assert err == f"error: unrecognized arguments: {' '.join(argv)} (see --help){hint}"
    assert err.count("did you mean") == hint.count("did you mean")


@pytest.mark.parametrize("argv, named", [
    (["--system-prompt", "be \udcff brief"], "--system-prompt"), (["--stop", "a", "--stop", "\udcc3"], "--stop"),
    (["--prompt-template", "Q: {question}\udcff"], "--prompt-template"),
])
@pytest.mark.parametrize("cls", COMMANDS)
def test_command_line_bytes_that_are_no_utf8_are_one_line_naming_the_flag(cls, argv, named, capsys):
    """A byte that is no UTF-8 in argv reaches Python as a lone surrogate, which no file, tokenizer or
    config.json takes: one line naming the flag, before anything is made."""
    if named not in {flags.flag(f.name) for f in dataclasses.fields(cls)}:
        pytest.skip(f"{cls.__name__} has no {named}")
    with pytest.raises(SystemExit) as e:
        parse(cls, argv)
    assert e.value.code == 2 and capsys.readouterr().err == \
        f"error: {named}: not UTF-8 text (bytes that decode to no character on the command line)\n"


def test_a_sample_py_prompt_of_bytes_that_are_no_utf8_is_one_line(capsys, monkeypatch):
    with pytest.raises(SystemExit):
        sample.main(["1+\udcff"])
    assert capsys.readouterr().err == "error: PROMPT: not UTF-8 text (bytes that decode to no character on " \
        "the command line)\n"
    stdin = type("In", (), {"isatty": lambda self: False, "__iter__": lambda self: iter(["1+1\n", "2\udcff\n"])})
    monkeypatch.setattr("sys.stdin", stdin())
    with pytest.raises(SystemExit):
        sample.main(["--max-new-tokens", "2"])
    assert capsys.readouterr().err.splitlines()[-1] == "error: stdin, line 2: not UTF-8 text (bytes that decode " \
        "to no character)"


@pytest.mark.parametrize("command", ["train", "sft", "eval"])
def test_two_files_of_one_name_are_one_line_naming_them(command, tmp_path, capsys):
    """Results (metrics eval/<name>/..., samples.jsonl, eval.py's rows and table) go by a file's name: two
    files named alike in different folders would be one column, only one of them evaluated."""
    import train
    for folder in "ab":
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    files = [str(tmp_path / "a/test.jsonl"), str(tmp_path / "b/test.jsonl")]
    main, flag = {"train": (train.main, "--eval-data"), "sft": (sft.main, "--eval-data"),
                  "eval": (eval_cli.main, "--data")}[command]
    extra = ["--model", "data/tiny-qwen3", "--data", files[0]] if command == "sft" else []
    with pytest.raises(SystemExit) as e:
        main([*extra, flag, *files, "--out-dir" if command != "eval" else "--out", str(tmp_path / "out")])
    assert e.value.code == 2 and capsys.readouterr().err == (
        f"error: {flag}: two files named test ({' '.join(files)}): each file's results go by its name; "
        "rename one\n")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------
# Read before torch loads: --help and a bad flag answer at once (issue 56), and the core's names the flags
# read from its source are the core's own

HEAVY = ("torch", "transformers", "peft", "sympy")


@pytest.mark.parametrize("command, bad", [
    ("train.py", ["--lr", "-1e-4"]), ("eval.py", ["--k", "0"]), ("sample.py", ["--seed", "-1"]),
    ("sft.py", ["--delta", "1"]), ("grpo.py", ["--lr", "-1e-4"])])
def test_help_and_a_bad_flag_need_no_torch(command, bad):
    """Each command run with torch, transformers, peft and sympy unimportable: --help prints, a bad flag is
    its one error line (the answer no longer waits seconds for torch to load)."""
    block = "; ".join(f"sys.modules[{m!r}] = None" for m in HEAVY)
    def run(*argv):
        code = f"import sys, runpy; {block}; sys.argv = {[command, *argv]!r}; runpy.run_path({command!r}, " \
               "run_name='__main__')"
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    shown, refused = run("--help"), run(*bad)
    assert shown.returncode == 0 and shown.stdout.startswith(f"usage: {command}"), shown.stderr
    about = " ".join(ast.get_docstring(ast.parse((ROOT / command).read_text())).split("\n\n")[0].split())
    assert about in " ".join(shown.stdout.split())  # the docstring's first paragraph describes the command
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: ") and bad[0] in refused.stderr


def test_what_the_flags_read_of_the_core_is_the_cores_own():
    from nanoatr import data, lora, loss, rollout
    assert flags.METHOD_KNOBS == {m: methods.defaults(m) for m in methods.METHODS}
    assert flags.KNOB_RULES == methods.RULES and flags.TASK_NAMES == list(data.TASKS)
    assert (flags.AGGREGATIONS, flags.SAMPLERS, flags.LORA_TARGETS) == (loss.AGGREGATIONS, rollout.SAMPLERS,
                                                                        lora.TARGETS)
    task, cfg, ev = data.TASKS["math"], TrainConfig(), eval_cli.EvalConfig()  # --help's defaults: the task's
    assert (cfg.model, cfg.data, cfg.eval_data, cfg.max_new_tokens) == \
        (task.model, task.data, list(task.eval_data), task.max_new_tokens)
    assert (ev.model, ev.data, ev.max_new_tokens) == (cfg.model, cfg.eval_data, cfg.max_new_tokens)


@pytest.mark.parametrize("argv, line", [
    (["--epsilon", "0.2"], "TRL's --epsilon 0.2 is --eps 0.2 with --clip clip here (--eps is no knob of --clip "
                           "kl3: its knobs are --delta)"),
    (["--clip", "clip", "--epsilon", "0.2"], "TRL's --epsilon 0.2 is --eps 0.2 here"),
    (["--clip", "dual-clip", "--epsilon_high=0.3"], "--eps-high 0.3 with --clip clip-higher here"),
    (["--fp16"], "TRL's --fp16 has no flag here: float16 is not supported"),
    (["--max_prompt_length", "512"], "TRL's --max_prompt_length 512 has no flag here: prompts are never cut"),
    (["--resume_from_checkpoint", "out/checkpoint-500"], "TRL's --resume_from_checkpoint is --resume here"),
    (["--lr", "-1e-4"], "error: --lr must be > 0 (got -0.0001)"),    # not "expected one argument"
    (["--delta", "-.5"], "error: --delta must be > 0 (got -0.5)"),
    (["eval.py", "--resume", "--out", "e.jsonl"], "eval.py's --resume is now --skip-done"),
])
def test_a_flag_line_that_misled_now_says_what_to_do(argv, line, capsys):
    """Issue 57's lines: TRL's --epsilon under the default --clip kl3 was told --eps, which kl3 refuses; three
    TRL names got no hint; a negative number was taken for a missing value. And eval.py's old --resume."""
    with pytest.raises(SystemExit) as e:
        eval_cli.read_flags(argv[1:]) if argv[0] == "eval.py" else flags.train_flags(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and line in err and err.count("\n") == 1, err


def test_a_missing_data_file_is_named_before_asking_for_held_out_files(tmp_path):
    cfg, _, given = flags.train_flags(["--data", str(tmp_path / "mine.jsonl")])
    with pytest.raises(ConfigError, match=rf"^--data {tmp_path}/mine.jsonl: file not found$"):
        flags.apply_preset(cfg, given)
    (tmp_path / "mine.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    with pytest.raises(ConfigError, match="needs --eval-data"):
        flags.apply_preset(cfg, given)


@settings(max_examples=60, deadline=None)
@given(value=st.integers(1, 10_000), minibatches=st.integers(1, 16), epochs=st.integers(1, 8),
       accumulation=st.integers(1, 8), ratio=st.floats(0.001, 0.999))
@example(value=1, minibatches=1, epochs=1, accumulation=1, ratio=0.999)  # warmup 1 is one step, not a ratio
def test_every_trl_unit_conversion_over_its_range(value, minibatches, epochs, accumulation, ratio):
    """Each TRL count converted for the command line it is on, at values away from the defaults (issue 57's
    class 1), against the arithmetic of docs/from-trl.md: k = minibatches x epochs optimizer steps a rollout
    step, ceil(v / k) rollout steps; steps_per_generation / gradient_accumulation_steps minibatches."""
    from nanoatr.machinery.trl_names import CommandLine, hint
    argv = ["--minibatches", str(minibatches), "--epochs", str(epochs), "--gradient_accumulation_steps",
            str(accumulation)]
    ours = {"--steps", "--eval-every", "--save-every", "--minibatches", "--warmup-ratio"}
    def told(name, given):
        return hint(name, CommandLine([*argv, name, str(given)], {"minibatches": 2, "epochs": 1}), ours)
    k = minibatches * epochs
    for trl, flag in (("max_steps", "--steps"), ("eval_steps", "--eval-every"), ("save_steps", "--save-every")):
        assert f"is {flag} {-(-value // k)} here" in told(f"--{trl}", value)
    assert f"is --minibatches {value / accumulation:g} here" in told("--steps_per_generation", value)
    assert f"with --steps_per_generation {value:g}, --minibatches {value / accumulation:g}" in \
        hint("--gradient_accumulation_steps", CommandLine(["--steps_per_generation", str(value),
                                                           "--gradient_accumulation_steps", str(accumulation)],
                                                          {}), ours)
    assert f"is --warmup-ratio {ratio:g} here" in told("--warmup_steps", f"{ratio:g}")
    assert f"is --warmup-steps {value} here" in told("--warmup_steps", value)
    assert f"{k} optimizer steps" in told("--logging_steps", value)
