"""nanoatr.sweep: methods x seeds of train.py, Table 3, Figure 2, the delta ablation (Figure 3)."""
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import stats  # noqa: E402  (scripts/stats.py)
import sweep  # noqa: E402  (scripts/sweep.py)
import sweep_report  # noqa: E402  (scripts/sweep_report.py)
from nanoatr.machinery.flags import PRESETS, TrainConfig, apply_preset, hparam_flags, parse  # noqa: E402
from conftest import error_line, strict_file  # noqa: E402
from test_plot import HAS_MATPLOTLIB, lines_of  # noqa: E402
TINY = ["--eval-limit", "4", "--eval-k", "2", "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "40"]


def test_one_method_two_seeds_end_to_end(tmp_path, capsys):
    argv = ["--clip", "kl3", "--seeds", "2", "--steps", "2", "--jobs", "2", "--out", str(tmp_path), "--", *TINY]
    sweep.main(argv)
    table = (tmp_path / "table.md").read_text()
    assert "| method | hyper-parameters | runs | heldout Mean@2 (%) | heldout Pass@2 (%) | cut tokens (%) low + high | " \
           "entropy, last 2 steps |" in table  # the window is the run's length when it is shorter than 20 steps
    assert "| kl3 | delta=0.07 | 2 | " in table and "| warm start (step 0), one value per seed | | 2 seeds | " in table
    results = strict_file(tmp_path / "results.json")
    assert sorted(r["seed"] for r in results) == [0, 1] and all(0 <= r["mean@k"] <= 100 for r in results)
    cfg = strict_file(tmp_path / "kl3-s1/config.json")
    flags = sweep.SETTINGS["math"][0]
    settings = dict(zip(flags[::2], flags[1::2]))
    assert (cfg["minibatches"], cfg["epochs"]) == (int(settings["--minibatches"]), int(settings["--epochs"]))
    assert (cfg["seed"], cfg["eval_k"]) == (1, 2)  # SETTINGS, then ours
    if HAS_MATPLOTLIB:
        labels = {gid.split("|")[0] for gid in lines_of(tmp_path / "curves.svg")}
        assert labels == {"kl3"}  # one colour, one entry
    else:  # figures are optional: without matplotlib the sweep writes its table and says how to get them
        assert not (tmp_path / "curves.svg").exists() and "pip install matplotlib" in capsys.readouterr().err
    # the same command again: both runs are finished, nothing is trained
    sweep.main(argv)
    assert capsys.readouterr().out.count("(finished before)") == 2


def fake_run(run, steps, mean, cut=0.01, start=30.0, entropy=0.1, **config):
    """A finished run directory as train.py leaves it: config.json (with `config`) and metrics.jsonl (without
    the evaluation at step 0 where start is None)."""
    run.dir.mkdir(parents=True)
    (run.dir / "config.json").write_text(json.dumps({"clip": run.clip, "eval_k": 8, "seed": run.seed, **config}))
    rows = [{"step": 0, "eval/mean@8": start, "eval/pass@8": start + 30}] if start is not None else []
    rows += [{"step": s, "reward_mean": 0.3 + s / 100, "entropy": entropy - s / 100, "completion_len": 30 + s, "clip_frac_low": cut,
              "clip_frac_high": cut / 2} for s in range(1, steps + 1)]
    rows += [{"step": steps, "eval/mean@8": mean, "eval/pass@8": mean + 30}]
    (run.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def report(out: Path, arms: list[str], seeds: int, *more: str) -> str:
    """`sweep.py --report` over runs of 3 steps finished already: its table.md."""
    sweep.main(["--clip", *arms, "--seeds", str(seeds), "--steps", "3", "--out", str(out), "--report", *more])
    return (out / "table.md").read_text()


def test_delta_ablation_table_and_figure(tmp_path):
    """The table always; the figure where matplotlib is installed (optional)."""
    deltas = ["0.05", "0.1"]
    for i, run in enumerate(sweep.plan([f"kl3:delta={d}" for d in deltas], 2, tmp_path.resolve())):
        fake_run(run, 3, mean=40.0 + 10 * i)  # finished already: the sweep only reads them
    sweep.main(["--ablate-delta", *deltas, "--seeds", "2", "--steps", "3", "--out", str(tmp_path)])
    table = (tmp_path / "table.md").read_text()
    assert "| kl3:delta=0.05 | delta=0.05 | 2 | 45.00 ± 5.00 | 75.00 ± 5.00 | 1.50 (1.00 + 0.50) |" in table
    assert "| kl3:delta=0.1 | delta=0.1 | 2 | 65.00 ± 5.00 |" in table
    # the default comparison: every delta against the first, seed by seed (seed 1 - seed 1, seed 0 - seed 0)
    # no spread: nothing more is detectable, and 6 seeds are the fewest the sign test can decide with
    assert "| kl3:delta=0.1 − kl3:delta=0.05 | Mean@8 | 2 | +20.00 [+20.00, +20.00] | above 0 | 2 : 0 | 0.500 | 0.00 " \
        "| 6 |" in table
    if not HAS_MATPLOTLIB:
        assert not (tmp_path / "ablation.svg").exists()
        return
    lines = lines_of(tmp_path / "ablation.svg")
    assert lines["kl3, mean over seeds (95% band)|mean@k"] == lines["kl3, mean over seeds (95% band)|pass@k"] == 2
    assert "kl3, mean over seeds (95% band)|mean@k|band" in lines  # the interval, shaded
    assert lines["warm start (step 0)|mean@k"] == 2  # from the first delta to the last
    assert "kl3:delta=0.05|eval/mean@8|band" in lines_of(tmp_path / "curves.svg")  # Figure 2's, of 2 seeds


def test_parse_method_and_plan(tmp_path):
    assert sweep.parse_method("clip-higher:eps_low=0.329,eps-high=0.6") == ("clip-higher", {"eps_low": 0.329,
                                                                                           "eps_high": 0.6}, ())
    with pytest.raises(ValueError, match="--delta does not apply to --clip clip"):
        sweep.parse_method("clip:delta=0.1")
    with pytest.raises(ValueError, match="name=value"):
        sweep.parse_method("kl3:delta")
    runs = sweep.plan(["clip", "kl3", "kl3:delta=0.2"], 2, tmp_path, delta=0.1)
    # the folder names the delta a run used, also when --delta set it: kl3 at 0.1 is not the kl3 of another sweep
    assert [(r.dir.name, r.hparams) for r in runs[::2]] == [("clip-s0", {}), ("kl3_delta_0.1-s0", {"delta": 0.1}),
                                                           ("kl3_delta_0.2-s0", {"delta": 0.2})]
    cmd = sweep.command(runs[2], 50, ["--lr", "1e-4"])
    assert cmd[1:] == ["train.py", "--clip", "kl3", "--delta", "0.1", "--seed", "0", "--steps", "50", "--out-dir",
                       str(tmp_path), "--name", "kl3_delta_0.1-s0", "--lr", "1e-4"]
    runs[2].dir.mkdir(parents=True)
    (runs[2].dir / "config.json").write_text("{}")  # started before: resumed
    assert sweep.command(runs[2], 50, [])[1:] == ["train.py", "--resume", str(runs[2].dir), "--steps", "50"]


def test_the_table_shows_the_delta_the_runs_used(tmp_path):
    """--delta 0.1 reaches kl3 (which did not set one) and its row says 0.1, not kl3's default 0.07."""
    for run in sweep.plan(["clip", "kl3", "kl3:delta=0.2"], 1, tmp_path.resolve(), delta=0.1):
        fake_run(run, 3, mean=30.0)
    table = report(tmp_path, ["clip", "kl3", "kl3:delta=0.2"], 1, "--delta", "0.1")
    assert "| clip | eps=0.2 | 1 |" in table and "| kl3 | delta=0.1 | 1 |" in table
    assert "| kl3:delta=0.2 | delta=0.2 | 1 |" in table


# Each bad command line, arm, hypothesis and effect: exit 2, one `error:` line, before any run.
ARMS, SAME = ["--clip", "clip", "kl3"], ["d", "+1", "kl3", "-1", "clip"]


@pytest.mark.parametrize("argv, message", [
    (["--clip", "kl3", "--ablate-delta", "0.1"], "exclude each other"),
    (["--", "--seed", "3"], "--seed after -- is set by the sweep"),
    (["--clip", "nope"], "--clip must be one of"),
    (["--seeds", "0"], "error: --seeds must be >= 1 (got 0)"),
    (["--first-seed", "-1"], "error: --first-seed must be >= 0 (got -1)"),
    (["--jobs", "-1"], "error: --jobs must be >= 0 (got -1)"),       # was a ZeroDivisionError
    (["--threads", "-2"], "error: --threads must be >= 0 (got -2)"),  # was OMP_NUM_THREADS=-2
    (["--clp", "kl3"], "error: unrecognized arguments: --clp kl3 (see --help); --clp: did you mean "
                       "--clip?"),
    (["--clip", "kl3:nope=1"], "--nope is neither a hyper-parameter of its method nor a train.py flag"),
    (["--clip", "kl3:eval_t=1"],
     "--eval-t is neither a hyper-parameter of its method nor a train.py flag; did you mean eval_temperature or "
     "eval_top_p?"),
    (["--clip", "kl3:agg=dr-grpo"], "did you mean aggregation?"),   # flags in full, as train.py takes them
    (["--clip", "kl3:seed=1"], "--seed is one for the whole sweep"),
    (["--clip", "kl3:eval_data=x.jsonl"], "--eval-data is one for the whole sweep"),
    (["--clip", "kl3:compile=yes"], "--compile is a switch: compile=true or compile=false"),
    (["--clip", "kl3:aggregation=sum"], "argument --aggregation: invalid choice: 'sum'"),
    (["--clip", "kl3:lr=-1"], "--lr must be > 0"),
    (["--clip", "clip:delta=0.1"], "--delta does not apply to --clip clip"),
    ([*ARMS, "--hypothesis", "kl3/clip", "mean", "up"], "SIDE is above, below or differs"),
    ([*ARMS, "--hypothesis", "kl3/clip", "means", "above"], "--hypothesis means: a score is"),
    ([*ARMS, "--hypothesis", "kl3/nope", "mean", "above"], "--hypothesis kl3/nope: write A/B"),
    ([*ARMS, "--reject", "kl3/clip", "mean", "big"], "EFFECT is a number"),
    ([*ARMS, "--reject", "kl3/clip", "mean", "0"], "EFFECT is a difference other than 0"),
    ([*ARMS, "--effect", "low", "+0.5", "kl3"], "--effect low: the weights sum to 0.5, not 0"),
    ([*ARMS, "--effect", "low", "+0.5", "kl3", "-0.5"],
     "--effect low: write NAME WEIGHT ARM [WEIGHT ARM ...]"),
    ([*ARMS, "--effect", "low"], "--effect low: write NAME WEIGHT ARM"),
    ([*ARMS, "--effect", "low", "half", "kl3", "-0.5", "clip"], "--effect low: 'half' is not a weight"),
    ([*ARMS, "--effect", "low", "+0.5", "kl3", "-0.5", "nope"],
     "--effect low: nope is not among the methods (clip kl3)"),
    ([*ARMS, "--effect", "low", "+1", "kl3", "-1", "kl3"], "--effect low: kl3 is named twice"),
    ([*ARMS, "--effect", "low", "0", "kl3", "0", "clip"], "--effect low: the weight of kl3 is 0"),
    ([*ARMS, "--effect", "low", "+0.5", "kl3", "inf", "clip"], "--effect low: the weight of clip is inf"),
    ([*ARMS, "--effect", "kl3/clip", "+1", "kl3", "-1", "clip"],
     "--effect kl3/clip: an effect's name has no '/'"),
    ([*ARMS, "--effect", "kl3", "+1", "kl3", "-1", "clip"],
     "--effect kl3: an effect's name has no '/' and is not a method's"),
    ([*ARMS, "--effect", *SAME, "--effect", *SAME], "--effect: each effect has a name of its own"),
    ([*ARMS, "--effect", *SAME, "--hypothesis", "e", "mean", "above"],
     "--hypothesis e: write A/B with A and B among the methods (clip kl3) or an --effect's name"),
    ([*ARMS, "--effect", *SAME, "--compare", "d"], "--compare d: write A/B"),
    ([*ARMS, "--compare", "kl3"], "--compare kl3: write A/B"),
])
def test_a_bad_command_line_is_one_error_line(argv, message, tmp_path, capsys):
    assert message in error_line(capsys, sweep.main, ["--out", str(tmp_path), "--dry-run", *argv])


def test_a_report_needs_a_sweep_folder(tmp_path, capsys):
    line = error_line(capsys, sweep.main, ["--clip", "kl3", "--report", "--out", str(tmp_path / "nothing")])
    assert line.startswith(f"error: --report: {tmp_path / 'nothing'} holds no sweep (no such folder)")
    assert not (tmp_path / "nothing").exists()


def test_other_settings_need_another_directory(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"steps": 5, "train_args": []}))
    with pytest.raises(SystemExit, match="other settings"):
        sweep.main(["--clip", "kl3", "--seeds", "1", "--steps", "2", "--out", str(tmp_path)])


def test_a_failed_run_is_reported(tmp_path, capsys):
    missing = tmp_path / "missing.jsonl"  # train.py finds out when it starts: the run fails
    with pytest.raises(SystemExit) as e:
        sweep.main(["--clip", "kl3", "--seeds", "1", "--steps", "1", "--out", str(tmp_path / "sweep"), "--",
                    "--eval-data", str(missing)])
    assert e.value.code == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out
    assert "| kl3 | delta=0.07 | 0/1 |" in (tmp_path / "sweep/table.md").read_text()
    assert "kl3-s0 failed" in captured.err and str(missing) in captured.err


@pytest.mark.parametrize("own, train, message", [
    (["--clip", "kl3"], ["--lr", "-1"], "error: --lr must be > 0 (got -1.0) (train.py, run kl3-s0)"),
    (["--clip", "clip", "kl3:minibatches=7"], [],   # an arm's own flag, as it fits the others
     "error: --minibatches 7 must divide the 128 completions of a rollout chunk"),
    (["--clip", "kl3", "--steps", "2"], ["--warmup-steps", "100"],
     "error: --warmup-steps 100 is more than the run's 64 optimizer steps"),
])
def test_flags_that_would_fail_the_runs_are_one_error_line_before_any_run(own, train, message, tmp_path,
                                                                         capsys):
    """train.py's own checks (each value's range, how the flags fit together) run on every new run's command
    line first: one line naming the flag, exit 2, nothing started."""
    argv = [*own, "--seeds", "1", "--out", str(tmp_path / "sweep"), "--", *train]
    assert message in error_line(capsys, sweep.main, argv)
    assert not (tmp_path / "sweep").exists()


def test_result_averages_the_last_two_evaluations_of_each_file(tmp_path):
    run = sweep_report.Run("kl3", "kl3", {}, 0, tmp_path / "r")
    run.dir.mkdir()
    (run.dir / "config.json").write_text(json.dumps({"clip": "kl3", "eval_k": 8}))
    ev = lambda step, h, t: {"step": step, "eval/heldout/mean@8": h, "eval/heldout/pass@8": h + 10,  # noqa: E731
                             "eval/transfer/mean@8": t, "eval/transfer/pass@8": t + 1,
                             "eval/mean@8": (h + t) / 2, "eval/pass@8": (h + t) / 2 + 5.5,
                             "eval/heldout/entropy": h / 100}
    rows = [ev(0, 20.0, 2.0)] + [{"step": s, "entropy": 0.1 * s, "clip_frac_low": 0.0, "clip_frac_high": 0.0}
                                 for s in range(1, 32)] + [ev(29, 99.0, 99.0), ev(30, 30.0, 4.0), ev(31, 34.0, 2.0)]
    (run.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = sweep_report.result(run, 31)
    assert res["splits"] == ["heldout", "transfer"] and res["end_steps"] == [30, 31]   # step 29 is not the end
    assert (res["heldout/mean@k"], res["heldout/pass@k"], res["transfer/mean@k"]) == (32.0, 42.0, 3.0)
    assert (res["heldout/mean@k_start"], res["transfer/pass@k_start"], res["mean@k"]) == (20.0, 3.0, 17.5)
    assert res["entropy_end"] == pytest.approx(0.1 * sum(range(12, 32)) / 20)      # the last 20 of 31 steps
    assert res["heldout/entropy"] == pytest.approx(0.32) and math.isnan(res["transfer/entropy"])  # not logged
    table = sweep_report.table([res], {"kl3": run}, 1, 31)
    # the spread over seeds is the population std, as in Table 3
    assert sweep_report.mean_std([20.0, 23.33, 23.33]) == pytest.approx((22.22, 1.57), abs=0.01)

    assert "| kl3 | delta=0.07 | 1 | 32.00 | 42.00 | 3.00 | 4.00 |" in table      # one seed: no ± 0.00
    assert "heldout Mean@8 (%) | heldout Pass@8 (%) | transfer Mean@8 (%) | transfer Pass@8 (%)" in table
    # the evaluation policy's entropy (T = 1), a column for each file it was logged on; nats to 3 decimals
    assert table.splitlines()[0].endswith("| entropy, last 20 steps | heldout entropy (T = 1) |")
    assert table.splitlines()[3].endswith("| 0.320 |")


def test_compare_against_the_warm_start(tmp_path):
    for i, run in enumerate(sweep.plan(["clip", "kl3"], 2, tmp_path.resolve())):
        fake_run(run, 3, mean=31.0 + i)   # step 0 logs 30.0: every run ends 1-4 points above its start
    table = report(tmp_path, ["clip", "kl3"], 2, "--compare", "kl3/warm-start", "kl3/clip")
    # d = 3, 4: mean 3.5, se 0.5, t(0.975, 1) = 12.706: 3.5 -+ 6.35
    assert "| kl3 − warm-start | Mean@8 | 2 | +3.50 [-2.85, +9.85] | contains 0 | 2 : 0 | 0.500 |" in table
    assert "| kl3 − clip | Mean@8 | 2 | +2.00 [+2.00, +2.00] | above 0 | 2 : 0 |" in table
    assert "| kl3 − clip | entropy, last 3 steps | 2 | +0.000 [+0.000, +0.000] | contains 0 | 0 : 0 | 1.000 | 0.000 | " \
        "> 1000 |" in table


def test_warm_start_row_counts_each_seed_once(tmp_path):
    """Seed 0 finished under two methods, seed 1 under one: the warm start is the mean over the two seeds
    (30 and 40), not over the three runs (33.33); --report reads the finished runs and starts no other (kl3 at
    delta 0.2 finished none: a row of no cells)."""
    for run in sweep.plan(["clip", "kl3"], 2, tmp_path.resolve()):
        if run.method == "clip" or run.seed == 0:
            fake_run(run, 3, mean=50.0, start=30.0 + 10 * run.seed)
    table = report(tmp_path, ["clip", "kl3", "kl3:delta=0.2"], 2)
    assert "| warm start (step 0), one value per seed | | 2 seeds | 35.00 ± 5.00 | 65.00 ± 5.00 | | |" in table
    assert "| kl3 | delta=0.07 | 1/2 | 50.00 |" in table and "| kl3:delta=0.2 | delta=0.2 | 0/2 | | | | |\n" in table
    assert not (tmp_path / "kl3-s1").exists() and not (tmp_path / "sweep.json").exists()  # --report: no run


def test_the_settings_line_shows_each_flag_as_train_py_took_it(tmp_path):
    """A flag after -- overrides the task's setting: the report shows the value that ran, once; list flags
    given twice keep both, as train.py's argparse does."""
    assert sweep_report.settings_text(["--task", "countdown", "--lr", "1e-4", "--no-compile", "--eval-data",
                                       "a.jsonl", "--compile", "--lr", "5e-5", "--eval-data", "b.jsonl",
                                       "--delta=0.1", "--delta", "0.05"]) == \
        "--task countdown --eval-data a.jsonl --compile --lr 5e-5 --eval-data b.jsonl --delta 0.05"
    fake_run(sweep.plan(["clip"], 1, tmp_path.resolve())[0], 32, mean=31.0)
    sweep.main(["--task", "countdown", "--clip", "clip", "--seeds", "1", "--out", str(tmp_path), "--report", "--",
                "--lr", "5e-5"])
    text = (tmp_path / "table.md").read_text()
    settings = next(line for line in text.splitlines() if line.startswith("Settings"))
    assert "--lr 5e-5" in settings and "1e-4" not in settings and settings.count("--lr") == 1
    assert "A − B" not in text  # one arm: nothing to compare


def test_the_report_notes_the_runs_changed_on_resume(tmp_path):
    """The runs changed on resume are named; results.json has null, not NaN, for what a run lacks (its step 0)."""
    changes = [{"step": 2, "eval_every": {"from": 0, "to": 1}, "save_every": {"from": 50, "to": 1}}]
    for run in sweep.plan(["clip", "kl3"], 1, tmp_path.resolve()):  # clip without step 0, kl3 changed on resume
        fake_run(run, 3, mean=31.0, **({"start": None} if run.method == "clip" else {"changes": changes}))
    table = report(tmp_path, ["clip", "kl3"], 1, "--reject", "kl3/clip", "mean", "1")
    assert "- kl3 − clip, Mean@8: a gain of 1 or more is not rejected (1 seed(s): no test); Holm" in table
    assert "\nChanged on resume (config.json's \"changes\"):\n- kl3-s0: at step 2: --eval-every 0 -> 1, " \
           "--save-every 50 -> 1\n" in table
    assert "clip-s0:" not in table
    clip, kl3 = strict_file(tmp_path / "results.json")
    assert clip["changes"] == [] and clip["mean@k_start"] is None and kl3["mean@k_start"] == 30.0


def test_without_matplotlib_the_last_line_names_the_table_alone(tmp_path, capsys, monkeypatch):
    for run in sweep.plan(["kl3"], 1, tmp_path.resolve()):
        fake_run(run, 3, mean=31.0)

    def no_matplotlib(*args, **kwargs):
        raise SystemExit("error: drawing figures needs matplotlib: pip install matplotlib")
    monkeypatch.setattr(sweep_report, "plot_methods", no_matplotlib)
    sweep.main(["--clip", "kl3", "--seeds", "1", "--steps", "3", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith(f"wrote {tmp_path / 'table.md'}  (") and ", " not in last.split("  (")[0]
    assert "pip install matplotlib" in captured.err


# ----------------------------------------------------------------------------
# Arms with train.py flags

def train_config(cmd: list[str]):
    """(TrainConfig, method hyper-parameters) as train.py reads a command line."""
    cfg, hparams, _ = parse(TrainConfig, cmd[cmd.index("train.py") + 1:], add_flags=hparam_flags)
    return cfg, hparams


def test_arms_set_train_flags_and_keep_one_name_per_run(tmp_path):
    arm = "kl3:delta=0.07,aggregation=seq-mean-token-mean,lr=2e-4"
    assert sweep.parse_method(arm) == ("kl3", {"delta": 0.07}, (("aggregation", "seq-mean-token-mean"),
                                                               ("lr", "0.0002")))
    runs = sweep.plan([arm, "kl3:delta=0.05,compile=false", "kl3"], 1, tmp_path)
    assert [r.dir.name for r in runs] == ["kl3_aggregation_seq-mean-token-mean_lr_0.0002-s0",
                                          "kl3_delta_0.05_compile_false-s0", "kl3-s0"]
    # one run, one folder, however it is written; two arms that are one run are refused
    assert sweep.plan(["kl3:lr=0.0002,aggregation=seq-mean-token-mean"], 1, tmp_path)[0].dir == runs[0].dir
    with pytest.raises(ValueError, match="'kl3' and 'kl3:delta=0.07' are the same run"):
        sweep.plan(["kl3", "kl3:delta=0.07"], 1, tmp_path)
    # the arm's flags come last: they win over the sweep's settings and the flags after --
    cfg, hparams = train_config(sweep.command(runs[0], 32, ["--lr", "1e-4", "--aggregation", "dr-grpo"]))
    assert (cfg.clip, cfg.aggregation, cfg.lr, hparams["delta"], cfg.seed) == ("kl3", "seq-mean-token-mean", 2e-4,
                                                                               0.07, 0)
    cfg, hparams = train_config(sweep.command(runs[1], 32, ["--compile"]))
    assert (cfg.compile, cfg.lr, hparams["delta"]) == (False, TrainConfig.lr, 0.05)
    fake_run(runs[0], 3, mean=31.0)
    assert f"| {arm} | delta=0.07, aggregation=seq-mean-token-mean, lr=0.0002 | 1 | 31.00 |" in report(tmp_path,
                                                                                                     [arm], 1)


# ----------------------------------------------------------------------------
# GPUs and presets (issue 36)

def test_each_job_gets_a_gpu_of_its_own(tmp_path, monkeypatch, capsys):
    """Fake GPU ids 3 and 5, six runs: each train.py job sees one GPU in CUDA_VISIBLE_DEVICES, two run at a time,
    never two on one GPU."""
    runs = {r.dir.name: r for r in sweep.plan(["clip", "kl3"], 3, tmp_path.resolve())}
    jobs, busy, lock = [], set(), threading.Lock()

    def fake_train(cmd, cwd, env, stdout, stderr):
        name, gpu = cmd[cmd.index("--name") + 1], env["CUDA_VISIBLE_DEVICES"]
        with lock:
            jobs.append((name, gpu, env["OMP_NUM_THREADS"], sorted(busy)))
            busy.add(gpu)
        time.sleep(0.05)
        fake_run(runs[name], 3, mean=31.0)
        with lock:
            busy.discard(gpu)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(sweep.subprocess, "run", fake_train)
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 8)  # 8 cores for 2 GPUs: 4 threads a run
    sweep.main(["--clip", "clip", "kl3", "--seeds", "3", "--steps", "3", "--gpus", "3,5", "--out", str(tmp_path)])
    assert sorted(name for name, *_ in jobs) == sorted(runs)
    assert all(gpu in ("3", "5") and gpu not in held and n == "4" for _, gpu, n, held in jobs)
    assert {gpu for _, gpu, *_ in jobs} == {"3", "5"} and any(held for *_, held in jobs)  # both, at once
    out = capsys.readouterr().out
    assert "6 runs (2 methods x 3 seeds, 3 steps each), 2 at a time one per GPU (3, 5)" in out
    assert out.count(" on GPU 3)") + out.count(" on GPU 5)") == 6


def test_the_gpus_by_default_are_the_visible_ones(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sweep.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sweep.torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert sweep.visible_gpus() == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")  # a job given "6" runs on physical GPU 6
    assert sweep.visible_gpus() == ["4", "6"]
    sweep.main(["--clip", "kl3", "--seeds", "3", "--out", str(tmp_path), "--dry-run"])
    assert "# 2 at a time: each command runs with CUDA_VISIBLE_DEVICES set to a GPU of 4,6 that no other run holds" \
        in capsys.readouterr().out
    for argv, message in [(["--jobs", "2"], "--jobs with GPUs (4,6): one run per GPU at a time"),
                          (["--gpus", "0,0"], "--gpus 0,0: name each GPU once")]:
        assert message in error_line(capsys, sweep.main, ["--clip", "kl3", "--out", str(tmp_path), "--dry-run",
                                                          *argv])
    monkeypatch.setattr(sweep.torch.cuda, "is_available", lambda: False)
    assert sweep.visible_gpus() == []


def test_a_preset_wins_over_the_sweeps_settings(tmp_path, capsys):
    """--preset after --: the sweep's SETTINGS of the task and its end evaluations are not added (they would
    override the preset's lr, minibatches, ...); the steps are the preset's unless --steps is given."""
    paper = ["--preset", "paper", "--model", "m", "--data", "d.jsonl", "--eval-data", "e.jsonl"]
    sweep.main(["--clip", "kl3", "--seeds", "1", "--dry-run", "--out", str(tmp_path), "--", *paper])
    out = capsys.readouterr().out
    assert "--preset paper after --: the sweep's settings of --task math are not applied (the preset's win)" in out
    cfg = apply_preset(*train_config(out.strip().splitlines()[-1].split())[:1],
                              given={"model", "data", "eval_data", "clip", "seed", "steps", "out_dir", "name",
                                     "task", "preset"})
    assert (cfg.lr, cfg.minibatches, cfg.eval_every) == tuple(PRESETS["paper"][k] for k in ("lr", "minibatches",
                                                                                                "eval_every"))
    assert cfg.steps == PRESETS["paper"]["steps"]
    sweep.main(["--clip", "kl3", "--seeds", "1", "--steps", "5", "--dry-run", "--out", str(tmp_path), "--", *paper])
    assert " --steps 5 " in capsys.readouterr().out
    sweep.main(["--clip", "kl3", "--seeds", "1", "--dry-run", "--out", str(tmp_path)])  # no preset: the settings
    assert " ".join(sweep.SETTINGS["math"][0]) in capsys.readouterr().out


# ----------------------------------------------------------------------------
# Pre-registered hypotheses, rejections, pairing by seed

def test_hypotheses_verdicts_and_a_rejected_gain(tmp_path):
    """clip ends at 30 + s on seed s, kl3 at clip + d with d = 1, -1, 2, -2, 0 on seeds 1-5 (seed 0 only under
    clip): mean 0, sd sqrt(2.5), se 0.7071, t(0.975, 4) = 2.776: 0 -+ 1.96; detectable (2.776 + 0.941) 0.7071 =
    2.63. kl3's entropy is 0.02 below clip's on every seed."""
    d = {1: 1.0, 2: -1.0, 3: 2.0, 4: -2.0, 5: 0.0}
    for run in sweep.plan(["clip", "kl3"], 6, tmp_path.resolve()):
        if run.method == "clip":
            fake_run(run, 3, mean=30.0 + run.seed)
        elif run.seed in d:
            fake_run(run, 3, mean=30.0 + run.seed + d[run.seed], entropy=0.08)
    table = report(tmp_path, ["clip", "kl3"], 6, "--hypothesis", "kl3/clip", "mean", "above",
                   "--hypothesis", "kl3/clip", "entropy", "below", "--hypothesis", "kl3/clip", "entropy", "above",
                   "--hypothesis", "kl3/clip", "heldout/mean", "above",
                   "--reject", "kl3/clip", "mean", "3.67", "--reject", "kl3/clip", "mean", "1")
    # p: one-sided on the predicted side, t = 0 (p 0.5) and t = -inf (no spread: 0 below, 1 above). Holm over the
    # six (the score that is not one of these runs counts, untested): 0 <= 0.05/6, then 0.0033 (3.67) <= 0.05/5,
    # then 0.12 (1) > 0.05/4 stops; over the other sides: 0 (entropy above) <= 0.05/6, then 0.5 > 0.05/5
    assert "| kl3 − clip | Mean@8 | > 0 | 5 | +0.00 [-1.96, +1.96] | 2 : 2 | 1.000 | undecided | 0.5 | **undecided** " \
        "| 2.63 | > 1000 |" in table
    assert "| kl3 − clip | entropy, last 3 steps | < 0 | 5 | -0.020 [-0.020, -0.020] | 0 : 5 | 0.062 | confirmed | 0 | " \
        "**confirmed** | — | — |" in table
    assert "| kl3 − clip | entropy, last 3 steps | > 0 | 5 | -0.020 [-0.020, -0.020] | 0 : 5 | 0.062 | refuted | 1 | " \
        "**refuted** |" in table
    assert "| kl3 − clip | heldout/mean@k | > 0 | 0 | not a score of these runs | | | | — | **undecided** | | |" in table
    t = -3.67 / math.sqrt(2.5 / 5)   # -5.19
    assert f"- kl3 − clip, Mean@8: a gain of 3.67 or more is rejected (one-sided paired t-test against +3.67: " \
           f"t = -5.19, df 4, p = {stats.t_cdf(t, 4):.2g}); Holm, family of 6: **confirmed**." in table
    assert "- kl3 − clip, Mean@8: a gain of 1 or more is not rejected (one-sided paired t-test against +1: " \
           "t = -1.41, df 4, p = 0.12); Holm, family of 6: **undecided**." in table
    assert "Seed-paired differences, exploratory: no correction for multiple comparisons" in table


# ----------------------------------------------------------------------------
# Effects of more than two arms, Holm's procedure over the pre-registered family (issue 38)

LOWHYB, HIGHHYB = "clip-higher:eps_low=0.329,eps_high=0.2", "clip-higher:eps_high=0.422"   # [0.671, 1.2], [0.8, 1.422]
EDGES = ["clip", LOWHYB, HIGHHYB, "kl3"]
LOW = ["low", "+0.5", LOWHYB, "-0.5", "clip", "+0.5", "kl3", "-0.5", HIGHHYB]
HIGH = ["high", "+0.5", HIGHHYB, "-0.5", "clip", "+0.5", "kl3", "-0.5", LOWHYB]


def test_main_effects_of_a_2x2_with_holm_over_the_family(tmp_path):
    """tests/test_stats.py's 2 x 2 of Mean@8 per seed (seed 3 has no high-hybrid run: not in the effects, in
    kl3 − clip) through the sweep; by hand there: low 3.17 -+ 3.13 = [+0.04, +6.29], p above 0.0244; high
    1.83 -+ 3.13 = [-1.29, +4.96], p two-sided 0.128; a gain of 10 in low, t = -9.41, p 0.0056. kl3 − clip =
    5, 5, 5, 6: mean 5.25, sd 0.5, se 0.25, t(0.975, 3) 3.182: [+4.45, +6.05], t = 21: below, p ~ 1 (other
    side 1.1e-4). Holm, m = 4: 0.0056 <= 0.0125, then 0.0244 > 0.0167: only the gain of 10 is ruled out (low's
    interval alone confirms it: Holm does not); the other sides 1.1e-4 <= 0.0125, then 0.976 > 0.0167: kl3 −
    clip below 0 refuted."""
    scores = {"clip": [30, 28, 31, 30], LOWHYB: [32, 29, 35, 40], HIGHHYB: [31, 30, 31, None], "kl3": [35, 33, 36, 36]}
    for run in sweep.plan(EDGES, 4, tmp_path.resolve()):
        if scores[run.method][run.seed] is not None:
            fake_run(run, 3, mean=float(scores[run.method][run.seed]))
    table = report(tmp_path, EDGES, 4, "--effect", *LOW, "--effect", *HIGH,
                   "--hypothesis", "low", "mean", "above", "--hypothesis", "high", "mean", "differs",
                   "--hypothesis", "kl3/clip", "mean", "below", "--reject", "low", "mean", "10")
    assert f"- low = 0.5 {LOWHYB} − 0.5 clip + 0.5 kl3 − 0.5 {HIGHHYB}\n" in table
    assert f"- high = 0.5 {HIGHHYB} − 0.5 clip + 0.5 kl3 − 0.5 {LOWHYB}\n" in table
    assert "| low | Mean@8 | > 0 | 3 | +3.17 [+0.04, +6.29] | 3 : 0 | 0.250 | confirmed | 0.024 | **undecided** | — | — |" \
        in table
    assert "| high | Mean@8 | ≠ 0 | 3 | +1.83 [-1.29, +4.96] | 3 : 0 | 0.250 | undecided | 0.13 | **undecided** | " \
        f"{(4.302653 + 1.060660) * math.sqrt(19 / 36):.2f} |" in table   # detectable: (t(0.975, 2) + t(0.8, 2)) se
    assert "| kl3 − clip | Mean@8 | < 0 | 4 | +5.25 [+4.45, +6.05] | 4 : 0 | 0.125 | refuted | 1 | **refuted** |" in table
    assert "- low, Mean@8: a gain of 10 or more is rejected (one-sided paired t-test against +10: t = -9.41, df 2, " \
           "p = 0.0056); Holm, family of 4: **confirmed**." in table
    # the effects in the exploratory comparisons, after every method against the first; entropy: equal arms give 0
    assert "| low | Mean@8 | 3 | +3.17 [+0.04, +6.29] | above 0 | 3 : 0 | 0.250 |" in table
    assert "| high | Mean@8 | 3 | +1.83 [-1.29, +4.96] | contains 0 | 3 : 0 | 0.250 |" in table
    assert "| high | entropy, last 3 steps | 3 | +0.000 [+0.000, +0.000] | contains 0 | 0 : 0 |" in table
    assert table.index(f"| {HIGHHYB} − clip | Mean@8 | 3 |") < table.index("| kl3 − clip | Mean@8 | 4 |") < \
        table.index("| low | Mean@8 | 3 | +3.17 [+0.04, +6.29] | above 0")


def test_the_committed_confirmatory_run_is_found_by_its_documented_command():
    """docs/results.md rebuilds results/confirm-countdown with --report: each of its arms must still name the folders
    the runs were committed in (kl3:delta=0.1 -> kl3_delta_0.1-s<seed>), and every run must read as finished."""
    arms = ["clip", "clip-higher", "kl3", "kl3-seq", "kl3:delta=0.05", "kl3:delta=0.1"]
    runs = sweep.plan(arms, 10, sweep.ROOT / "results" / "confirm-countdown")
    assert [r.dir.name for r in runs[::10]] == ["clip-s0", "clip-higher-s0", "kl3-s0", "kl3-seq-s0",
                                                "kl3_delta_0.05-s0", "kl3_delta_0.1-s0"]
    steps = strict_file(sweep.ROOT / "results" / "confirm-countdown" / "sweep.json")["steps"]
    assert [r.dir.name for r in runs if not sweep_report.finished(r, steps)] == []


def test_first_seed_gives_tuning_seeds_apart_from_the_confirmatory_ones(tmp_path):
    runs = sweep.plan(["clip", "kl3"], 2, tmp_path, first_seed=1000)
    assert [(r.method, r.seed, r.dir.name) for r in runs] == [
        ("clip", 1000, "clip-s1000"), ("clip", 1001, "clip-s1001"), ("kl3", 1000, "kl3-s1000"), ("kl3", 1001, "kl3-s1001")]
    dry = subprocess.run([sys.executable, str(Path(sweep.__file__)), "--clip", "kl3", "--seeds", "1", "--first-seed",
                          "7", "--out", str(tmp_path), "--dry-run"], capture_output=True, text=True, check=True).stdout
    assert "--seed 7" in dry and "kl3-s7" in dry and "--seed 0" not in dry


@pytest.mark.parametrize("content", [None, "{", "[]", '{"clip": "kl3"}'])
@pytest.mark.parametrize("report", [[], ["--report"]])
def test_a_finished_run_without_a_readable_config_is_one_line_before_any_training(tmp_path, capsys, content,
                                                                                    report):
    """A sweep run again (or --report) where a finished run's config.json is missing or broken: one line naming
    it, exit 2, and nothing trained."""
    runs = sweep.plan(["kl3"], 2, tmp_path.resolve())
    fake_run(runs[0], 3, mean=31.0)
    config_file = runs[0].dir / "config.json"
    config_file.unlink() if content is None else config_file.write_text(content)
    why = {None: "no such file or directory", "{": "not JSON"}.get(content, "no eval_k")
    line = error_line(capsys, sweep.main, ["--clip", "kl3", "--seeds", "2", "--steps", "3", "--out", str(tmp_path),
                                           *report])
    assert line == (f"error: {config_file}: {why}: kl3-s0 logged its last evaluation, but without the settings it "
                    f"ran with it cannot be reported; remove {runs[0].dir} to run it again")
    assert not runs[1].dir.exists()


@pytest.mark.parametrize("commits, note", [
    (["a" * 40, "a" * 40], None),
    (["a" * 40, "b" * 40], "kl3-s0 aaaaaaaaaaaa; kl3-s1 bbbbbbbbbbbb"),
    (["a" * 40, None], "kl3-s0 aaaaaaaaaaaa; kl3-s1 unknown"),  # a run from before provenance was recorded
])
def test_the_report_notes_runs_that_ran_other_code(tmp_path, commits, note):
    runs = sweep.plan(["kl3"], 2, tmp_path.resolve())
    for run, commit in zip(runs, commits):
        sittings = {"provenance": [{"step": 0, "commit": commit, "dirty": False}]} if commit else {}
        fake_run(run, 3, mean=31.0, **sittings)
    notes = [line for line in report(tmp_path, ["kl3"], 2).splitlines() if line.startswith("code:")]
    assert notes == ([] if note is None else [f"code: not one commit without changes: {note} (+dirty: with changes "
                                              "not committed; unknown: not recorded, or not a git checkout)"])
