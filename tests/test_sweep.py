"""nanoatr.sweep: methods x seeds of train.py, Table 3, Figure 2, the delta ablation (Figure 3)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import sweep  # noqa: E402  (scripts/sweep.py)
from test_plot import HAS_MATPLOTLIB, lines_of  # noqa: E402
TINY = ["--eval-limit", "4", "--eval-k", "2", "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "40"]


def test_one_method_two_seeds_end_to_end(tmp_path, capsys):
    argv = ["--clip", "kl3", "--seeds", "2", "--steps", "2", "--jobs", "2", "--out", str(tmp_path), "--", *TINY]
    sweep.main(argv)
    table = (tmp_path / "table.md").read_text()
    assert "| method | hyper-parameters | runs | heldout Mean@2 (%) | heldout Pass@2 (%) | cut tokens (%) low + high | " \
           "entropy, last 2 steps |" in table  # the window is the run's length when it is shorter than 20 steps
    assert "| kl3 | delta=0.07 | 2 | " in table and "| warm start (step 0) | | 2 seeds | " in table
    results = json.loads((tmp_path / "results.json").read_text())
    assert sorted(r["seed"] for r in results) == [0, 1] and all(0 <= r["mean@k"] <= 100 for r in results)
    cfg = json.loads((tmp_path / "kl3-s1/config.json").read_text())
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


def fake_run(run, steps, mean, cut=0.01, start=30.0):
    """A finished run directory as train.py leaves it: config.json and metrics.jsonl."""
    run.dir.mkdir(parents=True)
    (run.dir / "config.json").write_text(json.dumps({"clip": run.clip, "eval_k": 8, "seed": run.seed}))
    rows = [{"step": 0, "eval/mean@8": start, "eval/pass@8": start + 30}]
    rows += [{"step": s, "reward_mean": 0.3 + s / 100, "entropy": 0.1 - s / 100, "completion_len": 30 + s, "clip_frac_low": cut,
              "clip_frac_high": cut / 2} for s in range(1, steps + 1)]
    rows += [{"step": steps, "eval/mean@8": mean, "eval/pass@8": mean + 30}]
    (run.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


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
    assert "| kl3:delta=0.1 − kl3:delta=0.05 | Mean@8 | 2 | +20.00 [+20.00, +20.00] | above 0 | 2 : 0 | 0.500 | 2 |" \
        in table
    if not HAS_MATPLOTLIB:
        assert not (tmp_path / "ablation.svg").exists()
        return
    lines = lines_of(tmp_path / "ablation.svg")
    assert lines["kl3, mean over seeds (95% band)|mean@k"] == lines["kl3, mean over seeds (95% band)|pass@k"] == 2
    assert "kl3, mean over seeds (95% band)|mean@k|band" in lines  # the interval, shaded
    assert lines["warm start (step 0)|mean@k"] == 2


def test_parse_method_and_plan(tmp_path):
    assert sweep.parse_method("clip-higher:eps_low=0.329,eps-high=0.6") == ("clip-higher", {"eps_low": 0.329,
                                                                                           "eps_high": 0.6})
    with pytest.raises(ValueError, match="--delta does not apply to --clip clip"):
        sweep.parse_method("clip:delta=0.1")
    with pytest.raises(ValueError, match="name=value"):
        sweep.parse_method("kl3:delta")
    runs = sweep.plan(["clip", "kl3", "kl3:delta=0.2"], 2, tmp_path, delta=0.1)
    assert [(r.dir.name, r.hparams) for r in runs[::2]] == [("clip-s0", {}), ("kl3-s0", {"delta": 0.1}),
                                                           ("kl3_delta_0.2-s0", {"delta": 0.2})]
    cmd = sweep.command(runs[2], 50, ["--lr", "1e-4"])
    assert cmd[1:] == ["train.py", "--clip", "kl3", "--delta", "0.1", "--seed", "0", "--steps", "50", "--out-dir",
                       str(tmp_path), "--name", "kl3-s0", "--lr", "1e-4"]
    runs[2].dir.mkdir(parents=True)
    (runs[2].dir / "config.json").write_text("{}")  # started before: resumed
    assert sweep.command(runs[2], 50, [])[1:] == ["train.py", "--resume", str(runs[2].dir), "--steps", "50"]


def test_std_is_the_population_std_as_in_table_3():
    assert sweep.mean_std([20.0, 23.33, 23.33]) == pytest.approx((22.22, 1.57), abs=0.01)


@pytest.mark.parametrize("argv, message", [
    (["--clip", "kl3", "--ablate-delta", "0.1"], "exclude each other"),
    (["--", "--seed", "3"], "--seed after -- is set by the sweep"),
    (["--clip", "nope"], "--clip must be one of"),
])
def test_bad_command_lines(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        sweep.main([*argv, "--out", str(tmp_path)] if "--" not in argv else ["--out", str(tmp_path), *argv])
    assert message in capsys.readouterr().err


def test_other_settings_need_another_directory(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"steps": 5, "train_args": []}))
    with pytest.raises(SystemExit, match="other settings"):
        sweep.main(["--clip", "kl3", "--seeds", "1", "--steps", "2", "--out", str(tmp_path)])


def test_a_failed_run_is_reported(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        sweep.main(["--clip", "kl3", "--seeds", "1", "--steps", "1", "--out", str(tmp_path), "--", "--lr", "-1"])
    assert e.value.code == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "| kl3 | delta=0.07 | 0/1 |" in (tmp_path / "table.md").read_text()
    assert "--lr must be > 0" in captured.err


# ----------------------------------------------------------------------------
# scripts/stats.py: the seed-paired statistics under the table

import stats  # noqa: E402  (scripts/stats.py)


def test_sign_test_against_hand_computed_binomial_tails():
    assert stats.sign_test(5, 0) == 2 / 2 ** 5                  # 0.0625: five of five is not enough at 5%
    assert stats.sign_test(9, 1) == pytest.approx(2 * (1 + 10) / 2 ** 10)  # 0.0215
    assert stats.sign_test(1, 9) == stats.sign_test(9, 1)       # two-sided
    assert stats.sign_test(3, 3) == 1.0 and stats.sign_test(0, 0) == 1.0


def test_bootstrap_interval_and_seeds_needed():
    assert stats.bootstrap_interval([2.0] * 6) == (2.0, 2.0)
    low, high = stats.bootstrap_interval([0.0, 1.0] * 50)   # mean 0.5, standard error 0.05
    assert 0.38 < low < 0.42 and 0.58 < high < 0.62          # about 0.5 -+ 1.96 * 0.05
    assert stats.bootstrap_interval([1.0, 5.0, 3.0]) == stats.bootstrap_interval([1.0, 5.0, 3.0])  # seeded
    # d = 1, 3 (mean 2, sd sqrt(2)): ((1.96 + 0.84) * 1.414 / 2)^2 = 3.92 -> 4 seeds
    assert stats.seeds_needed([1.0, 3.0]) == 4
    assert stats.seeds_needed([1.0, -1.0]) == float("inf") and stats.seeds_needed([1.0]) != stats.seeds_needed([1.0])


def test_paired_uses_only_common_seeds_and_the_verdict_reads_the_interval():
    p = stats.paired({0: 3.0, 1: 5.0, 2: 1.0, 7: 9.0}, {0: 1.0, 1: 2.0, 2: 2.0})   # seed 7 has no partner
    assert (p.n, p.mean, p.wins, p.losses) == (3, pytest.approx(4 / 3), 2, 1)
    assert p.low < 0 < p.high and stats.verdict(p, +1) == "undecided"
    up = stats.paired({s: 2.0 + s % 2 for s in range(10)}, {s: 1.0 for s in range(10)})
    assert stats.verdict(up, +1) == "confirmed" and stats.verdict(up, -1) == "refuted"
    assert up.p_sign == 2 / 2 ** 10


def test_result_averages_the_last_two_evaluations_of_each_file(tmp_path):
    run = sweep.Run("kl3", "kl3", {}, 0, tmp_path / "r")
    run.dir.mkdir()
    (run.dir / "config.json").write_text(json.dumps({"clip": "kl3", "eval_k": 8}))
    ev = lambda step, h, t: {"step": step, "eval/heldout/mean@8": h, "eval/heldout/pass@8": h + 10,  # noqa: E731
                             "eval/transfer/mean@8": t, "eval/transfer/pass@8": t + 1,
                             "eval/mean@8": (h + t) / 2, "eval/pass@8": (h + t) / 2 + 5.5}
    rows = [ev(0, 20.0, 2.0)] + [{"step": s, "entropy": 0.1 * s, "clip_frac_low": 0.0, "clip_frac_high": 0.0}
                                 for s in range(1, 32)] + [ev(29, 99.0, 99.0), ev(30, 30.0, 4.0), ev(31, 34.0, 2.0)]
    (run.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = sweep.result(run, 31)
    assert res["splits"] == ["heldout", "transfer"] and res["end_steps"] == [30, 31]   # step 29 is not the end
    assert (res["heldout/mean@k"], res["heldout/pass@k"], res["transfer/mean@k"]) == (32.0, 42.0, 3.0)
    assert (res["heldout/mean@k_start"], res["transfer/pass@k_start"], res["mean@k"]) == (20.0, 3.0, 17.5)
    assert res["entropy_end"] == pytest.approx(0.1 * sum(range(12, 32)) / 20)      # the last 20 of 31 steps
    table = sweep.table([res], ["kl3"], 1, 31)
    assert "| kl3 | delta=0.07 | 1 | 32.00 | 42.00 | 3.00 | 4.00 |" in table      # one seed: no ± 0.00
    assert "heldout Mean@8 (%) | heldout Pass@8 (%) | transfer Mean@8 (%) | transfer Pass@8 (%)" in table


def test_train_prints_each_evaluated_file():
    from nanoatr.evaluate import scores_line
    one = {"eval/a/mean@8": 10.0, "eval/a/pass@8": 20.0, "eval/mean@8": 10.0, "eval/pass@8": 20.0}
    assert scores_line(one, 8, before=one) == "held-out Mean@8 10.0%  Pass@8 20.0%  (from 10.0%)"
    two = {**one, "eval/b/mean@8": 30.0, "eval/b/pass@8": 40.0, "eval/mean@8": 20.0, "eval/pass@8": 30.0}
    assert scores_line(two, 8) == "a Mean@8 10.0%  Pass@8 20.0%; b Mean@8 30.0%  Pass@8 40.0%"
    assert scores_line(two, 8, before=two) == \
        "a Mean@8 10.0% (from 10.0%)  Pass@8 20.0%; b Mean@8 30.0% (from 30.0%)  Pass@8 40.0%"


def test_compare_against_the_warm_start_and_bad_pairs(tmp_path, capsys):
    for i, run in enumerate(sweep.plan(["clip", "kl3"], 2, tmp_path.resolve())):
        fake_run(run, 3, mean=31.0 + i)   # step 0 logs 30.0: every run ends 1-4 points above its start
    sweep.main(["--clip", "clip", "kl3", "--seeds", "2", "--steps", "3", "--out", str(tmp_path),
                "--compare", "kl3/warm-start", "kl3/clip"])
    table = (tmp_path / "table.md").read_text()
    assert "| kl3 − warm-start | Mean@8 | 2 | +3.50 [+3.00, +4.00] | above 0 | 2 : 0 | 0.500 |" in table
    assert "| kl3 − clip | Mean@8 | 2 | +2.00 [+2.00, +2.00] | above 0 | 2 : 0 |" in table
    assert "| kl3 − clip | entropy, last 3 steps | 2 | +0.000 [+0.000, +0.000] | contains 0 | 0 : 0 | 1.000 | ∞ |" in table
    with pytest.raises(SystemExit):
        sweep.main(["--clip", "clip", "kl3", "--seeds", "2", "--steps", "3", "--out", str(tmp_path), "--compare", "kl3"])
    assert "--compare kl3: write A/B" in capsys.readouterr().err


def test_warm_start_row_counts_each_seed_once(tmp_path):
    """Seed 0 finished under two methods, seed 1 under one: the warm start is the mean over the two seeds
    (30 and 40), not over the three runs (33.33)."""
    for run in sweep.plan(["clip", "kl3"], 2, tmp_path.resolve()):
        if run.method == "clip" or run.seed == 0:
            fake_run(run, 3, mean=50.0, start=30.0 + 10 * run.seed)
    sweep.main(["--clip", "clip", "kl3", "--seeds", "2", "--steps", "3", "--out", str(tmp_path), "--report"])
    table = (tmp_path / "table.md").read_text()
    assert "| warm start (step 0) | | 2 seeds | 35.00 ± 5.00 | 65.00 ± 5.00 | | |" in table
    assert "| kl3 | delta=0.07 | 1/2 | 50.00 |" in table


def test_report_reads_the_finished_runs_and_trains_nothing(tmp_path):
    runs = sweep.plan(["clip", "kl3"], 2, tmp_path.resolve())
    for run in runs:
        if run.seed == 0:
            fake_run(run, 3, mean=31.0)
    sweep.main(["--clip", "clip", "kl3", "--seeds", "2", "--steps", "3", "--out", str(tmp_path), "--report"])
    table = (tmp_path / "table.md").read_text()
    assert "| clip | eps=0.2 | 1/2 | 31.00 |" in table and "| kl3 | delta=0.07 | 1/2 | 31.00 |" in table
    assert not any(run.dir.exists() for run in runs if run.seed == 1) and not (tmp_path / "sweep.json").exists()


def test_without_matplotlib_the_last_line_names_the_table_alone(tmp_path, capsys, monkeypatch):
    for run in sweep.plan(["kl3"], 1, tmp_path.resolve()):
        fake_run(run, 3, mean=31.0)

    def no_matplotlib(*args, **kwargs):
        raise SystemExit("error: drawing figures needs matplotlib: pip install matplotlib")
    monkeypatch.setattr(sweep, "plot_methods", no_matplotlib)
    sweep.main(["--clip", "kl3", "--seeds", "1", "--steps", "3", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith(f"wrote {tmp_path / 'table.md'}  (") and ", " not in last.split("  (")[0]
    assert "pip install matplotlib" in captured.err
