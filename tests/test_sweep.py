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
    assert "| method | runs | Mean@2 (%) | Pass@2 (%) | cut tokens (%) low + high |" in table
    assert "| kl3 | 2 | " in table and "| warm start (step 0) | 2 | " in table
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


def fake_run(run, steps, mean, cut=0.01):
    """A finished run directory as train.py leaves it: config.json and metrics.jsonl."""
    run.dir.mkdir(parents=True)
    (run.dir / "config.json").write_text(json.dumps({"clip": run.clip, "eval_k": 8, "seed": run.seed}))
    rows = [{"step": 0, "eval/mean@8": 30.0, "eval/pass@8": 60.0}]
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
    assert "| kl3:delta=0.05 | 2 | 45.00 ± 5.00 | 75.00 ± 5.00 | 1.50 (1.00 + 0.50) |" in table
    assert "| kl3:delta=0.1 | 2 | 65.00 ± 5.00 |" in table
    if not HAS_MATPLOTLIB:
        assert not (tmp_path / "ablation.svg").exists()
        return
    lines = lines_of(tmp_path / "ablation.svg")
    assert lines["kl3, mean over seeds|mean@k"] == lines["kl3, mean over seeds|pass@k"] == 2  # two deltas
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
    assert "FAILED" in captured.out and "| kl3 | 0/1 |" in (tmp_path / "table.md").read_text()
    assert "--lr must be > 0" in captured.err
