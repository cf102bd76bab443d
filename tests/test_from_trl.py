"""docs/from-trl.md, run: its data snippet, reward file and nanoatr command are taken from the page's code
blocks (so the page cannot drift from the code) and run on the embedded tiny model, shortened to 4 steps.
Shown: the user's rewards logged by name, the TensorBoard event file read back equal to metrics.jsonl (lr
included, of a resumed run too), lr equal to transformers' get_cosine_schedule_with_warmup, the TRL script's
numbers mapped as the page's arithmetic says, and the page's error lines, each the one line a bad input gives
(exit 2, no run folder). That a resumed run equals the unbroken one: tests/test_train.py.

    python -m pytest tests/test_from_trl.py -q
"""
import ast
import contextlib
import json
import math
import re
import shlex
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import train
from nanoatr.machinery import folder
from nanoatr.machinery.flags import TrainConfig, apply_preset, hparam_flags, parse, resolve
from rounding import U32, within
from test_report import assert_same, events, metrics, scalars
from conftest import error_line, jsonl, strict_file

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs/from-trl.md").read_text()
# The page's run is 100 rollout steps of 8 prompts; here 4, evaluated on 4 problems, a checkpoint every 2
SHORT = ["--steps", "4", "--eval-every", "2", "--eval-limit", "4", "--eval-k", "2", "--save-every", "2",
         "--no-compile"]


def code_block(start: str) -> str:
    """The page's one fenced code block whose text starts with `start`."""
    found = [code for code in re.findall(r"```\w*\n(.*?)```", PAGE, flags=re.S) if code.startswith(start)]
    assert len(found) == 1, f"docs/from-trl.md: {len(found)} code blocks start with {start!r}"
    return found[0]


def page_command() -> list[str]:
    """The arguments of the page's `python train.py ...` command (its continuation lines joined)."""
    command = code_block("python train.py ")
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:2] == ["python", "train.py"]
    return words[2:]


def call_of(tree: ast.Module, name: str) -> ast.Call:
    """The one call of `name`(...) in a script."""
    (call,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == name]
    return call


def trl_config() -> tuple[dict, ast.Module]:
    """The keyword arguments of the page's GRPOConfig(...) (literals), and the TRL script's syntax tree."""
    tree = ast.parse(code_block("# train_trl.py"))
    return {k.arg: ast.literal_eval(k.value) for k in call_of(tree, "GRPOConfig").keywords}, tree


def page_folder(path: Path) -> Path:
    """A folder laid out as the repo root is for the page: data/ (the tiny model and the task), the page's
    parquet files made by its own snippet, and its reward file."""
    path.mkdir()
    (path / "data").symlink_to(ROOT / "data")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(path)
        exec(compile(code_block("# arith.parquet and arith-test.parquet"), "docs/from-trl.md", "exec"), {})
    (path / "my_rewards.py").write_text(code_block("# my_rewards.py"))
    return path


@pytest.fixture(autouse=True)
def forget_the_reward_module():
    """Each test imports the page's reward file afresh (as a new process would)."""
    yield
    sys.modules.pop("my_rewards", None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The page's command (shortened), uninterrupted in runs/arith; and runs/part, a copy stopped after step
    4 but before its checkpoint (checkpoint/ removed: step 2's is the newest left), then resumed."""
    folder = page_folder(tmp_path_factory.mktemp("page") / "repo")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        train.main([*page_command(), *SHORT])
        shutil.copytree("runs/arith", "runs/part")
        shutil.rmtree("runs/part/checkpoint")
        sys.modules.pop("my_rewards", None)
        train.main(["--resume", "runs/part"])
    sys.modules.pop("my_rewards", None)
    return folder / "runs"


def test_the_page_data_is_trls_conversational_format_with_the_gold_in_solution(runs):
    row = pq.read_table(runs.parent / "arith.parquet").slice(0, 1).to_pylist()[0]
    first = json.loads((ROOT / "data/arith/train.jsonl").read_text().splitlines()[0])
    assert row == {"prompt": [{"role": "user", "content": first["problem"]}], "solution": first["answer"]}
    assert f"one row: `{json.dumps(row)}`" in PAGE


def test_the_page_run_logs_each_reward_by_name(runs):
    """reward_mean is the weighted sum of reward/accuracy and reward/no_box, both from the page's file."""
    config = strict_file(runs / "arith/config.json")
    assert config["reward"] == ["my_rewards.py:accuracy", "my_rewards.py:no_box"]
    w_a, w_b = config["reward_weights"]
    rows = [r for r in metrics(runs / "arith") if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # reward_mean is the float32 mean of the N float32 totals w_a a + w_b b (a in {0, 1}, b in {0, -1}, so
    # |total| <= 2 max|w|): the weights rounded to float32 (U32), each total (2 U32), their N-term sum
    # ((N - 1) U32 of the totals' mean size), the division (U32); the per-function means are sums of 0 / 1
    # and 0 / -1, exact, then divided (U32). Within 2 (N + 4) U32 max|w|.
    n = config["prompts_per_step"] * config["group_size"]
    tol = 2 * (n + 4) * U32 * max(abs(w) for w in config["reward_weights"])
    for r in rows:  # correct: the task's verifier (--correct-reward's default), graded beside at weight 0
        within(r["reward_mean"], w_a * r["reward/accuracy"] + w_b * r["reward/no_box"], tol, "reward_mean")
        assert r["accuracy"] == pytest.approx(r["reward/math_reward"], abs=1e-6)
    assert sum(r["reward/accuracy"] for r in rows) > 0  # some completions were right
    assert "eval/arith-test/mean@2" in metrics(runs / "arith")[0]  # the evaluation before training
    assert (config["answer_field"], config["lr_scheduler"], config["warmup_ratio"]) == \
        ("solution", "cosine", 0.1)


@pytest.mark.parametrize("name", ["arith", "part"])
def test_the_event_file_holds_every_number_of_metrics_jsonl(runs, name):
    """TensorBoard's reader, on the uninterrupted run and on the resumed one (its redone steps shown once)."""
    shown = scalars(events(runs / name))
    assert_same(shown, metrics(runs / name))
    assert [step for step, _ in shown["lr"]] == [1, 2, 3, 4]


def test_the_trl_script_is_the_same_run_by_the_pages_arithmetic():
    """Each GRPOConfig number against the page command's flag, as 'Counting batches' maps them (one process);
    the reward functions, their weights and the data files are the same."""
    trl, tree = trl_config()
    argv = page_command()
    cfg, extra, given = parse(TrainConfig, argv, "", hparam_flags)
    cfg = resolve(apply_preset(cfg, given), extra)
    k = trl["steps_per_generation"] // trl["gradient_accumulation_steps"] * trl["num_iterations"]
    assert cfg.group_size == trl["num_generations"]
    assert cfg.prompts_per_step == trl["per_device_train_batch_size"] * trl["steps_per_generation"] \
        // trl["num_generations"]
    assert cfg.micro_batch == trl["per_device_train_batch_size"]
    assert cfg.minibatches == trl["steps_per_generation"] // trl["gradient_accumulation_steps"]
    assert cfg.epochs == trl["num_iterations"]
    assert (cfg.steps * k, cfg.eval_every * k, cfg.optimizer_steps) == (trl["max_steps"], trl["eval_steps"],
                                                                         trl["max_steps"])
    assert cfg.warmup == math.ceil(trl["max_steps"] * trl["warmup_steps"]) == 20  # TRL: below 1, a ratio
    assert (cfg.lr, cfg.lr_scheduler, cfg.max_new_tokens) == (trl["learning_rate"], trl["lr_scheduler_type"],
                                                              trl["max_completion_length"])
    assert (cfg.aggregation, trl["loss_type"]) == ("dr-grpo", "dr_grpo")
    assert (cfg.std_normalize, trl["scale_rewards"]) == (False, "none")
    assert (cfg.beta, cfg.clip, cfg.hparams) == (trl["beta"], "clip", {"eps": trl["epsilon"]})
    assert cfg.mask_truncated == trl["mask_truncated_completions"] is True
    assert cfg.reward_weights == trl["reward_weights"] and cfg.report_to == [trl["report_to"]]
    assert (cfg.dtype, cfg.grad_checkpoint, trl["bf16"], trl["gradient_checkpointing"]) == \
        ("float32", False, False, False)
    assert (cfg.adam_beta1, cfg.adam_beta2) == (0.9, 0.999)  # TRL's (transformers') defaults: not in its script
    imported = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "my_rewards")
    (funcs,) = [k.value.elts for k in call_of(tree, "GRPOTrainer").keywords if k.arg == "reward_funcs"]
    funcs = [f.id for f in funcs]
    assert [a.name for a in imported.names] == funcs == [spec.split(":")[1] for spec in cfg.reward]
    files = [ast.literal_eval(k.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
             for k in n.keywords if k.arg == "data_files"]
    assert files == [cfg.data, *cfg.eval_data]


def error_lines() -> dict[str, str]:
    """The page's error block: {what is wrong (its comment): the error line under it}."""
    lines = code_block("# --reward my_rewards.py:acuracy (a typo)").splitlines()
    return {lines[i][2:]: lines[i + 1] for i in range(0, len(lines), 2)}


@pytest.mark.parametrize("case", list(error_lines()))
def test_each_bad_input_is_the_one_line_the_page_shows(tmp_path, capsys, monkeypatch, case):
    folder = page_folder(tmp_path / "repo")
    argv = page_command()
    if "acuracy" in case:
        argv[argv.index("my_rewards.py:accuracy")] = "my_rewards.py:acuracy"
    elif "parquet" in case:  # the same rows, the gold in a column named answer
        rows = pq.read_table(folder / "arith.parquet").to_pylist()
        pq.write_table(pa.Table.from_pylist([{"prompt": r["prompt"], "answer": r["solution"]} for r in rows]),
                       folder / "arith.parquet")
    elif "misspelt" in case:
        argv += ["--max-new-token", "256"]
    elif "`def " in case:  # the page's reward file, one function's signature as the comment shows it
        source = (folder / "my_rewards.py").read_text()
        old = {"no_box": "def no_box(completions, **kwargs):",
               "accuracy": "def accuracy(completions, solution, **kwargs):"}[case.split()[0]]
        (folder / "my_rewards.py").write_text(source.replace(old, re.search(r"`(def .*?)`", case)[1]))
    elif "factory" in case:
        with open(folder / "my_rewards.py", "a") as f:
            f.write("\n\ndef get_accuracy():\n    return accuracy\n")
        argv[argv.index("my_rewards.py:accuracy")] = "my_rewards.py:get_accuracy"
    else:
        assert case.startswith("--warmup-steps 20")
        argv += ["--warmup-steps", "20"]
    monkeypatch.chdir(folder)
    assert error_line(capsys, train.main, [*argv, *SHORT]) == error_lines()[case]
    assert not (folder / "runs/arith").exists()


# What the page's GRPOConfig settings are told, typed as flags beside the page's command (--minibatches 2):
# each converted to our units where they differ.
TOLD = {"max_steps": "TRL's --max_steps 200 is --steps 100 here at --minibatches 2 (--steps counts rollout "
                     "steps; one is --minibatches x --epochs optimizer steps)",
        "eval_steps": "TRL's --eval_steps 50 is --eval-every 25 here at --minibatches 2",
        "steps_per_generation": "TRL's --steps_per_generation 4 is --minibatches 2 here with "
                                "--gradient_accumulation_steps 2",
        "gradient_accumulation_steps": "with --steps_per_generation 4, --minibatches 2",
        "warmup_steps": "TRL's --warmup_steps 0.1 is --warmup-ratio 0.1 here",
        "bf16": "TRL's --bf16 False is --dtype float32 (our default) here",
        "logging_steps": "metrics.jsonl logs every rollout step, 2 optimizer steps at --minibatches 2",
        "loss_type": "TRL's --loss_type dr_grpo is --aggregation dr-grpo here",
        "scale_rewards": "TRL's --scale_rewards none is --no-std-normalize here",
        "output_dir": "TRL's --output_dir runs/arith is --out-dir runs --name arith here",
        "learning_rate": "TRL's --learning_rate is --lr here"}


def test_each_trl_setting_of_the_page_typed_as_a_flag_is_told_ours_in_our_units(capsys):
    """Every GRPOConfig keyword of the page's script (but beta, which is our flag too), typed as a flag with
    its value, is one error line (exit 2) naming our flag; where the unit differs, with the value converted
    for the command line it is on. --steps_per_generation is converted with --gradient_accumulation_steps."""
    trl, _ = trl_config()
    argv = page_command()
    for key, value in trl.items():
        if key == "beta":
            continue
        words = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        typed = [f"--{key}", *words] + ["--steps_per_generation", "4", "--gradient_accumulation_steps", "2"] * \
            (key in ("steps_per_generation", "gradient_accumulation_steps"))
        err = error_line(capsys, parse_flags, [*argv, *typed])
        assert f"TRL's --{key}" in err and TOLD.get(key, "") in err, err
    err = error_line(capsys, parse_flags, ["--num_train_epochs", "3"])
    assert "--num_train_epochs 3 has no flag here" in err


def parse_flags(argv: list[str]):
    return parse(TrainConfig, argv, "", hparam_flags)


def test_a_checkpoint_is_resumed_in_place_when_newest_and_else_into_a_new_folder(runs, capsys, monkeypatch):
    """TRL's resume_from_checkpoint: --resume runs/arith/checkpoint (the newest) is --resume runs/arith; an
    older one without --name is one error line, the run left as it was; with --name it goes on in a new run
    folder that holds the run's record up to that step and then the steps an uninterrupted run takes."""
    monkeypatch.chdir(runs.parent)
    before = {p: p.read_bytes() for p in Path("runs/arith").rglob("*") if p.is_file()}
    sys.modules.pop("my_rewards", None)
    with pytest.raises(SystemExit) as e:
        train.main(["--resume", "runs/arith/checkpoint"])
    assert e.value.code == 0 and "run runs/arith is finished (step 4 of 4" in capsys.readouterr().out
    line = ("error: --resume runs/arith/checkpoint-step000002 holds step 2, and runs/arith's newest checkpoint "
            "step 4: the run keeps its later steps; give --name NEW to go on from step 2 in a new run folder "
            "(beside it, its record up to step 2 copied)")
    assert error_line(capsys, train.main, ["--resume", "runs/arith/checkpoint-step000002"]) == line
    assert line in " ".join(PAGE.split())
    sys.modules.pop("my_rewards", None)
    train.main(["--resume", "runs/arith/checkpoint-step000002", "--name", "from2"])
    assert {p: p.read_bytes() for p in Path("runs/arith").rglob("*") if p.is_file()} == before
    def logged(run):  # without the timings
        return [{k: v for k, v in row.items() if not k.startswith(("time_", "tokens_per_s_", "threads"))
                 and not k.endswith("/seconds")} for row in metrics(run)]
    assert logged(runs / "from2") == logged(runs / "part")  # part: step 2's checkpoint resumed in place
    assert metrics(runs / "from2")[:3] == metrics(runs / "arith")[:3]  # steps 0..2 copied as logged
    config, saved = (strict_file(runs / r / "config.json") for r in ("from2", "arith"))
    assert config["branched_from"] == {"run": "runs/arith", "checkpoint": "checkpoint-step000002", "step": 2}
    assert [p["step"] for p in config["provenance"]] == [0, 2] and config["provenance"][0] == \
        saved["provenance"][0]
    assert {k: v for k, v in config.items() if k not in ("branched_from", "provenance", "name")} == \
        {k: v for k, v in saved.items() if k not in ("provenance", "name")}
    samples = jsonl(runs / "from2/samples.jsonl")
    assert [r for r in samples if r["step"] <= 2] == \
        [r for r in jsonl(runs / "arith/samples.jsonl") if r["step"] <= 2]


@contextlib.contextmanager
def held(run: Path):
    """A run folder locked as another process training it does (its lock file's bytes put back after)."""
    lock = folder.RunLock(run).acquire()
    try:
        yield
    finally:
        lock.restore()
        lock.release()


def test_a_branch_that_cannot_start_leaves_both_folders_as_they_were(runs, capsys, monkeypatch):
    """Into a used folder, from a run another process holds, with a refused flag, into the run itself or
    outside --out-dir, from a checkpoint that is not there or named outside its run folder: one short line; from
    the newest checkpoint of a finished run: nothing to do. No new folder is left, runs/arith is unchanged."""
    monkeypatch.chdir(runs.parent)
    before = {p: p.read_bytes() for p in Path("runs").rglob("*") if p.is_file()}
    shutil.copytree("runs/arith/checkpoint-step000002", "copy/checkpoint-step000002")
    Path("link").symlink_to(runs / "arith/checkpoint-step000002")
    older = ["--resume", "runs/arith/checkpoint-step000002"]
    cases = {"used": ([*older, "--name", "part"], 2, "error: run folder runs/part already exists"),
             "held": ([*older, "--name", "new"], 2, "error: run folder runs/arith is in use by another process"),
             "refused": ([*older, "--name", "new", "--clip", "kl3"], 2, "error: --clip kl3 cannot change"),
             "done": (["--resume", "runs/arith/checkpoint", "--name", "new"], 0,
                      "run runs/arith/checkpoint is finished (step 4 of 4, evaluated): nothing to do"),
             "itself": ([*older, "--name", "arith"], 2, "later steps; runs/arith is the run itself; give another "
                        "--name to go on from step 2"),
             "path": ([*older, "--name", "../new"], 2, "error: --name ../new: a run folder's name, not a path"),
             "none": (["--resume", "runs/arith/checkpoint-step000003"], 2, "step000003: no such checkpoint "
                      "(runs/arith holds checkpoint, checkpoint-step000002)\n"),
             "link": (["--resume", "link"], 2, f"error: --resume link is a checkpoint of the run folder "
                      f"{runs / 'arith'}: --resume takes the run folder (--resume {runs / 'arith'}), and goes on"),
             "copy": (["--resume", "copy/checkpoint-step000002"], 2, "is a checkpoint that no run folder holds: "
                      "--resume takes a run folder, and goes on")}
    for case, (argv, code, said) in cases.items():
        sys.modules.pop("my_rewards", None)
        with held(Path("runs/arith")) if case == "held" else contextlib.nullcontext():
            with pytest.raises(SystemExit) as e:
                train.main(argv)
        out = capsys.readouterr()
        assert e.value.code == code and said in (out.err if code else out.out), (case, out)
        assert (out.err.count("\n"), *map(Path.exists, map(Path, ("runs/new", "new")))) == (bool(code), False, False)
    assert {p: p.read_bytes() for p in Path("runs").rglob("*") if p.is_file()} == before


def test_a_resume_says_what_it_changed(runs, capsys, monkeypatch):
    monkeypatch.chdir(runs.parent)
    shutil.copytree("runs/arith", "runs/more")
    shutil.rmtree("runs/more/checkpoint")  # step 2's is the newest left
    sys.modules.pop("my_rewards", None)
    train.main(["--resume", "runs/more", "--save-every", "3"])
    assert ", from step 2 (--save-every 2 -> 3)" in capsys.readouterr().out
