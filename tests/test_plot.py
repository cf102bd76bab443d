"""scripts/plot.py: Figure 2 (training curves) and Figure 4 (Pass@K) as SVG + PNG, one line per run and metric."""
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from plot import (default_ks, main, moving_average, pass_at_k_curves, plot_pass_at_k, plot_runs,  # noqa: E402
                  read_metrics, series)
from conftest import strict_file  # noqa: E402
from nanoatr.machinery.checkpoint import CheckpointError  # noqa: E402

NS = "{http://www.w3.org/2000/svg}"


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


# matplotlib is optional (requirements-dev.txt): only the tests that draw skip without it; the rest of
# the module (the numbers behind the figures, the error lines, the install hint) runs everywhere.
# test_sweep.py and test_theory.py use the same flag for their figures.
HAS_MATPLOTLIB = _has_matplotlib()
draws = pytest.mark.skipif(not HAS_MATPLOTLIB, reason="draws a figure: needs matplotlib (pip install matplotlib)")


def make_run(root, name, clip, steps=30, eval_every=10):
    run = root / name
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"clip": clip, "delta": 0.07}))
    lines = []
    for s in range(1, steps + 1):
        lines.append({"step": s, "reward_mean": s / steps, "entropy": 1 - s / (2 * steps), "completion_len": 100 + s})
        if s % eval_every == 0:
            lines.append({"step": s, "eval/mean@8": 10 + s, "eval/pass@8": 20 + s, "eval/amc23/mean@8": 5.0})
    lines.append({"step": steps + 1, "entropy": float("nan"), "note": "no reward here"})  # skipped, not drawn
    lines.append({"reward_mean": 0.5})  # no step: skipped
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (run / "metrics.jsonl").write_text(text + '{"step": 99, "reward_')  # a run killed mid-write
    return run


def lines_of(svg: Path) -> dict[str, int]:
    """gid "<label>|<metric>" -> number of points of that line (its distinct x positions), read back from the
    SVG."""
    root = ET.parse(svg).getroot()
    out = {}
    for g in root.iter(NS + "g"):
        gid = g.get("id", "")
        if "|" in gid:
            path = next(g.iter(NS + "path")).get("d").split()
            out[gid] = len({x for i, x in enumerate(path[1:], 1) if path[i - 1] in "ML"})
    return out


@draws
def test_training_figure_has_one_line_per_run_and_metric(tmp_path, capsys):
    runs = [make_run(tmp_path, "kl3-d0.07", "kl3"), make_run(tmp_path, "a&b <clip>", "clip", eval_every=5)]
    out = plot_runs(runs, tmp_path / "out" / "curves.svg", window=5)
    got = lines_of(out)
    labels = ["kl3-d0.07 (kl3)", "a&b <clip> (clip)"]
    metrics = ["reward_mean", "entropy", "completion_len", "eval/mean@8"]
    assert sorted(got) == sorted(f"{run}|{m}" for run in labels for m in metrics)
    assert got[f"{labels[0]}|reward_mean"] == 30  # 30 steps; the NaN and step-less rows dropped
    assert got[f"{labels[1]}|eval/mean@8"] == 6  # evals at 5, 10, ..., 30
    text = out.read_text()
    assert "(d) eval/mean@8" in text and "(a) return" in text  # text stays text
    png = out.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000  # a real picture, not an empty canvas
    # drawn again: the same bytes (no date, ids from a fixed salt), so a committed figure rebuilt from the same
    # runs shows no change
    again = plot_runs(runs, tmp_path / "again" / "curves.svg", window=5)
    assert "<dc:date>" not in text and again.read_text() == text
    main([str(runs[0]), "--window", "3"])  # by default curves.svg and .png inside the run
    assert (runs[0] / "curves.svg").is_file() and (runs[0] / "curves.png").is_file()
    assert "wrote" in capsys.readouterr().out


@draws
def test_the_return_panel_under_dynamic_sampling_and_a_chosen_eval_key(tmp_path):
    ds, plain = make_run(tmp_path, "ds", "clip"), make_run(tmp_path, "plain", "clip")
    with (ds / "metrics.jsonl").open("a") as f:  # after the torn line: its own lines, steps 1..10 only
        f.write("\n" + "".join(json.dumps({"step": s, "reward_mean_first_round": s / 10}) + "\n"
                                for s in range(1, 11)))
    got = lines_of(plot_runs([ds, plain], tmp_path / "c.svg", window=1))
    assert got["ds (clip)|reward_mean"] == 10  # the first round's return (kept groups are picked for mixed rewards)
    assert got["plain (clip)|reward_mean"] == 30  # the other run keeps its own key
    chosen = lines_of(plot_runs([plain], tmp_path / "a.svg", eval_key="eval/amc23/mean@8"))  # --eval-key
    absent = lines_of(plot_runs([plain], tmp_path / "b.svg", eval_key="eval/absent"))
    assert "plain (clip)|eval/amc23/mean@8" in chosen and not any(k.endswith("eval/absent") for k in absent)


@draws
def test_the_legend_shows_a_runs_changes_on_resume_and_each_panel_marks_their_step(tmp_path):
    run = make_run(tmp_path, "R", "kl3")
    config = strict_file(run / "config.json")
    changes = [{"step": 16, "steps": {"from": 16, "to": 30}},
               {"step": 20, "eval_every": {"from": 0, "to": 10}, "save_every": {"from": 50, "to": 5}}]
    (run / "config.json").write_text(json.dumps({**config, "changes": changes}))
    got = lines_of(plot_runs([run], tmp_path / "c.svg", window=1))
    label = "R (kl3; --steps 16->30 at 16; --eval-every 0->10, --save-every 50->5 at 20)"
    assert got[f"{label}|reward_mean"] == 30
    for metric in ("reward_mean", "entropy", "completion_len", "eval/mean@8"):
        assert {f"{label}|{metric}|change@16", f"{label}|{metric}|change@20"} <= got.keys()
    (run / "config.json").write_text(json.dumps({**config, "changes": [{"step": 16, "steps": 30}]}))
    with pytest.raises(SystemExit) as e:  # a record that cannot be read is one line, not a legend without it
        main([str(run), "--out", str(tmp_path / "d.svg")])
    assert str(e.value.code).startswith(f'error: {run / "config.json"}: "changes" is not a list')


@pytest.mark.parametrize("broken", ["missing", "not json", "not utf-8", "a list", "unreadable"])
def test_a_run_whose_config_json_cannot_be_read_is_one_error_line(tmp_path, broken, capsys):
    """Not a legend without the run's method and changes: `error: <the file> ...`, exit status 1."""
    run = make_run(tmp_path, "R", "kl3")
    cfg = run / "config.json"
    cfg.unlink()
    {"missing": lambda: None, "not json": lambda: cfg.write_text("{"), "not utf-8": lambda: cfg.write_bytes(b"\xff"),
     "a list": lambda: cfg.write_text("[]"), "unreadable": lambda: cfg.mkdir()}[broken]()  # a folder: EISDIR
    with pytest.raises(SystemExit) as e:
        main([str(run), "--out", str(tmp_path / "c.svg")])
    message = str(e.value.code)
    assert message.startswith(f"error: {cfg} ") and "\n" not in message, message
    assert not (tmp_path / "c.svg").exists()


def test_series_sorts_steps_and_keeps_the_last_value_of_a_repeated_step_moving_average_and_ks():
    rows = [{"step": 2, "x": 1.0}, {"step": 1, "x": 5}, {"step": 2, "x": 3.0}, {"step": 3, "x": True}, {"step": 4}]
    assert series(rows, "x") == ([1.0, 2.0], [5.0, 3.0])
    assert moving_average([1, 2, 3, 4, 5], 3) == pytest.approx([1, 1.5, 2, 3, 4])
    assert moving_average([1, 2], 1) == [1, 2] and moving_average([], 5) == []
    with pytest.raises(ValueError):
        moving_average([1], 0)
    assert default_ks(8) == [1, 2, 4, 8] and default_ks(12) == [1, 2, 4, 8, 12] and default_ks(1) == [1]


def test_missing_run_dir_is_one_error_line(tmp_path):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "nope")])
    assert str(e.value).startswith("error: ") and "nope" in str(e.value) and "\n" not in str(e.value)


def write_completions(path, correct_counts, n):
    rows = [{"problem_id": p, "sample": j, "correct": j < c, "completion": "..."} for p, c in enumerate(correct_counts)
            for j in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + json.dumps({"summary": "ignored"}) + "\n")
    return path


def write_benchmarks(path, correct_counts: dict, n):
    """An `eval.py --data a b c --out` file: its settings line, then rows whose problem ids restart per file."""
    rows = [{"benchmark": name, "problem_id": p, "sample": j, "correct": j < c} for name, counts in
            correct_counts.items() for p, c in enumerate(counts) for j in range(n)]
    path.write_text(json.dumps({"settings": {"k": n}}) + "\n" + "".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_pass_at_k_curves_key_problems_by_benchmark(tmp_path):
    """eval.py --data amc23 aime24 aime25 numbers the problems of each file from 0: the curve of each
    benchmark is its own (it was `repeated sample 0 of problem 0`); rows without a benchmark are one curve."""
    path = write_benchmarks(tmp_path / "e.jsonl", {"amc23": [0, 4], "aime24": [2, 2, 4]}, n=4)
    curves = pass_at_k_curves(path)
    assert list(curves) == ["amc23", "aime24"]
    ks, means, passes = curves["amc23"]
    assert ks == [1, 2, 4] and means == pytest.approx([50.0] * 3) and passes == pytest.approx([50.0] * 3)
    ks, means, passes = curves["aime24"]
    # Pass@2 of a problem with 2 of 4 right: 1 - C(2,2)/C(4,2) = 5/6
    assert ks == [1, 2, 4] and means == pytest.approx([200 / 3] * 3)
    assert passes == pytest.approx([200 / 3, 100 * (5 / 6 + 5 / 6 + 1) / 3, 100.0])
    no_field = write_completions(tmp_path / "c.jsonl", [0, 8], n=8)  # rows without a benchmark field
    assert list(pass_at_k_curves(no_field)) == [None]
    (tmp_path / "x.jsonl").write_text('{"foo": 1}\n')
    with pytest.raises(ValueError, match="no eval rows"):
        pass_at_k_curves(tmp_path / "x.jsonl")
    (tmp_path / "d.jsonl").write_text(path.read_text() + path.read_text().splitlines(keepends=True)[1])
    with pytest.raises(ValueError, match="d.jsonl: amc23: repeated sample 0 of problem 0"):
        pass_at_k_curves(tmp_path / "d.jsonl")


@draws
def test_pass_at_k_figure_has_one_line_per_file_benchmark_and_metric(tmp_path, capsys):
    files = [write_completions(tmp_path / "kl3.jsonl", [0, 3, 16], 16),
             write_completions(tmp_path / "clip.jsonl", [1, 2], 12)]
    got = lines_of(plot_pass_at_k(files, tmp_path / "fig.svg"))
    assert {k.split("/")[-1]: v for k, v in got.items()} == {
        "clip.jsonl|mean@k": 5, "clip.jsonl|pass@k": 5,  # K = 1, 2, 4, 8, 12
        "kl3.jsonl|mean@k": 5, "kl3.jsonl|pass@k": 5}    # K = 1, 2, 4, 8, 16
    path = write_benchmarks(tmp_path / "e.jsonl", {"amc23": [0, 4], "aime24": [2, 2, 4], "aime25": [1]}, n=4)
    main(["--passk", str(path)])  # by default passk.svg and .png beside the file
    got = lines_of(tmp_path / "passk.svg")
    label = "/".join(path.parts[-2:])
    assert got == {f"{label}: {b}|{m}": 3 for b in ("amc23", "aime24", "aime25") for m in ("mean@k", "pass@k")}
    assert (tmp_path / "passk.png").is_file() and "wrote" in capsys.readouterr().out


def test_without_matplotlib_the_command_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(SystemExit, match="pip install matplotlib"):
        main([str(make_run(tmp_path, "r", "kl3"))])


def test_read_metrics_skips_bad_lines_with_one_warning(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2, "lo{"step": 3}\n\n[1]\n\xff\xfe\n{"step": 4}\n{"st')
    assert read_metrics(path) == [{"step": 1}, {"step": 4}]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"warning: {path}: skipped 4 unreadable line(s) (line 2, 4, 5, ...)"]
    with pytest.raises(CheckpointError, match="no metrics.jsonl"):
        read_metrics(tmp_path / "nope" / "metrics.jsonl")
