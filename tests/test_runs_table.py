"""scripts/runs_table.py: Table 2 over seeds from training runs' logged evaluations, final and best, on fake
run folders and on tiny train.py runs; one-line errors; eval.py --runs says where the table went."""
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import eval as eval_cli
import train as train_cli
from nanoatr.machinery.flags import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import runs_table  # noqa: E402
from conftest import error_line, jsonl, strict_file  # noqa: E402

NAMES = ("amc23", "aime24", "aime25")


def fake_run(root, name, evals: dict, names=NAMES, k=8, seed=0, clip="kl3", hparams=None, **config):
    """A run directory as train.py leaves it: config.json (TrainConfig's fields, as train.py writes them) and
    metrics.jsonl with step rows and eval/ rows. evals: {step: [(mean, pass) per benchmark]}."""
    run = root / name
    run.mkdir(parents=True)
    cfg = dataclasses.asdict(TrainConfig(**{"eval_data": [f"data/{n}.jsonl" for n in names], "eval_k": k,
                                            "seed": seed, "clip": clip, "name": name, "steps": max(evals), **config}))
    cfg["hparams"] = hparams if hparams is not None else {"kl3": {"delta": 0.07}, "clip": {"eps": 0.2}}[clip]
    (run / "config.json").write_text(json.dumps(cfg))
    lines = []
    for step, values in evals.items():
        row = {"step": step}
        for n, (m, p) in zip(names, values):
            row.update({f"eval/{n}/mean@{k}": m, f"eval/{n}/pass@{k}": p})
        row[f"eval/mean@{k}"] = sum(m for m, _ in values) / len(values)
        row[f"eval/pass@{k}"] = sum(p for _, p in values) / len(values)
        lines += [json.dumps(row), json.dumps({"step": step, "loss": 0.1})]  # read by kind, not by order
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return str(run)


def table_rows(printed: str) -> dict[str, list[str]]:
    """The rows of a printed table: label -> [n, cells...], cells as 'mean ± half' or 'mean'."""
    rows = {}
    for line in printed.splitlines()[2:]:
        if not line or line.startswith(("evaluation:", "Table")) or ":" in line.split("  ")[0]:
            break
        label, rest = line.split("  ", 1)
        rows[label.strip()] = [c.strip() for c in rest.strip().split("  ") if c.strip()]
    return rows


def seed_runs(root, **config):
    """kl3 over seeds 0-2 and clip over seeds 0-1, each evaluated at steps 0, 50 and 100 on one benchmark.
    Step 0 is the model they start from: seed s draws its own samples, equal across the methods."""
    start = {0: 30.0, 1: 32.0, 2: 34.0}
    runs = [fake_run(root, f"kl3-s{s}", {0: [(start[s], 50.0)], 50: [(f - 4, 60.0 + s)], 100: [(f, 70.0)]},
                     names=("amc23",), seed=s, **config)
            for s, f in [(0, 40.0), (1, 42.0), (2, 44.0)]]
    runs += [fake_run(root, f"clip-s{s}", {0: [(start[s], 50.0)], 50: [(f, 66.0)], 100: [(f - 2, 64.0)]},
                      names=("amc23",), seed=s, clip="clip", **config)
             for s, f in [(0, 10.0), (1, 14.0)]]
    return runs


def test_runs_table_pools_seeds_per_method(tmp_path, capsys):
    runs_table.main([*seed_runs(tmp_path)])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["Method", "amc23", "Average"]
    assert lines[1].split() == ["n"] + ["Mean@8", "(%)", "Pass@8", "(%)"] * 2
    t2, t3 = 12.706, 4.303  # t quantiles at 1 and 2 degrees of freedom
    h3 = f"{t3 * 2 / math.sqrt(3):.2f}"  # three seeds with sd 2: 4.97
    rows = table_rows(out)
    assert list(rows) == ["Base model (step 0)", "kl3 (delta=0.07) final", "kl3 (delta=0.07) best",
                          "clip (eps=0.2) final", "clip (eps=0.2) best"]  # the base model's row once
    # step 0: one value per seed (30, 32, 34: the clip runs' equal ones are not counted again)
    assert rows["Base model (step 0)"] == ["3"] + [f"32.00 ± {h3}", "50.00 ± 0.00"] * 2
    assert rows["kl3 (delta=0.07) final"] == ["3"] + [f"42.00 ± {h3}", "70.00 ± 0.00"] * 2
    # best per run and column: Mean@8 at step 100 (40, 42, 44), Pass@8 at step 100 (70 > 60 + s)
    assert rows["kl3 (delta=0.07) best"] == ["3"] + [f"42.00 ± {h3}", "70.00 ± 0.00"] * 2
    # clip: final 8 and 12, best 10 and 14 (step 50), Pass@8 64 final, 66 best: sd of two values 2 apart
    h2 = f"{t2 * math.sqrt(8) / math.sqrt(2):.2f}"  # 25.41
    assert rows["clip (eps=0.2) final"] == ["2"] + [f"10.00 ± {h2}", "64.00 ± 0.00"] * 2
    assert rows["clip (eps=0.2) best"] == ["2"] + [f"12.00 ± {h2}", "66.00 ± 0.00"] * 2
    assert "evaluation: --eval-k 8, --eval-temperature 1.0, --eval-top-p 1.0, " \
           "--eval-max-new-tokens 48, top-k off\n" in out
    assert "95% t-interval over the n seeds" in out and "Table 1 of" not in out


def test_runs_table_of_three_benchmarks_averages_per_seed(tmp_path, capsys):
    """The Average columns: per seed the files' average (eval/mean@k), then over seeds; final and best."""
    run = fake_run(tmp_path, "atr", {0: [(28.0, 48.0), (6.0, 13.0), (4.0, 20.0)],
                                     50: [(42.0, 70.0), (14.0, 30.0), (10.0, 20.0)],
                                     100: [(40.0, 72.0), (13.0, 26.0), (12.0, 30.0)]})
    runs_table.main([run])
    rows = table_rows(capsys.readouterr().out)
    assert rows["Base model (step 0)"] == ["1", "28.00", "48.00", "6.00", "13.00", "4.00", "20.00", "12.67",
                                           "27.00"]
    assert rows["kl3 (delta=0.07) final"] == ["1", "40.00", "72.00", "13.00", "26.00", "12.00", "30.00", "21.67",
                                              "42.67"]
    # best = per column over steps 50 and 100 (the average's best is its own best step: 22.00 at step 50)
    assert rows["kl3 (delta=0.07) best"] == ["1", "42.00", "72.00", "14.00", "30.00", "12.00", "30.00", "22.00",
                                             "42.67"]


@pytest.mark.parametrize("setting, value, named", [
    ("eval_temperature", 0.3, "--eval-temperature 0.3"),
    ("eval_top_p", 0.95, "--eval-top-p 0.95"),
    ("eval_max_new_tokens", 64, "--eval-max-new-tokens 64"),
    ("eval_limit", 10, "--eval-limit 10"),
    ("eval_k", 4, "--eval-k 4"),
    ("eval_data", ["other/amc23.jsonl"], '--eval-data ["other/amc23.jsonl"]'),
    ("model", "models/Qwen3-8B", "--model models/Qwen3-8B"),
])
def test_runs_evaluated_otherwise_get_their_own_table(tmp_path, capsys, setting, value, named):
    """A run evaluated at temperature 0.3 was put beside one at 1.0 without a word: now each evaluation has
    its own table (and base-model row), headed by the settings that differ."""
    first = fake_run(tmp_path, "a", {0: [(30.0, 50.0)], 10: [(40.0, 60.0)]}, names=("amc23",))
    k = value if setting == "eval_k" else 8
    second = fake_run(tmp_path, "b", {0: [(20.0, 40.0)], 10: [(25.0, 45.0)]}, names=("amc23",), k=k,
                      **({} if setting == "eval_k" else {setting: value}))
    runs_table.main([first, second])
    out = capsys.readouterr().out
    tables = out.split("\n\n")
    default = {"eval_temperature": "1.0", "eval_top_p": "1.0", "eval_max_new_tokens": "48", "eval_limit": "0",
               "eval_k": "8", "eval_data": '["data/amc23.jsonl"]', "model": TrainConfig().model}[setting]
    assert tables[0].startswith(f"Table 1 of 2: evaluated with {named.split()[0]} {default}\n")
    assert tables[1].startswith(f"Table 2 of 2: evaluated with {named}\n")
    assert [list(table_rows(t.split("\n", 1)[1])) for t in tables[:2]] == \
        [["Base model (step 0)", "kl3 (delta=0.07) final", "kl3 (delta=0.07) best"]] * 2
    assert table_rows(tables[1].split("\n", 1)[1])["Base model (step 0)"][:3] == ["1", "20.00", "40.00"]


def test_a_training_setting_that_differs_is_named_in_the_label(tmp_path, capsys):
    runs = [fake_run(tmp_path, "a", {0: [(1.0, 2.0)], 5: [(3.0, 4.0)]}, names=("amc23",), lr=1e-4),
            fake_run(tmp_path, "b", {0: [(1.0, 2.0)], 5: [(5.0, 6.0)]}, names=("amc23",), lr=3e-5),
            fake_run(tmp_path, "c", {0: [(1.0, 2.0)], 5: [(7.0, 8.0)]}, names=("amc23",), hparams={"delta": 0.1}),
            fake_run(tmp_path, "d", {0: [(1.0, 2.0)], 5: [(9.0, 8.0)]}, names=("amc23",), seed=1,
                     device="cuda:3")]
    runs_table.main([*runs])
    rows = table_rows(capsys.readouterr().out)
    # lr and delta make methods; where a run ran (--device) does not: a and d are one method over two seeds
    assert {label: cells[:2] for label, cells in rows.items()} == {
        "Base model (step 0)": ["2", "1.00 ± 0.00"],
        "kl3 (delta=0.07, lr=0.0001) final": ["2", "6.00 ± 38.12"],  # 3 and 9: 12.706 * sd 4.243 / sqrt(2)
        "kl3 (delta=0.07, lr=0.0001) best": ["2", "6.00 ± 38.12"],
        "kl3 (delta=0.07, lr=3e-05) final": ["1", "5.00"], "kl3 (delta=0.07, lr=3e-05) best": ["1", "5.00"],
        "kl3 (delta=0.1, lr=0.0001) final": ["1", "7.00"], "kl3 (delta=0.1, lr=0.0001) best": ["1", "7.00"]}


def test_changes_on_resume_and_unfinished_runs_are_in_the_notes(tmp_path, capsys):
    """config.json's "changes" (nanoatr/machinery/folder.py) under the table; each run as it last ran: a, started with
    --steps 10 and resumed to 20, is finished; b (20 steps) is not. Both ran 20 steps: one method, n = 2."""
    a = fake_run(tmp_path, "a", {0: [(1.0, 2.0)], 20: [(3.0, 4.0)]}, names=("amc23",))
    config = strict_file(tmp_path / "a/config.json")
    config.update(steps=10, changes=[{"step": 10, "steps": {"from": 10, "to": 20},
                                      "eval_every": {"from": 0, "to": 8}}])
    (tmp_path / "a/config.json").write_text(json.dumps(config))
    b = fake_run(tmp_path, "b", {0: [(1.0, 2.0)], 16: [(5.0, 6.0)]}, names=("amc23",), seed=1)
    config = strict_file(tmp_path / "b/config.json")
    config.update(steps=20, changes=[{"step": 10, "save_every": {"from": 50, "to": 5}}])
    (tmp_path / "b/config.json").write_text(json.dumps(config))
    runs_table.main([a, b])
    printed = capsys.readouterr().out
    assert table_rows(printed)["kl3 (delta=0.07) final"][0] == "2"
    notes = printed.splitlines()
    assert "a: changed on resume at step 10: --steps 10 -> 20, --eval-every 0 -> 8" in notes
    assert "b: changed on resume at step 10: --save-every 50 -> 5" in notes
    assert "b: last evaluation at step 16 of 20 (not finished)" in notes
    assert not any(line.startswith("a: last evaluation") for line in notes)


def test_runs_table_errors_are_one_line(tmp_path, capsys):
    a = fake_run(tmp_path, "a", {0: [(1.0, 2.0)] * 3})
    twin = fake_run(tmp_path, "twin", {0: [(1.0, 2.0)] * 3}, device="cuda:1")  # kl3 at seed 0 too
    (tmp_path / "noconfig").mkdir()
    (tmp_path / "noconfig/metrics.jsonl").write_text("")
    b = fake_run(tmp_path, "b", {0: [(1.0, 2.0)] * 3})
    metrics = (tmp_path / "b/metrics.jsonl").read_text()
    (tmp_path / "b/metrics.jsonl").write_text(metrics.replace('"eval/aime24/pass@8": 2.0',
                                                              '"eval/aime24/pass@8": null'))
    for argv, message in [([a, "--k", "4"], "unrecognized arguments: --k 4"),
                          ([], "the following arguments are required: RUN_DIR"),
                          ([str(tmp_path / "none")], "no metrics.jsonl"),
                          ([str(tmp_path / "noconfig")], "noconfig: no config.json"),
                          ([b], "the evaluation of step 0 has no number eval/aime24/pass@8"),
                          ([a, twin], "error: a and twin are both kl3 (delta=0.07) at seed 0: each method's rows "
                                      "pool one run per seed"),
                          *(([a, again], f"error: {again} is given twice (as {a} too): one run per folder")
                            for again in (a, f"{a}/", f"{tmp_path}/../{tmp_path.name}/a"))]:
        assert message in error_line(capsys, runs_table.main, argv)


def test_runs_table_from_tiny_train_runs(tmp_path, capsys):
    """What train.py writes is what the table reads: two methods over two seeds, one step each."""
    for clip in ("kl3", "clip"):
        for seed in (0, 1):
            train_cli.main(["--model", str(ROOT / "data/tiny-qwen3"), "--data",
                            str(ROOT / "data/arith/train.jsonl"), "--eval-data",
                            str(ROOT / "data/arith/heldout.jsonl"), "--eval-limit", "4",
                            "--eval-k", "2", "--prompts-per-step", "2", "--group-size", "2",
                            "--max-new-tokens", "8", "--steps", "1", "--no-compile", "--clip", clip,
                            "--seed", str(seed), "--out-dir", str(tmp_path), "--name", f"{clip}-{seed}"])
    capsys.readouterr()
    runs_table.main([*(str(tmp_path / f"{c}-{s}") for c in ("kl3", "clip") for s in (0, 1))])
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert list(rows) == ["Base model (step 0)", "kl3 (delta=0.07) final", "kl3 (delta=0.07) best",
                          "clip (eps=0.2) final", "clip (eps=0.2) best"]
    assert all(cells[0] == "2" and len(cells) == 5 for cells in rows.values()), rows
    finals = [[r for r in jsonl(tmp_path / f"kl3-{s}/metrics.jsonl")
               if r.get("step") == 1 and "eval/mean@2" in r][0]["eval/heldout/mean@2"] for s in (0, 1)]
    assert rows["kl3 (delta=0.07) final"][1].startswith(f"{(finals[0] + finals[1]) / 2:.2f}")
    assert "evaluation: --eval-k 2, --eval-temperature 1.0, --eval-top-p 1.0, " \
           "--eval-max-new-tokens 8, top-k off\n" in out


def test_runs_that_differ_only_where_and_how_they_ran_are_one_method_in_one_table(tmp_path, capsys, monkeypatch):
    """Seed 0 ran before a few flags existed (its config.json lacks them: it ran with the defaults), the folder
    it started in among them: its relative paths are the repository's files, found from anywhere; seed 1 also
    sent its metrics to TensorBoard and was started elsewhere with absolute paths; seed 2 in the repository
    with ./-prefixed ones: the same files (compared by file, not spelling), so one table and one kl3 row of
    n = 3 (results/ holds runs from before today's flags)."""
    runs = seed_runs(tmp_path)
    monkeypatch.chdir(tmp_path)  # not the repository: its files are found from where each run started
    for seed, (run, workdir, at) in enumerate(zip(runs, ("", "/elsewhere", str(ROOT)), ("", f"{ROOT}/", "./"))):
        config = strict_file(Path(run, "config.json"))
        config |= {"workdir": workdir, "model": at + "data/tiny-qwen3", "data": at + "data/arith/train.jsonl",
                   "eval_data": [at + "data/arith/heldout.jsonl"]}
        for flag in ("lr_scheduler", "warmup_steps", "mask_truncated", "reward", "report_to", "workdir") \
                if seed == 0 else ():
            del config[flag]
        config |= {"report_to": ["tensorboard"]} if seed == 1 else {}
        Path(run, "config.json").write_text(json.dumps(config))
        metrics = Path(run, "metrics.jsonl").read_text().replace("eval/amc23/", "eval/heldout/")
        Path(run, "metrics.jsonl").write_text(metrics)
    runs_table.main([*runs[:3]])
    out = capsys.readouterr().out
    assert "Table 1 of" not in out
    assert table_rows(out)["kl3 (delta=0.07) final"][0] == "3"


A, B = "a" * 40, "b" * 40


@pytest.mark.parametrize("second, note", [
    ([{"step": 0, "commit": A, "dirty": False}], None),
    ([{"step": 0, "commit": B, "dirty": False}], "s0 aaaaaaaaaaaa; s1 bbbbbbbbbbbb"),
    ([{"step": 0, "commit": A, "dirty": True}], "s0 aaaaaaaaaaaa; s1 aaaaaaaaaaaa+dirty"),
    ([{"step": 0, "commit": "unknown", "dirty": "unknown"}], "s0 aaaaaaaaaaaa; s1 unknown"),
    (None, "s0 aaaaaaaaaaaa; s1 unknown"),  # a run from before provenance was recorded
    ([{"step": 0, "commit": A, "dirty": False}, {"step": 50, "commit": B, "dirty": False}],
     "s0 aaaaaaaaaaaa; s1 aaaaaaaaaaaa bbbbbbbbbbbb"),  # resumed on other code
    ([{"step": 50, "commit": A, "dirty": False}], "s0 aaaaaaaaaaaa; s1 aaaaaaaaaaaa unknown"),  # its start unknown
    ("garbage", "s0 aaaaaaaaaaaa; s1 unknown"),
])
def test_runs_table_notes_runs_that_ran_other_code(tmp_path, capsys, second, note):
    """Table 2 over seeds says when its runs did not all run one commit without changes (config.json's
    "provenance", every start's and resume's), naming what each ran."""
    runs = [fake_run(tmp_path, f"s{seed}", {0: [(30.0, 50.0)], 100: [(40.0, 60.0)]}, names=("amc23",), seed=seed)
            for seed in (0, 1)]
    for run, sittings in zip(runs, ([{"step": 0, "commit": A, "dirty": False}], second)):
        config = strict_file(Path(run, "config.json"))
        Path(run, "config.json").write_text(json.dumps({**config, **({"provenance": sittings} if sittings else {})}))
    runs_table.main([*runs])
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("code:")]
    assert notes == ([] if note is None else [f"code: not one commit without changes: {note} (+dirty: with changes "
                                              "not committed; unknown: not recorded, or not a git checkout)"])


def test_eval_runs_says_where_table_2_went(capsys):
    """eval.py scores a model; its old --runs is one line naming the script that prints Table 2 now."""
    line = error_line(capsys, eval_cli.main, ["--runs", "runs/kl3-s0", "runs/kl3-s1"])
    assert line.startswith("error: unrecognized arguments: --runs runs/kl3-s0 runs/kl3-s1 (see --help)")
    assert "is now python scripts/runs_table.py RUN_DIR..." in line and "did you mean" not in line


def test_the_script_runs_from_anywhere(tmp_path):
    """python scripts/runs_table.py RUN_DIR...: its own folder (stats.py) and the clone on its path."""
    run = fake_run(tmp_path, "a", {0: [(1.0, 2.0)], 5: [(3.0, 4.0)]}, names=("amc23",))
    out = subprocess.run([sys.executable, str(ROOT / "scripts/runs_table.py"), run], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].split() == ["Method", "amc23", "Average"]
